// Metrics: probes write the right series (read back through the registry's
// Collect()), series disappear with their probes, histogram buckets, the
// HTTP exposer (a plain socket scrapes it; a taken port is an error, not an
// exception), and the probes wired into the partition replica and the group
// coordinator (CAF's deterministic test coordinator).

#include "metrics/exposer.hpp"
#include "metrics/group_probe.hpp"
#include "metrics/metrics.hpp"
#include "metrics/node_probe.hpp"
#include "metrics/partition_probe.hpp"

#include "actors/server/group_coordinator.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/server/partition_replica.hpp"
#include "broker/error.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/record_batch.hpp"
#include "tests/http_get.hpp"
#include "tests/temp_dir.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <prometheus/metric_family.h>
#include <prometheus/collectable.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace ferry {
namespace {

using metrics::labels;

// -- reading series back --------------------------------------------------------

// The series `name` with exactly the labels `l`, if any.
std::optional<prometheus::ClientMetric>
series(const metrics::registry& reg, const std::string& name,
       const labels& l) {
  for (const auto& fam : reg.collectable()->Collect()) {
    if (fam.name != name)
      continue;
    for (const auto& m : fam.metric) {
      labels got;
      for (const auto& x : m.label)
        got.emplace(x.name, x.value);
      if (got == l)
        return m;
    }
  }
  return std::nullopt;
}

bool has(const metrics::registry& reg, const std::string& name,
         const labels& l) {
  return series(reg, name, l).has_value();
}

// Gauge or counter value; NaN when the series is missing.
double value(const metrics::registry& reg, const std::string& name,
             const labels& l) {
  auto m = series(reg, name, l);
  if (!m)
    return std::nan("");
  for (const auto& fam : reg.collectable()->Collect())
    if (fam.name == name)
      return fam.type == prometheus::MetricType::Counter ? m->counter.value
                                                         : m->gauge.value;
  return std::nan("");
}

size_t series_count(const metrics::registry& reg, const std::string& name) {
  for (const auto& fam : reg.collectable()->Collect())
    if (fam.name == name)
      return fam.metric.size();
  return 0;
}

labels tp(const std::string& topic, int32_t p) {
  return {{"topic", topic}, {"partition", std::to_string(p)}};
}

labels gtp(const std::string& group, const std::string& topic, int32_t p) {
  return {{"group", group}, {"topic", topic}, {"partition", std::to_string(p)}};
}

// -- probes -------------------------------------------------------------------

TEST(partition_probe, updates_partition_and_topic_series) {
  auto reg = std::make_shared<metrics::registry>();
  metrics::partition_probe probe{reg, "orders", partition_id{2}};
  probe.produced(3, 300, 2ms);
  probe.produced(2, 100, 4ms);
  probe.fetched(4, 350, 1ms);
  probe.flushed(3ms);
  probe.flushed(150ms);
  probe.log_state(offset{5}, offset{42}, offset{40}, 4096);
  probe.replication(1, 3);
  labels t{{"topic", "orders"}};
  EXPECT_EQ(value(*reg, "ferry_messages_in_total", t), 5);
  EXPECT_EQ(value(*reg, "ferry_bytes_in_total", t), 400);
  EXPECT_EQ(value(*reg, "ferry_messages_out_total", t), 4);
  EXPECT_EQ(value(*reg, "ferry_bytes_out_total", t), 350);
  EXPECT_EQ(value(*reg, "ferry_partition_log_start_offset", tp("orders", 2)), 5);
  EXPECT_EQ(value(*reg, "ferry_partition_log_end_offset", tp("orders", 2)), 42);
  EXPECT_EQ(value(*reg, "ferry_partition_high_watermark", tp("orders", 2)), 40);
  EXPECT_EQ(value(*reg, "ferry_partition_size_bytes", tp("orders", 2)), 4096);
  EXPECT_EQ(value(*reg, "ferry_partition_isr_size", tp("orders", 2)), 1);
  EXPECT_EQ(value(*reg, "ferry_partition_under_replicated", tp("orders", 2)),
            1);
  probe.replication(3, 3);
  EXPECT_EQ(value(*reg, "ferry_partition_under_replicated", tp("orders", 2)),
            0);
  auto h = series(*reg, "ferry_produce_latency_seconds", t);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->histogram.sample_count, 2u);
  EXPECT_NEAR(h->histogram.sample_sum, 0.006, 1e-9);
  auto f = series(*reg, "ferry_fetch_latency_seconds", t);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->histogram.sample_count, 1u);
  auto fl = series(*reg, "ferry_log_flush_seconds", t);
  ASSERT_TRUE(fl);
  EXPECT_EQ(fl->histogram.sample_count, 2u);
  EXPECT_NEAR(fl->histogram.sample_sum, 0.153, 1e-9);
}

TEST(partition_probe, series_disappear_with_the_last_probe_of_their_labels) {
  auto reg = std::make_shared<metrics::registry>();
  auto p0 = std::make_unique<metrics::partition_probe>(reg, "t", partition_id{0});
  auto p1 = std::make_unique<metrics::partition_probe>(reg, "t", partition_id{1});
  auto other = std::make_unique<metrics::partition_probe>(reg, "u",
                                                          partition_id{0});
  p0->produced(1, 10, 1ms);
  p1->produced(1, 10, 1ms);
  EXPECT_EQ(value(*reg, "ferry_messages_in_total", {{"topic", "t"}}), 2);
  p0.reset();
  EXPECT_FALSE(has(*reg, "ferry_partition_high_watermark", tp("t", 0)));
  EXPECT_TRUE(has(*reg, "ferry_partition_high_watermark", tp("t", 1)));
  // Topic series are shared by the topic's partitions.
  EXPECT_EQ(value(*reg, "ferry_messages_in_total", {{"topic", "t"}}), 2);
  p1.reset();
  EXPECT_FALSE(has(*reg, "ferry_partition_high_watermark", tp("t", 1)));
  EXPECT_FALSE(has(*reg, "ferry_messages_in_total", {{"topic", "t"}}));
  EXPECT_FALSE(has(*reg, "ferry_produce_latency_seconds", {{"topic", "t"}}));
  EXPECT_FALSE(has(*reg, "ferry_log_flush_seconds", {{"topic", "t"}}));
  EXPECT_TRUE(has(*reg, "ferry_messages_in_total", {{"topic", "u"}}));
  EXPECT_EQ(series_count(*reg, "ferry_partition_high_watermark"), 1u);
}

TEST(partition_probe, a_deleted_large_topic_takes_exactly_its_series_with_it) {
  // A 2,000-partition topic beside a small one: its probes die out of
  // order (replicas stop in any order); every series of the big topic goes,
  // the small topic's stay with their values, and the exposition keeps the
  // families of the small topic whole.
  auto reg = std::make_shared<metrics::registry>();
  std::vector<std::unique_ptr<metrics::partition_probe>> big;
  for (int32_t p = 0; p < 2000; ++p)
    big.push_back(std::make_unique<metrics::partition_probe>(reg, "big", partition_id{p}));
  metrics::partition_probe small{reg, "small", partition_id{0}};
  small.log_state(offset{1}, offset{9}, offset{8}, 512);
  small.produced(4, 40, 1ms);
  EXPECT_EQ(series_count(*reg, "ferry_partition_high_watermark"), 2001u);
  for (size_t i = 0; i < big.size(); i += 2)
    big[i].reset();
  EXPECT_EQ(series_count(*reg, "ferry_partition_high_watermark"), 1001u);
  EXPECT_FALSE(has(*reg, "ferry_partition_log_end_offset", tp("big", 0)));
  EXPECT_TRUE(has(*reg, "ferry_partition_log_end_offset", tp("big", 1)));
  big.clear();
  for (auto name : {"ferry_partition_high_watermark", "ferry_partition_log_start_offset",
                    "ferry_partition_log_end_offset", "ferry_partition_size_bytes",
                    "ferry_partition_isr_size", "ferry_partition_under_replicated"})
    EXPECT_EQ(series_count(*reg, name), 1u) << name;
  EXPECT_FALSE(has(*reg, "ferry_messages_in_total", {{"topic", "big"}}));
  EXPECT_EQ(value(*reg, "ferry_partition_high_watermark", tp("small", 0)), 8);
  EXPECT_EQ(value(*reg, "ferry_messages_in_total", {{"topic", "small"}}), 4);
  auto text = reg->text();
  EXPECT_EQ(text.find("topic=\"big\""), std::string::npos);
  EXPECT_NE(text.find("ferry_partition_high_watermark{partition=\"0\",topic=\"small\"} 8"),
            std::string::npos)
    << text;
}

TEST(partition_probe, a_restarted_replica_keeps_its_series_when_the_old_probe_dies) {
  auto reg = std::make_shared<metrics::registry>();
  auto old_probe = std::make_unique<metrics::partition_probe>(reg, "t",
                                                              partition_id{0});
  metrics::partition_probe new_probe{reg, "t", partition_id{0}};
  old_probe.reset();
  new_probe.log_state(offset{0}, offset{7}, offset{7}, 100);
  EXPECT_EQ(value(*reg, "ferry_partition_high_watermark", tp("t", 0)), 7);
}

TEST(histograms, latency_buckets_span_100us_to_10s) {
  const auto& b = metrics::registry::latency_buckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 0.0001);
  EXPECT_DOUBLE_EQ(b.back(), 10.0);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  auto reg = std::make_shared<metrics::registry>();
  metrics::partition_probe probe{reg, "t", partition_id{0}};
  probe.produced(1, 1, 50us);   // <= 100us
  probe.produced(1, 1, 150us);  // <= 250us
  probe.produced(1, 1, 3ms);    // <= 5ms
  probe.produced(1, 1, 20s);    // +Inf only
  auto h = series(*reg, "ferry_produce_latency_seconds", {{"topic", "t"}});
  ASSERT_TRUE(h);
  const auto& buckets = h->histogram.bucket;
  ASSERT_EQ(buckets.size(), b.size() + 1); // + the +Inf bucket
  auto cumulative = [&](double le) {
    for (const auto& x : buckets)
      if (x.upper_bound == le)
        return static_cast<int64_t>(x.cumulative_count);
    return int64_t{-1};
  };
  EXPECT_EQ(cumulative(0.0001), 1);
  EXPECT_EQ(cumulative(0.00025), 2);
  EXPECT_EQ(cumulative(0.0025), 2);
  EXPECT_EQ(cumulative(0.005), 3);
  EXPECT_EQ(cumulative(10.0), 3);
  EXPECT_TRUE(std::isinf(buckets.back().upper_bound));
  EXPECT_EQ(buckets.back().cumulative_count, 4u);
}

TEST(group_probe, updates_and_removes_group_series) {
  auto reg = std::make_shared<metrics::registry>();
  auto probe = std::make_unique<metrics::group_probe>(reg, "g");
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 0);
  probe->members(3);
  probe->committed("t", partition_id{0}, offset{10});
  probe->lag("t", partition_id{0}, 5);
  probe->lag_seconds("t", partition_id{0}, 2.5);
  probe->committed("t", partition_id{1}, offset{20});
  probe->dead_lettered("t", 2);
  probe->dlq_depth("t", 7);
  probe->redelivered("t");
  probe->lease_expired("t", 3);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 3);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_committed_offset",
                  gtp("g", "t", 0)),
            10);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)), 5);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag_seconds", gtp("g", "t", 0)),
            2.5);
  labels gt{{"group", "g"}, {"topic", "t"}};
  EXPECT_EQ(value(*reg, "ferry_dlq_messages_total", gt), 2);
  EXPECT_EQ(value(*reg, "ferry_dlq_depth", gt), 7);
  EXPECT_EQ(value(*reg, "ferry_redeliveries_total", gt), 1);
  EXPECT_EQ(value(*reg, "ferry_lease_expiries_total", gt), 3);
  // retain() drops partitions the group no longer has a position on.
  probe->retain({{"t", partition_id{1}}});
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_committed_offset",
                   gtp("g", "t", 0)));
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)));
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_lag_seconds", gtp("g", "t", 0)));
  EXPECT_TRUE(has(*reg, "ferry_consumergroup_committed_offset",
                  gtp("g", "t", 1)));
  probe->forget("t", partition_id{1});
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_committed_offset"), 0u);
  // clear(): the group was deleted.
  probe->committed("t", partition_id{2}, offset{1});
  probe->clear();
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_members", {{"group", "g"}}));
  EXPECT_FALSE(has(*reg, "ferry_dlq_messages_total", gt));
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_committed_offset"), 0u);
  // Values come back on use; the destructor removes them again.
  probe->members(1);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 1);
  probe.reset();
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_members"), 0u);
}

TEST(node_probe, reports_disk_raft_and_errors_by_code) {
  auto reg = std::make_shared<metrics::registry>();
  auto probe = std::make_unique<metrics::node_probe>(reg);
  auto err = probe->sample_disk(fs::temp_directory_path());
  ASSERT_FALSE(err) << describe(err);
  EXPECT_GT(value(*reg, "ferry_disk_used_bytes", {}), 0);
  EXPECT_GT(value(*reg, "ferry_disk_free_bytes", {}), 0);
  err = probe->sample_disk("/nonexistent/ferry/data");
  EXPECT_TRUE(is(err, ec::io_error)) << describe(err);
  probe->raft(1, true, 2); // a single node: its own Raft leader
  EXPECT_EQ(value(*reg, "ferry_raft_term", {}), 1);
  EXPECT_EQ(value(*reg, "ferry_raft_is_leader", {}), 1);
  EXPECT_EQ(value(*reg, "ferry_raft_commit_index", {}), 2);
  probe->raft(4, false, 17);
  EXPECT_EQ(value(*reg, "ferry_raft_term", {}), 4);
  EXPECT_EQ(value(*reg, "ferry_raft_is_leader", {}), 0);
  EXPECT_EQ(value(*reg, "ferry_raft_commit_index", {}), 17);
  probe->request_failed(make_error(ec::unknown_topic, "nope"));
  probe->request_failed(make_error(ec::unknown_topic, "again"));
  probe->request_failed(caf::make_error(caf::sec::request_timeout));
  probe->request_failed(std::string_view{"message_too_large"});
  EXPECT_EQ(value(*reg, "ferry_request_errors_total",
                  {{"code", "unknown_topic"}}),
            2);
  EXPECT_EQ(value(*reg, "ferry_request_errors_total",
                  {{"code", "request_timeout"}}),
            1);
  EXPECT_EQ(value(*reg, "ferry_request_errors_total",
                  {{"code", "message_too_large"}}),
            1);
  probe.reset();
  EXPECT_EQ(series_count(*reg, "ferry_request_errors_total"), 0u);
  EXPECT_EQ(series_count(*reg, "ferry_disk_used_bytes"), 0u);
}

TEST(node_probe, journal_totals_become_counters_that_only_grow) {
  auto reg = std::make_shared<metrics::registry>();
  auto probe = std::make_unique<metrics::node_probe>(reg);
  EXPECT_EQ(series_count(*reg, "ferry_journal_rounds_total"), 0u)
    << "no journal series before the node reports one";
  probe->journal(10, 4096, 0, 1);
  EXPECT_EQ(value(*reg, "ferry_journal_rounds_total", {}), 10);
  EXPECT_EQ(value(*reg, "ferry_journal_bytes_total", {}), 4096);
  EXPECT_EQ(value(*reg, "ferry_journal_checkpoints_total", {}), 0);
  EXPECT_EQ(value(*reg, "ferry_journal_files", {}), 1);
  probe->journal(25, 10000, 1, 2);
  EXPECT_EQ(value(*reg, "ferry_journal_rounds_total", {}), 25);
  EXPECT_EQ(value(*reg, "ferry_journal_bytes_total", {}), 10000);
  EXPECT_EQ(value(*reg, "ferry_journal_checkpoints_total", {}), 1);
  EXPECT_EQ(value(*reg, "ferry_journal_files", {}), 2);
  probe.reset();
  EXPECT_EQ(series_count(*reg, "ferry_journal_rounds_total"), 0u);
  EXPECT_EQ(series_count(*reg, "ferry_journal_files"), 0u);
}

TEST(registry, text_format_names_every_family_with_its_type) {
  auto reg = std::make_shared<metrics::registry>();
  metrics::partition_probe p{reg, "t", partition_id{0}};
  metrics::group_probe g{reg, "g"};
  metrics::node_probe n{reg};
  g.committed("t", partition_id{0}, offset{1});
  g.lag("t", partition_id{0}, 1);
  g.lag_seconds("t", partition_id{0}, 1);
  g.dead_lettered("t");
  g.dlq_depth("t", 1);
  g.redelivered("t");
  g.lease_expired("t");
  g.queue_records("t", partition_id{0}, {});
  n.request_failed(std::string_view{"throttled"});
  auto text = reg->text();
  for (const auto* line : {
         "# TYPE ferry_partition_high_watermark gauge",
         "# TYPE ferry_partition_log_start_offset gauge",
         "# TYPE ferry_partition_log_end_offset gauge",
         "# TYPE ferry_partition_size_bytes gauge",
         "# TYPE ferry_partition_isr_size gauge",
         "# TYPE ferry_partition_under_replicated gauge",
         "# TYPE ferry_consumergroup_committed_offset gauge",
         "# TYPE ferry_consumergroup_lag gauge",
         "# TYPE ferry_consumergroup_lag_seconds gauge",
         "# TYPE ferry_consumergroup_members gauge",
         "# TYPE ferry_dlq_messages_total counter",
         "# TYPE ferry_dlq_depth gauge",
         "# TYPE ferry_redeliveries_total counter",
         "# TYPE ferry_lease_expiries_total counter",
         "# TYPE ferry_queue_records gauge",
         "# TYPE ferry_produce_latency_seconds histogram",
         "# TYPE ferry_fetch_latency_seconds histogram",
         "# TYPE ferry_log_flush_seconds histogram",
         "# TYPE ferry_bytes_in_total counter",
         "# TYPE ferry_bytes_out_total counter",
         "# TYPE ferry_messages_in_total counter",
         "# TYPE ferry_messages_out_total counter",
         "# TYPE ferry_disk_used_bytes gauge",
         "# TYPE ferry_disk_free_bytes gauge",
         "# TYPE ferry_raft_term gauge",
         "# TYPE ferry_raft_is_leader gauge",
         "# TYPE ferry_raft_commit_index gauge",
         "# TYPE ferry_request_errors_total counter",
       })
    EXPECT_NE(text.find(line), std::string::npos) << line;
  EXPECT_NE(text.find("ferry_produce_latency_seconds_bucket{topic=\"t\","
                      "le=\"0.0001\"} 0"),
            std::string::npos)
    << text;
}

// -- exposer ------------------------------------------------------------------

// A socket listening on a free loopback port (closed by the destructor).
struct listener {
  int fd = -1;
  uint16_t port = 0;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
        || ::listen(fd, 1) != 0)
      return;
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~listener() {
    if (fd >= 0)
      ::close(fd);
  }
};

TEST(exposer, serves_the_text_format_over_http) {
  auto reg = std::make_shared<metrics::registry>();
  metrics::partition_probe probe{reg, "orders", partition_id{0}};
  probe.log_state(offset{0}, offset{12}, offset{12}, 1000);
  auto ex = metrics::exposer::start("127.0.0.1:0", reg);
  ASSERT_TRUE(ex) << describe(ex.error());
  ASSERT_NE((*ex)->port(), 0);
  // The exposer keeps the registry alive on its own.
  std::weak_ptr<metrics::registry> weak = reg;
  reg.reset();
  ASSERT_FALSE(weak.expired());
  auto resp = ferry::test::http_get((*ex)->port(), "/metrics");
  EXPECT_EQ(resp.status, 200) << resp.error;
  EXPECT_NE(resp.head.find("text/plain"), std::string::npos) << resp.head;
  EXPECT_NE(resp.body.find("# TYPE ferry_partition_high_watermark gauge"),
            std::string::npos)
    << resp.body;
  EXPECT_NE(resp.body.find("ferry_partition_high_watermark{partition=\"0\","
                           "topic=\"orders\"} 12"),
            std::string::npos)
    << resp.body;
}

TEST(exposer, a_taken_port_is_an_error_not_an_exception) {
  listener taken;
  ASSERT_NE(taken.port, 0);
  auto reg = std::make_shared<metrics::registry>();
  auto addr = "127.0.0.1:" + std::to_string(taken.port);
  std::optional<caf::expected<std::unique_ptr<metrics::exposer>>> ex;
  EXPECT_NO_THROW(ex.emplace(metrics::exposer::start(addr, reg)));
  ASSERT_TRUE(ex.has_value());
  ASSERT_FALSE(*ex);
  EXPECT_TRUE(is(ex->error(), ec::io_error)) << describe(ex->error());
  EXPECT_NE(describe(ex->error()).find(addr), std::string::npos)
    << describe(ex->error());
}

TEST(exposer, two_exposers_cannot_share_a_port) {
  auto reg = std::make_shared<metrics::registry>();
  auto a = metrics::exposer::start("127.0.0.1:0", reg);
  ASSERT_TRUE(a) << describe(a.error());
  auto b = metrics::exposer::start("127.0.0.1:" + std::to_string((*a)->port()),
                                   reg);
  ASSERT_FALSE(b);
  EXPECT_TRUE(is(b.error(), ec::io_error)) << describe(b.error());
  auto resp = ferry::test::http_get((*a)->port(), "/metrics");
  EXPECT_EQ(resp.status, 200) << resp.error;
}

TEST(exposer, malformed_addresses_are_invalid_arguments) {
  auto reg = std::make_shared<metrics::registry>();
  for (const auto* addr : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x",
                           "127.0.0.1:70000", "127.0.0.1:1,127.0.0.1:2"}) {
    auto ex = metrics::exposer::start(addr, reg);
    ASSERT_FALSE(ex) << addr;
    EXPECT_TRUE(is(ex.error(), ec::invalid_argument))
      << addr << ": " << describe(ex.error());
  }
  EXPECT_FALSE(metrics::exposer::start("127.0.0.1:0", nullptr));
}

// -- wiring: partition replica ------------------------------------------------

constexpr int64_t t0 = 1'700'000'000'000;

// `n` records at offsets base.. with timestamps ts0 + 1000 * i.
std::string make_batch(int n, int64_t base = 0, int64_t ts0 = t0) {
  batch_meta meta;
  meta.base_offset = offset{base};
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = ts0 + 1000 * i;
    r.value = std::string(10, 'x');
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(meta, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

// A deterministic actor system and a temp dir.
class actor_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(sys_cfg);
    sys_cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(sys_cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    reg = std::make_shared<metrics::registry>();
  }

  void TearDown() override {
    for (auto& a : spawned)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched->run();
    spawned.clear();
    sys.reset();
    offsets.reset();
    store.reset();
  }

  void open_store() {
    lmdb::env_options opts;
    opts.no_sync = true;
    opts.initial_map_size = size_t{8} << 20;
    auto s = metadata_store::open(root.path() / "meta", opts);
    ASSERT_TRUE(s) << describe(s.error());
    store = std::move(*s);
    offsets = std::make_shared<offset_store>(*store);
  }

  // Sends a request from a throw-away actor; runs the scheduler; returns
  // the answer.
  template <class T, class Handle, class... Ts>
  caf::expected<T> ask(Handle h, Ts... xs) {
    auto out = std::make_shared<caf::expected<T>>(
      make_error(ec::request_timed_out, "no answer"));
    sys->spawn([out, h, xs...](caf::event_based_actor* self) {
      self->request(h, caf::infinite, xs...)
        .then([out](T& x) { *out = std::move(x); },
              [out](caf::error& err) { *out = std::move(err); });
    });
    sched->run();
    return std::move(*out);
  }

  template <class Handle, class... Ts>
  caf::error tell(Handle h, Ts... xs) {
    auto out = std::make_shared<caf::error>(
      make_error(ec::request_timed_out, "no answer"));
    sys->spawn([out, h, xs...](caf::event_based_actor* self) {
      self->request(h, caf::infinite, xs...)
        .then([out]() { *out = caf::none; },
              [out](caf::error& err) { *out = std::move(err); });
    });
    sched->run();
    return std::move(*out);
  }

  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::vector<caf::actor> spawned;
  ferry::test::temp_dir root{"ferry-metrics-test"};
  std::shared_ptr<metadata_store> store;
  std::shared_ptr<offset_store> offsets;
  std::shared_ptr<metrics::registry> reg;
};

using replica_metrics = actor_fixture;

TEST_F(replica_metrics, produce_fetch_and_log_state_reach_the_probe) {
  partition_replica_config cfg;
  cfg.topic = "orders";
  cfg.partition = partition_id{0};
  cfg.dir = root.path() / "orders-0";
  cfg.node_id = 1;
  cfg.tick_interval = 0ms;
  cfg.probe = std::make_shared<metrics::partition_probe>(reg, "orders",
                                                         partition_id{0});
  auto replica = sys->spawn(partition_replica, cfg);
  cfg.probe.reset(); // the replica holds the only reference now
  sched->run();
  EXPECT_EQ(value(*reg, "ferry_partition_isr_size", tp("orders", 0)), 1);
  EXPECT_EQ(value(*reg, "ferry_partition_under_replicated", tp("orders", 0)),
            0);
  auto batch = make_batch(3);
  auto bytes = static_cast<double>(batch.size());
  auto p = ask<produce_response>(
    replica, produce_atom_v,
    produce_request{"orders", partition_id{0}, acks_mode::all, batch});
  ASSERT_TRUE(p) << describe(p.error());
  labels t{{"topic", "orders"}};
  EXPECT_EQ(value(*reg, "ferry_messages_in_total", t), 3);
  EXPECT_EQ(value(*reg, "ferry_bytes_in_total", t), bytes);
  EXPECT_EQ(series(*reg, "ferry_produce_latency_seconds", t)
              ->histogram.sample_count,
            1u);
  // The acks=all produce waited for one group-commit flush.
  EXPECT_EQ(series(*reg, "ferry_log_flush_seconds", t)->histogram.sample_count,
            1u);
  EXPECT_EQ(value(*reg, "ferry_partition_high_watermark", tp("orders", 0)), 3);
  EXPECT_EQ(value(*reg, "ferry_partition_log_end_offset", tp("orders", 0)), 3);
  EXPECT_EQ(value(*reg, "ferry_partition_log_start_offset", tp("orders", 0)),
            0);
  EXPECT_GE(value(*reg, "ferry_partition_size_bytes", tp("orders", 0)), bytes);
  // A consumer fetch from offset 1 counts the two records at or after it.
  fetch_request fr;
  fr.topic = "orders";
  fr.from = offset{1};
  auto f = ask<fetch_response>(replica, fetch_atom_v, fr);
  ASSERT_TRUE(f) << describe(f.error());
  EXPECT_EQ(value(*reg, "ferry_messages_out_total", t), 2);
  EXPECT_EQ(value(*reg, "ferry_bytes_out_total", t), bytes);
  // Internal readers (-2) and followers (>= 0) are not consumer traffic.
  fr.replica_id = -2;
  ASSERT_TRUE(ask<fetch_response>(replica, fetch_atom_v, fr));
  fr.replica_id = 2;
  ASSERT_TRUE(ask<fetch_response>(replica, fetch_atom_v, fr));
  EXPECT_EQ(value(*reg, "ferry_messages_out_total", t), 2);
  EXPECT_EQ(series(*reg, "ferry_fetch_latency_seconds", t)
              ->histogram.sample_count,
            1u);
  // Deleting the partition removes its series.
  auto stopped = ask<bool>(replica, stop_atom_v, true);
  ASSERT_TRUE(stopped && *stopped);
  sched->run();
  EXPECT_FALSE(has(*reg, "ferry_partition_high_watermark", tp("orders", 0)));
  EXPECT_FALSE(has(*reg, "ferry_messages_in_total", t));
}

// -- wiring: group coordinator --------------------------------------------------

// A broker whose partition logs span [start, end); record o has timestamp
// 1000 * o. Fetch answers the 4-record batch that contains `from`.
struct fake_log {
  int64_t start = 0;
  int64_t end = 0;
};
using fake_logs = std::map<std::pair<std::string, int32_t>, fake_log>;

struct fake_broker_state {
  std::shared_ptr<fake_logs> logs;
  std::vector<fetch_request> fetches;
};

caf::behavior fake_broker(caf::event_based_actor*,
                          std::shared_ptr<fake_broker_state> st) {
  return {
    [st](offsets_atom, const list_offsets_request& r) -> caf::result<offset> {
      auto i = st->logs->find({r.topic, r.partition.value});
      if (i == st->logs->end())
        return make_error(ec::unknown_topic, r.topic);
      return offset{r.timestamp == -2 ? i->second.start : i->second.end};
    },
    [st](fetch_atom, const fetch_request& r) -> caf::result<fetch_response> {
      st->fetches.push_back(r);
      auto i = st->logs->find({r.topic, r.partition.value});
      if (i == st->logs->end())
        return make_error(ec::unknown_topic, r.topic);
      auto base = r.from.value / 4 * 4;
      fetch_response resp;
      resp.data = make_batch(4, base, 1000 * base);
      resp.next_offset = offset{base + 4};
      return resp;
    },
  };
}

class group_metrics : public actor_fixture {
protected:
  void SetUp() override {
    actor_fixture::SetUp();
    open_store();
    broker_state = std::make_shared<fake_broker_state>();
    broker_state->logs = std::make_shared<fake_logs>();
    (*broker_state->logs)[{"t", 0}] = fake_log{0, 10};
    (*broker_state->logs)[{"t", 1}] = fake_log{6, 6};
    auto b = sys->spawn(fake_broker, broker_state);
    spawned.push_back(b);
    broker = caf::actor_cast<broker_actor>(b);
  }

  group_coordinator_actor spawn_group(std::string name) {
    group_config gc;
    gc.group = name;
    gc.offsets = offsets;
    gc.broker = broker;
    topic_metadata t;
    t.name = "t";
    t.config.partitions = 2;
    gc.topics = {t};
    gc.initial_rebalance_delay = 0s;
    gc.member_id_seed = 7;
    gc.probe = std::make_shared<metrics::group_probe>(reg, name);
    gc.metrics_interval = 10s;
    gc.clock = [] { return int64_t{20'000}; };
    auto c = sys->spawn(group_coordinator, std::move(gc));
    sched->run();
    spawned.push_back(caf::actor_cast<caf::actor>(c));
    return c;
  }

  caf::error commit(group_coordinator_actor c, int32_t p, int64_t o) {
    commit_offsets_request req;
    req.group = "g";
    req.offsets.push_back(partition_offset{"t", partition_id{p}, offset{o}, {}});
    return tell(c, commit_atom_v, req);
  }

  void refresh() {
    sched->advance_time(10s);
    sched->run();
  }

  std::shared_ptr<fake_broker_state> broker_state;
  broker_actor broker;
};

TEST_F(group_metrics, an_unused_group_has_no_series) {
  spawn_group("g");
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_members", {{"group", "g"}}));
  refresh();
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_members", {{"group", "g"}}));
}

TEST_F(group_metrics, lag_and_lag_seconds_follow_commits) {
  auto c = spawn_group("g");
  ASSERT_FALSE(commit(c, 0, 2));
  ASSERT_FALSE(commit(c, 1, 3)); // below log start 6: clamped
  EXPECT_EQ(value(*reg, "ferry_consumergroup_committed_offset",
                  gtp("g", "t", 0)),
            2);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 0);
  refresh();
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)), 8);
  // Record 2 (in the batch starting at 0) was written at 2000 ms; now is
  // 20000 ms.
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag_seconds", gtp("g", "t", 0)),
            18);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_committed_offset",
                  gtp("g", "t", 1)),
            3);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag", gtp("g", "t", 1)), 0);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag_seconds", gtp("g", "t", 1)),
            0);
  // Only the lagging partition was fetched, as an internal reader.
  ASSERT_EQ(broker_state->fetches.size(), 1u);
  EXPECT_EQ(broker_state->fetches[0].replica_id, -2);
  EXPECT_EQ(broker_state->fetches[0].from, offset{2});
  // Caught up.
  ASSERT_FALSE(commit(c, 0, 10));
  refresh();
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)), 0);
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag_seconds", gtp("g", "t", 0)),
            0);
  // The topic disappears: its series go.
  broker_state->logs->erase({"t", 1});
  refresh();
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_lag", gtp("g", "t", 1)));
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_committed_offset",
                   gtp("g", "t", 1)));
  EXPECT_TRUE(has(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)));
}

TEST_F(group_metrics, members_and_deletion) {
  auto c = spawn_group("g");
  join_group_request jr;
  jr.group = "g";
  jr.client_id = "c";
  jr.session_timeout_ms = 10000;
  jr.rebalance_timeout_ms = 10000;
  jr.assignors = {"range"};
  jr.topics = {"t"};
  auto joined = ask<join_group_response>(c, join_atom_v, jr);
  ASSERT_TRUE(joined) << describe(joined.error());
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 1);
  auto synced = ask<sync_group_response>(
    c, sync_atom_v,
    sync_group_request{"g", joined->member_id, "", joined->generation, {}});
  ASSERT_TRUE(synced) << describe(synced.error());
  commit_offsets_request cr;
  cr.group = "g";
  cr.member_id = joined->member_id;
  cr.generation = joined->generation;
  cr.offsets.push_back(partition_offset{"t", partition_id{0}, offset{4}, {}});
  ASSERT_FALSE(tell(c, commit_atom_v, cr));
  ASSERT_FALSE(tell(c, leave_atom_v,
                    leave_group_request{"g", joined->member_id, ""}));
  EXPECT_EQ(value(*reg, "ferry_consumergroup_members", {{"group", "g"}}), 0);
  refresh();
  EXPECT_EQ(value(*reg, "ferry_consumergroup_lag", gtp("g", "t", 0)), 6);
  ASSERT_FALSE(tell(c, delete_atom_v, group_atom_v));
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_members", {{"group", "g"}}));
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_committed_offset"), 0u);
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_lag"), 0u);
  refresh();
  EXPECT_EQ(series_count(*reg, "ferry_consumergroup_lag"), 0u);
  EXPECT_FALSE(has(*reg, "ferry_consumergroup_members", {{"group", "g"}}));
}

} // namespace
} // namespace ferry
