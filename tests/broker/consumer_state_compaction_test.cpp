// __consumer_state compacted (broker/consumer_state.hpp with the cleaner of
// broker/log_cleaner.hpp): a log of every kind of record, cleaned again and
// again while tombstones expire, always replays to the state the whole log
// gave; and a group that committed a million times replays a handful of
// records, like a fresh group.

#include "broker/consumer_state.hpp"

#include "broker/dlq_store.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/partition_log.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/record_batch.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace ferry;
namespace qf = ferry::queue_state_format;

namespace {

using kind = consumer_state_kind;

/// A node's stores: what a replica applies the log to.
struct stores {
  explicit stores(const std::filesystem::path& dir) {
    lmdb::env_options o;
    o.initial_map_size = size_t{1} << 20;
    o.no_sync = true;
    auto s = metadata_store::open(dir, o);
    EXPECT_TRUE(s) << describe(s.error());
    md = std::move(*s);
    offsets = std::make_unique<offset_store>(*md);
  }

  /// Every row of every sub-database a record may write.
  std::map<std::string, std::string> dump() {
    std::map<std::string, std::string> out;
    for (auto db : {offset_format::offsets_db, offset_format::groups_db,
                    qf::queue_db, qf::groups_db, qf::producers_db,
                    dlq_store_format::marks_db, dlq_store_format::producers_db}) {
      auto err = md->scan_prefix(db, "", [&](std::string_view k, std::string_view v) {
        out[std::string{db} + "/" + std::string{k}] = std::string{v};
        return true;
      });
      EXPECT_FALSE(err) << describe(err);
    }
    return out;
  }

  std::unique_ptr<metadata_store> md;
  std::unique_ptr<offset_store> offsets;
};

struct manual_clock {
  timestamp_ms now = 1'000'000;
  clock_fn fn() {
    return [this] { return now; };
  }
};

class consumer_state_compaction : public ::testing::Test {
protected:
  log_config config(uint64_t segment_bytes) {
    log_config cfg;
    cfg.segment_bytes = segment_bytes;
    cfg.retention_ms = std::chrono::milliseconds{-1};
    cfg.compaction.compact = true;
    cfg.compaction.min_cleanable_dirty_ratio = 0.01;
    cfg.compaction.delete_retention = std::chrono::milliseconds{10'000};
    return cfg;
  }

  std::unique_ptr<partition_log> open(uint64_t segment_bytes) {
    auto log = partition_log::open(dir.path() / "log", config(segment_bytes),
                                   &ckpt, nullptr, clock.fn());
    EXPECT_TRUE(log) << describe(log.error());
    return log ? std::move(*log) : nullptr;
  }

  void append(partition_log& log, std::string batch) {
    auto r = log.append(std::span<char>{batch.data(), batch.size()});
    ASSERT_TRUE(r) << describe(r.error());
  }

  /// begin_clean + run_clean + end_clean, keeping format-1 keys as ferryd
  /// does; false if no clean was due.
  bool clean(partition_log& log) {
    log.set_high_watermark(log.log_end());
    auto job = log.begin_clean(clock.now);
    EXPECT_TRUE(job) << describe(job.error());
    if (!job || !*job)
      return false;
    (*job)->map_budget_bytes = uint64_t{64} << 20;
    (*job)->keep_key = [](std::string_view k) {
      return consumer_state_legacy_key(k);
    };
    auto err = run_clean(**job, {});
    auto st = log.end_clean(**job, std::move(err));
    EXPECT_TRUE(st) << describe(st.error());
    return static_cast<bool>(st);
  }

  /// The whole log from its start.
  std::string read_log(partition_log& log) {
    std::string out;
    for (auto at = log.log_start(); at < log.log_end();) {
      auto rd = log.read(at, size_t{1} << 20, log.log_end());
      EXPECT_TRUE(rd) << describe(rd.error());
      if (!rd || rd->data.empty())
        break;
      out += rd->data;
      at = rd->next_offset;
    }
    return out;
  }

  /// A replica's replay of the log into `s`: the log records it read.
  size_t replay(partition_log& log, stores& s) {
    auto n = apply_consumer_state(*s.offsets, *s.md, read_log(log));
    EXPECT_TRUE(n) << describe(n.error());
    return n ? *n : 0;
  }

  ferry::test::temp_dir dir{"ferry-consumer-state-compaction"};
  memory_checkpoint ckpt;
  manual_clock clock;
};

queue_record row(int64_t off, int choice, int64_t n) {
  queue_record r;
  r.off = offset{off};
  switch (choice % 4) {
    case 0:
      r.phase = queue_record_phase::retry;
      r.attempts = 1 + static_cast<int32_t>(n % 3);
      r.first_failure = n;
      r.last_failure = n;
      r.available_at = n + 100;
      r.last_error = "boom " + std::to_string(n);
      break;
    case 1:
      r.phase = queue_record_phase::leased;
      r.attempts = 1;
      r.member = "m" + std::to_string(n % 3);
      r.lease_id = static_cast<uint64_t>(n);
      r.deadline = n + 30'000;
      break;
    case 2:
      r.phase = queue_record_phase::done;
      break;
    default:
      r.phase = queue_record_phase::dead_letter;
      r.attempts = 5;
      r.first_failure = n;
      r.last_failure = n;
      r.last_error = "poison";
      break;
  }
  return r;
}

} // namespace

// Every kind of record, in a seeded random order, with a clean after every
// few hundred batches and the clock passing delete.retention.ms several
// times: after each clean a replay of what is left, into empty stores and
// into the node's own (a restart), gives the state the whole log gave.
TEST_F(consumer_state_compaction, a_cleaned_log_replays_to_the_same_state) {
  auto log = open(16 << 10);
  ASSERT_TRUE(log);
  stores node{dir.path() / "node"};
  std::mt19937 rng{20261204};
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::map<std::string, int64_t> position;   // queue group/partition -> committed
  std::map<int, int64_t> dlq_before;         // DLQ partition -> last purge
  int64_t counter = 0;
  size_t written = 0;
  size_t cleans = 0;
  for (int step = 0; step < 4000; ++step) {
    ++counter;
    std::vector<consumer_state_record> recs;
    auto op = pick(100);
    if (op < 35) { // a stream commit of one to three partitions
      consumer_state_record x;
      x.kind = kind::commit;
      x.group = "s" + std::to_string(pick(3));
      for (int p = pick(4), n = 1 + pick(3); n > 0; --n, p = (p + 1) % 4) {
        committed_offset o;
        o.topic = "t";
        o.partition = partition_id{p};
        o.committed = offset{counter};
        o.commit_timestamp = clock.now;
        x.offsets.push_back(o);
      }
      recs.push_back(std::move(x));
    } else if (op < 70) { // a queue change set
      consumer_state_record x;
      x.kind = kind::queue_partition;
      x.group = "q" + std::to_string(pick(2));
      x.topic = "t";
      x.partition = partition_id{pick(2)};
      auto& pos = position[x.group + "/" + std::to_string(x.partition.value)];
      if (pick(4) == 0)
        pos += pick(6);
      x.changes.committed = offset{pos};
      x.changes.full = pick(20) == 0;
      std::set<int64_t> used;
      for (int n = pick(5); n > 0; --n) {
        auto off = pos - 2 + pick(30);
        if (off >= 0 && used.insert(off).second)
          x.changes.upserts.push_back(row(off, pick(4), counter));
      }
      if (!x.changes.full)
        for (int n = pick(3); n > 0; --n) {
          auto off = pos + pick(30);
          if (used.insert(off).second)
            x.changes.erased.push_back(offset{off});
        }
      recs.push_back(std::move(x));
    } else if (op < 75) { // a queue group config
      consumer_state_record x;
      x.kind = kind::queue_group;
      x.group = "q" + std::to_string(pick(2));
      x.row = "config-" + std::to_string(counter);
      recs.push_back(std::move(x));
    } else if (op < 77) { // a queue group deleted
      consumer_state_record x;
      x.kind = kind::queue_group_delete;
      x.group = "q" + std::to_string(pick(2));
      recs.push_back(std::move(x));
    } else if (op < 79) { // a queue partition erased (its topic went)
      consumer_state_record x;
      x.kind = kind::queue_partition_erase;
      x.group = "q" + std::to_string(pick(2));
      x.topic = "t";
      x.partition = partition_id{pick(2)};
      position.erase(x.group + "/" + std::to_string(x.partition.value));
      recs.push_back(std::move(x));
    } else if (op < 83) { // a queue DLQ producer row
      consumer_state_record x;
      x.kind = kind::queue_dlq_producer;
      x.group = "q" + std::to_string(pick(2));
      x.topic = "t";
      x.partition = partition_id{pick(2)};
      x.row = "producer-" + std::to_string(counter);
      recs.push_back(std::move(x));
    } else if (op < 85) { // a stream group deleted, as group_coordinator does
      auto group = "s" + std::to_string(pick(3));
      auto committed = node.offsets->fetch(group);
      ASSERT_TRUE(committed);
      if (!committed->empty()) {
        consumer_state_record erase;
        erase.kind = kind::commit;
        erase.group = group;
        erase.erase = true;
        erase.offsets = *committed;
        recs.push_back(std::move(erase));
      }
      consumer_state_record del;
      del.kind = kind::stream_group_delete;
      del.group = group;
      recs.push_back(std::move(del));
    } else if (op < 94) { // a DLQ redrive mark
      consumer_state_record x;
      x.kind = kind::dlq_mark;
      x.topic = "d";
      x.group = dlq_home_key(x.topic);
      x.partition = partition_id{pick(2)};
      x.off = offset{dlq_before[x.partition.value] + pick(40)};
      x.mark = redrive_mark{clock.now, "t", partition_id{0}, offset{counter}};
      recs.push_back(std::move(x));
    } else if (op < 97) { // a DLQ redrive producer row
      consumer_state_record x;
      x.kind = kind::dlq_producer;
      x.topic = "d";
      x.group = dlq_home_key(x.topic);
      x.partition = partition_id{pick(2)};
      x.target_topic = "t";
      x.target_partition = partition_id{pick(2)};
      x.producer = redrive_producer{producer_id{counter}, 0, offset{counter},
                                    static_cast<int32_t>(counter % 1000)};
      recs.push_back(std::move(x));
    } else if (op < 99) { // a DLQ purge: marks below its (rising) start go
      consumer_state_record x;
      x.kind = kind::dlq_erase_below;
      x.topic = "d";
      x.group = dlq_home_key(x.topic);
      x.partition = partition_id{pick(2)};
      auto& before = dlq_before[x.partition.value];
      before += pick(20);
      x.off = offset{before};
      recs.push_back(std::move(x));
    } else { // the DLQ topic deleted
      consumer_state_record x;
      x.kind = kind::dlq_topic_erase;
      x.topic = "d";
      x.group = dlq_home_key(x.topic);
      recs.push_back(std::move(x));
    }
    auto batch = make_consumer_state_batch(recs, clock.now);
    ASSERT_TRUE(batch) << describe(batch.error());
    // The node applies what it appends.
    auto n = apply_consumer_state(*node.offsets, *node.md, *batch);
    ASSERT_TRUE(n) << "step " << step << ": " << describe(n.error());
    written += *n;
    append(*log, *batch);
    clock.now += 10;
    if (step % 400 == 399) {
      ASSERT_FALSE(log->roll());
      if (clean(*log))
        ++cleans;
      auto want = node.dump();
      stores fresh{dir.path() / ("fresh-" + std::to_string(step))};
      replay(*log, fresh);
      ASSERT_EQ(fresh.dump(), want) << "after step " << step;
      replay(*log, node); // a restart of the node itself
      ASSERT_EQ(node.dump(), want) << "after step " << step;
    }
  }
  // Every tombstone expires, and one last clean.
  clock.now += 60'000;
  ASSERT_FALSE(log->roll());
  ASSERT_TRUE(clean(*log));
  ++cleans;
  auto want = node.dump();
  stores fresh{dir.path() / "fresh-end"};
  auto left = replay(*log, fresh);
  EXPECT_EQ(fresh.dump(), want);
  EXPECT_GE(cleans, 5u);
  // Most of the history went: what is left is about the live rows.
  EXPECT_LT(left, written / 4) << left << " of " << written << " records left";
  // Nothing is left of a tombstone once it expired: every record left is a
  // live row or a kept erase ('G', 'F', 'E', 'B', 'T') or the last batch of
  // a cleaned file.
  auto recs = decode_consumer_state_batches(read_log(*log));
  ASSERT_TRUE(recs);
  EXPECT_GT(recs->size(), 0u);
}

// Issue 19's restart case: a group that committed 1,000,000 times (one
// partition of four per commit, as a consumer committing after each poll).
// After a clean the log a restarting node replays holds a few records per
// live key, like a fresh group's, and they give the last offsets.
TEST_F(consumer_state_compaction, a_million_commits_replay_like_a_fresh_group) {
  auto log = open(static_cast<uint64_t>(consumer_state_segment_bytes));
  ASSERT_TRUE(log);
  constexpr int64_t commits = 1'000'000;
  committed_offset o;
  o.topic = "orders";
  for (int64_t i = 0; i < commits; ++i) {
    o.partition = partition_id{static_cast<int32_t>(i % 4)};
    o.committed = offset{i / 4 + 1};
    o.commit_timestamp = clock.now;
    auto b = make_commit_batch("busy", {o}, clock.now);
    ASSERT_TRUE(b);
    append(*log, std::move(*b));
  }
  auto segments = log->segment_count();
  EXPECT_GT(segments, 10u);
  // The active segment rolls (segment.ms), then the cleaner runs.
  ASSERT_FALSE(log->roll());
  ASSERT_TRUE(clean(*log));
  stores restarted{dir.path() / "restarted"};
  auto replayed = replay(*log, restarted);
  // A fresh group: one commit per partition.
  stores fresh{dir.path() / "fresh"};
  std::string fresh_log;
  for (int32_t p = 0; p < 4; ++p) {
    o.partition = partition_id{p};
    o.committed = offset{1};
    fresh_log += *make_commit_batch("fresh", {o}, clock.now);
  }
  auto fresh_replayed = apply_consumer_state(*fresh.offsets, *fresh.md, fresh_log);
  ASSERT_TRUE(fresh_replayed);
  EXPECT_EQ(*fresh_replayed, 4u);
  // The 4 live commits, plus at most the last batch of each cleaned file
  // (a closed segment keeps its last offset).
  EXPECT_LE(replayed, *fresh_replayed + segments) << replayed << " records replayed";
  auto offs = restarted.offsets->fetch("busy");
  ASSERT_TRUE(offs);
  ASSERT_EQ(offs->size(), 4u);
  for (auto& c : *offs)
    EXPECT_EQ(c.committed, offset{commits / 4}) << "partition " << c.partition.value;
}
