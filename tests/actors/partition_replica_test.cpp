// Deterministic tests of the partition replica (leader role) on CAF's test
// coordinator: group commit, fetch and long poll, idempotence, offsets,
// backpressure, retention, failures and restarts. Each test has its own
// temporary directory.

#include "actors/partition_replica.hpp"

#include "actors/interfaces.hpp"
#include "broker/file_system.hpp"
#include "broker/metadata_store.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

using namespace ferry;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr int64_t t0 = 1'700'000'000'000; // injected wall clock start (ms)

struct batch_spec {
  int records = 1;
  size_t value_bytes = 10;
  int64_t pid = -1;
  int16_t epoch = -1;
  int32_t seq = -1;
  timestamp_ms ts = t0;
};

std::string make_batch(const batch_spec& s) {
  batch_meta meta;
  meta.producer_id = s.pid;
  meta.producer_epoch = s.epoch;
  meta.base_sequence = s.seq;
  std::vector<record> recs;
  for (int i = 0; i < s.records; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = s.ts + i;
    r.value = std::string(s.value_bytes, static_cast<char>('a' + i % 26));
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(meta, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

// The base offsets of the batches in fetched data.
std::vector<int64_t> base_offsets(std::string_view data) {
  std::vector<int64_t> out;
  while (!data.empty()) {
    auto h = parse_batch_header(data);
    if (!h) {
      ADD_FAILURE() << describe(h.error());
      break;
    }
    out.push_back(h->base_offset.value);
    data.remove_prefix(h->total_size());
  }
  return out;
}

class partition_replica_test : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(sys_cfg_);
    sys_cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(sys_cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*sys_);
    std::random_device rd;
    root_ = fs::temp_directory_path()
            / ("ferry-replica-test-" + std::to_string(rd()) + "-"
               + std::to_string(rd()));
    fs::create_directories(root_);
    now_ = std::make_shared<std::atomic<int64_t>>(t0);
    cfg_.topic = "orders";
    cfg_.partition = partition_id{0};
    cfg_.dir = root_ / "orders-0";
    cfg_.node_id = 1;
    cfg_.tick_interval = 0ms; // tests send tick_atom themselves
    cfg_.fs = &faulty_;
    cfg_.clock = [now = now_] { return now->load(); };
  }

  void TearDown() override {
    if (replica_) {
      caf::anon_send_exit(replica_, caf::exit_reason::user_shutdown);
      sched_->run();
    }
    replica_ = nullptr;
    self_.reset();
    sys_.reset(); // joins everything before the store and dir go away
    store_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void spawn() {
    replica_ = sys_->spawn(partition_replica, cfg_);
    sched_->run();
  }

  partition_replica_state& state() {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(replica_);
    return dynamic_cast<partition_actor::stateful_base<partition_replica_state>&>(
             *ptr)
      .state;
  }

  void use_store() {
    lmdb::env_options opts;
    opts.no_sync = true;
    auto st = metadata_store::open(root_ / "meta", opts);
    ASSERT_TRUE(st) << describe(st.error());
    store_ = std::move(*st);
    cfg_.store = store_;
  }

  produce_request produce_req(std::string batch,
                              acks_mode acks = acks_mode::all) {
    return produce_request{cfg_.topic, cfg_.partition, acks, std::move(batch)};
  }

  fetch_request fetch_req(int64_t from, int32_t max_wait_ms = 0,
                          int32_t min_bytes = 1) {
    fetch_request r;
    r.topic = cfg_.topic;
    r.partition = cfg_.partition;
    r.from = offset{from};
    r.max_wait_ms = max_wait_ms;
    r.min_bytes = min_bytes;
    return r;
  }

  // Requests without running the scheduler; collect with await().
  template <class... Ts>
  auto request(Ts&&... xs) {
    return (*self_)->request(replica_, caf::infinite, std::forward<Ts>(xs)...);
  }

  // The answer to a request, which must be in the mailbox already.
  template <class T, class Handle>
  caf::expected<T> await(Handle& h) {
    if ((*self_)->mailbox().empty())
      return make_error(ec::request_timed_out, "no answer in the mailbox");
    caf::expected<T> out{make_error(ec::none)};
    h.receive([&](T& x) { out = std::move(x); },
              [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  template <class T, class... Ts>
  caf::expected<T> call(Ts&&... xs) {
    auto h = request(std::forward<Ts>(xs)...);
    sched_->run();
    return await<T>(h);
  }

  caf::expected<produce_response> produce(std::string batch,
                                          acks_mode acks = acks_mode::all) {
    return call<produce_response>(produce_atom_v, produce_req(std::move(batch), acks));
  }

  caf::expected<fetch_response> fetch(int64_t from) {
    return call<fetch_response>(fetch_atom_v, fetch_req(from));
  }

  caf::expected<partition_status> status() {
    return call<partition_status>(status_atom_v);
  }

  caf::expected<offset> list_offsets(int64_t ts) {
    return call<offset>(offsets_atom_v,
                        list_offsets_request{cfg_.topic, cfg_.partition, ts});
  }

  bool stop(bool delete_data) {
    auto r = call<bool>(stop_atom_v, delete_data);
    sched_->run();
    replica_ = nullptr;
    return r && *r;
  }

  size_t answers_waiting() { return (*self_)->mailbox().size(); }

  caf::actor_system_config sys_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::unique_ptr<caf::scoped_actor> self_;
  fs::path root_;
  std::shared_ptr<std::atomic<int64_t>> now_;
  fault_injecting_file_system faulty_{&default_file_system()};
  std::shared_ptr<metadata_store> store_;
  partition_replica_config cfg_;
  partition_actor replica_;
};

#define ASSERT_OK(x) ASSERT_TRUE(x) << describe((x).error())

// -- produce ------------------------------------------------------------------

TEST_F(partition_replica_test, produce_assigns_consecutive_offsets) {
  spawn();
  auto a = produce(make_batch({.records = 2}));
  auto b = produce(make_batch({.records = 3}));
  auto c = produce(make_batch({.records = 1}));
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  EXPECT_EQ(a->base_offset, offset{0});
  EXPECT_EQ(a->last_offset, offset{1});
  EXPECT_EQ(b->base_offset, offset{2});
  EXPECT_EQ(b->last_offset, offset{4});
  EXPECT_EQ(c->base_offset, offset{5});
  EXPECT_FALSE(c->duplicate);
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->log_end, offset{6});
  EXPECT_EQ(s->high_watermark, offset{6});
  EXPECT_EQ(s->leader, 1);
  EXPECT_EQ(s->isr, std::vector<int32_t>{1});
  EXPECT_TRUE(s->online);
  EXPECT_GT(s->size_bytes, 0);
}

TEST_F(partition_replica_test, queued_produces_share_one_fdatasync) {
  spawn();
  auto syncs_before = faulty_.syncs_of(".log");
  std::vector<decltype(request(produce_atom_v, produce_request{}))> hs;
  for (int i = 0; i < 10; ++i)
    hs.push_back(request(produce_atom_v, produce_req(make_batch({}))));
  sched_->run();
  for (int i = 0; i < 10; ++i) {
    auto r = await<produce_response>(hs[i]);
    ASSERT_OK(r);
    EXPECT_EQ(r->base_offset, offset{i});
  }
  // One group commit, one fdatasync of the segment for all ten: a flush per
  // request would show ten.
  EXPECT_EQ(faulty_.syncs_of(".log") - syncs_before, 1u);
  EXPECT_EQ(state().stats.commits, 1u);
  EXPECT_EQ(state().stats.log_flushes, 1u);
  // The next lone produce gets its own flush.
  ASSERT_OK(produce(make_batch({})));
  EXPECT_EQ(faulty_.syncs_of(".log") - syncs_before, 2u);
}

TEST_F(partition_replica_test, acks_wait_for_the_flush_but_acks_zero_does_not) {
  spawn();
  auto h1 = request(produce_atom_v, produce_req(make_batch({}), acks_mode::all));
  auto h0 = request(produce_atom_v, produce_req(make_batch({}), acks_mode::none));
  sched_->run_once(); // the acks=all produce: appended, parked
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->run_once(); // the acks=0 produce: answered at once
  EXPECT_EQ(answers_waiting(), 1u);
  auto r0 = await<produce_response>(h0);
  ASSERT_OK(r0);
  EXPECT_EQ(r0->base_offset, offset{1});
  EXPECT_EQ(state().log->durable_end(), offset{0}); // nothing flushed yet
  sched_->run(); // the flush
  auto r1 = await<produce_response>(h1);
  ASSERT_OK(r1);
  EXPECT_EQ(r1->base_offset, offset{0});
  EXPECT_EQ(state().log->durable_end(), offset{2});
}

TEST_F(partition_replica_test, relaxed_flush_policy_acks_before_fdatasync) {
  cfg_.flush.messages = 0; // no count trigger
  cfg_.flush.interval = 100ms;
  spawn();
  auto syncs_before = faulty_.syncs_of(".log");
  auto r = produce(make_batch({.records = 2}));
  ASSERT_OK(r);
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs_before); // acked from the page cache
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->high_watermark, offset{2});
  EXPECT_EQ(state().log->durable_end(), offset{0});
  caf::anon_send(replica_, tick_atom_v); // not due yet
  sched_->run();
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs_before);
  *now_ += 100;
  caf::anon_send(replica_, tick_atom_v); // due: the time-based flush
  sched_->run();
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs_before + 1);
  EXPECT_EQ(state().log->durable_end(), offset{2});
}

TEST_F(partition_replica_test, oversize_batch_is_message_too_large) {
  cfg_.topic_cfg.max_message_bytes = 100;
  spawn();
  auto batch = make_batch({.value_bytes = 300});
  auto r = produce(batch);
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::message_too_large)) << describe(r.error());
  auto text = describe(r.error());
  EXPECT_NE(text.find(std::to_string(batch.size())), std::string::npos) << text;
  EXPECT_NE(text.find("100"), std::string::npos) << text;
  // A batch within the limit (plus the batch header) is taken.
  ASSERT_OK(produce(make_batch({.value_bytes = 60})));
}

TEST_F(partition_replica_test, update_applies_a_smaller_max_message_size) {
  spawn();
  ASSERT_OK(produce(make_batch({.value_bytes = 300})));
  auto tc = cfg_.topic_cfg;
  tc.max_message_bytes = 100;
  caf::anon_send(replica_, update_atom_v, tc);
  sched_->run();
  auto r = produce(make_batch({.value_bytes = 300}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::message_too_large));
}

TEST_F(partition_replica_test, corrupt_batch_is_refused_and_log_unchanged) {
  spawn();
  auto batch = make_batch({.records = 2});
  batch.back() ^= 0x5a;
  auto r = produce(batch);
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::crc_mismatch)) << describe(r.error());
  auto ok = produce(make_batch({}));
  ASSERT_OK(ok);
  EXPECT_EQ(ok->base_offset, offset{0});
}

TEST_F(partition_replica_test, two_batches_in_one_produce_are_refused) {
  spawn();
  auto r = produce(make_batch({}) + make_batch({}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::invalid_request)) << describe(r.error());
}

TEST_F(partition_replica_test, wrong_partition_is_refused) {
  spawn();
  auto req = produce_req(make_batch({}));
  req.partition = partition_id{3};
  auto r = call<produce_response>(produce_atom_v, req);
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::unknown_partition));
}

// -- fetch ---------------------------------------------------------------------

TEST_F(partition_replica_test, fetch_returns_produced_batches) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  ASSERT_OK(produce(make_batch({.records = 3})));
  auto f = fetch(0);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(f->next_offset, offset{5});
  EXPECT_EQ(f->high_watermark, offset{5});
  EXPECT_EQ(f->log_start, offset{0});
  EXPECT_EQ(f->log_end, offset{5});
  auto d = decode_batch(std::string_view{f->data}.substr(0, parse_batch_header(f->data)->total_size()));
  ASSERT_OK(d);
  EXPECT_EQ(d->records.size(), 2u);
}

TEST_F(partition_replica_test, fetch_from_the_middle_starts_at_its_batch) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  ASSERT_OK(produce(make_batch({.records = 3})));
  ASSERT_OK(produce(make_batch({.records = 1})));
  auto f = fetch(3); // inside the second batch (2..4)
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(f->next_offset, offset{6});
  auto g = fetch(5);
  ASSERT_OK(g);
  EXPECT_EQ(base_offsets(g->data), (std::vector<int64_t>{5}));
}

TEST_F(partition_replica_test, fetch_at_log_end_is_empty) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  auto f = fetch(2);
  ASSERT_OK(f);
  EXPECT_TRUE(f->data.empty());
  EXPECT_EQ(f->next_offset, offset{2});
}

TEST_F(partition_replica_test, fetch_beyond_log_end_is_out_of_range) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  auto f = fetch(7);
  ASSERT_FALSE(f);
  EXPECT_TRUE(is(f.error(), ec::offset_out_of_range));
  EXPECT_NE(describe(f.error()).find("[0, 2]"), std::string::npos)
    << describe(f.error());
  EXPECT_TRUE(is(fetch(-1).error(), ec::offset_out_of_range));
}

TEST_F(partition_replica_test, fetch_respects_max_bytes_but_returns_one_batch) {
  spawn();
  for (int i = 0; i < 3; ++i)
    ASSERT_OK(produce(make_batch({.value_bytes = 100})));
  auto req = fetch_req(0);
  req.max_bytes = 10; // smaller than one batch
  auto f = call<fetch_response>(fetch_atom_v, req);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), std::vector<int64_t>{0});
  EXPECT_EQ(f->next_offset, offset{1});
}

TEST_F(partition_replica_test, long_poll_is_woken_by_a_produce) {
  spawn();
  auto hf = request(fetch_atom_v, fetch_req(0, 5000));
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u); // parked
  EXPECT_EQ(state().waiters.size(), 1u);
  auto hp = request(produce_atom_v, produce_req(make_batch({.records = 2})));
  sched_->run();
  auto p = await<produce_response>(hp);
  ASSERT_OK(p);
  auto f = await<fetch_response>(hf);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), std::vector<int64_t>{0});
  EXPECT_EQ(f->high_watermark, offset{2});
  EXPECT_TRUE(state().waiters.empty());
  // The expiry timer firing later is harmless.
  sched_->advance_time(5s);
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
}

TEST_F(partition_replica_test, long_poll_waits_for_min_bytes) {
  spawn();
  auto small = make_batch({.value_bytes = 10});
  auto hf = request(fetch_atom_v,
                    fetch_req(0, 5000, static_cast<int32_t>(small.size() * 2)));
  sched_->run();
  ASSERT_OK(produce(small));
  EXPECT_EQ(answers_waiting(), 0u); // one batch is not enough yet
  ASSERT_OK(produce(small));
  auto f = await<fetch_response>(hf);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), (std::vector<int64_t>{0, 1}));
}

TEST_F(partition_replica_test, long_poll_expires_with_empty_data) {
  spawn();
  auto hf = request(fetch_atom_v, fetch_req(0, 500));
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->advance_time(499ms);
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->advance_time(1ms);
  sched_->run();
  auto f = await<fetch_response>(hf);
  ASSERT_OK(f);
  EXPECT_TRUE(f->data.empty());
  EXPECT_EQ(f->next_offset, offset{0});
  EXPECT_TRUE(state().waiters.empty());
}

TEST_F(partition_replica_test, waiters_beyond_the_bound_are_answered_at_once) {
  cfg_.max_fetch_waiters = 2;
  spawn();
  auto h1 = request(fetch_atom_v, fetch_req(0, 5000));
  auto h2 = request(fetch_atom_v, fetch_req(0, 5000));
  auto h3 = request(fetch_atom_v, fetch_req(0, 5000));
  sched_->run();
  EXPECT_EQ(state().waiters.size(), 2u);
  auto f3 = await<fetch_response>(h3);
  ASSERT_OK(f3);
  EXPECT_TRUE(f3->data.empty());
  sched_->advance_time(5s);
  sched_->run();
  ASSERT_OK(await<fetch_response>(h1));
  ASSERT_OK(await<fetch_response>(h2));
  EXPECT_TRUE(state().waiters.empty());
}

// -- idempotence -------------------------------------------------------------

TEST_F(partition_replica_test, retried_batch_is_a_duplicate_with_same_offsets) {
  spawn();
  ASSERT_OK(produce(make_batch({})));
  auto batch = make_batch({.records = 3, .pid = 42, .epoch = 0, .seq = 0});
  auto a = produce(batch);
  ASSERT_OK(a);
  EXPECT_FALSE(a->duplicate);
  auto b = produce(batch);
  ASSERT_OK(b);
  EXPECT_TRUE(b->duplicate);
  EXPECT_EQ(b->base_offset, a->base_offset);
  EXPECT_EQ(b->last_offset, a->last_offset);
  EXPECT_EQ(state().log->log_end(), offset{4}); // not appended twice
  EXPECT_EQ(state().stats.duplicates, 1u);
}

TEST_F(partition_replica_test, duplicate_of_an_unflushed_batch_waits_for_it) {
  spawn();
  auto batch = make_batch({.records = 2, .pid = 42, .epoch = 0, .seq = 0});
  auto h1 = request(produce_atom_v, produce_req(batch));
  auto h2 = request(produce_atom_v, produce_req(batch));
  sched_->run_once();
  sched_->run_once();
  EXPECT_EQ(answers_waiting(), 0u); // the duplicate is not acked early
  sched_->run();
  auto a = await<produce_response>(h1);
  auto b = await<produce_response>(h2);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_FALSE(a->duplicate);
  EXPECT_TRUE(b->duplicate);
  EXPECT_EQ(b->base_offset, a->base_offset);
}

TEST_F(partition_replica_test, sequence_gap_is_out_of_order) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2, .pid = 42, .epoch = 0, .seq = 0})));
  auto r = produce(make_batch({.pid = 42, .epoch = 0, .seq = 5}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::out_of_order_sequence)) << describe(r.error());
  auto ok = produce(make_batch({.pid = 42, .epoch = 0, .seq = 2}));
  ASSERT_OK(ok);
  EXPECT_EQ(ok->base_offset, offset{2});
}

TEST_F(partition_replica_test, older_epoch_is_invalid_producer_epoch) {
  spawn();
  ASSERT_OK(produce(make_batch({.pid = 42, .epoch = 3, .seq = 0})));
  auto r = produce(make_batch({.pid = 42, .epoch = 2, .seq = 1}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::invalid_producer_epoch)) << describe(r.error());
  // A newer epoch starts over at 0.
  ASSERT_OK(produce(make_batch({.pid = 42, .epoch = 4, .seq = 0})));
}

TEST_F(partition_replica_test, producer_state_survives_a_restart_without_store) {
  spawn();
  auto batch = make_batch({.records = 2, .pid = 42, .epoch = 0, .seq = 0});
  auto a = produce(batch);
  ASSERT_OK(a);
  ASSERT_TRUE(stop(false));
  spawn(); // rebuilt from the log alone
  auto b = produce(batch);
  ASSERT_OK(b);
  EXPECT_TRUE(b->duplicate);
  EXPECT_EQ(b->base_offset, a->base_offset);
  auto gap = produce(make_batch({.pid = 42, .epoch = 0, .seq = 7}));
  ASSERT_FALSE(gap);
  EXPECT_TRUE(is(gap.error(), ec::out_of_order_sequence));
}

TEST_F(partition_replica_test, producer_state_survives_a_restart_with_snapshot) {
  use_store();
  spawn();
  auto b1 = make_batch({.records = 2, .pid = 42, .epoch = 0, .seq = 0});
  ASSERT_OK(produce(b1));
  ASSERT_TRUE(stop(false));
  auto key = metadata_format::encode_partition_key(cfg_.topic, cfg_.partition);
  auto snap = store_->get(producer_snapshots_db, *key);
  ASSERT_OK(snap);
  auto decoded = producer_state::decode_snapshot(*snap);
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->end(), offset{2});
  spawn();
  auto r = produce(b1);
  ASSERT_OK(r);
  EXPECT_TRUE(r->duplicate);
  // The HW checkpoint came back too.
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->high_watermark, offset{2});
}

TEST_F(partition_replica_test, stale_snapshot_is_completed_by_replay) {
  use_store();
  spawn();
  auto key = *metadata_format::encode_partition_key(cfg_.topic, cfg_.partition);
  auto b1 = make_batch({.pid = 42, .epoch = 0, .seq = 0});
  ASSERT_OK(produce(b1));
  ASSERT_TRUE(stop(false));
  auto stale = store_->get(producer_snapshots_db, key);
  ASSERT_OK(stale);
  spawn();
  auto b2 = make_batch({.pid = 42, .epoch = 0, .seq = 1});
  ASSERT_OK(produce(b2));
  ASSERT_TRUE(stop(false));
  // As after a SIGKILL: the last snapshot predates the last append.
  ASSERT_EQ(store_->put(producer_snapshots_db, key, *stale), caf::none);
  spawn();
  auto r = produce(b2);
  ASSERT_OK(r);
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(r->base_offset, offset{1});
  auto next = produce(make_batch({.pid = 42, .epoch = 0, .seq = 2}));
  ASSERT_OK(next);
  EXPECT_EQ(next->base_offset, offset{2});
}

TEST_F(partition_replica_test, corrupt_snapshot_falls_back_to_replay) {
  use_store();
  spawn();
  auto key = *metadata_format::encode_partition_key(cfg_.topic, cfg_.partition);
  auto b1 = make_batch({.pid = 42, .epoch = 0, .seq = 0});
  ASSERT_OK(produce(b1));
  ASSERT_TRUE(stop(false));
  ASSERT_EQ(store_->put(producer_snapshots_db, key, "garbage"), caf::none);
  spawn();
  auto r = produce(b1);
  ASSERT_OK(r);
  EXPECT_TRUE(r->duplicate);
}

// -- offsets ------------------------------------------------------------------

TEST_F(partition_replica_test, list_offsets_earliest_latest_and_by_time) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2, .ts = t0})));
  ASSERT_OK(produce(make_batch({.records = 2, .ts = t0 + 1000})));
  auto earliest = list_offsets(-2);
  ASSERT_OK(earliest);
  EXPECT_EQ(*earliest, offset{0});
  auto latest = list_offsets(-1);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, offset{4});
  auto by_time = list_offsets(t0 + 500);
  ASSERT_OK(by_time);
  EXPECT_EQ(*by_time, offset{2});
  auto first = list_offsets(t0);
  ASSERT_OK(first);
  EXPECT_EQ(*first, offset{0});
  auto none = list_offsets(t0 + 100'000);
  ASSERT_OK(none);
  EXPECT_EQ(*none, offset{4}); // no such record: the HW
  EXPECT_TRUE(is(list_offsets(-3).error(), ec::invalid_request));
}

// -- backpressure -----------------------------------------------------------------

TEST_F(partition_replica_test, produce_is_throttled_over_the_pending_budget) {
  auto batch = make_batch({.value_bytes = 100});
  cfg_.max_pending_bytes = batch.size() * 2;
  spawn();
  std::vector<decltype(request(produce_atom_v, produce_request{}))> hs;
  for (int i = 0; i < 4; ++i)
    hs.push_back(request(produce_atom_v, produce_req(batch)));
  sched_->run();
  ASSERT_OK(await<produce_response>(hs[0]));
  ASSERT_OK(await<produce_response>(hs[1]));
  for (int i = 2; i < 4; ++i) {
    auto r = await<produce_response>(hs[i]);
    ASSERT_FALSE(r);
    EXPECT_TRUE(is(r.error(), ec::throttled)) << describe(r.error());
  }
  EXPECT_EQ(state().stats.throttled, 2u);
  EXPECT_EQ(state().pending_bytes, 0u);
  // Once committed, the budget is free again.
  auto r = produce(batch);
  ASSERT_OK(r);
  EXPECT_EQ(r->base_offset, offset{2});
}

// -- retention and tick ------------------------------------------------------------

TEST_F(partition_replica_test, retention_tick_deletes_old_segments) {
  cfg_.topic_cfg.segment_bytes = 200; // every batch rolls a segment
  cfg_.topic_cfg.retention_ms = 60'000;
  cfg_.tick_interval = 1s;
  spawn();
  for (int i = 0; i < 4; ++i)
    ASSERT_OK(produce(make_batch({.value_bytes = 150, .ts = t0})));
  auto before = status();
  ASSERT_OK(before);
  EXPECT_EQ(before->log_start, offset{0});
  EXPECT_GE(state().log->segment_count(), 4u);
  sched_->advance_time(1s); // a tick with young data: nothing to delete
  sched_->run();
  EXPECT_EQ(state().stats.segments_deleted, 0u);
  *now_ += 120'000; // the injected clock: the data is now too old
  sched_->advance_time(1s);
  sched_->run();
  EXPECT_GT(state().stats.segments_deleted, 0u);
  auto after = status();
  ASSERT_OK(after);
  EXPECT_GT(after->log_start, offset{0});
  EXPECT_LT(after->size_bytes, before->size_bytes);
  EXPECT_EQ(after->log_end, offset{4});
  auto f = fetch(0);
  ASSERT_FALSE(f);
  EXPECT_TRUE(is(f.error(), ec::offset_out_of_range));
  auto earliest = list_offsets(-2);
  ASSERT_OK(earliest);
  EXPECT_EQ(*earliest, after->log_start);
}

TEST_F(partition_replica_test, update_applies_retention_to_the_log) {
  cfg_.topic_cfg.segment_bytes = 200;
  spawn();
  for (int i = 0; i < 4; ++i)
    ASSERT_OK(produce(make_batch({.value_bytes = 150, .ts = t0})));
  *now_ += 120'000;
  caf::anon_send(replica_, tick_atom_v); // 7 days of retention: nothing goes
  sched_->run();
  EXPECT_EQ(state().stats.segments_deleted, 0u);
  auto tc = cfg_.topic_cfg;
  tc.retention_ms = 60'000;
  caf::anon_send(replica_, update_atom_v, tc);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  EXPECT_GT(state().stats.segments_deleted, 0u)
    << "the log ignored the new retention.ms (partition_log::set_config)";
}

TEST_F(partition_replica_test, tick_writes_hw_checkpoint_and_snapshot) {
  use_store();
  cfg_.snapshot_interval = 5s;
  spawn();
  ASSERT_OK(produce(make_batch({.pid = 9, .epoch = 0, .seq = 0})));
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  auto md = store_->get_partition(cfg_.topic, cfg_.partition);
  ASSERT_OK(md);
  EXPECT_EQ(md->high_watermark, offset{1});
  EXPECT_EQ(state().stats.snapshots, 0u); // interval not reached
  sched_->advance_time(5s);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  EXPECT_EQ(state().stats.snapshots, 1u);
}

// -- failures -------------------------------------------------------------------

TEST_F(partition_replica_test, failed_flush_fences_the_replica) {
  spawn();
  ASSERT_OK(produce(make_batch({})));
  faulty_.fail_syncs(true);
  auto r = produce(make_batch({}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::io_error)) << describe(r.error());
  faulty_.fail_syncs(false);
  auto again = produce(make_batch({}));
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::io_error));
  auto s = status();
  ASSERT_OK(s);
  EXPECT_FALSE(s->online);
  EXPECT_EQ(s->high_watermark, offset{1}); // the unflushed batch never counted
}

TEST_F(partition_replica_test, full_disk_refuses_produce_and_recovers) {
  spawn();
  ASSERT_OK(produce(make_batch({})));
  faulty_.set_space_left(10);
  auto r = produce(make_batch({.value_bytes = 100}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full)) << describe(r.error());
  faulty_.set_space_left(std::nullopt);
  auto ok = produce(make_batch({}));
  ASSERT_OK(ok);
  EXPECT_EQ(ok->base_offset, offset{1});
  auto f = fetch(0);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), (std::vector<int64_t>{0, 1}));
}

// -- lifecycle ------------------------------------------------------------------

TEST_F(partition_replica_test, stop_with_delete_removes_the_data) {
  use_store();
  spawn();
  ASSERT_OK(produce(make_batch({})));
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  ASSERT_TRUE(fs::exists(cfg_.dir));
  ASSERT_TRUE(stop(true));
  EXPECT_FALSE(fs::exists(cfg_.dir));
  EXPECT_TRUE(is(store_->get_partition(cfg_.topic, cfg_.partition).error(),
                 ec::not_found));
}

TEST_F(partition_replica_test, restart_keeps_the_data) {
  spawn();
  ASSERT_OK(produce(make_batch({.records = 3})));
  ASSERT_TRUE(stop(false));
  spawn();
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->log_end, offset{3});
  EXPECT_EQ(s->high_watermark, offset{3});
  auto f = fetch(0);
  ASSERT_OK(f);
  EXPECT_EQ(base_offsets(f->data), std::vector<int64_t>{0});
}

TEST_F(partition_replica_test, exit_answers_parked_requests) {
  spawn();
  auto hf = request(fetch_atom_v, fetch_req(0, 5000));
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  caf::anon_send_exit(replica_, caf::exit_reason::user_shutdown);
  sched_->run();
  replica_ = nullptr;
  auto f = await<fetch_response>(hf);
  ASSERT_OK(f); // answered with what there was
  EXPECT_TRUE(f->data.empty());
}

} // namespace
