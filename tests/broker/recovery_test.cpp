// partition_log::open() on damaged directories: torn and corrupt tails,
// missing and damaged indexes, stray files, checkpoints out of step, and the
// cost of opening a log of many segments.

#include "tests/temp_dir.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

std::string make_batch(int n, timestamp_ms ts0, size_t value_size = 20) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = ts0 + i;
    r.key = "k" + std::to_string(i);
    r.value = std::string(value_size + static_cast<size_t>(i), static_cast<char>('A' + i % 26));
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

caf::expected<append_info> append(partition_log& log, std::string batch) {
  return log.append(std::span<char>{batch.data(), batch.size()});
}

std::string read_all(partition_log& log, offset from = offset{0}) {
  std::string all;
  while (from < log.log_end()) {
    auto r = log.read(from, 1 << 20, log.log_end());
    EXPECT_TRUE(r) << describe(r.error());
    if (!r || r->batches == 0)
      break;
    all += r->data;
    from = r->next_offset;
  }
  return all;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

void write_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream out{p, std::ios::binary | std::ios::trunc};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void append_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream out{p, std::ios::binary | std::ios::app};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// For every offset in [start, end): the batch that a one-batch read returns.
std::vector<std::string> batch_per_offset(partition_log& log) {
  std::vector<std::string> out;
  for (auto o = log.log_start(); o < log.log_end(); ++o) {
    auto r = log.read(o, 1, log.log_end());
    EXPECT_TRUE(r);
    out.push_back(r ? r->data : std::string{});
  }
  return out;
}

class recovery_test : public ::testing::Test {
protected:
  temp_dir dir;
  memory_checkpoint ckpt;
  log_config cfg;
  /// Size of every batch written by write_log, in order.
  std::vector<size_t> sizes;

  std::unique_ptr<partition_log> open_at(const fs::path& p, memory_checkpoint& c) {
    auto log = partition_log::open(p, cfg, &c);
    EXPECT_TRUE(log) << describe(log.error());
    return log ? std::move(*log) : nullptr;
  }

  std::unique_ptr<partition_log> open_log() {
    return open_at(dir.path(), ckpt);
  }

  /// Writes `n` batches of 1..4 records, closes the log, returns its content.
  std::string write_log(int n) {
    auto log = open_log();
    EXPECT_TRUE(log);
    for (int i = 0; i < n; ++i) {
      auto b = make_batch(1 + i % 4, 1000 + 10 * i, 10 + 7 * (i % 5));
      sizes.push_back(b.size());
      EXPECT_TRUE(append(*log, b));
    }
    auto all = read_all(*log);
    EXPECT_FALSE(log->close());
    return all;
  }

  fs::path seg(const char* suffix, int64_t base = 0) const {
    char name[32];
    std::snprintf(name, sizeof(name), "%020lld", static_cast<long long>(base));
    return dir.path() / (std::string{name} + suffix);
  }
};

} // namespace

TEST_F(recovery_test, torn_tail_at_every_byte_of_the_last_batch_is_cut) {
  cfg.index_interval_bytes = 1; // an index entry for every batch but the first
  auto content = write_log(6);
  auto log_file = seg(".log");
  auto full = file_bytes(log_file);
  ASSERT_EQ(full, content);
  auto last_start = full.size() - sizes.back();
  auto complete = std::string_view{full}.substr(0, last_start);
  auto last_base = [&] {
    auto log = open_log();
    auto end = log->log_end();
    auto r = log->read(end - 1, 1, end);
    auto h = parse_batch_header(r->data);
    return h->base_offset;
  }();
  for (auto cut = last_start; cut < full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    temp_dir copy;
    fs::copy(dir.path(), copy.path(), fs::copy_options::recursive);
    fs::resize_file(copy.path() / log_file.filename(), cut);
    memory_checkpoint c = ckpt;
    auto log = open_at(copy.path(), c);
    ASSERT_TRUE(log);
    EXPECT_EQ(log->log_end(), last_base);
    EXPECT_EQ(log->recovery().bytes_truncated, cut - last_start);
    EXPECT_EQ(log->recovery().reason.empty(), cut == last_start);
    EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
    EXPECT_EQ(fs::file_size(copy.path() / log_file.filename()), last_start);
    ASSERT_EQ(read_all(*log), complete);
    // And the log goes on from there.
    auto info = append(*log, make_batch(2, 1));
    ASSERT_TRUE(info);
    EXPECT_EQ(info->base_offset, last_base);
    ASSERT_FALSE(log->close());
    log = open_at(copy.path(), c);
    ASSERT_TRUE(log);
    EXPECT_EQ(log->recovery().bytes_truncated, 0u);
    EXPECT_EQ(log->log_end(), last_base + 2);
  }
}

TEST_F(recovery_test, random_garbage_after_the_last_batch_is_cut) {
  auto content = write_log(5);
  for (unsigned seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng{seed};
    std::string garbage(1 + rng() % 3000, '\0');
    for (auto& ch : garbage)
      ch = static_cast<char>(rng());
    if (seed == 1)
      garbage.assign(4096, '\0'); // a preallocated, never written tail
    if (seed == 2)
      garbage = content.substr(0, 40); // the start of a valid-looking header
    temp_dir copy;
    fs::copy(dir.path(), copy.path(), fs::copy_options::recursive);
    append_bytes(copy.path() / seg(".log").filename(), garbage);
    memory_checkpoint c = ckpt;
    auto log = open_at(copy.path(), c);
    ASSERT_TRUE(log);
    EXPECT_EQ(log->recovery().bytes_truncated, garbage.size());
    EXPECT_NE(log->recovery().reason, "");
    EXPECT_EQ(read_all(*log), content);
    EXPECT_EQ(fs::file_size(copy.path() / seg(".log").filename()), content.size());
  }
}

TEST_F(recovery_test, flipped_byte_in_the_last_batch_is_cut_as_crc_mismatch) {
  auto content = write_log(5);
  auto last_start = content.size() - sizes.back();
  auto damaged = content;
  damaged[last_start + batch_layout::max_timestamp + 3] ^= 0x10;
  write_bytes(seg(".log"), damaged);
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, sizes.back());
  EXPECT_EQ(log->recovery().reason.rfind("crc_mismatch at position "
                                           + std::to_string(last_start), 0),
            0u)
    << log->recovery().reason;
  EXPECT_EQ(read_all(*log), content.substr(0, last_start));
}

TEST_F(recovery_test, corrupt_batch_inside_the_scanned_tail_cuts_everything_after_it) {
  // No index entries: the whole active segment is the tail. (Damage before
  // the last index entry is not looked for: open() scans only the tail.)
  cfg.index_interval_bytes = 1u << 20;
  auto content = write_log(8);
  size_t cut = sizes[0] + sizes[1] + sizes[2];
  auto damaged = content;
  damaged[cut + batch_layout::header_size + 2] ^= 0x55;
  write_bytes(seg(".log"), damaged);
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, content.size() - cut);
  EXPECT_EQ(log->recovery().reason.rfind("crc_mismatch", 0), 0u) << log->recovery().reason;
  EXPECT_EQ(read_all(*log), content.substr(0, cut));
  // New batches of other sizes land where the stale entries pointed: every
  // offset must still read its own batch.
  auto end = log->log_end();
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(append(*log, make_batch(3, 1, 5 + 40 * i)));
  for (auto o = offset{0}; o < log->log_end(); ++o) {
    auto r = log->read(o, 1, log->log_end());
    ASSERT_TRUE(r) << describe(r.error());
    auto h = parse_batch_header(r->data);
    ASSERT_TRUE(h);
    EXPECT_LE(h->base_offset, o);
    EXPECT_GE(h->last_offset(), o);
  }
  EXPECT_EQ(log->log_end(), end + 18);
  ASSERT_FALSE(log->close());
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
}

TEST_F(recovery_test, last_batch_with_wrong_offset_is_cut) {
  auto content = write_log(5);
  auto last_start = content.size() - sizes.back();
  auto damaged = content;
  // The base offset is not covered by the CRC. One that goes back is
  // damage; one that skips ahead is not (a follower's copy of a compacted
  // leader has gaps), as in Kafka.
  ASSERT_NE(damaged[last_start + 7], 0);
  damaged[last_start + 7] = 0;
  write_bytes(seg(".log"), damaged);
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, sizes.back());
  EXPECT_EQ(log->recovery().reason.rfind("offset_not_increasing", 0), 0u)
    << log->recovery().reason;
  EXPECT_EQ(read_all(*log), content.substr(0, last_start));
}

TEST_F(recovery_test, deleted_indexes_are_rebuilt_identically) {
  cfg.segment_bytes = 900;
  cfg.index_interval_bytes = 150;
  auto content = write_log(40);
  std::map<fs::path, std::string> originals;
  for (auto& e : fs::directory_iterator(dir.path()))
    if (e.path().extension() != ".log")
      originals[e.path()] = file_bytes(e.path());
  std::vector<std::string> per_offset;
  {
    auto log = open_log();
    per_offset = batch_per_offset(*log);
    ASSERT_GT(log->segment_count(), 3u);
  }
  for (auto& [p, bytes] : originals)
    fs::remove(p);
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, log->segment_count());
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(batch_per_offset(*log), per_offset);
  EXPECT_EQ(read_all(*log), content);
  auto o = log->offset_for_timestamp(1000 + 10 * 33 + 1);
  ASSERT_TRUE(o && *o);
  ASSERT_FALSE(log->close());
  for (auto& [p, bytes] : originals)
    EXPECT_EQ(file_bytes(p), bytes) << p;
}

TEST_F(recovery_test, damaged_active_index_is_rebuilt) {
  cfg.index_interval_bytes = 100;
  auto content = write_log(20);
  auto idx = file_bytes(seg(".index"));
  ASSERT_GE(idx.size(), 16u);
  // The last entry points at the previous entry's batch: sorted, in range,
  // but the batch there carries another offset.
  auto damaged = idx;
  std::copy(idx.end() - 12, idx.end() - 8, damaged.end() - 4);
  damaged[damaged.size() - 1] += 1;
  write_bytes(seg(".index"), damaged);
  std::vector<std::string> per_offset;
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 1u);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(read_all(*log), content);
  for (auto o = offset{0}; o < log->log_end(); ++o) {
    auto r = log->read(o, 1, log->log_end());
    ASSERT_TRUE(r);
    auto h = parse_batch_header(r->data);
    ASSERT_TRUE(h);
    EXPECT_LE(h->base_offset, o);
    EXPECT_GE(h->last_offset(), o);
  }
  ASSERT_FALSE(log->close());
  EXPECT_EQ(file_bytes(seg(".index")), idx);
}

TEST_F(recovery_test, unsorted_index_of_a_closed_segment_is_rebuilt_on_first_use) {
  cfg.segment_bytes = 2000;
  cfg.index_interval_bytes = 100;
  auto content = write_log(40);
  std::vector<std::string> per_offset;
  {
    auto log = open_log();
    ASSERT_GT(log->segment_count(), 2u);
    per_offset = batch_per_offset(*log);
  }
  auto idx = file_bytes(seg(".index"));
  ASSERT_GE(idx.size(), 24u);
  auto damaged = idx;
  std::swap_ranges(damaged.begin(), damaged.begin() + 8, damaged.begin() + 8);
  write_bytes(seg(".index"), damaged);
  // A size that is not whole entries is caught by the cheap check at open.
  std::vector<fs::path> indexes;
  for (auto& e : fs::directory_iterator(dir.path()))
    if (e.path().extension() == ".timeindex")
      indexes.push_back(e.path());
  std::sort(indexes.begin(), indexes.end());
  append_bytes(indexes.at(1), "xyz");
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 1u); // the cheap check at open
  EXPECT_EQ(batch_per_offset(*log), per_offset);
  EXPECT_EQ(read_all(*log), content);
  ASSERT_FALSE(log->close());
  EXPECT_EQ(file_bytes(seg(".index")), idx);
}

TEST_F(recovery_test, opening_many_full_segments_scans_only_the_active_tail) {
  cfg.segment_bytes = 2000;
  cfg.index_interval_bytes = 300;
  auto content = write_log(400);
  auto log = open_log();
  ASSERT_TRUE(log);
  ASSERT_GT(log->segment_count(), 25u);
  EXPECT_EQ(log->recovery().segments, log->segment_count());
  // From the last index entry: at most interval / smallest batch + 1.
  EXPECT_LE(log->recovery().batches_scanned, 6u);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(read_all(*log), content);
}

TEST_F(recovery_test, opening_a_large_active_segment_scans_from_its_last_index_entry) {
  cfg.index_interval_bytes = 300;
  auto content = write_log(400);
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_LE(log->recovery().batches_scanned, 6u);
  EXPECT_EQ(read_all(*log), content);
  // Without an index the whole segment is scanned (and the index rebuilt).
  ASSERT_FALSE(log->close());
  fs::remove(seg(".index"));
  log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().batches_scanned, 400u);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 1u);
}

TEST_F(recovery_test, constant_timestamps_do_not_widen_the_tail_scan) {
  // The time index then holds a single early entry; the scan must still
  // start at the last offset-index entry, and the max timestamp be right.
  cfg.index_interval_bytes = 300;
  {
    auto log = open_log();
    ASSERT_TRUE(log);
    for (int i = 0; i < 5; ++i)
      ASSERT_TRUE(append(*log, make_batch(2, 5000)));
    // Far outside the scanned tail: only the time index knows this maximum.
    ASSERT_TRUE(append(*log, make_batch(1, 7000)));
    for (int i = 0; i < 300; ++i)
      ASSERT_TRUE(append(*log, make_batch(2, 5000)));
    ASSERT_FALSE(log->close());
  }
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_LE(log->recovery().batches_scanned, 6u);
  auto o = log->offset_for_timestamp(6000);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{10});
  o = log->offset_for_timestamp(5001);
  ASSERT_TRUE(o && *o);
  EXPECT_EQ(**o, offset{1});
}

TEST_F(recovery_test, stray_index_files_without_a_log_are_removed) {
  write_log(3);
  write_bytes(seg(".index", 500), "12345678");
  write_bytes(seg(".timeindex", 500), "");
  write_bytes(dir.path() / "README", "not a segment");
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_FALSE(fs::exists(seg(".index", 500)));
  EXPECT_FALSE(fs::exists(seg(".timeindex", 500)));
  EXPECT_TRUE(fs::exists(dir.path() / "README"));
  EXPECT_EQ(log->segment_count(), 1u);
}

TEST_F(recovery_test, checkpointed_log_start_deletes_segments_below_it) {
  cfg.segment_bytes = 1; // one batch per segment
  write_log(6);          // batches of 1, 2, 3, 4, 1, 2 records: bases 0 1 3 6 10 11
  auto md = *ckpt.load();
  md->log_start = offset{4};
  ASSERT_FALSE(ckpt.save(*md));
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_start(), offset{4});
  EXPECT_EQ(log->segment_count(), 4u);
  EXPECT_FALSE(fs::exists(seg(".log", 1)));
  EXPECT_TRUE(fs::exists(seg(".log", 3)));
}

TEST_F(recovery_test, checkpointed_log_start_past_the_data_restarts_there) {
  write_log(3); // offsets 0..5
  auto md = *ckpt.load();
  md->log_start = offset{50};
  md->high_watermark = offset{60};
  ASSERT_FALSE(ckpt.save(*md));
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_start(), offset{50});
  EXPECT_EQ(log->log_end(), offset{50});
  EXPECT_EQ(log->high_watermark(), offset{50});
  auto info = append(*log, make_batch(1, 1));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{50});
}

TEST_F(recovery_test, empty_directory_starts_at_the_checkpointed_log_start) {
  ASSERT_FALSE(ckpt.save({offset{1234}, offset{1234}, {}}));
  auto log = open_log();
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_end(), offset{1234});
  EXPECT_TRUE(fs::exists(seg(".log", 1234)));
}
