#include "broker/tls_server.hpp"

#include "broker/error.hpp"

#include <openssl/err.h>

namespace ferry {

namespace {

/// The newest OpenSSL error of this thread, in words (and the queue emptied).
std::string openssl_error() {
  auto code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0)
    return "unknown error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

} // namespace

caf::expected<ssl_ctx_ptr> make_server_tls_context(const tls_server_config& t,
                                                   std::string_view port_name) {
  ERR_clear_error();
  ssl_ctx_ptr ctx{SSL_CTX_new(TLS_server_method())};
  if (!ctx)
    return make_error(ec::invalid_config,
                      std::string{port_name} + " TLS: no context: " + openssl_error());
  auto fail = [&](const std::string& what, const std::string& file) {
    return make_error(ec::invalid_config, std::string{port_name} + " TLS: cannot load the "
                                            + what + " " + file + ": " + openssl_error());
  };
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_ALL | SSL_OP_SINGLE_DH_USE);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), t.certificate.c_str()) != 1)
    return fail("certificate", t.certificate);
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), t.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("key", t.key);
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return fail("key (it does not match the certificate)", t.key);
  if (SSL_CTX_load_verify_locations(ctx.get(), t.ca.c_str(), nullptr) != 1)
    return fail("CA file", t.ca);
  int mode = SSL_VERIFY_PEER;
  if (t.require_client_certificate)
    mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(ctx.get(), mode, nullptr);
  return ctx;
}

} // namespace ferry
