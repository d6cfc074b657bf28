#pragma once
// group_probe: the metrics of one consumer group. The node creates one per
// group coordinator and hands it over in group_config::probe.
//
// Series: ferry_consumergroup_members {group} from construction; per
// partition {group, topic, partition} the committed offset, lag and lag
// seconds, each added on its first value (queue mode: the records by state,
// ferry_queue_records); per topic {group, topic} the
// queue-mode counters (DLQ, redeliveries, lease expiries) and DLQ depth,
// added on first use. retain()/forget() remove partitions that no longer
// apply, clear() removes everything (the group was deleted); the destructor
// does the same.
//
// Lifecycle: shared_ptr, owned by the coordinator's config. Not thread-safe:
// used by one actor at a time (the registry itself is thread-safe).

#include "broker/model.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

namespace prometheus {
class Counter;
class Gauge;
} // namespace prometheus

namespace ferry::metrics {

class registry;

class group_probe {
public:
  /// A partition a group has a position on.
  using partition_key = std::pair<std::string, partition_id>;

  group_probe(std::shared_ptr<registry> reg, std::string group);
  /// Removes every series of the group.
  ~group_probe();
  group_probe(const group_probe&) = delete;
  group_probe& operator=(const group_probe&) = delete;

  /// Members known to the coordinator (joining ones included).
  void members(size_t n);

  /// The group committed `committed` on a partition.
  void committed(const std::string& topic, partition_id p, offset committed);

  /// Lag of a partition: `records` behind the high watermark, after
  /// clamping the committed offset at the log start.
  void lag(const std::string& topic, partition_id p, int64_t records);

  /// Lag of a partition in time: `seconds` since the first unconsumed record
  /// was written (0 when caught up).
  void lag_seconds(const std::string& topic, partition_id p, double seconds);

  /// Removes the per-partition series of every partition not in `keep`.
  void retain(const std::set<partition_key>& keep);

  /// Removes the per-partition series of one partition.
  void forget(const std::string& topic, partition_id p);

  /// Queue mode: `n` records of `topic` went to the dead-letter queue.
  void dead_lettered(const std::string& topic, uint64_t n = 1);
  /// Queue mode: records of `topic` waiting in the dead-letter queue.
  void dlq_depth(const std::string& topic, uint64_t depth);
  /// Queue mode: `n` records of `topic` delivered again.
  void redelivered(const std::string& topic, uint64_t n = 1);
  /// Queue mode: `n` leases on records of `topic` ran out.
  void lease_expired(const std::string& topic, uint64_t n = 1);

  /// Queue mode: what the group tracks on a partition, by state.
  struct queue_counts {
    uint64_t available = 0;
    uint64_t leased = 0;   ///< in flight
    uint64_t retrying = 0; ///< waiting for a retry backoff
    uint64_t scheduled = 0; ///< delayed delivery, not due
    uint64_t dead_letter_pending = 0;
    uint64_t parked = 0; ///< ordering=key: behind an earlier record of its key
  };
  void queue_records(const std::string& topic, partition_id p,
                     const queue_counts& counts);

  /// Removes every series of the group (members included) until the next
  /// call that sets a value.
  void clear();

  const std::string& group() const { return group_; }

private:
  struct partition_series {
    prometheus::Gauge* committed = nullptr;
    prometheus::Gauge* lag = nullptr;
    prometheus::Gauge* lag_seconds = nullptr;
    /// ferry_queue_records by state, in queue_counts' order.
    std::array<prometheus::Gauge*, 6> queue{};
  };
  struct topic_series {
    prometheus::Counter* dlq_total = nullptr;
    prometheus::Gauge* dlq_depth = nullptr;
    prometheus::Counter* redeliveries = nullptr;
    prometheus::Counter* lease_expiries = nullptr;
  };

  partition_series& partition(const std::string& topic, partition_id p);
  topic_series& topic(const std::string& topic);
  void release(const partition_key& key, partition_series& s);
  void release(const std::string& topic, topic_series& s);

  // Declared first: destroyed last, after the series are released.
  std::shared_ptr<registry> reg_;
  std::string group_;
  prometheus::Gauge* members_ = nullptr;
  std::map<partition_key, partition_series> partitions_;
  std::map<std::string, topic_series> topics_;
};

} // namespace ferry::metrics
