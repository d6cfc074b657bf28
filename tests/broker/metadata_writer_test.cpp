// metadata_writer: per-partition checkpoints and snapshots batched into one
// LMDB transaction per round, ordered with the synchronous writes.

#include "broker/metadata_store.hpp"
#include "broker/metadata_writer.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

TEST_F(metadata_writer_test, closing_many_logs_queues_their_checkpoints_for_one_transaction) {
  // A stopping node closes every partition log; each close's checkpoint
  // used to be its own LMDB commit (two fdatasyncs): ~6 s for 10,000 idle
  // partitions here. Now a close queues it, and one round writes them all;
  // a log opened again (before or after that round) finds its high
  // watermark.
  metadata_writer w{store_, false};
  constexpr int n = 20;
  std::vector<std::unique_ptr<writer_partition_checkpoint>> ckpts;
  std::vector<std::unique_ptr<partition_log>> logs;
  auto open = [&](int p) {
    auto l = partition_log::open(dir_.path() / ("t-" + std::to_string(p)), log_config{},
                                 ckpts[p].get());
    EXPECT_TRUE(l) << describe(l.error());
    return l ? std::move(*l) : nullptr;
  };
  for (int p = 0; p < n; ++p) {
    ckpts.push_back(std::make_unique<writer_partition_checkpoint>(w, "t", partition_id{p}));
    logs.push_back(open(p));
    ASSERT_TRUE(logs.back());
    std::vector<record> recs(3);
    for (int i = 0; i < 3; ++i) {
      recs[i].offset_delta = i;
      recs[i].value = "v" + std::to_string(p);
    }
    auto b = encode_batch(batch_meta{}, recs);
    ASSERT_OK(b);
    ASSERT_OK(logs.back()->append(std::span<char>{b->data(), b->size()}));
    ASSERT_OK(logs.back()->flush());
    logs.back()->set_high_watermark(offset{2});
  }
  auto before = w.stats();
  for (auto& l : logs)
    ASSERT_FALSE(l->close());
  auto after = w.stats();
  EXPECT_EQ(after.immediate, before.immediate) << "a close wrote its checkpoint at once";
  EXPECT_EQ(after.rounds, before.rounds);
  EXPECT_EQ(w.queued(), static_cast<size_t>(n));
  EXPECT_EQ(value(metadata_format::partitions_db,
                  *metadata_format::encode_partition_key("t", partition_id{7})),
            "<missing>");
  // Reopened before the round: the queued checkpoint is what it loads.
  logs[7] = open(7);
  ASSERT_TRUE(logs[7]);
  EXPECT_EQ(logs[7]->high_watermark(), offset{2});
  EXPECT_EQ(logs[7]->log_end(), offset{3});
  ASSERT_FALSE(logs[7]->close());
  ASSERT_FALSE(w.flush());
  EXPECT_EQ(w.stats().rounds, after.rounds + 1);
  for (int p = 0; p < n; ++p) {
    auto stored = store_->get_partition("t", partition_id{p});
    ASSERT_OK(stored);
    EXPECT_EQ(stored->high_watermark, offset{2}) << "partition " << p;
  }
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
