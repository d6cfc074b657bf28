#pragma once
// The one HTTP GET every test uses: a minimal HTTP/1.0 client
// (Connection: close) for 127.0.0.1, e.g. a /metrics page or the HTTP API;
// http_request() also sends a method and a JSON body (the chaos suite's
// HTTP producer).
// Header-only, no CAF: the metrics unit tests use it as well as the
// multi-process ones (tests/integration/process.hpp includes it).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ferry::test {

/// The answer of http_get().
struct http_response {
  int status = 0; ///< 0: no answer (see error)
  std::string head; ///< status line and header lines, as sent
  std::string body;
  std::string error;
};

/// `method` `target` on 127.0.0.1:`port` with `body` (sent as JSON when
/// not empty), bounded by `timeout` per socket operation.
inline http_response http_request(uint16_t port, const std::string& method,
                                  const std::string& target, const std::string& body,
                                  std::chrono::milliseconds timeout) {
  http_response res;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    res.error = std::strerror(errno);
    return res;
  }
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    res.error = std::string{"connect: "} + std::strerror(errno);
    ::close(fd);
    return res;
  }
  auto req = method + " " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty())
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size())
           + "\r\n";
  req += "\r\n" + body;
  size_t sent = 0;
  while (sent < req.size()) {
    auto n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      res.error = std::string{"send: "} + std::strerror(errno);
      ::close(fd);
      return res;
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      res.error = std::string{"recv: "} + std::strerror(errno);
      break;
    }
    if (n == 0)
      break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
    if (res.error.empty())
      res.error = "malformed response: " + raw.substr(0, 200);
    return res;
  }
  auto sp = raw.find(' ');
  res.status = std::atoi(raw.c_str() + sp + 1);
  res.head = raw.substr(0, head_end);
  res.body = raw.substr(head_end + 4);
  return res;
}

/// GET `target` from 127.0.0.1:`port`, bounded by `timeout` per socket
/// operation.
inline http_response http_get(uint16_t port, const std::string& target,
                              std::chrono::milliseconds timeout = std::chrono::seconds{5}) {
  return http_request(port, "GET", target, "", timeout);
}

} // namespace ferry::test
