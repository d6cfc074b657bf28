// The metadata of a single node (a Raft quorum of one: raft_node over the
// node's LMDB store, raft_metadata over it, as node.cpp spawns them), on
// CAF's deterministic test coordinator: topic admin, validation errors,
// persistence across re-spawns, subscriber updates, producer ids, and the
// import of an older single-node data dir's metadata (metadata_import.hpp).
// At the end, the node (broker_actor) on the same coordinator: held requests
// before the metadata caught up, replica crash and restart, the restart
// limit, shutdown and data deletion.

#include "actors/protocol/interfaces.hpp"
#include "actors/server/metadata_import.hpp"
#include "actors/server/node.hpp"
#include "actors/server/raft_metadata.hpp"
#include "actors/server/raft_node.hpp"
#include "broker/big_endian.hpp"
#include "broker/record_batch.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/raft_storage.hpp"
#include "tests/temp_dir.hpp"

#include <caf/binary_serializer.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

struct test_config : caf::actor_system_config {
  test_config() {
    register_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.file-verbosity", caf::atom("quiet"));
    log::set_level(log::level::warn);
  }
};

/// What a subscriber saw: every (update_atom, topics) in order.
struct update_log {
  std::vector<std::vector<topic_metadata>> updates;
};

caf::behavior recorder(caf::event_based_actor*,
                       std::shared_ptr<update_log> log) {
  return {
    [log](update_atom, const std::vector<topic_metadata>& topics) {
      log->updates.push_back(topics);
    },
  };
}

/// A legacy cluster.topics value: version byte 1, then the topic_metadata.
std::string legacy_topic_value(topic_metadata md) {
  std::vector<char> buf{
    static_cast<char>(legacy_metadata_format::topic_value_version)};
  caf::binary_serializer sink{nullptr, buf};
  // Those rows hold topic_config as it was then (its first eight fields).
  topic_metadata_v1 old{md.name, topic_config_v1{md.config}, md.partitions};
  EXPECT_FALSE(sink(old));
  return {buf.begin(), buf.end()};
}

class SingleNodeMetadata : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = tmp_.path();
    open_store();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*sys_, true);
    spawn_metadata();
  }

  void TearDown() override {
    stop_metadata();
    self_.reset();
    sched_->run();
    sys_.reset();
    raft_store_.reset();
    store_.reset();
  }

  void open_store() {
    lmdb::env_options opts;
    opts.no_sync = true; // durability is not what these tests check
    auto st = metadata_store::open(dir_ / "meta", opts);
    ASSERT_TRUE(st) << describe(st.error());
    store_ = std::shared_ptr<metadata_store>{std::move(*st)};
  }

  /// What node.cpp does for a node without --voters: import older
  /// metadata, then the quorum member of one and raft_metadata over it.
  caf::expected<size_t> spawn_metadata() {
    auto rs = raft_storage::open(store_->environment());
    if (!rs)
      return std::move(rs.error());
    raft_store_ = std::shared_ptr<raft_log_store>(std::move(*rs));
    auto imported = import_legacy_metadata(*store_, *raft_store_, 7);
    if (!imported)
      return imported;
    machine_ = std::make_shared<metadata_state_machine>(
      std::vector<int32_t>{7}, int16_t{1});
    raft_node_config rc;
    rc.raft.id = 7;
    rc.raft.voters = {7};
    rc.raft.seed = 7;
    rc.store = raft_store_;
    rc.machine = metadata_state_machine::adapter(machine_);
    raft_ = sys_->spawn(raft_node, rc);
    raft_metadata_config mc;
    mc.raft = raft_;
    mc.machine = machine_;
    md_ = sys_->spawn(raft_metadata, mc);
    sched_->run();
    return imported;
  }

  void stop_metadata() {
    if (!md_)
      return;
    caf::anon_send_exit(md_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(raft_, caf::exit_reason::user_shutdown);
    sched_->run();
    md_ = nullptr;
    raft_ = nullptr;
    machine_.reset();
    sched_->run();
    raft_store_.reset();
  }

  /// Sends a request, runs the scheduler, returns the answer.
  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    std::optional<caf::expected<T>> out;
    auto rh = (*self_)->request(md_, caf::infinite, std::forward<Ts>(xs)...);
    sched_->run();
    rh.receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    if (!out)
      return caf::make_error(caf::sec::request_timeout);
    return std::move(*out);
  }

  caf::expected<topic_metadata> create(const std::string& name,
                                       int32_t partitions = 1,
                                       int16_t rf = 1) {
    topic_config tc;
    tc.partitions = partitions;
    tc.replication_factor = rf;
    return ask<topic_metadata>(create_atom_v, topic_atom_v, name, tc);
  }

  std::vector<std::string> topic_names() {
    auto list = ask<std::vector<topic_metadata>>(list_atom_v, topic_atom_v);
    EXPECT_TRUE(list);
    std::vector<std::string> names;
    if (list)
      for (auto& t : *list)
        names.push_back(t.name);
    return names;
  }

  test_config cfg_;
  ferry::test::temp_dir tmp_;
  fs::path dir_;
  std::shared_ptr<metadata_store> store_;
  std::shared_ptr<raft_log_store> raft_store_;
  std::shared_ptr<metadata_state_machine> machine_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::unique_ptr<caf::scoped_actor> self_;
  raft_actor raft_;
  metadata_actor md_;
};

} // namespace

TEST_F(SingleNodeMetadata, CreateAssignsEveryPartitionToThisNode) {
  auto md = create("orders", 3);
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->name, "orders");
  EXPECT_EQ(md->config.partitions, 3);
  ASSERT_EQ(md->partitions.size(), 3u);
  for (int32_t p = 0; p < 3; ++p) {
    auto& pa = md->partitions[static_cast<size_t>(p)];
    EXPECT_EQ(pa.partition, partition_id{p});
    EXPECT_EQ(pa.leader, 7);
    EXPECT_EQ(pa.epoch, leader_epoch{0});
    EXPECT_EQ(pa.replicas, std::vector<int32_t>{7});
    EXPECT_EQ(pa.isr, std::vector<int32_t>{7});
  }
}

TEST_F(SingleNodeMetadata, ListAndDescribe) {
  ASSERT_TRUE(create("b"));
  ASSERT_TRUE(create("a", 2));
  EXPECT_EQ(topic_names(), (std::vector<std::string>{"a", "b"}));
  auto d = ask<topic_metadata>(describe_atom_v, topic_atom_v,
                               std::string{"a"});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->partitions.size(), 2u);
  auto missing = ask<topic_metadata>(describe_atom_v, topic_atom_v,
                                     std::string{"nope"});
  ASSERT_FALSE(missing);
  EXPECT_TRUE(is(missing.error(), ec::unknown_topic));
}

TEST_F(SingleNodeMetadata, DuplicateCreateIsTopicExists) {
  ASSERT_TRUE(create("t"));
  auto again = create("t", 4);
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::topic_exists)) << describe(again.error());
}

TEST_F(SingleNodeMetadata, InvalidNameAndConfigAreRefused) {
  auto bad = create("no/slash");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), ec::invalid_topic_name));
  auto zero = create("zero", 0);
  ASSERT_FALSE(zero);
  EXPECT_TRUE(is(zero.error(), ec::invalid_config));
  topic_config tc;
  tc.segment_bytes = 10;
  auto small = ask<topic_metadata>(create_atom_v, topic_atom_v,
                                   std::string{"small"}, tc);
  ASSERT_FALSE(small);
  EXPECT_TRUE(is(small.error(), ec::invalid_config));
  EXPECT_TRUE(topic_names().empty());
}

TEST_F(SingleNodeMetadata, ReplicationFactorAboveOneIsPolicyViolation) {
  auto md = create("replicated", 1, 3);
  ASSERT_FALSE(md);
  EXPECT_TRUE(is(md.error(), ec::policy_violation));
  EXPECT_NE(describe(md.error()).find("replication factor 3"),
            std::string::npos);
}

TEST_F(SingleNodeMetadata, AlterChangesConfigAndValidates) {
  ASSERT_TRUE(create("t"));
  std::map<std::string, std::string> kv{{"retention.ms", "60000"},
                                        {"max.message.bytes", "4096"}};
  auto md = ask<topic_metadata>(alter_atom_v, topic_atom_v, std::string{"t"},
                                kv);
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->config.retention_ms, 60000);
  EXPECT_EQ(md->config.max_message_bytes, 4096);
  std::map<std::string, std::string> bad{{"retention.ms", "120000"},
                                         {"bogus.key", "1"}};
  auto refused = ask<topic_metadata>(alter_atom_v, topic_atom_v,
                                     std::string{"t"}, bad);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::invalid_config));
  EXPECT_NE(describe(refused.error()).find("bogus.key"), std::string::npos);
  auto d = ask<topic_metadata>(describe_atom_v, topic_atom_v, std::string{"t"});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->config.retention_ms, 60000); // the failed alter changed nothing
  auto unknown = ask<topic_metadata>(alter_atom_v, topic_atom_v,
                                     std::string{"x"}, kv);
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(is(unknown.error(), ec::unknown_topic));
}

TEST_F(SingleNodeMetadata, AddPartitionsOnlyGrows) {
  ASSERT_TRUE(create("t", 2));
  auto md = ask<topic_metadata>(add_parts_atom_v, std::string{"t"}, int32_t{5});
  ASSERT_TRUE(md) << describe(md.error());
  ASSERT_EQ(md->partitions.size(), 5u);
  EXPECT_EQ(md->partitions[4].partition, partition_id{4});
  EXPECT_EQ(md->partitions[4].leader, 7);
  EXPECT_EQ(md->config.partitions, 5);
  auto shrink = ask<topic_metadata>(add_parts_atom_v, std::string{"t"},
                                    int32_t{3});
  ASSERT_FALSE(shrink);
  EXPECT_TRUE(is(shrink.error(), ec::invalid_request));
  auto same = ask<topic_metadata>(add_parts_atom_v, std::string{"t"},
                                  int32_t{5});
  EXPECT_TRUE(is(same.error(), ec::invalid_request));
  auto huge = ask<topic_metadata>(add_parts_atom_v, std::string{"t"},
                                  int32_t{10001});
  EXPECT_TRUE(is(huge.error(), ec::invalid_config));
  auto unknown = ask<topic_metadata>(add_parts_atom_v, std::string{"x"},
                                     int32_t{3});
  EXPECT_TRUE(is(unknown.error(), ec::unknown_topic));
}

TEST_F(SingleNodeMetadata, DeleteReturnsTheTopic) {
  ASSERT_TRUE(create("t", 2));
  auto md = ask<topic_metadata>(delete_atom_v, topic_atom_v, std::string{"t"});
  ASSERT_TRUE(md);
  EXPECT_EQ(md->partitions.size(), 2u);
  EXPECT_TRUE(topic_names().empty());
  auto again = ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                   std::string{"t"});
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::unknown_topic));
  // The name is free again.
  EXPECT_TRUE(create("t", 1));
}

TEST_F(SingleNodeMetadata, TopicsSurviveARespawn) {
  ASSERT_TRUE(create("kept", 3));
  ASSERT_TRUE(create("gone"));
  ASSERT_TRUE(ask<topic_metadata>(alter_atom_v, topic_atom_v,
                                  std::string{"kept"},
                                  std::map<std::string, std::string>{
                                    {"retention.bytes", "123456"}}));
  ASSERT_TRUE(ask<topic_metadata>(add_parts_atom_v, std::string{"kept"},
                                  int32_t{4}));
  ASSERT_TRUE(ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                  std::string{"gone"}));
  stop_metadata();
  // Reopen the LMDB environment too: nothing may live only in memory.
  store_.reset();
  open_store();
  spawn_metadata();
  EXPECT_EQ(topic_names(), std::vector<std::string>{"kept"});
  auto md = ask<topic_metadata>(describe_atom_v, topic_atom_v,
                                std::string{"kept"});
  ASSERT_TRUE(md);
  EXPECT_EQ(md->config.retention_bytes, 123456);
  EXPECT_EQ(md->config.partitions, 4);
  EXPECT_EQ(md->partitions.size(), 4u);
  EXPECT_TRUE(is(create("kept").error(), ec::topic_exists));
}

TEST_F(SingleNodeMetadata, SubscribersGetTheFullListNowAndAfterEveryChange) {
  auto log = std::make_shared<update_log>();
  auto sub = sys_->spawn(recorder, log);
  caf::anon_send(md_, subscribe_atom_v, sub);
  sched_->run();
  ASSERT_EQ(log->updates.size(), 1u);
  EXPECT_TRUE(log->updates[0].empty());
  ASSERT_TRUE(create("a"));
  ASSERT_TRUE(create("b", 2));
  ASSERT_FALSE(create("a")); // a refused request changes nothing: no update
  ASSERT_TRUE(ask<topic_metadata>(alter_atom_v, topic_atom_v, std::string{"a"},
                                  std::map<std::string, std::string>{
                                    {"segment.ms", "1000"}}));
  ASSERT_TRUE(ask<topic_metadata>(add_parts_atom_v, std::string{"a"},
                                  int32_t{2}));
  ASSERT_TRUE(ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                  std::string{"b"}));
  ASSERT_EQ(log->updates.size(), 6u);
  EXPECT_EQ(log->updates[1].size(), 1u);
  EXPECT_EQ(log->updates[2].size(), 2u);
  EXPECT_EQ(log->updates[3][0].config.segment_ms, 1000);
  EXPECT_EQ(log->updates[4][0].partitions.size(), 2u);
  ASSERT_EQ(log->updates[5].size(), 1u);
  EXPECT_EQ(log->updates[5][0].name, "a");
  // A subscriber that terminates is dropped; the actor keeps working.
  caf::anon_send_exit(sub, caf::exit_reason::user_shutdown);
  sched_->run();
  ASSERT_TRUE(create("c"));
  EXPECT_EQ(log->updates.size(), 6u);
}

TEST_F(SingleNodeMetadata, ProducerIdsAreUniqueAcrossRestarts) {
  std::set<int64_t> seen;
  auto take = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto id = ask<producer_identity>(init_pid_atom_v);
      ASSERT_TRUE(id) << describe(id.error());
      EXPECT_GE(id->id.value, 0);
      EXPECT_EQ(id->epoch, 0);
      EXPECT_TRUE(seen.insert(id->id.value).second) << id->id.value;
    }
  };
  take(6); // crosses a block boundary
  for (int restart = 0; restart < 3; ++restart) {
    stop_metadata();
    store_.reset();
    open_store();
    spawn_metadata();
    take(5);
  }
  EXPECT_EQ(seen.size(), 21u);
}

TEST_F(SingleNodeMetadata, ALegacyDataDirIsImportedOnce) {
  // The rows a single-node ferryd up to af7074b wrote (local_metadata),
  // with partitions assigned to another node id than today's (7): a
  // single-node data dir's partitions all belong to whoever opens it.
  // A store of its own: SetUp's has a Raft log already.
  stop_metadata();
  store_.reset();
  dir_ = dir_ / "legacy";
  open_store();
  namespace lf = legacy_metadata_format;
  topic_metadata md;
  md.name = "old";
  md.config.partitions = 2;
  md.config.retention_ms = 86400000;
  for (int32_t p = 0; p < 2; ++p) {
    partition_assignment pa;
    pa.partition = partition_id{p};
    pa.leader = 0;
    pa.epoch = leader_epoch{3};
    pa.replicas = {0};
    pa.isr = {0};
    md.partitions.push_back(pa);
  }
  ASSERT_FALSE(store_->put(lf::topics_db, "old", legacy_topic_value(md)));
  std::string limit;
  be::append(limit, int64_t{5000});
  ASSERT_FALSE(store_->put(lf::counters_db, lf::producer_id_limit_key, limit));
  auto imported = spawn_metadata();
  ASSERT_TRUE(imported) << describe(imported.error());
  EXPECT_EQ(*imported, 1u);
  auto got = ask<topic_metadata>(describe_atom_v, topic_atom_v,
                                 std::string{"old"});
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ(got->config.retention_ms, 86400000);
  ASSERT_EQ(got->partitions.size(), 2u);
  for (auto& pa : got->partitions) {
    EXPECT_EQ(pa.leader, 7);
    EXPECT_EQ(pa.replicas, std::vector<int32_t>{7});
    EXPECT_EQ(pa.isr, std::vector<int32_t>{7});
    EXPECT_EQ(pa.epoch, leader_epoch{3});
  }
  auto pid = ask<producer_identity>(init_pid_atom_v);
  ASSERT_TRUE(pid);
  EXPECT_GE(pid->id.value, 5000); // ids below the limit may be in use
  // The legacy rows are gone; the Raft log has the topic (and one more).
  EXPECT_TRUE(is(store_->get(lf::topics_db, "old").error(), ec::not_found));
  EXPECT_TRUE(is(store_->get(lf::counters_db, lf::producer_id_limit_key).error(),
                 ec::not_found));
  ASSERT_TRUE(create("new", 1));
  stop_metadata();
  store_.reset();
  open_store();
  imported = spawn_metadata();
  ASSERT_TRUE(imported);
  EXPECT_EQ(*imported, 0u);
  EXPECT_EQ(topic_names(), (std::vector<std::string>{"new", "old"}));
  auto pid2 = ask<producer_identity>(init_pid_atom_v);
  ASSERT_TRUE(pid2);
  EXPECT_GT(pid2->id.value, pid->id.value);
}

TEST_F(SingleNodeMetadata, LeftoverLegacyRowsDoNotOverwriteTheRaftLog) {
  // A crash after the import saved the snapshot but before it erased the
  // rows: the next start erases them and keeps what Raft has.
  ASSERT_TRUE(create("raft-topic"));
  stop_metadata();
  namespace lf = legacy_metadata_format;
  topic_metadata md;
  md.name = "stale";
  md.config.partitions = 1;
  ASSERT_FALSE(store_->put(lf::topics_db, "stale", legacy_topic_value(md)));
  auto imported = spawn_metadata();
  ASSERT_TRUE(imported);
  EXPECT_EQ(*imported, 0u);
  EXPECT_EQ(topic_names(), std::vector<std::string>{"raft-topic"});
  EXPECT_TRUE(is(store_->get(lf::topics_db, "stale").error(), ec::not_found));
}

TEST_F(SingleNodeMetadata, ACorruptLegacyRecordFailsTheStartAndChangesNothing) {
  stop_metadata();
  store_.reset();
  dir_ = dir_ / "legacy";
  open_store();
  namespace lf = legacy_metadata_format;
  ASSERT_FALSE(store_->put(lf::topics_db, "broken", std::string{"\x01\xff"}));
  ASSERT_FALSE(store_->put(lf::topics_db, "future", std::string{"\x09" "abc"}));
  auto imported = spawn_metadata();
  ASSERT_FALSE(imported);
  EXPECT_TRUE(is(imported.error(), ec::corrupt_segment))
    << describe(imported.error());
  EXPECT_NE(describe(imported.error()).find("cluster.topics record 'broken'"),
            std::string::npos)
    << describe(imported.error());
  // Nothing was written or erased: an operator can still inspect the rows.
  EXPECT_TRUE(store_->get(lf::topics_db, "broken"));
  auto rs = raft_storage::open(store_->environment());
  ASSERT_TRUE(rs);
  auto persisted = (*rs)->load();
  ASSERT_TRUE(persisted);
  EXPECT_EQ(persisted->snapshot.index, 0u);
}

// -- the node -------------------------------------------------------------------

namespace {

using namespace std::chrono_literals;

std::string small_batch(const std::string& value) {
  record r;
  r.timestamp = 1700000000000;
  r.value = value;
  auto b = encode_batch(batch_meta{}, {r});
  return b ? *b : std::string{};
}

class Node : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = tmp_.path();
    open_store();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*sys_, true);
  }

  void TearDown() override {
    stop_node();
    self_.reset();
    sched_->run();
    sys_.reset();
    store_.reset();
  }

  void open_store() {
    lmdb::env_options opts;
    opts.no_sync = true;
    auto st = metadata_store::open(dir_ / "meta", opts);
    ASSERT_TRUE(st) << describe(st.error());
    store_ = std::shared_ptr<metadata_store>{std::move(*st)};
  }

  node_config make_config() {
    node_config nc;
    nc.node_id = 1;
    nc.data_dir = dir_;
    nc.store = store_;
    nc.cluster_id = "test";
    nc.replica_defaults.tick_interval = std::chrono::milliseconds{0};
    nc.group_defaults.initial_rebalance_delay = caf::timespan{0};
    return nc;
  }

  void spawn_node(bool run = true) {
    node_ = sys_->spawn(node, make_config());
    if (run)
      sched_->run();
  }

  void stop_node() {
    if (!node_)
      return;
    caf::anon_send_exit(node_, caf::exit_reason::user_shutdown);
    sched_->run();
    node_ = nullptr;
    sched_->run();
  }

  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    std::optional<caf::expected<T>> out;
    auto rh = (*self_)->request(node_, caf::infinite, std::forward<Ts>(xs)...);
    sched_->run();
    rh.receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    if (!out)
      return caf::make_error(caf::sec::request_timeout);
    return std::move(*out);
  }

  caf::expected<topic_metadata> create(const std::string& name,
                                       int32_t partitions = 1) {
    topic_config tc;
    tc.partitions = partitions;
    return ask<topic_metadata>(create_atom_v, topic_atom_v, name, tc);
  }

  caf::expected<produce_response> produce(const std::string& topic,
                                          int32_t p, const std::string& v) {
    produce_request req;
    req.topic = topic;
    req.partition = partition_id{p};
    req.batch = small_batch(v);
    return ask<produce_response>(produce_atom_v, std::move(req));
  }

  caf::expected<topic_description> describe_topic(const std::string& name) {
    return ask<topic_description>(describe_atom_v, topic_atom_v, name);
  }

  /// Lets virtual time pass so backoff timers fire.
  void advance(caf::timespan d) {
    sched_->advance_time(d);
    sched_->run();
  }

  test_config cfg_;
  ferry::test::temp_dir tmp_;
  fs::path dir_;
  std::shared_ptr<metadata_store> store_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::unique_ptr<caf::scoped_actor> self_;
  broker_actor node_;
};

} // namespace

TEST_F(Node, CreateProduceFetchDescribe) {
  spawn_node();
  auto md = create("t", 2);
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_TRUE(fs::is_directory(replica_dir(dir_, "t", partition_id{0})));
  EXPECT_TRUE(fs::is_directory(replica_dir(dir_, "t", partition_id{1})));
  auto r = produce("t", 1, "hello");
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->base_offset, offset{0});
  fetch_request fr;
  fr.topic = "t";
  fr.partition = partition_id{1};
  auto f = ask<fetch_response>(fetch_atom_v, fr);
  ASSERT_TRUE(f) << describe(f.error());
  EXPECT_FALSE(f->data.empty());
  auto td = describe_topic("t");
  ASSERT_TRUE(td) << describe(td.error());
  ASSERT_EQ(td->partitions.size(), 2u);
  EXPECT_TRUE(td->partitions[1].online);
  EXPECT_EQ(td->partitions[1].log_end, offset{1});
  EXPECT_EQ(td->partitions[1].leader, 1);
  auto unknown = produce("nope", 0, "x");
  EXPECT_TRUE(is(unknown.error(), ec::unknown_topic));
  auto bad_part = produce("t", 2, "x");
  EXPECT_TRUE(is(bad_part.error(), ec::unknown_partition));
  auto cd = ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(cd);
  EXPECT_EQ(cd->controller, 1);
  ASSERT_EQ(cd->topics.size(), 1u);
}

TEST_F(Node, RequestsBeforeTheFirstSnapshotAreHeldNotRefused) {
  spawn_node();
  ASSERT_TRUE(create("t"));
  ASSERT_TRUE(produce("t", 0, "one"));
  stop_node();
  // A fresh node: the produce is in its mailbox before the topic list.
  spawn_node(/*run=*/false);
  auto r = produce("t", 0, "two");
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->base_offset, offset{1}); // the data survived the shutdown
}

TEST_F(Node, ACrashedReplicaIsRestarted) {
  // A regular file where the replica's directory belongs makes its log fail
  // to open: the replica terminates with an error.
  auto blocked = replica_dir(dir_, "t", partition_id{0});
  fs::create_directories(blocked.parent_path());
  std::ofstream{blocked} << "in the way";
  spawn_node();
  ASSERT_TRUE(create("t"));
  auto td = describe_topic("t");
  ASSERT_TRUE(td);
  EXPECT_FALSE(td->partitions[0].online);
  auto refused = produce("t", 0, "x");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::not_leader)) << describe(refused.error());
  fs::remove(blocked);
  advance(1s); // past the restart backoff
  auto r = produce("t", 0, "after restart");
  ASSERT_TRUE(r) << describe(r.error());
  td = describe_topic("t");
  ASSERT_TRUE(td);
  EXPECT_TRUE(td->partitions[0].online);
}

TEST_F(Node, AReplicaThatKeepsCrashingStaysOffline) {
  auto blocked = replica_dir(dir_, "t", partition_id{0});
  fs::create_directories(blocked.parent_path());
  std::ofstream{blocked} << "in the way";
  spawn_node();
  ASSERT_TRUE(create("t", 2));
  for (int i = 0; i < 20; ++i)
    advance(10s); // backoff doubles; max_restarts (5) within the window
  fs::remove(blocked);
  advance(60s);
  auto refused = produce("t", 0, "x");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::not_leader));
  // The other partition is unaffected.
  EXPECT_TRUE(produce("t", 1, "fine"));
  auto td = describe_topic("t");
  ASSERT_TRUE(td);
  EXPECT_FALSE(td->partitions[0].online);
  EXPECT_TRUE(td->partitions[1].online);
}

TEST_F(Node, DeleteRemovesDataAndRecreateStartsEmpty) {
  spawn_node();
  ASSERT_TRUE(create("t"));
  ASSERT_TRUE(produce("t", 0, "old"));
  auto dir = replica_dir(dir_, "t", partition_id{0});
  ASSERT_TRUE(fs::exists(dir));
  ASSERT_TRUE(ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                  std::string{"t"}));
  sched_->run();
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(is(produce("t", 0, "x").error(), ec::unknown_topic));
  ASSERT_TRUE(create("t"));
  auto r = produce("t", 0, "new");
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->base_offset, offset{0});
}

TEST_F(Node, AlterReachesTheReplicas) {
  spawn_node();
  ASSERT_TRUE(create("t"));
  auto md = ask<topic_metadata>(
    alter_atom_v, topic_atom_v, std::string{"t"},
    std::map<std::string, std::string>{{"max.message.bytes", "100"}});
  ASSERT_TRUE(md) << describe(md.error());
  sched_->run();
  auto big = produce("t", 0, std::string(500, 'x'));
  ASSERT_FALSE(big);
  EXPECT_TRUE(is(big.error(), ec::message_too_large)) << describe(big.error());
}

TEST_F(Node, GroupsAreUnknownUntilUsed) {
  spawn_node();
  auto d = ask<group_description>(describe_atom_v, group_atom_v,
                                  std::string{"g"});
  EXPECT_TRUE(is(d.error(), ec::unknown_group));
  auto none = ask<std::vector<group_description>>(list_atom_v, group_atom_v);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  fetch_offsets_request fo;
  fo.group = "g";
  auto offs = ask<std::vector<partition_offset>>(offsets_atom_v, fo);
  ASSERT_TRUE(offs) << describe(offs.error());
  auto list = ask<std::vector<group_description>>(list_atom_v, group_atom_v);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].group, "g");
  fetch_offsets_request empty_name;
  auto bad = ask<std::vector<partition_offset>>(offsets_atom_v, empty_name);
  EXPECT_TRUE(is(bad.error(), ec::invalid_request));
}

TEST_F(Node, ProducerIdsComeFromTheMetadata) {
  spawn_node();
  auto a = ask<producer_identity>(init_pid_atom_v);
  auto b = ask<producer_identity>(init_pid_atom_v);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->id, b->id);
}

// The node sends a single produce to its replica by delegation and the
// batches of a multi-partition produce with slots of one gather
// (node_routing.cpp, produce_gather.hpp). A partition's batches sent both
// ways, none waiting for the one before, must reach the replica in the
// order sent: their idempotent sequences are consecutive, so one that
// overtook another would be refused with out_of_order_sequence.
TEST_F(Node, SingleAndMultiPartitionProducesKeepEachPartitionsOrder) {
  spawn_node();
  constexpr int32_t partitions = 40;
  constexpr int32_t rounds = 4;
  ASSERT_TRUE(create("t", partitions));
  auto pid = ask<producer_identity>(init_pid_atom_v);
  ASSERT_TRUE(pid) << describe(pid.error());
  auto request = [&](int32_t p, int32_t seq) {
    record r;
    r.timestamp = 1700000000000;
    r.value = "p" + std::to_string(p) + "-" + std::to_string(seq);
    batch_meta m;
    m.producer_id = pid->id.value;
    m.producer_epoch = pid->epoch;
    m.base_sequence = seq;
    produce_request req;
    req.topic = "t";
    req.partition = partition_id{p};
    req.batch = *encode_batch(m, {r});
    return req;
  };
  using single_handle = decltype((*self_)->request(
    node_, caf::infinite, produce_atom_v, produce_request{}));
  using many_handle = decltype((*self_)->request(
    node_, caf::infinite, produce_atom_v, std::vector<produce_request>{}));
  // Even rounds: one single produce per partition; odd rounds: one produce
  // carrying every partition. All sent before the node runs.
  std::vector<std::pair<int32_t, single_handle>> singles; // (round, handle)
  std::vector<std::pair<int32_t, many_handle>> manys;
  for (int32_t k = 0; k < rounds; ++k) {
    if (k % 2 == 0) {
      for (int32_t p = 0; p < partitions; ++p)
        singles.emplace_back(k, (*self_)->request(node_, caf::infinite,
                                                  produce_atom_v, request(p, k)));
    } else {
      std::vector<produce_request> reqs;
      for (int32_t p = 0; p < partitions; ++p)
        reqs.push_back(request(p, k));
      manys.emplace_back(k, (*self_)->request(node_, caf::infinite,
                                              produce_atom_v, std::move(reqs)));
    }
  }
  sched_->run();
  int answered = 0;
  for (size_t i = 0; i < singles.size(); ++i) {
    auto [k, h] = singles[i];
    auto p = static_cast<int32_t>(i % partitions);
    h.receive(
      [&, k = k](produce_response& x) {
        ++answered;
        EXPECT_EQ(x.base_offset, offset{k}) << "partition " << p << " round " << k;
      },
      [&, k = k](caf::error& err) {
        ADD_FAILURE() << "partition " << p << " round " << k << ": " << describe(err);
      });
  }
  for (auto& [k, h] : manys) {
    h.receive(
      [&, k = k](std::vector<produce_result>& xs) {
        ASSERT_EQ(xs.size(), static_cast<size_t>(partitions));
        for (int32_t p = 0; p < partitions; ++p) {
          auto& x = xs[static_cast<size_t>(p)];
          ++answered;
          EXPECT_FALSE(x.error) << "partition " << p << " round " << k << ": "
                                << describe(x.error);
          EXPECT_EQ(x.response.base_offset, offset{k})
            << "partition " << p << " round " << k;
        }
      },
      [&, k = k](caf::error& err) {
        ADD_FAILURE() << "round " << k << ": " << describe(err);
      });
  }
  EXPECT_EQ(answered, partitions * rounds);
  auto td = describe_topic("t");
  ASSERT_TRUE(td) << describe(td.error());
  for (auto& ps : td->partitions)
    EXPECT_EQ(ps.log_end, offset{rounds});
}
