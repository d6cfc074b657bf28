// partition_log behaviour: appends, reads, rolls, time lookups, truncation,
// retention, reopen, group commit, epochs, replication appends.

#include "tests/temp_dir.hpp"
#include "broker/file_system.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/segment.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

/// A clock the test moves by hand.
struct manual_clock {
  timestamp_ms now = 1'000'000;
  clock_fn fn() {
    return [this] { return now; };
  }
};

/// One batch of `n` records; record i has timestamp ts0 + i * ts_step.
std::string make_batch(int n, timestamp_ms ts0, size_t value_size = 20,
                       timestamp_ms ts_step = 1) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = ts0 + i * ts_step;
    r.key = "key-" + std::to_string(i);
    r.value = std::string(value_size, static_cast<char>('a' + i % 26));
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

caf::expected<append_info> append(partition_log& log, std::string batch) {
  return log.append(std::span<char>{batch.data(), batch.size()});
}

/// Decodes back-to-back batches.
std::vector<decoded_batch> decode_all(std::string_view data) {
  std::vector<decoded_batch> out;
  while (!data.empty()) {
    auto h = parse_batch_header(data);
    EXPECT_TRUE(h) << describe(h.error());
    if (!h)
      break;
    auto d = decode_batch(data.substr(0, h->total_size()));
    EXPECT_TRUE(d) << describe(d.error());
    if (!d)
      break;
    out.push_back(std::move(*d));
    data.remove_prefix(h->total_size());
  }
  return out;
}

/// Every record offset in `data`, in order.
std::vector<int64_t> offsets_in(std::string_view data) {
  std::vector<int64_t> out;
  for (auto& b : decode_all(data))
    for (auto& r : b.records)
      out.push_back(b.header.base_offset.value + r.offset_delta);
  return out;
}

/// Reads [from, log_end) with reads of max_bytes, following next_offset.
std::string read_all(partition_log& log, offset from, size_t max_bytes = 1 << 20) {
  std::string all;
  while (from < log.log_end()) {
    auto r = log.read(from, max_bytes, log.log_end());
    EXPECT_TRUE(r) << describe(r.error());
    if (!r || r->batches == 0)
      break;
    all += r->data;
    from = r->next_offset;
  }
  return all;
}

class log_test : public ::testing::Test {
protected:
  temp_dir dir;
  memory_checkpoint ckpt;
  manual_clock clock;
  log_config cfg;

  std::unique_ptr<partition_log> open_log(file_system* fsys = nullptr) {
    auto log = partition_log::open(dir.path(), cfg, &ckpt, fsys, clock.fn());
    EXPECT_TRUE(log) << describe(log.error());
    return log ? std::move(*log) : nullptr;
  }
};

} // namespace

TEST_F(log_test, append_assigns_consecutive_offsets_and_reads_them_back) {
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_start(), offset{0});
  EXPECT_EQ(log->log_end(), offset{0});
  for (int i = 0; i < 5; ++i) {
    auto info = append(*log, make_batch(3, 100 + i));
    ASSERT_TRUE(info) << describe(info.error());
    EXPECT_EQ(info->base_offset, offset{3 * i});
    EXPECT_EQ(info->last_offset, offset{3 * i + 2});
    EXPECT_EQ(info->records, 3u);
    EXPECT_EQ(info->max_timestamp, 100 + i + 2);
  }
  EXPECT_EQ(log->log_end(), offset{15});
  auto r = log->read(offset{0}, 1 << 20, offset{15});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 5u);
  EXPECT_EQ(r->next_offset, offset{15});
  auto batches = decode_all(r->data);
  ASSERT_EQ(batches.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(batches[i].header.base_offset, offset{3 * i});
    ASSERT_EQ(batches[i].records.size(), 3u);
    EXPECT_EQ(batches[i].records[2].key, "key-2");
    EXPECT_EQ(batches[i].records[0].timestamp, 100 + i);
  }
}

TEST_F(log_test, append_and_read_across_segment_rolls) {
  cfg.segment_bytes = 1000;
  cfg.index_interval_bytes = 300;
  auto log = open_log();
  ASSERT_TRUE(log);
  std::vector<int64_t> expected;
  for (int i = 0; i < 60; ++i) {
    int n = 1 + i % 4;
    auto info = append(*log, make_batch(n, 1000 + i * 10, 30));
    ASSERT_TRUE(info) << describe(info.error());
    for (int k = 0; k < n; ++k)
      expected.push_back(info->base_offset.value + k);
  }
  EXPECT_GT(log->segment_count(), 5u);
  // Whole log with small and big reads.
  EXPECT_EQ(offsets_in(read_all(*log, offset{0}, 1)), expected);
  EXPECT_EQ(offsets_in(read_all(*log, offset{0}, 1 << 20)), expected);
  // Every offset: the first batch returned contains it.
  for (auto o : expected) {
    auto r = log->read(offset{o}, 1, log->log_end());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->batches, 1u);
    auto b = decode_all(r->data);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_LE(b[0].header.base_offset.value, o);
    EXPECT_GE(b[0].header.last_offset().value, o);
    EXPECT_EQ(r->next_offset, b[0].header.next_offset());
  }
  EXPECT_EQ(log->size_bytes(), [&] {
    uint64_t n = 0;
    for (auto& e : fs::directory_iterator(dir.path()))
      if (e.path().extension() == ".log")
        n += fs::file_size(e.path());
    return n;
  }());
}

TEST_F(log_test, read_from_middle_of_batch_returns_containing_batch) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(10, 1)));
  ASSERT_TRUE(append(*log, make_batch(10, 1)));
  auto r = log->read(offset{15}, 1 << 20, offset{20});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->batches, 1u);
  auto b = decode_all(r->data);
  EXPECT_EQ(b[0].header.base_offset, offset{10});
  EXPECT_EQ(r->next_offset, offset{20});
}

TEST_F(log_test, read_stops_before_batch_reaching_upto) {
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(append(*log, make_batch(5, 1))); // 0-4, 5-9, 10-14, 15-19
  // HW at a batch boundary: batches below it.
  auto r = log->read(offset{0}, 1 << 20, offset{10});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 2u);
  EXPECT_EQ(r->next_offset, offset{10});
  // HW inside a batch: the straddling batch is left out.
  r = log->read(offset{0}, 1 << 20, offset{12});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 2u);
  EXPECT_EQ(r->next_offset, offset{10});
  // Nothing below upto: empty, next stays.
  r = log->read(offset{10}, 1 << 20, offset{12});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 0u);
  EXPECT_TRUE(r->data.empty());
  EXPECT_EQ(r->next_offset, offset{10});
  r = log->read(offset{12}, 1 << 20, offset{12});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 0u);
}

TEST_F(log_test, read_honours_max_bytes_but_returns_at_least_one_batch) {
  auto log = open_log();
  ASSERT_TRUE(log);
  std::vector<size_t> sizes;
  for (int i = 0; i < 6; ++i) {
    auto b = make_batch(2, 1, 100);
    sizes.push_back(b.size());
    ASSERT_TRUE(append(*log, b));
  }
  auto r = log->read(offset{0}, 1, offset{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 1u);
  EXPECT_EQ(r->data.size(), sizes[0]);
  r = log->read(offset{0}, 0, offset{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 1u);
  // Exactly three batches fit.
  r = log->read(offset{0}, sizes[0] * 3, offset{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 3u);
  EXPECT_EQ(r->next_offset, offset{6});
  r = log->read(offset{0}, sizes[0] * 3 + sizes[0] - 1, offset{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 3u);
}

TEST_F(log_test, read_outside_the_log_is_out_of_range) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(3, 1)));
  auto r = log->read(offset{4}, 100, offset{10});
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::offset_out_of_range)) << describe(r.error());
  r = log->read(offset{-1}, 100, offset{10});
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::offset_out_of_range));
  r = log->read(offset{3}, 100, offset{10});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->batches, 0u);
  EXPECT_EQ(r->next_offset, offset{3});
}

TEST_F(log_test, offset_for_timestamp_finds_exact_record_inside_batch) {
  cfg.segment_bytes = 2000;
  cfg.index_interval_bytes = 200;
  auto log = open_log();
  ASSERT_TRUE(log);
  // Batch i holds 5 records with timestamps 1000 + 100 i + {0, 10, ..., 40}.
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(append(*log, make_batch(5, 1000 + 100 * i, 30, 10)));
  ASSERT_GT(log->segment_count(), 3u);
  for (int i = 0; i < 40; ++i) {
    for (int k = 0; k < 5; ++k) {
      auto ts = 1000 + 100 * i + 10 * k;
      auto o = log->offset_for_timestamp(ts);
      ASSERT_TRUE(o);
      ASSERT_TRUE(*o);
      EXPECT_EQ(**o, offset{5 * i + k}) << "ts " << ts;
      // Between records: the next one.
      o = log->offset_for_timestamp(ts - 3);
      ASSERT_TRUE(o && *o);
      EXPECT_EQ(**o, offset{5 * i + k});
    }
  }
  auto o = log->offset_for_timestamp(0);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{0});
  o = log->offset_for_timestamp(1000 + 100 * 39 + 41);
  ASSERT_TRUE(o);
  EXPECT_FALSE(*o);
}

TEST_F(log_test, offset_for_timestamp_with_unordered_timestamps) {
  auto log = open_log();
  ASSERT_TRUE(log);
  // Timestamps 500, 400, 300 in batch 0, then 100 in batch 1, 900 in batch 2.
  ASSERT_TRUE(append(*log, make_batch(3, 500, 10, -100)));
  ASSERT_TRUE(append(*log, make_batch(1, 100)));
  ASSERT_TRUE(append(*log, make_batch(1, 900)));
  auto at = [&](timestamp_ms ts) {
    auto o = log->offset_for_timestamp(ts);
    EXPECT_TRUE(o);
    return o && *o ? (*o)->value : -1;
  };
  EXPECT_EQ(at(50), 0);
  EXPECT_EQ(at(450), 0);
  EXPECT_EQ(at(350), 0);
  EXPECT_EQ(at(501), 4);
  EXPECT_EQ(at(901), -1);
}

TEST_F(log_test, rolls_by_age_of_first_append_with_injected_clock) {
  cfg.segment_ms = std::chrono::milliseconds{1000};
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  clock.now += 999;
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  EXPECT_EQ(log->segment_count(), 1u);
  clock.now += 1;
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  EXPECT_EQ(log->segment_count(), 2u);
  // The new segment's age counts from its own first append.
  clock.now += 500;
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  EXPECT_EQ(log->segment_count(), 2u);
  EXPECT_TRUE(fs::exists(dir.path() / "00000000000000000002.log"));
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST_F(log_test, roll_of_an_empty_segment_is_a_no_op) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_FALSE(log->roll());
  EXPECT_EQ(log->segment_count(), 1u);
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  ASSERT_FALSE(log->roll());
  ASSERT_FALSE(log->roll());
  EXPECT_EQ(log->segment_count(), 2u);
  EXPECT_TRUE(fs::exists(dir.path() / "00000000000000000002.log"));
}

TEST_F(log_test, truncate_mid_segment_removes_whole_batches_and_append_continues) {
  cfg.index_interval_bytes = 100;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(append(*log, make_batch(4, 1000 + i * 10))); // batch i: 4i..4i+3
  log->set_high_watermark(offset{40});
  // 22 is inside batch 20..23: the whole batch goes.
  auto end = log->truncate_to(offset{22});
  ASSERT_TRUE(end) << describe(end.error());
  EXPECT_EQ(*end, offset{20});
  EXPECT_EQ(log->log_end(), offset{20});
  EXPECT_EQ(log->high_watermark(), offset{20});
  EXPECT_LE(log->durable_end(), offset{20});
  std::vector<int64_t> expected;
  for (int64_t o = 0; o < 20; ++o)
    expected.push_back(o);
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), expected);
  auto info = append(*log, make_batch(2, 5000));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{20});
  expected.push_back(20);
  expected.push_back(21);
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), expected);
  // The time index forgot the removed batches.
  auto o = log->offset_for_timestamp(1000 + 9 * 10);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{20});
  // Truncating at a batch boundary keeps the batch below.
  end = log->truncate_to(offset{8});
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, offset{8});
  // Truncating at or past the end changes nothing.
  end = log->truncate_to(offset{100});
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, offset{8});
}

TEST_F(log_test, truncate_across_segments_deletes_later_segments) {
  cfg.segment_bytes = 600;
  cfg.index_interval_bytes = 100;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 1000 + i, 40)));
  auto before = log->segment_count();
  ASSERT_GT(before, 4u);
  auto end = log->truncate_to(offset{13});
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, offset{12});
  EXPECT_LT(log->segment_count(), before);
  size_t log_files = 0;
  for (auto& e : fs::directory_iterator(dir.path()))
    log_files += e.path().extension() == ".log";
  EXPECT_EQ(log_files, log->segment_count());
  std::vector<int64_t> expected;
  for (int64_t o = 0; o < 12; ++o)
    expected.push_back(o);
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), expected);
  // Appends continue at 12 and roll normally afterwards.
  for (int i = 0; i < 20; ++i) {
    auto info = append(*log, make_batch(2, 2000 + i, 40));
    ASSERT_TRUE(info);
    EXPECT_EQ(info->base_offset, offset{12 + 2 * i});
    expected.push_back(12 + 2 * i);
    expected.push_back(13 + 2 * i);
  }
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), expected);
  // Still consistent after reopening.
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(offsets_in(read_all(*log, offset{0})), expected);
}

TEST_F(log_test, truncate_to_a_segment_base_removes_that_segment) {
  cfg.segment_bytes = 1;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 1))); // one batch per segment
  ASSERT_EQ(log->segment_count(), 4u);
  auto end = log->truncate_to(offset{4});
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, offset{4});
  EXPECT_EQ(log->segment_count(), 2u);
  EXPECT_FALSE(fs::exists(dir.path() / "00000000000000000004.log"));
  auto info = append(*log, make_batch(1, 1));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{4});
  // Truncating everything leaves one empty segment at the log start.
  end = log->truncate_to(offset{0});
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, offset{0});
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_EQ(log->size_bytes(), 0u);
}

TEST_F(log_test, truncate_drops_epochs_starting_at_or_after_the_new_end) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_FALSE(log->add_epoch(leader_epoch{1}));
  ASSERT_TRUE(append(*log, make_batch(5, 1)));
  ASSERT_FALSE(log->add_epoch(leader_epoch{2}));
  ASSERT_TRUE(append(*log, make_batch(5, 1)));
  ASSERT_FALSE(log->add_epoch(leader_epoch{3}));
  ASSERT_TRUE(append(*log, make_batch(5, 1)));
  EXPECT_EQ(log->epochs().size(), 3u);
  ASSERT_TRUE(log->truncate_to(offset{5}));
  ASSERT_EQ(log->epochs().size(), 1u);
  EXPECT_EQ(log->epochs()[0], (epoch_entry{leader_epoch{1}, offset{0}}));
  // truncate_to checkpoints.
  auto md = ckpt.load();
  ASSERT_TRUE(md && *md);
  EXPECT_EQ((*md)->epochs.size(), 1u);
}

TEST_F(log_test, retention_by_size_deletes_oldest_segments_and_advances_log_start) {
  cfg.segment_bytes = 500;
  cfg.retention_bytes = 1200;
  cfg.retention_ms = std::chrono::milliseconds{-1};
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 1, 40)));
  auto segments = log->segment_count();
  ASSERT_GT(segments, 5u);
  // Nothing goes above the high watermark.
  auto rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->segments_deleted, 0u);
  log->set_high_watermark(log->log_end());
  rep = log->enforce_retention();
  ASSERT_TRUE(rep) << describe(rep.error());
  EXPECT_GT(rep->segments_deleted, 0u);
  EXPECT_LE(log->size_bytes(), 1200u);
  EXPECT_EQ(log->segment_count(), segments - rep->segments_deleted);
  EXPECT_GT(log->log_start(), offset{0});
  EXPECT_EQ(rep->new_log_start, log->log_start());
  EXPECT_FALSE(fs::exists(dir.path() / "00000000000000000000.log"));
  EXPECT_FALSE(fs::exists(dir.path() / "00000000000000000000.index"));
  auto r = log->read(log->log_start() - 1, 100, log->log_end());
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::offset_out_of_range));
  r = log->read(log->log_start(), 100, log->log_end());
  ASSERT_TRUE(r);
  EXPECT_EQ(decode_all(r->data).at(0).header.base_offset, log->log_start());
  auto md = ckpt.load();
  ASSERT_TRUE(md && *md);
  EXPECT_EQ((*md)->log_start, log->log_start());
  // Never the active segment.
  cfg.retention_bytes = 0;
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(log->segment_count(), 1u);
  r = log->read(log->log_start(), 1, log->log_end());
  ASSERT_TRUE(r);
  EXPECT_EQ(decode_all(r->data).at(0).header.base_offset, log->log_start());
  EXPECT_FALSE(log->read(log->log_start() - 1, 1, log->log_end()));
}

TEST_F(log_test, retention_by_time_uses_segment_max_timestamp_and_clock) {
  cfg.segment_bytes = 1;
  cfg.retention_ms = std::chrono::milliseconds{10'000};
  auto log = open_log();
  ASSERT_TRUE(log);
  // One batch per segment, newest record 1000 s apart.
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 1'000'000 + i * 1000)));
  log->set_high_watermark(log->log_end());
  clock.now = 1'000'000 + 2 * 1000 + 1 + 10'000; // segments 0..1 expire
  auto rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->segments_deleted, 2u);
  EXPECT_EQ(log->log_start(), offset{4});
  clock.now += 1'000'000; // everything expired but the active one stays
  rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->segments_deleted, 2u);
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_EQ(log->log_start(), offset{8});
  EXPECT_EQ(offsets_in(read_all(*log, log->log_start())), (std::vector<int64_t>{8, 9}));
  // Closed segments keep their max timestamp across a reopen.
  ASSERT_FALSE(log->close());
  clock.now = 0;
  log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(1, 5'000'000)));
  ASSERT_FALSE(log->roll());
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  log->set_high_watermark(log->log_end());
  clock.now = 1'000'000 + 4 * 1000 + 2 + 10'000;
  rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->segments_deleted, 1u); // 8..9 expired, 10 not
  EXPECT_EQ(log->log_start(), offset{10});
}

TEST_F(log_test, advance_log_start_deletes_segments_below_it) {
  cfg.segment_bytes = 1;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(append(*log, make_batch(3, 1))); // 0-2, 3-5, 6-8, 9-11
  ASSERT_FALSE(log->advance_log_start(offset{7}));
  EXPECT_EQ(log->log_start(), offset{7});
  EXPECT_EQ(log->segment_count(), 2u);
  EXPECT_FALSE(fs::exists(dir.path() / "00000000000000000003.log"));
  EXPECT_TRUE(fs::exists(dir.path() / "00000000000000000006.log"));
  auto r = log->read(offset{6}, 100, offset{100});
  EXPECT_FALSE(r);
  r = log->read(offset{7}, 100, offset{100});
  ASSERT_TRUE(r);
  EXPECT_EQ(decode_all(r->data).at(0).header.base_offset, offset{6});
  EXPECT_EQ(log->high_watermark(), offset{7});
  auto md = ckpt.load();
  ASSERT_TRUE(md && *md);
  EXPECT_EQ((*md)->log_start, offset{7});
  EXPECT_TRUE(log->advance_log_start(offset{13}));
  // Time lookups ignore records below the log start.
  auto o = log->offset_for_timestamp(0);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{7});
  // Reopen: the checkpointed start wins over the first segment's base.
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_start(), offset{7});
}

TEST_F(log_test, set_config_applies_from_the_next_append) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  EXPECT_EQ(log->segment_count(), 1u);
  auto changed = cfg;
  changed.segment_bytes = 1;
  changed.max_batch_bytes = 300;
  changed.retention_bytes = 0;
  log->set_config(changed);
  EXPECT_EQ(log->segment_count(), 1u); // existing segments stay
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  EXPECT_EQ(log->segment_count(), 2u);
  auto big = append(*log, make_batch(2, 1, 400));
  ASSERT_FALSE(big);
  EXPECT_TRUE(is(big.error(), ec::message_too_large));
  log->set_high_watermark(log->log_end());
  auto rep = log->enforce_retention();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->segments_deleted, 1u);
  EXPECT_EQ(log->log_start(), offset{4});
}

TEST_F(log_test, reopen_keeps_everything_readable_and_offsets_continue) {
  cfg.segment_bytes = 800;
  cfg.index_interval_bytes = 150;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(append(*log, make_batch(3, 100 + i, 25)));
  log->set_high_watermark(offset{50});
  ASSERT_FALSE(log->add_epoch(leader_epoch{4}));
  auto before = read_all(*log, offset{0});
  auto segments = log->segment_count();
  ASSERT_FALSE(log->close());
  auto again = log->append(std::span<char>{});
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::log_closed));
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->segment_count(), segments);
  EXPECT_EQ(log->log_end(), offset{90});
  EXPECT_EQ(log->durable_end(), offset{90});
  EXPECT_EQ(log->high_watermark(), offset{50});
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(log->recovery().reason, "");
  EXPECT_EQ(read_all(*log, offset{0}), before);
  auto info = append(*log, make_batch(1, 1));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{90});
  // Batch 15 holds timestamps 115, 116, 117.
  auto o = log->offset_for_timestamp(100 + 17);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{47});
}

TEST_F(log_test, a_segment_makes_its_index_files_with_its_first_index_entry) {
  // An idle partition holds one file, not three: the .index and .timeindex
  // of a new segment are made by the first write that has an entry for
  // them, and a reopen without them is no damage.
  auto files = [&] {
    std::set<std::string> names;
    for (auto& e : fs::directory_iterator(dir.path()))
      names.insert(e.path().filename().string());
    return names;
  };
  std::set<std::string> log_only{"00000000000000000000.log"};
  cfg.index_interval_bytes = 1 << 20;
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(files(), log_only);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 10 + i)));
  ASSERT_TRUE(log->flush());
  EXPECT_EQ(files(), log_only) << "no entry yet (interval 1 MiB)";
  auto before = read_all(*log, offset{0});
  ASSERT_FALSE(log->close());
  EXPECT_EQ(files(), log_only);
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(files(), log_only);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(read_all(*log, offset{0}), before);
  ASSERT_FALSE(log->close());
  // Entries from the next batch on: the files appear with them.
  cfg.index_interval_bytes = 1;
  log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 20 + i)));
  ASSERT_TRUE(log->flush());
  EXPECT_EQ(files(), (std::set<std::string>{"00000000000000000000.index",
                                            "00000000000000000000.log",
                                            "00000000000000000000.timeindex"}));
  // The open's scan indexed the first 5 batches at the new interval (all
  // but position 0's), then one entry per new batch.
  EXPECT_EQ(fs::file_size(dir.path() / "00000000000000000000.index"), 7u * 8u);
  before = read_all(*log, offset{0});
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(log->recovery().batches_scanned, 1u) << "from the last entry";
  EXPECT_EQ(read_all(*log, offset{0}), before);
  for (auto o = offset{0}; o < log->log_end(); ++o) {
    auto r = log->read(o, 1, log->log_end());
    ASSERT_TRUE(r && r->batches == 1) << "offset " << o.value;
    auto h = parse_batch_header(r->data);
    ASSERT_TRUE(h);
    EXPECT_LE(h->base_offset, o);
    EXPECT_GE(h->last_offset(), o);
  }
  // Batch 5 (offsets 10, 11) holds timestamps 20, 21.
  auto t = log->offset_for_timestamp(21);
  ASSERT_TRUE(t && *t);
  EXPECT_EQ(**t, offset{11});
}

TEST_F(log_test, high_watermark_is_clamped_to_the_log) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(5, 1)));
  log->set_high_watermark(offset{100});
  EXPECT_EQ(log->high_watermark(), offset{5});
  log->set_high_watermark(offset{-3});
  EXPECT_EQ(log->high_watermark(), offset{0});
  // A checkpoint beyond the data (lost tail) is clamped on open.
  ASSERT_FALSE(log->close());
  ASSERT_FALSE(ckpt.save({offset{0}, offset{77}, {}}));
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->high_watermark(), offset{5});
}

TEST_F(log_test, flush_makes_appends_durable_with_one_fdatasync) {
  fault_injecting_file_system ffs{&default_file_system()};
  cfg.index_interval_bytes = 50;
  cfg.flush.messages = 0;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ffs.reset_counters();
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(append(*log, make_batch(2, 1)));
  // Group commit: appends never sync, and each one is a single write.
  EXPECT_EQ(ffs.syncs(), 0u);
  EXPECT_EQ(ffs.writes(), 20u);
  EXPECT_EQ(log->durable_end(), offset{0});
  auto d = log->flush();
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, offset{40});
  EXPECT_EQ(log->durable_end(), offset{40});
  // One fdatasync of the segment; the indexes stay off the sync path.
  EXPECT_EQ(ffs.syncs_of(".log"), 1u);
  EXPECT_EQ(ffs.syncs_of(".index"), 0u);
  EXPECT_EQ(ffs.syncs_of(".timeindex"), 0u);
  EXPECT_GT(fs::file_size(dir.path() / "00000000000000000000.index"), 0u);
  // Nothing new: no sync.
  ASSERT_TRUE(log->flush());
  EXPECT_EQ(ffs.syncs_of(".log"), 1u);
}

TEST_F(log_test, flush_due_follows_message_count_policy) {
  cfg.flush.messages = 5;
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->flush_due());
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  EXPECT_FALSE(log->flush_due());
  ASSERT_TRUE(append(*log, make_batch(2, 1)));
  EXPECT_FALSE(log->flush_due());
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  EXPECT_TRUE(log->flush_due());
  ASSERT_TRUE(log->flush());
  EXPECT_FALSE(log->flush_due());
}

TEST_F(log_test, flush_due_after_every_append_with_default_policy) {
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->flush_due());
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  EXPECT_TRUE(log->flush_due());
  EXPECT_EQ(log->durable_end(), offset{0});
  ASSERT_TRUE(log->flush());
  EXPECT_FALSE(log->flush_due());
  EXPECT_EQ(log->durable_end(), offset{1});
}

TEST_F(log_test, flush_due_follows_interval_policy_with_injected_clock) {
  cfg.flush.messages = 0;
  cfg.flush.interval = std::chrono::milliseconds{100};
  auto log = open_log();
  ASSERT_TRUE(log);
  clock.now += 1000; // idle time before the first append does not count
  EXPECT_FALSE(log->flush_due());
  ASSERT_TRUE(append(*log, make_batch(10, 1)));
  clock.now += 60;
  ASSERT_TRUE(append(*log, make_batch(10, 1)));
  EXPECT_FALSE(log->flush_due());
  clock.now += 40; // the oldest unflushed append is 100 ms old
  EXPECT_TRUE(log->flush_due());
  ASSERT_TRUE(log->flush());
  EXPECT_FALSE(log->flush_due());
  clock.now += 1000;
  EXPECT_FALSE(log->flush_due());
}

TEST_F(log_test, flush_never_due_when_both_triggers_disabled) {
  cfg.flush.messages = 0;
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(append(*log, make_batch(10, 1)));
  clock.now += 1'000'000;
  EXPECT_FALSE(log->flush_due());
}

TEST_F(log_test, roll_makes_the_closed_segment_durable) {
  fault_injecting_file_system ffs{&default_file_system()};
  cfg.segment_bytes = 1;
  cfg.flush.messages = 0;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(3, 1)));
  EXPECT_EQ(log->durable_end(), offset{0});
  ffs.reset_counters();
  ASSERT_TRUE(append(*log, make_batch(3, 1)));
  EXPECT_EQ(log->durable_end(), offset{3});
  EXPECT_EQ(ffs.syncs_of(".log"), 1u);
  EXPECT_EQ(ffs.syncs_of(".index"), 1u);
  EXPECT_EQ(ffs.syncs_of(".timeindex"), 1u);
  EXPECT_EQ(ffs.dir_syncs(), 1u);
}

TEST_F(log_test, epochs_are_persisted_through_the_checkpoint) {
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_FALSE(log->add_epoch(leader_epoch{1}));
  ASSERT_TRUE(append(*log, make_batch(3, 1)));
  ASSERT_FALSE(log->add_epoch(leader_epoch{1})); // same epoch: no-op
  ASSERT_FALSE(log->add_epoch(leader_epoch{3}));
  ASSERT_FALSE(log->add_epoch(leader_epoch{4})); // epoch 3 wrote nothing
  auto older = log->add_epoch(leader_epoch{2});
  ASSERT_TRUE(older);
  EXPECT_TRUE(is(older, ec::invalid_argument));
  ASSERT_TRUE(append(*log, make_batch(3, 1)));
  std::vector<epoch_entry> expected{{leader_epoch{1}, offset{0}},
                                    {leader_epoch{4}, offset{3}}};
  EXPECT_EQ(log->epochs(), expected);
  ASSERT_FALSE(log->checkpoint());
  auto md = ckpt.load();
  ASSERT_TRUE(md && *md);
  EXPECT_EQ((*md)->epochs, expected);
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->epochs(), expected);
}

/// A batch of n records written in leader epoch `epoch` (as a replica stamps
/// it before the append).
std::string batch_in_epoch(int n, int32_t epoch) {
  auto b = make_batch(n, 1);
  set_partition_leader_epoch(std::span<char>{b.data(), b.size()}, epoch);
  return b;
}

// A node queues its partitions' checkpoints and writes them together, so a
// crash can leave batches of epochs the saved history lacks. Reopened, the
// log completes the history from its batches (seed 1007 of the chaos
// suite: a leader missing a follower's epoch made it truncate everything it
// had, again on every fetch).
TEST_F(log_test, an_epoch_history_saved_before_its_batches_is_completed_at_open) {
  for (bool saved_empty : {false, true}) {
    SCOPED_TRACE(saved_empty ? "nothing saved" : "the first epoch saved");
    memory_checkpoint mc;
    auto where = dir.path() / (saved_empty ? "empty" : "first");
    auto reopen = [&] {
      auto l = partition_log::open(where, cfg, &mc, nullptr, clock.fn());
      EXPECT_TRUE(l) << describe(l.error());
      return l ? std::move(*l) : nullptr;
    };
    auto log = reopen();
    ASSERT_TRUE(log);
    ASSERT_FALSE(log->add_epoch(leader_epoch{1}));
    ASSERT_TRUE(append(*log, batch_in_epoch(3, 1)));
    ASSERT_FALSE(log->checkpoint());
    auto stale = mc.load();
    ASSERT_TRUE(stale && *stale);
    if (saved_empty)
      (*stale)->epochs.clear();
    ASSERT_FALSE(log->add_epoch(leader_epoch{3}));
    ASSERT_TRUE(append(*log, batch_in_epoch(2, 3)));
    ASSERT_TRUE(append(*log, batch_in_epoch(1, 3)));
    ASSERT_FALSE(log->add_epoch(leader_epoch{5}));
    ASSERT_TRUE(append(*log, batch_in_epoch(2, 5)));
    std::vector<epoch_entry> expected{{leader_epoch{1}, offset{0}},
                                      {leader_epoch{3}, offset{3}},
                                      {leader_epoch{5}, offset{6}}};
    EXPECT_EQ(log->epochs(), expected);
    ASSERT_FALSE(log->close());
    // The crash: the batches are on disk, the checkpoint is the old one.
    ASSERT_FALSE(mc.save(**stale));
    log = reopen();
    ASSERT_TRUE(log);
    EXPECT_EQ(log->epochs(), expected);
    auto md = mc.load();
    ASSERT_TRUE(md && *md);
    EXPECT_EQ((*md)->epochs, expected) << "the completed history is saved";
    ASSERT_FALSE(log->close());
  }
}

TEST_F(log_test, append_replicated_keeps_leader_offsets) {
  cfg.segment_bytes = 700;
  auto leader = open_log();
  ASSERT_TRUE(leader);
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(append(*leader, make_batch(3, 100 + i, 30)));
  temp_dir fdir;
  memory_checkpoint fckpt;
  auto follower = partition_log::open(fdir.path(), cfg, &fckpt, nullptr, clock.fn());
  ASSERT_TRUE(follower);
  auto& f = **follower;
  // Copy in chunks, as fetches would.
  offset next{0};
  while (next < leader->log_end()) {
    auto r = leader->read(next, 500, leader->log_end());
    ASSERT_TRUE(r);
    auto info = f.append_replicated(r->data);
    ASSERT_TRUE(info) << describe(info.error());
    EXPECT_EQ(info->base_offset, next);
    EXPECT_EQ(info->last_offset, r->next_offset - 1);
    EXPECT_EQ(info->bytes, r->data.size());
    next = r->next_offset;
  }
  EXPECT_EQ(f.log_end(), leader->log_end());
  EXPECT_GT(f.segment_count(), 1u);
  EXPECT_EQ(read_all(f, offset{0}), read_all(*leader, offset{0}));
  // A batch that does not start at the log end is refused, log unchanged.
  auto r = leader->read(offset{0}, 1, leader->log_end());
  ASSERT_TRUE(r);
  auto size = f.size_bytes();
  auto bad = f.append_replicated(r->data);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), ec::offset_out_of_range)) << describe(bad.error());
  EXPECT_EQ(f.size_bytes(), size);
  // A damaged batch behind a good one: nothing is written.
  auto good = make_batch(2, 1);
  set_base_offset(std::span<char>{good.data(), good.size()}, f.log_end());
  auto broken = make_batch(2, 1);
  set_base_offset(std::span<char>{broken.data(), broken.size()}, f.log_end() + 2);
  broken[broken.size() - 1] ^= 0x40;
  bad = f.append_replicated(good + broken);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), ec::crc_mismatch)) << describe(bad.error());
  EXPECT_EQ(f.size_bytes(), size);
  EXPECT_TRUE(f.append_replicated(good));
}

TEST_F(log_test, append_refuses_bad_batches_and_leaves_the_log_unchanged) {
  cfg.max_batch_bytes = 400;
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(1, 1)));
  auto big = append(*log, make_batch(2, 1, 500));
  ASSERT_FALSE(big);
  EXPECT_TRUE(is(big.error(), ec::message_too_large)) << describe(big.error());
  auto b = make_batch(2, 1);
  b[b.size() - 3] ^= 1;
  auto crc = append(*log, b);
  ASSERT_FALSE(crc);
  EXPECT_TRUE(is(crc.error(), ec::crc_mismatch));
  auto two = append(*log, make_batch(1, 1) + make_batch(1, 1));
  ASSERT_FALSE(two);
  auto shorty = append(*log, make_batch(2, 1).substr(0, 30));
  ASSERT_FALSE(shorty);
  EXPECT_TRUE(is(shorty.error(), ec::truncated_batch));
  EXPECT_EQ(log->log_end(), offset{1});
  auto info = append(*log, make_batch(1, 1));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{1});
}

TEST_F(log_test, index_files_follow_the_documented_format) {
  // Three batches of known size with an interval of one batch: entries for
  // batches 1 and 2 (position 0 is never indexed).
  auto b = make_batch(4, 1000, 20);
  cfg.index_interval_bytes = static_cast<uint32_t>(b.size());
  auto log = open_log();
  ASSERT_TRUE(log);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(append(*log, make_batch(4, 1000 + 10 * i, 20)));
  ASSERT_FALSE(log->roll());
  auto read_file = [&](const char* name) {
    std::string s(fs::file_size(dir.path() / name), '\0');
    FILE* f = std::fopen((dir.path() / name).c_str(), "rb");
    EXPECT_EQ(std::fread(s.data(), 1, s.size(), f), s.size());
    std::fclose(f);
    return s;
  };
  auto idx = read_file("00000000000000000000.index");
  auto be = [](std::string_view s, size_t at, size_t n) {
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i)
      x = (x << 8) | static_cast<unsigned char>(s[at + i]);
    return x;
  };
  ASSERT_EQ(idx.size(), 16u);
  EXPECT_EQ(be(idx, 0, 4), 4u);
  EXPECT_EQ(be(idx, 4, 4), b.size());
  EXPECT_EQ(be(idx, 8, 4), 8u);
  EXPECT_EQ(be(idx, 12, 4), 2 * b.size());
  auto tidx = read_file("00000000000000000000.timeindex");
  // (1013, 4) and (1023, 8); the roll adds no closing entry because the
  // segment's max timestamp (1023) is already the last entry's.
  ASSERT_EQ(tidx.size(), 24u);
  EXPECT_EQ(be(tidx, 0, 8), 1013u);
  EXPECT_EQ(be(tidx, 8, 4), 4u);
  EXPECT_EQ(be(tidx, 12, 8), 1023u);
  EXPECT_EQ(be(tidx, 20, 4), 8u);
}
