// The stream-mode group coordinator on CAF's deterministic test scheduler
// (virtual time), with a real offset store in a temp dir and a fake broker
// answering list offsets. Also the offset store's encoding.

#include "actors/server/group_coordinator.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/kafka_group_protocol.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "tests/temp_dir.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace ferry {
namespace {

// -- a fake broker for list offsets -------------------------------------------

struct fake_log {
  int64_t start = 0;
  int64_t end = 0;
};

using fake_logs = std::map<std::pair<std::string, int32_t>, fake_log>;

// Record o of every fake log has timestamp 1000 * o.
caf::behavior fake_broker(caf::event_based_actor*,
                          std::shared_ptr<fake_logs> logs) {
  return {
    [logs](offsets_atom, const list_offsets_request& r) -> caf::result<offset> {
      auto i = logs->find({r.topic, r.partition.value});
      if (i == logs->end())
        return make_error(ec::unknown_topic, r.topic);
      if (r.timestamp == -2)
        return offset{i->second.start};
      if (r.timestamp == -1)
        return offset{i->second.end};
      auto o = (r.timestamp + 999) / 1000;
      return offset{std::clamp(o, i->second.start, i->second.end)};
    },
  };
}

// -- replies collected by throw-away requester actors -------------------------

template <class T>
struct reply {
  bool done = false;
  std::optional<T> value;
  caf::error err;
};

struct void_reply {
  bool done = false;
  caf::error err;
};

topic_metadata topic(std::string name, int32_t partitions) {
  topic_metadata t;
  t.name = std::move(name);
  t.config.partitions = partitions;
  for (int32_t p = 0; p < partitions; ++p)
    t.partitions.push_back(partition_assignment{partition_id{p}, 1,
                                                leader_epoch{0}, {1}, {1}});
  return t;
}

topic_partition tp(std::string t, int32_t p) {
  return topic_partition{std::move(t), partition_id{p}};
}

class GroupCoordinatorTest : public ::testing::Test {
protected:
  void SetUp() override {
    open_store();
    cfg.set("scheduler.policy", caf::atom("testing"));
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    logs = std::make_shared<fake_logs>();
    broker = caf::actor_cast<broker_actor>(sys->spawn(fake_broker, logs));
    topics = {topic("t", 4), topic("u", 2)};
    coord = spawn_coordinator("g");
  }

  void TearDown() override {
    for (auto& c : spawned)
      caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(broker, caf::exit_reason::user_shutdown);
    sched->run();
    spawned.clear();
    coord = nullptr;
    broker = nullptr;
    sys.reset();
    offsets.reset();
    store.reset();
  }

  void open_store() {
    lmdb::env_options opts;
    opts.no_sync = true;
    opts.initial_map_size = size_t{8} << 20;
    auto s = metadata_store::open(dir.path() / "meta", opts);
    ASSERT_TRUE(s) << describe(s.error());
    store = std::move(*s);
    offsets = std::make_shared<offset_store>(*store);
  }

  group_coordinator_actor spawn_coordinator(std::string group,
                                            caf::timespan delay = 0s) {
    group_config gc;
    gc.group = std::move(group);
    gc.offsets = offsets;
    gc.broker = broker;
    gc.topics = topics;
    gc.initial_rebalance_delay = delay;
    gc.member_id_seed = 42;
    auto c = sys->spawn(group_coordinator, std::move(gc));
    sched->run();
    spawned.push_back(c);
    return c;
  }

  // Stops the coordinator, then reopens the LMDB store from disk.
  void restart_store() {
    for (auto& c : spawned)
      caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
    sched->run();
    spawned.clear();
    coord = nullptr;
    offsets.reset();
    store.reset();
    open_store();
  }

  // Sends a request from a fresh actor; the reply lands in the result once
  // the scheduler ran.
  template <class T, class... Ts>
  std::shared_ptr<reply<T>> ask_to(group_coordinator_actor c, Ts... xs) {
    auto r = std::make_shared<reply<T>>();
    sys->spawn([r, c, xs...](caf::event_based_actor* self) {
      self->request(c, caf::infinite, xs...)
        .then(
          [r](T& x) {
            r->done = true;
            r->value = std::move(x);
          },
          [r](caf::error& err) {
            r->done = true;
            r->err = std::move(err);
          });
    });
    return r;
  }

  template <class T, class... Ts>
  std::shared_ptr<reply<T>> ask(Ts... xs) {
    return ask_to<T>(coord, xs...);
  }

  template <class... Ts>
  std::shared_ptr<void_reply> tell(Ts... xs) {
    auto r = std::make_shared<void_reply>();
    auto c = coord;
    sys->spawn([r, c, xs...](caf::event_based_actor* self) {
      self->request(c, caf::infinite, xs...)
        .then([r]() { r->done = true; },
              [r](caf::error& err) {
                r->done = true;
                r->err = std::move(err);
              });
    });
    return r;
  }

  // Replaces the coordinator with one in cluster mode: commits go to
  // __consumer_state/0 through `broker` (acks=all) before they are stored.
  void use_cluster_coordinator(broker_actor broker) {
    group_config gc;
    gc.group = "g";
    gc.offsets = offsets;
    gc.broker = std::move(broker);
    gc.topics = topics;
    gc.member_id_seed = 42;
    gc.state_topic = "__consumer_state";
    gc.state_partition = partition_id{0};
    gc.initial_rebalance_delay = 0s;
    coord = sys->spawn(group_coordinator, std::move(gc));
    spawned.push_back(coord);
    sched->run();
  }

  // -- steps --------------------------------------------------------------

  join_group_request
  join_req(std::string client, std::vector<std::string> subs = {"t"},
           std::vector<std::string> assignors = {"range"},
           std::string instance = {}, std::string group = "g") {
    join_group_request r;
    r.group = std::move(group);
    r.client_id = std::move(client);
    r.group_instance_id = std::move(instance);
    r.session_timeout_ms = 10000;
    r.rebalance_timeout_ms = 30000;
    r.assignors = std::move(assignors);
    r.topics = std::move(subs);
    return r;
  }

  // Joins and expects the reply right away (the rebalance completes).
  join_group_response join_now(const join_group_request& req) {
    auto r = ask<join_group_response>(join_atom_v, req);
    sched->run();
    EXPECT_TRUE(r->done);
    EXPECT_FALSE(r->err) << describe(r->err);
    return r->value.value_or(join_group_response{});
  }

  std::shared_ptr<reply<join_group_response>>
  rejoin(const join_group_request& base, const std::string& member_id,
         std::vector<topic_partition> owned = {}) {
    auto req = base;
    req.member_id = member_id;
    req.owned = std::move(owned);
    auto r = ask<join_group_response>(join_atom_v, req);
    sched->run();
    return r;
  }

  reply<sync_group_response> sync(const std::string& member_id,
                                  int32_t generation,
                                  const std::string& instance = {}) {
    auto r = ask<sync_group_response>(
      sync_atom_v, sync_group_request{"g", member_id, instance, generation, {}});
    sched->run();
    EXPECT_TRUE(r->done);
    return *r;
  }

  std::vector<topic_partition> sync_ok(const std::string& member_id,
                                       int32_t generation,
                                       const std::string& instance = {}) {
    auto r = sync(member_id, generation, instance);
    EXPECT_FALSE(r.err) << describe(r.err);
    if (!r.value)
      return {};
    EXPECT_EQ(r.value->generation, generation);
    return r.value->assignment;
  }

  caf::error heartbeat(const std::string& member_id, int32_t generation,
                       const std::string& instance = {}) {
    auto r = tell(heartbeat_atom_v,
                  heartbeat_request{"g", member_id, instance, generation});
    sched->run();
    EXPECT_TRUE(r->done);
    return r->err;
  }

  caf::error commit(const std::string& member_id, int32_t generation,
                    std::vector<partition_offset> offs, int64_t sequence = 0) {
    auto r = tell(commit_atom_v, commit_offsets_request{"g", member_id, {},
                                                        generation,
                                                        std::move(offs), sequence});
    sched->run();
    EXPECT_TRUE(r->done);
    return r->err;
  }

  caf::error leave(const std::string& member_id,
                   const std::string& instance = {}) {
    auto r = tell(leave_atom_v, leave_group_request{"g", member_id, instance});
    sched->run();
    EXPECT_TRUE(r->done);
    return r->err;
  }

  std::vector<partition_offset>
  fetch(std::vector<topic_partition> parts = {}) {
    auto r = ask<std::vector<partition_offset>>(
      offsets_atom_v, fetch_offsets_request{"g", std::move(parts)});
    sched->run();
    EXPECT_TRUE(r->done);
    EXPECT_FALSE(r->err) << describe(r->err);
    return r->value.value_or(std::vector<partition_offset>{});
  }

  group_description describe_group() {
    auto r = ask<group_description>(describe_atom_v, group_atom_v);
    sched->run();
    EXPECT_TRUE(r->done);
    EXPECT_FALSE(r->err) << describe(r->err);
    return r->value.value_or(group_description{});
  }

  reply<std::vector<partition_offset>>
  reset(std::string to, int64_t value = 0, bool dry_run = false,
        std::vector<std::string> ts = {"t"}) {
    auto r = ask<std::vector<partition_offset>>(
      reset_atom_v,
      reset_offsets_request{"g", std::move(ts), std::move(to), value, dry_run});
    sched->run();
    EXPECT_TRUE(r->done);
    return *r;
  }

  void update_topics(std::vector<topic_metadata> ts) {
    topics = ts;
    caf::anon_send(coord, update_atom_v, std::move(ts));
    sched->run();
  }

  // Lets `d` of virtual time pass in steps, heartbeating `keep` each step.
  void pass_time(caf::timespan d,
                 const std::vector<std::pair<std::string, int32_t>>& keep = {},
                 caf::timespan step = 2s) {
    for (caf::timespan t{0}; t < d; t += step) {
      sched->advance_time(step);
      sched->run();
      for (const auto& [id, gen] : keep)
        heartbeat(id, gen);
    }
  }

  // Two members A and B stable in generation 2 over topic t (4 partitions).
  struct pair_of_members {
    std::string a, b;
    int32_t generation = 0;
    std::vector<topic_partition> pa, pb;
  };

  pair_of_members two_stable_members(std::vector<std::string> assignors
                                     = {"range"}) {
    pair_of_members out;
    auto ra = join_req("a", {"t"}, assignors);
    auto ja = join_now(ra);
    sync_ok(ja.member_id, ja.generation);
    auto jb = ask<join_group_response>(join_atom_v,
                                       join_req("b", {"t"}, assignors));
    sched->run();
    auto ja2 = rejoin(ra, ja.member_id);
    EXPECT_TRUE(jb->done && ja2->done);
    out.a = ja.member_id;
    out.b = jb->value ? jb->value->member_id : "";
    out.generation = ja2->value ? ja2->value->generation : -1;
    out.pa = sync_ok(out.a, out.generation);
    out.pb = sync_ok(out.b, out.generation);
    return out;
  }

  ferry::test::temp_dir dir{"ferry-gc"};
  std::unique_ptr<metadata_store> store;
  std::shared_ptr<offset_store> offsets;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<fake_logs> logs;
  broker_actor broker;
  std::vector<topic_metadata> topics;
  std::vector<group_coordinator_actor> spawned;
  group_coordinator_actor coord;
};

// -- membership and rebalancing -----------------------------------------------

TEST_F(GroupCoordinatorTest, SingleMemberJoinAndSyncGetsAllPartitions) {
  auto j = join_now(join_req("a", {"t", "u"}));
  EXPECT_EQ(j.generation, 1);
  EXPECT_EQ(j.member_id.rfind("a-", 0), 0u) << j.member_id;
  EXPECT_EQ(j.leader_id, j.member_id);
  EXPECT_EQ(j.assignor, "range");
  EXPECT_EQ(describe_group().state, "CompletingRebalance");
  auto parts = sync_ok(j.member_id, 1);
  EXPECT_EQ(parts, (std::vector<topic_partition>{tp("t", 0), tp("t", 1),
                                                 tp("t", 2), tp("t", 3),
                                                 tp("u", 0), tp("u", 1)}));
  EXPECT_EQ(describe_group().state, "Stable");
  EXPECT_FALSE(heartbeat(j.member_id, 1));
}

TEST_F(GroupCoordinatorTest, SecondMemberTriggersRebalanceAndSplitsPartitions) {
  auto ra = join_req("a");
  auto ja = join_now(ra);
  EXPECT_EQ(sync_ok(ja.member_id, 1).size(), 4u);
  // B's join waits until A rejoined.
  auto jb = ask<join_group_response>(join_atom_v, join_req("b"));
  sched->run();
  EXPECT_FALSE(jb->done);
  EXPECT_EQ(describe_group().state, "PreparingRebalance");
  EXPECT_TRUE(is(heartbeat(ja.member_id, 1), ec::rebalance_in_progress));
  // A sync of the old generation is refused too.
  EXPECT_TRUE(is(sync(ja.member_id, 1).err, ec::rebalance_in_progress));
  auto ja2 = rejoin(ra, ja.member_id);
  ASSERT_TRUE(ja2->done && jb->done);
  ASSERT_TRUE(ja2->value && jb->value);
  EXPECT_EQ(ja2->value->generation, 2);
  EXPECT_EQ(jb->value->generation, 2);
  EXPECT_EQ(ja2->value->leader_id, jb->value->leader_id);
  auto pa = sync_ok(ja.member_id, 2);
  auto pb = sync_ok(jb->value->member_id, 2);
  EXPECT_EQ(pa, (std::vector<topic_partition>{tp("t", 0), tp("t", 1)}));
  EXPECT_EQ(pb, (std::vector<topic_partition>{tp("t", 2), tp("t", 3)}));
  EXPECT_EQ(describe_group().state, "Stable");
  EXPECT_FALSE(heartbeat(ja.member_id, 2));
  EXPECT_FALSE(heartbeat(jb->value->member_id, 2));
}

TEST_F(GroupCoordinatorTest, LeaveTriggersRebalance) {
  auto g = two_stable_members();
  ASSERT_EQ(g.generation, 2);
  EXPECT_FALSE(leave(g.b));
  EXPECT_TRUE(is(heartbeat(g.a, 2), ec::rebalance_in_progress));
  auto j = rejoin(join_req("a"), g.a);
  ASSERT_TRUE(j->done && j->value);
  EXPECT_EQ(j->value->generation, 3);
  EXPECT_EQ(sync_ok(g.a, 3).size(), 4u);
  EXPECT_TRUE(is(heartbeat(g.b, 3), ec::unknown_member));
  EXPECT_TRUE(is(leave(g.b), ec::unknown_member));
}

TEST_F(GroupCoordinatorTest, LastMemberLeavingEmptiesTheGroup) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(leave(j.member_id));
  auto d = describe_group();
  EXPECT_EQ(d.state, "Empty");
  EXPECT_EQ(d.generation, 2);
  EXPECT_TRUE(d.members.empty());
}

TEST_F(GroupCoordinatorTest, SessionTimeoutRemovesMemberAndMovesPartitions) {
  auto g = two_stable_members();
  // Only A heartbeats; B's 10 s session runs out.
  pass_time(8s, {{g.a, g.generation}});
  EXPECT_EQ(describe_group().members.size(), 2u);
  sched->advance_time(3s);
  sched->run();
  EXPECT_EQ(describe_group().members.size(), 1u);
  EXPECT_TRUE(is(heartbeat(g.a, g.generation), ec::rebalance_in_progress));
  auto j = rejoin(join_req("a"), g.a);
  ASSERT_TRUE(j->done && j->value);
  EXPECT_EQ(j->value->generation, g.generation + 1);
  auto pa = sync_ok(g.a, g.generation + 1);
  EXPECT_EQ(pa.size(), 4u);
  for (const auto& p : g.pb)
    EXPECT_NE(std::find(pa.begin(), pa.end(), p), pa.end());
  EXPECT_TRUE(is(heartbeat(g.b, g.generation), ec::unknown_member));
}

TEST_F(GroupCoordinatorTest, DroppedHeartbeatsLeadToExpiry) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  pass_time(8s, {{j.member_id, 1}});
  // The heartbeats stop (simply not sent).
  sched->advance_time(9s);
  sched->run();
  EXPECT_EQ(describe_group().members.size(), 1u);
  sched->advance_time(2s);
  sched->run();
  auto d = describe_group();
  EXPECT_EQ(d.state, "Empty");
  EXPECT_EQ(d.generation, 2);
  EXPECT_TRUE(is(heartbeat(j.member_id, 1), ec::unknown_member));
  EXPECT_TRUE(is(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1}, ""}}),
                 ec::unknown_member));
}

TEST_F(GroupCoordinatorTest, MemberNotRejoiningWithinRebalanceTimeoutIsRemoved) {
  auto g = two_stable_members();
  auto jc = ask<join_group_response>(join_atom_v, join_req("c"));
  sched->run();
  auto ja = rejoin(join_req("a"), g.a);
  EXPECT_FALSE(ja->done);
  // B keeps heartbeating (alive, but stuck in processing) and never rejoins.
  for (int i = 0; i < 14; ++i) {
    sched->advance_time(2s);
    sched->run();
    EXPECT_TRUE(is(heartbeat(g.b, g.generation), ec::rebalance_in_progress));
  }
  EXPECT_FALSE(ja->done);
  sched->advance_time(3s);
  sched->run();
  ASSERT_TRUE(ja->done && jc->done);
  ASSERT_TRUE(ja->value && jc->value);
  EXPECT_EQ(ja->value->generation, g.generation + 1);
  EXPECT_EQ(describe_group().members.size(), 2u);
  EXPECT_TRUE(is(heartbeat(g.b, g.generation), ec::unknown_member));
}

TEST_F(GroupCoordinatorTest, StaleGenerationIsFenced) {
  auto g = two_stable_members();
  ASSERT_EQ(g.generation, 2);
  EXPECT_TRUE(is(heartbeat(g.a, 1), ec::illegal_generation));
  EXPECT_TRUE(is(commit(g.a, 1, {{"t", partition_id{0}, offset{3}, ""}}),
                 ec::illegal_generation));
  EXPECT_TRUE(is(sync(g.a, 1).err, ec::illegal_generation));
  EXPECT_TRUE(fetch().empty());
  EXPECT_FALSE(commit(g.a, 2, {{"t", partition_id{0}, offset{3}, ""}}));
}

TEST_F(GroupCoordinatorTest, UnknownMemberIsRejected) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  const std::string ghost = "ghost-0123456789abcdef";
  EXPECT_TRUE(is(heartbeat(ghost, 1), ec::unknown_member));
  EXPECT_TRUE(is(sync(ghost, 1).err, ec::unknown_member));
  EXPECT_TRUE(is(commit(ghost, 1, {{"t", partition_id{0}, offset{3}, ""}}),
                 ec::unknown_member));
  EXPECT_TRUE(is(leave(ghost), ec::unknown_member));
  auto r = rejoin(join_req("a"), ghost);
  ASSERT_TRUE(r->done);
  EXPECT_TRUE(is(r->err, ec::unknown_member));
  // Nothing changed for the real member.
  EXPECT_FALSE(heartbeat(j.member_id, 1));
}

TEST_F(GroupCoordinatorTest, RequestsForAnotherGroupAreInvalid) {
  auto r = ask<join_group_response>(
    join_atom_v, join_req("a", {"t"}, {"range"}, {}, "other"));
  sched->run();
  ASSERT_TRUE(r->done);
  EXPECT_TRUE(is(r->err, ec::invalid_request));
}

TEST_F(GroupCoordinatorTest, SessionTimeoutOutOfBoundsIsRefused) {
  auto req = join_req("a");
  req.session_timeout_ms = 10;
  auto r = ask<join_group_response>(join_atom_v, req);
  sched->run();
  ASSERT_TRUE(r->done);
  EXPECT_TRUE(is(r->err, ec::invalid_request));
}

// -- static membership --------------------------------------------------------

TEST_F(GroupCoordinatorTest, StaticMemberRestartKeepsAssignmentWithoutRebalance) {
  auto rs = join_req("s", {"t"}, {"range"}, "inst-1");
  auto js = join_now(rs);
  sync_ok(js.member_id, 1, "inst-1");
  auto jd = ask<join_group_response>(join_atom_v, join_req("d"));
  sched->run();
  auto js2 = rejoin(rs, js.member_id);
  ASSERT_TRUE(js2->done && jd->done);
  ASSERT_TRUE(jd->value);
  auto before = sync_ok(js.member_id, 2, "inst-1");
  auto d_parts = sync_ok(jd->value->member_id, 2);
  ASSERT_EQ(before.size(), 2u);
  // The static member restarts: no member id, same instance id, within its
  // session timeout. It gets the same generation and assignment at once.
  sched->advance_time(5s);
  sched->run();
  auto back = join_now(rs);
  EXPECT_NE(back.member_id, js.member_id);
  EXPECT_EQ(back.generation, 2);
  EXPECT_EQ(sync_ok(back.member_id, 2, "inst-1"), before);
  EXPECT_EQ(describe_group().state, "Stable");
  EXPECT_FALSE(heartbeat(jd->value->member_id, 2));
  // The old incarnation is fenced.
  EXPECT_TRUE(is(heartbeat(js.member_id, 2, "inst-1"), ec::fenced_instance_id));
  auto zombie = ask<sync_group_response>(
    sync_atom_v, sync_group_request{"g", js.member_id, "inst-1", 2, {}});
  sched->run();
  EXPECT_TRUE(is(zombie->err, ec::fenced_instance_id));
  auto zombie_join = rejoin(rs, js.member_id);
  EXPECT_TRUE(is(zombie_join->err, ec::fenced_instance_id));
  EXPECT_FALSE(heartbeat(back.member_id, 2, "inst-1"));
  EXPECT_EQ(describe_group().generation, 2);
}

TEST_F(GroupCoordinatorTest, StaticMemberNotBackInTimeIsRemoved) {
  auto rs = join_req("s", {"t"}, {"range"}, "inst-1");
  auto js = join_now(rs);
  sync_ok(js.member_id, 1, "inst-1");
  auto jd = ask<join_group_response>(join_atom_v, join_req("d"));
  sched->run();
  rejoin(rs, js.member_id);
  ASSERT_TRUE(jd->done && jd->value);
  auto d = jd->value->member_id;
  sync_ok(js.member_id, 2, "inst-1");
  sync_ok(d, 2);
  // The static member is gone longer than its session timeout.
  pass_time(12s, {{d, 2}});
  EXPECT_TRUE(is(heartbeat(d, 2), ec::rebalance_in_progress));
  auto jd2 = rejoin(join_req("d"), d);
  ASSERT_TRUE(jd2->done && jd2->value);
  EXPECT_EQ(jd2->value->generation, 3);
  EXPECT_EQ(sync_ok(d, 3).size(), 4u);
  // Coming back later is an ordinary join with a rebalance.
  auto late = ask<join_group_response>(join_atom_v, rs);
  sched->run();
  EXPECT_FALSE(late->done);
  rejoin(join_req("d"), d);
  ASSERT_TRUE(late->done && late->value);
  EXPECT_EQ(late->value->generation, 4);
}

TEST_F(GroupCoordinatorTest, StaticMemberCanLeaveByInstanceId) {
  auto rs = join_req("s", {"t"}, {"range"}, "inst-1");
  auto js = join_now(rs);
  sync_ok(js.member_id, 1, "inst-1");
  EXPECT_FALSE(leave("", "inst-1"));
  EXPECT_EQ(describe_group().state, "Empty");
}

// -- assignors ----------------------------------------------------------------

TEST_F(GroupCoordinatorTest, AssignorIsChosenByMemberPreferences) {
  struct one_case {
    std::vector<std::string> a, b;
    std::string expected;
  };
  std::vector<one_case> cases{
    {{"roundrobin", "range"}, {"roundrobin"}, "roundrobin"},
    {{"range", "roundrobin"}, {"roundrobin", "range"}, "range"},
    {{"cooperative-sticky", "range"}, {"cooperative-sticky"}, "cooperative-sticky"},
  };
  int n = 0;
  for (const auto& c : cases) {
    auto group = "g" + std::to_string(n++);
    auto gc = spawn_coordinator(group);
    auto ra = join_req("a", {"t", "u"}, c.a, {}, group);
    auto rb = join_req("b", {"t", "u"}, c.b, {}, group);
    auto ja = ask_to<join_group_response>(gc, join_atom_v, ra);
    sched->run();
    ASSERT_TRUE(ja->done && ja->value);
    auto jb = ask_to<join_group_response>(gc, join_atom_v, rb);
    sched->run();
    ra.member_id = ja->value->member_id;
    auto ja2 = ask_to<join_group_response>(gc, join_atom_v, ra);
    sched->run();
    ASSERT_TRUE(ja2->done && jb->done);
    ASSERT_TRUE(ja2->value && jb->value);
    EXPECT_EQ(ja2->value->assignor, c.expected);
    EXPECT_EQ(jb->value->assignor, c.expected);
  }
  // No assignor in common: refused.
  auto ra = join_req("a", {"t"}, {"range"});
  auto ja = join_now(ra);
  auto bad = ask<join_group_response>(join_atom_v,
                                      join_req("b", {"t"}, {"roundrobin"}));
  sched->run();
  ASSERT_TRUE(bad->done);
  EXPECT_TRUE(is(bad->err, ec::inconsistent_group_protocol));
  auto none = ask<join_group_response>(join_atom_v,
                                       join_req("c", {"t"}, {"sticky"}));
  sched->run();
  EXPECT_TRUE(is(none->err, ec::inconsistent_group_protocol));
  EXPECT_EQ(describe_group().members.size(), 1u);
}

TEST_F(GroupCoordinatorTest, RoundRobinAssignmentMatchesTheAssignor) {
  auto g = two_stable_members({"roundrobin"});
  EXPECT_EQ(g.pa, (std::vector<topic_partition>{tp("t", 0), tp("t", 2)}));
  EXPECT_EQ(g.pb, (std::vector<topic_partition>{tp("t", 1), tp("t", 3)}));
}

TEST_F(GroupCoordinatorTest, CooperativeStickyRevokesBeforeReassigning) {
  std::vector<std::string> coop{"cooperative-sticky"};
  auto ra = join_req("a", {"t"}, coop);
  auto rb = join_req("b", {"t"}, coop);
  auto ja = join_now(ra);
  auto all = sync_ok(ja.member_id, 1);
  ASSERT_EQ(all.size(), 4u);
  auto jb = ask<join_group_response>(join_atom_v, rb);
  sched->run();
  auto ja2 = rejoin(ra, ja.member_id, all);
  ASSERT_TRUE(ja2->done && jb->done && jb->value);
  auto b = jb->value->member_id;
  EXPECT_EQ(ja2->value->generation, 2);
  // Generation 2: A keeps two, the two moving ones are only revoked.
  auto a2 = sync_ok(ja.member_id, 2);
  EXPECT_EQ(a2, (std::vector<topic_partition>{tp("t", 0), tp("t", 1)}));
  EXPECT_TRUE(sync_ok(b, 2).empty());
  // Once everyone synced, the coordinator starts the follow-up rebalance.
  EXPECT_EQ(describe_group().state, "PreparingRebalance");
  EXPECT_TRUE(is(heartbeat(ja.member_id, 2), ec::rebalance_in_progress));
  EXPECT_TRUE(is(heartbeat(b, 2), ec::rebalance_in_progress));
  rb.member_id = b;
  auto jb3 = ask<join_group_response>(join_atom_v, rb);
  auto ja3 = rejoin(ra, ja.member_id, a2);
  ASSERT_TRUE(ja3->done && jb3->done && ja3->value);
  EXPECT_EQ(ja3->value->generation, 3);
  EXPECT_EQ(sync_ok(ja.member_id, 3), a2);
  EXPECT_EQ(sync_ok(b, 3),
            (std::vector<topic_partition>{tp("t", 2), tp("t", 3)}));
  // No third round.
  EXPECT_EQ(describe_group().state, "Stable");
  EXPECT_FALSE(heartbeat(ja.member_id, 3));
  EXPECT_FALSE(heartbeat(b, 3));
}

TEST_F(GroupCoordinatorTest, ReorderedJoinsProduceTheSameAssignment) {
  for (auto assignor : {"range", "roundrobin", "cooperative-sticky"}) {
    std::map<std::string, std::vector<topic_partition>> results[2];
    std::vector<std::vector<std::string>> orders{{"c1", "c2", "c3"},
                                                 {"c3", "c1", "c2"}};
    for (int k = 0; k < 2; ++k) {
      auto group = std::string{assignor} + "-" + std::to_string(k);
      // The initial rebalance delay lets all three join one generation.
      auto gc = spawn_coordinator(group, 3s);
      std::map<std::string, std::shared_ptr<reply<join_group_response>>> js;
      for (const auto& client : orders[k])
        js[client] = ask_to<join_group_response>(
          gc, join_atom_v,
          join_req(client, {"t", "u"}, {assignor}, {}, group));
      sched->run();
      for (auto& [client, r] : js)
        EXPECT_FALSE(r->done);
      // The delay is extended once because members joined during it.
      sched->advance_time(3s);
      sched->run();
      sched->advance_time(3s);
      sched->run();
      for (auto& [client, r] : js) {
        ASSERT_TRUE(r->done && r->value) << client;
        EXPECT_EQ(r->value->generation, 1);
        auto s = ask_to<sync_group_response>(
          gc, sync_atom_v,
          sync_group_request{group, r->value->member_id, {}, 1, {}});
        sched->run();
        ASSERT_TRUE(s->done && s->value);
        results[k][client] = s->value->assignment;
      }
    }
    EXPECT_EQ(results[0], results[1]) << assignor;
    std::set<topic_partition> all;
    for (const auto& [client, ps] : results[0])
      all.insert(ps.begin(), ps.end());
    EXPECT_EQ(all.size(), 6u) << assignor;
  }
}

TEST_F(GroupCoordinatorTest, PartitionCountChangeTriggersRebalance) {
  auto ra = join_req("a");
  auto j = join_now(ra);
  EXPECT_EQ(sync_ok(j.member_id, 1).size(), 4u);
  // A topic the group does not read changes: nothing happens.
  update_topics({topic("t", 4), topic("u", 5)});
  EXPECT_FALSE(heartbeat(j.member_id, 1));
  update_topics({topic("t", 6), topic("u", 5)});
  EXPECT_TRUE(is(heartbeat(j.member_id, 1), ec::rebalance_in_progress));
  auto j2 = rejoin(ra, j.member_id);
  ASSERT_TRUE(j2->done && j2->value);
  EXPECT_EQ(sync_ok(j.member_id, 2).size(), 6u);
}

// -- offsets --------------------------------------------------------------------

TEST_F(GroupCoordinatorTest, CommitAndFetchOffsets) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1,
                      {{"t", partition_id{0}, offset{5}, "m0"},
                       {"t", partition_id{1}, offset{7}, ""}}));
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{9}, "m1"}}));
  auto all = fetch();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].topic, "t");
  EXPECT_EQ(all[0].partition, partition_id{0});
  EXPECT_EQ(all[0].committed, offset{9});
  EXPECT_EQ(all[0].metadata, "m1");
  EXPECT_EQ(all[1].committed, offset{7});
  auto some = fetch({tp("t", 1), tp("t", 3)});
  ASSERT_EQ(some.size(), 2u);
  EXPECT_EQ(some[0].committed, offset{7});
  EXPECT_EQ(some[1].committed, offset{-1});
  // Bad offsets are refused whole.
  EXPECT_TRUE(is(commit(j.member_id, 1,
                        {{"t", partition_id{2}, offset{1}, ""},
                         {"t", partition_id{3}, offset{-5}, ""}}),
                 ec::invalid_request));
  EXPECT_EQ(fetch().size(), 2u);
}

// Found by tests/chaos: a coordinator ended by its node (the group moved to
// another node) left members waiting in a join for their request timeout
// (minutes); now they are answered at once and look for the coordinator
// again.
TEST_F(GroupCoordinatorTest, EndingTheCoordinatorAnswersAWaitingJoin) {
  auto ja = join_now(join_req("a"));
  sync_ok(ja.member_id, 1);
  auto jb = ask<join_group_response>(join_atom_v, join_req("b"));
  sched->run();
  ASSERT_FALSE(jb->done) << "b's join should wait for a to rejoin";
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  sched->run();
  ASSERT_TRUE(jb->done);
  EXPECT_TRUE(is(jb->err, ec::coordinator_not_available)) << describe(jb->err);
}

// A broker for the group's __consumer_state writes whose produce answers
// the test switches between success and failure.
struct state_writes {
  bool fail = false;
  int produced = 0;
};

caf::behavior state_broker(caf::event_based_actor*, std::shared_ptr<state_writes> w) {
  return {
    [w](produce_atom, const produce_request&) -> caf::result<produce_response> {
      ++w->produced;
      if (w->fail)
        return make_error(ec::not_enough_replicas, "test: the ISR is too small");
      return produce_response{};
    },
    [](offsets_atom, const list_offsets_request&) -> caf::result<offset> {
      return offset{0};
    },
  };
}

// Found by tests/chaos: in a cluster a commit went into the node's offset
// store before it was replicated, so a commit that failed (a coordinator
// cut off from its followers) was still served by offset fetches, and a
// later coordinator, which has only the replicated commits, showed the
// offsets moving backwards. Now a commit is stored once replicated.
TEST_F(GroupCoordinatorTest, InAClusterACommitIsVisibleOnlyOnceReplicated) {
  auto writes = std::make_shared<state_writes>();
  auto sb = caf::actor_cast<broker_actor>(sys->spawn(state_broker, writes));
  use_cluster_coordinator(sb);
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{5}, ""}}));
  writes->fail = true;
  EXPECT_TRUE(is(commit(j.member_id, 1, {{"t", partition_id{0}, offset{9}, ""}}),
                 ec::coordinator_not_available));
  auto after_failure = fetch({tp("t", 0)});
  ASSERT_EQ(after_failure.size(), 1u);
  EXPECT_EQ(after_failure[0].committed, offset{5}) << "a commit that was not replicated is served";
  writes->fail = false;
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{12}, ""}}));
  auto after_success = fetch({tp("t", 0)});
  ASSERT_EQ(after_success.size(), 1u);
  EXPECT_EQ(after_success[0].committed, offset{12});
  EXPECT_EQ(writes->produced, 3);
  caf::anon_send_exit(sb, caf::exit_reason::user_shutdown);
}

// A broker whose __consumer_state produce answers the test gives by hand.
struct held_writes {
  std::vector<caf::typed_response_promise<produce_response>> pending;
};

caf::behavior held_state_broker(caf::event_based_actor* self, std::shared_ptr<held_writes> w) {
  return {
    [self, w](produce_atom, const produce_request&) -> caf::result<produce_response> {
      auto rp = self->make_response_promise<produce_response>();
      w->pending.push_back(rp);
      return rp;
    },
    [](offsets_atom, const list_offsets_request&) -> caf::result<offset> {
      return offset{0};
    },
    // Answers the oldest produce held: success, or not_enough_replicas.
    [w](caf::ok_atom, bool fail) {
      if (w->pending.empty())
        return;
      auto rp = w->pending.front();
      w->pending.erase(w->pending.begin());
      if (fail)
        rp.deliver(make_error(ec::not_enough_replicas, "test: the ISR is too small"));
      else
        rp.deliver(produce_response{});
    },
  };
}

// For tests/chaos seed 5001 (offsets read lower while a follower's full
// disk held commits back; the cause inferred from node logs, not seen): a
// fetch answered while a commit is in flight shows the older offsets, and a
// member restarting from them commits below the pending commit once it is
// stored. A fetch now waits for the commits in flight.
TEST_F(GroupCoordinatorTest, AnOffsetFetchWaitsForTheCommitsInFlight) {
  auto writes = std::make_shared<held_writes>();
  auto sb = caf::actor_cast<broker_actor>(sys->spawn(held_state_broker, writes));
  use_cluster_coordinator(sb);
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  auto commit_at = [&](int64_t off) {
    auto r = tell(commit_atom_v,
                  commit_offsets_request{"g", j.member_id, {}, 1,
                                         {{"t", partition_id{0}, offset{off}, ""}}, 0});
    sched->run();
    return r;
  };
  auto fetch_t0 = [&] {
    auto r = ask<std::vector<partition_offset>>(offsets_atom_v,
                                                fetch_offsets_request{"g", {tp("t", 0)}});
    sched->run();
    return r;
  };
  auto release = [&](bool fail = false) {
    EXPECT_FALSE(writes->pending.empty());
    caf::anon_send(caf::actor_cast<caf::actor>(sb), caf::ok_atom_v, fail);
    sched->run();
  };
  // Nothing in flight: answered at once.
  auto c5 = commit_at(5);
  release();
  ASSERT_TRUE(c5->done);
  EXPECT_FALSE(c5->err) << describe(c5->err);
  auto f5 = fetch_t0();
  ASSERT_TRUE(f5->done);
  EXPECT_EQ(f5->value->at(0).committed, offset{5});
  // A commit in flight: the fetch waits for it and shows it.
  auto c9 = commit_at(9);
  EXPECT_FALSE(c9->done);
  auto f9 = fetch_t0();
  EXPECT_FALSE(f9->done) << "answered while a commit was in flight";
  release();
  ASSERT_TRUE(c9->done && f9->done);
  ASSERT_TRUE(f9->value) << describe(f9->err);
  EXPECT_EQ(f9->value->at(0).committed, offset{9});
  // Two in flight: the fetch waits for both; one that fails is not shown.
  auto c12 = commit_at(12);
  auto c14 = commit_at(14);
  auto f14 = fetch_t0();
  release();
  EXPECT_FALSE(f14->done) << "answered while the second commit was in flight";
  release(true);
  ASSERT_TRUE(f14->done && c14->done);
  EXPECT_TRUE(is(c14->err, ec::coordinator_not_available)) << describe(c14->err);
  EXPECT_EQ(f14->value->at(0).committed, offset{12});
  // A commit made after the fetch came does not keep it waiting (members
  // committing all the time would starve it).
  auto c16 = commit_at(16);
  auto f16 = fetch_t0();
  auto c18 = commit_at(18);
  release();
  ASSERT_TRUE(f16->done) << "a commit made after the fetch kept it waiting";
  EXPECT_FALSE(c18->done);
  EXPECT_EQ(f16->value->at(0).committed, offset{16});
  release();
  ASSERT_TRUE(c18->done);
  // A coordinator that stops answers the fetches still waiting.
  auto c20 = commit_at(20);
  auto f20 = fetch_t0();
  EXPECT_FALSE(f20->done);
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  sched->run();
  ASSERT_TRUE(f20->done);
  EXPECT_TRUE(is(f20->err, ec::coordinator_not_available)) << describe(f20->err);
  caf::anon_send_exit(sb, caf::exit_reason::user_shutdown);
}

// Found by tests/chaos (seed 5302): a member's commit sent through a node
// that was then killed reached the coordinator after the member's next
// commit, sent through another node, and moved the offsets back (1976 ->
// 1975). Commits carry the member's sequence; a late one is refused.
TEST_F(GroupCoordinatorTest, AMembersLateCommitDoesNotMoveItsOffsetsBack) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1975}, ""}}, 1));
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1976}, ""}}, 3));
  // Sequence 2, sent before 3, arrives after it; so does a repeat of 3.
  EXPECT_TRUE(is(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1975}, ""}}, 2),
                 ec::out_of_order_sequence));
  EXPECT_TRUE(is(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1975}, ""}}, 3),
                 ec::out_of_order_sequence));
  EXPECT_EQ(fetch({tp("t", 0)}).at(0).committed, offset{1976});
  // Later ones go on; so do commits without a sequence (Kafka and HTTP
  // clients: the order they arrive in) and a member that rewinds on purpose.
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1990}, ""}}, 4));
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1980}, ""}}, 5));
  EXPECT_EQ(fetch({tp("t", 0)}).at(0).committed, offset{1980});
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1700}, ""}}));
  EXPECT_EQ(fetch({tp("t", 0)}).at(0).committed, offset{1700});
  // A rejoin of the same member keeps its count: a late commit stays late.
  auto again = rejoin(join_req("a"), j.member_id);
  ASSERT_TRUE(again->done && again->value) << describe(again->err);
  auto gen = again->value->generation;
  sync_ok(j.member_id, gen);
  EXPECT_TRUE(is(commit(j.member_id, gen, {{"t", partition_id{0}, offset{1}, ""}}, 5),
                 ec::out_of_order_sequence));
  EXPECT_FALSE(commit(j.member_id, gen, {{"t", partition_id{0}, offset{1701}, ""}}, 6));
  EXPECT_EQ(fetch({tp("t", 0)}).at(0).committed, offset{1701});
}

TEST_F(GroupCoordinatorTest, CommitsDuringCompletingRebalanceAreRefused) {
  auto j = join_now(join_req("a"));
  EXPECT_TRUE(is(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1}, ""}}),
                 ec::rebalance_in_progress));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1, {{"t", partition_id{0}, offset{1}, ""}}));
}

TEST_F(GroupCoordinatorTest, StandaloneCommitsOnlyWhileEmpty) {
  EXPECT_FALSE(commit("", -1, {{"t", partition_id{0}, offset{11}, "admin"}}));
  EXPECT_EQ(fetch().at(0).committed, offset{11});
  auto j = join_now(join_req("a"));
  EXPECT_TRUE(is(commit("", -1, {{"t", partition_id{0}, offset{12}, ""}}),
                 ec::group_not_empty));
  EXPECT_EQ(fetch().at(0).committed, offset{11});
  EXPECT_FALSE(leave(j.member_id));
  EXPECT_FALSE(commit("", -1, {{"t", partition_id{0}, offset{12}, ""}}));
  EXPECT_EQ(fetch().at(0).committed, offset{12});
}

TEST_F(GroupCoordinatorTest, OffsetsSurviveRespawnOnTheSameStore) {
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1,
                      {{"t", partition_id{2}, offset{42}, "keep"},
                       {"u", partition_id{0}, offset{3}, ""}}));
  EXPECT_FALSE(leave(j.member_id)); // generation 2, Empty
  restart_store();
  coord = spawn_coordinator("g");
  auto all = fetch();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].topic, "t");
  EXPECT_EQ(all[0].partition, partition_id{2});
  EXPECT_EQ(all[0].committed, offset{42});
  EXPECT_EQ(all[0].metadata, "keep");
  EXPECT_EQ(all[1].topic, "u");
  EXPECT_EQ(all[1].committed, offset{3});
  // The generation carries on, so no generation id is handed out twice.
  auto d = describe_group();
  EXPECT_EQ(d.state, "Empty");
  EXPECT_EQ(d.generation, 2);
  EXPECT_EQ(join_now(join_req("a")).generation, 3);
  auto groups = offsets->list_groups();
  ASSERT_TRUE(groups);
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ(groups->at(0).group, "g");
}

TEST_F(GroupCoordinatorTest, ResetOffsetsWhileEmpty) {
  (*logs)[{"t", 0}] = {10, 50};
  (*logs)[{"t", 1}] = {0, 20};
  (*logs)[{"t", 2}] = {0, 0};
  (*logs)[{"t", 3}] = {5, 5};
  EXPECT_FALSE(commit("", -1, {{"t", partition_id{0}, offset{30}, ""}}));
  auto offsets_of = [](const reply<std::vector<partition_offset>>& r) {
    std::vector<int64_t> out;
    if (r.value)
      for (const auto& o : *r.value)
        out.push_back(o.committed.value);
    return out;
  };
  // A dry run reports and writes nothing.
  auto dry = reset("earliest", 0, true);
  EXPECT_FALSE(dry.err) << describe(dry.err);
  EXPECT_EQ(offsets_of(dry), (std::vector<int64_t>{10, 0, 0, 5}));
  EXPECT_EQ(fetch().size(), 1u);
  EXPECT_EQ(fetch().at(0).committed, offset{30});
  EXPECT_EQ(offsets_of(reset("latest")), (std::vector<int64_t>{50, 20, 0, 5}));
  EXPECT_EQ(fetch({tp("t", 0)}).at(0).committed, offset{50});
  EXPECT_EQ(offsets_of(reset("timestamp", 15000)),
            (std::vector<int64_t>{15, 15, 0, 5}));
  // Offsets are clamped into [log start, log end].
  EXPECT_EQ(offsets_of(reset("offset", 100)),
            (std::vector<int64_t>{50, 20, 0, 5}));
  EXPECT_EQ(offsets_of(reset("offset", 3)), (std::vector<int64_t>{10, 3, 0, 5}));
  EXPECT_EQ(fetch().size(), 4u);
  EXPECT_EQ(fetch({tp("t", 1)}).at(0).committed, offset{3});
  // No topics: every topic with committed offsets.
  EXPECT_EQ(offsets_of(reset("earliest", 0, false, {})),
            (std::vector<int64_t>{10, 0, 0, 5}));
  EXPECT_TRUE(is(reset("nowhere").err, ec::invalid_request));
  EXPECT_TRUE(is(reset("earliest", 0, false, {"nope"}).err, ec::unknown_topic));
  // u has no fake log: the broker's error comes back, nothing is written.
  EXPECT_TRUE(is(reset("earliest", 0, false, {"u"}).err, ec::unknown_topic));
}

TEST_F(GroupCoordinatorTest, ResetAndDeleteRefusedWhileMembersPresent) {
  (*logs)[{"t", 0}] = {0, 9};
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_TRUE(is(reset("earliest").err, ec::group_not_empty));
  auto del = tell(delete_atom_v, group_atom_v);
  sched->run();
  EXPECT_TRUE(is(del->err, ec::group_not_empty));
}

TEST_F(GroupCoordinatorTest, DeleteGroupOnlyWhileEmpty) {
  EXPECT_FALSE(commit("", -1, {{"t", partition_id{0}, offset{30}, ""}}));
  auto del = tell(delete_atom_v, group_atom_v);
  sched->run();
  EXPECT_TRUE(del->done);
  EXPECT_FALSE(del->err) << describe(del->err);
  EXPECT_TRUE(fetch().empty());
  auto groups = offsets->list_groups();
  ASSERT_TRUE(groups);
  EXPECT_TRUE(groups->empty());
  auto again = tell(delete_atom_v, group_atom_v);
  sched->run();
  EXPECT_TRUE(is(again->err, ec::unknown_group));
}

TEST_F(GroupCoordinatorTest, DescribeReportsMembersAndLag) {
  (*logs)[{"t", 0}] = {10, 50};
  (*logs)[{"t", 1}] = {0, 20};
  (*logs)[{"t", 2}] = {0, 7};
  (*logs)[{"t", 3}] = {4, 4};
  auto j = join_now(join_req("a"));
  sync_ok(j.member_id, 1);
  EXPECT_FALSE(commit(j.member_id, 1,
                      {{"t", partition_id{0}, offset{30}, ""},
                       {"t", partition_id{2}, offset{7}, ""},
                       // Below the log start: lag counts from the start.
                       {"t", partition_id{3}, offset{1}, ""}}));
  auto d = describe_group();
  EXPECT_EQ(d.group, "g");
  EXPECT_EQ(d.mode, "stream");
  EXPECT_EQ(d.state, "Stable");
  EXPECT_EQ(d.assignor, "range");
  EXPECT_EQ(d.generation, 1);
  ASSERT_EQ(d.members.size(), 1u);
  EXPECT_EQ(d.members[0].member_id, j.member_id);
  EXPECT_EQ(d.members[0].client_id, "a");
  EXPECT_EQ(d.members[0].assignment.size(), 4u);
  ASSERT_EQ(d.partitions.size(), 4u);
  std::vector<int64_t> lags, committed, ends;
  for (const auto& p : d.partitions) {
    lags.push_back(p.lag);
    committed.push_back(p.committed.value);
    ends.push_back(p.log_end.value);
    EXPECT_EQ(p.member_id, j.member_id);
  }
  EXPECT_EQ(committed, (std::vector<int64_t>{30, -1, 7, 1}));
  EXPECT_EQ(ends, (std::vector<int64_t>{50, 20, 7, 4}));
  EXPECT_EQ(lags, (std::vector<int64_t>{20, 20, 0, 0}));
  EXPECT_EQ(d.partitions[0].log_start, offset{10});
}

TEST_F(GroupCoordinatorTest, DescribeWithoutLogOffsetsReportsUnknownLag) {
  // No fake log for t: the broker answers unknown_topic.
  EXPECT_FALSE(commit("", -1, {{"t", partition_id{0}, offset{30}, ""}}));
  auto d = describe_group();
  EXPECT_EQ(d.state, "Empty");
  ASSERT_EQ(d.partitions.size(), 1u);
  EXPECT_EQ(d.partitions[0].committed, offset{30});
  EXPECT_EQ(d.partitions[0].log_end, offset{-1});
  EXPECT_EQ(d.partitions[0].lag, -1);
}

// -- the offset store's encoding ------------------------------------------------

TEST(OffsetStoreFormat, WorkedExampleMatchesTheDocumentedBytes) {
  namespace of = offset_format;
  auto key = of::encode_offset_key("g", "t", partition_id{2});
  ASSERT_TRUE(key);
  EXPECT_EQ(*key, std::string("g\0t\0\0\0\0\2", 8));
  auto value = of::encode_offset_value(
    committed_offset{"t", partition_id{2}, offset{42}, "m", 1000});
  EXPECT_EQ(value, std::string("\1"
                               "\0\0\0\0\0\0\0\x2a"
                               "\0\0\0\0\0\0\x03\xe8"
                               "\0\0\0\1"
                               "m",
                               22));
  auto k = of::decode_offset_key(*key);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->group, "g");
  EXPECT_EQ(k->topic, "t");
  EXPECT_EQ(k->partition, partition_id{2});
  committed_offset o;
  EXPECT_FALSE(of::decode_offset_value(value, o));
  EXPECT_EQ(o.committed, offset{42});
  EXPECT_EQ(o.commit_timestamp, 1000);
  EXPECT_EQ(o.metadata, "m");
}

TEST(OffsetStoreFormat, CorruptValuesAreRejected) {
  namespace of = offset_format;
  auto good = of::encode_offset_value(
    committed_offset{"t", partition_id{0}, offset{1}, "meta", 5});
  committed_offset o;
  EXPECT_TRUE(is(of::decode_offset_value(good.substr(0, 10), o),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(of::decode_offset_value(good + "x", o), ec::corrupt_segment));
  EXPECT_TRUE(is(of::decode_offset_value(good.substr(0, good.size() - 1), o),
                 ec::corrupt_segment));
  auto bad_version = good;
  bad_version[0] = 9;
  EXPECT_TRUE(is(of::decode_offset_value(bad_version, o), ec::corrupt_segment));
  EXPECT_FALSE(of::decode_offset_key("short"));
  EXPECT_FALSE(of::decode_offset_key(std::string("g\0\0\0\0\0\1", 7)));
  EXPECT_FALSE(of::decode_offset_key(std::string("gt\0\0\0\0\1x", 8)));
  EXPECT_FALSE(of::encode_offset_key("", "t", partition_id{0}));
  EXPECT_FALSE(of::encode_offset_key("g", std::string("a\0b", 3), partition_id{0}));
  EXPECT_FALSE(of::encode_offset_key("g", "t", partition_id{-1}));
  group_record r;
  auto gv = of::encode_group_value(group_record{"g", 7, "stream", "range"});
  EXPECT_FALSE(of::decode_group_value(gv, r));
  EXPECT_EQ(r.generation, 7);
  EXPECT_EQ(r.mode, "stream");
  EXPECT_EQ(r.assignor, "range");
  EXPECT_TRUE(is(of::decode_group_value(gv.substr(0, gv.size() - 1), r),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(of::decode_group_value(gv + "z", r), ec::corrupt_segment));
  EXPECT_TRUE(is(of::decode_group_value("\1\0", r), ec::corrupt_segment));
}

TEST_F(GroupCoordinatorTest, OffsetStoreKeepsGroupsApartAndReportsCorruption) {
  std::vector<committed_offset> a{{"t", partition_id{0}, offset{1}, "", 0}};
  std::vector<committed_offset> b{{"t", partition_id{0}, offset{2}, "", 0}};
  ASSERT_FALSE(offsets->commit("g", a));
  ASSERT_FALSE(offsets->commit("g2", b));
  // "g" must not see "g2"'s offsets although one name prefixes the other.
  auto ga = offsets->fetch("g");
  ASSERT_TRUE(ga);
  ASSERT_EQ(ga->size(), 1u);
  EXPECT_EQ(ga->at(0).committed, offset{1});
  auto one = offsets->fetch("g2", "t", partition_id{0});
  ASSERT_TRUE(one && *one);
  EXPECT_EQ((*one)->committed, offset{2});
  auto none = offsets->fetch("g2", "t", partition_id{1});
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  // A damaged value is reported, not misread.
  auto key = offset_format::encode_offset_key("g", "t", partition_id{0});
  ASSERT_FALSE(store->put(offset_format::offsets_db, *key, "\1\0"));
  auto broken = offsets->fetch("g");
  ASSERT_FALSE(broken);
  EXPECT_TRUE(is(broken.error(), ec::corrupt_segment));
  EXPECT_TRUE(offsets->fetch("g2"));
  // Validation errors write nothing.
  std::vector<committed_offset> mixed{{"t", partition_id{5}, offset{1}, "", 0},
                                      {"", partition_id{0}, offset{1}, "", 0}};
  EXPECT_TRUE(is(offsets->commit("g3", mixed), ec::invalid_argument));
  auto g3 = offsets->fetch("g3");
  ASSERT_TRUE(g3);
  EXPECT_TRUE(g3->empty());
}

// -- client-side groups (Kafka clients) ----------------------------------------

/// A Kafka consumer's join: protocol type "consumer", one subscription per
/// protocol name (what librdkafka sends).
join_group_request kafka_join(std::string client,
                              std::vector<std::string> protocols,
                              std::vector<std::string> subs = {"t"}) {
  join_group_request r;
  r.group = "g";
  r.client_id = std::move(client);
  r.session_timeout_ms = 10000;
  r.rebalance_timeout_ms = 30000;
  r.protocol_type = "consumer";
  r.topics = subs;
  kafka::consumer_subscription s;
  s.topics = subs;
  for (auto& p : protocols) {
    s.user_data = p; // distinguishes the metadata per protocol
    r.assignors.push_back(p);
    r.protocol_metadata.push_back(kafka::write_consumer_subscription(s));
  }
  return r;
}

std::string kafka_assignment(std::vector<int32_t> parts) {
  kafka::consumer_assignment a;
  a.partitions.push_back(kafka::topic_partitions{"t", std::move(parts)});
  return kafka::write_consumer_assignment(a);
}

TEST_F(GroupCoordinatorTest, KafkaGroupsAssignOnTheLeaderAndFollowersWaitForItsSync) {
  auto ra = kafka_join("a", {"range", "roundrobin"});
  auto ja = join_now(ra);
  EXPECT_EQ(ja.generation, 1);
  EXPECT_EQ(ja.leader_id, ja.member_id);
  EXPECT_EQ(ja.assignor, "range");
  EXPECT_EQ(ja.protocol_type, "consumer");
  ASSERT_EQ(ja.members.size(), 1u);
  EXPECT_EQ(ja.members[0].metadata, ra.protocol_metadata[0]);
  // The leader's sync hands out its own assignment; the group is Stable.
  auto s1 = ask<sync_group_response>(
    sync_atom_v, sync_group_request{"g", ja.member_id, {}, 1,
                                    {member_assignment{ja.member_id,
                                                       kafka_assignment({0, 1, 2, 3})}}});
  sched->run();
  ASSERT_TRUE(s1->done && s1->value) << describe(s1->err);
  EXPECT_EQ(s1->value->assignment_bytes, kafka_assignment({0, 1, 2, 3}));
  auto d1 = describe_group();
  EXPECT_EQ(d1.state, "Stable");
  EXPECT_EQ(d1.protocol_type, "consumer");
  ASSERT_EQ(d1.members.size(), 1u);
  EXPECT_EQ(d1.members[0].assignment, (std::vector<topic_partition>{tp("t", 0), tp("t", 1),
                                                                    tp("t", 2), tp("t", 3)}));
  // B supports only roundrobin: the next generation uses it; A stays leader
  // and sees both members' roundrobin metadata, B sees none.
  auto rb = kafka_join("b", {"roundrobin"});
  auto jb = ask<join_group_response>(join_atom_v, rb);
  sched->run();
  EXPECT_FALSE(jb->done);
  auto ja2 = rejoin(ra, ja.member_id);
  ASSERT_TRUE(ja2->done && ja2->value && jb->done && jb->value);
  EXPECT_EQ(ja2->value->generation, 2);
  EXPECT_EQ(ja2->value->assignor, "roundrobin");
  EXPECT_EQ(ja2->value->leader_id, ja.member_id);
  ASSERT_EQ(ja2->value->members.size(), 2u);
  for (auto& m : ja2->value->members)
    EXPECT_EQ(m.metadata, m.member_id == ja.member_id ? ra.protocol_metadata[1]
                                                      : rb.protocol_metadata[0]);
  EXPECT_TRUE(jb->value->members.empty());
  auto b = jb->value->member_id;
  // B's sync waits for the leader's.
  auto sb = ask<sync_group_response>(sync_atom_v, sync_group_request{"g", b, {}, 2, {}});
  sched->run();
  EXPECT_FALSE(sb->done);
  EXPECT_EQ(describe_group().state, "CompletingRebalance");
  auto sa = ask<sync_group_response>(
    sync_atom_v,
    sync_group_request{"g", ja.member_id, {}, 2,
                       {member_assignment{ja.member_id, kafka_assignment({0, 2})},
                        member_assignment{b, kafka_assignment({1, 3})}}});
  sched->run();
  ASSERT_TRUE(sa->done && sa->value && sb->done && sb->value) << describe(sb->err);
  EXPECT_EQ(sa->value->assignment_bytes, kafka_assignment({0, 2}));
  EXPECT_EQ(sb->value->assignment_bytes, kafka_assignment({1, 3}));
  EXPECT_EQ(sb->value->assignment, (std::vector<topic_partition>{tp("t", 1), tp("t", 3)}));
  EXPECT_EQ(describe_group().state, "Stable");
  EXPECT_FALSE(heartbeat(ja.member_id, 2));
  EXPECT_FALSE(heartbeat(b, 2));
  // A follower's rejoin with the same metadata changes nothing; the
  // leader's rejoin starts a rebalance (Kafka's rule: it may have seen new
  // partitions).
  auto again = rejoin(rb, b);
  ASSERT_TRUE(again->done && again->value);
  EXPECT_EQ(again->value->generation, 2);
  EXPECT_EQ(describe_group().state, "Stable");
  auto lead = rejoin(ra, ja.member_id);
  EXPECT_FALSE(lead->done);
  EXPECT_EQ(describe_group().state, "PreparingRebalance");
  EXPECT_TRUE(is(heartbeat(b, 2), ec::rebalance_in_progress));
}

TEST_F(GroupCoordinatorTest, AKafkaFollowerWaitingForTheLeaderHearsOfARebalance) {
  auto ra = kafka_join("a", {"range"});
  auto ja = join_now(ra);
  auto s1 = ask<sync_group_response>(
    sync_atom_v, sync_group_request{"g", ja.member_id, {}, 1,
                                    {member_assignment{ja.member_id,
                                                       kafka_assignment({0, 1, 2, 3})}}});
  sched->run();
  ASSERT_TRUE(s1->done && s1->value);
  auto rb = kafka_join("b", {"range"});
  auto jb = ask<join_group_response>(join_atom_v, rb);
  sched->run();
  auto ja2 = rejoin(ra, ja.member_id);
  ASSERT_TRUE(jb->done && jb->value);
  auto b = jb->value->member_id;
  auto sb = ask<sync_group_response>(sync_atom_v, sync_group_request{"g", b, {}, 2, {}});
  sched->run();
  EXPECT_FALSE(sb->done);
  // The leader leaves before it synced: B's sync is answered, it rejoins.
  EXPECT_FALSE(leave(ja.member_id));
  ASSERT_TRUE(sb->done);
  EXPECT_TRUE(is(sb->err, ec::rebalance_in_progress)) << describe(sb->err);
  auto jb2 = rejoin(rb, b);
  ASSERT_TRUE(jb2->done && jb2->value);
  EXPECT_EQ(jb2->value->generation, 3);
  EXPECT_EQ(jb2->value->leader_id, b);
}

TEST_F(GroupCoordinatorTest, KafkaAndFerryMembersCannotShareAGroup) {
  auto ja = join_now(kafka_join("a", {"range"}));
  (void) ja;
  auto native = ask<join_group_response>(join_atom_v, join_req("n"));
  sched->run();
  ASSERT_TRUE(native->done);
  EXPECT_TRUE(is(native->err, ec::inconsistent_group_protocol)) << describe(native->err);
  // No protocol in common with the group.
  auto other = ask<join_group_response>(join_atom_v, kafka_join("c", {"my-own"}));
  sched->run();
  ASSERT_TRUE(other->done);
  EXPECT_TRUE(is(other->err, ec::inconsistent_group_protocol)) << describe(other->err);
  // A client-side join needs one metadata per protocol.
  auto bad = kafka_join("d", {"range"});
  bad.protocol_metadata.clear();
  auto r = ask<join_group_response>(join_atom_v, bad);
  sched->run();
  ASSERT_TRUE(r->done);
  EXPECT_TRUE(is(r->err, ec::invalid_request)) << describe(r->err);
}

} // namespace
} // namespace ferry
