#include "actors/client/stream_dlq.hpp"

#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

namespace ferry {

namespace {

using std::chrono::milliseconds;

timestamp_ms wall_ms() {
  return std::chrono::duration_cast<milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

bool is_dlq_header(std::string_view key) {
  for (auto h : {dlq_header::original_topic, dlq_header::original_partition,
                 dlq_header::original_offset, dlq_header::attempts,
                 dlq_header::error, dlq_header::group,
                 dlq_header::first_failure_ts, dlq_header::last_failure_ts})
    if (key == h)
      return true;
  return false;
}

/// Sleeps `d`, waking early when `cancel` is set. False if cancelled.
bool sleep_for(milliseconds d, const std::atomic<bool>* cancel) {
  auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (cancel != nullptr && cancel->load())
      return false;
    auto left = until - std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
      left, milliseconds{20}));
  }
  return cancel == nullptr || !cancel->load();
}

} // namespace

client_message make_stream_dead_letter(const consumed_message& m,
                                       const dead_letter_info& info,
                                       std::string_view group,
                                       std::string_view dlq_topic) {
  client_message out;
  out.topic = std::string{dlq_topic};
  out.partition = -1;
  out.has_key = m.has_key;
  out.key = m.key;
  out.has_value = m.has_value;
  out.value = m.value;
  out.timestamp = m.timestamp;
  for (auto& h : m.headers)
    if (!is_dlq_header(h.key))
      out.headers.push_back(h);
  for (auto& h : dead_letter_headers(info, group, m.topic, m.partition))
    out.headers.push_back(message_header{h.key, h.value.value_or("")});
  return out;
}

stream_dlq::stream_dlq(caf::actor_system& sys, connection_actor conn,
                       producer_actor producer, stream_dlq_config cfg)
  : sys_(sys),
    conn_(std::move(conn)),
    producer_(std::move(producer)),
    cfg_(std::move(cfg)),
    policy_(cfg_.retry, cfg_.seed) {
}

std::string stream_dlq::dlq_topic_for(std::string_view topic) const {
  if (!cfg_.dlq_topic.empty())
    return cfg_.dlq_topic;
  return default_dlq_topic(topic, cfg_.group);
}

caf::expected<int32_t> stream_dlq::ensure_topic(const std::string& dlq,
                                                const std::string& source) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = dlq_partitions_.find(dlq); i != dlq_partitions_.end())
      return i->second;
  }
  caf::scoped_actor self{sys_};
  broker_actor broker;
  caf::error err;
  self->request(conn_, cfg_.request_timeout, connect_atom_v)
    .receive([&](broker_actor& b) { broker = std::move(b); },
             [&](caf::error& e) { err = std::move(e); });
  if (err)
    return err;
  // An existing DLQ keeps its size; a new one gets the source's.
  std::optional<int32_t> parts;
  self->request(broker, cfg_.request_timeout, describe_atom_v, topic_atom_v, dlq)
    .receive(
      [&](topic_description& d) {
        parts = static_cast<int32_t>(d.partitions.size());
      },
      [&](caf::error& e) { err = std::move(e); });
  if (err && !is(err, ec::unknown_topic))
    return err;
  if (!parts) {
    err = caf::error{};
    int32_t n = 1;
    self
      ->request(broker, cfg_.request_timeout, describe_atom_v, topic_atom_v,
                source)
      .receive(
        [&](topic_description& d) {
          n = std::max<int32_t>(1, static_cast<int32_t>(d.partitions.size()));
        },
        [&](caf::error&) {});
    topic_config tc;
    tc.partitions = n;
    tc.retention_ms = -1;
    self->request(broker, cfg_.request_timeout, create_atom_v, topic_atom_v, dlq, tc)
      .receive([&](topic_metadata& md) {
                 parts = static_cast<int32_t>(md.partitions.size());
               },
               [&](caf::error& e) { err = std::move(e); });
    if (err && is(err, ec::topic_exists)) {
      err = caf::error{};
      parts = n; // created concurrently (another worker): same rule
    }
    if (err)
      return err;
  }
  if (!parts || *parts <= 0)
    parts = 1;
  std::lock_guard<std::mutex> guard{mtx_};
  dlq_partitions_[dlq] = *parts;
  return *parts;
}

caf::expected<delivery_report>
stream_dlq::dead_letter(const consumed_message& m,
                        const dead_letter_info& info) {
  auto dlq = dlq_topic_for(m.topic);
  auto parts = ensure_topic(dlq, m.topic);
  if (!parts)
    return std::move(parts.error());
  auto msg = make_stream_dead_letter(m, info, cfg_.group, dlq);
  msg.partition = m.partition.value % *parts;
  caf::scoped_actor self{sys_};
  std::optional<delivery_report> out;
  caf::error err;
  self->request(producer_, cfg_.request_timeout, produce_atom_v, std::move(msg))
    .receive([&](delivery_report& r) { out = std::move(r); },
             [&](caf::error& e) { err = std::move(e); });
  if (err)
    return err;
  return std::move(*out);
}

caf::expected<stream_outcome>
stream_dlq::process(const consumed_message& m, const handler& h,
                    const std::atomic<bool>* cancel) {
  stream_outcome out;
  dead_letter_info info;
  info.off = m.off;
  auto max_attempts = std::max<int32_t>(1, cfg_.retry.max_attempts);
  for (;;) {
    ++out.attempts;
    auto r = h(m, out.attempts);
    if (r.outcome == handler_result::kind::ok) {
      out.processed = true;
      return out;
    }
    // A failure while stopping (e.g. the handler was interrupted) says
    // nothing about the record: never dead-letter it for that.
    if (cancel != nullptr && cancel->load())
      return out;
    auto now = wall_ms();
    if (info.first_failure == 0)
      info.first_failure = now;
    info.last_failure = now;
    info.attempts = out.attempts;
    info.error = r.error.substr(0, max_error_bytes);
    out.error = info.error;
    if (r.outcome == handler_result::kind::reject
        || out.attempts >= max_attempts)
      break;
    milliseconds delay;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      delay = policy_.backoff(out.attempts);
    }
    if (!sleep_for(delay, cancel))
      return out; // cancelled
  }
  auto rep = dead_letter(m, info);
  if (!rep)
    return std::move(rep.error());
  out.dead_lettered = true;
  out.report = std::move(*rep);
  return out;
}

} // namespace ferry
