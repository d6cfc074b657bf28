// Tests of the DLQ redrive store over a real LMDB metadata_store: the
// documented encoding, marks by range, erasing below an offset and by topic,
// producer rows, restarts, and corrupt values.

#include "broker/dlq_store.hpp"

#include "broker/metadata_store.hpp"
#include "tests/temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>

using namespace ferry;
namespace fs = std::filesystem;
namespace df = ferry::dlq_store_format;

namespace {

class DlqStoreTest : public ::testing::Test {
protected:
  void SetUp() override { open(); }
  void TearDown() override {
    ds.reset();
    store.reset();
  }
  void open() {
    ds.reset();
    store.reset();
    lmdb::env_options opts;
    opts.no_sync = true;
    auto s = metadata_store::open(dir.path() / "meta", opts);
    ASSERT_TRUE(s) << describe(s.error());
    store = std::move(*s);
    ds = std::make_unique<dlq_store>(*store);
  }
  redrive_mark mark_to(std::string topic, int32_t p, int64_t off) {
    return redrive_mark{1234, std::move(topic), partition_id{p}, offset{off}};
  }

  ferry::test::temp_dir dir{"ferry-dlqs"};
  std::unique_ptr<metadata_store> store;
  std::unique_ptr<dlq_store> ds;
};

TEST_F(DlqStoreTest, MarksHaveTheDocumentedEncoding) {
  ASSERT_FALSE(ds->mark("d", partition_id{1}, offset{7}, mark_to("t", 2, 9)));
  std::string key{"d\0\0\0\0\1\0\0\0\0\0\0\0\7", 14};
  auto v = store->get(df::marks_db, key);
  ASSERT_TRUE(v) << describe(v.error());
  std::string want{"\1"
                   "\0\0\0\0\0\0\x04\xd2"
                   "\0\0\0\2"
                   "\0\0\0\0\0\0\0\x09"
                   "t",
                   22};
  EXPECT_EQ(*v, want);
  auto m = ds->get_mark("d", partition_id{1}, offset{7});
  ASSERT_TRUE(m && *m);
  EXPECT_EQ(**m, mark_to("t", 2, 9));
  EXPECT_FALSE(*ds->get_mark("d", partition_id{1}, offset{8}));
}

TEST_F(DlqStoreTest, MarkedIsARangeOfOnePartition) {
  for (int64_t off : {0, 3, 5, 300})
    ASSERT_FALSE(ds->mark("d", partition_id{0}, offset{off}, mark_to("t", 0, 0)));
  ASSERT_FALSE(ds->mark("d", partition_id{1}, offset{4}, mark_to("t", 0, 0)));
  ASSERT_FALSE(ds->mark("d2", partition_id{0}, offset{4}, mark_to("t", 0, 0)));
  auto m = ds->marked("d", partition_id{0}, offset{3}, offset{300});
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (std::set<int64_t>{3, 5}));
  EXPECT_EQ(*ds->marked("d", partition_id{1}, offset{0}, offset{100}),
            std::set<int64_t>{4});
}

TEST_F(DlqStoreTest, EraseBelowAndEraseTopic) {
  for (int64_t off : {0, 1, 2, 3})
    ASSERT_FALSE(ds->mark("d", partition_id{0}, offset{off}, mark_to("t", 0, 0)));
  ASSERT_FALSE(ds->put_producer("d", partition_id{0}, "t", partition_id{0},
                                redrive_producer{producer_id{5}, 1, offset{3},
                                                 3}));
  ASSERT_FALSE(ds->mark("dd", partition_id{0}, offset{0}, mark_to("t", 0, 0)));
  auto n = ds->erase_below("d", partition_id{0}, offset{2});
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(*ds->marked("d", partition_id{0}, offset{0}, offset{10}),
            (std::set<int64_t>{2, 3}));
  EXPECT_EQ(*ds->topics(), (std::set<std::string>{"d", "dd"}));
  ASSERT_FALSE(ds->erase_topic("d"));
  EXPECT_EQ(*ds->topics(), std::set<std::string>{"dd"});
  EXPECT_FALSE(*ds->get_producer("d", partition_id{0}, "t", partition_id{0}));
}

TEST_F(DlqStoreTest, ProducersAndMarksSurviveAReopen) {
  redrive_producer x{producer_id{42}, 3, offset{17}, 9};
  ASSERT_FALSE(ds->put_producer("d", partition_id{1}, "t", partition_id{2}, x));
  ASSERT_FALSE(ds->mark("d", partition_id{1}, offset{17}, mark_to("t", 2, 5)));
  open();
  auto got = ds->get_producer("d", partition_id{1}, "t", partition_id{2});
  ASSERT_TRUE(got && *got);
  EXPECT_EQ(**got, x);
  EXPECT_FALSE(*ds->get_producer("d", partition_id{1}, "t", partition_id{3}));
  EXPECT_TRUE(*ds->get_mark("d", partition_id{1}, offset{17}));
}

TEST_F(DlqStoreTest, BadArgumentsAndCorruptValues) {
  EXPECT_TRUE(is(ds->mark("", partition_id{0}, offset{0}, {}),
                 ec::invalid_argument));
  EXPECT_TRUE(is(ds->mark("d", partition_id{-1}, offset{0}, {}),
                 ec::invalid_argument));
  EXPECT_TRUE(is(ds->mark("d", partition_id{0}, offset{-1}, {}),
                 ec::invalid_argument));
  std::string key{"d\0\0\0\0\0\0\0\0\0\0\0\0\1", 14};
  ASSERT_FALSE(store->put(df::marks_db, key, "\2short"));
  EXPECT_TRUE(is(ds->get_mark("d", partition_id{0}, offset{1}).error(),
                 ec::corrupt_segment));
  auto pk = *df::partition_prefix("d", partition_id{0})
            + *df::partition_prefix("t", partition_id{0});
  ASSERT_FALSE(store->put(df::producers_db, pk, "\1abc"));
  EXPECT_TRUE(is(ds->get_producer("d", partition_id{0}, "t", partition_id{0})
                   .error(),
                 ec::corrupt_segment));
}

} // namespace
