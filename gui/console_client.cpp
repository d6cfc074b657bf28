// CAF before any Qt header: Qt's `emit` / `signals` macros break CAF headers.
#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "broker/error.hpp"
#include "broker/messages.hpp"
#include "broker/topic_config.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "gui/console_client.hpp"

#include <QCoreApplication>
#include <QMetaObject>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry::console {

namespace {

using std::chrono::milliseconds;

/// Hands work to the GUI thread while the client lives. Actors keep a
/// shared_ptr to it; the client's destructor closes it under the mutex, so no
/// event is ever posted to a destroyed object.
struct gate {
  std::mutex mtx;
  console_client* target = nullptr;
  /// The current browse; a replaced browse's late signals are dropped.
  std::atomic<uint64_t> browse_generation{0};

  void post(std::function<void(console_client*)> f) {
    std::lock_guard<std::mutex> guard{mtx};
    if (target == nullptr)
      return;
    auto* q = target;
    QMetaObject::invokeMethod(q, [q, f = std::move(f)] { f(q); },
                              Qt::QueuedConnection);
  }

  void fail(const QString& what, const caf::error& err) {
    auto text = QString::fromStdString(error_text(err));
    post([what, text](console_client* q) { emit q->failed(what, text); });
  }

  /// Request actors still waiting for a reply, and the actor they are
  /// linked to: ~console_client ends it (and so them) and waits for them
  /// before the actor system goes. An actor still running when the system
  /// is destroyed is destroyed with it and calls into its torn-down parts
  /// ("pure virtual method called" in gui.live, CI of 2026-12-05).
  std::atomic<int> running{0};
  caf::actor life;
};

using gate_ptr = std::shared_ptr<gate>;

/// Counts a request actor as running until it ends, and links it to the
/// gate's `life` (see gate::running).
template <class Self>
void track(const gate_ptr& g, Self* self) {
  caf::actor life;
  {
    std::lock_guard<std::mutex> guard{g->mtx};
    life = g->life;
  }
  ++g->running;
  self->attach_functor([g] { --g->running; });
  if (life)
    self->link_to(life);
  else
    self->quit(caf::exit_reason::user_shutdown); // the client is going
}

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

QByteArray qb(const std::string& s) {
  return QByteArray(s.data(), static_cast<qsizetype>(s.size()));
}

std::string ss(const QString& s) {
  return s.toStdString();
}

std::string sb(const QByteArray& b) {
  return std::string(b.constData(), static_cast<size_t>(b.size()));
}

// -- conversions from Ferry's message types -----------------------------------

partition_row to_row(const partition_status& p) {
  partition_row r;
  r.partition = p.partition.value;
  r.leader = p.leader;
  r.epoch = p.epoch.value;
  for (auto n : p.replicas)
    r.replicas.push_back(n);
  for (auto n : p.isr)
    r.isr.push_back(n);
  r.log_start = p.log_start.value;
  r.log_end = p.log_end.value;
  r.high_watermark = p.high_watermark.value;
  r.size_bytes = p.size_bytes;
  r.online = p.online;
  r.dirty_ratio = p.dirty_ratio;
  return r;
}

topic_row to_row(const topic_description& t) {
  topic_row r;
  r.name = qs(t.name);
  r.replication_factor = t.config.replication_factor;
  for (auto& [k, v] : render_topic_config(t.config))
    r.config.insert(qs(k), qs(v));
  for (auto& p : t.partitions)
    r.partitions.push_back(to_row(p));
  std::sort(r.partitions.begin(), r.partitions.end(),
            [](auto& a, auto& b) { return a.partition < b.partition; });
  return r;
}

cluster_snapshot to_snapshot(const cluster_description& c) {
  cluster_snapshot s;
  s.cluster_id = qs(c.cluster_id);
  s.controller = c.controller;
  s.raft_term = c.raft_term;
  for (auto& n : c.nodes)
    s.nodes.push_back(node_row{n.id, qs(n.host), n.port, n.http_port,
                               n.metrics_port, n.alive, n.controller, n.voter,
                               n.removing});
  for (auto& t : c.topics)
    s.topics.push_back(to_row(t));
  std::sort(s.topics.begin(), s.topics.end(),
            [](auto& a, auto& b) { return a.name < b.name; });
  return s;
}

group_row to_row(const group_description& g) {
  group_row r;
  r.name = qs(g.group);
  r.mode = qs(g.mode);
  r.state = qs(g.state);
  r.assignor = qs(g.assignor);
  r.generation = g.generation;
  for (auto& m : g.members)
    r.members.push_back(qs(m.member_id));
  for (auto& p : g.partitions)
    r.partitions.push_back(group_partition_row{qs(p.topic), p.partition.value,
                                               qs(p.member_id), p.committed.value,
                                               p.log_start.value, p.log_end.value,
                                               p.lag, -1});
  return r;
}

message_row to_row(const consumed_message& m) {
  message_row r;
  r.topic = qs(m.topic);
  r.partition = m.partition.value;
  r.offset = m.off.value;
  r.timestamp_ms = m.timestamp;
  r.has_key = m.has_key;
  r.key = qb(m.key);
  r.has_value = m.has_value;
  r.value = qb(m.value);
  for (auto& h : m.headers)
    r.headers.push_back(header_row{qs(h.key), qb(h.value)});
  return r;
}

dlq_record_row to_row(const dlq_record& d) {
  dlq_record_row r;
  r.message = to_row(d.message);
  r.original_topic = qs(d.original_topic);
  r.original_partition = d.original_partition;
  r.original_offset = d.original_offset;
  r.attempts = d.attempts;
  r.error = qs(d.error);
  r.group = qs(d.group);
  r.first_failure_ms = d.first_failure_ts;
  r.last_failure_ms = d.last_failure_ts;
  r.redrive_count = d.redrive_count;
  r.redriven = d.redriven;
  return r;
}

dlq_row to_row(const dlq_info& d) {
  dlq_row r;
  r.topic = qs(d.topic);
  for (auto& g : d.groups)
    r.groups.push_back(qs(g));
  r.source_topic = qs(d.source_topic);
  r.partitions = d.partitions;
  r.depth = d.depth;
  r.redriven = d.redriven;
  r.total = d.total;
  r.oldest_timestamp_ms = d.oldest_timestamp;
  r.rate_per_second = d.rate_per_second;
  return r;
}

std::map<std::string, std::string> to_std(const QMap<QString, QString>& m) {
  std::map<std::string, std::string> out;
  for (auto i = m.begin(); i != m.end(); ++i)
    out.emplace(ss(i.key()), ss(i.value()));
  return out;
}

/// Asks the connection for the broker, then sends `xs...` to it (untyped, so
/// requests the running broker may not know yet fail at run time with
/// unexpected_message instead of not compiling) and hands the reply to `ok`
/// on the actor's thread. Failures of either step go to failed().
template <class Result, class Ok, class... Ts>
void ask(caf::actor_system& sys, connection_actor conn, milliseconds timeout,
         gate_ptr g, QString what, Ok ok, Ts... xs) {
  sys.spawn([=](caf::event_based_actor* self) {
    track(g, self);
    self->request(conn, timeout, connect_atom_v)
      .then(
        [=](broker_actor& b) {
          auto hdl = caf::actor_cast<caf::actor>(b);
          self->request(hdl, timeout, xs...)
            .then([=](Result& r) { ok(r); },
                  [=](caf::error& err) { g->fail(what, err); });
        },
        [=](caf::error& err) { g->fail(what, err); });
  });
}

// -- message browser -----------------------------------------------------------

struct browse_state {
  gate_ptr g;
  browse_request req;
  std::shared_ptr<std::atomic<bool>> cancel;
  connection_actor conn;
  milliseconds timeout{10000};
  int32_t batch = 500;
  broker_actor broker;
  consumer_actor consumer;
  topic_partition tp;
  int64_t start = 0;
  int64_t end = 0; ///< one past the last offset looked at
  int64_t scanned = 0;
  int64_t matched = 0;
  int idle_polls = 0;
  bool finished = false;
  uint64_t generation = 0;
  static inline const char* name = "ferry-console-browse";
};

using browse_actor = caf::stateful_actor<browse_state>;

void finish(browse_actor* self, bool cancelled, QString error) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = true;
  if (st.consumer)
    self->send_exit(st.consumer, caf::exit_reason::user_shutdown);
  auto scanned = st.scanned;
  auto matched = st.matched;
  auto gen = st.generation;
  auto g = st.g;
  st.g->post([=](console_client* q) {
    if (g->browse_generation.load() == gen)
      emit q->browse_finished(scanned, matched, cancelled, error);
  });
  self->quit();
}

void fail_browse(browse_actor* self, const caf::error& err) {
  finish(self, false, QString::fromStdString(error_text(err)));
}

void poll_next(browse_actor* self) {
  auto& st = self->state;
  if (st.cancel->load()) {
    finish(self, true, {});
    return;
  }
  self->request(st.consumer, st.timeout + milliseconds{500}, poll_atom_v, int32_t{500})
    .then(
      [self](std::vector<consumed_message>& msgs) {
        auto& st = self->state;
        if (st.finished)
          return;
        QList<message_row> rows;
        bool reached_end = false;
        for (auto& m : msgs) {
          if (m.off.value >= st.end) {
            reached_end = true;
            break;
          }
          ++st.scanned;
          auto row = to_row(m);
          if (matches(row, st.req)) {
            rows.push_back(std::move(row));
            if (++st.matched >= st.req.max_matches) {
              reached_end = true;
              break;
            }
          }
          if (m.off.value + 1 >= st.end) {
            reached_end = true;
            break;
          }
        }
        st.idle_polls = msgs.empty() ? st.idle_polls + 1 : 0;
        auto scanned = st.scanned;
        auto total = st.end - st.start;
        auto gen = st.generation;
        auto g = st.g;
        bool more = !reached_end && st.idle_polls < 20;
        auto me = caf::actor_cast<caf::actor>(self);
        // Flow control: the next poll waits until the GUI thread has taken
        // this batch (the tick), so matches never pile up faster than the
        // window shows them and Cancel stops the scan at the batch on screen.
        st.g->post([=](console_client* q) {
          if (g->browse_generation.load() == gen) { // else a newer browse replaced it
            if (!rows.isEmpty())
              emit q->browse_matches(rows);
            emit q->browse_progress(scanned, total);
          }
          if (more)
            caf::anon_send(me, tick_atom_v);
        });
        if (reached_end)
          finish(self, false, {});
        else if (!more)
          finish(self, false,
                 QStringLiteral("no records arrived for 10 s at offset %1 "
                                "(partition offline or records removed)")
                   .arg(st.start + st.scanned));
      },
      [self](caf::error& err) { fail_browse(self, err); });
}

void start_consumer(browse_actor* self) {
  auto& st = self->state;
  if (st.start >= st.end) {
    finish(self, false, {});
    return;
  }
  consumer_config cc;
  cc.client_id = "ferry-console";
  cc.partitions = {st.tp};
  cc.enable_auto_commit = false;
  cc.auto_offset_reset = "earliest";
  cc.request_timeout = st.timeout;
  cc.max_poll_records = st.batch;
  auto c = spawn_consumer(self->system(), cc, st.conn);
  if (!c) {
    fail_browse(self, c.error());
    return;
  }
  st.consumer = *c;
  self->send(st.consumer, seek_atom_v, st.tp, offset{st.start});
  poll_next(self);
}

/// Resolves the range [start, end) from the request, then polls.
void resolve_range(browse_actor* self) {
  auto& st = self->state;
  auto& req = st.req;
  auto lookup = [self](int64_t ts, std::function<void(int64_t)> next) {
    auto& st = self->state;
    self->request(st.broker, st.timeout, offsets_atom_v,
                  list_offsets_request{st.tp.topic, st.tp.partition, ts})
      .then([next](offset o) { next(o.value); },
            [self](caf::error& err) { fail_browse(self, err); });
  };
  lookup(-2, [self, lookup, req](int64_t log_start) {
    lookup(-1, [self, lookup, req, log_start](int64_t hwm) {
      auto with_start = [self, req, hwm, log_start](int64_t start) {
        auto& st = self->state;
        st.start = std::max(start, log_start);
        st.end = std::min(hwm, st.start + std::max<int64_t>(0, req.max_records));
        start_consumer(self);
      };
      if (req.from_timestamp_ms >= 0)
        lookup(req.from_timestamp_ms, with_start);
      else
        with_start(req.from_offset < 0 ? log_start : req.from_offset);
    });
  });
}

// -- group list ----------------------------------------------------------------

struct groups_state {
  std::vector<group_description> out;
  size_t pending = 0;
};

} // namespace

struct console_client::impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  gate_ptr g = std::make_shared<gate>();
  connection_actor conn;
  producer_actor producer;
  QString address;
  QString host;
  milliseconds timeout{10000};
  int32_t browse_batch = 500;
  std::shared_ptr<std::atomic<bool>> browse_cancel;
  caf::actor browse_hdl; ///< the current browse (woken by cancel_browse)
  caf::actor listener;
  std::shared_ptr<std::atomic<bool>> redrive_cancel;
  bool tls = false;
  /// Who the console logs in as ("" for none, "the operator").
  QString login;

  void stop_actors() {
    if (producer)
      caf::anon_send_exit(producer, caf::exit_reason::user_shutdown);
    if (conn)
      caf::anon_send(conn, stop_atom_v);
    if (listener)
      caf::anon_send_exit(listener, caf::exit_reason::user_shutdown);
    listener = nullptr;
    producer = nullptr;
    conn = nullptr;
  }
};

console_client::console_client(QObject* parent) : console_client(tls_files{}, parent) {
}

console_client::console_client(const tls_files& tls, QObject* parent)
  : QObject(parent), d_(new impl) {
  configure_client(d_->cfg);
  if (tls.enabled())
    configure_tls(d_->cfg, tls_settings{tls.certificate.toStdString(), tls.key.toStdString(),
                                        tls.ca.toStdString()});
  d_->tls = tls.enabled();
  d_->sys = std::make_unique<caf::actor_system>(d_->cfg);
  d_->g->target = this;
  d_->g->life = d_->sys->spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](int) {}}; // lives until ~console_client ends it
  });
}

console_client::~console_client() {
  {
    std::lock_guard<std::mutex> guard{d_->g->mtx};
    d_->g->target = nullptr;
  }
  cancel_browse();
  d_->browse_hdl = nullptr;
  d_->stop_actors();
  {
    caf::actor life;
    {
      std::lock_guard<std::mutex> guard{d_->g->mtx};
      std::swap(life, d_->g->life);
    }
    if (life)
      caf::anon_send_exit(life, caf::exit_reason::user_shutdown);
  }
  // The request actors linked to it end now; bounded, in case one is
  // busy in a handler.
  for (int i = 0; i < 300 && d_->g->running.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  // Queued replies may hold actor handles (the browse's flow-control tick):
  // drop them while the actor system still exists.
  QCoreApplication::removePostedEvents(this);
  // Outstanding request actors end with their replies or timeouts; nothing
  // they do reaches this object any more.
  d_->sys->await_actors_before_shutdown(false);
  set_credentials(*d_->sys, client_credentials{});
  d_->sys.reset();
}

void console_client::set_login(const QString& user, const QString& password) {
  if (user.isEmpty())
    return;
  client_credentials c;
  c.user = user.toStdString();
  c.password = password.toStdString();
  set_credentials(*d_->sys, std::move(c));
  d_->login = user;
}

QString console_client::set_operator(const QString& secret_file, bool is_credential) {
  if (is_credential) {
    client_credentials c;
    c.token = secret_file.toStdString();
    set_credentials(*d_->sys, std::move(c));
    d_->login = QStringLiteral("the operator");
    return {};
  }
  auto c = load_credentials("", "", secret_file.toStdString());
  if (!c)
    return QString::fromStdString(error_text(c.error()));
  set_credentials(*d_->sys, std::move(*c));
  d_->login = QStringLiteral("the operator");
  return {};
}

QString console_client::connect_to(const QString& address) {
  auto parsed = parse_broker_address(ss(address.trimmed()));
  if (!parsed)
    return QString::fromStdString(error_text(parsed.error()));
  d_->stop_actors();
  d_->address = address.trimmed();
  d_->host = qs(parsed->host);
  parsed->connect_wait = d_->timeout;
  d_->conn = spawn_connection(*d_->sys, *parsed);
  auto g = d_->g;
  auto addr = d_->address;
  auto how = d_->tls ? QStringLiteral(" (mutual TLS)") : QString{};
  if (!d_->login.isEmpty())
    how += QStringLiteral(" as %1").arg(d_->login);
  auto listener = d_->sys->spawn(
    [g, addr, how](connection_listener::pointer) -> connection_listener::behavior_type {
      return {
        [g, addr, how](connect_atom, broker_actor b) {
          bool up = static_cast<bool>(b);
          g->post([up, addr, how](console_client* q) {
            if (q->address() != addr)
              return; // a replaced connection's late news
            emit q->connection_changed(up, up ? QStringLiteral("connected to %1%2").arg(addr, how)
                                              : QStringLiteral("lost %1, reconnecting")
                                                  .arg(addr));
          });
        },
      };
    });
  caf::anon_send(d_->conn, subscribe_atom_v, listener);
  d_->listener = caf::actor_cast<caf::actor>(listener);
  producer_config pc;
  pc.client_id = "ferry-console";
  pc.delivery_timeout = milliseconds{30000};
  pc.max_block = milliseconds{0};
  if (auto p = spawn_producer(*d_->sys, pc, d_->conn))
    d_->producer = *p;
  else
    return QString::fromStdString(error_text(p.error()));
  return {};
}

QString console_client::address() const {
  return d_->address;
}

QString console_client::host() const {
  return d_->host;
}

bool console_client::uses_tls() const {
  return d_->tls;
}

void console_client::set_request_timeout_ms(int ms) {
  d_->timeout = milliseconds{std::max(100, ms)};
}

void console_client::set_browse_batch(int records) {
  d_->browse_batch = std::max(1, records);
}

void console_client::refresh_cluster() {
  if (!d_->conn)
    return;
  auto g = d_->g;
  ask<cluster_description>(*d_->sys, d_->conn, d_->timeout, g,
                           QStringLiteral("cluster describe"),
                           [g](cluster_description& c) {
                             auto snap = to_snapshot(c);
                             g->post([snap](console_client* q) {
                               emit q->cluster_updated(snap);
                             });
                           },
                           cluster_atom_v);
}

void console_client::refresh_groups() {
  if (!d_->conn)
    return;
  auto g = d_->g;
  auto conn = d_->conn;
  auto timeout = d_->timeout;
  auto what = QStringLiteral("group list");
  d_->sys->spawn([=](caf::event_based_actor* self) {
    track(g, self);
    auto st = std::make_shared<groups_state>();
    auto publish = [g, st] {
      QList<group_row> rows;
      for (auto& gd : st->out)
        rows.push_back(to_row(gd));
      std::sort(rows.begin(), rows.end(),
                [](auto& a, auto& b) { return a.name < b.name; });
      g->post([rows](console_client* q) { emit q->groups_updated(rows); });
    };
    self->request(conn, timeout, connect_atom_v)
      .then(
        [=](broker_actor& b) {
          self->request(b, timeout, list_atom_v, group_atom_v)
            .then(
              [=](std::vector<group_description>& groups) {
                if (groups.empty()) {
                  publish();
                  return;
                }
                st->pending = groups.size();
                // describe gives members and per-partition lag; a group that
                // fails to describe keeps what the list said.
                for (auto& gd : groups) {
                  auto fallback = gd;
                  self->request(b, timeout, describe_atom_v, group_atom_v, gd.group)
                    .then(
                      [=](group_description& full) {
                        st->out.push_back(std::move(full));
                        if (--st->pending == 0)
                          publish();
                      },
                      [=](caf::error&) {
                        st->out.push_back(fallback);
                        if (--st->pending == 0)
                          publish();
                      });
                }
              },
              [=](caf::error& err) { g->fail(what, err); });
        },
        [=](caf::error& err) { g->fail(what, err); });
  });
}

void console_client::create_topic(const QString& name, int partitions,
                                int replication_factor,
                                const QMap<QString, QString>& config) {
  if (!d_->conn)
    return;
  auto what = QStringLiteral("create topic %1").arg(name);
  topic_config tc;
  tc.partitions = partitions;
  tc.replication_factor = static_cast<int16_t>(replication_factor);
  for (auto i = config.begin(); i != config.end(); ++i)
    if (auto err = set_topic_config_value(tc, ss(i.key()), ss(i.value()))) {
      emit failed(what, QString::fromStdString(error_text(err)));
      return;
    }
  auto g = d_->g;
  ask<topic_metadata>(*d_->sys, d_->conn, d_->timeout, g, what,
                      [g, name](topic_metadata&) {
                        g->post([name](console_client* q) {
                          emit q->done(QStringLiteral("topic %1 created").arg(name));
                        });
                      },
                      create_atom_v, topic_atom_v, ss(name), tc);
}

void console_client::delete_topic(const QString& name) {
  if (!d_->conn)
    return;
  auto g = d_->g;
  ask<topic_metadata>(*d_->sys, d_->conn, d_->timeout, g,
                      QStringLiteral("delete topic %1").arg(name),
                      [g, name](topic_metadata&) {
                        g->post([name](console_client* q) {
                          emit q->done(QStringLiteral("topic %1 deleted").arg(name));
                        });
                      },
                      delete_atom_v, topic_atom_v, ss(name));
}

void console_client::alter_topic(const QString& name,
                               const QMap<QString, QString>& config) {
  if (!d_->conn)
    return;
  auto g = d_->g;
  ask<topic_metadata>(*d_->sys, d_->conn, d_->timeout, g,
                      QStringLiteral("alter topic %1").arg(name),
                      [g, name](topic_metadata&) {
                        g->post([name](console_client* q) {
                          emit q->done(QStringLiteral("topic %1 config changed").arg(name));
                        });
                      },
                      alter_atom_v, topic_atom_v, ss(name), to_std(config));
}

void console_client::create_queue_group(const queue_group_settings& settings) {
  if (!d_->conn)
    return;
  auto group = settings.group;
  if (group.isEmpty()) {
    emit failed(QStringLiteral("create queue group"), QStringLiteral("the group name is empty"));
    return;
  }
  // The broker answers the group's stored config both when it creates the
  // group and when the group already has exactly these settings (other
  // settings: invalid_request), so done() cannot tell the two apart.
  auto g = d_->g;
  ask<queue_group_config>(*d_->sys, d_->conn, d_->timeout, g,
                          QStringLiteral("create queue group %1").arg(group),
                          [g, group](queue_group_config&) {
                            g->post([group](console_client* q) {
                              emit q->done(queue_group_created(group));
                            });
                          },
                          create_atom_v, group_atom_v, ss(group),
                          to_queue_group_config(settings));
}

QString console_client::queue_group_created(const QString& group) {
  return QStringLiteral("queue group %1 created (or it already existed with these settings)")
    .arg(group);
}

void console_client::produce(const message_row& msg) {
  if (!d_->producer)
    return;
  client_message m;
  m.topic = ss(msg.topic);
  m.partition = msg.partition;
  m.has_key = msg.has_key;
  m.key = sb(msg.key);
  m.has_value = msg.has_value;
  m.value = sb(msg.value);
  for (auto& h : msg.headers)
    m.headers.push_back(message_header{ss(h.key), sb(h.value)});
  auto g = d_->g;
  auto producer = d_->producer;
  auto what = QStringLiteral("produce to %1").arg(msg.topic);
  d_->sys->spawn([=](caf::event_based_actor* self) {
    track(g, self);
    self->request(producer, milliseconds{35000}, produce_atom_v, m)
      .then(
        [g](delivery_report& r) {
          auto topic = qs(r.topic);
          auto part = r.partition.value;
          auto off = r.off.value;
          g->post([=](console_client* q) { emit q->produced(topic, part, off); });
        },
        [g, what](caf::error& err) { g->fail(what, err); });
  });
}

void console_client::browse(const browse_request& req) {
  if (!d_->conn)
    return;
  cancel_browse();
  d_->browse_cancel = std::make_shared<std::atomic<bool>>(false);
  auto cancel = d_->browse_cancel;
  auto g = d_->g;
  auto conn = d_->conn;
  auto timeout = d_->timeout;
  auto gen = ++g->browse_generation;
  auto batch = d_->browse_batch;
  d_->browse_hdl = d_->sys->spawn([=](browse_actor* self) -> caf::behavior {
    auto& st = self->state;
    st.generation = gen;
    st.batch = batch;
    st.g = g;
    st.req = req;
    st.cancel = cancel;
    st.conn = conn;
    st.timeout = timeout;
    st.tp = topic_partition{ss(req.topic), partition_id{req.partition}};
    self->request(conn, timeout, connect_atom_v)
      .then(
        [self](broker_actor& b) {
          self->state.broker = b;
          resolve_range(self);
        },
        [self](caf::error& err) { fail_browse(self, err); });
    return {
      [self](tick_atom) { poll_next(self); }, // the GUI took the last batch
    };
  });
}

void console_client::cancel_browse() {
  if (d_->browse_cancel)
    d_->browse_cancel->store(true);
  // A browse waiting for the window's tick ends now; one polling ends when
  // its poll returns (finish() runs once).
  if (d_->browse_hdl)
    caf::anon_send(d_->browse_hdl, tick_atom_v);
}

void console_client::refresh_dlqs() {
  if (!d_->conn)
    return;
  auto g = d_->g;
  ask<std::vector<dlq_info>>(*d_->sys, d_->conn, d_->timeout, g,
                             QStringLiteral("dlq list"),
                             [g](std::vector<dlq_info>& v) {
                               QList<dlq_row> rows;
                               for (auto& d : v)
                                 rows.push_back(to_row(d));
                               g->post([rows](console_client* q) {
                                 emit q->dlqs_updated(rows);
                               });
                             },
                             list_atom_v, dlq_atom_v);
}

void console_client::refresh_acls() {
  if (!d_->conn)
    return;
  auto g = d_->g;
  ask<std::vector<acl_entry>>(*d_->sys, d_->conn, d_->timeout, g, QStringLiteral("acl list"),
                              [g](std::vector<acl_entry>& v) {
                                QList<acl_row> rows;
                                for (auto& a : v)
                                  rows.push_back(acl_row{qs(a.principal), qs(a.permission),
                                                         qs(a.operation),
                                                         qs(a.resource_type),
                                                         qs(a.pattern_type),
                                                         qs(a.resource_name)});
                                g->post([rows](console_client* q) {
                                  emit q->acls_updated(rows);
                                });
                              },
                              list_atom_v, acl_atom_v);
}

void console_client::show_dlq(const QString& topic, const QString& error_contains,
                            const QString& grep, int max_records) {
  if (!d_->conn)
    return;
  dlq_show_request req;
  req.topic = ss(topic);
  req.max_records = max_records;
  req.grep = ss(grep);
  req.error_contains = ss(error_contains);
  auto g = d_->g;
  ask<dlq_show_response>(*d_->sys, d_->conn, d_->timeout, g,
                         QStringLiteral("dlq show %1").arg(topic),
                         [g, topic](dlq_show_response& r) {
                           QList<dlq_record_row> rows;
                           for (auto& rec : r.records)
                             rows.push_back(to_row(rec));
                           auto scanned = r.scanned;
                           auto end = r.end_reached;
                           g->post([=](console_client* q) {
                             emit q->dlq_records(topic, rows, scanned, end);
                           });
                         },
                         show_atom_v, req);
}

namespace {

/// Chunked redrive of one partition range or of explicit records.
struct redrive_state {
  gate_ptr g;
  dlq_redrive_request req;
  std::vector<int32_t> partitions; ///< ranges still to do (front first)
  std::shared_ptr<std::atomic<bool>> cancel;
  milliseconds timeout{10000};
  caf::actor broker;
  int64_t first_offset = 0; ///< where each partition's range starts
  int64_t redriven = 0;
  int64_t skipped = 0;
  /// Rate limit across chunks: the broker paces within one request only.
  caf::actor_clock::time_point chunk_start{};
  static inline const char* name = "ferry-console-redrive";
};

using redrive_actor = caf::stateful_actor<redrive_state>;

constexpr int32_t redrive_chunk = 100;

void redrive_next(redrive_actor* self) {
  auto& st = self->state;
  auto what = QStringLiteral("dlq redrive %1").arg(qs(st.req.topic));
  auto finish = [self, what](QString error, bool stopped = false) {
    auto& st = self->state;
    auto redriven = st.redriven;
    auto skipped = st.skipped;
    auto topic = qs(st.req.topic);
    st.g->post([=](console_client* q) {
      emit q->redrive_progress(redriven, skipped);
      if (error.isEmpty())
        emit q->done(QStringLiteral("redrove %1 record(s) of %2 (%3 already redriven)%4")
                       .arg(redriven)
                       .arg(topic)
                       .arg(skipped)
                       .arg(stopped ? QStringLiteral(", stopped before the end")
                                    : QString{}));
      else
        emit q->failed(what, error);
    });
    self->quit();
  };
  if (st.cancel->load()) {
    finish({}, true);
    return;
  }
  bool by_offsets = !st.req.offsets.empty();
  if (!by_offsets) {
    if (st.partitions.empty()) {
      finish({});
      return;
    }
    st.req.partition = st.partitions.front();
    // Rate-limited: about one second per chunk, so Stop and the progress
    // react within a second or so.
    st.req.max_records = st.req.rate_per_second > 0
                           ? std::clamp(st.req.rate_per_second, 1, redrive_chunk)
                           : redrive_chunk;
  }
  auto timeout = st.timeout;
  if (st.req.rate_per_second > 0 && !by_offsets)
    timeout += milliseconds{int64_t{1000} * st.req.max_records / st.req.rate_per_second};
  if (by_offsets && st.req.rate_per_second > 0)
    timeout += milliseconds{int64_t{1000} * static_cast<int64_t>(st.req.offsets.size())
                            / st.req.rate_per_second};
  st.chunk_start = self->clock().now();
  self->request(st.broker, timeout, redrive_atom_v, st.req)
    .then(
      [self, by_offsets, finish](dlq_redrive_response& r) {
        auto& st = self->state;
        st.redriven += r.redriven;
        st.skipped += r.skipped;
        auto redriven = st.redriven;
        auto skipped = st.skipped;
        st.g->post([=](console_client* q) { emit q->redrive_progress(redriven, skipped); });
        if (by_offsets) {
          finish({});
          return;
        }
        int64_t next = -1;
        for (auto& po : r.next_offsets)
          if (po.partition.value == st.req.partition)
            next = po.committed.value;
        bool progressed = next > st.req.from_offset;
        bool past_end = st.req.to_offset >= 0 && next > st.req.to_offset;
        if (r.end_reached || !progressed || past_end
            || (r.redriven + r.skipped) == 0) {
          st.partitions.erase(st.partitions.begin());
          st.req.from_offset = st.first_offset;
        } else {
          st.req.from_offset = next;
        }
        // The next chunk starts no earlier than this chunk's records allow
        // at the rate limit.
        if (st.req.rate_per_second > 0 && r.redriven > 0) {
          auto due = st.chunk_start
                     + std::chrono::duration_cast<caf::timespan>(std::chrono::nanoseconds{
                       1'000'000'000LL * r.redriven / st.req.rate_per_second});
          auto now = self->clock().now();
          if (due > now) {
            self->delayed_send(self, due - now, tick_atom_v);
            return;
          }
        }
        redrive_next(self);
      },
      [finish](caf::error& err) {
        finish(QString::fromStdString(error_text(err)));
      });
}

} // namespace

void console_client::redrive(const redrive_selection& sel) {
  if (!d_->conn)
    return;
  dlq_redrive_request req;
  req.topic = ss(sel.dlq_topic);
  req.to_topic = ss(sel.to_topic);
  req.from_offset = sel.from_offset;
  req.to_offset = sel.to_offset;
  req.rate_per_second = sel.rate_per_second;
  for (auto& [p, o] : sel.records)
    req.offsets.push_back(partition_offset{req.topic, partition_id{p}, offset{o}, {}});
  std::vector<int32_t> parts;
  if (req.offsets.empty()) {
    if (sel.partition >= 0) {
      parts.push_back(sel.partition);
    } else {
      int32_t n = std::max(1, sel.partition_count);
      for (int32_t p = 0; p < n; ++p)
        parts.push_back(p);
    }
  }
  d_->redrive_cancel = std::make_shared<std::atomic<bool>>(false);
  auto cancel = d_->redrive_cancel;
  auto g = d_->g;
  auto conn = d_->conn;
  auto timeout = d_->timeout;
  d_->sys->spawn([=](redrive_actor* self) -> caf::behavior {
    auto& st = self->state;
    st.g = g;
    st.req = req;
    st.partitions = parts;
    st.first_offset = req.from_offset;
    st.cancel = cancel;
    st.timeout = timeout;
    auto what = QStringLiteral("dlq redrive %1").arg(qs(req.topic));
    self->request(conn, timeout, connect_atom_v)
      .then(
        [self](broker_actor& b) {
          self->state.broker = caf::actor_cast<caf::actor>(b);
          redrive_next(self);
        },
        [self, what](caf::error& err) {
          self->state.g->fail(what, err);
          self->quit();
        });
    return {
      [self](tick_atom) { redrive_next(self); }, // a paced pause ended
    };
  });
}

void console_client::cancel_redrive() {
  if (d_->redrive_cancel)
    d_->redrive_cancel->store(true);
}

void console_client::purge_dlq(const QString& topic) {
  if (!d_->conn)
    return;
  dlq_purge_request req;
  req.topic = ss(topic);
  auto g = d_->g;
  ask<dlq_purge_response>(*d_->sys, d_->conn, d_->timeout, g,
                          QStringLiteral("dlq purge %1").arg(topic),
                          [g, topic](dlq_purge_response& r) {
                            auto n = r.purged;
                            g->post([=](console_client* q) {
                              emit q->done(QStringLiteral("purged %1 record(s) of %2")
                                             .arg(n)
                                             .arg(topic));
                            });
                          },
                          purge_atom_v, req);
}

} // namespace ferry::console
