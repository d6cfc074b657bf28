#include "metrics/group_probe.hpp"

#include "metrics/family.hpp"
#include "metrics/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

namespace ferry::metrics {

group_probe::group_probe(std::shared_ptr<registry> reg, std::string group)
  : reg_(std::move(reg)), group_(std::move(group)) {
  members(0);
}

group_probe::~group_probe() {
  clear();
}

void group_probe::members(size_t n) {
  if (!members_)
    members_ = &reg_->acquire(reg_->consumergroup_members(),
                              labels{{"group", group_}});
  members_->Set(static_cast<double>(n));
}

group_probe::partition_series&
group_probe::partition(const std::string& topic, partition_id p) {
  return partitions_[partition_key{topic, p}];
}

group_probe::topic_series& group_probe::topic(const std::string& topic) {
  return topics_[topic];
}

void group_probe::committed(const std::string& topic, partition_id p,
                            offset committed) {
  auto& s = partition(topic, p);
  if (!s.committed)
    s.committed = &reg_->acquire(reg_->consumergroup_committed_offset(),
                                 labels{{"group", group_},
                                        {"topic", topic},
                                        {"partition",
                                         std::to_string(p.value)}});
  s.committed->Set(static_cast<double>(committed.value));
}

void group_probe::lag(const std::string& topic, partition_id p,
                      int64_t records) {
  auto& s = partition(topic, p);
  if (!s.lag)
    s.lag = &reg_->acquire(reg_->consumergroup_lag(),
                           labels{{"group", group_},
                                  {"topic", topic},
                                  {"partition", std::to_string(p.value)}});
  s.lag->Set(static_cast<double>(records));
}

void group_probe::lag_seconds(const std::string& topic, partition_id p,
                              double seconds) {
  auto& s = partition(topic, p);
  if (!s.lag_seconds)
    s.lag_seconds = &reg_->acquire(reg_->consumergroup_lag_seconds(),
                                   labels{{"group", group_},
                                          {"topic", topic},
                                          {"partition",
                                           std::to_string(p.value)}});
  s.lag_seconds->Set(seconds);
}

namespace {

constexpr const char* queue_states[] = {"available", "leased", "retrying",
                                        "scheduled", "dead_letter_pending",
                                        "parked"};

} // namespace

void group_probe::queue_records(const std::string& topic, partition_id p,
                                const queue_counts& c) {
  auto& s = partition(topic, p);
  const uint64_t values[] = {c.available, c.leased, c.retrying, c.scheduled,
                             c.dead_letter_pending, c.parked};
  for (size_t i = 0; i < s.queue.size(); ++i) {
    if (!s.queue[i])
      s.queue[i] = &reg_->acquire(reg_->queue_records(),
                                  labels{{"group", group_},
                                         {"topic", topic},
                                         {"partition", std::to_string(p.value)},
                                         {"state", queue_states[i]}});
    s.queue[i]->Set(static_cast<double>(values[i]));
  }
}

void group_probe::release(const partition_key& key, partition_series& s) {
  labels l{{"group", group_},
           {"topic", key.first},
           {"partition", std::to_string(key.second.value)}};
  if (s.committed)
    reg_->release(reg_->consumergroup_committed_offset(), l);
  if (s.lag)
    reg_->release(reg_->consumergroup_lag(), l);
  if (s.lag_seconds)
    reg_->release(reg_->consumergroup_lag_seconds(), l);
  for (size_t i = 0; i < s.queue.size(); ++i) {
    if (!s.queue[i])
      continue;
    auto ls = l;
    ls.emplace("state", queue_states[i]);
    reg_->release(reg_->queue_records(), ls);
  }
  s = partition_series{};
}

void group_probe::release(const std::string& topic, topic_series& s) {
  labels l{{"group", group_}, {"topic", topic}};
  if (s.dlq_total)
    reg_->release(reg_->dlq_messages_total(), l);
  if (s.dlq_depth)
    reg_->release(reg_->dlq_depth(), l);
  if (s.redeliveries)
    reg_->release(reg_->redeliveries_total(), l);
  if (s.lease_expiries)
    reg_->release(reg_->lease_expiries_total(), l);
  s = topic_series{};
}

void group_probe::retain(const std::set<partition_key>& keep) {
  for (auto i = partitions_.begin(); i != partitions_.end();) {
    if (keep.count(i->first) > 0) {
      ++i;
      continue;
    }
    release(i->first, i->second);
    i = partitions_.erase(i);
  }
}

void group_probe::forget(const std::string& topic, partition_id p) {
  auto i = partitions_.find(partition_key{topic, p});
  if (i == partitions_.end())
    return;
  release(i->first, i->second);
  partitions_.erase(i);
}

void group_probe::dead_lettered(const std::string& topic, uint64_t n) {
  auto& s = this->topic(topic);
  if (!s.dlq_total)
    s.dlq_total = &reg_->acquire(reg_->dlq_messages_total(),
                                 labels{{"group", group_}, {"topic", topic}});
  s.dlq_total->Increment(static_cast<double>(n));
}

void group_probe::dlq_depth(const std::string& topic, uint64_t depth) {
  auto& s = this->topic(topic);
  if (!s.dlq_depth)
    s.dlq_depth = &reg_->acquire(reg_->dlq_depth(),
                                 labels{{"group", group_}, {"topic", topic}});
  s.dlq_depth->Set(static_cast<double>(depth));
}

void group_probe::redelivered(const std::string& topic, uint64_t n) {
  auto& s = this->topic(topic);
  if (!s.redeliveries)
    s.redeliveries = &reg_->acquire(reg_->redeliveries_total(),
                                    labels{{"group", group_},
                                           {"topic", topic}});
  s.redeliveries->Increment(static_cast<double>(n));
}

void group_probe::lease_expired(const std::string& topic, uint64_t n) {
  auto& s = this->topic(topic);
  if (!s.lease_expiries)
    s.lease_expiries = &reg_->acquire(reg_->lease_expiries_total(),
                                      labels{{"group", group_},
                                             {"topic", topic}});
  s.lease_expiries->Increment(static_cast<double>(n));
}

void group_probe::clear() {
  for (auto& [key, s] : partitions_)
    release(key, s);
  partitions_.clear();
  for (auto& [t, s] : topics_)
    release(t, s);
  topics_.clear();
  if (members_) {
    reg_->release(reg_->consumergroup_members(), labels{{"group", group_}});
    members_ = nullptr;
  }
}

} // namespace ferry::metrics
