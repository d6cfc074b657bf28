// DLQ redrives in a cluster (cluster_harness.hpp: three ferryd processes
// with --voters): the redrive bookkeeping of a DLQ topic lives at its home,
// the leader of the __consumer_state partition of dlq_home_key(topic), and
// is replicated there (consumer state kinds 7-10).
//   ClusterDlq.RedrivesAreServedAtTheHomeAndSurviveItsDeath:
//   12 records with ferry-* headers are produced to "cd-orders.dlq" (RF 3).
//   Offsets 0-4 are redriven through a node that is not the home (the
//   request is forwarded), then --all through the home: 7 more, 5 skipped,
//   and the target topic holds exactly 12 copies, one per DLQ record.
//   `dlq list` through the third node shows 12 redriven, depth 0. The home
//   is SIGKILLed; through a survivor (once the partitions involved have new
//   leaders and show their records)
//   --all redrives 0 records and skips 12, the target still holds 12
//   copies, and `dlq show` there shows every record as redriven.
//   ClusterDlq.AQueueGroupsDlqIsADlqOnEveryNodeOfFive: five nodes, topics
//   RF 3, so every __consumer_state partition lives on three of them. A
//   queue group with an explicit DLQ topic ("qd-dead", not named *.dlq):
//   `dlq list` through every node lists it with its group, and
//   `dlq show` through every node serves it (before, nodes without the
//   group's __consumer_state partition answered "not a DLQ").
// Every wait is bounded; every ferryd is killed when the test ends.

#include "cluster_harness.hpp"

#include "actors/server/dlq_manager.hpp"
#include "broker/consumer_state.hpp"
#include "broker/lease_table.hpp"
#include "broker/partitioner.hpp"

#include <iostream>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using steady = std::chrono::steady_clock;

const std::string source = "cd-orders";
const std::string dlq = "cd-orders.dlq";
constexpr int total = 12;

/// One DLQ record as a queue group writes it (source partition 0).
ferry::record dead_letter(int i) {
  namespace h = ferry::dlq_header;
  ferry::record r;
  r.offset_delta = i;
  r.timestamp = 1000 + i;
  r.key = "k" + std::to_string(i);
  r.value = "bad-" + std::to_string(i);
  auto hd = [&](std::string_view k, std::string v) {
    r.headers.push_back(ferry::record_header{std::string{k}, std::move(v)});
  };
  hd(h::original_topic, source);
  hd(h::original_partition, "0");
  hd(h::original_offset, std::to_string(i));
  hd(h::attempts, "3");
  hd(h::error, "cannot parse");
  hd(h::group, "workers");
  return r;
}

/// Asks node `id` (retrying retriable errors until `deadline`). Also
/// unknown_topic: a node (the DLQ's home) may learn of a topic created a
/// moment ago after the controller's describe shows it placed (seen once in
/// a CI run: `dlq show` right after the create); Kafka's clients retry
/// UNKNOWN_TOPIC_OR_PARTITION alike.
template <class T, class Req>
caf::expected<T> ask_retrying(cluster& c, int id, steady::time_point deadline, Req req,
                              auto atom) {
  caf::error last = caf::make_error(caf::sec::request_timeout);
  while (steady::now() < deadline) {
    auto b = c.broker(id);
    if (b) {
      auto r = ask<T>(*c.cs.sys, *b, 10s, atom, req);
      if (r)
        return r;
      last = r.error();
      if (!ferry::is_retriable(last) && !ferry::is(last, ferry::ec::coordinator_not_available)
          && !ferry::is(last, ferry::ec::not_leader) && !ferry::is(last, ferry::ec::unknown_topic)
          && last != caf::sec::request_timeout)
        return last;
    } else {
      last = b.error();
    }
    std::this_thread::sleep_for(200ms);
  }
  return last;
}

/// The values of the copies in source-0 (read through node `id`).
std::optional<std::vector<std::string>> copies(cluster& c, int id, std::string& why) {
  auto st = c.status(id, source, 0);
  if (!st) {
    why = "status: " + ferry::error_text(st.error());
    return std::nullopt;
  }
  auto cd = c.describe(id);
  int64_t hw = 0;
  if (cd)
    if (auto ps = find_partition(*cd, source, 0))
      hw = ps->high_watermark.value;
  std::vector<std::string> out;
  if (hw == 0)
    return out;
  auto recs = fetch_all(c, id, source, 0, hw, why);
  if (!recs)
    return std::nullopt;
  for (auto& r : *recs)
    out.push_back(r.value);
  return out;
}

} // namespace

TEST(ClusterDlq, RedrivesAreServedAtTheHomeAndSurviveItsDeath) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  for (auto& t : {source, dlq}) {
    auto why = c.create_topic(t, 1);
    ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
    ASSERT_TRUE(c.wait_placed(t, 1)) << c.dump();
  }
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0)) << c.dump();
  ASSERT_TRUE(c.wait_registered()) << c.dump();

  // The home: the leader of dlq_home_key(dlq)'s __consumer_state partition.
  int home = -1, state_partition = -1;
  {
    auto cd = c.describe_controller();
    ASSERT_TRUE(cd) << c.dump();
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    ASSERT_TRUE(st && !st->partitions.empty()) << render(*cd, true);
    state_partition = ferry::partition_for_key(ferry::dlq_home_key(dlq),
                                               static_cast<int32_t>(st->partitions.size()));
    auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    ASSERT_TRUE(ps && ps->leader >= 1) << render(*cd, true);
    home = ps->leader;
  }
  std::vector<int> others;
  for (int id = 1; id <= c.voters(); ++id)
    if (id != home)
      others.push_back(id);
  std::cout << "[dlq] " << dlq << " lives in " << ferry::consumer_state_topic << "-"
            << state_partition << " led by node " << home << "\n";

  // 12 dead letters, acks=all.
  {
    std::vector<ferry::record> rs;
    for (int i = 0; i < total; ++i)
      rs.push_back(dead_letter(i));
    auto batch = ferry::encode_batch(ferry::batch_meta{}, rs);
    ASSERT_TRUE(batch);
    ferry::produce_request pr;
    pr.topic = dlq;
    pr.partition = ferry::partition_id{0};
    pr.acks = ferry::acks_mode::all;
    pr.batch = *batch;
    auto r = ask_retrying<ferry::produce_response>(c, others[0], steady::now() + 15s, pr,
                                                   ferry::produce_atom_v);
    ASSERT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
  }
  auto deadline = steady::now() + 20s;

  // Offsets 0-4 through a node that is not the home (forwarded).
  ferry::dlq_redrive_request some;
  some.topic = dlq;
  for (int64_t o = 0; o < 5; ++o)
    some.offsets.push_back(ferry::partition_offset{dlq, ferry::partition_id{0}, ferry::offset{o}, ""});
  auto first = ask_retrying<ferry::dlq_redrive_response>(c, others[0], deadline, some,
                                                         ferry::redrive_atom_v);
  ASSERT_TRUE(first) << ferry::error_text(first.error()) << "\n" << c.dump();
  EXPECT_EQ(first->redriven, 5);
  EXPECT_EQ(first->skipped, 0);

  // --all through the home: the rest only.
  ferry::dlq_redrive_request all;
  all.topic = dlq;
  auto second = ask_retrying<ferry::dlq_redrive_response>(c, home, deadline, all,
                                                          ferry::redrive_atom_v);
  ASSERT_TRUE(second) << ferry::error_text(second.error()) << "\n" << c.dump();
  EXPECT_EQ(second->redriven, total - 5);
  EXPECT_EQ(second->skipped, 5);

  auto expect_one_copy_each = [&](int via) {
    std::string why;
    auto vs = copies(c, via, why);
    ASSERT_TRUE(vs) << why;
    std::map<std::string, int> count;
    for (auto& v : *vs)
      ++count[v];
    EXPECT_EQ(vs->size(), static_cast<size_t>(total));
    for (int i = 0; i < total; ++i)
      EXPECT_EQ(count["bad-" + std::to_string(i)], 1) << "bad-" << i;
  };
  expect_one_copy_each(others[1]);

  // `dlq list` through the third node shows the home's counts.
  {
    auto b = c.broker(others[1]);
    ASSERT_TRUE(b);
    auto list = ask<std::vector<ferry::dlq_info>>(*c.cs.sys, *b, 15s, ferry::list_atom_v,
                                                  ferry::dlq_atom_v);
    ASSERT_TRUE(list) << ferry::error_text(list.error());
    bool found = false;
    for (auto& x : *list)
      if (x.topic == dlq) {
        found = true;
        EXPECT_EQ(x.total, total);
        EXPECT_EQ(x.redriven, total);
        EXPECT_EQ(x.depth, 0);
      }
    EXPECT_TRUE(found);
  }

  // The home dies; its partition gets a new leader among the survivors.
  c.kill(home);
  std::cout << "[dlq] killed node " << home << " after " << seconds_since(t0) << " s\n";
  // The state partition, the DLQ and the target get new leaders, and the
  // DLQ and target partitions show all their records (high watermarks).
  ASSERT_TRUE(wait_until(15s, [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    auto st = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    auto d = find_partition(*cd, dlq, 0);
    auto s = find_partition(*cd, source, 0);
    auto moved = [&](const ferry::partition_status* ps) {
      return ps && ps->online && ps->leader >= 1 && ps->leader != home;
    };
    return moved(st) && moved(d) && moved(s) && d->high_watermark.value == total
           && s->high_watermark.value == total;
  })) << c.dump();
  deadline = steady::now() + 15s;
  auto third = ask_retrying<ferry::dlq_redrive_response>(c, others[0], deadline, all,
                                                         ferry::redrive_atom_v);
  ASSERT_TRUE(third) << ferry::error_text(third.error()) << "\n" << c.dump();
  EXPECT_EQ(third->redriven, 0);
  EXPECT_EQ(third->skipped, total);
  expect_one_copy_each(others[0]);

  ferry::dlq_show_request show;
  show.topic = dlq;
  auto shown = ask_retrying<ferry::dlq_show_response>(c, others[1], steady::now() + 10s, show,
                                                      ferry::show_atom_v);
  ASSERT_TRUE(shown) << ferry::error_text(shown.error());
  ASSERT_EQ(shown->records.size(), static_cast<size_t>(total));
  for (auto& r : shown->records)
    EXPECT_TRUE(r.redriven) << r.message.value;
  std::cout << "[dlq] done after " << seconds_since(t0) << " s\n";
  c.stop_all();
}

TEST(ClusterDlq, AQueueGroupsDlqIsADlqOnEveryNodeOfFive) {
  cluster c{5};
  ASSERT_CLUSTER_STARTED(c);
  for (auto t : {"qd-src", "qd-dead"}) {
    auto why = c.create_topic(t, 1);
    ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
    ASSERT_TRUE(c.wait_placed(t, 1)) << c.dump();
  }
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0)) << c.dump();
  ferry::queue_group_config qc;
  qc.dlq_topic = "qd-dead";
  auto deadline = steady::now() + 30s;
  caf::error last;
  bool created = false;
  while (!created && steady::now() < deadline) {
    for (int id = 1; id <= c.voters() && !created; ++id) {
      auto b = c.broker(id);
      if (!b)
        continue;
      auto r = ask<ferry::queue_group_config>(*c.cs.sys, *b, 10s, ferry::create_atom_v,
                                              ferry::group_atom_v, std::string{"qd-workers"}, qc);
      created = static_cast<bool>(r);
      if (!r)
        last = r.error();
    }
    if (!created)
      std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(created) << ferry::error_text(last) << "\n" << c.dump();
  // The group reads qd-src: its coordinator stores a position there.
  {
    ferry::queue_receive_request rr;
    rr.group = "qd-workers";
    rr.member_id = "m1";
    rr.topic = "qd-src";
    rr.max_records = 1;
    rr.wait_ms = 0;
    auto r = ask_retrying<std::vector<ferry::leased_message>>(c, 1, steady::now() + 20s, rr,
                                                              ferry::receive_atom_v);
    ASSERT_TRUE(r) << ferry::error_text(r.error()) << "\n" << c.dump();
  }
  for (int id = 1; id <= c.voters(); ++id) {
    std::string seen;
    bool listed = wait_until(20s, [&] {
      auto b = c.broker(id);
      if (!b)
        return false;
      auto list = ask<std::vector<ferry::dlq_info>>(*c.cs.sys, *b, 10s, ferry::list_atom_v,
                                                    ferry::dlq_atom_v);
      if (!list) {
        seen = ferry::error_text(list.error());
        return false;
      }
      seen.clear();
      for (auto& x : *list) {
        seen += " " + x.topic;
        if (x.topic == "qd-dead" && x.groups == std::vector<std::string>{"qd-workers"})
          return true;
      }
      return false;
    }, 300ms);
    EXPECT_TRUE(listed) << "node " << id << " does not list qd-dead as qd-workers' DLQ; it "
                        << "lists:" << seen;
    ferry::dlq_show_request sr;
    sr.topic = "qd-dead";
    auto shown = ask_retrying<ferry::dlq_show_response>(c, id, steady::now() + 20s, sr,
                                                        ferry::show_atom_v);
    EXPECT_TRUE(shown) << "dlq show qd-dead through node " << id << ": "
                       << ferry::error_text(shown.error());
  }
}
