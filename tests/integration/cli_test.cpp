// ferryctl and the client library against a real ferryd child process.
// Every ferryd and ferryctl run is bounded and always stopped (process.hpp).

#include "client_system.hpp"
#include "ferryctl_run.hpp"
#include "process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ferry {

// Readable endpoints in gtest's failure messages.
void PrintTo(const broker_endpoint& ep, std::ostream* os) {
  *os << to_string(ep);
}

} // namespace ferry

namespace {

using namespace std::chrono_literals;
using ferry::test::child_process;
using ferry::test::command_result;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using json = nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

std::string numbered_lines(int from, int to, const std::string& prefix = "m") {
  std::string out;
  for (int i = from; i < to; ++i)
    out += prefix + std::to_string(i) + "\n";
  return out;
}

/// One ferryd shared by the tests of this suite; each test uses its own
/// topic and group names.
class Cli : public ::testing::Test {
public:
  static void SetUpTestSuite() {
    broker_ = new ferryd_process{};
    if (!broker_->start())
      FAIL() << "ferryd did not start:\n" << broker_->output();
  }

  static void TearDownTestSuite() {
    if (broker_ != nullptr)
      broker_->stop(20s);
    delete broker_;
    broker_ = nullptr;
  }

protected:
  void SetUp() override {
    ASSERT_TRUE(broker_ != nullptr && broker_->running()) << "ferryd is not running";
  }

  static command_result ctl(std::vector<std::string> args, const std::string& input = {},
                            std::chrono::milliseconds timeout = 60s) {
    return ferry::test::ferryctl(broker_->endpoint(), std::move(args), input, timeout);
  }

  static json ctl_json(std::vector<std::string> args) {
    return ferry::test::ferryctl_json(broker_->endpoint(), std::move(args));
  }

  static void create_topic(const std::string& name, int partitions) {
    auto r = ctl({"topic", "create", name, "--partitions", std::to_string(partitions)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  static ferryd_process* broker_;
};

ferryd_process* Cli::broker_ = nullptr;

TEST_F(Cli, ProducedLinesComeBackInOrderFromTheBeginning) {
  create_topic("order", 1);
  auto input = numbered_lines(0, 500);
  auto p = ctl({"produce", "order"}, input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("produced 500 messages"), std::string::npos) << p.out;
  auto c = ctl({"consume", "order", "--from-beginning", "--max", "500", "--timeout", "10000"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, input);
}

TEST_F(Cli, ProduceFromFileWithKeysAndHeaders) {
  create_topic("keyed", 3);
  ferry::test::temp_dir dir;
  auto path = dir.path() / "lines.txt";
  {
    std::ofstream f{path};
    f << "a\nb\nc\n";
  }
  auto p = ctl({"produce", "keyed", "--file", path.string(), "--key", "k1", "--header",
                "h=v", "--acks", "1"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto c = ctl({"consume", "keyed", "--from-beginning", "--max", "3", "--timeout", "10000",
                "--format", "key,value,headers"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  // One key: one partition, so the order holds.
  EXPECT_EQ(c.out, "k1\ta\th=v\nk1\tb\th=v\nk1\tc\th=v\n");
}

TEST_F(Cli, EveryCompressionAndAcksModeRoundTrips) {
  create_topic("codecs", 1);
  std::string want;
  int n = 0;
  for (auto codec : {"none", "gzip", "lz4", "zstd"})
    for (auto acks : {"0", "1", "all"}) {
      auto input = numbered_lines(n, n + 50, std::string{codec} + "-" + acks + "-");
      n += 50;
      auto p = ctl({"produce", "codecs", "--compression", codec, "--acks", acks}, input);
      ASSERT_EQ(p.exit_code, 0) << codec << " " << acks << ": " << p.err;
      want += input;
    }
  auto c = ctl({"consume", "codecs", "--from-beginning", "--max", std::to_string(n),
                "--timeout", "10000"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, want);
}

TEST_F(Cli, OffsetAndPartitionSelectWhereConsumeStarts) {
  create_topic("offsets", 2);
  ASSERT_EQ(ctl({"produce", "offsets", "--partition", "1"}, numbered_lines(0, 10)).exit_code, 0);
  auto c = ctl({"consume", "offsets", "--partition", "1", "--offset", "7", "--max", "3",
                "--timeout", "10000", "--format", "partition,offset,value"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, "1\t7\tm7\n1\t8\tm8\n1\t9\tm9\n");
}

TEST_F(Cli, GroupConsumeCommitsSoDescribeShowsLagZero) {
  create_topic("grouped", 3);
  // 30 lines into each partition: the consumer reads (and commits) all
  // three. With null keys the sticky partitioner may put all 90 into one
  // batch, and a consumer that reached --max before it had looked up the
  // position of an empty partition commits nothing there.
  for (int p = 0; p < 3; ++p)
    ASSERT_EQ(ctl({"produce", "grouped", "--partition", std::to_string(p)},
                  numbered_lines(p * 30, p * 30 + 30))
                .exit_code,
              0);
  auto c = ctl({"consume", "grouped", "--group", "g-lag", "--from-beginning", "--max", "90",
                "--timeout", "15000"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto got = lines_of(c.out);
  std::multiset<std::string> seen{got.begin(), got.end()};
  auto want_lines = lines_of(numbered_lines(0, 90));
  EXPECT_EQ(seen, (std::multiset<std::string>{want_lines.begin(), want_lines.end()}));

  auto g = ctl_json({"group", "describe", "g-lag"});
  ASSERT_TRUE(g.contains("partitions")) << g.dump();
  int64_t committed = 0;
  ASSERT_EQ(g["partitions"].size(), 3u) << g.dump();
  for (auto& p : g["partitions"]) {
    EXPECT_EQ(p["lag"], 0) << g.dump();
    EXPECT_EQ(p["committed_offset"], p["log_end_offset"]) << g.dump();
    committed += p["committed_offset"].get<int64_t>();
  }
  EXPECT_EQ(committed, 90);
  auto human = ctl({"group", "describe", "g-lag"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("LAG"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("COMMITTED"), std::string::npos) << human.out;

  // A second run of the group resumes after the committed offsets.
  ASSERT_EQ(ctl({"produce", "grouped"}, "late\n").exit_code, 0);
  auto again = ctl({"consume", "grouped", "--group", "g-lag", "--from-beginning", "--max",
                    "1", "--timeout", "15000"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "late\n");
}

TEST_F(Cli, ResetOffsetsMovesCommittedOffsetsAndDryRunDoesNot) {
  create_topic("resets", 2);
  ASSERT_EQ(ctl({"produce", "resets"}, numbered_lines(0, 20)).exit_code, 0);
  ASSERT_EQ(ctl({"consume", "resets", "--group", "g-reset", "--from-beginning", "--max", "20",
                 "--timeout", "15000"})
              .exit_code,
            0);
  auto dry = ctl_json({"group", "reset-offsets", "g-reset", "--topic", "resets",
                       "--to-earliest", "--dry-run"});
  ASSERT_TRUE(dry.contains("offsets")) << dry.dump();
  for (auto& o : dry["offsets"])
    EXPECT_EQ(o["offset"], 0);
  auto before = ctl_json({"group", "describe", "g-reset"});
  for (auto& p : before["partitions"])
    EXPECT_EQ(p["lag"], 0) << before.dump();

  auto r = ctl({"group", "reset-offsets", "g-reset", "--topic", "resets", "--to-earliest"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto after = ctl_json({"group", "describe", "g-reset"});
  int64_t lag = 0;
  for (auto& p : after["partitions"])
    lag += p["lag"].get<int64_t>();
  EXPECT_EQ(lag, 20) << after.dump();

  auto again = ctl({"consume", "resets", "--group", "g-reset", "--max", "20", "--timeout",
                    "15000"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(lines_of(again.out).size(), 20u);

  auto dated = ctl({"group", "reset-offsets", "g-reset", "--topic", "resets",
                    "--to-datetime", "2000-01-01T00:00:00Z"});
  EXPECT_EQ(dated.exit_code, 0) << dated.err;
  auto bad_date = ctl({"group", "reset-offsets", "g-reset", "--topic", "resets",
                       "--to-datetime", "yesterday"});
  EXPECT_NE(bad_date.exit_code, 0);
  EXPECT_NE(bad_date.err.find("invalid_config"), std::string::npos) << bad_date.err;

  auto del = ctl({"group", "delete", "g-reset"});
  EXPECT_EQ(del.exit_code, 0) << del.err;
}

TEST_F(Cli, TopicDescribeShowsPartitionsAndOffsets) {
  create_topic("described", 3);
  ASSERT_EQ(ctl({"produce", "described", "--partition", "2"}, numbered_lines(0, 7)).exit_code, 0);
  auto d = ctl_json({"topic", "describe", "described"});
  ASSERT_EQ(d["partitions"], 3) << d.dump();
  ASSERT_EQ(d["partition_status"].size(), 3u) << d.dump();
  EXPECT_EQ(d["partition_status"][2]["log_end_offset"], 7) << d.dump();
  EXPECT_EQ(d["partition_status"][2]["high_watermark"], 7) << d.dump();
  EXPECT_EQ(d["partition_status"][0]["log_end_offset"], 0) << d.dump();
  auto human = ctl({"topic", "describe", "described"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("HIGH_WATERMARK"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("Partitions: 3"), std::string::npos) << human.out;
}

TEST_F(Cli, TopicAlterChangesConfigAndGrowsPartitions) {
  create_topic("altered", 1);
  auto r = ctl({"topic", "alter", "altered", "--config", "retention.ms=60000", "--partitions",
                "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto d = ctl_json({"topic", "describe", "altered"});
  EXPECT_EQ(d["partitions"], 4) << d.dump();
  EXPECT_EQ(d["config"]["retention.ms"], 60000) << d.dump();
  auto bad = ctl({"topic", "alter", "altered", "--config", "no.such.key=1"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("invalid_config"), std::string::npos) << bad.err;
}

TEST_F(Cli, JsonOutputsParse) {
  create_topic("jsonic", 2);
  auto p = ctl({"--json", "produce", "jsonic", "--key", "k"}, "x\ny\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto pj = json::parse(p.out);
  EXPECT_EQ(pj["produced"], 2);
  auto list = ctl_json({"topic", "list"});
  ASSERT_TRUE(list.is_array());
  bool found = false;
  for (auto& t : list)
    found = found || t["name"] == "jsonic";
  EXPECT_TRUE(found) << list.dump();
  EXPECT_TRUE(ctl_json({"topic", "describe", "jsonic"}).is_object());
  EXPECT_TRUE(ctl_json({"cluster", "describe"}).contains("nodes"));
  EXPECT_TRUE(ctl_json({"group", "list"}).is_array());
  auto c = ctl({"--json", "consume", "jsonic", "--from-beginning", "--max", "2", "--timeout",
                "10000"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto lines = lines_of(c.out);
  ASSERT_EQ(lines.size(), 2u) << c.out;
  auto first = json::parse(lines[0]);
  EXPECT_EQ(first["key"], "k");
  EXPECT_EQ(first["value"], "x");
  EXPECT_EQ(first["offset"], 0);
  EXPECT_EQ(json::parse(lines[1])["value"], "y");
}

TEST_F(Cli, TableOutputsHaveHeaders) {
  create_topic("tabled", 1);
  auto list = ctl({"topic", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out.rfind("TOPIC", 0), 0u) << list.out;
  auto cluster = ctl({"cluster", "describe"});
  ASSERT_EQ(cluster.exit_code, 0) << cluster.err;
  EXPECT_NE(cluster.out.find("CONTROLLER"), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find("RaftTerm: "), std::string::npos) << cluster.out;
  // The nodes table (this one node, its endpoint as --broker takes it), then
  // every partition of every topic.
  EXPECT_NE(cluster.out.find("NODE  ROLE   ENDPOINT"), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find(broker_->endpoint()), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find("TOPIC"), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find("HIGH_WATERMARK"), std::string::npos) << cluster.out;
  bool tabled_row = false;
  for (auto& line : lines_of(cluster.out))
    tabled_row = tabled_row || line.rfind("tabled ", 0) == 0;
  EXPECT_TRUE(tabled_row) << cluster.out;
}

TEST_F(Cli, UnknownTopicExitsNonZeroNamingTheCode) {
  for (auto args : std::vector<std::vector<std::string>>{
         {"produce", "no-such-topic"},
         {"consume", "no-such-topic", "--max", "1", "--timeout", "2000"},
         {"topic", "describe", "no-such-topic"},
         {"topic", "delete", "no-such-topic"}}) {
    auto r = ctl(args, "x\n", 30s);
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.exit_code, 0) << args[0];
    EXPECT_EQ(r.err.rfind("ferryctl: unknown_topic", 0), 0u) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  }
}

TEST_F(Cli, CreateErrorsNameTheirCode) {
  create_topic("twice", 1);
  auto dup = ctl({"topic", "create", "twice"});
  EXPECT_NE(dup.exit_code, 0);
  EXPECT_NE(dup.err.find("topic_exists"), std::string::npos) << dup.err;
  auto bad = ctl({"topic", "create", "bad/name"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("invalid_topic_name"), std::string::npos) << bad.err;
  auto cfg = ctl({"topic", "create", "cfg-bad", "--config", "retention.ms=soon"});
  EXPECT_NE(cfg.exit_code, 0);
  EXPECT_NE(cfg.err.find("invalid_config"), std::string::npos) << cfg.err;
}

TEST_F(Cli, TopicDeleteRemovesIt) {
  create_topic("doomed", 1);
  ASSERT_EQ(ctl({"topic", "delete", "doomed"}).exit_code, 0);
  auto d = ctl({"topic", "describe", "doomed"});
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("unknown_topic"), std::string::npos) << d.err;
}

// --advertised-host is the address the node registers and describe shows
// (where clients send partition requests); a wildcard one is shown as it
// is, with a warning at start-up.
TEST(CliConnection, AdvertisedHostIsWhatDescribeShows) {
  auto host_of = [](const ferryd_process& d) {
    auto r = run_command(FERRYCTL_PATH,
                         {"--broker", d.endpoint(), "--json", "cluster", "describe"}, 30s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    try {
      return json::parse(r.out).at("nodes").at(0).at("host").get<std::string>();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << ": " << r.out;
      return std::string{};
    }
  };
  ferryd_process named{{"--advertised-host", "localhost"}};
  ASSERT_TRUE(named.start()) << named.output();
  EXPECT_EQ(host_of(named), "localhost");
  EXPECT_EQ(named.output().find("wildcard"), std::string::npos) << named.output();
  ferryd_process plain;
  ASSERT_TRUE(plain.start()) << plain.output();
  EXPECT_EQ(host_of(plain), "127.0.0.1") << "without the flag: --host";
  ferryd_process wildcard{{"--advertised-host", "0.0.0.0"}};
  ASSERT_TRUE(wildcard.start()) << wildcard.output();
  EXPECT_EQ(host_of(wildcard), "0.0.0.0");
  EXPECT_NE(wildcard.output().find("advertising the wildcard address 0.0.0.0"),
            std::string::npos)
    << wildcard.output();
}

TEST(CliConnection, BadBrokerAddressFailsWithinTheTimeout) {
  // A closed port: refused at once, retried until --connect-timeout.
  auto start = std::chrono::steady_clock::now();
  auto r = run_command(FERRYCTL_PATH,
                       {"--broker", "127.0.0.1:1", "--connect-timeout", "1500", "topic", "list"},
                       20s);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot connect to broker 127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_LT(took, 10s);
  // A malformed address fails before any connect.
  auto bad = run_command(FERRYCTL_PATH, {"--broker", "localhost:notaport", "topic", "list"}, 20s);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("invalid_config"), std::string::npos) << bad.err;
  // FERRY_BROKER is the default; the usage error exits 2 without connecting.
  auto usage = run_command(FERRYCTL_PATH, {"topic"}, 20s);
  EXPECT_NE(usage.exit_code, 0);
}

// -- broker address lists and the connection's failover -------------------------------

TEST(BrokerAddress, OneEndpointKeepsHostAndPortAndTheDefaultPort) {
  auto a = ferry::parse_broker_address("broker-1:19092");
  ASSERT_TRUE(a) << ferry::error_text(a.error());
  EXPECT_EQ(a->host, "broker-1");
  EXPECT_EQ(a->port, 19092);
  ASSERT_EQ(a->endpoints.size(), 1u);
  EXPECT_EQ(a->endpoints[0], (ferry::broker_endpoint{"broker-1", 19092}));
  auto b = ferry::parse_broker_address("broker-2");
  ASSERT_TRUE(b) << ferry::error_text(b.error());
  EXPECT_EQ(b->port, 9092);
  EXPECT_EQ(to_string(b->endpoints.at(0)), "broker-2:9092");
  // A config filled by hand (host/port only) still names one endpoint.
  ferry::connection_config by_hand;
  by_hand.host = "10.0.0.7";
  by_hand.port = 1234;
  EXPECT_EQ(by_hand.targets(), (std::vector<ferry::broker_endpoint>{{"10.0.0.7", 1234}}));
}

TEST(BrokerAddress, ParsesAListInOrder) {
  auto a = ferry::parse_broker_address("h1:1001,h2:1002, [::1]:1003 ,h4");
  ASSERT_TRUE(a) << ferry::error_text(a.error());
  std::vector<ferry::broker_endpoint> want{
    {"h1", 1001}, {"h2", 1002}, {"::1", 1003}, {"h4", 9092}};
  EXPECT_EQ(a->endpoints, want);
  EXPECT_EQ(a->targets(), want);
  // host/port are the first endpoint, for callers that know only one.
  EXPECT_EQ(a->host, "h1");
  EXPECT_EQ(a->port, 1001);
  EXPECT_EQ(to_string(a->endpoints[2]), "[::1]:1003");
}

TEST(BrokerAddress, ListErrorsNameWhatIsWrong) {
  struct bad_case {
    std::string addr;
    std::string says;
  };
  for (auto& [addr, says] : std::vector<bad_case>{
         {"", "empty broker address"},
         {"  ", "empty broker address"},
         {"h1:1,,h3:3", "element 2 is empty"},
         {"h1:1,", "element 2 is empty"},
         {",h1:1", "element 1 is empty"},
         {"h1:1, ,h3:3", "element 2 is empty"},
         {"h1:1,h2:x", "broker address 'h2:x': bad port 'x'"},
         {"h1:1,h2:0", "bad port '0'"},
         {"h1:1,h2:70000", "bad port '70000'"},
         {"h1:1,h2:", "bad port ''"},
         {"h1:1,:2", "broker address ':2': empty host"},
         {"h1:1,[::1", "missing ']'"}}) {
    auto r = ferry::parse_broker_address(addr);
    ASSERT_FALSE(r) << "'" << addr << "' parsed";
    EXPECT_EQ(ferry::code_of(r.error()), ferry::ec::invalid_config) << addr;
    EXPECT_NE(ferry::error_text(r.error()).find(says), std::string::npos)
      << "'" << addr << "': " << ferry::error_text(r.error());
  }
}

/// Sets (or, with nullopt, unsets) an environment variable for one scope.
class scoped_env {
public:
  scoped_env(const char* name, std::optional<std::string> value) : name_(name) {
    if (auto old = std::getenv(name))
      old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(BrokerAddress, DefaultIsTheEnvThenALocalClusterThenTheLocalNode) {
  ferry::test::temp_dir dir{"ferry-default-broker"};
  auto cluster = dir.path() / "ferry-cluster";
  std::filesystem::create_directories(cluster);
  {
    // No brokers file: the local node.
    scoped_env broker{"FERRY_BROKER", std::nullopt};
    scoped_env cluster_dir{"FERRY_CLUSTER_DIR", cluster.string()};
    EXPECT_EQ(ferry::default_broker_address(), "127.0.0.1:9092");
  }
  // What deploy/local-cluster.sh writes: node 1 first, one per line.
  std::ofstream{cluster / "brokers"} << "127.0.0.1:19091\n127.0.0.1:19092\n\n127.0.0.1:19093\n";
  const std::string all = "127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093";
  {
    scoped_env broker{"FERRY_BROKER", std::nullopt};
    scoped_env cluster_dir{"FERRY_CLUSTER_DIR", cluster.string()};
    EXPECT_EQ(ferry::default_broker_address(), all);
    auto parsed = ferry::parse_broker_address(ferry::default_broker_address());
    ASSERT_TRUE(parsed) << ferry::error_text(parsed.error());
    EXPECT_EQ(parsed->endpoints.size(), 3u);
  }
  {
    // Without FERRY_CLUSTER_DIR: ./ferry-cluster of the current directory.
    scoped_env broker{"FERRY_BROKER", std::nullopt};
    scoped_env cluster_dir{"FERRY_CLUSTER_DIR", std::nullopt};
    auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(dir.path());
    auto here = ferry::default_broker_address();
    std::filesystem::current_path(cwd);
    EXPECT_EQ(here, all);
  }
  {
    // FERRY_BROKER wins over everything (an empty one does not count).
    scoped_env broker{"FERRY_BROKER", "elsewhere:1"};
    scoped_env cluster_dir{"FERRY_CLUSTER_DIR", cluster.string()};
    EXPECT_EQ(ferry::default_broker_address(), "elsewhere:1");
    scoped_env empty{"FERRY_BROKER", ""};
    EXPECT_EQ(ferry::default_broker_address(), all);
  }
}

/// A TCP port on 127.0.0.1 that refuses connections: bound but never
/// listening, and held (so nothing else takes it) until destruction.
class refusing_port {
public:
  refusing_port() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0
        && ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port_ = ntohs(addr.sin_port);
  }
  refusing_port(const refusing_port&) = delete;
  refusing_port& operator=(const refusing_port&) = delete;
  ~refusing_port() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/// The CAF port the broker behind `b` describes itself with (0 on error or
/// no answer within `timeout`).
uint16_t described_port(caf::actor_system& sys, const ferry::broker_actor& b,
                        std::chrono::milliseconds timeout = 10s) {
  caf::scoped_actor self{sys};
  uint16_t port = 0;
  self->request(b, timeout, ferry::cluster_atom_v)
    .receive(
      [&](ferry::cluster_description& c) {
        if (c.nodes.size() == 1)
          port = c.nodes[0].port;
      },
      [&](caf::error&) {});
  return port;
}

TEST_F(Cli, ConnectionMovesOnFromARefusingEndpointToTheNext) {
  refusing_port dead;
  ASSERT_NE(dead.port(), 0);
  auto list = dead.endpoint() + "," + broker_->endpoint();
  auto addr = ferry::parse_broker_address(list);
  ASSERT_TRUE(addr) << ferry::error_text(addr.error());
  ASSERT_EQ(addr->endpoints.size(), 2u);
  addr->connect_wait = 20s;
  ferry::test::client_system cs;
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  caf::scoped_actor self{*cs.sys};
  ferry::broker_actor b;
  self->request(conn, 30s, ferry::connect_atom_v)
    .receive([&](ferry::broker_actor& x) { b = std::move(x); },
             [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
  ASSERT_TRUE(b);
  EXPECT_EQ(described_port(*cs.sys, b), broker_->port());
  // ferryctl takes the same list, and the first endpoint wins when it works.
  auto r = run_command(FERRYCTL_PATH, {"--broker", list, "cluster", "describe"}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto first = run_command(FERRYCTL_PATH,
                           {"--broker", broker_->endpoint() + "," + dead.endpoint(), "--json",
                            "cluster", "describe"},
                           60s);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(json::parse(first.out)["nodes"][0]["port"], broker_->port()) << first.out;
}

TEST(ClientConnection, EveryEndpointRefusingFailsNamingThemAll) {
  refusing_port a;
  refusing_port b;
  ASSERT_TRUE(a.port() != 0 && b.port() != 0);
  auto list = a.endpoint() + "," + b.endpoint();
  auto addr = ferry::parse_broker_address(list);
  ASSERT_TRUE(addr) << ferry::error_text(addr.error());
  addr->connect_wait = 1500ms;
  addr->backoff_min = 50ms;
  addr->backoff_max = 200ms;
  ferry::test::client_system cs;
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  caf::scoped_actor self{*cs.sys};
  std::string text;
  auto start = std::chrono::steady_clock::now();
  self->request(conn, 20s, ferry::connect_atom_v)
    .receive([&](ferry::broker_actor&) { ADD_FAILURE() << "connected to nothing"; },
             [&](caf::error& e) { text = ferry::error_text(e); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(text.find("not connected to " + list + " after 1500 ms"), std::string::npos)
    << text;
  EXPECT_NE(text.find("last: 127.0.0.1:"), std::string::npos) << text;
  // ferryctl: the usual one-line failure, naming the whole list.
  auto r = run_command(FERRYCTL_PATH,
                       {"--broker", list, "--connect-timeout", "1000", "topic", "list"}, 20s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot connect to broker " + list), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
}

TEST(ClientConnection, ALostBrokerMovesTheConnectionToTheNextEndpoint) {
  ferryd_process first;
  ferryd_process second;
  ASSERT_TRUE(first.start()) << first.output();
  ASSERT_TRUE(second.start()) << second.output();
  auto addr = ferry::parse_broker_address(first.endpoint() + "," + second.endpoint());
  ASSERT_TRUE(addr) << ferry::error_text(addr.error());
  addr->connect_wait = 20s;
  ferry::test::client_system cs;
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  caf::scoped_actor self{*cs.sys};
  auto current = [&] {
    ferry::broker_actor b;
    self->request(conn, 30s, ferry::connect_atom_v)
      .receive([&](ferry::broker_actor& x) { b = std::move(x); },
               [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
    return b;
  };
  auto b = current();
  ASSERT_TRUE(b);
  EXPECT_EQ(described_port(*cs.sys, b), first.port()) << "the first endpoint comes first";
  first.kill9();
  // The connection notices the loss and connects to the second endpoint.
  // (Until it has noticed, it still hands out the old handle, and a request
  // sent to that one is never answered: CAF only times it out.)
  uint16_t port = 0;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (port != second.port() && std::chrono::steady_clock::now() < deadline) {
    if (auto now = current())
      port = described_port(*cs.sys, now, 1s);
    if (port != second.port())
      std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(port, second.port());
  EXPECT_EQ(second.stop(20s), 0);
}

// -- the client library in this process, ferryd in another ----------------------------

using ferry::test::client_system;

/// Sends `n` keyed messages through `prod`, many in flight; returns the
/// reports in send order (offset -1 for a failure, with `errors` counted).
std::vector<ferry::delivery_report> produce_all(caf::actor_system& sys,
                                                ferry::producer_actor prod,
                                                const std::string& topic, int n, int keys,
                                                int& errors, std::string& first_error,
                                                std::atomic<int>* progress = nullptr) {
  caf::scoped_actor self{sys};
  using handle = decltype(self->request(prod, caf::infinite, ferry::produce_atom_v,
                                        ferry::client_message{}));
  std::deque<handle> pending;
  std::vector<ferry::delivery_report> out;
  out.reserve(static_cast<size_t>(n));
  auto wait_one = [&] {
    pending.front().receive([&](ferry::delivery_report& r) {
                              out.push_back(r);
                              if (progress != nullptr)
                                ++*progress;
                            },
                            [&](caf::error& e) {
                              if (first_error.empty())
                                first_error = ferry::error_text(e);
                              ++errors;
                              out.push_back(ferry::delivery_report{});
                            });
    pending.pop_front();
  };
  for (int i = 0; i < n; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "key-" + std::to_string(i % keys);
    m.value = "v" + std::to_string(i);
    pending.push_back(self->request(prod, 180s, ferry::produce_atom_v, std::move(m)));
    if (pending.size() >= 1000)
      wait_one();
  }
  while (!pending.empty())
    wait_one();
  return out;
}

/// Sends one message (no key) through `prod` and waits for its report.
caf::expected<ferry::delivery_report> produce_one(caf::scoped_actor& self,
                                                  ferry::producer_actor prod,
                                                  const std::string& topic,
                                                  std::string value) {
  ferry::client_message m;
  m.topic = topic;
  m.value = std::move(value);
  caf::expected<ferry::delivery_report> out{caf::error{}};
  self->request(prod, 60s, ferry::produce_atom_v, std::move(m))
    .receive([&](ferry::delivery_report& r) { out = r; },
             [&](caf::error& e) { out = std::move(e); });
  return out;
}

TEST(ClientLibrary, HundredThousandKeyedMessagesThreeMembersAndAKilledOne) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  auto ctl = [&](std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), {"--broker", broker.endpoint()});
    return run_command(FERRYCTL_PATH, args, 60s, input);
  };
  ASSERT_EQ(ctl({"topic", "create", "big", "--partitions", "6"}).exit_code, 0);

  constexpr int total = 100000;
  constexpr int keys = 500;
  client_system cs;
  ferry::producer_config pcfg;
  pcfg.bootstrap = broker.endpoint();
  auto prod = ferry::spawn_producer(*cs.sys, pcfg);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  int errors = 0;
  std::string first_error;
  auto reports = produce_all(*cs.sys, *prod, "big", total, keys, errors, first_error);
  ASSERT_EQ(errors, 0) << first_error;
  // Per key: one partition, offsets rising in send order.
  std::map<std::string, std::pair<int32_t, int64_t>> last;
  for (int i = 0; i < total; ++i) {
    auto key = "key-" + std::to_string(i % keys);
    auto& r = reports[static_cast<size_t>(i)];
    auto [it, fresh] = last.emplace(key, std::make_pair(r.partition.value, r.off.value));
    if (!fresh) {
      ASSERT_EQ(it->second.first, r.partition.value) << key;
      ASSERT_LT(it->second.second, r.off.value) << key;
      it->second.second = r.off.value;
    }
  }
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);

  // Three ferryctl members split the six partitions.
  auto member = [&] {
    return child_process::start(FERRYCTL_PATH,
                                {"--broker", broker.endpoint(), "consume", "big", "--group",
                                 "trio", "--from-beginning", "--session-timeout", "6000",
                                 "--timeout", "120000"});
  };
  std::vector<std::unique_ptr<child_process>> members;
  for (int i = 0; i < 3; ++i) {
    members.push_back(member());
    ASSERT_TRUE(members.back());
  }
  auto distinct_values = [&] {
    std::set<std::string> seen;
    for (auto& m : members)
      for (auto& line : lines_of(m->out()))
        seen.insert(line);
    return seen;
  };
  auto members_with_partitions = [&](size_t want_members) {
    auto g = json::parse(ctl({"--json", "group", "describe", "trio"}).out, nullptr, false);
    if (g.is_discarded() || !g.contains("members") || g["members"].size() != want_members)
      return false;
    size_t assigned = 0;
    for (auto& m : g["members"]) {
      if (m["assignment"].empty())
        return false;
      assigned += m["assignment"].size();
    }
    return assigned == 6;
  };
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!members_with_partitions(3) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(members_with_partitions(3))
    << ctl({"group", "describe", "trio"}).out;
  while (distinct_values().size() < total && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  ASSERT_EQ(distinct_values().size(), static_cast<size_t>(total));

  // Kill one member without a goodbye: after the session timeout its
  // partitions move to the other two.
  members[0]->signal(SIGKILL);
  members[0]->wait_exit(10s);
  deadline = std::chrono::steady_clock::now() + 60s;
  while (!members_with_partitions(2) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(250ms);
  ASSERT_TRUE(members_with_partitions(2)) << ctl({"group", "describe", "trio"}).out;

  // New messages on every partition reach the survivors.
  std::string late;
  for (int i = 0; i < 600; ++i)
    late += "k" + std::to_string(i) + ":late" + std::to_string(i) + "\n";
  ASSERT_EQ(ctl({"produce", "big", "--key-separator", ":"}, late).exit_code, 0);
  auto late_seen = [&] {
    std::set<std::string> seen;
    for (size_t i = 1; i < members.size(); ++i)
      for (auto& line : lines_of(members[i]->out()))
        if (line.rfind("late", 0) == 0)
          seen.insert(line);
    return seen.size();
  };
  deadline = std::chrono::steady_clock::now() + 60s;
  while (late_seen() < 600 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  EXPECT_EQ(late_seen(), 600u);
  EXPECT_EQ(broker.stop(20s), 0);
}

TEST(ClientLibrary, ARejectedBatchFailsAloneAndLaterOnesStillLand) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  ASSERT_EQ(run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "topic", "create",
                                        "small", "--config", "max.message.bytes=2000"})
              .exit_code,
            0);
  client_system cs;
  ferry::producer_config pcfg;
  pcfg.bootstrap = broker.endpoint();
  auto prod = ferry::spawn_producer(*cs.sys, pcfg);
  ASSERT_TRUE(prod);
  caf::scoped_actor self{*cs.sys};
  auto send = [&](std::string value) {
    return produce_one(self, *prod, "small", std::move(value));
  };
  auto a = send("first");
  ASSERT_TRUE(a) << ferry::error_text(a.error());
  EXPECT_EQ(a->off.value, 0);
  // Refused by the broker (max.message.bytes): fails for good, at once.
  auto b = send(std::string(5000, 'x'));
  ASSERT_FALSE(b);
  EXPECT_EQ(ferry::code_of(b.error()), ferry::ec::message_too_large)
    << ferry::error_text(b.error());
  // Refused by the client (max.request.size).
  auto big = send(std::string(2u << 20, 'y'));
  ASSERT_FALSE(big);
  EXPECT_EQ(ferry::code_of(big.error()), ferry::ec::message_too_large);
  // The idempotent sequence closed the gap: the next batch lands.
  auto c = send("third");
  ASSERT_TRUE(c) << ferry::error_text(c.error());
  EXPECT_EQ(c->off.value, 1);
  // Unknown topics fail with their code.
  ferry::client_message m;
  m.topic = "nowhere";
  caf::error err;
  self->request(*prod, 60s, ferry::produce_atom_v, m)
    .receive([](ferry::delivery_report&) {}, [&](caf::error& e) { err = e; });
  EXPECT_EQ(ferry::code_of(err), ferry::ec::unknown_topic) << ferry::error_text(err);
  bool flushed = false;
  self->request(*prod, 60s, ferry::flush_atom_v).receive([&](bool ok) { flushed = ok; },
                                                         [](caf::error&) {});
  EXPECT_TRUE(flushed);
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  EXPECT_EQ(broker.stop(20s), 0);
}

// A broker that takes a request and never answers (SIGSTOP: the connection
// stays up): the producer's own request.timeout.ms check gives up on each
// attempt, the retries run out at delivery.timeout.ms, and the report says
// so. After SIGCONT the producer works again.
TEST(ClientLibrary, AFrozenBrokersRequestsTimeOutAndTheProducerRecovers) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  ASSERT_EQ(run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "topic", "create",
                                        "frozen"})
              .exit_code,
            0);
  client_system cs;
  ferry::producer_config pcfg;
  pcfg.bootstrap = broker.endpoint();
  pcfg.request_timeout = 300ms;
  pcfg.delivery_timeout = 1500ms;
  pcfg.retry_backoff = 50ms;
  auto prod = ferry::spawn_producer(*cs.sys, pcfg);
  ASSERT_TRUE(prod);
  caf::scoped_actor self{*cs.sys};
  auto send = [&](std::string value) {
    return produce_one(self, *prod, "frozen", std::move(value));
  };
  auto a = send("before");
  ASSERT_TRUE(a) << ferry::error_text(a.error());
  ASSERT_EQ(::kill(broker.pid(), SIGSTOP), 0);
  auto b = send("while frozen");
  ASSERT_EQ(::kill(broker.pid(), SIGCONT), 0);
  ASSERT_FALSE(b) << "acknowledged by a stopped broker";
  EXPECT_EQ(ferry::code_of(b.error()), ferry::ec::request_timed_out)
    << ferry::error_text(b.error());
  EXPECT_NE(ferry::error_text(b.error()).find("gave up after"), std::string::npos)
    << ferry::error_text(b.error());
  EXPECT_NE(ferry::error_text(b.error()).find("no answer within request.timeout.ms (300 ms)"),
            std::string::npos)
    << ferry::error_text(b.error());
  // Thawed: the next message lands (a fresh producer id if the broker might
  // have appended the one that timed out).
  auto c = send("after");
  ASSERT_TRUE(c) << ferry::error_text(c.error());
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  EXPECT_EQ(broker.stop(20s), 0);
}

// acks=0 over many partitions, 80 MB against a node that is stopped
// (SIGSTOP) for the first half second, as a fast producer on a slow link
// would run ahead of it: the producer reports a message sent when its batch
// goes out, but holds it against buffer.memory (8 MiB here) until the node
// took it, so while the node is stopped at most that much is reported; and
// every record reported sent is in the log once flush() returned and the
// client is gone. Sent as messages nobody answered, the producer used to
// report everything at once and queue it all in its connection's send
// buffer, in this process; ferry-bench, which exits after flush(), got
// 9,152 and 12,837 of 1M records into the log that way. (In this test's
// process the old producer's records all landed; it failed the bound:
// 40 and 47 requests reported while the node was stopped.)
TEST(ClientLibrary, AcksZeroOverManyPartitionsIsBoundedAndLandsEveryRecordReportedSent) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  ASSERT_EQ(run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "topic", "create",
                                        "fired", "--partitions", "32"})
              .exit_code,
            0);
  constexpr int per_request = 1000;
  constexpr int requests = 80;
  constexpr int total = per_request * requests;
  {
    client_system cs;
    ferry::producer_config pcfg;
    pcfg.bootstrap = broker.endpoint();
    pcfg.acks = ferry::acks_mode::none;
    pcfg.buffer_memory = 8u << 20;
    auto prod = ferry::spawn_producer(*cs.sys, pcfg);
    ASSERT_TRUE(prod);
    caf::scoped_actor self{*cs.sys};
    // The producer's metadata and connection first.
    ASSERT_TRUE(produce_one(self, *prod, "fired", "first"));
    ASSERT_EQ(::kill(broker.pid(), SIGSTOP), 0);
    std::thread thaw{[pid = broker.pid()] {
      std::this_thread::sleep_for(500ms);
      ::kill(pid, SIGCONT);
    }};
    struct joiner {
      std::thread& t;
      ~joiner() { t.join(); }
    } join_thaw{thaw};
    auto reported = std::make_shared<std::atomic<int>>(0);
    auto failed = std::make_shared<std::atomic<int>>(0);
    cs.sys->spawn([p = *prod, reported, failed](caf::event_based_actor* sender) {
      std::string value(1000, 'v');
      for (int r = 0; r < requests; ++r) {
        std::vector<ferry::client_message> msgs;
        for (int k = 0; k < per_request; ++k) {
          ferry::client_message m;
          m.topic = "fired";
          m.has_key = true;
          m.key = "key-" + std::to_string((r * per_request + k) % 997);
          m.value = value;
          msgs.push_back(std::move(m));
        }
        sender->request(p, caf::infinite, ferry::produce_atom_v, std::move(msgs))
          .then(
            [reported, failed](std::vector<ferry::delivery_report>& rs) {
              bool ok = rs.size() == per_request;
              for (auto& rep : rs)
                ok = ok && rep.off.value == -1; // acks=0 reports no offset
              ++(ok ? *reported : *failed);
            },
            [failed](caf::error&) { ++*failed; });
      }
    });
    std::this_thread::sleep_for(300ms);
    auto while_stopped = reported->load();
    EXPECT_LE(while_stopped, 10)
      << "requests of 1,000 x 1 KB reported sent while the node was stopped: more than "
         "buffer.memory (8 MiB) ran ahead of it";
    for (int i = 0; i < 600 && reported->load() + failed->load() < requests; ++i)
      std::this_thread::sleep_for(50ms);
    ASSERT_EQ(reported->load(), requests) << failed->load() << " requests failed";
    bool flushed = false;
    self->request(*prod, 60s, ferry::flush_atom_v).receive([&](bool ok) { flushed = ok; },
                                                           [](caf::error&) {});
    ASSERT_TRUE(flushed);
    caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  } // the client's actor system ends here
  int64_t landed = -1;
  json d;
  for (int i = 0; i < 50 && landed != total + 1; ++i) {
    if (i > 0)
      std::this_thread::sleep_for(100ms);
    d = ferry::test::ferryctl_json(broker.endpoint(), {"topic", "describe", "fired"});
    landed = 0;
    for (auto& p : d["partition_status"])
      landed += p["log_end_offset"].get<int64_t>();
  }
  EXPECT_EQ(landed, total + 1) << "records in the log of the " << total + 1
                               << " reported sent";
  EXPECT_EQ(broker.stop(20s), 0);
}

TEST(ClientLibrary, BatchProduceReportsTheOffsetsAConsumerReads) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  ASSERT_EQ(run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "topic", "create",
                                        "batched", "--partitions", "3"})
              .exit_code,
            0);
  client_system cs;
  ferry::producer_config pcfg;
  pcfg.bootstrap = broker.endpoint();
  pcfg.batch_size = 8192; // several broker batches per request
  auto prod = ferry::spawn_producer(*cs.sys, pcfg);
  ASSERT_TRUE(prod);
  caf::scoped_actor self{*cs.sys};

  // 40 requests of 500 messages, 8 in flight: null keys (sticky), keys and
  // explicit partitions mixed within each request.
  constexpr int per_request = 500;
  constexpr int requests = 40;
  constexpr int total = per_request * requests;
  auto value_of = [](int i) { return "batch-value-" + std::to_string(i); };
  using handle = decltype(self->request(*prod, caf::infinite, ferry::produce_atom_v,
                                        std::vector<ferry::client_message>{}));
  std::deque<std::pair<int, handle>> pending;
  std::vector<ferry::delivery_report> reports(total);
  std::string first_error;
  auto wait_one = [&] {
    auto [first, h] = std::move(pending.front());
    pending.pop_front();
    h.receive(
      [&, first = first](std::vector<ferry::delivery_report>& rs) {
        ASSERT_EQ(rs.size(), static_cast<size_t>(per_request));
        for (size_t k = 0; k < rs.size(); ++k)
          reports[static_cast<size_t>(first) + k] = rs[k];
      },
      [&](caf::error& e) {
        if (first_error.empty())
          first_error = ferry::error_text(e);
      });
  };
  for (int r = 0; r < requests; ++r) {
    std::vector<ferry::client_message> msgs;
    for (int k = 0; k < per_request; ++k) {
      auto i = r * per_request + k;
      ferry::client_message m;
      m.topic = "batched";
      m.value = value_of(i);
      if (i % 3 == 1) {
        m.has_key = true;
        m.key = "key-" + std::to_string(i % 17);
      } else if (i % 3 == 2) {
        m.partition = (i / 3) % 3;
      }
      msgs.push_back(std::move(m));
    }
    pending.emplace_back(r * per_request,
                         self->request(*prod, 60s, ferry::produce_atom_v, std::move(msgs)));
    if (pending.size() >= 8)
      wait_one();
  }
  while (!pending.empty())
    wait_one();
  ASSERT_TRUE(first_error.empty()) << first_error;

  // Reports: the right topic, explicit partitions kept, offsets dense per
  // partition (each one once).
  std::map<std::pair<int32_t, int64_t>, int> by_position;
  std::map<int32_t, int64_t> per_partition;
  for (int i = 0; i < total; ++i) {
    auto& r = reports[static_cast<size_t>(i)];
    ASSERT_EQ(r.topic, "batched") << i;
    ASSERT_GE(r.off.value, 0) << i;
    if (i % 3 == 2) {
      ASSERT_EQ(r.partition.value, (i / 3) % 3) << i;
    }
    ASSERT_TRUE(by_position.emplace(std::make_pair(r.partition.value, r.off.value), i).second)
      << "offset reported twice: " << r.partition.value << "/" << r.off.value;
    ++per_partition[r.partition.value];
  }
  for (auto& [p, n] : per_partition)
    EXPECT_TRUE(p >= 0 && p < 3) << p;
  // Distinct and below the count of their partition: 0..n-1 each.
  for (auto& [pos, i] : by_position)
    ASSERT_LT(pos.second, per_partition[pos.first]) << "offsets are not dense";

  // A consumer reads every message at exactly the offset its report named.
  ferry::consumer_config ccfg;
  ccfg.bootstrap = broker.endpoint();
  for (int32_t p = 0; p < 3; ++p)
    ccfg.partitions.push_back(ferry::topic_partition{"batched", ferry::partition_id{p}});
  ccfg.auto_offset_reset = "earliest";
  ccfg.enable_auto_commit = false;
  auto cons = ferry::spawn_consumer(*cs.sys, ccfg);
  ASSERT_TRUE(cons);
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (got < static_cast<size_t>(total) && std::chrono::steady_clock::now() < deadline) {
    self->request(*cons, 10s, ferry::poll_atom_v, int32_t{500})
      .receive(
        [&](std::vector<ferry::consumed_message>& msgs) {
          for (auto& m : msgs) {
            auto it = by_position.find({m.partition.value, m.off.value});
            ASSERT_NE(it, by_position.end())
              << "read " << m.partition.value << "/" << m.off.value << " that no report named";
            ASSERT_EQ(m.value, value_of(it->second))
              << "at " << m.partition.value << "/" << m.off.value;
            ++got;
          }
        },
        [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
  }
  EXPECT_EQ(got, static_cast<size_t>(total));

  // Errors fail the whole request: a record over max.request.size, an
  // unknown topic. An empty request is answered at once.
  auto batch_error = [&](std::vector<ferry::client_message> msgs) {
    caf::error err;
    self->request(*prod, 60s, ferry::produce_atom_v, std::move(msgs))
      .receive([](std::vector<ferry::delivery_report>&) {},
               [&](caf::error& e) { err = std::move(e); });
    return err;
  };
  std::vector<ferry::client_message> oversized(3);
  for (auto& m : oversized)
    m.topic = "batched";
  oversized[1].value.assign(2u << 20, 'y');
  EXPECT_EQ(ferry::code_of(batch_error(std::move(oversized))), ferry::ec::message_too_large);
  std::vector<ferry::client_message> nowhere(2);
  for (auto& m : nowhere)
    m.topic = "nowhere";
  EXPECT_EQ(ferry::code_of(batch_error(std::move(nowhere))), ferry::ec::unknown_topic);
  size_t empty_reports = 99;
  self->request(*prod, 60s, ferry::produce_atom_v, std::vector<ferry::client_message>{})
    .receive([&](std::vector<ferry::delivery_report>& rs) { empty_reports = rs.size(); },
             [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
  EXPECT_EQ(empty_reports, 0u);
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*cons, caf::exit_reason::user_shutdown);
  EXPECT_EQ(broker.stop(20s), 0);
}

TEST(ClientLibrary, ProducerAndConsumerSurviveABrokerKillWithoutDuplicates) {
  ferryd_process broker;
  ASSERT_TRUE(broker.start()) << broker.output();
  ASSERT_EQ(run_command(FERRYCTL_PATH, {"--broker", broker.endpoint(), "topic", "create",
                                        "restart", "--partitions", "3"})
              .exit_code,
            0);
  constexpr int total = 60000;
  client_system cs;
  ferry::producer_config pcfg;
  pcfg.bootstrap = broker.endpoint();
  pcfg.linger = 1ms;
  auto prod = ferry::spawn_producer(*cs.sys, pcfg);
  ASSERT_TRUE(prod);
  // Kill and restart the broker while the producer is busy.
  int errors = 0;
  std::string first_error;
  std::vector<ferry::delivery_report> reports;
  std::atomic<int> progress{0};
  std::thread producing{[&] {
    reports = produce_all(*cs.sys, *prod, "restart", total, 100, errors, first_error,
                          &progress);
  }};
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (progress < total / 10 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_LT(progress.load(), total) << "the producer finished before the kill";
  broker.kill9();
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(broker.restart(true)) << broker.output();
  producing.join();
  ASSERT_EQ(errors, 0) << first_error;

  // Every message once: offsets are dense and distinct per partition.
  std::map<int32_t, std::set<int64_t>> offsets;
  for (auto& r : reports)
    ASSERT_TRUE(offsets[r.partition.value].insert(r.off.value).second)
      << "offset reported twice: " << r.partition.value << "/" << r.off.value;
  ferry::consumer_config ccfg;
  ccfg.bootstrap = broker.endpoint();
  ccfg.topics = {"restart"};
  ccfg.auto_offset_reset = "earliest";
  auto cons = ferry::spawn_consumer(*cs.sys, ccfg);
  ASSERT_TRUE(cons);
  caf::scoped_actor self{*cs.sys};
  std::map<std::string, int> values;
  deadline = std::chrono::steady_clock::now() + 60s;
  size_t got = 0;
  bool restarted_again = false;
  while (got < total && std::chrono::steady_clock::now() < deadline) {
    self->request(*cons, 10s, ferry::poll_atom_v, int32_t{500})
      .receive(
        [&](std::vector<ferry::consumed_message>& msgs) {
          for (auto& m : msgs)
            ++values[m.value];
          got += msgs.size();
        },
        [&](caf::error& e) { ADD_FAILURE() << ferry::error_text(e); });
    if (!restarted_again && got > total / 3) {
      // The consumer too reconnects and continues where it was.
      restarted_again = true;
      broker.kill9();
      ASSERT_TRUE(broker.restart(true)) << broker.output();
    }
  }
  EXPECT_EQ(got, static_cast<size_t>(total));
  EXPECT_EQ(values.size(), static_cast<size_t>(total));
  for (auto& [v, n] : values)
    if (n != 1) {
      ADD_FAILURE() << v << " seen " << n << " times";
      break;
    }
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*cons, caf::exit_reason::user_shutdown);
  EXPECT_EQ(broker.stop(20s), 0);
}

} // namespace
