// DLQ operations (list, show, redrive, purge) through a real node on CAF's
// deterministic test scheduler (virtual time): replicas on disk, a queue
// group that dead-letters rejected records, and the node's DLQ manager.
// DlqManagerClusterTest: the manager in cluster mode (state_topic set)
// against a fake broker: its redrive bookkeeping goes out as
// __consumer_state records first, and a second manager over a store that
// applied them skips what the first one redrove.

#include "actors/server/dlq_manager.hpp"

#include "actors/protocol/interfaces.hpp"
#include "actors/server/node.hpp"
#include "actors/server/queue_coordinator.hpp"
#include "broker/consumer_state.hpp"
#include "broker/dlq_store.hpp"
#include "broker/lease_table.hpp"
#include "broker/offset_store.hpp"
#include "broker/partitioner.hpp"
#include "broker/error.hpp"
#include "broker/metadata_store.hpp"
#include "broker/record_batch.hpp"
#include "tests/temp_dir.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace ferry {
namespace {

constexpr timestamp_ms t0 = 1'700'000'000'000;

template <class T>
struct reply {
  bool done = false;
  std::optional<T> value;
  caf::error err;
};

std::map<std::string, std::string> headers_of(const consumed_message& m) {
  std::map<std::string, std::string> out;
  for (auto& h : m.headers)
    out[h.key] = h.value;
  return out;
}

class DlqManagerTest : public ::testing::Test {
protected:
  void SetUp() override {
    lmdb::env_options opts;
    opts.no_sync = true;
    opts.initial_map_size = size_t{8} << 20;
    auto s = metadata_store::open(dir.path() / "meta", opts);
    ASSERT_TRUE(s) << describe(s.error());
    store = std::shared_ptr<metadata_store>(std::move(*s));
    cfg.set("scheduler.policy", caf::atom("testing"));
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    settings.max_attempts = 1;
    settings.jitter = 0.0;
    settings.visibility_timeout_ms = 5000;
    start_node();
  }

  void TearDown() override {
    stop_node();
    sys.reset();
    store.reset();
  }

  clock_fn test_clock() {
    auto* s = sys.get();
    return [s] {
      return t0
             + std::chrono::duration_cast<std::chrono::milliseconds>(
                 s->clock().now().time_since_epoch())
                 .count();
    };
  }

  void start_node() {
    node_config nc;
    nc.node_id = 1;
    nc.data_dir = dir.path() / "node";
    nc.store = store;
    nc.cluster_id = "test";
    nc.replica_defaults.tick_interval = 0ms;
    nc.queue_defaults.fetch_wait = 500ms;
    nc.queue_defaults.broker_timeout = 1h;
    nc.queue_defaults.clock = test_clock();
    n = sys->spawn(node, nc);
    sched->run();
  }

  void stop_node() {
    if (!n)
      return;
    caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
    advance(1000ms);
    n = nullptr;
  }

  void advance(caf::timespan d) {
    while (d.count() > 0) {
      auto step = std::min<caf::timespan>(d, 100ms);
      sched->advance_time(step);
      sched->run();
      d -= step;
    }
  }

  template <class T, class... Ts>
  std::shared_ptr<reply<T>> ask(Ts... xs) {
    auto r = std::make_shared<reply<T>>();
    auto dest = n;
    sys->spawn([r, dest, xs...](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
        .then(
          [r](T& x) {
            r->done = true;
            r->value = std::move(x);
          },
          [r](caf::error& err) {
            r->done = true;
            r->err = std::move(err);
          });
    });
    sched->run();
    return r;
  }

  template <class T, class... Ts>
  T ok(Ts... xs) {
    auto r = ask<T>(xs...);
    EXPECT_TRUE(r->done);
    EXPECT_FALSE(r->err) << describe(r->err);
    return r->value.value_or(T{});
  }

  void create_topic(const std::string& name, int32_t partitions) {
    topic_config tc;
    tc.partitions = partitions;
    ok<topic_metadata>(create_atom_v, topic_atom_v, name, tc);
  }

  void produce(const std::string& topic, int32_t p,
               std::vector<std::string> values,
               std::vector<record_header> headers = {}) {
    std::vector<record> rs;
    for (size_t i = 0; i < values.size(); ++i) {
      record r;
      r.offset_delta = static_cast<int32_t>(i);
      r.timestamp = test_clock()();
      r.key = "k-" + values[i];
      r.value = values[i];
      r.headers = headers;
      rs.push_back(std::move(r));
    }
    auto b = encode_batch(batch_meta{}, rs);
    ASSERT_TRUE(b);
    ok<produce_response>(produce_atom_v,
                         produce_request{topic, partition_id{p},
                                         acks_mode::all, *b});
  }

  std::vector<leased_message> receive(int32_t max = 100) {
    return ok<std::vector<leased_message>>(
      receive_atom_v,
      queue_receive_request{"workers", "orders", "w1", max, 0, 0});
  }

  void settle(const leased_message& m, queue_ack_kind k,
              std::string err = {}) {
    queue_ack_request req{"workers",     "w1", "orders", m.message.partition,
                          m.message.off, m.lease_id, k, 0, 0, err};
    ok<queue_ack_response>(ack_atom_v, req);
  }

  /// Creates the group, produces `values` to orders-0 and rejects those
  /// whose value starts with "bad" (the rest are acked). Waits for the DLQ.
  void dead_letter(std::vector<std::string> values) {
    ok<queue_group_config>(create_atom_v, group_atom_v,
                           std::string{"workers"}, settings);
    produce("orders", 0, values);
    for (int round = 0; round < 5; ++round) {
      auto got = receive();
      for (auto& m : got)
        settle(m, m.message.value.rfind("bad", 0) == 0
                    ? queue_ack_kind::reject
                    : queue_ack_kind::ack,
               "cannot parse " + m.message.value);
      advance(1000ms);
    }
  }

  std::vector<dlq_info> list() {
    return ok<std::vector<dlq_info>>(list_atom_v, dlq_atom_v);
  }

  dlq_show_response show(dlq_show_request req) {
    return ok<dlq_show_response>(show_atom_v, req);
  }

  dlq_redrive_response redrive(dlq_redrive_request req) {
    return ok<dlq_redrive_response>(redrive_atom_v, req);
  }

  std::vector<consumed_message> read_all(const std::string& topic,
                                         int32_t p = 0) {
    std::vector<consumed_message> out;
    auto fr = ok<fetch_response>(
      fetch_atom_v, fetch_request{topic, partition_id{p}, offset{0}, 1 << 20,
                                  1, 0, -1});
    std::string_view data{fr.data};
    while (!data.empty()) {
      auto h = parse_batch_header(data);
      if (!h)
        break;
      auto b = decode_batch(data.substr(0, h->total_size()));
      data.remove_prefix(h->total_size());
      EXPECT_TRUE(b);
      if (!b)
        break;
      for (auto& r : b->records) {
        auto d = to_dlq_record(topic, partition_id{p},
                               h->base_offset + r.offset_delta, r);
        out.push_back(d.message);
      }
    }
    return out;
  }

  ferry::test::temp_dir dir{"ferry-dlqm"};
  std::shared_ptr<metadata_store> store;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  queue_group_config settings;
  broker_actor n;
};

const std::string dlq = "orders.workers.dlq";

TEST_F(DlqManagerTest, ListShowsTheGroupsDlqWithDepth) {
  create_topic("orders", 1);
  dead_letter({"ok-1", "bad-1", "ok-2", "bad-2"});
  auto infos = list();
  ASSERT_EQ(infos.size(), 1u);
  auto& x = infos[0];
  EXPECT_EQ(x.topic, dlq);
  EXPECT_EQ(x.groups, std::vector<std::string>{"workers"});
  EXPECT_EQ(x.source_topic, "orders");
  EXPECT_EQ(x.partitions, 1);
  EXPECT_EQ(x.total, 2);
  EXPECT_EQ(x.depth, 2);
  EXPECT_EQ(x.redriven, 0);
  EXPECT_GT(x.oldest_timestamp, 0);
  // (The rate uses the wall clock; these records carry virtual times.)
  // A topic named *.dlq counts too, even without a group; a stream group's
  // "<topic>.<group>.dlq" names its source and group.
  create_topic("manual.dlq", 1);
  create_topic("orders.audit.dlq", 1);
  infos = list();
  ASSERT_EQ(infos.size(), 3u);
  std::map<std::string, dlq_info> by_name;
  for (auto& i : infos)
    by_name[i.topic] = i;
  EXPECT_EQ(by_name["manual.dlq"].source_topic, "");
  EXPECT_TRUE(by_name["manual.dlq"].groups.empty());
  EXPECT_EQ(by_name["orders.audit.dlq"].source_topic, "orders");
  EXPECT_EQ(by_name["orders.audit.dlq"].groups,
            std::vector<std::string>{"audit"});
  EXPECT_EQ(by_name["orders.audit.dlq"].depth, 0);
}

TEST_F(DlqManagerTest, ShowDecodesHeadersAndFilters) {
  create_topic("orders", 1);
  dead_letter({"bad-apple", "ok", "bad-pear", "bad-plum"});
  dlq_show_request req;
  req.topic = dlq;
  auto all = show(req);
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_TRUE(all.end_reached);
  EXPECT_EQ(all.scanned, 3);
  auto& r = all.records[0];
  EXPECT_EQ(r.message.value, "bad-apple");
  EXPECT_EQ(r.message.key, "k-bad-apple");
  EXPECT_EQ(r.original_topic, "orders");
  EXPECT_EQ(r.original_partition, 0);
  EXPECT_EQ(r.original_offset, 0);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.error, "cannot parse bad-apple");
  EXPECT_EQ(r.group, "workers");
  EXPECT_GT(r.first_failure_ts, 0);
  EXPECT_FALSE(r.redriven);
  EXPECT_EQ(all.records[1].original_offset, 2);
  // Filters.
  req.grep = "pear";
  auto pear = show(req);
  ASSERT_EQ(pear.records.size(), 1u);
  EXPECT_EQ(pear.records[0].message.value, "bad-pear");
  req.grep.clear();
  req.error_contains = "plum";
  auto plum = show(req);
  ASSERT_EQ(plum.records.size(), 1u);
  EXPECT_EQ(plum.records[0].original_offset, 3);
  // Paging: max_records 2 continues where it stopped.
  dlq_show_request page;
  page.topic = dlq;
  page.max_records = 2;
  auto p1 = show(page);
  ASSERT_EQ(p1.records.size(), 2u);
  EXPECT_FALSE(p1.end_reached);
  ASSERT_EQ(p1.next_offsets.size(), 1u);
  page.from_offset = p1.next_offsets[0].committed.value;
  auto p2 = show(page);
  ASSERT_EQ(p2.records.size(), 1u);
  EXPECT_EQ(p2.records[0].message.value, "bad-plum");
  EXPECT_TRUE(p2.end_reached);
}

TEST_F(DlqManagerTest, RedriveRoundTripProcessesRecordsOnce) {
  create_topic("orders", 1);
  dead_letter({"bad-1", "ok", "bad-2"});
  ASSERT_EQ(list().at(0).depth, 2);
  dlq_redrive_request req;
  req.topic = dlq;
  auto resp = redrive(req);
  EXPECT_EQ(resp.redriven, 2);
  EXPECT_EQ(resp.skipped, 0);
  EXPECT_TRUE(resp.end_reached);
  ASSERT_EQ(resp.reports.size(), 2u);
  EXPECT_EQ(resp.reports[0].topic, "orders");
  EXPECT_EQ(resp.reports[0].off, offset{3});
  // The copies carry the redrive headers.
  auto orders = read_all("orders");
  ASSERT_EQ(orders.size(), 5u);
  auto h = headers_of(orders[3]);
  EXPECT_EQ(h["ferry-redriven-from"], dlq + "/0/0");
  EXPECT_EQ(h["ferry-redrive-count"], "1");
  EXPECT_EQ(orders[3].value, "bad-1");
  EXPECT_EQ(orders[3].key, "k-bad-1");
  // The group receives them once more, exactly once.
  std::vector<std::string> seen;
  for (int round = 0; round < 5; ++round) {
    for (auto& m : receive()) {
      seen.push_back(m.message.value);
      settle(m, queue_ack_kind::ack);
    }
    advance(1000ms);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"bad-1", "bad-2"}));
  // Marked: a second redrive skips them; list shows them redriven.
  auto again = redrive(req);
  EXPECT_EQ(again.redriven, 0);
  EXPECT_EQ(again.skipped, 2);
  auto info = list().at(0);
  EXPECT_EQ(info.depth, 0);
  EXPECT_EQ(info.redriven, 2);
  dlq_show_request sr;
  sr.topic = dlq;
  EXPECT_TRUE(show(sr).records.at(0).redriven);
  sr.include_redriven = false;
  EXPECT_TRUE(show(sr).records.empty());
  // The marks survive a node restart.
  stop_node();
  start_node();
  EXPECT_EQ(redrive(req).skipped, 2);
  EXPECT_EQ(list().at(0).redriven, 2);
}

TEST_F(DlqManagerTest, RedriveAgainAfterFailingKeepsACount) {
  create_topic("orders", 1);
  dead_letter({"bad-1"});
  dlq_redrive_request req;
  req.topic = dlq;
  EXPECT_EQ(redrive(req).redriven, 1);
  // It fails again: back in the DLQ with the redrive headers kept.
  for (int round = 0; round < 3; ++round) {
    for (auto& m : receive())
      settle(m, queue_ack_kind::reject, "still broken");
    advance(1000ms);
  }
  dlq_show_request sr;
  sr.topic = dlq;
  auto all = show(sr);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.records[1].redrive_count, 1);
  EXPECT_EQ(all.records[1].error, "still broken");
  EXPECT_EQ(headers_of(all.records[1].message)["ferry-redriven-from"],
            dlq + "/0/0");
  auto second = redrive(req);
  EXPECT_EQ(second.redriven, 1);
  EXPECT_EQ(second.skipped, 1);
  auto orders = read_all("orders");
  EXPECT_EQ(headers_of(orders.back())["ferry-redrive-count"], "2");
}

TEST_F(DlqManagerTest, RetriedRedriveAfterACrashWritesOneCopy) {
  create_topic("orders", 1);
  dead_letter({"bad-1"});
  dlq_redrive_request req;
  req.topic = dlq;
  ASSERT_EQ(redrive(req).redriven, 1);
  // A crash between the produce and the mark: the mark is lost.
  dlq_store ds{*store};
  auto erased = ds.erase_below(dlq, partition_id{0}, offset{1});
  ASSERT_TRUE(erased);
  ASSERT_EQ(*erased, 1u);
  auto again = redrive(req);
  EXPECT_EQ(again.redriven, 1);
  ASSERT_EQ(again.reports.size(), 1u);
  EXPECT_EQ(again.reports[0].off, offset{1}); // the first copy's offset
  EXPECT_EQ(read_all("orders").size(), 2u);   // original + one copy
}

TEST_F(DlqManagerTest, RedriveSelectsOffsetsTargetsAndChunks) {
  create_topic("orders", 1);
  create_topic("replay", 1);
  dead_letter({"bad-0", "bad-1", "bad-2", "bad-3"});
  dlq_redrive_request one;
  one.topic = dlq;
  one.to_topic = "replay";
  one.offsets = {partition_offset{dlq, partition_id{0}, offset{2}, ""}};
  auto r1 = redrive(one);
  EXPECT_EQ(r1.redriven, 1);
  auto replay = read_all("replay");
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0].value, "bad-2");
  // A range, in chunks of one.
  dlq_redrive_request range;
  range.topic = dlq;
  range.partition = 0;
  range.from_offset = 0;
  range.to_offset = 1;
  range.max_records = 1;
  auto c1 = redrive(range);
  EXPECT_EQ(c1.redriven, 1);
  EXPECT_FALSE(c1.end_reached);
  ASSERT_EQ(c1.next_offsets.size(), 1u);
  range.from_offset = c1.next_offsets[0].committed.value;
  auto c2 = redrive(range);
  EXPECT_EQ(c2.redriven, 1);
  auto c3 = redrive(range);
  EXPECT_EQ(c3.redriven, 0);
  EXPECT_TRUE(c3.end_reached);
  EXPECT_EQ(list().at(0).depth, 1); // offset 3 left
}

TEST_F(DlqManagerTest, RateLimitedRedrivePacesWithVirtualTime) {
  create_topic("orders", 1);
  dead_letter({"bad-0", "bad-1", "bad-2", "bad-3"});
  dlq_redrive_request req;
  req.topic = dlq;
  req.rate_per_second = 2;
  auto r = ask<dlq_redrive_response>(redrive_atom_v, req);
  EXPECT_FALSE(r->done); // the first goes at once, then 500 ms apart
  advance(1000ms);
  EXPECT_FALSE(r->done);
  advance(1000ms);
  ASSERT_TRUE(r->done);
  ASSERT_TRUE(r->value) << describe(r->err);
  EXPECT_EQ(r->value->redriven, 4);
}

TEST_F(DlqManagerTest, PurgeMovesTheLogStartAndDropsMarks) {
  create_topic("orders", 1);
  dead_letter({"bad-0", "bad-1", "bad-2"});
  dlq_redrive_request req;
  req.topic = dlq;
  req.offsets = {partition_offset{dlq, partition_id{0}, offset{0}, ""}};
  ASSERT_EQ(redrive(req).redriven, 1);
  dlq_purge_request pr;
  pr.topic = dlq;
  pr.before_offset = 2;
  auto p1 = ok<dlq_purge_response>(purge_atom_v, pr);
  EXPECT_EQ(p1.purged, 2);
  ASSERT_EQ(p1.log_starts.size(), 1u);
  EXPECT_EQ(p1.log_starts[0].committed, offset{2});
  dlq_store ds{*store};
  EXPECT_TRUE(ds.marked(dlq, partition_id{0}, offset{0}, offset{10})->empty());
  dlq_show_request sr;
  sr.topic = dlq;
  auto left = show(sr);
  ASSERT_EQ(left.records.size(), 1u);
  EXPECT_EQ(left.records[0].message.value, "bad-2");
  pr.before_offset = -1;
  EXPECT_EQ(ok<dlq_purge_response>(purge_atom_v, pr).purged, 1);
  auto info = list().at(0);
  EXPECT_EQ(info.total, 0);
  EXPECT_EQ(info.depth, 0);
  EXPECT_EQ(info.oldest_timestamp, 0);
}

TEST_F(DlqManagerTest, DeletingTheDlqDropsItsMarks) {
  create_topic("orders", 1);
  dead_letter({"bad-0"});
  dlq_redrive_request req;
  req.topic = dlq;
  ASSERT_EQ(redrive(req).redriven, 1);
  dlq_store ds{*store};
  EXPECT_EQ(ds.topics()->count(dlq), 1u);
  ok<topic_metadata>(delete_atom_v, topic_atom_v, dlq);
  advance(1000ms);
  EXPECT_EQ(ds.topics()->count(dlq), 0u);
}

TEST_F(DlqManagerTest, BadRequestsGetSpecificErrors) {
  create_topic("orders", 1);
  create_topic("plain.dlq", 2);
  dlq_show_request sr;
  sr.topic = "nope.dlq";
  EXPECT_TRUE(is(ask<dlq_show_response>(show_atom_v, sr)->err,
                 ec::unknown_topic));
  sr.topic = "orders";
  EXPECT_TRUE(is(ask<dlq_show_response>(show_atom_v, sr)->err,
                 ec::invalid_request));
  sr.topic = "plain.dlq";
  sr.partition = 5;
  EXPECT_TRUE(is(ask<dlq_show_response>(show_atom_v, sr)->err,
                 ec::unknown_partition));
  dlq_purge_request pr;
  pr.topic = "orders";
  EXPECT_TRUE(is(ask<dlq_purge_response>(purge_atom_v, pr)->err,
                 ec::invalid_request));
  dlq_redrive_request rr;
  rr.topic = "plain.dlq";
  rr.to_topic = "missing";
  EXPECT_TRUE(is(ask<dlq_redrive_response>(redrive_atom_v, rr)->err,
                 ec::unknown_topic));
  // A record without ferry-original-topic needs a target.
  produce("plain.dlq", 1, {"x"});
  rr.to_topic.clear();
  EXPECT_TRUE(is(ask<dlq_redrive_response>(redrive_atom_v, rr)->err,
                 ec::invalid_request));
  rr.to_topic = "orders";
  EXPECT_EQ(redrive(rr).redriven, 1);
}

} // namespace
// -- cluster mode against a fake broker ------------------------------------------
//
// A dlq_manager with state_topic set, talking to a fake broker (an untyped
// actor answering only what the manager asks: topic list, describe, fetch,
// init_pid, produce). The broker keeps the DLQ x.dlq (3 records, ferry-*
// headers naming orders-0), the copies produced to orders, and the batches
// produced to __consumer_state, in one event log.

namespace {

struct fake_cluster {
  std::string dlq_batch;               ///< x.dlq-0, offsets 0..n-1
  int64_t dlq_records = 0;
  std::vector<record> copies;          ///< appended to orders-0
  std::vector<batch_meta> copy_meta;   ///< producer fields of each copy
  std::string state_log;               ///< __consumer_state batches
  std::vector<std::string> events;     ///< "state:<kind>" / "copy:<value>"
  bool refuse_state = false;           ///< answer not_leader to state produces
  int64_t next_pid = 100;
  /// The cluster's queue groups ((list_atom, queue_atom)); unset: the
  /// request fails (the manager uses its store's groups then).
  std::optional<std::vector<queue_group_description>> groups;
};

std::vector<topic_metadata> fake_topics() {
  auto t = [](std::string name, int32_t n) {
    topic_metadata md;
    md.name = std::move(name);
    md.config.partitions = n;
    for (int32_t p = 0; p < n; ++p)
      md.partitions.push_back(
        partition_assignment{partition_id{p}, 1, leader_epoch{1}, {1}, {1}});
    return md;
  };
  return {t("orders", 1), t("x.dlq", 1), t("__consumer_state", 4), t("dead-g", 1)};
}

caf::behavior fake_broker(caf::event_based_actor*,
                          std::shared_ptr<fake_cluster> fc) {
  return {
    [fc](list_atom, topic_atom) { return fake_topics(); },
    [fc](list_atom, queue_atom) -> caf::result<std::vector<queue_group_description>> {
      if (!fc->groups)
        return make_error(ec::request_timed_out, "no answer (test)");
      return *fc->groups;
    },
    [fc](describe_atom, topic_atom, const std::string& name) {
      topic_description td;
      td.name = name;
      partition_status ps;
      ps.partition = partition_id{0};
      ps.leader = 1;
      ps.online = true;
      ps.high_watermark = offset{name == "x.dlq" ? fc->dlq_records : 0};
      ps.log_end = ps.high_watermark;
      td.partitions.push_back(ps);
      return td;
    },
    [fc](fetch_atom, const fetch_request& req) {
      fetch_response resp;
      resp.high_watermark = offset{fc->dlq_records};
      resp.log_end = resp.high_watermark;
      if (req.topic == "x.dlq" && req.from.value < fc->dlq_records)
        resp.data = fc->dlq_batch;
      return resp;
    },
    [fc](init_pid_atom) {
      return producer_identity{producer_id{fc->next_pid++}, 0};
    },
    [fc](produce_atom,
         const produce_request& req) -> caf::result<produce_response> {
      auto b = decode_batch(req.batch);
      if (!b)
        return b.error();
      produce_response resp;
      if (req.topic == consumer_state_topic) {
        if (fc->refuse_state)
          return make_error(ec::not_leader, "not the leader (test)");
        EXPECT_EQ(req.acks, acks_mode::all);
        for (auto& r : b->records) {
          // dlq_home_key, NUL, the record's tag and fields (format 2).
          EXPECT_EQ(r.key->substr(0, dlq_home_key("x.dlq").size() + 1),
                    dlq_home_key("x.dlq") + std::string(1, '\0'));
          EXPECT_EQ(req.partition.value,
                    partition_for_key(dlq_home_key("x.dlq"), 4));
          fc->events.push_back("state:"
                               + std::to_string(int((*r.value)[0])));
        }
        fc->state_log += req.batch;
        return resp;
      }
      // A copy: one record; a repeated (pid, sequence) is a duplicate.
      EXPECT_EQ(req.topic, "orders");
      for (size_t i = 0; i < fc->copy_meta.size(); ++i)
        if (fc->copy_meta[i].producer_id == b->header.producer_id
            && fc->copy_meta[i].base_sequence == b->header.base_sequence) {
          resp.base_offset = offset{static_cast<int64_t>(i)};
          resp.duplicate = true;
          return resp;
        }
      resp.base_offset = offset{static_cast<int64_t>(fc->copies.size())};
      fc->copies.push_back(b->records.at(0));
      batch_meta meta;
      meta.producer_id = b->header.producer_id;
      meta.producer_epoch = b->header.producer_epoch;
      meta.base_sequence = b->header.base_sequence;
      fc->copy_meta.push_back(meta);
      fc->events.push_back("copy:" + *b->records.at(0).value);
      return resp;
    },
  };
}

class DlqManagerClusterTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (auto name : {"a", "b"}) {
      lmdb::env_options opts;
      opts.no_sync = true;
      opts.initial_map_size = size_t{4} << 20;
      auto s = metadata_store::open(dir.path() / name, opts);
      ASSERT_TRUE(s) << describe(s.error());
      stores.push_back(std::shared_ptr<metadata_store>(std::move(*s)));
    }
    cfg.set("scheduler.policy", caf::atom("testing"));
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    fc = std::make_shared<fake_cluster>();
    add_dead_letters(3);
    broker = caf::actor_cast<broker_actor>(sys->spawn(fake_broker, fc));
  }

  void TearDown() override {
    for (auto& m : managers)
      caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(broker, caf::exit_reason::user_shutdown);
    sched->run();
    managers.clear();
    sys.reset();
    stores.clear();
  }

  /// Rewrites x.dlq with `n` dead letters (values dead-0...).
  void add_dead_letters(int n) {
    std::vector<record> rs;
    for (int i = 0; i < n; ++i) {
      record r;
      r.offset_delta = i;
      r.timestamp = t0 + i;
      r.key = "k" + std::to_string(i);
      r.value = "dead-" + std::to_string(i);
      r.headers.push_back(
        record_header{std::string{dlq_header::original_topic}, "orders"});
      r.headers.push_back(
        record_header{std::string{dlq_header::original_partition}, "0"});
      rs.push_back(std::move(r));
    }
    auto b = encode_batch(batch_meta{}, rs);
    ASSERT_TRUE(b);
    fc->dlq_batch = *b;
    fc->dlq_records = n;
  }

  dlq_manager_actor spawn_manager(size_t store) {
    dlq_manager_config dc;
    dc.store = stores.at(store);
    dc.broker = broker;
    dc.state_topic = consumer_state_topic;
    auto m = sys->spawn(dlq_manager, dc);
    managers.push_back(m);
    caf::anon_send(m, update_atom_v, fake_topics());
    sched->run();
    return m;
  }

  /// One request to manager `m`, run to its answer on the test coordinator.
  template <class T, class... Ts>
  caf::expected<T> call(const dlq_manager_actor& m, Ts... xs) {
    auto r = std::make_shared<reply<T>>();
    sys->spawn([r, m, xs...](caf::event_based_actor* self) {
      self->request(m, caf::infinite, xs...)
        .then(
          [r](T& x) {
            r->done = true;
            r->value = std::move(x);
          },
          [r](caf::error& err) {
            r->done = true;
            r->err = std::move(err);
          });
    });
    sched->run();
    EXPECT_TRUE(r->done);
    if (r->err || !r->value)
      return r->err ? r->err : make_error(ec::request_timed_out, "no answer");
    return *r->value;
  }

  caf::expected<dlq_redrive_response> redrive(const dlq_manager_actor& m,
                                              dlq_redrive_request req) {
    return call<dlq_redrive_response>(m, redrive_atom_v, std::move(req));
  }

  caf::expected<std::vector<dlq_info>> list(const dlq_manager_actor& m) {
    return call<std::vector<dlq_info>>(m, list_atom_v, dlq_atom_v);
  }

  ferry::test::temp_dir dir{"ferry-dlqc"};
  std::vector<std::shared_ptr<metadata_store>> stores;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<fake_cluster> fc;
  broker_actor broker;
  std::vector<dlq_manager_actor> managers;
};

} // namespace

TEST_F(DlqManagerClusterTest, BookkeepingIsProducedFirstAndAnotherHomeSkipsIt) {
  auto a = spawn_manager(0);
  dlq_redrive_request req;
  req.topic = "x.dlq";
  req.offsets = {partition_offset{"x.dlq", partition_id{0}, offset{0}, ""},
                 partition_offset{"x.dlq", partition_id{0}, offset{1}, ""}};
  auto first = redrive(a, req);
  ASSERT_TRUE(first) << describe(first.error());
  EXPECT_EQ(first->redriven, 2);
  // Producer rows (kind 8: the fresh producer, then its sequence for the
  // record) before each copy, the mark (kind 7) after it.
  EXPECT_EQ(fc->events,
            (std::vector<std::string>{"state:8", "state:8", "copy:dead-0",
                                      "state:7", "state:8", "copy:dead-1",
                                      "state:7"}));
  // The local store holds what was replicated.
  dlq_store sa{*stores[0]};
  EXPECT_EQ(*sa.marked("x.dlq", partition_id{0}, offset{0}, offset{10}),
            (std::set<int64_t>{0, 1}));

  // Another node's replica applies the replicated records; its manager (the
  // new home) skips the marked records and continues the same producer.
  offset_store offsets_b{*stores[1]};
  auto n = apply_consumer_state(offsets_b, *stores[1], fc->state_log);
  ASSERT_TRUE(n) << describe(n.error());
  EXPECT_EQ(*n, 5u);
  auto b = spawn_manager(1);
  dlq_redrive_request all;
  all.topic = "x.dlq";
  auto second = redrive(b, all);
  ASSERT_TRUE(second) << describe(second.error());
  EXPECT_EQ(second->redriven, 1);
  EXPECT_EQ(second->skipped, 2);
  ASSERT_EQ(fc->copies.size(), 3u);
  EXPECT_EQ(*fc->copies[2].value, "dead-2");
  EXPECT_EQ(fc->copy_meta[2].producer_id, fc->copy_meta[0].producer_id);
  EXPECT_EQ(fc->copy_meta[2].base_sequence, 2);

  // A home that lost the leadership: its next state produce is refused, the
  // redrive stops before the copy (the producer row comes first).
  add_dead_letters(4);
  fc->refuse_state = true;
  auto refused = redrive(a, all);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::not_leader)) << describe(refused.error());
  EXPECT_EQ(fc->copies.size(), 3u);
}

TEST_F(DlqManagerClusterTest, ACopyWhoseMarkWasLostIsADuplicateAtTheNewHome) {
  // The old home produced the copy of dead-0 but died before its mark was
  // replicated: only the producer rows reach the new home.
  auto a = spawn_manager(0);
  dlq_redrive_request one;
  one.topic = "x.dlq";
  one.offsets = {partition_offset{"x.dlq", partition_id{0}, offset{0}, ""}};
  ASSERT_TRUE(redrive(a, one));
  ASSERT_EQ(fc->events.back(), "state:7");
  // Drop the last batch (the mark) from the replicated log.
  std::string_view log{fc->state_log};
  std::string without_mark;
  while (!log.empty()) {
    auto h = parse_batch_header(log);
    ASSERT_TRUE(h);
    auto one_batch = log.substr(0, h->total_size());
    log.remove_prefix(h->total_size());
    if (!log.empty())
      without_mark += one_batch;
  }
  offset_store offsets_b{*stores[1]};
  ASSERT_TRUE(apply_consumer_state(offsets_b, *stores[1], without_mark));
  auto b = spawn_manager(1);
  dlq_redrive_request all;
  all.topic = "x.dlq";
  auto r = redrive(b, all);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->redriven, 3); // dead-0 again (a duplicate answer), 1 and 2
  EXPECT_EQ(r->skipped, 0);
  ASSERT_EQ(fc->copies.size(), 3u); // one copy each
  EXPECT_EQ(*fc->copies[0].value, "dead-0");
  EXPECT_EQ(*fc->copies[1].value, "dead-1");
  EXPECT_EQ(*fc->copies[2].value, "dead-2");
}

// A node stores only the queue groups of the __consumer_state partitions it
// replicates (with five nodes and RF 3, not all of them): the manager tells
// DLQs by the cluster's groups, which its node gathers from every peer.
// Found by the five-node chaos run (seed 5001): a group's explicit DLQ
// "chaos-q-dlq" was "not a DLQ" at a home without the group's partition,
// so every redrive failed.
TEST_F(DlqManagerClusterTest, ADlqOfAGroupStoredOnlyOnOtherNodesIsADlq) {
  queue_group_description g;
  g.group = "g";
  g.config.dlq_topic = "dead-g";
  queue_partition_description pd;
  pd.topic = "orders";
  g.partitions.push_back(pd);
  fc->groups = std::vector<queue_group_description>{g};
  auto m = spawn_manager(0); // store 0 holds no queue group
  auto dlqs = list(m);
  ASSERT_TRUE(dlqs) << describe(dlqs.error());
  const dlq_info* dead = nullptr;
  for (auto& d : *dlqs)
    if (d.topic == "dead-g")
      dead = &d;
  ASSERT_NE(dead, nullptr) << "dead-g is not listed as a DLQ";
  EXPECT_EQ(dead->groups, (std::vector<std::string>{"g"}));
  EXPECT_EQ(dead->source_topic, "orders");
  dlq_redrive_request req;
  req.topic = "dead-g";
  req.to_topic = "orders";
  auto r = redrive(m, req);
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->redriven, 0);
  // Without the cluster's answer only the store counts: not a DLQ.
  fc->groups.reset();
  auto alone = redrive(m, req);
  ASSERT_FALSE(alone);
  EXPECT_TRUE(is(alone.error(), ec::invalid_request)) << describe(alone.error());
}

} // namespace ferry
