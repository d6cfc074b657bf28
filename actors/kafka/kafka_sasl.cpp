// The Kafka listener's SASL login (ferryd --auth scram): SaslHandshake and
// SaslAuthenticate (or, after a v0 handshake, raw token frames), with the
// mechanisms PLAIN (RFC 4616: the password, checked against the user's
// stored SCRAM credential) and SCRAM-SHA-256 (RFC 5802/7677, through
// broker/scram_exchange.hpp: the password never crosses the wire). The
// users are the metadata quorum's, the same as for HTTP and the CAF port.
//
// Until a connection has logged in it may send only ApiVersions and the
// two SASL requests; anything else closes it (as Kafka does). A failed
// login is answered with SASL_AUTHENTICATION_FAILED ("unknown user or
// wrong password", never which) and the connection closes; it counts
// against the client's address (broker/login_throttle.hpp): past the
// allowance every login from there is refused until its lockout ends,
// without checking the password. Failed logins go to the log and the audit
// log with the claimed user name, never a password or proof.
//
// A logged-in connection keeps its user until it closes, except that a
// user deleted or given a new password since the login is closed at its
// next request (checked when the users change, not on every request).

#include "actors/kafka/kafka_internal.hpp"

#include "broker/error.hpp"
#include "broker/kafka_protocol.hpp"
#include "broker/security.hpp"

#include <openssl/crypto.h>

namespace ferry::kafka_detail {

namespace {

constexpr std::string_view plain_mechanism = "PLAIN";

const std::vector<std::string>& offered_mechanisms() {
  static const std::vector<std::string> xs{std::string{plain_mechanism},
                                           std::string{scram_sha256}};
  return xs;
}

/// A raw token frame (after a v0 handshake): a 4-byte size and the token.
std::string raw_frame(std::string_view token) {
  kafka::writer w;
  w.i32(static_cast<int32_t>(token.size()));
  std::string out = std::move(w.buffer());
  out.append(token);
  return out;
}

/// The user name of a SCRAM client-first message ("n,,n=alice,r=..."), or
/// "" when there is none to read.
std::string claimed_scram_user(std::string_view first) {
  auto i = first.find(",n=");
  if (i == std::string_view::npos)
    return {};
  auto rest = first.substr(i + 3);
  auto name = std::string{rest.substr(0, rest.find(','))};
  return validate_user_name(name) ? std::string{} : name;
}

caf::error refused() {
  return make_error(ec::authentication_failed,
                    "unknown user or wrong password");
}

} // namespace

void connection::login_failed(const std::string& user, const std::string& why) {
  auto failures = core_.logins.failed(address_);
  log::warn("kafka: login failed for user '{}' from {} ({} failed since the last "
            "success from there): {}",
            user, peer_, failures, why);
  core_.audit(user, peer_, "login", "cluster", "denied", why);
}

void connection::logged_in(const scram_credential& cred, uint64_t version) {
  user_ = cred.user;
  stored_key_ = cred.stored_key;
  checked_version_ = version;
  stage_ = sasl_stage::open;
  raw_tokens_ = false;
  scram_.reset();
  core_.logins.succeeded(address_);
  log::info("kafka: user '{}' logged in from {} ({})", user_, peer_, mechanism_);
}

bool connection::still_valid() {
  if (!core_.auth() || user_.empty())
    return true;
  auto& sec = *core_.cfg.security;
  auto version = sec.version();
  if (version == checked_version_)
    return true;
  auto cred = sec.user(user_);
  if (!cred || !same_secret(cred->stored_key, stored_key_)) {
    auto why = "user '" + user_ + "' was deleted or given a new password since it logged in";
    core_.audit(user_, peer_, "request", "cluster", "denied", why);
    log::info("kafka: closing the connection from {}: {}", peer_, why);
    close({});
    return false;
  }
  checked_version_ = version;
  return true;
}

caf::expected<std::string> connection::next_token(const std::string& token) {
  auto& sec = *core_.cfg.security;
  if (!sec.loaded())
    return make_error(ec::security_loading,
                      "the node is still loading users and ACLs: try again");
  if (auto wait = core_.logins.locked_for(address_); wait.count() > 0) {
    auto secs = std::to_string((wait.count() + 999) / 1000);
    core_.audit(claimed_user_, peer_, "login", "cluster", "denied", "locked out");
    return make_error(ec::login_throttled, "too many failed logins from " + address_
                                             + ": try again in " + secs + " s");
  }
  if (mechanism_ == plain_mechanism) {
    // authzid NUL authcid NUL password (RFC 4616).
    auto first = token.find('\0');
    auto second = first == std::string::npos ? first : token.find('\0', first + 1);
    if (second == std::string::npos || token.find('\0', second + 1) != std::string::npos) {
      login_failed("", "malformed PLAIN token");
      return make_error(ec::authentication_failed,
                        "malformed PLAIN token (authzid NUL user NUL password)");
    }
    auto authzid = token.substr(0, first);
    auto user = token.substr(first + 1, second - first - 1);
    std::string password = token.substr(second + 1);
    if (!authzid.empty() && authzid != user) {
      OPENSSL_cleanse(password.data(), password.size());
      login_failed(user, "PLAIN authorization id '" + authzid + "' is not the user");
      return make_error(ec::authentication_failed,
                        "an authorization id other than the user is not supported");
    }
    auto version = sec.version();
    auto cred = sec.user(user);
    bool ok = cred && verify_password(*cred, password);
    OPENSSL_cleanse(password.data(), password.size());
    if (!ok) {
      login_failed(user, cred ? "wrong password" : "unknown user");
      return refused();
    }
    logged_in(*cred, version);
    return std::string{};
  }
  if (stage_ == sasl_stage::authenticate) {
    claimed_user_ = claimed_scram_user(token);
    // librdkafka before 2.6.1 (Debian 12's kcat, confluent-kafka) doubles
    // its nonce in client-final; Kafka 3.x takes that, so this port does.
    scram_ = std::make_unique<scram_server>(true);
    auto registry = core_.cfg.security;
    auto first = scram_->first(token, [registry](const std::string& name) {
      return registry->user(name);
    });
    if (!first) {
      // Unknown users are not told apart here (they fail at the proof).
      login_failed(claimed_user_, "malformed SCRAM client-first message: "
                                    + describe(first.error()));
      return make_error(ec::authentication_failed, "malformed SCRAM client-first message");
    }
    stage_ = sasl_stage::scram_final;
    return std::move(*first);
  }
  auto version = sec.version();
  auto fin = scram_->final(token);
  auto user = scram_->user();
  scram_.reset();
  if (!fin) {
    login_failed(claimed_user_, sec.user(claimed_user_) ? "wrong password" : "unknown user");
    return refused();
  }
  auto cred = sec.user(user);
  if (!cred) // deleted between the two steps
    return refused();
  logged_in(*cred, version);
  return std::move(*fin);
}

void connection::serve_sasl(const kafka::request_header& h, kafka::reader& in,
                            uint64_t seq) {
  auto v = h.api_version;
  if (static_cast<kafka::api>(h.api_key) == kafka::api::sasl_handshake) {
    auto mechanism = kafka::read_sasl_handshake_request(in, v);
    if (!in.ok()) {
      close("SaslHandshake v" + std::to_string(v) + ": " + in.error());
      return;
    }
    auto answer = [&](kafka::error_code err, const std::vector<std::string>& offered) {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_sasl_handshake_response(w, v, err, offered);
      });
    };
    if (!core_.auth()) {
      // As a Kafka listener without SASL answers.
      on_complete(seq, answer(kafka::error_code::illegal_sasl_state, {}));
      return;
    }
    if (stage_ != sasl_stage::handshake) {
      answer_and_close(seq, answer(kafka::error_code::illegal_sasl_state,
                                   offered_mechanisms()));
      return;
    }
    auto& offered = offered_mechanisms();
    if (std::find(offered.begin(), offered.end(), mechanism) == offered.end()) {
      core_.audit("", peer_, "login", "cluster", "denied",
                  "unsupported SASL mechanism '" + mechanism + "'");
      answer_and_close(seq, answer(kafka::error_code::unsupported_sasl_mechanism, offered));
      return;
    }
    mechanism_ = mechanism;
    stage_ = sasl_stage::authenticate;
    raw_tokens_ = v == 0;
    on_complete(seq, answer(kafka::error_code::none, offered));
    return;
  }
  auto token = kafka::read_sasl_authenticate_request(in, v);
  if (!in.ok()) {
    close("SaslAuthenticate v" + std::to_string(v) + ": " + in.error());
    return;
  }
  auto answer = [&](kafka::error_code err, std::optional<std::string> message,
                    std::string_view bytes) {
    return respond(h, [&](kafka::writer& w) {
      // Session lifetime 0: the client never needs to log in again.
      kafka::write_sasl_authenticate_response(w, v, err, message, bytes, 0);
    });
  };
  if (!core_.auth() || stage_ == sasl_stage::open || stage_ == sasl_stage::handshake) {
    answer_and_close(seq, answer(kafka::error_code::illegal_sasl_state,
                                 std::string{core_.auth()
                                               ? "SaslAuthenticate before a SaslHandshake "
                                                 "or after the login"
                                               : "this port takes no SASL logins"},
                                 {}));
    return;
  }
  auto out = next_token(token);
  OPENSSL_cleanse(token.data(), token.size());
  if (!out) {
    answer_and_close(seq, answer(kafka::error_code::sasl_authentication_failed,
                                 describe(out.error()), {}));
    return;
  }
  on_complete(seq, answer(kafka::error_code::none, std::nullopt, *out));
}

void connection::serve_raw_token(const std::string& token, uint64_t seq) {
  auto out = next_token(token);
  if (!out) {
    // The v0 exchange has no error frame: Kafka closes the connection.
    close({});
    return;
  }
  on_complete(seq, raw_frame(*out));
}

bool may(listener_core& core, const connection& c, std::string_view resource_type,
         const std::string& name, std::string_view op) {
  if (!core.auth())
    return true;
  if (core.cfg.security->authorize(c.user(), resource_type, name, op))
    return true;
  auto why = describe_denial(c.user(), resource_type, name, op);
  log::debug("kafka: denied from {}: {}", c.peer(), why);
  core.audit(c.user(), c.peer(), std::string{op},
             resource_type == "cluster" ? std::string{"cluster"}
                                        : std::string{resource_type} + " " + name,
             "denied", why);
  return false;
}

} // namespace ferry::kafka_detail
