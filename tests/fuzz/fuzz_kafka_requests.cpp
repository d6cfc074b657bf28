// libFuzzer harness: the Kafka listener's request decoding
// (broker/kafka_protocol.hpp), what a Kafka port reads from any client.
// The input is one request frame without its size: a request header, then
// the body. Properties:
//   - no decoder reads outside the frame (ASan), and none overflows (UBSan);
//   - a body that decodes was read to its last byte (nothing left over);
//   - every answer Ferry would write for it encodes (the response writers
//     run on what was decoded, at the asked version).

#include "broker/kafka_admin_protocol.hpp"
#include "broker/kafka_group_protocol.hpp"
#include "broker/kafka_protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace ferry::kafka;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view frame{reinterpret_cast<const char*>(data), size};
  reader in{frame};
  auto h = read_request_header(in);
  if (!in.ok())
    return 0;
  auto range = supported(h.api_key);
  if (!range || h.api_version < range->min_version || h.api_version > range->max_version) {
    writer w;
    write_unsupported_response(w, h.correlation_id);
    return 0;
  }
  auto v = h.api_version;
  auto check_end = [&] {
    if (in.ok() && in.remaining() != 0)
      std::abort(); // decoded, yet bytes are left
  };
  writer w;
  begin_response(w, h.correlation_id, false);
  switch (static_cast<api>(h.api_key)) {
    case api::api_versions:
      write_api_versions_response(w, v, error_code::none);
      break;
    case api::metadata: {
      auto req = read_metadata_request(in, v);
      check_end();
      metadata_response r;
      if (req.topics)
        for (auto& name : *req.topics)
          r.topics.push_back(metadata_topic{error_code::unknown_topic_or_partition, name,
                                            false, {}});
      write_metadata_response(w, v, r);
      break;
    }
    case api::produce: {
      auto req = read_produce_request(in, v);
      check_end();
      std::vector<produce_topic_response> r;
      for (auto& t : req.topics) {
        produce_topic_response tr{t.name, {}};
        for (auto& p : t.partitions) {
          if (p.records && p.records->size() > frame.size())
            std::abort(); // a view past the frame
          tr.partitions.push_back({p.partition, error_code::corrupt_message, -1, -1, -1,
                                   std::string{"x"}});
        }
        r.push_back(std::move(tr));
      }
      write_produce_response(w, v, r);
      break;
    }
    case api::fetch: {
      auto req = read_fetch_request(in, v);
      check_end();
      fetch_response_v r;
      for (auto& t : req.topics) {
        fetch_topic_resp tr;
        tr.name = t.name;
        for (auto& p : t.partitions)
          tr.partitions.push_back({p.partition, error_code::none, 0, 0, 0, {}});
        r.topics.push_back(std::move(tr));
      }
      write_fetch_response(w, v, r);
      break;
    }
    case api::init_producer_id: {
      auto req = read_init_producer_id_request(in, v);
      check_end();
      write_init_producer_id_response(w, v, req.transactional_id ? error_code::invalid_request
                                                                 : error_code::none,
                                      7, 0);
      break;
    }
    case api::list_offsets: {
      auto req = read_list_offsets_request(in, v);
      check_end();
      std::vector<list_offsets_topic_resp> r;
      for (auto& t : req.topics) {
        list_offsets_topic_resp tr{t.name, {}};
        for (auto& p : t.partitions)
          tr.partitions.push_back({p.partition, error_code::none, -1, 0, -1});
        r.push_back(std::move(tr));
      }
      write_list_offsets_response(w, v, r);
      break;
    }
    case api::find_coordinator: {
      auto req = read_find_coordinator_request(in, v);
      check_end();
      write_find_coordinator_response(w, v, find_coordinator_response{
                                              error_code::none, std::nullopt, 0, req.key, 1});
      break;
    }
    case api::join_group: {
      auto req = read_join_group_request(in, v);
      check_end();
      join_group_response_v r;
      r.member_id = req.member_id;
      for (auto& p : req.protocols) {
        // What the coordinator reads from a Kafka consumer's metadata.
        if (auto sub = read_consumer_subscription(p.metadata))
          (void) write_consumer_subscription(*sub);
        r.members.push_back(join_member_v{req.member_id, req.group_instance_id, p.metadata});
      }
      write_join_group_response(w, v, r);
      break;
    }
    case api::sync_group: {
      auto req = read_sync_group_request(in, v);
      check_end();
      std::string mine;
      for (auto& [id, bytes] : req.assignments) {
        if (auto a = read_consumer_assignment(bytes))
          (void) write_consumer_assignment(*a);
        if (id == req.member_id)
          mine = bytes;
      }
      write_sync_group_response(w, v, error_code::none, mine);
      break;
    }
    case api::heartbeat:
      read_heartbeat_request(in, v);
      check_end();
      write_heartbeat_response(w, v, error_code::none);
      break;
    case api::leave_group: {
      auto req = read_leave_group_request(in, v);
      check_end();
      write_leave_group_response(w, v, error_code::none, req.members);
      break;
    }
    case api::offset_commit: {
      auto req = read_offset_commit_request(in, v);
      check_end();
      write_offset_commit_response(w, v, req.topics);
      break;
    }
    case api::offset_fetch: {
      auto req = read_offset_fetch_request(in, v);
      check_end();
      std::vector<offset_fetch_topic_v> r;
      if (req.topics)
        for (auto& t : *req.topics) {
          offset_fetch_topic_v tr{t.topic, {}};
          for (auto p : t.partitions)
            tr.partitions.push_back({p, -1, -1, std::nullopt, error_code::none});
          r.push_back(std::move(tr));
        }
      write_offset_fetch_response(w, v, r, error_code::none);
      break;
    }
    case api::list_groups:
      read_list_groups_request(in, v);
      check_end();
      write_list_groups_response(w, v, error_code::none, {});
      break;
    case api::describe_groups: {
      auto req = read_describe_groups_request(in, v);
      check_end();
      std::vector<described_group> r;
      for (auto& g : req.groups)
        r.push_back(described_group{error_code::none, g, "Dead", "", "", {}});
      write_describe_groups_response(w, v, r);
      break;
    }
    case api::create_topics: {
      auto req = read_create_topics_request(in, v);
      check_end();
      std::vector<named_result> r;
      for (auto& t : req.topics)
        r.push_back(named_result{t.name, error_code::none, std::nullopt});
      write_create_topics_response(w, v, r);
      break;
    }
    case api::delete_topics: {
      auto req = read_delete_topics_request(in, v);
      check_end();
      std::vector<named_result> r;
      for (auto& n : req.names)
        r.push_back(named_result{n, error_code::unknown_topic_or_partition, std::nullopt});
      write_delete_topics_response(w, v, r);
      break;
    }
    case api::create_partitions: {
      auto req = read_create_partitions_request(in, v);
      check_end();
      std::vector<named_result> r;
      for (auto& t : req.topics)
        r.push_back(named_result{t.name, error_code::none, std::nullopt});
      write_create_partitions_response(w, v, r);
      break;
    }
    case api::describe_configs: {
      auto req = read_describe_configs_request(in, v);
      check_end();
      std::vector<describe_configs_result_v> r;
      for (auto& res : req.resources)
        r.push_back(describe_configs_result_v{error_code::none, std::nullopt, res.type,
                                              res.name, {config_entry_v{"k", "v"}}});
      write_describe_configs_response(w, v, r);
      break;
    }
    case api::alter_configs: {
      auto req = read_alter_configs_request(in, v);
      check_end();
      std::vector<alter_configs_result_v> r;
      for (auto& res : req.resources)
        r.push_back(alter_configs_result_v{error_code::none, std::nullopt, res.type, res.name});
      write_alter_configs_response(w, v, r);
      break;
    }
    case api::offset_for_leader_epoch: {
      auto req = read_offset_for_leader_epoch_request(in, v);
      check_end();
      std::vector<epoch_topic_resp> r;
      for (auto& t : req.topics) {
        epoch_topic_resp tr{t.name, {}};
        for (auto& p : t.partitions)
          tr.partitions.push_back({error_code::none, p.partition, p.leader_epoch, 42});
        r.push_back(std::move(tr));
      }
      write_offset_for_leader_epoch_response(w, v, r);
      break;
    }
    case api::sasl_handshake: {
      auto mechanism = read_sasl_handshake_request(in, v);
      check_end();
      write_sasl_handshake_response(w, v, error_code::unsupported_sasl_mechanism,
                                    {mechanism, "PLAIN"});
      break;
    }
    case api::sasl_authenticate: {
      auto token = read_sasl_authenticate_request(in, v);
      check_end();
      write_sasl_authenticate_response(w, v, error_code::sasl_authentication_failed, token,
                                       token, 0);
      break;
    }
    case api::delete_records: {
      auto req = read_delete_records_request(in, v);
      check_end();
      write_delete_records_response(w, v, req.topics);
      break;
    }
  }
  finish_response(w);
  return 0;
}
