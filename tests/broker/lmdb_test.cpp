// Tests of the LMDB layer (broker/lmdb.hpp) and the metadata store on it.

#include "broker/lmdb.hpp"
#include "broker/metadata_store.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * 1024;

/// A fresh directory (test::temp_dir), removed with the fixture.
class temp_dir_test : public ::testing::Test {
protected:
  lmdb::env_options tiny_map() {
    lmdb::env_options o;
    o.initial_map_size = 64 * KiB;
    o.max_map_size = 1024 * MiB;
    o.no_sync = true;
    return o;
  }

  std::unique_ptr<lmdb::env> open_env(lmdb::env_options o) {
    auto e = lmdb::env::open(dir_.path() / "env", o);
    EXPECT_TRUE(e) << describe(e.error());
    return e ? std::move(*e) : nullptr;
  }

  std::string key_of(int i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "k%08d", i);
    return buf;
  }

  std::string value_of(int i, size_t size) {
    std::string v(size, static_cast<char>('a' + i % 26));
    v.replace(0, std::min(size, key_of(i).size()), key_of(i));
    return v;
  }

  /// Every key 0..n-1 holds value_of(i, size).
  void expect_all(lmdb::env& e, lmdb::dbi db, int n, size_t size) {
    auto err = e.read([&](lmdb::txn& t) -> caf::error {
      for (int i = 0; i < n; ++i) {
        auto v = t.get(db, key_of(i));
        if (!v)
          return make_error(ec::not_found, key_of(i));
        if (*v != value_of(i, size))
          return make_error(ec::corrupt_segment, key_of(i));
      }
      return caf::none;
    });
    EXPECT_FALSE(err) << describe(err);
  }

  ferry::test::temp_dir dir_{"ferry-lmdb-test"};
};

using lmdb_env_test = temp_dir_test;
using metadata_store_test = temp_dir_test;

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

partition_metadata sample_metadata() {
  partition_metadata md;
  md.log_start = offset{100};
  md.high_watermark = offset{4242};
  md.epochs = {{leader_epoch{0}, offset{0}},
               {leader_epoch{3}, offset{1500}},
               {leader_epoch{7}, offset{4000}}};
  return md;
}

} // namespace

// -- lmdb::env ----------------------------------------------------------------

TEST_F(lmdb_env_test, MapGrowsWhenOneWriteNeedsSeveralMiB) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  int runs = 0;
  auto err = e->write([&](lmdb::txn& t) -> caf::error {
    ++runs;
    for (int i = 0; i < 1024; ++i)
      if (auto err = t.put(*db, key_of(i), value_of(i, 4 * KiB)))
        return err;
    return caf::none;
  });
  ASSERT_FALSE(err) << describe(err);
  auto s = e->stats();
  EXPECT_GE(s.map_size, 4 * MiB);
  EXPECT_GT(s.map_growths, 0u);
  EXPECT_GT(s.map_full_in_txn, 0u);
  EXPECT_EQ(runs, static_cast<int>(1 + s.map_growths));
  expect_all(*e, *db, 1024, 4 * KiB);
}

TEST_F(lmdb_env_test, MapGrowsAcrossManySmallWrites) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  for (int i = 0; i < 1500; ++i) {
    auto err = e->write([&](lmdb::txn& t) {
      return t.put(*db, key_of(i), value_of(i, 4 * KiB));
    });
    ASSERT_FALSE(err) << i << ": " << describe(err);
  }
  auto s = e->stats();
  EXPECT_GE(s.map_size, 6 * MiB);
  EXPECT_GT(s.map_growths, 0u);
  expect_all(*e, *db, 1500, 4 * KiB);
}

TEST_F(lmdb_env_test, MapGrowsWhenCommitReportsMapFull) {
  // Small values in their own txns fill the map so that the puts fit but the
  // commit's free-list update does not: LMDB then fails in mdb_txn_commit
  // (and frees the txn). Deterministic for a given LMDB version.
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  for (int i = 0; i < 300; ++i) {
    auto err = e->write([&](lmdb::txn& t) {
      return t.put(*db, key_of(i), value_of(i, 100 + i));
    });
    ASSERT_FALSE(err) << i << ": " << describe(err);
  }
  auto s = e->stats();
  EXPECT_GT(s.map_full_in_commit, 0u);
  EXPECT_GT(s.map_growths, 0u);
  auto err = e->read([&](lmdb::txn& t) -> caf::error {
    for (int i = 0; i < 300; ++i) {
      auto v = t.get(*db, key_of(i));
      if (!v || *v != value_of(i, 100 + i))
        return make_error(ec::corrupt_segment, key_of(i));
    }
    return caf::none;
  });
  EXPECT_FALSE(err) << describe(err);
}

TEST_F(lmdb_env_test, CapReachedReturnsDiskFullAndKeepsEarlierData) {
  auto o = tiny_map();
  o.max_map_size = 256 * KiB;
  auto e = open_env(o);
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  for (int i = 0; i < 10; ++i)
    ASSERT_FALSE(e->write(
      [&](lmdb::txn& t) { return t.put(*db, key_of(i), value_of(i, 1000)); }));
  auto err = e->write([&](lmdb::txn& t) -> caf::error {
    for (int i = 10; i < 1000; ++i)
      if (auto err = t.put(*db, key_of(i), value_of(i, 1000)))
        return err;
    return caf::none;
  });
  ASSERT_TRUE(is(err, ec::disk_full)) << describe(err);
  EXPECT_NE(describe(err).find("max_map_size"), std::string::npos);
  EXPECT_EQ(e->stats().map_size, 256 * KiB);
  expect_all(*e, *db, 10, 1000);
  auto later = e->read([&](lmdb::txn& t) -> caf::error {
    auto v = t.get(*db, key_of(10));
    return v ? make_error(ec::invalid_argument, "partial write visible")
             : caf::none;
  });
  EXPECT_FALSE(later) << describe(later);
  // Still writable for what fits.
  EXPECT_FALSE(e->write(
    [&](lmdb::txn& t) { return t.put(*db, "small", "value"); }));
}

TEST_F(lmdb_env_test, TxnAbortsOnDestruction) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  {
    auto t = e->begin_write();
    ASSERT_TRUE(t) << describe(t.error());
    ASSERT_FALSE(t->put(*db, "uncommitted", "x"));
    auto v = t->get(*db, "uncommitted");
    ASSERT_TRUE(v);
    EXPECT_EQ(*v, "x");
  }
  // The writer lock was released too, or this would block.
  auto t = e->begin_write();
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_TRUE(is(t->get(*db, "uncommitted").error(), ec::not_found));
  ASSERT_FALSE(t->put(*db, "committed", "y"));
  ASSERT_FALSE(t->commit());
  EXPECT_FALSE(t->active());
  EXPECT_TRUE(is(t->commit(), ec::invalid_argument));
  auto r = e->begin_read();
  ASSERT_TRUE(r);
  EXPECT_TRUE(is(r->get(*db, "uncommitted").error(), ec::not_found));
  auto v = r->get(*db, "committed");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, "y");
}

TEST_F(lmdb_env_test, WriteDiscardsEverythingWhenFnFails) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  auto err = e->write([&](lmdb::txn& t) -> caf::error {
    if (auto err = t.put(*db, "a", "1"))
      return err;
    return make_error(ec::invalid_argument, "caller gives up");
  });
  EXPECT_TRUE(is(err, ec::invalid_argument));
  auto r = e->read([&](lmdb::txn& t) -> caf::error {
    auto v = t.get(*db, "a");
    return v ? make_error(ec::invalid_argument, "visible") : caf::none;
  });
  EXPECT_FALSE(r) << describe(r);
}

TEST_F(lmdb_env_test, ReopenKeepsDataAndTheGrownMap) {
  size_t grown = 0;
  {
    auto e = open_env(tiny_map());
    auto db = e->open_db("data");
    ASSERT_TRUE(db);
    ASSERT_FALSE(e->write([&](lmdb::txn& t) -> caf::error {
      for (int i = 0; i < 512; ++i)
        if (auto err = t.put(*db, key_of(i), value_of(i, 4 * KiB)))
          return err;
      return caf::none;
    }));
    grown = e->stats().map_size;
  }
  auto file_size = fs::file_size(dir_.path() / "env" / "data.mdb");
  ASSERT_GE(file_size, 2 * MiB);
  // Reopened with the tiny configured size, the env keeps the grown map:
  // LMDB alone would shrink it to the pages in use.
  auto e = open_env(tiny_map());
  EXPECT_GE(e->stats().map_size, file_size);
  EXPECT_EQ(e->stats().map_size, grown);
  auto missing = e->open_db("nope", false);
  EXPECT_TRUE(is(missing.error(), ec::not_found));
  auto db = e->open_db("data", false);
  ASSERT_TRUE(db) << describe(db.error());
  expect_all(*e, *db, 512, 4 * KiB);
  ASSERT_FALSE(e->write([&](lmdb::txn& t) { return t.put(*db, "one", "more"); }));
  EXPECT_EQ(e->stats().map_growths, 0u);
  // A configured size above the stored one wins.
  e.reset();
  auto o = tiny_map();
  o.initial_map_size = grown * 2;
  e = open_env(o);
  EXPECT_EQ(e->stats().map_size, grown * 2);
}

TEST_F(lmdb_env_test, OpeningTheSameEnvTwiceInOneProcessIsRefused) {
  auto e = open_env(tiny_map());
  auto again = lmdb::env::open(dir_.path() / "env" / "." , tiny_map());
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::invalid_argument));
  e.reset();
  auto after_close = lmdb::env::open(dir_.path() / "env", tiny_map());
  EXPECT_TRUE(after_close);
}

TEST_F(lmdb_env_test, ReadTxnsGiveBackTheirReaderSlots) {
  auto o = tiny_map();
  o.max_readers = 8;
  auto e = open_env(o);
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  ASSERT_FALSE(e->write([&](lmdb::txn& t) { return t.put(*db, "k", "v"); }));
  for (int i = 0; i < 1000; ++i) {
    auto err = e->read([&](lmdb::txn& t) -> caf::error {
      auto v = t.get(*db, "k");
      return v ? caf::none : std::move(v.error());
    });
    ASSERT_FALSE(err) << i << ": " << describe(err);
  }
  for (int i = 0; i < 1000; ++i) {
    auto t = e->begin_read();
    ASSERT_TRUE(t) << i << ": " << describe(t.error());
  }
  // The limit is real: 8 open read txns exhaust the slots.
  std::vector<lmdb::txn> open;
  for (int i = 0; i < 8; ++i) {
    auto t = e->begin_read();
    ASSERT_TRUE(t) << describe(t.error());
    open.push_back(std::move(*t));
  }
  auto ninth = e->begin_read();
  ASSERT_FALSE(ninth);
  EXPECT_TRUE(is(ninth.error(), ec::lmdb_error)) << describe(ninth.error());
  open.clear();
  EXPECT_TRUE(e->begin_read());
}

TEST_F(lmdb_env_test, ConcurrentWritersAreSerialised) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  constexpr int per_thread = 300;
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  auto writer = [&](int id) {
    for (int i = 0; i < per_thread; ++i) {
      auto err = e->write([&](lmdb::txn& t) -> caf::error {
        int n = 0;
        if (auto v = t.get(*db, "counter"))
          n = std::stoi(std::string{*v});
        if (auto err = t.put(*db, "counter", std::to_string(n + 1)))
          return err;
        // Padding so the map has to grow while the other thread waits.
        return t.put(*db, key_of(id * per_thread + i), std::string(2000, 'p'));
      });
      if (err)
        failed = true;
    }
  };
  // A reader runs throughout, so growth must wait for its txns to end.
  std::thread reader([&] {
    while (!done)
      if (auto err = e->read([&](lmdb::txn& t) -> caf::error {
            auto v = t.get(*db, "counter");
            return v || is(v.error(), ec::not_found) ? caf::none
                                                     : std::move(v.error());
          }))
        failed = true;
  });
  std::thread a(writer, 0);
  std::thread b(writer, 1);
  a.join();
  b.join();
  done = true;
  reader.join();
  EXPECT_FALSE(failed);
  EXPECT_GT(e->stats().map_growths, 0u);
  auto err = e->read([&](lmdb::txn& t) -> caf::error {
    auto v = t.get(*db, "counter");
    if (!v)
      return std::move(v.error());
    EXPECT_EQ(*v, std::to_string(2 * per_thread));
    return caf::none;
  });
  EXPECT_FALSE(err) << describe(err);
}

TEST_F(lmdb_env_test, GrowthGivesUpWhileThisThreadHoldsAReadTxn) {
  auto o = tiny_map();
  o.grow_wait = std::chrono::milliseconds{50};
  auto e = open_env(o);
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  auto big = [&](lmdb::txn& t) -> caf::error {
    for (int i = 0; i < 64; ++i)
      if (auto err = t.put(*db, key_of(i), value_of(i, 4 * KiB)))
        return err;
    return caf::none;
  };
  {
    auto r = e->begin_read();
    ASSERT_TRUE(r);
    auto err = e->write(big);
    EXPECT_TRUE(is(err, ec::lmdb_error)) << describe(err);
    EXPECT_NE(describe(err).find("still open"), std::string::npos);
  }
  EXPECT_FALSE(e->write(big));
  expect_all(*e, *db, 64, 4 * KiB);
}

TEST_F(lmdb_env_test, NestedWriteIsRefusedInsteadOfDeadlocking) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  caf::error inner;
  caf::error inner_open;
  auto err = e->write([&](lmdb::txn& t) -> caf::error {
    inner = e->write([&](lmdb::txn& t2) { return t2.put(*db, "b", "2"); });
    inner_open = e->open_db("other").error();
    return t.put(*db, "a", "1");
  });
  EXPECT_FALSE(err) << describe(err);
  EXPECT_TRUE(is(inner, ec::invalid_argument)) << describe(inner);
  EXPECT_TRUE(is(inner_open, ec::invalid_argument)) << describe(inner_open);
}

TEST_F(lmdb_env_test, AWriteGroupCommitsItsWritesTogether) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  std::string seen_inside;
  caf::error failed_write;
  auto err = e->write_group([&]() -> caf::error {
    for (int i = 0; i < 10; ++i)
      if (auto err = e->write([&](lmdb::txn& t) {
            return t.put(*db, key_of(i), value_of(i, 16));
          }))
        return err;
    // A write that fails is undone alone; the group goes on.
    failed_write = e->write([&](lmdb::txn& t) -> caf::error {
      if (auto err = t.put(*db, "undone", "x"))
        return err;
      return make_error(ec::invalid_argument, "refused");
    });
    // Reads see what the group wrote so far.
    auto rerr = e->read([&](lmdb::txn& t) -> caf::error {
      auto v = t.get(*db, key_of(3));
      if (!v)
        return std::move(v.error());
      seen_inside.assign(*v);
      return caf::none;
    });
    if (rerr)
      return rerr;
    // Another thread's read does not see them before the group commits.
    bool outside = true;
    std::thread reader([&] {
      auto r = e->begin_read();
      outside = r && static_cast<bool>(r->get(*db, key_of(3)));
    });
    reader.join();
    if (outside)
      return make_error(ec::invalid_argument, "visible before the commit");
    // Joining a group of the same env just runs.
    return e->write_group([&] {
      return e->write([&](lmdb::txn& t) { return t.put(*db, "joined", "y"); });
    });
  });
  ASSERT_FALSE(err) << describe(err);
  EXPECT_TRUE(is(failed_write, ec::invalid_argument));
  EXPECT_EQ(seen_inside, value_of(3, 16));
  expect_all(*e, *db, 10, 16);
  auto r = e->begin_read();
  ASSERT_TRUE(r);
  EXPECT_TRUE(is(r->get(*db, "undone").error(), ec::not_found));
  EXPECT_EQ(*r->get(*db, "joined"), "y");
}

TEST_F(lmdb_env_test, AFailedWriteGroupLeavesNothing) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  auto err = e->write_group([&]() -> caf::error {
    if (auto err = e->write([&](lmdb::txn& t) { return t.put(*db, "a", "1"); }))
      return err;
    return make_error(ec::invalid_argument, "give up");
  });
  EXPECT_TRUE(is(err, ec::invalid_argument));
  auto r = e->begin_read();
  ASSERT_TRUE(r);
  EXPECT_TRUE(is(r->get(*db, "a").error(), ec::not_found));
  r->abort();
  // Inside a plain write, a group is refused instead of deadlocking.
  caf::error inner;
  err = e->write([&](lmdb::txn& t) -> caf::error {
    inner = e->write_group([] { return caf::error{}; });
    return t.put(*db, "b", "2");
  });
  EXPECT_FALSE(err);
  EXPECT_TRUE(is(inner, ec::invalid_argument)) << describe(inner);
}

TEST_F(lmdb_env_test, AWriteGroupGrowsTheMapAndRunsAgain) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  int runs = 0;
  auto err = e->write_group([&]() -> caf::error {
    ++runs;
    for (int i = 0; i < 1024; ++i)
      if (auto err = e->write([&](lmdb::txn& t) {
            return t.put(*db, key_of(i), value_of(i, 4 * KiB));
          }))
        return err;
    return caf::none;
  });
  ASSERT_FALSE(err) << describe(err);
  auto s = e->stats();
  EXPECT_GT(s.map_growths, 0u);
  EXPECT_EQ(runs, static_cast<int>(1 + s.map_growths));
  expect_all(*e, *db, 1024, 4 * KiB);
}

TEST_F(lmdb_env_test, CursorIteratesAPrefixAndDeletes) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  ASSERT_FALSE(e->write([&](lmdb::txn& t) -> caf::error {
    for (auto k : {"a1", "b1", "b2", "b3", "bz", "c1"})
      if (auto err = t.put(*db, k, std::string{"v"} + k))
        return err;
    return caf::none;
  }));
  std::vector<std::string> seen;
  ASSERT_FALSE(e->read([&](lmdb::txn& t) -> caf::error {
    auto c = t.open_cursor(*db);
    if (!c)
      return std::move(c.error());
    return c->for_each_prefix("b", [&](std::string_view k, std::string_view v) {
      seen.push_back(std::string{k} + "=" + std::string{v});
      return k != "b3";
    });
  }));
  EXPECT_EQ(seen, (std::vector<std::string>{"b1=vb1", "b2=vb2", "b3=vb3"}));
  // Delete b1..b3 with a cursor, then check what is left.
  ASSERT_FALSE(e->write([&](lmdb::txn& t) -> caf::error {
    auto c = t.open_cursor(*db);
    if (!c)
      return std::move(c.error());
    auto more = c->seek("b");
    while (more && *more && c->key() < "bz") {
      if (auto err = c->del())
        return err;
      more = c->next();
    }
    return more ? caf::none : std::move(more.error());
  }));
  seen.clear();
  ASSERT_FALSE(e->read([&](lmdb::txn& t) -> caf::error {
    auto c = t.open_cursor(*db);
    if (!c)
      return std::move(c.error());
    return c->for_each_prefix("", [&](std::string_view k, std::string_view) {
      seen.emplace_back(k);
      return true;
    });
  }));
  EXPECT_EQ(seen, (std::vector<std::string>{"a1", "bz", "c1"}));
}

TEST_F(lmdb_env_test, CursorOutlivingItsTxnIsClosedSafely) {
  auto e = open_env(tiny_map());
  auto db = e->open_db("data");
  ASSERT_TRUE(db);
  ASSERT_FALSE(e->write([&](lmdb::txn& t) { return t.put(*db, "k", "v"); }));
  auto t = e->begin_read();
  ASSERT_TRUE(t);
  auto c = t->open_cursor(*db);
  ASSERT_TRUE(c);
  auto moved = std::move(*c);
  auto first = moved.first();
  ASSERT_TRUE(first && *first);
  t->abort();
  EXPECT_FALSE(moved.valid());
  EXPECT_FALSE(moved.next());
}

// -- metadata_store -------------------------------------------------------------

TEST_F(metadata_store_test, PartitionsRoundTripListEraseAndReopen) {
  auto o = tiny_map();
  auto opened = metadata_store::open(dir_.path() / "meta", o);
  ASSERT_TRUE(opened) << describe(opened.error());
  auto& store = **opened;
  auto md = sample_metadata();
  EXPECT_TRUE(is(store.get_partition("orders", partition_id{0}).error(),
                 ec::not_found));
  ASSERT_FALSE(store.put_partition("orders", partition_id{0}, md));
  auto md1 = md;
  md1.high_watermark = offset{1};
  md1.epochs.clear();
  ASSERT_FALSE(store.put_partition("orders", partition_id{1}, md1));
  ASSERT_FALSE(store.put_partition("orders", partition_id{300}, md));
  ASSERT_FALSE(store.put_partition("audit", partition_id{2}, md1));
  auto got = store.get_partition("orders", partition_id{0});
  ASSERT_TRUE(got) << describe(got.error());
  EXPECT_EQ(*got, md);

  auto all = store.list_partitions();
  ASSERT_TRUE(all) << describe(all.error());
  std::vector<partition_record> want{
    {"audit", partition_id{2}, md1},
    {"orders", partition_id{0}, md},
    {"orders", partition_id{1}, md1},
    {"orders", partition_id{300}, md}};
  EXPECT_EQ(*all, want);
  auto orders = store.list_partitions("orders");
  ASSERT_TRUE(orders);
  EXPECT_EQ(orders->size(), 3u);

  ASSERT_FALSE(store.erase_partition("orders", partition_id{1}));
  EXPECT_FALSE(store.erase_partition("orders", partition_id{1}));
  EXPECT_TRUE(is(store.get_partition("orders", partition_id{1}).error(),
                 ec::not_found));

  EXPECT_TRUE(is(store.put_partition("", partition_id{0}, md),
                 ec::invalid_argument));
  EXPECT_TRUE(is(store.put_partition("x", partition_id{-1}, md),
                 ec::invalid_argument));

  opened->reset();
  auto reopened = metadata_store::open(dir_.path() / "meta", o);
  ASSERT_TRUE(reopened) << describe(reopened.error());
  auto after = (*reopened)->list_partitions();
  ASSERT_TRUE(after);
  EXPECT_EQ(*after, (std::vector<partition_record>{want[0], want[1], want[3]}));
}

TEST_F(metadata_store_test, ListingATopicIgnoresTopicsItIsAPrefixOf) {
  auto store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  auto md = sample_metadata();
  for (auto topic : {"a", "ab", "a.b", "b"})
    ASSERT_FALSE((*store)->put_partition(topic, partition_id{0}, md));
  ASSERT_FALSE((*store)->put_partition("a", partition_id{7}, md));
  auto a = (*store)->list_partitions("a");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].topic, "a");
  EXPECT_EQ((*a)[0].partition, partition_id{0});
  EXPECT_EQ((*a)[1].partition, partition_id{7});
  auto none = (*store)->list_partitions("zzz");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(metadata_store_test, CheckpointRoundTrip) {
  auto store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  auto md = sample_metadata();
  {
    lmdb_partition_checkpoint cp{**store, "orders", partition_id{4}};
    auto first = cp.load();
    ASSERT_TRUE(first) << describe(first.error());
    EXPECT_FALSE(first->has_value());
    ASSERT_FALSE(cp.save(md));
    md.high_watermark = offset{5000};
    md.epochs.push_back({leader_epoch{8}, offset{4900}});
    ASSERT_FALSE(cp.save(md));
  }
  store->reset();
  store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  lmdb_partition_checkpoint cp{**store, "orders", partition_id{4}};
  auto loaded = cp.load();
  ASSERT_TRUE(loaded) << describe(loaded.error());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(**loaded, md);
  lmdb_partition_checkpoint other{**store, "orders", partition_id{5}};
  auto nothing = other.load();
  ASSERT_TRUE(nothing);
  EXPECT_FALSE(nothing->has_value());
}

TEST_F(metadata_store_test, CorruptPartitionValuesAreReportedNotCrashed) {
  auto store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  auto key = metadata_format::encode_partition_key("t", partition_id{0});
  ASSERT_TRUE(key);
  auto good = metadata_format::encode_partition_metadata(sample_metadata());
  auto bad_version = good;
  bad_version[0] = 9;
  auto huge_count = good;
  huge_count[17] = '\xff';
  std::vector<std::pair<std::string, std::string>> cases{
    {"empty", ""},
    {"truncated header", good.substr(0, 10)},
    {"truncated epochs", good.substr(0, good.size() - 1)},
    {"trailing bytes", good + "x"},
    {"unknown version", bad_version},
    {"huge epoch count", huge_count}};
  for (auto& [name, value] : cases) {
    ASSERT_FALSE((*store)->put("partitions", *key, value)) << name;
    auto got = (*store)->get_partition("t", partition_id{0});
    ASSERT_FALSE(got) << name;
    EXPECT_TRUE(is(got.error(), ec::corrupt_segment))
      << name << ": " << describe(got.error());
    auto listed = (*store)->list_partitions();
    ASSERT_FALSE(listed) << name;
    EXPECT_TRUE(is(listed.error(), ec::corrupt_segment)) << name;
    lmdb_partition_checkpoint cp{**store, "t", partition_id{0}};
    EXPECT_TRUE(is(cp.load().error(), ec::corrupt_segment)) << name;
  }
  auto unknown = (*store)->get_partition("t", partition_id{0});
  EXPECT_NE(describe(unknown.error()).find("epochs need"), std::string::npos)
    << describe(unknown.error());
  // Every prefix of a valid value is rejected.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(metadata_format::decode_partition_metadata(good.substr(0, n)))
      << n;
  EXPECT_TRUE(metadata_format::decode_partition_metadata(good));
  // A malformed key in the sub-database is reported too.
  ASSERT_FALSE((*store)->put("partitions", *key, good));
  ASSERT_FALSE((*store)->put("partitions", "no-separator", good));
  auto listed = (*store)->list_partitions();
  ASSERT_FALSE(listed);
  EXPECT_TRUE(is(listed.error(), ec::corrupt_segment));
}

TEST_F(metadata_store_test, WriteBatchIsAllOrNothing) {
  auto store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  auto& s = **store;
  ASSERT_FALSE(s.put("groups", "g0", "old"));
  metadata_batch failing;
  for (int i = 0; i < 100; ++i)
    failing.put("offsets", key_of(i), value_of(i, 500));
  failing.put_partition("orders", partition_id{0}, sample_metadata());
  failing.erase("groups", "g0");
  failing.put("offsets", "", "LMDB rejects an empty key"); // fails in the txn
  auto err = s.write_batch(failing);
  ASSERT_TRUE(is(err, ec::lmdb_error)) << describe(err);
  EXPECT_TRUE(is(s.get("offsets", key_of(0)).error(), ec::not_found));
  EXPECT_TRUE(is(s.get_partition("orders", partition_id{0}).error(),
                 ec::not_found));
  auto g0 = s.get("groups", "g0");
  ASSERT_TRUE(g0);
  EXPECT_EQ(*g0, "old");

  metadata_batch invalid;
  invalid.put("offsets", "k", "v");
  invalid.put_partition("", partition_id{0}, sample_metadata());
  EXPECT_TRUE(is(s.write_batch(invalid), ec::invalid_argument));
  EXPECT_TRUE(is(s.get("offsets", "k").error(), ec::not_found));

  metadata_batch ok;
  for (int i = 0; i < 100; ++i)
    ok.put("offsets", key_of(i), value_of(i, 500));
  ok.put_partition("orders", partition_id{0}, sample_metadata());
  ok.erase("groups", "g0");
  ok.erase("groups", "never-there");
  ASSERT_FALSE(s.write_batch(ok));
  EXPECT_TRUE(is(s.get("groups", "g0").error(), ec::not_found));
  int n = 0;
  ASSERT_FALSE(s.scan_prefix("offsets", "k", [&](auto k, auto v) {
    EXPECT_EQ(k, key_of(n));
    EXPECT_EQ(v, value_of(n, 500));
    ++n;
    return true;
  }));
  EXPECT_EQ(n, 100);
  auto md = s.get_partition("orders", partition_id{0});
  ASSERT_TRUE(md);
  EXPECT_EQ(*md, sample_metadata());
}

TEST_F(metadata_store_test, GenericApiCreatesSubDatabasesOnDemand) {
  auto store = metadata_store::open(dir_.path() / "meta", tiny_map());
  ASSERT_TRUE(store);
  auto& s = **store;
  EXPECT_TRUE(is(s.get("nothing", "k").error(), ec::not_found));
  EXPECT_FALSE(s.erase("nothing", "k"));
  int calls = 0;
  EXPECT_FALSE(s.scan_prefix("nothing", "", [&](auto, auto) {
    ++calls;
    return true;
  }));
  EXPECT_EQ(calls, 0);
  ASSERT_FALSE(s.put("groups", "g1/a", "1"));
  ASSERT_FALSE(s.put("groups", "g1/b", "2"));
  ASSERT_FALSE(s.put("groups", "g2/a", "3"));
  ASSERT_FALSE(s.put("other", "g1/c", "4"));
  std::vector<std::string> seen;
  ASSERT_FALSE(s.scan_prefix("groups", "g1/", [&](auto k, auto v) {
    seen.push_back(std::string{k} + "=" + std::string{v});
    return true;
  }));
  EXPECT_EQ(seen, (std::vector<std::string>{"g1/a=1", "g1/b=2"}));
  ASSERT_FALSE(s.erase("groups", "g1/a"));
  EXPECT_TRUE(is(s.get("groups", "g1/a").error(), ec::not_found));
  auto b = s.get("groups", "g1/b");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, "2");
}

TEST(metadata_format_test, WorkedExampleMatchesFormatMd) {
  // The example in FORMAT.md, section "LMDB".
  auto key = metadata_format::encode_partition_key("orders", partition_id{3});
  ASSERT_TRUE(key);
  EXPECT_EQ(hex(*key), "6f726465727300"
                       "00000003");
  partition_metadata md;
  md.log_start = offset{100};
  md.high_watermark = offset{4242};
  md.epochs = {{leader_epoch{0}, offset{0}}, {leader_epoch{3}, offset{1500}}};
  auto value = metadata_format::encode_partition_metadata(md);
  EXPECT_EQ(value.size(), 45u);
  EXPECT_EQ(hex(value), "01"
                        "0000000000000064"
                        "0000000000001092"
                        "00000002"
                        "00000000"
                        "0000000000000000"
                        "00000003"
                        "00000000000005dc");
  auto back = metadata_format::decode_partition_key(*key);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->first, "orders");
  EXPECT_EQ(back->second, partition_id{3});
}
