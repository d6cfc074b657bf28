#include "broker/security.hpp"

#include "broker/big_endian.hpp"
#include "broker/error.hpp"

#include <gsasl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ferry {

namespace {

constexpr size_t key_size = GSASL_HASH_SHA256_SIZE;
constexpr size_t salt_size = 16;

caf::error bad(std::string message) {
  return make_error(ec::invalid_request, std::move(message));
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool one_of(const std::string& x, std::initializer_list<std::string_view> xs) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// StoredKey and ServerKey of `password` with this salt and count.
bool derive(std::string_view password, const std::string& salt,
            int32_t iterations, std::string& stored, std::string& server) {
  std::string pw{password}; // gsasl wants a C string
  std::array<char, key_size> salted{};
  std::array<char, key_size> client{};
  std::array<char, key_size> server_key{};
  std::array<char, key_size> stored_key{};
  auto rc = gsasl_scram_secrets_from_password(
    GSASL_HASH_SHA256, pw.c_str(), static_cast<unsigned>(iterations),
    salt.data(), salt.size(), salted.data(), client.data(), server_key.data(),
    stored_key.data());
  OPENSSL_cleanse(pw.data(), pw.size());
  OPENSSL_cleanse(salted.data(), salted.size());
  OPENSSL_cleanse(client.data(), client.size());
  if (rc != GSASL_OK)
    return false;
  stored.assign(stored_key.data(), stored_key.size());
  server.assign(server_key.data(), server_key.size());
  return true;
}

bool implies_describe(std::string_view op) {
  return op == "read" || op == "write" || op == "delete" || op == "alter"
         || op == "redrive";
}

} // namespace

caf::error validate_user_name(std::string_view name) {
  if (name.empty() || name.size() > 128)
    return bad("a user name has 1 to 128 characters");
  for (auto c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_'
        && c != '-' && c != '@')
      return bad("user name '" + std::string{name}
                 + "' has a character other than letters, digits, '.', '_', "
                   "'-' and '@'");
  return caf::none;
}

caf::expected<scram_credential>
make_scram_credential(const std::string& user, std::string_view password,
                      int32_t iterations) {
  if (auto err = validate_user_name(user))
    return err;
  if (password.empty())
    return bad("the password of user " + user + " is empty");
  if (password.find('\0') != std::string_view::npos)
    return bad("a password may not contain a NUL byte");
  if (iterations < default_scram_iterations
      || iterations > max_scram_iterations)
    return bad("SCRAM iterations must be between "
               + std::to_string(default_scram_iterations) + " and "
               + std::to_string(max_scram_iterations));
  scram_credential c;
  c.user = user;
  c.iterations = iterations;
  c.salt.resize(salt_size);
  if (gsasl_nonce(c.salt.data(), c.salt.size()) != GSASL_OK)
    return make_error(ec::io_error, "no random bytes for a salt");
  if (!derive(password, c.salt, iterations, c.stored_key, c.server_key))
    return bad("the password of user " + user
               + " cannot be prepared for SCRAM (SASLprep refused it)");
  return c;
}

caf::error validate_credential(const scram_credential& c) {
  if (auto err = validate_user_name(c.user))
    return err;
  if (c.mechanism != "SCRAM-SHA-256")
    return bad("mechanism " + c.mechanism
               + " is not supported (only SCRAM-SHA-256)");
  if (c.salt.size() < 8 || c.salt.size() > 64)
    return bad("a SCRAM salt has 8 to 64 bytes");
  if (c.iterations < default_scram_iterations
      || c.iterations > max_scram_iterations)
    return bad("SCRAM iterations must be between "
               + std::to_string(default_scram_iterations) + " and "
               + std::to_string(max_scram_iterations));
  if (c.stored_key.size() != key_size || c.server_key.size() != key_size)
    return bad("SCRAM-SHA-256 keys have 32 bytes");
  return caf::none;
}

bool verify_password(const scram_credential& c, std::string_view password) {
  if (password.empty() || password.find('\0') != std::string_view::npos
      || c.stored_key.size() != key_size)
    return false;
  std::string stored;
  std::string server;
  if (!derive(password, c.salt, c.iterations, stored, server))
    return false;
  return CRYPTO_memcmp(stored.data(), c.stored_key.data(), key_size) == 0;
}

caf::error normalize_acl(acl_entry& x) {
  // principal
  auto p = x.principal;
  if (p.rfind("User:", 0) == 0 || p.rfind("user:", 0) == 0)
    p = p.substr(5);
  if (p != "*") {
    if (auto err = validate_user_name(p))
      return bad("principal '" + x.principal
                 + "' is not User:<name> or User:* (a name has 1 to 128 "
                   "letters, digits, '.', '_', '-' or '@')");
  }
  x.principal = "User:" + p;
  x.resource_type = lower(x.resource_type);
  if (!one_of(x.resource_type, {"cluster", "topic", "group", "dlq"}))
    return bad("resource type '" + x.resource_type
               + "' is not one of cluster, topic, group, dlq");
  x.pattern_type = lower(x.pattern_type.empty() ? "literal" : x.pattern_type);
  if (!one_of(x.pattern_type, {"literal", "prefixed"}))
    return bad("pattern type '" + x.pattern_type
               + "' is not one of literal, prefixed");
  if (x.resource_type == "cluster") {
    x.resource_name = "cluster";
    x.pattern_type = "literal";
  } else if (x.resource_name.empty()) {
    return bad("an ACL on a " + x.resource_type + " needs a name (or * for all)");
  } else if (x.resource_name.size() > 249) {
    return bad("a resource name has at most 249 characters");
  } else if (x.pattern_type == "prefixed" && x.resource_name == "*") {
    return bad("a prefixed pattern cannot be '*': use a literal '*' for all");
  }
  x.operation = lower(x.operation);
  if (!one_of(x.operation, {"all", "describe", "read", "write", "create",
                            "delete", "alter", "redrive"}))
    return bad("operation '" + x.operation
               + "' is not one of all, describe, read, write, create, delete, "
                 "alter, redrive");
  x.permission = lower(x.permission.empty() ? "allow" : x.permission);
  if (!one_of(x.permission, {"allow", "deny"}))
    return bad("permission '" + x.permission + "' is not allow or deny");
  return caf::none;
}

bool acl_matches(const acl_entry& x, std::string_view user,
                 std::string_view resource_type, std::string_view name,
                 std::string_view operation) {
  if (x.principal != "User:*"
      && (x.principal.size() != user.size() + 5
          || std::string_view{x.principal}.substr(5) != user))
    return false;
  if (x.resource_type != resource_type)
    return false;
  if (x.operation != "all" && x.operation != operation)
    return false;
  if (x.pattern_type == "prefixed")
    return name.substr(0, x.resource_name.size()) == x.resource_name;
  return x.resource_name == "*" || x.resource_name == name;
}

bool authorize(const std::vector<acl_entry>& acls,
               const std::set<std::string>& superusers, std::string_view user,
               std::string_view resource_type, std::string_view name,
               std::string_view operation) {
  if (user.empty())
    return false;
  if (superusers.count(std::string{user}) > 0)
    return true;
  bool allowed = false;
  for (auto& x : acls) {
    bool hit = acl_matches(x, user, resource_type, name, operation);
    if (x.permission == "deny") {
      if (hit)
        return false;
      continue;
    }
    if (hit)
      allowed = true;
    else if (operation == "describe" && implies_describe(x.operation)
             && acl_matches(x, user, resource_type, name, x.operation))
      allowed = true;
  }
  return allowed;
}

std::string describe_denial(std::string_view user,
                            std::string_view resource_type,
                            std::string_view name,
                            std::string_view operation) {
  std::string out = "User:" + std::string{user} + " may not "
                    + std::string{operation} + " ";
  if (resource_type == "cluster")
    return out + "the cluster";
  return out + std::string{resource_type} + " " + std::string{name};
}

// -- security_registry -----------------------------------------------------------

void security_registry::set_superusers(std::set<std::string> names) {
  std::unique_lock guard{mtx_};
  superusers_ = std::move(names);
  ++version_;
}

std::set<std::string> security_registry::superusers() const {
  std::shared_lock guard{mtx_};
  return superusers_;
}

void security_registry::set(std::map<std::string, scram_credential> users,
                            std::vector<acl_entry> acls) {
  std::unique_lock guard{mtx_};
  users_ = std::move(users);
  acls_ = std::move(acls);
  ++version_;
}

std::optional<scram_credential>
security_registry::user(const std::string& name) const {
  std::shared_lock guard{mtx_};
  auto i = users_.find(name);
  if (i == users_.end())
    return std::nullopt;
  return i->second;
}

std::vector<acl_entry> security_registry::acls() const {
  std::shared_lock guard{mtx_};
  return acls_;
}

bool security_registry::is_superuser(std::string_view user) const {
  std::shared_lock guard{mtx_};
  return superusers_.count(std::string{user}) > 0;
}

bool security_registry::authorize(std::string_view user,
                                  std::string_view resource_type,
                                  std::string_view name,
                                  std::string_view operation) const {
  std::shared_lock guard{mtx_};
  return ferry::authorize(acls_, superusers_, user, resource_type, name,
                          operation);
}

bool security_registry::allows_somewhere(std::string_view user,
                                         std::string_view resource_type,
                                         std::string_view operation) const {
  std::shared_lock guard{mtx_};
  if (user.empty())
    return false;
  if (superusers_.count(std::string{user}) > 0)
    return true;
  // Each allow entry names (or starts) a resource: probe that name, so a
  // deny of it (or of everything) still wins.
  for (auto& x : acls_)
    if (x.permission == "allow" && acl_matches(x, user, resource_type, x.resource_name, operation)
        && ferry::authorize(acls_, superusers_, user, resource_type, x.resource_name,
                            operation))
      return true;
  return false;
}

uint64_t security_registry::version() const {
  std::shared_lock guard{mtx_};
  return version_;
}

void security_registry::set_loaded(bool loaded) {
  loaded_.store(loaded, std::memory_order_release);
}

bool security_registry::loaded() const {
  return loaded_.load(std::memory_order_acquire);
}

// -- bearer tokens ------------------------------------------------------------------

namespace {

constexpr size_t token_nonce_size = 16;
constexpr size_t token_fixed_size = 8 + 8 + token_nonce_size;
constexpr std::string_view token_key_label = "ferry bearer token v1";

caf::error token_error(std::string message) {
  return make_error(ec::authentication_failed, std::move(message));
}

std::string base64url(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  auto n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(in.data()),
                           static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=')
    out.pop_back();
  for (auto& c : out)
    c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

std::optional<std::string> base64url_decode(std::string_view in) {
  if (in.empty() || in.size() > 1024 || in.size() % 4 == 1)
    return std::nullopt;
  std::string std64;
  std64.reserve(in.size() + 3);
  for (auto c : in) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
    else if (!std::isalnum(static_cast<unsigned char>(c)))
      return std::nullopt;
    std64.push_back(c);
  }
  size_t pad = (4 - std64.size() % 4) % 4;
  std64.append(pad, '=');
  std::string out(std64.size() / 4 * 3, '\0');
  auto n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(std64.data()),
                           static_cast<int>(std64.size()));
  if (n < 0 || static_cast<size_t>(n) < pad)
    return std::nullopt;
  out.resize(static_cast<size_t>(n) - pad);
  // Only the canonical spelling: the unused low bits of the last character
  // must be zero, so no two strings decode to the same token.
  if (base64url(out) != in)
    return std::nullopt;
  return out;
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(),
       md.data(), &len);
  return std::string{reinterpret_cast<const char*>(md.data()), len};
}

/// The MAC of `signed_part` ("fry1." + base64url(payload)) for `cred`.
std::string token_mac(const scram_credential& cred, std::string_view signed_part) {
  auto key = hmac_sha256(cred.server_key, token_key_label);
  auto mac = hmac_sha256(key, signed_part);
  OPENSSL_cleanse(key.data(), key.size());
  return mac;
}

struct parsed_token {
  std::string_view signed_part;
  std::string mac;
  bearer_claims claims;
};

caf::expected<parsed_token> parse_token(std::string_view token) {
  auto malformed = [] { return token_error("malformed bearer token"); };
  if (token.size() > 1024 || token.substr(0, bearer_token_prefix.size()) != bearer_token_prefix)
    return malformed();
  auto dot = token.rfind('.');
  if (dot < bearer_token_prefix.size())
    return malformed();
  parsed_token t;
  t.signed_part = token.substr(0, dot);
  auto payload = base64url_decode(t.signed_part.substr(bearer_token_prefix.size()));
  auto mac = base64url_decode(token.substr(dot + 1));
  if (!payload || !mac || payload->size() <= token_fixed_size
      || mac->size() != SHA256_DIGEST_LENGTH)
    return malformed();
  std::string_view in{*payload};
  uint64_t issued = 0;
  uint64_t expires = 0;
  be::read(in, issued);
  be::read(in, expires);
  in.remove_prefix(token_nonce_size);
  t.claims.user = std::string{in};
  t.claims.issued_ms = static_cast<int64_t>(issued);
  t.claims.expires_ms = static_cast<int64_t>(expires);
  if (validate_user_name(t.claims.user))
    return malformed();
  t.mac = std::move(*mac);
  return t;
}

} // namespace

caf::expected<std::string> issue_bearer_token(const scram_credential& cred,
                                              int64_t now_ms, int64_t ttl_ms) {
  if (ttl_ms <= 0)
    return bad("a token's lifetime must be positive");
  if (auto err = validate_credential(cred))
    return err;
  std::string payload;
  be::append(payload, static_cast<uint64_t>(now_ms));
  be::append(payload, static_cast<uint64_t>(now_ms + ttl_ms));
  std::array<unsigned char, token_nonce_size> nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    return make_error(ec::io_error, "no random bytes for a token");
  payload.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  payload += cred.user;
  std::string token{bearer_token_prefix};
  token += base64url(payload);
  auto mac = token_mac(cred, token);
  token += '.';
  token += base64url(mac);
  return token;
}

caf::expected<std::string> bearer_token_user(std::string_view token) {
  auto t = parse_token(token);
  if (!t)
    return t.error();
  return std::move(t->claims.user);
}

caf::expected<bearer_claims> verify_bearer_token(const scram_credential& cred,
                                                 std::string_view token,
                                                 int64_t now_ms) {
  auto t = parse_token(token);
  if (!t)
    return t.error();
  auto mac = token_mac(cred, t->signed_part);
  if (t->claims.user != cred.user
      || CRYPTO_memcmp(mac.data(), t->mac.data(), mac.size()) != 0)
    return token_error("invalid bearer token");
  if (now_ms >= t->claims.expires_ms)
    return token_error("bearer token expired");
  return std::move(t->claims);
}

// -- the cluster credential ------------------------------------------------------

caf::expected<std::string> cluster_credential(std::string_view secret) {
  if (secret.size() < min_cluster_secret_size)
    return bad("the cluster secret is too short: " + std::to_string(secret.size())
               + " characters, at least " + std::to_string(min_cluster_secret_size)
               + " (openssl rand -hex 32)");
  std::string out{cluster_credential_prefix};
  out += base64url(hmac_sha256(secret, "ferry cluster credential v1"));
  return out;
}

caf::expected<std::string> operator_credential(std::string_view secret) {
  if (auto c = cluster_credential(secret); !c)
    return c.error();
  std::string out{operator_credential_prefix};
  out += base64url(hmac_sha256(secret, "ferry operator credential v1"));
  return out;
}

caf::expected<std::string> read_cluster_secret(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    return make_error(ec::invalid_config, "cannot read the cluster secret file " + path
                                            + ": " + std::strerror(errno));
  std::string text;
  char buf[512];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < 4096)
    text.append(buf, n);
  std::fclose(f);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start])))
    ++start;
  text.erase(0, start);
  if (text.size() < min_cluster_secret_size)
    return make_error(ec::invalid_config,
                      "the cluster secret file " + path + " holds "
                        + std::to_string(text.size()) + " characters, at least "
                        + std::to_string(min_cluster_secret_size)
                        + " are needed (openssl rand -hex 32 > " + path + ")");
  return text;
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace ferry
