#pragma once
// The stream-mode dead-letter helper (client library): the pattern of the
// design guide for stream groups, so one poison record never blocks its
// partition forever. For each consumed record the application calls
// process() with its handler; process() runs the handler, retries a failure
// in the application with exponential backoff and jitter (broker/
// retry_policy.hpp), and after max_attempts failed attempts -- or at once
// when the handler says "reject" -- produces the record to the DLQ topic
// (default "<topic>.<group>.dlq") with the same ferry-* headers the
// queue-mode coordinator writes (dead_letter_headers(), lease_table.hpp).
// Then the caller commits the original record's offset as usual: the record
// is either processed or in the DLQ.
//
// The DLQ topic is created on first use with the source topic's partition
// count and retention.ms -1 (as the queue coordinator does); a dead letter
// goes to DLQ partition (source partition mod DLQ partitions). The produce
// uses the caller's producer (acks=all and idempotence recommended).
//
// Threads: process() and dead_letter() block (backoff sleeps, scoped_actor
// requests): call them from application threads, never from inside an
// actor. One stream_dlq may be shared by several threads.

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/lease_table.hpp"
#include "broker/retry_policy.hpp"

#include <caf/expected.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace ferry {

/// What one attempt of the application's handler says.
struct handler_result {
  enum class kind : uint8_t {
    ok,     ///< processed
    retry,  ///< failed: try again after a backoff (dead-letter when exhausted)
    reject, ///< failed for good: dead-letter now
  };
  kind outcome = kind::ok;
  std::string error; ///< retry, reject: the reason (ferry-error)

  static handler_result success() {
    return {};
  }
  static handler_result failure(std::string error) {
    return {kind::retry, std::move(error)};
  }
  static handler_result dead_letter(std::string error) {
    return {kind::reject, std::move(error)};
  }
};

struct stream_dlq_config {
  /// The consumer group (ferry-group header, default DLQ name); required.
  std::string group;
  /// max_attempts and the backoff (visibility_timeout is not used).
  retry_config retry;
  /// "" = "<topic>.<group>.dlq".
  std::string dlq_topic;
  std::chrono::milliseconds request_timeout{30000};
  /// Seeds the jitter; 0 = random.
  uint64_t seed = 0;
};

/// What process() did with a record.
struct stream_outcome {
  bool processed = false;     ///< the handler succeeded
  bool dead_lettered = false; ///< written to the DLQ (see report)
  int32_t attempts = 0;       ///< handler runs
  std::string error;          ///< the last failure
  delivery_report report;     ///< where the dead letter went
  /// Neither processed nor dead-lettered: cancelled during a backoff. Do
  /// not commit the record.
  bool cancelled() const {
    return !processed && !dead_lettered;
  }
};

/// The DLQ message of `m` (pure): key, value and timestamp kept, headers
/// kept minus earlier ferry-* DLQ headers, plus the eight ferry-* headers.
/// partition -1 (the caller picks it).
client_message make_stream_dead_letter(const consumed_message& m,
                                       const dead_letter_info& info,
                                       std::string_view group,
                                       std::string_view dlq_topic);

class stream_dlq {
public:
  using handler
    = std::function<handler_result(const consumed_message&, int32_t attempt)>;

  /// @param conn the client's connection (for DLQ topic creation).
  /// @param producer writes the dead letters.
  stream_dlq(caf::actor_system& sys, connection_actor conn,
             producer_actor producer, stream_dlq_config cfg);

  /// Runs `h` until it succeeds, rejects, or fails max_attempts times
  /// (sleeping the backoff in between), dead-lettering the record in the
  /// last two cases. `cancel` (optional) ends a backoff early, and a
  /// failure seen once it is set is not dead-lettered: the outcome is then
  /// cancelled(). Errors: the DLQ write failed (do not commit).
  caf::expected<stream_outcome> process(const consumed_message& m,
                                        const handler& h,
                                        const std::atomic<bool>* cancel
                                        = nullptr);

  /// Writes `m` to the DLQ now (creating the topic if needed).
  caf::expected<delivery_report> dead_letter(const consumed_message& m,
                                             const dead_letter_info& info);

  /// The DLQ topic of a source topic.
  std::string dlq_topic_for(std::string_view topic) const;

  const stream_dlq_config& config() const {
    return cfg_;
  }

private:
  /// The DLQ's partition count, creating the topic first if needed.
  caf::expected<int32_t> ensure_topic(const std::string& dlq,
                                      const std::string& source);

  caf::actor_system& sys_;
  connection_actor conn_;
  producer_actor producer_;
  stream_dlq_config cfg_;
  std::mutex mtx_;
  retry_policy policy_;
  std::map<std::string, int32_t> dlq_partitions_;
};

} // namespace ferry
