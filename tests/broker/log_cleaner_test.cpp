// Log compaction in the storage layer: partition_log::begin_clean /
// end_clean with run_clean (broker/log_cleaner.hpp). Keyed updates and
// tombstones across segment boundaries, readers that started before a
// clean, a crash at every step of the swap, failures of the file layer,
// a follower copying a compacted leader, producer state and the key map's
// budget.

#include "tests/temp_dir.hpp"
#include "broker/file_system.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/segment.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

struct manual_clock {
  timestamp_ms now = 1'000'000;
  clock_fn fn() {
    return [this] { return now; };
  }
};

struct kv {
  std::string key;
  std::optional<std::string> value; // nullopt: tombstone
};

std::string batch_of(const std::vector<kv>& recs, timestamp_ms ts,
                     compression codec = compression::none,
                     int64_t producer = -1, int32_t seq = -1) {
  std::vector<record> rs;
  for (size_t i = 0; i < recs.size(); ++i) {
    record r;
    r.offset_delta = static_cast<int32_t>(i);
    r.timestamp = ts;
    r.key = recs[i].key;
    r.value = recs[i].value;
    rs.push_back(std::move(r));
  }
  batch_meta meta;
  meta.codec = codec;
  meta.producer_id = producer;
  meta.producer_epoch = producer >= 0 ? 0 : -1;
  meta.base_sequence = seq;
  auto b = encode_batch(meta, rs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

struct read_record {
  int64_t offset;
  std::optional<std::string> key;
  std::optional<std::string> value;
};

/// "base-last/records" of every batch, for failure messages.
std::string batches_of(partition_log& log) {
  std::string out;
  auto all = log.read(log.log_start(), 1 << 20, log.log_end());
  if (!all)
    return describe(all.error());
  std::string_view v = all->data;
  while (!v.empty()) {
    auto h = parse_batch_header(v);
    if (!h)
      return out + describe(h.error());
    out += std::to_string(h->base_offset.value) + "-" + std::to_string(h->last_offset().value)
           + "/" + std::to_string(h->records_count) + " ";
    v.remove_prefix(h->total_size());
  }
  return out + "(" + std::to_string(log.segment_count()) + " segments, end "
         + std::to_string(log.log_end().value) + ")";
}

/// Every record from `from` to the log end, and the offsets of the batches'
/// ends (to check they never go back).
std::vector<read_record> read_all(partition_log& log, offset from = offset{-1},
                                  size_t chunk = 4096) {
  std::vector<read_record> out;
  auto at = from.value < 0 ? log.log_start() : from;
  while (at < log.log_end()) {
    auto rd = log.read(at, chunk, log.log_end());
    EXPECT_TRUE(rd) << describe(rd.error());
    if (!rd)
      break;
    std::string_view data = rd->data;
    while (!data.empty()) {
      auto h = parse_batch_header(data);
      EXPECT_TRUE(h);
      if (!h)
        return out;
      auto d = decode_batch(data.substr(0, h->total_size()));
      EXPECT_TRUE(d) << describe(d.error());
      if (!d)
        return out;
      for (auto& r : d->records) {
        auto off = h->base_offset.value + r.offset_delta;
        if (off >= at.value)
          out.push_back({off, r.key, r.value});
      }
      data.remove_prefix(h->total_size());
    }
    EXPECT_GT(rd->next_offset, at) << batches_of(log);
    if (rd->next_offset <= at)
      break;
    at = rd->next_offset;
  }
  return out;
}

/// Latest value per key as a reader of `recs` ends up with.
std::map<std::string, std::optional<std::string>>
latest(const std::vector<read_record>& recs) {
  std::map<std::string, std::optional<std::string>> m;
  for (auto& r : recs)
    if (r.key)
      m[*r.key] = r.value;
  return m;
}

void expect_increasing(const std::vector<read_record>& recs) {
  for (size_t i = 1; i < recs.size(); ++i)
    ASSERT_LT(recs[i - 1].offset, recs[i].offset) << "at record " << i;
}

class log_cleaner_test : public ::testing::Test {
protected:
  log_config config(uint64_t segment_bytes = 600) {
    log_config cfg;
    cfg.segment_bytes = segment_bytes;
    cfg.retention_ms = std::chrono::milliseconds{-1};
    cfg.compaction.compact = true;
    cfg.compaction.min_cleanable_dirty_ratio = 0.01;
    cfg.compaction.delete_retention = std::chrono::milliseconds{10'000};
    return cfg;
  }

  std::unique_ptr<partition_log> open(log_config cfg, file_system* fsys = nullptr) {
    auto log = partition_log::open(dir.path() / "p", cfg, &ckpt, fsys, clock.fn());
    EXPECT_TRUE(log) << describe(log.error());
    return log ? std::move(*log) : nullptr;
  }

  void append(partition_log& log, const std::string& batch) {
    std::string b = batch;
    auto r = log.append(std::span<char>{b.data(), b.size()});
    ASSERT_TRUE(r) << describe(r.error());
  }

  /// `rounds` updates of keys k0..k{keys-1}, one record per batch; value
  /// "v<round>-<key>". Every batch is committed (HW = log end).
  std::map<std::string, std::optional<std::string>>
  fill(partition_log& log, int keys, int rounds) {
    std::map<std::string, std::optional<std::string>> want;
    for (int r = 0; r < rounds; ++r)
      for (int k = 0; k < keys; ++k) {
        auto key = "k" + std::to_string(k);
        auto value = "v" + std::to_string(r) + "-" + key;
        append(log, batch_of({{key, value}}, clock.now));
        want[key] = value;
      }
    log.set_high_watermark(log.log_end());
    return want;
  }

  /// begin_clean + run_clean + end_clean; nullopt if no clean was due.
  std::optional<clean_stats> clean(partition_log& log,
                                   const producer_last_offsets& producers = {},
                                   uint64_t budget = uint64_t{64} << 20) {
    auto job = log.begin_clean(clock.now);
    EXPECT_TRUE(job) << describe(job.error());
    if (!job || !*job)
      return std::nullopt;
    (*job)->map_budget_bytes = budget;
    auto err = run_clean(**job, producers);
    auto st = log.end_clean(**job, std::move(err));
    EXPECT_TRUE(st) << describe(st.error());
    if (!st)
      return std::nullopt;
    return *st;
  }

  std::vector<std::string> files() {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir.path() / "p"))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  temp_dir dir{"ferry-cleaner"};
  memory_checkpoint ckpt;
  manual_clock clock;
};

TEST_F(log_cleaner_test, keeps_exactly_the_latest_value_per_key_across_segments) {
  auto log = open(config());
  auto want = fill(*log, 10, 30);
  auto end = log->log_end();
  ASSERT_GT(end, offset{250});
  auto segments = log->segment_count();
  ASSERT_GT(segments, 5u);
  auto before = log->size_bytes();
  auto st = clean(*log);
  ASSERT_TRUE(st);
  EXPECT_GT(st->bytes_reclaimed, 0u);
  EXPECT_LT(log->size_bytes(), before);
  // Offsets never change: same start and end, and each key's survivor sits
  // at the offset it was written at.
  EXPECT_EQ(log->log_start(), offset{0});
  EXPECT_EQ(log->log_end(), end);
  auto recs = read_all(*log);
  expect_increasing(recs);
  for (auto& r : recs) {
    ASSERT_TRUE(r.key);
    ASSERT_TRUE(r.value);
    // Value "v<round>-k<key>" was written at offset round * 10 + key.
    auto round = std::stoi(r.value->substr(1, r.value->find('-') - 1));
    auto k = std::stoi(r.key->substr(1));
    EXPECT_EQ(r.offset, round * 10 + k) << *r.value;
  }
  // The active segment is never cleaned: only keys written there may show
  // an older value too.
  EXPECT_LE(recs.size(), 10u + 30u);
  EXPECT_EQ(latest(recs), want);
  EXPECT_LT(recs.size(), 30u * 10);
  // The same after reopening: the cleaned segments are ordinary segments.
  log.reset();
  log = open(config());
  EXPECT_EQ(log->log_end(), end);
  auto again = read_all(*log);
  ASSERT_EQ(again.size(), recs.size());
  EXPECT_EQ(latest(again), want);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
}

TEST_F(log_cleaner_test, a_second_clean_after_more_updates_leaves_one_value_per_key) {
  auto log = open(config());
  fill(*log, 8, 10);
  ASSERT_TRUE(clean(*log));
  auto want = fill(*log, 8, 10);
  // Close the active segment so every update is cleanable.
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  ASSERT_TRUE(clean(*log));
  auto recs = read_all(*log);
  expect_increasing(recs);
  EXPECT_EQ(recs.size(), 8u);
  EXPECT_EQ(latest(recs), want);
  auto c = log->cleaning();
  EXPECT_EQ(c.cleans, 2u);
  EXPECT_EQ(c.clean_point, log->log_end());
  EXPECT_EQ(c.dirty_bytes, 0u);
  // Nothing dirty: no clean is due.
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job);
  EXPECT_FALSE(*job);
}

TEST_F(log_cleaner_test, rebuilds_compressed_batches_keeping_offsets) {
  for (auto codec : {compression::gzip, compression::lz4, compression::zstd}) {
    SCOPED_TRACE(static_cast<int>(codec));
    temp_dir d{"ferry-cleaner-codec"};
    memory_checkpoint ck;
    auto cfg = config(2000);
    auto opened = partition_log::open(d.path(), cfg, &ck, nullptr, clock.fn());
    ASSERT_TRUE(opened);
    auto& log = **opened;
    std::map<std::string, std::optional<std::string>> want;
    for (int b = 0; b < 40; ++b) {
      std::vector<kv> recs;
      for (int i = 0; i < 5; ++i) {
        auto key = "key" + std::to_string((b * 5 + i) % 7);
        auto value = "value-" + std::to_string(b) + "-" + std::to_string(i)
                     + std::string(30, 'x');
        recs.push_back({key, value});
        want[key] = value;
      }
      auto batch = batch_of(recs, clock.now, codec);
      auto r = log.append(std::span<char>{batch.data(), batch.size()});
      ASSERT_TRUE(r);
    }
    ASSERT_FALSE(log.roll());
    log.set_high_watermark(log.log_end());
    auto job = log.begin_clean(clock.now);
    ASSERT_TRUE(job && *job);
    (*job)->map_budget_bytes = 1 << 20;
    auto err = run_clean(**job, {});
    ASSERT_FALSE(err) << describe(err);
    auto st = log.end_clean(**job, caf::error{});
    ASSERT_TRUE(st) << describe(st.error());
    auto recs = read_all(log);
    EXPECT_EQ(recs.size(), 7u);
    EXPECT_EQ(latest(recs), want);
    // Kept batches still carry their codec.
    auto rd = log.read(log.log_start(), 1 << 20, log.log_end());
    ASSERT_TRUE(rd);
    std::string_view data = rd->data;
    int with_records = 0;
    while (!data.empty()) {
      auto h = parse_batch_header(data);
      ASSERT_TRUE(h);
      if (h->records_count > 0) {
        EXPECT_EQ(h->codec(), codec);
        ++with_records;
      }
      data.remove_prefix(h->total_size());
    }
    EXPECT_GT(with_records, 0);
  }
}

TEST_F(log_cleaner_test, tombstones_stay_for_delete_retention_then_go) {
  auto log = open(config());
  fill(*log, 5, 4);
  // Delete k1 and k3.
  append(*log, batch_of({{"k1", std::nullopt}}, clock.now));
  append(*log, batch_of({{"k3", std::nullopt}}, clock.now));
  fill(*log, 0, 0);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  ASSERT_TRUE(clean(*log));
  auto recs = read_all(*log);
  auto m = latest(recs);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m["k1"], std::nullopt); // the tombstone is still readable
  EXPECT_EQ(m["k3"], std::nullopt);
  EXPECT_EQ(recs.size(), 5u);       // but no older value of k1 or k3
  // Not yet expired: nothing due.
  clock.now += 9'000;
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job);
  EXPECT_FALSE(*job);
  // delete.retention.ms (10 s) after the tombstones' timestamp a clean is
  // due without any new data, and removes them.
  clock.now += 1'000;
  auto st = clean(*log);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->tombstones_removed, 2u);
  recs = read_all(*log);
  m = latest(recs);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_FALSE(m.count("k1"));
  EXPECT_FALSE(m.count("k3"));
}

TEST_F(log_cleaner_test, a_reader_that_started_before_the_clean_sees_every_latest_value) {
  auto log = open(config());
  auto want = fill(*log, 10, 20);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  // A consumer read the first 57 records, then the cleaner ran.
  auto first = read_all(*log);
  std::vector<read_record> seen(first.begin(), first.begin() + 57);
  auto resume = offset{seen.back().offset + 1};
  ASSERT_TRUE(clean(*log));
  auto rest = read_all(*log, resume);
  expect_increasing(rest);
  for (auto& r : rest)
    seen.push_back(r);
  EXPECT_EQ(latest(seen), want);
  // Resuming inside a gap works too: every offset in [start, end) is a valid
  // position.
  for (int64_t at = 0; at < log->log_end().value; at += 13) {
    auto rd = log->read(offset{at}, 1 << 16, log->log_end());
    ASSERT_TRUE(rd) << at;
    EXPECT_GT(rd->next_offset, offset{at});
  }
}

TEST_F(log_cleaner_test, never_touches_the_active_segment_or_data_above_the_high_watermark) {
  auto log = open(config());
  fill(*log, 4, 40);
  // Only the first segments are committed.
  auto hw = offset{40};
  log->set_high_watermark(hw);
  auto all_before = read_all(*log);
  ASSERT_TRUE(clean(*log));
  auto recs = read_all(*log);
  // Everything at or above the HW is as it was.
  std::vector<int64_t> above_before, above_after;
  for (auto& r : all_before)
    if (r.offset >= 40)
      above_before.push_back(r.offset);
  for (auto& r : recs)
    if (r.offset >= 40)
      above_after.push_back(r.offset);
  // Cleaning works on whole segments wholly below the HW, so the records
  // of the segment holding offset 40 are all still there.
  EXPECT_EQ(above_before, above_after);
  EXPECT_LT(recs.size(), all_before.size());
}

TEST_F(log_cleaner_test, keyless_records_are_removed_and_idempotent_producers_keep_their_last_batch) {
  auto log = open(config());
  // Producer 7 writes k0 twice (seq 0 and 1), then a plain producer
  // overwrites k0: producer 7's last batch loses its record but stays as a
  // bare header, so its sequence state survives a rebuild from the log.
  append(*log, batch_of({{"k0", "a"}}, clock.now, compression::none, 7, 0));
  append(*log, batch_of({{"k0", "b"}}, clock.now, compression::none, 7, 1));
  append(*log, batch_of({{"k0", "c"}}, clock.now));
  std::string keyless = [&] {
    record r;
    r.timestamp = clock.now;
    r.value = "no key";
    auto b = encode_batch(batch_meta{}, {r});
    return b ? *b : std::string{};
  }();
  append(*log, keyless);
  for (int i = 0; i < 20; ++i)
    append(*log, batch_of({{"pad" + std::to_string(i), std::string(40, 'p')}}, clock.now));
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  producer_last_offsets producers{{7, 1}}; // its newest batch: offset 1
  auto st = clean(*log, producers);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->keyless_removed, 1u);
  EXPECT_EQ(st->empty_batches_kept, 1u);
  auto rd = log->read(offset{0}, 1 << 20, log->log_end());
  ASSERT_TRUE(rd);
  auto h = parse_batch_header(rd->data);
  ASSERT_TRUE(h);
  // The first batch is now producer 7's bare header at offset 1.
  EXPECT_EQ(h->base_offset, offset{1});
  EXPECT_EQ(h->producer_id, 7);
  EXPECT_EQ(h->base_sequence, 1);
  EXPECT_EQ(h->records_count, 0);
  ASSERT_FALSE(verify_batch_crc(std::string_view{rd->data}.substr(0, h->total_size())));
  auto recs = read_all(*log);
  EXPECT_EQ(latest(recs)["k0"], std::optional<std::string>{"c"});
  for (auto& r : recs)
    EXPECT_TRUE(r.key);
}

TEST_F(log_cleaner_test, a_small_key_map_cleans_in_steps) {
  auto log = open(config());
  auto want = fill(*log, 30, 6);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  // Room for about ten keys per clean.
  uint64_t budget = 10 * (3 + 48);
  int cleans = 0;
  while (cleans < 40) {
    auto st = clean(*log, {}, budget);
    if (!st)
      break;
    ++cleans;
  }
  EXPECT_GT(cleans, 1);
  EXPECT_LT(cleans, 40);
  auto recs = read_all(*log);
  EXPECT_EQ(recs.size(), 30u);
  EXPECT_EQ(latest(recs), want);
}

TEST_F(log_cleaner_test, a_follower_copying_a_compacted_leader_ends_with_the_same_records) {
  auto leader = open(config());
  auto want = fill(*leader, 6, 25);
  ASSERT_TRUE(clean(*leader));
  temp_dir fdir{"ferry-follower"};
  memory_checkpoint fck;
  auto opened = partition_log::open(fdir.path(), config(), &fck, nullptr, clock.fn());
  ASSERT_TRUE(opened);
  auto& follower = **opened;
  // Fetch as a follower does: from its own log end, small fetches.
  for (int guard = 0; guard < 1000 && follower.log_end() < leader->log_end(); ++guard) {
    auto rd = leader->read(follower.log_end(), 300, leader->log_end());
    ASSERT_TRUE(rd) << describe(rd.error());
    ASSERT_FALSE(rd->data.empty());
    auto r = follower.append_replicated(rd->data);
    ASSERT_TRUE(r) << describe(r.error());
  }
  ASSERT_EQ(follower.log_end(), leader->log_end());
  follower.set_high_watermark(follower.log_end());
  auto lrecs = read_all(*leader);
  auto frecs = read_all(follower);
  ASSERT_EQ(lrecs.size(), frecs.size());
  for (size_t i = 0; i < lrecs.size(); ++i) {
    EXPECT_EQ(lrecs[i].offset, frecs[i].offset);
    EXPECT_EQ(lrecs[i].value, frecs[i].value);
  }
  // The follower's active segment has gaps; reopening it keeps everything.
  opened->reset();
  auto again = partition_log::open(fdir.path(), config(), &fck, nullptr, clock.fn());
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->log_end(), leader->log_end());
  EXPECT_EQ((*again)->recovery().bytes_truncated, 0u);
  EXPECT_EQ(latest(read_all(**again)), want);
  // Going back is still refused.
  auto rd = leader->read(offset{0}, 300, leader->log_end());
  ASSERT_TRUE(rd);
  auto back = (*again)->append_replicated(rd->data);
  EXPECT_FALSE(back);
}

// The swap's steps, one crash after each (the process stops: the log object
// is dropped without end_clean and the directory reopened). Whatever the
// step, the reopened log has every key's latest value, no offset twice, and
// nothing of the clean left over.
TEST_F(log_cleaner_test, a_crash_at_every_step_of_the_swap_loses_nothing) {
  enum step {
    after_cleaned_written,
    after_swap_rename,
    after_replaced_segments_removed,
    after_first_indexes_removed,
    after_final_rename,
    steps
  };
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE("crash after step " + std::to_string(s));
    temp_dir d{"ferry-cleaner-crash"};
    memory_checkpoint ck;
    auto cfg = config();
    auto opened = partition_log::open(d.path(), cfg, &ck, nullptr, clock.fn());
    ASSERT_TRUE(opened);
    auto log = std::move(*opened);
    std::map<std::string, std::optional<std::string>> want;
    for (int r = 0; r < 20; ++r)
      for (int k = 0; k < 6; ++k) {
        auto key = "k" + std::to_string(k);
        auto value = "v" + std::to_string(r) + "-" + key;
        auto b = batch_of({{key, value}}, clock.now);
        ASSERT_TRUE(log->append(std::span<char>{b.data(), b.size()}));
        want[key] = value;
      }
    ASSERT_FALSE(log->roll());
    log->set_high_watermark(log->log_end());
    ASSERT_FALSE(log->checkpoint());
    auto end = log->log_end();
    auto job = log->begin_clean(clock.now);
    ASSERT_TRUE(job && *job);
    (*job)->map_budget_bytes = 1 << 20;
    (*job)->max_output_bytes = 1 << 20;
    ASSERT_FALSE(run_clean(**job, {}));
    ASSERT_EQ((*job)->outputs.size(), 1u);
    auto& out = (*job)->outputs[0];
    auto& head = (*job)->sources[out.first];
    auto swap = d.path() / (segment_file_name(head.base, log_file_suffix) + ".swap");
    auto& sys = default_file_system();
    if (s >= after_swap_rename) {
      ASSERT_FALSE(sys.rename(out.file, swap));
    }
    if (s >= after_replaced_segments_removed) {
      for (size_t k = 1; k < out.count; ++k)
        for (auto suffix : {log_file_suffix, index_file_suffix, time_index_file_suffix}) {
          ASSERT_FALSE(sys.remove(d.path()
                                  / segment_file_name((*job)->sources[out.first + k].base,
                                                      suffix)));
        }
    }
    if (s >= after_first_indexes_removed) {
      for (auto suffix : {index_file_suffix, time_index_file_suffix}) {
        ASSERT_FALSE(sys.remove(d.path() / segment_file_name(head.base, suffix)));
      }
    }
    if (s >= after_final_rename) {
      ASSERT_FALSE(sys.rename(swap, d.path() / segment_file_name(head.base,
                                                                 log_file_suffix)));
    }
    // The crash: the log goes away without end_clean.
    log.reset();
    auto reopened = partition_log::open(d.path(), cfg, &ck, nullptr, clock.fn());
    ASSERT_TRUE(reopened) << describe(reopened.error());
    auto& again = **reopened;
    EXPECT_EQ(again.log_end(), end);
    auto recs = read_all(again);
    expect_increasing(recs);
    EXPECT_EQ(latest(recs), want);
    std::set<int64_t> offsets;
    for (auto& r : recs)
      EXPECT_TRUE(offsets.insert(r.offset).second) << "offset " << r.offset << " twice";
    if (s == after_cleaned_written)
      EXPECT_EQ(recs.size(), 120u); // not committed: the old segments
    else
      EXPECT_EQ(recs.size(), 6u) << (recs.empty() ? -1 : recs.front().offset);   // committed
    for (auto& e : fs::directory_iterator(d.path())) {
      auto name = e.path().filename().string();
      EXPECT_FALSE(name.ends_with(".cleaned") || name.ends_with(".swap")) << name;
    }
  }
}

TEST_F(log_cleaner_test, a_failing_file_layer_mid_swap_fences_the_log_and_reopening_repairs_it) {
  fault_injecting_file_system ffs{&default_file_system()};
  auto cfg = config();
  auto log = open(cfg, &ffs);
  auto want = fill(*log, 6, 20);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  ASSERT_FALSE(log->checkpoint());
  // A failed rename at the commit point: the clean fails, the log stops
  // writing (its files may be half swapped), reads still work.
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job && *job);
  (*job)->map_budget_bytes = 1 << 20;
  ASSERT_FALSE(run_clean(**job, {}));
  ffs.fail_renames(true);
  auto st = log->end_clean(**job, caf::error{});
  EXPECT_FALSE(st);
  ffs.fail_renames(false);
  auto b = batch_of({{"x", "y"}}, clock.now);
  EXPECT_FALSE(log->append(std::span<char>{b.data(), b.size()}));
  log.reset();
  auto again = open(cfg, &ffs);
  ASSERT_TRUE(again);
  EXPECT_EQ(latest(read_all(*again)), want);
  // The next clean works.
  ASSERT_TRUE(clean(*again));
  EXPECT_EQ(read_all(*again).size(), 6u);
  // A full disk while writing the cleaned file: nothing is swapped, no
  // .cleaned file stays.
  fill(*again, 6, 20);
  ASSERT_FALSE(again->roll());
  again->set_high_watermark(again->log_end());
  auto job2 = again->begin_clean(clock.now);
  ASSERT_TRUE(job2 && *job2);
  (*job2)->map_budget_bytes = 1 << 20;
  ffs.set_space_left(100);
  auto err = run_clean(**job2, {});
  ffs.set_space_left(std::nullopt);
  EXPECT_TRUE(is(err, ec::disk_full)) << describe(err);
  EXPECT_FALSE(again->end_clean(**job2, std::move(err)));
  for (auto& name : files())
    EXPECT_FALSE(name.ends_with(".cleaned")) << name;
  EXPECT_EQ(latest(read_all(*again)).size(), 6u);
}

TEST_F(log_cleaner_test, retention_during_a_clean_discards_the_clean) {
  auto cfg = config();
  auto log = open(cfg);
  auto want = fill(*log, 6, 20);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job && *job);
  (*job)->map_budget_bytes = 1 << 20;
  ASSERT_FALSE(run_clean(**job, {}));
  // Meanwhile the log start moves past the first segment.
  ASSERT_FALSE(log->advance_log_start((*job)->sources[1].base));
  auto outputs = (*job)->outputs.size();
  ASSERT_GT(outputs, 1u);
  auto size_before = log->size_bytes();
  auto st = log->end_clean(**job, caf::error{});
  ASSERT_TRUE(st) << describe(st.error());
  // The first cleaned file replaced a segment that is gone: dropped. The
  // others replaced segments that are still there: swapped in.
  EXPECT_GT(st->bytes_reclaimed, 0u);
  EXPECT_EQ(log->size_bytes(), size_before - st->bytes_reclaimed);
  EXPECT_EQ(log->log_start(), (*job)->sources[1].base);
  for (auto& name : files())
    EXPECT_FALSE(name.ends_with(".cleaned") || name.ends_with(".swap")) << name;
  auto recs = read_all(*log);
  expect_increasing(recs);
  EXPECT_EQ(latest(recs), want);
}

TEST_F(log_cleaner_test, a_log_that_is_not_compacted_never_cleans) {
  auto cfg = config();
  cfg.compaction.compact = false;
  auto log = open(cfg);
  fill(*log, 4, 40);
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job);
  EXPECT_FALSE(*job);
  EXPECT_EQ(log->cleaning().dirty_ratio, 0.0);
}

TEST_F(log_cleaner_test, min_compaction_lag_keeps_young_segments_dirty) {
  auto cfg = config();
  cfg.compaction.min_compaction_lag = std::chrono::milliseconds{60'000};
  auto log = open(cfg);
  fill(*log, 4, 40);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job);
  EXPECT_FALSE(*job);
  clock.now += 60'000;
  auto st = clean(*log);
  ASSERT_TRUE(st);
  EXPECT_EQ(read_all(*log).size(), 4u);
}

TEST_F(log_cleaner_test, the_dirty_ratio_follows_new_data) {
  auto cfg = config();
  cfg.compaction.min_cleanable_dirty_ratio = 0.5;
  auto log = open(cfg);
  fill(*log, 4, 40);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  EXPECT_DOUBLE_EQ(log->cleaning().dirty_ratio, 1.0);
  ASSERT_TRUE(clean(*log));
  EXPECT_DOUBLE_EQ(log->cleaning().dirty_ratio, 0.0);
  // A little new data: dirty, but below the ratio, so no clean yet.
  fill(*log, 1, 1);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  auto c = log->cleaning();
  EXPECT_GT(c.dirty_ratio, 0.0);
  EXPECT_LT(c.dirty_ratio, 0.5);
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job);
  EXPECT_FALSE(*job);
}

TEST_F(log_cleaner_test, the_cleaner_thread_runs_jobs_and_reports_them) {
  auto log = open(config());
  auto want = fill(*log, 5, 30);
  ASSERT_FALSE(log->roll());
  log->set_high_watermark(log->log_end());
  log_cleaner_options opts;
  opts.threads = 0;
  log_cleaner cleaner{opts};
  auto job = log->begin_clean(clock.now);
  ASSERT_TRUE(job && *job);
  auto shared = std::make_shared<clean_job>(std::move(**job));
  shared->map_budget_bytes = cleaner.dedupe_buffer_bytes();
  std::optional<caf::error> result;
  cleaner.submit(shared, {}, [&](caf::error err) { result = std::move(err); });
  EXPECT_FALSE(result);
  EXPECT_EQ(cleaner.run_pending(), 1u);
  ASSERT_TRUE(result);
  auto st = log->end_clean(*shared, std::move(*result));
  ASSERT_TRUE(st);
  cleaner.count_swapped(*st);
  auto s = cleaner.stats();
  EXPECT_EQ(s.runs, 1u);
  EXPECT_GT(s.bytes_read, 0u);
  EXPECT_GT(s.bytes_reclaimed, 0u);
  EXPECT_EQ(s.records_removed, 150u - 5u);
  EXPECT_EQ(latest(read_all(*log)), want);
}

} // namespace
