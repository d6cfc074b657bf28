#include "broker/tls_server.hpp"

#include "broker/error.hpp"

namespace ferry {

namespace ssl = boost::asio::ssl;

caf::expected<std::shared_ptr<ssl::context>>
make_server_tls_context(const tls_server_config& t, std::string_view port_name) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  auto fail = [&](const std::string& what, const std::string& file) {
    return make_error(ec::invalid_config, std::string{port_name} + " TLS: cannot load the "
                                            + what + " " + file + ": " + ec.message());
  };
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                     | ssl::context::no_sslv3 | ssl::context::no_tlsv1
                     | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  ctx->use_certificate_chain_file(t.certificate, ec);
  if (ec)
    return fail("certificate", t.certificate);
  ctx->use_private_key_file(t.key, ssl::context::pem, ec);
  if (ec)
    return fail("key", t.key);
  ctx->load_verify_file(t.ca, ec);
  if (ec)
    return fail("CA file", t.ca);
  auto mode = ssl::verify_peer;
  if (t.require_client_certificate)
    mode |= ssl::verify_fail_if_no_peer_cert;
  ctx->set_verify_mode(mode, ec);
  if (ec)
    return fail("verify mode for", t.ca);
  return ctx;
}

} // namespace ferry
