// dir_remover: a deleted partition's directory is renamed into the trash at
// once and removed later, off the caller's thread; what a killed process
// left in the trash is removed by the next one's sweep.

#include "broker/dir_remover.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

/// A partition directory with a segment's three files.
fs::path make_partition_dir(const fs::path& root, const std::string& name) {
  auto dir = root / "topics" / name;
  fs::create_directories(dir);
  for (auto ext : {".log", ".index", ".timeindex"}) {
    std::ofstream out{dir / (std::string(20, '0') + ext)};
    out << "data of " << name;
  }
  return dir;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

dir_remover_options no_threads() {
  return dir_remover_options{.threads = 0};
}

} // namespace

TEST(dir_remover, discard_moves_the_directory_into_the_trash_and_removes_it_later) {
  temp_dir tmp;
  auto root = tmp.path();
  auto dir = make_partition_dir(root, "t-0");
  dir_remover trash{root, no_threads()};
  ASSERT_FALSE(trash.discard(dir));
  EXPECT_FALSE(fs::exists(dir)) << "the partition's name is free at once";
  auto in_trash = names_in(dir_remover::trash_dir(root));
  ASSERT_EQ(in_trash.size(), 1u);
  EXPECT_EQ(in_trash[0].rfind("t-0.", 0), 0u) << in_trash[0];
  EXPECT_EQ(names_in(dir_remover::trash_dir(root) / in_trash[0]).size(), 3u)
    << "moved whole, not removed yet";
  auto s = trash.stats();
  EXPECT_EQ(s.discarded, 1u);
  EXPECT_EQ(s.pending, 1u);
  EXPECT_EQ(s.removed, 0u);
  EXPECT_EQ(trash.run_pending(), 1u);
  EXPECT_TRUE(names_in(dir_remover::trash_dir(root)).empty());
  s = trash.stats();
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.removed, 1u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.removed_in_place, 0u);
}

TEST(dir_remover, a_missing_directory_is_no_error_and_queues_nothing) {
  temp_dir tmp;
  dir_remover trash{tmp.path(), no_threads()};
  EXPECT_FALSE(trash.discard(tmp.path() / "topics" / "never-0"));
  EXPECT_EQ(trash.stats().discarded, 0u);
  EXPECT_EQ(trash.stats().pending, 0u);
  EXPECT_EQ(trash.stats().removed_in_place, 0u);
}

TEST(dir_remover, the_same_partition_deleted_twice_gets_two_names_in_the_trash) {
  temp_dir tmp;
  auto root = tmp.path();
  dir_remover trash{root, no_threads()};
  // Deleted, created again under the same name, deleted again, all before
  // the first removal ran.
  ASSERT_FALSE(trash.discard(make_partition_dir(root, "t-0")));
  ASSERT_FALSE(trash.discard(make_partition_dir(root, "t-0")));
  auto in_trash = names_in(dir_remover::trash_dir(root));
  ASSERT_EQ(in_trash.size(), 2u);
  EXPECT_NE(in_trash[0], in_trash[1]);
  EXPECT_EQ(trash.run_pending(), 2u);
  EXPECT_TRUE(names_in(dir_remover::trash_dir(root)).empty());
  EXPECT_TRUE(names_in(root / "topics").empty());
}

TEST(dir_remover, the_next_start_removes_what_a_stopped_or_killed_process_left) {
  temp_dir tmp;
  auto root = tmp.path();
  {
    // Stopped before its (absent) worker removed anything: as a node
    // killed, or stopped, right after a big delete.
    dir_remover first{root, no_threads()};
    for (int p = 0; p < 5; ++p)
      ASSERT_FALSE(first.discard(make_partition_dir(root, "t-" + std::to_string(p))));
  }
  ASSERT_EQ(names_in(dir_remover::trash_dir(root)).size(), 5u);
  dir_remover next{root, no_threads()};
  EXPECT_EQ(next.sweep(), 5u);
  EXPECT_EQ(next.sweep(), 0u) << "queued once";
  EXPECT_EQ(next.stats().swept, 5u);
  EXPECT_EQ(next.stats().pending, 5u);
  EXPECT_EQ(next.run_pending(), 5u);
  EXPECT_TRUE(names_in(dir_remover::trash_dir(root)).empty());
  EXPECT_EQ(next.stats().removed, 5u);
}

TEST(dir_remover, a_sweep_without_a_trash_finds_nothing) {
  temp_dir tmp;
  dir_remover trash{tmp.path(), no_threads()};
  EXPECT_EQ(trash.sweep(), 0u);
  EXPECT_FALSE(fs::exists(dir_remover::trash_dir(tmp.path())));
}

TEST(dir_remover, when_the_trash_cannot_be_made_the_directory_is_removed_in_place) {
  temp_dir tmp;
  auto root = tmp.path();
  // A file where the trash directory would be: the rename has no target.
  std::ofstream{dir_remover::trash_dir(root)} << "in the way";
  auto dir = make_partition_dir(root, "t-0");
  dir_remover trash{root, no_threads()};
  ASSERT_FALSE(trash.discard(dir));
  EXPECT_FALSE(fs::exists(dir));
  auto s = trash.stats();
  EXPECT_EQ(s.removed_in_place, 1u);
  EXPECT_EQ(s.discarded, 0u);
  EXPECT_EQ(s.pending, 0u);
}

TEST(dir_remover, delete_partition_dir_without_a_remover_removes_in_place) {
  temp_dir tmp;
  auto dir = make_partition_dir(tmp.path(), "t-0");
  ASSERT_FALSE(delete_partition_dir(dir, nullptr, nullptr));
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists(dir_remover::trash_dir(tmp.path())));
}

TEST(dir_remover, the_worker_thread_removes_discarded_directories) {
  temp_dir tmp;
  auto root = tmp.path();
  dir_remover trash{root};
  for (int p = 0; p < 50; ++p)
    ASSERT_FALSE(trash.discard(make_partition_dir(root, "t-" + std::to_string(p))));
  EXPECT_TRUE(names_in(root / "topics").empty());
  // Bounded: the worker has 50 small directories to remove.
  for (int i = 0; i < 1000 && trash.stats().removed < 50; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(trash.stats().removed, 50u);
  EXPECT_EQ(trash.stats().pending, 0u);
  EXPECT_TRUE(names_in(dir_remover::trash_dir(root)).empty());
}
