// Queue-mode workers against a real ferryd child process:
//   (a) 10k records over 20 keys and 4 partitions, three queue_consumer
//       members whose handler always fails two keys (one rejects, one nacks
//       until the DLQ) and fails others on their first attempt; ferryd is
//       SIGKILLed in the middle and restarted on the same data dir and port.
//       In the end every record is either processed or in the DLQ: none
//       lost, none both (at-least-once duplicates of processing are counted,
//       not forbidden);
//   (b) `ferryctl work --exec 'sh script'` acks, dead-letters a record that
//       exits 2 at once and one that exits 1 after --max-attempts, with the
//       ferry-* headers; the same script in --mode stream (retry in the
//       application, then the DLQ, then commit);
//   (c) SIGTERM stops `ferryctl work` cleanly and releases its leases: the
//       record comes at once to another member, without a counted attempt;
//   (e) a command that runs longer than the visibility timeout keeps its
//       lease (ferryctl work extends it) and is acked on its first attempt;
//   (d) the stream-mode helper (stream_dlq) directly: retries with backoff,
//       dead-letters after max_attempts or at once on reject, into the DLQ
//       partition of the source partition, with the ferry-* headers (old
//       ones replaced).
//
// Every wait is bounded; ferryd and ferryctl are always stopped
// (process.hpp), and the client actors are killed before their actor system
// goes away.

#include "client_system.hpp"
#include "process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "actors/client/queue_consumer.hpp"
#include "actors/client/stream_dlq.hpp"
#include "broker/start_position.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

using ferry::test::client_system;

ferry::test::command_result ctl(const ferryd_process& d, std::vector<std::string> args,
                                std::chrono::milliseconds timeout = 60s) {
  args.insert(args.begin(), {"--broker", d.endpoint()});
  return run_command(FERRYCTL_PATH, args, timeout);
}

void create_topic(const ferryd_process& d, const std::string& name, int partitions) {
  auto r = ctl(d, {"topic", "create", name, "--partitions", std::to_string(partitions)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

/// Produces values "v<i>" with keys "k<i % keys>", i in [0, n).
void produce_all(caf::actor_system& sys, const std::string& endpoint, const std::string& topic,
                 int n, int keys) {
  ferry::producer_config pcfg;
  pcfg.bootstrap = endpoint;
  pcfg.linger = 2ms;
  auto prod = ferry::spawn_producer(sys, pcfg);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  caf::scoped_actor self{sys};
  std::vector<ferry::client_message> batch;
  for (int i = 0; i < n; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "k" + std::to_string(i % keys);
    m.value = "v" + std::to_string(i);
    batch.push_back(std::move(m));
  }
  caf::error err;
  self->request(*prod, 120s, ferry::produce_atom_v, std::move(batch))
    .receive([](std::vector<ferry::delivery_report>&) {},
             [&](caf::error& e) { err = std::move(e); });
  self->send_exit(*prod, caf::exit_reason::user_shutdown);
  ASSERT_FALSE(err) << ferry::error_text(err);
}

/// Every record of `topic` (all partitions, from the start) until `want`
/// were read or `timeout` passed.
std::vector<ferry::consumed_message> read_all(caf::actor_system& sys, const std::string& endpoint,
                                              const std::string& topic, int partitions,
                                              size_t want, std::chrono::milliseconds timeout) {
  ferry::consumer_config c;
  c.bootstrap = endpoint;
  c.auto_offset_reset = "earliest";
  c.enable_auto_commit = false;
  for (int p = 0; p < partitions; ++p)
    c.partitions.push_back(ferry::topic_partition{topic, ferry::partition_id{p}});
  std::vector<ferry::consumed_message> out;
  auto cons = ferry::spawn_consumer(sys, c);
  if (!cons) {
    ADD_FAILURE() << ferry::error_text(cons.error());
    return out;
  }
  caf::scoped_actor self{sys};
  auto deadline = steady::now() + timeout;
  int quiet = 0;
  while (steady::now() < deadline && (out.size() < want || quiet < 2)) {
    std::vector<ferry::consumed_message> got;
    self->request(*cons, 30s, ferry::poll_atom_v, int32_t{300})
      .receive([&](std::vector<ferry::consumed_message>& xs) { got = std::move(xs); },
               [&](caf::error&) {});
    quiet = got.empty() ? quiet + 1 : 0;
    for (auto& m : got)
      out.push_back(std::move(m));
  }
  self->send_exit(*cons, caf::exit_reason::user_shutdown);
  return out;
}

std::string header(const ferry::consumed_message& m, const std::string& key) {
  for (auto& h : m.headers)
    if (h.key == key)
      return h.value;
  return "";
}

/// The queue group's state, or nullopt while the broker does not answer.
std::optional<ferry::queue_group_description>
describe_queue(caf::actor_system& sys, ferry::connection_actor conn, const std::string& group) {
  caf::scoped_actor self{sys};
  ferry::broker_actor broker;
  self->request(conn, 5s, ferry::connect_atom_v)
    .receive([&](ferry::broker_actor& b) { broker = std::move(b); }, [](caf::error&) {});
  if (!broker)
    return std::nullopt;
  std::optional<ferry::queue_group_description> out;
  self->request(broker, 5s, ferry::describe_atom_v, ferry::queue_atom_v, group)
    .receive([&](ferry::queue_group_description& d) { out = std::move(d); },
             [](caf::error&) {});
  return out;
}

// -- (a) 10k records, failing handlers, SIGKILL of ferryd ---------------------------------

/// What the members saw, shared by their threads.
struct ledger {
  std::mutex mtx;
  std::map<std::string, int> acked;   ///< value -> acks that succeeded
  std::set<std::string> ack_unknown;  ///< acks whose answer was lost
  int64_t deliveries = 0;
  int64_t settle_errors = 0;
};

TEST(QueueWork, TenThousandRecordsEndProcessedOrDeadLetteredAcrossASigkill) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  constexpr int partitions = 4;
  constexpr int keys = 20;
  constexpr int total = 10'000;
  create_topic(broker, "jobs", partitions);
  client_system cs;
  produce_all(*cs.sys, broker.endpoint(), "jobs", total, keys);
  if (HasFatalFailure())
    return;

  ferry::queue_group_config qc;
  qc.max_attempts = 3;
  qc.initial_backoff_ms = 20;
  qc.max_backoff_ms = 200;
  qc.jitter = 0.5;
  qc.visibility_timeout_ms = 3000;
  auto addr = ferry::parse_broker_address(broker.endpoint());
  ASSERT_TRUE(addr);
  addr->backoff_max = 500ms;
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));

  // The handler: k0 is rejected, k1 always fails (nack until the DLQ), keys
  // k2..k7 fail on the first attempt of every third record, the rest work.
  auto always_fails = [](const std::string& key) { return key == "k0" || key == "k1"; };
  ledger book;
  std::atomic<bool> stop{false};
  constexpr int members = 3;
  std::vector<ferry::queue_consumer_actor> consumers;
  for (int i = 0; i < members; ++i) {
    ferry::queue_consumer_config c;
    c.group = "qw";
    c.topic = "jobs";
    c.member_id = "member-" + std::to_string(i);
    c.group_config = qc;
    c.alter_existing = true;
    c.request_timeout = 5s;
    c.retry_backoff = 100ms;
    auto h = ferry::spawn_queue_consumer(*cs.sys, c, conn);
    ASSERT_TRUE(h) << ferry::error_text(h.error());
    consumers.push_back(cs.track(*h));
  }
  auto work = [&](ferry::queue_consumer_actor qa) {
    caf::scoped_actor self{*cs.sys};
    while (!stop) {
      std::vector<ferry::leased_message> got;
      self->request(qa, 30s, ferry::receive_atom_v, int32_t{200}, int64_t{200})
        .receive([&](std::vector<ferry::leased_message>& xs) { got = std::move(xs); },
                 [&](caf::error&) { std::this_thread::sleep_for(50ms); });
      if (got.empty())
        continue;
      using handle = decltype(self->request(qa, 30s, ferry::ack_atom_v,
                                            ferry::queue_ack_request{}));
      std::vector<std::pair<handle, const ferry::leased_message*>> pending;
      for (auto& lm : got) {
        auto& m = lm.message;
        auto n = std::stoi(m.value.substr(1));
        ferry::queue_ack_request req;
        if (m.key == "k0")
          req = ferry::make_ack(lm, ferry::queue_ack_kind::reject, "poison " + m.value);
        else if (m.key == "k1")
          req = ferry::make_ack(lm, ferry::queue_ack_kind::nack, "always fails");
        else if (std::stoi(m.key.substr(1)) < 8 && n % 3 == 0 && lm.attempt == 1)
          req = ferry::make_ack(lm, ferry::queue_ack_kind::nack, "flaky");
        else
          req = ferry::make_ack(lm, ferry::queue_ack_kind::ack);
        pending.emplace_back(self->request(qa, 30s, ferry::ack_atom_v, req), &lm);
      }
      for (auto& [h, lm] : pending) {
        auto kind_ack = !always_fails(lm->message.key)
                        && !(std::stoi(lm->message.key.substr(1)) < 8
                             && std::stoi(lm->message.value.substr(1)) % 3 == 0
                             && lm->attempt == 1);
        h.receive(
          [&](ferry::queue_ack_response&) {
            std::lock_guard<std::mutex> guard{book.mtx};
            if (kind_ack)
              ++book.acked[lm->message.value];
          },
          [&](caf::error& e) {
            std::lock_guard<std::mutex> guard{book.mtx};
            ++book.settle_errors;
            // A lease error means the ack was refused; anything else (the
            // broker died) leaves it unknown.
            if (kind_ack && !ferry::is(e, ferry::ec::lease_expired)
                && !ferry::is(e, ferry::ec::lease_not_found)
                && !ferry::is(e, ferry::ec::not_lease_owner))
              book.ack_unknown.insert(lm->message.value);
          });
      }
      std::lock_guard<std::mutex> guard{book.mtx};
      book.deliveries += static_cast<int64_t>(got.size());
    }
  };
  std::vector<std::thread> threads;
  for (auto& c : consumers)
    threads.emplace_back(work, c);
  struct joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& ts;
    ~joiner() {
      stop = true;
      for (auto& t : ts)
        if (t.joinable())
          t.join();
    }
  } join_on_exit{stop, threads};

  // Let a third of the work happen, then crash the broker.
  auto deadline = steady::now() + 60s;
  while (steady::now() < deadline) {
    {
      std::lock_guard<std::mutex> guard{book.mtx};
      if (book.acked.size() >= total / 3)
        break;
    }
    std::this_thread::sleep_for(20ms);
  }
  {
    std::lock_guard<std::mutex> guard{book.mtx};
    ASSERT_GE(book.acked.size(), static_cast<size_t>(total / 3)) << broker.output();
    ASSERT_LT(book.acked.size(), static_cast<size_t>(total * 9 / 10))
      << "nearly done before the crash";
  }
  broker.kill9();
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(broker.restart(true)) << broker.output();

  // Until every partition's done prefix reaches its end and nothing waits
  // for the DLQ.
  bool finished = false;
  deadline = steady::now() + 180s;
  while (!finished && steady::now() < deadline) {
    std::this_thread::sleep_for(500ms);
    auto d = describe_queue(*cs.sys, conn, "qw");
    if (!d || d->partitions.size() != static_cast<size_t>(partitions))
      continue;
    finished = true;
    for (auto& p : d->partitions)
      if (p.high_watermark.value < 0 || p.committed != p.high_watermark
          || p.dead_letter_pending > 0)
        finished = false;
  }
  stop = true;
  for (auto& t : threads)
    t.join();
  ASSERT_TRUE(finished) << "the group did not finish; " << broker.output();

  // The DLQ: one copy per dead letter (idempotent writes), with headers.
  auto dlq = read_all(*cs.sys, broker.endpoint(), "jobs.qw.dlq", partitions,
                      static_cast<size_t>(total / keys * 2), 60s);
  std::map<std::string, int> dead;
  for (auto& m : dlq) {
    ++dead[m.value];
    EXPECT_EQ(header(m, "ferry-original-topic"), "jobs");
    EXPECT_EQ(header(m, "ferry-group"), "qw");
    if (m.key == "k0") {
      EXPECT_EQ(header(m, "ferry-error"), "poison " + m.value);
    } else {
      EXPECT_EQ(m.key, "k1") << m.value << " dead-lettered";
      // Exhausted; expiries after the crash may have counted too.
      EXPECT_GE(std::stoi(header(m, "ferry-attempts")), 3) << m.value;
    }
  }
  int lost = 0, both = 0, dlq_dups = 0, processed_dups = 0, wrong_dead = 0;
  std::string examples, dup_examples;
  for (int i = 0; i < total; ++i) {
    auto v = "v" + std::to_string(i);
    auto key = "k" + std::to_string(i % keys);
    bool acked = book.acked.count(v) > 0;
    bool unknown = book.ack_unknown.count(v) > 0;
    bool in_dlq = dead.count(v) > 0;
    if (!acked && !unknown && !in_dlq) {
      ++lost;
      if (examples.size() < 200)
        examples += v + " ";
    }
    if (acked && in_dlq)
      ++both;
    if (in_dlq && dead[v] > 1) {
      ++dlq_dups;
      for (auto& m : dlq)
        if (m.value == v)
          dup_examples += v + " at " + std::to_string(m.partition.value) + "/"
                          + std::to_string(m.off.value) + " attempts "
                          + header(m, "ferry-attempts") + "; ";
    }
    if (acked && book.acked[v] > 1)
      ++processed_dups;
    if (in_dlq != always_fails(key))
      ++wrong_dead;
  }
  EXPECT_EQ(lost, 0) << "lost records: " << examples;
  EXPECT_EQ(both, 0) << "records both processed and dead-lettered";
  EXPECT_EQ(dlq_dups, 0) << "records written to the DLQ twice: " << dup_examples << "\n"
                         << broker.output();
  EXPECT_EQ(wrong_dead, 0) << "records of working keys in the DLQ, or failing ones not";
  EXPECT_EQ(dead.size(), static_cast<size_t>(total / keys * 2));
  // At-least-once: duplicates of processing are allowed; report them.
  std::cout << "[ queue ] deliveries " << book.deliveries << ", processed twice "
            << processed_dups << ", acks with unknown outcome " << book.ack_unknown.size()
            << ", settle errors " << book.settle_errors << ", dead letters " << dlq.size()
            << std::endl;
  caf::scoped_actor self{*cs.sys};
  for (auto& c : consumers)
    self->request(c, 10s, ferry::stop_atom_v).receive([](int64_t) {}, [](caf::error&) {});
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (b) ferryctl work ---------------------------------------------------------------------

/// A handler script: appends the value to `log`; "poison" exits 2, "flaky"
/// exits 1 with an error line, the rest exit 0.
std::string write_script(const ferry::test::temp_dir& dir) {
  auto path = dir.path() / "handler.sh";
  std::ofstream f{path};
  f << "v=$(cat)\n"
       "echo \"$v $FERRY_TOPIC $FERRY_PARTITION $FERRY_OFFSET $FERRY_KEY $FERRY_ATTEMPT "
       "$FERRY_GROUP $FERRY_HEADER_TRACE_ID\" >> "
    << (dir.path() / "seen.log").string()
    << "\n"
       "case \"$v\" in\n"
       "  poison) echo \"bad payload\" >&2; exit 2;;\n"
       "  flaky) echo \"transient failure $FERRY_ATTEMPT\" >&2; echo second line >&2; exit 1;;\n"
       "esac\n"
       "exit 0\n";
  return path.string();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss{text};
  std::string line;
  while (std::getline(ss, line))
    out.push_back(line);
  return out;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f{p};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void produce_lines(const ferryd_process& broker, const std::string& topic) {
  auto r = run_command(FERRYCTL_PATH,
                       {"--broker", broker.endpoint(), "produce", topic, "--key-separator", ":",
                        "--header", "trace-id=t42"},
                       60s, "a:ok1\nb:poison\nc:flaky\nd:ok2\ne:ok3\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

/// The DLQ records as JSON objects (ferryctl consume --format json).
std::vector<json> dlq_records(const ferryd_process& broker, const std::string& topic, int n) {
  auto r = ctl(broker, {"consume", topic, "--from-beginning", "--max", std::to_string(n),
                        "--timeout", "10000", "--format", "json"});
  std::vector<json> out;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (auto& l : lines_of(r.out))
    out.push_back(json::parse(l, nullptr, false));
  return out;
}

void check_dead_letters(const std::vector<json>& dlq, const std::string& group) {
  ASSERT_EQ(dlq.size(), 2u);
  std::map<std::string, json> by_value;
  for (auto& j : dlq)
    by_value[j["value"].get<std::string>()] = j;
  ASSERT_EQ(by_value.count("poison"), 1u);
  ASSERT_EQ(by_value.count("flaky"), 1u);
  auto& p = by_value["poison"]["headers"];
  EXPECT_EQ(p["ferry-attempts"], "1");
  EXPECT_EQ(p["ferry-error"], "bad payload");
  EXPECT_EQ(p["ferry-group"], group);
  EXPECT_EQ(p["ferry-original-topic"], "w");
  EXPECT_EQ(p["trace-id"], "t42");
  auto& f = by_value["flaky"]["headers"];
  EXPECT_EQ(f["ferry-attempts"], "3");
  EXPECT_EQ(f["ferry-error"], "transient failure 3");
  EXPECT_EQ(f["ferry-original-offset"], "2");
  EXPECT_EQ(by_value["flaky"]["key"], "c");
}

TEST(QueueWork, FerryctlWorkAcksDeadLettersRejectsAndExhaustedNacks) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "w", 1);
  produce_lines(broker, "w");
  ferry::test::temp_dir dir{"ferry-work"};
  auto script = write_script(dir);
  auto r = ctl(broker,
               {"work", "w", "--group", "wg", "--exec", "sh " + script, "--max-idle", "3s",
                "--max-attempts", "3", "--backoff-ms", "50", "--visibility-ms", "5000",
                "--concurrency", "2"},
               90s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto out = r.out;
  EXPECT_NE(out.find("w/0@0 attempt=1 key=a -> ack"), std::string::npos) << out;
  EXPECT_NE(out.find("w/0@1 attempt=1 key=b -> reject (bad payload) dead-letter"),
            std::string::npos)
    << out;
  EXPECT_NE(out.find("w/0@2 attempt=1 key=c -> nack (transient failure 1) retry in"),
            std::string::npos)
    << out;
  EXPECT_NE(out.find("w/0@2 attempt=3 key=c -> nack (transient failure 3) dead-letter after 3 "
                     "attempts"),
            std::string::npos)
    << out;
  EXPECT_NE(out.find("w/0@4 attempt=1 key=e -> ack"), std::string::npos) << out;
  // The environment the command saw.
  auto seen = read_file(dir.path() / "seen.log");
  EXPECT_NE(seen.find("ok1 w 0 0 a 1 wg t42"), std::string::npos) << seen;
  EXPECT_NE(seen.find("flaky w 0 2 c 3 wg t42"), std::string::npos) << seen;
  check_dead_letters(dlq_records(broker, "w.wg.dlq", 2), "wg");
  // The group is done; its config came from the options.
  auto d = ctl(broker, {"--json", "group", "describe", "wg"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  auto g = json::parse(d.out, nullptr, false);
  ASSERT_FALSE(g.is_discarded()) << d.out;
  EXPECT_EQ(g["mode"], "queue");
  ASSERT_EQ(g["partitions"].size(), 1u);
  EXPECT_EQ(g["partitions"][0]["committed_offset"], 5);

  // The same script as a stream-mode worker: retries in the application,
  // then the DLQ, then the commit.
  auto s = ctl(broker,
               {"work", "w", "--group", "sg", "--mode", "stream", "--exec", "sh " + script,
                "--max-idle", "3s", "--max-attempts", "3", "--backoff-ms", "20"},
               90s);
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  EXPECT_NE(s.out.find("w/0@2 attempt=2 key=c -> failed (transient failure 2)"),
            std::string::npos)
    << s.out;
  EXPECT_NE(s.out.find("w/0@2 attempt=3 key=c -> dead-letter to w.sg.dlq/0@"),
            std::string::npos)
    << s.out;
  check_dead_letters(dlq_records(broker, "w.sg.dlq", 2), "sg");
  auto sd = ctl(broker, {"--json", "group", "describe", "sg"});
  auto sg = json::parse(sd.out, nullptr, false);
  ASSERT_FALSE(sg.is_discarded()) << sd.out << sd.err;
  ASSERT_EQ(sg["partitions"].size(), 1u);
  EXPECT_EQ(sg["partitions"][0]["committed_offset"], 5);
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// One worker over several topics (queue and stream mode): every record of
// each is processed, and a failure goes to its own topic's DLQ.
TEST(QueueWork, FerryctlWorkReadsSeveralTopicsWithOneMember) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "mail", 1);
  create_topic(broker, "text", 2);
  for (auto topic : {"mail", "text"}) {
    auto p = run_command(FERRYCTL_PATH,
                         {"--broker", broker.endpoint(), "produce", topic, "--key-separator",
                          ":"},
                         60s, "a:ok1\nb:poison\nc:ok2\n");
    ASSERT_EQ(p.exit_code, 0) << p.err;
  }
  const std::string cmd = "v=$(cat); [ \"$v\" = poison ] && exit 2; exit 0";
  for (std::string mode : {"queue", "stream"}) {
    auto group = mode + "-multi";
    auto r = ctl(broker,
                 {"work", "mail", "text", "--group", group, "--mode", mode, "--exec", cmd,
                  "--max-idle", "3s"},
                 90s);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.out << r.err;
    int acked = 0, failed = 0;
    std::set<std::string> topics;
    for (auto& l : lines_of(r.out)) {
      if (l.find(" -> ack") != std::string::npos || l.find(" -> ok") != std::string::npos)
        ++acked;
      if (l.find("dead-letter") != std::string::npos)
        ++failed;
      topics.insert(l.substr(0, l.find('/')));
    }
    EXPECT_EQ(acked, 4) << mode << ": " << r.out;
    EXPECT_EQ(failed, 2) << mode << ": " << r.out;
    EXPECT_EQ(topics, (std::set<std::string>{"mail", "text"})) << r.out;
    for (auto topic : {"mail", "text"}) {
      auto dlq = dlq_records(broker, std::string{topic} + "." + group + ".dlq", 1);
      ASSERT_EQ(dlq.size(), 1u) << topic;
      EXPECT_EQ(dlq[0]["value"], "poison");
    }
    auto d = ctl(broker, {"--json", "group", "describe", group});
    ASSERT_EQ(d.exit_code, 0) << d.err;
    auto g = json::parse(d.out, nullptr, false);
    ASSERT_FALSE(g.is_discarded()) << d.out;
    int64_t committed = 0;
    for (auto& p : g["partitions"])
      committed += p["committed_offset"].get<int64_t>();
    EXPECT_EQ(committed, 6) << d.out;
  }
  // A topic named twice, or one that does not exist, is refused up front.
  auto twice = ctl(broker, {"work", "mail", "mail", "--group", "x", "--exec", "true"});
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_NE(twice.err.find("named twice"), std::string::npos) << twice.err;
  auto unknown = ctl(broker, {"work", "mail", "nope", "--group", "x", "--exec", "true"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("unknown_topic"), std::string::npos) << unknown.err;
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// Every queue setting can be chosen from the command line (every backoff
// knob too), and `group describe` shows them; what cannot change is refused
// with its reason.
TEST(QueueWork, FerryctlWorkSetsOrderingBackoffCapAndDlqTopic) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "ord", 1);
  produce_lines(broker, "ord");
  auto r = ctl(broker,
               {"work", "ord", "--group", "og", "--exec", "exit 1", "--max-idle", "2s",
                "--max-attempts", "2", "--backoff-ms", "20", "--max-backoff-ms", "40",
                "--backoff-multiplier", "3", "--jitter", "0.25", "--ordering", "key",
                "--dlq-topic", "ord-dead"},
               90s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("dead-letter after 2 attempts"), std::string::npos) << r.out;
  auto d = ctl(broker, {"group", "describe", "og"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("Queue: max_attempts=2 backoff_ms=20..40 (x3, jitter 0.25)"),
            std::string::npos)
    << d.out;
  EXPECT_NE(d.out.find("ordering=key dlq=ord-dead"), std::string::npos) << d.out;
  // Every record failed twice: all five are in the chosen DLQ.
  auto list = ctl(broker, {"dlq", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("ord-dead"), std::string::npos) << list.out;
  EXPECT_EQ(dlq_records(broker, "ord-dead", 5).size(), 5u);
  // The DLQ topic of an existing group is fixed; ordering is for queue mode.
  auto fixed = ctl(broker, {"work", "ord", "--group", "og", "--exec", "true", "--max-idle",
                            "1s", "--dlq-topic", "elsewhere"});
  EXPECT_NE(fixed.exit_code, 0);
  EXPECT_NE(fixed.err.find("cannot be altered"), std::string::npos) << fixed.err;
  auto stream = ctl(broker, {"work", "ord", "--group", "sg2", "--mode", "stream", "--exec",
                             "true", "--ordering", "key"});
  EXPECT_NE(stream.exit_code, 0);
  EXPECT_NE(stream.err.find("--ordering is for --mode queue"), std::string::npos)
    << stream.err;
  auto bad = ctl(broker, {"work", "ord", "--group", "og", "--exec", "true", "--ordering",
                          "random"});
  EXPECT_NE(bad.exit_code, 0);
  // Backoff knobs out of range are refused by the command line.
  for (std::vector<std::string> knob : {std::vector<std::string>{"--jitter", "1.5"},
                                        {"--backoff-multiplier", "0.5"}}) {
    std::vector<std::string> args{"work", "ord", "--group", "og", "--exec", "true"};
    args.insert(args.end(), knob.begin(), knob.end());
    auto r2 = ctl(broker, args);
    EXPECT_NE(r2.exit_code, 0) << knob[0];
    EXPECT_NE(r2.err.find(knob[0]), std::string::npos) << r2.err;
  }
  // Altering one knob keeps the others.
  auto alter = ctl(broker, {"work", "ord", "--group", "og", "--exec", "true", "--max-idle",
                            "1s", "--jitter", "1"});
  EXPECT_EQ(alter.exit_code, 0) << alter.err;
  auto d2 = ctl(broker, {"group", "describe", "og"});
  EXPECT_NE(d2.out.find("backoff_ms=20..40 (x3, jitter 1)"), std::string::npos) << d2.out;
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// Issue 20: where a queue group starts, and moving it with reset-offsets.
TEST(QueueWork, FerryctlWorkStartsAtLatestOrATimeAndResetOffsetsMovesAQueueGroup) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "st", 1);
  ferry::test::temp_dir dir{"ferry-start"};
  auto seen = (dir.path() / "seen").string();
  auto work = [&](const std::string& group, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"work",  "st",   "--group", group, "--exec",
                                  "cat >> " + seen + "; echo >> " + seen,
                                  "--max-idle", "2s"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = ctl(broker, args, 60s);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto lines = lines_of(read_file(seen));
    std::filesystem::remove(seen);
    return lines;
  };
  auto produce = [&](const std::string& lines) {
    auto r = run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "produce", "st"}, 60s,
                         lines);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  produce("old1\nold2\n");
  // At latest: the two records there when the group first read are skipped,
  // and stay skipped when the group comes back.
  EXPECT_TRUE(work("late", {"--start", "latest"}).empty());
  auto d = ctl(broker, {"group", "describe", "late"});
  EXPECT_NE(d.out.find("start=latest"), std::string::npos) << d.out;
  produce("new1\nnew2\n");
  EXPECT_EQ(work("late"), (std::vector<std::string>{"new1", "new2"}));
  // From a time: what was produced after it.
  std::this_thread::sleep_for(50ms);
  auto cut = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
  std::this_thread::sleep_for(50ms);
  produce("new3\n");
  EXPECT_EQ(work("timed", {"--start", ferry::start_position_text(cut)}),
            (std::vector<std::string>{"new3"}));
  // reset-offsets moves a queue group like a stream group (dry run first).
  auto dry = ctl(broker, {"group", "reset-offsets", "late", "--topic", "st", "--to-offset",
                          "1", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("dry run"), std::string::npos) << dry.out;
  // Not moved: "late" takes only new3 (produced for "timed" above).
  EXPECT_EQ(work("late"), (std::vector<std::string>{"new3"}));
  auto reset = ctl(broker, {"group", "reset-offsets", "late", "--topic", "st", "--to-offset",
                            "1"});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  EXPECT_EQ(work("late"), (std::vector<std::string>{"old2", "new1", "new2", "new3"}));
  // A start that is not one is refused before anything is created.
  auto bad = ctl(broker, {"work", "st", "--group", "nope", "--exec", "true", "--start",
                          "yesterday"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--start 'yesterday'"), std::string::npos) << bad.err;
  auto stream_time = ctl(broker, {"work", "st", "--group", "sg", "--mode", "stream", "--exec",
                                  "true", "--start", "2026-12-01"});
  EXPECT_NE(stream_time.exit_code, 0);
  EXPECT_NE(stream_time.err.find("earliest or latest"), std::string::npos) << stream_time.err;
  auto nope = ctl(broker, {"group", "describe", "nope"});
  EXPECT_NE(nope.exit_code, 0) << nope.out;
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// Issue 20: delayed delivery across a SIGKILL. Two records carry a
// ferry-delay-ms header of 12 s (far more than the worker before the kill
// runs, even on a loaded machine), one does not: the worker before the kill gets
// only the undelayed one; after the restart the delayed ones come once each,
// and never before their time.
TEST(QueueWork, DelayedAndParkedRecordsSurviveASigkillAndComeNeitherEarlyNorTwice) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "dl", 1);
  ferry::test::temp_dir dir{"ferry-delay"};
  auto seen = (dir.path() / "seen").string();
  // Logs "ms offset value attempt"; "fail1" fails its first attempt.
  auto cmd = "v=$(cat); echo \"$(date +%s%3N) $FERRY_OFFSET $v $FERRY_ATTEMPT\" >> " + seen
             + "; [ \"$v\" = fail1 ] && [ \"$FERRY_ATTEMPT\" = 1 ] && exit 1; exit 0";
  auto work = [&](const std::string& idle, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"work", "dl", "--group", "dg", "--exec", cmd, "--max-idle",
                                  idle};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = ctl(broker, args, 60s);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  };
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
  };
  // Creates the group (key order, a fixed 8 s retry backoff) and reads the
  // (empty) topic.
  work("300ms", {"--ordering", "key", "--backoff-ms", "8000", "--max-backoff-ms", "8000",
                 "--jitter", "0"});
  auto t0 = now_ms();
  auto delayed = run_command(FERRYCTL_PATH,
                             {"--broker", broker.endpoint(), "produce", "dl", "--header",
                              "ferry-delay-ms=12000"},
                             60s, "late1\nlate2\n");
  ASSERT_EQ(delayed.exit_code, 0) << delayed.err;
  auto plain = run_command(FERRYCTL_PATH,
                           {"--broker", broker.endpoint(), "produce", "dl", "--key-separator",
                            ":"},
                           60s, "n:now1\np:fail1\np:after\n");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  work("1s");
  // now1 is done; fail1 failed once (retry in 8 s) and holds "after" (same
  // key) back; late1 and late2 are not due.
  auto before = lines_of(read_file(seen));
  ASSERT_EQ(before.size(), 2u) << read_file(seen);
  std::map<std::string, std::vector<std::pair<int64_t, int>>> runs; // value -> (ms, attempt)
  auto parse = [&](const std::vector<std::string>& lines) {
    runs.clear();
    for (auto& l : lines) {
      std::stringstream ss{l};
      int64_t at = 0;
      int attempt = 0;
      std::string off, value;
      ss >> at >> off >> value >> attempt;
      runs[value].emplace_back(at, attempt);
    }
  };
  parse(before);
  ASSERT_EQ(runs["now1"].size(), 1u) << read_file(seen);
  ASSERT_EQ(runs["fail1"].size(), 1u) << read_file(seen);
  auto failed_at = runs["fail1"][0].first;
  broker.kill9();
  ASSERT_TRUE(broker.restart(true)) << broker.output();
  // The pending delays are read again from the records themselves, the
  // retry time and attempts from the group's state.
  for (int i = 0; i < 60 && lines_of(read_file(seen)).size() < 6; ++i)
    work("1s");
  auto all = lines_of(read_file(seen));
  ASSERT_EQ(all.size(), 6u) << read_file(seen);
  parse(all);
  EXPECT_EQ(runs["now1"].size(), 1u) << read_file(seen);
  ASSERT_EQ(runs["fail1"].size(), 2u) << read_file(seen);
  EXPECT_EQ(runs["fail1"][1].second, 2) << read_file(seen);
  EXPECT_GE(runs["fail1"][1].first, failed_at + 8000) << "the retry came before its backoff";
  ASSERT_EQ(runs["after"].size(), 1u) << read_file(seen);
  EXPECT_EQ(runs["after"][0].second, 1);
  EXPECT_GE(runs["after"][0].first, runs["fail1"][1].first) << "the parked record overtook";
  for (auto v : {"late1", "late2"}) {
    ASSERT_EQ(runs[v].size(), 1u) << v << "\n" << read_file(seen);
    EXPECT_GE(runs[v][0].first, t0 + 12000) << v << " came before its time";
    EXPECT_EQ(runs[v][0].second, 1) << v << ": a delay is not an attempt";
  }
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (c) SIGTERM releases the worker's leases -------------------------------------------------

TEST(QueueWork, SigtermStopsTheWorkerAndReleasesItsLeases) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "slow", 1);
  auto p = run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "produce", "slow"},
                       60s, "only\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto w = ferry::test::child_process::start(
    FERRYCTL_PATH, {"--broker", broker.endpoint(), "work", "slow", "--group",
                    "sl", "--exec", "sleep 60", "--visibility-ms", "600000"});
  ASSERT_TRUE(w);
  // The lease is held once the group shows it.
  client_system cs;
  auto addr = ferry::parse_broker_address(broker.endpoint());
  ASSERT_TRUE(addr);
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  bool leased = false;
  auto deadline = steady::now() + 30s;
  while (!leased && steady::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    if (auto d = describe_queue(*cs.sys, conn, "sl"))
      for (auto& part : d->partitions)
        leased = leased || part.leased == 1;
  }
  ASSERT_TRUE(leased) << w->combined();
  w->signal(SIGTERM);
  auto status = w->wait_exit(20s);
  ASSERT_TRUE(status) << "ferryctl work did not stop";
  EXPECT_EQ(*status, 0) << w->combined();
  EXPECT_NE(w->err().find("1 leases released"), std::string::npos) << w->combined();
  // Another member gets the record at once (not after 10 minutes), as a
  // first attempt.
  ferry::queue_consumer_config c;
  c.group = "sl";
  c.topic = "slow";
  auto qa = ferry::spawn_queue_consumer(*cs.sys, c, conn);
  ASSERT_TRUE(qa);
  cs.track(*qa);
  caf::scoped_actor self{*cs.sys};
  std::vector<ferry::leased_message> got;
  self->request(*qa, 30s, ferry::receive_atom_v, int32_t{10}, int64_t{5000})
    .receive([&](std::vector<ferry::leased_message>& xs) { got = std::move(xs); },
             [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].message.value, "only");
  EXPECT_EQ(got[0].attempt, 1);
  self->request(*qa, 10s, ferry::ack_atom_v, ferry::make_ack(got[0], ferry::queue_ack_kind::ack))
    .receive([](ferry::queue_ack_response&) {},
             [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
  self->request(*qa, 10s, ferry::stop_atom_v).receive([](int64_t) {}, [](caf::error&) {});
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (d) the stream-mode retry-then-DLQ helper ----------------------------------------------

TEST(QueueWork, StreamDlqHelperRetriesThenDeadLettersWithHeaders) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "orders", 3);
  client_system cs;
  auto addr = ferry::parse_broker_address(broker.endpoint());
  ASSERT_TRUE(addr);
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  ferry::producer_config pcfg;
  pcfg.linger = 0ms;
  auto prod = ferry::spawn_producer(*cs.sys, pcfg, conn);
  ASSERT_TRUE(prod);
  cs.track(*prod);
  ferry::stream_dlq_config dcfg;
  dcfg.group = "billing";
  dcfg.retry.max_attempts = 4;
  dcfg.retry.initial_backoff = 10ms;
  dcfg.retry.max_backoff = 40ms;
  dcfg.seed = 7;
  ferry::stream_dlq helper{*cs.sys, conn, *prod, dcfg};
  EXPECT_EQ(helper.dlq_topic_for("orders"), "orders.billing.dlq");
  ferry::consumed_message m;
  m.topic = "orders";
  m.partition = ferry::partition_id{2};
  m.off = ferry::offset{41};
  m.has_key = true;
  m.key = "cust-9";
  m.value = "{\"amount\":-1}";
  m.timestamp = 1234;
  m.headers = {{"trace-id", "abc"}, {"ferry-error", "stale from an earlier DLQ"}};
  // Succeeds on the third attempt: processed, nothing written.
  std::vector<int32_t> attempts;
  auto ok = helper.process(m, [&](const ferry::consumed_message&, int32_t a) {
    attempts.push_back(a);
    return a < 3 ? ferry::handler_result::failure("busy") : ferry::handler_result::success();
  });
  ASSERT_TRUE(ok) << ferry::error_text(ok.error());
  EXPECT_TRUE(ok->processed);
  EXPECT_FALSE(ok->dead_lettered);
  EXPECT_EQ(attempts, (std::vector<int32_t>{1, 2, 3}));
  // Always fails: dead-lettered after 4 attempts.
  auto dead = helper.process(m, [](const ferry::consumed_message&, int32_t a) {
    return ferry::handler_result::failure("timeout #" + std::to_string(a));
  });
  ASSERT_TRUE(dead) << ferry::error_text(dead.error());
  EXPECT_TRUE(dead->dead_lettered);
  EXPECT_EQ(dead->attempts, 4);
  EXPECT_EQ(dead->report.topic, "orders.billing.dlq");
  EXPECT_EQ(dead->report.partition.value, 2); // source partition mod 3
  // Rejected: dead-lettered after one attempt.
  auto m2 = m;
  m2.off = ferry::offset{42};
  m2.partition = ferry::partition_id{0};
  int runs = 0;
  auto rej = helper.process(m2, [&](const ferry::consumed_message&, int32_t) {
    ++runs;
    return ferry::handler_result::dead_letter("schema violation");
  });
  ASSERT_TRUE(rej) << ferry::error_text(rej.error());
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(rej->dead_lettered);
  EXPECT_EQ(rej->report.partition.value, 0);
  // Stopping (cancel set) during a failing run: nothing is dead-lettered.
  std::atomic<bool> cancel{false};
  auto stopped = helper.process(
    m2,
    [&](const ferry::consumed_message&, int32_t) {
      cancel = true; // the worker is told to stop while this attempt runs
      return ferry::handler_result::failure("interrupted");
    },
    &cancel);
  ASSERT_TRUE(stopped) << ferry::error_text(stopped.error());
  EXPECT_TRUE(stopped->cancelled());
  EXPECT_EQ(stopped->attempts, 1);
  // What landed in the DLQ.
  auto dlq = read_all(*cs.sys, broker.endpoint(), "orders.billing.dlq", 3, 2, 30s);
  ASSERT_EQ(dlq.size(), 2u);
  std::map<std::string, ferry::consumed_message> by_offset;
  for (auto& d : dlq)
    by_offset[header(d, "ferry-original-offset")] = d;
  ASSERT_EQ(by_offset.count("41"), 1u);
  auto& d = by_offset["41"];
  EXPECT_EQ(d.partition.value, 2);
  EXPECT_EQ(d.key, "cust-9");
  EXPECT_EQ(d.value, m.value);
  EXPECT_EQ(d.timestamp, 1234);
  EXPECT_EQ(header(d, "ferry-original-topic"), "orders");
  EXPECT_EQ(header(d, "ferry-original-partition"), "2");
  EXPECT_EQ(header(d, "ferry-attempts"), "4");
  EXPECT_EQ(header(d, "ferry-error"), "timeout #4");
  EXPECT_EQ(header(d, "ferry-group"), "billing");
  EXPECT_EQ(header(d, "trace-id"), "abc");
  EXPECT_LE(std::stoll(header(d, "ferry-first-failure-ts")),
            std::stoll(header(d, "ferry-last-failure-ts")));
  int error_headers = 0;
  for (auto& h : d.headers)
    error_headers += h.key == "ferry-error" ? 1 : 0;
  EXPECT_EQ(error_headers, 1) << "the stale ferry-error header was kept";
  EXPECT_EQ(header(by_offset["42"], "ferry-attempts"), "1");
  EXPECT_EQ(header(by_offset["42"], "ferry-error"), "schema violation");
  // The DLQ keeps dead letters forever, like the queue coordinator's.
  auto t = ctl(broker, {"--json", "topic", "describe", "orders.billing.dlq"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  auto tj = json::parse(t.out, nullptr, false);
  ASSERT_FALSE(tj.is_discarded()) << t.out;
  EXPECT_EQ(tj["config"]["retention.ms"], -1) << t.out;
  EXPECT_EQ(tj["partitions"], 3) << t.out;
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (e) long runs keep their lease -------------------------------------------------------

TEST(QueueWork, FerryctlWorkExtendsTheLeaseOfALongRun) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "long", 1);
  auto p = run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "produce", "long"},
                       60s, "slow-one\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  // Visibility 1 s, the command takes 2.5 s: without extends the lease would
  // expire twice and the record come again.
  auto r = ctl(broker,
               {"work", "long", "--group", "lg", "--exec", "sleep 2.5; cat > /dev/null",
                "--visibility-ms", "1000", "--max-idle", "2s"},
               60s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("long/0@0 attempt=1 key=null -> ack"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("attempt=2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("extend failed"), std::string::npos) << r.out;
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

} // namespace
