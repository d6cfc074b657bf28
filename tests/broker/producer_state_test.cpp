// Unit tests of the idempotent-producer table: sequence checks as Kafka does
// them, the snapshot codec and its corruption cases, and rebuilding from the
// batch headers of a log.

#include "broker/producer_state.hpp"

#include "broker/crc32c.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/varint.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <map>

using namespace ferry;

namespace {

const producer_id pid7{7};

// An idempotent batch with `n` records from (pid, epoch, seq).
std::string make_batch(int64_t pid, int16_t epoch, int32_t seq, int n,
                       timestamp_ms ts = 1000) {
  batch_meta meta;
  meta.producer_id = pid;
  meta.producer_epoch = epoch;
  meta.base_sequence = seq;
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = ts + i;
    r.value = "v" + std::to_string(i);
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(meta, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

// A partition_log over a map of batches: just enough for rebuild(), which
// only calls log_start(), log_end() and read().
class fake_log final : public partition_log {
public:
  void add(std::string batch) {
    set_base_offset(batch, end_);
    auto h = parse_batch_header(batch);
    batches_[end_] = batch;
    end_ = h->next_offset();
  }
  void drop_before(offset start) {
    while (!batches_.empty() && batches_.begin()->first < start)
      batches_.erase(batches_.begin());
    start_ = start;
  }
  int reads = 0;

  caf::expected<read_result> read(offset from, size_t max_bytes,
                                  offset upto) const override {
    ++const_cast<fake_log*>(this)->reads;
    if (from < start_ || from > end_)
      return make_error(ec::offset_out_of_range, "fake");
    read_result rr;
    rr.next_offset = from;
    auto i = batches_.upper_bound(from);
    if (i != batches_.begin())
      --i;
    for (; i != batches_.end(); ++i) {
      auto h = parse_batch_header(i->second);
      if (h->last_offset() < from)
        continue;
      if (h->next_offset() > upto)
        break;
      if (rr.batches > 0 && rr.data.size() + i->second.size() > max_bytes)
        break;
      rr.data += i->second;
      rr.next_offset = h->next_offset();
      ++rr.batches;
    }
    return rr;
  }
  offset log_start() const override { return start_; }
  offset log_end() const override { return end_; }

  // Unused by rebuild().
  caf::expected<append_info> append(std::span<char>) override { return unused(); }
  caf::expected<append_info> append_replicated(std::string_view) override {
    return unused();
  }
  caf::expected<offset> flush() override { return unused(); }
  bool flush_due() const override { return false; }
  offset durable_end() const override { return end_; }
  offset high_watermark() const override { return end_; }
  void set_high_watermark(offset) override {}
  caf::error add_epoch(leader_epoch) override { return unused(); }
  const std::vector<epoch_entry>& epochs() const override { return epochs_; }
  caf::error checkpoint() override { return unused(); }
  caf::expected<std::optional<offset>> offset_for_timestamp(timestamp_ms) const override {
    return unused();
  }
  caf::expected<offset> truncate_to(offset) override { return unused(); }
  caf::error truncate_fully_and_start_at(offset) override {
    return unused();
  }
  caf::expected<retention_report> enforce_retention() override { return unused(); }
  caf::error advance_log_start(offset) override { return unused(); }
  caf::error roll() override { return unused(); }
  void set_config(const log_config&) override {}
  uint64_t size_bytes() const override { return 0; }
  size_t segment_count() const override { return 1; }
  const recovery_report& recovery() const override { return recovery_; }
  caf::error close() override { return caf::none; }
  void discard() override {}

private:
  static caf::error unused() { return make_error(ec::invalid_argument, "fake"); }
  std::map<offset, std::string> batches_;
  offset start_{0};
  offset end_{0};
  std::vector<epoch_entry> epochs_;
  recovery_report recovery_;
};

} // namespace

// -- sequence checks ---------------------------------------------------------

TEST(producer_state, non_idempotent_batches_bypass) {
  producer_state st;
  auto c = st.check(producer_id{-1}, -1, -1, 3);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::not_idempotent);
  st.record(producer_id{-1}, -1, -1, 3, offset{0}, offset{2}, 1);
  EXPECT_EQ(st.size(), 0u);
  EXPECT_EQ(st.end(), offset{3});
}

TEST(producer_state, first_batch_of_unknown_producer_is_fresh) {
  producer_state st;
  auto c = st.check(pid7, 0, 0, 3);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
}

TEST(producer_state, in_sequence_batch_is_fresh) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 5);
  auto c = st.check(pid7, 0, 3, 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
  EXPECT_EQ(st.find(pid7)->last_seq(), 2);
  EXPECT_EQ(st.end(), offset{13});
}

TEST(producer_state, retried_batch_is_duplicate_with_original_offsets) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 5);
  st.record(pid7, 0, 3, 2, offset{20}, offset{21}, 6);
  auto c = st.check(pid7, 0, 0, 3);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::duplicate);
  EXPECT_EQ(c->base_offset, offset{10});
  EXPECT_EQ(c->last_offset, offset{12});
  c = st.check(pid7, 0, 3, 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::duplicate);
  EXPECT_EQ(c->base_offset, offset{20});
}

TEST(producer_state, only_last_five_batches_are_remembered) {
  producer_state st;
  for (int i = 0; i < 6; ++i)
    st.record(pid7, 0, i, 1, offset{i}, offset{i}, i);
  EXPECT_EQ(st.find(pid7)->batches.size(), producer_batches_kept);
  // Batch 0 is forgotten: a retry of it is now out of order, not duplicate.
  auto c = st.check(pid7, 0, 0, 1);
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::out_of_order_sequence));
  c = st.check(pid7, 0, 1, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::duplicate);
}

TEST(producer_state, gap_is_out_of_order) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{0}, offset{2}, 1);
  auto c = st.check(pid7, 0, 5, 1);
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::out_of_order_sequence));
  EXPECT_NE(describe(c.error()).find("expected sequence 3, got 5"),
            std::string::npos)
    << describe(c.error());
}

TEST(producer_state, overlapping_batch_is_out_of_order) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{0}, offset{2}, 1);
  auto c = st.check(pid7, 0, 1, 3); // not identical to a remembered batch
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::out_of_order_sequence));
}

TEST(producer_state, older_epoch_is_fenced) {
  producer_state st;
  st.record(pid7, 2, 0, 1, offset{0}, offset{0}, 1);
  auto c = st.check(pid7, 1, 1, 1);
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::invalid_producer_epoch));
}

TEST(producer_state, newer_epoch_must_restart_at_zero_and_resets) {
  producer_state st;
  st.record(pid7, 0, 0, 5, offset{0}, offset{4}, 1);
  auto c = st.check(pid7, 1, 5, 1);
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::out_of_order_sequence));
  c = st.check(pid7, 1, 0, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
  st.record(pid7, 1, 0, 1, offset{5}, offset{5}, 2);
  EXPECT_EQ(st.find(pid7)->epoch, 1);
  EXPECT_EQ(st.find(pid7)->batches.size(), 1u);
  // The old epoch's batches no longer count as duplicates.
  c = st.check(pid7, 0, 0, 5);
  ASSERT_FALSE(c);
  EXPECT_TRUE(is(c.error(), ec::invalid_producer_epoch));
}

TEST(producer_state, idempotent_batch_with_negative_fields_is_invalid) {
  producer_state st;
  EXPECT_TRUE(is(st.check(pid7, -1, 0, 1).error(), ec::invalid_request));
  EXPECT_TRUE(is(st.check(pid7, 0, -1, 1).error(), ec::invalid_request));
  EXPECT_TRUE(is(st.check(pid7, 0, 0, 0).error(), ec::invalid_request));
}

TEST(producer_state, sequence_wraps_at_int32_max) {
  EXPECT_EQ(increment_sequence(INT32_MAX, 1), 0);
  EXPECT_EQ(increment_sequence(INT32_MAX - 1, 3), 1);
  EXPECT_EQ(increment_sequence(5, 3), 8);
  producer_state st;
  // A batch of 3 starting at INT32_MAX - 1 ends at sequence 0.
  st.record(pid7, 0, INT32_MAX - 1, 3, offset{0}, offset{2}, 1);
  EXPECT_EQ(st.find(pid7)->last_seq(), 0);
  auto c = st.check(pid7, 0, 1, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
  // And a batch ending exactly at INT32_MAX is followed by 0.
  producer_state st2;
  st2.record(pid7, 0, INT32_MAX - 1, 2, offset{0}, offset{1}, 1);
  c = st2.check(pid7, 0, 0, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
  EXPECT_TRUE(is(st2.check(pid7, 0, 1, 1).error(), ec::out_of_order_sequence));
  // The wrapped duplicate is still recognised.
  c = st.check(pid7, 0, INT32_MAX - 1, 3);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::duplicate);
}

TEST(producer_state, check_from_header_uses_last_offset_delta) {
  producer_state st;
  auto b = make_batch(7, 0, 0, 4);
  auto h = parse_batch_header(b);
  ASSERT_TRUE(h);
  auto c = st.check(*h);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh);
  st.record(*h);
  EXPECT_EQ(st.find(pid7)->last_seq(), 3);
  EXPECT_EQ(st.find(pid7)->last_timestamp, 1003);
}

TEST(producer_state, truncate_forgets_batches_above_new_end) {
  producer_state st;
  st.record(pid7, 0, 0, 2, offset{0}, offset{1}, 1);
  st.record(pid7, 0, 2, 2, offset{2}, offset{3}, 2);
  st.record(producer_id{8}, 0, 0, 1, offset{4}, offset{4}, 3);
  st.truncate_to(offset{2});
  EXPECT_EQ(st.end(), offset{2});
  EXPECT_EQ(st.find(pid7)->last_seq(), 1);
  EXPECT_EQ(st.find(producer_id{8}), nullptr);
  auto c = st.check(pid7, 0, 2, 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::fresh); // no longer a duplicate
}

TEST(producer_state, expire_removes_idle_producers) {
  producer_state st;
  st.record(pid7, 0, 0, 1, offset{0}, offset{0}, 1000);
  st.record(producer_id{8}, 0, 0, 1, offset{1}, offset{1}, 5000);
  EXPECT_EQ(st.expire(6000, 2000), 1u);
  EXPECT_EQ(st.find(pid7), nullptr);
  EXPECT_NE(st.find(producer_id{8}), nullptr);
}

// -- snapshots ------------------------------------------------------------------

TEST(producer_state_snapshot, round_trip) {
  producer_state st;
  for (int i = 0; i < 7; ++i)
    st.record(pid7, 3, i * 2, 2, offset{i * 2}, offset{i * 2 + 1}, 100 + i);
  st.record(producer_id{9}, 0, INT32_MAX, 1, offset{14}, offset{14}, 200);
  auto bytes = st.encode_snapshot(st.end());
  auto back = producer_state::decode_snapshot(bytes);
  ASSERT_TRUE(back) << describe(back.error());
  EXPECT_EQ(*back, st);
  EXPECT_EQ(back->end(), offset{15});
  // Deterministic bytes.
  EXPECT_EQ(back->encode_snapshot(back->end()), bytes);
}

TEST(producer_state_snapshot, documented_size) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  EXPECT_EQ(st.encode_snapshot(offset{13}).size(), 64u);
}

TEST(producer_state_snapshot, holds_only_batches_below_its_end) {
  producer_state st;
  st.record(pid7, 0, 0, 1, offset{0}, offset{0}, 1);
  st.record(pid7, 0, 1, 1, offset{1}, offset{1}, 1);
  st.record(producer_id{8}, 0, 0, 1, offset{2}, offset{2}, 1);
  auto back = producer_state::decode_snapshot(st.encode_snapshot(offset{1}));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->end(), offset{1});
  ASSERT_NE(back->find(pid7), nullptr);
  EXPECT_EQ(back->find(pid7)->batches.size(), 1u);
  EXPECT_EQ(back->find(producer_id{8}), nullptr);
}

TEST(producer_state_snapshot, empty_table_round_trips) {
  producer_state st;
  auto back = producer_state::decode_snapshot(st.encode_snapshot(offset{0}));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->size(), 0u);
}

TEST(producer_state_snapshot, flipped_byte_is_crc_mismatch) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  auto bytes = st.encode_snapshot(offset{13});
  bytes[30] ^= 0x01;
  auto back = producer_state::decode_snapshot(bytes);
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::crc_mismatch)) << describe(back.error());
}

TEST(producer_state_snapshot, truncated_is_corrupt) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  auto bytes = st.encode_snapshot(offset{13});
  for (size_t n : {size_t{0}, size_t{5}, size_t{20}, bytes.size() - 1}) {
    auto back = producer_state::decode_snapshot(std::string_view{bytes}.substr(0, n));
    ASSERT_FALSE(back) << n;
    // Cut short, the last 4 bytes are no longer the CRC: either error is fine
    // as long as it is one of the two and nothing crashes.
    auto code = code_of(back.error());
    EXPECT_TRUE(code == ec::corrupt_segment || code == ec::crc_mismatch) << n;
  }
}

// Re-seals a hand-edited snapshot with a valid CRC, so the structural checks
// behind the CRC are what the tests reach.
static std::string reseal(std::string bytes) {
  bytes.resize(bytes.size() - 4);
  char crc[4];
  be::store<uint32_t>(crc, crc32c(bytes.data(), bytes.size()));
  bytes.append(crc, 4);
  return bytes;
}

TEST(producer_state_snapshot, unknown_version_is_corrupt) {
  producer_state st;
  auto bytes = st.encode_snapshot(offset{0});
  bytes[4] = 9;
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
  EXPECT_NE(describe(back.error()).find("unknown version 9"), std::string::npos);
}

TEST(producer_state_snapshot, bad_magic_is_corrupt) {
  producer_state st;
  auto bytes = st.encode_snapshot(offset{0});
  bytes[0] = 'X';
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
}

TEST(producer_state_snapshot, huge_producer_count_is_rejected_without_allocating) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  auto bytes = st.encode_snapshot(offset{13});
  be::store<uint32_t>(bytes.data() + 13, 0xFFFFFFFFu);
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
  EXPECT_NE(describe(back.error()).find("producer count"), std::string::npos);
}

TEST(producer_state_snapshot, too_many_batches_is_corrupt) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  auto bytes = st.encode_snapshot(offset{13});
  bytes[17 + 18] = 6; // batch count of the first producer
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
}

TEST(producer_state_snapshot, batch_at_or_above_end_is_corrupt) {
  producer_state st;
  st.record(pid7, 0, 0, 3, offset{10}, offset{12}, 1);
  auto bytes = st.encode_snapshot(offset{13});
  be::store<int64_t>(bytes.data() + 5, 12); // end below the batch's last offset
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
  EXPECT_NE(describe(back.error()).find("inconsistent"), std::string::npos);
}

TEST(producer_state_snapshot, trailing_bytes_are_corrupt) {
  producer_state st;
  auto bytes = st.encode_snapshot(offset{0});
  bytes.insert(bytes.size() - 4, "xx");
  auto back = producer_state::decode_snapshot(reseal(bytes));
  ASSERT_FALSE(back);
  EXPECT_TRUE(is(back.error(), ec::corrupt_segment));
  EXPECT_NE(describe(back.error()).find("trailing"), std::string::npos);
}

// -- rebuild from the log ----------------------------------------------------

TEST(producer_state_rebuild, replays_whole_log_without_snapshot) {
  fake_log log;
  log.add(make_batch(7, 0, 0, 3));
  log.add(make_batch(-1, -1, -1, 2));
  log.add(make_batch(7, 0, 3, 2));
  log.add(make_batch(8, 4, 0, 1));
  producer_state st;
  ASSERT_EQ(st.rebuild(log), caf::none);
  EXPECT_EQ(st.end(), offset{8});
  EXPECT_EQ(st.find(pid7)->last_seq(), 4);
  EXPECT_EQ(st.find(producer_id{8})->epoch, 4);
  auto c = st.check(pid7, 0, 3, 2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, sequence_check::duplicate);
  EXPECT_EQ(c->base_offset, offset{5});
  EXPECT_EQ(c->last_offset, offset{6});
}

TEST(producer_state_rebuild, stale_snapshot_plus_replay_equals_full_replay) {
  fake_log log;
  producer_state live;
  auto append = [&](std::string b) {
    log.add(b);
    auto h = parse_batch_header(b);
    h->base_offset = log.log_end() - (h->last_offset_delta + 1);
    live.record(*h);
  };
  for (int i = 0; i < 4; ++i)
    append(make_batch(7, 0, i * 2, 2));
  auto snap = live.encode_snapshot(log.log_end()); // taken at offset 8
  for (int i = 4; i < 9; ++i)
    append(make_batch(7, 0, i * 2, 2));
  append(make_batch(8, 0, 0, 1));
  // A restart after SIGKILL: the snapshot is older than the log.
  auto restored = producer_state::decode_snapshot(snap);
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->end(), offset{8});
  ASSERT_EQ(restored->rebuild(log, 64), caf::none); // small chunks: many reads
  EXPECT_EQ(*restored, live);
  EXPECT_GT(log.reads, 1);
}

TEST(producer_state_rebuild, snapshot_ahead_of_log_rebuilds_from_start) {
  fake_log log;
  log.add(make_batch(7, 0, 0, 2));
  producer_state ahead;
  ahead.record(pid7, 0, 0, 2, offset{0}, offset{1}, 1);
  ahead.record(pid7, 0, 2, 2, offset{2}, offset{3}, 1); // lost from the log
  auto st = producer_state::decode_snapshot(ahead.encode_snapshot(offset{4}));
  ASSERT_TRUE(st);
  ASSERT_EQ(st->rebuild(log), caf::none);
  EXPECT_EQ(st->end(), offset{2});
  EXPECT_EQ(st->find(pid7)->last_seq(), 1);
}

TEST(producer_state_rebuild, snapshot_below_log_start_replays_from_start) {
  fake_log log;
  log.add(make_batch(7, 0, 0, 2));
  log.add(make_batch(7, 0, 2, 2));
  log.add(make_batch(7, 0, 4, 2));
  log.drop_before(offset{4}); // retention removed the first two batches
  producer_state st; // end 0, below the log start
  ASSERT_EQ(st.rebuild(log), caf::none);
  EXPECT_EQ(st.find(pid7)->last_seq(), 5);
  EXPECT_EQ(st.end(), offset{6});
}
