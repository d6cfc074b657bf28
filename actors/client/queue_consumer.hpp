#pragma once
// The CAF-native queue-mode consumer (client library): one member of a
// queue-mode group (SQS / Kafka share-group semantics) reading one topic or
// several (`topic` and `topics`: each receive leases from all of them, the
// partitions taken in turn; every leased_message names its topic, and
// make_ack acks it there).
//
// Send (receive_atom, max, wait_ms) to lease up to `max` records; it waits up
// to wait_ms (the broker's long poll) when none is available and answers an
// empty list then. Each leased_message is settled with
// (ack_atom, queue_ack_request) built by make_ack(): ack (done), nack (retry
// after max(delay, backoff)), reject (dead-letter now) or extend (keep the
// lease longer). (stop_atom) leaves the group -- the broker releases this
// member's leases at once, without counting an attempt -- and stops.
//
// Group config: with `group_config` set, the consumer creates the group with
// it once connected (and after every reconnect). If the group exists with
// another config it is altered when `alter_existing`, else every receive
// fails with the broker's invalid_request. Without `group_config` the broker
// creates the group with its defaults on the first receive.
//
// Reconnects: the consumer subscribes to a connection actor
// (client_connection.hpp). While the broker is away, receives wait (up to
// their wait_ms, then answer empty) and acks wait up to request_timeout
// (then fail with request_timed_out). A receive that fails with a retriable
// error while its time is not up is tried again after retry_backoff. An ack
// that was sent and failed in transport is not repeated (the broker may have
// applied it): its error means "outcome unknown", and the record may come
// again. Leases held when the connection drops simply expire on the broker
// (at-least-once): acks of them then fail with lease_expired or
// lease_not_found, and their records come again.

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

/// Queue consumer settings.
struct queue_consumer_config {
  /// bootstrap.servers: "HOST:PORT" or "H1:P1,H2:P2,..." (tried in order;
  /// parse_broker_address), used when no connection is passed.
  std::string bootstrap = "127.0.0.1:9092";
  std::string group;
  /// The topic to read; more in `topics` (at least one of the two).
  std::string topic;
  std::vector<std::string> topics;
  /// The member id; "" = "<client_id>-<host>-<pid>-<random>".
  std::string member_id;
  std::string client_id = "ferry-queue-consumer";
  /// Create (or alter, see below) the group with this config.
  std::optional<queue_group_config> group_config;
  /// With group_config: alter a group that exists with another config.
  bool alter_existing = false;
  /// Lease time of received records; 0 = the group's visibility timeout.
  std::chrono::milliseconds visibility{0};
  /// One request to the broker (a receive gets wait_ms on top).
  std::chrono::milliseconds request_timeout{30000};
  /// Delay before a request that failed with a retriable error is repeated.
  std::chrono::milliseconds retry_backoff{200};
};

/// invalid_config for an empty group, no topic or an empty one, more than
/// max_receive_topics topics, or bad durations.
caf::error validate(const queue_consumer_config& cfg);

/// An ack request for a leased record (the consumer fills group, member and
/// topic in). `ms` is the nack delay or the extension, as `kind` needs.
queue_ack_request make_ack(const leased_message& m, queue_ack_kind kind,
                           std::string error = {}, int64_t ms = 0);

/// Spawns a queue consumer that talks through `conn` (shared; not stopped
/// with the consumer). invalid_config if `cfg` is not valid.
caf::expected<queue_consumer_actor>
spawn_queue_consumer(caf::actor_system& sys, queue_consumer_config cfg,
                     connection_actor conn);

/// Spawns a queue consumer with its own connection to cfg.bootstrap,
/// stopped when the consumer ends.
caf::expected<queue_consumer_actor>
spawn_queue_consumer(caf::actor_system& sys, queue_consumer_config cfg);

} // namespace ferry
