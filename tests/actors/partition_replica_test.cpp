// Deterministic tests of the partition replica on CAF's test coordinator.
// Leader role (partition_replica_test): group commit, fetch and long poll,
// idempotence, offsets, backpressure, retention, failures and restarts.
// Replication (replication_test): followers catching up, acks=all and the
// HW, min.insync.replicas, epoch fencing, divergence and truncation, ISR
// shrink and expand, follower restarts. Each test has its own temporary
// directory.

#include "actors/server/partition_replica.hpp"
#include "actors/server/produce_gather.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/dir_remover.hpp"
#include "broker/file_system.hpp"
#include "broker/metadata_store.hpp"
#include "broker/record_batch.hpp"
#include "broker/node_journal.hpp"
#include "broker/sync_pool.hpp"
#include "tests/temp_dir.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

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

// An on_replicated recorder's body: calls `f` with the header of every
// batch in `data` and answers how many there were.
template <class F>
caf::expected<size_t> each_batch(std::string_view data, F f) {
  size_t n = 0;
  while (!data.empty()) {
    auto h = parse_batch_header(data);
    if (!h)
      return std::move(h.error());
    f(*h);
    data.remove_prefix(h->total_size());
    ++n;
  }
  return n;
}

class partition_replica_test : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(sys_cfg_);
    sys_cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(sys_cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    self_ = std::make_unique<caf::scoped_actor>(*sys_);
    now_ = std::make_shared<std::atomic<int64_t>>(t0);
    cfg_.topic = "orders";
    cfg_.partition = partition_id{0};
    cfg_.dir = root_.path() / "orders-0";
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
    auto st = metadata_store::open(root_.path() / "meta", opts);
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
  ferry::test::temp_dir root_{"ferry-replica-test"};
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

// -- batches of a multi-partition produce (produce_gather.hpp) ---------------------

// A stand-in for the node: takes a multi-partition produce for the replica
// under test, sends each batch with a slot of one gather as the node does,
// and answers the gathered results.
caf::behavior gathering_node(caf::event_based_actor* self, partition_actor replica) {
  using results = std::vector<produce_result>;
  return {
    [self, replica](produce_atom, std::vector<produce_request>& reqs)
      -> caf::result<results> {
      auto rp = self->make_response_promise<results>();
      auto g = std::make_shared<produce_gather>(caf::actor_cast<broker_actor>(self),
                                                rp, reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i) {
        g->answers->out[i].error = make_error(ec::log_closed, "not answered");
        self->send(replica, produce_atom_v, std::move(reqs[i]), produce_slot{g, i});
      }
      return rp;
    },
    [](produce_atom, produce_gathered& x) {
      x.answers->rp.deliver(std::move(x.answers->out));
    },
  };
}

TEST_F(partition_replica_test, batches_of_a_multi_partition_produce_answer_in_their_slots) {
  spawn();
  auto node = sys_->spawn(gathering_node, replica_);
  std::vector<produce_request> reqs;
  reqs.push_back(produce_req(make_batch({.records = 2})));
  reqs.push_back(produce_req(make_batch({})));
  reqs.back().partition = partition_id{3}; // not this replica's
  reqs.push_back(produce_req(make_batch({}), acks_mode::none));
  reqs.push_back(produce_req(make_batch({.records = 3})));
  auto h = (*self_)->request(node, caf::infinite, produce_atom_v, std::move(reqs));
  sched_->run();
  auto xs = await<std::vector<produce_result>>(h);
  ASSERT_OK(xs);
  ASSERT_EQ(xs->size(), 4u);
  EXPECT_FALSE((*xs)[0].error) << describe((*xs)[0].error);
  EXPECT_EQ((*xs)[0].response.base_offset, offset{0});
  EXPECT_EQ((*xs)[0].response.last_offset, offset{1});
  EXPECT_TRUE(is((*xs)[1].error, ec::unknown_partition)) << describe((*xs)[1].error);
  EXPECT_FALSE((*xs)[2].error) << describe((*xs)[2].error);
  EXPECT_EQ((*xs)[2].response.base_offset, offset{2});
  EXPECT_FALSE((*xs)[3].error) << describe((*xs)[3].error);
  EXPECT_EQ((*xs)[3].response.base_offset, offset{3});
  EXPECT_EQ((*xs)[3].response.last_offset, offset{5});
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->high_watermark, offset{6});
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  sched_->run();
}

// The answers of a multi-partition produce also come back when they are
// errors found later: a flush that fails answers each batch waiting for it
// with the error, and a batch sent to a replica that is already gone keeps
// the node's "not answered" (log_closed), so the produce is still answered.
TEST_F(partition_replica_test, a_failed_flush_or_a_gone_replica_still_lets_the_gather_answer) {
  spawn();
  auto node = sys_->spawn(gathering_node, replica_);
  faulty_.fail_syncs(true);
  std::vector<produce_request> reqs;
  reqs.push_back(produce_req(make_batch({})));
  reqs.push_back(produce_req(make_batch({.records = 2})));
  auto h = (*self_)->request(node, caf::infinite, produce_atom_v, std::move(reqs));
  sched_->run();
  auto xs = await<std::vector<produce_result>>(h);
  ASSERT_OK(xs);
  ASSERT_EQ(xs->size(), 2u);
  EXPECT_TRUE(is((*xs)[0].error, ec::io_error)) << describe((*xs)[0].error);
  EXPECT_TRUE(is((*xs)[1].error, ec::io_error)) << describe((*xs)[1].error);
  faulty_.fail_syncs(false);
  caf::anon_send_exit(replica_, caf::exit_reason::user_shutdown);
  replica_ = nullptr;
  sched_->run();
  reqs.clear();
  reqs.push_back(produce_req(make_batch({})));
  auto h2 = (*self_)->request(node, caf::infinite, produce_atom_v, std::move(reqs));
  sched_->run();
  auto ys = await<std::vector<produce_result>>(h2);
  ASSERT_OK(ys);
  ASSERT_EQ(ys->size(), 1u);
  EXPECT_TRUE(is((*ys)[0].error, ec::log_closed)) << describe((*ys)[0].error);
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  sched_->run();
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

TEST_F(partition_replica_test, a_consumer_naming_another_leader_epoch_is_told_to_refresh) {
  cfg_.epoch = leader_epoch{3};
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  auto req = fetch_req(0);
  req.leader_epoch = 2; // older: FENCED_LEADER_EPOCH for a Kafka client
  auto old = call<fetch_response>(fetch_atom_v, req);
  ASSERT_FALSE(old);
  EXPECT_TRUE(is(old.error(), ec::fenced_leader_epoch)) << describe(old.error());
  req.leader_epoch = 4; // newer than the replica knows
  auto newer = call<fetch_response>(fetch_atom_v, req);
  ASSERT_FALSE(newer);
  EXPECT_TRUE(is(newer.error(), ec::not_leader)) << describe(newer.error());
  req.leader_epoch = 3;
  auto same = call<fetch_response>(fetch_atom_v, req);
  ASSERT_OK(same);
  EXPECT_EQ(same->high_watermark, offset{2});
  req.leader_epoch = -1; // Ferry's consumers: no check
  ASSERT_OK(call<fetch_response>(fetch_atom_v, req));
}

TEST_F(partition_replica_test, an_epochs_end_is_where_the_next_epoch_starts) {
  // Epoch 1 writes 0..1, epoch 3 writes 2..4; the leader is then in epoch 5
  // with nothing written yet (its epoch starts at the log end, 5).
  cfg_.epoch = leader_epoch{1};
  spawn();
  ASSERT_OK(produce(make_batch({.records = 2})));
  ASSERT_TRUE(stop(false));
  cfg_.epoch = leader_epoch{3};
  spawn();
  ASSERT_OK(produce(make_batch({.records = 3})));
  ASSERT_TRUE(stop(false));
  cfg_.epoch = leader_epoch{5};
  spawn();
  auto ask = [&](int32_t epoch, int32_t current = -1) {
    return call<epoch_end>(offsets_atom_v,
                           epoch_end_request{cfg_.topic, cfg_.partition, current, epoch});
  };
  auto expect = [&](int32_t asked, int32_t epoch, int64_t end) {
    auto r = ask(asked);
    ASSERT_OK(r);
    EXPECT_EQ(r->leader_epoch, epoch) << "asked " << asked;
    EXPECT_EQ(r->end_offset, offset{end}) << "asked " << asked;
  };
  expect(0, 0, 0);  // older than every epoch: ends where the first starts
  expect(1, 1, 2);
  expect(2, 1, 2);  // no batches in 2: the largest epoch below it
  expect(3, 3, 5);  // ends where epoch 5 starts (the leader's, at the log end)
  expect(4, 3, 5);  // no batches in 4: the largest epoch below it
  expect(5, 5, 5);  // the leader's: the log end
  expect(6, -1, -1); // newer than the leader
  expect(-1, -1, -1);
  // The caller's view of the leader epoch is checked first.
  auto stale = ask(1, 4);
  ASSERT_FALSE(stale);
  EXPECT_TRUE(is(stale.error(), ec::fenced_leader_epoch)) << describe(stale.error());
  auto ahead = ask(1, 6);
  ASSERT_FALSE(ahead);
  EXPECT_TRUE(is(ahead.error(), ec::not_leader)) << describe(ahead.error());
  ASSERT_OK(ask(1, 5));
  // And ListOffsets checks it the same way.
  list_offsets_request lo{cfg_.topic, cfg_.partition, -1, 4};
  auto old = call<offset>(offsets_atom_v, lo);
  ASSERT_FALSE(old);
  EXPECT_TRUE(is(old.error(), ec::fenced_leader_epoch)) << describe(old.error());
  lo.leader_epoch = 5;
  auto latest = call<offset>(offsets_atom_v, lo);
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, offset{5});
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

// Parked fetches share one timer, re-armed for the next deadline, and each
// is still answered at its own max wait: no sooner, no later.
TEST_F(partition_replica_test, long_polls_share_one_timer_and_expire_on_time) {
  spawn();
  auto timers = [this] { return sched_->clock().schedule().size(); };
  auto before = timers();
  auto h500 = request(fetch_atom_v, fetch_req(0, 500)); // due at 500
  sched_->run();
  EXPECT_EQ(timers(), before + 1);
  sched_->advance_time(100ms);
  sched_->run();
  auto h200 = request(fetch_atom_v, fetch_req(0, 200)); // due at 300: earlier
  auto h1000 = request(fetch_atom_v, fetch_req(0, 1000)); // due at 1100
  auto h450 = request(fetch_atom_v, fetch_req(0, 450)); // due at 550
  sched_->run();
  EXPECT_EQ(state().waiters.size(), 4u);
  EXPECT_EQ(timers(), before + 2) << "a timer per parked fetch";
  auto answered = [&](auto& h) { return static_cast<bool>(await<fetch_response>(h)); };
  sched_->advance_time(199ms); // t = 299
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->advance_time(1ms); // t = 300
  sched_->run();
  EXPECT_EQ(answers_waiting(), 1u);
  EXPECT_TRUE(answered(h200));
  EXPECT_EQ(state().waiters.size(), 3u);
  sched_->advance_time(199ms); // t = 499
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->advance_time(1ms); // t = 500
  sched_->run();
  EXPECT_TRUE(answered(h500));
  EXPECT_EQ(answers_waiting(), 0u) << "the 450 ms wait ended early";
  sched_->advance_time(50ms); // t = 550
  sched_->run();
  EXPECT_TRUE(answered(h450));
  sched_->advance_time(549ms); // t = 1099
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u);
  sched_->advance_time(1ms); // t = 1100
  sched_->run();
  EXPECT_TRUE(answered(h1000));
  EXPECT_TRUE(state().waiters.empty());
  EXPECT_EQ(timers(), before) << "a timer left armed with no fetch parked";
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

// A producer is forgotten after a day without appends, whatever the
// timestamps of its records: a DLQ redrive copies records with their old
// timestamps, and its retry after a lost answer must still be a duplicate
// (before, the producer expired at the next tick: its entry aged by the
// records' timestamps, and the retry was appended a second time).
TEST_F(partition_replica_test, records_with_old_timestamps_do_not_expire_their_producer) {
  spawn();
  auto old = make_batch({.records = 2, .pid = 42, .epoch = 0, .seq = 0,
                         .ts = t0 - 3 * 24 * 3'600'000});
  auto a = produce(old);
  ASSERT_OK(a);
  EXPECT_FALSE(a->duplicate);
  now_->store(t0 + 60'000);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  auto b = produce(old);
  ASSERT_OK(b);
  EXPECT_TRUE(b->duplicate);
  EXPECT_EQ(b->base_offset, a->base_offset);
  EXPECT_EQ(state().log->log_end(), offset{2});
  // A day after its last append it is forgotten, as before.
  now_->store(t0 + 25 * 3'600'000);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  EXPECT_EQ(state().producers.find(producer_id{42}), nullptr);
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
  cfg_.checkpoint_interval = 5s;
  spawn();
  // Ticks the replica, then reads the HW checkpoint it stored (-1: none).
  auto tick_then_stored_hw = [this] {
    caf::anon_send(replica_, tick_atom_v);
    sched_->run();
    auto md = store_->get_partition(cfg_.topic, cfg_.partition);
    EXPECT_TRUE(md) << "no checkpoint stored";
    return md ? md->high_watermark : offset{-1};
  };
  ASSERT_OK(produce(make_batch({.pid = 9, .epoch = 0, .seq = 0})));
  // The first checkpoint since the start: at the first tick.
  EXPECT_EQ(tick_then_stored_hw(), offset{1});
  EXPECT_EQ(state().stats.snapshots, 0u); // interval not reached
  // The HW moves again within checkpoint_interval: saved at the first tick
  // after the interval, not at every tick.
  ASSERT_OK(produce(make_batch({.pid = 9, .epoch = 0, .seq = 1})));
  sched_->advance_time(4s);
  EXPECT_EQ(tick_then_stored_hw(), offset{1});
  sched_->advance_time(1s);
  EXPECT_EQ(tick_then_stored_hw(), offset{2});
  EXPECT_EQ(state().stats.snapshots, 1u);
}

// -- failures -------------------------------------------------------------------

TEST_F(partition_replica_test, an_idle_replica_ticks_rarely_until_a_produce) {
  cfg_.tick_interval = 1s;
  cfg_.quiet_tick_interval = 10s;
  cfg_.quiet_after = 3;
  spawn();
  ASSERT_OK(produce(make_batch({})));
  // Busy (an append since the last tick), then three idle ticks: quiet.
  for (int i = 0; i < 4; ++i) {
    sched_->advance_time(1s);
    sched_->run();
  }
  EXPECT_TRUE(state().quiet) << state().idle_ticks << " idle ticks";
  auto due = state().tick_due;
  EXPECT_GE(due - sched_->clock().now(), 9s) << "no long period when quiet";
  // Quiet ticks fall on whole seconds, busy ones on tenths of their period,
  // so the ticks of many replicas share the clock thread's wake-ups.
  EXPECT_EQ(due.time_since_epoch() % std::chrono::seconds{1},
            std::chrono::nanoseconds{0});
  // A produce brings the short period back at once.
  ASSERT_OK(produce(make_batch({})));
  EXPECT_FALSE(state().quiet);
  EXPECT_LE(state().tick_due - sched_->clock().now(), 1s);
  EXPECT_GT(state().tick_due - sched_->clock().now(), 500ms);
  EXPECT_EQ(state().tick_due.time_since_epoch() % std::chrono::milliseconds{100},
            std::chrono::nanoseconds{0});
  // The stale long tick does not start a second chain of ticks: after it
  // fired, one tick is pending, not two.
  for (int i = 0; i < 20; ++i) {
    sched_->advance_time(1s);
    sched_->run();
  }
  EXPECT_TRUE(state().quiet);
  EXPECT_LE(sched_->clock().schedule().size(), 1u)
    << "more than one tick chain";
}

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

// -- the node's I/O threads (cfg.sync) ----------------------------------------
// ferryd runs replicas on the shared scheduler and their fdatasync on a
// sync_pool. Here the pool has no threads: the test runs its jobs
// (run_pending), so every step between "appended" and "durable" is visible.

class partition_replica_sync_test : public partition_replica_test {
protected:
  void SetUp() override {
    partition_replica_test::SetUp();
    pool_ = std::make_shared<sync_pool>(
      sync_pool_options{.threads = 0, .syncfs_threshold = 0});
    cfg_.sync = pool_;
  }

  void TearDown() override {
    partition_replica_test::TearDown();
    pool_.reset();
  }

  std::shared_ptr<sync_pool> pool_;
};

TEST_F(partition_replica_sync_test, produce_is_acked_once_the_pool_ran_the_sync) {
  spawn();
  auto h = request(produce_atom_v, produce_req(make_batch({.records = 2})));
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u) << "acked before anything was synced";
  EXPECT_EQ(state().log->log_end(), offset{2});
  EXPECT_EQ(state().log->durable_end(), offset{0});
  EXPECT_EQ(pool_->stats().jobs, 1u);
  auto syncs = faulty_.syncs_of(".log");
  EXPECT_EQ(pool_->run_pending(), 1u);
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs + 1) << "the pool did not sync";
  sched_->run(); // the pool's flush_atom: finish the commit, answer
  auto r = await<produce_response>(h);
  ASSERT_OK(r);
  EXPECT_EQ(r->base_offset, offset{0});
  EXPECT_EQ(state().log->durable_end(), offset{2});
  EXPECT_EQ(state().log->high_watermark(), offset{2});
}

TEST_F(partition_replica_sync_test, produces_during_a_running_sync_share_the_next_one) {
  spawn();
  auto first = request(produce_atom_v, produce_req(make_batch({})));
  sched_->run();
  ASSERT_EQ(pool_->stats().jobs, 1u);
  // While the first sync is queued, more produces are appended (the replica
  // is not blocked) but start no sync of their own.
  std::vector<decltype(first)> more;
  for (int i = 0; i < 5; ++i)
    more.push_back(request(produce_atom_v, produce_req(make_batch({}))));
  sched_->run();
  EXPECT_EQ(state().log->log_end(), offset{6});
  EXPECT_EQ(pool_->stats().jobs, 1u) << "a second sync while one was running";
  EXPECT_EQ(answers_waiting(), 0u);
  pool_->run_pending();
  sched_->run();
  EXPECT_EQ(answers_waiting(), 1u) << "only the first produce is durable";
  ASSERT_OK(await<produce_response>(first));
  EXPECT_EQ(state().log->durable_end(), offset{1});
  EXPECT_EQ(pool_->stats().jobs, 2u) << "no sync for the five that waited";
  pool_->run_pending();
  sched_->run();
  for (int i = 0; i < 5; ++i) {
    auto r = await<produce_response>(more[i]);
    ASSERT_OK(r);
    EXPECT_EQ(r->base_offset, offset{i + 1});
  }
  EXPECT_EQ(pool_->stats().fdatasyncs, 2u);
  EXPECT_EQ(state().log->durable_end(), offset{6});
}

// -- the node journal (cfg.journal) -------------------------------------------
// With a journal the group commit waits for the journal's round (one write
// and one fdatasync for every partition of the node) instead of syncing the
// segment file. The journal has no threads here: the test runs its rounds.

class partition_replica_journal_test : public partition_replica_test {
protected:
  void SetUp() override {
    partition_replica_test::SetUp();
    journal_options o;
    o.threads = false;
    auto j = node_journal::open(root_.path(), o);
    ASSERT_TRUE(j) << describe(j.error());
    journal_ = *j;
    cfg_.journal = journal_;
  }

  void TearDown() override {
    partition_replica_test::TearDown();
    journal_.reset();
  }

  /// One produce, acked after the journal's round.
  void produce_one() {
    auto h = request(produce_atom_v, produce_req(make_batch({})));
    sched_->run();
    journal_->run_pending();
    sched_->run();
    ASSERT_OK(await<produce_response>(h));
  }

  std::shared_ptr<node_journal> journal_;
};

TEST_F(partition_replica_journal_test, produces_are_acked_after_the_journal_round_not_a_file_sync) {
  spawn();
  journal_->run_pending(); // the segment's create record
  auto syncs = faulty_.syncs_of(".log");
  auto first = request(produce_atom_v, produce_req(make_batch({.records = 2})));
  sched_->run();
  EXPECT_EQ(answers_waiting(), 0u) << "acked before the journal round";
  EXPECT_EQ(state().log->durable_end(), offset{0});
  // More produces while the first commit waits: appended, one commit later.
  std::vector<decltype(first)> more;
  for (int i = 0; i < 3; ++i)
    more.push_back(request(produce_atom_v, produce_req(make_batch({}))));
  sched_->run();
  EXPECT_EQ(state().log->log_end(), offset{5});
  EXPECT_EQ(answers_waiting(), 0u);
  EXPECT_GE(journal_->run_pending(), 4u) << "the appends' records";
  sched_->run();
  auto r = await<produce_response>(first);
  ASSERT_OK(r);
  EXPECT_EQ(r->base_offset, offset{0});
  journal_->run_pending();
  sched_->run();
  for (int i = 0; i < 3; ++i) {
    auto m = await<produce_response>(more[i]);
    ASSERT_OK(m);
    EXPECT_EQ(m->base_offset, offset{i + 2});
  }
  EXPECT_EQ(state().log->durable_end(), offset{5});
  EXPECT_EQ(state().log->high_watermark(), offset{5});
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs) << "the segment file was synced itself";
  EXPECT_GE(journal_->stats().rounds, 2u);
}

TEST_F(partition_replica_journal_test, deleting_the_replica_is_recorded_so_a_replay_does_not_revive_it) {
  spawn();
  produce_one();
  auto stopped = request(stop_atom_v, true);
  sched_->run();
  journal_->run_pending();
  EXPECT_FALSE(fs::exists(cfg_.dir));
  EXPECT_TRUE(journal_->adopted(cfg_.dir));
  // A crash now: replaying the journal leaves the directory deleted.
  auto crashed = root_.path().parent_path()
                 / (root_.path().filename().string() + "-crashed");
  fs::remove_all(crashed);
  fs::copy(root_.path(), crashed, fs::copy_options::recursive);
  journal_options o;
  o.threads = false;
  journal_replay_report rep;
  auto j = node_journal::open(crashed, o, &rep);
  ASSERT_TRUE(j) << describe(j.error());
  EXPECT_GE(rep.records, 3u); // create, write, remove
  EXPECT_FALSE(fs::exists(crashed / cfg_.dir.filename()));
  j->reset();
  fs::remove_all(crashed);
  (void) stopped;
}

TEST_F(partition_replica_journal_test, deleting_the_replica_moves_its_directory_to_the_trash_and_answers_before_removing_it) {
  // With the node's remover (ferryd): the stop renames the directory into
  // the trash and answers; the files are removed later, on the remover's
  // thread (here: run_pending), not on the scheduler.
  auto trash = std::make_shared<dir_remover>(root_.path(),
                                             dir_remover_options{.threads = 0});
  cfg_.trash = trash;
  spawn();
  produce_one();
  auto stopped = request(stop_atom_v, true);
  sched_->run();
  auto r = await<bool>(stopped);
  ASSERT_OK(r);
  EXPECT_TRUE(*r);
  replica_ = nullptr;
  EXPECT_FALSE(fs::exists(cfg_.dir));
  EXPECT_TRUE(journal_->adopted(cfg_.dir)) << "the removal is in the journal";
  EXPECT_EQ(trash->stats().discarded, 1u);
  ASSERT_EQ(trash->stats().pending, 1u) << "removed on the scheduler, not queued";
  auto t = dir_remover::trash_dir(root_.path());
  ASSERT_TRUE(fs::exists(t));
  EXPECT_FALSE(fs::is_empty(t));
  EXPECT_EQ(trash->run_pending(), 1u);
  EXPECT_TRUE(fs::is_empty(t));
  EXPECT_EQ(trash->stats().removed, 1u);
}

TEST_F(partition_replica_journal_test, the_tick_writes_acked_appends_the_segment_kept_in_memory) {
  // A journaled log keeps appends in memory (cfg.journal_defer_bytes) once
  // the journal made them durable; the replica's tick writes them to the
  // segment file with one write, and a full disk there keeps them (and the
  // journal's copy) until the next tick.
  spawn();
  journal_->run_pending();
  auto h = request(produce_atom_v, produce_req(make_batch({.records = 3})));
  sched_->run();
  journal_->run_pending();
  sched_->run();
  ASSERT_OK(await<produce_response>(h));
  EXPECT_EQ(journal_->unapplied(), 1u) << "the append was written at once";
  faulty_.set_space_left(10);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  EXPECT_EQ(journal_->unapplied(), 1u);
  EXPECT_FALSE(state().fenced) << "a full disk at the deferred write fenced";
  // Readable meanwhile.
  auto got = fetch(0);
  ASSERT_OK(got);
  EXPECT_EQ(got->next_offset, offset{3});
  EXPECT_FALSE(got->data.empty());
  faulty_.set_space_left(std::nullopt);
  caf::anon_send(replica_, tick_atom_v);
  sched_->run();
  EXPECT_EQ(journal_->unapplied(), 0u) << "the tick did not write the kept bytes";
  bool found = false;
  for (auto& e : fs::directory_iterator{cfg_.dir})
    if (e.path().extension() == ".log") {
      found = true;
      EXPECT_GT(fs::file_size(e.path()), 0u);
    }
  EXPECT_TRUE(found);
}

TEST_F(partition_replica_sync_test, a_failed_sync_on_the_pool_fences_the_replica) {
  spawn();
  ASSERT_EQ(pool_->run_pending(), 0u);
  auto h = request(produce_atom_v, produce_req(make_batch({})));
  sched_->run();
  faulty_.fail_syncs(true);
  pool_->run_pending();
  faulty_.fail_syncs(false);
  sched_->run();
  auto r = await<produce_response>(h);
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::io_error)) << describe(r.error());
  auto again = produce(make_batch({}));
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::io_error)) << describe(again.error());
  auto s = status();
  ASSERT_OK(s);
  EXPECT_FALSE(s->online);
  EXPECT_EQ(s->high_watermark, offset{0});
}

TEST_F(partition_replica_sync_test, stop_with_a_sync_queued_flushes_and_answers) {
  spawn();
  auto h = request(produce_atom_v, produce_req(make_batch({.records = 3})));
  sched_->run();
  ASSERT_EQ(answers_waiting(), 0u);
  auto stopped = request(stop_atom_v, false);
  sched_->run();
  // The stop flushed on the replica's own thread: the produce is durable
  // and answered although the pool never ran its job.
  auto r = await<produce_response>(h);
  ASSERT_OK(r);
  EXPECT_EQ(r->last_offset, offset{2});
  auto ok = await<bool>(stopped);
  ASSERT_OK(ok);
  replica_ = nullptr;
  pool_->run_pending(); // the stale job: its replica is gone
  sched_->run();
  spawn();
  auto s = status();
  ASSERT_OK(s);
  EXPECT_EQ(s->log_end, offset{3});
  EXPECT_EQ(s->high_watermark, offset{3});
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

// -- replication: leader and followers ------------------------------------------
//
// Two or three replicas of "orders/0" on the test coordinator, each with its
// own directory and node id. A follower fetches from its leader through a
// fake broker (the node's broker in production), which forwards fetches to
// the leader replica it points at and can hold or drop them (a slow or dead
// link); the same fake plays the controller for ISR proposals. The test
// plays the node: it sends (update_atom, assignment, leader's broker).

namespace ferry {
// gtest prints epoch histories with this (found by ADL).
[[maybe_unused]] static void PrintTo(const epoch_entry& e, std::ostream* os) {
  *os << "(epoch " << e.epoch.value << " at " << e.start_offset.value << ")";
}
} // namespace ferry

namespace {

using release_atom = caf::atom_constant<caf::atom("release")>;

// Shared between a fake broker and the test (one thread: the coordinator).
struct fake_link {
  enum class mode {
    pass, ///< forward fetches and their answers
    hold, ///< queue new fetches; release_atom forwards the queued ones
          ///< (answers to forwarded fetches still pass)
    drop, ///< swallow new fetches and the answers to forwarded ones
  };
  mode fetches = mode::pass;
  /// Where fetches go (the leader replica behind this broker).
  partition_actor leader;
  /// Every fetch request that reached the fake, in order.
  std::vector<fetch_request> seen;
  /// Every ISR change proposed to the fake (as controller), in order.
  std::vector<isr_change> isr_changes;
  /// Replicas of the assignment answered to an ISR change.
  std::vector<int32_t> replicas;
  /// Set: ISR changes are refused with this (still recorded).
  caf::error refuse_isr;
  /// Answers lost in drop mode.
  size_t dropped = 0;
};

struct fake_link_state {
  std::vector<std::pair<fetch_request, caf::response_promise>> held;
  /// Promises never delivered (drop mode): the requester's timeout decides.
  std::vector<caf::response_promise> lost;
  static inline const char* name = "fake-broker";
};

caf::behavior fake_link_broker(caf::stateful_actor<fake_link_state>* self,
                               std::shared_ptr<fake_link> link) {
  auto forward = [self, link](fetch_request req, caf::response_promise rp) {
    self->request(link->leader, caf::infinite, fetch_atom_v, std::move(req))
      .then(
        [self, link, rp](fetch_response& r) mutable {
          if (link->fetches == fake_link::mode::drop) {
            ++link->dropped;
            self->state.lost.push_back(rp);
            return;
          }
          rp.deliver(std::move(r));
        },
        [self, link, rp](caf::error& err) mutable {
          if (link->fetches == fake_link::mode::drop) {
            ++link->dropped;
            self->state.lost.push_back(rp);
            return;
          }
          rp.deliver(std::move(err));
        });
  };
  return {
    [self, link, forward](fetch_atom, fetch_request& req) -> caf::response_promise {
      link->seen.push_back(req);
      auto rp = self->make_response_promise();
      switch (link->fetches) {
        case fake_link::mode::pass:
          forward(std::move(req), rp);
          break;
        case fake_link::mode::hold:
          self->state.held.emplace_back(std::move(req), rp);
          break;
        case fake_link::mode::drop:
          ++link->dropped;
          self->state.lost.push_back(rp);
          break;
      }
      return rp;
    },
    [self, forward](release_atom) { // the mode stays as the test set it
      auto held = std::move(self->state.held);
      self->state.held.clear();
      for (auto& [req, rp] : held)
        forward(std::move(req), rp);
    },
    [link](alter_atom, isr_atom, isr_change& ch) -> caf::result<partition_assignment> {
      link->isr_changes.push_back(ch);
      if (link->refuse_isr)
        return link->refuse_isr;
      partition_assignment pa;
      pa.partition = ch.partition;
      pa.leader = ch.leader;
      pa.epoch = ch.epoch;
      pa.replicas = link->replicas;
      pa.isr = ch.isr;
      return pa;
    },
  };
}

template <class T>
struct reply {
  bool done = false;
  std::optional<T> value;
  caf::error err;
};

partition_assignment
make_assignment(int32_t leader, int32_t epoch, std::vector<int32_t> replicas,
                std::vector<int32_t> isr) {
  partition_assignment pa;
  pa.partition = partition_id{0};
  pa.leader = leader;
  pa.epoch = leader_epoch{epoch};
  pa.replicas = std::move(replicas);
  pa.isr = std::move(isr);
  return pa;
}

std::string ids(const std::vector<int32_t>& xs) {
  std::string out = "{";
  for (auto x : xs)
    out += (out.size() > 1 ? "," : "") + std::to_string(x);
  return out + "}";
}

std::string epochs_text(const std::vector<epoch_entry>& xs) {
  std::string out;
  for (auto& e : xs)
    out += "(epoch " + std::to_string(e.epoch.value) + " at "
           + std::to_string(e.start_offset.value) + ")";
  return out.empty() ? "(none)" : out;
}

class replication_test : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(sys_cfg_);
    sys_cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(sys_cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    now_ = std::make_shared<std::atomic<int64_t>>(t0);
  }

  void TearDown() override {
    for (auto& a : actors_)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched_->run();
    actors_.clear();
    for (auto& l : links_)
      l->leader = nullptr;
    links_.clear();
    sys_.reset();
    stores_.clear();
  }

  // Node `id`'s replica config: its own directory, RF = replicas.size(),
  // min.insync.replicas 1 unless a test says otherwise.
  partition_replica_config node_cfg(int32_t id, const partition_assignment& pa) {
    partition_replica_config c;
    c.topic = "orders";
    c.partition = partition_id{0};
    c.dir = root_.path() / ("node-" + std::to_string(id)) / "orders-0";
    c.node_id = id;
    c.assignment = pa;
    c.epoch = pa.epoch;
    c.topic_cfg.replication_factor = static_cast<int16_t>(pa.replicas.size());
    c.topic_cfg.min_insync_replicas = 1;
    c.tick_interval = 0ms; // tests send tick_atom
    c.follower_fetch_wait = 500ms;
    c.replica_lag_max = 500ms;
    c.clock = [now = now_] { return now->load(); };
    return c;
  }

  void use_store(partition_replica_config& c) {
    lmdb::env_options opts;
    opts.no_sync = true;
    auto st = metadata_store::open(root_.path() / ("meta-" + std::to_string(c.node_id)),
                                   opts);
    ASSERT_TRUE(st) << describe(st.error());
    stores_.push_back(std::move(*st));
    c.store = stores_.back();
  }

  partition_actor spawn_replica(const partition_replica_config& c) {
    auto h = sys_->spawn(partition_replica, c);
    actors_.push_back(caf::actor_cast<caf::actor>(h));
    sched_->run();
    return h;
  }

  // A fake broker of the node that hosts `leader`.
  std::pair<caf::actor, std::shared_ptr<fake_link>>
  spawn_link(partition_actor leader, std::vector<int32_t> replicas = {}) {
    auto link = std::make_shared<fake_link>();
    link->leader = std::move(leader);
    link->replicas = std::move(replicas);
    auto h = sys_->spawn(fake_link_broker, link);
    actors_.push_back(h);
    links_.push_back(link);
    sched_->run();
    return {h, link};
  }

  // A leader (node 1) and a follower (node 2) of `pa`; the follower fetches
  // through a fake broker whose link starts in `mode`.
  struct leader_and_follower {
    partition_actor leader;
    caf::actor broker;
    std::shared_ptr<fake_link> link;
    partition_replica_config fcfg;
    partition_actor follower;
  };
  leader_and_follower spawn_pair(const partition_assignment& pa,
                                 fake_link::mode mode = fake_link::mode::pass) {
    leader_and_follower w;
    w.leader = spawn_replica(node_cfg(1, pa));
    std::tie(w.broker, w.link) = spawn_link(w.leader);
    w.link->fetches = mode;
    w.fcfg = node_cfg(2, pa);
    w.fcfg.leader_broker = w.broker;
    w.follower = spawn_replica(w.fcfg);
    return w;
  }

  static partition_replica_state& state(const partition_actor& h) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(h);
    return dynamic_cast<partition_actor::stateful_base<partition_replica_state>&>(
             *ptr)
      .state;
  }

  // Sends a request from a throw-away actor; the reply fills in as the
  // scheduler runs.
  template <class T, class Dest, class... Ts>
  std::shared_ptr<reply<T>> ask(Dest dest, Ts... xs) {
    auto r = std::make_shared<reply<T>>();
    auto h = sys_->spawn([r, dest, xs...](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
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
    actors_.push_back(h);
    sched_->run();
    return r;
  }

  std::shared_ptr<reply<produce_response>>
  produce(const partition_actor& to, std::string batch,
          acks_mode acks = acks_mode::all) {
    return ask<produce_response>(to, produce_atom_v,
                                 produce_request{"orders", partition_id{0},
                                                 acks, std::move(batch)});
  }

  partition_status status(const partition_actor& of) {
    auto r = ask<partition_status>(of, status_atom_v);
    EXPECT_TRUE(r->done && r->value) << "no status: " << describe(r->err);
    return r->value ? *r->value : partition_status{};
  }

  fetch_request follower_fetch_req(int32_t replica, int64_t from,
                                   int32_t leader_epoch,
                                   int32_t last_epoch) {
    fetch_request r;
    r.topic = "orders";
    r.partition = partition_id{0};
    r.from = offset{from};
    r.replica_id = replica;
    r.leader_epoch = leader_epoch;
    r.last_fetched_epoch = last_epoch;
    return r;
  }

  // Plays the node: the assignment changed.
  void assign(const partition_actor& to, const partition_assignment& pa,
              caf::actor leader_broker) {
    caf::anon_send(to, update_atom_v, pa, std::move(leader_broker));
    sched_->run();
  }

  // The segment files (*.log) of a replica, by name.
  static std::map<std::string, std::string> segment_files(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".log")
        continue;
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().filename().string()] =
        std::string(std::istreambuf_iterator<char>(in), {});
    }
    return out;
  }

  // Both logs hold the same segments with the same bytes.
  static void expect_identical_logs(const fs::path& a, const fs::path& b) {
    auto fa = segment_files(a);
    auto fb = segment_files(b);
    ASSERT_FALSE(fa.empty()) << "no segment files in " << a;
    ASSERT_EQ(fa.size(), fb.size())
      << "segment counts differ: " << a << " vs " << b;
    for (auto& [name, bytes] : fa) {
      auto i = fb.find(name);
      ASSERT_NE(i, fb.end()) << name << " is missing in " << b;
      EXPECT_EQ(bytes.size(), i->second.size())
        << name << ": leader and follower segment sizes differ";
      EXPECT_TRUE(bytes == i->second)
        << name << ": leader and follower segment bytes differ";
    }
  }

  caf::actor_system_config sys_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  ferry::test::temp_dir root_{"ferry-replication-test"};
  std::shared_ptr<std::atomic<int64_t>> now_;
  std::vector<caf::actor> actors_;
  std::vector<std::shared_ptr<fake_link>> links_;
  std::vector<std::shared_ptr<metadata_store>> stores_;
};

#define EXPECT_ANSWERED_OK(r)                                                  \
  do {                                                                         \
    EXPECT_TRUE((r)->done) << #r " was not answered";                          \
    EXPECT_TRUE((r)->value) << #r " failed: " << describe((r)->err);           \
  } while (false)

// 1. An empty follower copies the leader's log: same end, same bytes, same
// epoch history, and the leader's HW once the next long poll answers.
TEST_F(replication_test, follower_catches_up_with_an_identical_log) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  auto leader = spawn_replica(lcfg);
  for (int n : {2, 3, 1}) {
    auto r = produce(leader, make_batch({.records = n}), acks_mode::leader);
    EXPECT_ANSWERED_OK(r);
  }
  EXPECT_EQ(state(leader).log->high_watermark(), offset{0})
    << "HW moved past a follower that never fetched (ISR {1,2})";
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  auto follower = spawn_replica(fcfg);
  ASSERT_FALSE(link->seen.empty()) << "the follower never fetched";
  auto& first = link->seen.front();
  EXPECT_EQ(first.replica_id, 2);
  EXPECT_EQ(first.from, offset{0});
  EXPECT_EQ(first.leader_epoch, 0);
  EXPECT_EQ(first.last_fetched_epoch, -1) << "empty log: no last epoch";
  EXPECT_EQ(first.max_wait_ms, 500) << "cfg.follower_fetch_wait not used";
  auto ls = status(leader);
  auto fs_ = status(follower);
  EXPECT_EQ(ls.log_end, offset{6});
  EXPECT_EQ(fs_.log_end, ls.log_end) << "follower did not catch up";
  EXPECT_EQ(ls.high_watermark, offset{6})
    << "leader HW did not follow the follower's position";
  EXPECT_EQ(link->seen.back().from, offset{6});
  EXPECT_EQ(link->seen.back().last_fetched_epoch, 0);
  EXPECT_EQ(fs_.leader, 1);
  expect_identical_logs(lcfg.dir, fcfg.dir);
  EXPECT_EQ(state(follower).log->epochs(), state(leader).log->epochs())
    << "follower " << epochs_text(state(follower).log->epochs())
    << " vs leader " << epochs_text(state(leader).log->epochs());
  EXPECT_EQ(state(follower).log->durable_end(), offset{6})
    << "the follower fetches on before its copy is durable";
  // The follower's parked fetch (empty: nothing new) carries the HW when
  // its long poll ends.
  sched_->advance_time(500ms);
  sched_->run();
  EXPECT_EQ(status(follower).high_watermark, offset{6})
    << "the follower did not take the leader's HW";
}

// 2. acks=all is answered once the follower has fetched past the batch (the
// HW covers it); acks=1 does not wait for the follower.
TEST_F(replication_test, acks_all_waits_for_the_follower) {
  auto [leader, broker, link, fcfg, follower] =
    spawn_pair(make_assignment(1, 0, {1, 2}, {1, 2}));
  ASSERT_EQ(state(leader).waiters.size(), 1u)
    << "the follower's fetch is not parked at the leader";
  // New fetches wait in the fake: the follower gets the batch (its parked
  // fetch is woken), but the leader does not hear that it holds it.
  link->fetches = fake_link::mode::hold;
  auto all = produce(leader, make_batch({.records = 2}), acks_mode::all);
  EXPECT_FALSE(all->done) << "acks=all answered before the follower fetched: "
                          << describe(all->err);
  EXPECT_EQ(state(follower).log->log_end(), offset{2})
    << "the parked follower fetch was not woken by the append";
  EXPECT_EQ(state(leader).log->high_watermark(), offset{0});
  auto one = produce(leader, make_batch({}), acks_mode::leader);
  EXPECT_ANSWERED_OK(one);
  EXPECT_FALSE(all->done);
  // The follower's next fetch (from 2, then 3) reaches the leader.
  link->fetches = fake_link::mode::pass;
  caf::anon_send(broker, release_atom::value);
  sched_->run();
  ASSERT_TRUE(all->done) << "acks=all not answered after the follower fetched";
  ASSERT_TRUE(all->value) << describe(all->err);
  EXPECT_EQ(all->value->base_offset, offset{0});
  EXPECT_EQ(all->value->last_offset, offset{1});
  EXPECT_EQ(status(leader).high_watermark, offset{3});
  EXPECT_EQ(status(follower).log_end, offset{3});
  sched_->advance_time(500ms); // the follower's long poll ends
  sched_->run();
  EXPECT_EQ(status(follower).high_watermark, offset{3})
    << "the follower did not take the leader's HW on its next fetch";
}

// 2b. The follower's parked fetch is answered by the append itself, before
// the leader's group-commit flush: the follower's write and fdatasync run
// while the leader's does. The HW (and acks=all) still waits for both.
TEST_F(replication_test, followers_get_a_batch_before_the_leaders_flush) {
  auto w = spawn_pair(make_assignment(1, 0, {1, 2}, {1, 2}));
  auto leader = w.leader;
  auto follower = w.follower;
  ASSERT_EQ(state(leader).waiters.size(), 1u)
    << "the follower's fetch is not parked at the leader";
  auto r = std::make_shared<reply<produce_response>>();
  auto asker = sys_->spawn([r, leader](caf::event_based_actor* self) {
    self
      ->request(leader, caf::infinite, produce_atom_v,
                produce_request{"orders", partition_id{0}, acks_mode::all,
                                make_batch({.records = 3})})
      .then([r](produce_response& x) { r->done = true; r->value = x; },
            [r](caf::error& err) { r->done = true; r->err = err; });
  });
  actors_.push_back(asker);
  ASSERT_TRUE(sched_->prioritize(asker));
  sched_->run_once(); // the request reaches the leader's mailbox
  ASSERT_TRUE(sched_->prioritize(leader));
  sched_->run_once(); // the leader takes the produce, and nothing else
  EXPECT_EQ(state(leader).log->log_end(), offset{3});
  EXPECT_EQ(state(leader).log->durable_end(), offset{0})
    << "the leader flushed within the produce handler";
  EXPECT_TRUE(state(leader).waiters.empty())
    << "the follower's parked fetch waits for the leader's flush";
  EXPECT_FALSE(r->done) << "acks=all answered before anything was durable";
  sched_->run();
  EXPECT_ANSWERED_OK(r);
  EXPECT_EQ(state(leader).log->durable_end(), offset{3});
  EXPECT_EQ(state(follower).log->durable_end(), offset{3});
  EXPECT_EQ(status(leader).high_watermark, offset{3});
}

// 2c. A follower fetch that is never answered (lost with a link) is given up
// on the first tick after follower_fetch_wait + 10 s, and fetched again; an
// answer that still comes for the lost one is dropped.
TEST_F(replication_test, unanswered_follower_fetch_is_sent_again_after_its_bound) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto [leader, broker, link, fcfg, follower] =
    spawn_pair(pa, fake_link::mode::hold);
  ASSERT_EQ(link->seen.size(), 1u);
  EXPECT_FALSE(sched_->clock().has_pending_timeout())
    << "a timer per follower fetch";
  auto r = produce(leader, make_batch({.records = 2}), acks_mode::leader);
  EXPECT_ANSWERED_OK(r);
  sched_->advance_time(10s);
  caf::anon_send(follower, tick_atom_v);
  sched_->run();
  EXPECT_EQ(link->seen.size(), 1u) << "gave up before 10.5 s";
  sched_->advance_time(500ms);
  caf::anon_send(follower, tick_atom_v);
  sched_->run();
  ASSERT_EQ(link->seen.size(), 2u) << "the unanswered fetch was not replaced";
  EXPECT_EQ(link->seen.back().from, offset{0});
  // Both go through now: the first answer is stale and dropped, the second
  // one is applied (a double apply would fail or duplicate the batch).
  link->fetches = fake_link::mode::pass;
  caf::anon_send(broker, release_atom::value);
  sched_->run();
  EXPECT_EQ(state(follower).log->log_end(), offset{2});
  EXPECT_EQ(status(leader).high_watermark, offset{2});
  expect_identical_logs(node_cfg(1, pa).dir, fcfg.dir);
}

// 2c'. The leader's node comes back over a new connection (a new broker
// handle, same epoch): the fetch in flight over the old one is given up at
// once, not after its bound, and the follower fetches over the new one.
TEST_F(replication_test, new_leader_link_replaces_the_fetch_in_flight_at_once) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto [leader, broker, link, fcfg, follower] =
    spawn_pair(pa, fake_link::mode::hold);
  ASSERT_EQ(link->seen.size(), 1u);
  auto r = produce(leader, make_batch({.records = 2}), acks_mode::leader);
  EXPECT_ANSWERED_OK(r);
  // The link goes down (no handle), then up with a new connection.
  assign(follower, pa, nullptr);
  auto [broker2, link2] = spawn_link(leader);
  assign(follower, pa, broker2);
  ASSERT_GE(link2->seen.size(), 1u) << "no fetch over the new link";
  EXPECT_EQ(link2->seen.front().from, offset{0});
  EXPECT_EQ(state(follower).log->log_end(), offset{2});
  // Then the next long poll, parked at the leader; the same handle again
  // (another metadata update) does not send a second one.
  ASSERT_EQ(link2->seen.size(), 2u);
  EXPECT_EQ(link2->seen.back().from, offset{2});
  assign(follower, pa, broker2);
  EXPECT_EQ(link2->seen.size(), 2u);
  // The old connection's answer, should it come, is stale and dropped.
  link->fetches = fake_link::mode::pass;
  caf::anon_send(broker, release_atom::value);
  sched_->run();
  EXPECT_EQ(state(follower).log->log_end(), offset{2});
  expect_identical_logs(node_cfg(1, pa).dir, fcfg.dir);
}

// 2d. An acks=all produce the ISR never confirms is answered
// request_timed_out after ack_timeout (on tick); the batch stays in the log
// and commits once the follower fetches again, without a second answer.
TEST_F(replication_test, acks_all_unconfirmed_for_the_ack_timeout_times_out) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  lcfg.ack_timeout = 2s;
  auto leader = spawn_replica(lcfg);
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  auto follower = spawn_replica(fcfg);
  link->fetches = fake_link::mode::hold; // the follower's position stalls
  auto all = produce(leader, make_batch({.records = 2}), acks_mode::all);
  EXPECT_FALSE(all->done);
  sched_->advance_time(1999ms);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  EXPECT_FALSE(all->done) << "timed out before ack_timeout";
  sched_->advance_time(1ms);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  ASSERT_TRUE(all->done) << "not answered after ack_timeout";
  ASSERT_FALSE(all->value) << "acknowledged without the follower";
  EXPECT_TRUE(is(all->err, ec::request_timed_out)) << describe(all->err);
  EXPECT_NE(describe(all->err).find("not replicated to the ISR (1,2) within 2000 ms"),
            std::string::npos)
    << describe(all->err);
  EXPECT_EQ(state(leader).log->log_end(), offset{2}) << "the batch left the log";
  // The follower fetches again: the batch commits, nothing is answered twice.
  link->fetches = fake_link::mode::pass;
  caf::anon_send(broker, release_atom::value);
  sched_->run();
  EXPECT_EQ(status(leader).high_watermark, offset{2});
  EXPECT_TRUE(state(leader).pending.empty());
  EXPECT_EQ(state(leader).pending_bytes, 0u);
}

// 3. min.insync.replicas: acks=all is refused while the ISR is smaller;
// acks=1 and acks=0 are taken.
TEST_F(replication_test, min_insync_replicas_refuses_acks_all) {
  auto pa = make_assignment(1, 0, {1, 2, 3}, {1});
  auto cfg = node_cfg(1, pa);
  cfg.topic_cfg.replication_factor = 3;
  cfg.topic_cfg.min_insync_replicas = 2;
  auto leader = spawn_replica(cfg);
  auto all = produce(leader, make_batch({}), acks_mode::all);
  ASSERT_TRUE(all->done);
  ASSERT_FALSE(all->value) << "acks=all taken with ISR {1} < min.insync 2";
  EXPECT_TRUE(is(all->err, ec::not_enough_replicas)) << describe(all->err);
  EXPECT_NE(describe(all->err).find("min.insync.replicas is 2"),
            std::string::npos)
    << describe(all->err);
  EXPECT_EQ(state(leader).log->log_end(), offset{0})
    << "a refused produce was appended";
  auto one = produce(leader, make_batch({}), acks_mode::leader);
  EXPECT_ANSWERED_OK(one);
  EXPECT_EQ(one->value ? one->value->base_offset : offset{-1}, offset{0});
  auto zero = produce(leader, make_batch({}), acks_mode::none);
  EXPECT_ANSWERED_OK(zero);
  // The ISR grows to two (the node's update): acks=all is taken and waits
  // for follower 2.
  assign(leader, make_assignment(1, 0, {1, 2, 3}, {1, 2}), nullptr);
  auto later = produce(leader, make_batch({}), acks_mode::all);
  EXPECT_FALSE(later->done) << "answered without follower 2: "
                            << describe(later->err);
}

// 4. Epoch fencing: a follower fetch naming another epoch is refused; a
// follower refuses produce, consumer fetch and list offsets with not_leader.
TEST_F(replication_test, fetch_in_another_epoch_is_fenced_and_followers_refuse_clients) {
  auto pa = make_assignment(1, 3, {1, 2}, {1, 2});
  auto leader = spawn_replica(node_cfg(1, pa));
  auto follower = spawn_replica(node_cfg(2, pa)); // no leader broker: idle
  for (int32_t e : {2, 4}) {
    auto r = ask<fetch_response>(leader, fetch_atom_v,
                                 follower_fetch_req(2, 0, e, -1));
    ASSERT_TRUE(r->done);
    EXPECT_FALSE(r->value) << "fetch in epoch " << e
                           << " accepted by the leader of epoch 3";
    EXPECT_TRUE(is(r->err, ec::fenced_leader_epoch))
      << "epoch " << e << ": " << describe(r->err);
  }
  auto ok = ask<fetch_response>(leader, fetch_atom_v,
                                follower_fetch_req(2, 0, 3, -1));
  EXPECT_ANSWERED_OK(ok);
  auto p = produce(follower, make_batch({}));
  ASSERT_TRUE(p->done);
  ASSERT_FALSE(p->value) << "a follower took a produce";
  EXPECT_TRUE(is(p->err, ec::not_leader)) << describe(p->err);
  EXPECT_NE(describe(p->err).find("leader=1"), std::string::npos)
    << describe(p->err);
  fetch_request consumer;
  consumer.topic = "orders";
  consumer.partition = partition_id{0};
  auto f = ask<fetch_response>(follower, fetch_atom_v, consumer);
  ASSERT_TRUE(f->done);
  EXPECT_TRUE(is(f->err, ec::not_leader)) << describe(f->err);
  auto o = ask<offset>(follower, offsets_atom_v,
                       list_offsets_request{"orders", partition_id{0}, -1});
  ASSERT_TRUE(o->done);
  EXPECT_TRUE(is(o->err, ec::not_leader)) << describe(o->err);
  EXPECT_EQ(state(follower).log->log_end(), offset{0});
}

// 5. Divergence. The scenario: A leads epoch 0 and has 0..9 on B too, then
// appends 10..14 (acks=all, parked) that B never gets (the link drops).
// B leads epoch 1 and takes `b_batches` one-record produces from offset 10
// (acks=all: they wait for A, in B's ISR). Then A follows B.
struct divergence_world {
  partition_actor a;
  partition_actor b;
  fs::path a_dir;
  fs::path b_dir;
  std::shared_ptr<fake_link> link_b;
  std::vector<std::shared_ptr<reply<produce_response>>> parked_on_a;
  std::vector<std::shared_ptr<reply<produce_response>>> on_b;
};

class divergence_test : public replication_test {
protected:
  void diverge(divergence_world& w, int b_batches) {
    auto pa0 = make_assignment(1, 0, {1, 2}, {1, 2});
    auto acfg = node_cfg(1, pa0);
    w.a_dir = acfg.dir;
    w.a = spawn_replica(acfg);
    auto [to_a, link_a] = spawn_link(w.a);
    auto bcfg = node_cfg(2, pa0);
    bcfg.leader_broker = to_a;
    w.b_dir = bcfg.dir;
    w.b = spawn_replica(bcfg);
    for (int i = 0; i < 5; ++i) {
      auto r = produce(w.a, make_batch({.records = 2, .pid = 7, .epoch = 0,
                                        .seq = 2 * i}));
      EXPECT_ANSWERED_OK(r);
    }
    ASSERT_EQ(state(w.b).log->log_end(), offset{10})
      << "B did not replicate 0..9";
    ASSERT_EQ(state(w.a).log->high_watermark(), offset{10});
    // The link to B dies: A appends 10..14 alone.
    link_a->fetches = fake_link::mode::drop;
    for (int i = 0; i < 5; ++i)
      w.parked_on_a.push_back(
        produce(w.a, make_batch({.pid = 7, .epoch = 0, .seq = 10 + i})));
    ASSERT_EQ(state(w.a).log->log_end(), offset{15});
    ASSERT_EQ(state(w.b).log->log_end(), offset{10})
      << "the dropped link leaked";
    for (auto& r : w.parked_on_a)
      EXPECT_FALSE(r->done) << "acks=all answered without B: "
                            << describe(r->err);
    // B leads epoch 1 and takes 10...
    auto pa1 = make_assignment(2, 1, {1, 2}, {2, 1});
    assign(w.b, pa1, nullptr);
    ASSERT_TRUE(state(w.b).leader);
    for (int i = 0; i < b_batches; ++i)
      w.on_b.push_back(produce(w.b, make_batch({.ts = t0 + 1000 + i})));
    ASSERT_EQ(state(w.b).log->log_end(), offset{10 + b_batches});
    for (auto& r : w.on_b)
      EXPECT_FALSE(r->done) << "acks=all on B answered before A has it";
    // ... and A follows B in epoch 1.
    auto [to_b, link_b] = spawn_link(w.b);
    w.link_b = link_b;
    assign(w.a, pa1, to_b);
  }

  // What both divergence tests expect once A followed B.
  void expect_converged(divergence_world& w, int b_batches) {
    auto end = offset{10 + b_batches};
    for (size_t i = 0; i < w.parked_on_a.size(); ++i) {
      auto& r = w.parked_on_a[i];
      ASSERT_TRUE(r->done) << "A's parked produce " << i
                           << " not answered when A lost the leadership";
      EXPECT_FALSE(r->value) << "A acked produce " << i
                             << " that its new leader B does not have";
      EXPECT_TRUE(is(r->err, ec::not_leader)) << describe(r->err);
      EXPECT_NE(describe(r->err).find("leader=2"), std::string::npos)
        << describe(r->err);
    }
    ASSERT_FALSE(w.link_b->seen.empty()) << "A never fetched from B";
    auto& first = w.link_b->seen.front();
    EXPECT_EQ(first.from, offset{15});
    EXPECT_EQ(first.leader_epoch, 1);
    EXPECT_EQ(first.last_fetched_epoch, 0)
      << "A (the old leader) names the wrong epoch for its last batch, so B "
         "cannot see that A's 10..14 diverge";
    EXPECT_EQ(state(w.a).log->log_end(), end)
      << "A did not truncate to 10 and copy 10.." << end.value - 1;
    EXPECT_EQ(state(w.b).log->log_end(), end);
    expect_identical_logs(w.a_dir, w.b_dir);
    EXPECT_EQ(state(w.a).log->epochs(), state(w.b).log->epochs())
      << "A " << epochs_text(state(w.a).log->epochs()) << " vs B "
      << epochs_text(state(w.b).log->epochs());
    EXPECT_EQ(state(w.b).log->epochs(),
              (std::vector<epoch_entry>{{leader_epoch{0}, offset{0}},
                                        {leader_epoch{1}, offset{10}}}))
      << epochs_text(state(w.b).log->epochs());
    for (size_t i = 0; i < w.on_b.size(); ++i) {
      ASSERT_TRUE(w.on_b[i]->done) << "B's produce " << i << " never answered";
      ASSERT_TRUE(w.on_b[i]->value) << describe(w.on_b[i]->err);
      EXPECT_EQ(w.on_b[i]->value->base_offset,
                offset{10 + static_cast<int64_t>(i)});
    }
    EXPECT_EQ(status(w.b).high_watermark, end);
    EXPECT_EQ(state(w.a).last_batch_epoch, 1);
    // A forgot the truncated batches of producer 7: it holds seq 0..9 only,
    // like B.
    EXPECT_TRUE(state(w.a).producers.encode_snapshot(end)
                == state(w.b).producers.encode_snapshot(end))
      << "A's producer table after truncation differs from B's";
  }
};

// A's log is longer than B's (15 > 13): A truncates to 10, copies 10..12.
TEST_F(divergence_test, old_leader_truncates_its_divergent_suffix) {
  divergence_world w;
  diverge(w, 3);
  if (HasFatalFailure())
    return;
  expect_converged(w, 3);
}

// B's log is longer than A's (16 > 15): without the divergence check A would
// append B's offset 15 on top of its own 10..14 and silently hold other
// records than its leader at 10..14.
TEST_F(divergence_test, old_leader_never_appends_over_its_divergent_suffix) {
  divergence_world w;
  diverge(w, 6);
  if (HasFatalFailure())
    return;
  expect_converged(w, 6);
}

// 6. A follower that does not fetch for replica_lag_max leaves the ISR
// (proposed to the controller; the leader takes the committed answer), and a
// parked acks=all produce completes with the smaller ISR. A follower that
// catches up again rejoins it.
TEST_F(replication_test, lagging_follower_leaves_the_isr_and_rejoins) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  // The controller (and, for the follower below, the leader's broker).
  auto [ctl, ctl_link] = spawn_link(partition_actor{}, {1, 2});
  lcfg.controller = ctl;
  auto leader = spawn_replica(lcfg);
  ctl_link->leader = leader;
  auto parked = produce(leader, make_batch({.records = 2}), acks_mode::all);
  EXPECT_FALSE(parked->done);
  sched_->advance_time(400ms);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  EXPECT_TRUE(ctl_link->isr_changes.empty())
    << "ISR shrunk before replica_lag_max (500 ms)";
  sched_->advance_time(200ms);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  ASSERT_EQ(ctl_link->isr_changes.size(), 1u)
    << "no ISR shrink proposed after 600 ms without a fetch";
  auto& shrink = ctl_link->isr_changes.front();
  EXPECT_EQ(shrink.isr, std::vector<int32_t>{1}) << ids(shrink.isr);
  EXPECT_EQ(shrink.leader, 1);
  EXPECT_EQ(shrink.epoch, leader_epoch{0});
  EXPECT_EQ(shrink.topic, "orders");
  EXPECT_EQ(status(leader).isr, std::vector<int32_t>{1})
    << "the leader did not adopt the committed ISR";
  ASSERT_TRUE(parked->done) << "acks=all still parked after the ISR shrank";
  EXPECT_TRUE(parked->value) << describe(parked->err);
  EXPECT_EQ(status(leader).high_watermark, offset{2});
  // Ticks with the ISR at {1} propose nothing more.
  sched_->advance_time(1s);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  EXPECT_EQ(ctl_link->isr_changes.size(), 1u);
  // Follower 2 comes (back), fetches from 0, then from the HW: expand.
  auto fcfg = node_cfg(2, make_assignment(1, 0, {1, 2}, {1}));
  fcfg.leader_broker = ctl;
  auto follower = spawn_replica(fcfg);
  EXPECT_EQ(state(follower).log->log_end(), offset{2});
  ASSERT_EQ(ctl_link->isr_changes.size(), 2u)
    << "no ISR expansion proposed for a follower at the HW";
  EXPECT_EQ(ctl_link->isr_changes.back().isr, (std::vector<int32_t>{1, 2}))
    << ids(ctl_link->isr_changes.back().isr);
  EXPECT_EQ(status(leader).isr, (std::vector<int32_t>{1, 2}));
}

// 6a. A refused ISR change (e.g. the follower's broker is fenced and has not
// registered again) is not proposed again on every fetch of that follower:
// only after isr_retry_backoff (1 s).
TEST_F(replication_test, refused_isr_change_waits_for_the_retry_backoff) {
  auto [ctl, ctl_link] = spawn_link(partition_actor{}, {1, 2});
  ctl_link->refuse_isr = make_error(ec::invalid_request, "broker 2 is fenced");
  auto lcfg = node_cfg(1, make_assignment(1, 0, {1, 2}, {1}));
  lcfg.controller = ctl;
  auto leader = spawn_replica(lcfg);
  ctl_link->leader = leader;
  ASSERT_TRUE(produce(leader, make_batch({.records = 2}), acks_mode::all)->done);
  auto fcfg = node_cfg(2, make_assignment(1, 0, {1, 2}, {1}));
  fcfg.leader_broker = ctl;
  auto follower = spawn_replica(fcfg);
  EXPECT_EQ(state(follower).log->log_end(), offset{2});
  ASSERT_EQ(ctl_link->isr_changes.size(), 1u) << "no ISR expansion proposed";
  // More data, more fetches at the HW within the backoff: no new proposal.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(produce(leader, make_batch({}), acks_mode::all)->done);
    sched_->advance_time(200ms);
    sched_->run();
  }
  EXPECT_EQ(state(follower).log->log_end(), offset{5});
  EXPECT_EQ(ctl_link->isr_changes.size(), 1u)
    << "a refused ISR change was proposed again within the backoff";
  // After the backoff the next fetch proposes again; accepted this time.
  ctl_link->refuse_isr = caf::error{};
  sched_->advance_time(1s);
  sched_->run();
  sched_->advance_time(600ms); // a parked long poll ends, the follower fetches
  sched_->run();
  ASSERT_EQ(ctl_link->isr_changes.size(), 2u) << "no new proposal after the backoff";
  EXPECT_EQ(ctl_link->isr_changes.back().isr, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(status(leader).isr, (std::vector<int32_t>{1, 2}));
}

// 6b. Kafka's min.insync.replicas promise: an acks=all produce taken with
// the ISR at min.insync.replicas is not acked as a success once the ISR has
// shrunk below it (Kafka: NOT_ENOUGH_REPLICAS_AFTER_APPEND).
TEST_F(replication_test, isr_shrink_below_min_insync_fails_parked_acks_all) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto [ctl, ctl_link] = spawn_link(partition_actor{}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  lcfg.topic_cfg.min_insync_replicas = 2;
  lcfg.controller = ctl;
  auto leader = spawn_replica(lcfg);
  ctl_link->leader = leader;
  auto parked = produce(leader, make_batch({}), acks_mode::all);
  EXPECT_FALSE(parked->done) << describe(parked->err);
  sched_->advance_time(600ms);
  caf::anon_send(leader, tick_atom_v);
  sched_->run();
  ASSERT_EQ(ctl_link->isr_changes.size(), 1u);
  EXPECT_EQ(status(leader).isr, std::vector<int32_t>{1});
  ASSERT_TRUE(parked->done) << "the parked produce is never answered";
  EXPECT_FALSE(parked->value)
    << "acks=all with min.insync.replicas=2 acked with only the leader "
       "holding the batch (ISR {1})";
  EXPECT_TRUE(is(parked->err, ec::not_enough_replicas)) << describe(parked->err);
}

// 6c. Under steady load a follower is never exactly at the leader's log end
// when its fetch arrives (a produce lands between two fetches), yet it is
// in sync: each fetch starts where the previous answer ended, i.e. at the
// leader's end when that fetch was served (Kafka's rule for
// lastCaughtUpTime). It must stay in the ISR.
TEST_F(replication_test, follower_one_batch_behind_under_load_stays_in_the_isr) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto [ctl, link] = spawn_link(partition_actor{}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  lcfg.controller = ctl;
  auto leader = spawn_replica(lcfg);
  link->leader = leader;
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = ctl;
  auto follower = spawn_replica(fcfg);
  // Fetches wait in the fake until released; a produce lands before each.
  link->fetches = fake_link::mode::hold;
  auto r0 = produce(leader, make_batch({}), acks_mode::leader);
  EXPECT_ANSWERED_OK(r0);
  int64_t max_lag = 0;
  for (int i = 0; i < 12; ++i) { // 1.2 s, replica_lag_max is 500 ms
    sched_->advance_time(100ms);
    auto r = produce(leader, make_batch({}), acks_mode::leader);
    EXPECT_ANSWERED_OK(r);
    max_lag = std::max(max_lag, state(leader).log->log_end().value
                                  - state(follower).log->log_end().value);
    caf::anon_send(ctl, release_atom::value);
    sched_->run();
    caf::anon_send(leader, tick_atom_v);
    sched_->run();
  }
  EXPECT_LE(max_lag, 1) << "the test did not keep the follower one batch behind";
  EXPECT_EQ(state(follower).log->log_end(), offset{13});
  EXPECT_TRUE(link->isr_changes.empty())
    << "follower 2 was shrunk out of the ISR (proposed "
    << ids(link->isr_changes.empty() ? std::vector<int32_t>{}
                                     : link->isr_changes.front().isr)
    << ") although every fetch started at the leader's log end of the "
       "previous fetch (at most one batch, 100 ms, behind)";
}

// 7. A follower restarted on its directory fetches on from its log end: no
// data twice, the same bytes as the leader, its epoch history kept.
TEST_F(replication_test, restarted_follower_continues_from_its_log_end) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  auto leader = spawn_replica(lcfg);
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  use_store(fcfg);
  auto follower = spawn_replica(fcfg);
  for (int n : {2, 3, 1}) {
    auto r = produce(leader, make_batch({.records = n}));
    EXPECT_ANSWERED_OK(r);
  }
  ASSERT_EQ(state(follower).log->log_end(), offset{6});
  auto stopped = ask<bool>(follower, stop_atom_v, false);
  ASSERT_TRUE(stopped->done && stopped->value && *stopped->value)
    << "stop failed: " << describe(stopped->err);
  for (int n : {2, 1}) {
    auto r = produce(leader, make_batch({.records = n}), acks_mode::leader);
    EXPECT_ANSWERED_OK(r);
  }
  auto fetches_before = link->seen.size();
  follower = spawn_replica(fcfg);
  ASSERT_GT(link->seen.size(), fetches_before)
    << "the restarted follower never fetched";
  auto& first = link->seen[fetches_before];
  EXPECT_EQ(first.from, offset{6})
    << "the restarted follower did not fetch from its log end";
  EXPECT_EQ(first.last_fetched_epoch, 0);
  EXPECT_EQ(state(follower).log->log_end(), offset{9});
  EXPECT_EQ(status(leader).high_watermark, offset{9});
  expect_identical_logs(lcfg.dir, fcfg.dir);
  EXPECT_EQ(state(follower).log->epochs(), state(leader).log->epochs())
    << "follower " << epochs_text(state(follower).log->epochs())
    << " vs leader " << epochs_text(state(leader).log->epochs());
}

// 8. A new follower of a leader whose log no longer starts at 0 (retention
// or purge) starts at the leader's log start (Kafka: truncate fully and
// start at the leader's log start offset) instead of retrying forever.
TEST_F(replication_test, new_follower_starts_at_the_leaders_log_start) {
  auto lcfg = node_cfg(1, make_assignment(1, 0, {1, 2}, {1}));
  lcfg.topic_cfg.segment_bytes = 200; // a segment per batch
  auto leader = spawn_replica(lcfg);
  for (int i = 0; i < 4; ++i) {
    auto r = produce(leader, make_batch({.value_bytes = 150}));
    EXPECT_ANSWERED_OK(r);
  }
  auto purged = ask<offset>(leader, purge_atom_v, offset{2});
  ASSERT_TRUE(purged->done && purged->value) << describe(purged->err);
  ASSERT_EQ(*purged->value, offset{2});
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, make_assignment(1, 0, {1, 2}, {1}));
  fcfg.leader_broker = broker;
  auto follower = spawn_replica(fcfg);
  for (int i = 0; i < 5; ++i) { // retries after follower_retry_backoff
    sched_->advance_time(100ms);
    sched_->run();
  }
  EXPECT_EQ(state(follower).log->log_end(), offset{4})
    << "a follower starting below the leader's log start (2) never catches "
       "up; it fetched from "
    << link->seen.back().from.value << " " << link->seen.size() << " times";
  EXPECT_EQ(state(follower).log->log_start(), offset{2});
}

// 9. With I/O threads (ferryd: cfg.sync), a follower's fetch offset still
// means "durable here": it fetches again only once the pool synced what it
// appended, and the leader's acks=all waits for that.
TEST_F(replication_test, follower_with_io_threads_fetches_on_only_once_durable) {
  auto pool = std::make_shared<sync_pool>(
    sync_pool_options{.threads = 0, .syncfs_threshold = 0});
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  lcfg.sync = pool;
  auto leader = spawn_replica(lcfg);
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  fcfg.sync = pool;
  auto follower = spawn_replica(fcfg);
  ASSERT_EQ(link->seen.size(), 1u);
  auto r = produce(leader, make_batch({.records = 4}));
  // The follower got the batch before the leader's sync (its parked fetch
  // was woken by the append) and appended it, but has not synced it.
  EXPECT_EQ(state(follower).log->log_end(), offset{4});
  EXPECT_EQ(state(follower).log->durable_end(), offset{0});
  EXPECT_EQ(link->seen.size(), 1u)
    << "the follower fetched on (from " << link->seen.back().from.value
    << ") before its copy was durable";
  EXPECT_FALSE(r->done) << "acks=all answered before any sync";
  for (int i = 0; i < 10 && pool->run_pending() > 0; ++i)
    sched_->run();
  ASSERT_GE(link->seen.size(), 2u) << "the follower never fetched on";
  EXPECT_EQ(link->seen[1].from, offset{4});
  EXPECT_EQ(state(follower).log->durable_end(), offset{4});
  EXPECT_ANSWERED_OK(r);
  EXPECT_EQ(status(leader).high_watermark, offset{4});
  expect_identical_logs(lcfg.dir, fcfg.dir);
}

// 10. A follower that becomes leader while its last fetch's appends wait
// for their sync still applies them to the node (on_replicated) once they
// are durable, and says it is behind until then (the node does not
// coordinate that partition's groups meanwhile). Before, they were never
// applied: follower_synced returns at once for a leader (tests/chaos seed
// 1108: the new group coordinator served commits older than the log's).
TEST_F(replication_test, a_follower_made_leader_before_its_sync_applies_what_it_fetched) {
  auto pool = std::make_shared<sync_pool>(
    sync_pool_options{.threads = 0, .syncfs_threshold = 0});
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto lcfg = node_cfg(1, pa);
  lcfg.sync = pool;
  auto leader = spawn_replica(lcfg);
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  fcfg.sync = pool;
  auto applied = std::make_shared<std::vector<int64_t>>();
  auto behind = std::make_shared<std::vector<bool>>();
  fcfg.on_replicated = [applied](std::string_view data) {
    return each_batch(data, [&](auto& h) { applied->push_back(h.base_offset.value); });
  };
  fcfg.on_behind = [behind](bool b) { behind->push_back(b); };
  auto follower = spawn_replica(fcfg);
  applied->clear(); // the start's replay of the (empty) log
  auto r = produce(leader, make_batch({.records = 4}));
  ASSERT_EQ(state(follower).log->log_end(), offset{4});
  ASSERT_EQ(state(follower).log->durable_end(), offset{0});
  EXPECT_TRUE(applied->empty()) << "applied before it was durable";
  EXPECT_EQ(*behind, (std::vector<bool>{true}));
  // The leader is gone; node 2 leads epoch 1 before its sync ran.
  assign(follower, make_assignment(2, 1, {1, 2}, {2}), caf::actor{});
  ASSERT_TRUE(state(follower).leader);
  EXPECT_TRUE(applied->empty());
  for (int i = 0; i < 10 && pool->run_pending() > 0; ++i)
    sched_->run();
  EXPECT_EQ(state(follower).log->durable_end(), offset{4});
  EXPECT_EQ(*applied, (std::vector<int64_t>{0}))
    << "the fetched batch never reached the node's stores";
  EXPECT_EQ(*behind, (std::vector<bool>{true, false}));
  (void)r;
}

// 11. A node store that cannot take a fetched batch (a full disk) gets it
// again on the next tick, and the replica says it is behind until then.
// Before, the batch was dropped: the node's offset store lacked those
// commits until a restart, and a group coordinator on the node could serve
// offsets older than the log's (tests/chaos/README.md, seed 5001).
//
// A follower applies fetched __consumer_state batches to the node's stores
// only once its HW (the leader's, from the next fetch) covers them: above
// it a leader change may cut them. A batch the store could not take (a full
// disk) stays pending and the replica behind; the next tick applies it.
TEST_F(replication_test, a_batch_the_store_could_not_take_is_applied_on_the_next_tick) {
  auto pa = make_assignment(1, 0, {1, 2}, {1, 2});
  auto leader = spawn_replica(node_cfg(1, pa));
  auto [broker, link] = spawn_link(leader);
  auto fcfg = node_cfg(2, pa);
  fcfg.leader_broker = broker;
  fcfg.follower_fetch_wait = 500ms;
  auto applied = std::make_shared<std::vector<int64_t>>();
  auto behind = std::make_shared<std::vector<bool>>();
  auto full = std::make_shared<bool>(false);
  fcfg.on_replicated = [applied, full](std::string_view data) -> caf::expected<size_t> {
    if (*full)
      return make_error(ec::disk_full, "test: the store's disk is full");
    return each_batch(data, [&](auto& h) { applied->push_back(h.base_offset.value); });
  };
  fcfg.on_behind = [behind](bool b) { behind->push_back(b); };
  auto follower = spawn_replica(fcfg);
  applied->clear(); // the start's replay of the (empty) log
  auto r = produce(leader, make_batch({.records = 2}));
  EXPECT_ANSWERED_OK(r);
  ASSERT_EQ(state(follower).log->durable_end(), offset{2});
  EXPECT_LT(state(follower).log->high_watermark(), offset{2});
  EXPECT_TRUE(applied->empty()) << "applied above the follower's HW";
  EXPECT_EQ(*behind, (std::vector<bool>{true}));
  // The next fetch brings HW 2, but the store is full: kept, still behind.
  *full = true;
  sched_->advance_time(500ms);
  sched_->run();
  ASSERT_EQ(state(follower).log->high_watermark(), offset{2});
  EXPECT_TRUE(applied->empty());
  EXPECT_EQ(*behind, (std::vector<bool>{true}))
    << "the replica stopped counting as behind with a batch not applied";
  EXPECT_EQ(state(follower).replicated_pending.size(), 1u);
  // Still full at a tick: kept, still behind.
  caf::anon_send(follower, tick_atom_v);
  sched_->run();
  EXPECT_TRUE(applied->empty());
  EXPECT_EQ(*behind, (std::vector<bool>{true}));
  // Room again: the next tick applies it, in order, and the replica is
  // caught up.
  *full = false;
  caf::anon_send(follower, tick_atom_v);
  sched_->run();
  EXPECT_EQ(*applied, (std::vector<int64_t>{0}));
  EXPECT_EQ(*behind, (std::vector<bool>{true, false}));
  // The next fetched batch goes through once the HW covers it.
  auto r2 = produce(leader, make_batch({.records = 1}));
  EXPECT_ANSWERED_OK(r2);
  sched_->advance_time(500ms);
  sched_->run();
  EXPECT_EQ(*applied, (std::vector<int64_t>{0, 2}));
}

// 12. A follower fetched a batch its leader never committed (the third
// replica never got it); the leader is gone and the third replica leads
// without it, so the follower cuts it. It must never have reached the
// node's stores: a store that kept a cut __consumer_state commit served
// offsets the group never committed, then lower ones once another node
// served the group (tests/chaos/README.md, seed 5001). What the new leader
// commits reaches them once the follower's HW covers it.
TEST_F(replication_test, a_follower_never_applies_a_batch_a_truncation_cuts) {
  auto pa0 = make_assignment(1, 0, {1, 2, 3}, {1, 2, 3});
  auto leader = spawn_replica(node_cfg(1, pa0));
  auto [to_1_for_2, link2] = spawn_link(leader);
  auto [to_1_for_3, link3] = spawn_link(leader);
  link3->fetches = fake_link::mode::drop;
  auto fcfg = node_cfg(2, pa0);
  fcfg.leader_broker = to_1_for_2;
  fcfg.follower_fetch_wait = 500ms;
  auto applied = std::make_shared<std::vector<timestamp_ms>>();
  fcfg.on_replicated = [applied](std::string_view data) {
    return each_batch(data, [&](auto& h) { applied->push_back(h.base_timestamp); });
  };
  auto two = spawn_replica(fcfg);
  auto tcfg = node_cfg(3, pa0);
  tcfg.leader_broker = to_1_for_3;
  auto three = spawn_replica(tcfg);
  applied->clear(); // the start's replay of the (empty) log
  // Node 1 appends X (ts t0); node 2 has it, node 3 does not: no HW.
  auto x = produce(leader, make_batch({.records = 2, .ts = t0}));
  ASSERT_EQ(state(two).log->log_end(), offset{2});
  ASSERT_EQ(state(three).log->log_end(), offset{0});
  sched_->advance_time(500ms);
  sched_->run();
  EXPECT_EQ(state(two).log->high_watermark(), offset{0});
  EXPECT_TRUE(applied->empty()) << "node 2 applied X above its HW";
  // Node 1 is gone; node 3 leads epoch 1 and takes Y (ts t0 + 1000).
  link2->fetches = fake_link::mode::drop;
  auto pa1 = make_assignment(3, 1, {1, 2, 3}, {3, 2});
  assign(three, pa1, nullptr);
  ASSERT_TRUE(state(three).leader);
  auto y = produce(three, make_batch({.records = 1, .ts = t0 + 1000}));
  auto [to_3, link_3] = spawn_link(three);
  assign(two, pa1, to_3);
  // Node 2 cut X, copied Y, and applies Y once its HW covers it.
  for (int i = 0; i < 4; ++i) {
    sched_->advance_time(500ms);
    sched_->run();
  }
  EXPECT_EQ(state(two).log->log_end(), offset{1});
  EXPECT_TRUE(y->done && y->value) << describe(y->err);
  EXPECT_EQ(state(two).log->high_watermark(), offset{1});
  EXPECT_EQ(*applied, (std::vector<timestamp_ms>{t0 + 1000}))
    << "node 2's stores took a batch that is not (or no longer) in the log";
  (void)x;
  (void)link_3;
}

} // namespace
