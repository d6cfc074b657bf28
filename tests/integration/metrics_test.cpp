// Metrics of a real ferryd: --metrics-port and its "metrics on" line, the
// /metrics page after produce, fetch, commits and failed requests, and a
// real Prometheus server (Debian package `prometheus`) scraping the node and
// answering PromQL through its HTTP API. Every child (ferryd, prometheus) is
// bounded and always stopped, also when an assertion fails.

#include "tests/integration/process.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/record_batch.hpp"
#include "metrics/prometheus_text.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using namespace std::chrono_literals;
using ferry::test::child_process;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using ferry::test::free_port;
using ferry::test::http_get;
using json = nlohmann::json;

namespace {

std::string url_encode(const std::string& s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  return out;
}

// -- the Prometheus text format -----------------------------------------------

using sample = metrics::text_sample;
using metrics::parse_text;

/// The value of the one series `name` whose labels include `labels`.
std::optional<double> find_sample(const std::vector<sample>& samples,
                                  const std::string& name,
                                  const std::map<std::string, std::string>&
                                    labels = {}) {
  for (auto& s : samples) {
    if (s.name != name)
      continue;
    bool match = true;
    for (auto& [k, v] : labels) {
      auto i = s.labels.find(k);
      if (i == s.labels.end() || i->second != v)
        match = false;
    }
    if (match)
      return s.value;
  }
  return std::nullopt;
}

// -- a CAF client -----------------------------------------------------------------

class client {
public:
  explicit client(uint16_t port) {
    register_types(cfg_);
    cfg_.load<caf::io::middleman>();
    // ferryd drops connections silent for 3 s: this client idles longer.
    cfg_.set("middleman.heartbeat-interval", caf::timespan{1s});
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    auto b = sys_->middleman().remote_actor<broker_actor>("127.0.0.1", port);
    if (b)
      broker_ = *b;
    else
      error_ = sys_->render(b.error());
  }
  ~client() { broker_ = nullptr; }

  bool connected() const { return static_cast<bool>(broker_); }
  const std::string& error() const { return error_; }

  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    caf::scoped_actor self{*sys_};
    std::optional<caf::expected<T>> out;
    self->request(broker_, caf::timespan{20s}, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    if (!out)
      return caf::make_error(caf::sec::request_timeout);
    return std::move(*out);
  }

  caf::error ask_void(commit_offsets_request req) {
    caf::scoped_actor self{*sys_};
    caf::error out = caf::make_error(caf::sec::request_timeout);
    self->request(broker_, caf::timespan{20s}, commit_atom_v, std::move(req))
      .receive([&]() { out = caf::error{}; },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::expected<produce_response> produce(const std::string& topic,
                                          int records) {
    std::vector<record> recs;
    auto ts = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
    for (int i = 0; i < records; ++i) {
      record r;
      r.offset_delta = i;
      r.timestamp = ts;
      r.value = "value-" + std::to_string(i);
      recs.push_back(std::move(r));
    }
    auto batch = encode_batch(batch_meta{}, recs);
    if (!batch)
      return batch.error();
    produce_request req;
    req.topic = topic;
    req.partition = partition_id{0};
    req.acks = acks_mode::all;
    req.batch = std::move(*batch);
    return ask<produce_response>(produce_atom_v, std::move(req));
  }

  caf::expected<fetch_response> fetch(const std::string& topic, int64_t from) {
    fetch_request req;
    req.topic = topic;
    req.partition = partition_id{0};
    req.from = offset{from};
    req.max_wait_ms = 0;
    return ask<fetch_response>(fetch_atom_v, std::move(req));
  }

private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  broker_actor broker_;
  std::string error_;
};

/// Scrapes `port` until `pred(samples)` holds or `timeout` passes; the last
/// scrape's samples (and its raw text in `text`).
template <class Pred>
std::vector<sample> scrape_until(uint16_t port, Pred pred,
                                 std::chrono::milliseconds timeout,
                                 std::string& text) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<sample> samples;
  for (;;) {
    auto r = http_get(port, "/metrics");
    text = r.status == 200 ? r.body : "HTTP " + std::to_string(r.status)
                                        + " " + r.error + "\n" + r.body;
    samples = parse_text(r.status == 200 ? r.body : std::string{});
    if (pred(samples) || std::chrono::steady_clock::now() >= deadline)
      return samples;
    std::this_thread::sleep_for(250ms);
  }
}

// -- a real Prometheus ------------------------------------------------------------

/// A prometheus child scraping one target every second, with its own temp
/// config and storage; SIGTERM then SIGKILL on destruction.
class prometheus_process {
public:
  explicit prometheus_process(const std::string& target)
    : dir_("ferry-prometheus") {
    auto cfg = dir_.path() / "prometheus.yml";
    std::ofstream out{cfg};
    out << "global:\n"
           "  scrape_interval: 1s\n"
           "  scrape_timeout: 1s\n"
           "  evaluation_interval: 1s\n"
           "scrape_configs:\n"
           "  - job_name: ferry\n"
           "    static_configs:\n"
           "      - targets: ['"
        << target << "']\n";
    out.close();
    config_ = cfg.string();
  }

  ~prometheus_process() { stop(); }

  /// Starts it on a free port; false if it exited or was not ready in
  /// `timeout`.
  bool start(std::chrono::milliseconds timeout = 60s) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      port_ = free_port();
      child_ = child_process::start(
        "/usr/bin/prometheus",
        {"--config.file=" + config_,
         "--storage.tsdb.path=" + (dir_.path() / "data").string(),
         "--web.listen-address=127.0.0.1:" + std::to_string(port_),
         "--log.level=warn"});
      if (!child_)
        return false;
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (std::chrono::steady_clock::now() < deadline && child_->running()) {
        if (http_get(port_, "/-/ready", 2s).status == 200)
          return true;
        std::this_thread::sleep_for(200ms);
      }
      if (child_->running())
        return false; // not ready in time
      // Exited: most likely the port was taken meanwhile; try another.
    }
    return false;
  }

  void stop() {
    if (!child_)
      return;
    child_->signal(SIGTERM);
    if (!child_->wait_exit(15s))
      child_->kill_and_reap();
  }

  /// The result vector of an instant query, or a discarded value (with the
  /// reason in `why`).
  json query(const std::string& promql, std::string& why) {
    auto r = http_get(port_, "/api/v1/query?query=" + url_encode(promql));
    why = "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body;
    if (r.status != 200)
      return json(json::value_t::discarded);
    auto j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success"
        || !j.contains("data") || !j["data"].contains("result"))
      return json(json::value_t::discarded);
    return j["data"]["result"];
  }

  std::string output() const { return child_ ? child_->combined() : ""; }

private:
  ferry::test::temp_dir dir_;
  std::string config_;
  uint16_t port_ = 0;
  std::unique_ptr<child_process> child_;
};

/// The value of the first element of an instant-query result.
std::optional<double> first_value(const json& result) {
  if (result.is_discarded() || !result.is_array() || result.empty())
    return std::nullopt;
  auto& v = result[0]["value"];
  if (!v.is_array() || v.size() != 2)
    return std::nullopt;
  auto s = v[1].get<std::string>();
  if (s == "NaN")
    return NAN;
  return std::strtod(s.c_str(), nullptr);
}

#define ASSERT_STARTED(d)                                                      \
  ASSERT_TRUE((d).start()) << "ferryd did not start:\n" << (d).output()

} // namespace

TEST(Metrics, MetricsPortZeroPicksAFreePortAndDescribeShowsIt) {
  ferryd_process d; // --metrics-port 0 (process.hpp)
  ASSERT_STARTED(d);
  ASSERT_NE(d.metrics_port(), 0) << d.output();
  EXPECT_NE(d.output().find("metrics on 127.0.0.1:"
                            + std::to_string(d.metrics_port())),
            std::string::npos)
    << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto cd = c.ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(cd) << describe(cd.error());
  ASSERT_EQ(cd->nodes.size(), 1u);
  EXPECT_EQ(cd->nodes[0].metrics_port, d.metrics_port());
  auto r = http_get(d.metrics_port(), "/metrics");
  ASSERT_EQ(r.status, 200) << r.error;
  auto samples = parse_text(r.body);
  EXPECT_EQ(find_sample(samples, "ferry_raft_is_leader"), 1.0);
  // A single node is a Raft quorum of one: term 1 or more, its own leader.
  EXPECT_GE(find_sample(samples, "ferry_raft_term"), 1.0);
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(Metrics, MinusOneDisablesMetrics) {
  ferryd_process d{{"--metrics-port", "-1"}};
  ASSERT_STARTED(d);
  EXPECT_EQ(d.metrics_port(), 0);
  EXPECT_EQ(d.output().find("metrics on"), std::string::npos) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto cd = c.ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(cd) << describe(cd.error());
  EXPECT_EQ(cd->nodes.at(0).metrics_port, 0);
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(Metrics, TakenMetricsPortFailsClearly) {
  ferryd_process first;
  ASSERT_STARTED(first);
  ASSERT_NE(first.metrics_port(), 0);
  ferryd_process second{
    {"--metrics-port", std::to_string(first.metrics_port())}};
  EXPECT_FALSE(second.start(0, 30s));
  ASSERT_NE(second.child(), nullptr);
  auto status = second.child()->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  EXPECT_NE(second.output().find("cannot serve metrics on 127.0.0.1:"
                                 + std::to_string(first.metrics_port())),
            std::string::npos)
    << second.output();
  EXPECT_EQ(http_get(first.metrics_port(), "/metrics").status, 200);
  EXPECT_EQ(first.stop(), 0);
}

TEST(Metrics, DeployConfigExampleIsAccepted) {
  // deploy/ferryd.conf.example sets metrics-port = 9464 (and data-dir,
  // port); the command line wins, so only the file's parsing is tested here.
  // FERRY_SOURCE_DIR, not __FILE__: ccache's base_dir makes __FILE__
  // relative to the build directory.
  auto example = std::filesystem::path{FERRY_SOURCE_DIR} / "deploy"
                 / "ferryd.conf.example";
  ASSERT_TRUE(std::filesystem::exists(example)) << example;
  ferryd_process d{{"--config", example.string(), "--metrics-port", "0"}};
  ASSERT_STARTED(d);
  EXPECT_NE(d.metrics_port(), 0);
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(Metrics, NodeExportsTrafficLagAndErrorsAndPrometheusScrapesThem) {
  ferryd_process d;
  ASSERT_STARTED(d);
  ASSERT_NE(d.metrics_port(), 0) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  const std::string topic = "metered";
  const std::string group = "metrics-g";
  ASSERT_TRUE(c.ask<topic_metadata>(create_atom_v, topic_atom_v, topic,
                                    topic_config{}));
  // 10 records in 2 produces; a consumer reads them all, commits 4 and stops.
  int64_t produced = 0;
  for (int i = 0; i < 2; ++i) {
    auto r = c.produce(topic, 5);
    ASSERT_TRUE(r) << describe(r.error());
    produced += 5;
  }
  auto f = c.fetch(topic, 0);
  ASSERT_TRUE(f) << describe(f.error());
  ASSERT_FALSE(f->data.empty());
  commit_offsets_request commit;
  commit.group = group;
  commit.offsets.push_back(partition_offset{topic, partition_id{0},
                                            offset{4}, ""});
  auto commit_err = c.ask_void(commit);
  ASSERT_FALSE(commit_err) << describe(commit_err);
  // Failed requests: two at the node (a produce routed nowhere, a relayed
  // delete answered by the metadata actor), one at the replica (a fetch out
  // of range, delegated).
  produce_request bad;
  bad.topic = "no-such-topic";
  bad.batch = "x";
  EXPECT_FALSE(c.ask<produce_response>(produce_atom_v, bad));
  EXPECT_FALSE(c.ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                     std::string{"no-such-topic"}));
  EXPECT_FALSE(c.fetch(topic, 1000));

  // -- /metrics: the coordinator refreshes lag every 10 s ----------------------
  const std::map<std::string, std::string> tp{{"topic", topic},
                                              {"partition", "0"}};
  const std::map<std::string, std::string> gtp{
    {"group", group}, {"topic", topic}, {"partition", "0"}};
  std::string text;
  auto samples = scrape_until(
    d.metrics_port(),
    [&](const std::vector<sample>& s) {
      return find_sample(s, "ferry_consumergroup_lag", gtp) == 6.0;
    },
    30s, text);
  EXPECT_EQ(find_sample(samples, "ferry_partition_high_watermark", tp), 10.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_partition_log_end_offset", tp), 10.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_partition_log_start_offset", tp), 0.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_partition_isr_size", tp), 1.0) << text;
  EXPECT_EQ(find_sample(samples, "ferry_messages_in_total", {{"topic", topic}}),
            10.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_messages_out_total",
                        {{"topic", topic}}),
            10.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_produce_latency_seconds_count",
                        {{"topic", topic}}),
            2.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_produce_latency_seconds_bucket",
                        {{"topic", topic}, {"le", "+Inf"}}),
            2.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_consumergroup_committed_offset", gtp),
            4.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_consumergroup_lag", gtp), 6.0) << text;
  EXPECT_GT(find_sample(samples, "ferry_disk_free_bytes").value_or(0), 0.0)
    << text;
  EXPECT_GT(find_sample(samples, "ferry_disk_used_bytes").value_or(0), 0.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_request_errors_total",
                        {{"code", "unknown_topic"}}),
            2.0)
    << text;
  EXPECT_EQ(find_sample(samples, "ferry_request_errors_total",
                        {{"code", "offset_out_of_range"}}),
            1.0)
    << text;

  // -- a real Prometheus --------------------------------------------------------
  prometheus_process prom{"127.0.0.1:" + std::to_string(d.metrics_port())};
  ASSERT_TRUE(prom.start()) << prom.output();
  std::string why;
  auto wait_for = [&](const std::string& promql, auto pred,
                      std::chrono::seconds timeout, auto each_round) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto res = prom.query(promql, why);
      if (pred(res))
        return res;
      if (std::chrono::steady_clock::now() >= deadline)
        return res;
      each_round();
      std::this_thread::sleep_for(500ms);
    }
  };
  auto nothing = [] {};
  auto up = wait_for(
    "up", [](const json& r) { return first_value(r) == 1.0; }, 60s, nothing);
  ASSERT_EQ(first_value(up), 1.0) << why << "\n" << prom.output();
  // Produce while Prometheus scrapes, until the p99 has a rate to work on.
  const std::string p99 = "histogram_quantile(0.99, sum by (le) "
                          "(rate(ferry_produce_latency_seconds_bucket[30s])))";
  auto q = wait_for(
    p99,
    [](const json& r) {
      auto v = first_value(r);
      return v && std::isfinite(*v);
    },
    60s,
    [&] {
      auto r = c.produce(topic, 3);
      ASSERT_TRUE(r) << describe(r.error());
      produced += 3;
    });
  ASSERT_TRUE(q.is_array() && !q.empty()) << why;
  auto p99_value = first_value(q);
  ASSERT_TRUE(p99_value && std::isfinite(*p99_value)) << why;
  EXPECT_GT(*p99_value, 0.0) << why;
  EXPECT_LE(*p99_value, 10.0) << why;
  // The consumer stopped at 4: lag is everything produced after that, once
  // the coordinator's 10 s refresh and a scrape saw the last produce.
  const double expected_lag = static_cast<double>(produced - 4);
  auto lag = wait_for(
    "ferry_consumergroup_lag",
    [&](const json& r) { return first_value(r) == expected_lag; }, 60s,
    nothing);
  ASSERT_TRUE(lag.is_array() && !lag.empty()) << why;
  EXPECT_EQ(lag[0]["metric"].value("group", ""), group) << why;
  EXPECT_EQ(lag[0]["metric"].value("topic", ""), topic) << why;
  EXPECT_EQ(lag[0]["metric"].value("partition", ""), "0") << why;
  EXPECT_EQ(first_value(lag), expected_lag) << why;
  prom.stop();
  EXPECT_EQ(d.stop(), 0) << d.output();
}
