#pragma once
// Internal to actors/kafka: what the API handlers share (one file per API
// family: kafka_listener.cpp has the connection, Metadata, Produce, Fetch,
// ListOffsets and InitProducerId; kafka_groups.cpp the group APIs;
// kafka_admin.cpp the admin APIs; kafka_sasl.cpp the login).
//
// listener_core  the io_context, the node's front door, the config, the
//                TLS context, the users and ACLs (with --auth scram).
// connection     one client socket (plain or TLS) on a strand: framing,
//                in-order answers, the SASL login (kafka_sasl.cpp) and the
//                bridge actor that asks the node for it.
// may()          the ACL check every handler makes where a request enters.
// respond()      a finished response frame.

#include "actors/kafka/kafka_listener.hpp"

#include "broker/audit_log.hpp"
#include "broker/kafka_protocol.hpp"
#include "broker/logging.hpp"
#include "broker/login_throttle.hpp"
#include "broker/scram_exchange.hpp"
#include "broker/security.hpp"

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ferry::kafka_detail {

/// A step of serving a request, run inside the connection's bridge actor
/// (in-process only: never serialized).
struct bridge_job {
  std::function<void(caf::event_based_actor*)> run;
};

} // namespace ferry::kafka_detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ferry::kafka_detail::bridge_job)

namespace ferry::kafka_detail {

namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

class connection;

/// The actor that asks the front door for one connection: one actor per
/// connection, so its requests reach the node in the order the client sent
/// them (CAF keeps the order between two actors), as Kafka clients expect of
/// one connection (several produce requests in flight to one partition).
inline caf::behavior bridge_actor(caf::event_based_actor* self) {
  return {[self](bridge_job& job) { job.run(self); }};
}

struct listener_core {
  explicit listener_core(kafka_listener_config c)
    : cfg(std::move(c)),
      logins(cfg.login_failures_allowed, cfg.login_lockout_base, cfg.login_lockout_max) {
  }

  kafka_listener_config cfg;
  /// Failed SASL logins of each client address.
  login_throttle logins;
  /// The server context new connections use (null: plaintext); replaced by
  /// reload_tls().
  std::mutex tls_mtx;
  std::shared_ptr<ssl::context> tls;

  std::shared_ptr<ssl::context> tls_context() {
    std::lock_guard<std::mutex> guard{tls_mtx};
    return tls;
  }

  /// True when connections must log in (--auth scram).
  bool auth() const {
    return cfg.security != nullptr;
  }

  /// One audit line (no-op without an audit log). `user`: "" before a login.
  void audit(const std::string& user, const std::string& peer, std::string action,
             std::string resource, std::string outcome, std::string detail = {}) {
    if (!cfg.audit)
      return;
    audit_event e;
    e.principal = user.empty() ? "anonymous" : "User:" + user;
    e.source = peer;
    e.via = "kafka";
    e.action = std::move(action);
    e.resource = std::move(resource);
    e.outcome = std::move(outcome);
    e.detail = std::move(detail);
    cfg.audit->write(e);
  }
  /// The port actually bound (FindCoordinator answers it).
  uint16_t bound_port = 0;
  net::io_context ioc;
  caf::actor_system* sys = nullptr;
  broker_actor broker;
  std::mutex stop_mtx;
  bool stopped = false;
  std::mutex conns_mtx;
  std::vector<std::weak_ptr<connection>> conns;
  std::mutex warn_mtx;
  steady::time_point last_warning{};
  uint64_t warnings_since = 0;

  void track(const std::shared_ptr<connection>& c) {
    std::lock_guard<std::mutex> guard{conns_mtx};
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](auto& w) { return w.expired(); }),
                conns.end());
    conns.push_back(c);
  }

  /// Bad input from clients is logged at most every 10 s (with a count).
  void warn_bad_input(const std::string& peer, const std::string& what) {
    std::lock_guard<std::mutex> guard{warn_mtx};
    auto now = steady::now();
    if (now - last_warning < std::chrono::seconds{10}) {
      ++warnings_since;
      return;
    }
    log::warn("kafka: closed the connection from {}: {}{}", peer, what,
              warnings_since > 0
                ? " (" + std::to_string(warnings_since)
                    + " more since the last report)"
                : std::string{});
    last_warning = now;
    warnings_since = 0;
  }
};

/// One client connection. Every handler runs on the socket's strand.
class connection : public std::enable_shared_from_this<connection> {
public:
  /// `tls`: the server context of a TLS port (null: plaintext).
  connection(tcp::socket s, listener_core& core, std::shared_ptr<ssl::context> tls)
    : core_(core), tls_ctx_(std::move(tls)) {
    boost::system::error_code ec;
    auto ep = s.remote_endpoint(ec);
    address_ = ec ? std::string{"?"} : ep.address().to_string();
    peer_ = ec ? std::string{"?"} : address_ + ":" + std::to_string(ep.port());
    if (tls_ctx_)
      tls_ = std::make_unique<ssl::stream<tcp::socket>>(std::move(s), *tls_ctx_);
    else
      sock_.emplace(std::move(s));
    if (core_.auth())
      stage_ = sasl_stage::handshake;
  }

  /// Starts reading requests (after the TLS handshake on a TLS port).
  void start();

  /// The client's address and port.
  const std::string& peer() const {
    return peer_;
  }

  /// The logged-in user ("" on a port without --auth).
  const std::string& user() const {
    return user_;
  }

  /// From any thread: request `seq` is answered with `frame` (nullopt: a
  /// request without an answer, acks=0).
  void complete(uint64_t seq, std::optional<std::string> frame) {
    complete(seq, parts_of(std::move(frame)));
  }

  /// The same with a frame in parts, written back to back without being
  /// joined (writer::take_chunks()); no parts: no answer.
  void complete(uint64_t seq, std::vector<std::string> parts) {
    {
      std::lock_guard<std::mutex> guard{core_.stop_mtx};
      if (core_.stopped)
        return;
    }
    net::post(socket().get_executor(),
              [self = shared_from_this(), seq, f = std::move(parts)]() mutable {
                self->on_complete(seq, std::move(f));
              });
  }

  ~connection() {
    if (bridge_)
      caf::anon_send_exit(bridge_, caf::exit_reason::user_shutdown);
  }

  /// Only once no io thread runs (stop()).
  void close_now() {
    boost::system::error_code ec;
    socket().close(ec);
    if (bridge_)
      caf::anon_send_exit(bridge_, caf::exit_reason::user_shutdown);
  }

  /// Runs `f` in this connection's bridge actor (on the strand: in the
  /// order requests were read).
  template <class F>
  void run(F f) {
    if (!bridge_)
      bridge_ = core_.sys->spawn(bridge_actor);
    caf::anon_send(bridge_, bridge_job{std::move(f)});
  }

private:
  /// Where a SASL login stands (always `open` on a port without --auth).
  enum class sasl_stage {
    open,         ///< no login needed, or logged in
    handshake,    ///< waiting for SaslHandshake
    authenticate, ///< mechanism chosen: waiting for its (first) token
    scram_final,  ///< SCRAM: waiting for the client-final message
  };

  tcp::socket& socket() {
    return tls_ ? tls_->next_layer() : *sock_;
  }

  template <class Buffers, class Handler>
  void async_read_all(Buffers b, Handler h) {
    if (tls_)
      net::async_read(*tls_, b, std::move(h));
    else
      net::async_read(*sock_, b, std::move(h));
  }

  template <class Buffers, class Handler>
  void async_write_all(Buffers b, Handler h) {
    if (tls_)
      net::async_write(*tls_, b, std::move(h));
    else
      net::async_write(*sock_, b, std::move(h));
  }

  void close(const std::string& why) {
    if (closed_)
      return;
    closed_ = true;
    if (!why.empty())
      core_.warn_bad_input(peer_, why);
    boost::system::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
  }

  /// Answers request `seq` with `frame`, then closes once every earlier
  /// answer and this one are written, reading nothing more (a failed
  /// login, as Kafka closes the connection after one).
  void answer_and_close(uint64_t seq, std::string frame) {
    closing_ = true;
    on_complete(seq, std::move(frame));
  }

  // kafka_sasl.cpp: the login.
  /// True while the connection has not logged in on a port that needs it.
  bool needs_login() const {
    return stage_ != sasl_stage::open;
  }
  /// Serves SaslHandshake and SaslAuthenticate requests.
  void serve_sasl(const kafka::request_header& h, kafka::reader& in, uint64_t seq);
  /// After a v0 handshake: one raw token frame.
  void serve_raw_token(const std::string& token, uint64_t seq);
  /// One token of the chosen mechanism: the answer's token, or an error
  /// (the caller answers and closes); sets user_ when the login is done.
  caf::expected<std::string> next_token(const std::string& token);
  /// A logged-in user whose credential changed or was deleted since the
  /// login: false (and the connection is closed).
  bool still_valid();
  /// Counts, logs and audits a failed login.
  void login_failed(const std::string& user, const std::string& why);
  /// The login as `cred.user` succeeded (registry version `version`).
  void logged_in(const scram_credential& cred, uint64_t version);

  void read_size() {
    if (closed_ || closing_)
      return;
    if (in_flight_ >= core_.cfg.max_in_flight) {
      paused_ = true; // resumed by on_complete
      return;
    }
    async_read_all(net::buffer(size_buf_),
                    [self = shared_from_this()](boost::system::error_code ec,
                                                size_t) {
                      if (ec) {
                        self->close({}); // the client went away
                        return;
                      }
                      self->on_size();
                    });
  }

  void on_size() {
    auto b = [this](int i) { return static_cast<uint32_t>(size_buf_[i]); };
    auto size = static_cast<int32_t>((b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3));
    if (raw_tokens_) {
      // A SASL token after a v0 handshake: no request header.
      if (size < 1 || size > max_token_bytes) {
        close("a SASL token of " + std::to_string(size) + " bytes (1 to "
              + std::to_string(max_token_bytes) + " allowed)");
        return;
      }
    } else if (size < 10) {
      // The smallest request header: api key, version, correlation id,
      // client id length.
      close("a request frame of " + std::to_string(size)
            + " bytes, shorter than a request header");
      return;
    }
    if (static_cast<size_t>(size) > core_.cfg.max_request_bytes) {
      close("a request frame of " + std::to_string(size)
            + " bytes, over the limit of "
            + std::to_string(core_.cfg.max_request_bytes));
      return;
    }
    frame_ = std::make_shared<std::string>(static_cast<size_t>(size), '\0');
    async_read_all(net::buffer(frame_->data(), frame_->size()),
                    [self = shared_from_this()](boost::system::error_code ec,
                                                size_t) {
                      if (ec) {
                        self->close(ec == net::error::eof
                                      ? "the connection ended inside a request frame"
                                      : std::string{});
                        return;
                      }
                      auto seq = self->next_seq_++;
                      ++self->in_flight_;
                      if (self->raw_tokens_)
                        self->serve_raw_token(*self->frame_, seq);
                      else
                        self->handle(std::move(self->frame_), seq);
                      self->read_size();
                    });
  }

  static std::vector<std::string> parts_of(std::optional<std::string> frame) {
    std::vector<std::string> parts;
    if (frame)
      parts.push_back(std::move(*frame));
    return parts;
  }

  void on_complete(uint64_t seq, std::string frame) {
    on_complete(seq, parts_of(std::move(frame)));
  }

  void on_complete(uint64_t seq, std::vector<std::string> parts) {
    --in_flight_;
    ready_.emplace(seq, std::move(parts));
    for (auto i = ready_.find(next_write_); i != ready_.end();
         i = ready_.find(next_write_)) {
      for (auto& part : i->second)
        out_.push_back(std::move(part));
      ready_.erase(i);
      ++next_write_;
    }
    write_next();
    if (closing_ && !writing_ && out_.empty() && in_flight_ == 0) {
      close({});
      return;
    }
    if (paused_ && in_flight_ < core_.cfg.max_in_flight) {
      paused_ = false;
      read_size();
    }
  }

  /// Writes every queued part (up to 64) in one gathered write.
  void write_next() {
    if (writing_ || out_.empty() || closed_)
      return;
    writing_ = true;
    auto n = std::min<size_t>(out_.size(), 64);
    gather_.clear();
    for (size_t i = 0; i < n; ++i)
      gather_.push_back(net::buffer(out_[i]));
    async_write_all(gather_,
                     [self = shared_from_this(), n](boost::system::error_code ec,
                                                    size_t) {
                       self->writing_ = false;
                       if (ec) {
                         self->close({});
                         return;
                       }
                       self->out_.erase(self->out_.begin(),
                                        self->out_.begin() + static_cast<ptrdiff_t>(n));
                       self->write_next();
                       if (self->closing_ && !self->writing_ && self->out_.empty()
                           && self->in_flight_ == 0)
                         self->close({});
                     });
  }

  void handle(std::shared_ptr<std::string> frame, uint64_t seq);

  /// The longest SASL token taken (a SCRAM message is ~200 bytes).
  static constexpr int32_t max_token_bytes = 64 * 1024;

  listener_core& core_;
  std::shared_ptr<ssl::context> tls_ctx_; ///< before tls_, which uses it
  std::optional<tcp::socket> sock_;      ///< plaintext
  std::unique_ptr<ssl::stream<tcp::socket>> tls_;
  std::string address_; ///< the client's address (what logins are counted by)
  std::string peer_;
  sasl_stage stage_ = sasl_stage::open;
  bool raw_tokens_ = false; ///< after a v0 handshake, until the login ends
  std::string mechanism_;
  std::unique_ptr<scram_server> scram_;
  std::string claimed_user_; ///< of the login in progress (for the log)
  std::string user_;
  std::string stored_key_;        ///< the user's StoredKey at login
  uint64_t checked_version_ = 0;  ///< registry version stored_key_ was checked at
  bool closing_ = false;
  std::array<uint8_t, 4> size_buf_{};
  std::shared_ptr<std::string> frame_;
  uint64_t next_seq_ = 0;
  uint64_t next_write_ = 0;
  size_t in_flight_ = 0;
  bool paused_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::map<uint64_t, std::vector<std::string>> ready_;
  std::deque<std::string> out_;       ///< parts to write, in order
  std::vector<net::const_buffer> gather_; ///< the parts being written
  caf::actor bridge_;
};

using conn_ptr = std::shared_ptr<connection>;

/// A finished response frame for `h` with the body `write(w)`.
template <class F>
std::string respond(const kafka::request_header& h, F write) {
  kafka::writer w;
  // Only ApiVersions among the served APIs is flexible (v3), and its
  // response header is always v0.
  kafka::begin_response(w, h.correlation_id, false);
  write(w);
  kafka::finish_response(w);
  return std::move(w.buffer());
}

/// Serves a request that asks the node `n` things: runs them in the bridge actor; `ask(self, i, done)` sends the
/// i-th and calls done() when it is answered; `answer()` is written once
/// all are.
template <class Ask, class Answer>
void fan_out(conn_ptr conn, uint64_t seq, size_t n, Ask ask, Answer answer) {
  if (n == 0) {
    conn->complete(seq, answer());
    return;
  }
  auto pending = std::make_shared<size_t>(n);
  conn->run([=](caf::event_based_actor* self) {
    for (size_t i = 0; i < n; ++i)
      ask(self, i, [=] {
        if (--*pending == 0)
          conn->complete(seq, answer());
      });
  });
}

// -- the API families (each in its file) ----------------------------------------

/// The group APIs (kafka_groups.cpp): FindCoordinator, JoinGroup, SyncGroup,
/// Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
/// DescribeGroups. Decodes the body from `in` and answers request `seq`;
/// false (nothing answered) if the body does not decode: in.error() says
/// why and the caller closes the connection.
bool serve_group_api(listener_core& core, conn_ptr conn, uint64_t seq,
                     const kafka::request_header& h, kafka::reader& in);

/// True when the port runs without --auth, or the connection's user may do
/// `op` on the resource (broker/security.hpp's rules). A denial is audited
/// (and logged at debug level); the caller answers the API's
/// *_AUTHORIZATION_FAILED code.
bool may(listener_core& core, const connection& c, std::string_view resource_type,
         const std::string& name, std::string_view op);

/// The admin APIs (kafka_admin.cpp): CreateTopics, DeleteTopics,
/// CreatePartitions, DescribeConfigs, AlterConfigs, DeleteRecords. As
/// serve_group_api.
bool serve_admin_api(listener_core& core, conn_ptr conn, uint64_t seq,
                     const kafka::request_header& h, kafka::reader& in);

} // namespace ferry::kafka_detail
