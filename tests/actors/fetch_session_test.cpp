// Deterministic tests of a follower node's fetch session
// (actors/server/fetch_session.hpp) on CAF's test coordinator: a fake leader
// node records each round and the test answers it; fake replicas are
// one-shot actors that send one fetch each and record the answer.

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

/// What the fake leader node saw: each round's requests, with the promise
/// the test answers.
struct leader_log {
  std::vector<std::vector<fetch_request>> rounds;
  std::vector<caf::typed_response_promise<std::vector<fetch_result>>> promises;
};

caf::behavior fake_leader(caf::event_based_actor* self,
                          std::shared_ptr<leader_log> log) {
  return {
    [self, log](fetch_atom, std::vector<fetch_request>& reqs)
      -> caf::result<std::vector<fetch_result>> {
      auto rp = self->make_response_promise<std::vector<fetch_result>>();
      log->rounds.push_back(std::move(reqs));
      log->promises.push_back(rp);
      return rp;
    },
    // The test's answer to the latest round (promises are delivered from
    // the actor that holds them).
    [log](update_atom, std::vector<fetch_result>& results) {
      log->promises.back().deliver(std::move(results));
    },
    [log](update_atom, caf::error& err) { log->promises.back().deliver(std::move(err)); },
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

fetch_result data_for(const fetch_request& req, int64_t hw) {
  fetch_result r;
  r.response.data = "batch";
  r.response.next_offset = offset{req.from.value + 1};
  r.response.high_watermark = offset{hw};
  r.response.log_start = offset{0};
  r.response.log_end = offset{hw};
  return r;
}

fetch_result empty_for(const fetch_request& req, int64_t hw) {
  fetch_result r;
  r.response.next_offset = req.from;
  r.response.high_watermark = offset{hw};
  r.response.log_start = offset{0};
  r.response.log_end = req.from;
  return r;
}

fetch_result waiting() {
  fetch_result r;
  r.waiting = true;
  return r;
}

class fetch_session_test : public ::testing::Test {
protected:
  void SetUp() override {
    register_types(cfg_);
    cfg_.set("scheduler.policy", caf::atom("testing"));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    leader_ = sys_->spawn(fake_leader, leader_log_);
    fetch_session_config fc;
    fc.node_id = 2;
    fc.leader_id = 1;
    fc.leader_broker = leader_;
    session_ = spawn_fetch_session(*sys_, fc);
    sched_->run();
  }

  void TearDown() override {
    caf::anon_send_exit(session_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(leader_, caf::exit_reason::user_shutdown);
    sched_->run();
    sys_.reset();
  }

  /// Partition p's replica fetches (one-shot actor).
  void fetch(const fetch_request& req) {
    sys_->spawn([s = session_, req, log = replicas_](caf::event_based_actor* self) {
      auto p = req.partition.value;
      self->request(s, caf::infinite, fetch_atom_v, req)
        .then([log, p](fetch_response& r) { log->answers[p].push_back(std::move(r)); },
              [log, p](caf::error& e) { log->errors[p].push_back(std::move(e)); });
    });
    sched_->run();
  }

  /// Answers the latest round.
  void answer(std::vector<fetch_result> results) {
    ASSERT_FALSE(leader_log_->promises.empty());
    caf::anon_send(leader_, update_atom_v, std::move(results));
    sched_->run();
  }

  size_t answers(int32_t p) {
    return replicas_->answers[p].size();
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::shared_ptr<leader_log> leader_log_ = std::make_shared<leader_log>();
  std::shared_ptr<replica_log> replicas_ = std::make_shared<replica_log>();
  caf::actor leader_;
  fetch_session_actor session_;
};

// The first fetch starts a round at once; the fetches that arrive while it
// is out go together in the next one.
TEST_F(fetch_session_test, FetchesOfManyPartitionsShareOneRound) {
  fetch(request_for(0));
  ASSERT_EQ(leader_log_->rounds.size(), 1u);
  EXPECT_EQ(leader_log_->rounds[0].size(), 1u);
  for (int32_t p = 1; p < 6; ++p)
    fetch(request_for(p));
  EXPECT_EQ(leader_log_->rounds.size(), 1u) << "one round in flight at most";
  answer({data_for(request_for(0), 1)});
  ASSERT_EQ(answers(0), 1u);
  EXPECT_EQ(replicas_->answers[0][0].data, "batch");
  // Partition 0's replica has not asked again: the round waits for it
  // (linger), then goes with the other five.
  EXPECT_EQ(leader_log_->rounds.size(), 1u);
  sched_->advance_time(2ms);
  sched_->run();
  ASSERT_EQ(leader_log_->rounds.size(), 2u);
  EXPECT_EQ(leader_log_->rounds[1].size(), 5u);
}

// Partitions with nothing stay in the session (their replicas hear
// nothing) and go again in the next round; one with data is answered.
TEST_F(fetch_session_test, IdlePartitionsWaitInTheSessionForTheNextRound) {
  fetch(request_for(0));
  for (int32_t p = 1; p < 4; ++p)
    fetch(request_for(p));
  answer({empty_for(request_for(0), 0)}); // first answer: delivered (new HW)
  ASSERT_EQ(answers(0), 1u);
  fetch(request_for(0)); // partition 0 asks again: no linger needed
  ASSERT_EQ(leader_log_->rounds.size(), 2u);
  ASSERT_EQ(leader_log_->rounds[1].size(), 4u);
  // Partition 2 has data; 0 is empty with the HW it knows; 1 and 3 wait.
  answer({empty_for(request_for(0), 0), waiting(), data_for(request_for(2), 5), waiting()});
  EXPECT_EQ(answers(0), 1u) << "an empty answer with the same HW is kept";
  EXPECT_EQ(answers(1), 0u);
  EXPECT_EQ(answers(2), 1u);
  EXPECT_EQ(answers(3), 0u);
  fetch(request_for(2, 1));
  ASSERT_EQ(leader_log_->rounds.size(), 3u);
  EXPECT_EQ(leader_log_->rounds[2].size(), 4u);
  bool has_new_offset = false;
  for (auto& r : leader_log_->rounds[2])
    if (r.partition.value == 2)
      has_new_offset = r.from == offset{1};
  EXPECT_TRUE(has_new_offset) << "partition 2's new request replaced the old";
}

// A high watermark that moved is news even without data; an empty answer
// after the replica's whole max wait is delivered like a long poll's.
TEST_F(fetch_session_test, MovedHighWatermarkAndExpiredWaitReachTheReplica) {
  fetch(request_for(0, 3, 500));
  answer({empty_for(request_for(0, 3), 2)});
  ASSERT_EQ(answers(0), 1u);
  fetch(request_for(0, 3, 500));
  answer({empty_for(request_for(0, 3), 3)}); // HW 2 -> 3
  ASSERT_EQ(answers(0), 2u);
  EXPECT_EQ(replicas_->answers[0][1].high_watermark, offset{3});
  fetch(request_for(0, 3, 500));
  answer({empty_for(request_for(0, 3), 3)}); // nothing new: kept
  EXPECT_EQ(answers(0), 2u);
  ASSERT_EQ(leader_log_->rounds.size(), 4u) << "kept requests go out again";
  sched_->advance_time(500ms);
  sched_->run();
  answer({empty_for(request_for(0, 3), 3)});
  EXPECT_EQ(answers(0), 3u) << "waited its max wait: answered empty";
}

// A partition left `waiting` round after round (others had the data) gets
// the empty answer once it has waited its max wait, with the HW it knew:
// its replica never sees a fetch hang past its long poll.
TEST_F(fetch_session_test, WaitingPartitionIsAnsweredEmptyAfterItsMaxWait) {
  fetch(request_for(0, 7, 500));
  answer({empty_for(request_for(0, 7), 6)});
  ASSERT_EQ(answers(0), 1u);
  fetch(request_for(0, 7, 500));
  answer({waiting()});
  EXPECT_EQ(answers(0), 1u);
  ASSERT_EQ(leader_log_->rounds.size(), 3u);
  sched_->advance_time(500ms);
  sched_->run();
  answer({waiting()});
  ASSERT_EQ(answers(0), 2u);
  auto& r = replicas_->answers[0][1];
  EXPECT_TRUE(r.data.empty());
  EXPECT_EQ(r.next_offset, offset{7});
  EXPECT_EQ(r.high_watermark, offset{6});
  EXPECT_EQ(r.log_start, offset{0});
}

// A round that fails fails every request in it; the replicas retry.
TEST_F(fetch_session_test, FailedRoundFailsItsRequests) {
  fetch(request_for(0));
  ASSERT_EQ(leader_log_->rounds.size(), 1u);
  caf::anon_send(leader_, update_atom_v, make_error(ec::not_leader, "moved"));
  sched_->run();
  ASSERT_EQ(replicas_->errors[0].size(), 1u);
  fetch(request_for(0));
  fetch(request_for(1));
  answer({fetch_result{{}, make_error(ec::fenced_leader_epoch, "epoch 2"), false},
          empty_for(request_for(1), 0)});
  // Round 2 held partition 0 only (1 came while it was out).
  ASSERT_EQ(replicas_->errors[0].size(), 2u);
  EXPECT_TRUE(is(replicas_->errors[0][1], ec::fenced_leader_epoch))
    << caf::to_string(replicas_->errors[0][1]);
}

// A replica that asks again while its older request waits in the session
// (it gave up on it) gets the old one answered with an error and only the
// new one goes out.
TEST_F(fetch_session_test, ANewerFetchSupersedesTheWaitingOne) {
  fetch(request_for(9));      // round 1 out
  fetch(request_for(0, 1));   // pending
  fetch(request_for(0, 4));   // replaces it
  ASSERT_EQ(replicas_->errors[0].size(), 1u);
  answer({empty_for(request_for(9), 0)});
  sched_->advance_time(2ms); // partition 9 was answered: linger
  sched_->run();
  ASSERT_EQ(leader_log_->rounds.size(), 2u);
  ASSERT_EQ(leader_log_->rounds[1].size(), 1u);
  EXPECT_EQ(leader_log_->rounds[1][0].from, offset{4});
}

// A link change (down: null broker; a new broker) fails the round in
// flight at once (its answer may never come); a late answer is dropped and
// the replicas' next requests go to the new broker.
TEST_F(fetch_session_test, LinkChangeFailsTheRoundInFlight) {
  fetch(request_for(0));
  ASSERT_EQ(leader_log_->rounds.size(), 1u);
  caf::anon_send(session_, update_atom_v, caf::actor{});
  sched_->run();
  ASSERT_EQ(replicas_->errors[0].size(), 1u);
  answer({data_for(request_for(0), 1)}); // late: nobody gets it
  EXPECT_EQ(answers(0), 0u);
  fetch(request_for(0));
  EXPECT_EQ(leader_log_->rounds.size(), 1u) << "no broker: waits";
  caf::anon_send(session_, update_atom_v, leader_);
  sched_->run();
  ASSERT_EQ(leader_log_->rounds.size(), 2u);
  answer({data_for(request_for(0), 1)});
  EXPECT_EQ(answers(0), 1u);
}

// Without a leader broker (link down) requests wait; a new broker gets them.
TEST_F(fetch_session_test, RequestsWaitForTheLeadersBroker) {
  caf::anon_send(session_, update_atom_v, caf::actor{});
  sched_->run();
  fetch(request_for(0));
  EXPECT_TRUE(leader_log_->rounds.empty());
  caf::anon_send(session_, update_atom_v, leader_);
  sched_->run();
  EXPECT_EQ(leader_log_->rounds.size(), 1u);
}

} // namespace
