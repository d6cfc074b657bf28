#pragma once
// The Kafka admin APIs on the wire (the codec; the listener's handlers are
// actors/kafka/kafka_admin.cpp): CreateTopics, DeleteTopics,
// CreatePartitions, DescribeConfigs, AlterConfigs and DeleteRecords in their
// non-flexible versions (supported_apis() in broker/kafka_protocol.hpp).
//
// Same rules as broker/kafka_protocol.hpp: readers never trust a length and
// fail naming the field; writers take the version and write what it has.

#include "broker/kafka_protocol.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::kafka {

/// A topic's (or resource's) outcome: name, error and (where the version has
/// one) a message.
struct named_result {
  std::string name;
  error_code error = error_code::none;
  std::optional<std::string> message;
};

// -- CreateTopics (key 19), v0-4 ------------------------------------------------

struct create_topic_v {
  std::string name;
  int32_t partitions = -1;          ///< -1 (v4+): the default
  int16_t replication_factor = -1;  ///< -1 (v4+): the default
  /// Manual replica assignment: partition -> broker ids (Ferry refuses it).
  std::vector<std::pair<int32_t, std::vector<int32_t>>> assignments;
  std::vector<std::pair<std::string, std::optional<std::string>>> configs;
};

struct create_topics_request_v {
  std::vector<create_topic_v> topics;
  int32_t timeout_ms = 0;
  bool validate_only = false; ///< v1+
};

create_topics_request_v read_create_topics_request(reader& in, int16_t version);

void write_create_topics_response(writer& out, int16_t version,
                                  const std::vector<named_result>& topics);

// -- DeleteTopics (key 20), v0-3 ------------------------------------------------

struct delete_topics_request_v {
  std::vector<std::string> names;
  int32_t timeout_ms = 0;
};

delete_topics_request_v read_delete_topics_request(reader& in, int16_t version);

/// Messages are not part of DeleteTopics before v5; they are dropped.
void write_delete_topics_response(writer& out, int16_t version,
                                  const std::vector<named_result>& topics);

// -- CreatePartitions (key 37), v0-1 --------------------------------------------

struct create_partitions_topic_v {
  std::string name;
  int32_t count = 0; ///< the new total
  bool has_assignments = false;
};

struct create_partitions_request_v {
  std::vector<create_partitions_topic_v> topics;
  int32_t timeout_ms = 0;
  bool validate_only = false;
};

create_partitions_request_v read_create_partitions_request(reader& in,
                                                           int16_t version);

void write_create_partitions_response(writer& out, int16_t version,
                                      const std::vector<named_result>& topics);

// -- DescribeConfigs (key 32), v0-2 and AlterConfigs (key 33), v0-1 --------------

/// Kafka's ConfigResource types Ferry knows.
enum class resource_type : int8_t {
  unknown = 0,
  topic = 2,
  broker = 4,
};

struct describe_configs_resource_v {
  int8_t type = 0;
  std::string name;
  /// nullopt: every key.
  std::optional<std::vector<std::string>> keys;
};

struct describe_configs_request_v {
  std::vector<describe_configs_resource_v> resources;
  bool include_synonyms = false; ///< v1+
};

describe_configs_request_v read_describe_configs_request(reader& in,
                                                         int16_t version);

struct config_entry_v {
  std::string name;
  std::optional<std::string> value;
  bool read_only = false;
  bool is_default = false; ///< v0; from v1 as the source (5 default, 1 topic)
  bool sensitive = false;
};

struct describe_configs_result_v {
  error_code error = error_code::none;
  std::optional<std::string> message;
  int8_t type = 0;
  std::string name;
  std::vector<config_entry_v> configs;
};

void write_describe_configs_response(
  writer& out, int16_t version,
  const std::vector<describe_configs_result_v>& results);

struct alter_configs_resource_v {
  int8_t type = 0;
  std::string name;
  std::vector<std::pair<std::string, std::optional<std::string>>> configs;
};

struct alter_configs_request_v {
  std::vector<alter_configs_resource_v> resources;
  bool validate_only = false;
};

alter_configs_request_v read_alter_configs_request(reader& in, int16_t version);

struct alter_configs_result_v {
  error_code error = error_code::none;
  std::optional<std::string> message;
  int8_t type = 0;
  std::string name;
};

void write_alter_configs_response(
  writer& out, int16_t version,
  const std::vector<alter_configs_result_v>& results);

// -- DeleteRecords (key 21), v0-1 -------------------------------------------------

struct delete_records_partition_v {
  int32_t partition = 0;
  int64_t offset = -1; ///< -1: the high watermark
  int64_t low_watermark = -1;           ///< response
  error_code error = error_code::none;  ///< response
};

struct delete_records_topic_v {
  std::string name;
  std::vector<delete_records_partition_v> partitions;
};

struct delete_records_request_v {
  std::vector<delete_records_topic_v> topics;
  int32_t timeout_ms = 0;
};

delete_records_request_v read_delete_records_request(reader& in,
                                                     int16_t version);

void write_delete_records_response(
  writer& out, int16_t version,
  const std::vector<delete_records_topic_v>& topics);

} // namespace ferry::kafka
