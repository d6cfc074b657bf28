#pragma once
// log_cleaner: log compaction (cleanup.policy=compact), Kafka's cleaner in
// Ferry's storage layer. No actor code.
//
// A clean is a clean_job (partition_log.hpp) in three steps:
//   1. partition_log::begin_clean, on the log owner's thread, picks the
//      closed segments below the high watermark and opens them for reading.
//   2. run_clean, on the cleaner's thread (or any), builds a map key ->
//      latest offset over the dirty section, then rewrites the segments from
//      the log start to the end of the mapped section into
//      <base>.log.cleaned files: a record stays if it is the latest of its
//      key (or lies past the mapped section); a tombstone (null value) also
//      goes once its timestamp is delete.retention.ms old; a record without
//      a key goes. Batches keep their offsets (the log gets gaps), a batch
//      whose every record went disappears, except the last batch of an
//      idempotent producer (kept as a bare header so a compacted partition
//      still deduplicates its retries) and the last batch of a cleaned file
//      (so a closed segment always ends with its last offset: no reader or
//      follower waits in a gap before the next segment, and no cleaned file
//      is empty). A file none of whose records went is not rewritten.
//   3. partition_log::end_clean, on the owner's thread, swaps the files in
//      (FORMAT.md, "Compaction": crash-safe at every step).
//
// log_cleaner runs step 2 for every log of a node on one thread, throttled
// to a byte rate (ferryd --cleaner-io-max-bytes-per-second), like Kafka's
// log.cleaner.io.max.bytes.per.second.

#include "broker/error.hpp"
#include "broker/partition_log.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace ferry {

/// Limits the bytes per second read plus written. Thread-safe.
class io_throttle {
public:
  /// 0: unlimited.
  explicit io_throttle(uint64_t bytes_per_second = 0);

  /// Accounts `bytes`, sleeping first if the rate would be exceeded.
  void consume(uint64_t bytes);

private:
  std::atomic<uint64_t> rate_;
  mutable std::mutex mtx_;
  std::chrono::steady_clock::time_point window_start_;
  uint64_t window_bytes_ = 0;
};

/// Producer id -> the last offset of that producer's newest batch in the
/// log (from the partition's producer state): such a batch is never
/// removed entirely.
using producer_last_offsets = std::unordered_map<int64_t, int64_t>;

/// Step 2 of a clean (see the file comment). Fills job.mapped_end,
/// job.outputs, job.next_tombstone_expiry and job.stats. `throttle` may be
/// null; `cancel` (may be null) stops the clean early with ec::log_closed.
/// On error every .cleaned file it wrote is removed.
caf::error run_clean(clean_job& job, const producer_last_offsets& producers,
                     io_throttle* throttle = nullptr,
                     const std::atomic<bool>* cancel = nullptr);

/// The last offset of the last complete batch in `file` (a .log.swap being
/// recovered), or nullopt if it holds none.
caf::expected<std::optional<offset>>
last_offset_in_file(file_system& fs, const std::filesystem::path& file,
                    size_t max_batch_bytes);

struct log_cleaner_options {
  /// 0: no thread; run_pending() runs the queued cleans on the caller's
  /// thread (deterministic tests). Otherwise one thread (Kafka's default).
  size_t threads = 1;
  /// Bytes read plus written per second over all cleans; 0 = unlimited.
  uint64_t io_max_bytes_per_second = 0;
  /// The key map's budget per clean (Kafka's log.cleaner.dedupe.buffer.size).
  uint64_t dedupe_buffer_bytes = uint64_t{128} << 20;
};

/// Totals since start (for metrics).
struct log_cleaner_stats {
  uint64_t runs = 0;
  uint64_t failures = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  /// Bytes read minus bytes written by the cleans that swapped files in.
  uint64_t bytes_reclaimed = 0;
  uint64_t records_removed = 0;
  uint64_t queued = 0;
  /// Seconds of the last run.
  double last_run_seconds = 0;
};

class log_cleaner {
public:
  using done_fn = std::function<void(caf::error)>;

  explicit log_cleaner(log_cleaner_options opts = {});
  ~log_cleaner();
  log_cleaner(const log_cleaner&) = delete;
  log_cleaner& operator=(const log_cleaner&) = delete;

  /// Queues `job`; `done` runs on the cleaner's thread once run_clean
  /// finished (it must only hand the result over, e.g. send a message; the
  /// job then belongs to the owner again). Jobs still queued when the
  /// cleaner stops get ec::log_closed.
  void submit(std::shared_ptr<clean_job> job, producer_last_offsets producers,
              done_fn done);

  /// With threads == 0: runs every queued job now. Returns the jobs run.
  size_t run_pending();

  /// The owner swapped a clean in: counts its reclaimed bytes.
  void count_swapped(const clean_stats& stats);

  uint64_t dedupe_buffer_bytes() const { return opts_.dedupe_buffer_bytes; }
  log_cleaner_stats stats() const;

private:
  struct entry {
    std::shared_ptr<clean_job> job;
    producer_last_offsets producers;
    done_fn done;
  };

  void run();
  void run_one(entry& e);

  log_cleaner_options opts_;
  io_throttle throttle_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<entry> queue_;
  log_cleaner_stats stats_;
  std::thread worker_;
};

} // namespace ferry
