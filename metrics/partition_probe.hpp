#pragma once
// partition_probe: the metrics of one hosted partition replica. The node
// creates one per replica it spawns and hands it over in
// partition_replica_config::probe; the replica calls it with plain values.
//
// Series: the partition's gauges {topic, partition} and its topic's traffic
// counters and latency histograms {topic}, shared with the topic's other
// partitions on this node. They exist from construction until destruction;
// the topic series until the last probe of the topic is gone. So dropping
// the probe when the replica is stopped for good (topic deleted, partition
// moved away) removes its series from the next scrape.
//
// Lifecycle: shared_ptr, owned by the replica's config. Not thread-safe:
// used by one actor at a time (the registry itself is thread-safe).

#include "broker/model.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
} // namespace prometheus

namespace ferry::metrics {

class registry;

class partition_probe {
public:
  /// Adds the series of `topic`/`partition` to `reg`.
  partition_probe(std::shared_ptr<registry> reg, std::string topic,
                  partition_id partition);
  /// Removes the series (the topic's only if no other probe holds them).
  ~partition_probe();
  partition_probe(const partition_probe&) = delete;
  partition_probe& operator=(const partition_probe&) = delete;

  /// A produce was answered successfully: `records` records of `bytes` batch
  /// bytes appended (0 and 0 for a duplicate), `latency` from its arrival.
  void produced(uint64_t records, uint64_t bytes,
                std::chrono::nanoseconds latency);

  /// A consumer fetch was answered: `records` records (at or after the
  /// requested offset) in `bytes` batch bytes, `latency` from its arrival.
  void fetched(uint64_t records, uint64_t bytes,
               std::chrono::nanoseconds latency);

  /// A log flush (fdatasync) took `latency`.
  void flushed(std::chrono::nanoseconds latency);

  /// The log's positions and size, after any change.
  void log_state(offset log_start, offset log_end, offset high_watermark,
                 uint64_t size_bytes);

  /// Replication state: in-sync replicas of `replicas` assigned ones.
  void replication(size_t isr, size_t replicas);

  /// A compacted log's cleaning state (the series appear on the first
  /// call): dirty ratio, and when it was last cleaned (ms, 0: never).
  void cleaning(double dirty_ratio, int64_t last_clean_ms);

  const std::string& topic() const { return topic_; }
  partition_id partition() const { return partition_; }

private:
  // Declared first: destroyed last, after the series are released.
  std::shared_ptr<registry> reg_;
  std::string topic_;
  partition_id partition_;
  prometheus::Gauge* hw_;
  prometheus::Gauge* log_start_;
  prometheus::Gauge* log_end_;
  prometheus::Gauge* size_;
  prometheus::Gauge* isr_;
  prometheus::Gauge* under_replicated_;
  prometheus::Counter* bytes_in_;
  prometheus::Counter* bytes_out_;
  prometheus::Counter* messages_in_;
  prometheus::Counter* messages_out_;
  prometheus::Histogram* produce_latency_;
  prometheus::Histogram* fetch_latency_;
  prometheus::Histogram* log_flush_;
  prometheus::Gauge* dirty_ratio_ = nullptr;
  prometheus::Gauge* last_clean_ = nullptr;
};

} // namespace ferry::metrics
