// client_example HOST:PORT TOPIC N: creates TOPIC (3 partitions), produces
// N keyed records with acks=all, reads them back from the beginning in a
// consumer group and checks every one arrived once, in order per key.
// Prints "ok: produced N, consumed N" and exits 0, else a reason and 1.

#include <actors/client/admin.hpp>
#include <actors/client/client_connection.hpp>
#include <actors/client/consumer.hpp>
#include <actors/client/producer.hpp>
#include <broker/error.hpp>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace std::chrono_literals;

int run(caf::actor_system& sys, const std::string& bootstrap,
        const std::string& topic, int n) {
  auto cc = ferry::parse_broker_address(bootstrap);
  if (!cc) {
    std::cerr << "bad address: " << ferry::describe(cc.error()) << '\n';
    return 1;
  }
  auto conn = ferry::spawn_connection(sys, *cc);
  caf::scoped_actor self{sys};
  ferry::broker_actor broker;
  caf::error err;
  self->request(conn, 20s, ferry::connect_atom_v)
    .receive([&](ferry::broker_actor& b) { broker = std::move(b); },
             [&](caf::error& e) { err = std::move(e); });
  if (err) {
    std::cerr << "connect: " << ferry::describe(err) << '\n';
    return 1;
  }
  ferry::admin_client admin{sys, broker, 20s};
  ferry::topic_config tc;
  tc.partitions = 3;
  if (auto md = admin.create_topic(topic, tc); !md) {
    std::cerr << "create topic: " << ferry::describe(md.error()) << '\n';
    return 1;
  }

  ferry::producer_config pc;
  pc.client_id = "client-example";
  auto prod = ferry::spawn_producer(sys, pc, conn);
  if (!prod) {
    std::cerr << "producer: " << ferry::describe(prod.error()) << '\n';
    return 1;
  }
  std::vector<ferry::client_message> batch;
  for (int i = 0; i < n; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "key-" + std::to_string(i % 7);
    m.value = std::to_string(i);
    batch.push_back(std::move(m));
  }
  size_t reports = 0;
  self->request(*prod, 60s, ferry::produce_atom_v, batch)
    .receive([&](std::vector<ferry::delivery_report>& rs) { reports = rs.size(); },
             [&](caf::error& e) { err = std::move(e); });
  if (err || reports != batch.size()) {
    std::cerr << "produce: " << ferry::describe(err) << " (" << reports
              << " reports)\n";
    return 1;
  }

  ferry::consumer_config kc;
  kc.group_id = "client-example";
  kc.topics = {topic};
  kc.auto_offset_reset = "earliest";
  auto cons = ferry::spawn_consumer(sys, kc, conn);
  if (!cons) {
    std::cerr << "consumer: " << ferry::describe(cons.error()) << '\n';
    return 1;
  }
  std::map<std::string, int> last; // per key: the last value seen
  int consumed = 0;
  for (int round = 0; round < 60 && consumed < n; ++round) {
    std::vector<ferry::consumed_message> got;
    self->request(*cons, 10s, ferry::poll_atom_v, int32_t{500})
      .receive([&](std::vector<ferry::consumed_message>& xs) { got = std::move(xs); },
               [&](caf::error& e) { err = std::move(e); });
    if (err) {
      std::cerr << "poll: " << ferry::describe(err) << '\n';
      return 1;
    }
    for (auto& m : got) {
      int v = std::stoi(m.value);
      auto it = last.find(m.key);
      if (it != last.end() && it->second >= v) {
        std::cerr << "out of order for " << m.key << ": " << v << " after "
                  << it->second << '\n';
        return 1;
      }
      last[m.key] = v;
      ++consumed;
    }
  }
  self->send_exit(*cons, caf::exit_reason::user_shutdown);
  self->send_exit(*prod, caf::exit_reason::user_shutdown);
  self->send_exit(conn, caf::exit_reason::user_shutdown);
  if (consumed != n) {
    std::cerr << "consumed " << consumed << " of " << n << '\n';
    return 1;
  }
  std::cout << "ok: produced " << reports << ", consumed " << consumed << '\n';
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: client_example HOST:PORT TOPIC N\n";
    return 2;
  }
  caf::actor_system_config cfg;
  ferry::configure_client(cfg);
  caf::actor_system sys{cfg};
  return run(sys, argv[1], argv[2], std::stoi(argv[3]));
}
