#pragma once
// http_gateway: the node's HTTP API (Boost.Beast), translated to requests to
// the node's broker_actor in the same process. JSON in and out
// (actors/http/http_json.hpp has the JSON shapes, encodings and the status map).
//
//   POST   /v1/topics                                  create -> 201
//   GET    /v1/topics                                  list
//   GET    /v1/topics/{topic}                          describe (live partitions)
//   PATCH  /v1/topics/{topic}                          {"config","partitions"}
//   DELETE /v1/topics/{topic}
//   POST   /v1/topics/{topic}/messages                 produce (?acks=&partition=)
//   GET    /v1/topics/{topic}/partitions/{p}/messages  fetch, long poll
//          ?offset=N|earliest|latest&limit=&maxWaitMs=&maxBytes=&encoding=
//   GET    /v1/groups                                  list
//   GET    /v1/groups/{group}                          describe (members, lag)
//   DELETE /v1/groups/{group}                          only while empty
//   POST   /v1/groups/{group}/offsets                  standalone commit
//   POST   /v1/groups/{group}/reset                    reset offsets
//   POST   /v1/groups/{group}/queue/{topic}/receive    queue mode: lease records
//          {"member","max","visibilityMs","waitMs"} (long poll) ?encoding=
//   POST   /v1/groups/{group}/queue/{topic}/ack|nack|reject|extend
//          {"member","partition","offset","leaseId","delayMs","extendMs","error"}
//   GET    /v1/cluster
//   DELETE /v1/cluster/nodes/{id}                      remove a broker-only node
//          (202: its replicas move away, then it leaves; see GET /v1/cluster)
//   GET    /v1/users                                   users (never keys)
//   POST   /v1/users   {"name","password","iterations"}  create or new password
//   DELETE /v1/users/{name}
//   GET    /v1/acls                                    ACLs
//   POST   /v1/acls    {"principal","resourceType","resourceName",
//                       "patternType","operation","permission"}  add
//   DELETE /v1/acls    (the same body)                 remove the equal ones
//   GET    /healthz
// Errors: {"error":{"code","message"}}; the code is a ferry ec name. An
// unknown path is 404 not_found, a known path with another method 405
// invalid_request with an Allow header, a body over max_body_bytes 413
// message_too_large, a malformed request line or header 400.
//
// Threads and lifetime: one io_context run by `threads` threads; one strand
// per connection. A request never blocks a thread: it spawns a throw-away
// CAF actor that asks the broker (request(...).then(...)) and posts the
// result to the connection's strand, where the reply is rendered and
// written. So a long poll costs a parked fetch in the partition replica and
// a socket, not a thread. stop() (or the destructor) closes the listener and
// every connection and joins the threads; replies that arrive later are
// dropped. Construct and stop from one thread; stop before the actor system
// ends.
//
// TLS (https): with `tls` set the port speaks TLS 1.2+ only. Whether a
// connection starts with a TLS ClientHello is detected first: a plain HTTP
// request on a TLS port gets a plain 400 ("this port speaks TLS, use
// https://") and the connection closes; a failed handshake (no client
// certificate where one is required, one from another CA, an expired one)
// closes that connection only and is logged (at most every 10 s, with the
// number since). reload_tls() builds a new server context from the same
// files: connections accepted afterwards use it, open ones keep theirs.
//
// Metrics mode: with `metrics_text` set the server answers only
// GET /metrics (Prometheus text format, from that function, run on an io
// thread) and needs no actor system: start it with serve_metrics(). ferryd
// uses it for the metrics port when TLS is on (civetweb, which serves the
// plain metrics port, crashes on its first TLS connection with Debian 12's
// OpenSSL 3: it calls symbols OpenSSL 3 no longer exports).
//
// Authentication and authorization (issue 16), with `security` set: every
// request but GET /healthz needs HTTP Basic credentials of a user the
// metadata quorum knows (SCRAM-SHA-256: the password is derived with the
// stored salt and compared with StoredKey; a verified pair is remembered in
// memory, keyed by a hash, until the users change). None, an unknown user
// or a wrong password: 401 authentication_failed with WWW-Authenticate
// (the reply never says which). After login_failures_allowed failures from
// one address, each attempt from it within the lockout gets 429
// login_throttled with Retry-After, without checking the password. Then
// each request is checked against the ACLs where it enters, for the
// resource it touches:
//   topics      list: describe (the list shows only those), create: create,
//               describe: describe, alter/partitions: alter, delete: delete,
//               produce: write, fetch: read
//   groups      list/describe: describe (partitions of topics the user may
//               not describe are left out), delete: delete, commit/reset:
//               read on the group, queue receive/ack: read on the group and
//               the topic
//   dlq         list: describe, show: read on the DLQ and read on its
//               source topic, redrive: redrive, purge: delete
//   cluster     describe: describe, remove node, users, ACLs: alter (list
//               users and ACLs: describe)
// Bearer tokens: POST /v1/tokens, logged in with HTTP Basic, answers 201
// {"token","tokenType":"Bearer","user","expiresAtMs","expiresInSeconds"}
// (body optional: {"ttlSeconds": N}, 1..token_max_ttl, default token_ttl).
// `Authorization: Bearer <token>` then stands for the password on every
// route of every node of the cluster, until the token expires or the user
// gets a new password or is deleted (broker/security.hpp has the format;
// tokens are signed with a key derived from the user's SCRAM ServerKey,
// nothing is stored). A token cannot be traded for a new one. A forged or
// altered token counts as a failed login (lockout); an expired one is a
// 401 saying so. The 401s name both schemes in WWW-Authenticate; a refused
// token gets `Bearer ... error="invalid_token"` (RFC 6750).
// A denial is 403 authorization_failed naming the principal, operation and
// resource. Denials, failed logins and every admin change (with its
// outcome) go to `audit` (broker/audit_log.hpp).

#include "actors/protocol/interfaces.hpp"

#include "broker/tls_server.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ferry {

class security_registry;
class audit_log;

/// The TLS files of an https port (PEM).
using http_tls_config = tls_server_config;

struct http_gateway_config {
  /// What the log calls this port ("http", "metrics").
  std::string name = "http";
  /// Address and port to listen on; port 0 picks a free one.
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  /// Threads running the io_context (accept, parse, write; never waiting).
  int threads = 2;
  /// Largest request body (413 above). A 1 MiB value in base64 plus JSON
  /// fits the default.
  size_t max_body_bytes = (2u << 20) + (64u << 10);
  /// Largest request header block (431 above).
  uint32_t max_header_bytes = 16u << 10;
  /// Timeout of every broker request except long-poll fetches.
  std::chrono::milliseconds request_timeout{30000};
  /// Upper bound of a fetch's maxWaitMs.
  std::chrono::milliseconds max_wait{60000};
  /// A fetch's broker request times out after maxWaitMs plus this.
  std::chrono::milliseconds long_poll_margin{10000};
  /// A keep-alive connection with no request for this long is closed.
  std::chrono::milliseconds idle_timeout{60000};
  /// Reading one request and writing one reply each get at most this long.
  std::chrono::milliseconds io_timeout{30000};
  /// Default and maximum of a fetch's `limit`.
  int32_t default_limit = 100;
  int32_t max_limit = 10000;
  /// Default of a fetch's maxBytes (the maximum is 64 MiB).
  int32_t default_max_bytes = 1 << 20;
  /// How long a topic's partition count is reused for keyed produce.
  std::chrono::milliseconds metadata_ttl{2000};
  /// TLS on this port (off when tls.certificate is empty).
  http_tls_config tls;
  /// Metrics mode (see the file comment): the text of GET /metrics.
  std::function<std::string()> metrics_text;
  /// Authentication and authorization (issue 16; see the file comment);
  /// null: every request is served as before.
  std::shared_ptr<const security_registry> security;
  /// Denied requests and admin changes; null: not written.
  std::shared_ptr<audit_log> audit;
  /// Failed logins one address may make before each further attempt must
  /// wait: lockout_base after the first one over, doubling up to
  /// lockout_max; a successful login resets the count.
  int login_failures_allowed = 5;
  std::chrono::milliseconds login_lockout_base{1000};
  std::chrono::milliseconds login_lockout_max{30000};
  /// Bearer tokens (POST /v1/tokens): the lifetime of a token when the
  /// request names none, and the longest one may ask for.
  std::chrono::seconds token_ttl{3600};
  std::chrono::seconds token_max_ttl{86400};
};

/// The HTTP server of one node. Not copyable; see the file comment.
class http_gateway {
public:
  /// Binds and listens (connections wait in the backlog until serve()).
  /// Errors: ec::io_error naming the address (port taken, bad address);
  /// ec::invalid_config naming the file when a TLS file does not load.
  static caf::expected<std::unique_ptr<http_gateway>>
  listen(http_gateway_config cfg);

  ~http_gateway();

  http_gateway(const http_gateway&) = delete;
  http_gateway& operator=(const http_gateway&) = delete;

  /// Starts the threads and accepting. `sys` must outlive stop(); `broker`
  /// is the node's front door. Call once.
  void serve(caf::actor_system& sys, broker_actor broker);

  /// Starts a metrics-mode server (cfg.metrics_text set). Call once.
  void serve_metrics();

  /// Loads the TLS files named in the config again, for new connections.
  /// On an error (naming the file) the current context stays.
  caf::error reload_tls();

  /// TLS handshakes that failed (refused clients), since listen().
  uint64_t failed_handshakes() const;

  /// The port actually bound (useful with port 0).
  uint16_t port() const;

  /// Stops accepting, closes every connection, joins the threads.
  /// Idempotent.
  void stop();

private:
  struct impl;
  explicit http_gateway(std::shared_ptr<impl> p);
  void run_threads();
  std::shared_ptr<impl> impl_;
};

} // namespace ferry
