// The Kafka group APIs' codec (broker/kafka_group_protocol.hpp): request
// layouts per version as the clients send them, response layouts per
// version, the ConsumerProtocol bytes, and refusal of malformed bodies.

#include "broker/kafka_group_protocol.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace ferry;
using namespace ferry::kafka;

TEST(KafkaGroupProtocol, ConsumerSubscriptionAndAssignmentRoundTrip) {
  consumer_subscription s;
  s.version = 1;
  s.topics = {"a", "b"};
  s.user_data = std::string{"\x00\x01", 2};
  s.owned = {topic_partitions{"a", {0, 2}}};
  auto bytes = write_consumer_subscription(s);
  auto back = read_consumer_subscription(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->version, 1);
  EXPECT_EQ(back->topics, s.topics);
  EXPECT_EQ(back->user_data, s.user_data);
  EXPECT_EQ(back->owned, s.owned);
  // v3 (rack) and a v0 without user data.
  s.version = 3;
  s.generation = 7;
  s.rack = "r1";
  auto v3 = read_consumer_subscription(write_consumer_subscription(s));
  ASSERT_TRUE(v3);
  EXPECT_EQ(v3->generation, 7);
  EXPECT_EQ(v3->rack, std::optional<std::string>{"r1"});
  consumer_subscription v0;
  v0.topics = {"t"};
  auto b0 = write_consumer_subscription(v0);
  ASSERT_TRUE(read_consumer_subscription(b0));
  EXPECT_FALSE(read_consumer_subscription(b0.substr(0, b0.size() - 1)));
  consumer_assignment a;
  a.partitions = {topic_partitions{"t", {1, 3}}, topic_partitions{"u", {0}}};
  auto ab = write_consumer_assignment(a);
  auto aback = read_consumer_assignment(ab);
  ASSERT_TRUE(aback);
  EXPECT_EQ(aback->partitions, a.partitions);
  // Empty bytes: no partitions (what Kafka gives a member without any).
  auto empty = read_consumer_assignment("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->partitions.empty());
  // A count larger than the bytes: refused, not allocated.
  writer bad;
  bad.i16(0);
  bad.i32(1000000);
  EXPECT_FALSE(read_consumer_assignment(bad.buffer()));
}

TEST(KafkaGroupProtocol, JoinGroupV5ReadsInstanceIdAndProtocols) {
  writer w;
  w.string("grp");
  w.i32(10000);
  w.i32(300000);
  w.string("");
  w.nullable_string(std::string{"inst-1"});
  w.string("consumer");
  w.array(2);
  w.string("range");
  w.bytes("meta-r");
  w.string("cooperative-sticky");
  w.bytes("meta-c");
  reader in{w.buffer()};
  auto r = read_join_group_request(in, 5);
  ASSERT_TRUE(in.ok()) << in.error();
  EXPECT_EQ(r.group, "grp");
  EXPECT_EQ(r.session_timeout_ms, 10000);
  EXPECT_EQ(r.rebalance_timeout_ms, 300000);
  EXPECT_EQ(r.group_instance_id, std::optional<std::string>{"inst-1"});
  EXPECT_EQ(r.protocol_type, "consumer");
  ASSERT_EQ(r.protocols.size(), 2u);
  EXPECT_EQ(r.protocols[1].name, "cooperative-sticky");
  EXPECT_EQ(r.protocols[1].metadata, "meta-c");
  // v0 has neither the rebalance timeout nor the instance id: the same
  // bytes are not a v0 request (bytes left over or a bad length).
  reader in0{w.buffer()};
  read_join_group_request(in0, 0);
  EXPECT_FALSE(in0.ok());
  // Truncated: refused, naming a field.
  reader cut{std::string_view{w.buffer()}.substr(0, w.size() - 3)};
  read_join_group_request(cut, 5);
  EXPECT_FALSE(cut.ok());
  EXPECT_NE(cut.error().find("join_group"), std::string::npos) << cut.error();
}

TEST(KafkaGroupProtocol, JoinGroupResponseFieldsFollowTheVersion) {
  join_group_response_v x;
  x.generation = 3;
  x.protocol_name = "range";
  x.leader = "m1";
  x.member_id = "m1";
  x.members = {join_member_v{"m1", std::string{"i1"}, "md"}};
  writer v5;
  write_join_group_response(v5, 5, x);
  reader r{v5.buffer()};
  EXPECT_EQ(r.i32("throttle"), 0);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.i32("generation"), 3);
  EXPECT_EQ(r.string("protocol"), "range");
  EXPECT_EQ(r.string("leader"), "m1");
  EXPECT_EQ(r.string("member"), "m1");
  EXPECT_EQ(r.array("members"), 1);
  EXPECT_EQ(r.string("id"), "m1");
  EXPECT_EQ(r.nullable_string("instance"), std::optional<std::string>{"i1"});
  EXPECT_EQ(r.nullable_bytes("metadata"), std::optional<std::string_view>{"md"});
  r.expect_end("v5");
  EXPECT_TRUE(r.ok()) << r.error();
  writer v0;
  write_join_group_response(v0, 0, x);
  reader r0{v0.buffer()};
  EXPECT_EQ(r0.i16("error"), 0); // no throttle time before v2
  EXPECT_EQ(r0.i32("generation"), 3);
  r0.string("protocol");
  r0.string("leader");
  r0.string("member");
  EXPECT_EQ(r0.array("members"), 1);
  r0.string("id");
  r0.nullable_bytes("metadata"); // no instance id before v5
  r0.expect_end("v0");
  EXPECT_TRUE(r0.ok()) << r0.error();
}

TEST(KafkaGroupProtocol, SyncHeartbeatAndLeave) {
  writer s;
  s.string("g");
  s.i32(4);
  s.string("m1");
  s.nullable_string(std::nullopt);
  s.array(1);
  s.string("m2");
  s.bytes("asg");
  reader in{s.buffer()};
  auto sr = read_sync_group_request(in, 3);
  ASSERT_TRUE(in.ok()) << in.error();
  EXPECT_EQ(sr.generation, 4);
  ASSERT_EQ(sr.assignments.size(), 1u);
  EXPECT_EQ(sr.assignments[0].first, "m2");
  EXPECT_EQ(sr.assignments[0].second, "asg");
  writer so;
  write_sync_group_response(so, 3, error_code::rebalance_in_progress, "");
  reader sro{so.buffer()};
  sro.i32("throttle");
  EXPECT_EQ(sro.i16("error"), 27);
  EXPECT_EQ(sro.nullable_bytes("assignment"), std::optional<std::string_view>{""});

  writer h;
  h.string("g");
  h.i32(4);
  h.string("m1");
  reader hin{h.buffer()};
  auto hr = read_heartbeat_request(hin, 2);
  ASSERT_TRUE(hin.ok()) << hin.error();
  EXPECT_EQ(hr.member_id, "m1");
  reader hin3{h.buffer()};
  read_heartbeat_request(hin3, 3); // v3 wants the instance id too
  EXPECT_FALSE(hin3.ok());

  writer l3;
  l3.string("g");
  l3.array(2);
  l3.string("m1");
  l3.nullable_string(std::nullopt);
  l3.string("");
  l3.nullable_string(std::string{"i2"});
  reader lin{l3.buffer()};
  auto lr = read_leave_group_request(lin, 3);
  ASSERT_TRUE(lin.ok()) << lin.error();
  ASSERT_EQ(lr.members.size(), 2u);
  EXPECT_EQ(lr.members[1].group_instance_id, std::optional<std::string>{"i2"});
  lr.members[1].error = error_code::unknown_member_id;
  writer lo;
  write_leave_group_response(lo, 3, error_code::none, lr.members);
  reader lro{lo.buffer()};
  lro.i32("throttle");
  EXPECT_EQ(lro.i16("error"), 0);
  EXPECT_EQ(lro.array("members"), 2);
  lro.string("m");
  lro.nullable_string("i");
  EXPECT_EQ(lro.i16("e"), 0);
  lro.string("m");
  lro.nullable_string("i");
  EXPECT_EQ(lro.i16("e"), 25);
  lro.expect_end("leave v3");
  EXPECT_TRUE(lro.ok()) << lro.error();
}

TEST(KafkaGroupProtocol, OffsetCommitAndFetchPerVersion) {
  // v2 (kafka-python): retention time, no leader epoch.
  writer c2;
  c2.string("g");
  c2.i32(1);
  c2.string("m");
  c2.i64(-1);
  c2.array(1);
  c2.string("t");
  c2.array(1);
  c2.i32(0);
  c2.i64(42);
  c2.nullable_string(std::string{"md"});
  reader in2{c2.buffer()};
  auto r2 = read_offset_commit_request(in2, 2);
  ASSERT_TRUE(in2.ok()) << in2.error();
  ASSERT_EQ(r2.topics.size(), 1u);
  EXPECT_EQ(r2.topics[0].partitions[0].offset, 42);
  EXPECT_EQ(r2.topics[0].partitions[0].metadata, std::optional<std::string>{"md"});
  // v7 (librdkafka): instance id and leader epoch, no retention.
  writer c7;
  c7.string("g");
  c7.i32(1);
  c7.string("m");
  c7.nullable_string(std::nullopt);
  c7.array(1);
  c7.string("t");
  c7.array(1);
  c7.i32(3);
  c7.i64(9);
  c7.i32(5);
  c7.nullable_string(std::nullopt);
  reader in7{c7.buffer()};
  auto r7 = read_offset_commit_request(in7, 7);
  ASSERT_TRUE(in7.ok()) << in7.error();
  EXPECT_EQ(r7.topics[0].partitions[0].partition, 3);
  EXPECT_EQ(r7.topics[0].partitions[0].leader_epoch, 5);
  // A v7 body read as v2 does not fit.
  reader wrong{c7.buffer()};
  read_offset_commit_request(wrong, 2);
  EXPECT_FALSE(wrong.ok());

  // OffsetFetch: null topics (all) from v2; not before.
  writer f;
  f.string("g");
  f.array(-1);
  reader fin{f.buffer()};
  auto fr = read_offset_fetch_request(fin, 2);
  ASSERT_TRUE(fin.ok()) << fin.error();
  EXPECT_FALSE(fr.topics);
  reader fin1{f.buffer()};
  read_offset_fetch_request(fin1, 1);
  EXPECT_FALSE(fin1.ok());
  std::vector<offset_fetch_topic_v> topics{
    offset_fetch_topic_v{"t", {offset_commit_partition_v{0, 42, -1, "md", error_code::none}}}};
  writer fo;
  write_offset_fetch_response(fo, 5, topics, error_code::none);
  reader fro{fo.buffer()};
  fro.i32("throttle");
  EXPECT_EQ(fro.array("topics"), 1);
  fro.string("name");
  EXPECT_EQ(fro.array("partitions"), 1);
  EXPECT_EQ(fro.i32("p"), 0);
  EXPECT_EQ(fro.i64("offset"), 42);
  EXPECT_EQ(fro.i32("epoch"), -1);
  EXPECT_EQ(fro.nullable_string("md"), std::optional<std::string>{"md"});
  EXPECT_EQ(fro.i16("error"), 0);
  EXPECT_EQ(fro.i16("top error"), 0);
  fro.expect_end("offset fetch v5");
  EXPECT_TRUE(fro.ok()) << fro.error();
}

TEST(KafkaGroupProtocol, FindCoordinatorListAndDescribeGroups) {
  writer f;
  f.string("g");
  f.i8(0);
  reader fin{f.buffer()};
  auto fr = read_find_coordinator_request(fin, 2);
  ASSERT_TRUE(fin.ok()) << fin.error();
  EXPECT_EQ(fr.key, "g");
  writer fo;
  write_find_coordinator_response(fo, 0, find_coordinator_response{
                                           error_code::none, std::nullopt, 3, "h", 9092});
  reader fro{fo.buffer()};
  EXPECT_EQ(fro.i16("error"), 0);
  EXPECT_EQ(fro.i32("node"), 3);
  EXPECT_EQ(fro.string("host"), "h");
  EXPECT_EQ(fro.i32("port"), 9092);
  fro.expect_end("find v0");
  EXPECT_TRUE(fro.ok()) << fro.error();

  reader lin{""};
  read_list_groups_request(lin, 2);
  EXPECT_TRUE(lin.ok());
  reader extra{"x"};
  read_list_groups_request(extra, 2);
  EXPECT_FALSE(extra.ok());

  writer d;
  d.array(1);
  d.string("g");
  d.boolean(false);
  reader din{d.buffer()};
  auto dr = read_describe_groups_request(din, 4);
  ASSERT_TRUE(din.ok()) << din.error();
  EXPECT_EQ(dr.groups, std::vector<std::string>{"g"});
  described_group g;
  g.group = "g";
  g.state = "Stable";
  g.protocol_type = "consumer";
  g.protocol = "range";
  g.members = {described_member{"m", std::nullopt, "c", "", "md", "as"}};
  writer dout;
  write_describe_groups_response(dout, 4, {g});
  reader dro{dout.buffer()};
  dro.i32("throttle");
  EXPECT_EQ(dro.array("groups"), 1);
  EXPECT_EQ(dro.i16("error"), 0);
  EXPECT_EQ(dro.string("group"), "g");
  EXPECT_EQ(dro.string("state"), "Stable");
  EXPECT_EQ(dro.string("type"), "consumer");
  EXPECT_EQ(dro.string("protocol"), "range");
  EXPECT_EQ(dro.array("members"), 1);
  dro.string("member");
  EXPECT_EQ(dro.nullable_string("instance"), std::nullopt);
  dro.string("client");
  dro.string("host");
  EXPECT_EQ(dro.nullable_bytes("md"), std::optional<std::string_view>{"md"});
  EXPECT_EQ(dro.nullable_bytes("as"), std::optional<std::string_view>{"as"});
  dro.i32("authorized operations");
  dro.expect_end("describe v4");
  EXPECT_TRUE(dro.ok()) << dro.error();
}

TEST(KafkaGroupProtocol, GroupErrorsMapToKafkaCodes) {
  EXPECT_EQ(to_kafka(make_error(ec::unknown_member)), error_code::unknown_member_id);
  EXPECT_EQ(to_kafka(make_error(ec::illegal_generation)), error_code::illegal_generation);
  EXPECT_EQ(to_kafka(make_error(ec::rebalance_in_progress)),
            error_code::rebalance_in_progress);
  EXPECT_EQ(to_kafka(make_error(ec::fenced_instance_id)), error_code::fenced_instance_id);
  EXPECT_EQ(to_kafka(make_error(ec::inconsistent_group_protocol)),
            error_code::inconsistent_group_protocol);
  EXPECT_EQ(to_kafka(make_error(ec::group_not_empty)), error_code::non_empty_group);
}
