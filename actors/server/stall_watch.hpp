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
    return stalled_at(clock::now().time_since_epoch().count(),
                      last_beat_.load(std::memory_order_acquire),
                      last_gap_.load(std::memory_order_acquire),
                      last_gap_end_.load(std::memory_order_acquire),
                      caught_up_.load(std::memory_order_acquire), to_ticks(limit),
                      to_ticks(quarantine));
  }

  /// The local Raft node applied everything a current leader had committed
  /// (raft_node: a leader's append applied up to its commit index, or, as
  /// the leader, a follower's acknowledgement in its term). Only the first
  /// evidence after the last gap counts (first_caught_up).
  void note_caught_up() {
    auto now = clock::now().time_since_epoch().count();
    auto prev = caught_up_.load(std::memory_order_acquire);
    auto next = first_caught_up(prev, last_gap_end_.load(std::memory_order_acquire), now);
    if (next != prev)
      caught_up_.compare_exchange_strong(prev, next, std::memory_order_acq_rel);
  }

  /// stalled() on given clock readings (ticks of `clock`): `beat` is the
  /// watch thread's last run, `gap`/`gap_end` its last gap, `caught_up`
  /// the first catch-up evidence after it (0: none yet).
  static bool stalled_at(int64_t now, int64_t beat, int64_t gap, int64_t gap_end,
                         int64_t caught_up, int64_t limit, int64_t quarantine) {
    if (now - beat > limit)
      return true;
    if (gap <= limit)
      return false;
    return now - gap_end < quarantine || caught_up <= gap_end
           || now - caught_up < to_ticks(std::chrono::milliseconds{250});
  }

  /// What note_caught_up() at `now` stores: `now` for the first evidence
  /// after the last gap (which ended at `gap_end`), else the earlier one
  /// unchanged. Keeping the first matters: Raft heartbeats bring evidence
  /// every tick, and a time refreshed by each of them was never 250 ms
  /// old, so a node once paused longer than the limit refused its groups
  /// for good (tests/chaos seed 608: coordinator_not_available from the
  /// Raft leader's node until the end of the run).
  ///
  /// Evidence in the first `settle` after the gap does not count: the
  /// messages that waited in the node's sockets during the stall arrive
  /// first, and a leader's heartbeat sent before the stall names a commit
  /// index the node had applied, although the leader (and the node's
  /// leaderships) may have changed since. Seen in tests/chaos (seed 5203,
  /// five nodes): a node woke from a 7.3 s pause, took such a heartbeat
  /// for evidence, its link to the Raft leader stayed down for 10 s after,
  /// and it served a group's offsets from before the pause as the group's
  /// home (its __consumer_state partition had moved during the pause).
  static int64_t first_caught_up(int64_t prev, int64_t gap_end, int64_t now) {
    if (prev > gap_end)
      return prev;
    return now - gap_end >= to_ticks(settle) ? now : prev;
  }

  /// See first_caught_up: longer than the node takes to read what waited
  /// in its sockets, shorter than the quarantine.
  static constexpr std::chrono::milliseconds settle{1000};

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
