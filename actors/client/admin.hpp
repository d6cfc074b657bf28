#pragma once
// Blocking admin requests to a node: topics, the cluster, groups, DLQs.
// For programs that wait for each answer (ferryctl, the console's worker
// thread, a service creating its topics at start-up); the data path uses
// the producer and consumer actors, never this.
//
// Like Kafka's admin client, a request answered not_leader or
// coordinator_not_available (the node knew no Raft leader or group
// coordinator: an election, a node restarting) is sent again every
// admin_retry_backoff until the timeout runs out; every other error is
// returned at once.
//
//   caf::actor_system sys{cfg};                    // cfg: register_types(cfg)
//   auto broker = ...;                             // connection_actor's connect_atom
//   ferry::admin_client admin{sys, broker, 10s};
//   auto md = admin.create_topic("orders", cfg);   // caf::expected<topic_metadata>

#include "actors/protocol/interfaces.hpp"

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

/// True for the errors an admin request is sent again for.
bool is_retriable_admin_error(const caf::error& err);

/// Pause between such retries.
inline constexpr std::chrono::milliseconds admin_retry_backoff{250};

/// Blocking request-reply to one node's broker actor. Not thread-safe: one
/// admin_client per thread. @pre `broker` is a live handle (see
/// client_connection.hpp); `sys` outlives this object.
class admin_client {
public:
  admin_client(caf::actor_system& sys, broker_actor broker,
               std::chrono::milliseconds timeout);

  /// The timeout of each request and the budget for its retries.
  std::chrono::milliseconds timeout() const {
    return timeout_;
  }
  const broker_actor& broker() const {
    return broker_;
  }

  /// Any broker request answered with a Result, retried as above.
  template <class Result, class... Ts>
  caf::expected<Result> request(const Ts&... xs) {
    return request_within<Result>(timeout_, xs...);
  }

  /// The same with another timeout for each attempt (`caf::infinite` for a
  /// request that answers when its work is done, such as a paced redrive);
  /// retries still stop after timeout().
  template <class Result, class Timeout, class... Ts>
  caf::expected<Result> request_within(Timeout each, const Ts&... xs) {
    std::optional<Result> out;
    auto err = with_retries([&] {
      caf::error e;
      self_->request(broker_, each, xs...)
        .receive([&](Result& r) { out = std::move(r); },
                 [&](caf::error& x) { e = std::move(x); });
      return e;
    });
    if (err)
      return err;
    return std::move(*out);
  }

  /// A broker request with no result (delete group, commit), retried as above.
  template <class... Ts>
  caf::error request_void(const Ts&... xs) {
    return with_retries([&] {
      caf::error e;
      self_->request(broker_, timeout_, xs...)
        .receive([] {}, [&](caf::error& x) { e = std::move(x); });
      return e;
    });
  }

  // -- the common requests, by name ---------------------------------------------

  caf::expected<topic_metadata> create_topic(const std::string& name,
                                             const topic_config& cfg);
  caf::expected<topic_metadata> delete_topic(const std::string& name);
  caf::expected<std::vector<topic_metadata>> list_topics();
  caf::expected<topic_description> describe_topic(const std::string& name);
  caf::expected<cluster_description> describe_cluster();
  caf::expected<std::vector<group_description>> list_groups();
  caf::expected<group_description> describe_group(const std::string& group);
  caf::expected<std::vector<dlq_info>> list_dlqs();

private:
  /// Runs `attempt` (one request; returns its error) until it succeeds,
  /// fails with an error is_retriable_admin_error() does not cover, or the
  /// timeout would run out; returns the last error.
  template <class Attempt>
  caf::error with_retries(Attempt attempt) {
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      auto err = attempt();
      if (!err || !is_retriable_admin_error(err)
          || std::chrono::steady_clock::now() + admin_retry_backoff >= deadline)
        return err;
      pause();
    }
  }

  void pause();

  broker_actor broker_;
  std::chrono::milliseconds timeout_;
  caf::scoped_actor self_;
};

} // namespace ferry
