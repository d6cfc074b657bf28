#pragma once
// sync_pool: the node's bounded set of I/O threads for fdatasync.
//
// A partition replica runs on the shared actor scheduler; its group commit
// must not block a scheduler worker for the milliseconds an fdatasync takes.
// It hands the file to this pool instead (partition_log::begin_flush), keeps
// serving, and finishes the commit when the pool calls back
// (partition_log::end_flush). The pool's thread count is fixed at start
// (ferryd: --io-threads, default 4 x cores, at least 4), so a node's threads
// do not grow with its partitions.
//
// One round covers many partitions: every partition written since its last
// sync has at most one sync queued or running; a worker takes the whole
// queue as one round. A round of one or a few files gets one fdatasync per
// file (the workers run them side by side, and ext4 commits concurrent
// fdatasyncs in one journal transaction). A round of at least
// `syncfs_threshold` files gets ONE syncfs(2) of the file system instead,
// which writes back every dirty page of every file on it and commits the
// journal once: the cost of the round no longer grows with the number of
// partitions in it. (syncfs reports write-back errors of the file system
// since Linux 5.8; an error fails every job of the round, which fences
// their replicas, as a failed fdatasync does.) The figures behind both
// choices are in broker/README.md, "Group commit across partitions".
//
// A job holds its file_handle (shared): the file stays open until the sync
// ran even if its segment was rolled, truncated or deleted meanwhile.
// `done` runs on a pool thread; it must only hand the result over (e.g.
// store it and send a message), never touch the owner's state.
//
// Thread-safe. The destructor runs every queued job, then joins.
// (With threads == 0 it runs what is still queued on the destroying thread.)

#include "broker/error.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class file_handle;

struct sync_pool_options {
  /// Worker threads. 0: none; jobs wait until run_pending() runs them on
  /// the caller's thread (deterministic tests).
  size_t threads = 4;
  /// A round with at least this many files is made durable with one
  /// syncfs(2) (0: never; every file gets its own fdatasync).
  size_t syncfs_threshold = 8;
};

struct sync_pool_stats {
  uint64_t jobs = 0;
  uint64_t rounds = 0;
  uint64_t fdatasyncs = 0;
  uint64_t syncfs_calls = 0;
  uint64_t failures = 0;
  /// The most jobs one round carried.
  uint64_t largest_round = 0;
};

class sync_pool {
public:
  using done_fn = std::function<void(caf::error)>;

  explicit sync_pool(sync_pool_options opts = {});
  ~sync_pool();
  sync_pool(const sync_pool&) = delete;
  sync_pool& operator=(const sync_pool&) = delete;

  /// Queues a sync of `file`; `done` gets its result on a pool thread.
  void submit(std::shared_ptr<file_handle> file, done_fn done);

  /// With threads == 0: runs every queued job now, on this thread, in
  /// rounds as the workers would. Returns the jobs run.
  size_t run_pending();

  size_t threads() const { return workers_.size(); }
  sync_pool_stats stats() const;

  /// The default thread count for a machine with `cores` cores.
  static size_t default_threads(unsigned cores);

private:
  struct job {
    std::shared_ptr<file_handle> file;
    done_fn done;
  };

  void run();
  /// Moves the next round out of the queue. @pre mtx_ held, queue not empty.
  void take_round(std::vector<job>& round);
  void run_round(std::vector<job>& round);

  sync_pool_options opts_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  bool stopping_ = false;
  sync_pool_stats stats_;
  std::vector<std::thread> workers_;
};

} // namespace ferry
