// The queue consumer (client library) on CAF's deterministic test scheduler:
// a fake connection actor hands it broker handles (connect, lose, reconnect)
// and fake brokers record what reaches them, so group setup (create, alter
// on a config clash), parked receives and acks while disconnected, the
// reconnect and the leave on stop are checked without a network.

#include "actors/client/queue_consumer.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "tests/fake_connection.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace ferry {
namespace {

/// What a fake broker saw and how it answers.
struct broker_log {
  std::vector<std::string> calls; ///< "create", "alter", "receive", "ack", "leave"
  std::vector<queue_receive_request> receives;
  std::vector<queue_ack_request> acks;
  std::optional<queue_group_config> stored; ///< the group's config
  std::string left_member;
};

caf::behavior fake_broker(caf::event_based_actor*, std::shared_ptr<broker_log> log) {
  return {
    [log](create_atom, group_atom, std::string&,
          queue_group_config& qc) -> caf::result<queue_group_config> {
      log->calls.push_back("create");
      if (log->stored && !(*log->stored == qc))
        return make_error(ec::invalid_request, "exists with another config");
      log->stored = qc;
      return qc;
    },
    [log](alter_atom, group_atom, std::string&,
          queue_group_config& qc) -> queue_group_config {
      log->calls.push_back("alter");
      log->stored = qc;
      return qc;
    },
    [log](receive_atom, queue_receive_request& req) {
      log->calls.push_back("receive");
      log->receives.push_back(req);
      std::vector<leased_message> out(1);
      out[0].message.topic = receive_topics(req).back();
      out[0].message.off = offset{7};
      out[0].lease_id = 99;
      return out;
    },
    [log](ack_atom, queue_ack_request& req) {
      log->calls.push_back("ack");
      log->acks.push_back(req);
      return queue_ack_response{};
    },
    [log](leave_atom, queue_atom, std::string&, std::string& member) {
      log->calls.push_back("leave");
      log->left_member = member;
      return int64_t{3};
    },
  };
}

using test::fake_connection;

template <class T>
struct reply {
  bool done = false;
  std::optional<T> value;
  caf::error err;
};

class QueueConsumerTest : public ::testing::Test {
protected:
  void SetUp() override {
    cfg.set("scheduler.policy", caf::atom("testing"));
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    listener = std::make_shared<connection_listener>();
    conn = sys->spawn(fake_connection, listener);
    sched->run();
  }

  void TearDown() override {
    if (consumer)
      caf::anon_send_exit(consumer, caf::exit_reason::kill);
    caf::anon_send_exit(conn, caf::exit_reason::kill);
    for (auto& b : brokers)
      caf::anon_send_exit(b, caf::exit_reason::kill);
    sched->run();
    sys.reset();
  }

  broker_actor new_broker(std::shared_ptr<broker_log> log) {
    auto b = caf::actor_cast<broker_actor>(sys->spawn(fake_broker, log));
    brokers.push_back(caf::actor_cast<caf::actor>(b));
    return b;
  }

  void connect(broker_actor b) {
    ASSERT_TRUE(*listener);
    caf::anon_send(*listener, connect_atom_v, std::move(b));
    sched->run();
  }

  void advance(caf::timespan d) {
    while (d.count() > 0) {
      auto step = std::min<caf::timespan>(d, 50ms);
      sched->advance_time(step);
      sched->run();
      d -= step;
    }
  }

  template <class T, class... Ts>
  std::shared_ptr<reply<T>> ask(Ts... xs) {
    auto r = std::make_shared<reply<T>>();
    auto dest = consumer;
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

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<connection_listener> listener;
  connection_actor conn;
  std::vector<caf::actor> brokers;
  queue_consumer_actor consumer;
};

TEST_F(QueueConsumerTest, SetsUpTheGroupParksWhileDisconnectedAndReconnects) {
  queue_consumer_config c;
  c.group = "g";
  c.topic = "t";
  c.member_id = "m1";
  c.visibility = 4000ms;
  c.request_timeout = 2000ms;
  queue_group_config qc;
  qc.max_attempts = 2;
  c.group_config = qc;
  c.alter_existing = true;
  auto h = spawn_queue_consumer(*sys, c, conn);
  ASSERT_TRUE(h) << describe(h.error());
  consumer = *h;
  sched->run();
  // Not connected: a receive waits, then answers empty at its deadline.
  auto early = ask<std::vector<leased_message>>(receive_atom_v, int32_t{5}, int64_t{300});
  EXPECT_FALSE(early->done);
  advance(350ms);
  ASSERT_TRUE(early->done);
  ASSERT_TRUE(early->value) << describe(early->err);
  EXPECT_TRUE(early->value->empty());
  // A parked receive goes out once connected and the group is set up; the
  // group exists with another config, so it is altered.
  auto parked = ask<std::vector<leased_message>>(receive_atom_v, int32_t{5}, int64_t{1000});
  auto log1 = std::make_shared<broker_log>();
  log1->stored = queue_group_config{};
  connect(new_broker(log1));
  ASSERT_TRUE(parked->done);
  ASSERT_TRUE(parked->value) << describe(parked->err);
  ASSERT_EQ(parked->value->size(), 1u);
  EXPECT_EQ(log1->calls, (std::vector<std::string>{"create", "alter", "receive"}));
  EXPECT_EQ(*log1->stored, qc);
  ASSERT_EQ(log1->receives.size(), 1u);
  EXPECT_EQ(log1->receives[0].group, "g");
  EXPECT_EQ(log1->receives[0].topic, "t");
  EXPECT_EQ(log1->receives[0].member_id, "m1");
  EXPECT_EQ(log1->receives[0].max_records, 5);
  EXPECT_EQ(log1->receives[0].visibility_ms, 4000);
  // The broker goes away: an ack waits for the next connection...
  connect(broker_actor{});
  auto ack = ask<queue_ack_response>(
    ack_atom_v, make_ack((*parked->value)[0], queue_ack_kind::nack, "boom", 250));
  EXPECT_FALSE(ack->done);
  advance(500ms);
  EXPECT_FALSE(ack->done);
  // ...and goes to the new broker, which gets the group set up first.
  auto log2 = std::make_shared<broker_log>();
  connect(new_broker(log2));
  ASSERT_TRUE(ack->done);
  EXPECT_FALSE(ack->err) << describe(ack->err);
  EXPECT_EQ(log2->calls, (std::vector<std::string>{"create", "ack"}));
  ASSERT_EQ(log2->acks.size(), 1u);
  auto& a = log2->acks[0];
  EXPECT_EQ(a.group, "g");
  EXPECT_EQ(a.member_id, "m1");
  EXPECT_EQ(a.topic, "t");
  EXPECT_EQ(a.off, offset{7});
  EXPECT_EQ(a.lease_id, 99u);
  EXPECT_EQ(a.kind, queue_ack_kind::nack);
  EXPECT_EQ(a.delay_ms, 250);
  EXPECT_EQ(a.error, "boom");
  // An ack without a connection for longer than request_timeout fails.
  connect(broker_actor{});
  auto lost = ask<queue_ack_response>(
    ack_atom_v, make_ack((*parked->value)[0], queue_ack_kind::ack));
  advance(2100ms);
  ASSERT_TRUE(lost->done);
  EXPECT_TRUE(is(lost->err, ec::request_timed_out)) << describe(lost->err);
  // Stop leaves through the current broker.
  auto log3 = std::make_shared<broker_log>();
  connect(new_broker(log3));
  auto stopped = ask<int64_t>(stop_atom_v);
  ASSERT_TRUE(stopped->done);
  ASSERT_TRUE(stopped->value) << describe(stopped->err);
  EXPECT_EQ(*stopped->value, 3);
  EXPECT_EQ(log3->left_member, "m1");
  consumer = nullptr;
}

TEST_F(QueueConsumerTest, WithoutAlterExistingAConfigClashFailsReceives) {
  queue_consumer_config c;
  c.group = "g";
  c.topic = "t";
  queue_group_config qc;
  qc.max_attempts = 9;
  c.group_config = qc;
  auto h = spawn_queue_consumer(*sys, c, conn);
  ASSERT_TRUE(h);
  consumer = *h;
  sched->run();
  auto log = std::make_shared<broker_log>();
  log->stored = queue_group_config{};
  connect(new_broker(log));
  auto r = ask<std::vector<leased_message>>(receive_atom_v, int32_t{5}, int64_t{100});
  ASSERT_TRUE(r->done);
  EXPECT_TRUE(is(r->err, ec::invalid_request)) << describe(r->err);
  EXPECT_EQ(log->calls, (std::vector<std::string>{"create"}));
  // A generated member id; bad arguments are refused.
  auto bad = ask<std::vector<leased_message>>(receive_atom_v, int32_t{0}, int64_t{0});
  EXPECT_TRUE(is(bad->err, ec::invalid_request)) << describe(bad->err);
  queue_consumer_config empty;
  EXPECT_TRUE(is(validate(empty), ec::invalid_config));
}

TEST_F(QueueConsumerTest, ReadsSeveralTopicsAndAcksEachRecordOnItsTopic) {
  queue_consumer_config c;
  c.group = "g";
  c.topics = {"orders", "refunds"};
  c.member_id = "m1";
  auto h = spawn_queue_consumer(*sys, c, conn);
  ASSERT_TRUE(h) << describe(h.error());
  consumer = *h;
  sched->run();
  auto log = std::make_shared<broker_log>();
  connect(new_broker(log));
  auto r = ask<std::vector<leased_message>>(receive_atom_v, int32_t{5}, int64_t{0});
  ASSERT_TRUE(r->done && r->value) << describe(r->err);
  ASSERT_EQ(log->receives.size(), 1u);
  EXPECT_EQ(receive_topics(log->receives[0]),
            (std::vector<std::string>{"orders", "refunds"}));
  ASSERT_EQ(r->value->size(), 1u);
  EXPECT_EQ((*r->value)[0].message.topic, "refunds");
  auto a = ask<queue_ack_response>(ack_atom_v,
                                   make_ack((*r->value)[0], queue_ack_kind::ack));
  ASSERT_TRUE(a->done);
  EXPECT_FALSE(a->err) << describe(a->err);
  ASSERT_EQ(log->acks.size(), 1u);
  EXPECT_EQ(log->acks[0].topic, "refunds");
  // An ack that names no topic is ambiguous here.
  queue_ack_request bare;
  bare.off = offset{7};
  bare.lease_id = 99;
  auto b = ask<queue_ack_response>(ack_atom_v, bare);
  ASSERT_TRUE(b->done);
  EXPECT_TRUE(is(b->err, ec::invalid_request)) << describe(b->err);
  EXPECT_EQ(log->acks.size(), 1u);
  // Config checks: an empty name among the topics, or too many topics.
  queue_consumer_config bad = c;
  bad.topics.push_back("");
  EXPECT_TRUE(is(validate(bad), ec::invalid_config));
  bad.topics.assign(max_receive_topics + 1, "x");
  EXPECT_TRUE(is(validate(bad), ec::invalid_config));
}

} // namespace
} // namespace ferry
