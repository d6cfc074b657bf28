// The idempotent producer's request window on CAF's deterministic test
// scheduler: a fake broker holds every produce it gets until the test
// answers it, so the test decides the order of the answers.
//
// A broker remembers a producer's last five batches per partition; a retried
// batch is recognized as a duplicate only while it is among them. When the
// answer to the oldest batch in flight is lost (the node relaying it died)
// while later batches are answered, the producer must not send more batches
// past it than its window: otherwise its retry, later, is refused as out of
// order, the producer takes a new producer id, and the batch is written
// twice (Cluster.FetchSessionsKeepAckedWritesAcrossLeaderKills found this).

#include "actors/client/producer.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/record_batch.hpp"
#include "tests/fake_connection.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace ferry {
namespace {

struct held_produce {
  int32_t base_sequence = -1;
  int32_t records = 0;
  caf::typed_response_promise<produce_response> rp;
};

struct produce_log {
  std::vector<held_produce> held; ///< not answered yet, in arrival order
  std::vector<int32_t> sequences; ///< base sequence of every produce received
  int64_t next_offset = 0;
};

/// One topic "t" with one partition. Produces are held until
/// (tick_atom, base_sequence) answers the held one with that base sequence.
caf::behavior fake_broker(caf::event_based_actor* self, std::shared_ptr<produce_log> log) {
  return {
    [](init_pid_atom) { return producer_identity{producer_id{7}, 0}; },
    [](list_atom, topic_atom) {
      topic_metadata t;
      t.name = "t";
      t.config.partitions = 1;
      return std::vector<topic_metadata>{t};
    },
    [self, log](produce_atom, produce_request& req) {
      auto rp = self->make_response_promise<produce_response>();
      auto h = parse_batch_header(req.batch, 1 << 20);
      if (!h) {
        rp.deliver(std::move(h.error()));
        return rp;
      }
      log->sequences.push_back(h->base_sequence);
      log->held.push_back(held_produce{h->base_sequence, h->last_offset_delta + 1, rp});
      return rp;
    },
    [log](tick_atom, int32_t base_sequence) {
      auto i = std::find_if(log->held.begin(), log->held.end(), [&](const held_produce& h) {
        return h.base_sequence == base_sequence;
      });
      if (i == log->held.end())
        return;
      // Offsets as a log would give them in sequence order: base sequence
      // n holds offset n (one record per batch in these tests).
      produce_response r;
      r.base_offset = offset{i->base_sequence};
      r.last_offset = offset{i->base_sequence + i->records - 1};
      auto rp = i->rp;
      log->held.erase(i);
      rp.deliver(r);
    },
  };
}

class ProducerWindowTest : public ::testing::Test, protected test::coordinated_client {
protected:
  void SetUp() override {
    start();
    log = std::make_shared<produce_log>();
    broker = sys->spawn(fake_broker, log);
    sched->run();
    producer_config pc;
    pc.acks = acks_mode::all;
    pc.idempotence = true;
    pc.max_in_flight = 5;
    pc.linger = std::chrono::milliseconds{0};
    pc.route_to_leaders = false;
    auto h = spawn_producer(*sys, pc, conn);
    ASSERT_TRUE(h) << describe(h.error());
    producer = *h;
    sched->run();
    ASSERT_TRUE(*listener);
    caf::anon_send(*listener, connect_atom_v, caf::actor_cast<broker_actor>(broker));
    sched->run();
  }

  void TearDown() override {
    stop({caf::actor_cast<caf::actor>(producer), broker});
  }

  /// Produces one message (one batch: each goes alone through the mailbox);
  /// its delivery report lands in `reports` when it comes.
  void produce(const std::string& value) {
    auto dest = producer;
    auto out = reports;
    sys->spawn([dest, out, value](caf::event_based_actor* self) {
      client_message m;
      m.topic = "t";
      m.value = value;
      self->request(dest, caf::infinite, produce_atom_v, std::move(m))
        .then([out, value](delivery_report& r) { out->emplace_back(value, r.off.value); },
              [out, value](caf::error&) { out->emplace_back(value, -1); });
    });
    sched->run();
  }

  void answer(int32_t base_sequence) {
    caf::anon_send(broker, tick_atom_v, base_sequence);
    sched->run();
  }

  std::shared_ptr<produce_log> log;
  caf::actor broker;
  producer_actor producer;
  std::shared_ptr<std::vector<std::pair<std::string, int64_t>>> reports
    = std::make_shared<std::vector<std::pair<std::string, int64_t>>>();
};

TEST_F(ProducerWindowTest, AnUnansweredBatchHoldsTheWindowUntilItIsAnswered) {
  for (int i = 0; i < 5; ++i)
    produce("m" + std::to_string(i));
  ASSERT_EQ(log->held.size(), 5u) << "five batches in flight";
  EXPECT_EQ(log->sequences, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // The four later batches are answered; the oldest one's answer is lost.
  for (int32_t s = 1; s <= 4; ++s)
    answer(s);
  EXPECT_EQ(reports->size(), 4u);
  for (int i = 5; i < 10; ++i)
    produce("m" + std::to_string(i));
  // A broker remembering five batches must still hold batch 0 among them
  // when it is retried: no batch goes out past the window while it waits.
  EXPECT_EQ(log->sequences.size(), 5u)
    << "sent past an unanswered batch: its retry would fall out of the broker's "
       "five-batch window (last sequence sent "
    << log->sequences.back() << ")";
  // Its answer comes: the window moves on, the waiting messages go (in one
  // batch or several) from sequence 5.
  answer(0);
  ASSERT_GT(log->sequences.size(), 5u) << "the waiting messages went once batch 0 was answered";
  EXPECT_EQ(log->sequences[5], 5);
  for (int k = 0; k < 20 && !log->held.empty(); ++k)
    answer(log->held.front().base_sequence);
  ASSERT_EQ(reports->size(), 10u);
  for (auto& [value, off] : *reports)
    EXPECT_EQ("m" + std::to_string(off), value) << "each message reported at its offset";
}

TEST_F(ProducerWindowTest, AnAnswerInOrderFreesItsSlotAtOnce) {
  for (int i = 0; i < 5; ++i)
    produce("m" + std::to_string(i));
  ASSERT_EQ(log->held.size(), 5u);
  answer(0);
  EXPECT_EQ(log->held.size(), 4u);
  produce("m5");
  EXPECT_EQ(log->held.size(), 5u) << "the oldest batch's answer freed a slot";
  EXPECT_EQ(log->sequences, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

} // namespace
} // namespace ferry
