#include "metrics/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <type_traits>

namespace ferry::metrics {

struct registry::families {
  using gauges = prometheus::Family<prometheus::Gauge>;
  using counters = prometheus::Family<prometheus::Counter>;
  using histograms = prometheus::Family<prometheus::Histogram>;

  explicit families(prometheus::Registry& r)
    : high_watermark(gauge(r, "ferry_partition_high_watermark",
                           "High watermark of a partition: consumers read "
                           "below it")),
      log_start(gauge(r, "ferry_partition_log_start_offset",
                      "First readable offset of a partition")),
      log_end(gauge(r, "ferry_partition_log_end_offset",
                    "Offset the next append to a partition gets")),
      size_bytes(gauge(r, "ferry_partition_size_bytes",
                       "Bytes of a partition's segment files")),
      isr_size(gauge(r, "ferry_partition_isr_size",
                     "Replicas of a partition in sync with its leader")),
      under_replicated(gauge(r, "ferry_partition_under_replicated",
                             "1 if a partition has fewer in-sync replicas "
                             "than replicas")),
      produce_latency(histogram(r, "ferry_produce_latency_seconds",
                                "Produce request time at the partition "
                                "replica, arrival to answer")),
      fetch_latency(histogram(r, "ferry_fetch_latency_seconds",
                              "Consumer fetch time at the partition replica, "
                              "arrival to answer (includes long-poll wait)")),
      log_flush(histogram(r, "ferry_log_flush_seconds",
                          "Time of one log flush (fdatasync of the segment "
                          "and its indexes) of a partition replica, leader "
                          "or follower")),
      bytes_in(counter(r, "ferry_bytes_in_total",
                       "Batch bytes appended by producers")),
      bytes_out(counter(r, "ferry_bytes_out_total",
                        "Batch bytes sent to consumers")),
      messages_in(counter(r, "ferry_messages_in_total",
                          "Records appended by producers")),
      messages_out(counter(r, "ferry_messages_out_total",
                           "Records sent to consumers")),
      committed(gauge(r, "ferry_consumergroup_committed_offset",
                      "Committed offset of a consumer group on a partition")),
      lag(gauge(r, "ferry_consumergroup_lag",
                "Records of a partition a consumer group has not consumed: "
                "high watermark minus max(committed, log start)")),
      lag_seconds(gauge(r, "ferry_consumergroup_lag_seconds",
                        "Age of the first record a consumer group has not "
                        "consumed; 0 when caught up")),
      members(gauge(r, "ferry_consumergroup_members",
                    "Members of a consumer group")),
      dlq_total(counter(r, "ferry_dlq_messages_total",
                        "Records a consumer group dead-lettered")),
      dlq_depth(gauge(r, "ferry_dlq_depth",
                      "Records waiting in a consumer group's dead-letter "
                      "queue")),
      redeliveries(counter(r, "ferry_redeliveries_total",
                           "Records delivered again after a nack or an "
                           "expired lease")),
      lease_expiries(counter(r, "ferry_lease_expiries_total",
                             "Record leases that ran out before an ack")),
      queue_records(gauge(r, "ferry_queue_records",
                          "Records a queue-mode group tracks on a partition, "
                          "by state: available (deliverable now), leased (in "
                          "flight to a member), retrying (waiting for a retry "
                          "backoff), scheduled (delayed delivery not due), "
                          "dead_letter_pending, parked (ordering=key: behind "
                          "an earlier record of its key)")),
      disk_used(gauge(r, "ferry_disk_used_bytes",
                      "Used bytes of the file system holding the data dir")),
      disk_free(gauge(r, "ferry_disk_free_bytes",
                      "Bytes of the data dir's file system available to "
                      "ferryd")),
      raft_term(gauge(r, "ferry_raft_term",
                      "Term of the metadata quorum as this node knows it")),
      raft_is_leader(gauge(r, "ferry_raft_is_leader",
                           "1 if this node leads the metadata quorum")),
      raft_commit_index(gauge(r, "ferry_raft_commit_index",
                              "Last committed metadata log index this node "
                              "knows")),
      request_errors(counter(r, "ferry_request_errors_total",
                             "Failed client requests by error code")),
      forwarded(counter(r, "ferry_forwarded_requests_total",
                        "Client partition requests this node relayed to "
                        "the node leading the partition")),
      journal_rounds(counter(r, "ferry_journal_rounds_total",
                             "Write + fdatasync rounds of the node journal")),
      journal_bytes(counter(r, "ferry_journal_bytes_total",
                            "Bytes written to the node journal")),
      journal_checkpoints(counter(r, "ferry_journal_checkpoints_total",
                                  "Node journal checkpoints (syncfs, then "
                                  "older journal files deleted)")),
      journal_files(gauge(r, "ferry_journal_files",
                          "Node journal files on disk")),
      dirty_ratio(gauge(r, "ferry_partition_dirty_ratio",
                        "Of a compacted partition's cleanable bytes (closed "
                        "segments below the high watermark), the share not "
                        "cleaned yet")),
      last_clean(gauge(r, "ferry_partition_last_clean_timestamp_seconds",
                       "When the log cleaner last compacted a partition, "
                       "seconds since the epoch (0: not since ferryd started)")),
      cleaner_runs(counter(r, "ferry_log_cleaner_runs_total",
                           "Cleans the log cleaner ran")),
      cleaner_failures(counter(r, "ferry_log_cleaner_failures_total",
                               "Cleans that failed (the log is unchanged)")),
      cleaner_read(counter(r, "ferry_log_cleaner_bytes_read_total",
                           "Segment bytes the log cleaner read")),
      cleaner_written(counter(r, "ferry_log_cleaner_bytes_written_total",
                              "Bytes of cleaned segments written")),
      cleaner_reclaimed(counter(r, "ferry_log_cleaner_bytes_reclaimed_total",
                                "Bytes compaction removed from the logs")),
      cleaner_removed(counter(r, "ferry_log_cleaner_records_removed_total",
                              "Records compaction removed (older values, "
                              "expired tombstones, records without a key)")),
      cleaner_last_run(gauge(r, "ferry_log_cleaner_last_run_seconds",
                             "Duration of the log cleaner's last clean")) {
  }

  static gauges& gauge(prometheus::Registry& r, const char* name,
                       const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r);
  }
  static counters& counter(prometheus::Registry& r, const char* name,
                           const char* help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r);
  }
  static histograms& histogram(prometheus::Registry& r, const char* name,
                               const char* help) {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
  }

  gauges& high_watermark;
  gauges& log_start;
  gauges& log_end;
  gauges& size_bytes;
  gauges& isr_size;
  gauges& under_replicated;
  histograms& produce_latency;
  histograms& fetch_latency;
  histograms& log_flush;
  counters& bytes_in;
  counters& bytes_out;
  counters& messages_in;
  counters& messages_out;
  gauges& committed;
  gauges& lag;
  gauges& lag_seconds;
  gauges& members;
  counters& dlq_total;
  gauges& dlq_depth;
  counters& redeliveries;
  counters& lease_expiries;
  gauges& queue_records;
  gauges& disk_used;
  gauges& disk_free;
  gauges& raft_term;
  gauges& raft_is_leader;
  gauges& raft_commit_index;
  counters& request_errors;
  counters& forwarded;
  counters& journal_rounds;
  counters& journal_bytes;
  counters& journal_checkpoints;
  gauges& journal_files;
  gauges& dirty_ratio;
  gauges& last_clean;
  counters& cleaner_runs;
  counters& cleaner_failures;
  counters& cleaner_read;
  counters& cleaner_written;
  counters& cleaner_reclaimed;
  counters& cleaner_removed;
  gauges& cleaner_last_run;
};

registry::registry()
  : registry_(std::make_shared<prometheus::Registry>()),
    families_(std::make_unique<families>(*registry_)) {
}

registry::~registry() = default;

const std::vector<double>& registry::latency_buckets() {
  static const std::vector<double> buckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10,
  };
  return buckets;
}

// clang-format off
prometheus::Family<prometheus::Gauge>& registry::partition_high_watermark() { return families_->high_watermark; }
prometheus::Family<prometheus::Gauge>& registry::partition_log_start_offset() { return families_->log_start; }
prometheus::Family<prometheus::Gauge>& registry::partition_log_end_offset() { return families_->log_end; }
prometheus::Family<prometheus::Gauge>& registry::partition_size_bytes() { return families_->size_bytes; }
prometheus::Family<prometheus::Gauge>& registry::partition_isr_size() { return families_->isr_size; }
prometheus::Family<prometheus::Gauge>& registry::partition_under_replicated() { return families_->under_replicated; }
prometheus::Family<prometheus::Histogram>& registry::produce_latency_seconds() { return families_->produce_latency; }
prometheus::Family<prometheus::Histogram>& registry::fetch_latency_seconds() { return families_->fetch_latency; }
prometheus::Family<prometheus::Histogram>& registry::log_flush_seconds() { return families_->log_flush; }
prometheus::Family<prometheus::Counter>& registry::bytes_in_total() { return families_->bytes_in; }
prometheus::Family<prometheus::Counter>& registry::bytes_out_total() { return families_->bytes_out; }
prometheus::Family<prometheus::Counter>& registry::messages_in_total() { return families_->messages_in; }
prometheus::Family<prometheus::Counter>& registry::messages_out_total() { return families_->messages_out; }
prometheus::Family<prometheus::Gauge>& registry::consumergroup_committed_offset() { return families_->committed; }
prometheus::Family<prometheus::Gauge>& registry::consumergroup_lag() { return families_->lag; }
prometheus::Family<prometheus::Gauge>& registry::consumergroup_lag_seconds() { return families_->lag_seconds; }
prometheus::Family<prometheus::Gauge>& registry::consumergroup_members() { return families_->members; }
prometheus::Family<prometheus::Counter>& registry::dlq_messages_total() { return families_->dlq_total; }
prometheus::Family<prometheus::Gauge>& registry::dlq_depth() { return families_->dlq_depth; }
prometheus::Family<prometheus::Counter>& registry::redeliveries_total() { return families_->redeliveries; }
prometheus::Family<prometheus::Counter>& registry::lease_expiries_total() { return families_->lease_expiries; }
prometheus::Family<prometheus::Gauge>& registry::queue_records() { return families_->queue_records; }
prometheus::Family<prometheus::Gauge>& registry::disk_used_bytes() { return families_->disk_used; }
prometheus::Family<prometheus::Gauge>& registry::disk_free_bytes() { return families_->disk_free; }
prometheus::Family<prometheus::Gauge>& registry::raft_term() { return families_->raft_term; }
prometheus::Family<prometheus::Gauge>& registry::raft_is_leader() { return families_->raft_is_leader; }
prometheus::Family<prometheus::Gauge>& registry::raft_commit_index() { return families_->raft_commit_index; }
prometheus::Family<prometheus::Counter>& registry::request_errors_total() { return families_->request_errors; }
prometheus::Family<prometheus::Counter>& registry::forwarded_requests_total() { return families_->forwarded; }
prometheus::Family<prometheus::Counter>& registry::journal_rounds_total() { return families_->journal_rounds; }
prometheus::Family<prometheus::Counter>& registry::journal_bytes_total() { return families_->journal_bytes; }
prometheus::Family<prometheus::Counter>& registry::journal_checkpoints_total() { return families_->journal_checkpoints; }
prometheus::Family<prometheus::Gauge>& registry::journal_files() { return families_->journal_files; }
prometheus::Family<prometheus::Gauge>& registry::partition_dirty_ratio() { return families_->dirty_ratio; }
prometheus::Family<prometheus::Gauge>& registry::partition_last_clean_timestamp() { return families_->last_clean; }
prometheus::Family<prometheus::Counter>& registry::cleaner_runs_total() { return families_->cleaner_runs; }
prometheus::Family<prometheus::Counter>& registry::cleaner_failures_total() { return families_->cleaner_failures; }
prometheus::Family<prometheus::Counter>& registry::cleaner_bytes_read_total() { return families_->cleaner_read; }
prometheus::Family<prometheus::Counter>& registry::cleaner_bytes_written_total() { return families_->cleaner_written; }
prometheus::Family<prometheus::Counter>& registry::cleaner_bytes_reclaimed_total() { return families_->cleaner_reclaimed; }
prometheus::Family<prometheus::Counter>& registry::cleaner_records_removed_total() { return families_->cleaner_removed; }
prometheus::Family<prometheus::Gauge>& registry::cleaner_last_run_seconds() { return families_->cleaner_last_run; }
// clang-format on

template <class T>
T& registry::acquire_impl(prometheus::Family<T>& family, const labels& l) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++refs_[{&family, l}];
  // Add returns the existing series when the labels are known already.
  if constexpr (std::is_same_v<T, prometheus::Histogram>)
    return family.Add(l, latency_buckets());
  else
    return family.Add(l);
}

template <class T>
void registry::release_impl(prometheus::Family<T>& family, const labels& l) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = refs_.find({&family, l});
  if (i == refs_.end() || --i->second > 0)
    return;
  refs_.erase(i);
  // Add with known labels only looks the series up (histogram buckets are
  // ignored then); Remove takes it out of the next scrape.
  if constexpr (std::is_same_v<T, prometheus::Histogram>)
    family.Remove(&family.Add(l, latency_buckets()));
  else
    family.Remove(&family.Add(l));
}

prometheus::Gauge& registry::acquire(prometheus::Family<prometheus::Gauge>& f,
                                     const labels& l) {
  return acquire_impl(f, l);
}
prometheus::Counter&
registry::acquire(prometheus::Family<prometheus::Counter>& f, const labels& l) {
  return acquire_impl(f, l);
}
prometheus::Histogram&
registry::acquire(prometheus::Family<prometheus::Histogram>& f,
                  const labels& l) {
  return acquire_impl(f, l);
}
void registry::release(prometheus::Family<prometheus::Gauge>& f,
                       const labels& l) {
  release_impl(f, l);
}
void registry::release(prometheus::Family<prometheus::Counter>& f,
                       const labels& l) {
  release_impl(f, l);
}
void registry::release(prometheus::Family<prometheus::Histogram>& f,
                       const labels& l) {
  release_impl(f, l);
}

std::shared_ptr<prometheus::Registry> registry::prometheus_registry() const {
  return registry_;
}

std::string registry::text() const {
  prometheus::TextSerializer ser;
  return ser.Serialize(registry_->Collect());
}

} // namespace ferry::metrics
