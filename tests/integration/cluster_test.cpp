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
//   4. Cluster.ClientsSendToPartitionLeadersDirectly: a producer and a
//      consumer bootstrapped with node 1 send to the other leaders directly
//      (node 1 relays nothing once their links are up; without routing it
//      does); when a leader moves off a live node, that node relays their
//      next requests and names the new leader, and they follow.
//
// Client bootstrap: the producer and consumers get the list of all three
// nodes ("h:p1,h:p2,h:p3"). The harness (starting the nodes, describe,
// producers, reading partitions, comparing logs on disk) is
// cluster_harness.hpp, shared with cluster_failover_test.cpp.
//
// Every wait is bounded (about 20-30 s) and a timeout fails with the cluster
// state (every node's cluster describe and the tail of its output). Every
// ferryd is killed when a test ends, also on failure (process.hpp), and the
// client actors are killed before their actor system goes away
// (client_system.hpp).

#include "acked_writes.hpp"
#include "client_system.hpp"
#include "cluster_harness.hpp"
#include "ferryctl_run.hpp"
#include "process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "broker/error.hpp"
#include "broker/partition_checkpoint.hpp"
#include "broker/consumer_state.hpp"
#include "broker/partitioner.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
using namespace ferry::test;
using ferry::test::client_system;
using ferry::test::ferryd_process;
using steady = std::chrono::steady_clock;

// Bounds of the waits. A failure is reported when one runs out.
constexpr auto ready_timeout = 20s;     // controller elected, nodes alive
constexpr auto placement_timeout = 20s; // leaders and full ISRs
constexpr auto rejoin_timeout = 30s;    // a restarted node back in the ISR
constexpr auto converge_timeout = 20s;  // replicas at the same log end
constexpr auto poll_step = 100ms;

bool contains(const std::vector<int32_t>& xs, int32_t x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
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
  auto bootstrap = c.endpoints();
  std::cout << "[cluster] client bootstrap " << bootstrap << "\n";
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
    for (int id = 1; id <= c.voters(); ++id) {
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

void acked_writes_survive_leader_kills(int32_t partitions, int kills,
                                       std::vector<std::string> node_args = {}) {
  auto t0 = steady::now();
  cluster c;
  c.add_node_args(node_args);
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "survive";
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions))
    << "not every partition got a leader and ISR {1,2,3}\n" << c.dump();
  leader_tracker leaders;
  if (auto cd = c.describe_controller())
    leaders.observe(*cd, topic, partitions);

  auto bootstrap = c.endpoints();
  std::cout << "[cluster] producer bootstrap " << bootstrap << "\n";
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

  // The replicas converge (same log end on every node, HW there too), and
  // every partition read back matches the ledger.
  auto found = check_acked_writes(c, topic, partitions, acked, converge_timeout);
  ASSERT_TRUE(found.why.empty()) << found.why;
  std::cout << "[cluster] sent " << sent << ", acked " << acked.size() << ", failed " << failed
            << ", records in the log " << found.in_log << " (not acked: "
            << found.unacked_in_log << "), missing " << found.missing << ", mismatched "
            << found.mismatched << ", duplicates " << found.duplicates << ", reordered "
            << found.reordered << "; acks slower than " << slow_ack.count()
            << " ms (held up by a failover) " << slow_acks << ", max ack latency "
            << max_latency.count() << " ms; leader changes observed " << leaders.changes
            << ", controller changes " << leaders.controller_changes
            << ", batch leader epochs in the log " << found.batch_epochs.size() << "\n";
  EXPECT_GE(leaders.changes, kills) << "each kill should have moved a leadership";

  // Stop cleanly and compare the replicas on disk up to the HW.
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << tail(c.node(id).output(), 3000);
  check_logs_on_disk(c, topic, partitions, found.hws);
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

TEST(Cluster, AckedWritesSurviveLeaderKills) {
  acked_writes_survive_leader_kills(1, 3);
}

TEST(Cluster, AckedWritesSurviveLeaderKillsThreePartitions) {
  acked_writes_survive_leader_kills(3, 3);
}

// Issue 15: replication across many partitions of each node (replicas on
// the shared scheduler, their syncs on the I/O threads, the producer's
// multi-partition requests) with partition leaders SIGKILLed.
TEST(Cluster, AckedWritesSurviveLeaderKillsFortyPartitions) {
  acked_writes_survive_leader_kills(40, 2);
}

// The same through the fetch sessions (ferryd --fetch-sessions=true: one
// multi-partition fetch per round from each follower node to each leader
// node, actors/server/fetch_session.hpp): every acknowledged write
// survives, the logs converge byte for byte.
TEST(Cluster, FetchSessionsKeepAckedWritesAcrossLeaderKills) {
  acked_writes_survive_leader_kills(40, 2, {"--fetch-sessions", "true"});
}

// --fetch-sessions auto (the default): follower replicas spawned once the
// metadata places --fetch-sessions-min-partitions replicas on a node fetch
// through one session per leader node; before that each long-polls on its
// own. Both replicate: acks=all answers need every follower of the ISR.
TEST(Cluster, FetchSessionsStartOnceANodeHoldsEnoughReplicas) {
  using namespace std::chrono_literals;
  cluster c;
  // __consumer_state's 8 partitions and the small topic stay below 40.
  c.add_node_args({"--fetch-sessions-min-partitions", "40"});
  ASSERT_CLUSTER_STARTED(c);
  auto sessions_started = [&c] {
    int n = 0;
    for (int id = 1; id <= 3; ++id)
      if (c.node(id).output().find("a fetch session to node") != std::string::npos)
        ++n;
    return n;
  };
  auto bootstrap = c.endpoints();
  auto prod = make_producer(c, bootstrap);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());

  auto why = c.create_topic("few", 4);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed("few", 4)) << c.dump();
  for (int i = 0; i < 4; ++i) {
    auto r = produce_one(*c.cs.sys, *prod, "few", "before-" + std::to_string(i));
    ASSERT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
  }
  EXPECT_EQ(sessions_started(), 0)
    << "a node with fewer than 40 partition replicas opened a fetch session\n" << c.dump();

  why = c.create_topic("many", 40);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed("many", 40)) << c.dump();
  for (int i = 0; i < 40; ++i) {
    auto r = produce_one(*c.cs.sys, *prod, "many", "after-" + std::to_string(i));
    ASSERT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
  }
  // Every node follows partitions led by the other two.
  EXPECT_TRUE(wait_until(10s, [&] { return sessions_started() == 3; }))
    << sessions_started() << " of 3 nodes opened fetch sessions\n" << c.dump();
  // The small topic's followers kept their long polls and still replicate.
  auto r = produce_one(*c.cs.sys, *prod, "few", "after");
  EXPECT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
}

// Every replica on the node journal (ferryd --journal on): followers and
// leaders ack after the journal round; killed leaders replay it.
TEST(Cluster, NodeJournalKeepsAckedWritesAcrossLeaderKills) {
  acked_writes_survive_leader_kills(40, 2, {"--journal", "on"});
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
  int follower = leader % c.voters() + 1;
  auto bootstrap = c.endpoints();
  std::cout << "[cluster] leader " << leader << ", killing follower " << follower
            << "; client bootstrap " << bootstrap << "\n";
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
                       << tail(c.node(id).output(), 3000);
  std::map<int, int64_t> log_ends;
  auto diff = compare_logs_on_disk(c, topic, 0, hw, log_ends);
  EXPECT_TRUE(diff.empty()) << diff;
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

namespace {

/// Every record of a stopped node's replica of topic-p, read from disk.
std::vector<log_record> records_on_disk(cluster& c, int id, const std::string& topic,
                                        int32_t p, std::string& why) {
  std::vector<log_record> out;
  auto dir = c.node(id).data_dir() / "topics" / (topic + "-" + std::to_string(p));
  ferry::memory_checkpoint cp;
  auto log = ferry::partition_log::open(dir, ferry::log_config{}, &cp);
  if (!log) {
    why = "open " + dir.string() + ": " + ferry::describe(log.error());
    return out;
  }
  auto at = (*log)->log_start();
  while (at < (*log)->log_end()) {
    auto r = (*log)->read(at, 1 << 20, (*log)->log_end());
    if (!r) {
      why = "read: " + ferry::describe(r.error());
      return out;
    }
    if (r->data.empty())
      break;
    if (!decode_batches(r->data, at.value, out, why))
      return out;
    at = r->next_offset;
  }
  return out;
}

std::map<std::string, std::string> latest_per_key(const std::vector<log_record>& recs,
                                                  bool& ordered) {
  std::map<std::string, std::string> m;
  ordered = true;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i > 0 && recs[i].off <= recs[i - 1].off)
      ordered = false;
    m[recs[i].key] = recs[i].value;
  }
  return m;
}

} // namespace

// Log compaction across replicas (issue 19): a follower that was down while
// its leader compacted copies the compacted log (with its gaps) and ends with
// the same latest values; after the leader is SIGKILLed the new leader goes
// on producing and compacting, the old one comes back and catches up, and
// all three replicas hold exactly the latest value of every key.
TEST(Cluster, CompactedPartitionStaysConsistentThroughLeaderChanges) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "table";
  ferry::topic_config tc;
  tc.cleanup_policy = 2; // compact
  tc.segment_ms = 100;
  tc.min_cleanable_dirty_ratio = 0.01;
  auto why = c.create_topic(topic, 1, 2, std::chrono::seconds{20}, tc);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  auto leader = c.leader_of(topic, 0);
  ASSERT_GE(leader, 1) << c.dump();
  int follower = leader % c.voters() + 1;
  c.kill(follower);
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  std::map<std::string, std::string> want;
  auto produce_round = [&](int round) {
    std::vector<ferry::client_message> msgs;
    for (int k = 0; k < 10; ++k) {
      ferry::client_message m;
      m.topic = topic;
      m.has_key = true;
      m.key = "k" + std::to_string(k);
      m.value = "r" + std::to_string(round) + "-k" + std::to_string(k);
      want[m.key] = m.value;
      msgs.push_back(std::move(m));
    }
    auto reports = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 45s,
                                                            ferry::produce_atom_v, msgs);
    return reports ? std::string{} : ferry::error_text(reports.error());
  };
  // Rounds in segments of their own (segment.ms 100), then one more to
  // close the last of them.
  for (int round = 0; round < 8; ++round) {
    auto err = produce_round(round);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
    std::this_thread::sleep_for(150ms);
  }
  ASSERT_TRUE(produce_round(8).empty()) << c.dump();
  // The leader compacts.
  bool cleaned = wait_until(30s, [&] {
    auto st = c.status(leader, topic, 0);
    return st && st->last_clean_ms > 0;
  });
  ASSERT_TRUE(cleaned) << "the leader did not clean\n" << c.dump();
  // The follower comes back and copies the compacted log.
  auto why2 = c.restart(follower);
  ASSERT_TRUE(why2.empty()) << why2 << "\n" << c.dump();
  bool caught_up = wait_until(rejoin_timeout, [&] {
    auto lead = c.status(leader, topic, 0);
    auto mine = c.status(follower, topic, 0);
    return lead && mine && mine->log_end == lead->log_end && mine->high_watermark == lead->high_watermark;
  });
  ASSERT_TRUE(caught_up) << c.dump();
  // SIGKILL the leader; the new one takes more updates and compacts too.
  c.kill(leader);
  int next_leader = -1;
  ASSERT_TRUE(wait_until(30s, [&] {
    next_leader = c.leader_of(topic, 0);
    return next_leader >= 1 && next_leader != leader;
  })) << c.dump();
  for (int round = 9; round < 13; ++round) {
    auto err = produce_round(round);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
    std::this_thread::sleep_for(150ms);
  }
  ASSERT_TRUE(produce_round(13).empty()) << c.dump();
  auto before = c.status(next_leader, topic, 0);
  ASSERT_TRUE(before);
  ASSERT_TRUE(wait_until(30s, [&] {
    auto st = c.status(next_leader, topic, 0);
    return st && st->last_clean_ms > before->last_clean_ms;
  })) << "the new leader did not clean\n" << c.dump();
  // The old leader comes back as a follower and catches up.
  auto why3 = c.restart(leader);
  ASSERT_TRUE(why3.empty()) << why3 << "\n" << c.dump();
  ASSERT_TRUE(wait_until(rejoin_timeout, [&] {
    auto lead = c.status(next_leader, topic, 0);
    if (!lead)
      return false;
    for (int id = 1; id <= c.voters(); ++id) {
      auto st = c.status(id, topic, 0);
      if (!st || st->log_end != lead->log_end || st->high_watermark != lead->high_watermark)
        return false;
    }
    return true;
  })) << c.dump();
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly";
  for (int id = 1; id <= c.voters(); ++id) {
    std::string err;
    auto recs = records_on_disk(c, id, topic, 0, err);
    ASSERT_TRUE(err.empty()) << "node " << id << ": " << err;
    bool ordered = false;
    EXPECT_EQ(latest_per_key(recs, ordered), want) << "node " << id;
    EXPECT_TRUE(ordered) << "node " << id;
    // 14 rounds of 10 keys were produced; compaction left far fewer.
    EXPECT_LT(recs.size(), 140u) << "node " << id;
  }
}

// The producer and the consumer send each partition's requests to its
// leader's node over connections of their own: bootstrapped with node 1
// only, once their leader links are up no node relays their produce or
// fetch requests (ferry_forwarded_requests_total, summed over the nodes),
// though two of the three partitions are led elsewhere. With
// route_to_leaders off they go through node 1, which relays.
TEST(Cluster, ClientsSendToPartitionLeadersDirectly) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "direct";
  auto why = c.create_topic(topic, 3);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 3)) << c.dump();
  ASSERT_TRUE(c.wait_registered()) << "not every node registered\n" << c.dump();
  std::set<int32_t> leaders;
  for (int32_t p = 0; p < 3; ++p)
    leaders.insert(c.leader_of(topic, p));
  ASSERT_TRUE(leaders.size() > 1 || *leaders.begin() != 1)
    << "every partition is led by node 1: nothing to route\n" << c.dump();
  auto forwarded = [&](const std::string& kind = "produce") {
    auto series = "ferry_forwarded_requests_total{kind=\"" + kind + "\"}";
    double sum = 0;
    for (int id = 1; id <= 3; ++id) {
      auto v = c.metric(id, series);
      if (!v)
        return -1.0;
      sum += *v;
    }
    return sum;
  };
  auto batch = [&](int n, int round) {
    std::vector<ferry::client_message> msgs;
    for (int i = 0; i < n; ++i) {
      ferry::client_message m;
      m.topic = topic;
      m.has_key = true;
      m.key = "key-" + std::to_string(i % 30);
      m.value = "r" + std::to_string(round) + "-" + std::to_string(i);
      msgs.push_back(std::move(m));
    }
    return msgs;
  };
  auto produce = [&](ferry::producer_actor prod, int n, int round,
                     std::set<int32_t>* parts = nullptr) {
    auto r = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, prod, 60s,
                                                      ferry::produce_atom_v, batch(n, round));
    if (!r)
      return ferry::error_text(r.error());
    if (parts)
      for (auto& d : *r)
        parts->insert(d.partition.value);
    return std::string{};
  };

  auto prod = make_producer(c, c.endpoint(1));
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  // Warm-up: the first requests go through node 1 while the links connect.
  double before = -1;
  int round = 0;
  bool settled = false;
  for (; round < 50 && !settled; ++round) {
    auto err = produce(*prod, 300, round);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
    auto now = forwarded();
    ASSERT_GE(now, 0) << "a node's /metrics did not answer\n" << c.dump();
    settled = now == before;
    before = now;
    if (!settled)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(settled) << "node 1 still relays after " << round << " rounds";
  std::cout << "[cluster] links up after " << round << " warm-up rounds, "
            << before << " produce requests relayed meanwhile\n";
  std::set<int32_t> parts;
  for (int i = 0; i < 10; ++i) {
    auto err = produce(*prod, 1000, 100 + i, &parts);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
  }
  EXPECT_EQ(parts.size(), 3u) << "keys should cover every partition";
  EXPECT_EQ(forwarded(), before) << "produce requests were relayed by a node";

  // The control: through node 1 only, it relays what others lead.
  auto relayed = make_producer(c, c.endpoint(1), false);
  ASSERT_TRUE(relayed) << ferry::error_text(relayed.error());
  for (int i = 0; i < 3; ++i) {
    auto err = produce(*relayed, 1000, 200 + i);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
  }
  auto after = forwarded();
  EXPECT_GE(after - before, 3.0) << "route_to_leaders=false should go through node 1";
  std::cout << "[cluster] without routing node 1 relayed " << after - before
            << " produce requests\n";

  // Consumers: read everything from the start through node 1, then what
  // comes next (long polls parked at the leaders).
  auto consumer = [&](bool route) {
    ferry::consumer_config cc;
    cc.auto_offset_reset = "earliest";
    cc.enable_auto_commit = false;
    cc.request_timeout = 5s;
    cc.route_to_leaders = route;
    for (int32_t p = 0; p < 3; ++p)
      cc.partitions.push_back(ferry::topic_partition{topic, ferry::partition_id{p}});
    auto cons = ferry::spawn_consumer(*c.cs.sys, cc, client_connection(c, c.endpoint(1)));
    if (cons)
      c.cs.track(*cons);
    return cons;
  };
  caf::scoped_actor self{*c.cs.sys};
  auto read = [&](ferry::consumer_actor cons, size_t want) {
    size_t got = 0;
    auto deadline = steady::now() + 30s;
    while (got < want && steady::now() < deadline)
      self->request(cons, 10s, ferry::poll_atom_v, int32_t{300})
        .receive([&](std::vector<ferry::consumed_message>& xs) { got += xs.size(); },
                 [&](caf::error&) { std::this_thread::sleep_for(100ms); });
    return got;
  };
  size_t total = static_cast<size_t>(round) * 300 + 13000;
  auto cons = consumer(true);
  ASSERT_TRUE(cons) << ferry::error_text(cons.error());
  ASSERT_EQ(read(*cons, total), total) << c.dump();
  // Settled once a round of new records is read without a relay.
  double fetches = forwarded("fetch");
  settled = false;
  int rounds = 0;
  for (; rounds < 50 && !settled; ++rounds) {
    auto err = produce(*prod, 300, 1000 + rounds);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_EQ(read(*cons, 300), 300u) << c.dump();
    total += 300;
    auto now = forwarded("fetch");
    ASSERT_GE(now, 0) << "a node's /metrics did not answer\n" << c.dump();
    settled = now == fetches;
    fetches = now;
    if (!settled)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(settled) << "fetches still relayed after " << rounds << " rounds";
  std::cout << "[cluster] consumer read " << total << " records, " << fetches
            << " fetches relayed meanwhile (" << rounds << " rounds)\n";
  for (int i = 0; i < 3; ++i) {
    auto err = produce(*prod, 300, 300 + i);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_EQ(read(*cons, 300), 300u) << c.dump();
  }
  EXPECT_EQ(forwarded("fetch"), fetches) << "fetches were relayed by a node";
  auto plain = consumer(false);
  ASSERT_TRUE(plain) << ferry::error_text(plain.error());
  ASSERT_EQ(read(*plain, total + 900), total + 900) << c.dump();
  EXPECT_GE(forwarded("fetch") - fetches, 2.0)
    << "route_to_leaders=false should fetch through node 1";
  caf::anon_send_exit(*plain, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*relayed, caf::exit_reason::user_shutdown);

  // The leader moves while its old node lives on: a partition led by node
  // L != 1 is reassigned to the two other nodes. The clients' next requests
  // still go to L, which relays them and names the new leader (or, caught
  // in the handover, answers not_leader, and they look the leader up);
  // after that nothing is relayed any more.
  int32_t moved = -1, old_leader = -1;
  for (int32_t p = 0; p < 3 && moved < 0; ++p)
    if (auto l = c.leader_of(topic, p); l != 1 && l > 0) {
      moved = p;
      old_leader = l;
    }
  ASSERT_GE(moved, 0) << c.dump();
  std::vector<int32_t> target;
  for (int32_t id = 1; id <= 3; ++id)
    if (id != old_leader)
      target.push_back(id);
  {
    auto pa = c.reassign(1, topic, moved, target);
    ASSERT_TRUE(pa) << ferry::error_text(pa.error()) << "\n" << c.dump();
  }
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe_controller();
    auto ps = cd ? find_partition(*cd, topic, moved) : nullptr;
    return ps && same_members(ps->replicas, target) && ps->leader != old_leader
           && ps->leader > 0 && ps->online;
  })) << "the move off node " << old_leader << " did not complete\n" << c.dump();
  auto produced_before = forwarded("produce");
  auto fetched_before = forwarded("fetch");
  settled = false;
  rounds = 0;
  double p_last = produced_before, f_last = fetched_before;
  for (; rounds < 50 && !settled; ++rounds) {
    auto err = produce(*prod, 300, 2000 + rounds);
    ASSERT_TRUE(err.empty()) << err << "\n" << c.dump();
    ASSERT_EQ(read(*cons, 300), 300u) << c.dump();
    auto p_now = forwarded("produce");
    auto f_now = forwarded("fetch");
    settled = rounds > 0 && p_now == p_last && f_now == f_last;
    p_last = p_now;
    f_last = f_now;
    if (!settled)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(settled) << "still relayed " << rounds << " rounds after the move\n"
                       << c.dump();
  std::cout << "[cluster] partition " << moved << " moved off node " << old_leader
            << " to leader " << c.leader_of(topic, moved) << ": "
            << p_last - produced_before << " produce and " << f_last - fetched_before
            << " fetch requests relayed until the clients followed (" << rounds
            << " rounds)\n";
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

/// A loopback TCP listener that stands in for a node which never speaks: it
/// accepts connections (and holds them) and counts them.
class silent_listener {
public:
  silent_listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
        || ::listen(fd_, 16) != 0
        || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return;
    port_ = ntohs(addr.sin_port);
  }
  silent_listener(const silent_listener&) = delete;
  silent_listener& operator=(const silent_listener&) = delete;
  ~silent_listener() {
    close();
  }
  uint16_t port() const {
    return port_;
  }
  /// Accepts connections until `want` were accepted (0: all that arrive)
  /// or `wait` passed; the number accepted so far.
  size_t accept_for(std::chrono::milliseconds wait, size_t want = 0) {
    auto until = steady::now() + wait;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now());
      if (fd_ < 0 || left.count() <= 0 || (want > 0 && accepted_.size() >= want))
        return accepted_.size();
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) > 0) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0)
          accepted_.push_back(c);
      }
    }
  }
  void close() {
    for (auto c : accepted_)
      ::close(c);
    accepted_.clear();
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::vector<int> accepted_;
};

// A client that comes right after the whole cluster restarted asks a node
// that has not caught up with the metadata yet: it must wait, not answer
// that the topic does not exist (the producer takes unknown_topic as
// final). Before the node held topic lists and describes until it was
// ready, `local-cluster.sh stop; start; ferryctl produce t` failed with
// "topic 't' does not exist" 2 of 2 times.
TEST(Cluster, TopicsAreKnownToClientsRightAfterAFullRestart) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "restarted";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  for (auto& [id, code] : c.stop_all())
    EXPECT_EQ(code, 0) << "node " << id << "\n" << c.node(id).output();
  for (int id = 1; id <= c.voters(); ++id) {
    auto again = c.restart(id);
    ASSERT_TRUE(again.empty()) << again;
  }
  // Node 3 has only just said "listening on".
  auto described = ferry::test::ferryctl(c.endpoint(3), {"topic", "describe", topic});
  EXPECT_EQ(described.exit_code, 0) << described.out << described.err << "\n" << c.dump();
  auto produced = ferry::test::ferryctl(c.endpoint(3), {"produce", topic}, "after the restart\n");
  EXPECT_EQ(produced.exit_code, 0) << produced.out << produced.err << "\n" << c.dump();
  EXPECT_NE(produced.out.find("produced 1 message"), std::string::npos) << produced.out;
}

// A topic created through one node is usable through the others at once.
// Their metadata trails the Raft leader's by about a heartbeat: a node asked
// about a topic it does not know waits a moment for it (ferryd's
// topic_wait, node_config), and the producer asks for a topic missing from
// a node's list by name. Before, on `deploy/local-cluster.sh start 3`,
// `ferryctl --broker <node 1> topic create t` followed by `ferryctl --broker
// <node 3> produce t` failed with "topic 't' does not exist" 8 of 8 times,
// a reset-offsets through node 2 18 of 24.
TEST(Cluster, ATopicIsUsableThroughEveryNodeRightAfterItsCreate) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  // Created through the Raft leader (it answers once it applied the topic),
  // used through the two followers.
  auto cd = c.describe_controller();
  ASSERT_TRUE(cd && cd->controller >= 1) << c.dump();
  int leader = cd->controller;
  int f1 = leader == 1 ? 2 : 1;
  int f2 = leader == 3 ? 2 : 3;
  for (int i = 0; i < 3; ++i) {
    auto t = "fresh-" + std::to_string(i);
    auto created = ferry::test::ferryctl(
      c.endpoint(leader), {"topic", "create", t, "--partitions", "2", "--replication-factor", "3"});
    ASSERT_EQ(created.exit_code, 0) << created.out << created.err << "\n" << c.dump();
    auto produced = ferry::test::ferryctl(c.endpoint(f2), {"produce", t}, "right after\n");
    EXPECT_EQ(produced.exit_code, 0) << t << ": " << produced.out << produced.err;
    EXPECT_NE(produced.out.find("produced 1 message"), std::string::npos) << produced.out;
    auto reset = ferry::test::ferryctl(
      c.endpoint(f1), {"group", "reset-offsets", "g-" + t, "--topic", t, "--to-earliest"});
    EXPECT_EQ(reset.exit_code, 0) << t << ": " << reset.out << reset.err;
    auto u = "described-" + std::to_string(i);
    created = ferry::test::ferryctl(
      c.endpoint(leader), {"topic", "create", u, "--partitions", "1", "--replication-factor", "3"});
    ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
    auto described = ferry::test::ferryctl(c.endpoint(f2), {"topic", "describe", u});
    EXPECT_EQ(described.exit_code, 0) << u << ": " << described.out << described.err;
    // A queue-mode group's first receive (ferryctl work) on a new topic.
    auto q = "queued-" + std::to_string(i);
    created = ferry::test::ferryctl(
      c.endpoint(leader), {"topic", "create", q, "--partitions", "1", "--replication-factor", "3"});
    ASSERT_EQ(created.exit_code, 0) << created.out << created.err;
    auto worked = ferry::test::ferryctl(
      c.endpoint(f1), {"work", q, "--group", "w-" + q, "--exec", "true", "--max-idle", "1s"});
    EXPECT_EQ(worked.exit_code, 0) << q << ": " << worked.out << worked.err;
  }
  // A topic that does not exist is still refused, once the wait is over.
  auto missing = ferry::test::ferryctl(c.endpoint(f1), {"produce", "no-such-topic"}, "x\n");
  EXPECT_NE(missing.exit_code, 0) << missing.out;
  EXPECT_NE(missing.err.find("unknown_topic"), std::string::npos) << missing.err;
  auto nothing = ferry::test::ferryctl(c.endpoint(f2), {"topic", "describe", "no-such-topic"});
  EXPECT_NE(nothing.exit_code, 0) << nothing.out;
  EXPECT_NE(nothing.err.find("unknown_topic"), std::string::npos) << nothing.err;
}

// One node of each pair dials first: two nodes that dial each other at the
// same moment can leave CAF's BASP routing tables disagreeing, after which
// one side's requests are never answered (node.hpp, "One dialer per pair").
// Node 1 (the lowest voter) dials neither node 2 nor node 3 on its own; node 3
// dials both; once node 3's probe arrived, node 1 links back to it (node 1
// sees node 3 alive without having waited for the fallback); node 2 never
// dials, so node 1 dials it after peer_dial_fallback (10 s). Node 2 is a
// silent listener, a different one in each node's --voters, which tells who
// dialed it.
TEST(Cluster, OneNodeOfEachPairDialsFirst) {
  auto t0 = steady::now();
  auto ports = free_tcp_ports(2);
  ASSERT_EQ(ports.size(), 2u);
  silent_listener node2_for_1, node2_for_3, node3_stand_in;
  ASSERT_NE(node2_for_1.port(), 0);
  ASSERT_NE(node2_for_3.port(), 0);
  ASSERT_NE(node3_stand_in.port(), 0);
  auto ep = [](uint16_t p) { return "127.0.0.1:" + std::to_string(p); };
  // Node 3's address in node 1's --voters is a listener first (does node 1
  // dial it?), then node 3 itself on the same port.
  const uint16_t p1 = ports[0];
  const uint16_t p3 = node3_stand_in.port();
  ferryd_process n1{{"--node-id", "1", "--voters",
                     "1@" + ep(p1) + ",2@" + ep(node2_for_1.port()) + ",3@" + ep(p3),
                     "--http-port", "-1"}};
  ASSERT_TRUE(n1.start(p1)) << n1.output();
  EXPECT_EQ(node2_for_1.accept_for(2s), 0u) << "node 1 dialed node 2 first";
  EXPECT_EQ(node3_stand_in.accept_for(10ms), 0u) << "node 1 dialed node 3 first";
  node3_stand_in.close();
  ferryd_process n3{{"--node-id", "3", "--voters",
                     "1@" + ep(p1) + ",2@" + ep(node2_for_3.port()) + ",3@" + ep(p3),
                     "--http-port", "-1"}};
  ASSERT_TRUE(n3.start(p3)) << n3.output();
  EXPECT_GE(node2_for_3.accept_for(10s, 1), 1u) << "node 3 did not dial node 2\n" << n3.output();

  client_system cs;
  ferry::connection_config cc;
  cc.host = "127.0.0.1";
  cc.port = p1;
  cc.connect_wait = 1s;
  auto link = cs.track(ferry::spawn_connection(*cs.sys, cc));
  bool alive = wait_until(20s, [&] {
    auto b = ask<ferry::broker_actor>(*cs.sys, link, 2s, ferry::connect_atom_v);
    if (!b)
      return false;
    auto cd = ask<ferry::cluster_description>(*cs.sys, *b, 3s, ferry::cluster_atom_v);
    if (!cd)
      return false;
    for (auto& n : cd->nodes)
      if (n.id == 3 && n.alive)
        return true;
    return false;
  });
  ASSERT_TRUE(alive) << "node 1 never saw node 3 alive\n" << n1.output() << "\n" << n3.output();
  EXPECT_EQ(n1.output().find("node 3 has not dialed this node"), std::string::npos)
    << "node 1 linked back to node 3 only after the fallback:\n" << n1.output();
  std::cout << "[cluster] node 1 sees node 3 alive at " << seconds_since(t0) << " s\n";
  // Node 2 never dials node 1: after the fallback node 1 dials it.
  EXPECT_GE(node2_for_1.accept_for(20s, 1), 1u) << "node 1 never dialed node 2\n" << n1.output();
  // The line is logged as the dial starts; the listener may accept before
  // this process has read it from node 1's stderr (seen once under load).
  EXPECT_TRUE(wait_until(5s, [&] {
    return n1.output().find("node 2 has not dialed this node for 10000 ms: dialing it")
           != std::string::npos;
  })) << n1.output();
  std::cout << "[cluster] node 1 dialed node 2 at " << seconds_since(t0) << " s\n";
  // The listeners go first: a connect stuck in CAF's handshake then fails.
  node2_for_1.close();
  node2_for_3.close();
  std::cout << "[cluster] test took " << seconds_since(t0) << " s\n";
}

// A node coordinates the groups whose __consumer_state partition it leads.
// `ferryctl group list` (and the console's group view) through any node
// lists every group of the cluster (before, only those coordinated by the
// node asked).
TEST(Cluster, GroupListThroughAnyNodeShowsEveryGroup) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "gl-t";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0)) << c.dump();
  std::vector<std::string> groups;
  for (int i = 0; i < 12; ++i)
    groups.push_back("gl-" + std::to_string(i));
  // Each group gets a committed offset the way a user gives one to an
  // empty group (its home may still be starting its coordinator: retried).
  for (auto& g : groups) {
    ferry::test::command_result r;
    bool done = wait_until(30s, [&] {
      r = ferry::test::ferryctl(c.endpoint(1),
                                {"group", "reset-offsets", g, "--topic", topic, "--to-earliest"});
      return r.exit_code == 0;
    }, 300ms);
    ASSERT_TRUE(done) << "reset-offsets " << g << ": " << r.out << r.err << "\n" << c.dump();
  }
  // Their homes: the leaders of their __consumer_state partitions.
  std::set<int> homes;
  {
    auto cd = c.describe_controller();
    ASSERT_TRUE(cd) << c.dump();
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    ASSERT_TRUE(st && !st->partitions.empty()) << render(*cd, true);
    for (auto& g : groups) {
      auto p = ferry::partition_for_key(g, static_cast<int32_t>(st->partitions.size()));
      auto ps = find_partition(*cd, ferry::consumer_state_topic, p);
      ASSERT_TRUE(ps && ps->leader >= 1) << render(*cd, true);
      homes.insert(ps->leader);
    }
  }
  ASSERT_GE(homes.size(), 2u) << "the groups' coordinators are all on one node: the test "
                                 "would not tell a node's own list from the cluster's";
  for (int id = 1; id <= c.voters(); ++id) {
    std::set<std::string> listed;
    bool all = wait_until(20s, [&] {
      auto j = ferry::test::ferryctl_json_or_null(c.endpoint(id), {"group", "list"});
      if (!j.is_array())
        return false;
      listed.clear();
      for (auto& g : j)
        listed.insert(g.value("group", std::string{}));
      return std::all_of(groups.begin(), groups.end(),
                         [&](auto& g) { return listed.count(g) > 0; });
    }, 300ms);
    std::string seen;
    for (auto& g : listed)
      seen += " " + g;
    EXPECT_TRUE(all) << "group list through node " << id << " lists only:" << seen;
  }
}

} // namespace
