#pragma once
// Users, credentials and ACLs (issue 16): the rules, free of actors.
//
// Credentials are SCRAM-SHA-256 (RFC 5802, RFC 7677), derived with GNU SASL
// (libgsasl): a random 16-byte salt, PBKDF2 over the password with
// `iterations` rounds (4096 by default, RFC 7677's minimum), and of the
// salted password only StoredKey and ServerKey are kept. A password is
// checked (HTTP Basic) by deriving again with the stored salt and comparing
// StoredKey in constant time.
//
// ACLs follow Kafka's model:
//   principal       "User:<name>" or "User:*" (every authenticated user)
//   resource_type   cluster, topic, group, dlq
//   resource_name   a name; with pattern "literal", "*" is every name;
//                   "prefixed" matches every name that starts with it. The
//                   cluster resource has the one name "cluster".
//   operation       describe, read, write, create, delete, alter, redrive,
//                   or all
//   permission      allow or deny
// A request (user, resource, operation) is allowed when the user is a
// superuser, or when no matching deny entry exists and a matching allow
// entry does. Deny wins. An allow of read, write, delete, alter or redrive
// also allows describe (as in Kafka); a deny denies exactly what it names
// (or everything, for all). Nothing is allowed that no entry allows.
//
// security_registry is the in-memory view every front door (the HTTP
// gateway today) checks: the metadata state machine fills it from the
// replicated users and ACLs, on every node, after every change.

#include "broker/messages.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

inline constexpr int32_t default_scram_iterations = 4096;
inline constexpr int32_t max_scram_iterations = 1 << 20;

/// [A-Za-z0-9._@-]{1,128}; invalid_request names what is wrong.
caf::error validate_user_name(std::string_view name);

/// A new credential for `user` with a fresh random salt. invalid_request
/// for a bad name, an empty password or iterations outside
/// [4096, max_scram_iterations].
caf::expected<scram_credential>
make_scram_credential(const std::string& user, std::string_view password,
                      int32_t iterations = default_scram_iterations);

/// Checks a stored credential's shape (name, mechanism, sizes, iterations).
caf::error validate_credential(const scram_credential& c);

/// True when `password` derives `c`'s StoredKey (constant-time compare).
bool verify_password(const scram_credential& c, std::string_view password);

/// Validates an entry and brings it to canonical form: lower-case words,
/// "alice" becomes "User:alice", the cluster resource is named "cluster".
/// invalid_request says which field is wrong and what it may be.
caf::error normalize_acl(acl_entry& x);

/// True when `x` (canonical) applies to this user, resource and operation
/// (before implication: an allow of read matches only read; see
/// authorize()).
bool acl_matches(const acl_entry& x, std::string_view user,
                 std::string_view resource_type, std::string_view name,
                 std::string_view operation);

/// The decision described in the file comment.
bool authorize(const std::vector<acl_entry>& acls,
               const std::set<std::string>& superusers, std::string_view user,
               std::string_view resource_type, std::string_view name,
               std::string_view operation);

/// "User:alice may not read topic orders" for errors and the audit log.
std::string describe_denial(std::string_view user,
                            std::string_view resource_type,
                            std::string_view name, std::string_view operation);

// -- bearer tokens (HTTP) ---------------------------------------------------------
//
// A bearer token lets an HTTP client log in once (HTTP Basic, POST
// /v1/tokens) and then send `Authorization: Bearer <token>` instead of the
// password: no PBKDF2 per request on the node, no password kept by the
// client. Tokens are stateless and valid on every node of the cluster:
//
//   token   = "fry1." base64url(payload) "." base64url(mac)   (no padding)
//   payload = issued_ms (8 bytes, big-endian) expires_ms (8) nonce (16)
//             user (the rest, 1..128 bytes)
//   mac     = HMAC-SHA256(key, "fry1." base64url(payload))
//   key     = HMAC-SHA256(the user's ServerKey, "ferry bearer token v1")
//
// The key comes from the user's SCRAM credential, which the metadata quorum
// replicates to every node, so any node can check a token any node issued,
// and nothing new is stored. Setting a new password (a new salt, so a new
// ServerKey) or deleting the user makes every token of that user invalid at
// once; otherwise a token is good until it expires (there is no list of
// revoked tokens: keep lifetimes short).

inline constexpr std::string_view bearer_token_prefix = "fry1.";

/// What a valid token says.
struct bearer_claims {
  std::string user;
  int64_t issued_ms = 0;
  int64_t expires_ms = 0;
};

/// A new token for the user of `cred`, issued at `now_ms`, valid until
/// now_ms + ttl_ms. invalid_request for a ttl_ms <= 0 or a bad credential.
caf::expected<std::string> issue_bearer_token(const scram_credential& cred,
                                              int64_t now_ms, int64_t ttl_ms);

/// The user a token names, read without checking anything else (to find
/// the credential to verify it with). authentication_failed if malformed.
caf::expected<std::string> bearer_token_user(std::string_view token);

/// Checks a token against the credential of the user it names:
/// authentication_failed "malformed bearer token", "invalid bearer token"
/// (a wrong MAC: forged, altered, or the user's password changed since) or
/// "bearer token expired".
caf::expected<bearer_claims> verify_bearer_token(const scram_credential& cred,
                                                 std::string_view token,
                                                 int64_t now_ms);

// -- the cluster credential (CAF port sessions) --------------------------------------
//
// The nodes of a cluster share a secret (ferryd --cluster-secret-file, at
// least 32 characters; deploy/local-cluster.sh makes one with openssl). Its
// credential, "fryc." base64url(HMAC-SHA256(secret, "ferry cluster
// credential v1")), is what nodes put in the session envelopes they send each
// other and themselves (actors/protocol/interfaces.hpp, broker_actor): it
// stands for the cluster, which no ACL restricts. ferryctl
// --cluster-secret-file uses it too: whoever can read a node's secret file
// is that node's operator (it is how the first user is created).

inline constexpr std::string_view cluster_credential_prefix = "fryc.";
inline constexpr std::string_view operator_credential_prefix = "fryo.";
inline constexpr size_t min_cluster_secret_size = 32;

/// The credential of a secret; invalid_request when it is shorter than
/// min_cluster_secret_size.
caf::expected<std::string> cluster_credential(std::string_view secret);

/// The operator's credential of a secret: "fryo." base64url(HMAC-SHA256(
/// secret, "ferry operator credential v1")). No ACL restricts it either,
/// but a node treats its requests as a client's (forwarded to the Raft
/// leader where needed), not as a peer's. invalid_request as above.
caf::expected<std::string> operator_credential(std::string_view secret);

/// The secret in `path` (surrounding white space removed); invalid_config
/// naming the file when it cannot be read or is too short.
caf::expected<std::string> read_cluster_secret(const std::string& path);

/// Equality in constant time (for credentials).
bool same_secret(std::string_view a, std::string_view b);

/// The users, ACLs and superusers one node checks requests against.
/// Thread-safe: written by the metadata state machine, read by the front
/// doors.
class security_registry {
public:
  void set_superusers(std::set<std::string> names);
  std::set<std::string> superusers() const;

  /// Replaces everything the quorum holds (after a command or a restore).
  void set(std::map<std::string, scram_credential> users,
           std::vector<acl_entry> acls);

  std::optional<scram_credential> user(const std::string& name) const;
  std::vector<acl_entry> acls() const;
  bool is_superuser(std::string_view user) const;
  bool authorize(std::string_view user, std::string_view resource_type,
                 std::string_view name, std::string_view operation) const;

  /// True when the user may do `operation` on at least one resource of
  /// `resource_type` (a superuser, or an allow entry for it that no deny
  /// overrides at the name it names). Kafka's InitProducerId asks this of
  /// "write" on topics: an idempotent producer needs no ACL of its own.
  bool allows_somewhere(std::string_view user, std::string_view resource_type,
                        std::string_view operation) const;

  /// Bumped by every set(): caches of verified passwords compare it.
  uint64_t version() const;

  /// False while the node that fills this registry has not caught up with
  /// the metadata quorum (ferryd sets it false before the node starts; the
  /// node sets it true once ready): a front door then answers "try again"
  /// instead of refusing users it has not loaded yet. True by default.
  void set_loaded(bool loaded);
  bool loaded() const;

private:
  mutable std::shared_mutex mtx_;
  std::set<std::string> superusers_;
  std::map<std::string, scram_credential> users_;
  std::vector<acl_entry> acls_;
  uint64_t version_ = 0;
  std::atomic<bool> loaded_{true};
};

} // namespace ferry
