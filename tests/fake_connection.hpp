#pragma once
// A stand-in for client_connection in deterministic client tests (CAF's
// test coordinator): it never connects by itself; it remembers the
// listener a client subscribes, so a test hands the client broker handles
// (connect, lose, reconnect) by sending (connect_atom, broker) to it.

#include "actors/client/client_connection.hpp"
#include "broker/error.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <initializer_list>
#include <memory>

namespace ferry::test {

struct fake_conn_state {
  std::shared_ptr<connection_listener> listener;
};

inline connection_actor::behavior_type
fake_connection(connection_actor::stateful_pointer<fake_conn_state> self,
                std::shared_ptr<connection_listener> slot) {
  self->state.listener = slot;
  return {
    [](connect_atom) -> caf::result<broker_actor> {
      return make_error(ec::request_timed_out, "fake");
    },
    [self](subscribe_atom, connection_listener& l) { *self->state.listener = l; },
    [](connect_atom, uint64_t, broker_actor&) {},
    [](connect_atom, uint64_t, caf::error&) {},
    [](tick_atom) {},
    [](session_atom, uint64_t) {},
    [self](stop_atom) { self->quit(); },
  };
}

/// A client library test on CAF's deterministic scheduler: an actor system
/// with the testing policy and Ferry's types, and a fake connection whose
/// listener the test hands broker handles.
struct coordinated_client {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<connection_listener> listener;
  connection_actor conn;

  void start() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    register_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    listener = std::make_shared<connection_listener>();
    conn = sys->spawn(fake_connection, listener);
    sched->run();
  }

  /// Kills `actors` (null handles are skipped) and the connection, runs what
  /// is left and ends the system.
  void stop(std::initializer_list<caf::actor> actors) {
    for (auto& a : actors)
      if (a)
        caf::anon_send_exit(a, caf::exit_reason::kill);
    caf::anon_send_exit(conn, caf::exit_reason::kill);
    sched->run();
    sys.reset();
  }
};

} // namespace ferry::test
