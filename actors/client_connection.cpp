#include "actors/client_connection.hpp"

#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <memory>
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

caf::expected<connection_config> parse_broker_address(std::string_view addr) {
  connection_config cfg;
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
  cfg.host = std::string{host};
  if (!port.empty() || addr.back() == ':') {
    unsigned value = 0;
    auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (err != std::errc{} || end != port.data() + port.size() || value == 0
        || value > 65535)
      return make_error(ec::invalid_config, "broker address '" + std::string{addr}
                                              + "': bad port '" + std::string{port}
                                              + "'");
    cfg.port = static_cast<uint16_t>(value);
  }
  return cfg;
}

std::string default_broker_address() {
  if (auto env = std::getenv("FERRY_BROKER"); env != nullptr && *env != '\0')
    return env;
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
      case ec::coordinator_not_available:
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

struct waiter {
  caf::typed_response_promise<broker_actor> rp;
  clock::time_point deadline;
};

struct connection_state {
  connection_config cfg;
  broker_actor broker;
  std::vector<connection_listener> listeners;
  std::vector<waiter> waiters;
  uint64_t attempt = 0;
  bool connecting = false;
  bool ever_connected = false;
  caf::error last_error;
  std::chrono::milliseconds backoff{0};
  clock::time_point next_attempt{};
  std::thread worker;
  std::shared_ptr<std::atomic<bool>> worker_done;

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

std::string where(const connection_state& st) {
  return st.cfg.host + ":" + std::to_string(st.cfg.port);
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
  st.worker = std::thread{[sys, me, id, done, host = st.cfg.host,
                           port = st.cfg.port] {
    auto res = sys->middleman().remote_actor<broker_actor>(host, port);
    if (res)
      caf::anon_send(me, connect_atom_v, id, std::move(*res));
    else
      caf::anon_send(me, connect_atom_v, id, std::move(res.error()));
    done->store(true);
  }};
}

void expire_waiters(connection_pointer self) {
  auto& st = self->state;
  auto now = clock::now();
  auto i = std::partition(st.waiters.begin(), st.waiters.end(),
                          [&](const waiter& w) { return w.deadline > now; });
  for (auto j = i; j != st.waiters.end(); ++j) {
    auto ms = st.cfg.connect_wait.count();
    std::string text = "not connected to " + where(st) + " after "
                       + std::to_string(ms) + " ms";
    if (st.last_error)
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

connection_actor::behavior_type connection(connection_pointer self,
                                           connection_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    if (!st.broker || msg.source != st.broker.address())
      return;
    st.broker = nullptr;
    st.last_error = msg.reason ? msg.reason
                               : make_error(ec::request_timed_out,
                                            "connection to " + where(st) + " closed");
    notify(self);
    st.backoff = std::chrono::milliseconds{0};
    schedule_retry(self);
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
      if (!hdl) {
        st.last_error = make_error(ec::request_timed_out, "no broker at " + where(st));
        schedule_retry(self);
        return;
      }
      st.broker = std::move(hdl);
      st.ever_connected = true;
      st.backoff = std::chrono::milliseconds{0};
      st.last_error = caf::error{};
      self->monitor(st.broker);
      for (auto& w : st.waiters)
        w.rp.deliver(st.broker);
      st.waiters.clear();
      notify(self);
    },
    [self](connect_atom, uint64_t id, caf::error& err) {
      auto& st = self->state;
      if (id != st.attempt)
        return;
      st.connecting = false;
      st.last_error = std::move(err);
      schedule_retry(self);
    },
    [self](tick_atom) {
      auto& st = self->state;
      expire_waiters(self);
      if (!st.broker && !st.connecting && clock::now() >= st.next_attempt)
        start_attempt(self);
    },
    [self](stop_atom) {
      auto& st = self->state;
      for (auto& w : st.waiters)
        w.rp.deliver(make_error(ec::request_timed_out,
                                "connection to " + where(st) + " stopped"));
      st.waiters.clear();
      self->quit();
    },
  };
}

} // namespace

connection_actor spawn_connection(caf::actor_system& sys, connection_config cfg) {
  return sys.spawn(connection, std::move(cfg));
}

} // namespace ferry
