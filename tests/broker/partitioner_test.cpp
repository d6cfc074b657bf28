// The partitioner must agree with Kafka's Java client bit for bit: the same
// key lands on the same partition whichever client produced it.

#include "broker/partitioner.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using ferry::murmur2;
using ferry::partition_for_key;
using ferry::partitioner;

// Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
// (testMurmur2), plus the vectors Akka's Kafka sharding checks against
// Kafka's implementation (short keys exercise every tail length).
TEST(Murmur2, MatchesKafkaUtilsTestVectors) {
  EXPECT_EQ(murmur2("21"), -973932308);
  EXPECT_EQ(murmur2("foobar"), -790332482);
  EXPECT_EQ(murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(murmur2("abc"), 479470107);
}

TEST(Murmur2, MatchesKafkaOnEveryTailLength) {
  EXPECT_EQ(murmur2("1"), -1993445489);
  EXPECT_EQ(murmur2("12"), 126087238);
  EXPECT_EQ(murmur2("123"), -267702483);
  EXPECT_EQ(murmur2("1234"), -1614185708);
  EXPECT_EQ(murmur2("12345"), -1188365604);
}

TEST(Murmur2, HashesBytesAboveSevenBitsUnsigned) {
  // Java masks each byte with 0xff; a sign-extending port would differ.
  std::string high{"\xff\xfe\x80", 3};
  std::string low{"\x7f\x7e\x00", 3};
  EXPECT_NE(murmur2(high), murmur2(low));
  EXPECT_EQ(murmur2(high), murmur2(std::string{"\xff\xfe\x80", 3}));
}

TEST(PartitionForKey, IsToPositiveOfMurmur2ModPartitions) {
  // toPositive clears the sign bit: -973932308 & 0x7fffffff = 1173551340.
  EXPECT_EQ(ferry::to_positive(-973932308), 1173551340);
  EXPECT_EQ(partition_for_key("21", 12), 1173551340 % 12);
  EXPECT_EQ(partition_for_key("foobar", 12), 6);
  EXPECT_EQ(partition_for_key("a-little-bit-long-string", 12), 8);
  EXPECT_EQ(partition_for_key("a-little-bit-longer-string", 6), 5);
  EXPECT_EQ(partition_for_key("abc", 6), 3);
  EXPECT_EQ(partition_for_key("12", 3), 1);
  EXPECT_EQ(partition_for_key("123", 3), 2);
  EXPECT_EQ(partition_for_key("anything", 1), 0);
}

TEST(PartitionForKey, SpreadsKeysEvenly) {
  constexpr int partitions = 8;
  constexpr int keys = 80000;
  std::vector<int> counts(partitions);
  for (int i = 0; i < keys; ++i)
    ++counts[partition_for_key("key-" + std::to_string(i), partitions)];
  for (auto c : counts) {
    EXPECT_GT(c, keys / partitions * 9 / 10);
    EXPECT_LT(c, keys / partitions * 11 / 10);
  }
}

TEST(Partitioner, KeyedMessagesAlwaysHash) {
  partitioner p{1};
  std::string key = "foobar";
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(p.choose("t", 12, -1, &key), 6);
}

TEST(Partitioner, ExplicitPartitionWins) {
  partitioner p{1};
  std::string key = "foobar";
  EXPECT_EQ(p.choose("t", 12, 3, &key), 3);
  EXPECT_EQ(p.choose("t", 12, 0, nullptr), 0);
}

TEST(Partitioner, NullKeysStickUntilTheBatchCloses) {
  partitioner p{42};
  auto first = p.choose("t", 6, -1, nullptr);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(p.choose("t", 6, -1, nullptr), first);
  // A batch closing on another partition does not move the sticky choice.
  p.batch_closed("t", (first + 1) % 6, 6);
  EXPECT_EQ(p.choose("t", 6, -1, nullptr), first);
  // The sticky batch closing moves it, always to a different partition.
  p.batch_closed("t", first, 6);
  auto second = p.choose("t", 6, -1, nullptr);
  EXPECT_NE(second, first);
  EXPECT_GE(second, 0);
  EXPECT_LT(second, 6);
}

TEST(Partitioner, StickyMovesVisitEveryPartition) {
  partitioner p{7};
  std::map<int32_t, int> seen;
  for (int i = 0; i < 600; ++i) {
    auto cur = p.choose("t", 6, -1, nullptr);
    ++seen[cur];
    p.batch_closed("t", cur, 6);
  }
  ASSERT_EQ(seen.size(), 6u);
  for (auto& [part, n] : seen) {
    EXPECT_GT(n, 60) << "partition " << part;
  }
}

TEST(Partitioner, TopicsStickIndependently) {
  partitioner p{3};
  auto a = p.choose("a", 100, -1, nullptr);
  auto b = p.choose("b", 100, -1, nullptr);
  p.batch_closed("a", a, 100);
  EXPECT_NE(p.choose("a", 100, -1, nullptr), a);
  EXPECT_EQ(p.choose("b", 100, -1, nullptr), b);
}

TEST(Partitioner, SinglePartitionTopicStaysOnZero) {
  partitioner p{3};
  EXPECT_EQ(p.choose("t", 1, -1, nullptr), 0);
  p.batch_closed("t", 0, 1);
  EXPECT_EQ(p.choose("t", 1, -1, nullptr), 0);
}

TEST(Partitioner, ShrunkPartitionCountRepicks) {
  partitioner p{5};
  // Force a sticky choice >= 2, then ask with 2 partitions.
  int32_t cur = p.choose("t", 1000, -1, nullptr);
  while (cur < 2) {
    p.batch_closed("t", cur, 1000);
    cur = p.choose("t", 1000, -1, nullptr);
  }
  auto now = p.choose("t", 2, -1, nullptr);
  EXPECT_GE(now, 0);
  EXPECT_LT(now, 2);
}

} // namespace
