// The HTTP API of a real ferryd (--http-port 0), driven by a real HTTP client
// (Beast, asynchronous so every call is bounded by a deadline): every
// endpoint's happy path, value encodings read back identically, long polls
// that end early on new data and on their timeout, 200 long polls held at
// once and released by one produce, and a table of bad requests with their
// status and error code.

#include "tests/integration/process.hpp"

#include "broker/partitioner.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using namespace std::chrono_literals;
using ferry::test::ferryd_process;

/// What one HTTP call got.
struct http_reply {
  int status = 0;     ///< 0: no response (see error)
  std::string error;  ///< transport failure
  std::string body;
  std::string allow;
  std::string content_type;

  json j() const {
    return json::parse(body, nullptr, false);
  }

  /// The "error.code" of an error body, or "".
  std::string code() const {
    auto x = j();
    if (x.is_object() && x.contains("error") && x["error"].is_object())
      return x["error"].value("code", "");
    return "";
  }
};

/// One HTTP/1.1 exchange on its own connection, asynchronous so that the
/// deadline covers connect, write and read.
class http_call : public std::enable_shared_from_this<http_call> {
public:
  using callback = std::function<void(http_reply)>;

  http_call(net::io_context& ioc, uint16_t port, http::verb method,
            std::string target, std::string body,
            std::chrono::milliseconds timeout, callback done,
            std::string raw = {})
    : stream_(ioc), port_(port), timeout_(timeout), done_(std::move(done)),
      raw_(std::move(raw)) {
    req_.method(method);
    req_.target(target);
    req_.version(11);
    req_.set(http::field::host, "127.0.0.1");
    if (!body.empty()) {
      req_.set(http::field::content_type, "application/json");
      req_.body() = std::move(body);
    }
    req_.prepare_payload();
  }

  void start(std::function<void()> on_sent = {}) {
    on_sent_ = std::move(on_sent);
    stream_.expires_after(timeout_);
    stream_.async_connect(tcp::endpoint{net::ip::address_v4::loopback(), port_},
                          [self = shared_from_this()](beast::error_code ec) {
                            if (ec)
                              return self->finish(ec);
                            self->write();
                          });
  }

private:
  void write() {
    auto next = [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec)
        return self->finish(ec);
      if (self->on_sent_)
        self->on_sent_();
      self->read();
    };
    if (raw_.empty())
      http::async_write(stream_, req_, next);
    else
      net::async_write(stream_, net::buffer(raw_), next);
  }

  void read() {
    parser_.body_limit(64u << 20);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->finish(ec);
                     });
  }

  void finish(beast::error_code ec) {
    http_reply r;
    if (ec) {
      r.error = ec.message();
    } else {
      auto& res = parser_.get();
      r.status = static_cast<int>(res.result_int());
      r.body = res.body();
      r.allow = std::string{res[http::field::allow]};
      r.content_type = std::string{res[http::field::content_type]};
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    if (done_)
      done_(std::move(r));
  }

  beast::tcp_stream stream_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  callback done_;
  std::string raw_;
  std::function<void()> on_sent_;
  http::request<http::string_body> req_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
};

http_reply call(uint16_t port, http::verb method, const std::string& target,
                const std::string& body = {},
                std::chrono::milliseconds timeout = 30s) {
  net::io_context ioc;
  http_reply out;
  out.error = "not run";
  std::make_shared<http_call>(ioc, port, method, target, body, timeout,
                              [&](http_reply r) { out = std::move(r); })
    ->start();
  ioc.run();
  return out;
}

/// Sends `raw` bytes as they are and reads one response.
http_reply call_raw(uint16_t port, std::string raw) {
  net::io_context ioc;
  http_reply out;
  std::make_shared<http_call>(ioc, port, http::verb::get, "/", "", 10s,
                              [&](http_reply r) { out = std::move(r); },
                              std::move(raw))
    ->start();
  ioc.run();
  return out;
}

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i)
    s += static_cast<char>(i);
  return s;
}

std::string b64(const std::string& in) {
  static constexpr char t[]
    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(in[k])); };
  for (; i + 3 <= in.size(); i += 3) {
    auto n = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += {t[(n >> 18) & 63], t[(n >> 12) & 63], t[(n >> 6) & 63], t[n & 63]};
  }
  if (in.size() - i == 1) {
    auto n = at(i) << 16;
    out += {t[(n >> 18) & 63], t[(n >> 12) & 63], '=', '='};
  } else if (in.size() - i == 2) {
    auto n = (at(i) << 16) | (at(i + 1) << 8);
    out += {t[(n >> 18) & 63], t[(n >> 12) & 63], t[(n >> 6) & 63], '='};
  }
  return out;
}

class http_api : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(node_.start()) << node_.output();
    static const std::regex http_line{R"(http on ([^\s:]+):([0-9]+)\r?\n)"};
    auto m = node_.child()->wait_for(http_line, 10s);
    ASSERT_TRUE(m) << "no 'http on' line:\n" << node_.output();
    port_ = static_cast<uint16_t>(std::stoi((*m)[2]));
  }

  void TearDown() override {
    EXPECT_EQ(node_.stop(), 0) << node_.output();
  }

  http_reply get(const std::string& target,
                 std::chrono::milliseconds timeout = 30s) {
    return call(port_, http::verb::get, target, {}, timeout);
  }
  http_reply post(const std::string& target, const json& body) {
    return call(port_, http::verb::post, target, body.dump());
  }
  http_reply patch(const std::string& target, const json& body) {
    return call(port_, http::verb::patch, target, body.dump());
  }
  http_reply put(const std::string& target, const json& body) {
    return call(port_, http::verb::put, target, body.dump());
  }
  http_reply del(const std::string& target) {
    return call(port_, http::verb::delete_, target);
  }

  void create_topic(const std::string& name, int partitions = 1,
                    json config = json::object()) {
    auto r = post("/v1/topics", {{"name", name},
                                 {"partitions", partitions},
                                 {"config", config}});
    ASSERT_EQ(r.status, 201) << r.body << r.error;
  }

  /// Produces and returns the offsets array.
  json produce(const std::string& topic, const json& body,
               const std::string& query = "") {
    auto r = post("/v1/topics/" + topic + "/messages" + query, body);
    EXPECT_EQ(r.status, 200) << r.body << r.error;
    return r.j().value("offsets", json::array());
  }

  ferryd_process node_{{"--http-port", "0"}};
  uint16_t port_ = 0;
};

// -- happy paths ----------------------------------------------------------------

TEST_F(http_api, health_and_cluster_describe_the_node) {
  auto h = get("/healthz");
  ASSERT_EQ(h.status, 200) << h.body << h.error;
  EXPECT_EQ(h.j()["status"], "ok");
  EXPECT_EQ(h.content_type, "application/json");
  create_topic("orders", 2);
  auto c = get("/v1/cluster");
  ASSERT_EQ(c.status, 200) << c.body;
  auto cj = c.j();
  EXPECT_FALSE(cj["clusterId"].get<std::string>().empty());
  ASSERT_EQ(cj["nodes"].size(), 1u);
  EXPECT_EQ(cj["nodes"][0]["port"], node_.port());
  EXPECT_EQ(cj["nodes"][0]["httpPort"], port_);
  ASSERT_EQ(cj["topics"].size(), 1u);
  EXPECT_EQ(cj["topics"][0]["name"], "orders");
  EXPECT_EQ(cj["topics"][0]["partitions"].size(), 2u);
}

TEST_F(http_api, topic_lifecycle_create_list_describe_alter_delete) {
  auto r = post("/v1/topics", {{"name", "orders"},
                               {"partitions", 3},
                               {"replicationFactor", 1},
                               {"config", {{"retention.ms", 3600000},
                                           {"max.message.bytes", "65536"}}}});
  ASSERT_EQ(r.status, 201) << r.body;
  auto t = r.j();
  EXPECT_EQ(t["name"], "orders");
  EXPECT_EQ(t["partitionCount"], 3);
  EXPECT_EQ(t["replicationFactor"], 1);
  EXPECT_EQ(t["config"]["retention.ms"], 3600000);
  EXPECT_EQ(t["config"]["max.message.bytes"], 65536);

  create_topic("audit");
  auto list = get("/v1/topics");
  ASSERT_EQ(list.status, 200);
  auto names = list.j()["topics"];
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0]["name"], "audit");
  EXPECT_EQ(names[1]["name"], "orders");

  auto d = get("/v1/topics/orders");
  ASSERT_EQ(d.status, 200) << d.body;
  auto dj = d.j();
  ASSERT_EQ(dj["partitions"].size(), 3u);
  for (auto& p : dj["partitions"]) {
    EXPECT_TRUE(p["online"].get<bool>());
    EXPECT_EQ(p["highWatermark"], 0);
    EXPECT_EQ(p["logStartOffset"], 0);
  }

  auto a = patch("/v1/topics/orders", {{"config", {{"retention.ms", 60000}}}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["config"]["retention.ms"], 60000);
  auto g = patch("/v1/topics/orders",
                 {{"config", {{"retention.bytes", 1048576}}}, {"partitions", 5}});
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.j()["partitionCount"], 5);
  EXPECT_EQ(g.j()["config"]["retention.bytes"], 1048576);
  EXPECT_EQ(get("/v1/topics/orders").j()["partitions"].size(), 5u);

  auto x = del("/v1/topics/orders");
  ASSERT_EQ(x.status, 200) << x.body;
  EXPECT_EQ(x.j()["deleted"], "orders");
  EXPECT_EQ(get("/v1/topics/orders").status, 404);
  EXPECT_EQ(get("/v1/topics").j()["topics"].size(), 1u);
}

TEST_F(http_api, values_read_back_identically_in_every_encoding) {
  create_topic("values");
  auto binary = all_bytes();
  json obj = {{"id", 7}, {"tags", {"a", "b"}}, {"nested", {{"x", nullptr}}}};
  json records = json::array({
    {{"key", "k-json"}, {"value", obj}},
    {{"key", "k-string"}, {"value", "hello, wörld"}},
    {{"key", "k-bin"}, {"value", b64(binary)}, {"encoding", "base64"}},
    {{"key", "k-num"}, {"value", 42.5}},
    {{"key", "k-jsonstr"}, {"value", "quoted"}, {"encoding", "json"}},
    {{"key", nullptr}, {"value", nullptr}},
    {{"key", "k-h"},
     {"value", "with headers"},
     {"headers", {{"trace", "abc"}, {"n", "1"}}}},
    {{"key", b64("\xff\xfe")},
     {"keyEncoding", "base64"},
     {"value", "binary key"}},
  });
  auto offs = produce("values", {{"records", records}});
  ASSERT_EQ(offs.size(), records.size());
  for (size_t i = 0; i < offs.size(); ++i) {
    EXPECT_EQ(offs[i]["partition"], 0);
    EXPECT_EQ(offs[i]["offset"], static_cast<int64_t>(i));
  }

  auto r = get("/v1/topics/values/partitions/0/messages?offset=0");
  ASSERT_EQ(r.status, 200) << r.body;
  auto m = r.j()["messages"];
  ASSERT_EQ(m.size(), records.size()) << r.body;
  EXPECT_EQ(r.j()["nextOffset"], records.size());
  EXPECT_EQ(r.j()["highWatermark"], records.size());
  EXPECT_EQ(m[0]["value"], obj);
  EXPECT_EQ(m[0]["encoding"], "json");
  EXPECT_EQ(m[0]["key"], "k-json");
  EXPECT_EQ(m[1]["value"], "hello, wörld");
  EXPECT_EQ(m[1]["encoding"], "string");
  EXPECT_EQ(m[2]["value"], b64(binary));
  EXPECT_EQ(m[2]["encoding"], "base64");
  EXPECT_EQ(m[3]["value"], 42.5);
  EXPECT_EQ(m[3]["encoding"], "json");
  EXPECT_EQ(m[4]["value"], "quoted");
  EXPECT_EQ(m[4]["encoding"], "json");
  EXPECT_TRUE(m[5]["key"].is_null());
  EXPECT_TRUE(m[5]["value"].is_null());
  EXPECT_EQ(m[6]["headers"], json({{"trace", "abc"}, {"n", "1"}}));
  EXPECT_EQ(m[7]["key"], b64("\xff\xfe"));
  EXPECT_EQ(m[7]["keyEncoding"], "base64");
  for (auto& x : m)
    EXPECT_GT(x["timestamp"].get<int64_t>(), 0);

  // Explicit read encodings.
  auto s = get("/v1/topics/values/partitions/0/messages?offset=0&limit=2&encoding=string");
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.j()["messages"][0]["value"], obj.dump());
  EXPECT_EQ(s.j()["messages"][0]["encoding"], "string");
  auto b = get("/v1/topics/values/partitions/0/messages?offset=1&limit=2&encoding=base64");
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.j()["messages"][0]["value"], b64("hello, wörld"));
  EXPECT_EQ(b.j()["messages"][1]["value"], b64(binary));
  // json asked for bytes that are not JSON: falls back and says so.
  auto j = get("/v1/topics/values/partitions/0/messages?offset=2&limit=1&encoding=json");
  EXPECT_EQ(j.j()["messages"][0]["encoding"], "base64");
}

TEST_F(http_api, keyed_records_land_where_murmur2_puts_them) {
  create_topic("keyed", 4);
  json records = json::array();
  for (int i = 0; i < 24; ++i)
    records.push_back({{"key", "user-" + std::to_string(i)}, {"value", i}});
  auto offs = produce("keyed", {{"records", records}});
  ASSERT_EQ(offs.size(), 24u);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(offs[i]["partition"],
              ferry::partition_for_key("user-" + std::to_string(i), 4))
      << i;
  // Null keys of one request stay together on one partition.
  json nulls = json::array();
  for (int i = 0; i < 5; ++i)
    nulls.push_back({{"value", i}});
  auto n = produce("keyed", {{"records", nulls}});
  ASSERT_EQ(n.size(), 5u);
  for (auto& o : n)
    EXPECT_EQ(o["partition"], n[0]["partition"]);
  // An explicit partition wins (query, body, record), with any acks.
  auto q = produce("keyed", {{"key", "user-0"}, {"value", 1}}, "?partition=3&acks=1");
  EXPECT_EQ(q[0]["partition"], 3);
  auto bp = produce("keyed", {{"partition", 2}, {"acks", 0}, {"records", {{{"value", 1}}}}});
  EXPECT_EQ(bp[0]["partition"], 2);
  auto rp = produce("keyed", {{"records", {{{"value", 1}, {"partition", 1}}}}});
  EXPECT_EQ(rp[0]["partition"], 1);
  // Every record is where the offsets said. The acks=0 one is answered
  // before it is appended, so it may take a moment to show.
  int64_t total = 0;
  for (int attempt = 0; attempt < 50; ++attempt) {
    total = 0;
    for (int p = 0; p < 4; ++p) {
      auto r = get("/v1/topics/keyed/partitions/" + std::to_string(p) + "/messages?limit=1000");
      ASSERT_EQ(r.status, 200);
      total += static_cast<int64_t>(r.j()["messages"].size());
    }
    if (total == 24 + 5 + 3)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  EXPECT_EQ(total, 24 + 5 + 3);
}

TEST_F(http_api, fetch_pages_with_limit_and_next_offset) {
  create_topic("pages");
  json records = json::array();
  for (int i = 0; i < 10; ++i)
    records.push_back({{"value", "m" + std::to_string(i)}});
  produce("pages", {{"records", records}});
  int64_t next = 0;
  std::vector<std::string> seen;
  for (int page = 0; page < 4; ++page) {
    auto r = get("/v1/topics/pages/partitions/0/messages?offset=" + std::to_string(next)
                 + "&limit=3");
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = r.j();
    for (auto& m : j["messages"]) {
      EXPECT_EQ(m["offset"], static_cast<int64_t>(seen.size()));
      seen.push_back(m["value"]);
    }
    next = j["nextOffset"];
    EXPECT_EQ(j["highWatermark"], 10);
  }
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_EQ(seen[9], "m9");
  EXPECT_EQ(next, 10);
  auto latest = get("/v1/topics/pages/partitions/0/messages?offset=latest");
  ASSERT_EQ(latest.status, 200);
  EXPECT_TRUE(latest.j()["messages"].empty());
  EXPECT_EQ(latest.j()["nextOffset"], 10);
  auto earliest = get("/v1/topics/pages/partitions/0/messages?offset=earliest&limit=1");
  EXPECT_EQ(earliest.j()["messages"][0]["value"], "m0");
}

TEST_F(http_api, long_poll_returns_early_when_a_message_arrives) {
  create_topic("poll");
  http_reply produced;
  std::thread producer{[&] {
    std::this_thread::sleep_for(300ms);
    produced = call(port_, http::verb::post, "/v1/topics/poll/messages",
                    json{{"value", "wake up"}}.dump());
  }};
  // Waits up to 20 s unless the message comes: the result tells which.
  auto r = get("/v1/topics/poll/partitions/0/messages?offset=0&maxWaitMs=20000", 40s);
  producer.join();
  ASSERT_EQ(produced.status, 200) << produced.body;
  ASSERT_EQ(r.status, 200) << r.body << r.error;
  ASSERT_EQ(r.j()["messages"].size(), 1u) << r.body;
  EXPECT_EQ(r.j()["messages"][0]["value"], "wake up");
  EXPECT_EQ(r.j()["nextOffset"], 1);
}

TEST_F(http_api, long_poll_returns_empty_when_its_wait_ends) {
  create_topic("quiet");
  auto r = get("/v1/topics/quiet/partitions/0/messages?offset=0&maxWaitMs=300", 20s);
  ASSERT_EQ(r.status, 200) << r.body << r.error;
  EXPECT_TRUE(r.j()["messages"].empty());
  EXPECT_EQ(r.j()["nextOffset"], 0);
  EXPECT_EQ(r.j()["highWatermark"], 0);
}

TEST_F(http_api, two_hundred_long_polls_are_held_and_released_by_one_produce) {
  create_topic("fanout");
  constexpr int n = 200;
  net::io_context ioc;
  std::vector<http_reply> replies(n);
  std::atomic<int> sent{0}, done{0};
  for (int i = 0; i < n; ++i)
    std::make_shared<http_call>(
      ioc, port_, http::verb::get,
      "/v1/topics/fanout/partitions/0/messages?offset=0&maxWaitMs=30000", "",
      60s,
      [&, i](http_reply r) {
        replies[i] = std::move(r);
        ++done;
      })
      ->start([&] { ++sent; });
  std::thread io{[&] { ioc.run(); }};
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (sent.load() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  // Let the gateway hand the last ones to the partition.
  std::this_thread::sleep_for(500ms);
  auto held = n - done.load();
  auto p = call(port_, http::verb::post, "/v1/topics/fanout/messages",
                json{{"value", "for everyone"}}.dump());
  io.join(); // every call ends: with a reply or at its 60 s deadline
  EXPECT_EQ(sent.load(), n);
  EXPECT_EQ(held, n) << "long polls answered before any data existed";
  ASSERT_EQ(p.status, 200) << p.body;
  int released = 0;
  for (auto& r : replies) {
    if (r.status == 200 && r.j()["messages"].size() == 1
        && r.j()["messages"][0]["value"] == "for everyone")
      ++released;
  }
  EXPECT_EQ(released, n);
}

TEST_F(http_api, groups_commit_describe_reset_and_delete) {
  create_topic("events", 2);
  json records = json::array();
  for (int i = 0; i < 10; ++i)
    records.push_back({{"value", i}, {"partition", 0}});
  produce("events", {{"records", records}});

  auto c = post("/v1/groups/billing/offsets",
                {{"topic", "events"}, {"partition", 0}, {"offset", 4}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["offsets"][0]["offset"], 4);
  auto c2 = post("/v1/groups/billing/offsets",
                 {{"offsets", {{{"topic", "events"}, {"partition", 1}, {"offset", 0}}}}});
  ASSERT_EQ(c2.status, 200) << c2.body;

  auto list = get("/v1/groups");
  ASSERT_EQ(list.status, 200) << list.body;
  bool found = false;
  auto groups = list.j()["groups"];
  for (auto& g : groups)
    found = found || g["group"] == "billing";
  EXPECT_TRUE(found) << list.body;

  auto d = get("/v1/groups/billing");
  ASSERT_EQ(d.status, 200) << d.body;
  auto dj = d.j();
  EXPECT_EQ(dj["group"], "billing");
  EXPECT_TRUE(dj["members"].empty());
  bool p0 = false;
  for (auto& p : dj["partitions"]) {
    if (p["topic"] == "events" && p["partition"] == 0) {
      p0 = true;
      EXPECT_EQ(p["committedOffset"], 4);
      EXPECT_EQ(p["logEndOffset"], 10);
      EXPECT_EQ(p["lag"], 6);
    }
  }
  EXPECT_TRUE(p0) << d.body;

  auto dry = post("/v1/groups/billing/reset",
                  {{"topic", "events"}, {"to", "earliest"}, {"dryRun", true}});
  ASSERT_EQ(dry.status, 200) << dry.body;
  EXPECT_TRUE(dry.j()["dryRun"].get<bool>());
  auto planned = dry.j()["offsets"];
  for (auto& o : planned)
    EXPECT_EQ(o["offset"], 0);
  auto unchanged = get("/v1/groups/billing").j()["partitions"];
  for (auto& p : unchanged) {
    if (p["partition"] == 0) {
      EXPECT_EQ(p["committedOffset"], 4);
    }
  }
  auto real = post("/v1/groups/billing/reset",
                   {{"topic", "events"}, {"to", "offset"}, {"value", 2}});
  ASSERT_EQ(real.status, 200) << real.body;
  auto moved = get("/v1/groups/billing").j()["partitions"];
  for (auto& p : moved) {
    if (p["partition"] == 0) {
      EXPECT_EQ(p["committedOffset"], 2);
    }
  }

  auto x = del("/v1/groups/billing");
  ASSERT_EQ(x.status, 200) << x.body;
  EXPECT_EQ(x.j()["deleted"], "billing");
  EXPECT_EQ(get("/v1/groups/billing").status, 404);
}

TEST_F(http_api, shutdown_with_long_polls_in_flight_is_clean) {
  create_topic("idle");
  net::io_context ioc;
  std::atomic<int> sent{0}, done{0};
  for (int i = 0; i < 5; ++i)
    std::make_shared<http_call>(
      ioc, port_, http::verb::get,
      "/v1/topics/idle/partitions/0/messages?offset=0&maxWaitMs=60000", "", 90s,
      [&](http_reply) { ++done; })
      ->start([&] { ++sent; });
  std::thread io{[&] { ioc.run(); }};
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (sent.load() < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(done.load(), 0);
  // SIGTERM must not wait for the 60 s polls: their connections are closed
  // and the node shuts down as usual (the harness kills after 20 s).
  EXPECT_EQ(node_.stop(20s), 0) << node_.output();
  io.join(); // the polls end once their connections are closed
  EXPECT_EQ(done.load(), 5);
}

TEST(http_port, a_taken_port_fails_clearly_and_minus_one_disables_the_api) {
  ferryd_process first;
  ASSERT_TRUE(first.start()) << first.output();
  static const std::regex http_line{R"(http on ([^\s:]+):([0-9]+)\r?\n)"};
  auto m = first.child()->wait_for(http_line, 10s);
  ASSERT_TRUE(m) << first.output();
  ferryd_process second{{"--http-port", (*m)[2]}};
  EXPECT_FALSE(second.start(0, 30s));
  ASSERT_NE(second.child(), nullptr);
  auto status = second.child()->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  EXPECT_NE(second.output().find("cannot serve the HTTP API"), std::string::npos)
    << second.output();
  ferryd_process off{{"--http-port", "-1"}};
  ASSERT_TRUE(off.start()) << off.output();
  EXPECT_FALSE(off.child()->wait_for(http_line, 500ms)) << off.output();
  EXPECT_EQ(off.stop(), 0);
  EXPECT_EQ(call(static_cast<uint16_t>(std::stoi((*m)[2])), http::verb::get,
                 "/healthz")
              .status,
            200);
  EXPECT_EQ(first.stop(), 0);
}

TEST_F(http_api, queue_mode_receive_ack_nack_reject_extend) {
  create_topic("jobs", 1);
  produce("jobs", {{"records", {{{"key", "a"}, {"value", "one"}},
                                {{"key", "b"}, {"value", "two"}},
                                {{"key", "c"}, {"value", "three"}}}}});
  auto r = post("/v1/groups/workers/queue/jobs/receive",
                {{"member", "m1"}, {"max", 10}, {"visibilityMs", 20000}, {"waitMs", 5000}});
  ASSERT_EQ(r.status, 200) << r.body << r.error;
  auto recs = r.j()["records"];
  ASSERT_EQ(recs.size(), 3u) << r.body;
  for (auto& x : recs) {
    EXPECT_EQ(x["topic"], "jobs");
    EXPECT_EQ(x["partition"], 0);
    EXPECT_EQ(x["attempt"], 1);
    EXPECT_TRUE(x["leaseId"].is_string());
    EXPECT_GT(x["deadline"].get<int64_t>(), 0);
  }
  EXPECT_EQ(recs[0]["key"], "a");
  EXPECT_EQ(recs[0]["value"], "one");
  auto settle = [&](const char* kind, const json& rec, json extra = json::object()) {
    json body{{"member", "m1"},
              {"partition", rec["partition"]},
              {"offset", rec["offset"]},
              {"leaseId", rec["leaseId"]}};
    for (auto& [k, v] : extra.items())
      body[k] = v;
    return post(std::string{"/v1/groups/workers/queue/jobs/"} + kind, body);
  };
  // extend, then ack the first record.
  auto e = settle("extend", recs[0], {{"extendMs", 60000}});
  ASSERT_EQ(e.status, 200) << e.body;
  EXPECT_EQ(e.j()["result"], "extend");
  EXPECT_GT(e.j()["deadline"].get<int64_t>(), recs[0]["deadline"].get<int64_t>());
  auto a = settle("ack", recs[0]);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["result"], "ack");
  // A second ack of the same lease finds nothing.
  auto again = settle("ack", recs[0]);
  EXPECT_EQ(again.status, 404) << again.body;
  EXPECT_EQ(again.code(), "lease_not_found");
  // Another member may not settle m1's lease.
  json other{{"member", "m2"}, {"partition", 0}, {"offset", recs[1]["offset"]},
             {"leaseId", recs[1]["leaseId"]}};
  auto wrong = post("/v1/groups/workers/queue/jobs/ack", other);
  EXPECT_EQ(wrong.status, 409) << wrong.body;
  EXPECT_EQ(wrong.code(), "not_lease_owner");
  // nack the second: delivered again (attempt 2) after the backoff.
  auto n = settle("nack", recs[1], {{"error", "db down"}});
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_EQ(n.j()["result"], "nack");
  EXPECT_EQ(n.j()["attempts"], 1);
  EXPECT_EQ(n.j()["deadLetter"], false);
  EXPECT_TRUE(n.j().contains("retryAt"));
  // reject the third: dead-lettered.
  auto rj = settle("reject", recs[2], {{"error", "bad payload"}});
  ASSERT_EQ(rj.status, 200) << rj.body;
  EXPECT_EQ(rj.j()["deadLetter"], true);
  auto r2 = post("/v1/groups/workers/queue/jobs/receive",
                 {{"member", "m2"}, {"waitMs", 10000}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  auto recs2 = r2.j()["records"];
  ASSERT_EQ(recs2.size(), 1u) << r2.body;
  EXPECT_EQ(recs2[0]["offset"], recs[1]["offset"]);
  EXPECT_EQ(recs2[0]["attempt"], 2);
  json ack2{{"member", "m2"}, {"partition", 0}, {"offset", recs2[0]["offset"]},
            {"leaseId", recs2[0]["leaseId"]}};
  ASSERT_EQ(post("/v1/groups/workers/queue/jobs/ack", ack2).status, 200);
  // The rejected record is in the DLQ with its headers; the group is done.
  json dlq_msgs;
  for (int i = 0; i < 100; ++i) {
    auto f = get("/v1/topics/jobs.workers.dlq/partitions/0/messages?offset=0");
    if (f.status == 200 && !f.j()["messages"].empty()) {
      dlq_msgs = f.j()["messages"];
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(dlq_msgs.size(), 1u);
  EXPECT_EQ(dlq_msgs[0]["value"], "three");
  EXPECT_EQ(dlq_msgs[0]["headers"]["ferry-error"], "bad payload");
  EXPECT_EQ(dlq_msgs[0]["headers"]["ferry-group"], "workers");
  auto g = get("/v1/groups/workers");
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.j()["mode"], "queue") << g.body;
  // Nothing left: an empty long poll.
  auto r3 = post("/v1/groups/workers/queue/jobs/receive",
                 {{"member", "m2"}, {"waitMs", 200}});
  ASSERT_EQ(r3.status, 200) << r3.body;
  EXPECT_TRUE(r3.j()["records"].empty());
}

// -- bad requests ----------------------------------------------------------------

struct bad_case {
  const char* name;
  http::verb method;
  std::string target;
  std::string body;
  int status;
  const char* code;
};

// Issue 20: a queue group is created with its settings over HTTP (so its
// first receive does not take the defaults), described, and altered one
// setting at a time; the settings apply to the leases it hands out.
TEST_F(http_api, queue_group_settings_create_describe_alter) {
  create_topic("tasks", 1);
  auto c = put("/v1/groups/crew/queue",
               {{"maxAttempts", 3}, {"initialBackoffMs", 200}, {"maxBackoffMs", 5000},
                {"backoffMultiplier", 3.0}, {"jitter", 0.5},
                {"visibilityTimeoutMs", 45000}, {"ordering", "key"}});
  ASSERT_EQ(c.status, 201) << c.body << c.error;
  EXPECT_EQ(c.j()["config"]["maxAttempts"], 3);
  EXPECT_EQ(c.j()["config"]["dlqTopic"], "");
  auto d = get("/v1/groups/crew/queue");
  ASSERT_EQ(d.status, 200) << d.body;
  auto cfg = d.j()["config"];
  EXPECT_EQ(d.j()["mode"], "queue");
  EXPECT_EQ(cfg["initialBackoffMs"], 200);
  EXPECT_EQ(cfg["maxBackoffMs"], 5000);
  EXPECT_EQ(cfg["backoffMultiplier"], 3.0);
  EXPECT_EQ(cfg["jitter"], 0.5);
  EXPECT_EQ(cfg["visibilityTimeoutMs"], 45000);
  EXPECT_EQ(cfg["ordering"], "key");
  // The same create again is fine; one with other settings is a conflict
  // and the settings stay.
  auto same = put("/v1/groups/crew/queue",
                  {{"maxAttempts", 3}, {"initialBackoffMs", 200}, {"maxBackoffMs", 5000},
                   {"backoffMultiplier", 3.0}, {"jitter", 0.5},
                   {"visibilityTimeoutMs", 45000}, {"ordering", "key"}});
  EXPECT_EQ(same.status, 200) << same.body;
  auto again = put("/v1/groups/crew/queue", {{"maxAttempts", 9}});
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_NE(again.body.find("PATCH"), std::string::npos) << again.body;
  // Altering one setting keeps the others.
  auto a = patch("/v1/groups/crew/queue", {{"jitter", 0.0}, {"maxAttempts", 4}});
  ASSERT_EQ(a.status, 200) << a.body;
  d = get("/v1/groups/crew/queue");
  ASSERT_EQ(d.status, 200) << d.body;
  cfg = d.j()["config"];
  EXPECT_EQ(cfg["jitter"], 0.0);
  EXPECT_EQ(cfg["maxAttempts"], 4);
  EXPECT_EQ(cfg["initialBackoffMs"], 200);
  EXPECT_EQ(cfg["ordering"], "key");
  // The group's visibility timeout is what a receive without one gets.
  produce("tasks", {{"records", {{{"key", "a"}, {"value", "one"}}}}});
  auto t0 = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = post("/v1/groups/crew/queue/tasks/receive", {{"member", "m1"}, {"waitMs", 5000}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["records"].size(), 1u) << r.body;
  auto deadline = r.j()["records"][0]["deadline"].get<int64_t>();
  EXPECT_GE(deadline, t0 + 44000) << r.body;
  EXPECT_LE(deadline, t0 + 60000) << r.body;
  // Bad settings are refused before anything changes.
  struct bad_case {
    const char* name;
    http::verb method;
    const char* target;
    json body;
    unsigned status;
  };
  for (auto& b : {bad_case{"jitter above 1", http::verb::patch, "/v1/groups/crew/queue",
                           {{"jitter", 1.5}}, 400},
                  bad_case{"multiplier below 1", http::verb::put, "/v1/groups/crew2/queue",
                           {{"backoffMultiplier", 0.5}}, 400},
                  bad_case{"unknown setting", http::verb::put, "/v1/groups/crew2/queue",
                           {{"retries", 3}}, 400},
                  bad_case{"bad ordering", http::verb::patch, "/v1/groups/crew/queue",
                           {{"ordering", "random"}}, 400},
                  bad_case{"not an object", http::verb::put, "/v1/groups/crew2/queue",
                           json::array(), 400},
                  bad_case{"alter an unknown group", http::verb::patch,
                           "/v1/groups/nobody/queue", {{"jitter", 0.1}}, 404}}) {
    auto x = call(port_, b.method, b.target, b.body.dump());
    EXPECT_EQ(x.status, b.status) << b.name << ": " << x.body;
  }
  EXPECT_EQ(get("/v1/groups/crew/queue").j()["config"]["jitter"], 0.0);
  EXPECT_EQ(get("/v1/groups/crew2/queue").status, 404);
}

// Issue 20: a queue group created at "latest" skips what its topic held;
// reset moves it back; the start shows in describe; bad starts are 400.
TEST_F(http_api, queue_group_start_position_and_reset) {
  create_topic("jobs", 1);
  produce("jobs", {{"records", {{{"value", "old1"}}, {{"value", "old2"}}}}});
  auto c = put("/v1/groups/late/queue", {{"start", "latest"}});
  ASSERT_EQ(c.status, 201) << c.body << c.error;
  EXPECT_EQ(c.j()["config"]["start"], "latest");
  auto r = post("/v1/groups/late/queue/jobs/receive", {{"member", "m1"}, {"waitMs", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["records"].size(), 0u) << r.body;
  produce("jobs", {{"records", {{{"value", "new1"}}}}});
  r = post("/v1/groups/late/queue/jobs/receive", {{"member", "m1"}, {"waitMs", 5000}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["records"].size(), 1u) << r.body;
  EXPECT_EQ(r.j()["records"][0]["value"], "new1");
  // Leased: a reset is refused (409), naming the leases.
  auto refused = post("/v1/groups/late/reset", {{"topic", "jobs"}, {"to", "earliest"}});
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_NE(refused.body.find("leased"), std::string::npos) << refused.body;
  auto lease = r.j()["records"][0]["leaseId"];
  auto ack = post("/v1/groups/late/queue/jobs/ack",
                  {{"member", "m1"}, {"partition", 0}, {"offset", 2}, {"leaseId", lease}});
  ASSERT_EQ(ack.status, 200) << ack.body;
  auto reset = post("/v1/groups/late/reset", {{"topic", "jobs"}, {"to", "earliest"}});
  ASSERT_EQ(reset.status, 200) << reset.body;
  r = post("/v1/groups/late/queue/jobs/receive", {{"member", "m1"}, {"waitMs", 5000}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["records"].size(), 3u) << r.body;
  EXPECT_EQ(r.j()["records"][0]["value"], "old1");
  // A time as ISO 8601 or epoch ms; shown as ISO 8601 UTC.
  auto t = put("/v1/groups/timed/queue", {{"start", "2026-12-01T08:30:00+01:00"}});
  ASSERT_EQ(t.status, 201) << t.body;
  EXPECT_EQ(t.j()["config"]["start"], "2026-12-01T07:30:00.000Z");
  auto p = patch("/v1/groups/timed/queue", {{"start", 1796113800000}, {"delayMs", 2500}});
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(get("/v1/groups/timed/queue").j()["config"]["start"], "2026-12-01T08:30:00.000Z");
  EXPECT_EQ(get("/v1/groups/timed/queue").j()["config"]["delayMs"], 2500);
  EXPECT_EQ(patch("/v1/groups/timed/queue", {{"delayMs", 43'200'001}}).status, 400);
  for (auto bad : {json("yesterday"), json(-5), json(true)}) {
    auto x = put("/v1/groups/badstart/queue", {{"start", bad}});
    EXPECT_EQ(x.status, 400) << bad.dump() << ": " << x.body;
    EXPECT_NE(x.body.find("earliest, latest"), std::string::npos) << x.body;
  }
}

TEST_F(http_api, queue_receive_over_several_topics) {
  create_topic("emails", 1);
  create_topic("sms", 2);
  produce("emails", {{"records", {{{"value", "e1"}}}}});
  produce("sms", {{"records", {{{"value", "s1"}}, {{"value", "s2"}}}}});
  // Without a wait, the first receive answers once every partition was read.
  auto r = post("/v1/groups/notify/queue/receive",
                {{"member", "m1"}, {"topics", {"emails", "sms"}}, {"waitMs", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto first = r.j();
  std::multiset<std::string> got;
  for (auto& rec : first["records"])
    got.insert(rec["topic"].get<std::string>() + ":" + rec["value"].get<std::string>());
  EXPECT_EQ(got, (std::multiset<std::string>{"emails:e1", "sms:s1", "sms:s2"})) << r.body;
  // Settled on the topic-less route with the record's topic in the body:
  // one by one, or many in one call with an outcome per record.
  auto one = first["records"][0];
  auto a = post("/v1/groups/notify/queue/ack",
                {{"member", "m1"}, {"topic", one["topic"]}, {"partition", one["partition"]},
                 {"offset", one["offset"]}, {"leaseId", one["leaseId"]}});
  ASSERT_EQ(a.status, 200) << a.body;
  json batch = json::array();
  for (size_t i = 1; i < first["records"].size(); ++i) {
    auto& rec = first["records"][i];
    batch.push_back({{"topic", rec["topic"]}, {"partition", rec["partition"]},
                     {"offset", rec["offset"]}, {"leaseId", rec["leaseId"]}});
  }
  batch.push_back(batch[0]); // settled twice: this one fails alone
  auto ab = post("/v1/groups/notify/queue/ack", {{"member", "m1"}, {"records", batch}});
  ASSERT_EQ(ab.status, 200) << ab.body;
  auto results = ab.j()["results"];
  ASSERT_EQ(results.size(), 3u) << ab.body;
  EXPECT_EQ(results[0]["result"], "ack") << ab.body;
  EXPECT_EQ(results[1]["result"], "ack") << ab.body;
  EXPECT_EQ(results[0]["topic"], batch[0]["topic"]) << ab.body;
  EXPECT_EQ(results[2]["error"]["code"], "lease_not_found") << ab.body;
  EXPECT_EQ(results[2]["offset"], batch[0]["offset"]) << ab.body;
  // A batch with a malformed record is refused whole, naming it.
  auto bb = post("/v1/groups/notify/queue/ack",
                 {{"member", "m1"}, {"records", {{{"topic", "sms"}, {"partition", 0}}}}});
  EXPECT_EQ(bb.status, 400) << bb.body;
  EXPECT_NE(bb.body.find("records[0]"), std::string::npos) << bb.body;
  bb = post("/v1/groups/notify/queue/ack", {{"member", "m1"}, {"records", json::array()}});
  EXPECT_EQ(bb.status, 400) << bb.body;
  auto d = get("/v1/groups/notify/queue");
  ASSERT_EQ(d.status, 200) << d.body;
  auto described = d.j();
  int64_t committed = 0;
  for (auto& p : described["partitions"])
    committed += p["committed"].get<int64_t>();
  EXPECT_EQ(committed, 3) << d.body;
  // The path's topic plus "topics" also works; a long poll over both wakes
  // on either.
  produce("emails", {{"records", {{{"value", "e2"}}}}});
  r = post("/v1/groups/notify/queue/sms/receive",
           {{"member", "m1"}, {"topics", {"emails"}}, {"waitMs", 2000}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["records"].size(), 1u) << r.body;
  EXPECT_EQ(r.j()["records"][0]["topic"], "emails");
  // Bad input: no topics, not an array, an empty name, an unknown topic, an
  // ack without its topic.
  auto x = post("/v1/groups/notify/queue/receive", {{"member", "m1"}});
  EXPECT_EQ(x.status, 400) << x.body;
  EXPECT_NE(x.body.find("is required (the topics to receive from)"), std::string::npos) << x.body;
  x = post("/v1/groups/notify/queue/receive", {{"member", "m1"}, {"topics", "emails"}});
  EXPECT_EQ(x.status, 400) << x.body;
  x = post("/v1/groups/notify/queue/receive", {{"member", "m1"}, {"topics", {"emails", ""}}});
  EXPECT_EQ(x.status, 400) << x.body;
  x = post("/v1/groups/notify/queue/receive", {{"member", "m1"}, {"topics", {"emails", "nope"}}});
  EXPECT_EQ(x.status, 404) << x.body;
  EXPECT_NE(x.body.find("unknown_topic"), std::string::npos) << x.body;
  x = post("/v1/groups/notify/queue/ack",
           {{"member", "m1"}, {"partition", 0}, {"offset", 0}, {"leaseId", 1}});
  EXPECT_EQ(x.status, 400) << x.body;
  EXPECT_NE(x.body.find("is required (the record's topic)"), std::string::npos) << x.body;
}

TEST_F(http_api, bad_requests_get_their_status_and_error_code) {
  create_topic("orders", 2);
  create_topic("small", 1, {{"max.message.bytes", 1000}});
  using v = http::verb;
  std::string big(2000, 'x');
  std::vector<bad_case> cases{
    {"malformed JSON", v::post, "/v1/topics", "{\"name\": ", 400, "invalid_request"},
    {"empty body", v::post, "/v1/topics", "", 400, "invalid_request"},
    {"body not an object", v::post, "/v1/topics", "[1,2]", 400, "invalid_request"},
    {"topic without name", v::post, "/v1/topics", R"({"partitions":1})", 400, "invalid_request"},
    {"zero partitions", v::post, "/v1/topics", R"({"name":"t0","partitions":0})", 400, "invalid_config"},
    {"partitions not a number", v::post, "/v1/topics", R"({"name":"t0","partitions":"3"})", 400, "invalid_request"},
    {"bad topic name", v::post, "/v1/topics", R"({"name":"no spaces"})", 400, "invalid_topic_name"},
    {"unknown config key", v::post, "/v1/topics", R"({"name":"t1","config":{"colour":1}})", 400, "invalid_config"},
    {"topic exists", v::post, "/v1/topics", R"({"name":"orders"})", 409, "topic_exists"},
    {"describe unknown topic", v::get, "/v1/topics/nope", "", 404, "unknown_topic"},
    {"delete unknown topic", v::delete_, "/v1/topics/nope", "", 404, "unknown_topic"},
    {"alter nothing", v::patch, "/v1/topics/orders", "{}", 400, "invalid_request"},
    {"alter bad value", v::patch, "/v1/topics/orders", R"({"config":{"retention.ms":"soon"}})", 400, "invalid_config"},
    {"shrink partitions", v::patch, "/v1/topics/orders", R"({"partitions":1})", 400, "invalid_request"},
    {"produce to unknown topic", v::post, "/v1/topics/nope/messages", R"({"value":1})", 404, "unknown_topic"},
    {"produce without value", v::post, "/v1/topics/orders/messages", R"({"key":"k"})", 400, "invalid_request"},
    {"produce empty records", v::post, "/v1/topics/orders/messages", R"({"records":[]})", 400, "invalid_request"},
    {"produce bad base64", v::post, "/v1/topics/orders/messages", R"({"value":"!!!","encoding":"base64"})", 400, "invalid_request"},
    {"produce unknown encoding", v::post, "/v1/topics/orders/messages", R"({"value":1,"encoding":"xml"})", 400, "invalid_request"},
    {"produce string encoding of a number", v::post, "/v1/topics/orders/messages", R"({"value":1,"encoding":"string"})", 400, "invalid_request"},
    {"produce bad acks", v::post, "/v1/topics/orders/messages?acks=2", R"({"value":1})", 400, "invalid_request"},
    {"produce non-numeric partition", v::post, "/v1/topics/orders/messages?partition=x", R"({"value":1})", 400, "invalid_request"},
    {"produce unknown partition", v::post, "/v1/topics/orders/messages?partition=9", R"({"value":1})", 404, "unknown_partition"},
    {"produce oversize value", v::post, "/v1/topics/small/messages", json{{"value", big}}.dump(), 413, "message_too_large"},
    {"fetch negative offset", v::get, "/v1/topics/orders/partitions/0/messages?offset=-1", "", 400, "invalid_request"},
    {"fetch non-numeric offset", v::get, "/v1/topics/orders/partitions/0/messages?offset=abc", "", 400, "invalid_request"},
    {"fetch offset past the end", v::get, "/v1/topics/orders/partitions/0/messages?offset=1000", "", 416, "offset_out_of_range"},
    {"fetch non-numeric partition", v::get, "/v1/topics/orders/partitions/abc/messages", "", 400, "invalid_request"},
    {"fetch unknown partition", v::get, "/v1/topics/orders/partitions/9/messages", "", 404, "unknown_partition"},
    {"fetch unknown topic", v::get, "/v1/topics/nope/partitions/0/messages", "", 404, "unknown_topic"},
    {"fetch zero limit", v::get, "/v1/topics/orders/partitions/0/messages?limit=0", "", 400, "invalid_request"},
    {"fetch wait too long", v::get, "/v1/topics/orders/partitions/0/messages?maxWaitMs=999999", "", 400, "invalid_request"},
    {"fetch unknown encoding", v::get, "/v1/topics/orders/partitions/0/messages?encoding=xml", "", 400, "invalid_request"},
    {"wrong method on topics", v::put, "/v1/topics", "{}", 405, "invalid_request"},
    {"wrong method on cluster", v::delete_, "/v1/cluster", "", 405, "invalid_request"},
    {"remove a node of a single-node cluster", v::delete_, "/v1/cluster/nodes/1", "", 400, "policy_violation"},
    {"remove a non-numeric node", v::delete_, "/v1/cluster/nodes/one", "", 400, "invalid_request"},
    {"remove a negative node", v::delete_, "/v1/cluster/nodes/-4", "", 400, "invalid_request"},
    {"wrong method on a node", v::get, "/v1/cluster/nodes/1", "", 405, "invalid_request"},
    {"wrong method on messages", v::get, "/v1/topics/orders/messages", "", 405, "invalid_request"},
    {"unknown path", v::get, "/v1/nothing", "", 404, "not_found"},
    {"unknown root", v::get, "/", "", 404, "not_found"},
    {"bad percent escape", v::get, "/v1/topics/%zz", "", 400, "invalid_request"},
    {"describe unknown group", v::get, "/v1/groups/nogroup", "", 404, "unknown_group"},
    {"delete unknown group", v::delete_, "/v1/groups/nogroup", "", 404, "unknown_group"},
    {"commit to unknown topic", v::post, "/v1/groups/g/offsets", R"({"topic":"nope","partition":0,"offset":1})", 404, "unknown_topic"},
    {"commit to unknown partition", v::post, "/v1/groups/g/offsets", R"({"topic":"orders","partition":7,"offset":1})", 404, "unknown_partition"},
    {"commit without offset", v::post, "/v1/groups/g/offsets", R"({"topic":"orders","partition":0})", 400, "invalid_request"},
    {"commit negative offset", v::post, "/v1/groups/g/offsets", R"({"topic":"orders","partition":0,"offset":-3})", 400, "invalid_request"},
    {"reset to nowhere", v::post, "/v1/groups/g/reset", R"({"topic":"orders","to":"sideways"})", 400, "invalid_request"},
    {"reset offset without value", v::post, "/v1/groups/g/reset", R"({"topic":"orders","to":"offset"})", 400, "invalid_request"},
    {"reset unknown topic", v::post, "/v1/groups/g/reset", R"({"topic":"nope","to":"earliest"})", 404, "unknown_topic"},
    {"queue receive without member", v::post, "/v1/groups/qg/queue/orders/receive", R"({"max":1})", 400, "invalid_request"},
    {"queue receive zero max", v::post, "/v1/groups/qg/queue/orders/receive", R"({"member":"m","max":0})", 400, "invalid_request"},
    {"queue receive wait too long", v::post, "/v1/groups/qg/queue/orders/receive", R"({"member":"m","waitMs":99999999})", 400, "invalid_request"},
    {"queue receive unknown topic", v::post, "/v1/groups/qg/queue/nope/receive", R"({"member":"m"})", 404, "unknown_topic"},
    {"queue receive wrong method", v::get, "/v1/groups/qg/queue/orders/receive", "", 405, "invalid_request"},
    {"queue ack unknown group", v::post, "/v1/groups/nogroup/queue/orders/ack", R"({"member":"m","partition":0,"offset":0,"leaseId":"5"})", 404, "unknown_group"},
    {"queue ack unknown lease", v::post, "/v1/groups/qg/queue/orders/ack", R"({"member":"m","partition":0,"offset":0,"leaseId":"5"})", 404, "lease_not_found"},
    {"queue ack without lease id", v::post, "/v1/groups/qg/queue/orders/ack", R"({"member":"m","partition":0,"offset":0})", 400, "invalid_request"},
    {"queue ack bad lease id", v::post, "/v1/groups/qg/queue/orders/ack", R"({"member":"m","partition":0,"offset":0,"leaseId":"x1"})", 400, "invalid_request"},
    {"queue nack negative delay", v::post, "/v1/groups/qg/queue/orders/nack", R"({"member":"m","partition":0,"offset":0,"leaseId":1,"delayMs":-1})", 400, "invalid_request"},
    {"queue extend without extendMs", v::post, "/v1/groups/qg/queue/orders/extend", R"({"member":"m","partition":0,"offset":0,"leaseId":1})", 400, "invalid_request"},
    {"queue reject body not an object", v::post, "/v1/groups/qg/queue/orders/reject", "[]", 400, "invalid_request"},
    {"dlq show unknown topic", v::get, "/v1/dlq/nope.dlq", "", 404, "unknown_topic"},
    {"dlq show a topic that is no DLQ", v::get, "/v1/dlq/orders", "", 400, "invalid_request"},
    {"dlq show zero max", v::get, "/v1/dlq/orders?max=0", "", 400, "invalid_request"},
    {"dlq redrive without a selection", v::post, "/v1/dlq/orders/redrive", "{}", 400, "invalid_request"},
    {"dlq redrive all and a range", v::post, "/v1/dlq/orders/redrive", R"({"all":true,"fromOffset":1})", 400, "invalid_request"},
    {"dlq redrive unknown topic", v::post, "/v1/dlq/nope.dlq/redrive", R"({"all":true})", 404, "unknown_topic"},
    {"dlq purge negative offset", v::post, "/v1/dlq/orders/purge", R"({"beforeOffset":-5})", 400, "invalid_request"},
    {"dlq purge a topic that is no DLQ", v::post, "/v1/dlq/orders/purge", "{}", 400, "invalid_request"},
    {"wrong method on dlq", v::delete_, "/v1/dlq", "", 405, "invalid_request"},
  };
  for (auto& c : cases) {
    auto r = call(port_, c.method, c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body << r.error;
    EXPECT_EQ(r.code(), c.code) << c.name << ": " << r.body;
    EXPECT_FALSE(r.j()["error"].value("message", "").empty()) << c.name;
    if (c.status == 405) {
      EXPECT_FALSE(r.allow.empty()) << c.name;
    }
  }
  EXPECT_EQ(call(port_, http::verb::put, "/v1/topics", "{}").allow, "GET, POST");

  // A body over the limit is refused before it is read.
  std::string huge = json{{"value", std::string(3u << 20, 'y')}}.dump();
  auto r = call(port_, http::verb::post, "/v1/topics/orders/messages", huge);
  EXPECT_EQ(r.status, 413) << r.body << r.error;
  EXPECT_EQ(r.code(), "message_too_large") << r.body;

  // Not HTTP at all.
  auto g = call_raw(port_, "HELLO THERE\r\n\r\n");
  EXPECT_EQ(g.status, 400) << g.body << g.error;
  EXPECT_EQ(g.code(), "invalid_request");

  // Nothing of the above was written.
  for (auto t : {"orders", "small"}) {
    auto parts = get(std::string{"/v1/topics/"} + t).j()["partitions"];
    ASSERT_FALSE(parts.empty()) << t;
    for (auto& p : parts)
      EXPECT_EQ(p["highWatermark"], 0) << t;
  }
  // And the server still serves.
  EXPECT_EQ(get("/healthz").status, 200);
}

} // namespace
