#include "broker/kafka_admin_protocol.hpp"

// Field layouts follow Apache Kafka's message definitions
// (clients/src/main/resources/common/message/<Name>{Request,Response}.json).

namespace ferry::kafka {

namespace {

std::vector<std::pair<std::string, std::optional<std::string>>>
read_config_pairs(reader& in, const char* what) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  auto n = in.required_array(what, 4);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    auto name = in.string("config name");
    auto value = in.nullable_string("config value");
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

} // namespace

// -- CreateTopics ------------------------------------------------------------------

create_topics_request_v read_create_topics_request(reader& in, int16_t version) {
  create_topics_request_v x;
  auto n = in.required_array("create_topics topics", 14);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    create_topic_v t;
    t.name = in.string("create_topics name");
    t.partitions = in.i32("create_topics num_partitions");
    t.replication_factor = in.i16("create_topics replication_factor");
    auto m = in.required_array("create_topics assignments", 8);
    for (int32_t j = 0; j < m && in.ok(); ++j) {
      auto part = in.i32("create_topics assignment partition");
      std::vector<int32_t> brokers;
      auto b = in.required_array("create_topics assignment broker_ids", 4);
      for (int32_t k = 0; k < b && in.ok(); ++k)
        brokers.push_back(in.i32("create_topics broker_id"));
      t.assignments.emplace_back(part, std::move(brokers));
    }
    t.configs = read_config_pairs(in, "create_topics configs");
    x.topics.push_back(std::move(t));
  }
  x.timeout_ms = in.i32("create_topics timeout_ms");
  if (version >= 1)
    x.validate_only = in.boolean("create_topics validate_only");
  in.expect_end("create_topics request");
  return x;
}

void write_create_topics_response(writer& out, int16_t version,
                                  const std::vector<named_result>& topics) {
  if (version >= 2)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.i16(static_cast<int16_t>(t.error));
    if (version >= 1)
      out.nullable_string(t.message);
  }
}

// -- DeleteTopics ------------------------------------------------------------------

delete_topics_request_v read_delete_topics_request(reader& in, int16_t version) {
  (void) version;
  delete_topics_request_v x;
  auto n = in.required_array("delete_topics names", 2);
  for (int32_t i = 0; i < n && in.ok(); ++i)
    x.names.push_back(in.string("delete_topics name"));
  x.timeout_ms = in.i32("delete_topics timeout_ms");
  in.expect_end("delete_topics request");
  return x;
}

void write_delete_topics_response(writer& out, int16_t version,
                                  const std::vector<named_result>& topics) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.i16(static_cast<int16_t>(t.error));
  }
}

// -- CreatePartitions --------------------------------------------------------------

create_partitions_request_v read_create_partitions_request(reader& in,
                                                           int16_t version) {
  (void) version;
  create_partitions_request_v x;
  auto n = in.required_array("create_partitions topics", 10);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    create_partitions_topic_v t;
    t.name = in.string("create_partitions name");
    t.count = in.i32("create_partitions count");
    auto m = in.array("create_partitions assignments", 4);
    if (m > 0)
      t.has_assignments = true;
    for (int32_t j = 0; j < m && in.ok(); ++j) {
      auto b = in.required_array("create_partitions broker_ids", 4);
      for (int32_t k = 0; k < b && in.ok(); ++k)
        in.i32("create_partitions broker_id");
    }
    x.topics.push_back(std::move(t));
  }
  x.timeout_ms = in.i32("create_partitions timeout_ms");
  x.validate_only = in.boolean("create_partitions validate_only");
  in.expect_end("create_partitions request");
  return x;
}

void write_create_partitions_response(writer& out, int16_t version,
                                      const std::vector<named_result>& topics) {
  (void) version;
  out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.i16(static_cast<int16_t>(t.error));
    out.nullable_string(t.message);
  }
}

// -- DescribeConfigs ---------------------------------------------------------------

describe_configs_request_v read_describe_configs_request(reader& in,
                                                         int16_t version) {
  describe_configs_request_v x;
  auto n = in.required_array("describe_configs resources", 7);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    describe_configs_resource_v r;
    r.type = in.i8("describe_configs resource_type");
    r.name = in.string("describe_configs resource_name");
    auto k = in.array("describe_configs configuration_keys", 2);
    if (k >= 0) {
      r.keys.emplace();
      for (int32_t j = 0; j < k && in.ok(); ++j)
        r.keys->push_back(in.string("describe_configs key"));
    }
    x.resources.push_back(std::move(r));
  }
  if (version >= 1)
    x.include_synonyms = in.boolean("describe_configs include_synonyms");
  in.expect_end("describe_configs request");
  return x;
}

void write_describe_configs_response(
  writer& out, int16_t version,
  const std::vector<describe_configs_result_v>& results) {
  out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(results.size()));
  for (auto& r : results) {
    out.i16(static_cast<int16_t>(r.error));
    out.nullable_string(r.message);
    out.i8(r.type);
    out.string(r.name);
    out.array(static_cast<int32_t>(r.configs.size()));
    for (auto& c : r.configs) {
      out.string(c.name);
      out.nullable_string(c.value);
      out.boolean(c.read_only);
      if (version == 0)
        out.boolean(c.is_default);
      else
        out.i8(c.is_default ? 5 : 1); // DEFAULT_CONFIG / TOPIC_CONFIG
      out.boolean(c.sensitive);
      if (version >= 1)
        out.array(0); // synonyms
    }
  }
}

// -- AlterConfigs ------------------------------------------------------------------

alter_configs_request_v read_alter_configs_request(reader& in, int16_t version) {
  (void) version;
  alter_configs_request_v x;
  auto n = in.required_array("alter_configs resources", 7);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    alter_configs_resource_v r;
    r.type = in.i8("alter_configs resource_type");
    r.name = in.string("alter_configs resource_name");
    r.configs = read_config_pairs(in, "alter_configs configs");
    x.resources.push_back(std::move(r));
  }
  x.validate_only = in.boolean("alter_configs validate_only");
  in.expect_end("alter_configs request");
  return x;
}

void write_alter_configs_response(
  writer& out, int16_t version,
  const std::vector<alter_configs_result_v>& results) {
  (void) version;
  out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(results.size()));
  for (auto& r : results) {
    out.i16(static_cast<int16_t>(r.error));
    out.nullable_string(r.message);
    out.i8(r.type);
    out.string(r.name);
  }
}

// -- DeleteRecords -----------------------------------------------------------------

delete_records_request_v read_delete_records_request(reader& in,
                                                     int16_t version) {
  (void) version;
  delete_records_request_v x;
  auto n = in.required_array("delete_records topics", 6);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    delete_records_topic_v t;
    t.name = in.string("delete_records name");
    auto m = in.required_array("delete_records partitions", 12);
    for (int32_t j = 0; j < m && in.ok(); ++j) {
      delete_records_partition_v p;
      p.partition = in.i32("delete_records partition_index");
      p.offset = in.i64("delete_records offset");
      t.partitions.push_back(p);
    }
    x.topics.push_back(std::move(t));
  }
  x.timeout_ms = in.i32("delete_records timeout_ms");
  in.expect_end("delete_records request");
  return x;
}

void write_delete_records_response(
  writer& out, int16_t version,
  const std::vector<delete_records_topic_v>& topics) {
  (void) version;
  out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i64(p.low_watermark);
      out.i16(static_cast<int16_t>(p.error));
    }
  }
}

} // namespace ferry::kafka
