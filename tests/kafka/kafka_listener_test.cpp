// The Kafka listener across real processes: ferryd --kafka-port with real
// Kafka clients (kcat 1.7 / librdkafka 2.0, kafka-python 2.0 from Debian),
// ferryctl on the CAF port beside them, and a raw socket for the bad input a
// client library never sends. Every ferryd is SIGKILLed by its destructor.

#include "integration/cluster_harness.hpp"
#include "integration/ferryctl_run.hpp"
#include "integration/process.hpp"

#include "broker/kafka_protocol.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace std::chrono_literals;
using namespace ferry;
using namespace ferry::test;

namespace {

const char* kcat_path() {
  return "/usr/bin/kcat";
}

/// kcat exists (deploy/install-deps.sh installs it); a missing one fails
/// the test with that hint rather than skipping it.
bool have_kcat() {
  return std::filesystem::exists(kcat_path());
}

/// A blocking Kafka connection for hand-made requests (5 s socket timeouts).
class raw_client {
public:
  explicit raw_client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~raw_client() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool send_raw(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  /// Sends header + body as one frame.
  bool send(int16_t key, int16_t version, int32_t correlation, const std::string& body) {
    kafka::writer w;
    w.i32(0);
    w.i16(key);
    w.i16(version);
    w.i32(correlation);
    w.nullable_string(std::string{"raw-test"});
    if (kafka::flexible_request(key, version))
      w.no_tags();
    w.buffer() += body;
    w.patch_i32(0, static_cast<int32_t>(w.size() - 4));
    return send_raw(w.buffer());
  }

  /// One response frame (without its size); nullopt when the connection
  /// ended (or nothing came within the timeout).
  std::optional<std::string> receive() {
    std::string size(4, '\0');
    if (!read_exact(size))
      return std::nullopt;
    kafka::reader r{size};
    auto n = r.i32("size");
    if (n < 0 || n > (64 << 20))
      return std::nullopt;
    std::string frame(static_cast<size_t>(n), '\0');
    if (!read_exact(frame))
      return std::nullopt;
    return frame;
  }

  /// True if the peer closed the connection (reads EOF or a reset).
  bool closed_by_peer() {
    char c;
    auto n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

private:
  bool read_exact(std::string& buf) {
    size_t done = 0;
    while (done < buf.size()) {
      auto n = ::recv(fd_, buf.data() + done, buf.size() - done, 0);
      if (n <= 0)
        return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
};

std::string produce_body(const std::string& topic, int32_t partition, int16_t acks,
                         const std::optional<std::string>& records) {
  kafka::writer w;
  w.nullable_string(std::nullopt);
  w.i16(acks);
  w.i32(10000);
  w.array(1);
  w.string(topic);
  w.array(1);
  w.i32(partition);
  if (records)
    w.bytes(*records);
  else
    w.null_bytes();
  return w.buffer();
}

std::string batch_of(std::vector<std::pair<std::string, std::string>> kvs) {
  std::vector<record> recs;
  int32_t i = 0;
  for (auto& [k, v] : kvs) {
    record r;
    r.offset_delta = i++;
    r.timestamp = 1700000000000;
    r.key = k;
    r.value = v;
    recs.push_back(std::move(r));
  }
  batch_meta meta;
  auto b = encode_batch(meta, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

struct produce_answer {
  int32_t correlation = 0;
  int16_t error = -100;
  int64_t base_offset = -1;
  std::optional<std::string> message;
};

/// Reads a Produce v8 answer for one partition.
produce_answer read_produce_v8(const std::string& frame) {
  kafka::reader r{frame};
  produce_answer a;
  a.correlation = r.i32("correlation");
  r.array("topics");
  r.string("name");
  r.array("partitions");
  r.i32("index");
  a.error = r.i16("error");
  a.base_offset = r.i64("base");
  r.i64("append time");
  r.i64("log start");
  r.array("record errors");
  a.message = r.nullable_string("message");
  r.i32("throttle");
  r.expect_end("produce response");
  EXPECT_TRUE(r.ok()) << r.error();
  return a;
}

struct fetch_answer {
  int32_t correlation = 0;
  int16_t error = -100;
  int64_t high_watermark = -1;
  std::vector<log_record> records;
};

std::string fetch_body(const std::string& topic, int32_t partition, int64_t from,
                       int32_t max_wait_ms) {
  kafka::writer w;
  w.i32(-1);
  w.i32(max_wait_ms);
  w.i32(1);
  w.i32(1 << 20);
  w.i8(0);
  w.i32(0);
  w.i32(-1);
  w.array(1);
  w.string(topic);
  w.array(1);
  w.i32(partition);
  w.i32(-1);
  w.i64(from);
  w.i64(-1);
  w.i32(1 << 20);
  w.array(0);
  w.string("");
  return w.buffer();
}

/// Reads a Fetch v11 answer for one partition.
fetch_answer read_fetch_v11(const std::string& frame, int64_t from) {
  kafka::reader r{frame};
  fetch_answer a;
  a.correlation = r.i32("correlation");
  r.i32("throttle");
  r.i16("top error");
  r.i32("session");
  r.array("topics");
  r.string("name");
  r.array("partitions");
  r.i32("index");
  a.error = r.i16("error");
  a.high_watermark = r.i64("hw");
  r.i64("lso");
  r.i64("log start");
  r.array("aborted");
  r.i32("preferred");
  auto recs = r.nullable_bytes("records");
  r.expect_end("fetch response");
  EXPECT_TRUE(r.ok()) << r.error();
  if (recs && !recs->empty()) {
    std::string why;
    EXPECT_TRUE(decode_batches(*recs, from, a.records, why)) << why;
  }
  return a;
}

class KafkaListener : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(node.start()) << node.output();
    ASSERT_NE(node.kafka_port(), 0) << node.output();
    kafka = "127.0.0.1:" + std::to_string(node.kafka_port());
    auto r = ferryctl(node.endpoint(), {"topic", "create", "events", "--partitions", "3"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  ferryd_process node{{"--kafka-port", "0", "--http-port", "-1"}};
  std::string kafka;
};

} // namespace

TEST_F(KafkaListener, KcatProducesAndConsumesWhatFerryClientsSee) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  // Metadata: one broker, the topic, its three partitions led by node 0.
  auto md = run_command(kcat_path(), {"-b", kafka, "-L", "-t", "events"}, 30s);
  ASSERT_EQ(md.exit_code, 0) << md.out << md.err;
  EXPECT_NE(md.out.find("broker 0 at 127.0.0.1:" + std::to_string(node.kafka_port())),
            std::string::npos) << md.out;
  EXPECT_NE(md.out.find("topic \"events\" with 3 partitions"), std::string::npos) << md.out;
  // kcat produces keyed records (the murmur2 partitioner, as Ferry's own
  // clients use), one with a header, gzip and zstd batches too.
  auto p1 = run_command(kcat_path(),
                        {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                         "partitioner=murmur2_random", "-H", "trace=abc"},
                        30s, "k1:one\nk2:two\nk3:three\n");
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  for (auto codec : {"gzip", "zstd", "lz4", "snappy"}) {
    auto pz = run_command(kcat_path(),
                          {"-b", kafka, "-t", "events", "-P", "-K:", "-z", codec, "-X",
                           "partitioner=murmur2_random"},
                          30s, std::string{"z-"} + codec + ":" + codec + "-value\n");
    ASSERT_EQ(pz.exit_code, 0) << codec << ": " << pz.err;
  }
  // ferryctl (CAF port) reads what kcat wrote, with the header.
  auto c1 = ferryctl(node.endpoint(), {"consume", "events", "--from-beginning", "--max", "7",
                                       "--timeout", "5000", "--format", "key,value,headers"});
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  for (auto line : {"k1\tone\ttrace=abc", "k2\ttwo\ttrace=abc", "k3\tthree\ttrace=abc",
                    "z-gzip\tgzip-value", "z-zstd\tzstd-value", "z-lz4\tlz4-value",
                    "z-snappy\tsnappy-value"})
    EXPECT_NE(c1.out.find(line), std::string::npos) << line << " in\n" << c1.out;
  // ferryctl writes; kcat reads everything back, each key in the partition
  // Ferry's partitioner picks for it.
  auto p2 = ferryctl(node.endpoint(), {"produce", "events", "--key-separator", ":"},
                     "k1:from-ferryctl\n");
  ASSERT_EQ(p2.exit_code, 0) << p2.err;
  auto c2 = run_command(kcat_path(),
                        {"-b", kafka, "-t", "events", "-C", "-e", "-f", "%p|%k|%s\n"}, 30s);
  ASSERT_EQ(c2.exit_code, 0) << c2.err;
  std::map<std::string, std::set<std::string>> partitions_of;
  std::istringstream lines{c2.out};
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    auto a = line.find('|'), b = line.rfind('|');
    if (a == std::string::npos || a == b)
      continue;
    ++n;
    partitions_of[line.substr(a + 1, b - a - 1)].insert(line.substr(0, a));
  }
  EXPECT_EQ(n, 8) << c2.out;
  ASSERT_EQ(partitions_of["k1"].size(), 1u) << "k1 went to two partitions:\n" << c2.out;
  EXPECT_NE(c2.out.find("|k1|from-ferryctl"), std::string::npos) << c2.out;
}

TEST_F(KafkaListener, KafkaPythonProducesWithAcksAllAndReadsBack) {
  auto script = std::filesystem::path{FERRY_SOURCE_DIR} / "tests/kafka/kafka_python_check.py";
  auto r = run_command("/usr/bin/python3", {script.string(), kafka, "events", "200"}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("acked 200"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("consumed 200"), std::string::npos) << r.out;
  // The same records through the CAF port.
  auto c = ferryctl(node.endpoint(), {"consume", "events", "--from-beginning", "--max", "200",
                                      "--timeout", "5000", "--format", "value"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(std::count(c.out.begin(), c.out.end(), '\n'), 200) << c.out;
}

TEST_F(KafkaListener, AnIdempotentKcatProducerGetsAProducerIdItsBatchesCarry) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  std::string input;
  for (int i = 0; i < 50; ++i)
    input += "same-key:v" + std::to_string(i) + "\n";
  auto p = run_command(kcat_path(),
                       {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                        "enable.idempotence=true", "-X", "partitioner=murmur2_random"},
                       30s, input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  // Every record of the key, in order, from one producer id with
  // consecutive sequences (the broker deduplicates by them).
  std::vector<log_record> recs;
  for (int32_t part = 0; part < 3; ++part) {
    raw_client c{node.kafka_port()};
    ASSERT_TRUE(c.send(1, 11, 1, fetch_body("events", part, 0, 0)));
    auto f = c.receive();
    ASSERT_TRUE(f);
    for (auto& r : read_fetch_v11(*f, 0).records)
      recs.push_back(r);
  }
  ASSERT_EQ(recs.size(), 50u);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].value, "v" + std::to_string(i));
    EXPECT_GE(recs[i].producer_id, 0);
    EXPECT_EQ(recs[i].producer_id, recs[0].producer_id);
    EXPECT_EQ(recs[i].sequence, static_cast<int32_t>(i));
  }
}

TEST_F(KafkaListener, AnUnknownApiGetsUnsupportedVersionAndTheConnectionStaysOpen) {
  raw_client c{node.kafka_port()};
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(11, 6, 77, "")); // JoinGroup v6 (flexible): not served
  auto a = c.receive();
  ASSERT_TRUE(a);
  kafka::reader r{*a};
  EXPECT_EQ(r.i32("correlation"), 77);
  EXPECT_EQ(r.i16("error"), 35);
  // ApiVersions newer than Ferry knows: error 35 with the v0 list.
  ASSERT_TRUE(c.send(18, 9, 78, "garbage-the-broker-cannot-know"));
  auto b = c.receive();
  ASSERT_TRUE(b);
  kafka::reader rb{*b};
  EXPECT_EQ(rb.i32("correlation"), 78);
  EXPECT_EQ(rb.i16("error"), 35);
  EXPECT_EQ(rb.array("apis"), static_cast<int32_t>(kafka::supported_apis().size()));
  // And the connection still serves.
  ASSERT_TRUE(c.send(18, 0, 79, ""));
  auto v = c.receive();
  ASSERT_TRUE(v);
  kafka::reader rv{*v};
  EXPECT_EQ(rv.i32("correlation"), 79);
  EXPECT_EQ(rv.i16("error"), 0);
  // A served API whose body does not decode (a JoinGroup v5 cut short)
  // closes the connection, as Kafka does; the node serves on.
  ASSERT_TRUE(c.send(11, 5, 80, std::string{"\x00\x03grp\x00\x00", 7}));
  EXPECT_FALSE(c.receive());
  raw_client again{node.kafka_port()};
  ASSERT_TRUE(again.connected());
  ASSERT_TRUE(again.send(18, 0, 81, ""));
  EXPECT_TRUE(again.receive());
}

TEST_F(KafkaListener, FramesTooLargeTooShortOrTruncatedCloseTheConnection) {
  {
    raw_client c{node.kafka_port()};
    ASSERT_TRUE(c.send_raw(std::string{"\x7f\xff\xff\xff", 4}));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    raw_client c{node.kafka_port()};
    ASSERT_TRUE(c.send_raw(std::string{"\x00\x00\x00\x02\x00\x00", 6}));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // A Produce whose records claim more bytes than the frame holds.
    raw_client c{node.kafka_port()};
    auto body = produce_body("events", 0, -1, std::string{"abc"});
    body.resize(body.size() - 2);
    ASSERT_TRUE(c.send(0, 8, 1, body));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // The frame ends before its announced size.
    raw_client c{node.kafka_port()};
    ASSERT_TRUE(c.send_raw(std::string{"\x00\x00\x01\x00\x00\x12\x00\x00", 8}));
  } // closed here, inside the frame
  // The node serves on.
  raw_client c{node.kafka_port()};
  ASSERT_TRUE(c.send(18, 0, 5, ""));
  auto a = c.receive();
  ASSERT_TRUE(a);
  EXPECT_TRUE(node.running());
}

TEST_F(KafkaListener, BadBatchesAndBadTargetsGetKafkaErrorCodes) {
  raw_client c{node.kafka_port()};
  auto good = batch_of({{"k", "v"}});
  auto ask = [&](int32_t corr, const std::string& topic, int32_t partition, int16_t acks,
                 std::optional<std::string> recs) {
    EXPECT_TRUE(c.send(0, 8, corr, produce_body(topic, partition, acks, recs)));
    auto f = c.receive();
    EXPECT_TRUE(f);
    return f ? read_produce_v8(*f) : produce_answer{};
  };
  auto corrupt = good;
  corrupt.back() ^= 0x55; // breaks the CRC
  EXPECT_EQ(ask(1, "events", 0, -1, corrupt).error, 2);       // CORRUPT_MESSAGE
  EXPECT_EQ(ask(2, "nosuch", 0, -1, good).error, 3);          // UNKNOWN_TOPIC_OR_PARTITION
  EXPECT_EQ(ask(3, "events", 9, -1, good).error, 3);
  EXPECT_EQ(ask(4, "events", 0, 5, good).error, 21);          // INVALID_REQUIRED_ACKS
  EXPECT_EQ(ask(5, "events", 0, -1, std::nullopt).error, 42); // INVALID_REQUEST
  auto big = batch_of({{"k", std::string((1 << 20) + 10, 'x')}});
  auto too_large = ask(6, "events", 0, -1, big);
  EXPECT_EQ(too_large.error, 10) << too_large.message.value_or(""); // MESSAGE_TOO_LARGE
  EXPECT_TRUE(too_large.message);
  // Nothing of that was written; a good batch lands at offset 0.
  auto ok = ask(7, "events", 0, -1, good);
  EXPECT_EQ(ok.correlation, 7);
  EXPECT_EQ(ok.error, 0);
  EXPECT_EQ(ok.base_offset, 0);
  // A fetch past the end: OFFSET_OUT_OF_RANGE.
  ASSERT_TRUE(c.send(1, 11, 8, fetch_body("events", 0, 50, 0)));
  auto f = c.receive();
  ASSERT_TRUE(f);
  EXPECT_EQ(read_fetch_v11(*f, 50).error, 1);
}

TEST_F(KafkaListener, AcksZeroIsWrittenWithoutAnAnswerAndAnswersKeepRequestOrder) {
  raw_client c{node.kafka_port()};
  // Pipelined: a long-polling fetch, an acks=0 produce, an acks=all one.
  ASSERT_TRUE(c.send(1, 11, 10, fetch_body("events", 1, 0, 500)));
  ASSERT_TRUE(c.send(0, 8, 11, produce_body("events", 1, 0, batch_of({{"a", "zero"}}))));
  ASSERT_TRUE(c.send(0, 8, 12, produce_body("events", 1, -1, batch_of({{"b", "all"}}))));
  auto first = c.receive();
  ASSERT_TRUE(first);
  auto fetched = read_fetch_v11(*first, 0);
  EXPECT_EQ(fetched.correlation, 10); // the fetch, asked first, answers first
  auto second = c.receive();
  ASSERT_TRUE(second);
  auto acked = read_produce_v8(*second);
  EXPECT_EQ(acked.correlation, 12); // acks=0 has no answer
  EXPECT_EQ(acked.error, 0);
  EXPECT_EQ(acked.base_offset, 1); // after the acks=0 record
  ASSERT_TRUE(c.send(1, 11, 13, fetch_body("events", 1, 0, 0)));
  auto all = c.receive();
  ASSERT_TRUE(all);
  auto got = read_fetch_v11(*all, 0);
  EXPECT_EQ(got.high_watermark, 2);
  ASSERT_EQ(got.records.size(), 2u);
  EXPECT_EQ(got.records[0].value, "zero");
  EXPECT_EQ(got.records[1].value, "all");
}

TEST_F(KafkaListener, ALongPollFetchIsAnsweredByAProduceFromAnotherClient) {
  raw_client waiter{node.kafka_port()};
  // Waits up to 20 s at the end of partition 2.
  ASSERT_TRUE(waiter.send(1, 11, 1, fetch_body("events", 2, 0, 20000)));
  std::this_thread::sleep_for(300ms);
  auto p = ferryctl(node.endpoint(), {"produce", "events", "--partition", "2"},
                    "wake-up\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto a = waiter.receive();
  ASSERT_TRUE(a);
  auto got = read_fetch_v11(*a, 0);
  // Had the long poll not been woken, it would have ended empty.
  ASSERT_EQ(got.records.size(), 1u);
  EXPECT_EQ(got.records[0].value, "wake-up");
}

TEST(KafkaListenerOptions, RefusedOffLoopbackWithoutTlsOrInsecure) {
  temp_dir dir{"kafka-opts"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--data-dir", (dir.path() / "d").string(), "--port", "0",
                                  "--metrics-port", "-1", "--http-port", "-1",
                                  "--kafka-port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_command(ferryd_process::default_program(), args, 20s);
  };
  // As every other port: off loopback only with TLS that requires client
  // certificates (or --insecure). TLS and --auth are served
  // (kafka_security_test.cpp).
  auto wide = run({"--host", "0.0.0.0"});
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_NE(wide.err.find("refusing to listen on 0.0.0.0"), std::string::npos) << wide.err;
}

TEST(KafkaCluster, EveryNodeIsABrokerAndKcatFollowsTheLeaders) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  cluster c;
  c.add_node_args({"--kafka-port", "0"});
  auto err = c.start();
  ASSERT_TRUE(err.empty()) << err;
  auto r = ferryctl(c.endpoint(1), {"topic", "create", "orders", "--partitions", "6",
                                    "--replication-factor", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto k1 = "127.0.0.1:" + std::to_string(c.node(1).kafka_port());
  // Every node registers its Kafka listener: node 1's metadata lists all.
  std::string md_out;
  ASSERT_TRUE(wait_until(30s, [&] {
    auto md = run_command(kcat_path(), {"-b", k1, "-L", "-t", "orders"}, 20s);
    md_out = md.out + md.err;
    for (int id = 1; id <= 3; ++id)
      if (md.out.find("broker " + std::to_string(id) + " at 127.0.0.1:"
                      + std::to_string(c.node(id).kafka_port()))
          == std::string::npos)
        return false;
    return md.out.find("leader -1") == std::string::npos;
  })) << md_out;
  // ferryctl cluster describe shows them as well, once node 2's view of the
  // metadata has every registration (it may lag node 1's by a Raft round).
  nlohmann::json cd;
  auto all_ports = [&] {
    cd = ferryctl_json_or_null(c.endpoint(2), {"cluster", "describe"});
    if (!cd.is_object() || cd["nodes"].size() != 3u)
      return false;
    for (auto& n : cd["nodes"])
      if (n["kafka_port"].get<int>() != c.node(n["id"].get<int>()).kafka_port())
        return false;
    return true;
  };
  EXPECT_TRUE(wait_until(30s, all_ports)) << cd.dump();
  std::string input;
  for (int i = 0; i < 300; ++i)
    input += "key" + std::to_string(i) + ":v" + std::to_string(i) + "\n";
  auto p = run_command(kcat_path(),
                       {"-b", k1, "-t", "orders", "-P", "-K:", "-X", "acks=all", "-X",
                        "partitioner=murmur2_random"},
                       60s, input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  // Reading back through node 3 as bootstrap: kcat fetches each partition
  // from its leader.
  auto k3 = "127.0.0.1:" + std::to_string(c.node(3).kafka_port());
  auto cons = run_command(kcat_path(), {"-b", k3, "-t", "orders", "-C", "-e", "-f", "%k\n"},
                          60s);
  ASSERT_EQ(cons.exit_code, 0) << cons.err;
  std::set<std::string> keys;
  std::istringstream lines{cons.out};
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty())
      keys.insert(line);
  EXPECT_EQ(keys.size(), 300u) << cons.out.substr(0, 500);
}

// -- groups ------------------------------------------------------------------------

namespace {

/// "%p %k" lines a kcat group consumer printed: partition -> keys.
std::map<int, std::set<std::string>> read_by_partition(const std::string& out) {
  std::map<int, std::set<std::string>> by;
  std::istringstream lines{out};
  std::string line;
  while (std::getline(lines, line)) {
    auto sp = line.find(' ');
    if (sp == std::string::npos || sp == 0)
      continue;
    by[std::stoi(line.substr(0, sp))].insert(line.substr(sp + 1));
  }
  return by;
}

std::unique_ptr<child_process> kcat_group_member(const std::string& kafka,
                                                 const std::string& group,
                                                 const std::string& strategy) {
  return child_process::start(
    kcat_path(), {"-u", "-q", "-b", kafka, "-G", group, "events", "-f", "%p %k\n", "-X",
                  "auto.offset.reset=earliest", "-X",
                  "partition.assignment.strategy=" + strategy, "-X",
                  "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=500"});
}

std::string keyed_lines(const std::string& prefix, int n) {
  std::string input;
  for (int i = 0; i < n; ++i)
    input += prefix + std::to_string(i) + ":v\n";
  return input;
}

} // namespace

TEST_F(KafkaListener, KcatGroupsSplitThePartitionsAndSurviveAMemberLeaving) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  // Both strategies: eager (range) and incremental (cooperative-sticky).
  for (std::string strategy : {"range", "cooperative-sticky"}) {
    SCOPED_TRACE(strategy);
    std::string group = "kg-" + strategy;
    auto p = run_command(kcat_path(),
                         {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                          "partitioner=murmur2_random"},
                         30s, keyed_lines(strategy + "-a", 60));
    ASSERT_EQ(p.exit_code, 0) << p.err;
    auto a = kcat_group_member(kafka, group, strategy);
    auto b = kcat_group_member(kafka, group, strategy);
    ASSERT_TRUE(a && b);
    // Between them they read the 60 new records (and whatever the other
    // strategy's round wrote before: this group starts at the beginning).
    auto ours = [&](const std::map<int, std::set<std::string>>& by) {
      size_t n = 0;
      for (auto& [part, keys] : by)
        for (auto& k : keys)
          n += k.rfind(strategy + "-a", 0) == 0 ? 1 : 0;
      return n;
    };
    std::map<int, std::set<std::string>> ra, rb;
    // Balanced: each member holds partitions, none holds one the other has.
    auto balanced = [&] {
      auto d = ferryctl_json_or_null(node.endpoint(), {"group", "describe", group});
      if (d.is_null() || d["state"] != "Stable" || d["members"].size() != 2)
        return false;
      std::set<std::string> seen;
      for (auto& m : d["members"]) {
        if (m["assignment"].empty())
          return false;
        for (auto& tp : m["assignment"])
          if (!seen.insert(tp.dump()).second)
            return false;
      }
      return seen.size() == 3;
    };
    ASSERT_TRUE(wait_until(60s, [&] {
      ra = read_by_partition(a->out());
      rb = read_by_partition(b->out());
      return ours(ra) + ours(rb) == 60 && balanced();
    })) << "a: " << a->out() << "\nb: " << b->out() << "\n" << a->err() << b->err()
        << node.output();
    for (auto& [part, keys] : ra)
      EXPECT_EQ(rb.count(part), 0u) << "partition " << part << " read by both";
    EXPECT_FALSE(ra.empty());
    EXPECT_FALSE(rb.empty());
    // A leaves (SIGTERM: kcat closes its consumer, which leaves the group);
    // B takes every partition and reads what is written next.
    a->signal(SIGTERM);
    ASSERT_TRUE(a->wait_exit(30s)) << a->err();
    auto p2 = run_command(kcat_path(),
                          {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                           "partitioner=murmur2_random"},
                          30s, keyed_lines(strategy + "-b", 30));
    ASSERT_EQ(p2.exit_code, 0) << p2.err;
    ASSERT_TRUE(wait_until(60s, [&] {
      size_t n = 0;
      for (auto& [part, keys] : read_by_partition(b->out()))
        for (auto& k : keys)
          n += k.rfind(strategy + "-b", 0) == 0 ? 1 : 0;
      return n == 30;
    })) << "b: " << b->out() << "\n" << b->err() << node.output();
    auto d = ferryctl_json(node.endpoint(), {"group", "describe", group});
    ASSERT_EQ(d["members"].size(), 1u) << d.dump();
    EXPECT_EQ(d["members"][0]["assignment"].size(), 3u) << d.dump();
    EXPECT_EQ(d["assignor"], strategy) << d.dump();
    b->signal(SIGTERM);
    b->wait_exit(30s);
  }
}

TEST_F(KafkaListener, KafkaPythonGroupCommitsSurviveARestartAndAdminSeesTheGroup) {
  auto script = std::filesystem::path{FERRY_SOURCE_DIR} / "tests/kafka/kafka_python_group.py";
  auto p = run_command(kcat_path(),
                       {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                        "partitioner=murmur2_random"},
                       30s, keyed_lines("first", 40));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto c1 = run_command("/usr/bin/python3",
                        {script.string(), "consume", kafka, "events", "pyg", "40"}, 120s);
  ASSERT_EQ(c1.exit_code, 0) << c1.out << c1.err << node.output();
  EXPECT_NE(c1.out.find("consumed 40"), std::string::npos) << c1.out;
  // The commits are the group's offsets everywhere: ferryctl shows no lag.
  auto d = ferryctl_json(node.endpoint(), {"group", "describe", "pyg"});
  int64_t committed = 0;
  for (auto& row : d["partitions"]) {
    EXPECT_EQ(row["lag"].get<int64_t>(), 0) << d.dump();
    committed += row["committed_offset"].get<int64_t>();
  }
  EXPECT_EQ(committed, 40) << d.dump();
  // SIGKILL and restart: the committed offsets are durable.
  node.kill9();
  ASSERT_TRUE(node.restart()) << node.output();
  kafka = "127.0.0.1:" + std::to_string(node.kafka_port());
  auto p2 = run_command(kcat_path(),
                        {"-b", kafka, "-t", "events", "-P", "-K:", "-X",
                         "partitioner=murmur2_random"},
                        30s, keyed_lines("second", 10));
  ASSERT_EQ(p2.exit_code, 0) << p2.err;
  auto c2 = run_command("/usr/bin/python3",
                        {script.string(), "consume", kafka, "events", "pyg", "10"}, 120s);
  ASSERT_EQ(c2.exit_code, 0) << c2.out << c2.err << node.output();
  EXPECT_NE(c2.out.find("consumed 10"), std::string::npos) << c2.out;
  EXPECT_EQ(c2.out.find("record first"), std::string::npos)
    << "records committed before the restart came again:\n" << c2.out;
  // KafkaAdminClient lists and describes the group.
  // ... and creates, configures, grows and deletes a topic, which ferryctl
  // sees on the CAF port.
  auto adm = run_command("/usr/bin/python3",
                         {script.string(), "admin", kafka, "made-by-kafka", "pyg"}, 120s);
  ASSERT_EQ(adm.exit_code, 0) << adm.out << adm.err << node.output();
  EXPECT_NE(adm.out.find("listed pyg"), std::string::npos) << adm.out;
  EXPECT_NE(adm.out.find("group pyg Empty"), std::string::npos) << adm.out;
  for (auto line : {"created made-by-kafka", "exists made-by-kafka", "retention.ms 3600000",
                    "altered retention.ms 7200000", "partitions 4", "deleted made-by-kafka"})
    EXPECT_NE(adm.out.find(line), std::string::npos) << line << " in\n" << adm.out;
  auto topics = ferryctl(node.endpoint(), {"topic", "list"});
  EXPECT_EQ(topics.out.find("made-by-kafka"), std::string::npos) << topics.out;
}

TEST_F(KafkaListener, AdminRequestsWithBadInputGetKafkaErrorCodes) {
  raw_client c{node.kafka_port()};
  ASSERT_TRUE(c.connected());
  // CreateTopics v4: a bad name, too many partitions, a manual assignment,
  // an unknown config key, a topic that exists; validate_only creates
  // nothing.
  kafka::writer w;
  auto topic = [&](const std::string& name, int32_t parts, bool assign,
                   std::vector<std::pair<std::string, std::string>> cfgs) {
    w.string(name);
    w.i32(parts);
    w.i16(1);
    w.array(assign ? 1 : 0);
    if (assign) {
      w.i32(0);
      w.array(1);
      w.i32(0);
    }
    w.array(static_cast<int32_t>(cfgs.size()));
    for (auto& [k, v] : cfgs) {
      w.string(k);
      w.nullable_string(v);
    }
  };
  w.array(6);
  topic("bad/name", 1, false, {});
  topic("too-many", 20000, false, {});
  topic("assigned", 1, true, {});
  topic("odd-config", 1, false, {{"no.such.key", "1"}});
  topic("events", 1, false, {});
  topic("only-validated", 2, false, {{"retention.ms", "1000"}});
  w.i32(30000);
  w.boolean(true); // validate only
  ASSERT_TRUE(c.send(19, 4, 5, w.buffer()));
  auto a = c.receive();
  ASSERT_TRUE(a);
  kafka::reader r{*a};
  EXPECT_EQ(r.i32("correlation"), 5);
  r.i32("throttle");
  ASSERT_EQ(r.array("topics"), 6);
  std::map<std::string, int16_t> codes;
  for (int i = 0; i < 6; ++i) {
    auto name = r.string("name");
    codes[name] = r.i16("error");
    r.nullable_string("message");
  }
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(codes["bad/name"], 17);   // INVALID_TOPIC_EXCEPTION
  EXPECT_EQ(codes["too-many"], 37);   // INVALID_PARTITIONS
  EXPECT_EQ(codes["assigned"], 39);   // INVALID_REPLICA_ASSIGNMENT
  EXPECT_EQ(codes["odd-config"], 40); // INVALID_CONFIG
  // validate_only does not look the name up (Kafka's does; the real create
  // below does).
  EXPECT_EQ(codes["only-validated"], 0);
  auto topics = ferryctl(node.endpoint(), {"topic", "list"});
  EXPECT_EQ(topics.out.find("only-validated"), std::string::npos) << topics.out;
  // A real create of an existing topic: TOPIC_ALREADY_EXISTS.
  kafka::writer w2;
  w2.array(1);
  w2.string("events");
  w2.i32(1);
  w2.i16(1);
  w2.array(0);
  w2.array(0);
  w2.i32(30000);
  w2.boolean(false);
  ASSERT_TRUE(c.send(19, 4, 6, w2.buffer()));
  auto b = c.receive();
  ASSERT_TRUE(b);
  kafka::reader rb{*b};
  rb.i32("correlation");
  rb.i32("throttle");
  ASSERT_EQ(rb.array("topics"), 1);
  rb.string("name");
  EXPECT_EQ(rb.i16("error"), 36);
  // DeleteRecords below offset 2 of a partition holding 3 records: its log
  // start (Kafka's low watermark) moves to 2, and a read from the start
  // gets the last record only.
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  auto p = run_command(kcat_path(), {"-b", kafka, "-t", "events", "-p", "0", "-P"}, 30s,
                       "r0\nr1\nr2\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  kafka::writer w3;
  w3.array(1);
  w3.string("events");
  w3.array(1);
  w3.i32(0);
  w3.i64(2);
  w3.i32(30000);
  ASSERT_TRUE(c.send(21, 1, 7, w3.buffer()));
  auto d = c.receive();
  ASSERT_TRUE(d);
  kafka::reader rd{*d};
  rd.i32("correlation");
  rd.i32("throttle");
  ASSERT_EQ(rd.array("topics"), 1);
  rd.string("name");
  ASSERT_EQ(rd.array("partitions"), 1);
  EXPECT_EQ(rd.i32("partition"), 0);
  EXPECT_EQ(rd.i64("low watermark"), 2);
  EXPECT_EQ(rd.i16("error"), 0);
  auto rest = run_command(kcat_path(), {"-b", kafka, "-t", "events", "-p", "0", "-C", "-e",
                                        "-o", "beginning", "-f", "%o %s\n"}, 30s);
  EXPECT_EQ(rest.out, "2 r2\n") << rest.err;
}

TEST(KafkaCluster, AnIdempotentKafkaProducerKeepsEveryRecordOnceWhileTheLeaderIsKilled) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  cluster c;
  c.add_node_args({"--kafka-port", "0"});
  ASSERT_CLUSTER_STARTED(c);
  auto r = ferryctl(c.endpoint(1), {"topic", "create", "pay", "--partitions", "1",
                                    "--replication-factor", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  int32_t leader = -1;
  ASSERT_TRUE(wait_until(30s, [&] { return (leader = c.leader_of("pay", 0)) > 0; }));
  // Bootstrap through a node that is not the leader, so the producer
  // survives the kill on its metadata.
  int bootstrap = leader == 1 ? 2 : 1;
  std::string brokers;
  for (int id = 1; id <= 3; ++id)
    if (id != leader)
      brokers += (brokers.empty() ? "" : ",") + std::string{"127.0.0.1:"}
                 + std::to_string(c.node(id).kafka_port());
  // 600 records, written 20 ms apart by a shell loop into an idempotent
  // acks=all kcat (librdkafka retries through the leader change; kcat exits
  // 0 only once every record was acknowledged).
  auto producer = child_process::start(
    "/bin/bash",
    {"-c", std::string{"for i in $(seq 1 600); do echo \"r$i\"; sleep 0.02; done | "}
             + kcat_path() + " -b " + brokers
             + " -t pay -P -X enable.idempotence=true -X acks=all"
               " -X message.timeout.ms=120000 -X linger.ms=5"});
  ASSERT_TRUE(producer);
  // Kill the leader once a third is acknowledged... as far as the followers
  // know: wait until the topic's log end passed 150.
  ASSERT_TRUE(wait_until(60s, [&] {
    auto d = ferryctl_json_or_null(c.endpoint(bootstrap), {"topic", "describe", "pay"});
    auto& ps = d["partition_status"];
    return ps.is_array() && !ps.empty() && ps[0].value("high_watermark", int64_t{0}) >= 150;
  })) << producer->err();
  c.kill(leader);
  auto status = producer->wait_exit(180s);
  ASSERT_TRUE(status) << "the producer did not finish\n" << producer->err();
  EXPECT_EQ(*status, 0) << producer->err();
  // Every record once, in order, read through a surviving node.
  std::string read_from = "127.0.0.1:" + std::to_string(c.node(bootstrap).kafka_port());
  std::vector<std::string> got;
  ASSERT_TRUE(wait_until(60s, [&] {
    auto cons = run_command(kcat_path(), {"-b", read_from, "-t", "pay", "-C", "-e", "-q",
                                          "-f", "%s\n"}, 30s);
    got.clear();
    std::istringstream lines{cons.out};
    std::string line;
    while (std::getline(lines, line))
      if (!line.empty())
        got.push_back(line);
    return got.size() >= 600;
  })) << got.size() << " records";
  ASSERT_EQ(got.size(), 600u) << "duplicates";
  for (int i = 0; i < 600; ++i)
    ASSERT_EQ(got[i], "r" + std::to_string(i + 1)) << "at " << i;
}

TEST_F(KafkaListener, ListOffsetsByTimestampAnswersMinusOneWhenNoRecordIsThatLate) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  auto p = run_command(kcat_path(), {"-b", kafka, "-t", "events", "-p", "1", "-P"}, 30s,
                       "a\nb\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  raw_client c{node.kafka_port()};
  ASSERT_TRUE(c.connected());
  auto ask = [&](int64_t ts) -> int64_t {
    kafka::writer w;
    w.i32(-1);
    w.i8(0);
    w.array(1);
    w.string("events");
    w.array(1);
    w.i32(1);
    w.i32(-1);
    w.i64(ts);
    EXPECT_TRUE(c.send(2, 5, 9, w.buffer()));
    auto a = c.receive();
    if (!a)
      return -100;
    kafka::reader r{*a};
    r.i32("correlation");
    r.i32("throttle");
    r.array("topics");
    r.string("name");
    r.array("partitions");
    r.i32("partition");
    EXPECT_EQ(r.i16("error"), 0);
    r.i64("timestamp");
    auto off = r.i64("offset");
    EXPECT_TRUE(r.ok()) << r.error();
    return off;
  };
  EXPECT_EQ(ask(-2), 0);            // earliest
  EXPECT_EQ(ask(-1), 2);            // latest: the high watermark
  EXPECT_EQ(ask(0), 0);             // every record is later than 1970
  EXPECT_EQ(ask(4102444800000), -1); // none as late as 2100
}

TEST_F(KafkaListener, OffsetForLeaderEpochAnswersWhereTheLeadersEpochEnds) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  auto p = run_command(kcat_path(), {"-b", kafka, "-t", "events", "-p", "0", "-P"}, 30s,
                       "a\nb\nc\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  raw_client c{node.kafka_port()};
  ASSERT_TRUE(c.connected());
  // The partition's leader epoch, from Metadata v7 (partition 0 of events).
  auto md = [&] {
    kafka::writer w;
    w.array(1);
    w.string("events");
    w.boolean(false);
    EXPECT_TRUE(c.send(3, 7, 1, w.buffer()));
    return c.receive();
  }();
  ASSERT_TRUE(md);
  auto epoch_of_p0 = [&]() -> int32_t {
    kafka::reader r{*md};
    r.i32("correlation");
    r.i32("throttle");
    auto nb = r.array("brokers");
    for (int32_t i = 0; i < nb; ++i) {
      r.i32("node");
      r.string("host");
      r.i32("port");
      r.nullable_string("rack");
    }
    r.nullable_string("cluster id");
    r.i32("controller");
    r.array("topics");
    r.i16("error");
    r.string("name");
    r.boolean("internal");
    auto np = r.array("partitions");
    for (int32_t i = 0; i < np && r.ok(); ++i) {
      r.i16("error");
      auto part = r.i32("partition");
      r.i32("leader");
      auto epoch = r.i32("leader epoch");
      if (part == 0)
        return epoch;
      for (auto* what : {"replicas", "isr", "offline"}) {
        auto n = r.array(what);
        for (int32_t k = 0; k < n; ++k)
          r.i32(what);
      }
    }
    ADD_FAILURE() << "no partition 0: " << r.error();
    return -1;
  }();
  ASSERT_GE(epoch_of_p0, 0);
  // (error, leader epoch, end offset) for `asked`, knowing `current`.
  auto ask = [&](int32_t current, int32_t asked) {
    kafka::writer w;
    w.i32(-1); // replica id: a consumer
    w.array(1);
    w.string("events");
    w.array(1);
    w.i32(0);
    w.i32(current);
    w.i32(asked);
    EXPECT_TRUE(c.send(23, 3, 2, w.buffer()));
    auto a = c.receive();
    std::tuple<int16_t, int32_t, int64_t> out{-100, -100, -100};
    if (!a)
      return out;
    kafka::reader r{*a};
    r.i32("correlation");
    r.i32("throttle");
    r.array("topics");
    r.string("name");
    r.array("partitions");
    std::get<0>(out) = r.i16("error");
    EXPECT_EQ(r.i32("partition"), 0);
    std::get<1>(out) = r.i32("leader epoch");
    std::get<2>(out) = r.i64("end offset");
    EXPECT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.remaining(), 0u);
    return out;
  };
  // The current epoch ends at the log end; a newer one is unknown.
  EXPECT_EQ(ask(epoch_of_p0, epoch_of_p0), std::make_tuple(int16_t{0}, epoch_of_p0, int64_t{3}));
  EXPECT_EQ(ask(-1, epoch_of_p0 + 1), std::make_tuple(int16_t{0}, -1, int64_t{-1}));
  // A client that knows a newer leader epoch is told to refresh.
  EXPECT_EQ(std::get<0>(ask(epoch_of_p0 + 1, epoch_of_p0)),
            static_cast<int16_t>(kafka::error_code::not_leader_or_follower));
  // An unknown topic.
  kafka::writer w;
  w.i32(-1);
  w.array(1);
  w.string("nope");
  w.array(1);
  w.i32(0);
  w.i32(-1);
  w.i32(0);
  ASSERT_TRUE(c.send(23, 3, 3, w.buffer()));
  auto a = c.receive();
  ASSERT_TRUE(a);
  kafka::reader r{*a};
  r.i32("correlation");
  r.i32("throttle");
  r.array("topics");
  r.string("name");
  r.array("partitions");
  EXPECT_EQ(r.i16("error"), static_cast<int16_t>(kafka::error_code::unknown_topic_or_partition));
}

// -- python3-confluent-kafka (librdkafka's Python binding) ------------------------

namespace {

std::filesystem::path confluent_script() {
  return std::filesystem::path{FERRY_SOURCE_DIR} / "tests/kafka/confluent_check.py";
}

std::vector<std::string> lines_of(const std::string& out, const std::string& prefix) {
  std::vector<std::string> xs;
  std::istringstream in{out};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0)
      xs.push_back(line.substr(prefix.size()));
  return xs;
}

} // namespace

TEST(KafkaConfluent, AnIdempotentProducerAcrossANodeSigkillWritesEveryRecordOnce) {
  // A fixed Kafka port, so the producer finds the node again after its
  // restart.
  auto kport = free_port();
  ferryd_process node{{"--kafka-port", std::to_string(kport), "--http-port", "-1"}};
  ASSERT_TRUE(node.start()) << node.output();
  auto kafka = "127.0.0.1:" + std::to_string(kport);
  auto r = ferryctl(node.endpoint(), {"topic", "create", "idem", "--partitions", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto producer = child_process::start(
    "/usr/bin/python3", {"-u", confluent_script().string(), "produce", kafka, "idem", "600", "5"});
  ASSERT_TRUE(producer);
  // SIGKILL once 150 are acknowledged; the producer's retries wait for the
  // restart (same data dir, same ports).
  ASSERT_TRUE(wait_until(60s, [&] { return producer->out().find("acked 150") != std::string::npos; }))
    << producer->out() << producer->err();
  node.kill9();
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(node.restart()) << node.output();
  auto status = producer->wait_exit(180s);
  ASSERT_TRUE(status) << "the producer did not finish\n" << producer->out() << producer->err();
  EXPECT_EQ(*status, 0) << producer->out() << producer->err();
  EXPECT_NE(producer->out().find("delivered 600 failed 0"), std::string::npos) << producer->out();
  // v1..v600, each once, in order: no duplicates from the retries, no gaps.
  auto cons = run_command(kcat_path(), {"-b", kafka, "-t", "idem", "-C", "-e", "-q", "-f", "%s\n"},
                          60s);
  ASSERT_EQ(cons.exit_code, 0) << cons.err;
  auto got = lines_of(cons.out, "v");
  ASSERT_EQ(got.size(), 600u) << cons.out.substr(0, 300);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], std::to_string(i + 1)) << "at " << i;
}

TEST_F(KafkaListener, ACooperativeStickyGroupMovesOnlyThePartitionsItMustMove) {
  // A holds all three partitions; B joins: A gives up only what B gets
  // (incremental revocation), never everything at once.
  auto a = child_process::start("/usr/bin/python3", {"-u", confluent_script().string(), "member",
                                                     kafka, "events", "coop", "40"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(wait_until(60s, [&] { return a->out().find("assigned 0,1,2") != std::string::npos; }))
    << a->out() << a->err() << node.output();
  auto b = child_process::start("/usr/bin/python3", {"-u", confluent_script().string(), "member",
                                                     kafka, "events", "coop", "40"});
  ASSERT_TRUE(b);
  std::vector<std::string> b_assigned;
  ASSERT_TRUE(wait_until(60s, [&] {
    b_assigned.clear();
    for (auto& x : lines_of(b->out(), "assigned "))
      if (!x.empty())
        b_assigned.push_back(x);
    return !b_assigned.empty();
  })) << "a:\n" << a->out() << "\nb:\n" << b->out() << b->err();
  auto revoked = lines_of(a->out(), "revoked ");
  ASSERT_FALSE(revoked.empty()) << a->out();
  for (auto& x : revoked)
    EXPECT_NE(x, "0,1,2") << "A gave up every partition (an eager rebalance)\n" << a->out();
  // B has exactly what A gave up.
  std::set<std::string> given, taken;
  for (auto& x : revoked)
    for (auto& p : lines_of(std::regex_replace(x, std::regex{","}, "\n"), ""))
      given.insert(p);
  for (auto& x : b_assigned)
    for (auto& p : lines_of(std::regex_replace(x, std::regex{","}, "\n"), ""))
      taken.insert(p);
  EXPECT_EQ(given, taken) << "a:\n" << a->out() << "\nb:\n" << b->out();
  // What is written next is read once, by one of them.
  auto d = ferryctl_json(node.endpoint(), {"group", "describe", "coop"});
  EXPECT_EQ(d["assignor"], "cooperative-sticky") << d.dump();
  std::string values_in;
  for (int i = 1; i <= 30; ++i)
    values_in += "w" + std::to_string(i) + "\n";
  auto p = run_command(kcat_path(), {"-b", kafka, "-t", "events", "-P"}, 30s, values_in);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  ASSERT_TRUE(wait_until(60s, [&] {
    return lines_of(a->out(), "record ").size() + lines_of(b->out(), "record ").size() >= 30;
  })) << "a:\n" << a->out() << "\nb:\n" << b->out();
  std::multiset<std::string> values;
  for (auto* m : {a.get(), b.get()})
    for (auto& x : lines_of(m->out(), "record "))
      values.insert(x.substr(x.find(' ') + 1));
  EXPECT_EQ(values.size(), 30u);
  EXPECT_EQ(std::set<std::string>(values.begin(), values.end()).size(), 30u) << "a record read twice";
  a->signal(SIGTERM);
  b->signal(SIGTERM);
}

TEST_F(KafkaListener, AStaticKcatMemberBackUnderItsInstanceIdKeepsItsPartitionsWithoutARebalance) {
  ASSERT_TRUE(have_kcat()) << "kcat is missing: run deploy/install-deps.sh";
  auto member = [&](const std::string& instance) {
    return child_process::start(kcat_path(), {"-u", "-q", "-b", kafka, "-G", "static", "events",
                                              "-X", "group.instance.id=" + instance, "-X",
                                              "session.timeout.ms=10000", "-f", "%p %s\n"});
  };
  // Polled from before kcat joined: the group may not exist yet.
  auto describe = [&] {
    return ferryctl_json_or_null(node.endpoint(), {"group", "describe", "static"});
  };
  auto a = member("i1");
  ASSERT_TRUE(a);
  ASSERT_TRUE(wait_until(60s, [&] { return describe()["state"] == "Stable"; })) << a->err();
  auto b = member("i2"); // i1 stays the leader; i2 is a follower
  ASSERT_TRUE(b);
  nlohmann::json before;
  ASSERT_TRUE(wait_until(60s, [&] {
    before = describe();
    return before["state"] == "Stable" && before["members"].size() == 2
           && !before["members"][0]["assignment"].empty()
           && !before["members"][1]["assignment"].empty();
  })) << before.dump() << node.output();
  auto partitions_of = [](const nlohmann::json& d, const std::string& instance) {
    for (auto& m : d["members"])
      if (m["group_instance_id"] == instance)
        return m["assignment"].dump();
    return std::string{"none"};
  };
  // i2 dies without leaving (SIGKILL) and comes back under its instance id
  // within the session timeout: same generation, same partitions.
  b->kill_and_reap();
  auto b2 = member("i2");
  ASSERT_TRUE(b2);
  nlohmann::json after;
  ASSERT_TRUE(wait_until(30s, [&] {
    after = describe();
    for (auto& m : after["members"])
      if (m["group_instance_id"] == "i2" && m["member_id"] != "" )
        for (auto& old : before["members"])
          if (old["group_instance_id"] == "i2" && old["member_id"] != m["member_id"])
            return true;
    return false;
  })) << after.dump() << node.output();
  EXPECT_EQ(after["generation"], before["generation"]) << before.dump() << "\n" << after.dump();
  EXPECT_EQ(partitions_of(after, "i2"), partitions_of(before, "i2"));
  EXPECT_EQ(partitions_of(after, "i1"), partitions_of(before, "i1"));
}
