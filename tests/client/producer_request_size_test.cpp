// max.request.size bounds the producer's multi-partition requests, as in
// Kafka: the batches ready for one node go in one request up to that many
// bytes, the rest in further requests, and a batch larger than the limit
// still goes, alone. On CAF's deterministic test scheduler, against a fake
// broker that logs every request it gets and answers it at once.

#include "actors/client/producer.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "tests/fake_connection.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry {
namespace {

constexpr int32_t partitions = 20;

/// One request as the broker got it: its batches' partitions and bytes.
struct request_seen {
  std::vector<int32_t> partitions;
  size_t bytes = 0; ///< batch bytes plus topic names, as the producer counts
};

struct request_log {
  std::vector<request_seen> multi;  ///< (produce_atom, vector<produce_request>)
  std::vector<request_seen> single; ///< (produce_atom, produce_request)
  int64_t next_offset = 0;
};

produce_response appended(request_log& log) {
  produce_response x;
  x.base_offset = offset{log.next_offset};
  x.last_offset = offset{log.next_offset};
  ++log.next_offset;
  return x;
}

caf::behavior fake_broker(caf::event_based_actor*, std::shared_ptr<request_log> log) {
  return {
    [](init_pid_atom) { return producer_identity{producer_id{7}, 0}; },
    [](list_atom, topic_atom) {
      topic_metadata t;
      t.name = "t";
      t.config.partitions = partitions;
      return std::vector<topic_metadata>{t};
    },
    [log](produce_atom, produce_request& req) {
      log->single.push_back({{req.partition.value}, req.batch.size() + req.topic.size()});
      return appended(*log);
    },
    [log](produce_atom, std::vector<produce_request>& reqs) {
      request_seen seen;
      std::vector<produce_result> out;
      for (auto& r : reqs) {
        seen.partitions.push_back(r.partition.value);
        seen.bytes += r.batch.size() + r.topic.size();
        produce_result x;
        x.response = appended(*log);
        out.push_back(std::move(x));
      }
      log->multi.push_back(std::move(seen));
      return out;
    },
  };
}

class ProducerRequestSizeTest : public ::testing::Test, protected test::coordinated_client {
protected:
  void SetUp() override {
    start();
    log = std::make_shared<request_log>();
    broker = sys->spawn(fake_broker, log);
    sched->run();
  }

  void TearDown() override { stop({caf::actor_cast<caf::actor>(producer), broker}); }

  void spawn(size_t max_request_size) {
    producer_config pc;
    pc.acks = acks_mode::all;
    pc.linger = std::chrono::milliseconds{0};
    pc.batch_size = 64 * 1024;
    pc.max_request_size = max_request_size;
    pc.route_to_leaders = false;
    auto h = spawn_producer(*sys, pc, conn);
    ASSERT_TRUE(h) << describe(h.error());
    producer = *h;
    sched->run();
    ASSERT_TRUE(*listener);
    caf::anon_send(*listener, connect_atom_v, caf::actor_cast<broker_actor>(broker));
    sched->run();
  }

  /// One produce request to the producer carrying `msgs`, so that all of
  /// them are in batches before any batch goes; returns how many were
  /// acknowledged.
  size_t produce_all(std::vector<client_message> msgs) {
    auto acked = std::make_shared<size_t>(0);
    auto dest = producer;
    sys->spawn([dest, acked, msgs = std::move(msgs)](caf::event_based_actor* self) mutable {
      self->request(dest, caf::infinite, produce_atom_v, std::move(msgs))
        .then(
          [acked](std::vector<delivery_report>& rs) {
            for (auto& r : rs)
              if (r.off.value >= 0)
                ++*acked;
          },
          [](caf::error&) {});
    });
    sched->run();
    return *acked;
  }

  static client_message message(int32_t partition, size_t bytes) {
    client_message m;
    m.topic = "t";
    m.partition = partition;
    m.value = std::string(bytes, static_cast<char>('a' + partition % 26));
    return m;
  }

  std::shared_ptr<request_log> log;
  caf::actor broker;
  producer_actor producer;
};

TEST_F(ProducerRequestSizeTest, BatchesForOneNodeAreSplitAtMaxRequestSize) {
  constexpr size_t limit = 12 * 1024;
  spawn(limit);
  std::vector<client_message> msgs;
  for (int32_t p = 0; p < partitions; ++p)
    msgs.push_back(message(p, 1000));
  EXPECT_EQ(produce_all(std::move(msgs)), static_cast<size_t>(partitions));
  // Twenty batches of ~1.1 KB: more than one request, none past the limit,
  // every partition in exactly one of them.
  ASSERT_GE(log->multi.size(), 2u) << "all batches went in one request";
  std::vector<int> seen(partitions, 0);
  for (auto& r : log->multi) {
    EXPECT_LE(r.bytes, limit) << "a request of " << r.partitions.size() << " batches";
    for (auto p : r.partitions)
      ++seen[p];
  }
  for (auto& r : log->single)
    for (auto p : r.partitions)
      ++seen[p];
  for (int32_t p = 0; p < partitions; ++p)
    EXPECT_EQ(seen[p], 1) << "partition " << p;
}

TEST_F(ProducerRequestSizeTest, UnderTheLimitTheyShareOneRequest) {
  spawn(1u << 20);
  std::vector<client_message> msgs;
  for (int32_t p = 0; p < partitions; ++p)
    msgs.push_back(message(p, 1000));
  EXPECT_EQ(produce_all(std::move(msgs)), static_cast<size_t>(partitions));
  ASSERT_EQ(log->multi.size(), 1u);
  EXPECT_EQ(log->multi.front().partitions.size(), static_cast<size_t>(partitions));
  EXPECT_TRUE(log->single.empty());
}

TEST_F(ProducerRequestSizeTest, ABatchLargerThanTheLimitStillGoesAlone) {
  constexpr size_t limit = 12 * 1024;
  spawn(limit);
  std::vector<client_message> msgs;
  // Partition 0 gets three records of 6 KB (each under the limit): one
  // batch of ~18 KB. The others one record each.
  for (int i = 0; i < 3; ++i)
    msgs.push_back(message(0, 6000));
  for (int32_t p = 1; p < partitions; ++p)
    msgs.push_back(message(p, 1000));
  EXPECT_EQ(produce_all(std::move(msgs)), static_cast<size_t>(partitions + 2));
  for (auto& r : log->multi)
    EXPECT_LE(r.bytes, limit) << "a request of " << r.partitions.size() << " batches";
  bool big_alone = false;
  for (auto& r : log->single)
    if (r.partitions == std::vector<int32_t>{0} && r.bytes > limit)
      big_alone = true;
  EXPECT_TRUE(big_alone) << "the 18 KB batch of partition 0 did not go on its own";
}

} // namespace
} // namespace ferry
