// Failover of a three-node cluster (cluster_harness.hpp: three ferryd
// processes with --voters, driven by the client library in this process).
//   1. ClusterFailover.GroupKeepsCommittedOffsetsWhenItsCoordinatorDies:
//      3000 keyed acks=all messages on 3 partitions (RF 3); a group member
//      polls about half and commits them (manual commit), then dies. The
//      group's coordinator - the leader of partition
//      partition_for_key(group, n) of __consumer_state (n from the cluster
//      describe) - is SIGKILLed. Through the survivors the committed offsets
//      are still there (never lower than before), and a new member of the
//      group (auto.offset.reset=latest, so only the committed offsets can
//      make it start right) receives every message from them to the end.
//      The killed node restarts and the cluster is whole again.
//   2. ClusterFailover.IsolatedLeaderStopsTakingWritesAndTruncatesAfterHealing:
//      the leader L of a partition (RF 3, min.insync 2) is frozen with
//      SIGSTOP (a frozen process: it neither sends nor answers; its peers'
//      CAF connection timeouts fire, the controller fences it and moves the
//      leadership; real network partitions of a running leader, symmetric
//      and one-way, are in cluster_partition_test.cpp). The majority takes 100 more acks=all writes.
//      L is resumed with SIGCONT and a client connected only to L sends a
//      produce at once: it must not be acknowledged. L rejoins as a
//      follower, drops what it appended on its own, and the three replicas
//      hold exactly the 300 acknowledged messages, byte for byte.
//   ClusterFailover.ACompactedConsumerStateReplaysOnlyTheLiveOffsets: a
//      group commits 24,000 times; once its compacted __consumer_state
//      partition was cleaned, its leader is SIGKILLed and restarted and
//      replays under 500 records (partition_status::replayed_records), and
//      the group's last offsets are intact.
// Every wait is bounded; every ferryd is killed when the test ends, also on
// failure. FERRY_TEST_LOG_LEVEL=debug gives the nodes --log-level debug.

#include "cluster_harness.hpp"

#include "actors/client/consumer.hpp"
#include "broker/consumer_state.hpp"
#include "broker/partitioner.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/sec.hpp>
#include <caf/io/middleman.hpp>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <regex>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using steady = std::chrono::steady_clock;

/// Sends `msgs` in bulk requests of up to 500 (each must succeed); the
/// delivery reports in order, or nullopt (and `why`).
std::optional<std::vector<ferry::delivery_report>>
produce_all(cluster& c, ferry::producer_actor prod, const std::vector<ferry::client_message>& msgs,
            std::string& why) {
  std::vector<ferry::delivery_report> out;
  for (size_t i = 0; i < msgs.size(); i += 500) {
    std::vector<ferry::client_message> chunk(msgs.begin() + static_cast<ptrdiff_t>(i),
                                             msgs.begin()
                                               + static_cast<ptrdiff_t>(
                                                 std::min(msgs.size(), i + 500)));
    auto r = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, prod, 60s,
                                                      ferry::produce_atom_v, chunk);
    if (!r) {
      why = "produce of messages " + std::to_string(i) + "..: " + ferry::error_text(r.error());
      return std::nullopt;
    }
    out.insert(out.end(), r->begin(), r->end());
  }
  return out;
}

std::vector<ferry::client_message> make_messages(const std::string& topic, const std::string& prefix,
                                                 int n, int keys) {
  std::vector<ferry::client_message> out;
  for (int i = 0; i < n; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "k" + std::to_string(i % keys);
    m.value = prefix + std::to_string(i);
    out.push_back(std::move(m));
  }
  return out;
}

/// Committed offsets of `group` through node `id`: partition -> offset.
caf::expected<std::map<int32_t, int64_t>> fetch_committed(cluster& c, int id,
                                                          const std::string& group,
                                                          const std::string& topic) {
  auto b = c.broker(id);
  if (!b)
    return b.error();
  ferry::fetch_offsets_request req;
  req.group = group;
  auto r = ask<std::vector<ferry::partition_offset>>(*c.cs.sys, *b, 5s, ferry::offsets_atom_v,
                                                     req);
  if (!r)
    return r.error();
  std::map<int32_t, int64_t> out;
  for (auto& po : *r)
    if (po.topic == topic)
      out[po.partition.value] = po.committed.value;
  return out;
}

std::string render_offsets(const std::map<int32_t, int64_t>& m) {
  std::string out;
  for (auto& [p, off] : m)
    out += (out.empty() ? "" : " ") + std::string{"p"} + std::to_string(p) + "=" + std::to_string(off);
  return out;
}

// -- 1 ------------------------------------------------------------------------

TEST(ClusterFailover, GroupKeepsCommittedOffsetsWhenItsCoordinatorDies) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "orders";
  const std::string group = "failover-group";
  constexpr int32_t partitions = 3;
  constexpr int total = 3000;
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions)) << c.dump();
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0))
    << "__consumer_state not created with leaders and full ISRs\n" << c.dump();
  ASSERT_TRUE(c.wait_registered()) << "not every node registered within 20 s\n" << c.dump();

  // 3000 keyed messages, acks=all.
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto msgs = make_messages(topic, "v", total, 30);
  auto tp = steady::now();
  auto reports = produce_all(c, *prod, msgs, why);
  ASSERT_TRUE(reports) << why << "\n" << c.dump();
  std::map<std::pair<int32_t, int64_t>, std::string> acked; // (p, off) -> value
  std::map<int32_t, int64_t> log_end;                       // p -> one past the last
  for (size_t i = 0; i < reports->size(); ++i) {
    auto& r = (*reports)[i];
    ASSERT_TRUE(acked.emplace(std::make_pair(r.partition.value, r.off.value), msgs[i].value)
                  .second)
      << "two messages acknowledged at " << r.partition.value << "@" << r.off.value;
    log_end[r.partition.value] = std::max(log_end[r.partition.value], r.off.value + 1);
  }
  ASSERT_EQ(log_end.size(), static_cast<size_t>(partitions));
  std::cout << "[failover] " << total << " acked in " << seconds_since(tp) << " s ("
            << render_offsets(log_end) << ")\n";

  // A member polls about half and commits (manual commit).
  ferry::consumer_config cc;
  cc.bootstrap = c.endpoints();
  cc.group_id = group;
  cc.topics = {topic};
  cc.auto_offset_reset = "earliest";
  cc.enable_auto_commit = false;
  cc.session_timeout = 6000ms;
  cc.heartbeat_interval = 500ms;
  cc.max_poll_records = 100;
  cc.request_timeout = 5s;
  auto first = ferry::spawn_consumer(*c.cs.sys, cc);
  ASSERT_TRUE(first) << ferry::error_text(first.error());
  c.cs.track(*first);
  caf::scoped_actor self{*c.cs.sys};
  auto poll = [&](ferry::consumer_actor cons, int32_t wait_ms) {
    std::vector<ferry::consumed_message> out;
    self->request(cons, 10s, ferry::poll_atom_v, wait_ms)
      .receive([&](std::vector<ferry::consumed_message>& xs) { out = std::move(xs); },
               [&](caf::error& err) {
                 std::cout << "[failover] poll: " << ferry::error_text(err) << "\n";
                 std::this_thread::sleep_for(100ms);
               });
    return out;
  };
  std::map<int32_t, int64_t> next; // per partition: one past the last polled
  size_t polled = 0;
  auto deadline = steady::now() + 30s;
  while ((polled < total / 2 || next.size() < partitions) && steady::now() < deadline) {
    for (auto& m : poll(*first, 200)) {
      auto p = m.partition.value;
      auto expect = next.count(p) ? next[p] : 0;
      ASSERT_EQ(m.off.value, expect) << "partition " << p << " skipped or repeated";
      ASSERT_EQ(m.value, (acked[{p, m.off.value}])) << p << "@" << m.off.value;
      next[p] = m.off.value + 1;
      ++polled;
    }
  }
  ASSERT_GE(polled, static_cast<size_t>(total / 2)) << c.dump();
  ASSERT_EQ(next.size(), static_cast<size_t>(partitions)) << "not every partition polled";
  bool committed_ok = false;
  self->request(*first, 30s, ferry::commit_atom_v)
    .receive([&](bool ok) { committed_ok = ok; },
             [&](caf::error& err) { ADD_FAILURE() << "commit: " << ferry::error_text(err); });
  ASSERT_TRUE(committed_ok) << c.dump();
  auto committed = next;
  // Polled but never committed, then the application dies (no leave).
  for (int i = 0; i < 2; ++i)
    for (auto& m : poll(*first, 100))
      next[m.partition.value] = m.off.value + 1;
  self->send_exit(*first, caf::exit_reason::kill);

  // The coordinator: the leader of the group's __consumer_state partition.
  int coordinator = -1, state_partition = -1, state_partitions = 0;
  {
    auto cd = c.describe_controller();
    ASSERT_TRUE(cd) << c.dump();
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    ASSERT_TRUE(st && !st->partitions.empty()) << render(*cd, true);
    state_partitions = static_cast<int>(st->partitions.size());
    state_partition = ferry::partition_for_key(group, state_partitions);
    auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    ASSERT_TRUE(ps && ps->leader >= 1) << render(*cd, true);
    coordinator = ps->leader;
    std::cout << "[failover] group " << group << " lives in " << ferry::consumer_state_topic
              << "-" << state_partition << " (of " << state_partitions
              << "); coordinator = its leader, node " << coordinator << " (epoch "
              << ps->epoch.value << ", isr " << join_ids(ps->isr) << "); controller "
              << cd->controller << "\n";
  }
  auto recorded = fetch_committed(c, coordinator, group, topic);
  ASSERT_TRUE(recorded) << ferry::error_text(recorded.error()) << "\n" << c.dump();
  EXPECT_EQ(*recorded, committed) << "the coordinator does not show what the member committed";
  std::cout << "[failover] committed " << render_offsets(*recorded) << " (" << polled
            << " polled); SIGKILL node " << coordinator << " at " << seconds_since(t0)
            << " s\n";

  // SIGKILL the coordinator; the offsets through the survivors.
  auto tk = steady::now();
  c.kill(coordinator);
  std::vector<int> survivors;
  for (int id = 1; id <= c.voters(); ++id)
    if (id != coordinator)
      survivors.push_back(id);
  std::optional<std::map<int32_t, int64_t>> after;
  std::map<std::string, int> errors;
  int via = -1;
  wait_until(25s, [&] {
    for (auto id : survivors) {
      auto r = fetch_committed(c, id, group, topic);
      if (r) {
        after = std::move(*r);
        via = id;
        return true;
      }
      ++errors[ferry::error_text(r.error())];
    }
    return false;
  }, 200ms);
  for (auto& [text, n] : errors)
    std::cout << "[failover] offset fetch error x" << n << ": " << text << "\n";
  ASSERT_TRUE(after) << "no survivor answered an offset fetch within 25 s\n" << c.dump();
  std::cout << "[failover] offsets through node " << via << " after " << seconds_since(tk)
            << " s: " << render_offsets(*after) << "\n";
  if (auto cd = c.describe_controller())
    if (auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition))
      std::cout << "[failover] new coordinator: node " << ps->leader << " (epoch "
                << ps->epoch.value << ")\n";
  for (auto& [p, off] : *recorded) {
    auto i = after->find(p);
    ASSERT_TRUE(i != after->end()) << "partition " << p << " lost its committed offset "
                                   << off << "\n" << c.dump();
    EXPECT_GE(i->second, off) << "partition " << p << ": committed offset went back";
  }

  // 300 more messages after the failover, so every partition has some past
  // its committed offset (and the producer is seen to move on).
  auto later = make_messages(topic, "w", 300, 30);
  tp = steady::now();
  auto later_reports = produce_all(c, *prod, later, why);
  ASSERT_TRUE(later_reports) << why << "\n" << c.dump();
  for (size_t i = 0; i < later_reports->size(); ++i) {
    auto& r = (*later_reports)[i];
    ASSERT_TRUE(acked.emplace(std::make_pair(r.partition.value, r.off.value), later[i].value)
                  .second)
      << "two messages acknowledged at " << r.partition.value << "@" << r.off.value;
  }
  std::cout << "[failover] 300 more acked after the kill in " << seconds_since(tp) << " s\n";

  // A new member (latest: only the committed offsets make it start right)
  // receives everything from the committed offsets on.
  cc.auto_offset_reset = "latest";
  auto second = ferry::spawn_consumer(*c.cs.sys, cc);
  ASSERT_TRUE(second) << ferry::error_text(second.error());
  c.cs.track(*second);
  size_t want = 0;
  for (auto& [po, value] : acked)
    if (po.second >= (*after)[po.first])
      ++want;
  std::map<std::pair<int32_t, int64_t>, int> seen; // -> times delivered
  std::map<int32_t, int64_t> first_seen;
  size_t duplicates = 0, below_commit = 0, wrong = 0, in_range = 0;
  auto tc = steady::now();
  deadline = steady::now() + 30s;
  int quiet = 0;
  while ((in_range < want || quiet < 2) && steady::now() < deadline) {
    auto got = poll(*second, 300);
    quiet = got.empty() ? quiet + 1 : 0;
    for (auto& m : got) {
      auto key = std::make_pair(m.partition.value, m.off.value);
      first_seen.emplace(m.partition.value, m.off.value);
      if (++seen[key] > 1)
        ++duplicates;
      else if (m.off.value < (*after)[m.partition.value])
        ++below_commit;
      else
        ++in_range;
      auto a = acked.find(key);
      if (a == acked.end() || a->second != m.value)
        ++wrong;
    }
  }
  size_t missing = 0;
  for (auto& [po, value] : acked)
    if (po.second >= (*after)[po.first] && !seen.count(po))
      if (++missing <= 5)
        ADD_FAILURE() << "not received: " << po.first << "@" << po.second;
  std::cout << "[failover] new member received " << in_range << " of " << want
            << " from the committed offsets on in " << seconds_since(tc)
            << " s; missing " << missing << ", duplicates " << duplicates
            << ", below the committed offset " << below_commit << ", wrong " << wrong
            << "; first offsets " << render_offsets(first_seen) << "\n";
  EXPECT_EQ(missing, 0u) << c.dump();
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(below_commit, 0u) << "the new member started below the committed offsets";
  for (auto& [p, off] : *after) {
    if (acked.count({p, off})) {
      EXPECT_EQ(first_seen[p], off) << "partition " << p << " did not resume at its commit";
    }
  }
  self->request(*second, 10s, ferry::stop_atom_v).receive([](bool) {}, [](caf::error&) {});

  // The killed node comes back; the cluster is whole.
  auto tr = steady::now();
  why = c.restart(coordinator);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  EXPECT_TRUE(c.wait_ready(30s)) << "not all 3 nodes alive after the restart\n" << c.dump();
  EXPECT_TRUE(c.wait_placed(topic, partitions, 30s))
    << "node " << coordinator << " not back in every ISR of " << topic << "\n" << c.dump();
  std::cout << "[failover] node " << coordinator << " back, cluster whole after "
            << seconds_since(tr) << " s\n";
  if (auto cd = c.describe_controller())
    std::cout << "[failover] " << render(*cd);
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << tail(c.node(id).output(), 3000);
  std::cout << "[failover] test took " << seconds_since(t0) << " s\n";
}

// -- 2 ------------------------------------------------------------------------

/// The state letter of /proc/<pid>/stat ('T' when stopped), or '?'.
char process_state(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

/// Local time of day as the ferryd log shows it (HH:MM:SS.mmm).
std::string wall_clock() {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return buf;
}

/// The first `max` lines of `text` containing any of `words` and logged at
/// `since` (HH:MM:SS.mmm, as wall_clock()) or later.
std::string grep_lines(const std::string& text, std::vector<std::string> words,
                       const std::string& since, size_t max = 25) {
  std::istringstream in{text};
  std::string line, out;
  size_t n = 0, more = 0;
  while (std::getline(in, line)) {
    // Log lines start with "YYYY-MM-DD HH:MM:SS.mmm".
    if (line.size() < 23 || line.compare(11, 12, since) < 0)
      continue;
    for (auto& w : words)
      if (line.find(w) != std::string::npos) {
        if (++n <= max)
          out += "    " + line + "\n";
        else
          ++more;
        break;
      }
  }
  if (more > 0)
    out += "    ... " + std::to_string(more) + " more\n";
  return out;
}

TEST(ClusterFailover, IsolatedLeaderStopsTakingWritesAndTruncatesAfterHealing) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "isolated";
  auto why = c.create_topic(topic, 1, 2);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  // Every broker registered with the controller before one is cut off (a
  // node frozen before its registration is answered re-registers only
  // after that request's 5 s timeout).
  ASSERT_TRUE(c.wait_registered()) << "not every node registered within 20 s\n" << c.dump();

  // 200 acks=all writes through all nodes.
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto first_msgs = make_messages(topic, "a", 200, 10);
  auto first_reports = produce_all(c, *prod, first_msgs, why);
  ASSERT_TRUE(first_reports) << why << "\n" << c.dump();

  auto cd0 = c.describe_controller();
  ASSERT_TRUE(cd0) << c.dump();
  auto ps0 = find_partition(*cd0, topic, 0);
  ASSERT_TRUE(ps0 && ps0->leader >= 1) << render(*cd0);
  const int leader = ps0->leader;
  const int32_t epoch0 = ps0->epoch.value;
  std::vector<int> others;
  for (int id = 1; id <= c.voters(); ++id)
    if (id != leader)
      others.push_back(id);
  auto before = c.status(leader, topic, 0);
  ASSERT_TRUE(before) << ferry::error_text(before.error());
  std::cout << "[isolated] leader L = node " << leader << " in epoch " << epoch0
            << (cd0->controller == leader ? " (also the controller)" : "") << ", controller "
            << cd0->controller << ", L's log end " << before->log_end.value << ", hw "
            << before->high_watermark.value << "\n";

  // A client connected to L only, in its own actor system, whose connection
  // timeout outlasts the freeze (the default client gives up after 5 s of
  // silence): its connection to L stays open while L is frozen.
  caf::actor_system_config icfg;
  ferry::configure_client(icfg);
  icfg.set("middleman.connection-timeout", caf::timespan{120s});
  caf::actor_system isys{icfg};
  auto l_broker = isys.middleman().remote_actor<ferry::broker_actor>("127.0.0.1",
                                                                     c.port(leader));
  ASSERT_TRUE(l_broker) << "connect to L: " << ferry::error_text(l_broker.error());

  // The write L gets alone, after the majority moved on.
  ferry::record rec;
  rec.timestamp = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  rec.key = "isolated";
  rec.value = "isolated-write";
  auto batch = ferry::encode_batch(ferry::batch_meta{}, {rec});
  ASSERT_TRUE(batch) << ferry::describe(batch.error());
  ferry::produce_request isolated_req;
  isolated_req.topic = topic;
  isolated_req.partition = ferry::partition_id{0};
  isolated_req.acks = ferry::acks_mode::all;
  isolated_req.batch = *batch;

  // Partition L.
  auto stopped_at = wall_clock();
  c.freeze(leader);
  auto tf = steady::now();
  if (!wait_until(2s, [&] { return process_state(c.node(leader).pid()) == 'T'; }, 10ms)) {
    auto state = process_state(c.node(leader).pid());
    c.thaw(leader);
    GTEST_SKIP() << "SIGSTOP did not stop node " << leader << " (process state '" << state
                 << "'): cannot simulate a partition this way here";
  }
  std::cout << "[isolated] SIGSTOP node " << leader << " at " << seconds_since(t0) << " s ("
            << stopped_at << ")\n";

  // Both other nodes see a new leader in a higher epoch.
  int new_leader = -1;
  int32_t epoch1 = -1;
  std::string seen;
  bool moved = wait_until(15s, [&] {
    int agreed = 0;
    seen.clear();
    for (auto id : others) {
      auto cd = c.describe(id);
      if (!cd) {
        seen += "node " + std::to_string(id) + ": " + ferry::error_text(cd.error()) + "; ";
        continue;
      }
      auto ps = find_partition(*cd, topic, 0);
      if (!ps)
        continue;
      seen += "node " + std::to_string(id) + ": leader " + std::to_string(ps->leader)
              + " epoch " + std::to_string(ps->epoch.value) + " isr " + join_ids(ps->isr)
              + "; ";
      if (ps->leader >= 1 && ps->leader != leader && ps->epoch.value > epoch0
          && (agreed == 0 || (ps->leader == new_leader && ps->epoch.value == epoch1))) {
        new_leader = ps->leader;
        epoch1 = ps->epoch.value;
        ++agreed;
      }
    }
    return agreed == static_cast<int>(others.size());
  });
  ASSERT_TRUE(moved) << "no new leader within 15 s of freezing node " << leader << ": " << seen
                     << "\n" << c.dump();
  std::cout << "[isolated] after " << seconds_since(tf) << " s the majority has leader node "
            << new_leader << " in epoch " << epoch1 << " (" << seen << ")\n";

  // 100 more acks=all writes through the majority.
  auto majority = make_producer(c, c.endpoints(others));
  ASSERT_TRUE(majority) << ferry::error_text(majority.error());
  auto second_msgs = make_messages(topic, "b", 100, 10);
  auto second_reports = produce_all(c, *majority, second_msgs, why);
  ASSERT_TRUE(second_reports) << "the majority did not take writes: " << why << "\n"
                              << c.dump();
  std::cout << "[isolated] 100 more acked by the majority at " << seconds_since(t0) << " s\n";

  // Heal, and at once a produce to L through the client that knows only L.
  c.thaw(leader);
  auto th = steady::now();
  std::cout << "[isolated] SIGCONT node " << leader << " at " << wall_clock() << "\n";
  caf::scoped_actor iself{isys};
  std::optional<caf::expected<ferry::produce_response>> isolated;
  iself->request(*l_broker, 5s, ferry::produce_atom_v, isolated_req)
    .receive([&](ferry::produce_response& r) { isolated = r; },
             [&](caf::error& err) { isolated = err; });
  auto answered_after = seconds_since(th);
  // L's own replica right after.
  std::string l_state;
  iself->request(*l_broker, 3s, ferry::status_atom_v,
                 ferry::topic_partition{topic, ferry::partition_id{0}})
    .receive(
      [&](ferry::partition_status& s) {
        l_state = "leader " + std::to_string(s.leader) + " epoch "
                  + std::to_string(s.epoch.value) + " log_end "
                  + std::to_string(s.log_end.value) + " hw "
                  + std::to_string(s.high_watermark.value);
      },
      [&](caf::error& err) { l_state = "status failed: " + ferry::error_text(err); });
  ASSERT_TRUE(isolated.has_value());
  // Acknowledged below 300: L acked in its old epoch at its own log end
  // (200), where the majority already holds "b0": a lost write. Acknowledged
  // at 300 or later: L had already learned the new leader and forwarded the
  // produce there (a correct answer, but then this run did not catch L
  // alone; printed, and the record must be in the log).
  std::optional<int64_t> forwarded_at;
  if (*isolated && (*isolated)->base_offset.value < 300) {
    ADD_FAILURE() << "the isolated leader acknowledged a write at offset "
                  << (*isolated)->base_offset.value << " (answer after " << answered_after
                  << " s), where the majority holds acknowledged records";
  } else if (*isolated) {
    forwarded_at = (*isolated)->base_offset.value;
    std::cout << "[isolated] WARNING: the produce to L was acknowledged at offset "
              << *forwarded_at << " after " << answered_after
              << " s: L already followed the new leader and forwarded it; L was not "
                 "caught alone in this run\n";
  } else {
    std::cout << "[isolated] SIGCONT node " << leader << "; its produce was refused after "
              << answered_after << " s: " << ferry::error_text(isolated->error()) << "\n";
  }
  std::cout << "[isolated] L's replica right after: " << l_state << "\n";

  // L rejoins as a follower: ISR {1,2,3}, every log end equal.
  std::string state;
  int64_t hw = -1;
  bool healed = wait_until(20s, [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    auto ps = find_partition(*cd, topic, 0);
    if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
      return false;
    auto lead = c.status(ps->leader, topic, 0);
    if (!lead)
      return false;
    state = "leader " + std::to_string(ps->leader) + " epoch " + std::to_string(ps->epoch.value)
            + " hw " + std::to_string(lead->high_watermark.value) + "; log ends:";
    bool equal = lead->high_watermark == lead->log_end;
    for (int id = 1; id <= c.voters(); ++id) {
      auto st = c.status(id, topic, 0);
      if (!st)
        return false;
      state += " node " + std::to_string(id) + "=" + std::to_string(st->log_end.value);
      equal = equal && st->log_end == lead->log_end;
    }
    hw = lead->high_watermark.value;
    return equal;
  });
  ASSERT_TRUE(healed) << "node " << leader << " did not rejoin within 20 s: " << state << "\n"
                      << c.dump();
  std::cout << "[isolated] healed " << seconds_since(th) << " s after SIGCONT: " << state
            << "\n";
  // L's log end when it turned follower (its log says so) and now.
  std::smatch m;
  auto l_out = c.node(leader).output();
  static const std::regex turned{"partition " + topic + "/0: follower of node [0-9]+ in epoch "
                                 "[0-9]+ \\(log end ([0-9]+)\\)"};
  std::string l_end_then = "?";
  for (auto it = std::sregex_iterator(l_out.begin(), l_out.end(), turned);
       it != std::sregex_iterator(); ++it)
    l_end_then = (*it)[1].str();
  auto l_now = c.status(leader, topic, 0);
  std::cout << "[isolated] L's log end: " << before->log_end.value << " before the freeze, "
            << l_end_then << " when it turned follower after SIGCONT"
            << (l_end_then == "201" ? " (it had appended the isolated write)" : "") << ", "
            << (l_now ? std::to_string(l_now->log_end.value) : ferry::error_text(l_now.error()))
            << " after healing\n";
  for (int id : {leader, new_leader})
    std::cout << "[isolated] node " << id << " log lines since the SIGSTOP:\n"
              << grep_lines(c.node(id).output(),
                            {"partition " + topic, "of " + topic, "broker " + std::to_string(leader),
                             "link to node", "Raft leader", "regist"},
                            stopped_at);

  // Exactly the 300 acknowledged messages, in order (plus the produce to L
  // if it was forwarded and acknowledged by the new leader).
  std::vector<std::string> expected;
  for (auto& m : first_msgs)
    expected.push_back(m.value);
  for (auto& m : second_msgs)
    expected.push_back(m.value);
  if (forwarded_at && *forwarded_at == 300)
    expected.push_back("isolated-write");
  EXPECT_EQ(hw, static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < first_reports->size(); ++i)
    EXPECT_EQ((*first_reports)[i].off.value, static_cast<int64_t>(i));
  for (size_t i = 0; i < second_reports->size(); ++i)
    EXPECT_EQ((*second_reports)[i].off.value, static_cast<int64_t>(200 + i));
  auto reader = c.leader_of(topic, 0);
  auto recs = fetch_all(c, reader >= 1 ? reader : others.front(), topic, 0, hw, why);
  ASSERT_TRUE(recs) << why << "\n" << c.dump();
  ASSERT_EQ(recs->size(), expected.size());
  std::set<int32_t> epochs;
  for (size_t i = 0; i < recs->size(); ++i) {
    EXPECT_EQ((*recs)[i].off, static_cast<int64_t>(i));
    EXPECT_EQ((*recs)[i].value, expected[i]) << "at offset " << i;
    epochs.insert((*recs)[i].batch_epoch);
  }
  std::string epoch_list;
  for (auto e : epochs)
    epoch_list += " " + std::to_string(e);
  std::cout << "[isolated] read back " << recs->size() << " records, batch epochs" << epoch_list
            << "\n";

  // Stop and compare the replicas on disk.
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << tail(c.node(id).output(), 3000);
  std::map<int, int64_t> log_ends;
  auto diff = compare_logs_on_disk(c, topic, 0, hw, log_ends);
  EXPECT_TRUE(diff.empty()) << diff;
  for (auto& [id, end] : log_ends)
    EXPECT_EQ(end, hw) << "node " << id << " log end on disk";
  std::cout << "[isolated] test took " << seconds_since(t0) << " s\n";
}

} // namespace

// A produce (and a group request) that node R forwards to the leader L
// (the group's coordinator) when L stops answering
// (SIGSTOP: the request is in flight and never answered). CAF 0.17 never
// fails a request whose receiver's node went away, so R used to hold it
// until its 75 s forward timeout and the client until its request timeout
// (30 s by default), holding the producer's window for the partition. R now
// answers it as soon as its link to L goes down (about 3 s of silence), with
// an error that says the request may have been applied (a retry is
// deduplicated by sequence).
TEST(ClusterFailover, ForwardsToANodeThatStopsAnsweringFailWhenItsLinkGoesDown) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "forwarded";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  ASSERT_TRUE(c.wait_registered()) << "not every node registered within 20 s\n" << c.dump();
  const int leader = c.leader_of(topic, 0);
  ASSERT_GE(leader, 1) << c.dump();
  const int relay = leader % c.voters() + 1;
  auto r_broker = c.broker(relay);
  ASSERT_TRUE(r_broker) << ferry::error_text(r_broker.error());

  ferry::record rec;
  rec.timestamp = 1;
  rec.value = "forwarded";
  auto batch = ferry::encode_batch(ferry::batch_meta{}, {rec});
  ASSERT_TRUE(batch) << ferry::describe(batch.error());
  ferry::produce_request req;
  req.topic = topic;
  req.partition = ferry::partition_id{0};
  req.acks = ferry::acks_mode::all;
  req.batch = *batch;

  // Through R while L answers: relayed and acknowledged.
  caf::scoped_actor self{*c.cs.sys};
  std::string first;
  self->request(*r_broker, 20s, ferry::produce_atom_v, req)
    .receive([&](ferry::produce_response& r) { first = "leader " + std::to_string(r.leader); },
             [&](caf::error& err) { first = ferry::error_text(err); });
  ASSERT_EQ(first, "leader " + std::to_string(leader)) << c.dump();

  // A group that L coordinates (L leads its __consumer_state partition):
  // R forwards requests about it to L too.
  std::string group;
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    auto cs = find_topic(*cd, ferry::consumer_state_topic);
    if (!cs || cs->partitions.empty())
      return false;
    auto n = static_cast<int32_t>(cs->partitions.size());
    for (int i = 0; i < 1000 && group.empty(); ++i) {
      auto name = "g" + std::to_string(i);
      auto ps = find_partition(*cd, ferry::consumer_state_topic,
                               ferry::partition_for_key(name, n));
      if (ps && ps->leader == leader)
        group = name;
    }
    return !group.empty();
  })) << "no __consumer_state partition led by node " << leader << "\n" << c.dump();

  c.freeze(leader);
  if (!wait_until(2s, [&] { return process_state(c.node(leader).pid()) == 'T'; }, 10ms)) {
    auto state = process_state(c.node(leader).pid());
    c.thaw(leader);
    GTEST_SKIP() << "SIGSTOP did not stop node " << leader << " (process state '" << state
                 << "')";
  }
  auto tf = steady::now();
  // R still counts L as up for a few seconds: it forwards both, and L is
  // silent.
  std::optional<caf::error> answer;
  std::optional<caf::error> group_answer;
  bool acked = false;
  auto produced = self->request(*r_broker, 60s, ferry::produce_atom_v, req);
  auto described = self->request(*r_broker, 60s, ferry::describe_atom_v,
                                 ferry::group_atom_v, group);
  produced.receive([&](ferry::produce_response&) { acked = true; },
                   [&](caf::error& err) { answer = err; });
  described.receive([&](ferry::group_description&) { group_answer = caf::error{}; },
                    [&](caf::error& err) { group_answer = err; });
  auto waited = seconds_since(tf);
  c.thaw(leader);
  ASSERT_TRUE(group_answer);
  auto group_text = ferry::error_text(*group_answer);
  std::cout << "[forwarded] group " << group << " described through node " << relay << ": "
            << group_text << "\n";
  EXPECT_TRUE(group_text.find("went down before it answered") != std::string::npos
              || ferry::code_of(*group_answer) == ferry::ec::coordinator_not_available)
    << group_text;
  EXPECT_FALSE(acked) << "a frozen leader cannot have acknowledged it";
  ASSERT_TRUE(answer) << c.dump();
  EXPECT_NE(ferry::code_of(*answer), ferry::ec::none)
    << "no answer within the client's 60 s: " << ferry::error_text(*answer);
  // Either R knew L was gone before it forwarded (not_leader or the like),
  // or it forwarded and failed the request when the link went down.
  auto text = ferry::error_text(*answer);
  std::cout << "[forwarded] answered after " << waited << " s: " << text << "\n";
  EXPECT_TRUE(ferry::is_retriable(*answer)) << text;
  EXPECT_TRUE(text.find("went down before it answered") != std::string::npos
              || ferry::code_of(*answer) == ferry::ec::not_leader)
    << text;
}

// A coordinator stopped (SIGSTOP) long enough for the group to move on does
// not answer from its old state when it runs again (found by the chaos
// suite: committed offsets read through such a node went backwards). An
// offset fetch sent to it while it is stopped waits in its socket and is
// the first thing it reads on waking, before any heartbeat from the Raft
// leader: it must be refused (coordinator_not_available, the client
// retries) or answered with the new commit, never the old one.
TEST(ClusterFailover, ACoordinatorBackFromAPauseDoesNotServeOldOffsets) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "stalled";
  const std::string group = "stalled-group";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0)) << c.dump();
  ASSERT_TRUE(c.wait_registered()) << c.dump();
  int32_t state_partition = -1;
  auto coordinator = [&] {
    auto cd = c.describe_controller();
    auto st = cd ? find_topic(*cd, ferry::consumer_state_topic) : nullptr;
    if (!st || st->partitions.empty())
      return -1;
    state_partition = ferry::partition_for_key(group, static_cast<int32_t>(st->partitions.size()));
    auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    return ps ? ps->leader : -1;
  };
  const int old_home = coordinator();
  ASSERT_GE(old_home, 1) << c.dump();
  const int other = old_home == 1 ? 2 : 1;

  auto commit = [&](int via, int64_t off) {
    ferry::commit_offsets_request req;
    req.group = group;
    req.generation = -1;
    req.offsets.push_back(ferry::partition_offset{topic, ferry::partition_id{0},
                                                  ferry::offset{off}, ""});
    return wait_until(30s, [&] {
      auto b = c.broker(via);
      if (!b)
        return false;
      caf::scoped_actor self{*c.cs.sys};
      bool ok = false;
      self->request(*b, 10s, ferry::commit_atom_v, req)
        .receive([&] { ok = true; }, [&](caf::error&) {});
      return ok;
    }, 300ms);
  };
  ferry::fetch_offsets_request fetch;
  fetch.group = group;
  fetch.partitions.push_back(ferry::topic_partition{topic, ferry::partition_id{0}});
  ASSERT_TRUE(commit(old_home, 5)) << c.dump();

  auto stopped = c.broker(old_home);
  ASSERT_TRUE(stopped) << ferry::error_text(stopped.error());
  c.freeze(old_home);
  int new_home = -1;
  ASSERT_TRUE(wait_until(30s, [&] {
    new_home = coordinator();
    return new_home >= 1 && new_home != old_home;
  }, 300ms)) << "the group did not move off the stopped node " << old_home << "\n" << c.dump();
  ASSERT_TRUE(commit(other, 9)) << "no commit through node " << other << "\n" << c.dump();

  // Sent now, read by the stopped node first thing when it runs again.
  auto early = std::async(std::launch::async, [&] {
    return ask<std::vector<ferry::partition_offset>>(*c.cs.sys, *stopped, 15s,
                                                     ferry::offsets_atom_v, fetch);
  });
  std::this_thread::sleep_for(500ms);
  c.thaw(old_home);
  auto first = early.get();
  if (first) {
    ASSERT_EQ(first->size(), 1u);
    EXPECT_EQ(first->front().committed, ferry::offset{9})
      << "node " << old_home << " answered from before its pause";
  } else {
    // Refused, or never answered: while the node was stopped the client's
    // connection to it may have been dropped, and a request on a dropped
    // connection is lost (it times out). Neither serves an old offset;
    // what the node answers afterwards is checked below.
    EXPECT_TRUE(ferry::is(first.error(), ferry::ec::coordinator_not_available)
                || first.error() == caf::sec::request_timeout)
      << ferry::error_text(first.error());
  }
  // And whatever it answers afterwards is the new commit. It answers
  // coordinator_not_available for its quarantine (3 s or more) and until its
  // metadata caught up, which took over 8 s on a loaded CI machine (the
  // fresh-clone CI of 5b2d40e): watch up to 30 s, until a few answers came.
  int answered = 0;
  auto until = steady::now() + 30s;
  while (steady::now() < until && answered < 5) {
    auto b = c.broker(old_home);
    if (b) {
      auto r = ask<std::vector<ferry::partition_offset>>(*c.cs.sys, *b, 5s,
                                                         ferry::offsets_atom_v, fetch);
      if (r && r->size() == 1) {
        ++answered;
        EXPECT_EQ(r->front().committed, ferry::offset{9})
          << "node " << old_home << " answered from before its pause";
      }
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_GT(answered, 0) << "node " << old_home << " never answered again";
  std::cout << "[failover] group moved from node " << old_home << " to node " << new_home
            << "; the woken node's first answer: "
            << (first ? "offset " + std::to_string(first->front().committed.value)
                      : ferry::error_text(first.error()))
            << "\n";
}

// Issue 19: __consumer_state is compacted. A group commits 24,000 times
// (the state topic's segments made 1 MiB and rolled every second); once its
// state partition was cleaned, the coordinator (that partition's leader) is
// SIGKILLed and restarted: its replay reads a few dozen records, not
// 24,000, and every node still answers the last committed offsets.
TEST(ClusterFailover, ACompactedConsumerStateReplaysOnlyTheLiveOffsets) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "orders";
  const std::string group = "busy-committer";
  constexpr int32_t partitions = 4;
  constexpr int commits = 24'000;
  constexpr int threads = 8;
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions)) << c.dump();
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0))
    << "__consumer_state not created with leaders and full ISRs\n" << c.dump();
  // Created compacted; small, quickly rolled segments so the test fills
  // several.
  {
    auto cd = c.describe_controller();
    ASSERT_TRUE(cd) << c.dump();
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    ASSERT_TRUE(st) << render(*cd, true);
    EXPECT_EQ(st->config.cleanup_policy, 2) << "__consumer_state is not compact";
    EXPECT_EQ(st->config.segment_bytes, ferry::consumer_state_segment_bytes);
  }
  std::map<std::string, std::string> changes{{"segment.bytes", "1048576"},
                                             {"segment.ms", "1000"},
                                             {"min.cleanable.dirty.ratio", "0.1"}};
  ASSERT_TRUE(wait_until(30s, [&] {
    for (int id = 1; id <= c.voters(); ++id) {
      auto b = c.broker(id);
      if (!b)
        continue;
      if (ask<ferry::topic_metadata>(*c.cs.sys, *b, 10s, ferry::alter_atom_v,
                                     ferry::topic_atom_v,
                                     std::string{ferry::consumer_state_topic}, changes))
        return true;
    }
    return false;
  })) << c.dump();
  int coordinator = -1, state_partition = -1;
  auto find_coordinator = [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    if (!st || st->partitions.empty())
      return false;
    state_partition =
      ferry::partition_for_key(group, static_cast<int32_t>(st->partitions.size()));
    auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    coordinator = ps ? ps->leader : -1;
    return coordinator >= 1;
  };
  ASSERT_TRUE(wait_until(20s, find_coordinator)) << c.dump();
  auto b = c.broker(coordinator);
  ASSERT_TRUE(b) << ferry::error_text(b.error());
  auto commit_req = [&](int32_t p, int64_t off) {
    ferry::commit_offsets_request req;
    req.group = group;
    req.generation = -1;
    req.offsets.push_back(
      ferry::partition_offset{topic, ferry::partition_id{p}, ferry::offset{off}, ""});
    return req;
  };
  // 24,000 commits from 8 threads, each waiting for its commit's answer
  // (the order per partition is not fixed: the last values come below).
  std::atomic<int> failed{0};
  {
    std::vector<std::thread> committers;
    for (int t = 0; t < threads; ++t)
      committers.emplace_back([&, t] {
        caf::scoped_actor me{*c.cs.sys};
        for (int j = t; j < commits; j += threads)
          me->request(*b, 30s, ferry::commit_atom_v,
                      commit_req(j % partitions, j / partitions + 1))
            .receive([] {}, [&](caf::error&) { ++failed; });
      });
    for (auto& th : committers)
      th.join();
  }
  caf::scoped_actor self{*c.cs.sys};
  ASSERT_EQ(failed.load(), 0) << c.dump();
  // A segment.ms later: the last commits start a new segment, so all of the
  // above is in closed segments the cleaner may take.
  std::this_thread::sleep_for(1200ms);
  std::map<int32_t, int64_t> want;
  for (int32_t p = 0; p < partitions; ++p) {
    want[p] = 100'000 + p;
    std::optional<caf::error> answer;
    self->request(*b, 30s, ferry::commit_atom_v, commit_req(p, want[p]))
      .receive([&] { answer = caf::error{}; }, [&](caf::error& err) { answer = err; });
    ASSERT_TRUE(answer && !*answer) << ferry::error_text(answer ? *answer : caf::error{})
                                    << "\n" << c.dump();
  }
  // The leader cleans everything closed (the node journal may hold a
  // segment back up to its 30 s checkpoint).
  std::optional<ferry::partition_status> cleaned;
  ASSERT_TRUE(wait_until(90s, [&] {
    auto st = c.status(coordinator, ferry::consumer_state_topic, state_partition);
    if (!st || st->last_clean_ms <= 0 || st->dirty_ratio != 0)
      return false;
    cleaned = *st;
    return true;
  }, 500ms)) << "the state partition was not cleaned\n" << c.dump();
  std::cout << "[compacted] " << ferry::consumer_state_topic << "-" << state_partition
            << " on node " << coordinator << ": log " << cleaned->log_start.value << ".."
            << cleaned->log_end.value << ", " << cleaned->size_bytes << " bytes after "
            << commits + partitions << " commits\n";
  // SIGKILL the coordinator and bring it back on its data.
  c.kill(coordinator);
  auto why2 = c.restart(coordinator);
  ASSERT_TRUE(why2.empty()) << why2 << "\n" << c.dump();
  std::optional<ferry::partition_status> restarted;
  ASSERT_TRUE(wait_until(30s, [&] {
    auto st = c.status(coordinator, ferry::consumer_state_topic, state_partition);
    if (!st || st->replayed_records < 0)
      return false;
    restarted = *st;
    return true;
  }, 300ms)) << c.dump();
  std::cout << "[compacted] after the restart node " << coordinator << " replayed "
            << restarted->replayed_records << " records of "
            << ferry::consumer_state_topic << "-" << state_partition << "\n";
  // The live commits (4), the last batch of each cleaned file, the tail.
  EXPECT_GT(restarted->replayed_records, 0);
  EXPECT_LT(restarted->replayed_records, 500) << c.dump();
  // Every node answers the last offsets (the restarted one from its replay).
  for (int id = 1; id <= c.voters(); ++id) {
    std::map<int32_t, int64_t> got;
    bool same = wait_until(30s, [&] {
      auto r = fetch_committed(c, id, group, topic);
      if (!r)
        return false;
      got = *r;
      return got == want;
    }, 300ms);
    EXPECT_TRUE(same) << "node " << id << ": " << render_offsets(got) << ", want "
                      << render_offsets(want) << "\n" << c.dump();
  }
}
