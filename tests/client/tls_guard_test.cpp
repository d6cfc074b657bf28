// actors/client/tls.cpp: this process's SSL_read and SSL_write are the client
// library's, which clear OpenSSL's error queue first (what that prevents is
// shown across real processes by Tls.ClientsComingAndGoingLeaveTheNodeLinksUp).

#include "actors/client/tls.hpp"

#include <gtest/gtest.h>

namespace {

TEST(OpenSslErrorQueue, SslReadAndWriteAreInterposed) {
  EXPECT_TRUE(ferry::openssl_error_queue_guarded());
}

} // namespace
