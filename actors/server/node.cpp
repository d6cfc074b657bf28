#include "actors/server/node.hpp"

#include "actors/server/metadata_import.hpp"
#include "actors/server/raft_metadata.hpp"
#include "actors/server/raft_node.hpp"
#include "broker/consumer_state.hpp"
#include "broker/error.hpp"
#include "broker/partitioner.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/raft_storage.hpp"
#include "metrics/group_probe.hpp"
#include "metrics/node_probe.hpp"
#include "metrics/partition_probe.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/unit.hpp>

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>
#include <system_error>

namespace ferry {

namespace {

using self_ptr = broker_actor::stateful_pointer<node_state>;
using clock_type = caf::actor_clock;
using time_point = caf::actor_clock::time_point;

time_point now(self_ptr self) {
  return self->home_system().clock().now();
}

std::string tp_name(const std::string& topic, partition_id p) {
  return topic + "-" + std::to_string(p.value);
}

bool hosts(const node_state& st, const partition_assignment& pa) {
  return std::find(pa.replicas.begin(), pa.replicas.end(), st.cfg.node_id)
           != pa.replicas.end()
         || pa.leader == st.cfg.node_id;
}

std::vector<topic_metadata> topic_list(const node_state& st) {
  std::vector<topic_metadata> out;
  out.reserve(st.topics.size());
  for (auto& [name, md] : st.topics)
    out.push_back(md);
  return out;
}

/// Runs `f` now if the node has its first topic list, else once it has.
template <class F>
void when_ready(self_ptr self, F f) {
  if (self->state.ready)
    f();
  else
    self->state.deferred.emplace_back(std::move(f));
}

/// Counts `err` as a failed client request (ferry_request_errors_total) and
/// returns it: wrap every error the node answers to a client.
caf::error failed(self_ptr self, caf::error err) {
  if (err && self->state.probe)
    self->state.probe->request_failed(err);
  return err;
}

/// Forwards a request to `dest` and relays its answer to `rp`, counting an
/// error answer. Used instead of delegation for admin and group requests
/// only (see the header): the data path keeps delegating.
template <class T, class Dest, class... Ts>
void relay_for(self_ptr self, caf::typed_response_promise<T> rp,
               const Dest& dest, caf::timespan timeout, Ts&&... xs) {
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

template <class T, class Dest, class... Ts>
void relay(self_ptr self, caf::typed_response_promise<T> rp, const Dest& dest,
           Ts&&... xs) {
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

/// relay_void() with a timeout (forwards to other nodes).
template <class Dest, class... Ts>
void relay_void_for(self_ptr self, caf::response_promise rp, const Dest& dest,
                    caf::timespan timeout, Ts&&... xs) {
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .then([rp]() mutable { rp.deliver(caf::unit); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

/// relay() for requests without a reply value.
template <class Dest, class... Ts>
void relay_void(self_ptr self, caf::response_promise rp, const Dest& dest,
                Ts&&... xs) {
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp]() mutable { rp.deliver(caf::unit); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

// -- cluster helpers ----------------------------------------------------------

/// Started with --voters: peers, links, group homes, __consumer_state.
/// Without, the node is a Raft quorum of one (its metadata goes through the
/// same Raft path) but has no peers.
bool cluster_mode(const node_state& st) {
  return !st.cfg.voters.empty();
}

/// True once the metadata can be trusted for reconciling replicas: with a
/// Raft member (every node unless a test injects a metadata actor), once its
/// applied state caught up with the commit index; else at once.
bool metadata_caught_up(const node_state& st) {
  return !st.raft || st.cluster_ready;
}

/// The broker of the node leading `pa`, when that is another, linked node.
caf::actor leader_handle(const node_state& st, const partition_assignment& pa) {
  if (!cluster_mode(st) || pa.leader < 0 || pa.leader == st.cfg.node_id)
    return {};
  auto i = st.peers.find(pa.leader);
  if (i == st.peers.end())
    return {};
  return caf::actor_cast<caf::actor>(i->second);
}

/// True when the current message came from a peer node (it was forwarded
/// there already, or it is a peer's replica or quorum member).
bool from_peer(self_ptr self) {
  auto& sender = self->current_sender();
  if (!sender || sender->node() == self->node())
    return false;
  for (auto& [id, b] : self->state.peers)
    if (b && b.node() == sender->node())
      return true;
  return false;
}

/// The leader id named in a not_leader error ("leader=<id>"), else the Raft
/// leader this node knows of.
int32_t leader_hint(const node_state& st, const caf::error& err) {
  if (err.context().match_elements<std::string>()) {
    const auto& ctx = err.context().get_as<std::string>(0);
    auto pos = ctx.rfind("leader=");
    if (pos != std::string::npos) {
      try {
        return std::stoi(ctx.substr(pos + 7));
      } catch (...) {
        // fall through
      }
    }
  }
  return st.raft_st.leader;
}

/// Sends a metadata request to the local metadata actor; `ok` gets the
/// answer. In a cluster a not_leader answer is forwarded once to the Raft
/// leader's node, whose answer goes to `ok` as well (errors to `rp`).
template <class T, class Ok, class... Ts>
void meta_call(self_ptr self, caf::typed_response_promise<T> rp,
               caf::timespan timeout, Ok ok, Ts... xs) {
  bool forwarded = from_peer(self);
  self->request(self->state.cfg.metadata, timeout, xs...)
    .then(
      [rp, ok](T& x) mutable { ok(rp, x); },
      [self, rp, ok, forwarded, timeout, xs...](caf::error& err) mutable {
        auto& st = self->state;
        if (!forwarded && cluster_mode(st) && is(err, ec::not_leader)) {
          auto id = leader_hint(st, err);
          auto p = st.peers.find(id);
          if (id != st.cfg.node_id && p != st.peers.end()) {
            self->request(p->second, timeout, xs...)
              .then([rp, ok](T& x) mutable { ok(rp, x); },
                    [self, rp](caf::error& e2) mutable {
                      rp.deliver(failed(self, std::move(e2)));
                    });
            return;
          }
        }
        rp.deliver(failed(self, std::move(err)));
      });
}

/// meta_call that answers `rp` with the local answer as it is.
template <class T, class... Ts>
void meta_relay(self_ptr self, caf::typed_response_promise<T> rp,
                caf::timespan timeout, Ts... xs) {
  meta_call(
    self, rp, timeout,
    [](caf::typed_response_promise<T>& p, T& x) { p.deliver(std::move(x)); },
    xs...);
}

/// Receives a peer link's broker handle changes and hands them to the node
/// with the peer's id.
connection_listener::behavior_type
peer_listener(connection_listener::pointer self, int32_t id, caf::actor node) {
  return {
    [self, id, node](connect_atom, const broker_actor& b) {
      self->send(caf::actor_cast<broker_actor>(node), connect_atom_v, id,
                 caf::actor_cast<caf::actor>(b));
    },
  };
}

/// Samples the data dir's disk into `probe` now and every `interval` until
/// `node` is gone or it gets an exit message.
caf::behavior disk_sampler(caf::event_based_actor* self,
                           std::shared_ptr<metrics::node_probe> probe,
                           std::filesystem::path dir, caf::timespan interval,
                           caf::actor_addr node) {
  auto failing = std::make_shared<bool>(false);
  auto sample = [probe, dir, failing] {
    auto err = probe->sample_disk(dir);
    if (err && !*failing)
      log::warn("node: cannot sample the disk of {}: {}", dir.string(), err);
    else if (!err && *failing)
      log::info("node: sampling the disk of {} works again", dir.string());
    *failing = static_cast<bool>(err);
  };
  sample();
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  self->monitor(node);
  self->delayed_send(self, interval, tick_atom_v);
  return {
    [self, sample, interval](tick_atom) {
      sample();
      self->delayed_send(self, interval, tick_atom_v);
    },
  };
}

/// Sends the node a re-check after `delay`.
void schedule_recheck(self_ptr self, caf::timespan delay) {
  auto at = now(self) + delay;
  auto& st = self->state;
  // One pending re-check that fires no later than `at` is enough.
  if (st.recheck_at != time_point{} && st.recheck_at >= now(self)
      && st.recheck_at <= at)
    return;
  st.recheck_at = at;
  self->delayed_send(self, delay, update_atom_v,
                     std::vector<topic_metadata>{});
}

// -- replicas -----------------------------------------------------------------

/// Removes a replica's data when its actor could not do it (crashed or did
/// not answer): the directory, the checkpoint and the producer snapshot.
void delete_replica_data(self_ptr self, const topic_partition& key) {
  auto& st = self->state;
  auto dir = replica_dir(st.cfg.data_dir, key.topic, key.partition);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    log::error("node: cannot delete {}: {}", dir.string(), ec.message());
  if (auto err = st.cfg.store->erase_partition(key.topic, key.partition))
    log::error("node: cannot erase the checkpoint of {}: {}",
               tp_name(key.topic, key.partition), err);
  if (auto k = metadata_format::encode_partition_key(key.topic, key.partition))
    if (auto err = st.cfg.store->erase(producer_snapshots_db, *k))
      log::error("node: cannot erase the producer snapshot of {}: {}",
                 tp_name(key.topic, key.partition), err);
}

void reconcile(self_ptr self);
void sync_broker_links(self_ptr self);

/// Stops a replica; with `remove` its data goes too. Until it answered, the
/// partition is in `stopping` and is not started again.
void stop_replica(self_ptr self, const topic_partition& key,
                  partition_actor handle, bool remove) {
  auto& st = self->state;
  if (!handle) {
    if (remove)
      delete_replica_data(self, key);
    return;
  }
  st.stopping[key] = handle;
  self
    ->request(handle, st.cfg.shutdown_timeout, stop_atom_v, remove)
    .then(
      [self, key, remove](bool) {
        self->state.stopping.erase(key);
        log::info("node: stopped replica {}{}",
                  tp_name(key.topic, key.partition),
                  remove ? " and deleted its data" : "");
        reconcile(self);
      },
      [self, key, handle, remove](caf::error& err) {
        log::warn("node: replica {} did not stop cleanly: {}",
                  tp_name(key.topic, key.partition), err);
        self->send_exit(handle, caf::exit_reason::kill);
        if (remove)
          delete_replica_data(self, key);
        self->state.stopping.erase(key);
        reconcile(self);
      });
}

void spawn_replica(self_ptr self, const topic_partition& key,
                   const topic_metadata& md, const partition_assignment& pa,
                   hosted_replica& r) {
  auto& st = self->state;
  auto rc = st.cfg.replica_defaults;
  rc.topic = key.topic;
  rc.partition = key.partition;
  rc.dir = replica_dir(st.cfg.data_dir, key.topic, key.partition);
  rc.topic_cfg = md.config;
  rc.node_id = st.cfg.node_id;
  rc.epoch = pa.epoch;
  rc.store = st.cfg.store;
  if (cluster_mode(st)) {
    if (key.topic == consumer_state_topic)
      // Runs on the replica's thread: both stores are thread-safe LMDB.
      rc.on_replicated = [offsets = st.offsets, store = st.cfg.store](
                           std::string_view batches) {
        auto n = apply_consumer_state(*offsets, *store, batches);
        return n ? caf::error{} : std::move(n.error());
      };
    rc.assignment = pa;
    rc.leader_broker = leader_handle(st, pa);
    rc.controller = caf::actor_cast<caf::actor>(self);
    r.assignment = pa;
    r.leader_handle = rc.leader_broker;
  }
  // A fresh probe per spawn: never shared through replica_defaults.
  rc.probe = st.cfg.metrics ? std::make_shared<metrics::partition_probe>(
                                st.cfg.metrics, key.topic, key.partition)
                            : nullptr;
  rc.node_probe = st.probe;
  // dedicated_thread: see partition_replica_config (fsync off the workers).
  r.handle = rc.dedicated_thread
               ? self->spawn<caf::detached>(partition_replica, std::move(rc))
               : self->spawn(partition_replica, std::move(rc));
  r.config = md.config;
  r.epoch = pa.epoch;
  self->monitor(r.handle);
  log::debug("node: started replica {}", tp_name(key.topic, key.partition));
}

/// Answers create waiters whose replicas all exist (after a status round
/// trip, so the logs are open) or whose deadline passed.
void check_create_waiters(self_ptr self);

/// Brings the hosted replicas in line with the topic list.
void reconcile(self_ptr self) {
  auto& st = self->state;
  if (st.shutting_down || !metadata_caught_up(st))
    return;
  auto t_now = now(self);
  // Stop what is no longer hosted here.
  for (auto i = st.replicas.begin(); i != st.replicas.end();) {
    auto& [key, r] = *i;
    auto t = st.topics.find(key.topic);
    bool topic_gone = t == st.topics.end();
    bool keep = !topic_gone
                && static_cast<size_t>(key.partition.value)
                     < t->second.partitions.size()
                && hosts(st, t->second.partitions[static_cast<size_t>(
                               key.partition.value)]);
    if (keep) {
      ++i;
      continue;
    }
    if (r.handle)
      self->demonitor(r.handle.address());
    // Gone with its topic, or moved to other brokers: the data goes too.
    stop_replica(self, key, r.handle, true);
    i = st.replicas.erase(i);
  }
  // Start what is missing, reconfigure what changed.
  for (auto& [name, md] : st.topics) {
    for (auto& pa : md.partitions) {
      if (!hosts(st, pa))
        continue;
      topic_partition key{name, pa.partition};
      if (st.stopping.count(key) > 0)
        continue; // the old incarnation is still closing
      auto& r = st.replicas[key];
      if (!r.handle) {
        if (r.given_up)
          continue;
        if (r.restart_at > t_now) {
          schedule_recheck(self, r.restart_at - t_now);
          continue;
        }
        spawn_replica(self, key, md, pa, r);
      } else {
        if (!(r.config == md.config)) {
          self->send(r.handle, update_atom_v, md.config);
          r.config = md.config;
          log::info("node: new config for {}", tp_name(name, pa.partition));
        }
        if (cluster_mode(st)) {
          auto lh = leader_handle(st, pa);
          if (!(r.assignment == pa) || r.leader_handle != lh) {
            self->send(r.handle, update_atom_v, pa, lh);
            r.assignment = pa;
            r.leader_handle = lh;
            r.epoch = pa.epoch;
          }
        }
      }
    }
  }
  check_create_waiters(self);
}

// -- waiting for replicas and gathering their status -------------------------

/// Calls `done` with the status of each partition of `md` once every
/// replica answered or the status timeout passed.
void gather_status(self_ptr self, const topic_metadata& md,
                   std::function<void(topic_description)> done) {
  auto& st = self->state;
  struct gather {
    topic_description td;
    size_t pending = 0;
    std::function<void(topic_description)> done;
  };
  auto g = std::make_shared<gather>();
  g->td.name = md.name;
  g->td.config = md.config;
  g->done = std::move(done);
  for (auto& pa : md.partitions) {
    partition_status ps;
    ps.partition = pa.partition;
    ps.leader = pa.leader;
    ps.epoch = pa.epoch;
    ps.replicas = pa.replicas;
    ps.isr = pa.isr;
    ps.online = false;
    g->td.partitions.push_back(std::move(ps));
  }
  auto on_error = [g](caf::error&) {
    if (--g->pending == 0)
      g->done(std::move(g->td));
  };
  // The metadata's view of placement wins; the replica adds the live
  // offsets and sizes (and its ISR, which is the committed one).
  auto on_status = [g](size_t idx) {
    return [g, idx](partition_status& ps) {
      auto& slot = g->td.partitions[idx];
      slot.log_start = ps.log_start;
      slot.log_end = ps.log_end;
      slot.high_watermark = ps.high_watermark;
      slot.size_bytes = ps.size_bytes;
      if (!ps.isr.empty())
        slot.isr = ps.isr;
      slot.online = ps.online;
      if (--g->pending == 0)
        g->done(std::move(g->td));
    };
  };
  for (size_t idx = 0; idx < md.partitions.size(); ++idx) {
    const auto& pa = md.partitions[idx];
    if (cluster_mode(st) && pa.leader != st.cfg.node_id) {
      // The leader's node knows the live offsets.
      auto p = st.peers.find(pa.leader);
      if (p == st.peers.end())
        continue;
      ++g->pending;
      self
        ->request(p->second, st.cfg.status_timeout, status_atom_v,
                  topic_partition{md.name, pa.partition})
        .then(on_status(idx), on_error);
      continue;
    }
    auto r = st.replicas.find(topic_partition{md.name, pa.partition});
    if (r == st.replicas.end() || !r->second.handle)
      continue;
    ++g->pending;
    self->request(r->second.handle, st.cfg.status_timeout, status_atom_v)
      .then(on_status(idx), on_error);
  }
  if (g->pending == 0)
    g->done(std::move(g->td));
}

bool replicas_exist(const node_state& st, const topic_metadata& md) {
  // This node must know the topic too (in a cluster the change may have
  // been made through another node): a client that asks here next must
  // not hear unknown_topic.
  auto t = st.topics.find(md.name);
  if (t == st.topics.end() || t->second.partitions.size() < md.partitions.size())
    return false;
  for (auto& pa : md.partitions) {
    if (!hosts(st, pa))
      continue;
    auto r = st.replicas.find(topic_partition{md.name, pa.partition});
    if (r == st.replicas.end() || !r->second.handle)
      return false;
  }
  return true;
}

void check_create_waiters(self_ptr self) {
  auto& st = self->state;
  auto t_now = now(self);
  auto& ws = st.create_waiters;
  for (auto i = ws.begin(); i != ws.end();) {
    bool exist = replicas_exist(st, i->topic);
    if (!exist && i->deadline > t_now) {
      schedule_recheck(self, i->deadline - t_now);
      ++i;
      continue;
    }
    if (!exist)
      log::warn("node: replicas of topic {} did not start in time",
                i->topic.name);
    auto rp = i->promise;
    auto md = i->topic;
    i = ws.erase(i);
    // A status round trip proves that every replica opened its log.
    gather_status(self, md, [rp, md](topic_description) mutable {
      rp.deliver(md);
    });
  }
}

/// Answers `rp` with `md` once the replicas of `md` exist.
void await_replicas(self_ptr self, topic_metadata md,
                    caf::typed_response_promise<topic_metadata> rp) {
  auto& st = self->state;
  st.create_waiters.push_back(
    create_waiter{std::move(md), std::move(rp),
                  now(self) + st.cfg.create_timeout});
  check_create_waiters(self);
}

/// The cluster's nodes as this node knows them, with the endpoints clients
/// reach them at: the voters, then registered broker-only nodes, by id.
std::vector<node_info> cluster_nodes(self_ptr self) {
  auto& st = self->state;
  std::vector<node_info> out;
  node_info me;
  me.id = st.cfg.node_id;
  me.host = st.cfg.host;
  me.port = st.cfg.port ? st.cfg.port->load() : 0;
  me.http_port = st.cfg.http_port;
  me.metrics_port = st.cfg.metrics_port;
  me.alive = true;
  me.controller = !st.raft || st.raft_st.leader == st.cfg.node_id;
  if (!cluster_mode(st)) {
    out.push_back(std::move(me));
    return out;
  }
  std::map<int32_t, broker_registration> regs;
  if (st.machine)
    for (auto& b : st.machine->brokers())
      regs.emplace(b.id, b);
  std::set<int32_t> removing;
  if (st.machine)
    for (auto id : st.machine->removing())
      removing.insert(id);
  // The voters (always), then the registered broker-only nodes, by id.
  std::map<int32_t, node_info> nodes;
  for (auto& v : st.cfg.voters) {
    node_info ni;
    ni.id = v.id;
    ni.host = v.host;
    ni.port = v.port;
    nodes[v.id] = ni;
  }
  for (auto& [id, b] : regs) {
    if (nodes.count(id) > 0)
      continue;
    node_info ni;
    ni.id = id;
    ni.host = b.host;
    ni.port = b.port;
    ni.voter = false;
    nodes[id] = ni;
  }
  if (nodes.count(st.cfg.node_id) == 0) {
    me.voter = false; // not registered yet (or removed): still shown
    nodes[st.cfg.node_id] = me;
  }
  for (auto& [id, ni] : nodes) {
    if (id == st.cfg.node_id) {
      auto voter = ni.voter;
      ni = me;
      ni.voter = voter;
    } else {
      if (auto r = regs.find(id); r != regs.end()) {
        // The endpoint the broker registered (where clients reach it)
        // over this node's voter entry, which may name a different route
        // (a proxy, a NAT) from this node to that one.
        if (!r->second.host.empty() && r->second.port != 0) {
          ni.host = r->second.host;
          ni.port = r->second.port;
        }
        ni.http_port = r->second.http_port;
        ni.metrics_port = r->second.metrics_port;
      }
      ni.alive = st.peers.count(id) > 0;
    }
    ni.controller = id == st.raft_st.leader;
    ni.removing = removing.count(id) > 0;
    out.push_back(ni);
  }
  return out;
}

/// Answers `rp` with the nodes, the controller (the Raft leader: this node
/// on a single node) and the live state of every topic.
void describe_cluster(self_ptr self, std::vector<topic_metadata> topics,
                      caf::typed_response_promise<cluster_description> rp) {
  auto& st = self->state;
  auto cd = std::make_shared<cluster_description>();
  cd->cluster_id = st.cfg.cluster_id;
  cd->controller = st.cfg.node_id;
  cd->raft_term = 0;
  if (st.raft) {
    cd->controller = st.raft_st.leader;
    cd->raft_term = static_cast<int64_t>(st.raft_st.term);
  }
  cd->nodes = cluster_nodes(self);
  cd->topics.resize(topics.size());
  if (topics.empty()) {
    rp.deliver(std::move(*cd));
    return;
  }
  auto pending = std::make_shared<size_t>(topics.size());
  for (size_t i = 0; i < topics.size(); ++i) {
    gather_status(self, topics[i],
                  [rp, cd, pending, i](topic_description td) mutable {
                    cd->topics[i] = std::move(td);
                    if (--*pending == 0)
                      rp.deliver(std::move(*cd));
                  });
  }
}

// -- routing --------------------------------------------------------------------

/// The replica that serves (topic, partition), or the error to answer.
caf::expected<partition_actor> route(self_ptr self, const std::string& topic,
                                     partition_id p) {
  auto& st = self->state;
  auto t = st.topics.find(topic);
  if (t == st.topics.end())
    return make_error(ec::unknown_topic, "topic " + topic + " does not exist");
  auto n = t->second.partitions.size();
  if (p.value < 0 || static_cast<size_t>(p.value) >= n)
    return make_error(ec::unknown_partition,
                      "topic " + topic + " has " + std::to_string(n)
                        + " partitions; partition "
                        + std::to_string(p.value) + " does not exist");
  auto r = st.replicas.find(topic_partition{topic, p});
  if (r == st.replicas.end() || !r->second.handle)
    return make_error(ec::not_leader, "partition " + tp_name(topic, p)
                                        + " is not online on node "
                                        + std::to_string(st.cfg.node_id));
  return r->second.handle;
}

/// Where a client's partition request goes: the local replica, or (in a
/// cluster) the broker of the leader's node.
struct route_target {
  partition_actor local;
  broker_actor remote;
  int32_t leader = -1; ///< the remote's node id
};

/// route() for client requests: in a cluster, a partition led by another
/// node goes to that node (unless the request was forwarded already).
/// `follower`: a follower fetch, only ever served by the local replica.
caf::expected<route_target> route_client(self_ptr self,
                                         const std::string& topic,
                                         partition_id p, bool follower) {
  auto& st = self->state;
  if (cluster_mode(st) && !follower) {
    auto t = st.topics.find(topic);
    if (t != st.topics.end() && p.value >= 0
        && static_cast<size_t>(p.value) < t->second.partitions.size()) {
      const auto& pa = t->second.partitions[static_cast<size_t>(p.value)];
      if (pa.leader < 0)
        return make_error(ec::not_leader,
                          "partition " + tp_name(topic, p)
                            + " has no leader: no in-sync replica is up "
                              "(leader=-1)");
      if (pa.leader != st.cfg.node_id) {
        auto peer = st.peers.find(pa.leader);
        if (from_peer(self) || peer == st.peers.end())
          return make_error(ec::not_leader,
                            "partition " + tp_name(topic, p) + " is led by node "
                              + std::to_string(pa.leader) + ", not node "
                              + std::to_string(st.cfg.node_id) + " (leader="
                              + std::to_string(pa.leader) + ")");
        return route_target{partition_actor{}, peer->second, pa.leader};
      }
    }
  }
  auto r = route(self, topic, p);
  if (!r)
    return std::move(r.error());
  return route_target{*r, broker_actor{}};
}

/// Serves a client's partition request: delegated to the local replica (it
/// answers the client directly) or forwarded to the leader's node.
template <class T, class Req, class Atom>
void serve_partition(self_ptr self, caf::typed_response_promise<T> rp,
                     Atom atom, Req req, bool follower) {
  auto r = route_client(self, req.topic, req.partition, follower);
  if (!r) {
    rp.deliver(failed(self, std::move(r.error())));
    return;
  }
  if (r->local) {
    rp.delegate(r->local, atom, std::move(req));
    return;
  }
  if (self->state.probe) {
    if constexpr (std::is_same_v<Atom, produce_atom>)
      self->state.probe->forwarded("produce");
    else if constexpr (std::is_same_v<Atom, fetch_atom>)
      self->state.probe->forwarded("fetch");
    else
      self->state.probe->forwarded("offsets");
  }
  // Bounded: a forward lost with a dying link must not wait forever (the
  // longest legitimate wait is a long-poll fetch, at most max_fetch_wait).
  self->request(r->remote, std::chrono::seconds{75}, atom, std::move(req))
    .then([rp, leader = r->leader](T& x) mutable {
            if constexpr (std::is_same_v<T, produce_response>
                          || std::is_same_v<T, fetch_response>)
              x.leader = leader; // the client goes there directly next
            rp.deliver(std::move(x));
          },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

// -- groups -------------------------------------------------------------------

group_coordinator_actor spawn_coordinator(self_ptr self,
                                          const std::string& group) {
  auto& st = self->state;
  auto gc = st.cfg.group_defaults;
  gc.group = group;
  gc.offsets = st.offsets;
  gc.broker = caf::actor_cast<broker_actor>(self);
  gc.topics = topic_list(st);
  if (cluster_mode(st)) {
    auto t = st.topics.find(consumer_state_topic);
    if (t != st.topics.end() && !t->second.partitions.empty()) {
      gc.state_topic = consumer_state_topic;
      gc.state_partition = partition_id{partition_for_key(
        group, static_cast<int32_t>(t->second.partitions.size()))};
    }
  }
  // A fresh probe per coordinator: never shared through group_defaults.
  gc.probe = st.cfg.metrics
               ? std::make_shared<metrics::group_probe>(st.cfg.metrics, group)
               : nullptr;
  auto h = self->spawn(group_coordinator, std::move(gc));
  self->monitor(h);
  st.groups.emplace(group, h);
  log::debug("node: started coordinator of group {}", group);
  return h;
}

bool known_queue_group(self_ptr self, const std::string& group);

/// Where a group is coordinated (see group_home below).
struct group_home_t {
  bool local = true;
  broker_actor remote;
  caf::error err;
};
group_home_t group_home(self_ptr self, const std::string& group);

/// The coordinator of `group`; spawned if `create`. Errors: invalid_request
/// for an empty name, unknown_group if it does not exist and !create.
caf::expected<group_coordinator_actor>
coordinator(self_ptr self, const std::string& group, bool create) {
  auto& st = self->state;
  if (group.empty())
    return make_error(ec::invalid_request, "the group name is empty");
  auto i = st.groups.find(group);
  if (i != st.groups.end())
    return i->second;
  if (known_queue_group(self, group))
    return make_error(ec::invalid_request,
                      "group " + group + " is a queue-mode group");
  if (!create) {
    // In a cluster coordinators start on demand: a group known to the
    // offset store (replicated through __consumer_state) exists.
    auto known = cluster_mode(st) ? st.offsets->get_group(group)
                                  : caf::expected<std::optional<group_record>>{
                                    std::nullopt};
    if (!known || !*known || st.shutting_down)
      return make_error(ec::unknown_group, "group " + group
                                             + " does not exist");
  }
  if (st.shutting_down)
    return make_error(ec::coordinator_not_available,
                      "the node is shutting down");
  return spawn_coordinator(self, group);
}

// -- queue groups -----------------------------------------------------------------

queue_coordinator_actor spawn_queue_coordinator(self_ptr self,
                                                const std::string& group) {
  auto& st = self->state;
  auto qc = st.cfg.queue_defaults;
  qc.group = group;
  qc.settings = st.queue_configs.at(group);
  qc.store = st.cfg.store;
  qc.broker = caf::actor_cast<broker_actor>(self);
  qc.topics = topic_list(st);
  qc.topics_known = st.ready;
  if (cluster_mode(st)) {
    auto t = st.topics.find(consumer_state_topic);
    if (t != st.topics.end() && !t->second.partitions.empty()) {
      qc.state_topic = consumer_state_topic;
      qc.state_partition = partition_id{partition_for_key(
        group, static_cast<int32_t>(t->second.partitions.size()))};
    }
  }
  qc.probe = st.cfg.metrics
               ? std::make_shared<metrics::group_probe>(st.cfg.metrics, group)
               : nullptr;
  auto h = self->spawn(queue_coordinator, std::move(qc));
  self->monitor(h);
  st.queue_groups.emplace(group, h);
  log::debug("node: started queue coordinator of group {}", group);
  return h;
}

/// The coordinator of queue group `group`. With `create` a missing group is
/// created with `*create` (stored first); an existing one must have that
/// config unless `create_default` (first use by receive). Errors:
/// invalid_request (empty name, a stream group, another config),
/// unknown_group, invalid_config.
/// Cluster mode: the config of queue group `group` as this node's store has
/// it (applied from __consumer_state), into st.queue_configs if there. True
/// if the group is a queue group known here.
bool known_queue_group(self_ptr self, const std::string& group) {
  auto& st = self->state;
  if (st.queue_configs.count(group) > 0)
    return true;
  if (!cluster_mode(st) || group.empty())
    return false;
  auto qc = load_queue_group(*st.cfg.store, group);
  if (!qc) {
    log::error("node: cannot read the config of queue group {}: {}", group,
               qc.error());
    return false;
  }
  if (!*qc)
    return false;
  st.queue_configs.emplace(group, std::move(**qc));
  return true;
}

/// Why `group` cannot be created as a queue group with `qc`, or none.
caf::error check_new_queue_group(self_ptr self, const std::string& group,
                                 const queue_group_config& qc) {
  auto& st = self->state;
  bool stream = st.groups.count(group) > 0;
  if (auto rec = st.offsets->get_group(group); rec && *rec)
    stream = true;
  if (stream)
    return make_error(ec::invalid_request,
                      "group " + group + " is a stream-mode group");
  return validate(qc);
}

caf::expected<queue_coordinator_actor>
queue_coordinator_for(self_ptr self, const std::string& group,
                      const queue_group_config* create,
                      bool create_default = false) {
  auto& st = self->state;
  if (group.empty())
    return make_error(ec::invalid_request, "the group name is empty");
  if (st.shutting_down)
    return make_error(ec::coordinator_not_available,
                      "the node is shutting down");
  // In a cluster a queue coordinator runs only where its group lives (the
  // callers forward first; this keeps e.g. the group list from starting
  // one elsewhere).
  if (cluster_mode(st) && !group_home(self, group).local)
    return make_error(ec::coordinator_not_available,
                      "queue group " + group + " is coordinated elsewhere");
  known_queue_group(self, group);
  auto c = st.queue_configs.find(group);
  if (c != st.queue_configs.end()) {
    if (create && !create_default && !(*create == c->second))
      return make_error(ec::invalid_request,
                        "queue group " + group
                          + " exists with another config");
    auto i = st.queue_groups.find(group);
    if (i != st.queue_groups.end())
      return i->second;
    return spawn_queue_coordinator(self, group); // after a crash
  }
  if (!create)
    return make_error(ec::unknown_group, "group " + group
                                           + " does not exist");
  if (auto err = check_new_queue_group(self, group, *create))
    return err;
  if (cluster_mode(st)) // with_queue_coordinator replicates the config
    return make_error(ec::coordinator_not_available,
                      "queue group " + group + " is not created yet");
  if (auto err = save_queue_group(*st.cfg.store, group, *create))
    return err;
  st.queue_configs.emplace(group, *create);
  log::info("node: created queue group {}", group);
  return spawn_queue_coordinator(self, group);
}

/// Cluster mode: produces `rec` (a queue group config upsert or delete) to
/// the group's __consumer_state partition with acks=all, then applies it to
/// this node's store (the other replicas apply it as they fetch it); then
/// done(error) (coordinator_not_available if it was not replicated).
template <class F>
void replicate_queue_group(self_ptr self, const consumer_state_record& rec,
                           F done) {
  auto& st = self->state;
  auto t = st.topics.find(consumer_state_topic);
  if (t == st.topics.end() || t->second.partitions.empty()) {
    done(make_error(ec::coordinator_not_available,
                    "the cluster has no __consumer_state topic yet"));
    return;
  }
  auto batch = make_consumer_state_batch({rec}, system_now_ms());
  if (!batch) {
    done(std::move(batch.error()));
    return;
  }
  produce_request pr;
  pr.topic = consumer_state_topic;
  pr.partition = partition_id{partition_for_key(
    rec.group, static_cast<int32_t>(t->second.partitions.size()))};
  pr.acks = acks_mode::all;
  pr.batch = std::move(*batch);
  self
    ->request(caf::actor_cast<broker_actor>(self), std::chrono::seconds{30},
              produce_atom_v, std::move(pr))
    .then(
      [self, rec, done](produce_response&) mutable {
        auto& st = self->state;
        done(apply_consumer_state_record(*st.offsets, *st.cfg.store, rec));
      },
      [rec, done](caf::error& err) mutable {
        log::warn("node: queue group {} change not replicated: {}", rec.group,
                  err);
        done(make_error(ec::coordinator_not_available,
                        "queue group " + rec.group
                          + ": the change was not replicated: "
                          + describe(err)));
      });
}

/// queue_coordinator_for, except that in a cluster a group to create has
/// its config replicated first (asynchronously); then(expected coordinator).
template <class F>
void with_queue_coordinator(self_ptr self, const std::string& group,
                            const queue_group_config* create,
                            bool create_default, F then) {
  auto& st = self->state;
  if (!cluster_mode(st) || create == nullptr || group.empty()
      || st.shutting_down || known_queue_group(self, group)) {
    then(queue_coordinator_for(self, group, create, create_default));
    return;
  }
  if (auto err = check_new_queue_group(self, group, *create)) {
    then(caf::expected<queue_coordinator_actor>{std::move(err)});
    return;
  }
  consumer_state_record rec;
  rec.kind = consumer_state_kind::queue_group;
  rec.group = group;
  rec.row = queue_group_format::encode_group_value(*create);
  auto qc = *create;
  replicate_queue_group(self, rec, [self, group, qc, then](caf::error err) mutable {
    if (err) {
      then(caf::expected<queue_coordinator_actor>{std::move(err)});
      return;
    }
    if (self->state.queue_configs.emplace(group, qc).second)
      log::info("node: created queue group {}", group);
    then(queue_coordinator_for(self, group, &qc, true));
  });
}

/// Where a group (stream or queue mode) is coordinated in a cluster: here (local), at the
/// node leading its __consumer_state partition (remote), or nowhere yet
/// (err: coordinator_not_available, retriable). A local coordinator of a
/// group that moved away is ended (its members rejoin at the new one).

/// The leader of the __consumer_state partition `key` hashes to (-1: none
/// now); nullopt while that topic does not exist.
std::optional<int32_t> state_leader(const node_state& st,
                                    const std::string& key) {
  auto t = st.topics.find(consumer_state_topic);
  if (t == st.topics.end() || t->second.partitions.empty())
    return std::nullopt;
  auto n = static_cast<int32_t>(t->second.partitions.size());
  return t->second.partitions[static_cast<size_t>(partition_for_key(key, n))]
    .leader;
}

/// The home of `what` ("group g", "DLQ t") at state_leader `leader`: here
/// (local), that node's broker (remote), or coordinator_not_available (no
/// such topic or leader yet, the node not reachable, or a request that was
/// `forwarded` here already: never forwarded twice).
group_home_t home_at(self_ptr self, std::optional<int32_t> leader,
                     const std::string& what, bool forwarded) {
  auto& st = self->state;
  auto unavailable = [&](std::string why) {
    return group_home_t{false, broker_actor{},
                        make_error(ec::coordinator_not_available,
                                   what + ": " + why)};
  };
  if (!leader)
    return unavailable("the cluster has no __consumer_state topic yet");
  if (*leader == st.cfg.node_id)
    return {};
  if (*leader < 0)
    return unavailable("its __consumer_state partition has no leader");
  auto peer = st.peers.find(*leader);
  if (peer == st.peers.end() || !peer->second || forwarded)
    return unavailable("served by node " + std::to_string(*leader)
                       + ", not reachable from node "
                       + std::to_string(st.cfg.node_id));
  return {false, peer->second, {}};
}

group_home_t group_home(self_ptr self, const std::string& group) {
  auto& st = self->state;
  if (!cluster_mode(st) || group.empty())
    return {};
  auto leader = state_leader(st, group);
  if (leader && *leader != st.cfg.node_id) {
    if (auto i = st.groups.find(group); i != st.groups.end()) {
      log::info("node: group {} is coordinated by node {} now", group,
                *leader);
      self->demonitor(i->second.address());
      self->send_exit(i->second, caf::exit_reason::user_shutdown);
      st.groups.erase(i);
    }
    if (auto i = st.queue_groups.find(group); i != st.queue_groups.end()) {
      log::info("node: queue group {} is coordinated by node {} now", group,
                *leader);
      self->demonitor(i->second.address());
      self->send_exit(i->second, caf::exit_reason::user_shutdown);
      st.queue_groups.erase(i);
    }
    // Read again from the store (applied from the log) if it comes back.
    st.queue_configs.erase(group);
  }
  return home_at(self, leader, "group " + group, from_peer(self));
}

/// Cluster mode, after a metadata change: ends the local coordinators of
/// groups whose __consumer_state partition is led by another node now (so
/// a later return of the leadership starts a fresh coordinator from the
/// replicated state), and starts the queue coordinators of the stored queue
/// groups led here (so leases expire and dead letters move without waiting
/// for a request).
void sync_group_homes(self_ptr self) {
  auto& st = self->state;
  if (!cluster_mode(st) || !st.ready || st.shutting_down)
    return;
  std::vector<std::string> names;
  for (auto& [name, g] : st.groups)
    names.push_back(name);
  for (auto& [name, q] : st.queue_groups)
    names.push_back(name);
  for (auto& [name, qc] : st.queue_configs)
    names.push_back(name);
  for (auto& name : names)
    group_home(self, name); // ends what moved away
  auto t = st.topics.find(consumer_state_topic);
  if (t == st.topics.end() || t->second.partitions.empty())
    return;
  auto n = static_cast<int32_t>(t->second.partitions.size());
  bool leads = false;
  for (auto& pa : t->second.partitions)
    leads = leads || pa.leader == st.cfg.node_id;
  if (!leads)
    return;
  auto stored = load_queue_groups(*st.cfg.store);
  if (!stored) {
    log::error("node: cannot list queue groups: {}", stored.error());
    return;
  }
  for (auto& [name, qc] : *stored) {
    if (st.queue_groups.count(name) > 0)
      continue;
    const auto& pa
      = t->second.partitions[static_cast<size_t>(partition_for_key(name, n))];
    if (pa.leader != st.cfg.node_id)
      continue;
    st.queue_configs.insert_or_assign(name, qc);
    log::info("node: coordinating queue group {} (its __consumer_state "
              "partition is led here)",
              name);
    spawn_queue_coordinator(self, name);
  }
}

/// In a cluster, when `group` is coordinated by another node (or nowhere
/// yet): forwards `xs` (the broker's own request) there, or answers the
/// error; returns true then. False: coordinate here.
template <class T, class... Ts>
bool forwarded_group(self_ptr self, caf::typed_response_promise<T>& rp,
                     const std::string& group, Ts... xs) {
  auto home = group_home(self, group);
  if (home.local)
    return false;
  if (home.err)
    rp.deliver(failed(self, std::move(home.err)));
  else
    relay_for(self, rp, home.remote, std::chrono::seconds{75},
              std::move(xs)...);
  return true;
}

/// Relays a queue group request whose reply is `T`.
/// `fwd`: the broker's own request, forwarded in a cluster when another
/// node coordinates the group.
template <class T, class Fwd, class... Ts>
caf::result<T> to_queue(self_ptr self, const std::string& group,
                        bool create_default, Fwd fwd, Ts... xs) {
  auto rp = self->make_response_promise<T>();
  when_ready(self, [self, rp, group, create_default, fwd, xs...]() mutable {
    bool away = std::apply(
      [&](auto&... ys) { return forwarded_group(self, rp, group, ys...); },
      fwd);
    if (away)
      return;
    const auto& defaults = self->state.cfg.queue_defaults.settings;
    with_queue_coordinator(
      self, group, create_default ? &defaults : nullptr, create_default,
      [self, rp, xs...](caf::expected<queue_coordinator_actor> c) mutable {
        if (!c)
          rp.deliver(failed(self, std::move(c.error())));
        else
          relay(self, rp, *c, std::move(xs)...);
      });
  });
  return rp;
}

/// Relays a group request whose reply is `T` to the group's coordinator.
template <class T, class... Ts>
caf::result<T> to_group(self_ptr self, const std::string& group, bool create,
                        Ts... xs) {
  auto rp = self->make_response_promise<T>();
  when_ready(self, [self, rp, group, create, xs...]() mutable {
    auto home = group_home(self, group);
    if (!home.local) {
      if (home.err)
        rp.deliver(failed(self, std::move(home.err)));
      else
        relay_for(self, rp, home.remote, std::chrono::seconds{75},
                  std::move(xs)...);
      return;
    }
    auto c = coordinator(self, group, create);
    if (!c)
      rp.deliver(failed(self, std::move(c.error())));
    else
      relay(self, rp, *c, std::move(xs)...);
  });
  return rp;
}

/// Relays a group request without a reply value.
template <class... Ts>
caf::result<void> to_group_void(self_ptr self, const std::string& group,
                                bool create, Ts... xs) {
  auto rp = self->make_response_promise();
  when_ready(self, [self, rp, group, create, xs...]() mutable {
    auto home = group_home(self, group);
    if (!home.local) {
      if (home.err)
        rp.deliver(failed(self, std::move(home.err)));
      else
        relay_void_for(self, rp, home.remote, std::chrono::seconds{75},
                       std::move(xs)...);
      return;
    }
    auto c = coordinator(self, group, create);
    if (!c)
      rp.deliver(failed(self, std::move(c.error())));
    else
      relay_void(self, rp, *c, std::move(xs)...);
  });
  return rp;
}

// -- DLQ operations -------------------------------------------------------------

/// The DLQ manager, spawned on first use (and again after a crash). In a
/// cluster it replicates its redrive bookkeeping through __consumer_state.
dlq_manager_actor dlq_manager_of(self_ptr self) {
  auto& st = self->state;
  if (!st.dlq) {
    dlq_manager_config dc;
    dc.store = st.cfg.store;
    dc.broker = caf::actor_cast<broker_actor>(self);
    if (cluster_mode(st))
      dc.state_topic = consumer_state_topic;
    st.dlq = self->spawn(dlq_manager, std::move(dc));
    self->monitor(st.dlq);
    if (st.ready)
      self->send(st.dlq, update_atom_v, topic_list(st));
  }
  return st.dlq;
}

/// How long a forwarded DLQ request may take (a redrive of many records).
constexpr auto dlq_forward_timeout = std::chrono::minutes{10};

/// Where the DLQ requests naming `topic` are served in a cluster: here
/// (local; also outside a cluster), at the node leading the
/// __consumer_state partition of dlq_home_key(topic) (remote), or nowhere
/// yet (err: coordinator_not_available, retriable).
group_home_t dlq_home(self_ptr self, const std::string& topic) {
  auto& st = self->state;
  if (!cluster_mode(st) || topic.empty())
    return {};
  return home_at(self, state_leader(st, dlq_home_key(topic)), "DLQ " + topic,
                 false);
}

/// Relays a DLQ request whose reply is `T` to the DLQ manager; in a
/// cluster, one naming a DLQ `topic` goes to the topic's home (dlq_home).
template <class T, class... Ts>
caf::result<T> to_dlq_at(self_ptr self, const std::string& topic, Ts... xs) {
  auto rp = self->make_response_promise<T>();
  // Decided now: from_peer needs the current sender.
  bool forwarded = from_peer(self);
  when_ready(self, [self, rp, topic, forwarded, xs...]() mutable {
    if (self->state.shutting_down) {
      rp.deliver(failed(self, make_error(ec::coordinator_not_available,
                                         "the node is shutting down")));
      return;
    }
    auto home = dlq_home(self, topic);
    if (!home.local && !home.err && forwarded)
      home.err = make_error(ec::coordinator_not_available,
                            "DLQ " + topic + ": its home moved away from node "
                              + std::to_string(self->state.cfg.node_id));
    if (!home.local) {
      if (home.err)
        rp.deliver(failed(self, std::move(home.err)));
      else
        relay_for(self, rp, home.remote, dlq_forward_timeout,
                  std::move(xs)...);
      return;
    }
    relay(self, rp, dlq_manager_of(self), std::move(xs)...);
  });
  return rp;
}

/// `dlq list`: the local manager's list; in a cluster each DLQ's entry
/// (its redriven count and depth come from the marks) is replaced by the
/// one of its home node, asked once per home (a peer's list request is
/// answered locally). A home that cannot be asked leaves the local entry.
caf::result<std::vector<dlq_info>> list_dlqs_at_homes(self_ptr self) {
  auto rp = self->make_response_promise<std::vector<dlq_info>>();
  bool forwarded = from_peer(self);
  when_ready(self, [self, rp, forwarded]() mutable {
    if (self->state.shutting_down) {
      rp.deliver(failed(self, make_error(ec::coordinator_not_available,
                                         "the node is shutting down")));
      return;
    }
    if (!cluster_mode(self->state) || forwarded) {
      relay(self, rp, dlq_manager_of(self), list_atom_v, dlq_atom_v);
      return;
    }
    self->request(dlq_manager_of(self), caf::infinite, list_atom_v, dlq_atom_v)
      .then(
        [self, rp](std::vector<dlq_info>& local) mutable {
          auto out = std::make_shared<std::vector<dlq_info>>(std::move(local));
          std::map<caf::actor_addr,
                   std::pair<broker_actor, std::vector<size_t>>>
            homes;
          for (size_t i = 0; i < out->size(); ++i) {
            auto home = dlq_home(self, (*out)[i].topic);
            if (home.local || home.err)
              continue;
            auto& h = homes[caf::actor_cast<caf::actor_addr>(home.remote)];
            h.first = home.remote;
            h.second.push_back(i);
          }
          if (homes.empty()) {
            rp.deliver(std::move(*out));
            return;
          }
          auto pending = std::make_shared<size_t>(homes.size());
          for (auto& [addr, h] : homes) {
            auto idx = h.second;
            auto done = [rp, out, pending]() mutable {
              if (--*pending == 0)
                rp.deliver(std::move(*out));
            };
            self
              ->request(h.first, std::chrono::seconds{30}, list_atom_v,
                        dlq_atom_v)
              .then(
                [out, idx, done](std::vector<dlq_info>& remote) mutable {
                  for (auto i : idx)
                    for (auto& x : remote)
                      if (x.topic == (*out)[i].topic)
                        (*out)[i] = std::move(x);
                  done();
                },
                [out, idx, done](caf::error& err) mutable {
                  log::warn("node: DLQ list: cannot ask the home of {}: {}",
                            (*out)[idx.front()].topic, err);
                  done();
                });
          }
        },
        [self, rp](caf::error& err) mutable {
          rp.deliver(failed(self, std::move(err)));
        });
  });
  return rp;
}

// -- cluster: readiness, registration, controller --------------------------------

/// Marks the node ready (first topic list in, and in a cluster the metadata
/// caught up) and serves the requests held until then.
void mark_ready(self_ptr self) {
  auto& st = self->state;
  if (st.ready)
    return;
  st.ready = true;
  size_t partitions = 0;
  for (auto& [name, md] : st.topics)
    partitions += md.partitions.size();
  log::info("node: {} topics with {} partitions recovered", st.topics.size(),
            partitions);
  auto deferred = std::move(st.deferred);
  st.deferred.clear();
  for (auto& f : deferred)
    f();
}

/// The node's topic list changed (or may now be acted on: the metadata
/// caught up): the coordinators and the DLQ manager get it, the replicas
/// follow it, held requests run, group homes move.
void topics_changed(self_ptr self) {
  auto& st = self->state;
  auto list = topic_list(st);
  for (auto& [name, g] : st.groups)
    self->send(g, update_atom_v, list);
  for (auto& [name, q] : st.queue_groups)
    self->send(q, update_atom_v, list);
  if (st.dlq)
    self->send(st.dlq, update_atom_v, list);
  reconcile(self);
  mark_ready(self);
  sync_group_homes(self);
}

bool is_controller(const node_state& st) {
  return st.raft && st.raft_st.role == raft_role::leader
         && st.raft_st.leader == st.cfg.node_id;
}

/// Registers this node through the metadata (forwarded to the controller's
/// node when the local quorum member does not lead).
void register_self(self_ptr self) {
  auto& st = self->state;
  broker_registration reg;
  reg.id = st.cfg.node_id;
  reg.host = st.cfg.host;
  reg.port = st.cfg.port ? st.cfg.port->load() : 0;
  reg.http_port = st.cfg.http_port;
  reg.metrics_port = st.cfg.metrics_port;
  st.registering = true;
  auto done = [self](const broker_registration& b) {
    auto& st = self->state;
    st.registering = false;
    st.registered = !b.fenced;
    log::info("node: registered with the controller (broker epoch {})",
              b.epoch);
  };
  auto failed_once = [self](const caf::error& err) {
    self->state.registering = false;
    log::debug("node: registration failed: {}", err);
  };
  self
    ->request(st.cfg.metadata, std::chrono::seconds{1}, update_atom_v,
              broker_atom_v, reg)
    .then(done, [self, reg, done, failed_once](caf::error& err) {
      auto& st = self->state;
      auto id = leader_hint(st, err);
      auto p = st.peers.find(id);
      if (!is(err, ec::not_leader) || p == st.peers.end()) {
        failed_once(err);
        return;
      }
      self
        ->request(p->second, std::chrono::seconds{1}, update_atom_v,
                  broker_atom_v, reg)
        .then(done, failed_once);
    });
}

/// The controller's duty: fence voters whose link is down for too long.
void control(self_ptr self) {
  auto& st = self->state;
  auto t_now = now(self);
  std::map<int32_t, broker_registration> regs;
  for (auto& b : st.machine->brokers())
    regs.emplace(b.id, b);
  if (!st.creating_state_topic && !st.machine->topic(consumer_state_topic)) {
    topic_config tc;
    tc.partitions = st.cfg.state_partitions;
    tc.replication_factor = static_cast<int16_t>(std::max<size_t>(
      1, std::min<size_t>(3, st.machine->placement().size())));
    // Kept forever: queue change sets are deltas and a commit may be the
    // only one of its group, so a replica built from scratch (a move, a new
    // broker) must find every record. Not compacted in this version.
    tc.retention_ms = -1;
    tc.retention_bytes = -1;
    st.creating_state_topic = true;
    self
      ->request(st.cfg.metadata, std::chrono::seconds{5}, create_atom_v,
                topic_atom_v, std::string{consumer_state_topic}, tc)
      .then(
        [self](const topic_metadata&) {
          self->state.creating_state_topic = false;
          log::info("node: created {}", consumer_state_topic);
        },
        [self](caf::error& err) {
          self->state.creating_state_topic = false;
          if (!is(err, ec::topic_exists))
            log::warn("node: cannot create {}: {}", consumer_state_topic,
                      err);
        });
  }
  // Replica moves whose target caught up: complete them.
  for (auto& mv : st.machine->reassignments()) {
    auto key = topic_partition{mv.topic, mv.partition};
    if (st.completing.count(key) > 0)
      continue;
    auto t = st.machine->topic(mv.topic);
    if (!t || static_cast<size_t>(mv.partition.value) >= t->partitions.size())
      continue;
    const auto& pa = t->partitions[static_cast<size_t>(mv.partition.value)];
    bool caught_up = std::all_of(mv.isr.begin(), mv.isr.end(), [&](int32_t id) {
      return std::find(pa.isr.begin(), pa.isr.end(), id) != pa.isr.end();
    });
    if (!caught_up)
      continue;
    st.completing.insert(key);
    isr_change done;
    done.topic = mv.topic;
    done.partition = mv.partition;
    self
      ->request(st.cfg.metadata, std::chrono::seconds{5}, assign_atom_v, done)
      .then([self, key](const partition_assignment&) {
              self->state.completing.erase(key);
            },
            [self, key](caf::error& err) {
              self->state.completing.erase(key);
              log::warn("node: completing the move of {} failed: {}",
                        tp_name(key.topic, key.partition), err);
            });
  }
  // Voters, and the brokers that registered (broker-only nodes).
  std::set<int32_t> watched;
  for (auto& v : st.cfg.voters)
    watched.insert(v.id);
  for (auto& [id, b] : regs)
    watched.insert(id);
  for (auto id : watched) {
    if (id == st.cfg.node_id || st.peers.count(id) > 0
        || st.fencing.count(id) > 0)
      continue;
    auto r = regs.find(id);
    if (r != regs.end() && r->second.fenced)
      continue;
    auto d = st.seen_up.count(id) > 0 ? st.down_since.find(id)
                                        : st.down_since.end();
    // Never seen: controller_grace after taking over (or after the link
    // to a new broker was opened).
    auto seen_from = st.controller_since;
    if (auto l = st.linked_at.find(id); l != st.linked_at.end())
      seen_from = std::max(seen_from, l->second);
    auto deadline = d != st.down_since.end()
                      ? d->second + std::chrono::duration_cast<caf::timespan>(
                          st.cfg.fence_after)
                      : seen_from
                          + std::chrono::duration_cast<caf::timespan>(
                            st.cfg.controller_grace);
    if (t_now < deadline)
      continue;
    broker_registration reg;
    reg.id = id;
    reg.fenced = true;
    st.fencing.insert(id);
    log::warn("node: controller fences broker {} (unreachable)", id);
    self
      ->request(st.cfg.metadata, std::chrono::seconds{5}, update_atom_v,
                broker_atom_v, reg)
      .then([self, id](const broker_registration&) {
              self->state.fencing.erase(id);
            },
            [self, id](caf::error& err) {
              self->state.fencing.erase(id);
              log::warn("node: fencing broker {} failed: {}", id, err);
            });
  }
}

/// Probes the connected, unconfirmed link to node `id` (one probe at a
/// time): the peer is up once it answers.
void probe_peer(self_ptr self, int32_t id) {
  auto& st = self->state;
  auto u = st.unconfirmed.find(id);
  if (u == st.unconfirmed.end() || st.probing.count(id) > 0)
    return;
  auto hdl = u->second;
  st.probing.insert(id);
  self
    ->request(hdl, st.cfg.peer_probe_timeout, connect_atom_v, st.cfg.node_id)
    .then(
      [self, id, hdl](int32_t answered_as) {
        auto& st = self->state;
        st.probing.erase(id);
        auto u = st.unconfirmed.find(id);
        if (st.shutting_down || u == st.unconfirmed.end()
            || u->second.address() != hdl.address())
          return; // the link went down or reconnected meanwhile
        if (answered_as != id) {
          log::error("node: the endpoint of node {} is node {}: check "
                     "--voters",
                     id, answered_as);
          return;
        }
        st.unconfirmed.erase(u);
        st.unanswered.erase(id);
        st.down_since.erase(id);
        st.seen_up.insert(id);
        st.peers[id] = hdl;
        log::info("node: link to node {} is up", id);
        if (st.raft)
          self->send(st.raft, connect_atom_v, id,
                     caf::actor_cast<caf::actor>(hdl));
        reconcile(self);
      },
      [self, id, hdl](caf::error& err) {
        auto& st = self->state;
        st.probing.erase(id);
        auto u = st.unconfirmed.find(id);
        if (u == st.unconfirmed.end() || u->second.address() != hdl.address()
            || !st.unanswered.insert(id).second)
          return;
        log::warn("node: node {} is connected but does not answer ({}): "
                  "down until it does",
                  id, err);
      });
}

/// The cluster timer: readiness, registration, control; every cluster_tick.
void cluster_tick(self_ptr self) {
  auto& st = self->state;
  if (!st.raft || st.shutting_down)
    return;
  // The quorum member's status: readiness, and the Raft metrics (commit
  // index moves without a role change).
  self->request(st.raft, st.cfg.status_timeout, status_atom_v)
    .then(
      [self](const raft_status& rs) {
        auto& st = self->state;
        if (st.probe)
          st.probe->raft(static_cast<int64_t>(rs.term),
                         rs.role == raft_role::leader,
                         static_cast<int64_t>(rs.commit_index));
        if (st.cluster_ready || st.shutting_down)
          return;
        if (rs.leader < 0 || rs.last_applied < rs.commit_index) {
          st.ready_probes = 0;
          return;
        }
        // A quorum of one knows its state at once; a cluster member waits
        // for a second look (a leader it has just heard of may be stale).
        if (++st.ready_probes < (cluster_mode(st) ? 2 : 1))
          return;
        st.cluster_ready = true;
        log::info("node: metadata caught up at index {} (Raft leader {}, "
                  "term {})",
                  rs.last_applied, rs.leader, rs.term);
        // The topic list the metadata actor sends on subscription may still
        // be on its way: then its arrival marks the node ready.
        if (st.got_topics)
          topics_changed(self);
      },
      [](caf::error&) {});
  if (!cluster_mode(st)) {
    self->delayed_send(self, st.cfg.cluster_tick, tick_atom_v);
    return; // no peers to register with, link to or fence
  }
  if (st.cluster_ready && !st.registering && st.raft_st.leader >= 0
      && st.cfg.port && st.cfg.port->load() != 0) {
    bool fenced = false;
    for (auto& b : st.machine->brokers())
      if (b.id == st.cfg.node_id)
        fenced = b.fenced;
    if (!st.registered || fenced)
      register_self(self);
  }
  sync_broker_links(self);
  for (auto& [id, hdl] : st.unconfirmed)
    probe_peer(self, id);
  if (is_controller(st))
    control(self);
  self->delayed_send(self, st.cfg.cluster_tick, tick_atom_v);
}

/// Opens (or reopens, after the endpoint changed) the link to node `id`.
void close_link(self_ptr self, int32_t id) {
  auto& st = self->state;
  // The listener is linked to the node: unlink first, else it takes the
  // node down when the closed connection releases it (exit "unreachable").
  if (auto l = st.link_listeners.find(id); l != st.link_listeners.end()) {
    self->unlink_from(l->second);
    self->send_exit(l->second, caf::exit_reason::user_shutdown);
    st.link_listeners.erase(l);
  }
  if (auto old = st.links.find(id); old != st.links.end()) {
    self->send_exit(old->second, caf::exit_reason::user_shutdown);
    st.links.erase(old);
  }
  st.link_endpoints.erase(id);
  st.linked_at.erase(id);
  st.seen_up.erase(id);
  st.unconfirmed.erase(id);
  st.probing.erase(id);
  st.unanswered.erase(id);
  st.peers.erase(id);
  st.down_since.erase(id);
  if (st.raft)
    self->send(st.raft, connect_atom_v, id, caf::actor{});
}

void open_link(self_ptr self, int32_t id, const std::string& host,
               uint16_t port) {
  auto& st = self->state;
  if (st.links.count(id) > 0)
    close_link(self, id);
  connection_config cc;
  cc.host = host;
  cc.port = port;
  cc.backoff_min = std::chrono::milliseconds{100};
  cc.backoff_max = std::chrono::milliseconds{1000};
  auto link = spawn_connection(self->system(), cc);
  auto listener = self->spawn<caf::linked>(peer_listener, id,
                                           caf::actor_cast<caf::actor>(self));
  self->send(link, subscribe_atom_v, listener);
  st.links[id] = link; // never seen yet: controller_grace applies
  st.link_listeners[id] = caf::actor_cast<caf::actor>(listener);
  st.link_endpoints[id] = std::make_pair(host, port);
  st.linked_at[id] = now(self);
  st.down_since.erase(id);
}

bool is_voter(const node_state& st, int32_t id) {
  return std::any_of(st.cfg.voters.begin(), st.cfg.voters.end(),
                     [id](const raft_voter& v) { return v.id == id; });
}

/// Links to the registered brokers that are not voters (the voters' links
/// exist from the start): opened when one registers (again, when its
/// endpoint changed), closed when it left the cluster.
void sync_broker_links(self_ptr self) {
  auto& st = self->state;
  std::map<int32_t, broker_registration> regs;
  for (auto& b : st.machine->brokers())
    if (b.id != st.cfg.node_id && !is_voter(st, b.id) && b.port != 0)
      regs.emplace(b.id, b);
  for (auto& [id, b] : regs) {
    auto ep = st.link_endpoints.find(id);
    if (ep != st.link_endpoints.end()
        && ep->second == std::make_pair(b.host, b.port))
      continue;
    log::info("node: linking to broker {} at {}:{}", id, b.host, b.port);
    open_link(self, id, b.host, b.port);
  }
  std::vector<int32_t> gone;
  for (auto& [id, link] : st.links)
    if (!is_voter(st, id) && regs.count(id) == 0)
      gone.push_back(id);
  for (auto id : gone) {
    log::info("node: broker {} left the cluster; closing its link", id);
    close_link(self, id);
  }
  if (!gone.empty())
    reconcile(self);
}

/// Spawns the quorum member (a voter; without --voters the only one) or
/// the observer (a broker-only node), raft_metadata over it and the links
/// to the other voters. Without --voters, metadata an older single-node
/// ferryd kept outside Raft is imported first (metadata_import.hpp).
caf::error start_metadata_quorum(self_ptr self) {
  auto& st = self->state;
  std::vector<int32_t> ids;
  for (auto& v : st.cfg.voters)
    ids.push_back(v.id);
  if (!cluster_mode(st))
    ids.push_back(st.cfg.node_id);
  bool member = std::find(ids.begin(), ids.end(), st.cfg.node_id) != ids.end();
  if (st.cfg.node_id < 0)
    return make_error(ec::invalid_config,
                      "node id " + std::to_string(st.cfg.node_id)
                        + " is negative");
  // A node alone holds one replica of each partition; a cluster checks the
  // brokers that can hold replicas per create.
  auto max_rf = static_cast<int16_t>(cluster_mode(st) ? 32767 : 1);
  st.machine = std::make_shared<metadata_state_machine>(ids, max_rf);
  if (member) {
    auto storage = raft_storage::open(st.cfg.store->environment());
    if (!storage)
      return std::move(storage.error());
    if (!cluster_mode(st)) {
      auto imported = import_legacy_metadata(*st.cfg.store, **storage,
                                             st.cfg.node_id);
      if (!imported)
        return std::move(imported.error());
    }
    raft_node_config rc;
    rc.raft.id = st.cfg.node_id;
    rc.raft.voters = ids;
    rc.raft.election_ticks = st.cfg.election_ticks;
    rc.raft.heartbeat_ticks = st.cfg.heartbeat_ticks;
    rc.raft.seed = std::random_device{}();
    rc.store = std::shared_ptr<raft_log_store>(std::move(*storage));
    rc.machine = metadata_state_machine::adapter(st.machine);
    rc.tick_interval = st.cfg.raft_tick;
    st.raft = self->spawn(raft_node, std::move(rc));
  } else {
    raft_observer_config oc;
    oc.id = st.cfg.node_id;
    oc.voters = ids;
    oc.machine = metadata_state_machine::adapter(st.machine);
    oc.poll_interval = st.cfg.raft_tick;
    st.raft = self->spawn(raft_observer, std::move(oc));
  }
  self->monitor(st.raft);
  self->send(st.raft, subscribe_atom_v, caf::actor_cast<caf::actor>(self));
  raft_metadata_config mc;
  mc.raft = st.raft;
  mc.machine = st.machine;
  st.cfg.metadata = self->spawn(raft_metadata, std::move(mc));
  st.own_metadata = true;
  for (auto& v : st.cfg.voters)
    if (v.id != st.cfg.node_id)
      open_link(self, v.id, v.host, v.port);
  if (!cluster_mode(st))
    log::info("node: single node {}: a Raft quorum of one", st.cfg.node_id);
  else if (member)
    log::info("node: cluster member {} of {} voters", st.cfg.node_id,
              ids.size());
  else
    log::info("node: broker-only node {} (not a voter; {} voters) follows "
              "the metadata log",
              st.cfg.node_id, ids.size());
  self->send(self, tick_atom_v);
  return caf::none;
}

// -- lifecycle ----------------------------------------------------------------

void finish_shutdown(self_ptr self) {
  auto& st = self->state;
  for (auto& w : st.create_waiters)
    w.promise.deliver(failed(self, make_error(ec::request_timed_out,
                                              "the node shut down while topic "
                                                + w.topic.name
                                                + " was being created")));
  st.create_waiters.clear();
  if (st.own_metadata && st.cfg.metadata)
    self->send_exit(st.cfg.metadata, caf::exit_reason::user_shutdown);
  if (st.raft) {
    self->demonitor(st.raft.address());
    self->send_exit(st.raft, caf::exit_reason::user_shutdown);
  }
  for (auto& [id, link] : st.links)
    self->send_exit(link, caf::exit_reason::user_shutdown);
  st.links.clear();
  st.peers.clear();
  if (st.disk_sampler)
    self->send_exit(st.disk_sampler, caf::exit_reason::user_shutdown);
  log::info("node: shutdown complete");
  auto reason = st.exit_reason ? st.exit_reason
                               : caf::error{caf::exit_reason::user_shutdown};
  self->quit(std::move(reason));
}

/// Counts the replica `key` as closed during the shutdown (once: on its down
/// message, or when its stop request failed); the last one finishes it.
/// Waiting for the down message matters: CAF 0.17 lowers the running-actor
/// count before it sends a terminated actor's down messages, the one to the
/// middleman's BASP broker (which monitors every actor a client has a proxy
/// of) included, and a broker keeps what reaches its mailbox after the
/// middleman stopped. That message holds the replica, whose dedicated thread
/// the actor system's destructor then waits for forever. CAF runs the newest
/// monitor first, so the node's (from the spawn) comes after the broker's;
/// ferryd then flushes the broker's mailbox before the system goes.
void replica_closed(self_ptr self, const topic_partition& key) {
  auto& st = self->state;
  auto i = st.replicas.find(key);
  if (i == st.replicas.end() || !i->second.handle)
    return;
  i->second.handle = nullptr;
  if (--st.replicas_closing == 0)
    finish_shutdown(self);
}

void begin_shutdown(self_ptr self, caf::error reason) {
  auto& st = self->state;
  if (st.shutting_down)
    return;
  st.shutting_down = true;
  st.exit_reason = std::move(reason);
  for (auto& [name, g] : st.groups) {
    self->demonitor(g.address());
    self->send_exit(g, caf::exit_reason::user_shutdown);
  }
  for (auto& [name, q] : st.queue_groups) {
    self->demonitor(q.address());
    self->send_exit(q, caf::exit_reason::user_shutdown);
  }
  st.queue_groups.clear();
  st.groups.clear();
  if (st.dlq) {
    self->demonitor(st.dlq.address());
    self->send_exit(st.dlq, caf::exit_reason::user_shutdown);
    st.dlq = nullptr;
  }
  std::vector<std::pair<topic_partition, partition_actor>> open;
  for (auto& [key, r] : st.replicas)
    if (r.handle)
      open.emplace_back(key, r.handle);
  log::info("node: shutting down, closing {} partition replicas", open.size());
  st.replicas_closing = open.size();
  if (open.empty()) {
    finish_shutdown(self);
    return;
  }
  // Still monitored: a replica counts as closed on its down message, not on
  // its reply (see replica_closed).
  for (auto& [key, h] : open) {
    self->request(h, st.cfg.shutdown_timeout, stop_atom_v, false)
      .then([](bool) {},
            [self, key = key](caf::error& err) {
              log::error("node: replica {} did not close: {}",
                         tp_name(key.topic, key.partition), err);
              replica_closed(self, key);
            });
  }
}

void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (st.raft && caf::actor_cast<caf::actor_addr>(st.raft) == dm.source) {
    if (st.shutting_down)
      return;
    log::critical("node: the Raft quorum member terminated: {}", dm.reason);
    begin_shutdown(self, dm.reason ? dm.reason
                                   : make_error(ec::coordinator_not_available,
                                                "Raft member ended"));
    return;
  }
  if (st.cfg.metadata
      && caf::actor_cast<caf::actor_addr>(st.cfg.metadata) == dm.source) {
    if (st.shutting_down)
      return;
    log::critical("node: the metadata actor terminated: {}", dm.reason);
    begin_shutdown(self, dm.reason ? dm.reason
                                   : make_error(ec::coordinator_not_available,
                                                "metadata actor ended"));
    return;
  }
  for (auto i = st.groups.begin(); i != st.groups.end(); ++i) {
    if (caf::actor_cast<caf::actor_addr>(i->second) == dm.source) {
      log::error("node: coordinator of group {} terminated: {}; it restarts "
                 "on the next request",
                 i->first, dm.reason);
      st.groups.erase(i);
      return;
    }
  }
  if (st.dlq && caf::actor_cast<caf::actor_addr>(st.dlq) == dm.source) {
    log::error("node: the DLQ manager terminated: {}; it restarts on the "
               "next DLQ request",
               dm.reason);
    st.dlq = nullptr;
    return;
  }
  for (auto i = st.queue_groups.begin(); i != st.queue_groups.end(); ++i) {
    if (caf::actor_cast<caf::actor_addr>(i->second) == dm.source) {
      log::error("node: queue coordinator of group {} terminated: {}; it "
                 "restarts on the next request",
                 i->first, dm.reason);
      st.queue_groups.erase(i);
      return;
    }
  }
  for (auto& [key, r] : st.replicas) {
    if (!r.handle || caf::actor_cast<caf::actor_addr>(r.handle) != dm.source)
      continue;
    if (st.shutting_down) {
      replica_closed(self, key);
      return;
    }
    r.handle = nullptr;
    auto t_now = now(self);
    r.crashes.push_back(t_now);
    auto window = std::chrono::duration_cast<caf::timespan>(
      st.cfg.restart_window);
    r.crashes.erase(std::remove_if(r.crashes.begin(), r.crashes.end(),
                                   [&](time_point t) {
                                     return t + window < t_now;
                                   }),
                    r.crashes.end());
    auto name = tp_name(key.topic, key.partition);
    if (static_cast<int>(r.crashes.size()) > st.cfg.max_restarts) {
      r.given_up = true;
      log::critical("node: replica {} terminated: {}; it crashed {} times "
                    "within {} ms and stays offline until the node restarts",
                    name, dm.reason, r.crashes.size(),
                    st.cfg.restart_window.count());
      return;
    }
    auto backoff = std::chrono::duration_cast<caf::timespan>(
      st.cfg.restart_backoff * (1 << std::min<size_t>(r.crashes.size() - 1,
                                                      10)));
    r.restart_at = t_now + backoff;
    log::error("node: replica {} terminated: {}; restarting in {} ms", name,
               dm.reason,
               std::chrono::duration_cast<std::chrono::milliseconds>(backoff)
                 .count());
    schedule_recheck(self, backoff);
    return;
  }
}

} // namespace

std::filesystem::path replica_dir(const std::filesystem::path& data_dir,
                                  const std::string& topic, partition_id p) {
  return data_dir / "topics" / tp_name(topic, p);
}

broker_actor::behavior_type
node(broker_actor::stateful_pointer<node_state> self, node_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  auto store = st.cfg.store;
  // The offset store borrows the metadata store: keep the latter alive for
  // as long as any coordinator holds the former.
  st.offsets = std::shared_ptr<offset_store>(new offset_store(*store),
                                             [store](offset_store* p) {
                                               delete p;
                                             });
  if (!st.cfg.metadata) {
    if (auto err = start_metadata_quorum(self)) {
      log::critical("node: cannot start the metadata quorum member: {}", err);
      self->quit(std::move(err));
      return broker_actor::behavior_type::make_empty_behavior();
    }
  }
  if (st.cfg.metrics) {
    st.probe = std::make_shared<metrics::node_probe>(st.cfg.metrics);
    st.disk_sampler = self->spawn(
      disk_sampler, st.probe, st.cfg.data_dir,
      std::chrono::duration_cast<caf::timespan>(
        std::max(st.cfg.disk_sample_interval, std::chrono::milliseconds{1})),
      self->address());
  }
  self->monitor(st.cfg.metadata);
  self->send(st.cfg.metadata, subscribe_atom_v,
             caf::actor_cast<caf::actor>(self));
  if (cluster_mode(st)) {
    // Coordinators start on demand where their group lives.
  } else if (auto groups = st.offsets->list_groups()) {
    for (auto& g : *groups)
      spawn_coordinator(self, g.group);
    if (!groups->empty())
      log::info("node: {} consumer groups recovered", groups->size());
  } else {
    log::error("node: cannot list consumer groups: {}", groups.error());
  }
  if (cluster_mode(st)) {
    // Queue coordinators start where their group lives, from the state
    // replicated through __consumer_state (sync_queue_homes).
  } else if (auto queues = load_queue_groups(*store)) {
    st.queue_configs = std::move(*queues);
    for (auto& [name, qc] : st.queue_configs)
      spawn_queue_coordinator(self, name);
    if (!st.queue_configs.empty())
      log::info("node: {} queue groups recovered", st.queue_configs.size());
  } else {
    log::error("node: cannot list queue groups: {}", queues.error());
  }
  self->set_down_handler(
    [self](caf::down_msg& dm) { on_down(self, dm); });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    begin_shutdown(self, std::move(msg.reason));
  });
  return {
    // -- data path: delegated to the partition's replica ----------------------
    [self](produce_atom, produce_request& req) -> caf::result<produce_response> {
      auto rp = self->make_response_promise<produce_response>();
      // The coordinators of this node (and the node itself) write group
      // state only where they are the partition's leader: a coordinator
      // whose group just moved away must not reach the new leader through
      // a forward (a late write would land after the new coordinator's).
      auto& sender = self->current_sender();
      bool own_state = req.topic == consumer_state_topic && sender
                       && sender->node() == self->node();
      when_ready(self, [self, rp, own_state, req = std::move(req)]() mutable {
        if (own_state && cluster_mode(self->state)) {
          auto& st = self->state;
          auto t = st.topics.find(req.topic);
          auto p = static_cast<size_t>(std::max(req.partition.value, 0));
          if (t != st.topics.end() && p < t->second.partitions.size()
              && t->second.partitions[p].leader != st.cfg.node_id) {
            rp.deliver(failed(
              self, make_error(ec::not_leader,
                               "group state of " + tp_name(req.topic, req.partition)
                                 + " is written only by its leader's node, not "
                                   "node "
                                 + std::to_string(st.cfg.node_id) + " (leader="
                                 + std::to_string(t->second.partitions[p].leader)
                                 + ")")));
            return;
          }
        }
        serve_partition(self, rp, produce_atom_v, std::move(req), false);
      });
      return rp;
    },
    [self](fetch_atom, fetch_request& req) -> caf::result<fetch_response> {
      auto rp = self->make_response_promise<fetch_response>();
      when_ready(self, [self, rp, req = std::move(req)]() mutable {
        bool follower = req.replica_id >= 0;
        serve_partition(self, rp, fetch_atom_v, std::move(req), follower);
      });
      return rp;
    },
    [self](offsets_atom, list_offsets_request& req) -> caf::result<offset> {
      auto rp = self->make_response_promise<offset>();
      when_ready(self, [self, rp, req = std::move(req)]() mutable {
        serve_partition(self, rp, offsets_atom_v, std::move(req), false);
      });
      return rp;
    },
    [self](init_pid_atom) -> caf::result<producer_identity> {
      auto rp = self->make_response_promise<producer_identity>();
      meta_relay(self, rp, std::chrono::seconds{10}, init_pid_atom_v);
      return rp;
    },
    // -- topic admin: through the metadata actor ------------------------------
    [self](create_atom, topic_atom, std::string& name,
           topic_config& tc) -> caf::result<topic_metadata> {
      auto rp = self->make_response_promise<topic_metadata>();
      auto& st = self->state;
      meta_call(
        self, rp, st.cfg.create_timeout,
        [self](caf::typed_response_promise<topic_metadata>& p,
               topic_metadata& md) {
          await_replicas(self, std::move(md), p);
        },
        create_atom_v, topic_atom_v, std::move(name), std::move(tc));
      return rp;
    },
    [self](delete_atom, topic_atom,
           std::string& name) -> caf::result<topic_metadata> {
      auto rp = self->make_response_promise<topic_metadata>();
      meta_relay(self, rp, self->state.cfg.create_timeout, delete_atom_v,
                 topic_atom_v, std::move(name));
      return rp;
    },
    [self](list_atom, topic_atom) -> caf::result<std::vector<topic_metadata>> {
      auto rp = self->make_response_promise<std::vector<topic_metadata>>();
      relay(self, rp, self->state.cfg.metadata, list_atom_v, topic_atom_v);
      return rp;
    },
    [self](describe_atom, topic_atom,
           std::string& name) -> caf::result<topic_description> {
      auto rp = self->make_response_promise<topic_description>();
      auto& st = self->state;
      self
        ->request(st.cfg.metadata, st.cfg.status_timeout, describe_atom_v,
                  topic_atom_v, std::move(name))
        .then(
          [self, rp](topic_metadata& md) mutable {
            when_ready(self, [self, rp, md]() mutable {
              gather_status(self, md, [rp](topic_description td) mutable {
                rp.deliver(std::move(td));
              });
            });
          },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
      return rp;
    },
    [self](alter_atom, topic_atom, std::string& name,
           std::map<std::string, std::string>& changes)
      -> caf::result<topic_metadata> {
      auto rp = self->make_response_promise<topic_metadata>();
      meta_relay(self, rp, self->state.cfg.create_timeout, alter_atom_v,
                 topic_atom_v, std::move(name), std::move(changes));
      return rp;
    },
    [self](add_parts_atom, std::string& name,
           int32_t n) -> caf::result<topic_metadata> {
      auto rp = self->make_response_promise<topic_metadata>();
      auto& st = self->state;
      meta_call(
        self, rp, st.cfg.create_timeout,
        [self](caf::typed_response_promise<topic_metadata>& p,
               topic_metadata& md) {
          await_replicas(self, std::move(md), p);
        },
        add_parts_atom_v, std::move(name), n);
      return rp;
    },
    [self](list_atom, broker_atom) -> std::vector<node_info> {
      return cluster_nodes(self);
    },
    [self](cluster_atom) -> caf::result<cluster_description> {
      auto rp = self->make_response_promise<cluster_description>();
      // The list is asked for once the node is ready: before, the metadata
      // may not have caught up (a Raft member restoring its snapshot).
      when_ready(self, [self, rp]() mutable {
        auto& st = self->state;
        self->request(st.cfg.metadata, st.cfg.status_timeout, list_atom_v,
                      topic_atom_v)
          .then(
            [self, rp](std::vector<topic_metadata>& list) mutable {
              describe_cluster(self, std::move(list), rp);
            },
            [self, rp](caf::error& err) mutable {
              rp.deliver(failed(self, std::move(err)));
            });
      });
      return rp;
    },
    // -- consumer groups: one coordinator per group ---------------------------
    [self](join_atom,
           join_group_request& req) -> caf::result<join_group_response> {
      auto group = req.group;
      return to_group<join_group_response>(self, group, true, join_atom_v,
                                           std::move(req));
    },
    [self](sync_atom,
           sync_group_request& req) -> caf::result<sync_group_response> {
      auto group = req.group;
      return to_group<sync_group_response>(self, group, true, sync_atom_v,
                                           std::move(req));
    },
    [self](heartbeat_atom, heartbeat_request& req) -> caf::result<void> {
      auto group = req.group;
      return to_group_void(self, group, true, heartbeat_atom_v,
                           std::move(req));
    },
    [self](leave_atom, leave_group_request& req) -> caf::result<void> {
      auto group = req.group;
      return to_group_void(self, group, true, leave_atom_v, std::move(req));
    },
    [self](commit_atom, commit_offsets_request& req) -> caf::result<void> {
      auto group = req.group;
      return to_group_void(self, group, true, commit_atom_v, std::move(req));
    },
    [self](offsets_atom, fetch_offsets_request& req)
      -> caf::result<std::vector<partition_offset>> {
      auto group = req.group;
      return to_group<std::vector<partition_offset>>(
        self, group, true, offsets_atom_v, std::move(req));
    },
    [self](list_atom,
           group_atom) -> caf::result<std::vector<group_description>> {
      auto rp = self->make_response_promise<std::vector<group_description>>();
      when_ready(self, [self, rp]() mutable {
        auto& st = self->state;
        auto out = std::make_shared<std::vector<group_description>>();
        out->resize(st.groups.size() + st.queue_configs.size());
        if (out->empty()) {
          rp.deliver(std::vector<group_description>{});
          return;
        }
        auto pending = std::make_shared<size_t>(out->size());
        size_t i = 0;
        for (auto& [name, g] : st.groups) {
          (*out)[i].group = name;
          (*out)[i].mode = "stream";
          (*out)[i].state = "Unknown";
          self->request(g, st.cfg.status_timeout, describe_atom_v, group_atom_v)
            .then(
              [rp, out, pending, i](group_description& gd) mutable {
                (*out)[i] = std::move(gd);
                if (--*pending == 0)
                  rp.deliver(std::move(*out));
              },
              [rp, out, pending](caf::error&) mutable {
                if (--*pending == 0)
                  rp.deliver(std::move(*out));
              });
          ++i;
        }
        for (auto& [name, qc] : st.queue_configs) {
          (*out)[i].group = name;
          (*out)[i].mode = "queue";
          (*out)[i].state = "Unknown";
          auto q = queue_coordinator_for(self, name, nullptr);
          if (!q) {
            if (--*pending == 0)
              rp.deliver(std::move(*out));
            ++i;
            continue;
          }
          self->request(*q, st.cfg.status_timeout, describe_atom_v, group_atom_v)
            .then(
              [rp, out, pending, i](group_description& gd) mutable {
                (*out)[i] = std::move(gd);
                if (--*pending == 0)
                  rp.deliver(std::move(*out));
              },
              [rp, out, pending](caf::error&) mutable {
                if (--*pending == 0)
                  rp.deliver(std::move(*out));
              });
          ++i;
        }
      });
      return rp;
    },
    [self](describe_atom, group_atom,
           std::string& group) -> caf::result<group_description> {
      if (known_queue_group(self, group))
        return to_queue<group_description>(
          self, group, false,
          std::make_tuple(describe_atom_v, group_atom_v, group),
          describe_atom_v, group_atom_v);
      auto rp = self->make_response_promise<group_description>();
      when_ready(self, [self, rp, group]() mutable {
        auto home = group_home(self, group);
        if (home.local) {
          auto c = coordinator(self, group, false);
          if (!c)
            rp.deliver(failed(self, std::move(c.error())));
          else
            relay(self, rp, *c, describe_atom_v, group_atom_v);
        } else if (home.err) {
          rp.deliver(failed(self, std::move(home.err)));
        } else {
          relay(self, rp, home.remote, describe_atom_v, group_atom_v, group);
        }
      });
      return rp;
    },
    [self](reset_atom, reset_offsets_request& req)
      -> caf::result<std::vector<partition_offset>> {
      auto group = req.group;
      return to_group<std::vector<partition_offset>>(self, group, true,
                                                     reset_atom_v,
                                                     std::move(req));
    },
    [self](delete_atom, group_atom, std::string& group) -> caf::result<void> {
      auto rp = self->make_response_promise();
      when_ready(self, [self, rp, group]() mutable {
        if (cluster_mode(self->state)) {
          auto home = group_home(self, group);
          if (!home.local) {
            if (home.err)
              rp.deliver(failed(self, std::move(home.err)));
            else
              relay_void_for(self, rp, home.remote, std::chrono::seconds{75},
                             delete_atom_v, group_atom_v, group);
            return;
          }
        }
        if (known_queue_group(self, group)) {
          auto q = queue_coordinator_for(self, group, nullptr);
          if (!q) {
            rp.deliver(failed(self, std::move(q.error())));
            return;
          }
          auto h = *q;
          self->request(h, self->state.cfg.status_timeout, delete_atom_v,
                        group_atom_v)
            .then(
              [self, rp, group, h]() mutable {
                auto& st = self->state;
                self->demonitor(h.address());
                self->send_exit(h, caf::exit_reason::user_shutdown);
                st.queue_groups.erase(group);
                st.queue_configs.erase(group);
                auto done = [self, rp, group](caf::error err) mutable {
                  if (err) {
                    rp.deliver(failed(self, std::move(err)));
                    return;
                  }
                  log::info("node: deleted queue group {}", group);
                  rp.deliver(caf::unit);
                };
                if (!cluster_mode(st)) {
                  done(caf::error{});
                  return;
                }
                consumer_state_record rec;
                rec.kind = consumer_state_kind::queue_group_delete;
                rec.group = group;
                replicate_queue_group(self, rec, std::move(done));
              },
              [self, rp](caf::error& err) mutable {
                rp.deliver(failed(self, std::move(err)));
              });
          return;
        }
        auto c = coordinator(self, group, false);
        if (!c) {
          rp.deliver(failed(self, std::move(c.error())));
          return;
        }
        auto h = *c;
        self->request(h, self->state.cfg.status_timeout, delete_atom_v,
                      group_atom_v)
          .then(
            [self, rp, group, h]() mutable {
              auto& groups = self->state.groups;
              auto i = groups.find(group);
              if (i != groups.end() && i->second == h) {
                self->demonitor(h.address());
                self->send_exit(h, caf::exit_reason::user_shutdown);
                groups.erase(i);
              }
              log::info("node: deleted group {}", group);
              rp.deliver(caf::unit);
            },
            [self, rp](caf::error& err) mutable {
              rp.deliver(failed(self, std::move(err)));
            });
      });
      return rp;
    },
    // -- queue groups: one queue coordinator per group ------------------------
    [self](create_atom, group_atom, std::string& group,
           queue_group_config& qc) -> caf::result<queue_group_config> {
      auto rp = self->make_response_promise<queue_group_config>();
      when_ready(self, [self, rp, group, qc]() mutable {
        if (forwarded_group(self, rp, group, create_atom_v, group_atom_v,
                            group, qc))
          return;
        with_queue_coordinator(
          self, group, &qc, false,
          [self, rp, group](caf::expected<queue_coordinator_actor> c) mutable {
            if (!c)
              rp.deliver(failed(self, std::move(c.error())));
            else
              rp.deliver(self->state.queue_configs.at(group));
          });
      });
      return rp;
    },
    [self](receive_atom, queue_receive_request& req)
      -> caf::result<std::vector<leased_message>> {
      auto group = req.group;
      return to_queue<std::vector<leased_message>>(
        self, group, true, std::make_tuple(receive_atom_v, req),
        receive_atom_v, req);
    },
    [self](ack_atom, queue_ack_request& req) -> caf::result<queue_ack_response> {
      auto group = req.group;
      return to_queue<queue_ack_response>(self, group, false,
                                          std::make_tuple(ack_atom_v, req),
                                          ack_atom_v, req);
    },
    [self](describe_atom, queue_atom,
           std::string& group) -> caf::result<queue_group_description> {
      return to_queue<queue_group_description>(
        self, group, false,
        std::make_tuple(describe_atom_v, queue_atom_v, group),
        describe_atom_v, queue_atom_v);
    },
    [self](alter_atom, group_atom, std::string& group,
           queue_group_config& qc) -> caf::result<queue_group_config> {
      auto rp = self->make_response_promise<queue_group_config>();
      when_ready(self, [self, rp, group, qc]() mutable {
        if (forwarded_group(self, rp, group, alter_atom_v, group_atom_v,
                            group, qc))
          return;
        auto& st = self->state;
        known_queue_group(self, group);
        auto c = st.queue_configs.find(group);
        if (c == st.queue_configs.end()) {
          if (!group.empty() && st.groups.count(group) > 0) {
            rp.deliver(failed(self, make_error(ec::invalid_request,
                                               "group " + group
                                                 + " is a stream-mode "
                                                   "group")));
            return;
          }
          auto q = queue_coordinator_for(self, group, nullptr);
          rp.deliver(failed(self, std::move(q.error())));
          return;
        }
        if (auto err = validate(qc)) {
          rp.deliver(failed(self, std::move(err)));
          return;
        }
        if (qc.dlq_topic != c->second.dlq_topic) {
          rp.deliver(failed(self, make_error(ec::invalid_config,
                                             "dlq_topic of queue group "
                                               + group
                                               + " cannot be altered")));
          return;
        }
        if (qc == c->second) {
          rp.deliver(qc);
          return;
        }
        auto apply = [self, rp, group, qc](caf::error err) mutable {
          if (err) {
            rp.deliver(failed(self, std::move(err)));
            return;
          }
          self->state.queue_configs[group] = qc;
          log::info("node: altered queue group {}", group);
          auto q = queue_coordinator_for(self, group, nullptr);
          if (!q)
            rp.deliver(failed(self, std::move(q.error())));
          else
            relay(self, rp, *q, alter_atom_v, group_atom_v, std::move(qc));
        };
        if (cluster_mode(st)) {
          consumer_state_record rec;
          rec.kind = consumer_state_kind::queue_group;
          rec.group = group;
          rec.row = queue_group_format::encode_group_value(qc);
          replicate_queue_group(self, rec, std::move(apply));
          return;
        }
        apply(save_queue_group(*st.cfg.store, group, qc));
      });
      return rp;
    },
    [self](leave_atom, queue_atom, std::string& group,
           std::string& member) -> caf::result<int64_t> {
      return to_queue<int64_t>(
        self, group, false,
        std::make_tuple(leave_atom_v, queue_atom_v, group, member),
        leave_atom_v, queue_atom_v, member);
    },
    // -- DLQ operations: relayed to the DLQ manager ---------------------------
    [self](list_atom, dlq_atom) -> caf::result<std::vector<dlq_info>> {
      return list_dlqs_at_homes(self);
    },
    [self](show_atom, dlq_show_request& req) -> caf::result<dlq_show_response> {
      auto topic = req.topic;
      return to_dlq_at<dlq_show_response>(self, topic, show_atom_v,
                                          std::move(req));
    },
    [self](redrive_atom,
           dlq_redrive_request& req) -> caf::result<dlq_redrive_response> {
      auto topic = req.topic;
      return to_dlq_at<dlq_redrive_response>(self, topic, redrive_atom_v,
                                             std::move(req));
    },
    [self](purge_atom, dlq_purge_request& req) -> caf::result<dlq_purge_response> {
      auto topic = req.topic;
      return to_dlq_at<dlq_purge_response>(self, topic, purge_atom_v,
                                           std::move(req));
    },
    [self](purge_atom, topic_partition& tp, offset before) -> caf::result<offset> {
      auto rp = self->make_response_promise<offset>();
      when_ready(self, [self, rp, tp, before]() mutable {
        auto r = route(self, tp.topic, tp.partition);
        if (!r)
          rp.deliver(failed(self, std::move(r.error())));
        else
          relay(self, rp, *r, purge_atom_v, before);
      });
      return rp;
    },
    // -- metadata updates (and re-checks the node sends itself) ---------------
    [self](update_atom, std::vector<topic_metadata>& topics) {
      auto& st = self->state;
      auto& sender = self->current_sender();
      if (sender && sender.get() == self->ctrl()) {
        st.recheck_at = time_point{};
        reconcile(self);
        return;
      }
      if (sender != caf::actor_cast<caf::strong_actor_ptr>(st.cfg.metadata)) {
        log::warn("node: ignored a topic update that did not come from the "
                  "metadata actor");
        return;
      }
      if (st.shutting_down)
        return;
      st.topics.clear();
      for (auto& t : topics)
        st.topics.emplace(t.name, std::move(t));
      st.got_topics = true;
      // A list from before the metadata caught up (the one a Raft member
      // sends on subscription before it restored its snapshot) reaches no
      // one: a coordinator would take the missing topics for deleted ones.
      if (!metadata_caught_up(st))
        return;
      topics_changed(self);
    },
    // -- cluster ----------------------------------------------------------------
    [self](status_atom,
           const topic_partition& tp) -> caf::result<partition_status> {
      auto rp = self->make_response_promise<partition_status>();
      when_ready(self, [self, rp, tp]() mutable {
        auto r = route(self, tp.topic, tp.partition);
        if (!r)
          rp.deliver(failed(self, std::move(r.error())));
        else
          relay(self, rp, *r, status_atom_v);
      });
      return rp;
    },
    [self](update_atom, broker_atom, broker_registration& reg)
      -> caf::result<broker_registration> {
      auto rp = self->make_response_promise<broker_registration>();
      meta_relay(self, rp, std::chrono::seconds{5}, update_atom_v,
                 broker_atom_v, std::move(reg));
      return rp;
    },
    [self](alter_atom, isr_atom,
           isr_change& ch) -> caf::result<partition_assignment> {
      auto rp = self->make_response_promise<partition_assignment>();
      meta_relay(self, rp, std::chrono::seconds{5}, alter_atom_v, isr_atom_v,
                 std::move(ch));
      return rp;
    },
    [self](assign_atom, isr_change& ch) -> caf::result<partition_assignment> {
      auto rp = self->make_response_promise<partition_assignment>();
      meta_relay(self, rp, self->state.cfg.create_timeout, assign_atom_v,
                 std::move(ch));
      return rp;
    },
    [self](raft_atom, raft_message& m) {
      if (self->state.raft)
        self->send(self->state.raft, raft_atom_v, std::move(m));
    },
    [self](delete_atom, broker_atom,
           int32_t id) -> caf::result<broker_registration> {
      auto rp = self->make_response_promise<broker_registration>();
      meta_relay(self, rp, std::chrono::seconds{5}, delete_atom_v,
                 broker_atom_v, id);
      return rp;
    },
    [self](fetch_atom, raft_atom,
           uint64_t after) -> caf::result<raft_log_chunk> {
      auto& st = self->state;
      if (!st.raft)
        return make_error(ec::not_leader,
                          "node " + std::to_string(st.cfg.node_id)
                            + " is not part of a cluster; leader=-1");
      auto rp = self->make_response_promise<raft_log_chunk>();
      rp.delegate(st.raft, fetch_atom_v, raft_atom_v, after);
      return rp;
    },
    [self](connect_atom, int32_t id, const caf::actor& peer) {
      auto& st = self->state;
      if (st.shutting_down || st.links.count(id) == 0)
        return;
      if (peer) {
        // Up once the peer answers (see "Links" in node.hpp).
        st.unconfirmed[id] = caf::actor_cast<broker_actor>(peer);
        probe_peer(self, id);
        return;
      }
      st.unconfirmed.erase(id);
      st.down_since.emplace(id, now(self)); // an outage starts (or goes on)
      if (st.peers.erase(id) == 0)
        return;
      log::warn("node: link to node {} is down", id);
      if (st.raft)
        self->send(st.raft, connect_atom_v, id, peer);
      reconcile(self);
    },
    [self](connect_atom, int32_t) -> int32_t {
      return self->state.cfg.node_id;
    },
    [self](update_atom, const raft_status& rs) {
      auto& st = self->state;
      bool was = is_controller(st);
      auto old_leader = st.raft_st.leader;
      st.raft_st = rs;
      if (is_controller(st) && !was) {
        st.controller_since = now(self);
        log::info("node: controller in Raft term {}", rs.term);
      }
      if (rs.leader != old_leader)
        log::info("node: Raft leader is node {} (term {})", rs.leader,
                  rs.term);
      if (st.probe)
        st.probe->raft(static_cast<int64_t>(rs.term),
                       rs.role == raft_role::leader,
                       static_cast<int64_t>(rs.commit_index));
    },
    [self](tick_atom) { cluster_tick(self); },
  };
}

} // namespace ferry
