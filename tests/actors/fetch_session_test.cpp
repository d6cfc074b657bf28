// Deterministic tests of a follower node's fetch session
// (actors/server/fetch_session.hpp) on CAF's test coordinator: a fake leader
// node records each round (fetch_round) and the test answers it; fake
// replicas are one-shot actors that send one fetch each and record the
// answer. The leader node's side (serve_fetch_round) runs in the cluster
// tests (Cluster.FetchSessionsKeepAckedWritesAcrossLeaderKills).

#include "actors/server/fetch_session.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace ferry;
using namespace std::chrono_literals;

namespace {

/// What the fake leader node saw: each round, with the promise the test
/// answers.
struct leader_log {
  std::vector<fetch_round> rounds;
  std::vector<caf::typed_response_promise<std::vector<fetch_result>>> promises;
};

caf::behavior fake_leader(caf::event_based_actor* self,
                          std::shared_ptr<leader_log> log) {
  return {
    [self, log](fetch_atom, fetch_round& rd)
      -> caf::result<std::vector<fetch_result>> {
      auto rp = self->make_response_promise<std::vector<fetch_result>>();
      log->rounds.push_back(std::move(rd));
      log->promises.push_back(rp);
      return rp;
    },
    // The test's answer to round i (promises are delivered from the actor
    // that holds them).
    [log](update_atom, int32_t i, std::vector<fetch_result>& results) {
      log->promises.at(static_cast<size_t>(i)).deliver(std::move(results));
    },
    [log](update_atom, int32_t i, caf::error& err) {
      log->promises.at(static_cast<size_t>(i)).deliver(std::move(err));
    },
  };
}

/// What each partition's replica got back (in order).
struct replica_log {
  std::map<int32_t, std::vector<fetch_response>> answers;
  std::map<int32_t, std::vector<caf::error>> errors;
};

fetch_request request_for(int32_t p, int64_t from = 0, int32_t wait_ms = 500) {
  fetch_request r;
  r.topic = "t";
  r.partition = partition_id{p};
  r.from = offset{from};
  r.max_wait_ms = wait_ms;
  r.replica_id = 2;
  r.leader_epoch = 1;
  return r;
}

fetch_result data_for(int32_t p, int64_t from, int64_t hw) {
  fetch_result r;
  r.topic = "t";
  r.partition = partition_id{p};
  r.response.data = "batch";
  r.response.next_offset = offset{from + 1};
  r.response.high_watermark = offset{hw};
  r.response.log_start = offset{0};
  r.response.log_end = offset{hw};
  return r;
}

fetch_result error_for(int32_t p, caf::error err) {
  fetch_result r;
  r.topic = "t";
  r.partition = partition_id{p};
  r.error = std::move(err);
  return r;
}

std::vector<int32_t> partitions_of(const fetch_round& rd) {
  std::vector<int32_t> out;
  for (auto& f : rd.fetches)
    out.push_back(f.partition.value);
  return out;
}

class fetch_session_test : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(cfg_);
    cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    leader_ = sys_->spawn(fake_leader, leader_log_);
    session_ = start_session(leader_);
  }

  fetch_session_actor start_session(caf::actor leader) {
    fetch_session_config fc;
    fc.node_id = 2;
    fc.leader_id = 1;
    fc.leader_broker = std::move(leader);
    auto s = spawn_fetch_session(*sys_, fc);
    sched_->run();
    return s;
  }

  void TearDown() override {
    caf::anon_send_exit(session_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(leader_, caf::exit_reason::user_shutdown);
    sched_->run();
    sys_.reset();
  }

  /// Partition p's replica fetches (one-shot actor); `run`: let everything
  /// run (false: several replicas ask in one burst).
  void fetch(const fetch_request& req, bool run = true) {
    sys_->spawn([s = session_, req, log = replicas_](caf::event_based_actor* self) {
      auto p = req.partition.value;
      self->request(s, caf::infinite, fetch_atom_v, req)
        .then([log, p](fetch_response& r) { log->answers[p].push_back(std::move(r)); },
              [log, p](caf::error& e) { log->errors[p].push_back(std::move(e)); });
    });
    if (run)
      sched_->run();
  }

  /// Answers round i.
  void answer(size_t i, std::vector<fetch_result> results) {
    ASSERT_LT(i, leader_log_->promises.size());
    caf::anon_send(leader_, update_atom_v, static_cast<int32_t>(i), std::move(results));
    sched_->run();
  }

  void fail(size_t i, caf::error err) {
    ASSERT_LT(i, leader_log_->promises.size());
    caf::anon_send(leader_, update_atom_v, static_cast<int32_t>(i), std::move(err));
    sched_->run();
  }

  size_t answers(int32_t p) {
    return replicas_->answers[p].size();
  }
  size_t errors(int32_t p) {
    return replicas_->errors[p].size();
  }
  const fetch_round& round(size_t i) {
    return leader_log_->rounds.at(i);
  }
  size_t rounds() {
    return leader_log_->rounds.size();
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::shared_ptr<leader_log> leader_log_ = std::make_shared<leader_log>();
  std::shared_ptr<replica_log> replicas_ = std::make_shared<replica_log>();
  caf::actor leader_;
  fetch_session_actor session_;
};

// Replicas that ask in one burst share a round; it names the follower, the
// session and round 1.
TEST_F(fetch_session_test, FetchesAskedTogetherShareOneRound) {
  for (int32_t p = 0; p < 5; ++p)
    fetch(request_for(p), false);
  sched_->run();
  ASSERT_EQ(rounds(), 1u);
  EXPECT_EQ(partitions_of(round(0)), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(round(0).follower, 2);
  EXPECT_NE(round(0).session, 0u);
  EXPECT_EQ(round(0).round, 1u);
}

// An answer reaches only the partitions it names; the others stay held at
// the leader, and the session keeps one round waiting there that carries no
// long poll again (a partition with nothing new costs nothing per round).
TEST_F(fetch_session_test, OnlyAnsweredPartitionsHearBackAndHeldOnesAreNotResent) {
  for (int32_t p = 0; p < 3; ++p)
    fetch(request_for(p), false);
  sched_->run();
  ASSERT_EQ(rounds(), 1u);
  answer(0, {data_for(1, 0, 1)});
  ASSERT_EQ(answers(1), 1u);
  EXPECT_EQ(replicas_->answers[1][0].data, "batch");
  EXPECT_EQ(answers(0), 0u);
  EXPECT_EQ(answers(2), 0u);
  ASSERT_EQ(rounds(), 2u) << "no round waiting at the leader for the held polls";
  EXPECT_TRUE(round(1).fetches.empty()) << "held long polls were sent again";
  EXPECT_EQ(round(1).session, round(0).session);
  EXPECT_EQ(round(1).round, 2u);
  // Partition 1's replica asks again: a second round carries it while the
  // first waits (the leader then answers the waiting one).
  fetch(request_for(1, 1));
  ASSERT_EQ(rounds(), 3u);
  EXPECT_EQ(partitions_of(round(2)), (std::vector<int32_t>{1}));
  EXPECT_EQ(round(2).fetches[0].from, offset{1});
  // No third round while two are out.
  fetch(request_for(7));
  EXPECT_EQ(rounds(), 3u);
  // The waiting round comes back empty: partition 7 goes now.
  answer(1, {});
  ASSERT_EQ(rounds(), 4u);
  EXPECT_EQ(partitions_of(round(3)), (std::vector<int32_t>{7}));
  // One answer for two partitions in a later round.
  answer(2, {data_for(0, 0, 1), error_for(2, make_error(ec::not_leader, "moved"))});
  EXPECT_EQ(answers(0), 1u);
  ASSERT_EQ(errors(2), 1u);
  EXPECT_TRUE(is(replicas_->errors[2][0], ec::not_leader));
}

// A failed round (link down, timeout) fails every long poll the leader held:
// the replicas retry, and the next round starts a new session.
TEST_F(fetch_session_test, AFailedRoundFailsEveryHeldPollAndStartsANewSession) {
  fetch(request_for(0), false);
  fetch(request_for(1), false);
  sched_->run();
  fail(0, make_error(ec::request_timed_out, "lost"));
  EXPECT_EQ(errors(0), 1u);
  EXPECT_EQ(errors(1), 1u);
  auto old_session = round(0).session;
  fetch(request_for(0));
  ASSERT_EQ(rounds(), 2u);
  EXPECT_NE(round(1).session, old_session);
  EXPECT_EQ(round(1).round, 1u);
  EXPECT_EQ(partitions_of(round(1)), (std::vector<int32_t>{0}));
}

// The leader node does not know the session (it restarted): an answer with
// an empty topic fails every held poll; answers of the old session that
// come later are dropped.
TEST_F(fetch_session_test, ASessionTheLeaderDoesNotKnowFailsItsHeldPolls) {
  fetch(request_for(0), false);
  fetch(request_for(1), false);
  sched_->run();
  answer(0, {data_for(0, 0, 1)});
  ASSERT_EQ(rounds(), 2u); // waits for partition 1
  fetch(request_for(0, 1));
  ASSERT_EQ(rounds(), 3u);
  answer(1, {fetch_result{{}, partition_id{0}, {},
                          make_error(ec::request_timed_out, "unknown session")}});
  EXPECT_EQ(errors(1), 1u);
  EXPECT_EQ(errors(0), 1u) << "partition 0's second poll was held too";
  // Round 3 belongs to the old session: its late answer reaches nobody.
  answer(2, {data_for(0, 1, 2)});
  EXPECT_EQ(answers(0), 1u);
  fetch(request_for(0, 1));
  ASSERT_EQ(rounds(), 4u);
  EXPECT_NE(round(3).session, round(0).session);
}

// A new link to the leader node: polls held over the old one fail, later
// ones go over the new link in a new session.
TEST_F(fetch_session_test, LinkChangeFailsHeldPolls) {
  fetch(request_for(0));
  auto other_log = std::make_shared<leader_log>();
  auto other = sys_->spawn(fake_leader, other_log);
  caf::anon_send(session_, update_atom_v, other);
  sched_->run();
  EXPECT_EQ(errors(0), 1u);
  fetch(request_for(0));
  ASSERT_EQ(other_log->rounds.size(), 1u);
  EXPECT_NE(other_log->rounds[0].session, round(0).session);
  EXPECT_EQ(rounds(), 1u) << "nothing more went over the old link";
  caf::anon_send_exit(other, caf::exit_reason::user_shutdown);
}

// Without a link to the leader node, polls wait in the session and go once
// it is there.
TEST_F(fetch_session_test, RequestsWaitForTheLeadersBroker) {
  caf::anon_send(session_, update_atom_v, caf::actor{});
  sched_->run();
  fetch(request_for(0));
  EXPECT_EQ(rounds(), 0u);
  caf::anon_send(session_, update_atom_v, leader_);
  sched_->run();
  ASSERT_EQ(rounds(), 1u);
  EXPECT_EQ(partitions_of(round(0)), (std::vector<int32_t>{0}));
}

// A replica's newer fetch (after a stall) supersedes its older one: the old
// promise fails, the new one goes to the leader, which replaces the old.
TEST_F(fetch_session_test, ANewerFetchSupersedesTheHeldOne) {
  fetch(request_for(0));
  ASSERT_EQ(rounds(), 1u);
  fetch(request_for(0, 0));
  ASSERT_EQ(errors(0), 1u);
  EXPECT_TRUE(is(replicas_->errors[0][0], ec::request_timed_out));
  ASSERT_EQ(rounds(), 2u);
  EXPECT_EQ(partitions_of(round(1)), (std::vector<int32_t>{0}));
  answer(1, {data_for(0, 0, 1)});
  EXPECT_EQ(answers(0), 1u);
}

// Each long poll asks for at most max_partition_bytes, so a round's answer
// stays bounded when many partitions catch up.
TEST_F(fetch_session_test, LongPollsAskForAtMostTheSessionsShare) {
  auto req = request_for(0);
  req.max_bytes = 64 << 20;
  fetch(req);
  ASSERT_EQ(rounds(), 1u);
  EXPECT_EQ(round(0).fetches[0].max_bytes, 1 << 20);
}

} // namespace
