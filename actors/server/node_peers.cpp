// The node actor's peer links and the cluster timer: links to the other nodes,
// probing them, registration, the controller's duties, the metadata quorum
// member, Raft messages between nodes. (See node_internal.hpp for how the
// node's files divide the work.)

#include "actors/server/basp_routes.hpp"
#include "actors/server/node_internal.hpp"
#include "actors/server/stall_watch.hpp"
#include "broker/topic_config.hpp"

#include "actors/client/tls.hpp"

namespace ferry::node_detail {

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

/// The link to a peer that dialled this node, over the peer's own
/// connection: it holds the proxy the peer's probe came from and tells its
/// listeners when that proxy goes down (the connection closed); it never
/// dials. With TLS a second connection between two nodes takes their link
/// down (actors/client/tls.hpp), so there the passive side adopts the
/// peer's connection instead of dialling back.
struct adopted_link_state {
  // Not an aggregate: CAF would try to build it from the actor pointer.
  adopted_link_state() = default;
  ferry::broker_actor peer;
  std::vector<connection_listener> listeners;
  static inline const char* name = "ferry.adopted_link";
};

connection_actor::behavior_type
adopted_link(connection_actor::stateful_pointer<adopted_link_state> self, ferry::broker_actor peer) {
  self->state.peer = peer;
  self->monitor(peer);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    if (!st.peer || msg.source != st.peer.address())
      return;
    st.peer = nullptr;
    for (auto& l : st.listeners)
      self->send(l, connect_atom_v, ferry::broker_actor{});
  });
  return {
    [self](connect_atom) -> caf::result<ferry::broker_actor> {
      if (self->state.peer)
        return self->state.peer;
      return make_error(ec::request_timed_out, "the peer's connection closed");
    },
    [self](subscribe_atom, connection_listener& l) {
      self->state.listeners.push_back(l);
      self->send(l, connect_atom_v, self->state.peer);
    },
    [](connect_atom, uint64_t, ferry::broker_actor&) {},
    [](connect_atom, uint64_t, caf::error&) {},
    [](tick_atom) {},
    [](session_atom, uint64_t) {},
    [self](stop_atom) { self->quit(); },
  };
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
  reg.kafka_host = st.cfg.kafka_host;
  reg.kafka_port = st.cfg.kafka_port;
  reg.peer_port = st.cfg.peer_port ? st.cfg.peer_port->load() : 0;
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
    // Compacted, never deleted by age or size: every record's key names the
    // row it sets (broker/consumer_state.hpp), so the cleaner keeps the
    // latest record of each row and a replica built from scratch (a move, a
    // new broker) still finds every live one. Small segments bound what a
    // restart replays beyond the compacted part (the active segment), like
    // Kafka's __consumer_offsets (100 MiB there). A cluster whose topic was
    // created by an earlier version keeps its `delete` policy (its format-1
    // records are deltas that compaction must not reorder against
    // tombstones; see the file comment there).
    tc.retention_ms = -1;
    tc.retention_bytes = -1;
    tc.cleanup_policy = cleanup_compact;
    tc.segment_bytes = consumer_state_segment_bytes;
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
        // The answer's sender is the peer's node actor, also when this
        // node talks to it through a session proxy: its CAF node.
        if (auto s = self->current_sender(); s && s->node() != self->node())
          st.peer_nodes[id] = s->node();
        st.unconfirmed.erase(u);
        st.dialed_at.erase(id);
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
    delayed_send_self(self, st.cfg.cluster_tick, tick_atom_v);
    return; // no peers to register with, link to or fence
  }
  stall_watch::instance(); // running from the first tick on (stalled_home_error)

  if (st.cluster_ready && !st.registering && st.raft_st.leader >= 0
      && st.cfg.port && st.cfg.port->load() != 0
      && (!st.cfg.peer_port || st.cfg.peer_port->load() != 0)) {
    bool fenced = false;
    for (auto& b : st.machine->brokers())
      if (b.id == st.cfg.node_id)
        fenced = b.fenced;
    if (!st.registered || fenced)
      register_self(self);
  }
  sync_broker_links(self);
  tend_parked_links(self);
  for (auto& [id, hdl] : st.unconfirmed)
    probe_peer(self, id);
  if (is_controller(st))
    control(self);
  if (st.queue_homes_deferred)
    sync_group_homes(self); // a state partition may have finished loading
  delayed_send_self(self, st.cfg.cluster_tick, tick_atom_v);
}

/// Ends the link's listener and connection (the node keeps what it knows
/// of the peer's outage).
void stop_link_actors(self_ptr self, int32_t id) {
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
  st.unconfirmed.erase(id);
  st.probing.erase(id);
  st.dialed_at.erase(id);
}

/// Closes the link to node `id` and forgets its endpoint.
void close_link(self_ptr self, int32_t id) {
  auto& st = self->state;
  stop_link_actors(self, id);
  st.parked.erase(id);
  st.link_endpoints.erase(id);
  st.linked_at.erase(id);
  st.seen_up.erase(id);
  st.unanswered.erase(id);
  st.peers.erase(id);
  st.down_since.erase(id);
  // Its CAF node is learned again from the new link's first answered probe
  // (a restarted node has a new one); probed_by stays for open_link.
  st.peer_nodes.erase(id);
  st.senderless_since.erase(id);
  if (st.raft)
    self->send(st.raft, connect_atom_v, id, caf::actor{});
}

/// Whether this node dials node `id` first (see "One dialer per pair" in
/// node.hpp): a broker-only node dials the voters, else the higher id.
bool dials_first(const node_state& st, int32_t id) {
  bool me_voter = is_voter(st, st.cfg.node_id);
  if (me_voter != is_voter(st, id))
    return !me_voter;
  return st.cfg.node_id > id;
}

/// Starts the connection of the link to node `id` (its endpoint known);
/// with `adopt`, the link uses that proxy (the peer's connection) instead.
void dial(self_ptr self, int32_t id, ferry::broker_actor adopt) {
  auto& st = self->state;
  auto ep = st.link_endpoints.find(id);
  if (ep == st.link_endpoints.end() || st.links.count(id) > 0)
    return;
  st.parked.erase(id);
  connection_actor link;
  if (adopt) {
    link = self->system().spawn(adopted_link, std::move(adopt));
  } else {
    connection_config cc;
    cc.host = ep->second.first;
    cc.port = ep->second.second;
    cc.backoff_min = std::chrono::milliseconds{100};
    cc.backoff_max = std::chrono::milliseconds{1000};
    link = spawn_connection(self->system(), cc);
  }
  auto listener = self->spawn<caf::linked>(peer_listener, id,
                                           caf::actor_cast<caf::actor>(internal_handle(self)));
  self->send(link, subscribe_atom_v, listener);
  st.links[id] = link;
  st.link_listeners[id] = caf::actor_cast<caf::actor>(listener);
  if (!dials_first(st, id))
    st.dialed_at[id] = now(self);
}

/// Stops the connection of the link to a peer that dials first: it waits
/// for the peer's probe (or peer_dial_fallback) again.
void park_link(self_ptr self, int32_t id) {
  auto& st = self->state;
  stop_link_actors(self, id);
  st.parked[id] = now(self);
}

/// A peer's probe arrived (its connection to this node is established): a
/// parked link to it is dialed now, CAF closes the second connection as
/// redundant. With TLS the link adopts the peer's connection instead
/// (`sender`: the peer's node actor; see adopted_link).
void peer_probed(self_ptr self, int32_t id, const caf::strong_actor_ptr& sender) {
  auto& st = self->state;
  st.probed_by[id] = now(self);
  if (sender)
    st.senderless_since.erase(id);
  else if (!st.shutting_down)
    repair_route(self, id);
  if (st.shutting_down || st.parked.count(id) == 0)
    return;
  if (uses_tls(self->system()) && sender) {
    log::debug("node: node {} dialed this node: using its connection", id);
    auto peer = caf::actor_cast<ferry::broker_actor>(sender);
    if (st.cfg.auth) // its requests need the cluster credential too
      peer = spawn_session_proxy(self->system(), peer, st.cfg.cluster_credential);
    dial(self, id, std::move(peer));
    return;
  }
  log::debug("node: node {} dialed this node: linking back", id);
  dial(self, id);
}

/// Node `id`'s probe arrived without a sender, so its answer will be lost.
/// Once they have done so for two probe timeouts, CAF's route to that peer
/// is broken ("Broken routes" in node.hpp; a single one can be a connection
/// whose handshake is under way): closes this node's CAF connections to it,
/// so that both sides redial, and starts the count again.
void repair_route(self_ptr self, int32_t id) {
  auto& st = self->state;
  auto known = st.peer_nodes.find(id);
  if (known == st.peer_nodes.end()
      || (!is_voter(st, id) && st.link_endpoints.count(id) == 0))
    return; // not a peer of this node, or its CAF node is not known yet
  auto t = now(self);
  auto [since, first] = st.senderless_since.emplace(id, t);
  if (first
      || t - since->second < std::chrono::duration_cast<caf::timespan>(
           st.cfg.peer_probe_timeout * 2))
    return;
  since->second = t;
  log::warn("node: node {}'s probes arrive without a sender (CAF lost its "
            "route to it): closing the connections to it",
            id);
  reset_basp_connections(self->system(), known->second);
}

/// Opens (or reopens, after the endpoint changed) the link to node `id`.
void open_link(self_ptr self, int32_t id, const std::string& host,
               uint16_t port) {
  auto& st = self->state;
  if (st.link_endpoints.count(id) > 0)
    close_link(self, id);
  st.link_endpoints[id] = std::make_pair(host, port);
  st.linked_at[id] = now(self); // never seen yet: controller_grace applies
  st.down_since.erase(id);
  // A peer that dials first and has probed this node lately (a broker that
  // linked to the voters before it registered) is connected already.
  auto probed = st.probed_by.find(id);
  bool connected = probed != st.probed_by.end()
                   && now(self) - probed->second
                        < std::chrono::duration_cast<caf::timespan>(
                          st.cfg.peer_dial_fallback);
  if (dials_first(st, id) || connected)
    dial(self, id);
  else
    st.parked[id] = now(self);
}

/// The links to peers that dial first: dialed after peer_dial_fallback
/// without their probe; parked again when not connected within two probe
/// timeouts of dialing.
void tend_parked_links(self_ptr self) {
  auto& st = self->state;
  auto t = now(self);
  auto fallback
    = std::chrono::duration_cast<caf::timespan>(st.cfg.peer_dial_fallback);
  auto connect_wait
    = std::chrono::duration_cast<caf::timespan>(st.cfg.peer_probe_timeout * 2);
  std::vector<int32_t> due;
  for (auto& [id, since] : st.parked)
    if (t - since >= fallback)
      due.push_back(id);
  for (auto id : due) {
    log::info("node: node {} has not dialed this node for {} ms: dialing it",
              id, st.cfg.peer_dial_fallback.count());
    dial(self, id);
  }
  due.clear();
  for (auto& [id, at] : st.dialed_at)
    if (t - at >= connect_wait && st.peers.count(id) == 0
        && st.unconfirmed.count(id) == 0)
      due.push_back(id);
  for (auto id : due)
    park_link(self, id);
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
    auto port = b.peer_endpoint_port();
    if (ep != st.link_endpoints.end()
        && ep->second == std::make_pair(b.host, port))
      continue;
    log::info("node: linking to broker {} at {}:{}", id, b.host, port);
    open_link(self, id, b.host, port);
  }
  std::vector<int32_t> gone;
  for (auto& [id, ep] : st.link_endpoints)
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
  if (st.cfg.security)
    st.machine->set_security_registry(st.cfg.security);
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
  self->send(st.raft, subscribe_atom_v, caf::actor_cast<caf::actor>(internal_handle(self)));
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
  send_self(self, tick_atom_v);
  return caf::none;
}


void deliver_raft_message(self_ptr self, raft_message& m) {
  if (self->state.raft)
    self->send(self->state.raft, raft_atom_v, std::move(m));
}

caf::result<raft_log_chunk> fetch_raft_log(self_ptr self, uint64_t after) {
  auto& st = self->state;
  if (!st.raft)
    return make_error(ec::not_leader,
                      "node " + std::to_string(st.cfg.node_id)
                        + " is not part of a cluster; leader=-1");
  auto rp = self->make_response_promise<raft_log_chunk>();
  rp.delegate(st.raft, fetch_atom_v, raft_atom_v, after);
  return rp;
}

void peer_link_changed(self_ptr self, int32_t id, const caf::actor& peer) {
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
  bool was_up = st.peers.erase(id) > 0;
  // Its fetch session's long polls here: their answers go nowhere now.
  st.follower_sessions.erase(id);
  if (auto fs = st.fetch_sessions.find(id); fs != st.fetch_sessions.end()
                                            && fs->second.broker) {
    // Rounds in flight over the lost link fail now, not after their timeout.
    fs->second.broker = caf::actor{};
    self->send(fs->second.handle, update_atom_v, caf::actor{});
  }
  if (!dials_first(st, id))
    park_link(self, id); // the peer dials again; this side waits for it
  if (auto fw = st.forwards.find(id); fw != st.forwards.end()) {
    auto lost = std::move(fw->second);
    st.forwards.erase(fw);
    auto err = link_lost_error(id);
    for (auto& [fid, fail] : lost)
      fail(err);
  }
  if (!was_up)
    return;
  log::warn("node: link to node {} is down", id);
  if (st.raft)
    self->send(st.raft, connect_atom_v, id, peer);
  reconcile(self);
}

void raft_status_changed(self_ptr self, const raft_status& rs) {
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
}

} // namespace ferry::node_detail
