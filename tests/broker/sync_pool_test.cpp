// sync_pool (the node's I/O threads) and the two-phase flush of the
// partition log (begin_flush / end_flush) that runs on it.

#include "broker/file_system.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/sync_pool.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

std::string make_batch(int n) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = 1'000'000 + i;
    r.value = std::string(32, 'v');
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

caf::expected<append_info> append(partition_log& log, int n) {
  auto b = make_batch(n);
  return log.append(std::span<char>{b.data(), b.size()});
}

std::shared_ptr<file_handle> open_file(file_system& fs, const fs::path& p) {
  auto f = fs.open(p, open_mode::create);
  EXPECT_TRUE(f) << describe(f.error());
  return f ? std::shared_ptr<file_handle>{std::move(*f)} : nullptr;
}

/// Collects results of done callbacks (any thread).
struct results {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<caf::error> errors;
  size_t count = 0;

  sync_pool::done_fn callback() {
    return [this](caf::error err) {
      std::lock_guard<std::mutex> guard{mtx};
      errors.push_back(std::move(err));
      ++count;
      cv.notify_all();
    };
  }

  /// Bounded: false after 10 s.
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> lock{mtx};
    return cv.wait_for(lock, std::chrono::seconds{10},
                       [&] { return count >= n; });
  }
};

#define ASSERT_OK(x) ASSERT_TRUE(x) << describe((x).error())

class sync_pool_test : public ::testing::Test {
protected:
  test::temp_dir dir_{"ferry-sync-pool-test"};
};

TEST_F(sync_pool_test, manual_pool_runs_jobs_only_when_asked) {
  fault_injecting_file_system faulty{&default_file_system()};
  sync_pool pool{{.threads = 0, .syncfs_threshold = 0}};
  EXPECT_EQ(pool.threads(), 0u);
  auto f = open_file(faulty, dir_.path() / "a.log");
  ASSERT_NE(f, nullptr);
  ASSERT_FALSE(f->append("hello"));
  results r;
  pool.submit(f, r.callback());
  EXPECT_EQ(r.count, 0u);
  EXPECT_EQ(faulty.syncs(), 0u);
  EXPECT_EQ(pool.run_pending(), 1u);
  EXPECT_EQ(r.count, 1u);
  EXPECT_FALSE(r.errors[0]);
  EXPECT_EQ(faulty.syncs(), 1u);
  EXPECT_EQ(pool.run_pending(), 0u);
  auto s = pool.stats();
  EXPECT_EQ(s.jobs, 1u);
  EXPECT_EQ(s.fdatasyncs, 1u);
  EXPECT_EQ(s.syncfs_calls, 0u);
}

TEST_F(sync_pool_test, a_failed_sync_reaches_its_callback) {
  fault_injecting_file_system faulty{&default_file_system()};
  sync_pool pool{{.threads = 0, .syncfs_threshold = 0}};
  auto f = open_file(faulty, dir_.path() / "a.log");
  ASSERT_NE(f, nullptr);
  faulty.fail_syncs(true);
  results r;
  pool.submit(f, r.callback());
  pool.run_pending();
  ASSERT_EQ(r.count, 1u);
  EXPECT_TRUE(is(r.errors[0], ec::io_error)) << describe(r.errors[0]);
  EXPECT_EQ(pool.stats().failures, 1u);
}

TEST_F(sync_pool_test, a_long_queue_is_one_syncfs_round) {
  auto& posix = default_file_system();
  sync_pool pool{{.threads = 0, .syncfs_threshold = 8}};
  results r;
  std::vector<std::shared_ptr<file_handle>> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back(open_file(posix, dir_.path() / ("f" + std::to_string(i))));
    ASSERT_NE(files.back(), nullptr);
    ASSERT_FALSE(files.back()->append("x"));
    ASSERT_TRUE(files.back()->device().has_value());
    pool.submit(files.back(), r.callback());
  }
  EXPECT_EQ(pool.run_pending(), 20u);
  ASSERT_EQ(r.count, 20u);
  for (auto& e : r.errors)
    EXPECT_FALSE(e) << describe(e);
  auto s = pool.stats();
  // One round of all 20 files, made durable by a single syncfs.
  EXPECT_EQ(s.rounds, 1u);
  EXPECT_EQ(s.largest_round, 20u);
  EXPECT_EQ(s.syncfs_calls, 1u);
  EXPECT_EQ(s.fdatasyncs, 0u);
}

TEST_F(sync_pool_test, a_short_queue_gets_one_fdatasync_per_file) {
  fault_injecting_file_system faulty{&default_file_system()};
  sync_pool pool{{.threads = 0, .syncfs_threshold = 8}};
  results r;
  std::vector<std::shared_ptr<file_handle>> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back(open_file(faulty, dir_.path() / ("f" + std::to_string(i))));
    pool.submit(files.back(), r.callback());
  }
  pool.run_pending();
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(pool.stats().fdatasyncs, 3u);
  EXPECT_EQ(pool.stats().syncfs_calls, 0u);
  EXPECT_EQ(faulty.syncs(), 3u);
}

TEST_F(sync_pool_test, files_without_a_device_are_synced_one_by_one_in_a_long_round) {
  // The fault-injecting layer has no device: even a round above the
  // threshold syncs each of its files (so injected failures stay per file).
  fault_injecting_file_system faulty{&default_file_system()};
  sync_pool pool{{.threads = 0, .syncfs_threshold = 2}};
  results r;
  std::vector<std::shared_ptr<file_handle>> files;
  for (int i = 0; i < 4; ++i) {
    files.push_back(open_file(faulty, dir_.path() / ("f" + std::to_string(i))));
    pool.submit(files.back(), r.callback());
  }
  pool.run_pending();
  EXPECT_EQ(pool.stats().rounds, 1u);
  EXPECT_EQ(pool.stats().fdatasyncs, 4u);
  EXPECT_EQ(faulty.syncs(), 4u);
}

TEST_F(sync_pool_test, threads_run_every_job_and_the_destructor_drains_the_queue) {
  auto& posix = default_file_system();
  results r;
  std::vector<std::shared_ptr<file_handle>> files;
  for (int i = 0; i < 50; ++i) {
    files.push_back(open_file(posix, dir_.path() / ("f" + std::to_string(i))));
    ASSERT_FALSE(files.back()->append("data"));
  }
  {
    sync_pool pool{{.threads = 3, .syncfs_threshold = 16}};
    EXPECT_EQ(pool.threads(), 3u);
    for (auto& f : files)
      pool.submit(f, r.callback());
    ASSERT_TRUE(r.wait_for(25)); // some ran while we wait
  } // the rest run before the threads are joined
  EXPECT_EQ(r.count, 50u);
  for (auto& e : r.errors)
    EXPECT_FALSE(e) << describe(e);
}

TEST_F(sync_pool_test, default_threads_do_not_depend_on_partitions) {
  EXPECT_EQ(sync_pool::default_threads(0), 4u);
  EXPECT_EQ(sync_pool::default_threads(2), 8u);
  EXPECT_EQ(sync_pool::default_threads(64), 64u);
}

// -- partition_log: begin_flush / end_flush -----------------------------------

class two_phase_flush_test : public ::testing::Test {
protected:
  void open_log(log_config cfg = {}) {
    auto l = partition_log::open(dir_.path() / "p", cfg, &ckpt_, &faulty_);
    ASSERT_TRUE(l) << describe(l.error());
    log_ = std::move(*l);
  }

  test::temp_dir dir_{"ferry-two-phase-flush-test"};
  fault_injecting_file_system faulty_{&default_file_system()};
  memory_checkpoint ckpt_;
  std::unique_ptr<partition_log> log_;
};

TEST_F(two_phase_flush_test, durable_end_moves_only_when_the_sync_finishes) {
  open_log();
  ASSERT_OK(append(*log_, 3));
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  ASSERT_NE(job->file, nullptr);
  EXPECT_EQ(job->end, offset{3});
  EXPECT_EQ(log_->durable_end(), offset{0});
  // Appends go on while the sync runs elsewhere; they are not covered.
  ASSERT_OK(append(*log_, 2));
  auto syncs = faulty_.syncs_of(".log");
  ASSERT_FALSE(job->file->sync());
  auto end = log_->end_flush(*job, caf::none);
  ASSERT_OK(end);
  EXPECT_EQ(*end, offset{3});
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs + 1);
  // The next job covers the rest.
  auto next = log_->begin_flush();
  ASSERT_OK(next);
  ASSERT_NE(next->file, nullptr);
  EXPECT_EQ(next->end, offset{5});
  ASSERT_OK(log_->end_flush(*next, caf::none));
  EXPECT_EQ(log_->durable_end(), offset{5});
  // Nothing new: no file to sync.
  auto idle = log_->begin_flush();
  ASSERT_OK(idle);
  EXPECT_EQ(idle->file, nullptr);
}

TEST_F(two_phase_flush_test, a_failed_sync_fences_the_log) {
  open_log();
  ASSERT_OK(append(*log_, 1));
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  auto r = log_->end_flush(*job, make_error(ec::io_error, "fdatasync: EIO"));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::io_error));
  EXPECT_EQ(log_->durable_end(), offset{0});
  auto more = append(*log_, 1);
  ASSERT_FALSE(more);
  EXPECT_TRUE(is(more.error(), ec::log_closed)) << describe(more.error());
}

TEST_F(two_phase_flush_test, a_sync_still_running_is_not_trusted_by_flush_or_close) {
  open_log();
  ASSERT_OK(append(*log_, 2));
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  auto syncs = faulty_.syncs_of(".log");
  // The owner shuts down before the pool ran the job: flush() must sync
  // itself, although begin_flush() took the dirty mark.
  auto end = log_->flush();
  ASSERT_OK(end);
  EXPECT_EQ(*end, offset{2});
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs + 1);
}

TEST_F(two_phase_flush_test, a_roll_syncs_the_sealed_segment_despite_a_running_sync) {
  log_config cfg;
  cfg.segment_bytes = 400; // a few batches per segment
  open_log(cfg);
  auto batch = make_batch(2).size();
  ASSERT_OK(append(*log_, 2));
  while (log_->size_bytes() + batch <= cfg.segment_bytes)
    ASSERT_OK(append(*log_, 2));
  ASSERT_EQ(log_->segment_count(), 1u);
  // The job takes the segment's dirty mark; the next append rolls before
  // the job ran: sealing must sync the segment itself.
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  auto syncs = faulty_.syncs_of(".log");
  ASSERT_OK(append(*log_, 2));
  ASSERT_EQ(log_->segment_count(), 2u);
  EXPECT_EQ(faulty_.syncs_of(".log"), syncs + 1);
  auto durable = log_->durable_end();
  EXPECT_EQ(durable, job->end);
  // The late job changes nothing.
  ASSERT_OK(log_->end_flush(*job, caf::none));
  EXPECT_EQ(log_->durable_end(), durable);
}

TEST_F(two_phase_flush_test, a_truncation_voids_a_job_begun_before_it) {
  open_log();
  ASSERT_OK(append(*log_, 4)); // offsets 0..3
  ASSERT_OK(log_->flush());
  ASSERT_OK(append(*log_, 4)); // offsets 4..7
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  EXPECT_EQ(job->end, offset{8});
  ASSERT_OK(log_->truncate_to(offset{4}));
  EXPECT_EQ(log_->durable_end(), offset{4});
  ASSERT_OK(append(*log_, 6)); // offsets 4..9, not synced by the old job
  ASSERT_OK(log_->end_flush(*job, caf::none));
  EXPECT_EQ(log_->durable_end(), offset{4});
}

TEST_F(two_phase_flush_test, data_synced_on_a_pool_thread_survives_a_reopen) {
  sync_pool pool{{.threads = 2}};
  open_log();
  for (int i = 0; i < 5; ++i)
    ASSERT_OK(append(*log_, 3));
  auto job = log_->begin_flush();
  ASSERT_OK(job);
  results r;
  pool.submit(job->file, r.callback());
  ASSERT_TRUE(r.wait_for(1));
  ASSERT_OK(log_->end_flush(*job, std::move(r.errors[0])));
  EXPECT_EQ(log_->durable_end(), offset{15});
  ASSERT_FALSE(log_->close());
  log_.reset();
  open_log();
  EXPECT_EQ(log_->log_end(), offset{15});
}

} // namespace
