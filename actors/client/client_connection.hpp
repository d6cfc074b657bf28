#pragma once
// The client library's link to the cluster: a connection actor that holds the
// broker_actor handle of one broker out of a bootstrap list of `host:port`
// endpoints, reconnects with backoff when the broker goes away (CAF never
// reconnects by itself), and tells its listeners (producers, consumers,
// tools) each time the handle changes.
//
// Lifecycle: spawn_connection() starts connecting at once. Connect attempts
// run `middleman().remote_actor` on a helper thread, because it blocks (for
// the TCP connect timeout during a network partition); the actor itself
// never blocks. The connection stops on (stop_atom) or an exit message;
// client actors that spawned their own connection stop it when they end.
//
// Several endpoints (bootstrap.servers style, "h1:p1,h2:p2,h3:p3"): the
// first attempt goes to the first endpoint. A failed attempt moves on to the
// next endpoint at once; only when every endpoint of a round has failed does
// the connection wait, with the backoff applied per full round (backoff_min,
// doubling up to backoff_max; reset by a successful connect). A lost
// connection moves on to the next endpoint too, and the endpoint that was
// lost counts as the first one of the new round, so a single endpoint waits
// backoff_min before it is tried again, as before. A connect attempt to a
// host that drops packets blocks its helper thread for the OS connect
// timeout; the next endpoint is tried only after that (waiting requests
// still fail after connect_wait).

#include "actors/protocol/interfaces.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// One broker's CAF endpoint.
struct broker_endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 9092;

  friend bool operator==(const broker_endpoint&, const broker_endpoint&) = default;
};

/// "HOST:PORT", with brackets around an IPv6 host ("[::1]:9092").
std::string to_string(const broker_endpoint& ep);

/// Where a client finds its brokers and how hard it tries to reach them.
struct connection_config {
  /// The bootstrap list, tried in order starting with the first (see the
  /// top of this file). When empty, host:port is the only endpoint.
  std::vector<broker_endpoint> endpoints;
  /// The first endpoint, kept for callers that know of one broker only:
  /// used when `endpoints` is empty; parse_broker_address sets it to
  /// endpoints.front().
  std::string host = "127.0.0.1";
  uint16_t port = 9092;
  /// How long a (connect_atom) request waits for a connection before it
  /// fails with request_timed_out.
  std::chrono::milliseconds connect_wait{10000};
  /// Delay before the first reconnect attempt; doubles up to backoff_max.
  std::chrono::milliseconds backoff_min{100};
  std::chrono::milliseconds backoff_max{5000};

  /// The endpoints a connection tries: `endpoints`, or {host:port}.
  std::vector<broker_endpoint> targets() const;
};

/// Prepares an actor system config for a Ferry client: registers Ferry's
/// types (ferry::register_types), loads the middleman, and turns on
/// connection heartbeats (1 s) with a 5 s connection timeout. The heartbeats
/// are required: ferryd drops connections that stay silent for 3 s, and
/// without a timeout a client never notices a broker behind a network
/// partition.
void configure_client(caf::actor_system_config& cfg);

/// Parses "HOST:PORT" or "HOST" (port 9092); "[::1]:9092" for IPv6; or a
/// comma-separated list of those, "h1:p1,h2:p2,h3:p3" (blanks around an
/// element are ignored). Fills `endpoints` in list order and host/port with
/// the first one. invalid_config names what is wrong: an empty address or
/// list element, an empty host, a bad port (not 1-65535).
caf::expected<connection_config> parse_broker_address(std::string_view addr);

/// The default broker address, the first of:
/// 1. $FERRY_BROKER when set and not empty;
/// 2. the nodes of a local cluster (deploy/local-cluster.sh) whose state
///    folder is $FERRY_CLUSTER_DIR, or ./ferry-cluster when that is unset:
///    the lines of its `brokers` file ("HOST:PORT", node 1 first) joined
///    with commas, when that file exists and names at least one endpoint
///    (local-cluster.sh writes it on start and removes it on stop);
/// 3. "127.0.0.1:9092".
std::string default_broker_address();

/// Whatever listens to a connection: receives (connect_atom, broker_actor)
/// once connected and after every change; a null handle means "lost, the
/// connection is reconnecting". Producer and consumer actors implement it.
using connection_listener = caf::typed_actor<
  caf::reacts_to<connect_atom, broker_actor>>;

/// One connection to one broker of the configured endpoints, shared by the
/// client actors of a process.
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
  /// Internal: time to log in again (session `n`) before the token expires.
  caf::reacts_to<session_atom, uint64_t>,
  /// Stops the connection actor.
  caf::reacts_to<stop_atom>>;

/// Spawns a connection actor and starts connecting (to the first of
/// cfg.targets()). When the actor system carries credentials
/// (session.hpp, configure_credentials), each connect is followed by a login
/// and the handle the connection hands out is a session proxy; a refused
/// login (authentication_failed, login_throttled) fails the waiting
/// requests at once with that error, and is tried again after the backoff.
connection_actor spawn_connection(caf::actor_system& sys, connection_config cfg);

/// True for errors a client should retry after a backoff: ferry's
/// not_leader, throttled, request_timed_out, not_enough_replicas,
/// coordinator_not_available, disk_full, log_closed, and CAF's transport errors (timeouts, a
/// receiver that went down, a lost or unreachable node).
bool is_retriable(const caf::error& err);

/// A one-line description for users and logs: describe() for ferry errors,
/// "request_timeout" style names for CAF's own.
std::string error_text(const caf::error& err);

} // namespace ferry
