#pragma once
// Every value type that crosses an actor boundary in Ferry (requests,
// responses, descriptions, client-side records), their inspectors, and the
// `ferry` type-ID block with Ferry's atoms. The rule, applied everywhere: a
// type that actors exchange is a plain value type in broker/ (this header,
// broker/model.hpp for the strong types, broker/raft_types.hpp for the
// Raft core); the typed actor handles that carry them are declared in
// actors/protocol/interfaces.hpp. This header uses CAF core only.
//
// Offsets, partitions and epochs travel as the strong types of
// broker/model.hpp. Record data travels as encoded RecordBatch v2 bytes
// (broker/record_batch.hpp), never one actor message per record. Type IDs
// are appended only: both ends of a remote connection must agree on them.

#include "broker/model.hpp"
#include "broker/raft_types.hpp"

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

// -- inspectors for the strong types -------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, offset& x) {
  return f(caf::meta::type_name("ferry::offset"), x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_id& x) {
  return f(caf::meta::type_name("ferry::partition_id"), x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, leader_epoch& x) {
  return f(caf::meta::type_name("ferry::leader_epoch"), x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, producer_id& x) {
  return f(caf::meta::type_name("ferry::producer_id"), x.value);
}

// -- topics and metadata ------------------------------------------------------

/// Per-topic settings (Kafka names in comments). Defaults are the broker's.
struct topic_config {
  int32_t partitions = 1;
  int16_t replication_factor = 1;
  int64_t retention_ms = 7LL * 24 * 3600 * 1000; ///< retention.ms, -1 = forever
  int64_t retention_bytes = -1;                  ///< retention.bytes, -1 = unlimited
  int64_t segment_bytes = 1LL << 30;             ///< segment.bytes
  int64_t segment_ms = 7LL * 24 * 3600 * 1000;   ///< segment.ms
  int32_t max_message_bytes = 1 << 20;           ///< max.message.bytes (1 MiB)
  /// min.insync.replicas; 0 = a majority of the replication factor
  /// (rf / 2 + 1: 2 for RF=3), resolved when the topic is created.
  int32_t min_insync_replicas = 0;
  /// cleanup.policy: bit 0 delete (retention), bit 1 compact
  /// (topic_config.hpp: cleanup_delete, cleanup_compact).
  int8_t cleanup_policy = 1;
  double min_cleanable_dirty_ratio = 0.5;             ///< min.cleanable.dirty.ratio
  int64_t min_compaction_lag_ms = 0;                   ///< min.compaction.lag.ms
  int64_t max_compaction_lag_ms = INT64_MAX;           ///< max.compaction.lag.ms
  int64_t delete_retention_ms = 24LL * 3600 * 1000;   ///< delete.retention.ms
  bool operator==(const topic_config&) const = default;
};

/// The metadata log's create commands and snapshots up to version 6 hold
/// the first eight fields only (actors/server/raft_metadata.cpp reads them
/// as topic_config_v1).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_config& x) {
  return f(caf::meta::type_name("ferry::topic_config"), x.partitions,
           x.replication_factor, x.retention_ms, x.retention_bytes,
           x.segment_bytes, x.segment_ms, x.max_message_bytes,
           x.min_insync_replicas, x.cleanup_policy,
           x.min_cleanable_dirty_ratio, x.min_compaction_lag_ms,
           x.max_compaction_lag_ms, x.delete_retention_ms);
}

/// Placement of one partition as the metadata quorum records it.
struct partition_assignment {
  partition_id partition{0};
  int32_t leader = -1;            ///< node id, -1 = offline
  leader_epoch epoch{0};
  std::vector<int32_t> replicas;  ///< node ids
  std::vector<int32_t> isr;       ///< node ids in sync
  bool operator==(const partition_assignment&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_assignment& x) {
  return f(caf::meta::type_name("ferry::partition_assignment"), x.partition,
           x.leader, x.epoch, x.replicas, x.isr);
}

/// A topic as the metadata quorum records it.
struct topic_metadata {
  std::string name;
  topic_config config;
  std::vector<partition_assignment> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_metadata& x) {
  return f(caf::meta::type_name("ferry::topic_metadata"), x.name, x.config,
           x.partitions);
}

/// A broker as the metadata quorum records it. A node registers itself
/// (endpoints) once a controller is known; the controller fences a broker
/// whose connection is gone (fenced = true: it leads nothing and leaves
/// every ISR) and unfences it when it registers again.
struct broker_registration {
  int32_t id = -1;
  std::string host;
  uint16_t port = 0;      ///< CAF endpoint
  uint16_t http_port = 0; ///< 0 = none
  uint16_t metrics_port = 0;
  bool fenced = false;
  /// Bumped by every registration (a restarted broker is a new incarnation).
  int64_t epoch = 0;
  /// The Kafka listener (ferryd --kafka-port) clients reach this broker at;
  /// port 0 = none. The metadata log stores registrations with these fields
  /// as command kind broker_v2 (actors/server/raft_metadata.hpp), those
  /// with peer_port too as broker_v3.
  std::string kafka_host;
  uint16_t kafka_port = 0;
  /// The port other nodes reach this broker at (ferryd --peer-port, on
  /// `host`); 0 = none: peers dial `port`, which clients use too. Stored
  /// as command kind broker_v3.
  uint16_t peer_port = 0;

  /// Where other nodes dial this broker.
  uint16_t peer_endpoint_port() const { return peer_port != 0 ? peer_port : port; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, broker_registration& x) {
  return f(caf::meta::type_name("ferry::broker_registration"), x.id, x.host,
           x.port, x.http_port, x.metrics_port, x.fenced, x.epoch,
           x.kafka_host, x.kafka_port, x.peer_port);
}

/// A partition leader's request to change the ISR (shrink a lagging
/// follower, expand a caught-up one). Applied only while `leader` still
/// leads the partition in `epoch` (else not_leader / fenced_leader_epoch).
struct isr_change {
  std::string topic;
  partition_id partition{0};
  int32_t leader = -1;
  leader_epoch epoch{0};
  std::vector<int32_t> isr;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, isr_change& x) {
  return f(caf::meta::type_name("ferry::isr_change"), x.topic, x.partition,
           x.leader, x.epoch, x.isr);
}

/// Live state of one partition replica (what `topic describe` shows).
struct partition_status {
  partition_id partition{0};
  int32_t leader = -1;
  leader_epoch epoch{0};
  std::vector<int32_t> replicas;
  std::vector<int32_t> isr;
  offset log_start{0};
  offset log_end{0};
  offset high_watermark{0};
  int64_t size_bytes = 0;
  bool online = false; ///< false when the replica could not be reached
  /// Compacted topics (cleanup.policy has compact): dirty bytes / cleanable
  /// bytes of the leader's log (partition_log::cleaning); -1 otherwise.
  double dirty_ratio = -1;
  /// When the leader's log was last cleaned, ms since the epoch (0: not
  /// since it opened).
  int64_t last_clean_ms = 0;
  /// Log records the answering replica applied to its node's stores when it
  /// started (its replay of __consumer_state); -1 for other topics.
  int64_t replayed_records = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_status& x) {
  return f(caf::meta::type_name("ferry::partition_status"), x.partition,
           x.leader, x.epoch, x.replicas, x.isr, x.log_start, x.log_end,
           x.high_watermark, x.size_bytes, x.online, x.dirty_ratio,
           x.last_clean_ms, x.replayed_records);
}

/// A topic with the live state of each partition.
struct topic_description {
  std::string name;
  topic_config config;
  std::vector<partition_status> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_description& x) {
  return f(caf::meta::type_name("ferry::topic_description"), x.name, x.config,
           x.partitions);
}

/// A node of the cluster.
struct node_info {
  int32_t id = 0;
  std::string host;
  uint16_t port = 0;      ///< CAF endpoint
  uint16_t http_port = 0; ///< 0 = none
  uint16_t metrics_port = 0;
  bool alive = true;
  bool controller = false;
  /// A Raft voter (--voters); false: a broker-only node.
  bool voter = true;
  /// Being removed (ferryctl cluster remove-node): its replicas move away.
  bool removing = false;
  /// Its Kafka listener; port 0 = none.
  std::string kafka_host;
  uint16_t kafka_port = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("ferry::node_info"), x.id, x.host, x.port,
           x.http_port, x.metrics_port, x.alive, x.controller, x.voter,
           x.removing, x.kafka_host, x.kafka_port);
}

/// What `cluster describe` shows.
struct cluster_description {
  std::string cluster_id;
  int32_t controller = -1;
  int64_t raft_term = 0;
  std::vector<node_info> nodes;
  std::vector<topic_description> topics;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_description& x) {
  return f(caf::meta::type_name("ferry::cluster_description"), x.cluster_id,
           x.controller, x.raft_term, x.nodes, x.topics);
}

// -- produce and fetch --------------------------------------------------------

/// How many replicas must have a batch before the producer hears back.
enum class acks_mode : int8_t {
  none = 0,   ///< acks=0: fire and forget
  leader = 1, ///< acks=1: leader appended (and flushed per its policy)
  all = -1,   ///< acks=all: every ISR member has it, durably
};

/// One encoded batch for one partition.
struct produce_request {
  std::string topic;
  partition_id partition{0};
  acks_mode acks = acks_mode::all;
  std::string batch; ///< exactly one RecordBatch v2; base offset ignored
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, produce_request& x) {
  return f(caf::meta::type_name("ferry::produce_request"), x.topic,
           x.partition, x.acks, x.batch);
}

struct produce_response {
  offset base_offset{0};
  offset last_offset{0};
  offset log_start{0};
  /// True if the batch was a retried duplicate and was not appended again
  /// (the offsets are those of the original append).
  bool duplicate = false;
  /// Set by a node that relayed the request to the partition's leader: that
  /// leader's node id (a producer sends there directly next). -1: answered
  /// by the leader itself.
  int32_t leader = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, produce_response& x) {
  return f(caf::meta::type_name("ferry::produce_response"), x.base_offset,
           x.last_offset, x.log_start, x.duplicate, x.leader);
}

/// One partition's answer within a multi-partition produce (a
/// std::vector<produce_request> sent to a node, answered in the same
/// order): the response, or the error that partition answered.
struct produce_result {
  produce_response response;
  caf::error error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, produce_result& x) {
  return f(caf::meta::type_name("ferry::produce_result"), x.response, x.error);
}

/// Read records from one partition, with long poll.
struct fetch_request {
  std::string topic;
  partition_id partition{0};
  offset from{0};
  int32_t max_bytes = 1 << 20;
  int32_t min_bytes = 1;   ///< answer once this many bytes are available...
  int32_t max_wait_ms = 0; ///< ...or this long has passed
  int32_t replica_id = -1; ///< -1 for consumers; followers set their node id
  /// Followers: the leader epoch they follow (a leader in another epoch
  /// answers fenced_leader_epoch / not_leader), and the epoch of the last
  /// batch they hold (-1: empty log), for the divergence check.
  int32_t leader_epoch = -1;
  int32_t last_fetched_epoch = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_request& x) {
  return f(caf::meta::type_name("ferry::fetch_request"), x.topic, x.partition,
           x.from, x.max_bytes, x.min_bytes, x.max_wait_ms, x.replica_id,
           x.leader_epoch, x.last_fetched_epoch);
}

struct fetch_response {
  std::string data; ///< whole batches; the first may start before `from`
  offset next_offset{0};
  offset high_watermark{0};
  offset log_start{0};
  offset log_end{0};
  /// Set for a follower whose log diverges from the leader's: its last
  /// fetched epoch ends at diverging_end on the leader (or the largest epoch
  /// the leader has below it is diverging_epoch). The follower truncates to
  /// diverging_end and fetches again; `data` is empty then.
  int32_t diverging_epoch = -1;
  offset diverging_end{-1};
  /// Set by a node that relayed the fetch to the partition's leader: that
  /// leader's node id (a consumer fetches there directly next). -1:
  /// answered by the replica itself.
  int32_t leader = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_response& x) {
  return f(caf::meta::type_name("ferry::fetch_response"), x.data,
           x.next_offset, x.high_watermark, x.log_start, x.log_end,
           x.diverging_epoch, x.diverging_end, x.leader);
}

/// One round of a follower node's fetch session with one leader node
/// (Kafka's replica fetcher with incremental fetch sessions, KIP-227): the
/// long polls of the follower's replicas that start with this round. The
/// leader node keeps every long poll it was given (each parked in its
/// replica as a single fetch would be) until it is answered, and answers a
/// round with the answers that came in since its last one; a partition with
/// nothing new costs nothing per round.
struct fetch_round {
  /// The follower's node id.
  int32_t follower = -1;
  /// The session's incarnation: a new one (a follower restart, a new link)
  /// makes the leader node drop what it kept for the old one.
  uint64_t session = 0;
  /// 1 for a session's first round.
  uint64_t round = 0;
  std::vector<fetch_request> fetches;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_round& x) {
  return f(caf::meta::type_name("ferry::fetch_round"), x.follower, x.session,
           x.round, x.fetches);
}

/// One partition's answer in the answer to a fetch_round: the response to
/// its long poll, or the error. An empty topic is about the session itself
/// (the leader node does not know it: every long poll of the session is
/// gone, and the follower starts a new session).
struct fetch_result {
  std::string topic;
  partition_id partition{0};
  fetch_response response;
  caf::error error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_result& x) {
  return f(caf::meta::type_name("ferry::fetch_result"), x.topic, x.partition,
           x.response, x.error);
}

/// Offset lookup: earliest, latest or by timestamp.
struct list_offsets_request {
  std::string topic;
  partition_id partition{0};
  /// -2 earliest (log start), -1 latest (high watermark), else a timestamp:
  /// the first offset whose record timestamp is >= it (latest if none).
  int64_t timestamp = -1;
  /// The leader epoch the caller knows (Kafka's current_leader_epoch;
  /// -1: none): an older one is answered fenced_leader_epoch, a newer one
  /// not_leader, as a consumer's fetch is.
  int32_t leader_epoch = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, list_offsets_request& x) {
  return f(caf::meta::type_name("ferry::list_offsets_request"), x.topic,
           x.partition, x.timestamp, x.leader_epoch);
}

/// Where a leader epoch ends in a partition's log, asked of its leader
/// (Kafka's OffsetForLeaderEpoch): a consumer checks after a leader change
/// that the records it read are still there.
struct epoch_end_request {
  std::string topic;
  partition_id partition{0};
  /// As list_offsets_request::leader_epoch.
  int32_t current_leader_epoch = -1;
  /// The epoch asked about.
  int32_t leader_epoch = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_end_request& x) {
  return f(caf::meta::type_name("ferry::epoch_end_request"), x.topic, x.partition,
           x.current_leader_epoch, x.leader_epoch);
}

/// The largest epoch of the log not newer than the one asked, and the offset
/// where it ends (where the next epoch starts, or the log end for the
/// latest); -1 and -1 when the epoch asked is newer than the leader's or -1.
struct epoch_end {
  int32_t leader_epoch = -1;
  offset end_offset{-1};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_end& x) {
  return f(caf::meta::type_name("ferry::epoch_end"), x.leader_epoch, x.end_offset);
}

/// An idempotent producer's identity, handed out by the cluster.
struct producer_identity {
  producer_id id{-1};
  int16_t epoch = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, producer_identity& x) {
  return f(caf::meta::type_name("ferry::producer_identity"), x.id, x.epoch);
}

// -- consumer groups ----------------------------------------------------------

struct topic_partition {
  std::string topic;
  partition_id partition{0};
  auto operator<=>(const topic_partition&) const = default;
};

/// For hash maps keyed by partition: a lookup in a std::map of 10,000
/// partitions is ~14 string compares, each a cache miss.
struct topic_partition_hash {
  size_t operator()(const topic_partition& x) const noexcept {
    auto h = std::hash<std::string_view>{}(x.topic);
    return h ^ (static_cast<size_t>(static_cast<uint32_t>(x.partition.value))
                * 0x9E3779B97F4A7C15ull);
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_partition& x) {
  return f(caf::meta::type_name("ferry::topic_partition"), x.topic,
           x.partition);
}

struct join_group_request {
  std::string group;
  std::string member_id;         ///< "" on first join; the coordinator assigns one
  std::string group_instance_id; ///< static membership; "" = dynamic
  std::string client_id;
  int32_t session_timeout_ms = 45000;
  int32_t rebalance_timeout_ms = 300000; ///< also the max poll interval
  std::vector<std::string> assignors;    ///< preferred first: range, roundrobin, cooperative-sticky
  std::vector<std::string> topics;       ///< subscription
  std::vector<topic_partition> owned;    ///< for cooperative rebalancing
  /// "" (Ferry's clients): the coordinator assigns partitions with one of
  /// `assignors`. Any other value (Kafka clients send "consumer"): the
  /// client-side protocol: `assignors` are the member's protocol names,
  /// `protocol_metadata` their opaque metadata (one per name), the leader
  /// member gets every member's metadata and hands out the assignments in
  /// its sync. A group has one protocol type.
  std::string protocol_type;
  std::vector<std::string> protocol_metadata;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_group_request& x) {
  return f(caf::meta::type_name("ferry::join_group_request"), x.group,
           x.member_id, x.group_instance_id, x.client_id, x.session_timeout_ms,
           x.rebalance_timeout_ms, x.assignors, x.topics, x.owned,
           x.protocol_type, x.protocol_metadata);
}

/// A member as the leader of a client-side group sees it.
struct join_group_member {
  std::string member_id;
  std::string group_instance_id;
  std::string metadata; ///< for the chosen protocol
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_group_member& x) {
  return f(caf::meta::type_name("ferry::join_group_member"), x.member_id,
           x.group_instance_id, x.metadata);
}

struct join_group_response {
  int32_t generation = 0;
  std::string member_id;
  std::string leader_id;
  std::string assignor; ///< the chosen protocol
  /// Client-side groups, the leader only: every member and its metadata.
  std::vector<join_group_member> members;
  std::string protocol_type;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_group_response& x) {
  return f(caf::meta::type_name("ferry::join_group_response"), x.generation,
           x.member_id, x.leader_id, x.assignor, x.members, x.protocol_type);
}

/// One member's assignment as the leader of a client-side group hands it out
/// (opaque bytes; Kafka's ConsumerProtocol assignment for "consumer").
struct member_assignment {
  std::string member_id;
  std::string assignment;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_assignment& x) {
  return f(caf::meta::type_name("ferry::member_assignment"), x.member_id,
           x.assignment);
}

/// Sync (after join): the coordinator computes the assignment (server-side
/// assignors) and returns this member's partitions.
struct sync_group_request {
  std::string group;
  std::string member_id;
  std::string group_instance_id;
  int32_t generation = 0;
  /// Client-side groups: the leader's assignments (others send none).
  std::vector<member_assignment> assignments;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sync_group_request& x) {
  return f(caf::meta::type_name("ferry::sync_group_request"), x.group,
           x.member_id, x.group_instance_id, x.generation, x.assignments);
}

struct sync_group_response {
  int32_t generation = 0;
  std::vector<topic_partition> assignment;
  /// Client-side groups: this member's assignment as the leader sent it.
  std::string assignment_bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sync_group_response& x) {
  return f(caf::meta::type_name("ferry::sync_group_response"), x.generation,
           x.assignment, x.assignment_bytes);
}

/// Heartbeat: keeps the session; answers rebalance_in_progress when the
/// member must rejoin, illegal_generation / unknown_member when fenced.
struct heartbeat_request {
  std::string group;
  std::string member_id;
  std::string group_instance_id;
  int32_t generation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, heartbeat_request& x) {
  return f(caf::meta::type_name("ferry::heartbeat_request"), x.group,
           x.member_id, x.group_instance_id, x.generation);
}

struct leave_group_request {
  std::string group;
  std::string member_id;
  std::string group_instance_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, leave_group_request& x) {
  return f(caf::meta::type_name("ferry::leave_group_request"), x.group,
           x.member_id, x.group_instance_id);
}

struct partition_offset {
  std::string topic;
  partition_id partition{0};
  offset committed{-1}; ///< -1 = nothing committed
  std::string metadata;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_offset& x) {
  return f(caf::meta::type_name("ferry::partition_offset"), x.topic,
           x.partition, x.committed, x.metadata);
}

/// Commit offsets. generation -1 with empty member id commits as an
/// admin/standalone consumer (only allowed while the group is empty).
struct commit_offsets_request {
  std::string group;
  std::string member_id;
  std::string group_instance_id;
  int32_t generation = -1;
  std::vector<partition_offset> offsets;
  /// A member's commits in the order it sent them (rising from 1 over the
  /// consumer's life), or 0 for no order. The coordinator refuses a commit
  /// whose sequence is not above the highest it has seen from the member
  /// id: a copy a node forwarded late, overtaken by a
  /// later commit sent through another node, must not move the group's
  /// offsets back (found by tests/chaos, seed 5302).
  int64_t sequence = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_offsets_request& x) {
  return f(caf::meta::type_name("ferry::commit_offsets_request"), x.group,
           x.member_id, x.group_instance_id, x.generation, x.offsets, x.sequence);
}

/// Committed offsets of a group; empty `partitions` means all it has.
struct fetch_offsets_request {
  std::string group;
  std::vector<topic_partition> partitions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fetch_offsets_request& x) {
  return f(caf::meta::type_name("ferry::fetch_offsets_request"), x.group,
           x.partitions);
}

/// Where a reset moves a group's offsets (only while the group is empty).
struct reset_offsets_request {
  std::string group;
  std::vector<std::string> topics;
  /// "earliest", "latest", "timestamp" (uses `value` as ms) or "offset"
  /// (uses `value` as the offset).
  std::string to;
  int64_t value = 0;
  bool dry_run = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reset_offsets_request& x) {
  return f(caf::meta::type_name("ferry::reset_offsets_request"), x.group,
           x.topics, x.to, x.value, x.dry_run);
}

struct member_description {
  std::string member_id;
  std::string group_instance_id;
  std::string client_id;
  std::vector<topic_partition> assignment;
  /// Client-side groups: the member's metadata for the chosen protocol and
  /// its assignment, as sent (Kafka's DescribeGroups returns both).
  std::string metadata;
  std::string assignment_bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_description& x) {
  return f(caf::meta::type_name("ferry::member_description"), x.member_id,
           x.group_instance_id, x.client_id, x.assignment, x.metadata,
           x.assignment_bytes);
}

/// Per partition: committed offset, log end and lag.
struct partition_lag {
  std::string topic;
  partition_id partition{0};
  offset committed{-1};
  offset log_start{0};
  offset log_end{0};
  int64_t lag = 0; ///< log_end - max(committed, log_start)
  std::string member_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partition_lag& x) {
  return f(caf::meta::type_name("ferry::partition_lag"), x.topic, x.partition,
           x.committed, x.log_start, x.log_end, x.lag, x.member_id);
}

struct group_description {
  std::string group;
  std::string mode;  ///< "stream" or "queue"
  std::string state; ///< Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
  std::string assignor;
  int32_t generation = 0;
  std::vector<member_description> members;
  std::vector<partition_lag> partitions;
  /// "" for Ferry's clients (server-side assignment), else the client-side
  /// protocol type ("consumer" for Kafka consumers).
  std::string protocol_type;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_description& x) {
  return f(caf::meta::type_name("ferry::group_description"), x.group, x.mode,
           x.state, x.assignor, x.generation, x.members, x.partitions,
           x.protocol_type);
}


// -- client-side values (producer and consumer actors) ------------------------

/// One header of a client message (null header values are not exposed).
struct message_header {
  std::string key;
  std::string value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, message_header& x) {
  return f(caf::meta::type_name("ferry::message_header"), x.key, x.value);
}

/// A message a producer sends.
struct client_message {
  std::string topic;
  int32_t partition = -1; ///< -1: the partitioner decides
  bool has_key = false;   ///< false: null key (sticky partitioning)
  std::string key;
  bool has_value = true;  ///< false: null value (a tombstone)
  std::string value;
  std::vector<message_header> headers;
  timestamp_ms timestamp = 0; ///< 0: the producer's clock at send time
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, client_message& x) {
  return f(caf::meta::type_name("ferry::client_message"), x.topic, x.partition,
           x.has_key, x.key, x.has_value, x.value, x.headers, x.timestamp);
}

/// Where a produced message landed.
struct delivery_report {
  std::string topic;
  partition_id partition{0};
  offset off{-1};
  timestamp_ms timestamp = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delivery_report& x) {
  return f(caf::meta::type_name("ferry::delivery_report"), x.topic,
           x.partition, x.off, x.timestamp);
}

/// A message a consumer received.
struct consumed_message {
  std::string topic;
  partition_id partition{0};
  offset off{0};
  timestamp_ms timestamp = 0;
  bool has_key = false;
  std::string key;
  bool has_value = true;
  std::string value;
  std::vector<message_header> headers;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, consumed_message& x) {
  return f(caf::meta::type_name("ferry::consumed_message"), x.topic,
           x.partition, x.off, x.timestamp, x.has_key, x.key, x.has_value,
           x.value, x.headers);
}

// -- queue mode (issue 4; actors/server/queue_coordinator.hpp) ------------------------

/// Settings of a queue-mode group, fixed when the group is created.
struct queue_group_config {
  std::string mode = "queue"; ///< only "queue" (stream groups exist by joining)
  int32_t max_attempts = 5;   ///< failed attempts before the DLQ; >= 1
  int64_t initial_backoff_ms = 1000;
  int64_t max_backoff_ms = 60000;
  double backoff_multiplier = 2.0;
  double jitter = 1.0;                ///< share of the backoff drawn at random
  int64_t visibility_timeout_ms = 30000;
  std::string ordering = "none";      ///< "none" or "key"
  std::string dlq_topic;              ///< "" = "<topic>.<group>.dlq"
  /// Where a partition the group has no state for begins, the first time
  /// the group reads its topic (broker/start_position.hpp): -2 earliest,
  /// -1 latest, else the first record at or after this timestamp (ms).
  /// Partitions the topic gains later begin at their start.
  int64_t start = -2;
  /// Delivery delay of every record (ms after its timestamp) unless the
  /// record's "ferry-delay-ms" header sets its own; 0 = none.
  int64_t delay_ms = 0;
  bool operator==(const queue_group_config&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_group_config& x) {
  return f(caf::meta::type_name("ferry::queue_group_config"), x.mode,
           x.max_attempts, x.initial_backoff_ms, x.max_backoff_ms,
           x.backoff_multiplier, x.jitter, x.visibility_timeout_ms, x.ordering,
           x.dlq_topic, x.start, x.delay_ms);
}

/// Leases up to max_records records of `topic` and `topics` (one receive
/// may read several topics of the group; receive_topics) to a member.
struct queue_receive_request {
  std::string group;
  std::string topic;               ///< "" when `topics` names them all
  std::string member_id;      ///< non-empty; acks must name the same member
  int32_t max_records = 100;
  int64_t visibility_ms = 0;  ///< 0 = the group's visibility timeout
  int64_t wait_ms = 0;        ///< long poll when nothing is available
  std::vector<std::string> topics = {}; ///< more topics to read
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        queue_receive_request& x) {
  return f(caf::meta::type_name("ferry::queue_receive_request"), x.group,
           x.topic, x.member_id, x.max_records, x.visibility_ms, x.wait_ms,
           x.topics);
}

/// The most topics one queue receive may read.
inline constexpr size_t max_receive_topics = 100;

/// The topics a receive reads: `topic` (if not empty), then `topics`, each
/// once, in that order.
inline std::vector<std::string>
receive_topics(const queue_receive_request& r) {
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end())
      out.push_back(t);
  };
  add(r.topic);
  for (auto& t : r.topics)
    add(t);
  return out;
}

/// A record leased to a member until `deadline` (unless extended).
struct leased_message {
  consumed_message message;
  uint64_t lease_id = 0;
  int32_t attempt = 1; ///< 1 + the failed attempts before this delivery
  timestamp_ms deadline = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, leased_message& x) {
  return f(caf::meta::type_name("ferry::leased_message"), x.message,
           x.lease_id, x.attempt, x.deadline);
}

/// What a member says about a leased record.
enum class queue_ack_kind : uint8_t {
  ack = 0,    ///< done
  nack = 1,   ///< failed: retry after max(delay_ms, backoff)
  reject = 2, ///< failed: dead-letter now
  extend = 3, ///< still working: keep the lease extend_ms longer
};

struct queue_ack_request {
  std::string group;
  std::string member_id;
  std::string topic;
  partition_id partition{0};
  offset off{0};
  uint64_t lease_id = 0;
  queue_ack_kind kind = queue_ack_kind::ack;
  int64_t delay_ms = 0;  ///< nack
  int64_t extend_ms = 0; ///< extend
  std::string error;     ///< nack, reject: the reason (ferry-error)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_ack_request& x) {
  return f(caf::meta::type_name("ferry::queue_ack_request"), x.group,
           x.member_id, x.topic, x.partition, x.off, x.lease_id, x.kind,
           x.delay_ms, x.extend_ms, x.error);
}

struct queue_ack_response {
  timestamp_ms deadline = 0;  ///< extend: the lease's deadline now
  int32_t attempts = 0;       ///< nack, reject: failed attempts so far
  bool dead_letter = false;   ///< nack, reject: the record goes to the DLQ
  timestamp_ms retry_at = 0;  ///< nack: delivered again from then on
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_ack_response& x) {
  return f(caf::meta::type_name("ferry::queue_ack_response"), x.deadline,
           x.attempts, x.dead_letter, x.retry_at);
}

/// One partition of a queue-mode group.
struct queue_partition_description {
  std::string topic;
  partition_id partition{0};
  offset committed{0};       ///< end of the contiguous done prefix
  offset read_end{0};        ///< one past the last record read
  offset high_watermark{-1}; ///< as of the last fetch; -1 = unknown
  int64_t available = 0;
  int64_t delayed = 0;       ///< waiting for a retry
  int64_t scheduled = 0;     ///< delayed delivery, not due yet (no attempt)
  int64_t leased = 0;
  int64_t dead_letter_pending = 0;
  int64_t done = 0;          ///< done above committed
  std::string dlq_topic;
  int64_t dead_lettered = 0; ///< written to the DLQ since the coordinator started
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        queue_partition_description& x) {
  return f(caf::meta::type_name("ferry::queue_partition_description"),
           x.topic, x.partition, x.committed, x.read_end, x.high_watermark,
           x.available, x.delayed, x.scheduled, x.leased,
           x.dead_letter_pending, x.done, x.dlq_topic, x.dead_lettered);
}

struct queue_group_description {
  std::string group;
  queue_group_config config;
  std::vector<queue_partition_description> partitions;
  int32_t waiting_receives = 0; ///< long polls parked now
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        queue_group_description& x) {
  return f(caf::meta::type_name("ferry::queue_group_description"), x.group,
           x.config, x.partitions, x.waiting_receives);
}

// -- DLQ operations (issue 4; ferryctl dlq, the console, HTTP /v1/dlq) --------

/// One dead-letter topic: a topic some queue group dead-letters into, or
/// any topic whose name ends in ".dlq" (stream-mode DLQs written by the
/// consumer helper).
struct dlq_info {
  std::string topic;
  std::vector<std::string> groups;  ///< queue groups writing to it
  std::string source_topic;         ///< "" when unknown
  int32_t partitions = 0;
  int64_t depth = 0;       ///< records present and not yet redriven
  int64_t redriven = 0;    ///< present records already redriven
  int64_t total = 0;       ///< records present (log end - log start)
  timestamp_ms oldest_timestamp = 0; ///< oldest present record; 0 = empty
  double rate_per_second = 0;        ///< appended over the last minute
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_info& x) {
  return f(caf::meta::type_name("ferry::dlq_info"), x.topic, x.groups,
           x.source_topic, x.partitions, x.depth, x.redriven, x.total,
           x.oldest_timestamp, x.rate_per_second);
}

/// A DLQ record with its ferry-* headers decoded.
struct dlq_record {
  consumed_message message;        ///< as stored (all headers included)
  std::string original_topic;
  int32_t original_partition = -1;
  int64_t original_offset = -1;
  int32_t attempts = 0;
  std::string error;
  std::string group;
  timestamp_ms first_failure_ts = 0;
  timestamp_ms last_failure_ts = 0;
  int32_t redrive_count = 0;       ///< ferry-redrive-count of the record
  bool redriven = false;           ///< moved by a redrive already
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_record& x) {
  return f(caf::meta::type_name("ferry::dlq_record"), x.message,
           x.original_topic, x.original_partition, x.original_offset,
           x.attempts, x.error, x.group, x.first_failure_ts,
           x.last_failure_ts, x.redrive_count, x.redriven);
}

/// Reads a DLQ with filters. The filters run over every record from
/// `from_offset` on until `max_records` match or `max_scan` records were
/// scanned; `next_offset` in the answer continues the scan (nothing missed).
struct dlq_show_request {
  std::string topic;
  int32_t partition = -1;     ///< -1: all partitions, merged by offset
  int64_t from_offset = 0;    ///< per partition; below log start = log start
  int32_t max_records = 100;
  int64_t max_scan = 100000;
  std::string grep;           ///< substring of key, value or a header value
  std::string error_contains; ///< substring of ferry-error
  bool include_redriven = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_show_request& x) {
  return f(caf::meta::type_name("ferry::dlq_show_request"), x.topic,
           x.partition, x.from_offset, x.max_records, x.max_scan, x.grep,
           x.error_contains, x.include_redriven);
}

struct dlq_show_response {
  std::vector<dlq_record> records;
  int64_t scanned = 0;
  /// Per partition: where a follow-up request continues (in `committed`).
  std::vector<partition_offset> next_offsets;
  bool end_reached = false;   ///< every partition scanned to its end
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_show_response& x) {
  return f(caf::meta::type_name("ferry::dlq_show_response"), x.records,
           x.scanned, x.next_offsets, x.end_reached);
}

/// Re-produces DLQ records to their original topic (or `to_topic`) with
/// ferry-redriven-from and ferry-redrive-count headers, idempotently, and
/// marks them redriven. Selection: `offsets` if non-empty, else the range
/// [from_offset, to_offset] (to_offset -1 = the end) of `partition` (-1 =
/// every partition). Already redriven records are skipped.
struct dlq_redrive_request {
  std::string topic;
  std::string to_topic;       ///< "" = each record's ferry-original-topic
  int32_t partition = -1;
  int64_t from_offset = 0;
  int64_t to_offset = -1;
  std::vector<partition_offset> offsets;
  int32_t rate_per_second = 0; ///< 0 = unlimited
  int32_t max_records = 0;     ///< 0 = unlimited; the console redrives in chunks
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_redrive_request& x) {
  return f(caf::meta::type_name("ferry::dlq_redrive_request"), x.topic,
           x.to_topic, x.partition, x.from_offset, x.to_offset, x.offsets,
           x.rate_per_second, x.max_records);
}

struct dlq_redrive_response {
  int64_t redriven = 0;
  int64_t skipped = 0;        ///< already redriven
  std::vector<delivery_report> reports; ///< where each redriven record went
  std::vector<partition_offset> next_offsets; ///< to continue a chunked redrive
  bool end_reached = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_redrive_response& x) {
  return f(caf::meta::type_name("ferry::dlq_redrive_response"), x.redriven,
           x.skipped, x.reports, x.next_offsets, x.end_reached);
}

/// Deletes DLQ records below `before_offset` (-1 = all) in `partition`
/// (-1 = every partition) by moving the log start.
struct dlq_purge_request {
  std::string topic;
  int32_t partition = -1;
  int64_t before_offset = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_purge_request& x) {
  return f(caf::meta::type_name("ferry::dlq_purge_request"), x.topic,
           x.partition, x.before_offset);
}

struct dlq_purge_response {
  int64_t purged = 0;
  std::vector<partition_offset> log_starts; ///< per partition after the purge
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dlq_purge_response& x) {
  return f(caf::meta::type_name("ferry::dlq_purge_response"), x.purged,
           x.log_starts);
}

// -- security (issue 16) ---------------------------------------------------------

/// A user's SCRAM-SHA-256 credential (RFC 5802/7677) as the metadata quorum
/// keeps it: the salt, the iteration count and the two keys derived from
/// the salted password. The password itself is never stored or sent (it
/// is derived where it is typed: ferryctl, or the HTTP gateway).
struct scram_credential {
  std::string user;
  std::string mechanism = "SCRAM-SHA-256";
  std::string salt;       ///< raw bytes
  int32_t iterations = 0;
  std::string stored_key; ///< H(HMAC(salted password, "Client Key")), raw
  std::string server_key; ///< HMAC(salted password, "Server Key"), raw
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scram_credential& x) {
  return f(caf::meta::type_name("ferry::scram_credential"), x.user,
           x.mechanism, x.salt, x.iterations, x.stored_key, x.server_key);
}

/// What user list shows of a user (never a key).
struct user_info {
  std::string name;
  std::string mechanism;
  int32_t iterations = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, user_info& x) {
  return f(caf::meta::type_name("ferry::user_info"), x.name, x.mechanism,
           x.iterations);
}

/// One access control entry (Kafka's model, broker/security.hpp): the
/// principal ("User:alice", "User:*") may (allow) or may not (deny) do
/// `operation` on the resources of `resource_type` named `resource_name`
/// (pattern_type "literal": that name, "*" for all; "prefixed": every name
/// starting with it). Canonical lower-case words, see normalize_acl().
struct acl_entry {
  std::string principal;
  std::string resource_type; ///< cluster, topic, group, dlq
  std::string resource_name;
  std::string pattern_type = "literal"; ///< literal, prefixed
  std::string operation;     ///< all, describe, read, write, create, delete,
                             ///< alter, redrive
  std::string permission = "allow"; ///< allow, deny
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, acl_entry& x) {
  return f(caf::meta::type_name("ferry::acl_entry"), x.principal,
           x.resource_type, x.resource_name, x.pattern_type, x.operation,
           x.permission);
}

inline bool operator==(const acl_entry& a, const acl_entry& b) {
  return a.principal == b.principal && a.resource_type == b.resource_type
         && a.resource_name == b.resource_name
         && a.pattern_type == b.pattern_type && a.operation == b.operation
         && a.permission == b.permission;
}

/// One step of an in-band SASL login on the CAF port (issue 16): the client
/// sends (auth_atom, sasl_step) to a node's broker actor with its
/// SCRAM-SHA-256 client-first message (conversation 0), then with its
/// client-final message and the conversation id the node answered. The
/// node's last answer has `done` set and carries the session credential
/// (`token`, a bearer token of broker/security.hpp) and its expiry: every
/// later request travels as (auth_atom, token, request) (see
/// actors/client/session_proxy.hpp).
struct sasl_step {
  std::string mechanism; ///< "SCRAM-SHA-256"
  uint64_t conversation = 0;
  std::string data;      ///< the SCRAM message of this step
  bool done = false;     ///< node: the login succeeded
  std::string token;     ///< node, when done: the session credential
  int64_t expires_ms = 0; ///< node, when done: the token's expiry (Unix ms)
  std::string user;      ///< node, when done: who logged in
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sasl_step& x) {
  return f(caf::meta::type_name("ferry::sasl_step"), x.mechanism,
           x.conversation, x.data, x.done, x.token, x.expires_ms, x.user);
}

} // namespace ferry

// -- type IDs and atoms ---------------------------------------------------------

CAF_BEGIN_TYPE_ID_BLOCK(ferry, caf::first_custom_type_id)
  CAF_ADD_TYPE_ID(ferry, (ferry::offset))
  CAF_ADD_TYPE_ID(ferry, (ferry::partition_id))
  CAF_ADD_TYPE_ID(ferry, (ferry::leader_epoch))
  CAF_ADD_TYPE_ID(ferry, (ferry::producer_id))
  CAF_ADD_TYPE_ID(ferry, (ferry::topic_config))
  CAF_ADD_TYPE_ID(ferry, (ferry::partition_assignment))
  CAF_ADD_TYPE_ID(ferry, (ferry::topic_metadata))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::topic_metadata>))
  CAF_ADD_TYPE_ID(ferry, (ferry::partition_status))
  CAF_ADD_TYPE_ID(ferry, (ferry::topic_description))
  CAF_ADD_TYPE_ID(ferry, (ferry::node_info))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::node_info>))
  CAF_ADD_TYPE_ID(ferry, (ferry::cluster_description))
  CAF_ADD_TYPE_ID(ferry, (ferry::acks_mode))
  CAF_ADD_TYPE_ID(ferry, (ferry::produce_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::produce_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::list_offsets_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::producer_identity))
  CAF_ADD_TYPE_ID(ferry, (ferry::topic_partition))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::topic_partition>))
  CAF_ADD_TYPE_ID(ferry, (ferry::join_group_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::join_group_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::join_group_member))
  CAF_ADD_TYPE_ID(ferry, (ferry::member_assignment))
  CAF_ADD_TYPE_ID(ferry, (ferry::sync_group_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::sync_group_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::heartbeat_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::leave_group_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::partition_offset))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::partition_offset>))
  CAF_ADD_TYPE_ID(ferry, (ferry::commit_offsets_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_offsets_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::reset_offsets_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::member_description))
  CAF_ADD_TYPE_ID(ferry, (ferry::partition_lag))
  CAF_ADD_TYPE_ID(ferry, (ferry::group_description))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::group_description>))
  CAF_ADD_TYPE_ID(ferry, (std::map<std::string, std::string>))
  CAF_ADD_TYPE_ID(ferry, (ferry::message_header))
  CAF_ADD_TYPE_ID(ferry, (ferry::client_message))
  CAF_ADD_TYPE_ID(ferry, (ferry::delivery_report))
  CAF_ADD_TYPE_ID(ferry, (ferry::consumed_message))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::consumed_message>))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::client_message>))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::delivery_report>))

  // Atoms: at most 10 characters (CAF 0.17 atom_value).
  CAF_ADD_ATOM(ferry, ferry, produce_atom, "produce")
  CAF_ADD_ATOM(ferry, ferry, fetch_atom, "fetch")
  CAF_ADD_ATOM(ferry, ferry, offsets_atom, "offsets")
  CAF_ADD_ATOM(ferry, ferry, create_atom, "create")
  CAF_ADD_ATOM(ferry, ferry, delete_atom, "delete")
  CAF_ADD_ATOM(ferry, ferry, list_atom, "list")
  CAF_ADD_ATOM(ferry, ferry, describe_atom, "describe")
  CAF_ADD_ATOM(ferry, ferry, alter_atom, "alter")
  CAF_ADD_ATOM(ferry, ferry, add_parts_atom, "addparts")
  CAF_ADD_ATOM(ferry, ferry, topic_atom, "topic")
  CAF_ADD_ATOM(ferry, ferry, group_atom, "group")
  CAF_ADD_ATOM(ferry, ferry, cluster_atom, "cluster")
  CAF_ADD_ATOM(ferry, ferry, join_atom, "join")
  CAF_ADD_ATOM(ferry, ferry, sync_atom, "sync")
  CAF_ADD_ATOM(ferry, ferry, heartbeat_atom, "heartbeat")
  CAF_ADD_ATOM(ferry, ferry, leave_atom, "leave")
  CAF_ADD_ATOM(ferry, ferry, commit_atom, "commit")
  CAF_ADD_ATOM(ferry, ferry, reset_atom, "reset")
  CAF_ADD_ATOM(ferry, ferry, init_pid_atom, "initpid")
  CAF_ADD_ATOM(ferry, ferry, status_atom, "status")
  CAF_ADD_ATOM(ferry, ferry, flush_atom, "flush")
  CAF_ADD_ATOM(ferry, ferry, tick_atom, "tick")
  CAF_ADD_ATOM(ferry, ferry, expire_atom, "expire")
  CAF_ADD_ATOM(ferry, ferry, subscribe_atom, "subscribe")
  CAF_ADD_ATOM(ferry, ferry, update_atom, "update")
  CAF_ADD_ATOM(ferry, ferry, stop_atom, "stop")
  CAF_ADD_ATOM(ferry, ferry, poll_atom, "poll")
  CAF_ADD_ATOM(ferry, ferry, seek_atom, "seek")
  CAF_ADD_ATOM(ferry, ferry, assign_atom, "assign")
  CAF_ADD_ATOM(ferry, ferry, connect_atom, "connect")

  // Queue mode (appended: the IDs above do not move).
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_group_config))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_receive_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::leased_message))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::leased_message>))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_ack_kind))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_ack_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_ack_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_partition_description))
  CAF_ADD_TYPE_ID(ferry, (ferry::queue_group_description))
  CAF_ADD_ATOM(ferry, ferry, receive_atom, "receive")
  CAF_ADD_ATOM(ferry, ferry, ack_atom, "ack")
  CAF_ADD_ATOM(ferry, ferry, queue_atom, "queue")

  // DLQ operations (appended).
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_info))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::dlq_info>))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_record))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_show_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_show_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_redrive_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_redrive_response))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_purge_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::dlq_purge_response))
  CAF_ADD_ATOM(ferry, ferry, dlq_atom, "dlq")
  CAF_ADD_ATOM(ferry, ferry, show_atom, "show")
  CAF_ADD_ATOM(ferry, ferry, redrive_atom, "redrive")
  CAF_ADD_ATOM(ferry, ferry, purge_atom, "purge")

  // Raft metadata quorum core (appended).
  CAF_ADD_TYPE_ID(ferry, (ferry::raft_message))
  CAF_ADD_TYPE_ID(ferry, (ferry::raft_status))
  CAF_ADD_TYPE_ID(ferry, (ferry::raft_applied))
  CAF_ADD_ATOM(ferry, ferry, raft_atom, "raft")
  CAF_ADD_ATOM(ferry, ferry, propose_atom, "propose")

  // Cluster: brokers, ISR changes (appended).
  CAF_ADD_TYPE_ID(ferry, (ferry::broker_registration))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::broker_registration>))
  CAF_ADD_TYPE_ID(ferry, (ferry::isr_change))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::isr_change>))
  CAF_ADD_ATOM(ferry, ferry, broker_atom, "broker")
  CAF_ADD_ATOM(ferry, ferry, isr_atom, "isr")
  // Broker-only nodes (observers of the metadata log).
  CAF_ADD_TYPE_ID(ferry, (ferry::raft_log_chunk))
  // Multi-partition produce (issue 15).
  CAF_ADD_TYPE_ID(ferry, (ferry::produce_result))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::produce_request>))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::produce_result>))
  // Follower fetch sessions, one per pair of nodes (issue 15).
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_result))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::fetch_request>))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::fetch_result>))
  CAF_ADD_TYPE_ID(ferry, (ferry::fetch_round))
  // Users and ACLs (issue 16).
  CAF_ADD_TYPE_ID(ferry, (ferry::scram_credential))
  CAF_ADD_TYPE_ID(ferry, (ferry::user_info))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::user_info>))
  CAF_ADD_TYPE_ID(ferry, (ferry::acl_entry))
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::acl_entry>))
  CAF_ADD_ATOM(ferry, ferry, user_atom, "user")
  CAF_ADD_ATOM(ferry, ferry, acl_atom, "acl")
  CAF_ADD_TYPE_ID(ferry, (ferry::sasl_step))
  CAF_ADD_ATOM(ferry, ferry, auth_atom, "auth")
  CAF_ADD_ATOM(ferry, ferry, session_atom, "session")
  // Kafka's OffsetForLeaderEpoch (issue 17).
  CAF_ADD_TYPE_ID(ferry, (ferry::epoch_end_request))
  CAF_ADD_TYPE_ID(ferry, (ferry::epoch_end))
  // Log compaction (issue 19): the node's cleaner finished a clean.
  CAF_ADD_ATOM(ferry, ferry, clean_atom, "clean")
  // Every queue group of the cluster, (list_atom, queue_atom) (issue 18).
  CAF_ADD_TYPE_ID(ferry, (std::vector<ferry::queue_group_description>))
CAF_END_TYPE_ID_BLOCK(ferry)
