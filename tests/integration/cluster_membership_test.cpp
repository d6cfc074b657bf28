// Adding and removing nodes while a partition serves traffic (multi-process,
// cluster_harness.hpp): three voters, then a broker-only node 4 (not in
// --voters) started later. It must show up in cluster describe (role broker,
// registered), take a replica of a partition by reassign while an idempotent
// acks=all producer keeps writing (the leader moves off node 1 within the
// ISR), and then leave again through remove-node (ferryctl cluster
// remove-node) while the producer still writes: its replica moves to a
// voter, its data is deleted, it disappears from describe. Afterwards every
// acknowledged record is readable exactly once at its acknowledged offset,
// and the final replicas' logs are identical on disk. Voters cannot be
// removed (clear error). All waits are bounded.
//
// TopicDeletedWhileANodeIsDownLeavesNothingOnItAfterRestart: a topic deleted
// while a voter is down is gone from that voter's disk once it restarted.

#include "cluster_harness.hpp"

#include <atomic>
#include <filesystem>
#include <optional>
#include <mutex>
#include <thread>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using steady = std::chrono::steady_clock;

const ferry::node_info* find_node(const ferry::cluster_description& cd, int32_t id) {
  for (auto& n : cd.nodes)
    if (n.id == id)
      return &n;
  return nullptr;
}

/// Writes to topic-0 in requests of 20 messages until stopped; keeps every
/// acknowledged (offset, value).
struct background_producer {
  cluster& c;
  ferry::producer_actor prod;
  std::string topic;
  std::atomic<bool> stop{false};
  std::mutex mtx;
  std::map<int64_t, std::string> acked;
  std::vector<std::string> errors;
  int sent = 0;
  std::thread th;

  background_producer(cluster& cl, ferry::producer_actor p, std::string t)
    : c(cl), prod(std::move(p)), topic(std::move(t)) {
  }

  void start() {
    th = std::thread([this] {
      while (!stop) {
        std::vector<ferry::client_message> chunk;
        for (int i = 0; i < 20; ++i) {
          ferry::client_message m;
          m.topic = topic;
          m.partition = 0;
          m.value = "m" + std::to_string(sent++);
          chunk.push_back(std::move(m));
        }
        auto r = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, prod, 60s,
                                                          ferry::produce_atom_v, chunk);
        std::lock_guard<std::mutex> guard{mtx};
        if (!r) {
          errors.push_back(ferry::error_text(r.error()));
          std::this_thread::sleep_for(100ms);
          continue;
        }
        for (size_t i = 0; i < r->size(); ++i)
          if (!acked.emplace((*r)[i].off.value, chunk[i].value).second)
            errors.push_back("two records acknowledged at " + std::to_string((*r)[i].off.value));
      }
    });
  }

  size_t count() {
    std::lock_guard<std::mutex> guard{mtx};
    return acked.size();
  }

  void finish() {
    stop = true;
    if (th.joinable())
      th.join();
  }

  ~background_producer() { finish(); }
};

} // namespace

TEST(ClusterMembership, BrokerOnlyNodeJoinsTakesAReplicaAndLeavesUnderLoad) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "moving";

  // -- a broker-only node joins -------------------------------------------------
  auto why = c.add_broker();
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_EQ(c.count(), 4);
  ASSERT_TRUE(wait_until(20s, [&] {
    for (int id : {1, 4}) {
      auto cd = c.describe(id);
      auto n = cd ? find_node(*cd, 4) : nullptr;
      if (!n || n->voter || !n->alive || n->metrics_port == 0 || cd->controller < 1)
        return false;
    }
    return true;
  })) << "node 4 is not registered as an alive broker-only node\n"
      << c.dump();
  {
    auto cd = c.describe(4);
    ASSERT_TRUE(cd);
    ASSERT_EQ(cd->nodes.size(), 4u) << render(*cd);
    for (auto& n : cd->nodes)
      EXPECT_EQ(n.voter, n.id <= 3) << "node " << n.id;
  }
  // ferryctl shows the role column.
  auto shown = run_command(FERRYCTL_PATH, {"--broker", c.endpoint(4), "cluster", "describe"}, 30s);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("ROLE"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("broker"), std::string::npos) << shown.out;
  std::cout << "[membership] node 4 joined at " << seconds_since(t0) << " s\n";

  why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  ASSERT_EQ(c.leader_of(topic, 0), 1) << c.dump();

  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  background_producer bg{c, *prod, topic};
  bg.start();
  ASSERT_TRUE(wait_until(15s, [&] { return bg.count() >= 200; })) << c.dump();

  // -- reassign onto node 4 while writing (asked through node 4) ----------------
  {
    auto pa = c.reassign(4, topic, 0, {2, 3, 4});
    ASSERT_TRUE(pa) << ferry::error_text(pa.error()) << "\n" << c.dump();
  }
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe(2);
    auto ps = cd ? find_partition(*cd, topic, 0) : nullptr;
    return ps && same_members(ps->replicas, {2, 3, 4}) && same_members(ps->isr, {2, 3, 4})
           && ps->leader >= 2 && ps->online;
  })) << "the move onto node 4 did not complete\n"
      << c.dump();
  auto at_move = bg.count();
  std::cout << "[membership] moved onto node 4 at " << seconds_since(t0) << " s (" << at_move
            << " acked so far)\n";
  ASSERT_TRUE(wait_until(15s, [&] { return bg.count() >= at_move + 200; }))
    << "no progress after the move\n"
    << c.dump();

  // -- voters cannot be removed ---------------------------------------------------
  auto voter = run_command(FERRYCTL_PATH,
                           {"--broker", c.endpoint(1), "cluster", "remove-node", "2"}, 30s);
  EXPECT_EQ(voter.exit_code, 1) << voter.out << voter.err;
  EXPECT_NE(voter.err.find("voter"), std::string::npos) << voter.err;

  // -- remove node 4 while writing ------------------------------------------------
  auto removed = run_command(FERRYCTL_PATH,
                             {"--broker", c.endpoints({1, 2, 3}), "--request-timeout", "20000",
                              "cluster", "remove-node", "4"},
                             40s);
  ASSERT_EQ(removed.exit_code, 0) << removed.out << removed.err << "\n" << c.dump();
  EXPECT_NE(removed.out.find("left the cluster"), std::string::npos) << removed.out;
  ASSERT_TRUE(wait_until(20s, [&] {
    for (int id = 1; id <= 3; ++id) {
      auto cd = c.describe(id);
      if (!cd || find_node(*cd, 4))
        return false;
      auto ps = find_partition(*cd, topic, 0);
      if (!ps || ps->replicas.size() != 3 || !same_members(ps->isr, ps->replicas)
          || std::count(ps->replicas.begin(), ps->replicas.end(), 4) > 0)
        return false;
    }
    return true;
  })) << "node 4 did not leave\n"
      << c.dump();
  auto dir4 = c.node(4).data_dir() / "topics" / (topic + "-0");
  EXPECT_TRUE(wait_until(10s, [&] { return !std::filesystem::exists(dir4); }))
    << dir4 << " still exists";
  auto at_removal = bg.count();
  std::cout << "[membership] node 4 removed at " << seconds_since(t0) << " s (" << at_removal
            << " acked so far)\n";
  ASSERT_TRUE(wait_until(15s, [&] { return bg.count() >= at_removal + 200; }))
    << "no progress after the removal\n"
    << c.dump();
  bg.finish();
  {
    std::lock_guard<std::mutex> guard{bg.mtx};
    // Retriable errors during leader moves are fine (the producer retries
    // within a request); a failed request is not.
    EXPECT_TRUE(bg.errors.empty()) << bg.errors.size() << " failed requests, first: "
                                   << bg.errors.front();
  }

  // -- every acknowledged record, exactly once ----------------------------------
  auto cd = c.describe(1);
  ASSERT_TRUE(cd) << ferry::error_text(cd.error()) << "\n" << c.dump();
  auto ps = find_partition(*cd, topic, 0);
  ASSERT_TRUE(ps);
  auto final_replicas = ps->replicas;
  auto hw = ps->high_watermark.value;
  ASSERT_GE(hw, static_cast<int64_t>(bg.acked.size()));
  auto recs = fetch_all(c, 1, topic, 0, hw, why);
  ASSERT_TRUE(recs) << why << "\n" << c.dump();
  std::map<std::string, int64_t> seen;
  for (auto& r : *recs)
    ASSERT_TRUE(seen.emplace(r.value, r.off).second) << "record " << r.value << " twice";
  for (auto& [off, value] : bg.acked) {
    auto s = seen.find(value);
    ASSERT_NE(s, seen.end()) << "acknowledged record " << value << " at " << off << " is lost";
    ASSERT_EQ(s->second, off) << value;
  }
  std::cout << "[membership] " << bg.acked.size() << " acknowledged records read back once each "
            << "(hw " << hw << ", replicas " << join_ids(final_replicas) << ")\n";

  auto codes = c.stop_all();
  for (int id = 1; id <= 3; ++id)
    EXPECT_EQ(codes[id], 0) << "node " << id;
  std::map<int, int64_t> log_ends;
  std::vector<int> ids{final_replicas.begin(), final_replicas.end()};
  auto diff = compare_logs_on_disk(c, topic, 0, hw, log_ends, ids);
  EXPECT_TRUE(diff.empty()) << diff;
  std::cout << "[membership] done in " << seconds_since(t0) << " s\n";
}

TEST(ClusterMembership, BrokerOnlyNodeGetsNewReplicasIsFencedWhenDownAndRejoins) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  auto why = c.add_broker();
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe(1);
    auto n = cd ? find_node(*cd, 4) : nullptr;
    return n && !n->voter && n->alive && n->metrics_port != 0;
  })) << c.dump();

  // Placement over the registered brokers 1..4: partition p gets brokers
  // p+1 and p+2 (mod 4), so node 4 holds partitions 2 and 3 and leads 3.
  const std::string topic = "spread";
  {
    auto b = c.broker(1);
    ASSERT_TRUE(b);
    ferry::topic_config tc;
    tc.partitions = 4;
    tc.replication_factor = 2;
    tc.min_insync_replicas = 1;
    auto md = ask<ferry::topic_metadata>(*c.cs.sys, *b, 10s, ferry::create_atom_v,
                                         ferry::topic_atom_v, topic, tc);
    ASSERT_TRUE(md) << ferry::error_text(md.error());
    ASSERT_EQ(md->partitions[2].replicas, (std::vector<int32_t>{3, 4}));
    ASSERT_EQ(md->partitions[3].replicas, (std::vector<int32_t>{4, 1}));
    // More than the four brokers: a clear refusal.
    tc.replication_factor = 5;
    auto big = ask<ferry::topic_metadata>(*c.cs.sys, *b, 10s, ferry::create_atom_v,
                                          ferry::topic_atom_v, std::string{"too-big"}, tc);
    ASSERT_FALSE(big);
    EXPECT_NE(ferry::error_text(big.error()).find("exceeds the 4 brokers"), std::string::npos)
      << ferry::error_text(big.error());
  }
  auto placed = [&](int32_t p, std::vector<int32_t> isr, int32_t leader) {
    auto cd = c.describe(1);
    auto ps = cd ? find_partition(*cd, topic, p) : nullptr;
    return ps && ps->leader == leader && ps->online && same_members(ps->isr, isr);
  };
  ASSERT_TRUE(wait_until(20s, [&] { return placed(3, {4, 1}, 4) && placed(2, {3, 4}, 3); }))
    << c.dump();

  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto produce = [&](const std::string& prefix) {
    std::vector<ferry::client_message> msgs;
    for (int i = 0; i < 100; ++i) {
      ferry::client_message m;
      m.topic = topic;
      m.partition = 3;
      m.value = prefix + std::to_string(i);
      msgs.push_back(std::move(m));
    }
    return ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 30s, ferry::produce_atom_v,
                                                    msgs);
  };
  auto first = produce("a");
  ASSERT_TRUE(first) << ferry::error_text(first.error()) << "\n" << c.dump();

  // Node 4 dies: the controller fences it; partition 3's leadership moves
  // to node 1 (the ISR), partition 2 keeps leader 3 with a smaller ISR.
  c.kill(4);
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe(1);
    auto n = cd ? find_node(*cd, 4) : nullptr;
    return n && !n->alive && placed(3, {1}, 1) && placed(2, {3}, 3);
  })) << "node 4 was not fenced\n"
      << c.dump();
  std::cout << "[membership] node 4 fenced at " << seconds_since(t0) << " s\n";
  auto second = produce("b");
  ASSERT_TRUE(second) << ferry::error_text(second.error()) << "\n" << c.dump();

  // It comes back (empty in-memory metadata: it fetches the log again),
  // registers, catches up and rejoins both ISRs.
  why = c.restart(4);
  ASSERT_TRUE(why.empty()) << why;
  ASSERT_TRUE(wait_until(20s, [&] {
    auto cd = c.describe(1);
    auto n = cd ? find_node(*cd, 4) : nullptr;
    return n && n->alive && placed(3, {1, 4}, 1) && placed(2, {3, 4}, 3);
  })) << "node 4 did not rejoin\n"
      << c.dump();
  std::cout << "[membership] node 4 back in the ISRs at " << seconds_since(t0) << " s\n";
  auto st4 = c.status(4, topic, 3);
  ASSERT_TRUE(st4) << ferry::error_text(st4.error());
  EXPECT_EQ(st4->log_end.value, 200);
  auto recs = fetch_all(c, 4, topic, 3, 200, why);
  ASSERT_TRUE(recs) << why;
  ASSERT_EQ(recs->size(), 200u);
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ((*recs)[static_cast<size_t>(i)].value,
              (i < 100 ? "a" : "b") + std::to_string(i % 100));
  auto codes = c.stop_all();
  for (int id = 1; id <= 4; ++id)
    EXPECT_EQ(codes[id], 0) << "node " << id;
}

// A topic deleted while a node is down leaves nothing on that node: the
// node deletes the partition dirs it no longer hosts once its metadata has
// caught up after the restart (found by the chaos suite's topic deletes:
// the dirs stayed for good). Another topic's data on the node stays.
TEST(ClusterMembership, TopicDeletedWhileANodeIsDownLeavesNothingOnItAfterRestart) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  for (auto name : {"doomed", "kept"}) {
    auto why = c.create_topic(name, 2);
    ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
    ASSERT_TRUE(c.wait_placed(name, 2)) << c.dump();
  }
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  for (auto name : {"doomed", "kept"}) {
    std::vector<ferry::client_message> msgs;
    for (int i = 0; i < 20; ++i) {
      ferry::client_message m;
      m.topic = name;
      m.has_key = true;
      m.key = "k" + std::to_string(i);
      m.value = "v" + std::to_string(i);
      msgs.push_back(std::move(m));
    }
    auto r = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 60s,
                                                      ferry::produce_atom_v, msgs);
    ASSERT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
  }
  auto topics3 = c.node(3).data_dir() / "topics";
  ASSERT_TRUE(std::filesystem::exists(topics3 / "doomed-0"));
  ASSERT_TRUE(std::filesystem::exists(topics3 / "kept-1"));

  c.kill(3);
  std::optional<caf::expected<ferry::topic_metadata>> deleted;
  ASSERT_TRUE(wait_until(20s, [&] {
    auto b = c.broker(1);
    if (!b)
      return false;
    deleted = ask<ferry::topic_metadata>(*c.cs.sys, *b, 10s, ferry::delete_atom_v,
                                         ferry::topic_atom_v, std::string{"doomed"});
    return bool{*deleted};
  }, 300ms)) << (deleted ? ferry::error_text(deleted->error()) : "no answer") << "\n"
             << c.dump();
  ASSERT_TRUE(wait_until(20s, [&] {
    for (int id : {1, 2}) {
      auto cd = c.describe(id);
      if (!cd || find_topic(*cd, "doomed"))
        return false;
    }
    return true;
  })) << "doomed is still listed\n" << c.dump();
  // Nodes 1 and 2 deleted theirs at once.
  EXPECT_TRUE(wait_until(10s, [&] {
    return !std::filesystem::exists(c.node(1).data_dir() / "topics" / "doomed-0");
  }));
  // Node 3 was down: its dirs are still there until it comes back.
  ASSERT_TRUE(std::filesystem::exists(topics3 / "doomed-0"));

  auto why = c.restart(3);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  EXPECT_TRUE(wait_until(30s, [&] {
    return !std::filesystem::exists(topics3 / "doomed-0")
           && !std::filesystem::exists(topics3 / "doomed-1");
  })) << "node 3 kept the partition dirs of the deleted topic:\n"
      << tail(c.node(3).output(), 3000);
  EXPECT_TRUE(std::filesystem::exists(topics3 / "kept-0"));
  EXPECT_TRUE(std::filesystem::exists(topics3 / "kept-1"));
  // The kept topic is whole on node 3 again (ISR of three).
  EXPECT_TRUE(c.wait_placed("kept", 2)) << c.dump();
  auto codes = c.stop_all();
  for (int id = 1; id <= c.voters(); ++id)
    EXPECT_EQ(codes[id], 0) << "node " << id;
}
