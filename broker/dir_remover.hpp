#pragma once
// dir_remover: deletes partition directories off the caller's thread.
//
// Deleting a topic removes one directory per partition replica: its
// segments' files, then the directory. That is ~0.2 ms per partition on
// ext4 (unlink frees the inode and its blocks), so deleting a 10,000-
// partition topic on the replicas' own threads kept the node's two
// scheduler threads busy for ~8 s: nothing else on the node was answered
// meanwhile (tests/bench/README.md, "Figures: creating a 10,000-partition
// topic"). A rename is ~0.01 ms.
//
// So discard() renames the directory into `<root>/trash/` (same file
// system, one rename(2)) and queues it; a worker thread removes queued
// directories one at a time. The partition's own name is free again at
// once: a topic created again under the same name starts in a new,
// empty directory while the old one is still being removed.
//
// Durability: neither the rename nor the removal is synced. A crash may
// bring the directory back under its old name (the node's start-up sweep
// deletes partition directories no topic places on the node, as it did
// when the removal itself was lost) or leave it in the trash: sweep(),
// called once at start, queues whatever an earlier process left there.
// The destructor finishes the directory in progress and leaves the rest
// for the next start's sweep: a node stopping right after a big delete
// does not wait for it.
//
// When the rename fails (the trash on another file system, a full
// directory table), discard() removes the directory in place, on the
// calling thread, as before.
//
// Thread-safe.

#include "broker/error.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

namespace ferry {

class node_journal;

struct dir_remover_options {
  /// Worker threads: 1, or 0 for none (deterministic tests: queued
  /// directories wait until run_pending() removes them on the caller's
  /// thread).
  size_t threads = 1;
};

struct dir_remover_stats {
  /// Directories moved into the trash, and found there by sweep().
  uint64_t discarded = 0;
  uint64_t swept = 0;
  /// Directories removed from the trash, and the ones whose removal failed
  /// (left in the trash for the next start's sweep).
  uint64_t removed = 0;
  uint64_t failures = 0;
  /// Directories removed in place because the rename failed.
  uint64_t removed_in_place = 0;
  /// Queued, not yet removed.
  size_t pending = 0;
};

class dir_remover {
public:
  /// `root`: the node's data directory; the trash is `trash_dir(root)`.
  explicit dir_remover(std::filesystem::path root, dir_remover_options opts = {});
  ~dir_remover();
  dir_remover(const dir_remover&) = delete;
  dir_remover& operator=(const dir_remover&) = delete;

  static std::filesystem::path trash_dir(const std::filesystem::path& root);

  /// Moves `dir` out of the way and queues its removal. When this returns,
  /// `dir` no longer exists (a missing `dir` is no error). An error means
  /// `dir` could neither be moved nor removed in place.
  caf::error discard(const std::filesystem::path& dir);

  /// Queues every entry of the trash that is not queued already (left by an
  /// earlier process). Returns how many it queued.
  size_t sweep();

  /// With threads == 0: removes every queued directory now, on this thread.
  /// Returns how many it removed.
  size_t run_pending();

  dir_remover_stats stats() const;

private:
  void run();
  /// Removes one queued path; updates the stats.
  void remove_one(const std::filesystem::path& p);

  std::filesystem::path trash_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::filesystem::path> queue_;
  uint64_t next_name_ = 0;
  bool stopping_ = false;
  dir_remover_stats stats_;
  std::thread worker_;
};

/// Deletes a partition replica's directory: through `trash` when set (else
/// removed in place), then records the removal in `journal` when set (its
/// replay removes the directory again: a crash must not bring back the
/// segment files its records would recreate). The replica and the node
/// both delete with this.
caf::error delete_partition_dir(const std::filesystem::path& dir,
                                dir_remover* trash, node_journal* journal);

} // namespace ferry
