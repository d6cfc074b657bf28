#pragma once
// The SCRAM-SHA-256 exchange (RFC 5802, RFC 7677), both ends, without
// channel binding, for the CAF port's in-band login: a client runs the
// exchange with the node's broker actor (client-first, server-first,
// client-final, server-final) and, once the server has checked the proof,
// receives a session token. The server needs no password: it checks the
// proof against the user's stored credential (broker/security.hpp), and the
// client checks the server's signature, so each side learns that the other
// knows the credential.
//
// The mechanics are GNU SASL's (libgsasl) SCRAM-SHA-256; this file parses
// each message strictly first, feeds the server the stored salt, iteration
// count, StoredKey and ServerKey, and keeps each conversation to one try.
//
//   client-first   n,,n=<user>,r=<client nonce>      ("y,," is accepted too;
//                                                     "p=..." and an
//                                                     authorization id are
//                                                     refused)
//   server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
//   client-final   c=biws,r=<both nonces>,p=<base64 proof>
//   server-final   v=<base64 server signature>
//
// User names follow RFC 5802's saslname escaping (',' is =2C, '=' is =3D);
// ferry user names ([A-Za-z0-9._@-]) never need it.
//
// The server says nothing about why a login failed: an unknown user gets a
// made-up salt (the same one on every try) and fails at final() with the
// very error a wrong password gives, authentication_failed "authentication
// failed". Each object is one conversation: after final() (success or not)
// or after any error, every further call fails with invalid_request, so a
// conversation cannot be used to try several proofs.

#include "broker/messages.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

/// The mechanism name on the wire.
inline constexpr std::string_view scram_sha256 = "SCRAM-SHA-256";

/// Server side of one exchange. Not thread-safe; one object per
/// conversation (different objects may run in parallel).
class scram_server {
public:
  /// The stored credential of a user, or nothing for an unknown user.
  using lookup
    = std::function<std::optional<scram_credential>(const std::string& user)>;

  scram_server();
  /// `accept_doubled_client_nonce`: also take the client-final message of
  /// librdkafka before 2.6.1 (Debian 12 ships 2.0.2), whose nonce is its
  /// client nonce followed by the whole server nonce (which already starts
  /// with the client nonce), and whose proof is computed over that message.
  /// Kafka 3.x brokers accept it (they compare with endsWith); the Kafka
  /// listener does too, for exactly that form. The proof is then checked
  /// here (RFC 5802 section 3) instead of by GNU SASL, which only takes the
  /// correct nonce. Still one try per conversation, still bound to this
  /// conversation's server nonce.
  explicit scram_server(bool accept_doubled_client_nonce);
  ~scram_server();
  scram_server(scram_server&&) noexcept;
  scram_server& operator=(scram_server&&) noexcept;
  scram_server(const scram_server&) = delete;
  scram_server& operator=(const scram_server&) = delete;

  /// client-first-message ("n,,n=alice,r=NONCE") -> server-first-message.
  /// invalid_request for a malformed message (or a second call). An unknown
  /// user, or a credential that fails validate_credential, is not reported
  /// here: final() then fails exactly as for a wrong password.
  caf::expected<std::string> first(std::string_view client_first,
                                   const lookup& find);

  /// client-final-message -> server-final-message ("v=...").
  /// authentication_failed "authentication failed" for a wrong proof, a
  /// nonce or channel-binding field that does not match this conversation,
  /// or an unknown user; invalid_request for a malformed message, and for a
  /// call before first() or after final() (a second final() never checks
  /// the proof again).
  caf::expected<std::string> final(std::string_view client_final);

  /// The authenticated user (empty until final() succeeded).
  const std::string& user() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Client side of one exchange. Not thread-safe.
class scram_client {
public:
  scram_client(std::string user, std::string password);
  ~scram_client();
  scram_client(scram_client&&) noexcept;
  scram_client& operator=(scram_client&&) noexcept;
  scram_client(const scram_client&) = delete;
  scram_client& operator=(const scram_client&) = delete;

  /// The client-first-message. invalid_request for a user name that
  /// validate_user_name refuses or an empty password (or a second call).
  caf::expected<std::string> first();

  /// server-first-message -> client-final-message. authentication_failed
  /// when the server's nonce does not extend ours (or for an "e=" answer);
  /// invalid_request for a malformed message or an iteration count outside
  /// [default_scram_iterations, max_scram_iterations] (a server cannot make
  /// the client weaken the hashing, nor spin for minutes).
  caf::expected<std::string> final(std::string_view server_first);

  /// Checks the server-final-message: authentication_failed "the server's
  /// SCRAM signature is wrong" (a server that does not know the credential),
  /// or "the server refused the login: <e= value>"; invalid_request when
  /// malformed or out of order.
  caf::error verify(std::string_view server_final);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace ferry
