#include "broker/scram_exchange.hpp"

#include "broker/error.hpp"
#include "broker/security.hpp"

#include <gsasl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <vector>

namespace ferry {

namespace {

// Not scram_sha256.data(): gsasl wants a C string, and this one surely is.
constexpr const char* mechanism = "SCRAM-SHA-256";
static_assert(std::string_view{mechanism} == scram_sha256);

constexpr size_t key_size = GSASL_HASH_SHA256_SIZE;
constexpr size_t decoy_salt_size = 16; // what make_scram_credential uses
/// No SCRAM message of a ferry login comes near this.
constexpr size_t max_message_size = 4096;

// -- errors -------------------------------------------------------------------

caf::error malformed(std::string_view what, std::string_view why) {
  return make_error(ec::invalid_request, "malformed SCRAM " + std::string{what}
                                           + ": " + std::string{why});
}

caf::error out_of_order() {
  return make_error(ec::invalid_request,
                    "SCRAM message out of order (a conversation sends each "
                    "message once, in order, and ends at its first error)");
}

/// The one answer a server gives for every failed login.
caf::error login_failed() {
  return make_error(ec::authentication_failed, "authentication failed");
}

caf::error gsasl_failure(int rc) {
  return make_error(ec::io_error,
                    std::string{"GNU SASL: "} + gsasl_strerror(rc));
}

// -- gsasl --------------------------------------------------------------------

/// One library handle for the process. Sessions only read it (gsasl keeps
/// no other global state), so threads share it. Never freed: sessions may
/// still be finishing while static objects are destroyed.
Gsasl* gsasl_context() {
  static Gsasl* const ctx = []() -> Gsasl* {
    Gsasl* c = nullptr;
    if (gsasl_init(&c) != GSASL_OK)
      return nullptr;
    return c;
  }();
  return ctx;
}

struct session_deleter {
  void operator()(Gsasl_session* s) const {
    gsasl_finish(s);
  }
};

using session_ptr = std::unique_ptr<Gsasl_session, session_deleter>;

caf::expected<session_ptr> start_session(bool server) {
  auto* ctx = gsasl_context();
  if (ctx == nullptr)
    return make_error(ec::io_error, "GNU SASL could not be initialized");
  Gsasl_session* s = nullptr;
  auto rc = server ? gsasl_server_start(ctx, mechanism, &s)
                   : gsasl_client_start(ctx, mechanism, &s);
  if (rc != GSASL_OK)
    return gsasl_failure(rc);
  return session_ptr{s};
}

struct step_result {
  int rc;
  std::string out;
};

step_result step(Gsasl_session* s, std::string_view in) {
  char* out = nullptr;
  size_t len = 0;
  step_result r{gsasl_step(s, in.data(), in.size(), &out, &len), {}};
  if (out != nullptr) {
    r.out.assign(out, len);
    gsasl_free(out);
  }
  return r;
}

std::optional<std::string> base64(std::string_view raw) {
  char* out = nullptr;
  size_t len = 0;
  if (gsasl_base64_to(raw.data(), raw.size(), &out, &len) != GSASL_OK)
    return std::nullopt;
  std::string result{out, len};
  OPENSSL_cleanse(out, len);
  gsasl_free(out);
  return result;
}

/// Hands the server session what it checks the proof with. gsasl 2.2 reads
/// GSASL_SCRAM_SERVERKEY and GSASL_SCRAM_STOREDKEY as base64, not hex as
/// gsasl.h says (hex decodes as base64 too, to 48 bytes, and every login
/// then fails with GSASL_AUTHENTICATION_ERROR).
caf::error set_credential(Gsasl_session* s, const scram_credential& c) {
  auto salt = base64(c.salt);
  auto stored = base64(c.stored_key);
  auto server = base64(c.server_key);
  int rc = GSASL_BASE64_ERROR;
  if (salt && stored && server) {
    auto iterations = std::to_string(c.iterations);
    rc = gsasl_property_set(s, GSASL_SCRAM_ITER, iterations.c_str());
    if (rc == GSASL_OK)
      rc = gsasl_property_set(s, GSASL_SCRAM_SALT, salt->c_str());
    if (rc == GSASL_OK)
      rc = gsasl_property_set(s, GSASL_SCRAM_STOREDKEY, stored->c_str());
    if (rc == GSASL_OK)
      rc = gsasl_property_set(s, GSASL_SCRAM_SERVERKEY, server->c_str());
  }
  for (auto* x : {&stored, &server})
    if (*x)
      OPENSSL_cleanse((*x)->data(), (*x)->size());
  return rc == GSASL_OK ? caf::error{} : gsasl_failure(rc);
}

/// A credential nobody can log in with, for a user the server does not
/// know: the salt is the same on every try for the same name (an attacker
/// cannot tell unknown names by salts that change), the keys are random.
caf::expected<scram_credential> decoy(const std::string& name) {
  static const auto key = []() -> std::optional<std::array<unsigned char, 32>> {
    std::array<unsigned char, 32> k{};
    if (RAND_bytes(k.data(), static_cast<int>(k.size())) != 1)
      return std::nullopt;
    return k;
  }();
  scram_credential c;
  c.user = name;
  c.iterations = default_scram_iterations;
  c.stored_key.resize(key_size);
  c.server_key.resize(key_size);
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned len = 0;
  if (!key
      || HMAC(EVP_sha256(), key->data(), static_cast<int>(key->size()),
              reinterpret_cast<const unsigned char*>(name.data()), name.size(),
              md.data(), &len)
           == nullptr
      || RAND_bytes(reinterpret_cast<unsigned char*>(c.stored_key.data()),
                    static_cast<int>(key_size))
           != 1
      || RAND_bytes(reinterpret_cast<unsigned char*>(c.server_key.data()),
                    static_cast<int>(key_size))
           != 1)
    return make_error(ec::io_error, "no random bytes for SCRAM");
  c.salt.assign(reinterpret_cast<const char*>(md.data()), decoy_salt_size);
  return c;
}

// -- parsing ------------------------------------------------------------------

/// Empty, oversized or with a byte outside printable ASCII: what is wrong,
/// or nothing.
std::optional<std::string_view> shape_problem(std::string_view m) {
  if (m.empty())
    return "empty";
  if (m.size() > max_message_size)
    return "longer than 4096 bytes";
  for (auto c : m)
    if (c < 0x20 || c > 0x7e)
      return "a byte outside printable ASCII";
  return std::nullopt;
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  for (;;) {
    auto comma = s.find(',');
    out.push_back(s.substr(0, comma));
    if (comma == std::string_view::npos)
      return out;
    s.remove_prefix(comma + 1);
  }
}

bool has_key(std::string_view field, char key) {
  return field.size() >= 2 && field[0] == key && field[1] == '=';
}

/// An extension: a letter, '=', a value.
bool is_attribute(std::string_view field) {
  return field.size() >= 2 && std::isalpha(static_cast<unsigned char>(field[0]))
         && field[1] == '=';
}

/// RFC 5802's printable: %x21-2B / %x2D-7E.
bool valid_nonce(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
    return c >= 0x21 && c <= 0x7e && c != ',';
  });
}

/// saslname: ',' is sent as =2C and '=' as =3D; any other '=' is an error.
std::optional<std::string> unescape_saslname(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '=') {
      out += v[i];
      continue;
    }
    auto code = v.substr(i + 1, 2);
    if (code == "2C")
      out += ',';
    else if (code == "3D")
      out += '=';
    else
      return std::nullopt;
    i += 2;
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

/// Checks a client-first-message; the user it names.
caf::expected<std::string> parse_client_first(std::string_view m) {
  constexpr std::string_view what = "client-first message";
  if (auto problem = shape_problem(m))
    return malformed(what, *problem);
  if (m.substr(0, 2) == "p=")
    return make_error(ec::invalid_request,
                      "SCRAM channel binding (SCRAM-SHA-256-PLUS) is not "
                      "supported");
  if (m.size() < 3 || (m[0] != 'n' && m[0] != 'y') || m[1] != ',')
    return malformed(what, "it does not start with the gs2 header n,,");
  if (m.substr(2, 2) == "a=")
    return make_error(ec::invalid_request,
                      "SCRAM authorization identities (a=) are not supported");
  if (m[2] != ',')
    return malformed(what, "it does not start with the gs2 header n,,");
  auto fields = split(m.substr(3));
  if (has_key(fields[0], 'm'))
    return make_error(ec::invalid_request,
                      "mandatory SCRAM extensions (m=) are not supported");
  if (fields.size() < 2 || !has_key(fields[0], 'n') || !has_key(fields[1], 'r'))
    return malformed(what, "expected n=<user>,r=<nonce> after n,,");
  auto user = unescape_saslname(fields[0].substr(2));
  if (!user)
    return malformed(what, "the user name is empty or has an '=' other than "
                           "=2C and =3D");
  if (!valid_nonce(fields[1].substr(2)))
    return malformed(what, "the nonce is empty");
  for (size_t i = 2; i < fields.size(); ++i)
    if (!is_attribute(fields[i]))
      return malformed(what, "an extension is not <letter>=<value>");
  return std::move(*user);
}

/// Checks a server-first-message against the client's nonce.
caf::error check_server_first(std::string_view m,
                              std::string_view client_nonce) {
  constexpr std::string_view what = "server-first message";
  if (auto problem = shape_problem(m))
    return malformed(what, *problem);
  if (has_key(m, 'e'))
    return make_error(ec::authentication_failed,
                      "the server refused the login: "
                        + std::string{m.substr(2, 200)});
  auto fields = split(m);
  if (has_key(fields[0], 'm'))
    return make_error(ec::invalid_request,
                      "mandatory SCRAM extensions (m=) are not supported");
  if (fields.size() < 3 || !has_key(fields[0], 'r') || !has_key(fields[1], 's')
      || !has_key(fields[2], 'i'))
    return malformed(what, "expected r=<nonce>,s=<salt>,i=<iterations>");
  auto nonce = fields[0].substr(2);
  if (!valid_nonce(nonce) || nonce.size() <= client_nonce.size()
      || nonce.substr(0, client_nonce.size()) != client_nonce)
    return make_error(ec::authentication_failed,
                      "the server's SCRAM nonce does not extend the client's");
  if (fields[1].size() == 2)
    return malformed(what, "the salt is empty");
  auto digits = fields[2].substr(2);
  int64_t iterations = 0;
  auto [end, parse_error] = std::from_chars(digits.data(), digits.data() + digits.size(),
                                   iterations);
  if (digits.empty() || digits.size() > 9 || parse_error != std::errc{}
      || end != digits.data() + digits.size())
    return malformed(what, "the iteration count is not a number");
  if (iterations < default_scram_iterations
      || iterations > max_scram_iterations)
    return make_error(ec::invalid_request,
                      "the server asks for " + std::to_string(iterations)
                        + " SCRAM iterations; this client accepts "
                        + std::to_string(default_scram_iterations) + " to "
                        + std::to_string(max_scram_iterations));
  for (size_t i = 3; i < fields.size(); ++i)
    if (!is_attribute(fields[i]))
      return malformed(what, "an extension is not <letter>=<value>");
  return caf::none;
}

/// What a failed gsasl_step means on the server: malformed input, a
/// failure of the library itself, or (everything else) a failed login
/// that the caller learns nothing more about.
caf::error server_step_error(int rc, std::string_view what) {
  switch (rc) {
    case GSASL_MECHANISM_PARSE_ERROR:
    case GSASL_BASE64_ERROR:
      return malformed(what, gsasl_strerror(rc));
    case GSASL_MALLOC_ERROR:
      return gsasl_failure(rc);
    default:
      return login_failed();
  }
}

caf::error client_step_error(int rc, std::string_view what,
                             std::string_view authentication_text) {
  switch (rc) {
    case GSASL_MECHANISM_PARSE_ERROR:
    case GSASL_BASE64_ERROR:
      return malformed(what, gsasl_strerror(rc));
    case GSASL_AUTHENTICATION_ERROR:
      return make_error(ec::authentication_failed,
                        std::string{authentication_text});
    case GSASL_SASLPREP_ERROR:
      return make_error(ec::invalid_request,
                        "the password or user name cannot be prepared for "
                        "SCRAM (SASLprep refused it)");
    default:
      return gsasl_failure(rc);
  }
}

} // namespace

// -- scram_server -------------------------------------------------------------

struct scram_server::impl {
  enum class phase { start, first_sent, done, failed };
  phase at = phase::start;
  session_ptr session;
  std::string candidate; ///< the user client-first named
  std::string user;      ///< set once final() succeeded
  // For accept_doubled_client_nonce (kept only then):
  bool doubled_nonce_ok = false;
  std::string gs2_header;        ///< "n,," or "y,,"
  std::string client_first_bare; ///< client-first without the gs2 header
  std::string client_nonce;
  std::string server_first;
  std::string server_nonce;      ///< the whole r= of server-first
  std::string stored_key;
  std::string server_key;

  ~impl() {
    OPENSSL_cleanse(stored_key.data(), stored_key.size());
    OPENSSL_cleanse(server_key.data(), server_key.size());
  }
};

namespace {

std::optional<std::string> hmac_sha256(std::string_view key, std::string_view msg) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md.data(), &len)
      == nullptr)
    return std::nullopt;
  return std::string{reinterpret_cast<const char*>(md.data()), len};
}

std::optional<std::string> base64_decode(std::string_view text) {
  char* out = nullptr;
  size_t len = 0;
  if (gsasl_base64_from(text.data(), text.size(), &out, &len) != GSASL_OK)
    return std::nullopt;
  std::string result{out, len};
  gsasl_free(out);
  return result;
}

/// What verify_by_hand needs of the conversation.
struct conversation_view {
  const std::string& gs2_header;
  const std::string& client_first_bare;
  const std::string& server_first;
  const std::string& stored_key;
  const std::string& server_key;
};

/// Checks a client-final message whose nonce is librdkafka's doubled one
/// (see scram_server's constructor) against the conversation `st`; the
/// server-final message or the error.
caf::expected<std::string> verify_by_hand(const conversation_view& st,
                                          std::string_view client_final) {
  constexpr std::string_view what = "client-final message";
  auto at = client_final.rfind(",p=");
  if (at == std::string_view::npos)
    return malformed(what, "no proof (p=) at the end");
  auto without_proof = client_final.substr(0, at);
  auto fields = split(without_proof);
  auto binding = base64(st.gs2_header);
  if (fields.size() < 2 || !binding || fields[0] != "c=" + *binding)
    return login_failed(); // channel binding that does not match client-first
  auto proof = base64_decode(client_final.substr(at + 3));
  if (!proof || proof->size() != key_size)
    return malformed(what, "the proof is not base64 of 32 bytes");
  std::string auth_message = st.client_first_bare;
  auth_message += ',';
  auth_message += st.server_first;
  auth_message += ',';
  auth_message += without_proof;
  auto client_signature = hmac_sha256(st.stored_key, auth_message);
  auto server_signature = hmac_sha256(st.server_key, auth_message);
  if (!client_signature || !server_signature)
    return make_error(ec::io_error, "HMAC-SHA256 failed");
  std::string client_key(key_size, '\0');
  for (size_t i = 0; i < key_size; ++i)
    client_key[i] = static_cast<char>((*proof)[i] ^ (*client_signature)[i]);
  std::array<unsigned char, EVP_MAX_MD_SIZE> stored{};
  unsigned len = 0;
  auto hashed = EVP_Digest(client_key.data(), client_key.size(), stored.data(), &len,
                           EVP_sha256(), nullptr);
  OPENSSL_cleanse(client_key.data(), client_key.size());
  if (hashed != 1 || len != key_size || st.stored_key.size() != key_size
      || CRYPTO_memcmp(stored.data(), st.stored_key.data(), key_size) != 0)
    return login_failed();
  auto v = base64(*server_signature);
  if (!v)
    return make_error(ec::io_error, "base64 failed");
  return "v=" + *v;
}

} // namespace

scram_server::scram_server() : impl_(std::make_unique<impl>()) {
  // nop
}

scram_server::scram_server(bool accept_doubled_client_nonce)
  : impl_(std::make_unique<impl>()) {
  impl_->doubled_nonce_ok = accept_doubled_client_nonce;
}

scram_server::~scram_server() = default;
scram_server::scram_server(scram_server&&) noexcept = default;
scram_server& scram_server::operator=(scram_server&&) noexcept = default;

caf::expected<std::string> scram_server::first(std::string_view client_first,
                                               const lookup& find) {
  if (!impl_)
    return out_of_order();
  auto& st = *impl_;
  if (st.at != impl::phase::start) {
    st.at = impl::phase::failed;
    st.session.reset();
    return out_of_order();
  }
  st.at = impl::phase::failed; // until this call succeeds
  auto name = parse_client_first(client_first);
  if (!name)
    return name.error();
  // An unknown user, a name that cannot be a user, or a broken credential:
  // all go on with a decoy and fail at final(), as a wrong password does.
  std::optional<scram_credential> cred;
  if (!validate_user_name(*name) && find)
    cred = find(*name);
  if (!cred || cred->user != *name || validate_credential(*cred)) {
    auto d = decoy(*name);
    if (!d)
      return d.error();
    cred = std::move(*d);
  }
  auto session = start_session(true);
  if (!session)
    return session.error();
  auto err = set_credential(session->get(), *cred);
  if (st.doubled_nonce_ok) {
    st.stored_key = cred->stored_key;
    st.server_key = cred->server_key;
  }
  OPENSSL_cleanse(cred->stored_key.data(), cred->stored_key.size());
  OPENSSL_cleanse(cred->server_key.data(), cred->server_key.size());
  if (err)
    return err;
  auto r = step(session->get(), client_first);
  if (r.rc != GSASL_NEEDS_MORE || r.out.empty())
    return server_step_error(r.rc, "client-first message");
  if (st.doubled_nonce_ok) {
    st.gs2_header = std::string{client_first.substr(0, 3)};
    st.client_first_bare = std::string{client_first.substr(3)};
    st.client_nonce = std::string{split(client_first.substr(3))[1].substr(2)};
    st.server_first = r.out;
    st.server_nonce = std::string{split(r.out)[0].substr(2)};
  }
  st.session = std::move(*session);
  st.candidate = std::move(*name);
  st.at = impl::phase::first_sent;
  return std::move(r.out);
}

caf::expected<std::string> scram_server::final(std::string_view client_final) {
  if (!impl_)
    return out_of_order();
  auto& st = *impl_;
  // Whatever happens, the conversation ends here: gsasl would let a failed
  // proof be followed by another one on the same session.
  auto session = std::move(st.session);
  auto was = st.at;
  st.at = impl::phase::failed;
  if (was != impl::phase::first_sent)
    return out_of_order();
  constexpr std::string_view what = "client-final message";
  if (auto problem = shape_problem(client_final))
    return malformed(what, *problem);
  if (st.doubled_nonce_ok) {
    auto fields = split(client_final);
    if (fields.size() >= 2 && has_key(fields[1], 'r')
        && fields[1].substr(2) == st.client_nonce + st.server_nonce) {
      auto out = verify_by_hand(conversation_view{st.gs2_header, st.client_first_bare,
                                                  st.server_first, st.stored_key,
                                                  st.server_key},
                                client_final);
      if (!out)
        return out.error();
      st.user = std::move(st.candidate);
      st.at = impl::phase::done;
      return out;
    }
  }
  auto r = step(session.get(), client_final);
  if (r.rc != GSASL_OK || r.out.empty())
    return server_step_error(r.rc, what);
  st.user = std::move(st.candidate);
  st.at = impl::phase::done;
  return std::move(r.out);
}

const std::string& scram_server::user() const {
  static const std::string nobody;
  return impl_ ? impl_->user : nobody;
}

// -- scram_client -------------------------------------------------------------

struct scram_client::impl {
  enum class phase { start, first_sent, final_sent, done, failed };
  phase at = phase::start;
  std::string user;
  std::string password; ///< until first() hands it to the session
  std::string client_nonce;
  session_ptr session;

  ~impl() {
    OPENSSL_cleanse(password.data(), password.size());
  }

  caf::expected<std::string> first();
  caf::expected<std::string> final(std::string_view server_first);
  caf::error verify(std::string_view server_final);
};

caf::expected<std::string> scram_client::impl::first() {
  if (auto err = validate_user_name(user))
    return err;
  if (password.empty())
    return make_error(ec::invalid_request, "the password is empty");
  if (password.find('\0') != std::string::npos)
    return make_error(ec::invalid_request,
                      "a password may not contain a NUL byte");
  auto s = start_session(false);
  if (!s)
    return s.error();
  auto rc = gsasl_property_set(s->get(), GSASL_AUTHID, user.c_str());
  if (rc == GSASL_OK)
    rc = gsasl_property_set(s->get(), GSASL_PASSWORD, password.c_str());
  OPENSSL_cleanse(password.data(), password.size());
  password.clear();
  if (rc != GSASL_OK)
    return gsasl_failure(rc);
  auto r = step(s->get(), {});
  if (r.rc != GSASL_NEEDS_MORE)
    return client_step_error(r.rc, "client-first message",
                             "authentication failed");
  // "n,,n=<user>,r=<nonce>": the nonce the server must extend.
  auto pos = r.out.find(",r=");
  if (pos == std::string::npos)
    return make_error(ec::io_error, "GNU SASL wrote no client nonce");
  client_nonce = r.out.substr(pos + 3, r.out.find(',', pos + 3) - (pos + 3));
  session = std::move(*s);
  return std::move(r.out);
}

caf::expected<std::string>
scram_client::impl::final(std::string_view server_first) {
  if (auto err = check_server_first(server_first, client_nonce))
    return err;
  auto r = step(session.get(), server_first);
  // The session keeps the password and the salted password (hex) it
  // derived: neither is needed any more.
  gsasl_property_set(session.get(), GSASL_PASSWORD, nullptr);
  gsasl_property_set(session.get(), GSASL_SCRAM_SALTED_PASSWORD, nullptr);
  if (r.rc != GSASL_NEEDS_MORE)
    return client_step_error(r.rc, "server-first message",
                             "the server's SCRAM nonce does not extend the "
                             "client's");
  return std::move(r.out);
}

caf::error scram_client::impl::verify(std::string_view server_final) {
  constexpr std::string_view what = "server-final message";
  if (auto problem = shape_problem(server_final))
    return malformed(what, *problem);
  if (has_key(server_final, 'e'))
    return make_error(ec::authentication_failed,
                      "the server refused the login: "
                        + std::string{server_final.substr(2, 200)});
  if (!has_key(server_final, 'v'))
    return malformed(what, "expected v=<signature> or e=<error>");
  auto r = step(session.get(), server_final);
  if (r.rc != GSASL_OK)
    return client_step_error(r.rc, what, "the server's SCRAM signature is wrong");
  return caf::none;
}

scram_client::scram_client(std::string user, std::string password)
  : impl_(std::make_unique<impl>()) {
  impl_->user = std::move(user);
  impl_->password = std::move(password);
}

scram_client::~scram_client() = default;
scram_client::scram_client(scram_client&&) noexcept = default;
scram_client& scram_client::operator=(scram_client&&) noexcept = default;

caf::expected<std::string> scram_client::first() {
  if (!impl_ || impl_->at != impl::phase::start) {
    if (impl_) {
      impl_->at = impl::phase::failed;
      impl_->session.reset();
    }
    return out_of_order();
  }
  auto res = impl_->first();
  impl_->at = res ? impl::phase::first_sent : impl::phase::failed;
  if (!res)
    impl_->session.reset();
  return res;
}

caf::expected<std::string> scram_client::final(std::string_view server_first) {
  if (!impl_ || impl_->at != impl::phase::first_sent) {
    if (impl_) {
      impl_->at = impl::phase::failed;
      impl_->session.reset();
    }
    return out_of_order();
  }
  auto res = impl_->final(server_first);
  impl_->at = res ? impl::phase::final_sent : impl::phase::failed;
  if (!res)
    impl_->session.reset();
  return res;
}

caf::error scram_client::verify(std::string_view server_final) {
  if (!impl_ || impl_->at != impl::phase::final_sent) {
    if (impl_) {
      impl_->at = impl::phase::failed;
      impl_->session.reset();
    }
    return out_of_order();
  }
  auto err = impl_->verify(server_final);
  impl_->at = err ? impl::phase::failed : impl::phase::done;
  impl_->session.reset();
  return err;
}

} // namespace ferry
