#include "actors/client/queue_consumer.hpp"

#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

namespace ferry {

caf::error validate(const queue_consumer_config& cfg) {
  if (cfg.group.empty())
    return make_error(ec::invalid_config, "queue consumer: empty group");
  if (cfg.topic.empty() && cfg.topics.empty())
    return make_error(ec::invalid_config, "queue consumer: no topic");
  for (auto& t : cfg.topics)
    if (t.empty())
      return make_error(ec::invalid_config, "queue consumer: empty topic");
  if (cfg.topics.size() + 1 > max_receive_topics)
    return make_error(ec::invalid_config,
                      "queue consumer: more than "
                        + std::to_string(max_receive_topics) + " topics");
  if (cfg.visibility.count() < 0)
    return make_error(ec::invalid_config, "queue consumer: visibility < 0");
  if (cfg.request_timeout.count() <= 0 || cfg.retry_backoff.count() < 0)
    return make_error(ec::invalid_config,
                      "queue consumer: request_timeout must be > 0 and "
                      "retry_backoff >= 0");
  return caf::none;
}

queue_ack_request make_ack(const leased_message& m, queue_ack_kind kind,
                           std::string error, int64_t ms) {
  queue_ack_request r;
  r.topic = m.message.topic;
  r.partition = m.message.partition;
  r.off = m.message.off;
  r.lease_id = m.lease_id;
  r.kind = kind;
  if (kind == queue_ack_kind::nack)
    r.delay_ms = ms;
  if (kind == queue_ack_kind::extend)
    r.extend_ms = ms;
  r.error = std::move(error);
  return r;
}

namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// The public interface plus connection updates and the retry timer.
using queue_consumer_impl
  = queue_consumer_actor::extend<caf::reacts_to<connect_atom, broker_actor>,
                                 caf::reacts_to<tick_atom>>;

constexpr milliseconds tick_period{50};

struct pending_receive {
  caf::typed_response_promise<std::vector<leased_message>> rp;
  int32_t max = 0;
  steady::time_point deadline;
  steady::time_point not_before;
};

struct pending_ack {
  caf::typed_response_promise<queue_ack_response> rp;
  queue_ack_request req;
  steady::time_point deadline;
  steady::time_point not_before;
};

struct queue_consumer_state {
  queue_consumer_config cfg;
  connection_actor conn;
  broker_actor broker;
  uint64_t conn_gen = 0;
  /// The group config is in place for this connection.
  bool setup_done = false;
  bool setup_in_flight = false;
  steady::time_point setup_retry_at{};
  /// A setup failure that retrying cannot fix; every receive reports it.
  caf::error setup_error;
  std::vector<pending_receive> receives;
  std::vector<pending_ack> acks;
  bool stopping = false;

  static inline const char* name = "ferry.queue_consumer";
};

using self_ptr = queue_consumer_impl::stateful_pointer<queue_consumer_state>;

/// The actor clock (virtual time under CAF's test coordinator).
steady::time_point now_of(self_ptr self) {
  return self->clock().now();
}

std::string make_member_id(const std::string& client_id) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0)
    host[0] = 0;
  std::random_device rd;
  auto r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012llx",
                static_cast<unsigned long long>(r & 0xffffffffffffull));
  return client_id + "-" + host + "-" + std::to_string(getpid()) + "-" + buf;
}

bool ready(const queue_consumer_state& st) {
  return st.broker && st.setup_done && !st.stopping;
}

void issue_receive(self_ptr self, pending_receive pr);
void issue_ack(self_ptr self, pending_ack pa);

/// Starts what waits and can go now; answers what ran out of time.
void pump(self_ptr self) {
  auto& st = self->state;
  auto now = now_of(self);
  auto rs = std::move(st.receives);
  st.receives.clear();
  for (auto& r : rs) {
    if (st.setup_error && st.broker) {
      r.rp.deliver(st.setup_error);
    } else if (now >= r.deadline && !ready(st)) {
      r.rp.deliver(std::vector<leased_message>{});
    } else if (ready(st) && now >= r.not_before) {
      issue_receive(self, std::move(r));
    } else {
      st.receives.push_back(std::move(r));
    }
  }
  auto as = std::move(st.acks);
  st.acks.clear();
  for (auto& a : as) {
    if (now >= a.deadline) {
      a.rp.deliver(make_error(ec::request_timed_out,
                              "queue consumer: no broker connection to "
                              "settle offset "
                                + std::to_string(a.req.off.value)));
    } else if (ready(st) && now >= a.not_before) {
      issue_ack(self, std::move(a));
    } else {
      st.acks.push_back(std::move(a));
    }
  }
}

void issue_receive(self_ptr self, pending_receive pr) {
  auto& st = self->state;
  auto now = now_of(self);
  queue_receive_request req;
  req.group = st.cfg.group;
  req.topic = st.cfg.topic;
  req.topics = st.cfg.topics;
  req.member_id = st.cfg.member_id;
  req.max_records = pr.max;
  req.visibility_ms = st.cfg.visibility.count();
  req.wait_ms = std::max<int64_t>(
    0, std::chrono::duration_cast<milliseconds>(pr.deadline - now).count());
  auto timeout = milliseconds{req.wait_ms} + st.cfg.request_timeout;
  self->request(st.broker, timeout, receive_atom_v, std::move(req))
    .then(
      [pr](std::vector<leased_message>& xs) mutable {
        pr.rp.deliver(std::move(xs));
      },
      [self, pr](caf::error& err) mutable {
        auto& st = self->state;
        if (!is_retriable(err) || st.stopping) {
          pr.rp.deliver(std::move(err));
          return;
        }
        if (now_of(self) >= pr.deadline) {
          pr.rp.deliver(std::vector<leased_message>{});
          return;
        }
        pr.not_before = now_of(self) + st.cfg.retry_backoff;
        st.receives.push_back(std::move(pr));
      });
}

void issue_ack(self_ptr self, pending_ack pa) {
  auto& st = self->state;
  auto req = pa.req;
  self->request(st.broker, st.cfg.request_timeout, ack_atom_v, std::move(req))
    .then(
      [pa](queue_ack_response& x) mutable { pa.rp.deliver(std::move(x)); },
      [pa](caf::error& err) mutable {
        // Not repeated: the broker may have applied it before the reply was
        // lost, and a repeat would then answer lease_not_found. The caller
        // learns that the outcome is unknown.
        pa.rp.deliver(std::move(err));
      });
}

void setup_failed(self_ptr self, caf::error err) {
  auto& st = self->state;
  st.setup_in_flight = false;
  if (is_retriable(err)) {
    st.setup_retry_at = now_of(self) + st.cfg.retry_backoff;
    return;
  }
  st.setup_error = std::move(err);
  pump(self);
}

void setup_done(self_ptr self) {
  auto& st = self->state;
  st.setup_in_flight = false;
  st.setup_done = true;
  st.setup_error = caf::error{};
  pump(self);
}

/// Creates (or alters) the group with the configured settings.
void setup(self_ptr self) {
  auto& st = self->state;
  if (!st.broker || st.setup_done || st.setup_in_flight)
    return;
  if (!st.cfg.group_config) {
    setup_done(self);
    return;
  }
  st.setup_in_flight = true;
  auto gen = st.conn_gen;
  auto qc = *st.cfg.group_config;
  self
    ->request(st.broker, st.cfg.request_timeout, create_atom_v, group_atom_v,
              st.cfg.group, qc)
    .then(
      [self, gen](queue_group_config&) {
        if (gen == self->state.conn_gen)
          setup_done(self);
      },
      [self, gen, qc](caf::error& err) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        if (!is(err, ec::invalid_request) || !st.cfg.alter_existing) {
          setup_failed(self, std::move(err));
          return;
        }
        self
          ->request(st.broker, st.cfg.request_timeout, alter_atom_v,
                    group_atom_v, st.cfg.group, qc)
          .then(
            [self, gen](queue_group_config&) {
              if (gen == self->state.conn_gen)
                setup_done(self);
            },
            [self, gen](caf::error& err) {
              if (gen == self->state.conn_gen)
                setup_failed(self, std::move(err));
            });
      });
}

queue_consumer_impl::behavior_type
queue_consumer(self_ptr self, queue_consumer_config cfg, connection_actor conn,
               bool owns_conn) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  if (st.cfg.member_id.empty())
    st.cfg.member_id = make_member_id(st.cfg.client_id);
  st.conn = conn;
  if (owns_conn)
    self->attach_functor(
      [conn](const caf::error&) { caf::anon_send(conn, stop_atom_v); });
  self->send(conn, subscribe_atom_v,
             caf::actor_cast<connection_listener>(self));
  self->delayed_send(self, tick_period, tick_atom_v);
  return {
    [self](receive_atom, int32_t max,
           int64_t wait_ms) -> caf::result<std::vector<leased_message>> {
      auto& st = self->state;
      if (max <= 0 || wait_ms < 0)
        return make_error(ec::invalid_request,
                          "receive: max must be > 0 and wait_ms >= 0");
      if (st.stopping)
        return make_error(ec::invalid_request, "the queue consumer stopped");
      if (st.setup_error && st.broker)
        return st.setup_error;
      auto rp = self->make_response_promise<std::vector<leased_message>>();
      auto now = now_of(self);
      pending_receive pr{rp, max, now + milliseconds{wait_ms}, now};
      if (ready(st))
        issue_receive(self, std::move(pr));
      else
        st.receives.push_back(std::move(pr));
      return rp;
    },
    [self](ack_atom, queue_ack_request& req) -> caf::result<queue_ack_response> {
      auto& st = self->state;
      if (st.stopping)
        return make_error(ec::invalid_request, "the queue consumer stopped");
      req.group = st.cfg.group;
      req.member_id = st.cfg.member_id;
      if (req.topic.empty()) {
        if (!st.cfg.topics.empty())
          return make_error(ec::invalid_request,
                            "ack: no topic (this consumer reads several; "
                            "make_ack names the record's)");
        req.topic = st.cfg.topic;
      }
      auto rp = self->make_response_promise<queue_ack_response>();
      auto now = now_of(self);
      pending_ack pa{rp, std::move(req), now + st.cfg.request_timeout, now};
      if (ready(st))
        issue_ack(self, std::move(pa));
      else
        st.acks.push_back(std::move(pa));
      return rp;
    },
    [self](stop_atom) -> caf::result<int64_t> {
      auto& st = self->state;
      if (st.stopping)
        return int64_t{0};
      st.stopping = true;
      for (auto& r : st.receives)
        r.rp.deliver(std::vector<leased_message>{});
      st.receives.clear();
      for (auto& a : st.acks)
        a.rp.deliver(make_error(ec::invalid_request,
                                "the queue consumer stopped"));
      st.acks.clear();
      if (!st.broker) {
        self->quit();
        return int64_t{0};
      }
      auto rp = self->make_response_promise<int64_t>();
      self
        ->request(st.broker, std::min(st.cfg.request_timeout, milliseconds{5000}),
                  leave_atom_v, queue_atom_v, st.cfg.group, st.cfg.member_id)
        .then(
          [self, rp](int64_t n) mutable {
            rp.deliver(n);
            self->quit();
          },
          [self, rp](caf::error&) mutable {
            rp.deliver(int64_t{0});
            self->quit();
          });
      return rp;
    },
    [self](connect_atom, broker_actor& hdl) {
      auto& st = self->state;
      ++st.conn_gen;
      st.setup_done = false;
      st.setup_in_flight = false;
      st.broker = std::move(hdl);
      if (st.broker)
        setup(self);
    },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.broker && !st.setup_done && !st.setup_in_flight
          && now_of(self) >= st.setup_retry_at)
        setup(self);
      pump(self);
      self->delayed_send(self, tick_period, tick_atom_v);
    },
  };
}

} // namespace

caf::expected<queue_consumer_actor>
spawn_queue_consumer(caf::actor_system& sys, queue_consumer_config cfg,
                     connection_actor conn) {
  if (auto err = validate(cfg))
    return err;
  if (!conn)
    return make_error(ec::invalid_argument,
                      "spawn_queue_consumer: no connection");
  queue_consumer_actor hdl
    = sys.spawn(queue_consumer, std::move(cfg), std::move(conn), false);
  return hdl;
}

caf::expected<queue_consumer_actor>
spawn_queue_consumer(caf::actor_system& sys, queue_consumer_config cfg) {
  if (auto err = validate(cfg))
    return err;
  auto addr = parse_broker_address(cfg.bootstrap);
  if (!addr)
    return std::move(addr.error());
  auto conn = spawn_connection(sys, std::move(*addr));
  queue_consumer_actor hdl
    = sys.spawn(queue_consumer, std::move(cfg), std::move(conn), true);
  return hdl;
}

} // namespace ferry
