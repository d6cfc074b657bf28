// Tests of the __consumer_state records (broker/consumer_state.hpp): every
// kind round trips, malformed values and unknown kinds give their errors,
// and applying a log to a node's stores (offsets, queue state, queue group
// configs, DLQ producer rows, DLQ redrive marks and producers) is in order
// and idempotent (a replica replays its whole log at start).

#include "broker/consumer_state.hpp"

#include "broker/dlq_store.hpp"
#include "broker/metadata_store.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/record_batch.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

using namespace ferry;
namespace fs = std::filesystem;
namespace qf = ferry::queue_state_format;

namespace {

using kind = consumer_state_kind;

queue_record rec(int64_t off, queue_record_phase phase, int32_t attempts) {
  queue_record r;
  r.off = offset{off};
  r.phase = phase;
  r.attempts = attempts;
  r.first_failure = 10;
  r.last_failure = 20;
  r.available_at = 30;
  r.last_error = attempts > 0 ? "boom" : "";
  return r;
}

consumer_state_record change_set(std::string group, int64_t committed,
                                 std::vector<queue_record> upserts,
                                 std::vector<offset> erased = {},
                                 bool full = false) {
  consumer_state_record x;
  x.kind = kind::queue_partition;
  x.group = std::move(group);
  x.topic = "t";
  x.partition = partition_id{2};
  x.changes.committed = offset{committed};
  x.changes.full = full;
  x.changes.upserts = std::move(upserts);
  x.changes.erased = std::move(erased);
  return x;
}

consumer_state_record round_trip(const consumer_state_record& x) {
  auto v = encode_consumer_state_value(x);
  auto back = decode_consumer_state_value(v);
  EXPECT_TRUE(back) << describe(back.error());
  if (!back)
    return {};
  back->group = x.group;
  return *back;
}

void expect_same(const consumer_state_record& a,
                 const consumer_state_record& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.off, b.off);
  EXPECT_EQ(a.mark, b.mark);
  EXPECT_EQ(a.target_topic, b.target_topic);
  EXPECT_EQ(a.target_partition, b.target_partition);
  EXPECT_EQ(a.producer, b.producer);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.row, b.row);
  EXPECT_EQ(a.topic, b.topic);
  EXPECT_EQ(a.partition, b.partition);
  EXPECT_EQ(a.changes.committed, b.changes.committed);
  EXPECT_EQ(a.changes.full, b.changes.full);
  EXPECT_EQ(a.changes.upserts, b.changes.upserts);
  EXPECT_EQ(a.changes.erased, b.changes.erased);
}

consumer_state_record dlq_mark(std::string topic, int32_t p, int64_t off,
                               int64_t target_off) {
  consumer_state_record x;
  x.kind = kind::dlq_mark;
  x.group = dlq_home_key(topic);
  x.topic = std::move(topic);
  x.partition = partition_id{p};
  x.off = offset{off};
  x.mark = redrive_mark{1234, "orders", partition_id{2}, offset{target_off}};
  return x;
}

consumer_state_record dlq_producer_row(std::string topic, int32_t p,
                                       int64_t last_off, int32_t seq) {
  consumer_state_record x;
  x.kind = kind::dlq_producer;
  x.group = dlq_home_key(topic);
  x.topic = std::move(topic);
  x.partition = partition_id{p};
  x.target_topic = "orders";
  x.target_partition = partition_id{2};
  x.producer = redrive_producer{producer_id{77}, 3, offset{last_off}, seq};
  return x;
}

consumer_state_record dlq_erase_below(std::string topic, int32_t p,
                                      int64_t before) {
  consumer_state_record x;
  x.kind = kind::dlq_erase_below;
  x.group = dlq_home_key(topic);
  x.topic = std::move(topic);
  x.partition = partition_id{p};
  x.off = offset{before};
  return x;
}

consumer_state_record dlq_topic_erase(std::string topic) {
  consumer_state_record x;
  x.kind = kind::dlq_topic_erase;
  x.group = dlq_home_key(topic);
  x.topic = std::move(topic);
  return x;
}

} // namespace

TEST(consumer_state, dlq_home_keys_cannot_be_group_names) {
  auto k = dlq_home_key("orders.dlq");
  EXPECT_EQ(k, std::string("\0dlq:orders.dlq", 15));
  EXPECT_NE(k.find('\0'), std::string::npos);
}

TEST(consumer_state, every_dlq_kind_round_trips) {
  for (auto& x : {dlq_mark("d", 1, 7, 9), dlq_producer_row("d", 1, 7, 4),
                  dlq_producer_row("d", 0, -1, -1), dlq_erase_below("d", 3, 12),
                  dlq_topic_erase("d")}) {
    auto back = round_trip(x);
    expect_same(x, back);
  }
  // The mark of the FORMAT.md example: d-1@7 redriven to orders-2@9 at 1234.
  auto v = encode_consumer_state_value(dlq_mark("d", 1, 7, 9));
  EXPECT_EQ(v, std::string("\x07"
                           "\x00\x01"
                           "d"
                           "\x00\x00\x00\x01"
                           "\x00\x00\x00\x00\x00\x00\x00\x07"
                           "\x00\x00\x00\x00\x00\x00\x04\xd2"
                           "\x00\x00\x00\x02"
                           "\x00\x00\x00\x00\x00\x00\x00\x09"
                           "orders",
                           1 + 2 + 1 + 4 + 8 + 8 + 4 + 8 + 6));
}

TEST(consumer_state, malformed_dlq_values_are_corrupt) {
  for (auto& x : {dlq_mark("d", 1, 7, 9), dlq_producer_row("d", 1, 7, 4),
                  dlq_erase_below("d", 3, 12), dlq_topic_erase("dq")}) {
    auto v = encode_consumer_state_value(x);
    // A mark's target topic is the rest of the value: cuts inside it are
    // shorter names; one that leaves it empty is malformed.
    auto end = x.kind == kind::dlq_mark ? 1 + 2 + 1 + 4 + 8 + 8 + 4 + 8 + 1
                                        : v.size();
    for (size_t n = 1; n < end; ++n) {
      auto r = decode_consumer_state_value(v.substr(0, n));
      ASSERT_FALSE(r) << "kind " << int(v[0]) << " cut at " << n;
      EXPECT_TRUE(is(r.error(), ec::corrupt_segment)) << describe(r.error());
    }
    if (x.kind != kind::dlq_mark) { // a mark's target topic is the rest
      auto r = decode_consumer_state_value(v + "x");
      ASSERT_FALSE(r);
      EXPECT_TRUE(is(r.error(), ec::corrupt_segment)) << describe(r.error());
    }
  }
}

TEST(consumer_state, commit_value_matches_the_documented_example) {
  committed_offset o;
  o.topic = "t";
  o.partition = partition_id{0};
  o.committed = offset{5};
  o.commit_timestamp = 1000;
  auto v = encode_offsets_value({o});
  std::string want{"\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"
                   "\x00\x00\x00\x00\x00\x00\x00\x05"
                   "\x00\x00\x00\x00\x00\x00\x03\xe8"
                   "\x00\x00\x00\x00",
                   32};
  EXPECT_EQ(v, want);
  consumer_state_record x;
  x.kind = kind::commit;
  x.offsets = {o};
  EXPECT_EQ(encode_consumer_state_value(x), v);
  expect_same(round_trip(x), x);
}

TEST(consumer_state, every_queue_kind_round_trips) {
  auto lease = rec(9, queue_record_phase::leased, 1);
  lease.member = "member-1";
  lease.lease_id = 77;
  lease.deadline = 123456;
  auto cs = change_set("g", 4,
                       {rec(5, queue_record_phase::retry, 2),
                        rec(6, queue_record_phase::done, 0),
                        rec(7, queue_record_phase::dead_letter, 3), lease},
                       {offset{8}}, true);
  expect_same(round_trip(cs), cs);
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "g";
  cfg.row = std::string{"\x01config", 7};
  expect_same(round_trip(cfg), cfg);
  consumer_state_record del;
  del.kind = kind::queue_group_delete;
  EXPECT_EQ(encode_consumer_state_value(del), std::string(1, '\x03'));
  expect_same(round_trip(del), del);
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.topic = "orders";
  prod.partition = partition_id{3};
  prod.row = "producer-row";
  expect_same(round_trip(prod), prod);
  consumer_state_record erase;
  erase.kind = kind::queue_partition_erase;
  erase.topic = "orders";
  erase.partition = partition_id{1};
  expect_same(round_trip(erase), erase);
}

TEST(consumer_state, an_unknown_kind_is_its_own_error) {
  for (int k : {0, 13, 200}) {
    auto r = decode_consumer_state_value(std::string(1, static_cast<char>(k))
                                         + "rest");
    ASSERT_FALSE(r);
    EXPECT_TRUE(is(r.error(), ec::unknown_record_kind)) << describe(r.error());
  }
}

TEST(consumer_state, malformed_values_are_corrupt) {
  EXPECT_TRUE(is(decode_consumer_state_value("").error(), ec::corrupt_segment));
  auto cs = change_set("g", 0, {rec(5, queue_record_phase::retry, 1)},
                       {offset{6}});
  auto v = encode_consumer_state_value(cs);
  // Every cut of a change set fails, none crashes.
  for (size_t n = 1; n < v.size(); ++n) {
    auto r = decode_consumer_state_value(v.substr(0, n));
    ASSERT_FALSE(r) << "cut at " << n;
    EXPECT_TRUE(is(r.error(), ec::corrupt_segment)) << describe(r.error());
  }
  EXPECT_TRUE(
    is(decode_consumer_state_value(v + "x").error(), ec::corrupt_segment));
  // A bad row inside: a retry row without attempts.
  auto bad = change_set("g", 0, {rec(5, queue_record_phase::retry, 0)});
  EXPECT_TRUE(is(decode_consumer_state_value(encode_consumer_state_value(bad))
                   .error(),
                 ec::corrupt_segment));
  // Flags other than "full".
  auto w = v;
  w[1 + 2 + 1 + 4 + 8] = 2;
  EXPECT_TRUE(is(decode_consumer_state_value(w).error(), ec::corrupt_segment));
  // A config upsert without a value, a producer row without one.
  EXPECT_TRUE(is(decode_consumer_state_value("\x02").error(),
                 ec::corrupt_segment));
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.topic = "t";
  EXPECT_TRUE(is(decode_consumer_state_value(encode_consumer_state_value(prod))
                   .error(),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(decode_offsets_value("\x04").error(), ec::corrupt_segment));
}

class consumer_state_apply : public ::testing::Test {
protected:
  void SetUp() override {
    lmdb::env_options o;
    o.initial_map_size = 1 << 20;
    o.no_sync = true;
    auto s = metadata_store::open(dir_.path() / "meta", o);
    ASSERT_TRUE(s) << describe(s.error());
    md_ = std::move(*s);
    offsets_ = std::make_unique<offset_store>(*md_);
  }

  void TearDown() override {
    offsets_.reset();
    md_.reset();
  }

  std::string batch(const std::vector<consumer_state_record>& xs) {
    auto b = make_consumer_state_batch(xs, 1000);
    EXPECT_TRUE(b) << describe(b.error());
    return b ? *b : std::string{};
  }

  caf::expected<std::optional<queue_snapshot>> state(std::string group) {
    return queue_state_store{*md_}.load(group, "t", partition_id{2});
  }

  ferry::test::temp_dir dir_{"ferry-consumer-state-test"};
  std::unique_ptr<metadata_store> md_;
  std::unique_ptr<offset_store> offsets_;
};

TEST_F(consumer_state_apply, a_log_of_every_kind_applies_in_order) {
  committed_offset o;
  o.topic = "s";
  o.partition = partition_id{0};
  o.committed = offset{42};
  consumer_state_record commit;
  commit.kind = kind::commit;
  commit.group = "stream";
  commit.offsets = {o};
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "q";
  cfg.row = "config-v1";
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.group = "q";
  prod.topic = "t";
  prod.partition = partition_id{2};
  prod.row = "producer";
  auto lease = rec(3, queue_record_phase::leased, 1);
  lease.member = "m";
  lease.lease_id = 5;
  lease.deadline = 99;
  auto first = change_set("q", 0,
                          {rec(0, queue_record_phase::done, 0),
                           rec(1, queue_record_phase::retry, 1), lease});
  auto second = change_set("q", 1, {rec(2, queue_record_phase::dead_letter, 3)},
                           {offset{0}});
  // Two batches back to back, as a log read returns them; the second holds
  // two records.
  auto log = batch({commit, cfg, prod, first});
  log += batch({second, change_set("other", 7, {})});
  auto n = apply_consumer_state(*offsets_, *md_, log);
  ASSERT_TRUE(n) << describe(n.error());
  // Log records: the first batch 1 + 1 + 1 + (position + 3 rows), the
  // second (position + 1 erased + 1 row) + position.
  EXPECT_EQ(*n, 11u);
  auto check = [&] {
    auto offs = offsets_->fetch("stream");
    ASSERT_TRUE(offs);
    ASSERT_EQ(offs->size(), 1u);
    EXPECT_EQ((*offs)[0].committed, offset{42});
    EXPECT_EQ(*md_->get(qf::groups_db, "q"), "config-v1");
    EXPECT_EQ(*md_->get(qf::producers_db,
                        qf::producer_key("q", "t", partition_id{2})),
              "producer");
    auto s = state("q");
    ASSERT_TRUE(s && *s);
    EXPECT_EQ((*s)->committed, offset{1});
    ASSERT_EQ((*s)->records.size(), 3u);
    EXPECT_EQ((*s)->records[0].off, offset{1});
    EXPECT_EQ((*s)->records[1].phase, queue_record_phase::dead_letter);
    EXPECT_EQ((*s)->records[2], lease);
  };
  check();
  // A replica restart replays the whole log: the same state.
  n = apply_consumer_state(*offsets_, *md_, log);
  ASSERT_TRUE(n) << describe(n.error());
  check();
}

TEST_F(consumer_state_apply, erase_and_delete_records_remove_the_rows) {
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "q";
  cfg.row = "config";
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.group = "q";
  prod.topic = "t";
  prod.partition = partition_id{2};
  prod.row = "producer";
  auto cs = change_set("q", 3, {rec(4, queue_record_phase::retry, 1)});
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({cfg, prod, cs})));
  consumer_state_record erase;
  erase.kind = kind::queue_partition_erase;
  erase.group = "q";
  erase.topic = "t";
  erase.partition = partition_id{2};
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({erase})));
  auto s = state("q");
  ASSERT_TRUE(s);
  EXPECT_FALSE(*s);
  EXPECT_TRUE(is(md_->get(qf::producers_db,
                          qf::producer_key("q", "t", partition_id{2}))
                   .error(),
                 ec::not_found));
  EXPECT_TRUE(md_->get(qf::groups_db, "q"));
  consumer_state_record del;
  del.kind = kind::queue_group_delete;
  del.group = "q";
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({cs, del})));
  EXPECT_TRUE(is(md_->get(qf::groups_db, "q").error(), ec::not_found));
  s = state("q");
  ASSERT_TRUE(s);
  EXPECT_FALSE(*s);
}

TEST_F(consumer_state_apply, an_unknown_kind_stops_with_its_error) {
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "q";
  cfg.row = "config";
  auto good = batch({cfg});
  record r;
  r.key = std::string{"q"};
  r.value = std::string{"\x0d" "future"};
  auto future = encode_batch(batch_meta{}, {r});
  ASSERT_TRUE(future);
  auto n = apply_consumer_state(*offsets_, *md_, good + *future);
  ASSERT_FALSE(n);
  EXPECT_TRUE(is(n.error(), ec::unknown_record_kind));
  EXPECT_TRUE(md_->get(qf::groups_db, "q")); // what came before is applied
}

TEST_F(consumer_state_apply, dlq_records_apply_in_order_and_twice_alike) {
  dlq_store dlqs{*md_};
  auto log = batch({dlq_producer_row("d", 1, -1, -1),
                    dlq_producer_row("d", 1, 7, 0), dlq_mark("d", 1, 7, 9),
                    dlq_producer_row("d", 1, 8, 1), dlq_mark("d", 1, 8, 10)});
  log += batch({dlq_mark("d", 0, 3, 11), dlq_mark("e", 0, 1, 1)});
  auto check = [&] {
    auto p = dlqs.get_producer("d", partition_id{1}, "orders", partition_id{2});
    ASSERT_TRUE(p && *p);
    EXPECT_EQ(**p,
              (redrive_producer{producer_id{77}, 3, offset{8}, 1}));
    auto m = dlqs.marked("d", partition_id{1}, offset{0}, offset{100});
    ASSERT_TRUE(m);
    EXPECT_EQ(*m, (std::set<int64_t>{7, 8}));
    auto one = dlqs.get_mark("d", partition_id{1}, offset{8});
    ASSERT_TRUE(one && *one);
    EXPECT_EQ((*one)->target_offset, offset{10});
    EXPECT_EQ((*one)->target_topic, "orders");
  };
  auto n = apply_consumer_state(*offsets_, *md_, log);
  ASSERT_TRUE(n) << describe(n.error());
  EXPECT_EQ(*n, 7u);
  check();
  n = apply_consumer_state(*offsets_, *md_, log); // a replica's replay
  ASSERT_TRUE(n) << describe(n.error());
  check();
  // Purge's erase drops the marks below its offset of that partition only.
  auto purge = batch({dlq_erase_below("d", 1, 8)});
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, purge));
  EXPECT_EQ(*dlqs.marked("d", partition_id{1}, offset{0}, offset{100}),
            (std::set<int64_t>{8}));
  EXPECT_EQ(*dlqs.marked("d", partition_id{0}, offset{0}, offset{100}),
            (std::set<int64_t>{3}));
  // A deleted topic loses every row; a replay of the whole log (marks, then
  // the erase records) ends in the same state.
  auto gone = batch({dlq_topic_erase("d")});
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, gone));
  auto final_check = [&] {
    EXPECT_EQ(*dlqs.topics(), (std::set<std::string>{"e"}));
    EXPECT_FALSE(
      *dlqs.get_producer("d", partition_id{1}, "orders", partition_id{2}));
  };
  final_check();
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, log + purge + gone));
  final_check();
}

TEST_F(consumer_state_apply, a_dlq_record_with_a_bad_topic_is_refused) {
  auto bad = dlq_mark("", 0, 1, 1);
  EXPECT_TRUE(apply_consumer_state_record(*offsets_, *md_, bad));
  auto neg = dlq_mark("d", 0, -1, 1);
  EXPECT_TRUE(apply_consumer_state_record(*offsets_, *md_, neg));
}

// -- format 2: one key per row, so __consumer_state can be compacted ---------

namespace {

std::vector<record> records_of(const std::string& batch) {
  auto b = decode_batch(batch);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? b->records : std::vector<record>{};
}

std::string nul_key(std::string_view group, std::string_view rest) {
  std::string k{group};
  k.push_back('\0');
  k += rest;
  return k;
}

} // namespace

TEST(consumer_state_format2, every_record_comes_back_from_its_batch) {
  committed_offset a;
  a.topic = "t";
  a.partition = partition_id{0};
  a.committed = offset{5};
  a.commit_timestamp = 1000;
  a.metadata = "m";
  auto b = a;
  b.partition = partition_id{3};
  b.committed = offset{9};
  consumer_state_record commit;
  commit.kind = kind::commit;
  commit.group = "g";
  commit.offsets = {a, b};
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "g";
  cfg.row = std::string{"\x01config", 7};
  consumer_state_record del;
  del.kind = kind::queue_group_delete;
  del.group = "g";
  auto lease = rec(9, queue_record_phase::leased, 1);
  lease.member = "member-1";
  lease.lease_id = 77;
  lease.deadline = 123456;
  auto cs = change_set("g", 4,
                       {rec(5, queue_record_phase::retry, 2),
                        rec(6, queue_record_phase::done, 0), lease},
                       {offset{8}});
  auto full = change_set("g", 4, {rec(7, queue_record_phase::dead_letter, 3)},
                         {}, true);
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.group = "g";
  prod.topic = "orders";
  prod.partition = partition_id{3};
  prod.row = "producer-row";
  consumer_state_record erase;
  erase.kind = kind::queue_partition_erase;
  erase.group = "g";
  erase.topic = "orders";
  erase.partition = partition_id{1};
  for (auto& x : {commit, cfg, del, cs, full, prod, erase, dlq_mark("d", 1, 7, 9),
                  dlq_producer_row("d", 1, 7, 4), dlq_erase_below("d", 3, 12),
                  dlq_topic_erase("d")}) {
    auto bytes = make_consumer_state_batch({x}, 1000);
    ASSERT_TRUE(bytes) << describe(bytes.error());
    auto back = decode_consumer_state_batches(*bytes);
    ASSERT_TRUE(back) << describe(back.error());
    ASSERT_EQ(back->size(), 1u) << "kind " << int(x.kind);
    EXPECT_EQ((*back)[0].group, x.group);
    expect_same((*back)[0], x);
    // Every log record has a format-2 key; no two of one record share one.
    std::set<std::string> keys;
    for (auto& r : records_of(*bytes)) {
      ASSERT_TRUE(r.key);
      EXPECT_FALSE(consumer_state_legacy_key(*r.key));
      EXPECT_TRUE(keys.insert(*r.key).second);
    }
  }
  // A stream group delete: commit tombstones, then the group's tombstone.
  auto gone = commit;
  gone.erase = true;
  consumer_state_record sdel;
  sdel.kind = kind::stream_group_delete;
  sdel.group = "g";
  auto bytes = make_consumer_state_batch({gone, sdel}, 1000);
  ASSERT_TRUE(bytes);
  auto recs = records_of(*bytes);
  ASSERT_EQ(recs.size(), 3u);
  for (auto& r : recs)
    EXPECT_FALSE(r.value); // all tombstones
  auto back = decode_consumer_state_batches(*bytes);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_TRUE((*back)[0].erase);
  EXPECT_EQ((*back)[0].offsets.size(), 2u);
  EXPECT_EQ((*back)[1].kind, kind::stream_group_delete);
}

TEST(consumer_state_format2, keys_name_one_row_each) {
  committed_offset o;
  o.topic = "t";
  o.partition = partition_id{0};
  o.committed = offset{5};
  o.commit_timestamp = 1000;
  auto bytes = make_commit_batch("g", {o}, 1000);
  ASSERT_TRUE(bytes);
  auto recs = records_of(*bytes);
  ASSERT_EQ(recs.size(), 1u);
  // The documented example: "g" NUL 'c' "t" 0.
  EXPECT_EQ(*recs[0].key, std::string("g\0c\0\x01t\0\0\0\0", 10));
  EXPECT_EQ(*recs[0].value, encode_offsets_value({o}));
  // A change set: its position ('p'), then one record per row ('r'), the
  // rows below the position as tombstones.
  auto cs = change_set("g", 6,
                       {rec(5, queue_record_phase::retry, 2),
                        rec(7, queue_record_phase::retry, 1)},
                       {offset{8}});
  bytes = make_consumer_state_batch({cs}, 1000);
  ASSERT_TRUE(bytes);
  recs = records_of(*bytes);
  ASSERT_EQ(recs.size(), 4u);
  std::string tp{"\0\x01t\0\0\0\x02", 7};
  EXPECT_EQ(*recs[0].key, nul_key("g", "p" + tp));
  auto row_key = [&](int64_t off) {
    std::string k = nul_key("g", "r" + tp);
    for (int i = 7; i >= 0; --i)
      k.push_back(static_cast<char>((off >> (8 * i)) & 0xff));
    return k;
  };
  EXPECT_EQ(*recs[1].key, row_key(8));
  EXPECT_FALSE(recs[1].value);
  EXPECT_EQ(*recs[2].key, row_key(5));
  EXPECT_FALSE(recs[2].value); // below the position: erased
  EXPECT_EQ(*recs[3].key, row_key(7));
  ASSERT_TRUE(recs[3].value);
  EXPECT_EQ((*recs[3].value)[0], '\x0c');
  // Format-1 keys are the group or the DLQ home key alone.
  EXPECT_TRUE(consumer_state_legacy_key("g"));
  EXPECT_TRUE(consumer_state_legacy_key(dlq_home_key("d.dlq")));
  EXPECT_FALSE(consumer_state_legacy_key(nul_key("g", "g")));
  EXPECT_FALSE(consumer_state_legacy_key(dlq_home_key("d.dlq") + '\0' + "T"));
  // Names that cannot form a key are refused before anything is written.
  auto bad = cs;
  bad.group = std::string("a\0b", 3);
  EXPECT_TRUE(is(make_consumer_state_batch({bad}, 1000).error(),
                 ec::invalid_argument));
  bad = cs;
  bad.topic = "";
  EXPECT_TRUE(is(make_consumer_state_batch({bad}, 1000).error(),
                 ec::invalid_argument));
}

TEST(consumer_state_format2, malformed_keys_and_values_give_their_errors) {
  auto one = [](std::string key, std::optional<std::string> value) {
    record r;
    r.key = std::move(key);
    r.value = std::move(value);
    auto b = encode_batch(batch_meta{}, {r});
    EXPECT_TRUE(b);
    return decode_consumer_state_batches(b ? *b : std::string{});
  };
  std::string tp{"\0\x01t\0\0\0\x02", 7};
  auto corrupt = [](const caf::expected<std::vector<consumer_state_record>>& x) {
    return !x && is(x.error(), ec::corrupt_segment);
  };
  EXPECT_TRUE(corrupt(one(std::string("g\0", 2), "\x03")));           // no tag
  EXPECT_TRUE(corrupt(one(nul_key("g", "c\0"), std::nullopt)));       // cut topic
  EXPECT_TRUE(corrupt(one(nul_key("g", "G" + tp), "\x03")));          // extra bytes
  EXPECT_TRUE(corrupt(one(nul_key("g", "r" + tp), "\x0c")));          // no offset
  auto future = one(nul_key("g", "z"), "\x02x");
  ASSERT_FALSE(future);
  EXPECT_TRUE(is(future.error(), ec::unknown_record_kind));
  // A row record must hold a row; a commit record exactly one offset; a
  // position record no rows and the full flag its tag says.
  std::string off8(8, '\0');
  EXPECT_TRUE(corrupt(one(nul_key("g", "r" + tp + off8), "\x02x")));
  committed_offset o;
  o.topic = "t";
  EXPECT_TRUE(
    corrupt(one(nul_key("g", "c" + tp), encode_offsets_value({o, o}))));
  auto full = change_set("g", 1, {}, {}, true);
  EXPECT_TRUE(
    corrupt(one(nul_key("g", "p" + tp), encode_consumer_state_value(full))));
  auto rows = change_set("g", 1, {rec(5, queue_record_phase::retry, 1)});
  EXPECT_TRUE(
    corrupt(one(nul_key("g", "p" + tp), encode_consumer_state_value(rows))));
  // A value that sets another row than its key names.
  o.partition = partition_id{0};
  EXPECT_TRUE(corrupt(one(nul_key("g", "c" + tp), encode_offsets_value({o}))));
  auto other = change_set("g", 1, {});
  other.topic = "u";
  EXPECT_TRUE(
    corrupt(one(nul_key("g", "p" + tp), encode_consumer_state_value(other))));
  EXPECT_TRUE(corrupt(one(nul_key("g", "g"), "\x03")));
  auto mark = dlq_mark("d", 1, 7, 9);
  auto mark_bytes = make_consumer_state_batch({mark}, 1000);
  ASSERT_TRUE(mark_bytes);
  auto mark_rec = records_of(*mark_bytes).at(0);
  EXPECT_TRUE(corrupt(one(*mark_rec.key,
                          encode_consumer_state_value(dlq_mark("d", 1, 8, 9)))));
  // Tombstones of kept records' keys apply nothing.
  auto none = one(nul_key("g", "G"), std::nullopt);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(consumer_state_apply, format1_records_still_apply_beside_format2) {
  // What an earlier version wrote: key = group, a whole commit and a whole
  // change set per record.
  committed_offset a;
  a.topic = "s";
  a.partition = partition_id{0};
  a.committed = offset{10};
  auto b = a;
  b.partition = partition_id{1};
  b.committed = offset{20};
  std::vector<record> old;
  record r;
  r.key = std::string{"stream"};
  r.value = encode_offsets_value({a, b});
  old.push_back(r);
  r.offset_delta = 1;
  r.key = std::string{"q"};
  r.value = encode_consumer_state_value(
    change_set("q", 2, {rec(3, queue_record_phase::retry, 1),
                        rec(4, queue_record_phase::retry, 1)}));
  old.push_back(r);
  auto legacy = encode_batch(batch_meta{}, old);
  ASSERT_TRUE(legacy);
  // Then this version: a newer commit of partition 1 and a change set that
  // erases row 3.
  b.committed = offset{25};
  consumer_state_record commit;
  commit.kind = kind::commit;
  commit.group = "stream";
  commit.offsets = {b};
  auto log = *legacy
             + batch({commit, change_set("q", 2, {}, {offset{3}})});
  auto n = apply_consumer_state(*offsets_, *md_, log);
  ASSERT_TRUE(n) << describe(n.error());
  auto offs = offsets_->fetch("stream");
  ASSERT_TRUE(offs);
  ASSERT_EQ(offs->size(), 2u);
  EXPECT_EQ((*offs)[0].committed, offset{10});
  EXPECT_EQ((*offs)[1].committed, offset{25});
  auto s = state("q");
  ASSERT_TRUE(s && *s);
  ASSERT_EQ((*s)->records.size(), 1u);
  EXPECT_EQ((*s)->records[0].off, offset{4});
}

TEST_F(consumer_state_apply, tombstones_erase_what_their_keys_name) {
  committed_offset a;
  a.topic = "s";
  a.partition = partition_id{0};
  a.committed = offset{10};
  auto b = a;
  b.partition = partition_id{1};
  consumer_state_record commit;
  commit.kind = kind::commit;
  commit.group = "stream";
  commit.offsets = {a, b};
  consumer_state_record cfg;
  cfg.kind = kind::queue_group;
  cfg.group = "q";
  cfg.row = "config";
  consumer_state_record prod;
  prod.kind = kind::queue_dlq_producer;
  prod.group = "q";
  prod.topic = "t";
  prod.partition = partition_id{2};
  prod.row = "producer";
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({commit, cfg, prod})));
  ASSERT_TRUE(offsets_->get_group("stream").value());
  // One partition's commit erased, then the group.
  auto erase_one = commit;
  erase_one.erase = true;
  erase_one.offsets = {a};
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({erase_one})));
  EXPECT_EQ(offsets_->fetch("stream")->size(), 1u);
  consumer_state_record sdel;
  sdel.kind = kind::stream_group_delete;
  sdel.group = "stream";
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({sdel})));
  EXPECT_TRUE(offsets_->fetch("stream")->empty());
  EXPECT_FALSE(offsets_->get_group("stream").value());
  // A queue config tombstone and a DLQ producer row tombstone.
  cfg.erase = true;
  prod.erase = true;
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({cfg, prod})));
  EXPECT_TRUE(is(md_->get(qf::groups_db, "q").error(), ec::not_found));
  EXPECT_TRUE(is(md_->get(qf::producers_db,
                          qf::producer_key("q", "t", partition_id{2}))
                   .error(),
                 ec::not_found));
}

TEST_F(consumer_state_apply, rows_without_their_position_keep_the_stored_one) {
  // A compacted log may keep a change set's row records and drop its
  // position record (a newer one exists further on).
  ASSERT_TRUE(apply_consumer_state(
    *offsets_, *md_,
    batch({change_set("q", 5, {rec(6, queue_record_phase::retry, 1)})})));
  auto rows_only = change_set("q", 0, {rec(7, queue_record_phase::retry, 2)},
                              {offset{6}});
  rows_only.has_position = false;
  ASSERT_TRUE(apply_consumer_state(*offsets_, *md_, batch({rows_only})));
  auto s = state("q");
  ASSERT_TRUE(s && *s);
  EXPECT_EQ((*s)->committed, offset{5});
  ASSERT_EQ((*s)->records.size(), 1u);
  EXPECT_EQ((*s)->records[0].off, offset{7});
}
