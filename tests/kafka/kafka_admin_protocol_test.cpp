// The Kafka admin APIs' codec (broker/kafka_admin_protocol.hpp): request
// layouts per version as kafka-python and librdkafka send them, response
// layouts per version, and refusal of malformed bodies.

#include "broker/kafka_admin_protocol.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace ferry;
using namespace ferry::kafka;

TEST(KafkaAdminProtocol, CreateTopicsV0AndV4) {
  writer w;
  w.array(1);
  w.string("t");
  w.i32(3);
  w.i16(2);
  w.array(1);
  w.i32(0);
  w.array(2);
  w.i32(1);
  w.i32(2);
  w.array(1);
  w.string("retention.ms");
  w.nullable_string(std::string{"1000"});
  w.i32(30000);
  auto v0 = w.buffer();
  reader in0{v0};
  auto r0 = read_create_topics_request(in0, 0);
  ASSERT_TRUE(in0.ok()) << in0.error();
  ASSERT_EQ(r0.topics.size(), 1u);
  EXPECT_EQ(r0.topics[0].partitions, 3);
  EXPECT_EQ(r0.topics[0].replication_factor, 2);
  ASSERT_EQ(r0.topics[0].assignments.size(), 1u);
  EXPECT_EQ(r0.topics[0].assignments[0].second, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r0.topics[0].configs[0].second, std::optional<std::string>{"1000"});
  EXPECT_FALSE(r0.validate_only);
  // v1+ carries validate_only; without it the body is short.
  reader short1{v0};
  read_create_topics_request(short1, 1);
  EXPECT_FALSE(short1.ok());
  w.boolean(true);
  reader in4{w.buffer()};
  auto r4 = read_create_topics_request(in4, 4);
  ASSERT_TRUE(in4.ok()) << in4.error();
  EXPECT_TRUE(r4.validate_only);
  writer out;
  write_create_topics_response(out, 4, {named_result{"t", error_code::topic_already_exists,
                                                     std::string{"exists"}}});
  reader ro{out.buffer()};
  EXPECT_EQ(ro.i32("throttle"), 0);
  EXPECT_EQ(ro.array("topics"), 1);
  EXPECT_EQ(ro.string("name"), "t");
  EXPECT_EQ(ro.i16("error"), 36);
  EXPECT_EQ(ro.nullable_string("message"), std::optional<std::string>{"exists"});
  ro.expect_end("create v4");
  EXPECT_TRUE(ro.ok()) << ro.error();
  writer out0;
  write_create_topics_response(out0, 0, {named_result{"t", error_code::none, std::nullopt}});
  reader ro0{out0.buffer()};
  EXPECT_EQ(ro0.array("topics"), 1); // no throttle time, no message in v0
  ro0.string("name");
  ro0.i16("error");
  ro0.expect_end("create v0");
  EXPECT_TRUE(ro0.ok()) << ro0.error();
}

TEST(KafkaAdminProtocol, DeleteTopicsCreatePartitionsAndDeleteRecords) {
  writer d;
  d.array(2);
  d.string("a");
  d.string("b");
  d.i32(1000);
  reader din{d.buffer()};
  auto dr = read_delete_topics_request(din, 3);
  ASSERT_TRUE(din.ok()) << din.error();
  EXPECT_EQ(dr.names, (std::vector<std::string>{"a", "b"}));
  writer dout;
  write_delete_topics_response(dout, 0, {named_result{"a", error_code::none, std::nullopt}});
  reader dro{dout.buffer()};
  EXPECT_EQ(dro.array("responses"), 1); // v0: no throttle time
  dro.string("name");
  dro.i16("error");
  dro.expect_end("delete v0");
  EXPECT_TRUE(dro.ok()) << dro.error();

  writer c;
  c.array(1);
  c.string("t");
  c.i32(6);
  c.array(-1);
  c.i32(1000);
  c.boolean(false);
  reader cin{c.buffer()};
  auto cr = read_create_partitions_request(cin, 1);
  ASSERT_TRUE(cin.ok()) << cin.error();
  EXPECT_EQ(cr.topics[0].count, 6);
  EXPECT_FALSE(cr.topics[0].has_assignments);

  writer r;
  r.array(1);
  r.string("t");
  r.array(1);
  r.i32(2);
  r.i64(-1);
  r.i32(1000);
  reader rin{r.buffer()};
  auto rr = read_delete_records_request(rin, 1);
  ASSERT_TRUE(rin.ok()) << rin.error();
  EXPECT_EQ(rr.topics[0].partitions[0].partition, 2);
  EXPECT_EQ(rr.topics[0].partitions[0].offset, -1);
  rr.topics[0].partitions[0].low_watermark = 9;
  writer rout;
  write_delete_records_response(rout, 1, rr.topics);
  reader rro{rout.buffer()};
  rro.i32("throttle");
  EXPECT_EQ(rro.array("topics"), 1);
  rro.string("name");
  EXPECT_EQ(rro.array("partitions"), 1);
  EXPECT_EQ(rro.i32("partition"), 2);
  EXPECT_EQ(rro.i64("low watermark"), 9);
  EXPECT_EQ(rro.i16("error"), 0);
  rro.expect_end("delete records v1");
  EXPECT_TRUE(rro.ok()) << rro.error();
  // A forged partition count is refused before it allocates.
  writer bad;
  bad.array(1);
  bad.string("t");
  bad.array(100000000);
  reader bin{bad.buffer()};
  read_delete_records_request(bin, 1);
  EXPECT_FALSE(bin.ok());
}

TEST(KafkaAdminProtocol, DescribeAndAlterConfigs) {
  writer d;
  d.array(1);
  d.i8(2);
  d.string("t");
  d.array(-1);
  d.boolean(false);
  reader din{d.buffer()};
  auto dr = read_describe_configs_request(din, 1);
  ASSERT_TRUE(din.ok()) << din.error();
  EXPECT_EQ(dr.resources[0].type, 2);
  EXPECT_FALSE(dr.resources[0].keys);
  describe_configs_result_v res;
  res.type = 2;
  res.name = "t";
  res.configs = {config_entry_v{"retention.ms", std::string{"1000"}, false, false, false}};
  for (int16_t v : {0, 1, 2}) {
    writer out;
    write_describe_configs_response(out, v, {res});
    reader ro{out.buffer()};
    ro.i32("throttle");
    EXPECT_EQ(ro.array("results"), 1);
    EXPECT_EQ(ro.i16("error"), 0);
    ro.nullable_string("message");
    EXPECT_EQ(ro.i8("type"), 2);
    EXPECT_EQ(ro.string("name"), "t");
    EXPECT_EQ(ro.array("configs"), 1);
    EXPECT_EQ(ro.string("key"), "retention.ms");
    EXPECT_EQ(ro.nullable_string("value"), std::optional<std::string>{"1000"});
    ro.boolean("read only");
    if (v == 0) {
      EXPECT_FALSE(ro.boolean("is default"));
    } else {
      EXPECT_EQ(ro.i8("source"), 1); // a topic config
    }
    ro.boolean("sensitive");
    if (v >= 1) {
      EXPECT_EQ(ro.array("synonyms"), 0);
    }
    ro.expect_end("describe configs");
    EXPECT_TRUE(ro.ok()) << v << ": " << ro.error();
  }
  writer a;
  a.array(1);
  a.i8(2);
  a.string("t");
  a.array(1);
  a.string("retention.ms");
  a.nullable_string(std::string{"5"});
  a.boolean(true);
  reader ain{a.buffer()};
  auto ar = read_alter_configs_request(ain, 1);
  ASSERT_TRUE(ain.ok()) << ain.error();
  EXPECT_TRUE(ar.validate_only);
  EXPECT_EQ(ar.resources[0].configs[0].second, std::optional<std::string>{"5"});
  writer aout;
  write_alter_configs_response(
    aout, 1, {alter_configs_result_v{error_code::invalid_config, std::string{"bad"}, 2, "t"}});
  reader aro{aout.buffer()};
  aro.i32("throttle");
  EXPECT_EQ(aro.array("responses"), 1);
  EXPECT_EQ(aro.i16("error"), 40);
  EXPECT_EQ(aro.nullable_string("message"), std::optional<std::string>{"bad"});
  EXPECT_EQ(aro.i8("type"), 2);
  EXPECT_EQ(aro.string("name"), "t");
  aro.expect_end("alter v1");
  EXPECT_TRUE(aro.ok()) << aro.error();
}
