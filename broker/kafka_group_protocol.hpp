#pragma once
// The Kafka group APIs on the wire (the codec; the listener's handlers are
// actors/kafka/kafka_groups.cpp): FindCoordinator, JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups and
// DescribeGroups in their non-flexible versions (supported_apis() in
// broker/kafka_protocol.hpp), plus the bytes Kafka consumers put inside
// JoinGroup and SyncGroup (the ConsumerProtocol subscription and
// assignment), which Ferry reads to show a Kafka group's subscriptions and
// assignments in `ferryctl group describe`, the console and the lag metrics.
//
// Same rules as broker/kafka_protocol.hpp: readers never trust a length and
// fail naming the field; writers take the version and write what it has.

#include "broker/kafka_protocol.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::kafka {

/// Partitions of one topic.
struct topic_partitions {
  std::string topic;
  std::vector<int32_t> partitions;
  bool operator==(const topic_partitions&) const = default;
};

// -- ConsumerProtocol (inside JoinGroup / SyncGroup) --------------------------

/// A Kafka consumer's subscription (JoinGroup protocol metadata) v0-3.
struct consumer_subscription {
  int16_t version = 0;
  std::vector<std::string> topics;
  std::optional<std::string> user_data;
  std::vector<topic_partitions> owned; ///< v1+
  int32_t generation = -1;             ///< v2+
  std::optional<std::string> rack;     ///< v3+
};

/// Reads a subscription; versions above 3 are read as far as v3 goes (as
/// Kafka's ConsumerProtocol does). nullopt: the bytes do not decode.
std::optional<consumer_subscription>
read_consumer_subscription(std::string_view bytes);

std::string write_consumer_subscription(const consumer_subscription& x);

/// A Kafka consumer's assignment (SyncGroup bytes) v0-3 (all the same).
struct consumer_assignment {
  int16_t version = 0;
  std::vector<topic_partitions> partitions;
  std::optional<std::string> user_data;
};

/// Empty bytes are an empty assignment (what Kafka hands a member without
/// partitions). nullopt: the bytes do not decode.
std::optional<consumer_assignment>
read_consumer_assignment(std::string_view bytes);

std::string write_consumer_assignment(const consumer_assignment& x);

// -- FindCoordinator (key 10), v0-2 -------------------------------------------

struct find_coordinator_request {
  std::string key;
  int8_t key_type = 0; ///< 0 group, 1 transaction (v1+)
};

find_coordinator_request read_find_coordinator_request(reader& in,
                                                       int16_t version);

struct find_coordinator_response {
  error_code error = error_code::none;
  std::optional<std::string> error_message;
  int32_t node_id = -1;
  std::string host;
  int32_t port = -1;
};

void write_find_coordinator_response(writer& out, int16_t version,
                                     const find_coordinator_response& x);

// -- JoinGroup (key 11), v0-5 -------------------------------------------------

struct join_protocol {
  std::string name;
  std::string metadata;
};

struct join_group_request_v {
  std::string group;
  int32_t session_timeout_ms = 0;
  int32_t rebalance_timeout_ms = -1; ///< v1+; -1: the session timeout
  std::string member_id;
  std::optional<std::string> group_instance_id; ///< v5+
  std::string protocol_type;
  std::vector<join_protocol> protocols;
};

join_group_request_v read_join_group_request(reader& in, int16_t version);

struct join_member_v {
  std::string member_id;
  std::optional<std::string> group_instance_id; ///< v5+
  std::string metadata;
};

struct join_group_response_v {
  error_code error = error_code::none;
  int32_t generation = -1;
  std::string protocol_name;
  std::string leader;
  std::string member_id;
  std::vector<join_member_v> members;
};

void write_join_group_response(writer& out, int16_t version,
                               const join_group_response_v& x);

// -- SyncGroup (key 14), v0-3 -------------------------------------------------

struct sync_group_request_v {
  std::string group;
  int32_t generation = -1;
  std::string member_id;
  std::optional<std::string> group_instance_id; ///< v3+
  std::vector<std::pair<std::string, std::string>> assignments;
};

sync_group_request_v read_sync_group_request(reader& in, int16_t version);

void write_sync_group_response(writer& out, int16_t version, error_code err,
                               std::string_view assignment);

// -- Heartbeat (key 12), v0-3 -------------------------------------------------

struct heartbeat_request_v {
  std::string group;
  int32_t generation = -1;
  std::string member_id;
  std::optional<std::string> group_instance_id; ///< v3+
};

heartbeat_request_v read_heartbeat_request(reader& in, int16_t version);

/// Heartbeat, and any answer that is throttle time (v1+) plus an error code.
void write_heartbeat_response(writer& out, int16_t version, error_code err);

// -- LeaveGroup (key 13), v0-3 ------------------------------------------------

struct leave_member_v {
  std::string member_id;
  std::optional<std::string> group_instance_id;
  error_code error = error_code::none; ///< response only
};

struct leave_group_request_v {
  std::string group;
  /// v0-2: the one member (member_id set); v3+: a batch.
  std::vector<leave_member_v> members;
};

leave_group_request_v read_leave_group_request(reader& in, int16_t version);

void write_leave_group_response(writer& out, int16_t version, error_code err,
                                const std::vector<leave_member_v>& members);

// -- OffsetCommit (key 8), v0-7 -----------------------------------------------

struct offset_commit_partition_v {
  int32_t partition = 0;
  int64_t offset = -1;
  int32_t leader_epoch = -1;            ///< v6+
  std::optional<std::string> metadata;
  error_code error = error_code::none;  ///< response only
};

struct offset_commit_topic_v {
  std::string name;
  std::vector<offset_commit_partition_v> partitions;
};

struct offset_commit_request_v {
  std::string group;
  int32_t generation = -1;                      ///< v1+
  std::string member_id;                        ///< v1+
  std::optional<std::string> group_instance_id; ///< v7+
  int64_t retention_time_ms = -1;               ///< v2-4 (ignored)
  std::vector<offset_commit_topic_v> topics;
};

offset_commit_request_v read_offset_commit_request(reader& in,
                                                   int16_t version);

void write_offset_commit_response(
  writer& out, int16_t version,
  const std::vector<offset_commit_topic_v>& topics);

// -- OffsetFetch (key 9), v0-5 ------------------------------------------------

struct offset_fetch_request_v {
  std::string group;
  /// nullopt (v2+): every partition the group committed.
  std::optional<std::vector<topic_partitions>> topics;
};

offset_fetch_request_v read_offset_fetch_request(reader& in, int16_t version);

struct offset_fetch_topic_v {
  std::string name;
  std::vector<offset_commit_partition_v> partitions;
};

void write_offset_fetch_response(writer& out, int16_t version,
                                 const std::vector<offset_fetch_topic_v>& topics,
                                 error_code err);

// -- ListGroups (key 16), v0-2 ------------------------------------------------

/// The request has no body in v0-2 (read_list_groups_request checks that).
void read_list_groups_request(reader& in, int16_t version);

struct listed_group {
  std::string group;
  std::string protocol_type;
};

void write_list_groups_response(writer& out, int16_t version, error_code err,
                                const std::vector<listed_group>& groups);

// -- DescribeGroups (key 15), v0-4 --------------------------------------------

struct describe_groups_request_v {
  std::vector<std::string> groups;
  bool include_authorized_operations = false; ///< v3+
};

describe_groups_request_v read_describe_groups_request(reader& in,
                                                       int16_t version);

struct described_member {
  std::string member_id;
  std::optional<std::string> group_instance_id; ///< v4+
  std::string client_id;
  std::string client_host;
  std::string metadata;
  std::string assignment;
};

struct described_group {
  error_code error = error_code::none;
  std::string group;
  std::string state;         ///< Empty, PreparingRebalance, ..., Dead
  std::string protocol_type; ///< "consumer" for Kafka consumers
  std::string protocol;      ///< the chosen assignor
  std::vector<described_member> members;
};

void write_describe_groups_response(writer& out, int16_t version,
                                    const std::vector<described_group>& groups);

} // namespace ferry::kafka
