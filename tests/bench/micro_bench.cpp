// ferry-micro-bench (Google Benchmark): the codec's hot paths.

#include "broker/consumer_state.hpp"
#include "broker/crc32c.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <benchmark/benchmark.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>
#include <unistd.h>
#include <string>
#include <vector>

using namespace ferry;

namespace {

std::vector<record> make_records(size_t n, size_t value_bytes) {
  std::mt19937_64 rng{7};
  std::vector<record> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].offset_delta = static_cast<int32_t>(i);
    out[i].timestamp = 1'700'000'000'000 + static_cast<int64_t>(i);
    out[i].key = "key-" + std::to_string(i);
    std::string v(value_bytes, '\0');
    for (auto& c : v)
      c = static_cast<char>('a' + rng() % 16); // compressible-ish text
    out[i].value = std::move(v);
    out[i].headers.push_back({"trace", std::string("abc")});
  }
  return out;
}

void BM_crc32c(benchmark::State& st) {
  std::string buf(static_cast<size_t>(st.range(0)), 'x');
  for (auto _ : st)
    benchmark::DoNotOptimize(crc32c(buf.data(), buf.size()));
  st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32c)->Arg(1024)->Arg(64 * 1024);

void BM_crc32c_portable(benchmark::State& st) {
  std::string buf(static_cast<size_t>(st.range(0)), 'x');
  for (auto _ : st)
    benchmark::DoNotOptimize(crc32c_portable(buf.data(), buf.size()));
  st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32c_portable)->Arg(64 * 1024);

void BM_encode(benchmark::State& st) {
  auto recs = make_records(64, 1024);
  batch_meta meta;
  meta.codec = static_cast<compression>(st.range(0));
  size_t bytes = 0;
  for (auto _ : st) {
    auto b = encode_batch(meta, recs);
    bytes = b->size();
    benchmark::DoNotOptimize(b);
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * 64);
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * 1024);
  st.counters["batch_bytes"] = double(bytes);
}
BENCHMARK(BM_encode)->Arg(0)->Arg(3)->Arg(4);

void BM_decode(benchmark::State& st) {
  auto recs = make_records(64, 1024);
  batch_meta meta;
  meta.codec = static_cast<compression>(st.range(0));
  auto b = encode_batch(meta, recs);
  for (auto _ : st)
    benchmark::DoNotOptimize(decode_batch(*b));
  st.SetItemsProcessed(int64_t(st.iterations()) * 64);
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * 1024);
}
BENCHMARK(BM_decode)->Arg(0)->Arg(3)->Arg(4);

void BM_parse_header_and_crc(benchmark::State& st) {
  auto b = encode_batch(batch_meta{}, make_records(64, 1024));
  for (auto _ : st) {
    auto h = parse_batch_header(*b);
    benchmark::DoNotOptimize(h);
    benchmark::DoNotOptimize(verify_batch_crc(*b));
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(b->size()));
}
BENCHMARK(BM_parse_header_and_crc);

// -- log compaction -------------------------------------------------------------

/// A scratch directory under $TMPDIR (default /tmp), removed afterwards.
struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const char* name) {
    const char* tmp = std::getenv("TMPDIR");
    path = std::filesystem::path{tmp ? tmp : "/tmp"}
           / (std::string{name} + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
};

/// A compacted log with `mb` MiB of 1 KB updates of `keys` keys, 64 records
/// per batch, 16 MiB segments, all closed and committed.
std::unique_ptr<partition_log> dirty_log(const std::filesystem::path& dir,
                                         partition_checkpoint& ck, int mb,
                                         int keys, int64_t& source_bytes) {
  std::filesystem::remove_all(dir);
  log_config cfg;
  cfg.segment_bytes = 16u << 20;
  cfg.retention_ms = std::chrono::milliseconds{-1};
  cfg.compaction.compact = true;
  cfg.compaction.min_cleanable_dirty_ratio = 0;
  auto log = std::move(*partition_log::open(dir, cfg, &ck));
  std::mt19937_64 rng{11};
  auto recs = make_records(64, 1024);
  int64_t bytes = 0;
  while (bytes < int64_t{mb} << 20) {
    for (auto& r : recs)
      r.key = "key-" + std::to_string(rng() % static_cast<uint64_t>(keys));
    auto b = *encode_batch(batch_meta{}, recs);
    (void) log->append(std::span<char>{b.data(), b.size()});
    bytes += static_cast<int64_t>(b.size());
  }
  (void) log->roll();
  (void) log->flush();
  log->set_high_watermark(log->log_end());
  source_bytes = static_cast<int64_t>(log->size_bytes());
  return log;
}

/// One whole clean (map, rewrite, swap) of 128 MiB of updates of
/// state.range(0) keys. Bytes processed: the segments cleaned.
void BM_clean(benchmark::State& st) {
  scratch_dir d{"ferry-bench-clean"};
  int64_t total = 0;
  for (auto _ : st) {
    st.PauseTiming();
    memory_checkpoint ck;
    int64_t bytes = 0;
    auto log = dirty_log(d.path, ck, 128, static_cast<int>(st.range(0)), bytes);
    st.ResumeTiming();
    auto job = log->begin_clean(system_now_ms());
    job->value().map_budget_bytes = 128u << 20;
    auto err = run_clean(job->value(), {});
    auto done = log->end_clean(job->value(), std::move(err));
    benchmark::DoNotOptimize(done);
    total += bytes;
  }
  st.SetBytesProcessed(total);
}
BENCHMARK(BM_clean)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond)->Iterations(3);

/// Durable appends (1 MiB per fdatasync, 64 KB batches) to one log, alone
/// (arg 0), or next to a second thread that over and over writes 64 MiB of
/// keyed updates to another log on the same disk and cleans them (arg 1),
/// or only writes them (arg 2). Arg 1 against arg 2 is what the cleaner
/// costs the produce path of its node.
void BM_append_while_cleaning(benchmark::State& st) {
  scratch_dir d{"ferry-bench-clean-append"};
  std::atomic<bool> stop{false};
  std::thread cleaner;
  bool clean = st.range(0) == 1;
  if (st.range(0) >= 1)
    cleaner = std::thread{[&, clean] {
      while (!stop) {
        memory_checkpoint ck;
        int64_t bytes = 0;
        auto log = dirty_log(d.path / "compacted", ck, 64, 1000, bytes);
        if (!clean)
          continue;
        auto job = log->begin_clean(system_now_ms());
        if (!job || !*job)
          continue;
        job->value().map_budget_bytes = 64u << 20;
        auto err = run_clean(job->value(), {});
        (void) log->end_clean(job->value(), std::move(err));
      }
    }};
  memory_checkpoint ck;
  log_config cfg;
  cfg.segment_bytes = 256u << 20;
  auto log = std::move(*partition_log::open(d.path / "produce", cfg, &ck));
  auto batch = *encode_batch(batch_meta{}, make_records(64, 1024));
  int64_t bytes = 0;
  for (auto _ : st) {
    for (int i = 0; i < 16; ++i) {
      std::string b = batch;
      (void) log->append(std::span<char>{b.data(), b.size()});
      bytes += static_cast<int64_t>(b.size());
    }
    (void) log->flush();
  }
  stop = true;
  if (cleaner.joinable())
    cleaner.join();
  st.SetBytesProcessed(bytes);
}
BENCHMARK(BM_append_while_cleaning)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
  ->MinTime(5.0)->UseRealTime();

// -- __consumer_state restart ---------------------------------------------------

/// A __consumer_state log (its 4 MiB segments) holding `commits` commits of
/// one group, one partition of four each; rolled and committed, and cleaned
/// when `compact`.
std::unique_ptr<partition_log> commit_log(const std::filesystem::path& dir,
                                          partition_checkpoint& ck,
                                          int64_t commits, bool compact) {
  std::filesystem::remove_all(dir);
  log_config cfg;
  cfg.segment_bytes = static_cast<uint64_t>(consumer_state_segment_bytes);
  cfg.retention_ms = std::chrono::milliseconds{-1};
  cfg.compaction.compact = true;
  auto log = std::move(*partition_log::open(dir, cfg, &ck));
  committed_offset o;
  o.topic = "orders";
  for (int64_t i = 0; i < commits; ++i) {
    o.partition = partition_id{static_cast<int32_t>(i % 4)};
    o.committed = offset{i / 4 + 1};
    auto b = *make_commit_batch("busy", {o}, 1'700'000'000'000);
    (void) log->append(std::span<char>{b.data(), b.size()});
  }
  (void) log->roll();
  (void) log->flush();
  log->set_high_watermark(log->log_end());
  if (compact) {
    auto job = log->begin_clean(system_now_ms());
    if (job && *job) {
      job->value().map_budget_bytes = 128u << 20;
      auto err = run_clean(job->value(), {});
      (void) log->end_clean(job->value(), std::move(err));
    }
  }
  return log;
}

/// A node's start-up replay of its __consumer_state partition into LMDB
/// (synced, as ferryd opens it) after state.range(1) commits of one group:
///   arg 0 = 0: the log as it was before compaction, applied as before this
///              version (one LMDB transaction, so one fsync, per record);
///   arg 0 = 1: the same log, applied in one LMDB write group per 1 MiB read
///              (apply_consumer_state now);
///   arg 0 = 2: the log compacted, applied as now.
/// Items processed: the commits the log stands for.
void BM_consumer_state_restart(benchmark::State& st) {
  scratch_dir d{"ferry-bench-state-restart"};
  auto mode = st.range(0);
  auto commits = st.range(1);
  memory_checkpoint ck;
  auto log = commit_log(d.path / "log", ck, commits, mode == 2);
  int64_t replayed = 0;
  for (auto _ : st) {
    st.PauseTiming();
    std::filesystem::remove_all(d.path / "meta");
    auto md = std::move(*metadata_store::open(d.path / "meta"));
    offset_store offsets{*md};
    st.ResumeTiming();
    replayed = 0;
    for (auto at = log->log_start(); at < log->log_end();) {
      auto rd = log->read(at, size_t{1} << 20, log->log_end());
      if (!rd || rd->data.empty())
        break;
      if (mode == 0) {
        auto recs = decode_consumer_state_batches(rd->data);
        for (auto& x : *recs)
          (void) apply_consumer_state_record(offsets, *md, x);
        replayed += static_cast<int64_t>(recs->size());
      } else {
        replayed += static_cast<int64_t>(*apply_consumer_state(offsets, *md, rd->data));
      }
      at = rd->next_offset;
    }
  }
  st.counters["replayed_records"] = static_cast<double>(replayed);
  st.counters["log_MiB"] = static_cast<double>(log->size_bytes()) / (1 << 20);
  st.SetItemsProcessed(st.iterations() * commits);
}
BENCHMARK(BM_consumer_state_restart)
  ->Args({0, 20'000})->Args({1, 20'000})->Args({1, 1'000'000})->Args({2, 1'000'000})
  ->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

} // namespace
