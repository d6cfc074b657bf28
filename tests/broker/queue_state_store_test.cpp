// Tests of the queue-mode state store over a real LMDB metadata_store: the
// documented encoding, change sets and full rewrites, restarts (leases are
// delivered again, failure info survives), the crash between marking a record
// for the DLQ and confirming its write, and one test per kind of corruption.

#include "broker/queue_state_store.hpp"

#include "broker/metadata_store.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>

using namespace ferry;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace qf = ferry::queue_state_format;

namespace {

// A persisted row with only the fields a test cares about.
queue_record row(int64_t off, queue_record_phase phase,
                 int32_t attempts = 0) {
  queue_record r;
  r.off = offset{off};
  r.phase = phase;
  r.attempts = attempts;
  return r;
}

lease_table_config
exact_config(queue_ordering ordering = queue_ordering::none) {
  lease_table_config c;
  c.retry.initial_backoff = 100ms;
  c.retry.max_backoff = 1000ms;
  c.retry.jitter = no_jitter;
  c.retry.max_attempts = 3;
  c.retry.visibility_timeout = 1000ms;
  c.ordering = ordering;
  c.seed = 5;
  return c;
}

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto c : s) {
    auto b = static_cast<uint8_t>(c);
    if (!out.empty())
      out += ' ';
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string bytes(std::initializer_list<int> xs) {
  std::string out;
  for (auto x : xs)
    out.push_back(static_cast<char>(x));
  return out;
}

class queue_state_store_test : public ::testing::Test {
protected:
  void SetUp() override { reopen(); }

  void TearDown() override {
    queue_.reset();
    md_.reset();
  }

  // Closes and reopens the LMDB environment: what a broker restart sees.
  void reopen() {
    queue_.reset();
    md_.reset();
    lmdb::env_options o;
    o.initial_map_size = 1 << 20;
    o.no_sync = true;
    auto s = metadata_store::open(dir_.path() / "meta", o);
    ASSERT_TRUE(s) << describe(s.error());
    md_ = std::move(*s);
    queue_ = std::make_unique<queue_state_store>(*md_);
  }

  caf::error save(lease_table& t, std::string_view group = "g",
                  std::string_view topic = "t", int32_t p = 0) {
    return queue_->save(group, topic, partition_id{p}, t.take_changes());
  }

  lease_table open(const lease_table_config& cfg, offset initial = offset{0},
                   std::string_view group = "g") {
    auto t = queue_->open_table(group, "t", partition_id{0}, cfg, initial);
    EXPECT_TRUE(t) << describe(t.error());
    return std::move(*t);
  }

  void put_raw(std::string_view key, std::string_view value) {
    ASSERT_FALSE(md_->put(qf::queue_db, key, value));
  }

  std::string prefix(std::string_view group = "g") {
    return *qf::encode_partition_prefix(group, "t", partition_id{0});
  }

  // The load error for the partition; fails the test if load succeeds.
  caf::error load_error() {
    auto r = queue_->load("g", "t", partition_id{0});
    EXPECT_FALSE(r) << "load succeeded";
    return r ? caf::error{} : r.error();
  }

  size_t raw_rows() {
    size_t n = 0;
    EXPECT_FALSE(md_->scan_prefix(qf::queue_db, {},
                                  [&](std::string_view, std::string_view) {
                                    ++n;
                                    return true;
                                  }));
    return n;
  }

  ferry::test::temp_dir dir_{"ferry-queue-test"};
  std::unique_ptr<metadata_store> md_;
  std::unique_ptr<queue_state_store> queue_;
};

} // namespace

TEST_F(queue_state_store_test, encoding_matches_the_documented_example) {
  auto p = prefix();
  EXPECT_EQ(hex(qf::position_key(p)), "67 00 74 00 00 00 00 00 00");
  EXPECT_EQ(hex(qf::encode_position_value(offset{5})),
            "01 00 00 00 00 00 00 00 05");
  EXPECT_EQ(hex(qf::record_key(p, offset{7})),
            "67 00 74 00 00 00 00 00 01 00 00 00 00 00 00 00 07");
  queue_record r{offset{7}, queue_record_phase::retry, 2, 1000, 2000, 6000,
                 "boom", "", 0, 0};
  EXPECT_EQ(hex(qf::encode_record_value(r)),
            "01 01 00 00 00 02 00 00 00 00 00 00 03 e8 00 00 00 00 00 00 07 d0 "
            "00 00 00 00 00 00 17 70 00 04 62 6f 6f 6d");
  queue_record back;
  ASSERT_FALSE(qf::decode_record_value(qf::encode_record_value(r), back));
  back.off = offset{7};
  EXPECT_EQ(back, r);
  auto k = qf::decode_key(qf::record_key(p, offset{7}));
  ASSERT_TRUE(k);
  EXPECT_EQ(k->group, "g");
  EXPECT_EQ(k->topic, "t");
  EXPECT_FALSE(k->position);
  EXPECT_EQ(k->off, offset{7});
  EXPECT_TRUE(is(qf::encode_partition_prefix("", "t", partition_id{0}).error(),
                 ec::invalid_argument));
  EXPECT_TRUE(is(qf::encode_partition_prefix("g", std::string_view{"a\0b", 3},
                                             partition_id{0})
                   .error(),
                 ec::invalid_argument));
  EXPECT_TRUE(is(qf::encode_partition_prefix("g", "t", partition_id{-1})
                   .error(),
                 ec::invalid_argument));
}

TEST_F(queue_state_store_test, a_new_partition_starts_at_its_initial_position) {
  auto r = queue_->load("g", "t", partition_id{0});
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  auto t = open(exact_config(), offset{42});
  EXPECT_EQ(t.committed(), offset{42});
  ASSERT_FALSE(save(t));
  // The initial position is durable even before any record was consumed.
  reopen();
  auto u = open(exact_config(), offset{99});
  EXPECT_EQ(u.committed(), offset{42});
}

TEST_F(queue_state_store_test, change_sets_round_trip_through_lmdb) {
  auto t = open(exact_config());
  for (int i = 0; i < 6; ++i)
    ASSERT_FALSE(t.offer(offset{i}, std::nullopt, 0));
  auto ls = *t.acquire("m", 6, 0);
  ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  ASSERT_FALSE(t.ack("m", ls[3].off, ls[3].lease_id));
  ASSERT_TRUE(t.nack("m", ls[1].off, ls[1].lease_id, 10, 0ms, "timeout"));
  ASSERT_FALSE(t.reject("m", ls[4].off, ls[4].lease_id, 20, "schema"));
  ASSERT_FALSE(save(t));
  auto r = queue_->load("g", "t", partition_id{0});
  ASSERT_TRUE(r) << describe(r.error());
  ASSERT_TRUE(*r);
  EXPECT_EQ(**r, t.snapshot());
  EXPECT_EQ((*r)->committed, offset{1});
  ASSERT_EQ((*r)->records.size(), 3u); // 1 retry, 3 done, 4 dead letter
  // Progress erases the rows that fell below the position.
  ASSERT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));
  auto again = *t.acquire("m", 1, 110);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_FALSE(t.ack("m", again[0].off, again[0].lease_id));
  ASSERT_FALSE(save(t));
  r = queue_->load("g", "t", partition_id{0});
  EXPECT_EQ((*r)->committed, offset{4});
  EXPECT_EQ(**r, t.snapshot());
  EXPECT_EQ(raw_rows(), 2u) << "the position and record 4";
}

TEST_F(queue_state_store_test, restart_redelivers_leases_and_keeps_attempts) {
  {
    auto t = open(exact_config(queue_ordering::key));
    for (int i = 0; i < 4; ++i)
      ASSERT_FALSE(t.offer(offset{i}, std::string_view{i < 2 ? "a" : "b"}, 0));
    auto ls = *t.acquire("m", 10, 0); // 0 (a) and 2 (b)
    ASSERT_EQ(ls.size(), 2u);
    ASSERT_TRUE(t.nack("m", ls[0].off, ls[0].lease_id, 0, 0ms, "e1"));
    ls = *t.acquire("m", 10, 100); // 0 again, leased at the crash
    ASSERT_EQ(ls.size(), 1u);
    EXPECT_EQ(ls[0].attempt, 2);
    ASSERT_FALSE(save(t));
  } // crash: leases on 0 and 2 are lost with the process
  reopen();
  auto cfg = exact_config(queue_ordering::key);
  cfg.seed = 6;
  auto t = open(cfg);
  EXPECT_EQ(t.committed(), offset{0});
  EXPECT_EQ(t.stats().leased, 0u);
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(t.offer(offset{i}, std::string_view{i < 2 ? "a" : "b"}, 0));
  auto ls = *t.acquire("m2", 10, 200);
  ASSERT_EQ(ls.size(), 2u) << "both in-flight records are delivered again";
  EXPECT_EQ(ls[0].off, offset{0});
  EXPECT_EQ(ls[0].attempt, 2) << "the failure before the crash is counted";
  EXPECT_EQ(ls[1].off, offset{2});
  EXPECT_EQ(ls[1].attempt, 1);
  auto r = t.nack("m2", ls[0].off, ls[0].lease_id, 300, 0ms, "e2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(t.find(offset{0})->first_failure, 0);
  EXPECT_EQ(t.find(offset{0})->last_failure, 300);
}

TEST_F(queue_state_store_test, a_pending_retry_time_survives_a_restart) {
  {
    auto t = open(exact_config());
    ASSERT_FALSE(t.offer(offset{0}, std::nullopt, 0));
    auto l = t.acquire("m", 1, 1000)->at(0);
    ASSERT_TRUE(t.nack("m", l.off, l.lease_id, 1000, 5000ms, "later"));
    ASSERT_FALSE(save(t));
  }
  reopen();
  auto t = open(exact_config());
  ASSERT_FALSE(t.offer(offset{0}, std::nullopt, 0));
  EXPECT_TRUE(t.acquire("m", 1, 5999)->empty());
  EXPECT_EQ(t.acquire("m", 1, 6000)->size(), 1u);
}

TEST_F(queue_state_store_test, crash_before_dead_lettered_keeps_it_pending) {
  dead_letter_info expected;
  {
    auto t = open(exact_config());
    for (int i = 0; i < 3; ++i)
      ASSERT_FALSE(t.offer(offset{i}, std::nullopt, 0));
    auto ls = *t.acquire("m", 3, 0);
    ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
    ASSERT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));
    for (int attempt = 1; attempt <= 3; ++attempt) {
      auto r = t.nack("m", ls[1].off, ls[1].lease_id, attempt * 1000, 0ms,
                      "fail " + std::to_string(attempt));
      ASSERT_TRUE(r);
      if (attempt < 3)
        ls[1] = t.acquire("m", 1, attempt * 1000 + 1000)->at(0);
    }
    ASSERT_EQ(t.pending_dead_letters().size(), 1u);
    expected = t.pending_dead_letters()[0];
    // The mark is saved before the DLQ write starts; then the broker dies
    // before dead_lettered().
    ASSERT_FALSE(save(t));
  }
  reopen();
  {
    auto t = open(exact_config());
    EXPECT_EQ(t.committed(), offset{1}) << "the record holds the position";
    auto dl = t.pending_dead_letters();
    ASSERT_EQ(dl.size(), 1u) << "the record is not lost";
    EXPECT_EQ(dl[0], expected);
    EXPECT_EQ(dl[0], (dead_letter_info{offset{1}, 3, "fail 3", 1000, 3000}));
    for (int i = 1; i < 3; ++i)
      ASSERT_FALSE(t.offer(offset{i}, std::nullopt, 0));
    EXPECT_TRUE(t.acquire("m", 10, 10'000)->empty())
      << "never delivered again";
    // The caller repeats the idempotent DLQ write, then confirms it.
    ASSERT_FALSE(t.dead_lettered(offset{1}));
    EXPECT_EQ(t.committed(), offset{3});
    ASSERT_FALSE(save(t));
  }
  reopen();
  auto t = open(exact_config());
  EXPECT_TRUE(t.pending_dead_letters().empty());
  EXPECT_EQ(t.committed(), offset{3});
  EXPECT_EQ(raw_rows(), 1u) << "only the position is left";
}

TEST_F(queue_state_store_test, full_rewrite_after_failed_save_drops_old_rows) {
  auto t = open(exact_config());
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(t.offer(offset{i}, std::nullopt, 0));
  auto ls = *t.acquire("m", 4, 0);
  ASSERT_FALSE(t.ack("m", ls[1].off, ls[1].lease_id));
  ASSERT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));
  ASSERT_FALSE(save(t));
  EXPECT_EQ(raw_rows(), 3u);
  ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id)); // erases 1 and 2
  ASSERT_FALSE(t.reject("m", ls[3].off, ls[3].lease_id, 5, "x"));
  (void) t.take_changes(); // this write "failed"
  t.mark_all_dirty();
  ASSERT_FALSE(save(t));
  EXPECT_EQ(raw_rows(), 2u) << "position and the dead letter";
  auto r = queue_->load("g", "t", partition_id{0});
  EXPECT_EQ(**r, t.snapshot());
  // replace() writes a snapshot the same way.
  queue_snapshot s;
  s.committed = offset{10};
  s.records = {row(12, queue_record_phase::done)};
  ASSERT_FALSE(queue_->replace("g", "t", partition_id{0}, s));
  EXPECT_EQ(**queue_->load("g", "t", partition_id{0}), s);
  EXPECT_EQ(raw_rows(), 2u);
}

TEST_F(queue_state_store_test, partitions_and_groups_are_kept_apart) {
  auto a = *lease_table::make(exact_config(), offset{1});
  auto b = *lease_table::make(exact_config(), offset{2});
  auto c = *lease_table::make(exact_config(), offset{3});
  auto d = *lease_table::make(exact_config(), offset{4});
  ASSERT_FALSE(save(a, "g", "t", 0));
  ASSERT_FALSE(save(b, "g", "t", 1));
  ASSERT_FALSE(save(c, "g", "u", 0));
  ASSERT_FALSE(save(d, "gg", "t", 0)); // "g" must not see "gg"
  auto ps = queue_->partitions("g");
  ASSERT_TRUE(ps);
  EXPECT_EQ(*ps, (std::vector<queue_partition_ref>{{"t", partition_id{0}},
                                                   {"t", partition_id{1}},
                                                   {"u", partition_id{0}}}));
  EXPECT_EQ((*queue_->load("g", "t", partition_id{1}))->committed, offset{2});
  ASSERT_FALSE(queue_->erase("g", "t", partition_id{1}));
  EXPECT_FALSE(*queue_->load("g", "t", partition_id{1}));
  ASSERT_FALSE(queue_->erase_group("g"));
  EXPECT_TRUE(queue_->partitions("g")->empty());
  EXPECT_EQ((*queue_->load("gg", "t", partition_id{0}))->committed, offset{4});
  EXPECT_TRUE(is(queue_->partitions("").error(), ec::invalid_argument));
  EXPECT_TRUE(is(queue_->save("g", "", partition_id{0}, queue_changes{}),
                 ec::invalid_argument));
}

TEST_F(queue_state_store_test, rows_below_the_position_are_ignored) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{10}));
  put_raw(qf::record_key(p, offset{3}),
          qf::encode_record_value(row(3, queue_record_phase::done)));
  put_raw(qf::record_key(p, offset{11}),
          qf::encode_record_value(row(11, queue_record_phase::done)));
  auto r = queue_->load("g", "t", partition_id{0});
  ASSERT_TRUE(r) << describe(r.error());
  ASSERT_EQ((*r)->records.size(), 1u);
  EXPECT_EQ((*r)->records[0].off, offset{11});
}

// -- corruption: one test per case -----------------------------------------------

TEST_F(queue_state_store_test, corrupt_position_version) {
  put_raw(qf::position_key(prefix()), bytes({2, 0, 0, 0, 0, 0, 0, 0, 5}));
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("queue state g/t/0"), std::string::npos)
    << describe(err);
  EXPECT_NE(describe(err).find("unknown version 2"), std::string::npos)
    << describe(err);
}

TEST_F(queue_state_store_test, corrupt_position_truncated) {
  put_raw(qf::position_key(prefix()), bytes({1, 0, 0, 0}));
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("4 bytes"), std::string::npos) << describe(err);
}

TEST_F(queue_state_store_test, corrupt_position_negative) {
  put_raw(qf::position_key(prefix()),
          bytes({1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  EXPECT_TRUE(is(load_error(), ec::corrupt_segment));
}

TEST_F(queue_state_store_test, corrupt_record_truncated) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(row(1, queue_record_phase::done));
  put_raw(qf::record_key(p, offset{1}), v.substr(0, 10));
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("record 1"), std::string::npos) << describe(err);
  EXPECT_NE(describe(err).find("shorter than the header"), std::string::npos)
    << describe(err);
}

TEST_F(queue_state_store_test, corrupt_record_unknown_phase) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(row(1, queue_record_phase::done));
  v[1] = 9;
  put_raw(qf::record_key(p, offset{1}), v);
  auto err = load_error();
  EXPECT_NE(describe(err).find("unknown phase 9"), std::string::npos)
    << describe(err);
}

TEST_F(queue_state_store_test, corrupt_record_unknown_version) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(row(1, queue_record_phase::done));
  v[0] = 7;
  put_raw(qf::record_key(p, offset{1}), v);
  EXPECT_NE(describe(load_error()).find("unknown version 7"),
            std::string::npos);
}

TEST_F(queue_state_store_test, corrupt_record_error_length_mismatch) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(
    {offset{1}, queue_record_phase::retry, 1, 0, 0, 0, "abc", "", 0, 0});
  put_raw(qf::record_key(p, offset{1}), v + "trailing");
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("error length 3"), std::string::npos)
    << describe(err);
}

TEST_F(queue_state_store_test, corrupt_record_retry_without_attempts) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  put_raw(qf::record_key(p, offset{1}),
          qf::encode_record_value(row(1, queue_record_phase::retry, 0)));
  EXPECT_NE(describe(load_error()).find("retry row without attempts"),
            std::string::npos);
}

TEST_F(queue_state_store_test, corrupt_record_negative_attempts) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  put_raw(qf::record_key(p, offset{1}),
          qf::encode_record_value(row(1, queue_record_phase::done, -3)));
  EXPECT_NE(describe(load_error()).find("negative attempts"),
            std::string::npos);
}

TEST_F(queue_state_store_test, corrupt_key_with_unknown_kind) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  put_raw(p + bytes({7}), "x");
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("kind 7"), std::string::npos) << describe(err);
}

TEST_F(queue_state_store_test, corrupt_key_with_a_short_offset) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  put_raw(p + bytes({1, 0, 0, 1}), "x");
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("expected 5 or 13"), std::string::npos)
    << describe(err);
}

TEST_F(queue_state_store_test, corrupt_records_without_a_position_row) {
  auto p = prefix();
  put_raw(qf::record_key(p, offset{1}),
          qf::encode_record_value(row(1, queue_record_phase::done)));
  auto err = load_error();
  EXPECT_TRUE(is(err, ec::corrupt_segment));
  EXPECT_NE(describe(err).find("without a position row"), std::string::npos)
    << describe(err);
  // open_table reports it too instead of starting over.
  auto t = queue_->open_table("g", "t", partition_id{0}, exact_config(),
                              offset{0});
  EXPECT_TRUE(is(t.error(), ec::corrupt_segment));
}

// -- lease rows (persist_leases: cluster mode) ----------------------------------

namespace {

queue_record lease_row(int64_t off, std::string member, uint64_t id,
                       timestamp_ms deadline, int32_t attempts = 0) {
  auto r = row(off, queue_record_phase::leased, attempts);
  r.member = std::move(member);
  r.lease_id = id;
  r.deadline = deadline;
  return r;
}

} // namespace

TEST_F(queue_state_store_test, lease_row_encoding_matches_the_documentation) {
  auto v = qf::encode_record_value(lease_row(7, "m", 0x0102, 0x03e8));
  EXPECT_EQ(hex(v), "02 04 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
                    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 6d 00 "
                    "00 00 00 00 00 01 02 00 00 00 00 00 00 03 e8");
  queue_record back;
  ASSERT_FALSE(qf::decode_record_value(v, back));
  back.off = offset{7};
  EXPECT_EQ(back, lease_row(7, "m", 0x0102, 0x03e8));
}

TEST_F(queue_state_store_test, leases_survive_save_and_load) {
  auto cfg = exact_config();
  cfg.persist_leases = true;
  auto t = open(cfg);
  for (int64_t i = 0; i < 3; ++i)
    ASSERT_FALSE(t.offer(offset{i}, std::nullopt, 100));
  auto ls = t.acquire("m1", 2, 1000);
  ASSERT_TRUE(ls);
  ASSERT_TRUE(t.nack("m1", offset{1}, (*ls)[1].lease_id, 1000));
  ASSERT_FALSE(save(t));
  reopen();
  auto u = open(cfg);
  auto v = u.find(offset{0});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, record_status::leased);
  EXPECT_EQ(v->member, "m1");
  EXPECT_EQ(v->lease_id, (*ls)[0].lease_id);
  EXPECT_EQ(v->deadline, (*ls)[0].deadline);
  EXPECT_EQ(u.find(offset{1})->attempts, 1);
  EXPECT_FALSE(u.ack("m1", offset{0}, (*ls)[0].lease_id));
  ASSERT_FALSE(save(u));
  reopen();
  auto w = open(cfg);
  EXPECT_EQ(w.stats().leased, 0u);
  EXPECT_EQ(w.find(offset{0})->status, record_status::done);
  // The restored done mark moves the position once the record is read again.
  for (int64_t i = 0; i < 3; ++i)
    ASSERT_FALSE(w.offer(offset{i}, std::nullopt, 100));
  EXPECT_EQ(w.committed(), offset{1});
}

TEST_F(queue_state_store_test, corrupt_lease_row_phase_in_version_1) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(row(1, queue_record_phase::done));
  v[1] = static_cast<char>(queue_record_phase::leased);
  put_raw(qf::record_key(p, offset{1}), v);
  EXPECT_NE(describe(load_error()).find("in a version 1 value"),
            std::string::npos);
}

TEST_F(queue_state_store_test, corrupt_lease_row_member_length) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  auto v = qf::encode_record_value(lease_row(1, "m", 5, 10));
  put_raw(qf::record_key(p, offset{1}), v + "x");
  EXPECT_NE(describe(load_error()).find("member length"), std::string::npos);
  put_raw(qf::record_key(p, offset{1}), v.substr(0, v.size() - 1));
  EXPECT_TRUE(is(load_error(), ec::corrupt_segment));
}

TEST_F(queue_state_store_test, corrupt_lease_row_with_lease_id_0) {
  auto p = prefix();
  put_raw(qf::position_key(p), qf::encode_position_value(offset{0}));
  put_raw(qf::record_key(p, offset{1}),
          qf::encode_record_value(lease_row(1, "m", 0, 10)));
  EXPECT_NE(describe(load_error()).find("lease id 0"), std::string::npos);
}

TEST_F(queue_state_store_test, erase_group_all_takes_config_state_and_producers) {
  ASSERT_FALSE(md_->put(qf::groups_db, "g", "cfg"));
  ASSERT_FALSE(md_->put(qf::groups_db, "g2", "cfg"));
  ASSERT_FALSE(md_->put(qf::producers_db,
                        qf::producer_key("g", "t", partition_id{0}), "p"));
  ASSERT_FALSE(md_->put(qf::producers_db,
                        qf::producer_key("g2", "t", partition_id{0}), "p"));
  auto t = open(exact_config());
  ASSERT_FALSE(save(t));
  ASSERT_FALSE(queue_->erase_group_all("g"));
  EXPECT_TRUE(is(md_->get(qf::groups_db, "g").error(), ec::not_found));
  EXPECT_TRUE(md_->get(qf::groups_db, "g2"));
  EXPECT_TRUE(is(md_->get(qf::producers_db,
                          qf::producer_key("g", "t", partition_id{0}))
                   .error(),
                 ec::not_found));
  EXPECT_TRUE(md_->get(qf::producers_db,
                       qf::producer_key("g2", "t", partition_id{0})));
  EXPECT_EQ(raw_rows(), 0u);
}
