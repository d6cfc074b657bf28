#pragma once
// The CAF-native consumer (client library). Either a group member
// (`topics` + `group_id`: join, sync, heartbeats, rebalances, commits), a
// standalone reader of explicit partitions (`partitions`, optionally with a
// `group_id` to start from and commit to its offsets), or a standalone reader
// of every partition of `topics` (no group).
//
// Send (poll_atom, max_wait_ms) for the next messages: it answers at once when
// some are buffered, else when a fetch brings some, else with an empty list
// after max_wait_ms. Fetches run ahead per partition (one long poll in flight
// each, up to max_buffered_bytes decoded and waiting; the fetches that may
// bring data back share fetch_max_total_bytes). Positions advance only
// over messages poll returned; commit and auto-commit commit positions.
// A lost connection reconnects and, in a group, rejoins. Fetches go to each
// partition's leader directly (route_to_leaders; see leader_links.hpp).
// (seek_atom, tp, offset) moves a position; offset -2 means the earliest
// offset and -1 the latest. A seek on a partition not (yet) assigned applies
// when it is assigned, instead of the committed offset.

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

/// Consumer settings; the Kafka name of each is in its comment.
struct consumer_config {
  /// bootstrap.servers: "HOST:PORT" or "H1:P1,H2:P2,..." (tried in order;
  /// parse_broker_address), used when no connection is passed.
  std::string bootstrap = "127.0.0.1:9092";
  /// client.id
  std::string client_id = "ferry-consumer";
  /// group.id: "" = no group (no commits).
  std::string group_id;
  /// group.instance.id: static membership.
  std::string group_instance_id;
  /// subscribe(topics): with a group id the coordinator assigns partitions,
  /// without one the consumer reads every partition of each topic.
  std::vector<std::string> topics;
  /// assign(partitions): explicit partitions; wins over `topics`.
  std::vector<topic_partition> partitions;
  /// auto.offset.reset: "earliest", "latest" or "none" (poll then fails
  /// with offset_out_of_range when there is no valid position).
  std::string auto_offset_reset = "latest";
  /// enable.auto.commit and auto.commit.interval.ms (also commits before
  /// leaving and before giving partitions up).
  bool enable_auto_commit = true;
  std::chrono::milliseconds auto_commit_interval{5000};
  /// session.timeout.ms, max.poll.interval.ms, heartbeat.interval.ms
  std::chrono::milliseconds session_timeout{45000};
  std::chrono::milliseconds max_poll_interval{300000};
  std::chrono::milliseconds heartbeat_interval{3000};
  /// partition.assignment.strategy, preferred first.
  std::vector<std::string> assignors{"range", "cooperative-sticky"};
  /// max.partition.fetch.bytes, fetch.min.bytes, fetch.max.wait.ms
  int32_t fetch_max_bytes = 1 << 20;
  int32_t fetch_min_bytes = 1;
  std::chrono::milliseconds fetch_max_wait{500};
  /// fetch.max.bytes: the most bytes the fetches that may bring data back
  /// reserve at once, over all partitions (each reserves fetch_max_bytes).
  /// A partition whose last fetch reached the high watermark long-polls
  /// outside it, so a tailing consumer still waits on every partition; a
  /// consumer reading a backlog keeps ~this much in flight, not
  /// partitions x fetch_max_bytes (which the broker would queue on one
  /// connection). 8 MiB: consuming 1,000 partitions from the start went
  /// from ~275k to ~500k msgs/s (tests/bench/README.md; 4 and 16 MiB were
  /// slower).
  int64_t fetch_max_total_bytes = 8 << 20;
  /// max.poll.records
  int32_t max_poll_records = 500;
  /// Decoded bytes a partition may hold before its fetching pauses.
  size_t max_buffered_bytes = 4u << 20;
  /// request.timeout.ms and retry.backoff.ms
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds retry_backoff{100};
  /// metadata.max.age.ms: partition leaders are refreshed this often (and
  /// after not_leader, a relayed fetch or a lost leader link).
  std::chrono::milliseconds metadata_max_age{300000};
  /// Fetch each partition from its leader's node over a connection of the
  /// consumer's own, as Kafka consumers do. Group requests, commits and
  /// offset lookups go through the bootstrap connection, and so do fetches
  /// while a leader is unknown or its node unreachable (that node relays
  /// them). false: everything goes through the bootstrap connection.
  bool route_to_leaders = true;
};

/// Checks a config for values the consumer cannot work with.
caf::error validate(const consumer_config& cfg);

/// Spawns a consumer that talks through `conn` (shared; not stopped with
/// the consumer). invalid_config if `cfg` is not valid.
caf::expected<consumer_actor> spawn_consumer(caf::actor_system& sys,
                                             consumer_config cfg,
                                             connection_actor conn);

/// Spawns a consumer with its own connection to cfg.bootstrap, stopped when
/// the consumer ends.
caf::expected<consumer_actor> spawn_consumer(caf::actor_system& sys,
                                             consumer_config cfg);

} // namespace ferry
