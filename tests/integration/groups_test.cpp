// Consumer groups and broker restarts, with a real ferryd child process and
// the client library's producer and consumer actors in this process:
//   - a group member commits part of a topic, ferryd is SIGKILLed and
//     restarted, and a new member of the group resumes exactly at the
//     committed offsets (nothing before them again, nothing after missed);
//   - two groups on one topic each receive every message;
//   - a static member (group.instance.id) restarts within its session
//     timeout and gets its partitions back without a rebalance;
//   - SIGTERM under produce load: exit code 0, and after the restart every
//     acknowledged message is there once.
// What cli_test.cpp covers (ferryctl group consume/describe/reset, three
// members and a killed one, producer/consumer across a SIGKILL without a
// group) is not repeated here.
//
// Every wait is bounded; ferryd and ferryctl are always stopped
// (process.hpp), and the client actors are killed before their actor system
// goes away, even when an assertion returns early.

#include "client_system.hpp"
#include "process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

/// ferry::test::client_system plus spawning tracked producers and consumers.
struct client_system : ferry::test::client_system {

  ferry::producer_actor producer(const std::string& endpoint) {
    ferry::producer_config pcfg;
    pcfg.bootstrap = endpoint;
    pcfg.linger = 1ms;
    auto p = ferry::spawn_producer(*sys, pcfg);
    if (!p) {
      ADD_FAILURE() << ferry::error_text(p.error());
      return {};
    }
    return track(*p);
  }

  ferry::consumer_actor consumer(ferry::consumer_config ccfg) {
    auto c = ferry::spawn_consumer(*sys, std::move(ccfg));
    if (!c) {
      ADD_FAILURE() << ferry::error_text(c.error());
      return {};
    }
    return track(*c);
  }
};

/// A group member's settings for these tests.
ferry::consumer_config member_config(const std::string& endpoint, const std::string& group,
                                     const std::string& topic) {
  ferry::consumer_config c;
  c.bootstrap = endpoint;
  c.group_id = group;
  c.topics = {topic};
  c.auto_offset_reset = "earliest";
  c.session_timeout = 6000ms; // the broker's minimum
  c.heartbeat_interval = 500ms;
  c.max_poll_records = 100;
  return c;
}

ferry::test::command_result ctl(const ferryd_process& d, std::vector<std::string> args) {
  args.insert(args.begin(), {"--broker", d.endpoint()});
  return run_command(FERRYCTL_PATH, args, 60s);
}

void create_topic(const ferryd_process& d, const std::string& name, int partitions) {
  auto r = ctl(d, {"topic", "create", name, "--partitions", std::to_string(partitions)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

/// `ferryctl --json group describe`, or a discarded json value.
json describe_group(const ferryd_process& d, const std::string& group) {
  auto r = ctl(d, {"--json", "group", "describe", group});
  if (r.exit_code != 0)
    return json(json::value_t::discarded);
  return json::parse(r.out, nullptr, false);
}

/// Per partition: the committed offset `group describe` shows.
std::map<int32_t, int64_t> committed_offsets(const json& g) {
  std::map<int32_t, int64_t> out;
  if (g.is_discarded() || !g.contains("partitions"))
    return out;
  for (auto& p : g["partitions"])
    out[p["partition"].get<int32_t>()] = p["committed_offset"].get<int64_t>();
  return out;
}

/// Sends values "<prefix><i>" for i in [from, to) with keys "k<i % keys>",
/// up to 1000 in flight; the delivery reports in send order (offset -1 and
/// `errors` counted for a failure).
std::vector<ferry::delivery_report>
produce_range(caf::actor_system& sys, ferry::producer_actor prod, const std::string& topic,
              int from, int to, int keys, int& errors, std::string& first_error,
              const std::string& prefix = "v", std::atomic<int>* progress = nullptr) {
  caf::scoped_actor self{sys};
  using handle = decltype(self->request(prod, caf::infinite, ferry::produce_atom_v,
                                        ferry::client_message{}));
  std::deque<handle> pending;
  std::vector<ferry::delivery_report> out;
  auto wait_one = [&] {
    pending.front().receive(
      [&](ferry::delivery_report& r) {
        out.push_back(r);
        if (progress != nullptr)
          ++*progress;
      },
      [&](caf::error& e) {
        if (first_error.empty())
          first_error = ferry::error_text(e);
        ++errors;
        ferry::delivery_report failed;
        failed.off = ferry::offset{-1};
        out.push_back(failed);
      });
    pending.pop_front();
  };
  for (int i = from; i < to; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "k" + std::to_string(i % keys);
    m.value = prefix + std::to_string(i);
    pending.push_back(self->request(prod, 180s, ferry::produce_atom_v, std::move(m)));
    if (pending.size() >= 1000)
      wait_one();
  }
  while (!pending.empty())
    wait_one();
  return out;
}

/// One poll; an error fails the test and returns nothing.
std::vector<ferry::consumed_message> poll(caf::scoped_actor& self, ferry::consumer_actor c,
                                          int32_t max_wait_ms = 200) {
  std::vector<ferry::consumed_message> out;
  self->request(c, 30s, ferry::poll_atom_v, max_wait_ms)
    .receive([&](std::vector<ferry::consumed_message>& msgs) { out = std::move(msgs); },
             [&](caf::error& e) { ADD_FAILURE() << "poll: " << ferry::error_text(e); });
  return out;
}

bool commit(caf::scoped_actor& self, ferry::consumer_actor c) {
  bool ok = false;
  self->request(c, 30s, ferry::commit_atom_v)
    .receive([&](bool x) { ok = x; },
             [&](caf::error& e) { ADD_FAILURE() << "commit: " << ferry::error_text(e); });
  return ok;
}

/// Stops a consumer the way an application closes it (a dynamic member
/// commits with auto commit and leaves; a static member does not leave).
void stop_consumer(caf::scoped_actor& self, ferry::consumer_actor c) {
  self->request(c, 30s, ferry::stop_atom_v)
    .receive([](bool) {}, [](caf::error&) {});
}

std::set<int32_t> assigned(caf::scoped_actor& self, ferry::consumer_actor c) {
  std::set<int32_t> out;
  self->request(c, 10s, ferry::assign_atom_v)
    .receive(
      [&](std::vector<ferry::topic_partition>& tps) {
        for (auto& tp : tps)
          out.insert(tp.partition.value);
      },
      [](caf::error&) {});
  return out;
}

using partition_offset_key = std::pair<int32_t, int64_t>;

// -- (a) resume from the committed offsets after a SIGKILL ------------------------------

TEST(Groups, MemberResumesFromCommittedOffsetsAfterBrokerSigkill) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  constexpr int partitions = 3;
  create_topic(broker, "resume", partitions);
  client_system cs;
  caf::scoped_actor self{*cs.sys};
  auto prod = cs.producer(broker.endpoint());
  ASSERT_TRUE(prod);

  // What was acknowledged: (partition, offset) -> value.
  std::map<partition_offset_key, std::string> acked;
  auto record = [&](const std::vector<ferry::delivery_report>& reports, int from) {
    for (size_t k = 0; k < reports.size(); ++k)
      acked[{reports[k].partition.value, reports[k].off.value}] =
        "v" + std::to_string(from + static_cast<int>(k));
  };
  int errors = 0;
  std::string first_error;
  record(produce_range(*cs.sys, prod, "resume", 0, 3000, 30, errors, first_error), 0);
  ASSERT_EQ(errors, 0) << first_error;
  ASSERT_EQ(acked.size(), 3000u);

  // Part of the topic, on every partition, then a manual commit.
  auto cfg = member_config(broker.endpoint(), "resumers", "resume");
  cfg.enable_auto_commit = false;
  auto first = cs.consumer(cfg);
  ASSERT_TRUE(first);
  std::map<int32_t, int64_t> next; // per partition: one past the last polled
  size_t polled = 0;
  auto take = [&](const std::vector<ferry::consumed_message>& msgs) {
    for (auto& m : msgs) {
      auto p = m.partition.value;
      auto expect = next.count(p) != 0 ? next[p] : 0;
      ASSERT_EQ(m.off.value, expect) << "partition " << p << " skipped or repeated";
      ASSERT_EQ(m.value, (acked[{p, m.off.value}])) << p << "/" << m.off.value;
      next[p] = m.off.value + 1;
      ++polled;
    }
  };
  auto deadline = steady::now() + 60s;
  while ((polled < 1000 || next.size() < partitions) && steady::now() < deadline) {
    take(poll(self, first));
    if (HasFatalFailure())
      return;
  }
  ASSERT_GE(polled, 1000u);
  ASSERT_EQ(next.size(), static_cast<size_t>(partitions));
  ASSERT_LT(polled, 3000u) << "consumed everything: nothing left to resume";
  ASSERT_TRUE(commit(self, first));
  auto committed = next;
  // Polled but never committed: the resumed member must see these again.
  for (int i = 0; i < 2; ++i)
    take(poll(self, first));
  // The application dies: no commit, no leave.
  self->send_exit(first, caf::exit_reason::kill);

  EXPECT_EQ(committed_offsets(describe_group(broker, "resumers")), committed);
  broker.kill9();
  ASSERT_TRUE(broker.restart(true)) << broker.output();
  // Durable across the crash.
  ASSERT_EQ(committed_offsets(describe_group(broker, "resumers")), committed)
    << broker.output();

  // More messages after the restart (the producer reconnects by itself).
  record(produce_range(*cs.sys, prod, "resume", 3000, 3600, 30, errors, first_error), 3000);
  ASSERT_EQ(errors, 0) << first_error;
  ASSERT_EQ(acked.size(), 3600u);

  // "latest" would skip everything: only the committed offsets can make the
  // new member start where the old one committed.
  cfg.auto_offset_reset = "latest";
  auto second = cs.consumer(cfg);
  ASSERT_TRUE(second);
  size_t want = 0;
  for (auto& [po, value] : acked)
    if (po.second >= committed[po.first])
      ++want;
  std::map<partition_offset_key, std::string> resumed;
  std::map<int32_t, int64_t> first_seen;
  deadline = steady::now() + 60s;
  while (resumed.size() < want && steady::now() < deadline) {
    for (auto& m : poll(self, second)) {
      first_seen.emplace(m.partition.value, m.off.value);
      auto fresh = resumed.emplace(partition_offset_key{m.partition.value, m.off.value},
                                   m.value)
                     .second;
      EXPECT_TRUE(fresh) << "delivered twice: " << m.partition.value << "/" << m.off.value;
      EXPECT_GE(m.off.value, committed[m.partition.value])
        << "before the committed offset: " << m.partition.value << "/" << m.off.value;
    }
  }
  // Nothing more turns up.
  for (int i = 0; i < 3; ++i)
    for (auto& m : poll(self, second, 300))
      ADD_FAILURE() << "extra message " << m.partition.value << "/" << m.off.value;
  ASSERT_EQ(resumed.size(), want);
  for (auto& [p, off] : committed)
    EXPECT_EQ(first_seen[p], off) << "partition " << p << " did not resume at its commit";
  for (auto& [po, value] : resumed)
    EXPECT_EQ(value, acked[po]) << po.first << "/" << po.second;
  stop_consumer(self, second);
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (b) two groups, each gets everything --------------------------------------------

TEST(Groups, TwoGroupsOnOneTopicEachReceiveEveryMessage) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "fanout", 4);
  client_system cs;
  caf::scoped_actor self{*cs.sys};
  auto prod = cs.producer(broker.endpoint());
  ASSERT_TRUE(prod);
  int errors = 0;
  std::string first_error;
  produce_range(*cs.sys, prod, "fanout", 0, 2000, 40, errors, first_error);
  ASSERT_EQ(errors, 0) << first_error;

  auto a = cs.consumer(member_config(broker.endpoint(), "group-a", "fanout"));
  auto b = cs.consumer(member_config(broker.endpoint(), "group-b", "fanout"));
  ASSERT_TRUE(a && b);
  std::map<std::string, int> seen_a, seen_b;
  bool produced_more = false;
  std::vector<ferry::delivery_report> late;
  auto deadline = steady::now() + 90s;
  while ((seen_a.size() < 2500 || seen_b.size() < 2500) && steady::now() < deadline) {
    for (auto& m : poll(self, a, 100))
      ++seen_a[m.value];
    for (auto& m : poll(self, b, 100))
      ++seen_b[m.value];
    if (!produced_more && seen_a.size() >= 2000 && seen_b.size() >= 2000) {
      // Both are live members now: new messages reach both too.
      produced_more = true;
      late = produce_range(*cs.sys, prod, "fanout", 2000, 2500, 40, errors, first_error);
      ASSERT_EQ(errors, 0) << first_error;
    }
  }
  ASSERT_TRUE(produced_more);
  for (auto* seen : {&seen_a, &seen_b}) {
    EXPECT_EQ(seen->size(), 2500u);
    for (int i = 0; i < 2500; ++i) {
      auto v = "v" + std::to_string(i);
      auto it = seen->find(v);
      if (it == seen->end() || it->second != 1) {
        ADD_FAILURE() << v << " seen " << (it == seen->end() ? 0 : it->second) << " times by "
                      << (seen == &seen_a ? "group-a" : "group-b");
        break;
      }
    }
  }
  // Each group committed its own offsets (stop commits): lag 0 for both.
  stop_consumer(self, a);
  stop_consumer(self, b);
  for (auto group : {"group-a", "group-b"}) {
    auto g = describe_group(broker, group);
    ASSERT_FALSE(g.is_discarded()) << group;
    int64_t committed = 0;
    for (auto& p : g["partitions"]) {
      EXPECT_EQ(p["lag"], 0) << g.dump();
      committed += p["committed_offset"].get<int64_t>();
    }
    EXPECT_EQ(committed, 2500) << g.dump();
  }
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (c) static membership ----------------------------------------------------------

TEST(Groups, StaticMemberRestartKeepsPartitionsWithoutRebalance) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  constexpr int partitions = 4;
  create_topic(broker, "static", partitions);
  client_system cs;
  caf::scoped_actor self{*cs.sys};
  auto prod = cs.producer(broker.endpoint());
  ASSERT_TRUE(prod);

  auto static_config = [&](const std::string& instance) {
    auto c = member_config(broker.endpoint(), "statics", "static");
    c.group_instance_id = instance;
    c.session_timeout = 30000ms; // the restart below takes far less
    return c;
  };
  auto s1 = cs.consumer(static_config("instance-1"));
  auto s2 = cs.consumer(static_config("instance-2"));
  ASSERT_TRUE(s1 && s2);

  // Instance id -> (member id, partitions), as group describe shows them.
  struct view {
    int32_t generation = -1;
    std::string state;
    std::map<std::string, std::pair<std::string, std::set<int32_t>>> members;
  };
  auto look = [&] {
    view v;
    auto g = describe_group(broker, "statics");
    if (g.is_discarded() || !g.contains("members"))
      return v;
    v.generation = g["generation"].get<int32_t>();
    v.state = g["state"].get<std::string>();
    for (auto& m : g["members"]) {
      std::set<int32_t> parts;
      for (auto& tp : m["assignment"])
        parts.insert(tp["partition"].get<int32_t>());
      v.members[m["group_instance_id"].get<std::string>()] = {
        m["member_id"].get<std::string>(), parts};
    }
    return v;
  };
  auto settled = [&](const view& v, size_t members) {
    if (v.state != "Stable" || v.members.size() != members)
      return false;
    size_t n = 0;
    for (auto& [instance, m] : v.members) {
      if (m.second.empty())
        return false;
      n += m.second.size();
    }
    return n == partitions;
  };

  int errors = 0;
  std::string first_error;
  produce_range(*cs.sys, prod, "static", 0, 400, 40, errors, first_error);
  ASSERT_EQ(errors, 0) << first_error;
  std::set<std::string> seen;
  view before;
  auto deadline = steady::now() + 60s;
  while ((seen.size() < 400 || !settled(before, 2)) && steady::now() < deadline) {
    for (auto c : {s1, s2})
      for (auto& m : poll(self, c, 100))
        seen.insert(m.value);
    before = look();
  }
  ASSERT_TRUE(settled(before, 2)) << describe_group(broker, "statics").dump();
  ASSERT_EQ(seen.size(), 400u);
  ASSERT_EQ(assigned(self, s1), before.members["instance-1"].second);

  // instance-1 restarts: the old consumer closes (committing, not leaving)
  // and a new one with the same instance id joins well within the session
  // timeout.
  stop_consumer(self, s1);
  auto s1b = cs.consumer(static_config("instance-1"));
  ASSERT_TRUE(s1b);
  deadline = steady::now() + 30s;
  while (assigned(self, s1b).empty() && steady::now() < deadline) {
    poll(self, s1b, 100);
    poll(self, s2, 100);
  }
  auto after = look();
  ASSERT_TRUE(settled(after, 2)) << describe_group(broker, "statics").dump();
  EXPECT_EQ(after.generation, before.generation) << "the restart caused a rebalance";
  EXPECT_EQ(assigned(self, s1b), before.members["instance-1"].second);
  EXPECT_EQ(after.members["instance-1"].second, before.members["instance-1"].second);
  EXPECT_NE(after.members["instance-1"].first, before.members["instance-1"].first)
    << "the new consumer should have a new member id";
  EXPECT_EQ(after.members["instance-2"], before.members["instance-2"]);
  EXPECT_EQ(assigned(self, s2), before.members["instance-2"].second);

  // Both go on from the committed offsets: the new messages, each once.
  produce_range(*cs.sys, prod, "static", 400, 800, 40, errors, first_error);
  ASSERT_EQ(errors, 0) << first_error;
  std::map<std::string, int> again;
  size_t fresh = 0;
  deadline = steady::now() + 60s;
  while (fresh < 400 && steady::now() < deadline)
    for (auto c : {s1b, s2})
      for (auto& m : poll(self, c, 100)) {
        ++again[m.value];
        fresh += std::stoi(m.value.substr(1)) >= 400 ? 1 : 0;
      }
  EXPECT_EQ(fresh, 400u);
  for (auto& [v, n] : again) {
    EXPECT_GE(std::stoi(v.substr(1)), 400) << v << " delivered again after the restart";
    EXPECT_EQ(n, 1) << v;
  }
  EXPECT_EQ(look().generation, before.generation);

  // The control: a new member does cause a rebalance (a new generation).
  auto s3 = cs.consumer(member_config(broker.endpoint(), "statics", "static"));
  ASSERT_TRUE(s3);
  view grown;
  deadline = steady::now() + 60s;
  while (!settled(grown, 3) && steady::now() < deadline) {
    for (auto c : {s1b, s2, s3})
      poll(self, c, 100);
    grown = look();
  }
  ASSERT_TRUE(settled(grown, 3)) << describe_group(broker, "statics").dump();
  EXPECT_GT(grown.generation, before.generation);
  for (auto c : {s1b, s2, s3})
    stop_consumer(self, c);
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

// -- (d) SIGTERM under load -----------------------------------------------------------

TEST(Groups, SigtermUnderLoadExitsZeroAndKeepsEveryAcknowledgedMessage) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  create_topic(broker, "graceful", 3);
  client_system cs;
  caf::scoped_actor self{*cs.sys};
  auto prod = cs.producer(broker.endpoint());
  ASSERT_TRUE(prod);

  // A group with committed offsets too: they must survive as well.
  int errors = 0;
  std::string first_error;
  auto early = produce_range(*cs.sys, prod, "graceful", 0, 300, 50, errors, first_error);
  ASSERT_EQ(errors, 0) << first_error;
  auto reader = cs.consumer(member_config(broker.endpoint(), "graceful-readers", "graceful"));
  ASSERT_TRUE(reader);
  size_t read = 0;
  auto deadline = steady::now() + 60s;
  while (read < 300 && steady::now() < deadline)
    read += poll(self, reader, 100).size();
  ASSERT_EQ(read, 300u);
  stop_consumer(self, reader); // commits 300 and leaves
  auto committed = committed_offsets(describe_group(broker, "graceful-readers"));
  int64_t committed_total = 0;
  for (auto& [p, off] : committed)
    committed_total += off;
  ASSERT_EQ(committed_total, 300);

  // SIGTERM while a producer has many messages in flight.
  constexpr int total = 100000;
  std::atomic<int> progress{0};
  std::vector<ferry::delivery_report> reports;
  std::thread producing{[&] {
    reports = produce_range(*cs.sys, prod, "graceful", 300, 300 + total, 50, errors,
                            first_error, "v", &progress);
  }};
  deadline = steady::now() + 60s;
  while (progress < total / 10 && steady::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_LT(progress.load(), total) << "the producer finished before the SIGTERM";
  auto stopped = broker.stop(30s);
  auto acked_at_stop = progress.load();
  EXPECT_EQ(stopped, 0) << broker.output();
  ASSERT_TRUE(broker.restart(true)) << broker.output();
  producing.join();
  ASSERT_EQ(errors, 0) << first_error;
  EXPECT_GT(acked_at_stop, 0);

  // Everything acknowledged (before the stop, and after it through the
  // producer's reconnect and resend) is there once, at its reported offset.
  std::map<partition_offset_key, std::string> acked;
  for (size_t k = 0; k < early.size(); ++k)
    acked[{early[k].partition.value, early[k].off.value}] = "v" + std::to_string(k);
  for (size_t k = 0; k < reports.size(); ++k) {
    auto fresh = acked
                   .emplace(partition_offset_key{reports[k].partition.value,
                                                 reports[k].off.value},
                            "v" + std::to_string(300 + k))
                   .second;
    ASSERT_TRUE(fresh) << "offset reported twice: " << reports[k].partition.value << "/"
                       << reports[k].off.value;
  }
  ASSERT_EQ(acked.size(), static_cast<size_t>(300 + total));
  ferry::consumer_config all;
  all.bootstrap = broker.endpoint();
  all.topics = {"graceful"};
  all.auto_offset_reset = "earliest";
  all.max_poll_records = 5000;
  auto check = cs.consumer(all);
  ASSERT_TRUE(check);
  std::map<partition_offset_key, std::string> stored;
  deadline = steady::now() + 60s;
  while (stored.size() < acked.size() && steady::now() < deadline)
    for (auto& m : poll(self, check, 200)) {
      auto fresh =
        stored.emplace(partition_offset_key{m.partition.value, m.off.value}, m.value).second;
      ASSERT_TRUE(fresh) << "delivered twice: " << m.partition.value << "/" << m.off.value;
    }
  for (auto& m : poll(self, check, 500))
    ADD_FAILURE() << "unacknowledged extra " << m.partition.value << "/" << m.off.value << " "
                  << m.value;
  ASSERT_EQ(stored.size(), acked.size());
  EXPECT_TRUE(stored == acked) << "a stored value differs from what was acknowledged";
  // The group's offsets came through the shutdown as well.
  EXPECT_EQ(committed_offsets(describe_group(broker, "graceful-readers")), committed);
  stop_consumer(self, check);
  EXPECT_EQ(broker.stop(20s), 0) << broker.output();
}

} // namespace
