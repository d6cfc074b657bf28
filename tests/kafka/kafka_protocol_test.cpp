// The Kafka wire codec (broker/kafka_protocol.hpp): field layouts per
// version, and that no malformed frame is read past its end or accepted.

#include "broker/kafka_protocol.hpp"

#include <caf/sec.hpp>

#include <gtest/gtest.h>

#include <string>

using namespace ferry;
using namespace ferry::kafka;

namespace {

/// A request frame body (header + body, no size) for `key`/`version`.
writer request(int16_t key, int16_t version, int32_t correlation,
               const char* client = "test") {
  writer w;
  w.i16(key);
  w.i16(version);
  w.i32(correlation);
  w.nullable_string(std::string{client});
  if (flexible_request(key, version))
    w.no_tags();
  return w;
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto c : s) {
    out.push_back(digits[(static_cast<uint8_t>(c) >> 4) & 0xf]);
    out.push_back(digits[static_cast<uint8_t>(c) & 0xf]);
  }
  return out;
}

} // namespace

TEST(KafkaProtocol, PrimitivesAreBigEndianAndVarintsAreProtobufStyle) {
  writer w;
  w.i16(0x0102);
  w.i32(-2);
  w.i64(0x0102030405060708);
  w.uvarint(300);
  w.string("ab");
  w.nullable_string(std::nullopt);
  w.compact_string("c");
  EXPECT_EQ(hex(w.buffer()), "0102fffffffe0102030405060708ac0200026162ffff0263");
  reader r{w.buffer()};
  EXPECT_EQ(r.i16("a"), 0x0102);
  EXPECT_EQ(r.i32("b"), -2);
  EXPECT_EQ(r.i64("c"), 0x0102030405060708);
  EXPECT_EQ(r.uvarint("d"), 300u);
  EXPECT_EQ(r.string("e"), "ab");
  EXPECT_EQ(r.nullable_string("f"), std::nullopt);
  EXPECT_EQ(r.compact_string("g"), "c");
  r.expect_end("end");
  EXPECT_TRUE(r.ok()) << r.error();
}

TEST(KafkaProtocol, AReadPastTheEndFailsAndNamesTheField) {
  std::string two{"\x00\x05", 2};
  reader r{two};
  EXPECT_EQ(r.string("topic name"), "");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("topic name"), std::string::npos) << r.error();
  // The failure sticks: later reads give zeros, the first error stays.
  EXPECT_EQ(r.i32("later"), 0);
  EXPECT_NE(r.error().find("topic name"), std::string::npos);
}

TEST(KafkaProtocol, AnArrayCountBeyondTheBytesLeftFailsBeforeAllocating) {
  writer w;
  w.i32(0x7fffffff);
  w.i32(1);
  reader r{w.buffer()};
  EXPECT_EQ(r.array("partitions", 4), 0);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("cannot fit"), std::string::npos) << r.error();
  writer neg;
  neg.i32(-2);
  reader rn{neg.buffer()};
  rn.array("topics");
  EXPECT_NE(rn.error().find("negative"), std::string::npos) << rn.error();
}

TEST(KafkaProtocol, VarintsLongerThan32BitsAreRefused) {
  std::string six{"\xff\xff\xff\xff\xff\x01", 6};
  reader r{six};
  r.uvarint("count");
  EXPECT_FALSE(r.ok());
  std::string big{"\xff\xff\xff\xff\x1f", 5}; // 35 bits
  reader rb{big};
  rb.uvarint("count");
  EXPECT_FALSE(rb.ok());
  std::string max{"\xff\xff\xff\xff\x0f", 5};
  reader rm{max};
  EXPECT_EQ(rm.uvarint("count"), 0xffffffffu);
  EXPECT_TRUE(rm.ok());
}

TEST(KafkaProtocol, ABooleanOtherThanZeroOrOneIsRefused) {
  std::string two{"\x02", 1};
  reader r{two};
  r.boolean("allow_auto_topic_creation");
  EXPECT_FALSE(r.ok());
}

TEST(KafkaProtocol, HeaderOfAFlexibleApiVersionsRequestSkipsItsTags) {
  auto w = request(18, 3, 7, "rdkafka");
  w.compact_string("librdkafka");
  w.compact_string("2.0.2");
  w.no_tags();
  reader r{w.buffer()};
  auto h = read_request_header(r);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(h.api_key, 18);
  EXPECT_EQ(h.api_version, 3);
  EXPECT_EQ(h.correlation_id, 7);
  EXPECT_EQ(h.client_id, std::optional<std::string>{"rdkafka"});
  EXPECT_EQ(r.compact_string("name"), "librdkafka");
}

TEST(KafkaProtocol, AnUnknownApiOrVersionReadsOnlyTheFixedHeader) {
  auto w = request(24, 1, 9); // AddPartitionsToTxn: not served
  reader r{w.buffer()};
  auto h = read_request_header(r);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(h.correlation_id, 9);
  EXPECT_FALSE(supported(24));
  EXPECT_EQ(r.position(), 8u);
  auto newer = request(0, 9, 10); // Produce v9: flexible, not served
  reader rn{newer.buffer()};
  EXPECT_EQ(read_request_header(rn).api_version, 9);
  EXPECT_EQ(rn.position(), 8u);
}

TEST(KafkaProtocol, ApiVersionsAnswersListEveryServedApi) {
  writer v0;
  begin_response(v0, 42, false);
  write_api_versions_response(v0, 0, error_code::none);
  finish_response(v0);
  reader r{v0.buffer()};
  EXPECT_EQ(r.i32("size"), static_cast<int32_t>(v0.size() - 4));
  EXPECT_EQ(r.i32("correlation"), 42);
  EXPECT_EQ(r.i16("error"), 0);
  auto n = r.array("apis");
  ASSERT_EQ(n, static_cast<int32_t>(supported_apis().size()));
  bool produce = false, fetch = false;
  for (int i = 0; i < n; ++i) {
    auto key = r.i16("key");
    auto lo = r.i16("min");
    auto hi = r.i16("max");
    if (key == 0)
      produce = lo == 3 && hi == 8;
    if (key == 1)
      fetch = lo == 4 && hi == 11;
  }
  r.expect_end("v0");
  EXPECT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(produce);
  EXPECT_TRUE(fetch);
  // v3: compact arrays, tags, throttle time.
  writer v3;
  write_api_versions_response(v3, 3, error_code::none);
  reader r3{v3.buffer()};
  EXPECT_EQ(r3.i16("error"), 0);
  auto n3 = r3.compact_array("apis");
  ASSERT_EQ(n3, n);
  for (int i = 0; i < n3; ++i) {
    r3.i16("key");
    r3.i16("min");
    r3.i16("max");
    r3.tagged_fields("tags");
  }
  EXPECT_EQ(r3.i32("throttle"), 0);
  r3.tagged_fields("tags");
  r3.expect_end("v3");
  EXPECT_TRUE(r3.ok()) << r3.error();
  // Unsupported version: the v0 layout whatever was asked.
  writer un;
  write_api_versions_response(un, 3, error_code::unsupported_version);
  reader ru{un.buffer()};
  EXPECT_EQ(ru.i16("error"), 35);
  EXPECT_EQ(ru.array("apis"), n);
}

TEST(KafkaProtocol, MetadataTopicsNullEmptyAndNamed) {
  writer v0;
  v0.array(0);
  reader r0{v0.buffer()};
  EXPECT_EQ(read_metadata_request(r0, 0).topics, std::nullopt); // v0: all
  writer v1;
  v1.array(0);
  reader r1{v1.buffer()};
  auto none = read_metadata_request(r1, 1);
  ASSERT_TRUE(none.topics);
  EXPECT_TRUE(none.topics->empty()); // v1+: none
  writer v4;
  v4.array(-1);
  v4.boolean(false);
  reader r4{v4.buffer()};
  auto all = read_metadata_request(r4, 4);
  EXPECT_EQ(all.topics, std::nullopt);
  EXPECT_FALSE(all.allow_auto_topic_creation);
  writer v8;
  v8.array(1);
  v8.string("events");
  v8.boolean(true);
  v8.boolean(false);
  v8.boolean(false);
  reader r8{v8.buffer()};
  auto named = read_metadata_request(r8, 8);
  ASSERT_TRUE(r8.ok()) << r8.error();
  EXPECT_EQ(named.topics, (std::vector<std::string>{"events"}));
  // The v8 fields missing at v8: refused.
  writer short8;
  short8.array(-1);
  short8.boolean(true);
  reader rs{short8.buffer()};
  read_metadata_request(rs, 8);
  EXPECT_FALSE(rs.ok());
}

TEST(KafkaProtocol, MetadataResponseFieldsFollowTheVersion) {
  metadata_response m;
  m.brokers.push_back({1, "h", 19092});
  m.controller_id = 1;
  metadata_topic t;
  t.name = "events";
  metadata_partition p;
  p.partition = 0;
  p.leader = 1;
  p.leader_epoch = 3;
  p.replicas = {1, 2};
  p.isr = {1};
  t.partitions.push_back(p);
  m.topics.push_back(t);
  auto size_at = [&](int16_t v) {
    writer w;
    write_metadata_response(w, v, m);
    return w.size();
  };
  // v0 -> v1: rack (2), controller (4), is_internal (1).
  EXPECT_EQ(size_at(1) - size_at(0), 7u);
  EXPECT_EQ(size_at(2) - size_at(1), 2u); // cluster id (null)
  EXPECT_EQ(size_at(3) - size_at(2), 4u); // throttle
  EXPECT_EQ(size_at(5) - size_at(4), 4u); // offline replicas (empty)
  EXPECT_EQ(size_at(7) - size_at(6), 4u); // leader epoch
  EXPECT_EQ(size_at(8) - size_at(7), 8u); // authorized operations x2
  writer w;
  write_metadata_response(w, 7, m);
  reader r{w.buffer()};
  EXPECT_EQ(r.i32("throttle"), 0);
  EXPECT_EQ(r.array("brokers"), 1);
  EXPECT_EQ(r.i32("node"), 1);
  EXPECT_EQ(r.string("host"), "h");
  EXPECT_EQ(r.i32("port"), 19092);
  EXPECT_EQ(r.nullable_string("rack"), std::nullopt);
  EXPECT_EQ(r.nullable_string("cluster"), std::nullopt);
  EXPECT_EQ(r.i32("controller"), 1);
  EXPECT_EQ(r.array("topics"), 1);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.string("name"), "events");
  EXPECT_FALSE(r.boolean("internal"));
  EXPECT_EQ(r.array("partitions"), 1);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.i32("index"), 0);
  EXPECT_EQ(r.i32("leader"), 1);
  EXPECT_EQ(r.i32("epoch"), 3);
  EXPECT_EQ(r.array("replicas"), 2);
}

TEST(KafkaProtocol, ProduceRequestKeepsEachPartitionsRecordBytes) {
  writer w;
  w.nullable_string(std::nullopt);
  w.i16(-1);
  w.i32(30000);
  w.array(1);
  w.string("events");
  w.array(2);
  w.i32(0);
  w.bytes("batch-zero");
  w.i32(2);
  w.null_bytes();
  reader r{w.buffer()};
  auto req = read_produce_request(r, 7);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(req.acks, -1);
  EXPECT_EQ(req.timeout_ms, 30000);
  ASSERT_EQ(req.topics.size(), 1u);
  ASSERT_EQ(req.topics[0].partitions.size(), 2u);
  EXPECT_EQ(req.topics[0].partitions[0].records,
            std::optional<std::string_view>{"batch-zero"});
  EXPECT_EQ(req.topics[0].partitions[1].partition, 2);
  EXPECT_EQ(req.topics[0].partitions[1].records, std::nullopt);
}

TEST(KafkaProtocol, ProduceRequestWithBadLengthsIsRefused) {
  // Records longer than the frame.
  writer w;
  w.nullable_string(std::nullopt);
  w.i16(1);
  w.i32(0);
  w.array(1);
  w.string("t");
  w.array(1);
  w.i32(0);
  w.i32(1000);
  w.buffer().append("short");
  reader r{w.buffer()};
  read_produce_request(r, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("produce records"), std::string::npos) << r.error();
  // Bytes after the body.
  writer extra;
  extra.nullable_string(std::nullopt);
  extra.i16(1);
  extra.i32(0);
  extra.array(0);
  extra.i8(0);
  reader re{extra.buffer()};
  read_produce_request(re, 3);
  EXPECT_NE(re.error().find("left over"), std::string::npos) << re.error();
  // Every prefix of a valid request fails cleanly.
  writer ok;
  ok.nullable_string(std::nullopt);
  ok.i16(1);
  ok.i32(0);
  ok.array(1);
  ok.string("events");
  ok.array(1);
  ok.i32(0);
  ok.bytes("abc");
  for (size_t n = 0; n < ok.size(); ++n) {
    reader rp{std::string_view{ok.buffer()}.substr(0, n)};
    read_produce_request(rp, 3);
    EXPECT_FALSE(rp.ok()) << "prefix of " << n << " bytes";
  }
}

TEST(KafkaProtocol, ProduceResponseFieldsFollowTheVersion) {
  produce_partition_response p;
  p.partition = 1;
  p.base_offset = 5;
  p.log_start_offset = 0;
  p.error_message = std::string{"x"};
  std::vector<produce_topic_response> ts{{"t", {p}}};
  auto size_at = [&](int16_t v) {
    writer w;
    write_produce_response(w, v, ts);
    return w.size();
  };
  EXPECT_EQ(size_at(5) - size_at(4), 8u); // log_start_offset
  EXPECT_EQ(size_at(8) - size_at(7), 4u + 3u); // record_errors + message
  writer w;
  write_produce_response(w, 5, ts);
  reader r{w.buffer()};
  EXPECT_EQ(r.array("topics"), 1);
  EXPECT_EQ(r.string("name"), "t");
  EXPECT_EQ(r.array("partitions"), 1);
  EXPECT_EQ(r.i32("index"), 1);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.i64("base"), 5);
  EXPECT_EQ(r.i64("append time"), -1);
  EXPECT_EQ(r.i64("log start"), 0);
  EXPECT_EQ(r.i32("throttle"), 0);
  r.expect_end("produce response");
  EXPECT_TRUE(r.ok()) << r.error();
}

TEST(KafkaProtocol, FetchRequestV11ReadsSessionsForgottenTopicsAndRack) {
  writer w;
  w.i32(-1);
  w.i32(500);
  w.i32(1);
  w.i32(52428800);
  w.i8(0);
  w.i32(0);
  w.i32(-1);
  w.array(1);
  w.string("events");
  w.array(1);
  w.i32(2);
  w.i32(-1); // current leader epoch (v9+)
  w.i64(17);
  w.i64(-1); // log start (v5+)
  w.i32(1048576);
  w.array(1); // forgotten
  w.string("old");
  w.array(1);
  w.i32(0);
  w.string(""); // rack
  reader r{w.buffer()};
  auto req = read_fetch_request(r, 11);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(req.max_wait_ms, 500);
  EXPECT_EQ(req.session_epoch, -1);
  ASSERT_EQ(req.topics.size(), 1u);
  EXPECT_EQ(req.topics[0].partitions[0].partition, 2);
  EXPECT_EQ(req.topics[0].partitions[0].fetch_offset, 17);
  EXPECT_EQ(req.topics[0].partitions[0].partition_max_bytes, 1048576);
  // The same bytes read as v4 leave bytes over: refused.
  reader r4{w.buffer()};
  read_fetch_request(r4, 4);
  EXPECT_FALSE(r4.ok());
}

TEST(KafkaProtocol, FetchResponseCarriesRecordsAndNoAbortedTransactions) {
  fetch_response_v x;
  fetch_topic_resp t;
  t.name = "events";
  fetch_partition_resp p;
  p.partition = 0;
  p.high_watermark = 3;
  p.last_stable_offset = 3;
  p.log_start_offset = 0;
  p.records = "BATCH";
  t.partitions.push_back(p);
  x.topics.push_back(t);
  writer w;
  write_fetch_response(w, 11, x);
  reader r{w.buffer()};
  EXPECT_EQ(r.i32("throttle"), 0);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.i32("session"), 0);
  EXPECT_EQ(r.array("topics"), 1);
  EXPECT_EQ(r.string("name"), "events");
  EXPECT_EQ(r.array("partitions"), 1);
  EXPECT_EQ(r.i32("index"), 0);
  EXPECT_EQ(r.i16("error"), 0);
  EXPECT_EQ(r.i64("hw"), 3);
  EXPECT_EQ(r.i64("lso"), 3);
  EXPECT_EQ(r.i64("log start"), 0);
  EXPECT_EQ(r.array("aborted"), -1);
  EXPECT_EQ(r.i32("preferred replica"), -1);
  EXPECT_EQ(r.nullable_bytes("records"), std::optional<std::string_view>{"BATCH"});
  r.expect_end("fetch response");
  EXPECT_TRUE(r.ok()) << r.error();
  writer w4;
  write_fetch_response(w4, 4, x);
  // v4 lacks error+session (6), log start (8) and preferred replica (4).
  EXPECT_EQ(w.size() - w4.size(), 18u);
}

TEST(KafkaProtocol, ListOffsetsRequestAndResponse) {
  writer w;
  w.i32(-1);
  w.i8(0);
  w.array(1);
  w.string("events");
  w.array(1);
  w.i32(0);
  w.i32(-1); // current leader epoch (v4+)
  w.i64(-2);
  reader r{w.buffer()};
  auto req = read_list_offsets_request(r, 4);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(req.topics[0].partitions[0].timestamp, -2);
  reader r1{w.buffer()};
  read_list_offsets_request(r1, 1); // v1 has no isolation level or epoch
  EXPECT_FALSE(r1.ok());
  std::vector<list_offsets_topic_resp> ts{{"events", {{0, error_code::none, -1, 42, -1}}}};
  writer o1, o4;
  write_list_offsets_response(o1, 1, ts);
  write_list_offsets_response(o4, 4, ts);
  EXPECT_EQ(o4.size() - o1.size(), 8u); // throttle + leader epoch
  reader ro{o1.buffer()};
  ro.array("topics");
  ro.string("name");
  ro.array("partitions");
  ro.i32("index");
  ro.i16("error");
  ro.i64("timestamp");
  EXPECT_EQ(ro.i64("offset"), 42);
}

TEST(KafkaProtocol, FerryErrorsMapToKafkaCodes) {
  EXPECT_EQ(to_kafka(caf::error{}), error_code::none);
  EXPECT_EQ(to_kafka(make_error(ec::unknown_topic)),
            error_code::unknown_topic_or_partition);
  EXPECT_EQ(to_kafka(make_error(ec::crc_mismatch)), error_code::corrupt_message);
  EXPECT_EQ(to_kafka(make_error(ec::message_too_large)),
            error_code::message_too_large);
  EXPECT_EQ(to_kafka(make_error(ec::not_leader)),
            error_code::not_leader_or_follower);
  EXPECT_EQ(to_kafka(make_error(ec::not_enough_replicas)),
            error_code::not_enough_replicas);
  EXPECT_EQ(to_kafka(make_error(ec::disk_full)), error_code::kafka_storage_error);
  EXPECT_EQ(to_kafka(make_error(ec::out_of_order_sequence)),
            error_code::out_of_order_sequence_number);
  EXPECT_EQ(to_kafka(make_error(ec::offset_out_of_range)),
            error_code::offset_out_of_range);
  EXPECT_EQ(to_kafka(caf::make_error(caf::sec::request_timeout)),
            error_code::request_timed_out);
  EXPECT_EQ(to_kafka(caf::make_error(caf::sec::invalid_argument)),
            error_code::unknown_server_error);
}

TEST(KafkaProtocol, UnsupportedAnswerIsCorrelationIdAndErrorCode) {
  writer w;
  write_unsupported_response(w, 1234);
  EXPECT_EQ(hex(w.buffer()), "00000006000004d20023");
}

TEST(KafkaProtocol, InitProducerIdV0AndV1) {
  writer w;
  w.nullable_string(std::nullopt);
  w.i32(60000);
  reader r{w.buffer()};
  auto req = read_init_producer_id_request(r, 1);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(req.transactional_id, std::nullopt);
  EXPECT_EQ(req.transaction_timeout_ms, 60000);
  writer out;
  write_init_producer_id_response(out, 0, error_code::none, 1234, 0);
  EXPECT_EQ(hex(out.buffer()), "00000000" "0000" "00000000000004d2" "0000");
  EXPECT_TRUE(supported(22));
  EXPECT_FALSE(flexible_request(22, 1));
  EXPECT_TRUE(flexible_request(22, 2));
}

TEST(KafkaProtocol, SaslHandshakeAndAuthenticateV0AndV1) {
  writer w;
  w.string("SCRAM-SHA-256");
  reader r{w.buffer()};
  EXPECT_EQ(read_sasl_handshake_request(r, 1), "SCRAM-SHA-256");
  EXPECT_TRUE(r.ok()) << r.error();
  writer hs;
  write_sasl_handshake_response(hs, 1, error_code::unsupported_sasl_mechanism, {"PLAIN"});
  EXPECT_EQ(hex(hs.buffer()), "0021" "00000001" "0005" "504c41494e");
  writer a;
  a.bytes(std::string{"\0u\0p", 4});
  reader ar{a.buffer()};
  EXPECT_EQ(read_sasl_authenticate_request(ar, 0), std::string("\0u\0p", 4));
  EXPECT_TRUE(ar.ok()) << ar.error();
  // A null token, or bytes left over, fail the read.
  writer null_token;
  null_token.i32(-1);
  reader nr{null_token.buffer()};
  read_sasl_authenticate_request(nr, 1);
  EXPECT_FALSE(nr.ok());
  writer extra;
  extra.bytes("x");
  extra.i8(0);
  reader er{extra.buffer()};
  read_sasl_authenticate_request(er, 1);
  EXPECT_FALSE(er.ok());
  // v0 has no session lifetime; v1 does.
  writer v0, v1;
  write_sasl_authenticate_response(v0, 0, error_code::none, std::nullopt, "v=x", 0);
  write_sasl_authenticate_response(v1, 1, error_code::sasl_authentication_failed,
                                   std::string{"no"}, "", 0);
  EXPECT_EQ(hex(v0.buffer()), "0000" "ffff" "00000003" "763d78");
  EXPECT_EQ(hex(v1.buffer()), "003a" "0002" "6e6f" "00000000" "0000000000000000");
  EXPECT_TRUE(supported(17));
  EXPECT_TRUE(supported(36));
  EXPECT_FALSE(flexible_request(36, 1));
  EXPECT_TRUE(flexible_request(36, 2));
}

TEST(KafkaProtocol, OffsetForLeaderEpochV0ToV3) {
  // v3: replica id, then current leader epoch (v2+) and the epoch asked.
  writer w;
  w.i32(-1);
  w.array(1);
  w.string("events");
  w.array(1);
  w.i32(2);
  w.i32(7);
  w.i32(5);
  reader r{w.buffer()};
  auto req = read_offset_for_leader_epoch_request(r, 3);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(req.replica_id, -1);
  ASSERT_EQ(req.topics.size(), 1u);
  ASSERT_EQ(req.topics[0].partitions.size(), 1u);
  EXPECT_EQ(req.topics[0].partitions[0].partition, 2);
  EXPECT_EQ(req.topics[0].partitions[0].current_leader_epoch, 7);
  EXPECT_EQ(req.topics[0].partitions[0].leader_epoch, 5);
  // v0: no replica id, no current leader epoch.
  writer w0;
  w0.array(1);
  w0.string("t");
  w0.array(1);
  w0.i32(0);
  w0.i32(3);
  reader r0{w0.buffer()};
  auto req0 = read_offset_for_leader_epoch_request(r0, 0);
  ASSERT_TRUE(r0.ok()) << r0.error();
  EXPECT_EQ(req0.topics[0].partitions[0].current_leader_epoch, -1);
  EXPECT_EQ(req0.topics[0].partitions[0].leader_epoch, 3);
  // Read as v3, the v0 body is too short.
  reader bad{w0.buffer()};
  read_offset_for_leader_epoch_request(bad, 3);
  EXPECT_FALSE(bad.ok());
  std::vector<epoch_topic_resp> topics{{"t", {{error_code::none, 0, 3, 42}}}};
  writer v0, v2;
  write_offset_for_leader_epoch_response(v0, 0, topics);
  write_offset_for_leader_epoch_response(v2, 2, topics);
  EXPECT_EQ(hex(v0.buffer()), "00000001" "000174" "00000001" "0000" "00000000"
                              "000000000000002a");
  EXPECT_EQ(hex(v2.buffer()), "00000000" "00000001" "000174" "00000001" "0000" "00000000"
                              "00000003" "000000000000002a");
  EXPECT_TRUE(supported(23));
  EXPECT_FALSE(flexible_request(23, 3));
}

TEST(KafkaProtocol, AFetchAnswerWithMovedRecordsIsTheSameBytesInParts) {
  // Two partitions: one with a large batch (sent as its own part), one with
  // a small one (copied into the frame); the size prefix covers all parts.
  fetch_response_v x;
  fetch_topic_resp t;
  t.name = "events";
  for (int i = 0; i < 2; ++i) {
    fetch_partition_resp p;
    p.partition = i;
    p.high_watermark = 7;
    p.records = i == 0 ? std::string(10000, 'b') : std::string{"tiny"};
    t.partitions.push_back(p);
  }
  x.topics.push_back(t);
  writer copied;
  begin_response(copied, 42, false);
  write_fetch_response(copied, 11, x);
  finish_response(copied);
  writer moved;
  begin_response(moved, 42, false);
  auto y = x;
  write_fetch_response(moved, 11, std::move(y));
  finish_response(moved);
  EXPECT_EQ(moved.size(), copied.size());
  auto parts = moved.take_chunks();
  ASSERT_EQ(parts.size(), 3u); // header .. length, the big batch, the rest
  EXPECT_EQ(parts[1], std::string(10000, 'b'));
  std::string joined;
  for (auto& p : parts)
    joined += p;
  EXPECT_EQ(joined, copied.buffer());
  EXPECT_TRUE(y.topics[0].partitions[0].records.empty());
  EXPECT_EQ(moved.size(), 0u);
  // Without moved bytes there is one chunk, the whole frame.
  auto whole = copied.buffer();
  auto one = copied.take_chunks();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], whole);
}
