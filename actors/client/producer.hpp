#pragma once
// The CAF-native producer (client library). Send it
// (produce_atom, client_message) and it answers with the delivery_report
// once the broker acknowledged the message per `acks`, or with an error once
// retries and the delivery timeout ran out.
//
// Bulk producers send (produce_atom, std::vector<client_message>) instead:
// one request and one answer for many messages, a std::vector of reports
// in message order once all are acknowledged. The messages go into the same
// partition batches as single ones (no actor message or promise per
// message); the first failure of any of them fails the whole request with
// that error (others may have been written: compare offsets or rely on
// idempotence when retrying). An empty vector is answered at once.
//
// Inside: the partitioner (murmur2 for keys, sticky for null keys), one open
// batch per partition closed by size (batch_size) or time (linger), one
// RecordBatch v2 per produce request, up to max_in_flight requests per
// partition, retries with backoff, and idempotence (a producer id from the
// broker plus per-partition sequence numbers, so a resent batch is
// deduplicated and per-partition order holds). Batches that were in flight
// when the connection dropped are resent after the reconnect.
//
// Routing (route_to_leaders): the producer learns each partition's leader
// from the metadata and each node's endpoint from (list_atom, broker_atom),
// and opens a connection of its own to every node that leads one of its
// partitions; a partition's requests go there. Until that link is up, or
// when it drops, they go through the bootstrap connection, whose node
// relays them and names the leader in its answer. A partition switches
// route only when none of its requests is in flight. Memory is
// bounded by buffer_memory: past it, produce waits up to max_block, then
// fails with `throttled` (retriable).

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/record_batch.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace ferry {

/// Producer settings; the Kafka name of each is in its comment.
struct producer_config {
  /// bootstrap.servers: "HOST:PORT" or "H1:P1,H2:P2,..." (tried in order;
  /// parse_broker_address), used when no connection is passed.
  std::string bootstrap = "127.0.0.1:9092";
  /// client.id
  std::string client_id = "ferry-producer";
  /// acks. With acks=0 (none) a message is reported, without an offset,
  /// when its batch goes out, and a failed send is not retried; its batch
  /// still holds its request slot and buffer_memory until the node took
  /// it, and flush() (and stopping) waits for that, so what was reported
  /// sent does not die in this process's send buffer.
  acks_mode acks = acks_mode::all;
  /// linger.ms: how long a partition's batch waits for more records. 0 still
  /// gathers what arrived in the same burst (the actor's mailbox).
  std::chrono::milliseconds linger{5};
  /// batch.size: bytes at which a partition's batch closes.
  size_t batch_size = 16384;
  /// compression.type
  compression codec = compression::none;
  /// retries: resend attempts for retriable errors.
  int32_t retries = std::numeric_limits<int32_t>::max();
  /// retry.backoff.ms, doubling per attempt up to retry.backoff.max.ms.
  std::chrono::milliseconds retry_backoff{100};
  std::chrono::milliseconds retry_backoff_max{1000};
  /// max.in.flight.requests.per.connection, here per partition (1..5 with
  /// idempotence; forced to 1 without idempotence when retries > 0,
  /// except with acks=0, which does not retry). A
  /// window, not a count: a batch answered before an older one keeps its
  /// slot until the older one is answered, so a retried batch is always
  /// among the last five the broker remembers (else it would be written
  /// twice under a new producer id).
  int32_t max_in_flight = 5;
  /// delivery.timeout.ms: upper bound from send to report or failure.
  std::chrono::milliseconds delivery_timeout{120000};
  /// request.timeout.ms: one produce request.
  std::chrono::milliseconds request_timeout{30000};
  /// enable.idempotence (effective with acks=all only, as in Kafka).
  bool idempotence = true;
  /// buffer.memory: bytes of records held (batching, in flight, retrying).
  size_t buffer_memory = 32u << 20;
  /// max.block.ms: how long produce waits for buffer space (0: fail at once).
  std::chrono::milliseconds max_block{60000};
  /// max.request.size: the largest record accepted, and the most bytes of
  /// batches (with their topic names) one request to a node carries; more
  /// ready batches go in further requests, and a single batch larger than
  /// this (batch.size above it) still goes, alone.
  size_t max_request_size = 1u << 20;
  /// metadata.max.age.ms: topic partition counts and leaders are
  /// refreshed this often (and after not_leader or a lost leader link).
  std::chrono::milliseconds metadata_max_age{300000};
  /// Send each partition's batches to the node leading it, over a
  /// connection of the producer's own, as Kafka clients do. The bootstrap
  /// connection carries metadata, and carries produce requests while a
  /// leader is unknown or its node unreachable (that node relays them).
  /// false: everything goes through the bootstrap connection.
  bool route_to_leaders = true;
};

/// Parses "none", "gzip", "lz4", "zstd" (invalid_config otherwise).
caf::expected<compression> parse_compression(std::string_view name);

/// Parses "0", "1", "all" or "-1" (invalid_config otherwise).
caf::expected<acks_mode> parse_acks(std::string_view name);

/// Checks a config for values the producer cannot work with.
caf::error validate(const producer_config& cfg);

/// Spawns a producer that talks through `conn` (shared; not stopped with the
/// producer). invalid_config if `cfg` is not valid.
caf::expected<producer_actor> spawn_producer(caf::actor_system& sys,
                                             producer_config cfg,
                                             connection_actor conn);

/// Spawns a producer with its own connection to cfg.bootstrap, stopped when
/// the producer ends.
caf::expected<producer_actor> spawn_producer(caf::actor_system& sys,
                                             producer_config cfg);

} // namespace ferry
