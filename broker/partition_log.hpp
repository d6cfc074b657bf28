#pragma once
// partition_log: the append-only log of one partition replica, as a set of
// segment files (see FORMAT.md). Single-threaded: the owner (a partition
// actor) serialises every call. Not copyable.
//
// Lifecycle: open() recovers the directory (scans only the tail of the active
// segment, truncates a torn or corrupt tail, rebuilds missing or damaged
// indexes) -> append()/read()/flush() ... -> close() (flush + checkpoint).
//
// Durability (group commit): append() writes to the page cache and returns
// at once; flush() makes every append since the last flush durable with one
// fdatasync per touched file. durable_end() says which offsets are durable.
// flush_due() tells the owner when the configured policy wants a flush.

#include "broker/error.hpp"
#include "broker/model.hpp"
#include "broker/partition_checkpoint.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class file_handle;
class file_system;
class node_journal;

/// Milliseconds since the Unix epoch; injectable so tests control time.
using clock_fn = std::function<timestamp_ms()>;

/// The system clock as a clock_fn.
timestamp_ms system_now_ms();

/// When appended data must be made durable.
struct flush_policy {
  /// Flush once this many records are unflushed (1: before every ack).
  /// 0 disables the count trigger.
  uint64_t messages = 1;
  /// Flush once the oldest unflushed append is this old. 0 disables.
  std::chrono::milliseconds interval{0};
};

/// Log compaction (cleanup.policy=compact and Kafka's settings beside it).
/// The cleaner itself is broker/log_cleaner.hpp.
struct compaction_config {
  /// cleanup.policy contains "compact".
  bool compact = false;
  /// min.cleanable.dirty.ratio: clean once dirty bytes / cleanable bytes
  /// reaches this.
  double min_cleanable_dirty_ratio = 0.5;
  /// min.compaction.lag.ms: a segment whose newest record is younger stays
  /// dirty (and so does everything after it).
  std::chrono::milliseconds min_compaction_lag{0};
  /// max.compaction.lag.ms: a dirty segment whose newest record is older is
  /// cleaned whatever the dirty ratio.
  std::chrono::milliseconds max_compaction_lag{std::chrono::milliseconds::max()};
  /// delete.retention.ms: a tombstone (null value) stays readable this long
  /// after its timestamp.
  std::chrono::milliseconds delete_retention{std::chrono::hours{24}};
};

struct log_config {
  /// Roll to a new segment when the active one would exceed this size.
  uint64_t segment_bytes = 1ull << 30;
  /// Roll when the active segment's first append is older than this.
  std::chrono::milliseconds segment_ms = std::chrono::hours{24 * 7};
  /// Delete oldest segments while the log is larger. Negative: unlimited.
  int64_t retention_bytes = -1;
  /// Delete segments whose newest record is older. Negative: unlimited.
  std::chrono::milliseconds retention_ms = std::chrono::hours{24 * 7};
  /// One offset-index entry per this many bytes of batches.
  uint32_t index_interval_bytes = 4096;
  /// Largest batch append() accepts.
  uint32_t max_batch_bytes = 8u << 20;
  /// With a node journal: appended bytes the active segment keeps in memory
  /// before one pwrite writes them to its file (segment_options::
  /// defer_bytes; write_deferred()). 0: every append is written at once.
  size_t journal_defer_bytes = 0;
  flush_policy flush;
  compaction_config compaction;
};

/// What append() did.
struct append_info {
  offset base_offset{0};
  offset last_offset{0};
  timestamp_ms max_timestamp = 0;
  uint32_t records = 0;
  uint64_t bytes = 0;
};

/// What read() returns: whole batches, back to back.
struct read_result {
  /// Encoded batches. The first batch contains `from` (so it may start
  /// before it); readers skip records below the offset they asked for.
  std::string data;
  /// Offset after the last returned batch: where the next read continues.
  offset next_offset{0};
  /// Number of batches in `data`.
  uint32_t batches = 0;
};

/// A flush split in two (see partition_log::begin_flush).
struct flush_job {
  /// durable_end() once `file` is synced (the log end at begin_flush).
  offset end{0};
  /// The file to fdatasync; null when nothing needs a sync.
  std::shared_ptr<file_handle> file;
  /// The log's truncation count at begin_flush: a job that a truncation
  /// overtook covers nothing any more.
  uint64_t generation = 0;
  /// With a node journal (file null): durable_end() becomes `end` once the
  /// journal is durable up to this record (node_journal::when_durable).
  /// 0: nothing to wait for.
  uint64_t journal_seq = 0;
};

/// What open() found and repaired.
struct recovery_report {
  uint32_t segments = 0;
  /// Batches scanned in the active segment's tail.
  uint64_t batches_scanned = 0;
  /// Bytes cut off the end of the active segment (torn or corrupt tail).
  uint64_t bytes_truncated = 0;
  /// Indexes rebuilt because they were missing or damaged.
  uint32_t indexes_rebuilt = 0;
  /// Why the tail was cut ("" when nothing was cut): e.g. "crc_mismatch at
  /// position 4096".
  std::string reason;
};

/// What enforce_retention() removed.
struct retention_report {
  uint32_t segments_deleted = 0;
  uint64_t bytes_deleted = 0;
  offset new_log_start{0};
};

/// One closed segment a clean reads (see clean_job).
struct clean_source {
  offset base{0};
  /// The next segment's base: the offsets this segment covers end here.
  offset end{0};
  uint64_t size = 0;
  /// Opened for the clean (not the segment's own handle). With the POSIX
  /// file system it stays readable if retention removes the file meanwhile
  /// (the clean is then discarded anyway).
  std::shared_ptr<file_handle> log;
};

/// One cleaned file that replaces sources [first, first + count).
struct clean_output {
  size_t first = 0;
  size_t count = 0;
  /// <base>.log.cleaned in the log's directory, written and fdatasynced.
  std::filesystem::path file;
  uint64_t bytes = 0;
};

/// What a clean did (for metrics and tests).
struct clean_stats {
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t records_read = 0;
  uint64_t records_kept = 0;
  /// Keys mapped from the dirty section.
  uint64_t keys_mapped = 0;
  uint64_t tombstones_removed = 0;
  /// Records without a key (a compacted topic keeps none).
  uint64_t keyless_removed = 0;
  /// Batches kept as a bare header because every record went (the last
  /// batch of a producer, or of a cleaned file).
  uint64_t empty_batches_kept = 0;
  /// Bytes of the replaced segments minus bytes of the cleaned files
  /// (set by end_clean, for what it swapped in).
  uint64_t bytes_reclaimed = 0;
};

/// A clean in three steps, like a flush (begin_flush / end_flush), so the
/// owner's thread never does the heavy work: partition_log::begin_clean (the
/// owner's thread) picks the segments and opens them; run_clean
/// (broker/log_cleaner.hpp, any thread) reads them and writes the cleaned
/// files; partition_log::end_clean (the owner's thread) swaps them in.
struct clean_job {
  std::filesystem::path dir;
  file_system* fs = nullptr;
  /// Every closed segment from the log start up to the cleanable end.
  std::vector<clean_source> sources;
  /// Records at or above this are the dirty section: their keys are
  /// mapped, and an older record of a mapped key is removed.
  offset first_dirty{0};
  /// The cleaner's "now" (tombstone expiry).
  timestamp_ms now = 0;
  std::chrono::milliseconds delete_retention{0};
  /// A cleaned file holds at most this many bytes of source segments.
  uint64_t max_output_bytes = 0;
  size_t max_batch_bytes = 0;
  /// The key map's budget (key bytes plus ~48 bytes per key); a dirty
  /// section with more keys is cleaned up to where the map filled.
  uint64_t map_budget_bytes = 0;
  /// The log's truncation count at begin_clean.
  uint64_t generation = 0;
  /// A record whose key this returns true for is never removed (null:
  /// none); set by the owner for keys that do not name one row (e.g.
  /// __consumer_state's format-1 keys).
  std::function<bool(std::string_view key)> keep_key;
  // -- filled in by run_clean --
  /// The mapped section ended here (sources.back().end unless the map
  /// filled):
  /// the log's clean point after end_clean.
  offset mapped_end{0};
  std::vector<clean_output> outputs;
  /// The earliest time a kept tombstone expires (nullopt: none kept).
  std::optional<timestamp_ms> next_tombstone_expiry;
  clean_stats stats;
};

/// A compacted log's cleaning state, for metrics and describe.
struct cleaning_status {
  /// Offsets below are clean (each key there is its latest as of the last
  /// clean).
  offset clean_point{0};
  /// Bytes of cleanable segments at or above the clean point.
  uint64_t dirty_bytes = 0;
  /// Bytes of all cleanable segments (closed, below the HW).
  uint64_t cleanable_bytes = 0;
  /// dirty_bytes / cleanable_bytes (0 when nothing is cleanable).
  double dirty_ratio = 0;
  /// When the last clean finished (0: never since open).
  timestamp_ms last_clean_ms = 0;
  uint64_t cleans = 0;
  /// Bytes the cleans since open removed.
  uint64_t bytes_reclaimed = 0;
};

class partition_log {
public:
  /// Opens or creates the log in `dir` (created if missing).
  /// @param checkpoint where log start / HW / epochs live; owned by the
  ///        caller and must outlive the log.
  /// @param fs file layer; nullptr means the real POSIX one. Must outlive
  ///        the log.
  /// @param clock time source; empty means system_now_ms.
  /// @param journal the node's journal (node_journal.hpp); nullptr: the
  ///        log syncs its own files. Must outlive the log. Its records are
  ///        replayed by node_journal::open, before any log of the node opens.
  static caf::expected<std::unique_ptr<partition_log>>
  open(const std::filesystem::path& dir, log_config cfg,
       partition_checkpoint* checkpoint, file_system* fs = nullptr,
       clock_fn clock = {}, node_journal* journal = nullptr);

  virtual ~partition_log() = default;

  /// Appends one RecordBatch v2 at the log end. Validates header and CRC,
  /// assigns offsets by overwriting the base offset in place, rolls the
  /// segment first if needed. On error (disk_full, io_error, crc_mismatch,
  /// message_too_large...) the log is unchanged.
  virtual caf::expected<append_info> append(std::span<char> batch) = 0;

  /// Appends batches that already carry their offsets (a follower copying
  /// its leader). The first base offset must equal log_end().
  virtual caf::expected<append_info> append_replicated(std::string_view batches) = 0;

  /// With a node journal: writes the appended bytes the active segment keeps
  /// in memory (segment_options::defer_bytes) to its file. The owner calls
  /// it on its tick; rolls and close() do it too. On error (a full disk)
  /// they stay in memory and in the journal, and appends that do not fit
  /// beside them fail with the same error.
  virtual caf::error write_deferred() { return caf::none; }

  /// Makes all appended data durable. Returns the new durable_end().
  virtual caf::expected<offset> flush() = 0;

  /// The first half of a flush for owners that sync on another thread
  /// (sync_pool), so the owner's thread never blocks in fdatasync: names
  /// the file to sync and the offset it makes durable. The owner syncs
  /// job.file on any thread, then calls end_flush() on its own thread with
  /// the result. Appends may go on in between (they are not covered by the
  /// job: the next one covers them). At most one job should be in flight.
  /// The default implementation flushes synchronously (file null).
  virtual caf::expected<flush_job> begin_flush();

  /// The second half: with `result` none, durable_end() becomes job.end
  /// (unless a truncation came in between), and index entries are written;
  /// an error fences the log as a failed flush() does. Returns the new
  /// durable_end().
  virtual caf::expected<offset> end_flush(const flush_job& job,
                                          caf::error result);

  /// True if the flush policy wants a flush now.
  virtual bool flush_due() const = 0;

  /// Offsets below this are durable.
  virtual offset durable_end() const = 0;

  /// First readable offset.
  virtual offset log_start() const = 0;

  /// Offset the next append gets (one past the last record).
  virtual offset log_end() const = 0;

  /// Consumers read below this. Starts at the checkpointed value (clamped to
  /// log_end) after open().
  virtual offset high_watermark() const = 0;

  /// Sets the high watermark (clamped to [log_start, log_end]). Persisted on
  /// the next checkpoint().
  virtual void set_high_watermark(offset hw) = 0;

  /// Records that `epoch` starts at log_end() (a new leader). Persisted on
  /// the next checkpoint().
  virtual caf::error add_epoch(leader_epoch epoch) = 0;

  /// The leader epoch history.
  virtual const std::vector<epoch_entry>& epochs() const = 0;

  /// Saves log start, high watermark and epochs through the checkpoint.
  virtual caf::error checkpoint() = 0;

  /// Reads whole batches starting with the one that contains `from`, up to
  /// `max_bytes` (at least one batch is returned even if larger, so readers
  /// always progress), never including offsets >= `upto`. A batch that
  /// straddles `upto` is left out. `from` outside [log_start, log_end] is
  /// offset_out_of_range; from == log_end returns empty data.
  virtual caf::expected<read_result> read(offset from, size_t max_bytes,
                                          offset upto) const = 0;

  /// First offset whose record timestamp is >= ts, or nullopt if none.
  virtual caf::expected<std::optional<offset>>
  offset_for_timestamp(timestamp_ms ts) const = 0;

  /// Removes every batch containing an offset >= `end` (whole batches, so
  /// the new end may be lower than `end`). Returns the new log_end().
  virtual caf::expected<offset> truncate_to(offset end) = 0;

  /// Deletes every record and continues empty at `start` (log start = log
  /// end = HW = start, no epochs): a follower whose leader's log starts
  /// beyond its own end. Checkpointed at once.
  virtual caf::error truncate_fully_and_start_at(offset start) = 0;

  /// Deletes whole segments by retention_ms and retention_bytes (never the
  /// active one) and advances log start.
  virtual caf::expected<retention_report> enforce_retention() = 0;

  /// With compaction on (log_config::compaction) and no clean in flight:
  /// a clean_job when one is due at `now` (the dirty ratio reached
  /// min.cleanable.dirty.ratio, a dirty segment passed max.compaction.lag,
  /// or a kept tombstone expired), else nullopt. With a node journal only
  /// segments whose journal records are all checkpointed are cleanable (a
  /// replay must never write into a cleaned file). Never the active
  /// segment nor anything at or above the high watermark.
  virtual caf::expected<std::optional<clean_job>> begin_clean(timestamp_ms now);

  /// Swaps the cleaned files of `job` in (see FORMAT.md, "Compaction"):
  /// each output is renamed to <base>.log.swap (the commit point), the
  /// segments it replaces are removed, and it becomes <base>.log. A job
  /// that a truncation or retention overtook is discarded (its files
  /// removed). With `result` set the job failed: its files are removed and
  /// the error returned. Offsets never change.
  virtual caf::expected<clean_stats> end_clean(clean_job& job, caf::error result);

  /// The cleaning state (all zero for a log that is not compacted).
  virtual cleaning_status cleaning() const;

  /// Moves log start forward to `start` (records below become unreadable;
  /// segments wholly below it are deleted).
  virtual caf::error advance_log_start(offset start) = 0;

  /// Closes the active segment and starts a new one at log_end().
  virtual caf::error roll() = 0;

  /// Replaces the configuration (a topic's config changed). Applies from the
  /// next append (segment size/age, max batch size), flush_due() and
  /// enforce_retention(); existing segments and batches stay as they are.
  virtual void set_config(const log_config& cfg) = 0;

  /// Total bytes of segment files.
  virtual uint64_t size_bytes() const = 0;

  virtual size_t segment_count() const = 0;

  /// What open() found.
  virtual const recovery_report& recovery() const = 0;

  /// Flushes, checkpoints (partition_checkpoint::save_at_close: queued on
  /// a node, so a stopping node's 10,000 partitions make one LMDB commit,
  /// not 10,000) and closes files. Further calls give log_closed.
  virtual caf::error close() = 0;

  /// Closes without writing, syncing or checkpointing anything: the caller
  /// deletes the log's directory and checkpoint next (a deleted topic).
  /// Appends kept in memory are dropped and released to the journal, which
  /// then need not keep them. Further calls give log_closed. (close() of
  /// each of 10,000 partitions of a deleted topic committed its checkpoint
  /// to LMDB on the scheduler: ~8 s of a node doing nothing else.)
  virtual void discard() = 0;
};

} // namespace ferry
