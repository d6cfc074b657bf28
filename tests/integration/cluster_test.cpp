// Multi-process acceptance test of the cluster: three ferryd nodes on fixed
// loopback ports (--node-id N --voters 1@H:P1,2@H:P2,3@H:P3), driven by the
// client library's producer and consumer actors in this process.
//   1. Cluster.ThreeNodesElectAndReplicate: a controller is elected, a topic
//      with 3 partitions and RF=3 gets a leader and a full ISR per
//      partition, 1000 keyed acks=all messages come back from every
//      partition, and all three nodes agree on the leaders.
//   2. Cluster.AckedWritesSurviveLeaderKills (1 partition, 3 kills) and
//      Cluster.AckedWritesSurviveLeaderKillsThreePartitions (3 partitions,
//      3 kills, one per partition leader): an idempotent acks=all producer writes keyed messages
//      ("k<key>:<seq>") without pause while the partition leader is
//      SIGKILLed and restarted on its data dir and port, again and again.
//      Afterwards every acknowledged message is in the log at exactly its
//      acknowledged offset, no offset holds two of them, each key's seqs
//      rise strictly along the log (no duplicates, no reordering), the
//      replicas converge, and after a clean stop the three logs on disk are
//      byte-identical up to the high watermark.
//   3. Cluster.FollowerRestartCatchesUp: a follower is killed, 500 messages
//      are produced, the follower restarts, rejoins the ISR and reaches the
//      leader's log end.
//
// Client bootstrap: the producer and consumers get the list of all three
// nodes ("h:p1,h:p2,h:p3") when the client library parses such lists
// (checked at run time with parse_broker_address). Otherwise (fallback,
// printed in the log) they connect to one node only: node 1 in test 1 (no
// node is killed there), the partition leader in test 3 (only a follower is
// killed there), and node 1 in test 2, where it may be killed when it leads:
// the client's connection then reconnects to it once it is restarted on the
// same port.
//
// Every wait is bounded (about 20-30 s) and a timeout fails with the cluster
// state (every node's cluster describe and the tail of its output). Every
// ferryd is killed when a test ends, also on failure (process.hpp), and the
// client actors are killed before their actor system goes away
// (client_system.hpp).

#include "client_system.hpp"
#include "process.hpp"

#include "actors/client_connection.hpp"
#include "actors/consumer.hpp"
#include "actors/interfaces.hpp"
#include "actors/producer.hpp"
#include "broker/error.hpp"
#include "broker/partition_checkpoint.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::test::client_system;
using ferry::test::ferryd_process;
using steady = std::chrono::steady_clock;

// Bounds of the waits. A failure is reported when one runs out.
constexpr auto ready_timeout = 20s;     // controller elected, nodes alive
constexpr auto placement_timeout = 20s; // leaders and full ISRs
constexpr auto rejoin_timeout = 30s;    // a restarted node back in the ISR
constexpr auto converge_timeout = 20s;  // replicas at the same log end
constexpr auto poll_step = 100ms;

/// Polls `done` every `step` until it returns true or `timeout` passed.
template <class F>
bool wait_until(std::chrono::milliseconds timeout, F&& done,
                std::chrono::milliseconds step = poll_step) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    if (done())
      return true;
    if (steady::now() >= deadline)
      return false;
    std::this_thread::sleep_for(step);
  }
}

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

std::string join_ids(const std::vector<int32_t>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? "," : "") + std::to_string(xs[i]);
  return out + "]";
}

bool same_members(std::vector<int32_t> a, std::vector<int32_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

bool contains(const std::vector<int32_t>& xs, int32_t x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// One request from a blocking scoped actor; request_timeout if no answer.
template <class T, class Handle, class... Ts>
caf::expected<T> ask(caf::actor_system& sys, const Handle& dest,
                     caf::timespan timeout, Ts&&... xs) {
  if (!dest)
    return caf::make_error(caf::sec::invalid_argument, "no handle");
  caf::scoped_actor self{sys};
  std::optional<caf::expected<T>> out;
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& err) { out = std::move(err); });
  if (!out)
    return caf::make_error(caf::sec::request_timeout);
  return std::move(*out);
}

/// True when parse_broker_address understands "h:p,h:p" lists (the
/// client library's bootstrap lists); false with the one-broker parser,
/// which takes everything before the last ':' as the host.
bool bootstrap_lists_supported() {
  auto a = ferry::parse_broker_address("127.0.0.1:1,127.0.0.1:2");
  return a && a->host == "127.0.0.1" && a->port == 1;
}

/// The state of one partition as one node's cluster describe shows it.
const ferry::partition_status* find_partition(const ferry::cluster_description& cd,
                                              const std::string& topic, int32_t p) {
  for (auto& t : cd.topics)
    if (t.name == topic)
      for (auto& ps : t.partitions)
        if (ps.partition.value == p)
          return &ps;
  return nullptr;
}

std::string render(const ferry::cluster_description& cd) {
  std::ostringstream os;
  os << "controller=" << cd.controller << " term=" << cd.raft_term << " nodes=";
  for (auto& n : cd.nodes)
    os << n.id << (n.alive ? "(alive" : "(dead") << (n.controller ? ",ctl) " : ") ");
  os << "\n";
  for (auto& t : cd.topics)
    for (auto& ps : t.partitions)
      os << "    " << t.name << "-" << ps.partition.value << ": leader=" << ps.leader
         << " epoch=" << ps.epoch.value << " replicas=" << join_ids(ps.replicas)
         << " isr=" << join_ids(ps.isr) << " log_end=" << ps.log_end.value
         << " hw=" << ps.high_watermark.value << (ps.online ? " online" : " OFFLINE")
         << "\n";
  return os.str();
}

/// One record read back from the log.
struct log_record {
  int64_t off = 0;
  std::string key;
  std::string value;
  int32_t batch_epoch = 0; // partition leader epoch of its batch
};

/// Appends the records at or after `from` of the whole batches in `data`;
/// returns the offset after the last batch, or nullopt on damage.
std::optional<int64_t> decode_batches(std::string_view data, int64_t from,
                                      std::vector<log_record>& out, std::string& why) {
  int64_t next = from;
  while (!data.empty()) {
    auto h = ferry::parse_batch_header(data);
    if (!h) {
      why = "parse_batch_header: " + ferry::describe(h.error());
      return std::nullopt;
    }
    auto b = ferry::decode_batch(data.substr(0, h->total_size()));
    if (!b) {
      why = "decode_batch: " + ferry::describe(b.error());
      return std::nullopt;
    }
    for (auto& rec : b->records) {
      auto off = h->base_offset.value + rec.offset_delta;
      if (off >= from)
        out.push_back(log_record{off, rec.key.value_or(""), rec.value.value_or(""),
                                 h->partition_leader_epoch});
    }
    next = h->next_offset().value;
    data.remove_prefix(h->total_size());
  }
  return next;
}

// -- the cluster --------------------------------------------------------------

/// Three ferryd nodes (ids 1..3) on fixed ports, plus one client connection
/// per node for describes and status requests.
class cluster {
public:
  static constexpr int size = 3;

  cluster() = default;
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  /// Picks ports, launches all three nodes (they may wait for each other),
  /// then waits for their "listening on" lines. Retries with fresh ports
  /// when a node fails on a taken port. "" on success, else why.
  std::string start() {
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      ports_ = ferry::test::free_tcp_ports(size);
      if (ports_.size() != static_cast<size_t>(size))
        return "cannot pick free ports";
      nodes_.clear();
      std::string voters;
      for (int id = 1; id <= size; ++id)
        voters += (id > 1 ? "," : "") + std::to_string(id) + "@127.0.0.1:"
                  + std::to_string(ports_[id - 1]);
      for (int id = 1; id <= size; ++id)
        nodes_.push_back(std::make_unique<ferryd_process>(std::vector<std::string>{
          "--node-id", std::to_string(id), "--voters", voters, "--metrics-port", "0",
          "--http-port", "-1"}));
      for (int id = 1; id <= size; ++id)
        if (!node(id).launch(port(id)))
          return "cannot launch ferryd for node " + std::to_string(id);
      why.clear();
      bool port_taken = false;
      for (int id = 1; id <= size; ++id) {
        if (!node(id).wait_started(30s)) {
          auto out = node(id).output();
          why += "node " + std::to_string(id) + " did not start:\n" + tail(out, 3000) + "\n";
          if (out.find("in use") != std::string::npos)
            port_taken = true;
        }
      }
      if (why.empty())
        break;
      if (!port_taken)
        return why;
      std::cout << "[cluster] a port was taken, retrying with fresh ports\n";
    }
    if (!why.empty())
      return why;
    if (links_.empty())
      for (int id = 1; id <= size; ++id) {
        ferry::connection_config cc;
        cc.host = "127.0.0.1";
        cc.port = port(id);
        cc.connect_wait = 1s;
        cc.backoff_min = 50ms;
        cc.backoff_max = 300ms;
        links_.push_back(cs.track(ferry::spawn_connection(*cs.sys, cc)));
      }
    std::cout << "[cluster] nodes on ports " << port(1) << ", " << port(2) << ", "
              << port(3) << " (pids " << node(1).pid() << ", " << node(2).pid() << ", "
              << node(3).pid() << ")\n";
    return "";
  }

  ferryd_process& node(int id) { return *nodes_.at(static_cast<size_t>(id - 1)); }
  uint16_t port(int id) const { return ports_.at(static_cast<size_t>(id - 1)); }
  std::string endpoint(int id) const { return "127.0.0.1:" + std::to_string(port(id)); }
  std::string all_endpoints() const {
    std::string out;
    for (int id = 1; id <= size; ++id)
      out += (id > 1 ? "," : "") + endpoint(id);
    return out;
  }
  bool running(int id) { return node(id).running(); }

  /// The bootstrap string for clients: every node when lists work, else
  /// node `fallback` only.
  std::string bootstrap(int fallback) const {
    if (bootstrap_lists_supported())
      return all_endpoints();
    return endpoint(fallback);
  }

  /// SIGKILL.
  void kill(int id) { node(id).kill9(); }

  /// Starts node `id` again on its data dir and port. "" or why not.
  std::string restart(int id) {
    if (node(id).start(port(id), 30s))
      return "";
    return "node " + std::to_string(id) + " did not restart:\n" + tail(node(id).output(), 3000);
  }

  /// One SIGTERM to each (a second one makes ferryd exit at once), then
  /// waits for each, SIGKILL after `timeout`; the exit statuses by node id
  /// (0: clean, 137: had to be killed, -1: was not running).
  std::map<int, int> stop_all(std::chrono::milliseconds timeout = 20s) {
    for (int id = 1; id <= size; ++id)
      if (node(id).running())
        node(id).child()->signal(SIGTERM);
    std::map<int, int> codes;
    auto deadline = steady::now() + timeout;
    for (int id = 1; id <= size; ++id) {
      auto* child = node(id).child();
      if (!child) {
        codes[id] = -1;
        continue;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      auto status = child->wait_exit(std::max(left, std::chrono::milliseconds{0}));
      codes[id] = status ? *status : child->kill_and_reap();
    }
    return codes;
  }

  /// Node `id`'s broker actor (through its connection; fails while down).
  caf::expected<ferry::broker_actor> broker(int id) {
    return ask<ferry::broker_actor>(*cs.sys, links_.at(static_cast<size_t>(id - 1)), 2s,
                                    ferry::connect_atom_v);
  }

  caf::expected<ferry::cluster_description> describe(int id) {
    if (!running(id))
      return caf::make_error(caf::sec::invalid_argument, "node not running");
    auto b = broker(id);
    if (!b)
      return b.error();
    return ask<ferry::cluster_description>(*cs.sys, *b, 3s, ferry::cluster_atom_v);
  }

  /// The describe of the first running node that answers.
  std::optional<ferry::cluster_description> describe_any(int* from = nullptr) {
    for (int id = 1; id <= size; ++id) {
      if (!running(id))
        continue;
      if (auto cd = describe(id)) {
        if (from)
          *from = id;
        return std::move(*cd);
      }
    }
    return std::nullopt;
  }

  /// The controller's describe (it owns the metadata), found through the
  /// first running node that answers; that node's own describe when the
  /// controller is unknown or does not answer. Preferred over
  /// describe_any(): a node that just restarted may still show old state.
  std::optional<ferry::cluster_description> describe_controller() {
    int from = -1;
    auto cd = describe_any(&from);
    if (!cd)
      return std::nullopt;
    auto ctl = cd->controller;
    if (ctl >= 1 && ctl <= size && ctl != from && running(ctl))
      if (auto cc = describe(ctl))
        return std::move(*cc);
    return cd;
  }

  /// The live state of node `id`'s own replica of topic-p.
  caf::expected<ferry::partition_status> status(int id, const std::string& topic, int32_t p) {
    if (!running(id))
      return caf::make_error(caf::sec::invalid_argument, "node not running");
    auto b = broker(id);
    if (!b)
      return b.error();
    return ask<ferry::partition_status>(*cs.sys, *b, 3s, ferry::status_atom_v,
                                        ferry::topic_partition{topic, ferry::partition_id{p}});
  }

  /// Creates a topic through any node, retrying retriable errors (no
  /// controller yet...) for up to `timeout`. "" or why not.
  std::string create_topic(const std::string& name, int32_t partitions,
                           std::chrono::milliseconds timeout = placement_timeout) {
    ferry::topic_config tc;
    tc.partitions = partitions;
    tc.replication_factor = 3;
    tc.min_insync_replicas = 2;
    std::string last;
    auto deadline = steady::now() + timeout;
    int attempts = 0;
    while (steady::now() < deadline) {
      for (int id = 1; id <= size && steady::now() < deadline; ++id) {
        if (!running(id))
          continue;
        ++attempts;
        auto b = broker(id);
        if (!b) {
          last = "node " + std::to_string(id) + ": " + ferry::error_text(b.error());
          continue;
        }
        auto md = ask<ferry::topic_metadata>(*cs.sys, *b, 10s, ferry::create_atom_v,
                                             ferry::topic_atom_v, name, tc);
        if (md)
          return "";
        // A create that timed out may have been applied: the retry says so.
        if (ferry::is(md.error(), ferry::ec::topic_exists) && attempts > 1)
          return "";
        last = "node " + std::to_string(id) + ": " + ferry::error_text(md.error());
        if (!ferry::is_retriable(md.error())
            && !ferry::is(md.error(), ferry::ec::coordinator_not_available))
          return "create " + name + " failed: " + last;
      }
      std::this_thread::sleep_for(200ms);
    }
    return "create " + name + " did not succeed within the timeout; last error " + last;
  }

  /// Every node's describe (or its error) and the tail of its output.
  std::string dump(size_t output_tail = 1500) {
    std::ostringstream os;
    os << "---- cluster state ----\n";
    for (int id = 1; id <= size; ++id) {
      os << "node " << id << " (port " << port(id) << ", pid " << node(id).pid()
         << (running(id) ? ", running" : ", NOT running") << "): ";
      auto cd = describe(id);
      if (cd)
        os << render(*cd);
      else
        os << "describe failed: " << ferry::error_text(cd.error()) << "\n";
    }
    for (int id = 1; id <= size; ++id)
      os << "---- node " << id << " output (tail) ----\n"
         << tail(node(id).output(), output_tail) << "\n";
    return os.str();
  }

  static std::string tail(const std::string& s, size_t n) {
    return s.size() <= n ? s : "..." + s.substr(s.size() - n);
  }

  /// Waits until every running node answers a describe with a known
  /// controller and all `size` nodes alive.
  bool wait_ready(std::chrono::milliseconds timeout = ready_timeout) {
    return wait_until(timeout, [&] {
      for (int id = 1; id <= size; ++id) {
        auto cd = describe(id);
        if (!cd || cd->controller < 1 || cd->nodes.size() != static_cast<size_t>(size))
          return false;
        for (auto& n : cd->nodes)
          if (!n.alive)
            return false;
      }
      return true;
    });
  }

  /// Waits until the describe of a running node shows every partition of
  /// `topic` with a leader, online, and exactly the nodes `isr_members` (by
  /// default all of them) in its ISR.
  bool wait_placed(const std::string& topic, int32_t partitions,
                   std::chrono::milliseconds timeout = placement_timeout,
                   std::vector<int32_t> isr_members = {1, 2, 3}) {
    return wait_until(timeout, [&] {
      auto cd = describe_controller();
      if (!cd)
        return false;
      for (int32_t p = 0; p < partitions; ++p) {
        auto ps = find_partition(*cd, topic, p);
        if (!ps || ps->leader < 1 || !ps->online || !same_members(ps->isr, isr_members))
          return false;
      }
      return true;
    });
  }

  /// The leader of topic-p per a running node (-1 if unknown).
  int32_t leader_of(const std::string& topic, int32_t p) {
    auto cd = describe_controller();
    if (!cd)
      return -1;
    auto ps = find_partition(*cd, topic, p);
    return ps ? ps->leader : -1;
  }

  // Declared first: destroyed last, after the nodes were killed.
  client_system cs;

private:
  std::vector<uint16_t> ports_;
  std::vector<ferry::connection_actor> links_;
  std::vector<std::unique_ptr<ferryd_process>> nodes_;
};

#define ASSERT_CLUSTER_STARTED(c)                                                  \
  do {                                                                             \
    auto why_ = (c).start();                                                       \
    ASSERT_TRUE(why_.empty()) << why_;                                             \
    ASSERT_TRUE((c).wait_ready())                                                  \
      << "no controller / not all nodes alive within "                             \
      << std::chrono::duration_cast<std::chrono::seconds>(ready_timeout).count()   \
      << " s\n"                                                                    \
      << (c).dump();                                                               \
  } while (false)

/// A connection for a client actor, with quick reconnects.
ferry::connection_actor client_connection(cluster& c, const std::string& bootstrap) {
  auto addr = ferry::parse_broker_address(bootstrap);
  if (!addr) {
    ADD_FAILURE() << "bootstrap " << bootstrap << ": " << ferry::error_text(addr.error());
    return {};
  }
  addr->connect_wait = 5s;
  addr->backoff_min = 50ms;
  addr->backoff_max = 500ms;
  return c.cs.track(ferry::spawn_connection(*c.cs.sys, *addr));
}

/// Every message of the given partitions from the start, until `want` were
/// read and no more come, or `timeout` passed.
std::vector<ferry::consumed_message>
consume_all(cluster& c, const std::string& bootstrap, const std::string& topic,
            int32_t partitions, size_t want, std::chrono::milliseconds timeout) {
  std::vector<ferry::consumed_message> out;
  ferry::consumer_config cc;
  cc.auto_offset_reset = "earliest";
  cc.enable_auto_commit = false;
  cc.request_timeout = 5s;
  for (int32_t p = 0; p < partitions; ++p)
    cc.partitions.push_back(ferry::topic_partition{topic, ferry::partition_id{p}});
  auto conn = client_connection(c, bootstrap);
  if (!conn)
    return out;
  auto cons = ferry::spawn_consumer(*c.cs.sys, cc, conn);
  if (!cons) {
    ADD_FAILURE() << ferry::error_text(cons.error());
    return out;
  }
  c.cs.track(*cons);
  caf::scoped_actor self{*c.cs.sys};
  auto deadline = steady::now() + timeout;
  int quiet = 0;
  while (steady::now() < deadline && (out.size() < want || quiet < 2)) {
    std::vector<ferry::consumed_message> got;
    self->request(*cons, 10s, ferry::poll_atom_v, int32_t{300})
      .receive([&](std::vector<ferry::consumed_message>& xs) { got = std::move(xs); },
               [&](caf::error&) { std::this_thread::sleep_for(100ms); });
    quiet = got.empty() ? quiet + 1 : 0;
    for (auto& m : got)
      out.push_back(std::move(m));
  }
  caf::anon_send_exit(*cons, caf::exit_reason::user_shutdown);
  return out;
}

/// Fetches topic-p from offset 0 up to `hw` through node `id`.
std::optional<std::vector<log_record>> fetch_all(cluster& c, int id, const std::string& topic,
                                                 int32_t p, int64_t hw, std::string& why) {
  std::vector<log_record> out;
  auto b = c.broker(id);
  if (!b) {
    why = "no broker for node " + std::to_string(id) + ": " + ferry::error_text(b.error());
    return std::nullopt;
  }
  int64_t next = 0;
  auto deadline = steady::now() + 30s;
  while (next < hw) {
    if (steady::now() > deadline) {
      why = "fetching took longer than 30 s (at offset " + std::to_string(next) + ")";
      return std::nullopt;
    }
    ferry::fetch_request req;
    req.topic = topic;
    req.partition = ferry::partition_id{p};
    req.from = ferry::offset{next};
    req.max_bytes = 1 << 20;
    req.max_wait_ms = 0;
    auto r = ask<ferry::fetch_response>(*c.cs.sys, *b, 10s, ferry::fetch_atom_v, req);
    if (!r) {
      why = "fetch at " + std::to_string(next) + ": " + ferry::error_text(r.error());
      return std::nullopt;
    }
    if (r->data.empty()) {
      why = "fetch at " + std::to_string(next) + " returned nothing (hw "
            + std::to_string(r->high_watermark.value) + ")";
      return std::nullopt;
    }
    auto n = decode_batches(r->data, next, out, why);
    if (!n)
      return std::nullopt;
    if (*n <= next) {
      why = "fetch at " + std::to_string(next) + " did not advance";
      return std::nullopt;
    }
    next = *n;
  }
  return out;
}

// -- the continuous producer ---------------------------------------------------

/// An acknowledged message.
struct ack_entry {
  int key = 0;
  int64_t seq = 0;
  int32_t partition = 0;
  int64_t off = 0;
};

/// What the load driver did; shared with the test thread.
struct ledger {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<ack_entry> acked;
  int64_t sent = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors; // error text -> count
  /// Acks that took longer than slow_ack: held up by a failover (the
  /// producer resent or waited for a new leader).
  int64_t slow_acks = 0;
  std::chrono::milliseconds max_ack_latency{0};
  bool done = false;

  size_t acked_count() {
    std::lock_guard<std::mutex> guard{mtx};
    return acked.size();
  }
};

constexpr auto slow_ack = 250ms;

struct load_options {
  int keys = 20;
  int window = 64;          // produce requests in flight
  double rate = 1500;       // messages per second, at most
  std::string topic;
  caf::timespan request_timeout = std::chrono::seconds{60};
};

struct driver_state {
  std::shared_ptr<ledger> book;
  ferry::producer_actor prod;
  load_options opt;
  int64_t counter = 0;
  int in_flight = 0;
  bool stopping = false;
  bool tick_scheduled = false;
  steady::time_point started;
  static inline const char* name = "cluster-load";
};

using driver_ptr = caf::stateful_actor<driver_state>*;

/// Sends produce requests, one message each, keeping up to `window` in
/// flight and the rate below opt.rate; key k<i % keys>, value
/// "k<key>:<seq>" with seq = i / keys. Ends (and marks the ledger done)
/// once stopped and every request was answered.
void pump(driver_ptr self) {
  auto& st = self->state;
  while (!st.stopping && st.in_flight < st.opt.window) {
    auto budget = st.opt.rate * seconds_since(st.started) + st.opt.window;
    if (static_cast<double>(st.counter) >= budget) {
      if (!st.tick_scheduled) {
        st.tick_scheduled = true;
        self->delayed_send(self, 10ms, ferry::tick_atom_v);
      }
      break;
    }
    int key = static_cast<int>(st.counter % st.opt.keys);
    int64_t seq = st.counter / st.opt.keys;
    ++st.counter;
    ++st.in_flight;
    {
      std::lock_guard<std::mutex> guard{st.book->mtx};
      ++st.book->sent;
    }
    ferry::client_message m;
    m.topic = st.opt.topic;
    m.has_key = true;
    m.key = "k" + std::to_string(key);
    m.value = m.key + ":" + std::to_string(seq);
    auto sent_at = steady::now();
    self->request(st.prod, st.opt.request_timeout, ferry::produce_atom_v, std::move(m))
      .then(
        [self, key, seq, sent_at](ferry::delivery_report& r) {
          auto& s = self->state;
          --s.in_flight;
          auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now()
                                                                               - sent_at);
          {
            std::lock_guard<std::mutex> guard{s.book->mtx};
            s.book->acked.push_back(ack_entry{key, seq, r.partition.value, r.off.value});
            if (latency > slow_ack)
              ++s.book->slow_acks;
            s.book->max_ack_latency = std::max(s.book->max_ack_latency, latency);
          }
          pump(self);
        },
        [self](caf::error& err) {
          auto& s = self->state;
          --s.in_flight;
          {
            std::lock_guard<std::mutex> guard{s.book->mtx};
            ++s.book->failed;
            ++s.book->errors[ferry::error_text(err)];
          }
          pump(self);
        });
  }
  if (st.stopping && st.in_flight == 0) {
    {
      std::lock_guard<std::mutex> guard{st.book->mtx};
      st.book->done = true;
    }
    st.book->cv.notify_all();
    self->quit();
  }
}

caf::behavior load_driver(driver_ptr self, ferry::producer_actor prod,
                          std::shared_ptr<ledger> book, load_options opt) {
  auto& st = self->state;
  st.prod = std::move(prod);
  st.book = std::move(book);
  st.opt = std::move(opt);
  st.started = steady::now();
  self->send(self, ferry::tick_atom_v);
  return {
    [self](ferry::tick_atom) {
      self->state.tick_scheduled = false;
      pump(self);
    },
    [self](ferry::stop_atom) {
      self->state.stopping = true;
      pump(self);
    },
  };
}

/// The idempotent acks=all producer of these tests, on its own connection.
caf::expected<ferry::producer_actor> make_producer(cluster& c, const std::string& bootstrap) {
  ferry::producer_config pc;
  pc.bootstrap = bootstrap;
  pc.acks = ferry::acks_mode::all;
  pc.idempotence = true;
  pc.linger = 2ms;
  pc.max_in_flight = 5;
  pc.request_timeout = 5000ms;
  pc.retry_backoff = 50ms;
  pc.retry_backoff_max = 500ms;
  pc.delivery_timeout = 45000ms;
  auto conn = client_connection(c, bootstrap);
  if (!conn)
    return caf::make_error(caf::sec::invalid_argument, "no connection");
  auto p = ferry::spawn_producer(*c.cs.sys, pc, conn);
  if (p)
    c.cs.track(*p);
  return p;
}

/// Tracks leader changes seen in describes, per partition.
struct leader_tracker {
  std::map<int32_t, std::pair<int32_t, int32_t>> last; // partition -> (leader, epoch)
  int changes = 0;
  int32_t controller = -1;
  int controller_changes = 0;

  void observe(const ferry::cluster_description& cd, const std::string& topic,
               int32_t partitions) {
    if (cd.controller >= 1 && cd.controller != controller) {
      if (controller >= 1) {
        ++controller_changes;
        std::cout << "[cluster] controller (Raft leader) " << controller << " -> "
                  << cd.controller << " (term " << cd.raft_term << ")\n";
      }
      controller = cd.controller;
    }
    for (int32_t p = 0; p < partitions; ++p) {
      auto ps = find_partition(cd, topic, p);
      if (!ps || ps->leader < 1)
        continue;
      auto now = std::make_pair(ps->leader, ps->epoch.value);
      auto i = last.find(p);
      if (i == last.end()) {
        last.emplace(p, now);
      } else if (i->second.first != now.first) {
        ++changes;
        std::cout << "[cluster] partition " << p << ": leader " << i->second.first
                  << " (epoch " << i->second.second << ") -> " << now.first << " (epoch "
                  << now.second << ")\n";
        i->second = now;
      } else {
        i->second.second = std::max(i->second.second, now.second);
      }
    }
  }

  /// Sleeps `d` while observing the cluster.
  void watch(cluster& c, std::chrono::milliseconds d, const std::string& topic,
             int32_t partitions) {
    auto until = steady::now() + d;
    while (steady::now() < until) {
      if (auto cd = c.describe_controller())
        observe(*cd, topic, partitions);
      std::this_thread::sleep_for(poll_step);
    }
  }
};

/// Compares the logs of topic-p in the three (stopped) nodes' data dirs up
/// to `hw`, byte for byte. "" or the first difference.
std::string compare_logs_on_disk(cluster& c, const std::string& topic, int32_t p,
                                 int64_t hw, std::map<int, int64_t>& log_ends) {
  std::map<int, std::string> bytes;
  for (int id = 1; id <= cluster::size; ++id) {
    auto dir = c.node(id).data_dir() / "topics" / (topic + "-" + std::to_string(p));
    if (!std::filesystem::exists(dir)) {
      std::string listing;
      std::error_code ec;
      for (auto& e : std::filesystem::recursive_directory_iterator(c.node(id).data_dir(), ec))
        listing += "  " + e.path().string() + "\n";
      return "node " + std::to_string(id) + ": no log dir " + dir.string()
             + "; the data dir holds:\n" + listing;
    }
    ferry::memory_checkpoint cp;
    auto log = ferry::partition_log::open(dir, ferry::log_config{}, &cp);
    if (!log)
      return "node " + std::to_string(id) + ": open " + dir.string() + ": "
             + ferry::describe(log.error());
    log_ends[id] = (*log)->log_end().value;
    std::string data;
    auto from = (*log)->log_start();
    if (from.value != 0)
      return "node " + std::to_string(id) + ": log starts at " + std::to_string(from.value);
    while (from.value < hw) {
      auto r = (*log)->read(from, 1 << 20, ferry::offset{hw});
      if (!r)
        return "node " + std::to_string(id) + ": read at " + std::to_string(from.value) + ": "
               + ferry::describe(r.error());
      if (r->data.empty() || r->next_offset.value <= from.value)
        break; // a batch straddling hw, or the log ends early: compared below
      data += r->data;
      from = r->next_offset;
    }
    (*log)->close();
    bytes[id] = std::move(data);
  }
  for (int id = 2; id <= cluster::size; ++id) {
    auto& a = bytes[1];
    auto& b = bytes[id];
    if (a == b)
      continue;
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i])
      ++i;
    return "logs of node 1 (" + std::to_string(a.size()) + " bytes) and node "
           + std::to_string(id) + " (" + std::to_string(b.size())
           + " bytes) below hw differ first at byte " + std::to_string(i);
  }
  std::cout << "[cluster] " << topic << "-" << p << ": " << bytes[1].size()
            << " bytes below hw " << hw << " identical on all nodes\n";
  return "";
}

// -- 1 ------------------------------------------------------------------------

TEST(Cluster, ThreeNodesElectAndReplicate) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  std::cout << "[cluster] ready after " << seconds_since(t0) << " s\n";
  const std::string topic = "replicated";
  constexpr int32_t partitions = 3;
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions))
    << "not every partition got a leader and ISR {1,2,3}\n" << c.dump();
  if (auto cd = c.describe_controller())
    std::cout << "[cluster] " << render(*cd);

  // Produce 1000 keyed messages, acks=all, in one bulk request.
  auto bootstrap = c.bootstrap(1);
  std::cout << "[cluster] client bootstrap " << bootstrap
            << (bootstrap_lists_supported() ? " (list)" : " (fallback: node 1 only)") << "\n";
  auto prod = make_producer(c, bootstrap);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  constexpr int total = 1000;
  std::vector<ferry::client_message> msgs;
  for (int i = 0; i < total; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "key-" + std::to_string(i % 50);
    m.value = "value-" + std::to_string(i);
    msgs.push_back(std::move(m));
  }
  auto reports = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 60s,
                                                          ferry::produce_atom_v, msgs);
  ASSERT_TRUE(reports) << ferry::error_text(reports.error()) << "\n" << c.dump();
  ASSERT_EQ(reports->size(), static_cast<size_t>(total));
  std::map<std::pair<int32_t, int64_t>, std::string> expected; // (p, off) -> value
  std::set<int32_t> used;
  for (int i = 0; i < total; ++i) {
    auto& r = (*reports)[static_cast<size_t>(i)];
    auto [it, fresh] = expected.emplace(std::make_pair(r.partition.value, r.off.value),
                                        msgs[static_cast<size_t>(i)].value);
    EXPECT_TRUE(fresh) << "two messages acknowledged at " << topic << "-"
                       << r.partition.value << "@" << r.off.value;
    used.insert(r.partition.value);
  }
  EXPECT_EQ(used.size(), static_cast<size_t>(partitions)) << "50 keys should hit every partition";

  // Consume everything back.
  auto got = consume_all(c, bootstrap, topic, partitions, total, 30s);
  std::map<std::pair<int32_t, int64_t>, std::string> seen;
  for (auto& m : got)
    seen.emplace(std::make_pair(m.partition.value, m.off.value), m.value);
  EXPECT_EQ(got.size(), static_cast<size_t>(total)) << "consumed (with duplicates)";
  size_t missing = 0, wrong = 0;
  for (auto& [where, value] : expected) {
    auto i = seen.find(where);
    if (i == seen.end())
      ++missing;
    else if (i->second != value)
      ++wrong;
  }
  EXPECT_EQ(missing, 0u) << "acknowledged messages not consumed\n" << c.dump();
  EXPECT_EQ(wrong, 0u) << "consumed values differ from the acknowledged ones";
  std::map<int32_t, size_t> per_partition;
  for (auto& [where, value] : seen)
    ++per_partition[where.first];
  std::cout << "[cluster] produced " << total << ", consumed " << got.size() << " (";
  for (auto& [p, n] : per_partition)
    std::cout << "p" << p << "=" << n << " ";
  std::cout << "), missing " << missing << ", wrong " << wrong << "\n";

  // Every node agrees on leaders and epochs (metadata reaches them
  // asynchronously: wait for it).
  std::string disagreement;
  bool agree = wait_until(10s, [&] {
    std::map<int32_t, std::pair<int32_t, int32_t>> first;
    for (int id = 1; id <= cluster::size; ++id) {
      auto cd = c.describe(id);
      if (!cd) {
        disagreement = "node " + std::to_string(id) + ": " + ferry::error_text(cd.error());
        return false;
      }
      for (int32_t p = 0; p < partitions; ++p) {
        auto ps = find_partition(*cd, topic, p);
        if (!ps || ps->leader < 1) {
          disagreement = "node " + std::to_string(id) + " knows no leader of p"
                         + std::to_string(p);
          return false;
        }
        auto now = std::make_pair(ps->leader, ps->epoch.value);
        auto [it, fresh] = first.emplace(p, now);
        if (!fresh && it->second != now) {
          disagreement = "p" + std::to_string(p) + ": node " + std::to_string(id)
                         + " says leader " + std::to_string(now.first) + " epoch "
                         + std::to_string(now.second) + ", node 1 says "
                         + std::to_string(it->second.first) + " epoch "
                         + std::to_string(it->second.second);
          return false;
        }
      }
    }
    return true;
  });
  EXPECT_TRUE(agree) << disagreement << "\n" << c.dump();
  if (HasFailure())
    std::cout << c.dump();
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

// -- 2 ------------------------------------------------------------------------

void acked_writes_survive_leader_kills(int32_t partitions, int kills) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "survive";
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions))
    << "not every partition got a leader and ISR {1,2,3}\n" << c.dump();
  leader_tracker leaders;
  if (auto cd = c.describe_controller())
    leaders.observe(*cd, topic, partitions);

  auto bootstrap = c.bootstrap(1);
  std::cout << "[cluster] producer bootstrap " << bootstrap
            << (bootstrap_lists_supported()
                  ? " (list)"
                  : " (fallback: node 1 only; it reconnects when node 1 restarts)")
            << "\n";
  auto prod = make_producer(c, bootstrap);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto book = std::make_shared<ledger>();
  load_options opt;
  opt.topic = topic;
  auto driver = c.cs.track(c.cs.sys->spawn(load_driver, *prod, book, opt));

  // Some acknowledged writes before the first kill.
  ASSERT_TRUE(wait_until(20s, [&] { return book->acked_count() >= 500; }))
    << "fewer than 500 acks in 20 s before any kill (acked " << book->acked_count() << ")\n"
    << c.dump();

  for (int round = 0; round < kills; ++round) {
    auto p = round % partitions;
    auto victim = c.leader_of(topic, p);
    ASSERT_GE(victim, 1) << "no leader of p" << p << " before kill " << round + 1 << "\n"
                         << c.dump();
    auto acked_before = book->acked_count();
    auto tk = steady::now();
    c.kill(victim);
    std::cout << "[cluster] kill " << round + 1 << ": SIGKILL node " << victim
              << " (leader of p" << p << (victim == leaders.controller ? ", controller" : "")
              << ") at " << seconds_since(t0) << " s, " << acked_before << " acked\n";
    leaders.watch(c, 1500ms, topic, partitions);
    // The survivors elect another leader.
    int32_t successor = -1;
    bool elected = wait_until(placement_timeout, [&] {
      auto cd = c.describe_controller();
      if (!cd)
        return false;
      leaders.observe(*cd, topic, partitions);
      auto ps = find_partition(*cd, topic, p);
      if (!ps || ps->leader < 1 || ps->leader == victim)
        return false;
      successor = ps->leader;
      return true;
    });
    ASSERT_TRUE(elected) << "no new leader of p" << p << " after killing node " << victim
                         << "\n" << c.dump();
    auto why = c.restart(victim);
    ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
    bool rejoined = wait_until(rejoin_timeout, [&] {
      auto cd = c.describe_controller();
      if (!cd)
        return false;
      leaders.observe(*cd, topic, partitions);
      for (int32_t q = 0; q < partitions; ++q) {
        auto ps = find_partition(*cd, topic, q);
        if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
          return false;
      }
      return true;
    });
    ASSERT_TRUE(rejoined) << "node " << victim << " not back in every ISR within "
                          << std::chrono::duration_cast<std::chrono::seconds>(rejoin_timeout)
                               .count()
                          << " s\n" << c.dump();
    std::cout << "[cluster] kill " << round + 1 << ": new leader " << successor
              << ", node " << victim << " back in the ISR after " << seconds_since(tk)
              << " s; " << book->acked_count() - acked_before << " acks meanwhile\n";
  }

  // More acks after the last restart: the producer still makes progress.
  auto acked_after_kills = book->acked_count();
  EXPECT_TRUE(wait_until(20s, [&] { return book->acked_count() >= acked_after_kills + 200; }))
    << "the producer made no progress after the last restart\n" << c.dump();

  // Stop producing and wait for every answer.
  caf::anon_send(driver, ferry::stop_atom_v);
  {
    std::unique_lock<std::mutex> guard{book->mtx};
    ASSERT_TRUE(book->cv.wait_for(guard, 70s, [&] { return book->done; }))
      << "outstanding produce requests not answered within 70 s";
  }
  std::vector<ack_entry> acked;
  int64_t sent = 0, failed = 0, slow_acks = 0;
  std::chrono::milliseconds max_latency{0};
  std::map<std::string, int64_t> errors;
  {
    std::lock_guard<std::mutex> guard{book->mtx};
    acked = book->acked;
    sent = book->sent;
    failed = book->failed;
    errors = book->errors;
    slow_acks = book->slow_acks;
    max_latency = book->max_ack_latency;
  }
  for (auto& [text, n] : errors)
    std::cout << "[cluster] produce error x" << n << ": " << text << "\n";

  // The replicas converge: same log end on every node, HW there too.
  std::map<int32_t, int64_t> hws;
  std::string state;
  bool converged = wait_until(converge_timeout, [&] {
    state.clear();
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    bool ok = true;
    for (int32_t p = 0; p < partitions; ++p) {
      auto ps = find_partition(*cd, topic, p);
      if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
        return false;
      auto lead = c.status(ps->leader, topic, p);
      if (!lead)
        return false;
      state += "p" + std::to_string(p) + ": leader " + std::to_string(ps->leader)
               + " log_end=" + std::to_string(lead->log_end.value)
               + " hw=" + std::to_string(lead->high_watermark.value);
      if (lead->high_watermark != lead->log_end)
        ok = false;
      for (int id = 1; id <= cluster::size; ++id) {
        auto st = c.status(id, topic, p);
        if (!st)
          return false;
        state += "; node " + std::to_string(id) + " log_end="
                 + std::to_string(st->log_end.value);
        if (st->log_end != lead->log_end)
          ok = false;
      }
      state += "\n";
      hws[p] = lead->high_watermark.value;
    }
    return ok;
  });
  ASSERT_TRUE(converged) << "replicas did not converge:\n" << state << c.dump();

  // Read every partition back and check the acked messages.
  std::map<int32_t, std::map<int64_t, const ack_entry*>> acked_at; // p -> off -> ack
  int64_t doubly_acked = 0;
  for (auto& a : acked) {
    auto [it, fresh] = acked_at[a.partition].emplace(a.off, &a);
    if (!fresh) {
      ++doubly_acked;
      ADD_FAILURE() << "offset " << a.partition << "@" << a.off << " acknowledged for k"
                    << a.key << ":" << a.seq << " and for k" << it->second->key << ":"
                    << it->second->seq;
    }
  }
  int64_t in_log = 0, missing = 0, mismatched = 0, duplicates = 0, reordered = 0,
          unacked_in_log = 0;
  std::set<int32_t> batch_epochs;
  for (int32_t p = 0; p < partitions; ++p) {
    std::string why;
    auto reader = c.leader_of(topic, p);
    auto recs = fetch_all(c, reader >= 1 ? reader : 1, topic, p, hws[p], why);
    ASSERT_TRUE(recs) << "reading p" << p << ": " << why << "\n" << c.dump();
    in_log += static_cast<int64_t>(recs->size());
    std::map<int64_t, const log_record*> by_off;
    int64_t prev_off = -1;
    for (auto& r : *recs) {
      EXPECT_GT(r.off, prev_off) << "offsets not increasing in p" << p;
      prev_off = r.off;
      by_off[r.off] = &r;
      batch_epochs.insert(r.batch_epoch);
    }
    for (auto& [off, a] : acked_at[p]) {
      auto want = "k" + std::to_string(a->key) + ":" + std::to_string(a->seq);
      auto i = by_off.find(off);
      if (i == by_off.end()) {
        if (++missing <= 10)
          ADD_FAILURE() << "acknowledged " << want << " at " << p << "@" << off
                        << " is not in the log (hw " << hws[p] << ")";
      } else if (i->second->value != want || i->second->key != "k" + std::to_string(a->key)) {
        if (++mismatched <= 10)
          ADD_FAILURE() << "acknowledged " << want << " at " << p << "@" << off
                        << " but the log holds " << i->second->key << "=" << i->second->value;
      }
    }
    // Per key: seqs strictly rising along the log.
    std::map<std::string, int64_t> last_seq;
    std::set<std::string> seen_values;
    for (auto& r : *recs) {
      auto colon = r.value.rfind(':');
      if (colon == std::string::npos) {
        ADD_FAILURE() << "unexpected value " << r.value << " at " << p << "@" << r.off;
        continue;
      }
      int64_t seq = std::stoll(r.value.substr(colon + 1));
      if (!seen_values.insert(r.value).second) {
        if (++duplicates <= 10)
          ADD_FAILURE() << "duplicate " << r.value << " at " << p << "@" << r.off;
      } else if (auto it = last_seq.find(r.key); it != last_seq.end() && seq <= it->second) {
        if (++reordered <= 10)
          ADD_FAILURE() << r.value << " at " << p << "@" << r.off << " after seq "
                        << it->second << " of the same key";
      }
      last_seq[r.key] = std::max(last_seq[r.key], seq);
      if (!acked_at[p].count(r.off))
        ++unacked_in_log;
    }
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(reordered, 0);
  EXPECT_EQ(doubly_acked, 0);
  std::cout << "[cluster] sent " << sent << ", acked " << acked.size() << ", failed " << failed
            << ", records in the log " << in_log << " (not acked: " << unacked_in_log
            << "), missing " << missing << ", mismatched " << mismatched << ", duplicates "
            << duplicates << ", reordered " << reordered << "; acks slower than "
            << slow_ack.count() << " ms (held up by a failover) " << slow_acks
            << ", max ack latency " << max_latency.count() << " ms; leader changes observed "
            << leaders.changes << ", controller changes " << leaders.controller_changes
            << ", batch leader epochs in the log " << batch_epochs.size() << "\n";
  EXPECT_GE(leaders.changes, kills) << "each kill should have moved a leadership";

  // Stop cleanly and compare the replicas on disk up to the HW.
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << cluster::tail(c.node(id).output(), 3000);
  for (int32_t p = 0; p < partitions; ++p) {
    std::map<int, int64_t> log_ends;
    auto diff = compare_logs_on_disk(c, topic, p, hws[p], log_ends);
    EXPECT_TRUE(diff.empty()) << "p" << p << ": " << diff;
    for (auto& [id, end] : log_ends)
      EXPECT_EQ(end, hws[p]) << "node " << id << " p" << p << " log end on disk";
  }
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

TEST(Cluster, AckedWritesSurviveLeaderKills) {
  acked_writes_survive_leader_kills(1, 3);
}

TEST(Cluster, AckedWritesSurviveLeaderKillsThreePartitions) {
  acked_writes_survive_leader_kills(3, 3);
}

// -- 3 ------------------------------------------------------------------------

TEST(Cluster, FollowerRestartCatchesUp) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "catchup";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  auto leader = c.leader_of(topic, 0);
  ASSERT_GE(leader, 1) << c.dump();
  int follower = leader % cluster::size + 1;
  auto bootstrap = c.bootstrap(leader);
  std::cout << "[cluster] leader " << leader << ", killing follower " << follower
            << "; client bootstrap " << bootstrap
            << (bootstrap_lists_supported() ? " (list)" : " (fallback: the leader only)")
            << "\n";
  c.kill(follower);
  // With the follower gone the ISR shrinks to the two others; then
  // acks=all writes (min.insync.replicas=2) go through.
  auto prod = make_producer(c, bootstrap);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  constexpr int total = 500;
  std::vector<ferry::client_message> msgs;
  for (int i = 0; i < total; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "k" + std::to_string(i % 10);
    m.value = "v" + std::to_string(i);
    msgs.push_back(std::move(m));
  }
  auto tp = steady::now();
  auto reports = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 45s,
                                                          ferry::produce_atom_v, msgs);
  ASSERT_TRUE(reports) << "producing with a follower down: "
                       << ferry::error_text(reports.error()) << "\n" << c.dump();
  std::cout << "[cluster] " << total << " acked with node " << follower << " down in "
            << seconds_since(tp) << " s\n";
  if (auto cd = c.describe_controller(); cd && find_partition(*cd, topic, 0)) {
    EXPECT_FALSE(contains(find_partition(*cd, topic, 0)->isr, follower))
      << "a dead follower is still in the ISR after acks=all writes\n" << render(*cd);
  }
  auto why2 = c.restart(follower);
  ASSERT_TRUE(why2.empty()) << why2 << "\n" << c.dump();
  auto tr = steady::now();
  std::string state;
  bool caught_up = wait_until(rejoin_timeout, [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    auto ps = find_partition(*cd, topic, 0);
    if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
      return false;
    auto lead = c.status(ps->leader, topic, 0);
    auto mine = c.status(follower, topic, 0);
    if (!lead || !mine)
      return false;
    state = "leader log_end " + std::to_string(lead->log_end.value) + ", follower log_end "
            + std::to_string(mine->log_end.value);
    return mine->log_end == lead->log_end && lead->log_end.value >= total;
  });
  ASSERT_TRUE(caught_up) << "follower " << follower << " did not rejoin and catch up within "
                         << std::chrono::duration_cast<std::chrono::seconds>(rejoin_timeout)
                              .count()
                         << " s (" << state << ")\n" << c.dump();
  std::cout << "[cluster] follower " << follower << " back in the ISR and caught up after "
            << seconds_since(tr) << " s (" << state << ")\n";
  // Its copy is the leader's: stop cleanly and compare the logs on disk.
  auto lead = c.status(c.leader_of(topic, 0), topic, 0);
  ASSERT_TRUE(lead) << ferry::error_text(lead.error()) << "\n" << c.dump();
  auto hw = lead->high_watermark.value;
  EXPECT_GE(hw, total);
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << cluster::tail(c.node(id).output(), 3000);
  std::map<int, int64_t> log_ends;
  auto diff = compare_logs_on_disk(c, topic, 0, hw, log_ends);
  EXPECT_TRUE(diff.empty()) << diff;
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

} // namespace
