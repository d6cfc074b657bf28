#pragma once
// Sessions on the CAF port (issue 16): how a client proves who it is to a
// node that runs with `ferryd --auth scram`.
//
// A node with auth serves a request only inside a session envelope,
// (auth_atom, credential, request) (actors/protocol/interfaces.hpp,
// broker_actor). The credential is either
//   - a user's session token: the client logs in with the in-band
//     SCRAM-SHA-256 exchange ((auth_atom, sasl_step) twice; the password
//     never travels) and gets a token valid on every node of the cluster
//     for the node's --session-ttl; or
//   - the cluster credential (broker/security.hpp) derived from the nodes'
//     shared secret: what nodes use between themselves, and what an
//     operator's ferryctl --cluster-secret-file uses.
//
// Client code never builds envelopes. A connection (client_connection.hpp)
// whose actor system carries credentials (configure_credentials) logs in
// after each connect and hands its listeners a session proxy instead of the
// node's handle: a local actor that forwards every message to the node
// inside an envelope with the current token (delegation: the node answers
// the original sender directly). The proxy ends with the node's handle
// (same exit reason), so monitors see the connection go down as before. The
// connection logs in again before the token expires and gives the proxy the
// new token.

#include "actors/protocol/interfaces.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>

#include <cstdint>
#include <string>

namespace ferry {

/// What a client logs in with; empty: no login (a node without --auth).
struct client_credentials {
  /// SCRAM login as this user with this password.
  std::string user;
  std::string password;
  /// A fixed credential used as is instead (the cluster credential).
  std::string token;

  bool empty() const {
    return user.empty() && token.empty();
  }
};

/// Makes every connection of actor systems built from `cfg` log in with
/// `c` (stored in the config under "ferry.session.*").
void configure_credentials(caf::actor_system_config& cfg, const client_credentials& c);

/// Replaces the credentials of `sys` for the connections spawned from now on
/// (a program that asks its user, like the console's connect bar); empty
/// credentials go back to the config's.
void set_credentials(const caf::actor_system& sys, client_credentials c);

/// The credentials of set_credentials, else those configure_credentials
/// stored (empty when none).
client_credentials credentials_of(const caf::actor_system& sys);

/// Credentials from a program's flags and the environment: `user` (else
/// $FERRY_USER) with the first line of `password_file` (else
/// $FERRY_PASSWORD_FILE's, else $FERRY_PASSWORD) as its password; or the
/// operator credential of `cluster_secret_file` (else
/// $FERRY_CLUSTER_SECRET_FILE). invalid_config names what is wrong: a user
/// without a password, both a user and a cluster secret, an unreadable file.
caf::expected<client_credentials> load_credentials(std::string user,
                                                   std::string password_file,
                                                   std::string cluster_secret_file);

/// The cluster secret of a local cluster (deploy/local-cluster.sh start
/// --auth keeps it in <state>/cluster.secret; the state folder is
/// $FERRY_CLUSTER_DIR or ./ferry-cluster): its operator credential, so the operator
/// of a local cluster needs no flags. False when there is none.
bool credentials_from_local_cluster(client_credentials& c);

/// A local stand-in for `target` that forwards every message inside a
/// session envelope with `token`. (session_atom, std::string) replaces the
/// token. Ends when `target` ends, with its exit reason.
broker_actor spawn_session_proxy(caf::actor_system& sys, broker_actor target,
                                 std::string token);

} // namespace ferry
