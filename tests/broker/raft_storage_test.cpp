// The LMDB Raft store (broker/raft_storage.hpp): the documented encoding,
// reopening keeps hard state, log and snapshot, truncation of a conflicting
// suffix, compaction by a snapshot (with and without the suffix), corrupt
// rows; a write that finds the disk full changes nothing (on a real full
// tmpfs); and the in-memory store behaves the same.

#include "broker/raft_storage.hpp"

#include "broker/error.hpp"
#include "broker/lmdb.hpp"
#include "tests/chaos/small_disks.hpp"
#include "tests/temp_dir.hpp"

#include <sys/mount.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

// A private mount namespace for the full-disk test's tmpfs: entered before
// any thread starts (see small_disks.hpp).
const bool disks_available = ferry::test::small_disks::instance().available();

raft_entry cmd(uint64_t term, std::string data) {
  return raft_entry{term, raft_entry_kind::command, std::move(data)};
}

class RaftStorage : public ::testing::Test {
protected:
  void SetUp() override { reopen(); }

  void TearDown() override {
    store_.reset();
    env_.reset();
  }

  /// Closes and reopens the environment (what a process restart does).
  void reopen() {
    store_.reset();
    env_.reset();
    lmdb::env_options opts;
    opts.initial_map_size = size_t{1} << 20;
    auto e = lmdb::env::open(dir_.path(), opts);
    ASSERT_TRUE(e) << describe(e.error());
    env_ = std::move(*e);
    auto s = raft_storage::open(*env_);
    ASSERT_TRUE(s) << describe(s.error());
    store_ = std::move(*s);
  }

  raft_persistent_state load() {
    auto st = store_->load();
    EXPECT_TRUE(st) << describe(st.error());
    return st ? *st : raft_persistent_state{};
  }

  ferry::test::temp_dir dir_{"ferry-raft-storage"};
  std::unique_ptr<lmdb::env> env_;
  std::unique_ptr<raft_storage> store_;
};

} // namespace

TEST_F(RaftStorage, NewStoreIsEmpty) {
  auto st = load();
  EXPECT_EQ(st.hard, raft_hard_state{});
  EXPECT_EQ(st.hard.voted_for, -1);
  EXPECT_EQ(st.snapshot, raft_snapshot{});
  EXPECT_TRUE(st.entries.empty());
}

TEST_F(RaftStorage, ReopenKeepsEverything) {
  ASSERT_FALSE(store_->save_hard_state({7, 2}));
  ASSERT_FALSE(store_->append(1, {cmd(1, "a"), cmd(2, "b"),
                                  raft_entry{3, raft_entry_kind::noop, {}}}));
  reopen();
  auto st = load();
  EXPECT_EQ(st.hard, (raft_hard_state{7, 2}));
  ASSERT_EQ(st.entries.size(), 3u);
  EXPECT_EQ(st.entries[0], cmd(1, "a"));
  EXPECT_EQ(st.entries[1], cmd(2, "b"));
  EXPECT_EQ(st.entries[2].kind, raft_entry_kind::noop);
  EXPECT_EQ(st.entries[2].term, 3u);
  ASSERT_FALSE(store_->save_snapshot({2, 2, "state@2"}, true));
  reopen();
  st = load();
  EXPECT_EQ(st.snapshot, (raft_snapshot{2, 2, "state@2"}));
  ASSERT_EQ(st.entries.size(), 1u);
  EXPECT_EQ(st.entries[0].term, 3u);
}

TEST_F(RaftStorage, AppendTruncatesTheConflictingSuffix) {
  ASSERT_FALSE(store_->append(1, {cmd(1, "a"), cmd(1, "b"), cmd(1, "c"),
                                  cmd(1, "d")}));
  ASSERT_FALSE(store_->append(3, {cmd(2, "x")}));
  reopen();
  auto st = load();
  ASSERT_EQ(st.entries.size(), 3u);
  EXPECT_EQ(st.entries[1], cmd(1, "b"));
  EXPECT_EQ(st.entries[2], cmd(2, "x"));
  // Pure truncation.
  ASSERT_FALSE(store_->append(2, {}));
  EXPECT_EQ(load().entries.size(), 1u);
  EXPECT_TRUE(is(store_->append(0, {}), ec::invalid_argument));
}

TEST_F(RaftStorage, SnapshotCompactsTheLog) {
  std::vector<raft_entry> es;
  for (int i = 1; i <= 10; ++i)
    es.push_back(cmd(1, "e" + std::to_string(i)));
  ASSERT_FALSE(store_->append(1, es));
  ASSERT_FALSE(store_->save_snapshot({6, 1, "s6"}, true));
  auto st = load();
  EXPECT_EQ(st.snapshot.index, 6u);
  ASSERT_EQ(st.entries.size(), 4u);
  EXPECT_EQ(st.entries[0], cmd(1, "e7"));
  // Appends continue after the snapshot.
  ASSERT_FALSE(store_->append(11, {cmd(2, "e11")}));
  EXPECT_EQ(load().entries.size(), 5u);
  // An installed snapshot that conflicts drops the whole log.
  ASSERT_FALSE(store_->save_snapshot({8, 3, "s8"}, false));
  reopen();
  st = load();
  EXPECT_EQ(st.snapshot, (raft_snapshot{8, 3, "s8"}));
  EXPECT_TRUE(st.entries.empty());
  ASSERT_FALSE(store_->append(9, {cmd(3, "e9")}));
  EXPECT_EQ(load().entries.size(), 1u);
}

TEST_F(RaftStorage, EncodingMatchesTheDocumentedLayout) {
  EXPECT_EQ(raft_format::encode_hard_state({3, 2}),
            std::string("\x01\0\0\0\0\0\0\0\x03\0\0\0\x02", 13));
  EXPECT_EQ(raft_format::encode_hard_state({1, -1}),
            std::string("\x01\0\0\0\0\0\0\0\x01\xff\xff\xff\xff", 13));
  EXPECT_EQ(raft_format::encode_index(5), std::string("\0\0\0\0\0\0\0\x05", 8));
  EXPECT_EQ(raft_format::encode_entry(cmd(3, "ab")),
            std::string("\x01\0\0\0\0\0\0\0\x03\0ab", 12));
  auto hs = raft_format::decode_hard_state(
    raft_format::encode_hard_state({9, -1}));
  ASSERT_TRUE(hs);
  EXPECT_EQ(*hs, (raft_hard_state{9, -1}));
}

TEST_F(RaftStorage, CorruptRowsAreReported) {
  EXPECT_TRUE(is(raft_format::decode_entry(std::string_view("\x01\0\0", 3)).error(),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(raft_format::decode_entry(std::string("\x02\0\0\0\0\0\0\0\x01\0", 10)).error(),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(raft_format::decode_entry(std::string("\x01\0\0\0\0\0\0\0\x01\x07", 10)).error(),
                 ec::corrupt_segment));
  EXPECT_TRUE(is(raft_format::decode_hard_state("xx").error(),
                 ec::corrupt_segment));
  // A gap in the log is corruption too.
  auto db = env_->open_db(raft_format::log_db);
  ASSERT_TRUE(db);
  ASSERT_FALSE(env_->write([&](lmdb::txn& t) {
    if (auto err = t.put(*db, raft_format::encode_index(1),
                         raft_format::encode_entry(cmd(1, "a"))))
      return err;
    return t.put(*db, raft_format::encode_index(3),
                 raft_format::encode_entry(cmd(1, "c")));
  }));
  auto st = store_->load();
  ASSERT_FALSE(st);
  EXPECT_TRUE(is(st.error(), ec::corrupt_segment)) << describe(st.error());
}

// What the Raft core relies on when a store write fails (raft_core.hpp):
// the failed write changed nothing, the store still reads and, once the
// disk has room again, writes. Seen in the chaos suite: on a full tmpfs an
// LMDB commit fails (ENOSPC, or EIO for a short write).
TEST(RaftStorageFullDisk, AFailedWriteChangesNothingAndWritesWorkOnceThereIsRoom) {
  if (!disks_available)
    GTEST_SKIP() << "no small tmpfs: " << ferry::test::small_disks::instance().why_not();
  ferry::test::temp_dir dir{"ferry-raft-full"};
  auto disk = dir.path() / "disk";
  auto& disks = ferry::test::small_disks::instance();
  ASSERT_EQ(disks.mount_at(disk, size_t{2} << 20), "");
  struct unmount {
    fs::path at;
    ~unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount_at_end{disk};
  auto data = disk / "raft";
  fs::create_directories(data);
  auto open = [&](std::unique_ptr<lmdb::env>& env, std::unique_ptr<raft_storage>& store) {
    store.reset();
    env.reset();
    lmdb::env_options opts;
    opts.initial_map_size = size_t{8} << 20; // beyond the disk: the disk fills first
    auto e = lmdb::env::open(data, opts);
    ASSERT_TRUE(e) << describe(e.error());
    env = std::move(*e);
    auto s = raft_storage::open(*env);
    ASSERT_TRUE(s) << describe(s.error());
    store = std::move(*s);
  };
  std::unique_ptr<lmdb::env> env;
  std::unique_ptr<raft_storage> store;
  open(env, store);
  ASSERT_FALSE(store->save_hard_state({3, 1}));
  ASSERT_FALSE(store->append(1, {cmd(1, "a"), cmd(2, "b"), cmd(3, "c")}));
  std::string why;
  ASSERT_GT(disks.fill(disk, why), 0) << why;
  // Entries that cannot fit: the commit fails, and nothing of it shows.
  std::string big(256 << 10, 'x');
  caf::error err;
  for (uint64_t i = 4; i < 40 && !err; ++i)
    err = store->append(i, {cmd(3, big)});
  ASSERT_TRUE(err) << "a full disk refused a write";
  EXPECT_TRUE(is(err, ec::disk_full) || is(err, ec::lmdb_error)) << describe(err);
  std::cout << "[full disk] the refused write: " << describe(err) << "\n";
  auto failed_hard = store->save_hard_state({4, 2});
  auto st = store->load();
  ASSERT_TRUE(st) << describe(st.error());
  if (failed_hard) {
    EXPECT_EQ(st->hard, (raft_hard_state{3, 1}));
  }
  auto entries_before = st->entries.size();
  ASSERT_GE(entries_before, 3u);
  EXPECT_EQ(st->entries[2], cmd(3, "c"));
  // A restart reads the same.
  open(env, store);
  st = store->load();
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->entries.size(), entries_before);
  // Room again: the same store writes.
  disks.release(disk);
  ASSERT_FALSE(store->save_hard_state({5, 3}));
  ASSERT_FALSE(store->append(entries_before + 1, {cmd(5, "after")}));
  st = store->load();
  ASSERT_TRUE(st) << describe(st.error());
  EXPECT_EQ(st->hard, (raft_hard_state{5, 3}));
  ASSERT_EQ(st->entries.size(), entries_before + 1);
  EXPECT_EQ(st->entries.back(), cmd(5, "after"));
  store.reset();
  env.reset();
}

TEST(RaftMemoryStore, BehavesLikeTheLmdbStore) {
  raft_memory_store m;
  ASSERT_FALSE(m.save_hard_state({4, 1}));
  ASSERT_FALSE(m.append(1, {cmd(1, "a"), cmd(1, "b"), cmd(1, "c")}));
  ASSERT_FALSE(m.append(2, {cmd(2, "x")}));
  ASSERT_FALSE(m.save_snapshot({1, 1, "s"}, true));
  auto st = m.load();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->hard, (raft_hard_state{4, 1}));
  EXPECT_EQ(st->snapshot.index, 1u);
  ASSERT_EQ(st->entries.size(), 1u);
  EXPECT_EQ(st->entries[0], cmd(2, "x"));
}
