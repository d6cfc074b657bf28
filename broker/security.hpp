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

  /// Bumped by every set(): caches of verified passwords compare it.
  uint64_t version() const;

private:
  mutable std::shared_mutex mtx_;
  std::set<std::string> superusers_;
  std::map<std::string, scram_credential> users_;
  std::vector<acl_entry> acls_;
  uint64_t version_ = 0;
};

} // namespace ferry
