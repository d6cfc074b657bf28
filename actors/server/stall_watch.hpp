#pragma once
// stall_watch: notices when the whole process stopped running for a while
// (SIGSTOP, a frozen VM, a machine starved for seconds). A thread of its
// own wakes every 100 ms and records any gap between two wake-ups longer
// than 300 ms; an actor's mailbox backlog does not delay it, so a busy node
// is not taken for a stopped one.
//
// A node uses it before acting as the home of a group or DLQ
// (stalled_home_error in node_internal.hpp): a node that was stopped longer
// than the controller waits before it fences a broker may have lost its
// leaderships without knowing yet.
//
// One per process, started on first use; its destructor (at exit) stops
// and joins the thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace ferry {

class stall_watch {
public:
  using clock = std::chrono::steady_clock;

  static stall_watch& instance() {
    static stall_watch w;
    return w;
  }

  /// True while the watch thread has not run for longer than `limit` (the
  /// process is just resuming), and after a gap longer than `limit` ended:
  /// for `quarantine` at least, and until the metadata caught up with a
  /// Raft leader after the gap (note_caught_up), plus a moment for the
  /// node to take in what that brought.
  bool stalled(std::chrono::milliseconds limit, std::chrono::milliseconds quarantine) const {
    auto now = clock::now().time_since_epoch().count();
    auto beat = last_beat_.load(std::memory_order_acquire);
    if (now - beat > to_ticks(limit))
      return true;
    auto gap = last_gap_.load(std::memory_order_acquire);
    if (gap <= to_ticks(limit))
      return false;
    auto end = last_gap_end_.load(std::memory_order_acquire);
    auto caught_up = caught_up_.load(std::memory_order_acquire);
    return now - end < to_ticks(quarantine) || caught_up <= end
           || now - caught_up < to_ticks(std::chrono::milliseconds{250});
  }

  /// The local Raft node applied everything a current leader had committed
  /// (raft_node: a leader's append applied up to its commit index, or, as
  /// the leader, a follower's acknowledgement in its term).
  void note_caught_up() {
    caught_up_.store(clock::now().time_since_epoch().count(), std::memory_order_release);
  }

  stall_watch(const stall_watch&) = delete;
  stall_watch& operator=(const stall_watch&) = delete;

  ~stall_watch() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

private:
  static int64_t to_ticks(std::chrono::milliseconds d) {
    return std::chrono::duration_cast<clock::duration>(d).count();
  }

  stall_watch() {
    last_beat_ = clock::now().time_since_epoch().count();
    thread_ = std::thread{[this] { run(); }};
  }

  void run() {
    std::unique_lock<std::mutex> guard{mtx_};
    while (!stop_) {
      cv_.wait_for(guard, std::chrono::milliseconds{100});
      auto now = clock::now().time_since_epoch().count();
      auto gap = now - last_beat_.load(std::memory_order_relaxed);
      if (gap > to_ticks(std::chrono::milliseconds{300})) {
        last_gap_.store(gap, std::memory_order_release);
        last_gap_end_.store(now, std::memory_order_release);
      }
      last_beat_.store(now, std::memory_order_release);
    }
  }

  std::atomic<int64_t> last_beat_{0};
  std::atomic<int64_t> last_gap_{0};
  std::atomic<int64_t> last_gap_end_{0};
  std::atomic<int64_t> caught_up_{0};
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace ferry
