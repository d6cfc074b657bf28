#pragma once
// node_journal: one write-ahead journal for every partition log of a node.
//
// Why (issue 15): an ack means "on disk". Making 1,000 partitions' appends
// durable by syncing their 1,000 segment files costs ~100-150 ms a round on
// this machine (syncfs of many small dirty files); writing the same bytes
// once more into ONE file and syncing that costs ~30 ms. So with a journal,
// every change a partition log makes to its segment files (a file created,
// bytes written at a position, a file truncated, a file or directory removed)
// is first applied to the file system as before (page cache, no sync) and
// then recorded here; the journal's writer thread writes all records queued
// since its last round with one write and one fdatasync. A partition's group
// commit waits for the journal round that covers its records instead of
// syncing its own files.
//
// Checkpoints: when the current journal file passes `file_bytes` (or
// `checkpoint_interval` has passed), the writer starts a new file and a
// checkpoint thread calls syncfs(2) on the data directory's file system.
// Every operation recorded in the older files was applied to the file system
// before its record was queued, so after that syncfs the segment files hold
// it durably and the older journal files are deleted.
//
// Recovery (open): the records of every remaining journal file are applied
// again, in order, to the files under the root (paths are stored relative to
// it). Applying them is idempotent and reproduces, for every byte they cover,
// the state after the last durable record; bytes beyond it are what the
// segment's own recovery already handles (a torn or unacknowledged tail).
// A record cut short or failing its CRC ends the last file (a torn write
// during the crash); anywhere else it is corruption and open() fails. Then
// the result is made durable (syncfs), the journal files are deleted and a
// new one is started. The format is in FORMAT.md, "Node journal".
//
// Destroying the journal writes what is queued, then (a clean stop) syncs
// the file system and deletes the journal files: the next open has nothing
// to replay. Owners close their logs first.
//
// Thread-safe. record_*() take a mutex and copy the bytes; they never block
// on the disk. A failed write or sync is permanent: every waiter, present
// and future, gets the error (nothing after it can be trusted to be durable),
// and the replicas fence as they do when their own fdatasync fails.

#include "broker/error.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace ferry {

struct journal_options {
  /// Start a new journal file (and a checkpoint) past this many bytes.
  uint64_t file_bytes = 1024ull << 20;
  /// Start a checkpoint also when the current file is this old and holds
  /// records, so a quiet node's journal does not stay large.
  std::chrono::milliseconds checkpoint_interval{std::chrono::seconds{30}};
  /// false: no threads; run_pending() writes, syncs and checkpoints on the
  /// caller's thread (deterministic tests).
  bool threads = true;
};

/// What open() replayed.
struct journal_replay_report {
  uint32_t files = 0;
  uint64_t records = 0;
  /// Bytes of data records written back into segment files.
  uint64_t bytes = 0;
  /// Records for files that no longer exist (removed later, or their
  /// directory is gone): nothing to apply.
  uint64_t skipped = 0;
  /// Bytes cut off the end of the last journal file (a torn write).
  uint64_t torn_bytes = 0;
  /// Why the tail was cut ("" when nothing was cut).
  std::string reason;
};

struct journal_stats {
  uint64_t records = 0;
  uint64_t bytes = 0;
  /// Write + fdatasync rounds.
  uint64_t rounds = 0;
  uint64_t checkpoints = 0;
  /// The most records one round carried.
  uint64_t largest_round = 0;
  /// Journal files on disk now.
  uint64_t files = 0;
};

class node_journal {
public:
  using seq_t = uint64_t;
  using done_fn = std::function<void(caf::error)>;

  /// The journal's directory under a data directory.
  static std::filesystem::path dir_of(const std::filesystem::path& root);

  /// Replays `<root>/journal` into the files under `root`, makes the result
  /// durable, removes the old journal files and starts a new one.
  static caf::expected<std::shared_ptr<node_journal>>
  open(const std::filesystem::path& root, journal_options opts = {},
       journal_replay_report* report = nullptr);

  ~node_journal();
  node_journal(const node_journal&) = delete;
  node_journal& operator=(const node_journal&) = delete;

  /// Records that `file` was created (or truncated to 0 and reopened).
  seq_t record_create(const std::filesystem::path& file);
  /// Records that `bytes` were written to `file` at `position`.
  seq_t record_write(const std::filesystem::path& file, uint64_t position,
                     std::string_view bytes);
  /// A write recorded before it is applied (a segment that defers its
  /// writes while the journal holds them, segment.cpp): the journal keeps
  /// every file holding such a record, and no checkpoint removes it, until
  /// applied() says the write reached the file. `gen` is what applied()
  /// takes back.
  struct deferred_write {
    seq_t seq = 0;
    uint64_t gen = 0;
  };
  deferred_write record_write_deferred(const std::filesystem::path& file,
                                       uint64_t position, std::string_view bytes);
  /// `n` deferred writes recorded under `gen` reached their files (or their
  /// file was removed, so nothing needs them).
  void applied(uint64_t gen, uint64_t n);
  /// Deferred writes not applied yet.
  uint64_t unapplied() const;

  /// Records that `file` was cut to `size` bytes.
  seq_t record_truncate(const std::filesystem::path& file, uint64_t size);
  /// Records that `path` (a file, or a directory with everything in it) was
  /// removed.
  seq_t record_remove(const std::filesystem::path& path);

  /// Whether records of `dir` (a partition directory) may be in the journal
  /// since it was opened: a log there must go on using the journal (a log
  /// that synced its own files instead could see the journal's older
  /// records replayed over its newer, unjournaled data after a crash).
  /// Set by adopt() and by record_remove().
  bool adopted(const std::filesystem::path& dir) const;
  void adopt(const std::filesystem::path& dir);

  /// The sequence number of the newest record (0: none yet).
  seq_t last_seq() const;

  /// Every record up to this one is in journal files a checkpoint removed:
  /// no replay can apply it any more (0: none yet).
  seq_t checkpointed_seq() const;

  /// Calls `done` once every record up to `seq` is durable (or the journal
  /// failed): at once on this thread if that is already so, else on the
  /// writer thread (where it must only hand the result over).
  void when_durable(seq_t seq, done_fn done);

  /// Blocks until every record up to `seq` is durable.
  caf::error wait_durable(seq_t seq);

  /// With threads == false: writes and syncs what is queued, runs the
  /// callbacks and a due checkpoint. Returns the records written.
  size_t run_pending();

  journal_stats stats() const;

  const std::filesystem::path& root() const { return root_; }

private:
  node_journal(std::filesystem::path root, journal_options opts);

  /// Queues one record. With `deferred_gen`, also counts it as a deferred
  /// write of the current file (stored there), under the same lock, so no
  /// checkpoint can pass it.
  seq_t enqueue(uint8_t type, const std::filesystem::path& path, uint64_t arg,
                std::string_view data, uint64_t* deferred_gen = nullptr);
  caf::error start_file(uint64_t index);
  /// One round: writes `buf` at the end of the current file and syncs it.
  caf::error write_round(const std::string& buf);
  void writer_loop();
  void checkpoint_loop();
  /// syncfs, then removes journal files below `below`.
  caf::error checkpoint(uint64_t below, seq_t upto);
  /// Whether a deferred write recorded in a file below `below` is still
  /// unapplied (mtx_ held).
  bool holds_below(uint64_t below) const;
  /// Moves the queue out and writes it; then completes the waiters.
  size_t round(std::unique_lock<std::mutex>& lk);
  /// Rolls the file if it is full or old; returns the index below which
  /// files may be deleted after a checkpoint (0: no roll).
  uint64_t maybe_roll();

  std::filesystem::path root_;
  std::filesystem::path dir_;
  journal_options opts_;
  int root_fd_ = -1;
  int fd_ = -1;
  uint64_t file_index_ = 0;
  uint64_t file_pos_ = 0;
  std::chrono::steady_clock::time_point file_started_{};
  // Guarded by mtx_.
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::condition_variable durable_cv_;
  std::condition_variable ckpt_cv_;
  uint64_t current_file_ = 0;
  std::string queue_;
  std::string spare_;
  uint64_t queued_records_ = 0;
  /// Written under mtx_; last_seq() reads it without the lock (every
  /// replica asks at every flush).
  std::atomic<seq_t> next_seq_ = 1;
  seq_t durable_ = 0;
  caf::error failed_;
  std::multimap<seq_t, done_fn> waiters_;
  std::unordered_set<std::string> adopted_;
  bool stopping_ = false;
  uint64_t checkpoint_below_ = 0;
  /// The newest record in the files below checkpoint_below_.
  seq_t checkpoint_upto_ = 0;
  seq_t checkpointed_ = 0;
  uint64_t oldest_file_ = 0;
  /// Deferred writes not applied yet, by the current_file_ they were
  /// recorded under (a record lands in that file or a later one).
  std::map<uint64_t, uint64_t> unapplied_;
  journal_stats stats_;
  std::thread writer_;
  std::thread checkpointer_;
};

} // namespace ferry
