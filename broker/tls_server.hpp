#pragma once
// The server side of TLS on the ports Ferry serves with Boost.Asio (the
// HTTP API, the metrics port with TLS, the Kafka listener): one OpenSSL
// context built from PEM files, TLS 1.2 or newer only, client certificates
// checked against a CA. (The CAF port's TLS is libcaf_openssl's:
// actors/client/tls.hpp.) Plain OpenSSL, so broker/ needs no Boost: a port
// wraps the context in `boost::asio::ssl::context{ctx.release()}`, which
// then owns it.

#include <caf/expected.hpp>

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

namespace ferry {

/// The TLS files of a port (PEM).
struct tls_server_config {
  std::string certificate; ///< the server's certificate (chain)
  std::string key;         ///< its private key, unencrypted
  std::string ca;          ///< CAs a client certificate must chain to
  /// true: a client without a valid certificate from `ca` is refused
  /// (Kafka's ssl.client.auth=required). false: one is asked for, and a
  /// presented one must be valid, but a client may come without (requested).
  bool require_client_certificate = true;

  bool enabled() const { return !certificate.empty(); }
};

struct ssl_ctx_deleter {
  void operator()(SSL_CTX* ctx) const {
    SSL_CTX_free(ctx);
  }
};

using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, ssl_ctx_deleter>;

/// A server context for `t`, or ec::invalid_config naming the file that did
/// not load ("<port_name> TLS: cannot load the certificate F: why").
caf::expected<ssl_ctx_ptr> make_server_tls_context(const tls_server_config& t,
                                                   std::string_view port_name);

} // namespace ferry
