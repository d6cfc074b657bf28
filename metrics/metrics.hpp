#pragma once
// metrics::registry: the single access point for every Ferry metric family.
// One per node (ferryd creates it; the exposer serves it; probes write it).
// Each getter below names its metric, type and label dimensions; the table
// in metrics/README.md lists the same in one place.
//
// Domain code does not use the families directly: it calls probe objects
// (partition_probe, group_probe, node_probe) with plain values. Probes add
// their series through acquire()/release(), which count references per
// (family, labels): a series disappears when its last probe is gone, so two
// probes that briefly share labels (a replica restarted while the old one is
// still closing) never remove each other's series.
//
// This header only forward-declares prometheus-cpp; only metrics/*.cpp (and
// tests reading series back) include prometheus-cpp headers.
//
// Thread safety: every member function may be called from any thread.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Collectable;
} // namespace prometheus

namespace ferry::metrics {

/// Label name -> value of one series (prometheus::Labels).
using labels = std::map<std::string, std::string>;

/// One metric family: its series by labels (metrics/family.hpp). Ferry's
/// own instead of prometheus::Family, whose Remove() walks every series of
/// the family: deleting a 10,000-partition topic removed ~130,000 series
/// that way, seconds of the scheduler's time (tests/bench/README.md).
template <class T>
class family;

/// Owns the prometheus registry and every family. Not copyable.
class registry {
public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  /// Upper bounds of the latency histograms, in seconds: 100us ... 10s.
  static const std::vector<double>& latency_buckets();

  // -- per partition replica: {topic, partition} ----------------------------

  /// ferry_partition_high_watermark {topic, partition}: consumers read below.
  family<prometheus::Gauge>& partition_high_watermark();
  /// ferry_partition_log_start_offset {topic, partition}: first readable offset.
  family<prometheus::Gauge>& partition_log_start_offset();
  /// ferry_partition_log_end_offset {topic, partition}: next offset appended.
  family<prometheus::Gauge>& partition_log_end_offset();
  /// ferry_partition_size_bytes {topic, partition}: bytes of segment files.
  family<prometheus::Gauge>& partition_size_bytes();
  /// ferry_partition_isr_size {topic, partition}: in-sync replicas.
  family<prometheus::Gauge>& partition_isr_size();
  /// ferry_partition_under_replicated {topic, partition}: 1 if ISR < replicas.
  family<prometheus::Gauge>& partition_under_replicated();

  // -- per topic: {topic} -----------------------------------------------------

  /// ferry_produce_latency_seconds {topic} (histogram): produce arrival at the
  /// replica to its answer (includes the group-commit flush).
  family<prometheus::Histogram>& produce_latency_seconds();
  /// ferry_fetch_latency_seconds {topic} (histogram): consumer fetch arrival
  /// to its answer (includes the long-poll wait, as Kafka's TotalTimeMs).
  family<prometheus::Histogram>& fetch_latency_seconds();
  /// ferry_log_flush_seconds {topic} (histogram): one log flush (fdatasync)
  /// of a replica, leader or follower: a slow or stalling disk shows here
  /// before it shows in every acks=all latency.
  family<prometheus::Histogram>& log_flush_seconds();
  /// ferry_bytes_in_total {topic} (counter): batch bytes appended by produce.
  family<prometheus::Counter>& bytes_in_total();
  /// ferry_bytes_out_total {topic} (counter): batch bytes sent to consumers.
  family<prometheus::Counter>& bytes_out_total();
  /// ferry_messages_in_total {topic} (counter): records appended by produce.
  family<prometheus::Counter>& messages_in_total();
  /// ferry_messages_out_total {topic} (counter): records sent to consumers.
  family<prometheus::Counter>& messages_out_total();

  // -- per consumer group -----------------------------------------------------

  /// ferry_consumergroup_committed_offset {group, topic, partition}.
  family<prometheus::Gauge>& consumergroup_committed_offset();
  /// ferry_consumergroup_lag {group, topic, partition}: high watermark minus
  /// max(committed, log start).
  family<prometheus::Gauge>& consumergroup_lag();
  /// ferry_consumergroup_lag_seconds {group, topic, partition}: now minus the
  /// timestamp of the first unconsumed record; 0 when caught up.
  family<prometheus::Gauge>& consumergroup_lag_seconds();
  /// ferry_consumergroup_members {group}: members known to the coordinator.
  family<prometheus::Gauge>& consumergroup_members();
  /// ferry_dlq_messages_total {group, topic} (counter): dead-lettered records.
  family<prometheus::Counter>& dlq_messages_total();
  /// ferry_dlq_depth {group, topic}: records waiting in the dead-letter queue.
  family<prometheus::Gauge>& dlq_depth();
  /// ferry_redeliveries_total {group, topic} (counter): records delivered
  /// again after a nack or an expired lease.
  family<prometheus::Counter>& redeliveries_total();
  /// ferry_lease_expiries_total {group, topic} (counter): leases that ran out.
  family<prometheus::Counter>& lease_expiries_total();
  /// ferry_queue_records {group, topic, partition, state}: records a
  /// queue-mode group tracks on a partition, by state (available, leased,
  /// retrying, scheduled, dead_letter_pending).
  family<prometheus::Gauge>& queue_records();

  // -- per node: no labels unless named ---------------------------------------

  /// ferry_disk_used_bytes: used bytes of the file system of the data dir.
  family<prometheus::Gauge>& disk_used_bytes();
  /// ferry_disk_free_bytes: bytes of that file system available to ferryd.
  family<prometheus::Gauge>& disk_free_bytes();
  /// ferry_raft_term: the metadata quorum's term as this node knows it.
  family<prometheus::Gauge>& raft_term();
  /// ferry_raft_is_leader: 1 if this node leads the metadata quorum.
  family<prometheus::Gauge>& raft_is_leader();
  /// ferry_raft_commit_index: last committed metadata log index it knows.
  family<prometheus::Gauge>& raft_commit_index();
  /// ferry_request_errors_total {code} (counter): failed client requests by
  /// error code name (ferry::to_string(ec), e.g. "unknown_topic").
  family<prometheus::Counter>& request_errors_total();
  /// ferry_forwarded_requests_total {kind} (counter): client partition
  /// requests (kind "produce", "fetch" or "offsets") this node relayed to the node
  /// leading the partition. Clients that send to partition leaders directly
  /// (the producer and consumer of the client library) keep it near 0.
  family<prometheus::Counter>& forwarded_requests_total();
  /// ferry_journal_rounds_total, ferry_journal_bytes_total,
  /// ferry_journal_checkpoints_total (counters) and ferry_journal_files
  /// (gauge): the node journal (broker/node_journal.hpp), when it is on.
  family<prometheus::Counter>& journal_rounds_total();
  family<prometheus::Counter>& journal_bytes_total();
  family<prometheus::Counter>& journal_checkpoints_total();
  family<prometheus::Gauge>& journal_files();
  /// ferry_partition_dirty_ratio {topic, partition}: a compacted log's dirty
  /// bytes / cleanable bytes (compacted topics only).
  family<prometheus::Gauge>& partition_dirty_ratio();
  /// ferry_partition_last_clean_timestamp_seconds {topic, partition}: when
  /// the log was last cleaned (0: not since ferryd started).
  family<prometheus::Gauge>& partition_last_clean_timestamp();
  /// ferry_log_cleaner_runs_total, _failures_total, _bytes_read_total,
  /// _bytes_written_total, _bytes_reclaimed_total, _records_removed_total,
  /// and the gauge ferry_log_cleaner_last_run_seconds (node-wide).
  family<prometheus::Counter>& cleaner_runs_total();
  family<prometheus::Counter>& cleaner_failures_total();
  family<prometheus::Counter>& cleaner_bytes_read_total();
  family<prometheus::Counter>& cleaner_bytes_written_total();
  family<prometheus::Counter>& cleaner_bytes_reclaimed_total();
  family<prometheus::Counter>& cleaner_records_removed_total();
  family<prometheus::Gauge>& cleaner_last_run_seconds();

  // -- series lifetime --------------------------------------------------------

  /// The series of `family` with `l`, added if new; counts a reference.
  /// @returns a reference valid until the matching release().
  prometheus::Gauge& acquire(family<prometheus::Gauge>& family,
                             const labels& l);
  prometheus::Counter& acquire(family<prometheus::Counter>& family,
                               const labels& l);
  prometheus::Histogram&
  acquire(family<prometheus::Histogram>& family, const labels& l);

  /// Drops a reference taken by acquire(); the last one removes the series.
  void release(family<prometheus::Gauge>& family, const labels& l);
  void release(family<prometheus::Counter>& family,
               const labels& l);
  void release(family<prometheus::Histogram>& family,
               const labels& l);

  // -- reading ----------------------------------------------------------------

  /// Every family, as prometheus-cpp collects them (for the exposer and
  /// for tests reading series back).
  std::shared_ptr<prometheus::Collectable> collectable() const;

  /// Every series in the Prometheus text exposition format.
  std::string text() const;

private:
  struct families;

  template <class T>
  T& acquire_impl(family<T>& family, const labels& l);
  template <class T>
  void release_impl(family<T>& family, const labels& l);

  std::shared_ptr<families> families_;
  std::mutex mtx_;
  /// References per (family, labels).
  std::map<std::pair<const void*, labels>, size_t> refs_;
};

} // namespace ferry::metrics
