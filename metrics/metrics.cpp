#include "metrics/metrics.hpp"

#include "metrics/family.hpp"

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include <type_traits>

namespace ferry::metrics {

struct registry::families final : prometheus::Collectable {
  using gauges = family<prometheus::Gauge>;
  using counters = family<prometheus::Counter>;
  using histograms = family<prometheus::Histogram>;

  families()
    : high_watermark(gauges("ferry_partition_high_watermark",
                           "High watermark of a partition: consumers read "
                           "below it")),
      log_start(gauges("ferry_partition_log_start_offset",
                      "First readable offset of a partition")),
      log_end(gauges("ferry_partition_log_end_offset",
                    "Offset the next append to a partition gets")),
      size_bytes(gauges("ferry_partition_size_bytes",
                       "Bytes of a partition's segment files")),
      isr_size(gauges("ferry_partition_isr_size",
                     "Replicas of a partition in sync with its leader")),
      under_replicated(gauges("ferry_partition_under_replicated",
                             "1 if a partition has fewer in-sync replicas "
                             "than replicas")),
      produce_latency(histograms("ferry_produce_latency_seconds",
                                "Produce request time at the partition "
                                "replica, arrival to answer", latency_buckets())),
      fetch_latency(histograms("ferry_fetch_latency_seconds",
                              "Consumer fetch time at the partition replica, "
                              "arrival to answer (includes long-poll wait)", latency_buckets())),
      log_flush(histograms("ferry_log_flush_seconds",
                          "Time of one log flush (fdatasync of the segment "
                          "and its indexes) of a partition replica, leader "
                          "or follower", latency_buckets())),
      bytes_in(counters("ferry_bytes_in_total",
                       "Batch bytes appended by producers")),
      bytes_out(counters("ferry_bytes_out_total",
                        "Batch bytes sent to consumers")),
      messages_in(counters("ferry_messages_in_total",
                          "Records appended by producers")),
      messages_out(counters("ferry_messages_out_total",
                           "Records sent to consumers")),
      committed(gauges("ferry_consumergroup_committed_offset",
                      "Committed offset of a consumer group on a partition")),
      lag(gauges("ferry_consumergroup_lag",
                "Records of a partition a consumer group has not consumed: "
                "high watermark minus max(committed, log start)")),
      lag_seconds(gauges("ferry_consumergroup_lag_seconds",
                        "Age of the first record a consumer group has not "
                        "consumed; 0 when caught up")),
      members(gauges("ferry_consumergroup_members",
                    "Members of a consumer group")),
      dlq_total(counters("ferry_dlq_messages_total",
                        "Records a consumer group dead-lettered")),
      dlq_depth(gauges("ferry_dlq_depth",
                      "Records waiting in a consumer group's dead-letter "
                      "queue")),
      redeliveries(counters("ferry_redeliveries_total",
                           "Records delivered again after a nack or an "
                           "expired lease")),
      lease_expiries(counters("ferry_lease_expiries_total",
                             "Record leases that ran out before an ack")),
      queue_records(gauges("ferry_queue_records",
                          "Records a queue-mode group tracks on a partition, "
                          "by state: available (deliverable now), leased (in "
                          "flight to a member), retrying (waiting for a retry "
                          "backoff), scheduled (delayed delivery not due), "
                          "dead_letter_pending, parked (ordering=key: behind "
                          "an earlier record of its key)")),
      disk_used(gauges("ferry_disk_used_bytes",
                      "Used bytes of the file system holding the data dir")),
      disk_free(gauges("ferry_disk_free_bytes",
                      "Bytes of the data dir's file system available to "
                      "ferryd")),
      raft_term(gauges("ferry_raft_term",
                      "Term of the metadata quorum as this node knows it")),
      raft_is_leader(gauges("ferry_raft_is_leader",
                           "1 if this node leads the metadata quorum")),
      raft_commit_index(gauges("ferry_raft_commit_index",
                              "Last committed metadata log index this node "
                              "knows")),
      request_errors(counters("ferry_request_errors_total",
                             "Failed client requests by error code")),
      forwarded(counters("ferry_forwarded_requests_total",
                        "Client partition requests this node relayed to "
                        "the node leading the partition")),
      journal_rounds(counters("ferry_journal_rounds_total",
                             "Write + fdatasync rounds of the node journal")),
      journal_bytes(counters("ferry_journal_bytes_total",
                            "Bytes written to the node journal")),
      journal_checkpoints(counters("ferry_journal_checkpoints_total",
                                  "Node journal checkpoints (syncfs, then "
                                  "older journal files deleted)")),
      journal_files(gauges("ferry_journal_files",
                          "Node journal files on disk")),
      dirty_ratio(gauges("ferry_partition_dirty_ratio",
                        "Of a compacted partition's cleanable bytes (closed "
                        "segments below the high watermark), the share not "
                        "cleaned yet")),
      last_clean(gauges("ferry_partition_last_clean_timestamp_seconds",
                       "When the log cleaner last compacted a partition, "
                       "seconds since the epoch (0: not since ferryd started)")),
      cleaner_runs(counters("ferry_log_cleaner_runs_total",
                           "Cleans the log cleaner ran")),
      cleaner_failures(counters("ferry_log_cleaner_failures_total",
                               "Cleans that failed (the log is unchanged)")),
      cleaner_read(counters("ferry_log_cleaner_bytes_read_total",
                           "Segment bytes the log cleaner read")),
      cleaner_written(counters("ferry_log_cleaner_bytes_written_total",
                              "Bytes of cleaned segments written")),
      cleaner_reclaimed(counters("ferry_log_cleaner_bytes_reclaimed_total",
                                "Bytes compaction removed from the logs")),
      cleaner_removed(counters("ferry_log_cleaner_records_removed_total",
                              "Records compaction removed (older values, "
                              "expired tombstones, records without a key)")),
      cleaner_last_run(gauges("ferry_log_cleaner_last_run_seconds",
                             "Duration of the log cleaner's last clean")) {
  }

  gauges high_watermark;
  gauges log_start;
  gauges log_end;
  gauges size_bytes;
  gauges isr_size;
  gauges under_replicated;
  histograms produce_latency;
  histograms fetch_latency;
  histograms log_flush;
  counters bytes_in;
  counters bytes_out;
  counters messages_in;
  counters messages_out;
  gauges committed;
  gauges lag;
  gauges lag_seconds;
  gauges members;
  counters dlq_total;
  gauges dlq_depth;
  counters redeliveries;
  counters lease_expiries;
  gauges queue_records;
  gauges disk_used;
  gauges disk_free;
  gauges raft_term;
  gauges raft_is_leader;
  gauges raft_commit_index;
  counters request_errors;
  counters forwarded;
  counters journal_rounds;
  counters journal_bytes;
  counters journal_checkpoints;
  gauges journal_files;
  gauges dirty_ratio;
  gauges last_clean;
  counters cleaner_runs;
  counters cleaner_failures;
  counters cleaner_read;
  counters cleaner_written;
  counters cleaner_reclaimed;
  counters cleaner_removed;
  gauges cleaner_last_run;

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    for_each([&](const auto& f) { f.collect(out); });
    return out;
  }

  /// Calls `fn` with every family, in the order they are exposed.
  template <class Fn>
  void for_each(Fn&& fn) const {
    fn(high_watermark); fn(log_start); fn(log_end); fn(size_bytes);
    fn(isr_size); fn(under_replicated); fn(produce_latency);
    fn(fetch_latency); fn(log_flush); fn(bytes_in); fn(bytes_out);
    fn(messages_in); fn(messages_out); fn(committed); fn(lag);
    fn(lag_seconds); fn(members); fn(dlq_total); fn(dlq_depth);
    fn(redeliveries); fn(lease_expiries); fn(queue_records); fn(disk_used);
    fn(disk_free); fn(raft_term); fn(raft_is_leader); fn(raft_commit_index);
    fn(request_errors); fn(forwarded); fn(journal_rounds); fn(journal_bytes);
    fn(journal_checkpoints); fn(journal_files); fn(dirty_ratio);
    fn(last_clean); fn(cleaner_runs); fn(cleaner_failures); fn(cleaner_read);
    fn(cleaner_written); fn(cleaner_reclaimed); fn(cleaner_removed);
    fn(cleaner_last_run);
  }
};

registry::registry() : families_(std::make_shared<families>()) {
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
family<prometheus::Gauge>& registry::partition_high_watermark() { return families_->high_watermark; }
family<prometheus::Gauge>& registry::partition_log_start_offset() { return families_->log_start; }
family<prometheus::Gauge>& registry::partition_log_end_offset() { return families_->log_end; }
family<prometheus::Gauge>& registry::partition_size_bytes() { return families_->size_bytes; }
family<prometheus::Gauge>& registry::partition_isr_size() { return families_->isr_size; }
family<prometheus::Gauge>& registry::partition_under_replicated() { return families_->under_replicated; }
family<prometheus::Histogram>& registry::produce_latency_seconds() { return families_->produce_latency; }
family<prometheus::Histogram>& registry::fetch_latency_seconds() { return families_->fetch_latency; }
family<prometheus::Histogram>& registry::log_flush_seconds() { return families_->log_flush; }
family<prometheus::Counter>& registry::bytes_in_total() { return families_->bytes_in; }
family<prometheus::Counter>& registry::bytes_out_total() { return families_->bytes_out; }
family<prometheus::Counter>& registry::messages_in_total() { return families_->messages_in; }
family<prometheus::Counter>& registry::messages_out_total() { return families_->messages_out; }
family<prometheus::Gauge>& registry::consumergroup_committed_offset() { return families_->committed; }
family<prometheus::Gauge>& registry::consumergroup_lag() { return families_->lag; }
family<prometheus::Gauge>& registry::consumergroup_lag_seconds() { return families_->lag_seconds; }
family<prometheus::Gauge>& registry::consumergroup_members() { return families_->members; }
family<prometheus::Counter>& registry::dlq_messages_total() { return families_->dlq_total; }
family<prometheus::Gauge>& registry::dlq_depth() { return families_->dlq_depth; }
family<prometheus::Counter>& registry::redeliveries_total() { return families_->redeliveries; }
family<prometheus::Counter>& registry::lease_expiries_total() { return families_->lease_expiries; }
family<prometheus::Gauge>& registry::queue_records() { return families_->queue_records; }
family<prometheus::Gauge>& registry::disk_used_bytes() { return families_->disk_used; }
family<prometheus::Gauge>& registry::disk_free_bytes() { return families_->disk_free; }
family<prometheus::Gauge>& registry::raft_term() { return families_->raft_term; }
family<prometheus::Gauge>& registry::raft_is_leader() { return families_->raft_is_leader; }
family<prometheus::Gauge>& registry::raft_commit_index() { return families_->raft_commit_index; }
family<prometheus::Counter>& registry::request_errors_total() { return families_->request_errors; }
family<prometheus::Counter>& registry::forwarded_requests_total() { return families_->forwarded; }
family<prometheus::Counter>& registry::journal_rounds_total() { return families_->journal_rounds; }
family<prometheus::Counter>& registry::journal_bytes_total() { return families_->journal_bytes; }
family<prometheus::Counter>& registry::journal_checkpoints_total() { return families_->journal_checkpoints; }
family<prometheus::Gauge>& registry::journal_files() { return families_->journal_files; }
family<prometheus::Gauge>& registry::partition_dirty_ratio() { return families_->dirty_ratio; }
family<prometheus::Gauge>& registry::partition_last_clean_timestamp() { return families_->last_clean; }
family<prometheus::Counter>& registry::cleaner_runs_total() { return families_->cleaner_runs; }
family<prometheus::Counter>& registry::cleaner_failures_total() { return families_->cleaner_failures; }
family<prometheus::Counter>& registry::cleaner_bytes_read_total() { return families_->cleaner_read; }
family<prometheus::Counter>& registry::cleaner_bytes_written_total() { return families_->cleaner_written; }
family<prometheus::Counter>& registry::cleaner_bytes_reclaimed_total() { return families_->cleaner_reclaimed; }
family<prometheus::Counter>& registry::cleaner_records_removed_total() { return families_->cleaner_removed; }
family<prometheus::Gauge>& registry::cleaner_last_run_seconds() { return families_->cleaner_last_run; }
// clang-format on

template <class T>
T& registry::acquire_impl(family<T>& family, const labels& l) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++refs_[{&family, l}];
  return family.add(l); // the existing series when the labels are known
}

template <class T>
void registry::release_impl(family<T>& family, const labels& l) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = refs_.find({&family, l});
  if (i == refs_.end() || --i->second > 0)
    return;
  refs_.erase(i);
  family.remove(l); // out of the next scrape
}

prometheus::Gauge& registry::acquire(family<prometheus::Gauge>& f,
                                     const labels& l) {
  return acquire_impl(f, l);
}
prometheus::Counter&
registry::acquire(family<prometheus::Counter>& f, const labels& l) {
  return acquire_impl(f, l);
}
prometheus::Histogram&
registry::acquire(family<prometheus::Histogram>& f,
                  const labels& l) {
  return acquire_impl(f, l);
}
void registry::release(family<prometheus::Gauge>& f,
                       const labels& l) {
  release_impl(f, l);
}
void registry::release(family<prometheus::Counter>& f,
                       const labels& l) {
  release_impl(f, l);
}
void registry::release(family<prometheus::Histogram>& f,
                       const labels& l) {
  release_impl(f, l);
}

std::shared_ptr<prometheus::Collectable> registry::collectable() const {
  return families_;
}

std::string registry::text() const {
  prometheus::TextSerializer ser;
  return ser.Serialize(families_->Collect());
}

} // namespace ferry::metrics
