#pragma once
// Partition assignors of stream-mode consumer groups: pure functions from the
// members (subscriptions, owned partitions) and the partition count of each
// topic to the partitions of each member. No actor code, no clock, no
// randomness: the same input gives the same output whatever order it comes in
// (members and partitions are sorted first).
//
// Member order (Kafka's MemberInfo): members with a group instance id first,
// ordered by it, then the dynamic ones ordered by member id. Static members
// thus keep their place when they restart under a new member id.
//
//   range               per topic, the subscribed members get contiguous
//                       ranges; the first (n % m) get one extra partition.
//   roundrobin          all partitions sorted by (topic, partition) are dealt
//                       to the members in turn, skipping members that do not
//                       subscribe to the partition's topic.
//   cooperative-sticky  balanced (no partition can move to a member that
//                       subscribes to its topic and has at least two fewer),
//                       keeping as many current owners as possible. A
//                       partition moving from A to B is only revoked from A
//                       in this generation (listed in `revoking`, given to
//                       nobody); B gets it in the next one, after A rejoined
//                       without it (Kafka's cooperative protocol).

#include "broker/model.hpp"

#include <caf/expected.hpp>

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// A partition of a topic, as the assignors see it (the actor-side twin is
/// ferry::topic_partition in actors/protocol/interfaces.hpp).
struct partition_ref {
  std::string topic;
  partition_id partition{0};
  auto operator<=>(const partition_ref&) const = default;
};

/// One group member as input to an assignor.
struct assignor_member {
  std::string member_id;
  std::string group_instance_id; ///< "" for dynamic members
  std::vector<std::string> topics;   ///< subscription
  std::vector<partition_ref> owned;  ///< what it holds now (cooperative)
  std::vector<std::string> assignors; ///< preferred first (choose_assignor)
};

/// Partition count per topic; a topic missing here has no partitions.
using topic_partition_counts = std::map<std::string, int32_t>;

/// The output of an assignor.
struct group_assignment {
  /// Member id -> its partitions, sorted. Every input member has an entry
  /// (possibly empty).
  std::map<std::string, std::vector<partition_ref>> members;
  /// Partitions withheld this generation because they move from a current
  /// owner to another member (cooperative-sticky only), sorted. Non-empty
  /// means the group needs one more rebalance once the owners revoked them.
  std::vector<partition_ref> revoking;
};

namespace assignor_names {
inline constexpr std::string_view range = "range";
inline constexpr std::string_view roundrobin = "roundrobin";
inline constexpr std::string_view cooperative_sticky = "cooperative-sticky";
} // namespace assignor_names

/// True for "range", "roundrobin" and "cooperative-sticky".
bool is_known_assignor(std::string_view name);

/// Kafka's range assignor.
group_assignment assign_range(const std::vector<assignor_member>& members,
                              const topic_partition_counts& partitions);

/// Kafka's round-robin assignor.
group_assignment assign_roundrobin(const std::vector<assignor_member>& members,
                                   const topic_partition_counts& partitions);

/// Kafka's cooperative-sticky assignor. Claims on `owned` partitions that no
/// longer exist are ignored; when two members claim the same partition the
/// first in member order keeps the claim.
group_assignment
assign_cooperative_sticky(const std::vector<assignor_member>& members,
                          const topic_partition_counts& partitions);

/// Dispatches on the name; ec::invalid_argument for an unknown one.
caf::expected<group_assignment>
assign(std::string_view assignor, const std::vector<assignor_member>& members,
       const topic_partition_counts& partitions);

/// The assignor a group uses, Kafka's way: among the assignors every member
/// supports (unknown names ignored), each member votes for the first in its
/// preference list; most votes win, ties go to the candidate listed first by
/// the first member in member order. "" if the members have none in common.
std::string choose_assignor(const std::vector<assignor_member>& members);

/// Sorts members into the order every assignor uses (see the file comment).
void sort_members(std::vector<assignor_member>& members);

} // namespace ferry
