// metadata_writer: per-partition checkpoints and snapshots batched into one
// LMDB transaction per round, ordered with the synchronous writes.

#include "broker/metadata_store.hpp"
#include "broker/metadata_writer.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

using namespace ferry;

namespace {

#define ASSERT_OK(x) ASSERT_TRUE(x) << describe((x).error())

class metadata_writer_test : public ::testing::Test {
protected:
  void SetUp() override {
    auto s = metadata_store::open(dir_.path() / "meta");
    ASSERT_OK(s);
    store_ = std::move(*s);
  }

  std::string value(std::string_view db, std::string_view key) {
    auto v = store_->get(db, key);
    if (v)
      return *v;
    return is(v.error(), ec::not_found) ? "<missing>" : describe(v.error());
  }

  test::temp_dir dir_{"ferry-metadata-writer-test"};
  std::shared_ptr<metadata_store> store_;
};

TEST_F(metadata_writer_test, queued_writes_coalesce_into_one_transaction) {
  metadata_writer w{store_, false};
  for (int round = 0; round < 10; ++round)
    for (int k = 0; k < 10; ++k)
      w.put_later("db", "key-" + std::to_string(k),
                  "v" + std::to_string(round));
  EXPECT_EQ(w.queued(), 10u);
  EXPECT_EQ(value("db", "key-3"), "<missing>") << "written before a round";
  ASSERT_FALSE(w.flush());
  auto s = w.stats();
  EXPECT_EQ(s.rounds, 1u);
  EXPECT_EQ(s.ops_written, 10u);
  EXPECT_EQ(s.coalesced, 90u);
  for (int k = 0; k < 10; ++k)
    EXPECT_EQ(value("db", "key-" + std::to_string(k)), "v9");
  EXPECT_EQ(w.queued(), 0u);
}

TEST_F(metadata_writer_test, put_now_is_never_overwritten_by_an_older_queued_write) {
  metadata_writer w{store_, false};
  w.put_later("db", "k", "stale");
  ASSERT_FALSE(w.put_now("db", "k", "fresh"));
  EXPECT_EQ(value("db", "k"), "fresh") << "put_now was not written at once";
  ASSERT_FALSE(w.flush());
  EXPECT_EQ(value("db", "k"), "fresh") << "the stale queued write landed last";
}

TEST_F(metadata_writer_test, get_sees_queued_puts_and_erases) {
  metadata_writer w{store_, false};
  ASSERT_FALSE(store_->put("db", "k", "stored"));
  auto v = w.get("db", "k");
  ASSERT_OK(v);
  EXPECT_EQ(*v, "stored");
  w.put_later("db", "k", "queued");
  v = w.get("db", "k");
  ASSERT_OK(v);
  EXPECT_EQ(*v, "queued");
  w.erase_later("db", "k");
  v = w.get("db", "k");
  ASSERT_FALSE(v);
  EXPECT_TRUE(is(v.error(), ec::not_found));
  ASSERT_FALSE(w.flush());
  EXPECT_EQ(value("db", "k"), "<missing>") << "the erase did not land";
}

TEST_F(metadata_writer_test, partition_checkpoint_saves_at_once_and_loads_queued) {
  metadata_writer w{store_, false};
  writer_partition_checkpoint ckpt{w, "orders", partition_id{3}};
  auto none = ckpt.load();
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());
  partition_metadata md{offset{5}, offset{42}, {epoch_entry{leader_epoch{1}, offset{0}}}};
  ASSERT_FALSE(ckpt.save(md));
  auto stored = store_->get_partition("orders", partition_id{3});
  ASSERT_OK(stored);
  EXPECT_EQ(*stored, md) << "save() is not durable when it returns";
  // A queued HW checkpoint (the replica's tick) is what load() sees.
  auto later = md;
  later.high_watermark = offset{50};
  auto key = metadata_format::encode_partition_key("orders", partition_id{3});
  ASSERT_OK(key);
  w.put_later(metadata_format::partitions_db, *key,
              metadata_format::encode_partition_metadata(later));
  auto loaded = ckpt.load();
  ASSERT_OK(loaded);
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(**loaded, later);
}

TEST_F(metadata_writer_test, the_thread_writes_and_the_destructor_drains) {
  {
    metadata_writer w{store_};
    w.put_later("db", "a", "1");
    // Bounded wait for the background round.
    for (int i = 0; i < 1000 && value("db", "a") != "1"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    EXPECT_EQ(value("db", "a"), "1");
    for (int i = 0; i < 100; ++i)
      w.put_later("db", "b", std::to_string(i));
  }
  EXPECT_EQ(value("db", "b"), "99") << "queued writes lost at destruction";
}

} // namespace
