#include "broker/sync_pool.hpp"

#include "broker/file_system.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace ferry {

sync_pool::sync_pool(sync_pool_options opts) : opts_(opts) {
  auto n = opts_.threads;
  workers_.reserve(n);
  for (size_t i = 0; i < n; ++i)
    workers_.emplace_back([this] { run(); });
}

sync_pool::~sync_pool() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    w.join();
  if (workers_.empty())
    run_pending();
}

size_t sync_pool::run_pending() {
  size_t n = 0;
  std::vector<job> round;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (queue_.empty())
        return n;
      take_round(round);
    }
    n += round.size();
    run_round(round);
    round.clear();
  }
}

void sync_pool::take_round(std::vector<job>& round) {
  // A long queue is one syncfs round; a short one is taken a file at a
  // time so the other workers sync the rest side by side.
  bool whole = opts_.syncfs_threshold > 0
               && queue_.size() >= opts_.syncfs_threshold;
  size_t take = whole ? queue_.size() : 1;
  for (size_t i = 0; i < take; ++i) {
    round.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  ++stats_.rounds;
  stats_.largest_round = std::max<uint64_t>(stats_.largest_round, round.size());
}

size_t sync_pool::default_threads(unsigned cores) {
  return std::clamp<size_t>(size_t{4} * std::max(cores, 1u), 4, 64);
}

void sync_pool::submit(std::shared_ptr<file_handle> file, done_fn done) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    queue_.push_back(job{std::move(file), std::move(done)});
    ++stats_.jobs;
  }
  cv_.notify_one();
}

sync_pool_stats sync_pool::stats() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return stats_;
}

void sync_pool::run() {
  std::vector<job> round;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock{mtx_};
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping and drained
      take_round(round);
    }
    run_round(round);
    round.clear();
  }
}

void sync_pool::run_round(std::vector<job>& round) {
  uint64_t fdatasyncs = 0;
  uint64_t syncfs_calls = 0;
  uint64_t failures = 0;
  std::vector<caf::error> results(round.size());
  if (opts_.syncfs_threshold > 0
      && round.size() >= std::max<size_t>(opts_.syncfs_threshold, 2)) {
    // One syncfs per file system in the round; files whose layer has no
    // device (tests) are synced one by one.
    std::map<uint64_t, std::vector<size_t>> by_device;
    for (size_t i = 0; i < round.size(); ++i) {
      if (auto dev = round[i].file->device()) {
        by_device[*dev].push_back(i);
      } else {
        results[i] = round[i].file->sync();
        ++fdatasyncs;
      }
    }
    for (auto& [dev, members] : by_device) {
      caf::error err;
      if (members.size() == 1) {
        err = round[members.front()].file->sync();
        ++fdatasyncs;
      } else {
        // Through any member whose file still exists (one deleted
        // meanwhile has no descriptor to reach the file system with).
        for (auto i : members) {
          err = round[i].file->sync_file_system();
          ++syncfs_calls;
          if (!is(err, ec::not_found))
            break;
        }
        if (is(err, ec::not_found))
          err = caf::none; // every file of the round is gone
      }
      for (auto i : members)
        results[i] = err;
    }
  } else {
    for (size_t i = 0; i < round.size(); ++i) {
      results[i] = round[i].file->sync();
      ++fdatasyncs;
    }
  }
  for (auto& r : results)
    if (r)
      ++failures;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stats_.fdatasyncs += fdatasyncs;
    stats_.syncfs_calls += syncfs_calls;
    stats_.failures += failures;
  }
  for (size_t i = 0; i < round.size(); ++i) {
    round[i].file.reset(); // before done: the owner may close its log next
    round[i].done(std::move(results[i]));
  }
}

} // namespace ferry
