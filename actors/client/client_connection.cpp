#include "actors/client/client_connection.hpp"

#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"

#include "broker/scram_exchange.hpp"

#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace ferry {

void configure_client(caf::actor_system_config& cfg) {
  using namespace std::chrono_literals;
  register_types(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{1s});
  cfg.set("middleman.connection-timeout", caf::timespan{5s});
}

std::string to_string(const broker_endpoint& ep) {
  if (ep.host.find(':') != std::string::npos)
    return "[" + ep.host + "]:" + std::to_string(ep.port);
  return ep.host + ":" + std::to_string(ep.port);
}

std::vector<broker_endpoint> connection_config::targets() const {
  if (!endpoints.empty())
    return endpoints;
  return {broker_endpoint{host, port}};
}

namespace {

std::string_view trim(std::string_view x) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!x.empty() && blank(x.front()))
    x.remove_prefix(1);
  while (!x.empty() && blank(x.back()))
    x.remove_suffix(1);
  return x;
}

/// Parses one "HOST[:PORT]" element.
caf::expected<broker_endpoint> parse_endpoint(std::string_view addr) {
  broker_endpoint ep;
  if (addr.empty())
    return make_error(ec::invalid_config, "empty broker address");
  std::string_view host = addr;
  std::string_view port;
  if (addr.front() == '[') {
    auto close = addr.find(']');
    if (close == std::string_view::npos)
      return make_error(ec::invalid_config,
                        "broker address '" + std::string{addr} + "': missing ']'");
    host = addr.substr(1, close - 1);
    auto rest = addr.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return make_error(ec::invalid_config, "broker address '"
                                                + std::string{addr}
                                                + "': expected ':' after ']'");
      port = rest.substr(1);
    }
  } else if (auto colon = addr.rfind(':'); colon != std::string_view::npos) {
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  if (host.empty())
    return make_error(ec::invalid_config,
                      "broker address '" + std::string{addr} + "': empty host");
  ep.host = std::string{host};
  if (!port.empty() || addr.back() == ':') {
    unsigned value = 0;
    auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (err != std::errc{} || end != port.data() + port.size() || value == 0
        || value > 65535)
      return make_error(ec::invalid_config, "broker address '" + std::string{addr}
                                              + "': bad port '" + std::string{port}
                                              + "'");
    ep.port = static_cast<uint16_t>(value);
  }
  return ep;
}

} // namespace

caf::expected<connection_config> parse_broker_address(std::string_view addr) {
  connection_config cfg;
  if (trim(addr).empty())
    return make_error(ec::invalid_config, "empty broker address");
  size_t index = 0;
  for (std::string_view rest = addr;;) {
    ++index;
    auto comma = rest.find(',');
    auto element = trim(rest.substr(0, comma));
    if (element.empty())
      return make_error(ec::invalid_config, "broker address list '" + std::string{addr}
                                              + "': element " + std::to_string(index)
                                              + " is empty");
    auto ep = parse_endpoint(element);
    if (!ep)
      return std::move(ep.error());
    cfg.endpoints.push_back(std::move(*ep));
    if (comma == std::string_view::npos)
      break;
    rest = rest.substr(comma + 1);
  }
  cfg.host = cfg.endpoints.front().host;
  cfg.port = cfg.endpoints.front().port;
  return cfg;
}

std::string default_broker_address() {
  if (auto env = std::getenv("FERRY_BROKER"); env != nullptr && *env != '\0')
    return env;
  // A local cluster started here (deploy/local-cluster.sh): its brokers file.
  std::string dir = "ferry-cluster";
  if (auto env = std::getenv("FERRY_CLUSTER_DIR"); env != nullptr && *env != '\0')
    dir = env;
  if (std::ifstream in{dir + "/brokers"}) {
    std::string list;
    std::string line;
    while (std::getline(in, line)) {
      auto ep = trim(line);
      if (ep.empty() || ep.front() == '#')
        continue;
      if (!list.empty())
        list += ',';
      list += ep;
    }
    if (!list.empty())
      return list;
  }
  return "127.0.0.1:9092";
}

bool is_retriable(const caf::error& err) {
  if (!err)
    return false;
  if (err.category() == ferry_category()) {
    switch (code_of(err)) {
      case ec::not_leader:
      case ec::throttled:
      case ec::request_timed_out:
      case ec::not_enough_replicas:
      case ec::fenced_leader_epoch:
      case ec::coordinator_not_available:
      // The device was full: space comes back (retention, an operator),
      // or the partition's leadership moves (Kafka retries its storage
      // errors too).
      case ec::disk_full:
      // The replica stopped (its partition moved, the node is stopping):
      // the partition is served elsewhere soon.
      case ec::log_closed:
        return true;
      default:
        return false;
    }
  }
  if (err.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(err.code())) {
      case caf::sec::request_timeout:
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::no_route_to_receiving_node:
      case caf::sec::disconnect_during_handshake:
      case caf::sec::connection_timeout:
      case caf::sec::remote_lookup_failed:
        return true;
      default:
        return false;
    }
  }
  if (err.category() == caf::atom("exit"))
    return true; // the receiver went away (remote_link_unreachable etc.)
  return false;
}

std::string error_text(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() == ferry_category())
    return describe(err);
  std::string out;
  if (err.category() == caf::atom("system"))
    out = caf::to_string(static_cast<caf::sec>(err.code()));
  else if (err.category() == caf::atom("exit"))
    out = caf::to_string(static_cast<caf::exit_reason>(err.code()));
  else
    return caf::to_string(err);
  if (!err.context().empty())
    out += ": " + caf::to_string(err.context());
  return out;
}

namespace {

using clock = std::chrono::steady_clock;

/// How long a stopped connection waits for a connect attempt in flight
/// (loopback and LAN connects take milliseconds; a host that drops packets
/// takes the OS connect timeout, and is not waited for that long).
constexpr std::chrono::milliseconds stop_wait{2000};

struct waiter {
  caf::typed_response_promise<broker_actor> rp;
  clock::time_point deadline;
};

struct connection_state {
  connection_config cfg;
  /// cfg.targets(): never empty.
  std::vector<broker_endpoint> endpoints;
  /// The endpoint being tried or connected to.
  size_t current = 0;
  /// The endpoint the current round started with: when `current` comes back
  /// to it, every endpoint has failed once and the backoff applies.
  size_t round_start = 0;
  broker_actor broker;
  std::vector<connection_listener> listeners;
  std::vector<waiter> waiters;
  uint64_t attempt = 0;
  bool connecting = false;
  bool ever_connected = false;
  caf::error last_error;
  /// The endpoint last_error came from.
  std::string last_error_at;
  std::chrono::milliseconds backoff{0};
  clock::time_point next_attempt{};
  std::thread worker;
  std::shared_ptr<std::atomic<bool>> worker_done;
  /// Stopped while a connect attempt ran: the actor ends when its result
  /// arrives, or at this deadline (see the stop handler).
  std::optional<clock::time_point> stop_at;
  /// Sessions (session.hpp): the credentials of the actor system, the
  /// node's own handle behind `broker` (a session proxy), and the number of
  /// the current login (stale refresh timers and answers are ignored).
  client_credentials creds;
  broker_actor remote;
  uint64_t session = 0;

  ~connection_state() {
    if (!worker.joinable())
      return;
    // A finished connect attempt joins at once. One still blocked in a TCP
    // connect (a partitioned host) is left to finish on its own: joining
    // would block a scheduler thread for the OS connect timeout.
    if (worker_done && worker_done->load())
      worker.join();
    else
      worker.detach();
  }

  static inline const char* name = "ferry.connection";
};

using connection_pointer = connection_actor::stateful_pointer<connection_state>;

/// The endpoint being tried or connected to.
std::string where(const connection_state& st) {
  return to_string(st.endpoints[st.current]);
}

/// Every endpoint, comma-separated (as the user gave them).
std::string all_endpoints(const connection_state& st) {
  std::string out;
  for (auto& ep : st.endpoints) {
    if (!out.empty())
      out += ',';
    out += to_string(ep);
  }
  return out;
}

void start_attempt(connection_pointer self) {
  auto& st = self->state;
  if (st.connecting || st.broker)
    return;
  if (st.worker.joinable())
    st.worker.join(); // its result arrived, so it has finished
  st.connecting = true;
  auto id = ++st.attempt;
  auto done = std::make_shared<std::atomic<bool>>(false);
  st.worker_done = done;
  connection_actor me = self;
  auto* sys = &self->system();
  auto& ep = st.endpoints[st.current];
  st.worker = std::thread{[sys, me, id, done, host = ep.host, port = ep.port] {
    auto res = uses_tls(*sys) ? caf::openssl::remote_actor<broker_actor>(*sys, host, port)
                              : sys->middleman().remote_actor<broker_actor>(host, port);
    if (res)
      caf::anon_send(me, connect_atom_v, id, std::move(*res));
    else
      caf::anon_send(me, connect_atom_v, id, std::move(res.error()));
    done->store(true);
  }};
}

/// Runs the SCRAM-SHA-256 login with `node` and calls ok(sasl_step) with
/// the node's last answer, or failed(error).
template <class Ok, class Failed>
void login(connection_pointer self, const broker_actor& node, Ok ok, Failed failed) {
  auto& st = self->state;
  auto client = std::make_shared<scram_client>(st.creds.user, st.creds.password);
  auto first = client->first();
  if (!first) {
    failed(first.error());
    return;
  }
  auto timeout = st.cfg.connect_wait;
  sasl_step s1;
  s1.mechanism = std::string{scram_sha256};
  s1.data = std::move(*first);
  self->request(node, timeout, auth_atom_v, std::move(s1))
    .then(
      [self, node, client, ok, failed, timeout](sasl_step& a1) {
        auto fin = client->final(a1.data);
        if (!fin) {
          failed(fin.error());
          return;
        }
        sasl_step s2;
        s2.mechanism = std::string{scram_sha256};
        s2.conversation = a1.conversation;
        s2.data = std::move(*fin);
        self->request(node, timeout, auth_atom_v, std::move(s2))
          .then(
            [client, ok, failed](sasl_step& a2) {
              if (!a2.done || a2.token.empty()) {
                failed(make_error(ec::authentication_failed,
                                  "the node did not finish the login"));
                return;
              }
              if (auto err = client->verify(a2.data)) {
                failed(err);
                return;
              }
              ok(a2);
            },
            [failed](caf::error& err) { failed(err); });
      },
      [failed](caf::error& err) { failed(err); });
}

/// When to log in again: at 80% of the token's life left, at least 1 s.
caf::timespan refresh_after(int64_t expires_ms) {
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  auto left = std::max<int64_t>(expires_ms - now_ms, 0);
  return std::chrono::milliseconds{std::max<int64_t>(left * 4 / 5, 1000)};
}

void expire_waiters(connection_pointer self) {
  auto& st = self->state;
  auto now = clock::now();
  auto i = std::partition(st.waiters.begin(), st.waiters.end(),
                          [&](const waiter& w) { return w.deadline > now; });
  for (auto j = i; j != st.waiters.end(); ++j) {
    auto ms = st.cfg.connect_wait.count();
    std::string text = "not connected to " + all_endpoints(st) + " after "
                       + std::to_string(ms) + " ms";
    if (st.last_error && st.endpoints.size() > 1)
      text += " (last: " + st.last_error_at + ": " + error_text(st.last_error) + ")";
    else if (st.last_error)
      text += " (" + error_text(st.last_error) + ")";
    j->rp.deliver(make_error(ec::request_timed_out, std::move(text)));
  }
  st.waiters.erase(i, st.waiters.end());
}

void notify(connection_pointer self) {
  auto& st = self->state;
  for (auto& l : st.listeners)
    self->send(l, connect_atom_v, st.broker);
}

void schedule_retry(connection_pointer self) {
  auto& st = self->state;
  st.backoff = st.backoff.count() == 0
                 ? st.cfg.backoff_min
                 : std::min(st.backoff * 2, st.cfg.backoff_max);
  st.next_attempt = clock::now() + st.backoff;
  self->delayed_send(self, st.backoff, tick_atom_v);
}

/// The current endpoint failed or was lost: moves on to the next one, at
/// once while the round has endpoints left, else after the backoff (and a
/// new round starts there).
void next_endpoint(connection_pointer self) {
  auto& st = self->state;
  st.current = (st.current + 1) % st.endpoints.size();
  if (st.current != st.round_start) {
    start_attempt(self);
    return;
  }
  schedule_retry(self);
}

/// The login of `session` answered: false when that answer is stale (a
/// newer session) or the connection was stopped meanwhile (it ends now).
bool login_ended(connection_pointer self, uint64_t session) {
  auto& st = self->state;
  st.connecting = false;
  if (st.stop_at) {
    self->quit();
    return false;
  }
  return session == st.session;
}

/// The connection is up with `hdl` (the node's, or its session proxy).
void established(connection_pointer self, broker_actor hdl) {
  auto& st = self->state;
  st.broker = std::move(hdl);
  st.ever_connected = true;
  st.round_start = st.current;
  st.backoff = std::chrono::milliseconds{0};
  st.last_error = caf::error{};
  self->monitor(st.broker);
  for (auto& w : st.waiters)
    w.rp.deliver(st.broker);
  st.waiters.clear();
  notify(self);
}

connection_actor::behavior_type connection(connection_pointer self,
                                           connection_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.creds = credentials_of(self->system());
  self->state.endpoints = self->state.cfg.targets();
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    if (!st.broker || msg.source != st.broker.address())
      return;
    st.broker = nullptr;
    st.remote = nullptr;
    ++st.session; // ends the refresh timer of that session
    st.last_error = msg.reason ? msg.reason
                               : make_error(ec::request_timed_out,
                                            "connection to " + where(st) + " closed");
    st.last_error_at = where(st);
    notify(self);
    // The lost endpoint opens the new round: the others are tried at once,
    // the lost one (the only one, for a single endpoint) after backoff_min.
    st.backoff = std::chrono::milliseconds{0};
    st.round_start = st.current;
    next_endpoint(self);
  });
  start_attempt(self);
  return {
    [self](connect_atom) -> caf::result<broker_actor> {
      auto& st = self->state;
      if (st.broker)
        return st.broker;
      auto rp = self->make_response_promise<broker_actor>();
      st.waiters.push_back(waiter{rp, clock::now() + st.cfg.connect_wait});
      self->delayed_send(self, st.cfg.connect_wait, tick_atom_v);
      return rp;
    },
    [self](subscribe_atom, connection_listener l) {
      auto& st = self->state;
      if (!l)
        return;
      st.listeners.push_back(l);
      if (st.broker)
        self->send(l, connect_atom_v, st.broker);
    },
    [self](connect_atom, uint64_t id, broker_actor hdl) {
      auto& st = self->state;
      if (id != st.attempt)
        return;
      st.connecting = false;
      if (st.stop_at) {
        self->quit(); // stopped meanwhile: the attempt is over, so end now
        return;
      }
      if (!hdl) {
        st.last_error = make_error(ec::request_timed_out, "no broker at " + where(st));
        st.last_error_at = where(st);
        next_endpoint(self);
        return;
      }
      if (!st.creds.token.empty()) {
        established(self, spawn_session_proxy(self->system(), hdl, st.creds.token));
        return;
      }
      if (st.creds.user.empty()) {
        established(self, std::move(hdl));
        return;
      }
      // Log in first; the connection counts as up once that worked.
      st.connecting = true;
      auto session = ++st.session;
      login(
        self, hdl,
        [self, hdl, session](const sasl_step& done) {
          if (!login_ended(self, session))
            return;
          auto& st = self->state;
          st.remote = hdl;
          established(self, spawn_session_proxy(self->system(), hdl, done.token));
          self->delayed_send(self, refresh_after(done.expires_ms), session_atom_v,
                             session);
        },
        [self, session](const caf::error& err) {
          if (!login_ended(self, session))
            return;
          auto& st = self->state;
          st.last_error = err;
          st.last_error_at = where(st);
          if (!is_retriable(err)) {
            // A wrong password does not get better by waiting for it.
            for (auto& w : st.waiters)
              w.rp.deliver(err);
            st.waiters.clear();
          }
          next_endpoint(self);
        });
    },
    [self](session_atom, uint64_t session) {
      auto& st = self->state;
      if (session != st.session || !st.broker || !st.remote || st.stop_at)
        return;
      login(
        self, st.remote,
        [self, session](const sasl_step& done) {
          auto& st = self->state;
          if (session != st.session || !st.broker)
            return;
          caf::anon_send(caf::actor_cast<caf::actor>(st.broker), session_atom_v, done.token);
          self->delayed_send(self, refresh_after(done.expires_ms), session_atom_v,
                             session);
        },
        [self, session](const caf::error&) {
          // The old token holds until it expires: try again soon.
          if (session == self->state.session)
            self->delayed_send(self, std::chrono::seconds{5}, session_atom_v, session);
        });
    },
    [self](connect_atom, uint64_t id, caf::error& err) {
      auto& st = self->state;
      if (id != st.attempt)
        return;
      st.connecting = false;
      if (st.stop_at) {
        self->quit();
        return;
      }
      if (err == caf::sec::disconnect_during_handshake)
        err = make_error(ec::request_timed_out,
                         uses_tls(self->system())
                           ? "the TLS handshake failed (a node without TLS, or one that "
                             "refused this client's certificate, or whose certificate "
                             "does not chain to this client's CA file)"
                           : "the node closed the connection during the handshake (a "
                             "node with TLS needs --tls-cert, --tls-key and --tls-ca)");
      st.last_error = std::move(err);
      st.last_error_at = where(st);
      next_endpoint(self);
    },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.stop_at) {
        if (clock::now() >= *st.stop_at)
          self->quit(); // still blocked in connect: left to finish alone
        return;
      }
      expire_waiters(self);
      if (!st.broker && !st.connecting && clock::now() >= st.next_attempt)
        start_attempt(self);
    },
    [self](stop_atom) {
      auto& st = self->state;
      if (!st.creds.empty() && st.broker) {
        // Our session proxy: it would live as long as the node otherwise.
        self->send_exit(st.broker, caf::exit_reason::user_shutdown);
      }
      for (auto& w : st.waiters)
        w.rp.deliver(make_error(ec::request_timed_out,
                                "connection to " + all_endpoints(st) + " stopped"));
      st.waiters.clear();
      if (st.stop_at)
        return;
      if (st.connecting && st.worker_done && !st.worker_done->load()) {
        // A connect attempt in flight: wait for it (up to stop_wait). A
        // helper thread left inside remote_actor while the process shuts
        // down its actor system could finish the connect after the
        // middleman stopped and keep ~actor_system from returning (seen
        // with a client's leader link opened just before it ended).
        st.stop_at = clock::now() + stop_wait;
        self->delayed_send(self, stop_wait, tick_atom_v);
        return;
      }
      self->quit();
    },
  };
}

} // namespace

connection_actor spawn_connection(caf::actor_system& sys, connection_config cfg) {
  return sys.spawn(connection, std::move(cfg));
}

} // namespace ferry
