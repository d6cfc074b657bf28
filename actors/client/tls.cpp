#include "actors/client/tls.hpp"

#include "broker/error.hpp"

#include <caf/openssl/manager.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

// -- OpenSSL's error queue and libcaf_openssl -----------------------------------
//
// OpenSSL keeps one error queue per thread, and SSL_get_error() reports
// SSL_ERROR_SSL for *any* failed call while that queue holds an entry, even
// one another connection left behind. libcaf_openssl 0.17 drains the queue
// only inside CAF_LOG_INFO(... get_ssl_error()), which Debian's build (no
// CAF logger) compiles away. So one connection that ended badly on CAF's
// multiplexer thread (a client that exits without close_notify, a refused
// handshake) left an error there, and the next SSL_read of every other
// connection on that thread that merely had no data (WANT_READ) was taken
// as fatal: each client disconnect closed a node's links to its peers, and
// followers' fetches over them stalled (2026-12-02, seen with strace: the
// node closed both peer sockets right after a read returned EAGAIN, ~5 ms
// after a ferryctl connection ended). The fix is what OpenSSL asks of every
// caller: clear the queue before each SSL_read and SSL_write. These two
// definitions interpose OpenSSL's for every library of the process
// (libcaf_openssl's calls bind to them: the linker exports them because
// libcaf_openssl.so refers to them) and call the real ones. Beast's calls
// pass here too; asio clears the queue itself, so nothing changes for it.

extern "C" {

// SSL_read also fills `buf` across TLS records: OpenSSL returns at most
// one record (16 KiB) per call, and libcaf_openssl wraps each of its calls
// in three signal system calls (CAF_BLOCK_SIGPIPE: block SIGPIPE, drain
// it, restore the mask). CAF asks for a BASP message's payload in one
// read, so reading on here until it is full or the socket has nothing more
// (the next call fails) saves those calls for every further record of the
// payload (tests/bench/README.md, "Counting system calls"). Returning fewer
// bytes than asked is what SSL_read always may do; a failure after some
// bytes is left for the caller's next call, which meets it again (the
// connection's state keeps it: WANT_READ until more bytes come, the
// closed or failed state for good).
int SSL_read(SSL* ssl, void* buf, int num) {
  using fn = int (*)(SSL*, void*, int);
  static const auto real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "SSL_read"));
  ERR_clear_error();
  auto got = real(ssl, buf, num);
  if (got <= 0)
    return got;
  auto* out = static_cast<char*>(buf);
  while (got < num) {
    ERR_clear_error();
    auto more = real(ssl, out + got, num - got);
    if (more <= 0) {
      ERR_clear_error();
      break;
    }
    got += more;
  }
  return got;
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  using fn = int (*)(SSL*, const void*, int);
  static const auto real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "SSL_write"));
  ERR_clear_error();
  return real(ssl, buf, num);
}

} // extern "C"

namespace ferry {

/// True when SSL_read and SSL_write of this process are the ones above.
bool openssl_error_queue_guarded() {
  using fn = int (*)(SSL*, void*, int);
  auto global = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "SSL_read"));
  return global == &::SSL_read;
}

namespace {

/// The reasons OpenSSL queued, oldest first; clears the queue.
std::string openssl_reason() {
  std::string out;
  while (auto code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? "no reason given" : out;
}

caf::error bad(std::string text) {
  return make_error(ec::invalid_config, std::move(text));
}

caf::error unreadable(const char* what, const std::string& file) {
  std::ifstream in{file};
  if (in)
    return {};
  return bad(std::string{"cannot read TLS "} + what + " " + file + ": "
             + std::strerror(errno));
}

// An encrypted key would make OpenSSL prompt on the terminal: refuse instead.
extern "C" int no_passphrase(char*, int, int, void*) {
  return 0;
}

struct ctx_deleter {
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
};
struct store_ctx_deleter {
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};

} // namespace

void tls_from_environment(tls_settings& s) {
  auto take = [](std::string& field, const char* var) {
    if (!field.empty())
      return;
    if (auto* v = std::getenv(var))
      field = v;
  };
  take(s.certificate, "FERRY_TLS_CERT");
  take(s.key, "FERRY_TLS_KEY");
  take(s.ca, "FERRY_TLS_CA");
}

bool tls_from_local_cluster(tls_settings& s) {
  if (s.requested())
    return false;
  std::string dir = "ferry-cluster";
  if (auto env = std::getenv("FERRY_CLUSTER_DIR"); env != nullptr && *env != '\0')
    dir = env;
  tls_settings local{dir + "/tls/client.pem", dir + "/tls/client.key", dir + "/tls/ca.pem"};
  for (auto* f : {&local.certificate, &local.key, &local.ca})
    if (!std::ifstream{*f})
      return false;
  if (!std::ifstream{dir + "/brokers"})
    return false;
  s = std::move(local);
  return true;
}

caf::error check_tls(const tls_settings& s, tls_role role) {
  std::vector<std::string> missing;
  if (s.certificate.empty())
    missing.push_back("certificate");
  if (s.key.empty())
    missing.push_back("key");
  if (s.ca.empty())
    missing.push_back("CA file");
  if (!missing.empty()) {
    std::string list;
    for (auto& m : missing)
      list += (list.empty() ? "" : ", ") + m;
    return bad("TLS needs a certificate, its key and a CA file together (missing: "
               + list + "); without all three CAF would fall back to anonymous TLS");
  }
  if (auto err = unreadable("certificate", s.certificate))
    return err;
  if (auto err = unreadable("key", s.key))
    return err;
  if (auto err = unreadable("CA file", s.ca))
    return err;
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, ctx_deleter> ctx{SSL_CTX_new(TLS_method())};
  if (!ctx)
    return bad("cannot create an OpenSSL context: " + openssl_reason());
  SSL_CTX_set_default_passwd_cb(ctx.get(), no_passphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), s.certificate.c_str()) != 1)
    return bad("TLS certificate " + s.certificate
               + " holds no usable PEM certificate: " + openssl_reason());
  EVP_PKEY* pkey = nullptr;
  if (auto* bio = BIO_new_file(s.key.c_str(), "r")) {
    pkey = PEM_read_bio_PrivateKey(bio, nullptr, no_passphrase, nullptr);
    BIO_free(bio);
  }
  if (!pkey)
    return bad("TLS key " + s.key + " holds no usable, unencrypted PEM private key: "
               + openssl_reason());
  auto used = SSL_CTX_use_PrivateKey(ctx.get(), pkey);
  EVP_PKEY_free(pkey);
  if (used != 1 || SSL_CTX_check_private_key(ctx.get()) != 1)
    return bad("TLS key " + s.key + " does not belong to the certificate "
               + s.certificate + ": " + openssl_reason());
  if (SSL_CTX_load_verify_locations(ctx.get(), s.ca.c_str(), nullptr) != 1)
    return bad("TLS CA file " + s.ca + " holds no usable PEM certificate: "
               + openssl_reason());
  auto* leaf = SSL_CTX_get0_certificate(ctx.get());
  if (role == tls_role::client) {
    if (!leaf)
      return bad("cannot check the TLS certificate " + s.certificate);
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0)
      return bad("TLS certificate " + s.certificate + " has expired");
    if (X509_cmp_current_time(X509_get0_notBefore(leaf)) >= 0)
      return bad("TLS certificate " + s.certificate + " is not valid yet");
    return {};
  }
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  std::unique_ptr<X509_STORE_CTX, store_ctx_deleter> vctx{X509_STORE_CTX_new()};
  if (!leaf || !vctx
      || X509_STORE_CTX_init(vctx.get(), SSL_CTX_get_cert_store(ctx.get()), leaf, chain)
           != 1)
    return bad("cannot check the TLS certificate " + s.certificate + ": "
               + openssl_reason());
  if (X509_verify_cert(vctx.get()) != 1) {
    auto code = X509_STORE_CTX_get_error(vctx.get());
    ERR_clear_error();
    return bad("TLS certificate " + s.certificate + " does not verify against the CA file "
               + s.ca + ": " + X509_verify_cert_error_string(code));
  }
  return {};
}

void configure_tls(caf::actor_system_config& cfg, const tls_settings& s) {
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = s.certificate;
  cfg.openssl_key = s.key;
  cfg.openssl_cafile = s.ca;
}

bool uses_tls(const caf::actor_system& sys) {
  return sys.has_openssl_manager() && !sys.config().openssl_cafile.empty();
}

caf::expected<int64_t> certificate_seconds_left(const std::string& file) {
  ERR_clear_error();
  auto* bio = BIO_new_file(file.c_str(), "r");
  if (!bio)
    return bad("cannot read TLS certificate " + file + ": " + openssl_reason());
  auto* cert = PEM_read_bio_X509(bio, nullptr, no_passphrase, nullptr);
  BIO_free(bio);
  if (!cert)
    return bad("TLS certificate " + file + " holds no PEM certificate: "
               + openssl_reason());
  int days = 0;
  int secs = 0;
  auto ok = ASN1_TIME_diff(&days, &secs, nullptr, X509_get0_notAfter(cert));
  X509_free(cert);
  if (ok != 1)
    return bad("TLS certificate " + file + " has an unreadable expiry date");
  return int64_t{days} * 86400 + secs;
}

} // namespace ferry
