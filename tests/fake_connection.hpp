#pragma once
// A stand-in for client_connection in deterministic client tests (CAF's
// test coordinator): it never connects by itself; it remembers the
// listener a client subscribes, so a test hands the client broker handles
// (connect, lose, reconnect) by sending (connect_atom, broker) to it.

#include "actors/client/client_connection.hpp"
#include "broker/error.hpp"

#include <caf/all.hpp>

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

} // namespace ferry::test
