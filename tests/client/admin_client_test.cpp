// The client library's admin_client against fake brokers in one process:
// which errors it sends a request again for (not_leader and
// coordinator_not_available, as Kafka's admin client), which it returns at
// once, and that retries end when the timeout runs out. Every ferryctl
// command (topic, group, dlq, work) sends its broker requests through it.

#include "actors/client/admin.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"

#include <caf/all.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

using namespace std::chrono_literals;

namespace ferry {
namespace {

/// Answers each request with the next error of `script` (then successes)
/// and counts the requests that reached it.
struct script_state {
  std::vector<ec> errors; ///< what the first requests get
  std::atomic<int> calls{0};

  caf::error next() {
    auto i = static_cast<size_t>(calls++);
    if (i < errors.size())
      return make_error(errors[i], "scripted");
    return caf::error{};
  }
};

caf::behavior scripted_broker(caf::event_based_actor*,
                              std::shared_ptr<script_state> st) {
  return {
    [st](list_atom, dlq_atom) -> caf::result<std::vector<dlq_info>> {
      if (auto err = st->next())
        return err;
      std::vector<dlq_info> out(1);
      out[0].topic = "jobs.workers.dlq";
      return out;
    },
    [st](delete_atom, group_atom, std::string&) -> caf::result<void> {
      if (auto err = st->next())
        return err;
      return caf::unit;
    },
  };
}

struct fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<script_state> st = std::make_shared<script_state>();

  void SetUp() override {
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  admin_client make(std::vector<ec> errors, std::chrono::milliseconds timeout) {
    st->errors = std::move(errors);
    auto hdl = sys->spawn(scripted_broker, st);
    return admin_client{*sys, caf::actor_cast<broker_actor>(hdl), timeout};
  }
};

using AdminClient = fixture;

TEST_F(AdminClient, SendsAgainWhileTheNodeKnowsNoLeaderOrCoordinator) {
  auto admin = make({ec::not_leader, ec::coordinator_not_available, ec::not_leader}, 10s);
  auto dlqs = admin.list_dlqs();
  ASSERT_TRUE(dlqs) << describe(dlqs.error());
  ASSERT_EQ(dlqs->size(), 1u);
  EXPECT_EQ((*dlqs)[0].topic, "jobs.workers.dlq");
  EXPECT_EQ(st->calls, 4);
}

TEST_F(AdminClient, RequestsWithoutAnswerAreSentAgainToo) {
  auto admin = make({ec::coordinator_not_available}, 10s);
  EXPECT_FALSE(admin.request_void(delete_atom_v, group_atom_v, std::string{"g"}));
  EXPECT_EQ(st->calls, 2);
}

TEST_F(AdminClient, OtherErrorsComeBackAtOnce) {
  auto admin = make({ec::unknown_topic, ec::not_leader}, 10s);
  auto dlqs = admin.list_dlqs();
  ASSERT_FALSE(dlqs);
  EXPECT_EQ(code_of(dlqs.error()), ec::unknown_topic);
  EXPECT_EQ(st->calls, 1);
}

TEST_F(AdminClient, RetriesEndWithTheLastErrorWhenTheTimeoutRunsOut) {
  // A node that never learns a leader: about timeout / backoff attempts,
  // then not_leader (never a hang, never an empty success).
  auto admin = make(std::vector<ec>(100, ec::not_leader), 1s);
  auto dlqs = admin.list_dlqs();
  ASSERT_FALSE(dlqs);
  EXPECT_EQ(code_of(dlqs.error()), ec::not_leader);
  EXPECT_GE(st->calls, 2);
  EXPECT_LT(st->calls, 100);
}

TEST(AdminRetriableErrors, AreExactlyNotLeaderAndCoordinatorNotAvailable) {
  EXPECT_TRUE(is_retriable_admin_error(make_error(ec::not_leader, "")));
  EXPECT_TRUE(is_retriable_admin_error(make_error(ec::coordinator_not_available, "")));
  EXPECT_FALSE(is_retriable_admin_error(make_error(ec::unknown_topic, "")));
  EXPECT_FALSE(is_retriable_admin_error(make_error(ec::request_timed_out, "")));
  EXPECT_FALSE(is_retriable_admin_error(caf::error{}));
}

} // namespace
} // namespace ferry
