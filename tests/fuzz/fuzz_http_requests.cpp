// libFuzzer harness: the HTTP gateway's request handling, end to end
// (actors/http/http_gateway.hpp). Each input is the bytes a client sends on
// one connection: the harness writes them to a real gateway on 127.0.0.1,
// half-closes, and reads until the gateway closes. Behind the gateway is a
// broker that answers every request with an error, so everything the
// gateway does before and after asking the broker runs: Beast's parser and
// the limits, the target's path and query decoding, routing and 404/405,
// the body readers, Basic and Bearer authentication, the login throttle,
// the ACL checks and the error replies.
//
// The first byte picks the gateway: even, one with auth off; odd, one with
// auth on (user "fuzz", password "fuzz-pass"; the ACLs below). What must
// hold: the gateway answers or closes within 8 s; what it sends is a
// sequence of whole HTTP responses (a partial one only when the connection
// was reset); each error reply (4xx, 5xx) is the API's JSON error body with
// a code and a message; and no handler or reply renderer threw (their 500s
// say "internal error" or "rendering the reply failed"). Sanitizer reports
// in the gateway's threads count too.

#include "actors/http/http_gateway.hpp"

#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/security.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace {

namespace http = boost::beast::http;

[[noreturn]] void fail(const std::string& what, std::string_view reply) {
  std::fprintf(stderr, "fuzz_http_requests: %s\nreply (%zu bytes):\n%.*s\n", what.c_str(),
               reply.size(), static_cast<int>(std::min<size_t>(reply.size(), 2000)),
               reply.data());
  std::abort();
}

/// The broker: every request gets an error, picked by the request's type
/// (so one input always meets the same answers).
caf::behavior failing_broker(caf::event_based_actor* self) {
  self->set_default_handler(
    [](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
      static constexpr ferry::ec codes[] = {ferry::ec::not_leader, ferry::ec::unknown_topic,
                                            ferry::ec::request_timed_out,
                                            ferry::ec::unknown_group};
      auto token = x.content().type_token();
      return ferry::make_error(codes[token % std::size(codes)], "the fuzz broker refuses");
    });
  return {};
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor broker;
  std::unique_ptr<ferry::http_gateway> open;
  std::unique_ptr<ferry::http_gateway> secured;

  fixture() {
    ferry::log::set_level(ferry::log::level::off);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
    broker = sys->spawn(failing_broker);
    auto typed = caf::actor_cast<ferry::broker_actor>(broker);

    ferry::http_gateway_config gc;
    gc.port = 0;
    gc.threads = 2;
    gc.request_timeout = std::chrono::milliseconds{2000};
    gc.max_wait = std::chrono::milliseconds{1000};
    gc.long_poll_margin = std::chrono::milliseconds{1000};
    gc.idle_timeout = std::chrono::milliseconds{2000};
    gc.io_timeout = std::chrono::milliseconds{2000};
    gc.max_body_bytes = 64u << 10; // inputs reach 64 KiB: 413 is reachable
    gc.max_header_bytes = 8u << 10;
    open = start(gc, typed);

    auto registry = std::make_shared<ferry::security_registry>();
    auto cred = ferry::make_scram_credential("fuzz", "fuzz-pass");
    if (!cred)
      fail("no credential", "");
    std::vector<ferry::acl_entry> acls;
    auto acl = [&](std::string type, std::string name, std::string pattern,
                   std::string op, std::string permission) {
      ferry::acl_entry x{"fuzz", std::move(type), std::move(name), std::move(pattern),
                         std::move(op), std::move(permission)};
      if (auto err = ferry::normalize_acl(x))
        fail("bad ACL", "");
      acls.push_back(std::move(x));
    };
    acl("topic", "t", "prefixed", "all", "allow");
    acl("topic", "t-denied", "literal", "read", "deny");
    acl("group", "g", "literal", "read", "allow");
    acl("dlq", "*", "literal", "describe", "allow");
    acl("cluster", "cluster", "literal", "describe", "allow");
    registry->set({{"fuzz", *cred}}, std::move(acls));
    gc.security = registry;
    gc.login_failures_allowed = 1 << 30; // the throttle would hide the checks
    secured = start(gc, typed);
  }

  std::unique_ptr<ferry::http_gateway> start(const ferry::http_gateway_config& gc,
                                             ferry::broker_actor typed) {
    auto gw = ferry::http_gateway::listen(gc);
    if (!gw)
      fail("listen failed: " + caf::to_string(gw.error()), "");
    (*gw)->serve(*sys, typed);
    return std::move(*gw);
  }

};

// Never destroyed: libFuzzer ends the process with exit(), after the
// function-local statics that CAF and the gateway set up while running
// inputs are gone, so tearing the actor system down then crashes. Its
// threads are idle by then.
fixture* fx = nullptr;

/// Sends `in` on a new connection to `port`, half-closes, reads until the
/// gateway closes. Sets `reset` when the connection was reset.
std::string exchange(uint16_t port, std::string_view in, bool& reset) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    fail(std::string{"socket: "} + std::strerror(errno), "");
  timeval tv{8, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's timers send signals: a call they interrupt goes on (EINTR).
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINTR)
      fail(std::string{"connect: "} + std::strerror(errno), "");
    pollfd pfd{fd, POLLOUT, 0};
    while (::poll(&pfd, 1, 8000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 || (pfd.revents & POLLOUT) == 0)
      fail(std::string{"connect: "} + std::strerror(err), "");
  }
  reset = false;
  size_t sent = 0;
  while (sent < in.size()) {
    auto n = ::send(fd, in.data() + sent, in.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        fail("the gateway stopped reading for 8 s", "");
      break; // it answered and closed early (413, 431, 400): read that
    }
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[16384];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      fail("the gateway neither answered nor closed within 8 s", out);
    if (n < 0)
      reset = errno == ECONNRESET || errno == EPIPE;
    break;
  }
  // Close with a reset: no TIME_WAIT, so long runs do not use up ports.
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
  return out;
}

void check_error_body(unsigned status, std::string_view body, std::string_view all) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error")
      || !j["error"].is_object() || !j["error"].contains("code")
      || !j["error"]["code"].is_string() || !j["error"].contains("message")
      || !j["error"]["message"].is_string())
    fail("error reply " + std::to_string(status) + " without the API's error body", all);
  if (status == 500) {
    auto msg = j["error"]["message"].get<std::string>();
    if (msg.rfind("internal error", 0) == 0 || msg.rfind("rendering the reply failed", 0) == 0)
      fail("a handler threw: " + msg, all);
  }
}

/// Every response in `out`, in order; a trailing partial one only if reset.
void check_replies(std::string_view out, bool reset) {
  size_t pos = 0;
  while (pos < out.size()) {
    http::response_parser<http::string_body> p;
    p.eager(true);
    p.body_limit(64u << 20);
    boost::beast::error_code ec;
    while (!p.is_done()) {
      auto n = p.put(boost::asio::buffer(out.data() + pos, out.size() - pos), ec);
      pos += n;
      if (ec == http::error::need_more || (!ec && n == 0)) {
        if (reset)
          return;
        fail("a partial response before the gateway closed", out);
      }
      if (ec)
        fail("a malformed response: " + ec.message(), out);
    }
    auto& res = p.get();
    auto status = res.result_int();
    if (status < 100 || status > 599)
      fail("status " + std::to_string(status), out);
    if (status >= 400)
      check_error_body(status, res.body(), out);
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fx = new fixture;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  auto& gw = (data[0] & 1) ? *fx->secured : *fx->open;
  std::string_view in{reinterpret_cast<const char*>(data + 1), size - 1};
  bool reset = false;
  auto out = exchange(gw.port(), in, reset);
  check_replies(out, reset);
  return 0;
}
