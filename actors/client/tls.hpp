#pragma once
// TLS on the actor transport (client library; ferryd uses it too).
//
// A Ferry node's CAF port speaks TLS when ferryd is started with
// --tls-cert, --tls-key and --tls-ca. CAF 0.17.6 (libcaf_openssl) then
// requires a certificate on BOTH sides, signed by a CA the other side
// trusts: every client presents a certificate (mutual TLS), and so does a
// node dialling a peer. The CAF transport tells actors nothing about the
// peer's certificate; who is calling is a separate, in-band matter.
//
// TLS is a property of the whole actor system (CAF reads openssl.* from
// the system config for every connection): configure_tls() before the
// system starts, and every connection it opens (client_connection) and
// every port it publishes (publish_broker) uses TLS.
//
// Between cluster nodes: with libcaf_openssl a second connection between
// two nodes (a node dialling back a peer that dialled it, see "One dialer
// per pair" in actors/server/node.hpp; or both dialling) made their link go
// down and up every ~100 ms in a 3-node test (2026-12-01), where plain TCP
// closes the second connection as redundant and keeps the first. So with
// TLS the passive side of a pair never dials back: its link adopts the
// proxy the peer's probe arrived from (adopted_link, node_peers.cpp).
//
// CAF's pitfalls, which check_tls() exists to close:
// - with none of openssl.certificate/key/cafile set CAF falls back to
//   anonymous TLS and accepts anyone: TLS here means all three files;
// - CAF reads the files for every new connection and throws (ending the
//   process) if one does not load: the files are checked up front, and
//   ferryd points CAF at checked copies it replaces only with files that
//   pass the check again (reload on SIGHUP, ferryd_main.cpp).

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>

#include <cstdint>
#include <string>

namespace ferry {

/// The three PEM files of a TLS endpoint (node or client).
struct tls_settings {
  std::string certificate; ///< this side's certificate (chain), PEM
  std::string key;         ///< its private key, PEM, unencrypted
  std::string ca;          ///< the CA certificates the peer must chain to, PEM

  /// Any of the three set: the caller asked for TLS.
  bool requested() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

/// Fills unset fields from FERRY_TLS_CERT, FERRY_TLS_KEY and FERRY_TLS_CA.
void tls_from_environment(tls_settings& s);

/// A local cluster started with `deploy/local-cluster.sh start --tls`
/// keeps a client certificate in <state folder>/tls/ (client.pem,
/// client.key, ca.pem; the folder as in default_broker_address()). When
/// `s` asks for nothing and the cluster's brokers file and those three
/// files exist, fills `s` with them and returns true.
bool tls_from_local_cluster(tls_settings& s);

/// Whose files check_tls() looks at.
enum class tls_role {
  /// A node: its certificate is also its client certificate towards its
  /// peers, which trust the same cluster CA, so it must chain to `ca`.
  node,
  /// A client: its certificate is checked by the node against the node's
  /// CA file, which may differ from the client's (the client's `ca` is for
  /// the node's certificate), so only its validity period is checked here.
  client,
};

/// invalid_config unless all three files are given, readable and valid
/// now: the certificate and key parse and belong together, the CA file
/// holds at least one certificate, and the certificate is within its
/// validity period (and, for a node, chains to the CA file).
caf::error check_tls(const tls_settings& s, tls_role role);

/// Turns TLS on for the actor system `cfg` will start (loads libcaf_openssl
/// and sets openssl.certificate/key/cafile). Call check_tls() first.
void configure_tls(caf::actor_system_config& cfg, const tls_settings& s);

/// True if configure_tls() ran for the config `sys` was started with.
bool uses_tls(const caf::actor_system& sys);

/// True when this process's SSL_read and SSL_write are the client
/// library's, which clear OpenSSL's error queue before each call (see
/// tls.cpp: without that, libcaf_openssl as Debian builds it takes down
/// every TLS connection of a thread after one of them failed).
bool openssl_error_queue_guarded();

/// Publishes `whom` on host:port (port 0: a free one; reuses the address),
/// with TLS if its system uses it.
template <class Handle>
caf::expected<uint16_t> publish_broker(const Handle& whom, uint16_t port,
                                       const std::string& host) {
  auto& sys = whom.home_system();
  if (uses_tls(sys))
    return caf::openssl::publish(whom, port, host.c_str(), true);
  return sys.middleman().publish(whom, port, host.c_str(), true);
}

/// Seconds until the certificate in `file` expires (negative: expired);
/// an error if it does not parse.
caf::expected<int64_t> certificate_seconds_left(const std::string& file);

} // namespace ferry
