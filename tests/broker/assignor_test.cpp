// Unit tests of the consumer group assignors (broker/assignors.hpp).

#include "broker/assignors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ferry {
namespace {

partition_ref tp(std::string topic, int32_t p) {
  return partition_ref{std::move(topic), partition_id{p}};
}

assignor_member member(std::string id, std::vector<std::string> topics,
                       std::vector<partition_ref> owned = {},
                       std::string instance = {}) {
  assignor_member m;
  m.member_id = std::move(id);
  m.group_instance_id = std::move(instance);
  m.topics = std::move(topics);
  m.owned = std::move(owned);
  return m;
}

size_t total(const group_assignment& a) {
  size_t n = 0;
  for (const auto& [id, ps] : a.members)
    n += ps.size();
  return n;
}

// Every partition of `parts` is assigned exactly once (or being revoked).
void expect_complete(const group_assignment& a,
                     const topic_partition_counts& parts) {
  std::multiset<partition_ref> seen;
  for (const auto& [id, ps] : a.members)
    seen.insert(ps.begin(), ps.end());
  seen.insert(a.revoking.begin(), a.revoking.end());
  size_t expected = 0;
  for (const auto& [t, n] : parts) {
    expected += static_cast<size_t>(n);
    for (int32_t p = 0; p < n; ++p)
      EXPECT_EQ(seen.count(tp(t, p)), 1u) << t << "/" << p;
  }
  EXPECT_EQ(seen.size(), expected);
}

std::pair<size_t, size_t> min_max(const group_assignment& a) {
  size_t lo = SIZE_MAX, hi = 0;
  for (const auto& [id, ps] : a.members) {
    lo = std::min(lo, ps.size());
    hi = std::max(hi, ps.size());
  }
  return {lo, hi};
}

// -- range -------------------------------------------------------------------

TEST(RangeAssignor, GivesContiguousRangesPerTopicExtraToFirstMembers) {
  topic_partition_counts parts{{"a", 5}, {"b", 2}};
  auto out = assign_range({member("m2", {"a", "b"}), member("m1", {"a", "b"})},
                          parts);
  EXPECT_EQ(out.members["m1"],
            (std::vector<partition_ref>{tp("a", 0), tp("a", 1), tp("a", 2),
                                        tp("b", 0)}));
  EXPECT_EQ(out.members["m2"],
            (std::vector<partition_ref>{tp("a", 3), tp("a", 4), tp("b", 1)}));
  EXPECT_TRUE(out.revoking.empty());
  expect_complete(out, parts);
}

TEST(RangeAssignor, OnlySubscribersOfATopicShareIt) {
  topic_partition_counts parts{{"a", 2}, {"b", 3}};
  auto out = assign_range({member("m1", {"a"}), member("m2", {"a", "b"})},
                          parts);
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 0)}));
  EXPECT_EQ(out.members["m2"],
            (std::vector<partition_ref>{tp("a", 1), tp("b", 0), tp("b", 1),
                                        tp("b", 2)}));
}

TEST(RangeAssignor, MoreMembersThanPartitionsLeavesSomeEmpty) {
  topic_partition_counts parts{{"a", 1}};
  auto out = assign_range(
    {member("m1", {"a"}), member("m2", {"a"}), member("m3", {"a"})}, parts);
  EXPECT_EQ(out.members.size(), 3u);
  EXPECT_EQ(out.members["m1"].size(), 1u);
  EXPECT_TRUE(out.members["m2"].empty());
  EXPECT_TRUE(out.members["m3"].empty());
}

TEST(RangeAssignor, StaticMembersSortByInstanceIdBeforeDynamicOnes) {
  topic_partition_counts parts{{"a", 3}};
  auto out = assign_range({member("a-1", {"a"}), member("z-9", {"a"}, {}, "i1"),
                           member("b-2", {"a"}, {}, "i0")},
                          parts);
  EXPECT_EQ(out.members["b-2"], (std::vector<partition_ref>{tp("a", 0)}));
  EXPECT_EQ(out.members["z-9"], (std::vector<partition_ref>{tp("a", 1)}));
  EXPECT_EQ(out.members["a-1"], (std::vector<partition_ref>{tp("a", 2)}));
}

TEST(RangeAssignor, UnknownTopicsAssignNothing) {
  auto out = assign_range({member("m1", {"nope"})}, {{"a", 3}});
  EXPECT_TRUE(out.members["m1"].empty());
}

// -- roundrobin --------------------------------------------------------------

TEST(RoundRobinAssignor, DealsSortedPartitionsInTurn) {
  topic_partition_counts parts{{"a", 3}, {"b", 2}};
  auto out = assign_roundrobin(
    {member("m2", {"a", "b"}), member("m1", {"a", "b"})}, parts);
  EXPECT_EQ(out.members["m1"],
            (std::vector<partition_ref>{tp("a", 0), tp("a", 2), tp("b", 1)}));
  EXPECT_EQ(out.members["m2"],
            (std::vector<partition_ref>{tp("a", 1), tp("b", 0)}));
  expect_complete(out, parts);
}

TEST(RoundRobinAssignor, SkipsMembersNotSubscribed) {
  topic_partition_counts parts{{"a", 2}, {"b", 2}};
  auto out = assign_roundrobin({member("m1", {"a", "b"}), member("m2", {"b"})},
                               parts);
  EXPECT_EQ(out.members["m1"],
            (std::vector<partition_ref>{tp("a", 0), tp("a", 1), tp("b", 1)}));
  EXPECT_EQ(out.members["m2"], (std::vector<partition_ref>{tp("b", 0)}));
  expect_complete(out, parts);
}

TEST(RoundRobinAssignor, IsBalancedForEqualSubscriptions) {
  topic_partition_counts parts{{"a", 7}, {"b", 4}, {"c", 1}};
  std::vector<assignor_member> ms;
  for (int i = 0; i < 5; ++i)
    ms.push_back(member("m" + std::to_string(i), {"a", "b", "c"}));
  auto out = assign_roundrobin(ms, parts);
  auto [lo, hi] = min_max(out);
  EXPECT_LE(hi - lo, 1u);
  expect_complete(out, parts);
}

// -- determinism -------------------------------------------------------------

TEST(Assignors, OutputDoesNotDependOnInputOrder) {
  topic_partition_counts parts{{"a", 6}, {"b", 5}};
  std::vector<assignor_member> ms{member("m3", {"a", "b"}, {tp("a", 0)}),
                                  member("m1", {"a"}, {tp("b", 1)}),
                                  member("m2", {"a", "b"}, {tp("a", 3)})};
  for (auto name : {"range", "roundrobin", "cooperative-sticky"}) {
    auto first = assign(name, ms, parts);
    ASSERT_TRUE(first) << name;
    auto shuffled = ms;
    std::reverse(shuffled.begin(), shuffled.end());
    std::rotate(shuffled.begin(), shuffled.begin() + 1, shuffled.end());
    auto second = assign(name, shuffled, parts);
    ASSERT_TRUE(second);
    EXPECT_EQ(first->members, second->members) << name;
    EXPECT_EQ(first->revoking, second->revoking) << name;
  }
}

TEST(Assignors, UnknownNameIsAnError) {
  EXPECT_FALSE(assign("sticky-ish", {member("m1", {"a"})}, {{"a", 1}}));
  EXPECT_TRUE(is_known_assignor("cooperative-sticky"));
  EXPECT_FALSE(is_known_assignor("sticky"));
}

TEST(Assignors, ChooseAssignorTakesTheVoteAmongCommonOnes) {
  auto with = [](std::string id, std::vector<std::string> prefs) {
    auto m = member(std::move(id), {"a"});
    m.assignors = std::move(prefs);
    return m;
  };
  EXPECT_EQ(choose_assignor({with("m1", {"range", "roundrobin"}),
                             with("m2", {"roundrobin", "range"}),
                             with("m3", {"roundrobin"})}),
            "roundrobin");
  EXPECT_EQ(choose_assignor({with("m1", {"cooperative-sticky", "range"}),
                             with("m2", {"cooperative-sticky", "range"})}),
            "cooperative-sticky");
  // A tie goes to the first member's preference.
  EXPECT_EQ(choose_assignor({with("m1", {"range", "roundrobin"}),
                             with("m2", {"roundrobin", "range"})}),
            "range");
  EXPECT_EQ(choose_assignor({with("m1", {"range"}), with("m2", {"roundrobin"})}),
            "");
  EXPECT_EQ(choose_assignor({with("m1", {"bogus", "range"})}), "range");
  EXPECT_EQ(choose_assignor({}), "");
}

// -- cooperative-sticky ------------------------------------------------------

TEST(CooperativeStickyAssignor, FreshGroupIsBalanced) {
  topic_partition_counts parts{{"a", 7}, {"b", 3}};
  auto out = assign_cooperative_sticky(
    {member("m1", {"a", "b"}), member("m2", {"a", "b"}),
     member("m3", {"a", "b"})},
    parts);
  auto [lo, hi] = min_max(out);
  EXPECT_EQ(lo, 3u);
  EXPECT_EQ(hi, 4u);
  EXPECT_TRUE(out.revoking.empty());
  expect_complete(out, parts);
}

TEST(CooperativeStickyAssignor, KeepsOwnersWhenStillBalanced) {
  topic_partition_counts parts{{"a", 4}};
  std::vector<assignor_member> ms{
    member("m1", {"a"}, {tp("a", 1), tp("a", 3)}),
    member("m2", {"a"}, {tp("a", 0), tp("a", 2)})};
  auto out = assign_cooperative_sticky(ms, parts);
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 1), tp("a", 3)}));
  EXPECT_EQ(out.members["m2"], (std::vector<partition_ref>{tp("a", 0), tp("a", 2)}));
  EXPECT_TRUE(out.revoking.empty());
}

TEST(CooperativeStickyAssignor, NewMemberCausesMinimalMovement) {
  topic_partition_counts parts{{"a", 6}};
  std::vector<assignor_member> ms{
    member("m1", {"a"}, {tp("a", 0), tp("a", 1), tp("a", 2)}),
    member("m2", {"a"}, {tp("a", 3), tp("a", 4), tp("a", 5)}),
    member("m3", {"a"})};
  auto out = assign_cooperative_sticky(ms, parts);
  // Two partitions move (one from each), nothing else.
  EXPECT_EQ(out.revoking.size(), 2u);
  EXPECT_TRUE(out.members["m3"].empty());
  EXPECT_EQ(out.members["m1"].size(), 2u);
  EXPECT_EQ(out.members["m2"].size(), 2u);
  for (const auto& p : out.members["m1"])
    EXPECT_LE(p.partition.value, 2);
  for (const auto& p : out.members["m2"])
    EXPECT_GE(p.partition.value, 3);
  expect_complete(out, parts);
}

TEST(CooperativeStickyAssignor, TwoPhaseRevocationThenAssignment) {
  topic_partition_counts parts{{"a", 4}};
  // Phase 1: m1 owns everything, m2 joins. m1 keeps two, two are revoked,
  // m2 gets nothing yet.
  std::vector<assignor_member> ms{
    member("m1", {"a"}, {tp("a", 0), tp("a", 1), tp("a", 2), tp("a", 3)}),
    member("m2", {"a"})};
  auto one = assign_cooperative_sticky(ms, parts);
  EXPECT_EQ(one.members["m1"],
            (std::vector<partition_ref>{tp("a", 0), tp("a", 1)}));
  EXPECT_TRUE(one.members["m2"].empty());
  EXPECT_EQ(one.revoking, (std::vector<partition_ref>{tp("a", 2), tp("a", 3)}));
  // Phase 2: m1 rejoins owning only what it kept; m2 gets the rest.
  ms[0].owned = one.members["m1"];
  auto two = assign_cooperative_sticky(ms, parts);
  EXPECT_EQ(two.members["m1"], one.members["m1"]);
  EXPECT_EQ(two.members["m2"],
            (std::vector<partition_ref>{tp("a", 2), tp("a", 3)}));
  EXPECT_TRUE(two.revoking.empty());
}

TEST(CooperativeStickyAssignor, PartitionsOfDepartedMembersMoveAtOnce) {
  topic_partition_counts parts{{"a", 4}};
  // m2 (owning 2 and 3) is gone: its partitions are free right away.
  auto out = assign_cooperative_sticky(
    {member("m1", {"a"}, {tp("a", 0), tp("a", 1)}), member("m3", {"a"})},
    parts);
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 0), tp("a", 1)}));
  EXPECT_EQ(out.members["m3"], (std::vector<partition_ref>{tp("a", 2), tp("a", 3)}));
  EXPECT_TRUE(out.revoking.empty());
}

TEST(CooperativeStickyAssignor, UnsubscribedTopicIsRevokedBeforeItMoves) {
  topic_partition_counts parts{{"a", 2}, {"b", 2}};
  // m1 dropped "b" from its subscription but still owns b/0.
  auto out = assign_cooperative_sticky(
    {member("m1", {"a"}, {tp("a", 0), tp("b", 0)}),
     member("m2", {"a", "b"}, {tp("a", 1), tp("b", 1)})},
    parts);
  // Balanced target: m1 {a0, a1}, m2 {b0, b1}. Both moving partitions are
  // only revoked in this generation.
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 0)}));
  EXPECT_EQ(out.members["m2"], (std::vector<partition_ref>{tp("b", 1)}));
  EXPECT_EQ(out.revoking, (std::vector<partition_ref>{tp("a", 1), tp("b", 0)}));
}

TEST(CooperativeStickyAssignor, ConflictingClaimsGoToTheFirstMember) {
  topic_partition_counts parts{{"a", 2}};
  auto out = assign_cooperative_sticky(
    {member("m2", {"a"}, {tp("a", 0)}), member("m1", {"a"}, {tp("a", 0)})},
    parts);
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 0)}));
  EXPECT_EQ(out.members["m2"], (std::vector<partition_ref>{tp("a", 1)}));
  EXPECT_TRUE(out.revoking.empty());
}

TEST(CooperativeStickyAssignor, ClaimsOnVanishedPartitionsAreIgnored) {
  auto out = assign_cooperative_sticky(
    {member("m1", {"a"}, {tp("a", 5), tp("gone", 0)})}, {{"a", 2}});
  EXPECT_EQ(out.members["m1"], (std::vector<partition_ref>{tp("a", 0), tp("a", 1)}));
  EXPECT_TRUE(out.revoking.empty());
}

TEST(CooperativeStickyAssignor, HeterogeneousSubscriptionsAreBalancedWherePossible) {
  topic_partition_counts parts{{"a", 6}, {"b", 2}};
  auto out = assign_cooperative_sticky(
    {member("m1", {"a", "b"}), member("m2", {"a"}), member("m3", {"b"})},
    parts);
  expect_complete(out, parts);
  // m3 can only take b; no partition can move to someone with two fewer.
  std::map<std::string, size_t> n;
  for (const auto& [id, ps] : out.members)
    n[id] = ps.size();
  EXPECT_EQ(n["m1"] + n["m2"] + n["m3"], 8u);
  EXPECT_LE(n["m1"] > n["m2"] ? n["m1"] - n["m2"] : n["m2"] - n["m1"], 1u);
  for (const auto& p : out.members["m3"])
    EXPECT_EQ(p.topic, "b");
}

TEST(CooperativeStickyAssignor, RepeatedRebalancesConverge) {
  // Members come and go; after each change a second round (owners rejoin
  // with what they kept) leaves nothing to revoke and the group balanced.
  topic_partition_counts parts{{"a", 10}, {"b", 3}};
  std::vector<assignor_member> ms{member("m1", {"a", "b"})};
  auto round = [&] {
    for (int phase = 0; phase < 2; ++phase) {
      auto out = assign_cooperative_sticky(ms, parts);
      for (auto& m : ms)
        m.owned = out.members[m.member_id];
      if (phase == 1) {
        EXPECT_TRUE(out.revoking.empty());
        auto [lo, hi] = min_max(out);
        EXPECT_LE(hi - lo, 1u);
        EXPECT_EQ(total(out), 13u);
      }
    }
  };
  round();
  ms.push_back(member("m2", {"a", "b"}));
  round();
  ms.push_back(member("m3", {"a", "b"}));
  round();
  ms.erase(ms.begin());
  round();
}

} // namespace
} // namespace ferry
