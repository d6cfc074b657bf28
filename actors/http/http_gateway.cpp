// The HTTP gateway: a Beast server (listener, one session per connection) and
// the router whose handlers bridge each request to the broker_actor through a
// throw-away actor. The only Beast translation unit of the broker: keep it so
// (each one costs ~20 s and ~0.9 GB to compile). JSON shapes live in
// http_json.cpp.
//
// Lifetime of one request:
//   session (strand) reads it -> route() -> handler parses and validates,
//   spawns an event-based actor holding a reply_sink -> the actor does
//   request(broker, timeout, ...).then(ok, err) (maybe several) -> the sink
//   posts a render function to the session's strand -> the session writes the
//   reply and reads the next request. The actor ends once its last reply is
//   in. Nothing on an io thread ever waits for CAF.
//
// Ownership: gateway_core (io_context, config, broker handle) is shared by
// the gateway and every reply_sink; sessions and the listener refer to it by
// reference only, so pending handlers (which own sessions) never keep the
// io_context alive in a cycle: the core ends once the gateway is gone and the
// last in-flight actor has answered, and its io_context destroys whatever
// handlers are left.

#include "actors/http/http_gateway.hpp"

#include "actors/http/http_json.hpp"

#include "broker/audit_log.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/login_throttle.hpp"
#include "broker/partitioner.hpp"
#include "broker/record_batch.hpp"
#include "broker/security.hpp"
#include "broker/tls_server.hpp"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using json = http_api::json;
using steady = std::chrono::steady_clock;

namespace {

// -- requests and replies, free of Beast types past the session ----------------

struct api_request {
  http::verb method = http::verb::unknown;
  std::vector<std::string> segments; ///< decoded path segments
  std::map<std::string, std::string> query;
  std::string body;
  std::string user; ///< the authenticated user ("" with auth off)
  std::string peer; ///< "ip:port" of the client
  bool by_token = false; ///< authenticated with a bearer token

  const std::string* param(const std::string& key) const {
    auto i = query.find(key);
    return i == query.end() ? nullptr : &i->second;
  }
};

struct api_response {
  unsigned status = 200;
  std::string body;
  std::string allow;    ///< Allow header (405)
  std::string location; ///< Location header (201)
  std::string content_type = "application/json";
  std::string www_authenticate; ///< WWW-Authenticate header (401)
  std::string retry_after;      ///< Retry-After header (429), seconds
  bool no_store = false;        ///< Cache-Control: no-store (secrets)
};

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

api_response reply(unsigned status, const json& j) {
  api_response r;
  r.status = status;
  r.body = dump(j);
  return r;
}

api_response reply_error(unsigned status, const std::string& code,
                         const std::string& message) {
  return reply(status, http_api::error_body(code, message));
}

api_response reply_error(const http_api::api_error& e) {
  return reply_error(e.status, e.code, e.message);
}

api_response reply_error(const caf::error& err) {
  return reply_error(http_api::to_api_error(err));
}

/// Percent-decoding; '+' is a space in query strings. nullopt if malformed.
std::optional<std::string> pct_decode(std::string_view s, bool plus_space) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size())
        return std::nullopt;
      auto hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0)
        return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (plus_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

/// Splits a request target into decoded path segments and query parameters.
bool parse_target(std::string_view target, api_request& out) {
  if (target.empty() || target[0] != '/')
    return false;
  auto q = target.find('?');
  auto path = target.substr(0, q);
  while (!path.empty()) {
    auto slash = path.find('/');
    auto seg = path.substr(0, slash);
    if (!seg.empty()) {
      auto d = pct_decode(seg, false);
      if (!d)
        return false;
      out.segments.push_back(std::move(*d));
    }
    if (slash == std::string_view::npos)
      break;
    path.remove_prefix(slash + 1);
  }
  if (q == std::string_view::npos)
    return true;
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    auto kv = query.substr(0, amp);
    if (!kv.empty()) {
      auto eq = kv.find('=');
      auto k = pct_decode(kv.substr(0, eq), true);
      auto v = eq == std::string_view::npos
                 ? std::optional<std::string>{std::string{}}
                 : pct_decode(kv.substr(eq + 1), true);
      if (!k || !v)
        return false;
      out.query[std::move(*k)] = std::move(*v);
    }
    if (amp == std::string_view::npos)
      break;
    query.remove_prefix(amp + 1);
  }
  return true;
}

// -- the core shared by gateway, sessions and bridges ------------------------------

class session;

struct gateway_core : std::enable_shared_from_this<gateway_core> {
  explicit gateway_core(http_gateway_config c) : cfg(std::move(c)) {
  }

  http_gateway_config cfg;
  caf::actor_system* sys = nullptr;
  broker_actor broker;

  /// Set once by stop(); replies arriving afterwards are dropped.
  std::mutex stop_mtx;
  bool stopped = false;

  /// Live sessions, so stop() can close their sockets.
  std::mutex sessions_mtx;
  std::vector<std::weak_ptr<session>> sessions;
  size_t prune_at = 256;

  /// Partition counts for keyed produce, with the time they were read.
  std::mutex meta_mtx;
  std::map<std::string, std::pair<int32_t, steady::time_point>> partitions;

  /// Null-key records of one request go to one partition; requests rotate.
  std::atomic<uint64_t> next_partition{0};

  /// The TLS context new connections use (null: plain HTTP). Replaced by
  /// reload_tls(); a session keeps the one it started with.
  std::mutex tls_mtx;
  std::shared_ptr<ssl::context> tls;

  /// Refused TLS handshakes, and when one was last logged.
  std::atomic<uint64_t> failed_handshakes{0};
  std::mutex warn_mtx;
  steady::time_point last_handshake_warning{};
  uint64_t unlogged_handshakes = 0;

  std::shared_ptr<ssl::context> tls_context() {
    std::lock_guard<std::mutex> guard{tls_mtx};
    return tls;
  }

  /// Logs a refused handshake, at most every 10 s (with the count since).
  void handshake_failed(const std::string& peer, const beast::error_code& ec) {
    failed_handshakes.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard{warn_mtx};
    auto now = steady::now();
    if (now - last_handshake_warning < std::chrono::seconds{10}) {
      ++unlogged_handshakes;
      return;
    }
    last_handshake_warning = now;
    auto before = std::exchange(unlogged_handshakes, 0);
    log::warn("{}: refused a TLS connection from {}: {}{}", cfg.name, peer, ec.message(),
              before ? " (and " + std::to_string(before) + " more in the last 10 s)"
                     : std::string{});
  }

  /// Declared last: destroyed first, with the handlers (and sessions) it
  /// still holds, while the members above are intact.
  net::io_context ioc;

  void track(const std::shared_ptr<session>& s) {
    std::lock_guard<std::mutex> guard{sessions_mtx};
    if (sessions.size() >= prune_at) {
      sessions.erase(std::remove_if(sessions.begin(), sessions.end(),
                                    [](auto& w) { return w.expired(); }),
                     sessions.end());
      prune_at = std::max<size_t>(256, sessions.size() * 2);
    }
    sessions.push_back(s);
  }

  std::optional<int32_t> cached_partitions(const std::string& topic) {
    std::lock_guard<std::mutex> guard{meta_mtx};
    auto i = partitions.find(topic);
    if (i == partitions.end() || steady::now() - i->second.second > cfg.metadata_ttl)
      return std::nullopt;
    return i->second.first;
  }

  void cache_partitions(const std::string& topic, int32_t n) {
    std::lock_guard<std::mutex> guard{meta_mtx};
    partitions[topic] = {n, steady::now()};
  }

  void forget_topic(const std::string& topic) {
    std::lock_guard<std::mutex> guard{meta_mtx};
    partitions.erase(topic);
  }

  // -- authentication (cfg.security set) ----------------------------------------

  /// Failed logins of each client address.
  login_throttle logins{cfg.login_failures_allowed, cfg.login_lockout_base,
                        cfg.login_lockout_max};

  /// Verified Basic credentials: SHA-256 of "user NUL password" -> the user
  /// and the registry version they were checked against.
  std::mutex verified_mtx;
  std::map<std::string, std::pair<std::string, uint64_t>> verified;

  /// `user`: "" before a login; `peer`: "ip:port".
  void audit(const std::string& user, const std::string& peer,
             std::string action, std::string resource, std::string outcome,
             std::string detail = {}) {
    if (!cfg.audit)
      return;
    audit_event e;
    e.principal = user.empty() ? "anonymous" : "User:" + user;
    e.source = peer;
    e.via = cfg.name;
    e.action = std::move(action);
    e.resource = std::move(resource);
    e.outcome = std::move(outcome);
    e.detail = std::move(detail);
    cfg.audit->write(e);
  }
};

// -- the session: one HTTP connection ----------------------------------------------

/// One HTTP connection, plain or TLS (basic_session below). reply_sink
/// holds it through this interface.
class session : public std::enable_shared_from_this<session> {
public:
  virtual ~session() = default;

  virtual void start() = 0;

  virtual net::any_io_executor executor() = 0;

  /// Writes the reply of the current request. On the strand.
  virtual void respond(api_response r) = 0;

  /// Closes the socket. Only while no thread runs the io_context.
  virtual void close_now() = 0;
};

/// A 401 that asks for a password or a token (defined with authenticate).
api_response unauthenticated(const std::string& message);

/// Routes one request that has been read (defined after the router).
void dispatch(gateway_core& core, http::request<http::string_body> req,
              std::shared_ptr<session> s, std::string peer);

std::string peer_of(const tcp::socket& socket) {
  beast::error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec)
    return "an unknown peer";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

/// Stream is beast::tcp_stream (plain HTTP) or
/// beast::ssl_stream<beast::tcp_stream> (https).
template <class Stream>
class basic_session : public session {
public:
  static constexpr bool is_tls = !std::is_same_v<Stream, beast::tcp_stream>;

  /// Plain HTTP; `buffer` holds bytes already read (TLS detection).
  /// `on_tls_port`: the port speaks TLS and this client did not; its
  /// request is answered with a 400 that says so.
  basic_session(beast::tcp_stream&& stream, gateway_core& core,
                beast::flat_buffer buffer, bool on_tls_port)
    : core_(core),
      stream_(std::move(stream)),
      buffer_(std::move(buffer)),
      plain_on_tls_port_(on_tls_port) {
  }

  /// https: the handshake reads `buffer` first.
  basic_session(beast::tcp_stream&& stream, gateway_core& core,
                beast::flat_buffer buffer, std::shared_ptr<ssl::context> ctx)
    : core_(core),
      ctx_(std::move(ctx)),
      stream_(std::move(stream), *ctx_),
      buffer_(std::move(buffer)) {
  }

  void start() override {
    net::dispatch(stream_.get_executor(),
                  [self = self()] { self->begin(); });
  }

  net::any_io_executor executor() override {
    return stream_.get_executor();
  }

  void respond(api_response r) override {
    write(std::move(r), !keep_alive_, false);
  }

  void close_now() override {
    beast::error_code ec;
    socket().close(ec);
  }

private:
  std::shared_ptr<basic_session> self() {
    return std::static_pointer_cast<basic_session>(shared_from_this());
  }

  tcp::socket& socket() {
    return beast::get_lowest_layer(stream_).socket();
  }

  void expires_after(std::chrono::milliseconds t) {
    beast::get_lowest_layer(stream_).expires_after(t);
  }

  void begin() {
    if constexpr (is_tls) {
      expires_after(core_.cfg.io_timeout);
      stream_.async_handshake(ssl::stream_base::server, buffer_.data(),
                              [self = self()](beast::error_code ec, size_t used) {
                                self->on_handshake(ec, used);
                              });
    } else {
      read_header();
    }
  }

  void on_handshake(beast::error_code ec, size_t used) {
    if (ec) {
      if (ec != net::error::operation_aborted)
        core_.handshake_failed(peer_of(socket()), ec);
      beast::error_code ignored;
      socket().close(ignored);
      return;
    }
    buffer_.consume(used);
    read_header();
  }

  void read_header() {
    parser_.emplace();
    parser_->body_limit(core_.cfg.max_body_bytes);
    parser_->header_limit(core_.cfg.max_header_bytes);
    expires_after(core_.cfg.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = self()](beast::error_code ec, size_t) {
                              self->on_header(ec);
                            });
  }

  void on_header(beast::error_code ec) {
    if (ec)
      return fail_read(ec);
    auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    if (parser_->is_done())
      return handle();
    expires_after(core_.cfg.io_timeout);
    if (!plain_on_tls_port_
        && beast::iequals(req[http::field::expect], "100-continue")) {
      continue_ = http::response<http::empty_body>{http::status::continue_,
                                                   version_};
      http::async_write(stream_, continue_,
                        [self = self()](beast::error_code ec, size_t) {
                          if (ec)
                            return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    if (plain_on_tls_port_)
      return handle(); // answered without reading a body
    http::async_read(stream_, buffer_, *parser_,
                     [self = self()](beast::error_code ec, size_t) {
                       if (ec)
                         return self->fail_read(ec);
                       self->handle();
                     });
  }

  /// A request could not be read: answer what can be answered, then close.
  void fail_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout
        || ec == net::error::operation_aborted
        || ec == ssl::error::stream_truncated)
      return close();
    if (ec == http::error::body_limit)
      return write(reply_error(413, to_string(ec::message_too_large),
                               "the request body exceeds "
                                 + std::to_string(core_.cfg.max_body_bytes)
                                 + " bytes"),
                   true, true);
    if (ec == http::error::header_limit)
      return write(reply_error(431, to_string(ec::invalid_request),
                               "the request header exceeds "
                                 + std::to_string(core_.cfg.max_header_bytes)
                                 + " bytes"),
                   true, true);
    if (&ec.category() == &http::make_error_code(http::error::bad_target).category())
      return write(reply_error(400, to_string(ec::invalid_request),
                               "malformed HTTP request: " + ec.message()),
                   true, true);
    close(); // I/O error: nobody to answer
  }

  void handle() {
    if (plain_on_tls_port_) {
      auto r = reply_error(400, to_string(ec::invalid_request),
                           "this port speaks TLS: use https:// (and the "
                           "cluster's CA and a client certificate)");
      return write(std::move(r), true, !parser_->is_done());
    }
    auto req = parser_->release();
    // A long poll may take its time; the broker bounds it.
    beast::get_lowest_layer(stream_).expires_never();
    dispatch(core_, std::move(req), shared_from_this(), peer_of(socket()));
  }

  void write(api_response r, bool close_after, bool drain) {
    res_ = http::response<http::string_body>{};
    res_.version(version_);
    res_.result(r.status);
    res_.set(http::field::server, "ferry");
    res_.set(http::field::content_type, r.content_type);
    if (!r.allow.empty())
      res_.set(http::field::allow, r.allow);
    if (!r.location.empty())
      res_.set(http::field::location, r.location);
    if (!r.www_authenticate.empty())
      res_.set(http::field::www_authenticate, r.www_authenticate);
    if (r.no_store)
      res_.set(http::field::cache_control, "no-store");
    if (!r.retry_after.empty())
      res_.set(http::field::retry_after, r.retry_after);
    res_.body() = std::move(r.body);
    res_.keep_alive(!close_after);
    res_.prepare_payload();
    expires_after(core_.cfg.io_timeout);
    http::async_write(stream_, res_,
                      [self = self(), close_after, drain](beast::error_code ec,
                                                          size_t) {
                        if (ec)
                          return self->close();
                        if (drain)
                          return self->drain();
                        if (close_after)
                          return self->close();
                        self->read_header();
                      });
  }

  /// After an error reply to a request whose body was not read: stop
  /// sending and read (and drop) what the client still sends, so closing
  /// does not reset the connection before the client read the reply. (With
  /// TLS the connection cannot half-close: it reads, then closes.)
  void drain() {
    if constexpr (!is_tls) {
      beast::error_code ec;
      socket().shutdown(tcp::socket::shutdown_send, ec);
    }
    expires_after(std::chrono::seconds{5});
    drain_more();
  }

  void drain_more() {
    stream_.async_read_some(net::buffer(drain_buf_),
                            [self = self()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > (64u << 20))
                                return self->close();
                              self->drain_more();
                            });
  }

  void close() {
    if constexpr (is_tls) {
      // close_notify, then the socket (bounded: the peer may be gone).
      if (closing_)
        return close_socket();
      closing_ = true;
      expires_after(std::chrono::seconds{2});
      stream_.async_shutdown([self = self()](beast::error_code) {
        self->close_socket();
      });
    } else {
      close_socket();
    }
  }

  void close_socket() {
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
  }

  gateway_core& core_;
  std::shared_ptr<ssl::context> ctx_; ///< before stream_, which uses it
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::empty_body> continue_;
  http::response<http::string_body> res_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool plain_on_tls_port_ = false;
  bool closing_ = false;
  std::array<char, 16384> drain_buf_;
  size_t drained_ = 0;
};

using plain_session = basic_session<beast::tcp_stream>;
using tls_session = basic_session<beast::ssl_stream<beast::tcp_stream>>;

/// On a TLS port: reads the first bytes of a connection to tell a TLS
/// ClientHello from a plain HTTP request, then hands the connection (and
/// the bytes read) to the session of that kind.
class tls_detector : public std::enable_shared_from_this<tls_detector> {
public:
  tls_detector(tcp::socket&& socket, gateway_core& core,
               std::shared_ptr<ssl::context> ctx)
    : core_(core), ctx_(std::move(ctx)), stream_(std::move(socket)) {
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->stream_.expires_after(self->core_.cfg.idle_timeout);
      beast::async_detect_ssl(self->stream_, self->buffer_,
                              [self](beast::error_code ec, bool tls) {
                                self->on_detect(ec, tls);
                              });
    });
  }

private:
  void on_detect(beast::error_code ec, bool tls) {
    if (ec) {
      beast::error_code ignored;
      stream_.socket().close(ignored);
      return;
    }
    std::shared_ptr<session> s;
    if (tls)
      s = std::make_shared<tls_session>(std::move(stream_), core_, std::move(buffer_),
                                        std::move(ctx_));
    else
      s = std::make_shared<plain_session>(std::move(stream_), core_,
                                          std::move(buffer_), true);
    core_.track(s);
    s->start();
  }

  gateway_core& core_;
  std::shared_ptr<ssl::context> ctx_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// -- reply_sink: from the CAF side to a session's strand -----------------------------

/// Holds one request's session until its reply is posted (at most once).
/// Shared by the callbacks of the bridge actor.
class reply_sink {
public:
  reply_sink(std::shared_ptr<gateway_core> core, std::shared_ptr<session> s)
    : core_(std::move(core)), session_(std::move(s)) {
  }

  gateway_core& core() {
    return *core_;
  }

  /// Posts `build` (returning api_response) to the session's strand, where
  /// it runs and the result is written. Later calls do nothing; after the
  /// gateway stopped nothing is posted.
  template <class F>
  void post(F build) {
    std::lock_guard<std::mutex> guard{core_->stop_mtx};
    if (core_->stopped || !session_)
      return;
    auto s = std::move(session_);
    auto ex = s->executor();
    net::post(ex, [s = std::move(s), build = std::move(build)]() mutable {
      api_response r;
      try {
        r = build();
      } catch (const std::exception& e) {
        log::error("http: rendering a reply failed: {}", e.what());
        r = reply_error(500, to_string(ec::io_error),
                        std::string{"rendering the reply failed: "} + e.what());
      }
      s->respond(std::move(r));
    });
  }

  void post_error(const caf::error& err) {
    auto e = http_api::to_api_error(err);
    post([e] { return reply_error(e); });
  }

  void post_error(unsigned status, ec code, std::string message) {
    post([status, code, message] {
      return reply_error(status, to_string(code), message);
    });
  }

private:
  // Order matters: session_ is destroyed before core_ (whose io_context
  // the session's socket belongs to).
  std::shared_ptr<gateway_core> core_;
  std::shared_ptr<session> session_;
};

using sink_ptr = std::shared_ptr<reply_sink>;

// -- bridging to the broker ------------------------------------------------------

/// One routed request.
struct call {
  gateway_core& core;
  api_request req;
  std::vector<std::string> params;
  sink_ptr sink;
  /// An admin change ("create", "topic orders"): ask() writes its outcome
  /// to the audit log.
  std::string admin_action;
  std::string admin_resource;
};

std::string resource_text(std::string_view type, std::string_view name) {
  if (type == "cluster")
    return "cluster";
  return std::string{type} + " " + std::string{name};
}

/// True when auth is off or the caller may do `op` on the resource.
bool may(const call& c, std::string_view type, std::string_view name,
         std::string_view op) {
  return !c.core.cfg.security
         || c.core.cfg.security->authorize(c.req.user, type, name, op);
}

/// may(), else a 403 (and an audit line); the handler then returns.
bool permitted(call& c, std::string_view type, std::string_view name,
               std::string_view op) {
  if (may(c, type, name, op))
    return true;
  auto what = describe_denial(c.req.user, type, name, op);
  c.core.audit(c.req.user, c.req.peer, std::string{op}, resource_text(type, name), "denied",
               what);
  c.sink->post_error(403, ec::authorization_failed, what);
  return false;
}

/// permitted(), and marks the request as an admin change for the audit log.
bool admin(call& c, std::string_view type, std::string_view name,
           std::string_view op) {
  if (!permitted(c, type, name, op))
    return false;
  c.admin_action = std::string{op};
  c.admin_resource = resource_text(type, name);
  return true;
}

/// For lists: which names of `type` the caller may describe (all with auth
/// off). Runs in the bridge, after the answer came.
struct describe_filter {
  std::shared_ptr<const security_registry> security;
  std::string user;
  std::string type;

  describe_filter(const call& c, std::string t)
    : security(c.core.cfg.security), user(c.req.user), type(std::move(t)) {
  }

  bool operator()(std::string_view name) const {
    return !security || security->authorize(user, type, name, "describe");
  }
};

/// Writes the outcome of an admin change (nothing for other requests).
struct admin_audit {
  std::shared_ptr<gateway_core> core;
  std::string user;
  std::string peer;
  std::string action;
  std::string resource;

  explicit admin_audit(call& c) {
    if (c.admin_action.empty() || !c.core.cfg.audit)
      return;
    core = c.core.shared_from_this();
    user = c.req.user;
    peer = c.req.peer;
    action = c.admin_action;
    resource = c.admin_resource;
  }

  void operator()(const caf::error* err) const {
    if (!core)
      return;
    core->audit(user, peer, action, resource,
                err ? std::string{to_string(code_of(*err))} : "ok",
                err ? describe(*err) : std::string{});
  }
};

/// Runs `f(self)` in a fresh event-based actor, which ends once the requests
/// `f` makes are answered.
template <class F>
void spawn_bridge(gateway_core& core, F f) {
  core.sys->spawn([f](caf::event_based_actor* self) mutable { f(self); });
}

/// One broker request whose reply `T` becomes the HTTP reply via `render`
/// (run on the session's strand).
template <class T, class Render, class... Ts>
void ask(call& c, caf::timespan timeout, Render render, Ts... xs) {
  auto broker = c.core.broker;
  auto sink = c.sink;
  admin_audit note{c};
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    self->request(broker, timeout, xs...)
      .then(
        [sink, render, note](T& x) {
          note(nullptr);
          sink->post([render, x = std::move(x)]() mutable { return render(x); });
        },
        [sink, note](caf::error& err) {
          note(&err);
          sink->post_error(err);
        });
  });
}

/// Like ask() for requests without a reply value.
template <class Render, class... Ts>
void ask_void(call& c, caf::timespan timeout, Render render, Ts... xs) {
  auto broker = c.core.broker;
  auto sink = c.sink;
  admin_audit note{c};
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    self->request(broker, timeout, xs...)
      .then(
        [sink, render, note]() {
          note(nullptr);
          sink->post(render);
        },
        [sink, note](caf::error& err) {
          note(&err);
          sink->post_error(err);
        });
  });
}

caf::timespan timeout_of(const gateway_core& core) {
  return core.cfg.request_timeout;
}

void bad_request(call& c, std::string message) {
  c.sink->post_error(400, ec::invalid_request, std::move(message));
}

/// The parsed JSON body, or a 400 already posted.
std::optional<json> body_of(call& c) {
  auto j = http_api::parse_body(c.req.body);
  if (!j) {
    c.sink->post_error(j.error());
    return std::nullopt;
  }
  return std::move(*j);
}

timestamp_ms now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// -- handlers: health and cluster ----------------------------------------------------

void get_health(call& c) {
  ask<std::vector<topic_metadata>>(
    c, std::chrono::seconds{5},
    [](std::vector<topic_metadata>& ts) {
      return reply(200, json{{"status", "ok"}, {"topics", ts.size()}});
    },
    list_atom_v, topic_atom_v);
}

void get_cluster(call& c) {
  if (!permitted(c, "cluster", "cluster", "describe"))
    return;
  ask<cluster_description>(
    c, timeout_of(c.core),
    [](cluster_description& cd) { return reply(200, http_api::to_json(cd)); },
    cluster_atom_v);
}

// DELETE /v1/cluster/nodes/{id}: as `ferryctl cluster remove-node` (without
// its wait): the controller moves every replica off broker-only node `id`,
// then unregisters it. 202: the removal started; GET /v1/cluster shows it
// ("removing") until the node is gone.
void remove_node(call& c) {
  auto id = http_api::parse_int(c.params[0], 0,
                                std::numeric_limits<int32_t>::max(), "node id");
  if (!id)
    return c.sink->post_error(id.error());
  auto node = static_cast<int32_t>(*id);
  if (!admin(c, "cluster", "cluster", "alter"))
    return;
  c.admin_action = "remove node";
  c.admin_resource = "node " + std::to_string(node);
  ask<broker_registration>(
    c, timeout_of(c.core),
    [node](broker_registration& reg) {
      return reply(202, json{{"node", node},
                             {"host", reg.host},
                             {"port", reg.port},
                             {"status", "removing"}});
    },
    delete_atom_v, broker_atom_v, node);
}

// -- handlers: topics ------------------------------------------------------------

void list_topics(call& c) {
  describe_filter visible{c, "topic"};
  ask<std::vector<topic_metadata>>(
    c, timeout_of(c.core),
    [visible](std::vector<topic_metadata>& ts) {
      std::sort(ts.begin(), ts.end(),
                [](auto& a, auto& b) { return a.name < b.name; });
      json out = json::array();
      for (auto& t : ts)
        if (visible(t.name))
          out.push_back(http_api::to_json(t));
      return reply(200, json{{"topics", std::move(out)}});
    },
    list_atom_v, topic_atom_v);
}

void create_topic(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto spec = http_api::parse_topic_spec(*body);
  if (!spec)
    return c.sink->post_error(spec.error());
  // Kafka: create on the cluster or on the topic (name or prefix).
  if (may(c, "cluster", "cluster", "create")) {
    c.admin_action = "create";
    c.admin_resource = resource_text("topic", spec->name);
  } else if (!admin(c, "topic", spec->name, "create")) {
    return;
  }
  auto core = c.core.shared_from_this();
  ask<topic_metadata>(
    c, timeout_of(c.core),
    [core](topic_metadata& md) {
      core->cache_partitions(md.name, static_cast<int32_t>(md.partitions.size()));
      auto r = reply(201, http_api::to_json(md));
      r.location = "/v1/topics/" + md.name;
      return r;
    },
    create_atom_v, topic_atom_v, spec->name, spec->config);
}

void describe_topic(call& c) {
  if (!permitted(c, "topic", c.params[0], "describe"))
    return;
  ask<topic_description>(
    c, timeout_of(c.core),
    [](topic_description& td) { return reply(200, http_api::to_json(td)); },
    describe_atom_v, topic_atom_v, c.params[0]);
}

void delete_topic(call& c) {
  if (!admin(c, "topic", c.params[0], "delete"))
    return;
  auto core = c.core.shared_from_this();
  ask<topic_metadata>(
    c, timeout_of(c.core),
    [core](topic_metadata& md) {
      core->forget_topic(md.name);
      return reply(200, json{{"deleted", md.name},
                             {"topic", http_api::to_json(md)}});
    },
    delete_atom_v, topic_atom_v, c.params[0]);
}

void alter_topic(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto patch = http_api::parse_topic_patch(*body);
  if (!patch)
    return c.sink->post_error(patch.error());
  if (!admin(c, "topic", c.params[0], "alter"))
    return;
  admin_audit note{c};
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  auto name = c.params[0];
  auto changes = patch->config;
  auto parts = patch->partitions;
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    auto done = [sink, note](topic_metadata& md) {
      note(nullptr);
      sink->core().cache_partitions(md.name,
                                    static_cast<int32_t>(md.partitions.size()));
      sink->post([md = std::move(md)] { return reply(200, http_api::to_json(md)); });
    };
    auto grow = [=](topic_metadata* altered) {
      if (!parts) {
        done(*altered);
        return;
      }
      self->request(broker, timeout, add_parts_atom_v, name, *parts)
        .then([done](topic_metadata& md) mutable { done(md); },
              [sink, note](caf::error& err) {
                note(&err);
                sink->post_error(err);
              });
    };
    if (changes.empty()) {
      grow(nullptr);
      return;
    }
    self->request(broker, timeout, alter_atom_v, topic_atom_v, name, changes)
      .then([grow](topic_metadata& md) mutable { grow(&md); },
            [sink, note](caf::error& err) {
              note(&err);
              sink->post_error(err);
            });
  });
}

// -- handlers: produce -------------------------------------------------------------

struct produce_result {
  int32_t partition = -1;
  int64_t offset = -1;
  std::optional<http_api::api_error> error;
};

/// Groups `items` per partition (explicit, murmur2 of the key, or one
/// rotating partition for null keys), sends one produce_request per
/// partition and answers once all are in. `count` is the partition count,
/// or -1 when every item names its partition.
void send_batches(caf::event_based_actor* self, broker_actor broker,
                  sink_ptr sink, caf::timespan timeout, std::string topic,
                  std::vector<http_api::produce_item> items, acks_mode acks,
                  int32_t count) {
  std::map<int32_t, std::vector<size_t>> groups;
  int32_t sticky = 0;
  if (count > 0)
    sticky = static_cast<int32_t>(sink->core().next_partition.fetch_add(1)
                                  % static_cast<uint64_t>(count));
  for (size_t i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    int32_t p = it.partition;
    if (p < 0)
      p = it.rec.key ? partition_for_key(*it.rec.key, count) : sticky;
    groups[p].push_back(i);
  }
  struct gather {
    std::vector<produce_result> results;
    size_t pending = 0;
    std::optional<http_api::api_error> first_error;
  };
  auto g = std::make_shared<gather>();
  g->results.resize(items.size());
  g->pending = groups.size();
  auto finish = [g, sink] {
    if (--g->pending > 0)
      return;
    sink->post([g] {
      json offsets = json::array();
      for (auto& r : g->results) {
        if (r.error)
          offsets.push_back(
            json{{"partition", r.partition},
                 {"error", {{"code", r.error->code}, {"message", r.error->message}}}});
        else
          offsets.push_back(json{{"partition", r.partition}, {"offset", r.offset}});
      }
      if (!g->first_error)
        return reply(200, json{{"offsets", std::move(offsets)}});
      auto body = http_api::error_body(g->first_error->code,
                                       g->first_error->message);
      body["offsets"] = std::move(offsets);
      return reply(g->first_error->status, body);
    });
  };
  auto fail = [g, sink, topic](const std::vector<size_t>& idx, int32_t p,
                               const caf::error& err) {
    auto e = http_api::to_api_error(err);
    if (is(err, ec::unknown_topic) || is(err, ec::unknown_partition))
      sink->core().forget_topic(topic);
    for (auto i : idx) {
      g->results[i].partition = p;
      g->results[i].error = e;
    }
    if (!g->first_error)
      g->first_error = e;
  };
  for (auto& [p, idx] : groups) {
    std::vector<record> recs;
    recs.reserve(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) {
      recs.push_back(std::move(items[idx[k]].rec));
      recs.back().offset_delta = static_cast<int32_t>(k);
    }
    auto batch = encode_batch(batch_meta{}, recs);
    if (!batch) {
      fail(idx, p, batch.error());
      finish();
      continue;
    }
    produce_request req;
    req.topic = topic;
    req.partition = partition_id{p};
    req.acks = acks;
    req.batch = std::move(*batch);
    auto part = p;
    auto indices = idx;
    self->request(broker, timeout, produce_atom_v, std::move(req))
      .then(
        [g, finish, part, indices](produce_response& r) {
          for (size_t k = 0; k < indices.size(); ++k) {
            g->results[indices[k]].partition = part;
            g->results[indices[k]].offset
              = r.base_offset.value + static_cast<int64_t>(k);
          }
          finish();
        },
        [fail, finish, part, indices](caf::error& err) {
          fail(indices, part, err);
          finish();
        });
  }
}

void produce(call& c) {
  if (!permitted(c, "topic", c.params[0], "write"))
    return;
  auto body = body_of(c);
  if (!body)
    return;
  if (!body->is_object())
    return bad_request(c, "the body must be a JSON object: a record or "
                          "{\"records\":[...]}");
  // acks and partition: the body's top level wins over the query.
  std::string acks_text = "all";
  if (auto q = c.req.param("acks"))
    acks_text = *q;
  if (auto a = body->find("acks"); a != body->end()) {
    if (a->is_string())
      acks_text = a->get<std::string>();
    else if (a->is_number_integer())
      acks_text = std::to_string(a->get<int64_t>());
    else
      return bad_request(c, "\"acks\" must be 0, 1 or all");
  }
  auto acks = http_api::parse_acks(acks_text);
  if (!acks)
    return bad_request(c, "acks must be 0, 1 or all, not '" + acks_text + "'");
  int32_t partition = -1;
  if (auto q = c.req.param("partition")) {
    auto p = http_api::parse_int(*q, 0, std::numeric_limits<int32_t>::max(),
                                 "partition");
    if (!p)
      return c.sink->post_error(p.error());
    partition = static_cast<int32_t>(*p);
  }
  if (auto p = body->find("partition"); p != body->end() && body->contains("records")) {
    if (!p->is_number_integer() || p->get<int64_t>() < 0
        || p->get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad_request(c, "\"partition\" must be an integer >= 0");
    partition = static_cast<int32_t>(p->get<int64_t>());
  }
  auto items = http_api::parse_produce(*body, partition, now_ms());
  if (!items)
    return c.sink->post_error(items.error());
  bool need_count = std::any_of(items->begin(), items->end(),
                                [](auto& it) { return it.partition < 0; });
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  auto topic = c.params[0];
  auto cached = need_count ? c.core.cached_partitions(topic)
                           : std::optional<int32_t>{-1};
  auto list = std::move(*items);
  auto mode = *acks;
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    if (cached) {
      send_batches(self, broker, sink, timeout, topic, list, mode, *cached);
      return;
    }
    self->request(broker, timeout, list_atom_v, topic_atom_v)
      .then(
        [=](std::vector<topic_metadata>& ts) {
          auto i = std::find_if(ts.begin(), ts.end(),
                                [&](auto& t) { return t.name == topic; });
          if (i == ts.end() || i->partitions.empty()) {
            sink->post_error(404, ec::unknown_topic,
                             "topic " + topic + " does not exist");
            return;
          }
          auto n = static_cast<int32_t>(i->partitions.size());
          sink->core().cache_partitions(topic, n);
          send_batches(self, broker, sink, timeout, topic, list, mode, n);
        },
        [sink](caf::error& err) { sink->post_error(err); });
  });
}

// -- handlers: fetch --------------------------------------------------------------

void fetch(call& c) {
  if (!permitted(c, "topic", c.params[0], "read"))
    return;
  const auto& cfg = c.core.cfg;
  auto p = http_api::parse_int(c.params[1], 0,
                               std::numeric_limits<int32_t>::max(), "partition");
  if (!p)
    return c.sink->post_error(p.error());
  // offset: a number, earliest (-2) or latest (-1); default earliest.
  int64_t from = -2;
  if (auto q = c.req.param("offset")) {
    if (*q == "earliest")
      from = -2;
    else if (*q == "latest")
      from = -1;
    else {
      auto o = http_api::parse_int(*q, 0, std::numeric_limits<int64_t>::max(),
                                   "offset");
      if (!o)
        return c.sink->post_error(o.error());
      from = *o;
    }
  }
  int64_t limit = cfg.default_limit;
  if (auto q = c.req.param("limit")) {
    auto l = http_api::parse_int(*q, 1, cfg.max_limit, "limit");
    if (!l)
      return c.sink->post_error(l.error());
    limit = *l;
  }
  int64_t wait = 0;
  if (auto q = c.req.param("maxWaitMs")) {
    auto w = http_api::parse_int(*q, 0, cfg.max_wait.count(), "maxWaitMs");
    if (!w)
      return c.sink->post_error(w.error());
    wait = *w;
  }
  int64_t max_bytes = cfg.default_max_bytes;
  if (auto q = c.req.param("maxBytes")) {
    auto b = http_api::parse_int(*q, 1, 64 << 20, "maxBytes");
    if (!b)
      return c.sink->post_error(b.error());
    max_bytes = *b;
  }
  auto enc = http_api::value_encoding::automatic;
  if (auto q = c.req.param("encoding")) {
    auto e = http_api::parse_encoding(*q);
    if (!e)
      return bad_request(c, "encoding must be auto, json, string or base64, "
                            "not '" + *q + "'");
    enc = *e;
  }
  fetch_request req;
  req.topic = c.params[0];
  req.partition = partition_id{static_cast<int32_t>(*p)};
  req.max_bytes = static_cast<int32_t>(max_bytes);
  req.min_bytes = 1;
  req.max_wait_ms = static_cast<int32_t>(wait);
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  caf::timespan fetch_timeout = std::chrono::milliseconds{wait}
                                + cfg.long_poll_margin;
  auto n = static_cast<size_t>(limit);
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    auto run = [=](offset start) mutable {
      auto r = req;
      r.from = start;
      self->request(broker, fetch_timeout, fetch_atom_v, std::move(r))
        .then(
          [sink, start, n, enc](fetch_response& resp) {
            sink->post([resp = std::move(resp), start, n, enc] {
              auto msgs = http_api::render_messages(resp, start, n, enc);
              if (!msgs)
                return reply_error(msgs.error());
              return reply(200,
                           json{{"messages", std::move(msgs->messages)},
                                {"nextOffset", msgs->next.value},
                                {"highWatermark", resp.high_watermark.value},
                                {"logStartOffset", resp.log_start.value}});
            });
          },
          [sink](caf::error& err) { sink->post_error(err); });
    };
    if (from >= 0) {
      run(offset{from});
      return;
    }
    list_offsets_request lo{req.topic, req.partition, from};
    self->request(broker, timeout, offsets_atom_v, lo)
      .then([run](offset o) mutable { run(o); },
            [sink](caf::error& err) { sink->post_error(err); });
  });
}

// -- handlers: groups --------------------------------------------------------------

/// Leaves out the partitions (and assignments) of topics the caller may
/// not describe.
void hide_topics(group_description& g, const describe_filter& visible) {
  auto& ps = g.partitions;
  ps.erase(std::remove_if(ps.begin(), ps.end(),
                          [&](auto& p) { return !visible(p.topic); }),
           ps.end());
  for (auto& m : g.members) {
    auto& a = m.assignment;
    a.erase(std::remove_if(a.begin(), a.end(),
                           [&](auto& tp) { return !visible(tp.topic); }),
            a.end());
  }
}

void list_groups(call& c) {
  describe_filter visible{c, "group"};
  describe_filter topics{c, "topic"};
  ask<std::vector<group_description>>(
    c, timeout_of(c.core),
    [visible, topics](std::vector<group_description>& gs) {
      std::sort(gs.begin(), gs.end(),
                [](auto& a, auto& b) { return a.group < b.group; });
      json out = json::array();
      for (auto& g : gs) {
        if (!visible(g.group))
          continue;
        hide_topics(g, topics);
        out.push_back(http_api::to_json(g));
      }
      return reply(200, json{{"groups", std::move(out)}});
    },
    list_atom_v, group_atom_v);
}

void describe_group(call& c) {
  if (!permitted(c, "group", c.params[0], "describe"))
    return;
  describe_filter topics{c, "topic"};
  ask<group_description>(
    c, timeout_of(c.core),
    [topics](group_description& g) {
      hide_topics(g, topics);
      return reply(200, http_api::to_json(g));
    },
    describe_atom_v, group_atom_v, c.params[0]);
}

void delete_group(call& c) {
  if (!admin(c, "group", c.params[0], "delete"))
    return;
  auto name = c.params[0];
  ask_void(
    c, timeout_of(c.core),
    [name] { return reply(200, json{{"deleted", name}}); }, delete_atom_v,
    group_atom_v, name);
}

/// GET /v1/groups/{g}/queue: a queue group's settings and state.
void describe_queue_group(call& c) {
  if (!permitted(c, "group", c.params[0], "describe"))
    return;
  ask<queue_group_description>(
    c, timeout_of(c.core),
    [](queue_group_description& d) { return reply(200, http_api::to_json(d)); },
    describe_atom_v, queue_atom_v, c.params[0]);
}

/// PUT /v1/groups/{g}/queue: creates a queue group with the body's settings
/// (the others at their defaults), so that its first receive does not take
/// the defaults: 201. The same settings again: 200; a group that exists with
/// others: 409 (PATCH changes them).
void create_queue_group(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto qc = http_api::parse_queue_config(*body, queue_group_config{});
  if (!qc)
    return c.sink->post_error(qc.error());
  if (!admin(c, "group", c.params[0], "create"))
    return;
  admin_audit note{c};
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  auto name = c.params[0];
  auto want = *qc;
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    auto failed = [sink, note](caf::error& err) {
      note(&err);
      sink->post_error(err);
    };
    auto answer = [sink, note, name](unsigned status, const queue_group_config& x) {
      note(nullptr);
      sink->post([status, name, x] {
        return reply(status, json{{"group", name}, {"mode", "queue"},
                                  {"config", http_api::to_json(x)}});
      });
    };
    self->request(broker, timeout, describe_atom_v, queue_atom_v, name)
      .then(
        [=](queue_group_description& d) {
          if (d.config == want) {
            answer(200, d.config);
            return;
          }
          auto why = "queue group " + name
                     + " exists with other settings: PATCH changes them";
          auto err = make_error(ec::invalid_request, why);
          note(&err);
          sink->post_error(409, ec::invalid_request, why);
        },
        [=](caf::error& err) {
          if (!is(err, ec::unknown_group)) {
            failed(err);
            return;
          }
          self->request(broker, timeout, create_atom_v, group_atom_v, name, want)
            .then([=](queue_group_config& x) { answer(201, x); }, failed);
        });
  });
}

/// PATCH /v1/groups/{g}/queue: changes the body's settings of a queue group;
/// the others stay as they are.
void alter_queue_group(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  // Bad input is a 400 before the group is asked for.
  if (auto checked = http_api::parse_queue_config(*body, queue_group_config{});
      !checked)
    return c.sink->post_error(checked.error());
  if (!admin(c, "group", c.params[0], "alter"))
    return;
  admin_audit note{c};
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  auto name = c.params[0];
  auto patch = *body;
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    auto failed = [sink, note](caf::error& err) {
      note(&err);
      sink->post_error(err);
    };
    self->request(broker, timeout, describe_atom_v, queue_atom_v, name)
      .then(
        [=](queue_group_description& d) {
          auto qc = http_api::parse_queue_config(patch, d.config);
          if (!qc) {
            failed(qc.error());
            return;
          }
          self->request(broker, timeout, alter_atom_v, group_atom_v, name, *qc)
            .then(
              [sink, note, name](queue_group_config& x) {
                note(nullptr);
                sink->post([name, x] {
                  return reply(200, json{{"group", name}, {"mode", "queue"},
                                         {"config", http_api::to_json(x)}});
                });
              },
              failed);
        },
        failed);
  });
}

void reset_group(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto req = http_api::parse_reset(*body, c.params[0]);
  if (!req)
    return c.sink->post_error(req.error());
  if (!admin(c, "group", c.params[0], "alter"))
    return;
  c.admin_action = "reset offsets";
  auto group = req->group;
  auto dry = req->dry_run;
  ask<std::vector<partition_offset>>(
    c, timeout_of(c.core),
    [group, dry](std::vector<partition_offset>& offs) {
      return reply(200, json{{"group", group},
                             {"dryRun", dry},
                             {"offsets", http_api::to_json(offs)}});
    },
    reset_atom_v, *req);
}

/// A standalone commit (no member, no generation: the group must be empty).
/// Each partition is checked first with a list-offsets request, so an
/// unknown topic or partition is a 404 and not a stored offset.
void commit_group(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto offsets = http_api::parse_commit(*body);
  if (!offsets)
    return c.sink->post_error(offsets.error());
  if (!permitted(c, "group", c.params[0], "read"))
    return;
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  auto group = c.params[0];
  auto list = std::move(*offsets);
  spawn_bridge(c.core, [=](caf::event_based_actor* self) {
    std::vector<topic_partition> parts;
    for (auto& o : list)
      parts.push_back(topic_partition{o.topic, o.partition});
    std::sort(parts.begin(), parts.end());
    parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
    struct gather {
      size_t pending = 0;
      caf::error first_error;
    };
    auto g = std::make_shared<gather>();
    g->pending = parts.size();
    auto commit = [=] {
      commit_offsets_request req;
      req.group = group;
      req.generation = -1;
      req.offsets = list;
      self->request(broker, timeout, commit_atom_v, std::move(req))
        .then(
          [sink, group, list] {
            sink->post([group, list] {
              return reply(200, json{{"group", group},
                                     {"offsets", http_api::to_json(list)}});
            });
          },
          [sink](caf::error& err) { sink->post_error(err); });
    };
    for (auto& tp : parts) {
      list_offsets_request lo{tp.topic, tp.partition, -1};
      auto step = [g, sink, commit](caf::error err) {
        if (err && !g->first_error)
          g->first_error = std::move(err);
        if (--g->pending > 0)
          return;
        if (g->first_error)
          sink->post_error(g->first_error);
        else
          commit();
      };
      self->request(broker, timeout, offsets_atom_v, lo)
        .then([step](offset) mutable { step(caf::error{}); },
              [step](caf::error& err) mutable { step(err); });
    }
  });
}

// -- handlers: queue mode ---------------------------------------------------------

/// POST /v1/groups/{g}/queue/{topic}/receive: leases records (long poll).
/// POST /v1/groups/{g}/queue/receive: the same over the body's "topics".
void queue_receive(call& c) {
  if (c.params.size() < 2)
    c.params.emplace_back(); // the body names the topics
  if (!permitted(c, "group", c.params[0], "read"))
    return;
  const auto& cfg = c.core.cfg;
  auto enc = http_api::value_encoding::automatic;
  if (auto q = c.req.param("encoding")) {
    auto e = http_api::parse_encoding(*q);
    if (!e)
      return bad_request(c, "encoding must be auto, json, string or base64, "
                            "not '" + *q + "'");
    enc = *e;
  }
  auto body = body_of(c);
  if (!body)
    return;
  auto req = http_api::parse_queue_receive(*body, c.params[0], c.params[1],
                                           cfg.max_limit, cfg.max_wait.count());
  if (!req)
    return c.sink->post_error(req.error());
  for (auto& t : receive_topics(*req))
    if (!permitted(c, "topic", t, "read"))
      return;
  caf::timespan timeout = std::chrono::milliseconds{req->wait_ms}
                          + timeout_of(c.core);
  ask<std::vector<leased_message>>(
    c, timeout,
    [enc](std::vector<leased_message>& xs) {
      return reply(200, http_api::to_json(xs, enc));
    },
    receive_atom_v, *req);
}

/// A batch settle ({"records":[...]}): the records' requests go to the
/// broker at once (one queue group: one state save for all of them) and the
/// reply lists each record's outcome in order, 200 even when some failed:
/// {"results":[{"topic","partition","offset", and the single settle's
/// fields or "error":{"code","message"}}]} (SQS's batch calls answer alike).
template <queue_ack_kind Kind>
void queue_settle_batch(call& c, const json& body) {
  auto reqs = http_api::parse_queue_ack_batch(body, c.params[0], c.params[1], Kind);
  if (!reqs)
    return c.sink->post_error(reqs.error());
  auto broker = c.core.broker;
  auto sink = c.sink;
  auto timeout = timeout_of(c.core);
  struct batch {
    std::vector<json> results;
    size_t left = 0;
  };
  auto b = std::make_shared<batch>();
  b->results.resize(reqs->size());
  b->left = reqs->size();
  spawn_bridge(c.core, [broker, sink, timeout, b,
                        reqs = std::move(*reqs)](caf::event_based_actor* self) {
    auto finish = [sink, b] {
      if (--b->left > 0)
        return;
      json arr = json::array();
      for (auto& r : b->results)
        arr.push_back(std::move(r));
      sink->post([arr = std::move(arr)]() mutable {
        return reply(200, json{{"results", std::move(arr)}});
      });
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto& req = reqs[i];
      json head{{"topic", req.topic},
                {"partition", req.partition.value},
                {"offset", req.off.value}};
      self->request(broker, timeout, ack_atom_v, req)
        .then(
          [b, i, head, finish](queue_ack_response& x) mutable {
            auto j = http_api::to_json(x, Kind);
            j.update(head);
            b->results[i] = std::move(j);
            finish();
          },
          [b, i, head, finish](caf::error& err) mutable {
            auto e = http_api::to_api_error(err);
            auto j = http_api::error_body(e.code, e.message);
            j.update(head);
            b->results[i] = std::move(j);
            finish();
          });
    }
  });
}

/// POST /v1/groups/{g}/queue/{topic}/{ack,nack,reject,extend}, or without
/// the topic in the path: the body's "topic". A body with "records" settles
/// up to max_settle_batch records in one call (queue_settle_batch).
template <queue_ack_kind Kind>
void queue_settle(call& c) {
  if (c.params.size() < 2)
    c.params.emplace_back(); // the body names the topic
  if (!permitted(c, "group", c.params[0], "read"))
    return;
  auto body = body_of(c);
  if (!body)
    return;
  if (body->is_object() && body->contains("records"))
    return queue_settle_batch<Kind>(c, *body);
  auto req = http_api::parse_queue_ack(*body, c.params[0], c.params[1], Kind);
  if (!req)
    return c.sink->post_error(req.error());
  ask<queue_ack_response>(
    c, timeout_of(c.core),
    [](queue_ack_response& x) { return reply(200, http_api::to_json(x, Kind)); },
    ack_atom_v, *req);
}

// -- handlers: DLQ operations (actors/server/dlq_manager.hpp) ----------------------------

void list_dlqs(call& c) {
  describe_filter visible{c, "dlq"};
  ask<std::vector<dlq_info>>(
    c, timeout_of(c.core),
    [visible](std::vector<dlq_info>& xs) {
      json out = json::array();
      for (auto& x : xs)
        if (visible(x.topic))
          out.push_back(http_api::to_json(x));
      return reply(200, json{{"dlqs", std::move(out)}});
    },
    list_atom_v, dlq_atom_v);
}

/// GET /v1/dlq/{topic}?offset=&max=&grep=&error=&partition=&maxScan=
///   &includeRedriven=&encoding=
void show_dlq(call& c) {
  if (!permitted(c, "dlq", c.params[0], "read"))
    return;
  dlq_show_request req;
  req.topic = c.params[0];
  struct int_param {
    const char* name;
    int64_t lo;
    int64_t hi;
  };
  auto get = [&](int_param p, auto& out) -> bool {
    auto q = c.req.param(p.name);
    if (!q)
      return true;
    auto v = http_api::parse_int(*q, p.lo, p.hi, p.name);
    if (!v) {
      c.sink->post_error(v.error());
      return false;
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
    return true;
  };
  constexpr auto i32 = std::numeric_limits<int32_t>::max();
  constexpr auto i64 = std::numeric_limits<int64_t>::max();
  if (!get({"offset", 0, i64}, req.from_offset)
      || !get({"max", 1, c.core.cfg.max_limit}, req.max_records)
      || !get({"partition", 0, i32}, req.partition)
      || !get({"maxScan", 1, i64}, req.max_scan))
    return;
  if (auto q = c.req.param("grep"))
    req.grep = *q;
  if (auto q = c.req.param("error"))
    req.error_contains = *q;
  if (auto q = c.req.param("includeRedriven")) {
    if (*q != "true" && *q != "false")
      return bad_request(c, "includeRedriven must be true or false");
    req.include_redriven = *q == "true";
  }
  auto enc = http_api::value_encoding::automatic;
  if (auto q = c.req.param("encoding")) {
    auto e = http_api::parse_encoding(*q);
    if (!e)
      return bad_request(c, "encoding must be auto, json, string or base64, "
                            "not '" + *q + "'");
    enc = *e;
  }
  // A record of a topic the caller may not read is left out: its DLQ
  // must not be a way around the topic's ACLs.
  auto security = c.core.cfg.security;
  auto user = c.req.user;
  ask<dlq_show_response>(
    c, timeout_of(c.core),
    [enc, security, user](dlq_show_response& r) {
      if (security) {
        auto& rs = r.records;
        rs.erase(std::remove_if(rs.begin(), rs.end(),
                                [&](const dlq_record& x) {
                                  return !security->authorize(
                                    user, "topic", x.original_topic, "read");
                                }),
                 rs.end());
      }
      return reply(200, http_api::to_json(r, enc));
    },
    show_atom_v, std::move(req));
}

/// POST /v1/dlq/{topic}/redrive: answers when done (use maxRecords to
/// chunk long or paced redrives).
void redrive_dlq(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto req = http_api::parse_dlq_redrive(*body, c.params[0]);
  if (!req)
    return c.sink->post_error(req.error());
  if (!req->to_topic.empty() && !permitted(c, "topic", req->to_topic, "write"))
    return;
  if (!admin(c, "dlq", c.params[0], "redrive"))
    return;
  ask<dlq_redrive_response>(
    c, std::chrono::hours{1},
    [](dlq_redrive_response& r) { return reply(200, http_api::to_json(r)); },
    redrive_atom_v, std::move(*req));
}

/// POST /v1/dlq/{topic}/purge; an empty body purges everything.
void purge_dlq(call& c) {
  json body = json::object();
  if (!c.req.body.empty()) {
    auto b = body_of(c);
    if (!b)
      return;
    body = std::move(*b);
  }
  auto req = http_api::parse_dlq_purge(body, c.params[0]);
  if (!req)
    return c.sink->post_error(req.error());
  if (!admin(c, "dlq", c.params[0], "delete"))
    return;
  c.admin_action = "purge";
  ask<dlq_purge_response>(
    c, timeout_of(c.core),
    [](dlq_purge_response& r) { return reply(200, http_api::to_json(r)); },
    purge_atom_v, std::move(*req));
}

// -- handlers: users and ACLs (issue 16) -----------------------------------------------

void list_users(call& c) {
  if (!permitted(c, "cluster", "cluster", "describe"))
    return;
  ask<std::vector<user_info>>(
    c, timeout_of(c.core),
    [](std::vector<user_info>& us) {
      json out = json::array();
      for (auto& u : us)
        out.push_back(http_api::to_json(u));
      return reply(200, json{{"users", std::move(out)}});
    },
    list_atom_v, user_atom_v);
}

void create_user(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto spec = http_api::parse_user_spec(*body);
  if (!spec)
    return c.sink->post_error(spec.error());
  if (!admin(c, "cluster", "cluster", "alter"))
    return;
  c.admin_action = "set credential";
  c.admin_resource = "user " + spec->name;
  auto cred = make_scram_credential(spec->name, spec->password,
                                    spec->iterations);
  OPENSSL_cleanse(spec->password.data(), spec->password.size());
  OPENSSL_cleanse(c.req.body.data(), c.req.body.size());
  if (!cred)
    return c.sink->post_error(cred.error());
  ask<user_info>(
    c, timeout_of(c.core),
    [](user_info& u) {
      auto r = reply(201, http_api::to_json(u));
      r.location = "/v1/users/" + u.name;
      return r;
    },
    update_atom_v, user_atom_v, std::move(*cred));
}

void delete_user(call& c) {
  if (!admin(c, "cluster", "cluster", "alter"))
    return;
  c.admin_action = "delete";
  c.admin_resource = "user " + c.params[0];
  ask<user_info>(
    c, timeout_of(c.core),
    [](user_info& u) { return reply(200, json{{"deleted", u.name}}); },
    delete_atom_v, user_atom_v, c.params[0]);
}

void list_acls(call& c) {
  if (!permitted(c, "cluster", "cluster", "describe"))
    return;
  ask<std::vector<acl_entry>>(
    c, timeout_of(c.core),
    [](std::vector<acl_entry>& xs) {
      json out = json::array();
      for (auto& x : xs)
        out.push_back(http_api::to_json(x));
      return reply(200, json{{"acls", std::move(out)}});
    },
    list_atom_v, acl_atom_v);
}

std::string acl_text(const acl_entry& x) {
  return x.permission + " " + x.principal + " " + x.operation + " "
         + x.resource_type + " " + x.pattern_type + " " + x.resource_name;
}

template <bool Add>
void change_acl(call& c) {
  auto body = body_of(c);
  if (!body)
    return;
  auto x = http_api::parse_acl(*body);
  if (!x)
    return c.sink->post_error(x.error());
  if (auto err = normalize_acl(*x))
    return c.sink->post_error(err);
  if (!admin(c, "cluster", "cluster", "alter"))
    return;
  c.admin_action = Add ? "add acl" : "remove acl";
  c.admin_resource = acl_text(*x);
  if constexpr (Add) {
    ask<acl_entry>(
      c, timeout_of(c.core),
      [](acl_entry& a) { return reply(201, http_api::to_json(a)); },
      create_atom_v, acl_atom_v, std::move(*x));
  } else {
    ask<std::vector<acl_entry>>(
      c, timeout_of(c.core),
      [](std::vector<acl_entry>& xs) {
        json out = json::array();
        for (auto& a : xs)
          out.push_back(http_api::to_json(a));
        return reply(200, json{{"removed", std::move(out)}});
      },
      delete_atom_v, acl_atom_v, std::move(*x));
  }
}

// -- handlers: bearer tokens (issue 16) ------------------------------------------------

/// POST /v1/tokens: a bearer token for the user who logged in with a
/// password (see the header). Body optional: {"ttlSeconds": N}.
void issue_token(call& c) {
  auto* sec = c.core.cfg.security.get();
  if (!sec)
    return c.sink->post_error(400, ec::invalid_request,
                              "this node runs without --auth: requests need no token");
  if (c.req.by_token)
    return c.sink->post([] {
      return unauthenticated("log in with a password (HTTP Basic) to get a "
                             "token; a token cannot be traded for another");
    });
  auto ttl = c.core.cfg.token_ttl;
  if (!c.req.body.empty()) {
    auto body = body_of(c);
    if (!body)
      return;
    if (!body->is_object())
      return c.sink->post_error(400, ec::invalid_request,
                                "the body must be a JSON object");
    for (auto& [k, v] : body->items())
      if (k != "ttlSeconds")
        return c.sink->post_error(400, ec::invalid_request,
                                  "unknown field \"" + k + "\" (only ttlSeconds)");
    if (body->contains("ttlSeconds")) {
      auto& v = (*body)["ttlSeconds"];
      auto max = c.core.cfg.token_max_ttl.count();
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max)
        return c.sink->post_error(400, ec::invalid_request,
                                  "\"ttlSeconds\" must be a whole number from 1 to "
                                    + std::to_string(max));
      ttl = std::chrono::seconds{v.get<int64_t>()};
    }
  }
  auto cred = sec->user(c.req.user);
  if (!cred) // deleted between the login and here
    return c.sink->post([] { return unauthenticated("unknown user or wrong password"); });
  auto now = now_ms();
  auto ttl_ms = std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count();
  auto token = issue_bearer_token(*cred, now, ttl_ms);
  if (!token)
    return c.sink->post_error(token.error());
  c.core.audit(c.req.user, c.req.peer, "issue token", "user " + c.req.user, "allowed",
               "expires in " + std::to_string(ttl.count()) + " s");
  auto r = reply(201, json{{"token", std::move(*token)},
                           {"tokenType", "Bearer"},
                           {"user", c.req.user},
                           {"expiresAtMs", now + ttl_ms},
                           {"expiresInSeconds", ttl.count()}});
  r.no_store = true;
  c.sink->post([r = std::move(r)] { return r; });
}

// -- the router ------------------------------------------------------------------

using handler_fn = void (*)(call&);

struct route_entry {
  std::vector<std::string_view> pattern; ///< "{}" matches one segment
  std::vector<std::pair<http::verb, handler_fn>> methods;
};

const std::vector<route_entry>& routes() {
  using v = http::verb;
  static const std::vector<route_entry> table{
    {{"healthz"}, {{v::get, get_health}}},
    {{"v1", "cluster"}, {{v::get, get_cluster}}},
    {{"v1", "cluster", "nodes", "{}"}, {{v::delete_, remove_node}}},
    {{"v1", "topics"}, {{v::get, list_topics}, {v::post, create_topic}}},
    {{"v1", "topics", "{}"},
     {{v::get, describe_topic}, {v::patch, alter_topic}, {v::delete_, delete_topic}}},
    {{"v1", "topics", "{}", "messages"}, {{v::post, produce}}},
    {{"v1", "topics", "{}", "partitions", "{}", "messages"}, {{v::get, fetch}}},
    {{"v1", "groups"}, {{v::get, list_groups}}},
    {{"v1", "groups", "{}"}, {{v::get, describe_group}, {v::delete_, delete_group}}},
    {{"v1", "groups", "{}", "offsets"}, {{v::post, commit_group}}},
    {{"v1", "groups", "{}", "reset"}, {{v::post, reset_group}}},
    {{"v1", "groups", "{}", "queue"},
     {{v::get, describe_queue_group},
      {v::put, create_queue_group},
      {v::patch, alter_queue_group}}},
    {{"v1", "groups", "{}", "queue", "{}", "receive"}, {{v::post, queue_receive}}},
    {{"v1", "groups", "{}", "queue", "receive"}, {{v::post, queue_receive}}},
    {{"v1", "groups", "{}", "queue", "ack"},
     {{v::post, queue_settle<queue_ack_kind::ack>}}},
    {{"v1", "groups", "{}", "queue", "nack"},
     {{v::post, queue_settle<queue_ack_kind::nack>}}},
    {{"v1", "groups", "{}", "queue", "reject"},
     {{v::post, queue_settle<queue_ack_kind::reject>}}},
    {{"v1", "groups", "{}", "queue", "extend"},
     {{v::post, queue_settle<queue_ack_kind::extend>}}},
    {{"v1", "groups", "{}", "queue", "{}", "ack"},
     {{v::post, queue_settle<queue_ack_kind::ack>}}},
    {{"v1", "groups", "{}", "queue", "{}", "nack"},
     {{v::post, queue_settle<queue_ack_kind::nack>}}},
    {{"v1", "groups", "{}", "queue", "{}", "reject"},
     {{v::post, queue_settle<queue_ack_kind::reject>}}},
    {{"v1", "groups", "{}", "queue", "{}", "extend"},
     {{v::post, queue_settle<queue_ack_kind::extend>}}},
    {{"v1", "dlq"}, {{v::get, list_dlqs}}},
    {{"v1", "dlq", "{}"}, {{v::get, show_dlq}}},
    {{"v1", "dlq", "{}", "redrive"}, {{v::post, redrive_dlq}}},
    {{"v1", "dlq", "{}", "purge"}, {{v::post, purge_dlq}}},
    {{"v1", "tokens"}, {{v::post, issue_token}}},
    {{"v1", "users"}, {{v::get, list_users}, {v::post, create_user}}},
    {{"v1", "users", "{}"}, {{v::delete_, delete_user}}},
    {{"v1", "acls"},
     {{v::get, list_acls}, {v::post, change_acl<true>}, {v::delete_, change_acl<false>}}},
  };
  return table;
}

void route(gateway_core& core, api_request req, sink_ptr sink) {
  for (auto& r : routes()) {
    if (r.pattern.size() != req.segments.size())
      continue;
    std::vector<std::string> params;
    bool match = true;
    for (size_t i = 0; i < r.pattern.size() && match; ++i) {
      if (r.pattern[i] == "{}")
        params.push_back(req.segments[i]);
      else
        match = r.pattern[i] == req.segments[i];
    }
    if (!match)
      continue;
    for (auto& [method, fn] : r.methods) {
      if (method != req.method)
        continue;
      call c{core, std::move(req), std::move(params), sink, {}, {}};
      try {
        fn(c);
      } catch (const std::exception& e) {
        log::error("http: handler failed: {}", e.what());
        sink->post_error(500, ec::io_error,
                         std::string{"internal error: "} + e.what());
      }
      return;
    }
    std::string allow;
    for (auto& [method, fn] : r.methods) {
      if (!allow.empty())
        allow += ", ";
      allow += std::string{http::to_string(method)};
    }
    auto text = std::string{http::to_string(req.method)};
    sink->post([allow, text] {
      auto r = reply_error(405, to_string(ec::invalid_request),
                           "method " + text + " is not allowed here; use "
                             + allow);
      r.allow = allow;
      return r;
    });
    return;
  }
  sink->post_error(404, ec::not_found, "no such endpoint");
}

/// The address of "ip:port" (IPv6 too).
std::string address_of(const std::string& peer) {
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

/// Base64 (RFC 4648, padded); nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0 || in.size() > 4096)
    return std::nullopt;
  std::string out(in.size() / 4 * 3, '\0');
  auto n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(in.data()),
                           static_cast<int>(in.size()));
  if (n < 0)
    return std::nullopt;
  size_t pad = in.back() == '=' ? (in[in.size() - 2] == '=' ? 2 : 1) : 0;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string sha256_of(std::string_view a, std::string_view b) {
  std::string in{a};
  in.push_back('\0');
  in.append(b);
  std::array<unsigned char, SHA256_DIGEST_LENGTH> md{};
  SHA256(reinterpret_cast<const unsigned char*>(in.data()), in.size(),
         md.data());
  return std::string{reinterpret_cast<const char*>(md.data()), md.size()};
}

api_response unauthenticated(const std::string& message) {
  auto r = reply_error(401, to_string(ec::authentication_failed), message);
  r.www_authenticate = "Basic realm=\"ferry\", charset=\"UTF-8\", Bearer realm=\"ferry\"";
  return r;
}

/// A refused bearer token (RFC 6750, section 3).
api_response token_refused(const std::string& message) {
  auto r = reply_error(401, to_string(ec::authentication_failed), message);
  r.www_authenticate = "Bearer realm=\"ferry\", error=\"invalid_token\", "
                       "error_description=\"" + message + "\"";
  return r;
}

/// Counts a failed login from `ar.peer` (locking the address out past
/// login_failures_allowed), logs and audits it.
void login_failed(gateway_core& core, const api_request& ar,
                  const std::string& user, const std::string& why) {
  auto failures = core.logins.failed(address_of(ar.peer));
  log::warn("{}: login failed for user '{}' from {} ({} failed since the last "
            "success from there): {}",
            core.cfg.name, user, ar.peer, failures, why);
  // The principal is the one claimed (the audit line says it was denied).
  core.audit(user, ar.peer, "login", "cluster", "denied", why);
}

/// The credentials after a case-insensitive scheme word ("basic",
/// "bearer") and a space, trimmed; nullopt for another scheme.
std::optional<std::string_view> credentials_of(std::string_view authorization,
                                               std::string_view scheme) {
  if (authorization.size() <= scheme.size()
      || authorization[scheme.size()] != ' '
      || !std::equal(scheme.begin(), scheme.end(), authorization.begin(),
                     [](char a, char b) {
                       return a == std::tolower(static_cast<unsigned char>(b));
                     }))
    return std::nullopt;
  auto rest = authorization.substr(scheme.size() + 1);
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == ' ')
    rest.remove_suffix(1);
  return rest;
}

/// Checks a bearer token (see the header): sets ar.user, or answers the
/// reply to send instead.
std::optional<api_response> authenticate_token(gateway_core& core, api_request& ar,
                                               std::string_view token) {
  auto& sec = *core.cfg.security;
  auto user = bearer_token_user(token);
  if (!user) {
    login_failed(core, ar, "", "malformed bearer token");
    return token_refused("malformed bearer token");
  }
  auto cred = sec.user(*user);
  if (!cred) {
    // Deleted since it was issued, or never a user: as invalid as a
    // forged token (the reply does not say which).
    login_failed(core, ar, *user, "bearer token of an unknown user");
    return token_refused("invalid bearer token");
  }
  auto claims = verify_bearer_token(*cred, token, now_ms());
  if (!claims) {
    auto why = http_api::to_api_error(claims.error()).message;
    if (why == "bearer token expired") {
      // Signed with the user's key: not a guess, so it is not counted.
      core.audit(*user, ar.peer, "login", "cluster", "denied", why);
      return token_refused(why);
    }
    login_failed(core, ar, *user, why);
    return token_refused(why);
  }
  core.logins.succeeded(address_of(ar.peer));
  ar.user = claims->user;
  ar.by_token = true;
  return std::nullopt;
}

/// Checks the request's Basic credentials or bearer token (see the
/// header): sets ar.user, or answers the reply to send instead.
std::optional<api_response> authenticate(gateway_core& core, api_request& ar,
                                         std::string_view authorization) {
  auto& sec = *core.cfg.security;
  auto ip = address_of(ar.peer);
  if (auto wait = core.logins.locked_for(ip); wait.count() > 0) {
    auto secs = std::to_string((wait.count() + 999) / 1000);
    auto r = reply_error(429, to_string(ec::login_throttled),
                         "too many failed logins from " + ip
                           + ": try again in " + secs + " s");
    r.retry_after = secs;
    return r;
  }
  if (auto bearer = credentials_of(authorization, "bearer"))
    return authenticate_token(core, ar, *bearer);
  // "Basic <base64(user:password)>"; the scheme is case-insensitive.
  auto token = credentials_of(authorization, "basic");
  if (!token) {
    core.audit(ar.user, ar.peer, "login", "cluster", "denied", "no credentials");
    return unauthenticated(
      authorization.empty()
        ? "this node requires a user and password (HTTP Basic over https) "
          "or a bearer token"
        : "only HTTP Basic credentials and bearer tokens are accepted");
  }
  auto decoded = base64_decode(*token);
  auto colon = decoded ? decoded->find(':') : std::string::npos;
  if (!decoded || colon == std::string::npos) {
    core.audit(ar.user, ar.peer, "login", "cluster", "denied",
               "malformed Basic credentials");
    return unauthenticated("malformed Basic credentials (base64 of user:password)");
  }
  auto user = decoded->substr(0, colon);
  std::string_view password{*decoded};
  password.remove_prefix(colon + 1);
  auto key = sha256_of(user, password);
  auto version = sec.version();
  {
    std::lock_guard<std::mutex> guard{core.verified_mtx};
    auto i = core.verified.find(key);
    if (i != core.verified.end() && i->second.first == user
        && i->second.second == version) {
      ar.user = user;
      return std::nullopt;
    }
  }
  auto cred = sec.user(user);
  bool ok = cred && verify_password(*cred, password);
  OPENSSL_cleanse(decoded->data(), decoded->size());
  if (ok) {
    {
      std::lock_guard<std::mutex> guard{core.verified_mtx};
      if (core.verified.size() >= 4096)
        core.verified.clear();
      core.verified[key] = std::make_pair(user, version);
    }
    core.logins.succeeded(ip);
    ar.user = user;
    return std::nullopt;
  }
  login_failed(core, ar, user, cred ? "wrong password" : "unknown user");
  return unauthenticated("unknown user or wrong password");
}

void dispatch(gateway_core& core, http::request<http::string_body> req,
              std::shared_ptr<session> s, std::string peer) {
  api_request ar;
  ar.peer = std::move(peer);
  ar.method = req.method();
  ar.body = std::move(req.body());
  auto sink = std::make_shared<reply_sink>(core.shared_from_this(), std::move(s));
  auto target = req.target();
  if (!parse_target(std::string_view{target.data(), target.size()}, ar)) {
    sink->post_error(400, ec::invalid_request,
                     "malformed request target (path or query)");
    return;
  }
  if (core.cfg.metrics_text) {
    if (ar.segments != std::vector<std::string>{"metrics"}) {
      sink->post_error(404, ec::not_found, "this port serves only GET /metrics");
      return;
    }
    if (ar.method != http::verb::get && ar.method != http::verb::head) {
      sink->post([] {
        auto r = reply_error(405, to_string(ec::invalid_request),
                             "use GET /metrics");
        r.allow = "GET";
        return r;
      });
      return;
    }
    auto* text = &core.cfg.metrics_text;
    sink->post([text] {
      api_response r;
      r.body = (*text)();
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    });
    return;
  }
  if (core.cfg.security && ar.segments != std::vector<std::string>{"healthz"}) {
    if (!core.cfg.security->loaded()) {
      sink->post([] {
        auto r = reply_error(503, to_string(ec::security_loading),
                             "this node is starting and has not loaded the users "
                             "from the metadata quorum yet: try again");
        r.retry_after = "1";
        return r;
      });
      return;
    }
    auto header = req[http::field::authorization];
    if (auto refused = authenticate(
          core, ar, std::string_view{header.data(), header.size()})) {
      sink->post([r = std::move(*refused)] { return r; });
      return;
    }
  }
  route(core, std::move(ar), std::move(sink));
}

} // namespace

// -- http_gateway ---------------------------------------------------------------

struct http_gateway::impl {
  explicit impl(http_gateway_config cfg)
    : core(std::make_shared<gateway_core>(std::move(cfg))),
      acceptor(core->ioc),
      retry(core->ioc),
      work(net::make_work_guard(core->ioc)) {
  }

  ~impl() {
    stop();
  }

  void accept() {
    acceptor.async_accept(
      net::make_strand(core->ioc),
      [this](beast::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open())
          return;
        if (ec) {
          // Out of descriptors (or similar): back off instead of spinning.
          auto now = steady::now();
          if (now - last_warning > std::chrono::seconds{10}) {
            last_warning = now;
            log::warn("http: accept failed: {}", ec.message());
          }
          retry.expires_after(std::chrono::milliseconds{50});
          retry.async_wait([this](beast::error_code ec) {
            if (!ec)
              accept();
          });
          return;
        }
        beast::error_code ignored;
        socket.set_option(tcp::no_delay{true}, ignored);
        if (auto ctx = core->tls_context()) {
          std::make_shared<tls_detector>(std::move(socket), *core, std::move(ctx))
            ->start();
        } else {
          std::shared_ptr<session> s = std::make_shared<plain_session>(
            beast::tcp_stream{std::move(socket)}, *core, beast::flat_buffer{}, false);
          core->track(s);
          s->start();
        }
        accept();
      });
  }

  void stop() {
    if (done)
      return;
    done = true;
    {
      std::lock_guard<std::mutex> guard{core->stop_mtx};
      core->stopped = true;
    }
    work.reset();
    core->ioc.stop();
    for (auto& t : threads)
      t.join();
    threads.clear();
    // No thread runs the io_context now: closing from here is safe.
    beast::error_code ec;
    acceptor.close(ec);
    retry.cancel();
    std::vector<std::shared_ptr<session>> live;
    {
      std::lock_guard<std::mutex> guard{core->sessions_mtx};
      for (auto& w : core->sessions)
        if (auto s = w.lock())
          live.push_back(std::move(s));
      core->sessions.clear();
    }
    for (auto& s : live)
      s->close_now();
  }

  std::shared_ptr<gateway_core> core;
  tcp::acceptor acceptor;
  net::steady_timer retry;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::vector<std::thread> threads;
  steady::time_point last_warning{};
  uint16_t port = 0;
  bool done = false;
};

caf::expected<std::unique_ptr<http_gateway>>
http_gateway::listen(http_gateway_config cfg) {
  auto host = cfg.host;
  auto wanted = cfg.port;
  auto p = std::make_shared<impl>(std::move(cfg));
  if (p->core->cfg.tls.enabled()) {
    auto ctx = make_server_tls_context(p->core->cfg.tls, p->core->cfg.name);
    if (!ctx)
      return std::move(ctx.error());
    p->core->tls = std::make_shared<ssl::context>(ctx->release());
  }
  beast::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec)
    return make_error(ec::io_error, "http: bad listen address '" + host
                                      + "': " + ec.message());
  tcp::endpoint ep{addr, wanted};
  auto where = host + ":" + std::to_string(wanted);
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ec::io_error,
                      "http: cannot listen on " + where + ": " + ec.message());
  p->port = p->acceptor.local_endpoint(ec).port();
  if (ec)
    return make_error(ec::io_error, "http: cannot read the bound port: "
                                      + ec.message());
  return std::unique_ptr<http_gateway>{new http_gateway(std::move(p))};
}

http_gateway::http_gateway(std::shared_ptr<impl> p) : impl_(std::move(p)) {
}

http_gateway::~http_gateway() {
  stop();
}

void http_gateway::serve(caf::actor_system& sys, broker_actor broker) {
  auto& p = *impl_;
  if (!p.threads.empty() || p.done)
    return;
  p.core->sys = &sys;
  p.core->broker = std::move(broker);
  run_threads();
}

void http_gateway::serve_metrics() {
  auto& p = *impl_;
  if (!p.threads.empty() || p.done || !p.core->cfg.metrics_text)
    return;
  run_threads();
}

void http_gateway::run_threads() {
  auto& p = *impl_;
  p.accept();
  auto n = std::max(1, p.core->cfg.threads);
  for (int i = 0; i < n; ++i)
    p.threads.emplace_back([core = p.core.get()] {
      for (;;) {
        try {
          core->ioc.run();
          return;
        } catch (const std::exception& e) {
          log::error("http: an io handler failed: {}", e.what());
        }
      }
    });
}

caf::error http_gateway::reload_tls() {
  auto& core = *impl_->core;
  if (!core.cfg.tls.enabled())
    return make_error(ec::invalid_config, "http: TLS is off on this port");
  auto ctx = make_server_tls_context(core.cfg.tls, core.cfg.name);
  if (!ctx)
    return std::move(ctx.error());
  auto wrapped = std::make_shared<ssl::context>(ctx->release());
  std::lock_guard<std::mutex> guard{core.tls_mtx};
  core.tls = std::move(wrapped);
  return {};
}

uint64_t http_gateway::failed_handshakes() const {
  return impl_->core->failed_handshakes.load(std::memory_order_relaxed);
}

uint16_t http_gateway::port() const {
  return impl_->port;
}

void http_gateway::stop() {
  if (impl_)
    impl_->stop();
}

} // namespace ferry
