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
//
// The same holds whenever the producer renumbers: a batch that may have been
// written keeps its producer id and sequence, whether a later batch was
// refused (the chaos suite's seed 803) or the producer took a new id.

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
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry {
namespace {

struct held_produce {
  int32_t base_sequence = -1;
  int32_t records = 0;
  std::string value; ///< of its first record
  caf::typed_response_promise<produce_response> rp;
};

/// One produce as the broker received it.
struct sent_batch {
  int64_t producer_id = -1;
  int32_t base_sequence = -1;
  std::string value; ///< of its first record
};

struct produce_log {
  std::vector<held_produce> held; ///< not answered yet, in arrival order
  std::vector<int32_t> sequences; ///< base sequence of every produce received
  std::vector<sent_batch> sent;   ///< every produce received
  int64_t next_offset = 0;
  int64_t next_pid = 7;
};

/// Answers the held produce `i` as appended at `off`, or with `err`.
void answer_held(produce_log& log, std::vector<held_produce>::iterator i, int64_t off,
                 const caf::error& err = {}) {
  auto rp = i->rp;
  produce_response r;
  r.base_offset = offset{off};
  r.last_offset = offset{off + i->records - 1};
  log.held.erase(i);
  if (err)
    rp.deliver(err);
  else
    rp.deliver(r);
}

/// One topic "t" with one partition. Produces are held until
/// (tick_atom, base_sequence) answers the held one with that base sequence.
caf::behavior fake_broker(caf::event_based_actor* self, std::shared_ptr<produce_log> log) {
  return {
    [log](init_pid_atom) { return producer_identity{producer_id{log->next_pid++}, 0}; },
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
      auto b = decode_batch(req.batch);
      std::string value;
      if (b && !b->records.empty())
        value = b->records.front().value.value_or("");
      log->sequences.push_back(h->base_sequence);
      log->sent.push_back(sent_batch{h->producer_id, h->base_sequence, value});
      log->held.push_back(held_produce{h->base_sequence, h->last_offset_delta + 1, value, rp});
      return rp;
    },
    // Answers the oldest held produce of the message `value`: appended at
    // `off` when err is none, else refused (or failed) with err.
    [log](tick_atom, const std::string& value, int64_t off, const caf::error& err) {
      auto i = std::find_if(log->held.begin(), log->held.end(),
                            [&](const held_produce& h) { return h.value == value; });
      if (i != log->held.end())
        answer_held(*log, i, off, err);
    },
    [log](tick_atom, int32_t base_sequence) {
      auto i = std::find_if(log->held.begin(), log->held.end(), [&](const held_produce& h) {
        return h.base_sequence == base_sequence;
      });
      if (i == log->held.end())
        return;
      // Offsets as a log would give them in sequence order: base sequence
      // n holds offset n (one record per batch in these tests).
      answer_held(*log, i, i->base_sequence);
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
    pc.retry_backoff = std::chrono::milliseconds{1};
    pc.retry_backoff_max = std::chrono::milliseconds{1};
    configure(pc);
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

  /// A fixture's changes to the producer's configuration.
  virtual void configure(producer_config&) {}

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

  /// Answers the held produce of message `value`: written at `off`, or
  /// failed with `err`.
  void answer(const std::string& value, int64_t off, caf::error err = {}) {
    caf::anon_send(broker, tick_atom_v, value, off, std::move(err));
    sched->run();
  }

  /// Lets housekeeping run (backoffs are real time, its timer virtual).
  void housekeep() {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    sched->trigger_timeouts();
    sched->run();
  }

  /// The (producer id, base sequence) of every produce of `value`.
  std::vector<std::pair<int64_t, int32_t>> sends_of(const std::string& value) const {
    std::vector<std::pair<int64_t, int32_t>> out;
    for (auto& b : log->sent)
      if (b.value == value)
        out.emplace_back(b.producer_id, b.base_sequence);
    return out;
  }

  int64_t report_of(const std::string& value) const {
    for (auto& [v, off] : *reports)
      if (v == value)
        return off;
    return -2; // no report yet
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

TEST_F(ProducerWindowTest, ABatchRefusedForGoodLeavesTheBatchesBeforeItAlone) {
  // m0 is appended and waits for its replicas (acks=all); m1 is refused at
  // once, before anything of it was written (here: too large for the
  // topic; in seed 803 the leader's disk was full).
  produce("m0");
  produce("m1");
  ASSERT_EQ(log->held.size(), 2u);
  answer("m1", 0, make_error(ec::message_too_large, "refused"));
  EXPECT_EQ(report_of("m1"), -1) << "m1 is reported failed";
  produce("m2");
  // m0 may be in the log already: sent again with another sequence, the
  // broker would take it as new and write it twice.
  EXPECT_EQ(sends_of("m0"), (std::vector<std::pair<int64_t, int32_t>>{{7, 0}}))
    << "m0 was sent again renumbered while its answer was still coming";
  // m2 closes the gap m1 left.
  EXPECT_EQ(sends_of("m2"), (std::vector<std::pair<int64_t, int32_t>>{{7, 1}}));
  answer("m0", 0);
  answer("m2", 1);
  EXPECT_EQ(report_of("m0"), 0);
  EXPECT_EQ(report_of("m2"), 1);
}

TEST_F(ProducerWindowTest, BatchesBehindARefusedOneAreRenumberedToCloseTheGap) {
  produce("m0");
  produce("m1");
  produce("m2");
  ASSERT_EQ(log->held.size(), 3u);
  // m0 is refused before anything was written: m1 and m2 were numbered
  // past it, are refused for the gap, and go again from sequence 0.
  answer("m0", 0, make_error(ec::message_too_large, "refused"));
  EXPECT_EQ(report_of("m0"), -1);
  answer("m1", 0, make_error(ec::out_of_order_sequence, "gap"));
  answer("m2", 0, make_error(ec::out_of_order_sequence, "gap"));
  housekeep();
  EXPECT_EQ(sends_of("m1").back(), (std::pair<int64_t, int32_t>{7, 0}));
  EXPECT_EQ(sends_of("m2").back(), (std::pair<int64_t, int32_t>{7, 1}));
  answer("m1", 0);
  answer("m2", 1);
  EXPECT_EQ(report_of("m1"), 0);
  EXPECT_EQ(report_of("m2"), 1);
}

TEST_F(ProducerWindowTest, ABatchThatMayBeWrittenKeepsItsProducerIdAcrossANewOne) {
  produce("m0");
  produce("m1");
  ASSERT_EQ(log->held.size(), 2u);
  // The broker lost producer 7 for m1 (refused, so not written): the
  // producer takes a new id. m0's answer is still coming, and m0 may be in
  // the log: it keeps (7, 0), and m1 waits for it.
  answer("m1", 0, make_error(ec::unknown_producer_id, "lost"));
  // m0's first send is answered as failed without a word on whether it
  // was written (the leader stepped down after the append).
  answer("m0", 0, make_error(ec::not_leader, "stepped down"));
  housekeep();
  housekeep();
  ASSERT_GE(log->next_pid, 9) << "no new producer id was taken";
  for (auto& [pid, seq] : sends_of("m0"))
    EXPECT_EQ(std::make_pair(pid, seq), (std::pair<int64_t, int32_t>{7, 0}))
      << "m0 went under another producer id or sequence: written twice if its first send "
         "landed";
  EXPECT_EQ(sends_of("m1").size(), 1u) << "m1 went before m0 was answered: out of order";
  // m0 is answered (deduplicated or appended): m1 goes under the new id.
  answer("m0", 0);
  EXPECT_EQ(report_of("m0"), 0);
  ASSERT_EQ(sends_of("m1").size(), 2u);
  EXPECT_EQ(sends_of("m1").back(), (std::pair<int64_t, int32_t>{8, 0}));
  answer("m1", 1);
  EXPECT_EQ(report_of("m1"), 1);
}

TEST_F(ProducerWindowTest, AFullDiskIsRetriedUnderTheSameSequence) {
  produce("m0");
  answer("m0", 0, make_error(ec::disk_full, "No space left on device"));
  EXPECT_EQ(report_of("m0"), -2) << "a full disk failed the message at once";
  housekeep();
  EXPECT_EQ(sends_of("m0"), (std::vector<std::pair<int64_t, int32_t>>{{7, 0}, {7, 0}}));
  answer("m0", 0);
  EXPECT_EQ(report_of("m0"), 0);
}

// acks=0 on the same broker, which holds every produce until the test
// answers it: the producer reports a send at once (no offset), but the
// batch keeps its request slot, its buffer memory and flush() until the
// broker took it. Sent as a message nobody answered, a producer faster
// than its link queued everything in its connection's send buffer and lost
// what was still there when its process ended after flush().
class ProducerAcksZeroTest : public ProducerWindowTest {
protected:
  void configure(producer_config& pc) override {
    pc.acks = acks_mode::none;
    pc.idempotence = false;
  }

  /// Asks the producer to flush; the answer lands in the result when it
  /// comes.
  std::shared_ptr<std::optional<bool>> flush() {
    auto out = std::make_shared<std::optional<bool>>();
    auto dest = producer;
    sys->spawn([dest, out](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, flush_atom_v)
        .then([out](bool ok) { *out = ok; }, [out](caf::error&) { *out = false; });
    });
    sched->run();
    return out;
  }
};

TEST_F(ProducerAcksZeroTest, ASendIsReportedAtOnceAndHoldsItsSlotUntilTheBrokerTookIt) {
  for (int i = 0; i < 5; ++i)
    produce("m" + std::to_string(i));
  ASSERT_EQ(log->held.size(), 5u) << "five batches in flight";
  ASSERT_EQ(reports->size(), 5u) << "acks=0 reports a message when its batch goes out";
  for (auto& [value, off] : *reports)
    EXPECT_EQ(off, -1) << value << ": acks=0 reports no offset";
  produce("m5");
  EXPECT_EQ(log->sent.size(), 5u)
    << "a sixth batch went while five were not taken by the broker: no backpressure";
  EXPECT_EQ(report_of("m5"), -2) << "reported before it went out";
  answer("m0", 0);
  ASSERT_EQ(log->sent.size(), 6u) << "the answer freed a slot";
  EXPECT_EQ(log->sent.back().value, "m5");
  EXPECT_EQ(report_of("m5"), -1);
}

TEST_F(ProducerAcksZeroTest, AFailedSendIsNotRetriedAndFlushWaitsForTheBroker) {
  produce("m0");
  produce("m1");
  ASSERT_EQ(log->held.size(), 2u);
  EXPECT_EQ(report_of("m0"), -1);
  EXPECT_EQ(report_of("m1"), -1);
  auto flushed = flush();
  EXPECT_FALSE(flushed->has_value()) << "flush() answered before the broker took the batches";
  // An error acks=all retries (see AFullDiskIsRetriedUnderTheSameSequence):
  // acks=0 sends once.
  answer("m0", 0, make_error(ec::disk_full, "No space left on device"));
  housekeep();
  housekeep();
  EXPECT_EQ(sends_of("m0").size(), 1u) << "acks=0 sent a batch again";
  EXPECT_FALSE(flushed->has_value()) << "flush() answered before the broker took m1";
  answer("m1", 1);
  ASSERT_TRUE(flushed->has_value()) << "flush() still waits with nothing in flight";
  EXPECT_TRUE(**flushed);
  EXPECT_TRUE(log->held.empty());
}

} // namespace
} // namespace ferry
