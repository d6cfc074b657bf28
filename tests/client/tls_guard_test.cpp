// actors/client/tls.cpp: this process's SSL_read and SSL_write are the client
// library's, which clear OpenSSL's error queue first (what that prevents is
// shown across real processes by Tls.ClientsComingAndGoingLeaveTheNodeLinksUp),
// and SSL_read fills the caller's buffer across TLS records.

#include "actors/client/tls.hpp"

#include <gtest/gtest.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

namespace {

TEST(OpenSslErrorQueue, SslReadAndWriteAreInterposed) {
  EXPECT_TRUE(ferry::openssl_error_queue_guarded());
}

// A TLS connection over a non-blocking socket pair in this thread: a
// throwaway self-signed EC certificate on the server side, the client
// verifying nothing (the test is about reads, not trust).
class tls_pair {
public:
  tls_pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
      return;
    for (int fd : fds)
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    fds_[0] = fds[0];
    fds_[1] = fds[1];
    key_ = EVP_EC_gen("P-256");
    cert_ = X509_new();
    if (!key_ || !cert_)
      return;
    ASN1_INTEGER_set(X509_get_serialNumber(cert_), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert_), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert_), 3600);
    X509_set_pubkey(cert_, key_);
    auto* name = X509_get_subject_name(cert_);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
    X509_set_issuer_name(cert_, name);
    if (X509_sign(cert_, key_, EVP_sha256()) <= 0)
      return;
    server_ctx_ = SSL_CTX_new(TLS_server_method());
    client_ctx_ = SSL_CTX_new(TLS_client_method());
    if (!server_ctx_ || !client_ctx_ || SSL_CTX_use_certificate(server_ctx_, cert_) != 1
        || SSL_CTX_use_PrivateKey(server_ctx_, key_) != 1)
      return;
    server_ = SSL_new(server_ctx_);
    client_ = SSL_new(client_ctx_);
    SSL_set_fd(server_, fds_[0]);
    SSL_set_fd(client_, fds_[1]);
    SSL_set_accept_state(server_);
    SSL_set_connect_state(client_);
    for (int i = 0; i < 100; ++i) {
      auto s = SSL_do_handshake(server_);
      auto c = SSL_do_handshake(client_);
      if (s == 1 && c == 1) {
        ready_ = true;
        return;
      }
    }
  }

  ~tls_pair() {
    if (server_)
      SSL_free(server_);
    if (client_)
      SSL_free(client_);
    SSL_CTX_free(server_ctx_);
    SSL_CTX_free(client_ctx_);
    X509_free(cert_);
    EVP_PKEY_free(key_);
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }

  bool ready() const { return ready_; }
  SSL* server() { return server_; }
  SSL* client() { return client_; }

  /// Writes all of `data` from the client (the socket buffer holds it).
  bool send(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      auto n = SSL_write(client_, data.data() + done, static_cast<int>(data.size() - done));
      if (n <= 0)
        return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

private:
  int fds_[2] = {-1, -1};
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
  SSL_CTX* server_ctx_ = nullptr;
  SSL_CTX* client_ctx_ = nullptr;
  SSL* server_ = nullptr;
  SSL* client_ = nullptr;
  bool ready_ = false;
};

std::string pattern(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<char>('a' + i % 23);
  return out;
}

// OpenSSL's own SSL_read returns one record (at most 16 KiB) per call;
// libcaf_openssl pays three signal system calls around each call, so the
// interposed one reads on until the buffer is full.
TEST(OpenSslReads, OneCallFillsTheBufferAcrossRecords) {
  tls_pair p;
  ASSERT_TRUE(p.ready());
  auto data = pattern(100'000); // 7 records
  ASSERT_TRUE(p.send(data));
  std::string got(data.size(), '\0');
  ASSERT_EQ(SSL_read(p.server(), got.data(), static_cast<int>(got.size())),
            static_cast<int>(data.size()));
  EXPECT_EQ(got, data);
}

// Fewer bytes than asked: the call returns what there is, and the next one
// reports WANT_READ as OpenSSL's would (the socket is empty).
TEST(OpenSslReads, ReturnsWhatThereIsThenWantRead) {
  tls_pair p;
  ASSERT_TRUE(p.ready());
  auto data = pattern(40'000);
  ASSERT_TRUE(p.send(data));
  std::string got(65'536, '\0');
  ASSERT_EQ(SSL_read(p.server(), got.data(), static_cast<int>(got.size())), 40'000);
  EXPECT_EQ(got.substr(0, 40'000), data);
  auto n = SSL_read(p.server(), got.data(), static_cast<int>(got.size()));
  EXPECT_LE(n, 0);
  EXPECT_EQ(SSL_get_error(p.server(), n), SSL_ERROR_WANT_READ);
  // More bytes come: read as before.
  ASSERT_TRUE(p.send(data));
  EXPECT_EQ(SSL_read(p.server(), got.data(), static_cast<int>(got.size())), 40'000);
}

// A close after the data: the data first, the close on the next call.
TEST(OpenSslReads, ACloseAfterTheDataComesOnTheNextCall) {
  tls_pair p;
  ASSERT_TRUE(p.ready());
  auto data = pattern(20'000);
  ASSERT_TRUE(p.send(data));
  SSL_shutdown(p.client());
  std::string got(65'536, '\0');
  ASSERT_EQ(SSL_read(p.server(), got.data(), static_cast<int>(got.size())), 20'000);
  EXPECT_EQ(got.substr(0, 20'000), data);
  auto n = SSL_read(p.server(), got.data(), static_cast<int>(got.size()));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(SSL_get_error(p.server(), n), SSL_ERROR_ZERO_RETURN);
}

} // namespace
