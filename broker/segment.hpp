#pragma once
// segment: one file of a partition log (<base>.log) plus its offset index
// (<base>.index) and time index (<base>.timeindex). Internal to the broker:
// partition_log owns a sorted run of segments; only the last (active) one is
// written. The formats are in FORMAT.md, "Segments and indexes".
//
// Lifecycle:
//   create()          a new, empty active segment: its .log file only; the
//                     two index files are made with its first index entry
//   recover_active()  the last segment at open: validates its indexes, scans
//                     the tail from the last trustworthy index entry,
//                     verifies header + CRC of each batch and cuts the file
//                     at the first torn or corrupt one
//   open_closed()     any other segment at open: trusted, indexes only
//                     checked for presence and size (loaded lazily, fully
//                     validated on first use, rebuilt when damaged)
//   append()*, sync_log(), write_indexes()      while active
//   finish_indexes(), sync_all(), close_indexes()   rolling: now closed
//   activate()        a closed segment becomes active again (truncate_to)
//   remove_files()    retention / truncation
//
// A segment trusts its caller: append() takes batches already validated and
// numbered, read() is only asked for offsets inside the log. Single-threaded
// like its log. Index files are written off the fsync path: entries are kept
// in memory and appended to the files after the data they point to was
// fdatasynced (or when many are pending), fsynced only when the segment is
// sealed. So on disk an index may lag its log, never the other way round
// except after a crash during truncate_to, which recovery's index validation
// catches.

#include "broker/error.hpp"
#include "broker/model.hpp"
#include "broker/offset_index.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/time_index.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace ferry {

class file_handle;
class file_system;
class node_journal;

/// File name suffixes. A segment's files are named by its base offset,
/// zero-padded to 20 digits: 00000000000000000042.log.
inline constexpr std::string_view log_file_suffix = ".log";
inline constexpr std::string_view index_file_suffix = ".index";
inline constexpr std::string_view time_index_file_suffix = ".timeindex";

/// "00000000000000000042.log" for base 42 and suffix ".log".
std::string segment_file_name(offset base, std::string_view suffix);

/// Splits "<20 digits><suffix>" into base offset and suffix (one of the three
/// above); nullopt for any other name.
std::optional<std::pair<offset, std::string_view>>
parse_segment_file_name(std::string_view name);

/// Where one batch sits and what its header says (header fields only).
struct batch_position {
  uint64_t position = 0;
  uint32_t size = 0;
  offset base{0};
  offset last{0};
  timestamp_ms max_timestamp = 0;
};

/// Settings a segment needs from log_config.
struct segment_options {
  uint32_t index_interval_bytes = 4096;
  /// Largest batch recovery accepts; a longer length field counts as damage.
  size_t max_batch_bytes = default_max_batch_bytes;
  /// The node's journal (node_journal.hpp): when set, every change to the
  /// .log file (create, write, truncate, remove) is recorded there after it
  /// is applied, and sync_log() waits for the journal instead of syncing
  /// the file. Null: the file is fdatasynced itself.
  node_journal* journal = nullptr;
  /// With a journal: an active segment keeps up to this many appended bytes
  /// in memory before it writes them to its .log file (0: every append is
  /// written at once). The journal holds them durably meanwhile (and keeps
  /// the journal files holding them until they are written); reads see
  /// them. write_deferred() writes them; so do a roll, a sync, a truncation,
  /// a close and the destructor. One pwrite then carries many appends: at
  /// many partitions most batches are a record or two, and each pwrite
  /// costs the same kernel work (page lookup, inode time and dirtying)
  /// whatever its size.
  size_t defer_bytes = 0;
};

class deferred_log;

/// A read in progress, carried across segments by partition_log::read().
struct segment_read {
  offset from{0};
  size_t max_bytes = 0;
  offset upto{0};
  std::string data;
  offset next{0};
  uint32_t batches = 0;
  /// Set when a limit (max_bytes, upto) ended the read.
  bool done = false;
};

class segment {
public:
  ~segment();
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;

  /// Creates an empty active segment; fails if the files cannot be created.
  /// @param fs must outlive the segment.
  static caf::expected<std::unique_ptr<segment>>
  create(file_system& fs, const std::filesystem::path& dir, offset base,
         segment_options opts);

  /// Opens a closed segment whose offsets end before `end` (the next
  /// segment's base). Rebuilds its indexes if a file is missing or has an
  /// impossible size or last entry (counted in report.indexes_rebuilt).
  static caf::expected<std::unique_ptr<segment>>
  open_closed(file_system& fs, const std::filesystem::path& dir, offset base,
              offset end, segment_options opts, recovery_report& report);

  /// Opens the last segment and repairs its tail (see the file comment).
  static caf::expected<std::unique_ptr<segment>>
  recover_active(file_system& fs, const std::filesystem::path& dir, offset base,
                 segment_options opts, recovery_report& report);

  offset base() const { return base_; }
  /// One past the last offset (base() when empty).
  offset end() const { return end_; }
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Largest batch max_timestamp; nullopt when empty.
  std::optional<timestamp_ms> max_timestamp() const { return max_ts_; }
  /// True while the index files are open for appending (or, for a segment
  /// that has not written an index entry yet, will be made by the first
  /// write_indexes() that has one).
  bool active() const { return index_.attached() || index_files_pending_; }
  /// True if appended data awaits fdatasync.
  bool dirty() const { return dirty_; }
  /// Index entries not yet written to the index files.
  size_t pending_index_entries() const;
  /// The newest journal record of the log file (0: none since open).
  uint64_t journal_seq() const { return journal_seq_; }

  // -- active segment ---------------------------------------------------------

  /// Appends batches that continue at end(), back to back in `bytes`, with
  /// one write. `batches` describes them (positions are filled in here).
  /// On error the file is cut back to its previous size and nothing changes;
  /// `cut_back_failed` is set if even that failed (the file then has a torn
  /// tail and the log must stop writing).
  caf::error append(std::string_view bytes, std::span<batch_position> batches,
                    bool& cut_back_failed);

  /// fdatasync of the log file if dirty.
  caf::error sync_log();

  /// For a sync on another thread (sync_pool): the log file if dirty, else
  /// null. The segment then counts as clean for the next begin_sync_log()
  /// (a later append makes it dirty again) but not for sync_log(), which
  /// still syncs until confirm_sync() says the sync on the other thread
  /// succeeded: a roll or close never trusts a sync still running.
  std::shared_ptr<file_handle> begin_sync_log();

  /// The sync begun by begin_sync_log() on `file` succeeded (a no-op for
  /// any other file: this segment was rolled or replaced meanwhile).
  void confirm_sync(const file_handle* file);

  /// With a journal: like begin_sync_log(), but the durability comes from
  /// the journal records of this segment. True if it was dirty; the caller
  /// then waits for the journal up to its last record.
  bool begin_journal_sync();

  /// The journal covered the sync begun by begin_journal_sync().
  void confirm_journal_sync() { unconfirmed_ = false; }

  /// Appends pending index entries to the index files (no sync). The first
  /// call with entries to write creates both files.
  caf::error write_indexes();

  /// Adds the closing time-index entry and writes pending index entries.
  caf::error finish_indexes();

  /// fdatasync of the log and both index files.
  caf::error sync_all();

  /// Closes the index files: the segment is closed (read-only from now).
  void close_indexes();

  /// Closes the index files and drops appends kept in memory (released to
  /// the journal) without writing them: the segment's directory is being
  /// deleted. The segment must not be used afterwards.
  void discard();

  /// Reopens the index files for appending (a closed segment becomes the
  /// last one again).
  caf::error activate();

  /// Removes batches with offsets >= `end` (whole batches: the new end may
  /// be lower). @pre active(), base() <= end < this->end(). Returns the new end.
  caf::expected<offset> truncate_to(offset end);

  // -- reading ---------------------------------------------------------------

  /// Appends to `r` the batches of this segment from the one containing
  /// r.from (or from the start), honouring r.max_bytes and r.upto.
  caf::error read(segment_read& r);

  /// First offset >= min_offset whose record timestamp is >= ts, or nullopt.
  caf::expected<std::optional<offset>> find_timestamp(timestamp_ms ts,
                                                      offset min_offset);

  /// Writes the appended bytes kept in memory (segment_options::defer_bytes)
  /// to the .log file. On error they stay in memory (and in the journal).
  caf::error write_deferred();

  /// Removes the three files (log first, so a crash leaves only orphan
  /// indexes, which open() deletes).
  caf::error remove_files();

  std::filesystem::path path_of(std::string_view suffix) const;

private:
  segment(file_system& fs, std::filesystem::path dir, offset base,
          segment_options opts);

  /// Takes the opened .log file (wrapped in a deferred_log when the
  /// options ask for deferred writes).
  void set_log(std::shared_ptr<file_handle> f);

  uint32_t rel_of(offset o) const {
    return static_cast<uint32_t>(o - base_);
  }

  /// Byte position of a batch whose base offset is <= o (0 if none).
  uint64_t position_for(offset o) const;

  /// Updates indexes and max timestamp for a batch now part of the segment.
  void index_batch(const batch_position& b);

  /// Creates both (empty) index files of an active segment and attaches
  /// them; every entry in memory becomes pending.
  caf::error create_index_files();

  /// Loads and validates the index files of a closed segment (lazy).
  caf::error load_indexes();

  /// Rebuilds both indexes by scanning every batch header, then rewrites
  /// and syncs the files (closed segments) or leaves them attached (active).
  caf::error rebuild_indexes();

  /// Recomputes max_ts_ from the last time-index entry and the batches after.
  caf::error recompute_max_timestamp();

  file_system* fs_;
  std::filesystem::path dir_;
  offset base_;
  /// path_of(".log"), built once: the journal names it in every record.
  std::filesystem::path log_path_;
  offset end_;
  uint64_t size_ = 0;
  std::optional<timestamp_ms> max_ts_;
  segment_options opts_;
  /// log_ when it defers writes (segment_options::defer_bytes), else null.
  deferred_log* deferred_ = nullptr;
  // Shared with a sync in flight on a sync_pool thread (begin_sync_log).
  std::shared_ptr<file_handle> log_;
  offset_index index_;
  time_index time_index_;
  bool indexes_loaded_ = false;
  /// Active, and its index files do not exist yet (see create()).
  bool index_files_pending_ = false;
  bool dirty_ = false;
  // A sync begun by begin_sync_log() and not confirmed yet.
  bool unconfirmed_ = false;
  // The newest journal record of this segment's log file (with a journal).
  uint64_t journal_seq_ = 0;
};

} // namespace ferry
