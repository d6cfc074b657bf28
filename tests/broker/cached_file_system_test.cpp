// cached_file_system: segment files behind a bounded LRU of descriptors.

#include "broker/cached_file_system.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/sync_pool.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

#define ASSERT_OK(x) ASSERT_TRUE(x) << describe((x).error())

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

std::string read_all(ferry::file_handle& f) {
  std::string out(f.size(), '\0');
  auto n = f.read_at(0, std::span<char>{out.data(), out.size()});
  EXPECT_TRUE(n) << describe(n.error());
  out.resize(n ? *n : 0);
  return out;
}

class cached_file_system_test : public ::testing::Test {
protected:
  test::temp_dir dir_{"ferry-fd-cache-test"};
};

TEST_F(cached_file_system_test, many_files_share_a_few_descriptors) {
  cached_file_system cfs{4};
  auto before = open_descriptors();
  std::vector<std::unique_ptr<ferry::file_handle>> files;
  for (int i = 0; i < 50; ++i) {
    auto f = cfs.open(dir_.path() / ("f" + std::to_string(i)), open_mode::create);
    ASSERT_OK(f);
    files.push_back(std::move(*f));
    ASSERT_FALSE(files.back()->append("file " + std::to_string(i)));
    EXPECT_LE(open_descriptors(), before + 4);
  }
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 50; ++i) {
      ASSERT_FALSE(files[i]->append("+"));
      ASSERT_FALSE(files[i]->sync());
      EXPECT_EQ(read_all(*files[i]),
                "file " + std::to_string(i) + (round == 0 ? "+" : "++"));
    }
  EXPECT_LE(open_descriptors(), before + 4);
  auto s = cfs.stats();
  EXPECT_EQ(s.max_open, 4u);
  EXPECT_LE(s.open, 4u);
  EXPECT_EQ(s.handles, 50u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.reopens, 0u);
  files.clear();
  EXPECT_EQ(cfs.stats().open, 0u);
  EXPECT_EQ(cfs.stats().handles, 0u);
  EXPECT_EQ(open_descriptors(), before);
}

TEST_F(cached_file_system_test, a_reopened_file_keeps_size_and_truncates) {
  cached_file_system cfs{1};
  auto a = cfs.open(dir_.path() / "a", open_mode::create_truncate);
  ASSERT_OK(a);
  ASSERT_FALSE((*a)->append("0123456789"));
  auto b = cfs.open(dir_.path() / "b", open_mode::create); // evicts a
  ASSERT_OK(b);
  EXPECT_EQ(cfs.stats().open, 1u);
  EXPECT_EQ((*a)->size(), 10u);
  ASSERT_FALSE((*a)->truncate(4)); // reopens a, evicts b
  ASSERT_FALSE((*a)->append("x"));
  EXPECT_EQ(read_all(**a), "0123x");
  EXPECT_EQ(fs::file_size(dir_.path() / "a"), 5u);
  // open_mode::existing of a missing file is still not_found.
  auto missing = cfs.open(dir_.path() / "missing", open_mode::existing);
  ASSERT_FALSE(missing);
  EXPECT_TRUE(is(missing.error(), ec::not_found));
}

TEST_F(cached_file_system_test, a_sync_of_a_deleted_evicted_file_succeeds) {
  cached_file_system cfs{1};
  auto a = cfs.open(dir_.path() / "a", open_mode::create);
  ASSERT_OK(a);
  ASSERT_FALSE((*a)->append("data"));
  auto b = cfs.open(dir_.path() / "b", open_mode::create); // evicts a
  ASSERT_OK(b);
  fs::remove(dir_.path() / "a");
  EXPECT_FALSE((*a)->sync()) << "a queued sync of a deleted file must not "
                                "fence its (gone) partition";
  auto rd = (*a)->read_at(0, std::span<char>{});
  ASSERT_FALSE(rd);
  EXPECT_TRUE(is(rd.error(), ec::not_found));
}

TEST_F(cached_file_system_test, the_process_limit_gives_a_clear_error) {
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  cached_file_system cfs{100000}; // its own bound never applies here
  std::vector<std::unique_ptr<ferry::file_handle>> files;
  std::vector<int> others; // descriptors outside the cache (sockets, say)
  auto lowered = old;
  lowered.rlim_cur = open_descriptors() + 8;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  // 1. Under the process limit the cache gives up its own idle
  // descriptors: 50 files on fewer than 8 descriptors all open and work.
  caf::error first_failure;
  for (int i = 0; i < 50; ++i) {
    auto f = cfs.open(dir_.path() / ("f" + std::to_string(i)), open_mode::create);
    if (!f) {
      first_failure = std::move(f.error());
      break;
    }
    files.push_back(std::move(*f));
    EXPECT_FALSE(files.back()->append("ok"));
  }
  // 2. Once descriptors outside the cache take the rest, an open fails
  // with the clear error instead of EMFILE deep inside a log.
  for (int i = 0; i < 64; ++i) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      break;
    others.push_back(fd);
  }
  files.clear(); // closes the cached descriptors: room for at most a few
  for (int i = 0; i < 64; ++i) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      break;
    others.push_back(fd);
  }
  auto f = cfs.open(dir_.path() / "one-more", open_mode::create);
  for (int fd : others)
    ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_FALSE(first_failure) << describe(first_failure);
  EXPECT_LE(cfs.stats().open, 8u);
  ASSERT_FALSE(f) << "an open with no descriptor left succeeded";
  auto text = describe(f.error());
  EXPECT_TRUE(is(f.error(), ec::io_error)) << text;
  EXPECT_NE(text.find("too many open files"), std::string::npos) << text;
  EXPECT_NE(text.find("ulimit -n"), std::string::npos) << text;
  EXPECT_NE(text.find("RLIMIT_NOFILE"), std::string::npos) << text;
}

TEST_F(cached_file_system_test, default_bound_leaves_room_for_sockets) {
  EXPECT_EQ(cached_file_system::default_max_open(20000), 15000u);
  EXPECT_EQ(cached_file_system::default_max_open(1u << 20), 786432u);
  EXPECT_EQ(cached_file_system::default_max_open(4096), 3072u);
  EXPECT_EQ(cached_file_system::default_max_open(1024), 64u);
}

std::string batch_of(int n, char fill) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = 1'000'000 + i;
    r.value = std::string(40, fill);
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

// 200 partition logs (600+ files) on 24 descriptors, their flushes on pool
// threads while the next round is being appended: every log reopens with
// exactly what was written.
TEST_F(cached_file_system_test, two_hundred_logs_on_two_dozen_descriptors) {
  constexpr int partitions = 200;
  cached_file_system cfs{24};
  sync_pool pool{{.threads = 3, .syncfs_threshold = 16}};
  std::vector<memory_checkpoint> ckpts(partitions);
  std::vector<std::unique_ptr<partition_log>> logs;
  log_config cfg;
  cfg.segment_bytes = 2048; // a few rolls each
  cfg.index_interval_bytes = 128;
  for (int p = 0; p < partitions; ++p) {
    auto l = partition_log::open(dir_.path() / ("p" + std::to_string(p)), cfg,
                                 &ckpts[p], &cfs);
    ASSERT_OK(l);
    logs.push_back(std::move(*l));
  }
  auto before = open_descriptors();
  std::mutex mtx;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<caf::error> errors(partitions);
  for (int round = 0; round < 8; ++round) {
    std::vector<flush_job> jobs(partitions);
    done = 0;
    for (int p = 0; p < partitions; ++p) {
      auto b = batch_of(3, static_cast<char>('a' + round));
      ASSERT_OK(logs[p]->append(std::span<char>{b.data(), b.size()}));
      auto job = logs[p]->begin_flush();
      ASSERT_OK(job);
      jobs[p] = *job;
      if (!job->file) {
        std::lock_guard<std::mutex> guard{mtx};
        ++done;
        continue;
      }
      pool.submit(job->file, [&, p](caf::error err) {
        std::lock_guard<std::mutex> guard{mtx};
        errors[p] = std::move(err);
        ++done;
        cv.notify_all();
      });
    }
    {
      std::unique_lock<std::mutex> lock{mtx};
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds{30},
                              [&] { return done == partitions; }));
    }
    for (int p = 0; p < partitions; ++p) {
      ASSERT_OK(logs[p]->end_flush(jobs[p], std::move(errors[p])));
      EXPECT_EQ(logs[p]->durable_end(), offset{3 * (round + 1)});
    }
  }
  EXPECT_LE(open_descriptors(), before + 24);
  EXPECT_LE(cfs.stats().open, 24u);
  for (auto& l : logs)
    ASSERT_FALSE(l->close());
  logs.clear();
  for (int p = 0; p < partitions; ++p) {
    auto l = partition_log::open(dir_.path() / ("p" + std::to_string(p)), cfg,
                                 &ckpts[p], &cfs);
    ASSERT_OK(l);
    EXPECT_EQ((*l)->log_end(), offset{24});
    EXPECT_EQ((*l)->recovery().bytes_truncated, 0u);
    auto rd = (*l)->read(offset{21}, 1 << 20, offset{24});
    ASSERT_OK(rd);
    auto d = decode_batch(rd->data);
    ASSERT_OK(d);
    EXPECT_EQ(d->records.at(0).value, std::string(40, 'h'));
  }
}

} // namespace
