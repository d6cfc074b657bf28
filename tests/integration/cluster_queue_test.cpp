// A queue-mode group survives the death of its coordinator's node
// (cluster_harness.hpp: three ferryd processes with --voters).
//   ClusterQueue.LeasesAttemptsAndConfigSurviveTheCoordinatorsDeath:
//   20 acks=all records on 2 partitions (RF 3); a queue group with
//   max_attempts 3 and dlq_topic "cq-dead" (created by the coordinator on
//   demand, after the kill: placement skips the fenced node), talked to
//   through a node that does not coordinate it (requests are forwarded). A member leases all 20,
//   nacks 3 of them twice (2 failed attempts each), holds 5 leases open and
//   acks the other 12. The coordinator's node -- the leader of the group's
//   __consumer_state partition -- is SIGKILLed. Through the survivors: the 5
//   held leases are acked with the lease ids of the dead coordinator; the 3
//   nacked records come back with attempt 3 and their third failure sends
//   them to "cq-dead" (not a later one); nothing acked before the kill is
//   delivered again, and every record ends acked or dead-lettered.
// Every wait is bounded; every ferryd is killed when the test ends.

#include "cluster_harness.hpp"

#include "broker/consumer_state.hpp"
#include "broker/partitioner.hpp"

#include <iostream>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using steady = std::chrono::steady_clock;

using record_id = std::pair<int32_t, int64_t>; // partition, offset

record_id id_of(const ferry::leased_message& m) {
  return {m.message.partition.value, m.message.off.value};
}

std::string text(const record_id& r) {
  return std::to_string(r.first) + "@" + std::to_string(r.second);
}

struct queue_client {
  cluster& c;
  std::string group;
  std::string topic;

  caf::expected<std::vector<ferry::leased_message>>
  receive(int node, const std::string& member, int64_t wait_ms) {
    auto b = c.broker(node);
    if (!b)
      return b.error();
    ferry::queue_receive_request req{group, topic, member, 100, 0, wait_ms};
    return ask<std::vector<ferry::leased_message>>(
      *c.cs.sys, *b, std::chrono::milliseconds{wait_ms} + 10s, ferry::receive_atom_v, req);
  }

  caf::expected<ferry::queue_ack_response> settle(int node, const std::string& member,
                                                  const ferry::leased_message& m,
                                                  ferry::queue_ack_kind kind,
                                                  std::string error = {}) {
    auto b = c.broker(node);
    if (!b)
      return b.error();
    ferry::queue_ack_request req;
    req.group = group;
    req.member_id = member;
    req.topic = m.message.topic;
    req.partition = m.message.partition;
    req.off = m.message.off;
    req.lease_id = m.lease_id;
    req.kind = kind;
    req.error = std::move(error);
    return ask<ferry::queue_ack_response>(*c.cs.sys, *b, 10s, ferry::ack_atom_v, req);
  }

  /// Retries `settle` through any of `nodes` until it succeeds or
  /// `deadline`; a retry after an unknown outcome (timeout) accepts
  /// lease_not_found ("is done": the earlier try went through).
  caf::expected<ferry::queue_ack_response> settle_retrying(
    const std::vector<int>& nodes, const std::string& member, const ferry::leased_message& m,
    ferry::queue_ack_kind kind, steady::time_point deadline, std::string error = {}) {
    caf::error last = caf::make_error(caf::sec::request_timeout);
    bool unknown_outcome = false;
    while (steady::now() < deadline) {
      for (auto node : nodes) {
        auto r = settle(node, member, m, kind, error);
        if (r)
          return r;
        last = r.error();
        if (ferry::is(last, ferry::ec::lease_not_found) && unknown_outcome
            && kind == ferry::queue_ack_kind::ack)
          return ferry::queue_ack_response{};
        if (ferry::is(last, ferry::ec::lease_not_found)
            || ferry::is(last, ferry::ec::not_lease_owner)
            || ferry::is(last, ferry::ec::lease_expired))
          return last;
        unknown_outcome = unknown_outcome || last == caf::sec::request_timeout
                          || ferry::is(last, ferry::ec::request_timed_out);
      }
      std::this_thread::sleep_for(200ms);
    }
    return last;
  }
};

TEST(ClusterQueue, LeasesAttemptsAndConfigSurviveTheCoordinatorsDeath) {
  auto t0 = steady::now();
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "cq-jobs";
  const std::string group = "cq-group";
  const std::string dlq = "cq-dead";
  constexpr int32_t partitions = 2;
  constexpr int total = 20;
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions)) << c.dump();
  // The DLQ topic exists before the kill: a topic created on demand while a
  // node is fenced can get a partition without a live leader (a placement
  // matter of the controller, not of the queue group).
  ASSERT_TRUE(c.wait_placed(ferry::consumer_state_topic, 0)) << c.dump();
  ASSERT_TRUE(c.wait_registered()) << c.dump();

  // The coordinator: the leader of the group's __consumer_state partition.
  int coordinator = -1, state_partition = -1;
  {
    auto cd = c.describe_controller();
    ASSERT_TRUE(cd) << c.dump();
    auto st = find_topic(*cd, ferry::consumer_state_topic);
    ASSERT_TRUE(st && !st->partitions.empty()) << render(*cd, true);
    state_partition = ferry::partition_for_key(group, static_cast<int32_t>(st->partitions.size()));
    auto ps = find_partition(*cd, ferry::consumer_state_topic, state_partition);
    ASSERT_TRUE(ps && ps->leader >= 1) << render(*cd, true);
    coordinator = ps->leader;
  }
  std::vector<int> survivors;
  for (int id = 1; id <= c.voters(); ++id)
    if (id != coordinator)
      survivors.push_back(id);
  const int via = survivors.front(); // not the coordinator: requests are forwarded
  std::cout << "[queue] group " << group << " lives in " << ferry::consumer_state_topic << "-"
            << state_partition << ", coordinated by node " << coordinator
            << "; the client talks to node " << via << "\n";

  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  std::vector<ferry::client_message> msgs;
  for (int i = 0; i < total; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.has_key = true;
    m.key = "k" + std::to_string(i);
    m.value = "job-" + std::to_string(i);
    msgs.push_back(std::move(m));
  }
  auto reports = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 60s,
                                                          ferry::produce_atom_v, msgs);
  ASSERT_TRUE(reports) << ferry::error_text(reports.error()) << "\n" << c.dump();
  std::map<record_id, std::string> produced;
  for (size_t i = 0; i < reports->size(); ++i)
    produced[{(*reports)[i].partition.value, (*reports)[i].off.value}] = msgs[i].value;
  ASSERT_EQ(produced.size(), static_cast<size_t>(total));

  // The group, through a node that does not coordinate it.
  ferry::queue_group_config qc;
  qc.max_attempts = 3;
  qc.initial_backoff_ms = 200;
  qc.max_backoff_ms = 400;
  qc.jitter = 0.0;
  qc.visibility_timeout_ms = 120'000; // held leases do not expire in the test
  qc.dlq_topic = dlq;
  {
    std::optional<caf::expected<ferry::queue_group_config>> created;
    wait_until(15s, [&] {
      auto b = c.broker(via);
      if (!b)
        return false;
      created = ask<ferry::queue_group_config>(*c.cs.sys, *b, 10s, ferry::create_atom_v,
                                               ferry::group_atom_v, group, qc);
      return bool{*created} || !ferry::is(created->error(),
                                          ferry::ec::coordinator_not_available);
    }, 300ms);
    ASSERT_TRUE(created && *created)
      << (created ? ferry::error_text(created->error()) : "no answer") << "\n" << c.dump();
    EXPECT_EQ(**created, qc);
  }
  queue_client q{c, group, topic};
  const std::string member = "worker-1";

  // Lease all 20.
  std::map<record_id, ferry::leased_message> leased;
  wait_until(20s, [&] {
    auto got = q.receive(via, member, 500);
    if (got)
      for (auto& m : *got) {
        EXPECT_EQ(m.attempt, 1) << text(id_of(m));
        EXPECT_EQ(m.message.value, produced[id_of(m)]);
        leased[id_of(m)] = m;
      }
    return leased.size() == static_cast<size_t>(total);
  }, 50ms);
  ASSERT_EQ(leased.size(), static_cast<size_t>(total)) << c.dump();

  // 3 nacked twice, 5 held, 12 acked.
  std::vector<record_id> ids;
  for (auto& [id, m] : leased)
    ids.push_back(id);
  std::set<record_id> nacked{ids[0], ids[7], ids[14]};
  std::set<record_id> held, acked;
  for (auto& id : ids) {
    if (nacked.count(id))
      continue;
    (held.size() < 5 ? held : acked).insert(id);
  }
  for (auto& id : nacked) {
    auto r = q.settle(via, member, leased[id], ferry::queue_ack_kind::nack, "fail-1");
    ASSERT_TRUE(r) << text(id) << ": " << ferry::error_text(r.error());
    EXPECT_EQ(r->attempts, 1);
    EXPECT_FALSE(r->dead_letter);
  }
  for (auto& id : acked) {
    auto r = q.settle(via, member, leased[id], ferry::queue_ack_kind::ack);
    ASSERT_TRUE(r) << text(id) << ": " << ferry::error_text(r.error());
  }
  std::set<record_id> second;
  wait_until(10s, [&] {
    auto got = q.receive(via, member, 500);
    if (got)
      for (auto& m : *got) {
        auto id = id_of(m);
        EXPECT_TRUE(nacked.count(id)) << text(id) << " delivered again";
        EXPECT_EQ(m.attempt, 2) << text(id);
        auto r = q.settle(via, member, m, ferry::queue_ack_kind::nack, "fail-2");
        EXPECT_TRUE(r) << text(id) << ": " << ferry::error_text(r.error());
        if (r) {
          EXPECT_EQ(r->attempts, 2);
          EXPECT_FALSE(r->dead_letter);
          second.insert(id);
        }
      }
    return second.size() == nacked.size();
  }, 50ms);
  ASSERT_EQ(second.size(), nacked.size()) << c.dump();

  // SIGKILL the coordinator's node.
  std::cout << "[queue] 12 acked, 5 held, 3 nacked twice; SIGKILL node " << coordinator
            << " at " << seconds_since(t0) << " s\n";
  auto tk = steady::now();
  c.kill(coordinator);
  auto deadline = steady::now() + 40s;

  // The held leases, acked with the dead coordinator's lease ids.
  for (auto& id : held) {
    auto r = q.settle_retrying(survivors, member, leased[id], ferry::queue_ack_kind::ack,
                               deadline);
    ASSERT_TRUE(r) << "ack of held lease " << text(id) << " (id " << leased[id].lease_id
                   << ") after the failover: " << ferry::error_text(r.error()) << "\n"
                   << c.dump();
  }
  std::cout << "[queue] the 5 held leases acked through the survivors "
            << seconds_since(tk) << " s after the kill\n";

  // The nacked records come back with attempt 3; the third failure is the
  // last.
  std::set<record_id> dead;
  std::map<record_id, int> redelivered;
  int quiet = 0;
  while ((dead.size() < nacked.size() || quiet < 2) && steady::now() < deadline) {
    auto got = q.receive(survivors[quiet % survivors.size()], member, 500);
    if (!got) {
      std::this_thread::sleep_for(200ms);
      continue;
    }
    quiet = got->empty() ? quiet + 1 : 0;
    for (auto& m : *got) {
      auto id = id_of(m);
      if (!nacked.count(id) || dead.count(id)) {
        ++redelivered[id];
        continue;
      }
      EXPECT_EQ(m.attempt, 3) << text(id);
      auto r = q.settle_retrying(survivors, member, m, ferry::queue_ack_kind::nack, deadline,
                                 "fail-3");
      ASSERT_TRUE(r) << text(id) << ": " << ferry::error_text(r.error()) << "\n" << c.dump();
      EXPECT_EQ(r->attempts, 3) << text(id);
      EXPECT_TRUE(r->dead_letter) << text(id) << " not dead-lettered at its 3rd failure";
      dead.insert(id);
    }
  }
  for (auto& [id, n] : redelivered)
    ADD_FAILURE() << text(id) << " delivered again " << n << " times after the failover"
                  << (acked.count(id) || held.count(id) ? " (it was acked)" : "");
  EXPECT_EQ(dead, nacked) << c.dump();

  // Everything settled: the group's position is at the end of each
  // partition and the dead letters are in the configured DLQ topic.
  std::optional<ferry::queue_group_description> desc;
  bool settled = wait_until(std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::max(deadline - steady::now(), steady::duration{1s})),
                            [&] {
    for (auto id : survivors) {
      auto b = c.broker(id);
      if (!b)
        continue;
      auto d = ask<ferry::queue_group_description>(*c.cs.sys, *b, 5s, ferry::describe_atom_v,
                                                   ferry::queue_atom_v, group);
      if (!d)
        continue;
      desc = *d;
      int64_t at_end = 0;
      for (auto& p : d->partitions) {
        int64_t end = 0;
        for (auto& [rid, v] : produced)
          if (rid.first == p.partition.value)
            end = std::max(end, rid.second + 1);
        if (p.topic == topic && p.committed.value == end && p.dead_letter_pending == 0)
          ++at_end;
      }
      return at_end == partitions;
    }
    return false;
  }, 200ms);
  ASSERT_TRUE(desc) << "no describe of the group after the failover\n" << c.dump();
  for (auto& p : desc->partitions) {
    std::cout << "[queue] " << p.topic << "-" << p.partition.value << ": committed "
              << p.committed.value << ", leased " << p.leased << ", pending DLQ "
              << p.dead_letter_pending << ", dlq topic " << p.dlq_topic << "\n";
    EXPECT_EQ(p.dlq_topic, dlq);
  }
  EXPECT_TRUE(settled) << "the group did not reach the end of its partitions\n" << c.dump();
  size_t in_dlq = 0;
  wait_until(10s, [&] {
    auto cd = c.describe_controller();
    auto t = cd ? find_topic(*cd, dlq) : nullptr;
    if (!t)
      return false;
    in_dlq = 0;
    for (auto& ps : t->partitions)
      in_dlq += static_cast<size_t>(std::max<int64_t>(0, ps.high_watermark.value));
    return in_dlq >= nacked.size();
  });
  EXPECT_EQ(in_dlq, nacked.size()) << "records in " << dlq << "\n" << c.dump();
  std::cout << "[queue] " << dead.size() << " dead-lettered into " << dlq << ", "
            << in_dlq << " records there; done " << seconds_since(tk)
            << " s after the kill, " << seconds_since(t0) << " s in all\n";
  c.stop_all();
}

} // namespace
