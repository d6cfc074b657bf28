#pragma once
// The client library's link to one broker: a connection actor that holds the
// broker_actor handle for a `host:port`, reconnects with backoff when the
// broker goes away (CAF never reconnects by itself), and tells its listeners
// (producers, consumers, tools) each time the handle changes.
//
// Lifecycle: spawn_connection() starts connecting at once. Connect attempts
// run `middleman().remote_actor` on a helper thread, because it blocks (for
// the TCP connect timeout during a network partition); the actor itself
// never blocks. The connection stops on (stop_atom) or an exit message;
// client actors that spawned their own connection stop it when they end.

#include "actors/interfaces.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

/// Where a client finds its broker and how hard it tries to reach it.
struct connection_config {
  std::string host = "127.0.0.1";
  uint16_t port = 9092;
  /// How long a (connect_atom) request waits for a connection before it
  /// fails with request_timed_out.
  std::chrono::milliseconds connect_wait{10000};
  /// Delay before the first reconnect attempt; doubles up to backoff_max.
  std::chrono::milliseconds backoff_min{100};
  std::chrono::milliseconds backoff_max{5000};
};

/// Prepares an actor system config for a Ferry client: registers Ferry's
/// types (ferry::register_types), loads the middleman, and turns on
/// connection heartbeats (1 s) with a 5 s connection timeout. The heartbeats
/// are required: ferryd drops connections that stay silent for 3 s, and
/// without a timeout a client never notices a broker behind a network
/// partition.
void configure_client(caf::actor_system_config& cfg);

/// Parses "HOST:PORT" or "HOST" (port 9092); "[::1]:9092" for IPv6.
/// invalid_config names what is wrong.
caf::expected<connection_config> parse_broker_address(std::string_view addr);

/// The default broker address: $FERRY_BROKER or 127.0.0.1:9092.
std::string default_broker_address();

/// Whatever listens to a connection: receives (connect_atom, broker_actor)
/// once connected and after every change; a null handle means "lost, the
/// connection is reconnecting". Producer and consumer actors implement it.
using connection_listener = caf::typed_actor<
  caf::reacts_to<connect_atom, broker_actor>>;

/// One connection to one broker, shared by the client actors of a process.
using connection_actor = caf::typed_actor<
  /// The current broker handle. While disconnected the request waits up to
  /// connect_wait, then fails with request_timed_out naming the last error.
  caf::replies_to<connect_atom>::with<broker_actor>,
  /// Adds a listener; it hears the current handle at once if connected.
  caf::reacts_to<subscribe_atom, connection_listener>,
  /// Internal: connect attempt `n` succeeded (from the helper thread).
  caf::reacts_to<connect_atom, uint64_t, broker_actor>,
  /// Internal: connect attempt `n` failed (from the helper thread).
  caf::reacts_to<connect_atom, uint64_t, caf::error>,
  /// Internal: backoff expired or a waiter's deadline passed.
  caf::reacts_to<tick_atom>,
  /// Stops the connection actor.
  caf::reacts_to<stop_atom>>;

/// Spawns a connection actor and starts connecting.
connection_actor spawn_connection(caf::actor_system& sys, connection_config cfg);

/// True for errors a client should retry after a backoff: ferry's
/// not_leader, throttled, request_timed_out, not_enough_replicas,
/// coordinator_not_available, and CAF's transport errors (timeouts, a
/// receiver that went down, a lost or unreachable node).
bool is_retriable(const caf::error& err);

/// A one-line description for users and logs: describe() for ferry errors,
/// "request_timeout" style names for CAF's own.
std::string error_text(const caf::error& err);

} // namespace ferry
