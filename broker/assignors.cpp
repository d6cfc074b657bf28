#include "broker/assignors.hpp"

#include "broker/error.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace ferry {

namespace {

using member_list = std::vector<assignor_member>;

// Kafka's MemberInfo order: static members (by instance id) before dynamic
// ones (by member id).
bool member_less(const assignor_member& x, const assignor_member& y) {
  bool xs = !x.group_instance_id.empty();
  bool ys = !y.group_instance_id.empty();
  if (xs != ys)
    return xs;
  if (xs && x.group_instance_id != y.group_instance_id)
    return x.group_instance_id < y.group_instance_id;
  return x.member_id < y.member_id;
}

member_list sorted_copy(const member_list& members) {
  auto out = members;
  sort_members(out);
  return out;
}

std::vector<std::set<std::string>> subscriptions(const member_list& sorted) {
  std::vector<std::set<std::string>> out;
  out.reserve(sorted.size());
  for (const auto& m : sorted)
    out.emplace_back(m.topics.begin(), m.topics.end());
  return out;
}

group_assignment empty_assignment(const member_list& sorted) {
  group_assignment out;
  for (const auto& m : sorted)
    out.members[m.member_id];
  return out;
}

// Topics that at least one member subscribes to and that have partitions,
// in name order, with their partition counts.
std::vector<std::pair<std::string, int32_t>>
subscribed_topics(const std::vector<std::set<std::string>>& subs,
                  const topic_partition_counts& partitions) {
  std::set<std::string> all;
  for (const auto& s : subs)
    all.insert(s.begin(), s.end());
  std::vector<std::pair<std::string, int32_t>> out;
  for (const auto& t : all) {
    auto i = partitions.find(t);
    if (i != partitions.end() && i->second > 0)
      out.emplace_back(t, i->second);
  }
  return out;
}

bool exists(const partition_ref& p, const topic_partition_counts& partitions) {
  auto i = partitions.find(p.topic);
  return i != partitions.end() && p.partition.value >= 0
         && p.partition.value < i->second;
}

void sort_lists(group_assignment& a) {
  for (auto& [id, ps] : a.members)
    std::sort(ps.begin(), ps.end());
  std::sort(a.revoking.begin(), a.revoking.end());
}

} // namespace

void sort_members(std::vector<assignor_member>& members) {
  std::sort(members.begin(), members.end(), member_less);
}

bool is_known_assignor(std::string_view name) {
  return name == assignor_names::range || name == assignor_names::roundrobin
         || name == assignor_names::cooperative_sticky;
}

group_assignment assign_range(const member_list& members,
                              const topic_partition_counts& partitions) {
  auto sorted = sorted_copy(members);
  auto subs = subscriptions(sorted);
  auto out = empty_assignment(sorted);
  for (const auto& [topic, count] : subscribed_topics(subs, partitions)) {
    std::vector<size_t> takers;
    for (size_t i = 0; i < sorted.size(); ++i)
      if (subs[i].count(topic) > 0)
        takers.push_back(i);
    auto m = static_cast<int32_t>(takers.size());
    int32_t per = count / m;
    int32_t extra = count % m;
    for (int32_t k = 0; k < m; ++k) {
      int32_t start = per * k + std::min(k, extra);
      int32_t len = per + (k < extra ? 1 : 0);
      auto& dst = out.members[sorted[takers[k]].member_id];
      for (int32_t p = start; p < start + len; ++p)
        dst.push_back(partition_ref{topic, partition_id{p}});
    }
  }
  sort_lists(out);
  return out;
}

group_assignment assign_roundrobin(const member_list& members,
                                   const topic_partition_counts& partitions) {
  auto sorted = sorted_copy(members);
  auto subs = subscriptions(sorted);
  auto out = empty_assignment(sorted);
  if (sorted.empty())
    return out;
  size_t next = 0;
  for (const auto& [topic, count] : subscribed_topics(subs, partitions)) {
    for (int32_t p = 0; p < count; ++p) {
      // Some member subscribes to `topic`, so this ends within one round.
      while (subs[next % sorted.size()].count(topic) == 0)
        ++next;
      out.members[sorted[next % sorted.size()].member_id].push_back(
        partition_ref{topic, partition_id{p}});
      ++next;
    }
  }
  sort_lists(out);
  return out;
}

group_assignment
assign_cooperative_sticky(const member_list& members,
                          const topic_partition_counts& partitions) {
  auto sorted = sorted_copy(members);
  auto subs = subscriptions(sorted);
  auto out = empty_assignment(sorted);
  if (sorted.empty())
    return out;
  // Current owner of each existing partition: the first claim in member order.
  std::map<partition_ref, size_t> owner;
  for (size_t i = 0; i < sorted.size(); ++i)
    for (const auto& p : sorted[i].owned)
      if (exists(p, partitions))
        owner.emplace(p, i);
  // Each member keeps what it owns and still subscribes to.
  std::vector<std::set<partition_ref>> target(sorted.size());
  std::set<partition_ref> taken;
  for (const auto& [p, i] : owner) {
    if (subs[i].count(p.topic) > 0) {
      target[i].insert(p);
      taken.insert(p);
    }
  }
  auto eligible = [&](size_t i, const partition_ref& p) {
    return subs[i].count(p.topic) > 0;
  };
  // The rest goes to the eligible member with the fewest, first in order.
  for (const auto& [topic, count] : subscribed_topics(subs, partitions)) {
    for (int32_t k = 0; k < count; ++k) {
      partition_ref p{topic, partition_id{k}};
      if (taken.count(p) > 0)
        continue;
      size_t best = sorted.size();
      for (size_t i = 0; i < sorted.size(); ++i)
        if (eligible(i, p)
            && (best == sorted.size() || target[i].size() < target[best].size()))
          best = i;
      target[best].insert(p);
    }
  }
  // Balance: move a partition from a member with more to an eligible member
  // with at least two fewer, until no such move exists. Each move lowers the
  // sum of squared counts, so this ends. Donors give up partitions they did
  // not own before first, then their highest owned ones.
  auto owned_by = [&](size_t i, const partition_ref& p) {
    auto o = owner.find(p);
    return o != owner.end() && o->second == i;
  };
  for (;;) {
    std::vector<size_t> donors(sorted.size());
    for (size_t i = 0; i < donors.size(); ++i)
      donors[i] = i;
    std::stable_sort(donors.begin(), donors.end(), [&](size_t x, size_t y) {
      return target[x].size() > target[y].size();
    });
    bool moved = false;
    for (size_t d : donors) {
      std::vector<partition_ref> candidates;
      for (auto i = target[d].rbegin(); i != target[d].rend(); ++i)
        if (!owned_by(d, *i))
          candidates.push_back(*i);
      for (auto i = target[d].rbegin(); i != target[d].rend(); ++i)
        if (owned_by(d, *i))
          candidates.push_back(*i);
      for (const auto& p : candidates) {
        size_t best = sorted.size();
        for (size_t r = 0; r < sorted.size(); ++r)
          if (r != d && eligible(r, p) && target[r].size() + 2 <= target[d].size()
              && (best == sorted.size() || target[r].size() < target[best].size()))
            best = r;
        if (best != sorted.size()) {
          target[d].erase(p);
          target[best].insert(p);
          moved = true;
          break;
        }
      }
      if (moved)
        break;
    }
    if (!moved)
      break;
  }
  // Cooperative step: a partition changing owner is withheld from its new
  // owner until the old one gave it up.
  for (size_t i = 0; i < sorted.size(); ++i) {
    auto& dst = out.members[sorted[i].member_id];
    for (const auto& p : target[i]) {
      auto o = owner.find(p);
      if (o != owner.end() && o->second != i)
        out.revoking.push_back(p);
      else
        dst.push_back(p);
    }
  }
  sort_lists(out);
  return out;
}

caf::expected<group_assignment>
assign(std::string_view assignor, const member_list& members,
       const topic_partition_counts& partitions) {
  if (assignor == assignor_names::range)
    return assign_range(members, partitions);
  if (assignor == assignor_names::roundrobin)
    return assign_roundrobin(members, partitions);
  if (assignor == assignor_names::cooperative_sticky)
    return assign_cooperative_sticky(members, partitions);
  return make_error(ec::invalid_argument,
                    "unknown assignor '" + std::string{assignor} + "'");
}

std::string choose_assignor(const member_list& members) {
  if (members.empty())
    return {};
  auto sorted = sorted_copy(members);
  std::set<std::string> common;
  for (const auto& name : sorted.front().assignors)
    if (is_known_assignor(name))
      common.insert(name);
  for (const auto& m : sorted) {
    std::set<std::string> mine(m.assignors.begin(), m.assignors.end());
    std::erase_if(common, [&](const std::string& x) { return mine.count(x) == 0; });
  }
  if (common.empty())
    return {};
  std::map<std::string, int> votes;
  for (const auto& m : sorted) {
    for (const auto& name : m.assignors) {
      if (common.count(name) > 0) {
        ++votes[name];
        break;
      }
    }
  }
  std::string best;
  int best_votes = -1;
  for (const auto& name : sorted.front().assignors) {
    if (common.count(name) == 0)
      continue;
    int v = votes.count(name) > 0 ? votes[name] : 0;
    if (v > best_votes) {
      best = name;
      best_votes = v;
    }
  }
  return best;
}

} // namespace ferry
