#include "metrics/partition_probe.hpp"

#include "metrics/family.hpp"
#include "metrics/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

namespace ferry::metrics {

namespace {

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

} // namespace

partition_probe::partition_probe(std::shared_ptr<registry> reg,
                                 std::string topic, partition_id partition)
  : reg_(std::move(reg)), topic_(std::move(topic)), partition_(partition) {
  auto& r = *reg_;
  labels p{{"topic", topic_}, {"partition", std::to_string(partition_.value)}};
  labels t{{"topic", topic_}};
  hw_ = &r.acquire(r.partition_high_watermark(), p);
  log_start_ = &r.acquire(r.partition_log_start_offset(), p);
  log_end_ = &r.acquire(r.partition_log_end_offset(), p);
  size_ = &r.acquire(r.partition_size_bytes(), p);
  isr_ = &r.acquire(r.partition_isr_size(), p);
  under_replicated_ = &r.acquire(r.partition_under_replicated(), p);
  bytes_in_ = &r.acquire(r.bytes_in_total(), t);
  bytes_out_ = &r.acquire(r.bytes_out_total(), t);
  messages_in_ = &r.acquire(r.messages_in_total(), t);
  messages_out_ = &r.acquire(r.messages_out_total(), t);
  produce_latency_ = &r.acquire(r.produce_latency_seconds(), t);
  fetch_latency_ = &r.acquire(r.fetch_latency_seconds(), t);
  log_flush_ = &r.acquire(r.log_flush_seconds(), t);
}

partition_probe::~partition_probe() {
  auto& r = *reg_;
  labels p{{"topic", topic_}, {"partition", std::to_string(partition_.value)}};
  labels t{{"topic", topic_}};
  r.release(r.partition_high_watermark(), p);
  r.release(r.partition_log_start_offset(), p);
  r.release(r.partition_log_end_offset(), p);
  r.release(r.partition_size_bytes(), p);
  r.release(r.partition_isr_size(), p);
  r.release(r.partition_under_replicated(), p);
  r.release(r.bytes_in_total(), t);
  r.release(r.bytes_out_total(), t);
  r.release(r.messages_in_total(), t);
  r.release(r.messages_out_total(), t);
  r.release(r.produce_latency_seconds(), t);
  r.release(r.fetch_latency_seconds(), t);
  r.release(r.log_flush_seconds(), t);
  if (dirty_ratio_) {
    r.release(r.partition_dirty_ratio(), p);
    r.release(r.partition_last_clean_timestamp(), p);
  }
}

void partition_probe::cleaning(double dirty_ratio, int64_t last_clean_ms) {
  if (!dirty_ratio_) {
    auto& r = *reg_;
    labels p{{"topic", topic_}, {"partition", std::to_string(partition_.value)}};
    dirty_ratio_ = &r.acquire(r.partition_dirty_ratio(), p);
    last_clean_ = &r.acquire(r.partition_last_clean_timestamp(), p);
  }
  dirty_ratio_->Set(dirty_ratio);
  last_clean_->Set(static_cast<double>(last_clean_ms) / 1000.0);
}

void partition_probe::produced(uint64_t records, uint64_t bytes,
                               std::chrono::nanoseconds latency) {
  messages_in_->Increment(static_cast<double>(records));
  bytes_in_->Increment(static_cast<double>(bytes));
  produce_latency_->Observe(seconds(latency));
}

void partition_probe::fetched(uint64_t records, uint64_t bytes,
                              std::chrono::nanoseconds latency) {
  messages_out_->Increment(static_cast<double>(records));
  bytes_out_->Increment(static_cast<double>(bytes));
  fetch_latency_->Observe(seconds(latency));
}

void partition_probe::flushed(std::chrono::nanoseconds latency) {
  log_flush_->Observe(seconds(latency));
}

void partition_probe::log_state(offset log_start, offset log_end,
                                offset high_watermark, uint64_t size_bytes) {
  log_start_->Set(static_cast<double>(log_start.value));
  log_end_->Set(static_cast<double>(log_end.value));
  hw_->Set(static_cast<double>(high_watermark.value));
  size_->Set(static_cast<double>(size_bytes));
}

void partition_probe::replication(size_t isr, size_t replicas) {
  isr_->Set(static_cast<double>(isr));
  under_replicated_->Set(isr < replicas ? 1.0 : 0.0);
}

} // namespace ferry::metrics
