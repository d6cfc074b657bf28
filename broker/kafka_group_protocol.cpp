#include "broker/kafka_group_protocol.hpp"

// Field layouts follow Apache Kafka's message definitions
// (clients/src/main/resources/common/message/<Name>{Request,Response}.json)
// and its ConsumerProtocolSubscription / ConsumerProtocolAssignment.

namespace ferry::kafka {

namespace {

/// A non-null bytes field (a null one reads as empty, as Kafka's clients
/// treat it).
std::string bytes_field(reader& in, const char* what) {
  auto b = in.nullable_bytes(what);
  return b ? std::string{*b} : std::string{};
}

std::vector<topic_partitions> read_topic_partitions(reader& in,
                                                    const char* what) {
  std::vector<topic_partitions> out;
  auto n = in.required_array(what, 6);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    topic_partitions tp;
    tp.topic = in.string("topic");
    auto m = in.required_array("partitions", 4);
    for (int32_t j = 0; j < m && in.ok(); ++j)
      tp.partitions.push_back(in.i32("partition"));
    out.push_back(std::move(tp));
  }
  return out;
}

void write_topic_partitions(writer& out, const std::vector<topic_partitions>& xs) {
  out.array(static_cast<int32_t>(xs.size()));
  for (auto& tp : xs) {
    out.string(tp.topic);
    out.array(static_cast<int32_t>(tp.partitions.size()));
    for (auto p : tp.partitions)
      out.i32(p);
  }
}

void write_nullable_bytes(writer& out, const std::optional<std::string>& x) {
  if (x)
    out.bytes(*x);
  else
    out.null_bytes();
}

} // namespace

// -- ConsumerProtocol ------------------------------------------------------------

std::optional<consumer_subscription>
read_consumer_subscription(std::string_view bytes) {
  reader in{bytes};
  consumer_subscription x;
  x.version = in.i16("subscription version");
  if (in.ok() && x.version < 0)
    return std::nullopt;
  auto n = in.required_array("subscription topics", 2);
  for (int32_t i = 0; i < n && in.ok(); ++i)
    x.topics.push_back(in.string("subscription topic"));
  auto ud = in.nullable_bytes("subscription user data");
  if (ud)
    x.user_data = std::string{*ud};
  if (x.version >= 1 && in.ok())
    x.owned = read_topic_partitions(in, "owned partitions");
  if (x.version >= 2 && in.ok())
    x.generation = in.i32("subscription generation");
  if (x.version >= 3 && in.ok())
    x.rack = in.nullable_string("subscription rack");
  if (!in.ok())
    return std::nullopt;
  return x;
}

std::string write_consumer_subscription(const consumer_subscription& x) {
  writer out;
  out.i16(x.version);
  out.array(static_cast<int32_t>(x.topics.size()));
  for (auto& t : x.topics)
    out.string(t);
  write_nullable_bytes(out, x.user_data);
  if (x.version >= 1)
    write_topic_partitions(out, x.owned);
  if (x.version >= 2)
    out.i32(x.generation);
  if (x.version >= 3)
    out.nullable_string(x.rack);
  return std::move(out.buffer());
}

std::optional<consumer_assignment>
read_consumer_assignment(std::string_view bytes) {
  consumer_assignment x;
  if (bytes.empty())
    return x;
  reader in{bytes};
  x.version = in.i16("assignment version");
  if (in.ok() && x.version < 0)
    return std::nullopt;
  x.partitions = read_topic_partitions(in, "assigned partitions");
  auto ud = in.nullable_bytes("assignment user data");
  if (ud)
    x.user_data = std::string{*ud};
  if (!in.ok())
    return std::nullopt;
  return x;
}

std::string write_consumer_assignment(const consumer_assignment& x) {
  writer out;
  out.i16(x.version);
  write_topic_partitions(out, x.partitions);
  write_nullable_bytes(out, x.user_data);
  return std::move(out.buffer());
}

// -- FindCoordinator ---------------------------------------------------------------

find_coordinator_request read_find_coordinator_request(reader& in,
                                                       int16_t version) {
  find_coordinator_request x;
  x.key = in.string("find_coordinator key");
  if (version >= 1)
    x.key_type = in.i8("find_coordinator key_type");
  in.expect_end("find_coordinator request");
  return x;
}

void write_find_coordinator_response(writer& out, int16_t version,
                                     const find_coordinator_response& x) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(x.error));
  if (version >= 1)
    out.nullable_string(x.error_message);
  out.i32(x.node_id);
  out.string(x.host);
  out.i32(x.port);
}

// -- JoinGroup ---------------------------------------------------------------------

join_group_request_v read_join_group_request(reader& in, int16_t version) {
  join_group_request_v x;
  x.group = in.string("join_group group_id");
  x.session_timeout_ms = in.i32("join_group session_timeout_ms");
  if (version >= 1)
    x.rebalance_timeout_ms = in.i32("join_group rebalance_timeout_ms");
  x.member_id = in.string("join_group member_id");
  if (version >= 5)
    x.group_instance_id = in.nullable_string("join_group group_instance_id");
  x.protocol_type = in.string("join_group protocol_type");
  auto n = in.required_array("join_group protocols", 6);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    join_protocol p;
    p.name = in.string("join_group protocol name");
    p.metadata = bytes_field(in, "join_group protocol metadata");
    x.protocols.push_back(std::move(p));
  }
  in.expect_end("join_group request");
  return x;
}

void write_join_group_response(writer& out, int16_t version,
                               const join_group_response_v& x) {
  if (version >= 2)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(x.error));
  out.i32(x.generation);
  out.string(x.protocol_name);
  out.string(x.leader);
  out.string(x.member_id);
  out.array(static_cast<int32_t>(x.members.size()));
  for (auto& m : x.members) {
    out.string(m.member_id);
    if (version >= 5)
      out.nullable_string(m.group_instance_id);
    out.bytes(m.metadata);
  }
}

// -- SyncGroup ---------------------------------------------------------------------

sync_group_request_v read_sync_group_request(reader& in, int16_t version) {
  sync_group_request_v x;
  x.group = in.string("sync_group group_id");
  x.generation = in.i32("sync_group generation_id");
  x.member_id = in.string("sync_group member_id");
  if (version >= 3)
    x.group_instance_id = in.nullable_string("sync_group group_instance_id");
  auto n = in.required_array("sync_group assignments", 6);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    auto id = in.string("sync_group assignment member_id");
    auto a = bytes_field(in, "sync_group assignment");
    x.assignments.emplace_back(std::move(id), std::move(a));
  }
  in.expect_end("sync_group request");
  return x;
}

void write_sync_group_response(writer& out, int16_t version, error_code err,
                               std::string_view assignment) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(err));
  out.bytes(assignment);
}

// -- Heartbeat ---------------------------------------------------------------------

heartbeat_request_v read_heartbeat_request(reader& in, int16_t version) {
  heartbeat_request_v x;
  x.group = in.string("heartbeat group_id");
  x.generation = in.i32("heartbeat generation_id");
  x.member_id = in.string("heartbeat member_id");
  if (version >= 3)
    x.group_instance_id = in.nullable_string("heartbeat group_instance_id");
  in.expect_end("heartbeat request");
  return x;
}

void write_heartbeat_response(writer& out, int16_t version, error_code err) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(err));
}

// -- LeaveGroup --------------------------------------------------------------------

leave_group_request_v read_leave_group_request(reader& in, int16_t version) {
  leave_group_request_v x;
  x.group = in.string("leave_group group_id");
  if (version < 3) {
    leave_member_v m;
    m.member_id = in.string("leave_group member_id");
    x.members.push_back(std::move(m));
  } else {
    auto n = in.required_array("leave_group members", 4);
    for (int32_t i = 0; i < n && in.ok(); ++i) {
      leave_member_v m;
      m.member_id = in.string("leave_group member_id");
      m.group_instance_id = in.nullable_string("leave_group group_instance_id");
      x.members.push_back(std::move(m));
    }
  }
  in.expect_end("leave_group request");
  return x;
}

void write_leave_group_response(writer& out, int16_t version, error_code err,
                                const std::vector<leave_member_v>& members) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(err));
  if (version >= 3) {
    out.array(static_cast<int32_t>(members.size()));
    for (auto& m : members) {
      out.string(m.member_id);
      out.nullable_string(m.group_instance_id);
      out.i16(static_cast<int16_t>(m.error));
    }
  }
}

// -- OffsetCommit ------------------------------------------------------------------

offset_commit_request_v read_offset_commit_request(reader& in,
                                                   int16_t version) {
  offset_commit_request_v x;
  x.group = in.string("offset_commit group_id");
  if (version >= 1) {
    x.generation = in.i32("offset_commit generation_id");
    x.member_id = in.string("offset_commit member_id");
  }
  if (version >= 7)
    x.group_instance_id = in.nullable_string("offset_commit group_instance_id");
  if (version >= 2 && version <= 4)
    x.retention_time_ms = in.i64("offset_commit retention_time_ms");
  auto n = in.required_array("offset_commit topics", 6);
  for (int32_t i = 0; i < n && in.ok(); ++i) {
    offset_commit_topic_v t;
    t.name = in.string("offset_commit topic name");
    auto m = in.required_array("offset_commit partitions", 14);
    for (int32_t j = 0; j < m && in.ok(); ++j) {
      offset_commit_partition_v p;
      p.partition = in.i32("offset_commit partition_index");
      p.offset = in.i64("offset_commit committed_offset");
      if (version >= 6)
        p.leader_epoch = in.i32("offset_commit committed_leader_epoch");
      if (version == 1)
        in.i64("offset_commit commit_timestamp");
      p.metadata = in.nullable_string("offset_commit committed_metadata");
      t.partitions.push_back(std::move(p));
    }
    x.topics.push_back(std::move(t));
  }
  in.expect_end("offset_commit request");
  return x;
}

void write_offset_commit_response(
  writer& out, int16_t version,
  const std::vector<offset_commit_topic_v>& topics) {
  if (version >= 3)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i16(static_cast<int16_t>(p.error));
    }
  }
}

// -- OffsetFetch -------------------------------------------------------------------

offset_fetch_request_v read_offset_fetch_request(reader& in, int16_t version) {
  offset_fetch_request_v x;
  x.group = in.string("offset_fetch group_id");
  auto n = in.array("offset_fetch topics", 6);
  if (n == -1) {
    if (version < 2)
      in.fail("offset_fetch topics: null before v2");
  } else {
    x.topics.emplace();
    for (int32_t i = 0; i < n && in.ok(); ++i) {
      topic_partitions tp;
      tp.topic = in.string("offset_fetch topic name");
      auto m = in.required_array("offset_fetch partition_indexes", 4);
      for (int32_t j = 0; j < m && in.ok(); ++j)
        tp.partitions.push_back(in.i32("offset_fetch partition_index"));
      x.topics->push_back(std::move(tp));
    }
  }
  in.expect_end("offset_fetch request");
  return x;
}

void write_offset_fetch_response(writer& out, int16_t version,
                                 const std::vector<offset_fetch_topic_v>& topics,
                                 error_code err) {
  if (version >= 3)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i64(p.offset);
      if (version >= 5)
        out.i32(p.leader_epoch);
      out.nullable_string(p.metadata);
      out.i16(static_cast<int16_t>(p.error));
    }
  }
  if (version >= 2)
    out.i16(static_cast<int16_t>(err));
}

// -- ListGroups --------------------------------------------------------------------

void read_list_groups_request(reader& in, int16_t version) {
  (void) version;
  in.expect_end("list_groups request");
}

void write_list_groups_response(writer& out, int16_t version, error_code err,
                                const std::vector<listed_group>& groups) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(err));
  out.array(static_cast<int32_t>(groups.size()));
  for (auto& g : groups) {
    out.string(g.group);
    out.string(g.protocol_type);
  }
}

// -- DescribeGroups ----------------------------------------------------------------

describe_groups_request_v read_describe_groups_request(reader& in,
                                                       int16_t version) {
  describe_groups_request_v x;
  auto n = in.required_array("describe_groups groups", 2);
  for (int32_t i = 0; i < n && in.ok(); ++i)
    x.groups.push_back(in.string("describe_groups group"));
  if (version >= 3)
    x.include_authorized_operations
      = in.boolean("describe_groups include_authorized_operations");
  in.expect_end("describe_groups request");
  return x;
}

void write_describe_groups_response(writer& out, int16_t version,
                                    const std::vector<described_group>& groups) {
  if (version >= 1)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(groups.size()));
  for (auto& g : groups) {
    out.i16(static_cast<int16_t>(g.error));
    out.string(g.group);
    out.string(g.state);
    out.string(g.protocol_type);
    out.string(g.protocol);
    out.array(static_cast<int32_t>(g.members.size()));
    for (auto& m : g.members) {
      out.string(m.member_id);
      if (version >= 4)
        out.nullable_string(m.group_instance_id);
      out.string(m.client_id);
      out.string(m.client_host);
      out.bytes(m.metadata);
      out.bytes(m.assignment);
    }
    if (version >= 3)
      out.i32(-2147483648); // authorized_operations: not asked / unknown
  }
}

} // namespace ferry::kafka
