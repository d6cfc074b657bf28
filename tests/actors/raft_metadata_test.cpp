// raft_metadata (actors/server/raft_metadata.hpp) on CAF's deterministic test
// coordinator with virtual time: three raft nodes, each over its own LMDB
// environment, each with a metadata_state_machine and a raft_metadata actor.
// Raft messages go through one network actor that only queues them; the test
// delivers them and can isolate a node.

#include "actors/server/raft_metadata.hpp"

#include "actors/protocol/interfaces.hpp"
#include "actors/server/raft_node.hpp"
#include "broker/error.hpp"
#include "broker/lmdb.hpp"
#include "broker/logging.hpp"
#include "broker/raft_storage.hpp"
#include "broker/topic_config.hpp"
#include "tests/temp_dir.hpp"

#include <caf/actor_system.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>
#include <memory>
#include <optional>
#include <set>

using namespace ferry;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr auto tick = 10ms;

struct md_test_config : caf::actor_system_config {
  md_test_config() {
    register_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.file-verbosity", caf::atom("quiet"));
    log::set_level(log::level::off);
  }
};

/// Forwards to the metadata machine and counts snapshot restores.
class counting_adapter : public raft_state_machine {
public:
  explicit counting_adapter(std::shared_ptr<metadata_state_machine> m)
    : m_(std::move(m)), inner_(metadata_state_machine::adapter(m_)) {
  }
  std::string apply(uint64_t i, std::string_view c) override {
    return inner_->apply(i, c);
  }
  std::string snapshot() override { return inner_->snapshot(); }
  caf::error restore(uint64_t i, std::string_view s) override {
    ++restores;
    return inner_->restore(i, s);
  }
  int restores = 0;

private:
  std::shared_ptr<metadata_state_machine> m_;
  std::shared_ptr<raft_state_machine> inner_;
};

struct net_queue {
  std::vector<raft_message> queue;
};

caf::behavior md_network(caf::event_based_actor*,
                         std::shared_ptr<net_queue> q) {
  return {
    [q](raft_atom, raft_message& m) { q->queue.push_back(std::move(m)); },
  };
}

/// What a subscriber saw: the latest topic list, how many updates, and
/// whether any came from someone else than the expected metadata actor.
struct seen {
  std::vector<topic_metadata> topics;
  int updates = 0;
  caf::actor_addr expected_sender;
  int foreign = 0;
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (auto& t : topics)
      out.insert(t.name);
    return out;
  }
};

caf::behavior md_listener(caf::event_based_actor* self,
                          std::shared_ptr<seen> s) {
  return {
    [self, s](update_atom, const std::vector<topic_metadata>& ts) {
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != s->expected_sender)
        ++s->foreign;
      s->topics = ts;
      ++s->updates;
    },
  };
}

struct node {
  std::unique_ptr<lmdb::env> env;
  std::shared_ptr<raft_storage> store;
  std::shared_ptr<metadata_state_machine> machine;
  std::shared_ptr<counting_adapter> adapter;
  raft_actor raft;
  metadata_actor meta;
  std::shared_ptr<seen> sub;
  caf::actor listener;
};

template <class T>
using reply = std::shared_ptr<std::optional<caf::expected<T>>>;

class RaftMetadata : public ::testing::Test {
protected:
  void SetUp() override {}

  void start(uint64_t snapshot_threshold = 1000) {
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(
      sys_->scheduler());
    net_ = std::make_shared<net_queue>();
    net_actor_ = sys_->spawn(md_network, net_);
    for (int32_t id = 1; id <= 3; ++id) {
      auto& n = nodes_[id];
      lmdb::env_options opts;
      opts.no_sync = true;
      opts.initial_map_size = size_t{4} << 20;
      auto e = lmdb::env::open(dir_.path() / std::to_string(id), opts);
      ASSERT_TRUE(e) << describe(e.error());
      n.env = std::move(*e);
      auto st = raft_storage::open(*n.env);
      ASSERT_TRUE(st) << describe(st.error());
      n.store = std::move(*st);
      // max_replication_factor 5 is capped at the 3 voters.
      n.machine = std::make_shared<metadata_state_machine>(
        std::vector<int32_t>{1, 2, 3}, int16_t{5});
      n.adapter = std::make_shared<counting_adapter>(n.machine);
      raft_node_config c;
      c.raft.id = id;
      c.raft.voters = {1, 2, 3};
      c.raft.election_ticks = 10;
      c.raft.heartbeat_ticks = 2;
      c.raft.seed = 4242 + static_cast<uint64_t>(id);
      c.store = n.store;
      c.machine = n.adapter;
      for (int32_t v = 1; v <= 3; ++v)
        if (v != id)
          c.peers[v] = net_actor_;
      c.tick_interval = tick;
      c.snapshot_threshold = snapshot_threshold;
      c.leader_wait = 1s; // below mc.request_timeout, as in ferryd (3 s < 5 s)
      n.raft = sys_->spawn(raft_node, c);
      raft_metadata_config mc;
      mc.raft = n.raft;
      mc.machine = n.machine;
      mc.request_timeout = 2s;
      n.meta = sys_->spawn(raft_metadata, mc);
      n.sub = std::make_shared<seen>();
      n.sub->expected_sender = n.meta.address();
      n.listener = sys_->spawn(md_listener, n.sub);
      caf::anon_send(n.meta, subscribe_atom_v, n.listener);
    }
    sched_->run();
  }

  void TearDown() override {
    if (!sys_)
      return;
    for (auto& [id, n] : nodes_) {
      caf::anon_send_exit(n.meta, caf::exit_reason::kill);
      caf::anon_send_exit(n.raft, caf::exit_reason::kill);
      caf::anon_send_exit(n.listener, caf::exit_reason::kill);
    }
    caf::anon_send_exit(net_actor_, caf::exit_reason::kill);
    sched_->run();
    nodes_.clear();
    sys_.reset();
  }

  bool connected(int32_t a, int32_t b) {
    return isolated_ == -1 || (a != isolated_ && b != isolated_);
  }

  void deliver() {
    for (int round = 0; round < 8; ++round) {
      sched_->run();
      auto msgs = std::exchange(net_->queue, {});
      if (msgs.empty())
        return;
      for (auto& m : msgs)
        if (connected(m.from, m.to))
          caf::anon_send(nodes_[m.to].raft, raft_atom_v, m);
    }
    sched_->run();
  }

  void step(int n = 1) {
    for (int i = 0; i < n; ++i) {
      deliver();
      sched_->advance_time(tick);
      sched_->run();
      deliver();
    }
  }

  raft_status status(int32_t id) {
    auto out = std::make_shared<std::optional<raft_status>>();
    auto target = nodes_[id].raft;
    sys_->spawn([out, target](caf::event_based_actor* self) {
      self->request(target, caf::infinite, status_atom_v)
        .then([out](raft_status& s) { *out = s; }, [](caf::error&) {});
    });
    sched_->run();
    return out->value_or(raft_status{});
  }

  /// A leader (highest term) that the other connected nodes follow.
  int32_t await_leader(int max_ticks = 300) {
    for (int i = 0; i < max_ticks; ++i) {
      int32_t best = -1;
      uint64_t term = 0;
      for (int32_t v = 1; v <= 3; ++v) {
        auto s = status(v);
        if (s.role == raft_role::leader && s.term >= term && v != isolated_) {
          best = v;
          term = s.term;
        }
      }
      if (best != -1) {
        int followers = 0;
        for (int32_t v = 1; v <= 3; ++v)
          if (connected(v, best) && status(v).leader == best
              && status(v).term == term)
            ++followers;
        if (followers >= 2)
          return best;
      }
      step();
    }
    return -1;
  }

  /// Sends a request to node `id`'s metadata actor; fills in as time runs.
  template <class T, class... Ts>
  reply<T> ask_async(int32_t id, Ts... xs) {
    auto out = std::make_shared<std::optional<caf::expected<T>>>();
    auto target = nodes_[id].meta;
    sys_->spawn([out, target, xs...](caf::event_based_actor* self) {
      self->request(target, caf::infinite, xs...)
        .then([out](T& r) { *out = std::move(r); },
              [out](caf::error& e) { *out = std::move(e); });
    });
    sched_->run();
    return out;
  }

  template <class T, class... Ts>
  caf::expected<T> ask(int32_t id, Ts... xs) {
    auto r = ask_async<T>(id, xs...);
    for (int i = 0; i < 300 && !r->has_value(); ++i)
      step();
    if (!r->has_value())
      return make_error(ec::request_timed_out, "test: no answer");
    return std::move(**r);
  }

  caf::expected<topic_metadata> create(int32_t id, const std::string& name,
                                       topic_config tc = {}) {
    return ask<topic_metadata>(id, create_atom_v, topic_atom_v, name, tc);
  }

  std::set<std::string> names_at(int32_t id) {
    auto list = ask<std::vector<topic_metadata>>(id, list_atom_v,
                                                 topic_atom_v);
    std::set<std::string> out;
    if (list)
      for (auto& t : *list)
        out.insert(t.name);
    return out;
  }

  int32_t follower_of(int32_t leader) {
    return leader == 1 ? 2 : 1;
  }

  md_test_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::shared_ptr<net_queue> net_;
  caf::actor net_actor_;
  std::map<int32_t, node> nodes_;
  int32_t isolated_ = -1;
  ferry::test::temp_dir dir_{"ferry-raft-md"};
};

TEST_F(RaftMetadata, CreateThroughLeaderReachesEverySubscriber) {
  start();
  auto l = await_leader();
  ASSERT_NE(l, -1);
  topic_config tc;
  tc.partitions = 4;
  tc.replication_factor = 3;
  auto md = create(l, "orders", tc);
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->name, "orders");
  ASSERT_EQ(md->partitions.size(), 4u);
  for (auto& pa : md->partitions) {
    EXPECT_EQ(pa.replicas.size(), 3u);
    EXPECT_EQ(pa.leader, pa.replicas.front());
    EXPECT_EQ(pa.isr, pa.replicas);
  }
  step(20);
  for (int32_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(nodes_[id].sub->names(), std::set<std::string>{"orders"})
      << "node " << id;
    // The initial list and the create, both sent as the metadata actor.
    EXPECT_EQ(nodes_[id].sub->updates, 2) << "node " << id;
    EXPECT_EQ(nodes_[id].sub->foreign, 0) << "node " << id;
    EXPECT_EQ(names_at(id), std::set<std::string>{"orders"}) << "node " << id;
    auto d = ask<topic_metadata>(id, describe_atom_v, topic_atom_v,
                                 std::string{"orders"});
    ASSERT_TRUE(d) << describe(d.error());
    // Stored with its defaults resolved: min.insync.replicas 2 of RF 3.
    EXPECT_EQ(d->config, with_defaults(tc));
    EXPECT_EQ(d->config.min_insync_replicas, 2);
  }
  // Alter, add partitions and delete replicate the same way.
  auto alt = ask<topic_metadata>(l, alter_atom_v, topic_atom_v,
                                 std::string{"orders"},
                                 std::map<std::string, std::string>{
                                   {"retention.ms", "60000"}});
  ASSERT_TRUE(alt) << describe(alt.error());
  EXPECT_EQ(alt->config.retention_ms, 60000);
  auto grown = ask<topic_metadata>(l, add_parts_atom_v, std::string{"orders"},
                                   int32_t{6});
  ASSERT_TRUE(grown) << describe(grown.error());
  EXPECT_EQ(grown->partitions.size(), 6u);
  step(20);
  for (int32_t id = 1; id <= 3; ++id) {
    ASSERT_EQ(nodes_[id].sub->topics.size(), 1u);
    EXPECT_EQ(nodes_[id].sub->topics[0].config.retention_ms, 60000);
    EXPECT_EQ(nodes_[id].sub->topics[0].partitions.size(), 6u);
  }
  auto del = ask<topic_metadata>(l, delete_atom_v, topic_atom_v,
                                 std::string{"orders"});
  ASSERT_TRUE(del) << describe(del.error());
  step(20);
  for (int32_t id = 1; id <= 3; ++id)
    EXPECT_TRUE(nodes_[id].sub->topics.empty()) << "node " << id;
}

TEST_F(RaftMetadata, UsersAndAclsReachEveryNodesRegistry) {
  start();
  auto l = await_leader();
  ASSERT_NE(l, -1);
  std::map<int32_t, std::shared_ptr<security_registry>> regs;
  for (int32_t id = 1; id <= 3; ++id) {
    regs[id] = std::make_shared<security_registry>();
    nodes_[id].machine->set_security_registry(regs[id]);
  }
  auto cred = make_scram_credential("alice", "wonderland");
  ASSERT_TRUE(cred);
  auto u = ask<user_info>(l, update_atom_v, user_atom_v, *cred);
  ASSERT_TRUE(u) << describe(u.error());
  EXPECT_EQ(u->name, "alice");
  EXPECT_EQ(u->mechanism, "SCRAM-SHA-256");
  acl_entry x;
  x.principal = "alice";
  x.resource_type = "topic";
  x.resource_name = "orders";
  x.operation = "READ";
  auto added = ask<acl_entry>(l, create_atom_v, acl_atom_v, x);
  ASSERT_TRUE(added) << describe(added.error());
  EXPECT_EQ(added->principal, "User:alice");
  EXPECT_EQ(added->operation, "read");
  // A bad entry is refused before it reaches the log, naming the field.
  auto bad = x;
  bad.operation = "steal";
  auto refused = ask<acl_entry>(l, create_atom_v, acl_atom_v, bad);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::invalid_request));
  step(20);
  for (int32_t id = 1; id <= 3; ++id) {
    auto stored = regs[id]->user("alice");
    ASSERT_TRUE(stored) << "node " << id;
    EXPECT_TRUE(verify_password(*stored, "wonderland")) << "node " << id;
    EXPECT_TRUE(regs[id]->authorize("alice", "topic", "orders", "read"));
    EXPECT_FALSE(regs[id]->authorize("alice", "topic", "orders", "write"));
    auto us = ask<std::vector<user_info>>(id, list_atom_v, user_atom_v);
    ASSERT_TRUE(us);
    ASSERT_EQ(us->size(), 1u) << "node " << id;
  }
  auto removed = ask<std::vector<acl_entry>>(l, delete_atom_v, acl_atom_v, x);
  ASSERT_TRUE(removed) << describe(removed.error());
  EXPECT_EQ(removed->size(), 1u);
  auto gone = ask<user_info>(l, delete_atom_v, user_atom_v, std::string{"alice"});
  ASSERT_TRUE(gone) << describe(gone.error());
  auto again = ask<user_info>(l, delete_atom_v, user_atom_v, std::string{"alice"});
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::unknown_user)) << describe(again.error());
  step(20);
  for (int32_t id = 1; id <= 3; ++id) {
    EXPECT_FALSE(regs[id]->user("alice")) << "node " << id;
    EXPECT_FALSE(regs[id]->authorize("alice", "topic", "orders", "read"));
  }
}

TEST_F(RaftMetadata, InvalidInputGetsTheTopicConfigErrors) {
  start();
  auto l = await_leader();
  ASSERT_NE(l, -1);
  auto bad = create(l, "bad name!");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), ec::invalid_topic_name)) << describe(bad.error());
  topic_config tc;
  tc.replication_factor = 4; // more than the 3 voters
  auto rf = create(l, "rf", tc);
  ASSERT_FALSE(rf);
  // validate_replication_factor's code.
  EXPECT_TRUE(is(rf.error(), ec::policy_violation)) << describe(rf.error());
  ASSERT_TRUE(create(l, "dup"));
  auto dup = create(l, "dup");
  ASSERT_FALSE(dup);
  EXPECT_TRUE(is(dup.error(), ec::topic_exists)) << describe(dup.error());
  auto unknown = ask<topic_metadata>(l, delete_atom_v, topic_atom_v,
                                     std::string{"nope"});
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(is(unknown.error(), ec::unknown_topic));
  auto shrink = ask<topic_metadata>(l, add_parts_atom_v, std::string{"dup"},
                                    int32_t{1});
  ASSERT_FALSE(shrink);
  EXPECT_TRUE(is(shrink.error(), ec::invalid_request));
  auto badkey = ask<topic_metadata>(l, alter_atom_v, topic_atom_v,
                                    std::string{"dup"},
                                    std::map<std::string, std::string>{
                                      {"segment.bytes", "12"}});
  ASSERT_FALSE(badkey);
  EXPECT_TRUE(is(badkey.error(), ec::invalid_config));
  auto missing = ask<topic_metadata>(follower_of(l), describe_atom_v,
                                     topic_atom_v, std::string{"nope"});
  ASSERT_FALSE(missing);
  EXPECT_TRUE(is(missing.error(), ec::unknown_topic));
}

TEST_F(RaftMetadata, FollowerWriteAnswersNotLeaderWithHint) {
  start();
  auto l = await_leader();
  ASSERT_NE(l, -1);
  auto f = follower_of(l);
  auto r = create(f, "t1");
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::not_leader)) << describe(r.error());
  EXPECT_NE(describe(r.error()).find("leader=" + std::to_string(l)),
            std::string::npos)
    << describe(r.error());
  auto pid = ask<producer_identity>(f, init_pid_atom_v);
  ASSERT_FALSE(pid);
  EXPECT_TRUE(is(pid.error(), ec::not_leader));
  // Following the hint works.
  EXPECT_TRUE(create(l, "t1"));
}

// A write before the first election has ended waits for it: it commits
// when its node wins, else it is answered not_leader naming the winner
// (never leader=-1), and the hint works.
TEST_F(RaftMetadata, WriteBeforeTheFirstElectionWaitsForItsOutcome) {
  start();
  EXPECT_EQ(status(2).leader, -1) << "a leader before any tick";
  auto r = ask_async<topic_metadata>(2, create_atom_v, topic_atom_v,
                                     std::string{"early"}, topic_config{});
  EXPECT_FALSE(r->has_value()) << "answered before any election";
  for (int i = 0; i < 300 && !r->has_value(); ++i)
    step();
  ASSERT_TRUE(r->has_value()) << "no answer after 3 s of virtual time";
  auto l = await_leader();
  ASSERT_NE(l, -1);
  if (l == 2) {
    ASSERT_TRUE(**r) << describe((*r)->error());
  } else {
    ASSERT_FALSE(**r) << "node 2 is not the leader, yet it took the write";
    EXPECT_TRUE(is((*r)->error(), ec::not_leader)) << describe((*r)->error());
    EXPECT_NE(describe((*r)->error()).find("leader=" + std::to_string(l)),
              std::string::npos)
      << describe((*r)->error());
    ASSERT_TRUE(create(l, "early"));
  }
  EXPECT_TRUE(names_at(l).count("early"));
}

// With no majority reachable no leader comes: the write is answered
// not_leader (leader=-1) once leader_wait has passed, not at once.
TEST_F(RaftMetadata, WriteWithoutAMajorityGivesUpAfterTheLeaderWait) {
  isolated_ = 2;
  start();
  auto r = ask_async<topic_metadata>(2, create_atom_v, topic_atom_v,
                                     std::string{"alone"}, topic_config{});
  for (int i = 0; i < 90; ++i) // 0.9 s of the 1 s leader_wait
    step();
  EXPECT_FALSE(r->has_value()) << "gave up before leader_wait";
  for (int i = 0; i < 50 && !r->has_value(); ++i)
    step();
  ASSERT_TRUE(r->has_value()) << "still waiting 1.4 s in";
  ASSERT_FALSE(**r) << "an isolated node took a write";
  EXPECT_TRUE(is((*r)->error(), ec::not_leader)) << describe((*r)->error());
  EXPECT_NE(describe((*r)->error()).find("no Raft leader elected within 1000 ms"),
            std::string::npos)
    << describe((*r)->error());
  EXPECT_NE(describe((*r)->error()).find("leader=-1"), std::string::npos);
}

TEST_F(RaftMetadata, NewLeaderAfterPartitionAndOldLeaderCatchesUp) {
  start();
  auto old = await_leader();
  ASSERT_NE(old, -1);
  ASSERT_TRUE(create(old, "before"));
  step(10);
  isolated_ = old;
  // The cut-off leader cannot commit: its write times out.
  auto stuck = ask_async<topic_metadata>(old, create_atom_v, topic_atom_v,
                                         std::string{"lost"}, topic_config{});
  auto l = await_leader();
  ASSERT_NE(l, -1);
  ASSERT_NE(l, old);
  auto md = create(l, "after");
  ASSERT_TRUE(md) << describe(md.error());
  // Virtual time: 2 s request timeout = 200 ticks.
  for (int i = 0; i < 250 && !stuck->has_value(); ++i)
    step();
  ASSERT_TRUE(stuck->has_value());
  ASSERT_FALSE(**stuck);
  EXPECT_TRUE(is((*stuck)->error(), ec::request_timed_out))
    << describe((*stuck)->error());
  isolated_ = -1;
  step(100);
  std::set<std::string> both{"after", "before"};
  for (int32_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(names_at(id), both) << "node " << id;
    EXPECT_EQ(nodes_[id].sub->names(), both) << "node " << id;
  }
}

TEST_F(RaftMetadata, ProducerIdsStayUniqueAcrossLeaderChange) {
  start();
  auto first = await_leader();
  ASSERT_NE(first, -1);
  std::set<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto p = ask<producer_identity>(first, init_pid_atom_v);
    ASSERT_TRUE(p) << describe(p.error());
    EXPECT_TRUE(ids.insert(p->id.value).second);
  }
  isolated_ = first;
  auto second = await_leader();
  ASSERT_NE(second, -1);
  ASSERT_NE(second, first);
  for (int i = 0; i < 3; ++i) {
    auto p = ask<producer_identity>(second, init_pid_atom_v);
    ASSERT_TRUE(p) << describe(p.error());
    EXPECT_TRUE(ids.insert(p->id.value).second) << p->id.value;
  }
  EXPECT_EQ(ids.size(), 6u);
}

TEST_F(RaftMetadata, LaggingFollowerCatchesUpViaSnapshot) {
  start(/*snapshot_threshold=*/4);
  auto l = await_leader();
  ASSERT_NE(l, -1);
  auto lag = follower_of(l);
  isolated_ = lag;
  step(5);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(create(l, "t" + std::to_string(i)));
  auto pid = ask<producer_identity>(l, init_pid_atom_v);
  ASSERT_TRUE(pid);
  EXPECT_EQ(nodes_[lag].adapter->restores, 0);
  EXPECT_TRUE(names_at(lag).empty());
  isolated_ = -1;
  step(100);
  EXPECT_GE(nodes_[lag].adapter->restores, 1);
  EXPECT_EQ(names_at(lag), names_at(l));
  EXPECT_EQ(names_at(lag).size(), 10u);
  EXPECT_EQ(nodes_[lag].sub->names(), names_at(l));
  EXPECT_EQ(nodes_[lag].machine->snapshot(), nodes_[l].machine->snapshot());
  // The restored producer id counter continues, on any later leader.
  auto again = ask<producer_identity>(l, init_pid_atom_v);
  ASSERT_TRUE(again);
  EXPECT_GT(again->id.value, pid->id.value);
}

TEST(RaftMetadataMachine, SnapshotRestoreRoundTrip) {
  metadata_state_machine a{{1, 2, 3}, 3};
  topic_config tc;
  tc.partitions = 3;
  tc.replication_factor = 2;
  auto r = decode_topic_result(a.apply(1, encode_create_topic("x", tc)));
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->partitions[2].replicas, (std::vector<int32_t>{3, 1}));
  ASSERT_TRUE(decode_pid_result(a.apply(2, encode_init_pid())));
  metadata_state_machine b{{1, 2, 3}, 3};
  ASSERT_FALSE(b.restore(2, a.snapshot()));
  EXPECT_EQ(b.snapshot(), a.snapshot());
  auto pid = decode_pid_result(b.apply(3, encode_init_pid()));
  ASSERT_TRUE(pid);
  EXPECT_EQ(pid->id.value, 1);
  EXPECT_TRUE(b.restore(3, "garbage"));
  // Validation also runs at apply time (a command that bypassed the
  // leader's pre-check gets the same error on every node).
  auto bad = decode_topic_result(b.apply(4, encode_create_topic("a/b", tc)));
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), ec::invalid_topic_name)) << describe(bad.error());
  auto junk = decode_topic_result(b.apply(4, "\x01\x09"));
  ASSERT_FALSE(junk);
  EXPECT_TRUE(is(junk.error(), ec::invalid_request));
}

// Logs and snapshots written before cleanup.policy existed hold
// topic_config with its first eight fields: command kind `create` (1) and
// snapshot versions 1-6 still decode, with Kafka's compaction defaults.
TEST(RaftMetadataMachine, TopicsFromBeforeCompactionStillDecode) {
  using old_config = std::tuple<int32_t, int16_t, int64_t, int64_t, int64_t,
                                int64_t, int32_t, int32_t>;
  old_config oc{2, 1, 3600000, -1, int64_t{1} << 20, 60000, 1 << 20, 1};
  std::vector<char> buf{1, 1}; // command version 1, kind create
  {
    caf::binary_serializer sink{nullptr, buf};
    std::string name = "legacy";
    ASSERT_FALSE(sink(name, oc));
  }
  metadata_state_machine m{{1}, 1};
  auto r = decode_topic_result(m.apply(1, std::string{buf.begin(), buf.end()}));
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->config.partitions, 2);
  EXPECT_EQ(r->config.retention_ms, 3600000);
  EXPECT_EQ(r->config.cleanup_policy, cleanup_delete);
  EXPECT_EQ(r->config.delete_retention_ms, topic_config{}.delete_retention_ms);
  // A version 6 snapshot with one such topic.
  using old_topic = std::tuple<std::string, old_config, std::vector<partition_assignment>>;
  std::vector<old_topic> topics{{"snap", oc, r->partitions}};
  std::vector<broker_registration> brokers;
  std::vector<isr_change> moves;
  std::vector<int32_t> removing;
  std::vector<scram_credential> users;
  std::vector<acl_entry> acls;
  int64_t next_pid = 7;
  std::vector<char> snap{6};
  {
    caf::binary_serializer sink{nullptr, snap};
    ASSERT_FALSE(sink(next_pid, topics, brokers, moves, removing, users, acls));
  }
  metadata_state_machine b{{1}, 1};
  ASSERT_FALSE(b.restore(1, std::string{snap.begin(), snap.end()}));
  auto list = b.topics();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "snap");
  EXPECT_EQ(list[0].config.segment_ms, 60000);
  EXPECT_EQ(list[0].config.cleanup_policy, cleanup_delete);
  // New creates carry the compaction settings through a snapshot.
  topic_config tc;
  tc.cleanup_policy = cleanup_compact;
  tc.min_cleanable_dirty_ratio = 0.1;
  tc.delete_retention_ms = 5;
  auto c = decode_topic_result(b.apply(2, encode_create_topic("compacted", tc)));
  ASSERT_TRUE(c) << describe(c.error());
  metadata_state_machine b2{{1}, 1};
  ASSERT_FALSE(b2.restore(2, b.snapshot()));
  bool found = false;
  for (auto& t : b2.topics())
    if (t.name == "compacted") {
      found = true;
      EXPECT_EQ(t.config.cleanup_policy, cleanup_compact);
      EXPECT_DOUBLE_EQ(t.config.min_cleanable_dirty_ratio, 0.1);
      EXPECT_EQ(t.config.delete_retention_ms, 5);
    }
  EXPECT_TRUE(found);
}

TEST(RaftMetadataMachine, UsersAndAclsSurviveASnapshot) {
  metadata_state_machine a{{1}, 1};
  auto cred = make_scram_credential("bob", "builder");
  ASSERT_TRUE(cred);
  ASSERT_TRUE(decode_user_result(a.apply(1, encode_upsert_user(*cred))));
  acl_entry x;
  x.principal = "User:bob";
  x.resource_type = "group";
  x.resource_name = "team-";
  x.pattern_type = "prefixed";
  x.operation = "read";
  ASSERT_TRUE(normalize_acl(x) == caf::none);
  ASSERT_TRUE(decode_acl_result(a.apply(2, encode_add_acl(x))));
  // Adding it twice keeps one.
  ASSERT_TRUE(decode_acl_result(a.apply(3, encode_add_acl(x))));
  EXPECT_EQ(a.acls().size(), 1u);
  metadata_state_machine b{{1}, 1};
  auto reg = std::make_shared<security_registry>();
  b.set_security_registry(reg);
  ASSERT_FALSE(b.restore(3, a.snapshot()));
  EXPECT_EQ(b.snapshot(), a.snapshot());
  ASSERT_TRUE(reg->user("bob"));
  EXPECT_TRUE(verify_password(*reg->user("bob"), "builder"));
  EXPECT_TRUE(reg->authorize("bob", "group", "team-blue", "read"));
  EXPECT_FALSE(reg->authorize("bob", "group", "other", "read"));
  // A credential of the wrong shape is refused at apply time as well.
  auto broken = *cred;
  broken.server_key = "short";
  auto r = decode_user_result(b.apply(4, encode_upsert_user(broken)));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::invalid_request));
}

} // namespace

// -- brokers, fencing and ISR changes (the controller's decisions) -------------

namespace {

broker_registration reg_of(int32_t id, bool fenced) {
  broker_registration r;
  r.id = id;
  r.host = "127.0.0.1";
  r.port = static_cast<uint16_t>(9100 + id);
  r.fenced = fenced;
  return r;
}

} // namespace

namespace {

/// broker_registration as command kind 6 and snapshots 2-5 stored it.
struct old_registration {
  int32_t id = -1;
  std::string host;
  uint16_t port = 0;
  uint16_t http_port = 0;
  uint16_t metrics_port = 0;
  bool fenced = false;
  int64_t epoch = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, old_registration& x) {
  return f(x.id, x.host, x.port, x.http_port, x.metrics_port, x.fenced, x.epoch);
}

template <class... Ts>
std::string bytes_of(std::vector<char> head, Ts... xs) {
  caf::binary_serializer sink{nullptr, head};
  EXPECT_FALSE(sink(xs...));
  return std::string{head.begin(), head.end()};
}

} // namespace

TEST(MetadataMachine, FencingMovesLeadershipWithinTheIsrOnly) {
  metadata_state_machine m{{1, 2, 3}, 3};
  uint64_t i = 0;
  topic_config tc;
  tc.partitions = 3;
  tc.replication_factor = 3;
  auto md = decode_topic_result(m.apply(++i, encode_create_topic("t", tc)));
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->config.min_insync_replicas, 2); // majority of RF 3
  for (int32_t p = 0; p < 3; ++p) {
    EXPECT_EQ(md->partitions[static_cast<size_t>(p)].leader, p + 1);
    EXPECT_EQ(md->partitions[static_cast<size_t>(p)].isr.size(), 3u);
  }
  for (int32_t id = 1; id <= 3; ++id)
    ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(id, false)))));
  // Fence 1: partition 0 (led by 1) moves to the next ISR member in a new
  // epoch; 1 leaves every ISR; the others keep leader and epoch.
  auto f = decode_broker_result(m.apply(++i, encode_broker(reg_of(1, true))));
  ASSERT_TRUE(f) << describe(f.error());
  EXPECT_TRUE(f->fenced);
  auto t = m.topic("t");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->partitions[0].leader, 2);
  EXPECT_EQ(t->partitions[0].epoch, leader_epoch{1});
  for (auto& pa : t->partitions)
    EXPECT_EQ(std::count(pa.isr.begin(), pa.isr.end(), 1), 0)
      << "partition " << pa.partition.value;
  EXPECT_EQ(t->partitions[1].leader, 2);
  EXPECT_EQ(t->partitions[1].epoch, leader_epoch{0});
  // Fence 2 and 3: the last ISR member stays in the ISR, nobody leads (no
  // unclean election).
  m.apply(++i, encode_broker(reg_of(2, true)));
  m.apply(++i, encode_broker(reg_of(3, true)));
  t = m.topic("t");
  for (auto& pa : t->partitions) {
    EXPECT_EQ(pa.leader, -1) << "partition " << pa.partition.value;
    EXPECT_EQ(pa.isr.size(), 1u);
  }
  EXPECT_EQ(t->partitions[0].isr, std::vector<int32_t>{3});
  // 1 comes back: it is in no ISR, so it leads nothing.
  m.apply(++i, encode_broker(reg_of(1, false)));
  t = m.topic("t");
  for (auto& pa : t->partitions)
    EXPECT_EQ(pa.leader, -1);
  // 3 comes back: it is the last ISR member everywhere, so it leads.
  auto back = decode_broker_result(m.apply(++i, encode_broker(reg_of(3, false))));
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->fenced);
  EXPECT_EQ(back->epoch, 2); // its second registration
  t = m.topic("t");
  for (auto& pa : t->partitions) {
    EXPECT_EQ(pa.leader, 3) << "partition " << pa.partition.value;
    EXPECT_EQ(pa.isr, std::vector<int32_t>{3});
  }
  // Not a voter: a broker-only node joins by registering; fencing a node
  // that never registered is refused.
  auto fence_stranger = decode_broker_result(m.apply(++i, encode_broker(reg_of(8, true))));
  ASSERT_FALSE(fence_stranger);
  EXPECT_TRUE(is(fence_stranger.error(), ec::invalid_request));
  auto joined = decode_broker_result(m.apply(++i, encode_broker(reg_of(7, false))));
  ASSERT_TRUE(joined) << describe(joined.error());
  EXPECT_EQ(joined->id, 7);
  EXPECT_EQ(m.brokers().size(), 4u);
}

TEST(MetadataMachine, IsrChangesComeFromTheCurrentLeaderInItsEpoch) {
  metadata_state_machine m{{1, 2, 3}, 3};
  uint64_t i = 0;
  topic_config tc;
  tc.partitions = 1;
  tc.replication_factor = 3;
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("t", tc))));
  isr_change ch;
  ch.topic = "t";
  ch.partition = partition_id{0};
  ch.leader = 1;
  ch.epoch = leader_epoch{0};
  ch.isr = {1, 2};
  auto ok = decode_assignment_result(m.apply(++i, encode_isr_change(ch)));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->isr, (std::vector<int32_t>{1, 2}));
  auto wrong_leader = ch;
  wrong_leader.leader = 2;
  auto r1 = decode_assignment_result(m.apply(++i, encode_isr_change(wrong_leader)));
  ASSERT_FALSE(r1);
  EXPECT_TRUE(is(r1.error(), ec::not_leader));
  auto stale = ch;
  stale.epoch = leader_epoch{5};
  auto r2 = decode_assignment_result(m.apply(++i, encode_isr_change(stale)));
  ASSERT_FALSE(r2);
  EXPECT_TRUE(is(r2.error(), ec::fenced_leader_epoch));
  auto headless = ch;
  headless.isr = {2, 3};
  auto r3 = decode_assignment_result(m.apply(++i, encode_isr_change(headless)));
  ASSERT_FALSE(r3);
  EXPECT_TRUE(is(r3.error(), ec::invalid_request));
  auto stranger = ch;
  stranger.isr = {1, 4};
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_isr_change(stranger))));
  // A fenced broker cannot rejoin the ISR.
  m.apply(++i, encode_broker(reg_of(3, true)));
  auto fenced = ch;
  fenced.isr = {1, 2, 3};
  auto r4 = decode_assignment_result(m.apply(++i, encode_isr_change(fenced)));
  ASSERT_FALSE(r4);
  EXPECT_TRUE(is(r4.error(), ec::invalid_request));
  // Snapshots keep the brokers.
  auto snap = m.snapshot();
  metadata_state_machine copy{{1, 2, 3}, 3};
  ASSERT_FALSE(copy.restore(i, snap));
  auto brokers = copy.brokers();
  ASSERT_EQ(brokers.size(), 1u);
  EXPECT_TRUE(brokers[0].fenced);
  EXPECT_EQ(copy.topic("t")->partitions[0].isr, (std::vector<int32_t>{1, 2}));
}

TEST(MetadataMachine, ReplicaMoveAddsTheTargetThenCompletesOnceItCaughtUp) {
  metadata_state_machine m{{1, 2, 3}, 3};
  uint64_t i = 0;
  topic_config tc;
  tc.partitions = 1;
  tc.replication_factor = 2;
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("t", tc))));
  auto pa0 = m.topic("t")->partitions[0];
  ASSERT_EQ(pa0.replicas, (std::vector<int32_t>{1, 2}));
  ASSERT_EQ(pa0.leader, 1);
  isr_change mv;
  mv.topic = "t";
  mv.partition = partition_id{0};
  mv.isr = {2, 3};
  // Completing before a move started, or bad targets, are refused.
  isr_change done = mv;
  done.isr.clear();
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_reassign(done))));
  auto twice = mv;
  twice.isr = {3, 3};
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_reassign(twice))));
  auto stranger = mv;
  stranger.isr = {2, 9};
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_reassign(stranger))));
  // Start: 3 joins the replicas, not the ISR; the leader stays.
  auto started = decode_assignment_result(m.apply(++i, encode_reassign(mv)));
  ASSERT_TRUE(started) << describe(started.error());
  EXPECT_EQ(started->replicas, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(started->isr, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(started->leader, 1);
  ASSERT_EQ(m.reassignments().size(), 1u);
  // A second move of the same partition waits for the first.
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_reassign(mv))));
  // Not caught up yet: completion refused.
  EXPECT_FALSE(decode_assignment_result(m.apply(++i, encode_reassign(done))));
  // The leader expands the ISR with 3, then the move completes: 1 leaves,
  // leadership moves within the ISR in a new epoch.
  isr_change grow;
  grow.topic = "t";
  grow.partition = partition_id{0};
  grow.leader = 1;
  grow.epoch = leader_epoch{0};
  grow.isr = {1, 2, 3};
  ASSERT_TRUE(decode_assignment_result(m.apply(++i, encode_isr_change(grow))));
  // Snapshots keep a move in progress.
  metadata_state_machine copy{{1, 2, 3}, 3};
  ASSERT_FALSE(copy.restore(i, m.snapshot()));
  EXPECT_EQ(copy.reassignments().size(), 1u);
  auto finished = decode_assignment_result(m.apply(++i, encode_reassign(done)));
  ASSERT_TRUE(finished) << describe(finished.error());
  EXPECT_EQ(finished->replicas, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(finished->isr, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(finished->leader, 2);
  EXPECT_EQ(finished->epoch, leader_epoch{1});
  EXPECT_TRUE(m.reassignments().empty());
}

// -- broker-only nodes: placement over brokers, removal --------------------------

namespace {

topic_config rf_config(int32_t partitions, int16_t rf) {
  topic_config tc;
  tc.partitions = partitions;
  tc.replication_factor = rf;
  return tc;
}

/// The ISR change a partition's leader would make once `id` caught up.
isr_change grown(const partition_assignment& pa, const std::string& topic,
                 int32_t id) {
  isr_change ch;
  ch.topic = topic;
  ch.partition = pa.partition;
  ch.leader = pa.leader;
  ch.epoch = pa.epoch;
  ch.isr = pa.isr;
  ch.isr.push_back(id);
  return ch;
}

/// Plays the leaders and the controller until no move is left: every
/// target replica joins the ISR, then the move completes.
void finish_moves(metadata_state_machine& m, uint64_t& i) {
  for (int round = 0; round < 20 && !m.reassignments().empty(); ++round) {
    for (auto& mv : m.reassignments()) {
      auto pa = m.topic(mv.topic)->partitions[static_cast<size_t>(mv.partition.value)];
      for (auto id : mv.isr)
        if (std::find(pa.isr.begin(), pa.isr.end(), id) == pa.isr.end()) {
          auto r = decode_assignment_result(m.apply(++i, encode_isr_change(grown(pa, mv.topic, id))));
          ASSERT_TRUE(r) << describe(r.error());
          pa = *r;
        }
      isr_change done;
      done.topic = mv.topic;
      done.partition = mv.partition;
      auto r = decode_assignment_result(m.apply(++i, encode_reassign(done)));
      ASSERT_TRUE(r) << describe(r.error());
    }
  }
  EXPECT_TRUE(m.reassignments().empty());
}

bool names(const topic_metadata& md, int32_t id) {
  for (auto& pa : md.partitions)
    if (std::find(pa.replicas.begin(), pa.replicas.end(), id) != pa.replicas.end()
        || std::find(pa.isr.begin(), pa.isr.end(), id) != pa.isr.end()
        || pa.leader == id)
      return true;
  return false;
}

} // namespace

TEST(MetadataMachine, PlacementSpreadsOverRegisteredBrokersIncludingBrokerOnlyNodes) {
  metadata_state_machine m{{1, 2, 3}, 32767};
  uint64_t i = 0;
  // Before any broker-only node registered: the voters only; RF 4 refused
  // with a clear error.
  auto too_big = decode_topic_result(m.apply(++i, encode_create_topic("big", rf_config(1, 4))));
  ASSERT_FALSE(too_big);
  EXPECT_TRUE(is(too_big.error(), ec::policy_violation));
  EXPECT_NE(describe(too_big.error()).find("exceeds the 3 brokers"), std::string::npos)
    << describe(too_big.error());
  EXPECT_TRUE(m.check_replication_factor(4));
  for (int32_t id : {1, 2, 3, 4})
    ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(id, false)))));
  EXPECT_EQ(m.placement(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_FALSE(m.check_replication_factor(4));
  auto md = decode_topic_result(m.apply(++i, encode_create_topic("t", rf_config(4, 2))));
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->partitions[0].replicas, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(md->partitions[1].replicas, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(md->partitions[2].replicas, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(md->partitions[3].replicas, (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(md->partitions[3].leader, 4); // the broker-only node leads
  EXPECT_EQ(md->partitions[3].isr, (std::vector<int32_t>{4, 1}));
  // A fenced broker gets no new replicas; RF 4 no longer fits.
  m.apply(++i, encode_broker(reg_of(2, true)));
  EXPECT_EQ(m.placement(), (std::vector<int32_t>{1, 3, 4}));
  auto u = decode_topic_result(m.apply(++i, encode_create_topic("u", rf_config(3, 3))));
  ASSERT_TRUE(u) << describe(u.error());
  for (auto& pa : u->partitions) {
    EXPECT_EQ(std::count(pa.replicas.begin(), pa.replicas.end(), 2), 0);
    EXPECT_EQ(pa.replicas.size(), 3u);
  }
  EXPECT_FALSE(decode_topic_result(m.apply(++i, encode_create_topic("v", rf_config(1, 4)))));
  // Growing a topic places the new partitions the same way.
  auto grown_t = decode_topic_result(m.apply(++i, encode_add_partitions("t", 5)));
  ASSERT_TRUE(grown_t) << describe(grown_t.error());
  // (2 is fenced: partition 4 goes to the 2nd and 3rd of {1, 3, 4})
  EXPECT_EQ(grown_t->partitions[4].replicas, (std::vector<int32_t>{3, 4}));
  // Snapshots keep broker-only registrations; a restored copy places alike.
  metadata_state_machine copy{{1, 2, 3}, 32767};
  ASSERT_FALSE(copy.restore(i, m.snapshot()));
  EXPECT_EQ(copy.placement(), m.placement());
  EXPECT_EQ(copy.snapshot(), m.snapshot());
}

TEST(MetadataMachine, OldSnapshotVersionsStillRestore) {
  // Version 3 (before removals): next producer id, topics, brokers, moves.
  metadata_state_machine m{{1, 2, 3}, 3};
  ASSERT_TRUE(decode_topic_result(m.apply(1, encode_create_topic("t", rf_config(2, 2)))));
  ASSERT_TRUE(decode_broker_result(m.apply(2, encode_broker(reg_of(1, false)))));
  std::vector<char> buf{static_cast<char>(3)};
  caf::binary_serializer sink{nullptr, buf};
  int64_t next = 5;
  // Versions 1-6: topic_config without cleanup.policy and compaction.
  std::vector<std::tuple<std::string,
                         std::tuple<int32_t, int16_t, int64_t, int64_t, int64_t,
                                    int64_t, int32_t, int32_t>,
                         std::vector<partition_assignment>>>
    topics;
  for (auto& t : m.topics()) {
    auto& c = t.config;
    topics.emplace_back(t.name,
                        std::make_tuple(c.partitions, c.replication_factor,
                                        c.retention_ms, c.retention_bytes,
                                        c.segment_bytes, c.segment_ms,
                                        c.max_message_bytes, c.min_insync_replicas),
                        t.partitions);
  }
  std::vector<old_registration> brokers; // versions 2-5: no Kafka listener
  for (auto& b : m.brokers())
    brokers.push_back({b.id, b.host, b.port, b.http_port, b.metrics_port, b.fenced,
                       b.epoch});
  std::vector<isr_change> moves;
  ASSERT_FALSE(sink(next, topics, brokers, moves));
  metadata_state_machine copy{{1, 2, 3}, 3};
  ASSERT_FALSE(copy.restore(2, std::string{buf.begin(), buf.end()}));
  EXPECT_EQ(copy.topics().size(), 1u);
  EXPECT_EQ(copy.brokers().size(), 1u);
  EXPECT_TRUE(copy.removing().empty());
  auto pid = decode_pid_result(copy.apply(3, encode_init_pid()));
  ASSERT_TRUE(pid);
  EXPECT_EQ(pid->id.value, 5);
}

TEST(MetadataMachine, RemovingABrokerMovesItsReplicasThenUnregistersIt) {
  metadata_state_machine m{{1, 2, 3}, 32767};
  uint64_t i = 0;
  for (int32_t id : {1, 2, 3, 4})
    ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(id, false)))));
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("t", rf_config(4, 2)))));
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("s", rf_config(2, 3)))));
  ASSERT_TRUE(names(*m.topic("t"), 4));
  auto reg = decode_broker_result(m.apply(++i, encode_remove_broker(4)));
  ASSERT_TRUE(reg) << describe(reg.error());
  EXPECT_EQ(reg->id, 4);
  EXPECT_EQ(m.removing(), std::vector<int32_t>{4});
  // A move started for every partition with a replica on 4; the old
  // replicas stay (and serve) until the new ones caught up.
  auto moves = m.reassignments();
  size_t with_4 = 0;
  for (auto* t : {"t", "s"}) {
    auto md = *m.topic(t);
    for (auto& pa : md.partitions)
      with_4 += std::count(pa.replicas.begin(), pa.replicas.end(), 4);
  }
  EXPECT_EQ(moves.size(), with_4);
  for (auto& mv : moves)
    EXPECT_EQ(std::count(mv.isr.begin(), mv.isr.end(), 4), 0) << mv.topic;
  // Removing twice is harmless; 4 gets no new replicas meanwhile and cannot
  // be a move target.
  EXPECT_TRUE(decode_broker_result(m.apply(++i, encode_remove_broker(4))));
  EXPECT_EQ(m.placement(), (std::vector<int32_t>{1, 2, 3}));
  auto fresh = decode_topic_result(m.apply(++i, encode_create_topic("f", rf_config(3, 3))));
  ASSERT_TRUE(fresh);
  EXPECT_FALSE(names(*fresh, 4));
  isr_change onto4;
  onto4.topic = "f";
  onto4.partition = partition_id{0};
  onto4.isr = {1, 4};
  auto refused = decode_assignment_result(m.apply(++i, encode_reassign(onto4)));
  ASSERT_FALSE(refused);
  EXPECT_NE(describe(refused.error()).find("being removed"), std::string::npos);
  // 4 is still registered while its replicas move.
  EXPECT_EQ(m.brokers().size(), 4u);
  // The leaders expand the ISRs, the controller completes the moves: 4 is
  // gone everywhere, leaders it had moved within the ISR, and it is
  // unregistered.
  auto led_by_4 = m.topic("t")->partitions[3];
  ASSERT_EQ(led_by_4.leader, 4);
  finish_moves(m, i);
  EXPECT_FALSE(names(*m.topic("t"), 4));
  EXPECT_FALSE(names(*m.topic("s"), 4));
  for (auto* t : {"t", "s"})
    for (auto md = *m.topic(t); auto& pa : md.partitions) {
      EXPECT_EQ(pa.replicas.size(), static_cast<size_t>(md.config.replication_factor));
      EXPECT_EQ(pa.isr.size(), pa.replicas.size());
      EXPECT_NE(std::find(pa.isr.begin(), pa.isr.end(), pa.leader), pa.isr.end());
    }
  auto moved = m.topic("t")->partitions[3];
  EXPECT_EQ(moved.epoch.value, led_by_4.epoch.value + 1);
  EXPECT_TRUE(m.removing().empty());
  for (auto& b : m.brokers())
    EXPECT_NE(b.id, 4);
  EXPECT_EQ(m.brokers().size(), 3u);
  // Gone: it cannot be removed again, nor fenced; registering brings it back.
  auto again = decode_broker_result(m.apply(++i, encode_remove_broker(4)));
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::invalid_request));
  EXPECT_FALSE(decode_broker_result(m.apply(++i, encode_broker(reg_of(4, true)))));
  // Snapshots in the middle of a removal keep it going.
  ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(5, false)))));
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("w", rf_config(4, 2)))));
  ASSERT_TRUE(names(*m.topic("w"), 5));
  ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_remove_broker(5))));
  metadata_state_machine copy{{1, 2, 3}, 32767};
  ASSERT_FALSE(copy.restore(i, m.snapshot()));
  EXPECT_EQ(copy.removing(), std::vector<int32_t>{5});
  EXPECT_EQ(copy.reassignments().size(), m.reassignments().size());
  finish_moves(copy, i);
  EXPECT_FALSE(names(*copy.topic("w"), 5));
  EXPECT_TRUE(copy.removing().empty());
}

TEST(MetadataMachine, RemovingABrokerWithNothingUnregistersAtOnce) {
  metadata_state_machine m{{1, 2, 3}, 32767};
  uint64_t i = 0;
  ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(6, false)))));
  ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_remove_broker(6))));
  EXPECT_TRUE(m.removing().empty());
  EXPECT_TRUE(m.brokers().empty());
}

TEST(MetadataMachine, RemoveNodeRefusesVotersUnknownNodesAndTooFewBrokers) {
  metadata_state_machine m{{1, 2, 3}, 32767};
  uint64_t i = 0;
  for (int32_t id : {1, 2, 3, 4})
    ASSERT_TRUE(decode_broker_result(m.apply(++i, encode_broker(reg_of(id, false)))));
  auto voter = decode_broker_result(m.apply(++i, encode_remove_broker(2)));
  ASSERT_FALSE(voter);
  EXPECT_TRUE(is(voter.error(), ec::invalid_request));
  EXPECT_NE(describe(voter.error()).find("voter"), std::string::npos) << describe(voter.error());
  auto unknown = decode_broker_result(m.apply(++i, encode_remove_broker(9)));
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(is(unknown.error(), ec::invalid_request));
  // RF 4 over 4 brokers: removing one would leave 3.
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("t", rf_config(1, 4)))));
  auto few = decode_broker_result(m.apply(++i, encode_remove_broker(4)));
  ASSERT_FALSE(few);
  EXPECT_TRUE(is(few.error(), ec::policy_violation));
  EXPECT_NE(describe(few.error()).find("replication factor 4"), std::string::npos)
    << describe(few.error());
  EXPECT_TRUE(m.removing().empty());
  EXPECT_TRUE(m.reassignments().empty());
  // A fenced broker does not count as a place to move to either.
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_delete_topic("t"))));
  ASSERT_TRUE(decode_topic_result(m.apply(++i, encode_create_topic("u", rf_config(4, 3)))));
  m.apply(++i, encode_broker(reg_of(3, true)));
  auto fenced = decode_broker_result(m.apply(++i, encode_remove_broker(4)));
  ASSERT_FALSE(fenced);
  EXPECT_TRUE(is(fenced.error(), ec::policy_violation));
}

// -- the Kafka listener in registrations: older logs and snapshots ------------


TEST(MetadataMachine, RegistrationsCarryTheKafkaListenerAndOlderOnesStillRead) {
  metadata_state_machine m{{1, 2, 3}, 3};
  // A registration written by an older ferryd (kind 6, no Kafka fields).
  old_registration old{2, "10.0.0.2", 9102, 8082, 9464, false, 0};
  auto r = decode_broker_result(m.apply(1, bytes_of({1, 6}, old)));
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->host, "10.0.0.2");
  EXPECT_EQ(r->http_port, 8082);
  EXPECT_EQ(r->kafka_port, 0);
  // Today's registration (kind 14) keeps the Kafka listener...
  auto now = reg_of(1, false);
  now.kafka_host = "kafka-1.example";
  now.kafka_port = 19092;
  ASSERT_TRUE(decode_broker_result(m.apply(2, encode_broker(now))));
  // ...through a snapshot too.
  metadata_state_machine b{{1, 2, 3}, 3};
  ASSERT_FALSE(b.restore(2, m.snapshot()));
  std::map<int32_t, broker_registration> regs;
  for (auto& x : b.brokers())
    regs[x.id] = x;
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[1].kafka_host, "kafka-1.example");
  EXPECT_EQ(regs[1].kafka_port, 19092);
  EXPECT_EQ(regs[2].port, 9102);
  // A version-5 snapshot (brokers in the older layout) restores.
  std::vector<topic_metadata> topics;
  std::vector<old_registration> brokers{old};
  std::vector<isr_change> moves;
  std::vector<int32_t> removing;
  std::vector<scram_credential> users;
  std::vector<acl_entry> acls;
  metadata_state_machine c{{1, 2, 3}, 3};
  auto err = c.restore(7, bytes_of({5}, int64_t{42}, topics, brokers, moves, removing,
                                   users, acls));
  ASSERT_FALSE(err) << describe(err);
  ASSERT_EQ(c.brokers().size(), 1u);
  EXPECT_EQ(c.brokers()[0].host, "10.0.0.2");
  EXPECT_EQ(c.brokers()[0].kafka_port, 0);
}

// Registrations carry the peer port (ferryd --peer-port) as command kind
// broker_v3 and in version 8 snapshots; logs and snapshots written before
// it (broker_v2, snapshots 6-7) still decode, without one.
TEST(RaftMetadataMachine, PeerPortsAreRegisteredAndOlderRegistrationsStillDecode) {
  metadata_state_machine m{{1, 2, 3}, 1};
  auto reg = reg_of(4, false);
  reg.peer_port = 19404;
  reg.kafka_host = "kafka.example";
  reg.kafka_port = 29404;
  auto r = decode_broker_result(m.apply(1, encode_broker(reg)));
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->peer_port, 19404);
  EXPECT_EQ(r->peer_endpoint_port(), 19404);
  // broker_v2 (kind 14): the layout before the peer port.
  using v2 = std::tuple<int32_t, std::string, uint16_t, uint16_t, uint16_t, bool, int64_t,
                        std::string, uint16_t>;
  std::vector<char> buf{1, 14};
  {
    caf::binary_serializer sink{nullptr, buf};
    v2 old{5, "10.0.0.5", 9105, 8085, 9465, false, 0, "k5", 29105};
    ASSERT_FALSE(sink(old));
  }
  auto o = decode_broker_result(m.apply(2, std::string{buf.begin(), buf.end()}));
  ASSERT_TRUE(o) << describe(o.error());
  EXPECT_EQ(o->port, 9105);
  EXPECT_EQ(o->kafka_port, 29105);
  EXPECT_EQ(o->peer_port, 0);
  EXPECT_EQ(o->peer_endpoint_port(), 9105); // peers dial the one port
  // A version 8 snapshot keeps the peer port.
  metadata_state_machine b{{1, 2, 3}, 1};
  ASSERT_FALSE(b.restore(2, m.snapshot()));
  std::map<int32_t, broker_registration> got;
  for (auto& x : b.brokers())
    got[x.id] = x;
  ASSERT_EQ(got.count(4), 1u);
  EXPECT_EQ(got[4].peer_port, 19404);
  EXPECT_EQ(got[4].kafka_host, "kafka.example");
  EXPECT_EQ(got[5].peer_port, 0);
  // A version 7 snapshot: brokers in the broker_v2 layout.
  std::vector<v2> brokers{{6, "10.0.0.6", 9106, 0, 0, false, 3, "", 0}};
  std::vector<topic_metadata> topics;
  std::vector<isr_change> moves;
  std::vector<int32_t> removing;
  std::vector<scram_credential> users;
  std::vector<acl_entry> acls;
  int64_t next_pid = 1;
  std::vector<char> snap{7};
  {
    caf::binary_serializer sink{nullptr, snap};
    ASSERT_FALSE(sink(next_pid, topics, brokers, moves, removing, users, acls));
  }
  metadata_state_machine c{{1, 2, 3}, 1};
  ASSERT_FALSE(c.restore(1, std::string{snap.begin(), snap.end()}));
  auto list = c.brokers();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, 6);
  EXPECT_EQ(list[0].port, 9106);
  EXPECT_EQ(list[0].epoch, 3);
  EXPECT_EQ(list[0].peer_port, 0);
}
