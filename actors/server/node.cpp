#include "actors/server/node_internal.hpp"

namespace ferry::node_detail {

// -- cluster: readiness, registration, controller --------------------------------

/// Marks the node ready (first topic list in, and in a cluster the metadata
/// caught up) and serves the requests held until then.
void mark_ready(self_ptr self) {
  auto& st = self->state;
  if (st.ready)
    return;
  st.ready = true;
  if (st.cfg.security)
    st.cfg.security->set_loaded(true);
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
  for (auto& [id, s] : st.fetch_sessions)
    self->send_exit(s.handle, caf::exit_reason::user_shutdown);
  st.fetch_sessions.clear();
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


void apply_topic_list(self_ptr self, std::vector<topic_metadata>& topics) {
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
}

/// The node's start: the offset store, the metadata quorum member (unless
/// one is given), the probe and disk sampler, the subscription, the
/// coordinators of a single node's stored groups, the down and exit
/// handlers. False: the node quit (its metadata could not start).
bool start_node(self_ptr self) {
  auto& st = self->state;
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
      return false;
    }
  }
  if (st.cfg.metrics) {
    st.probe = std::make_shared<metrics::node_probe>(st.cfg.metrics);
    st.disk_sampler = self->spawn(
      disk_sampler, st.probe, st.cfg.data_dir,
      std::chrono::duration_cast<caf::timespan>(
        std::max(st.cfg.disk_sample_interval, std::chrono::milliseconds{1})),
      self->address(), st.cfg.replica_defaults.journal,
      st.cfg.replica_defaults.cleaner);
  }
  self->monitor(st.cfg.metadata);
  self->send(st.cfg.metadata, subscribe_atom_v,
             caf::actor_cast<caf::actor>(internal_handle(self)));
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
  return true;
}

} // namespace ferry::node_detail

namespace ferry {

using namespace node_detail;

std::filesystem::path replica_dir(const std::filesystem::path& data_dir,
                                  const std::string& topic, partition_id p) {
  return data_dir / "topics" / tp_name(topic, p);
}

broker_actor::behavior_type
node(broker_actor::stateful_pointer<node_state> self, node_config cfg) {
  self->state.cfg = std::move(cfg);
  auto& cfg_ = self->state.cfg;
  if (cfg_.auth && (!cfg_.security || cfg_.cluster_credential.empty())) {
    log::error("node: sessions need the users (security) and the cluster credential");
    self->quit(make_error(ec::invalid_config, "auth without users or cluster credential"));
    return broker_actor::behavior_type::make_empty_behavior();
  }
  if (cfg_.auth)
    self->state.internal = spawn_session_proxy(
      self->system(), caf::actor_cast<broker_actor>(self), cfg_.cluster_credential);
  if (!start_node(self))
    return broker_actor::behavior_type::make_empty_behavior();
  return serve_sessions(self, broker_core_actor::behavior_type{
    // -- data path: delegated to the partition's replica ----------------------
    [self](produce_atom, produce_request& r) { return serve_produce(self, r); },
    [self](produce_atom, std::vector<produce_request>& rs) {
      return serve_produce_many(self, rs);
    },
    [self](fetch_atom, fetch_request& r) { return serve_fetch(self, r); },
    [self](fetch_atom, fetch_round& rd) { return serve_fetch_round(self, rd); },
    [self](offsets_atom, list_offsets_request& r) {
      return serve_list_offsets(self, r);
    },
    [self](offsets_atom, epoch_end_request& r) { return serve_epoch_end(self, r); },
    [self](init_pid_atom) { return init_producer_id(self); },
    // -- topic admin: through the metadata actor ------------------------------
    [self](create_atom, topic_atom, std::string& n, topic_config& tc) {
      return create_topic(self, n, tc);
    },
    [self](delete_atom, topic_atom, std::string& n) {
      return delete_topic(self, n);
    },
    [self](list_atom, topic_atom) { return list_topics(self); },
    [self](describe_atom, topic_atom, std::string& n) {
      return describe_topic(self, n);
    },
    [self](alter_atom, topic_atom, std::string& n,
           std::map<std::string, std::string>& c) {
      return alter_topic(self, n, c);
    },
    [self](add_parts_atom, std::string& name, int32_t n) {
      return add_partitions(self, name, n);
    },
    [self](list_atom, broker_atom) -> std::vector<node_info> {
      return cluster_nodes(self);
    },
    [self](cluster_atom) { return describe_cluster_request(self); },
    // -- consumer groups: one coordinator per group ---------------------------
    [self](join_atom, join_group_request& r) { return join_group(self, r); },
    [self](sync_atom, sync_group_request& r) { return sync_group(self, r); },
    [self](heartbeat_atom, heartbeat_request& r) {
      return heartbeat_group(self, r);
    },
    [self](leave_atom, leave_group_request& r) { return leave_group(self, r); },
    [self](commit_atom, commit_offsets_request& r) {
      return commit_offsets(self, r);
    },
    [self](offsets_atom, fetch_offsets_request& r) {
      return fetch_offsets(self, r);
    },
    [self](list_atom, group_atom) { return list_groups(self); },
    [self](list_atom, queue_atom) { return list_queue_groups(self); },
    [self](describe_atom, group_atom, std::string& g) {
      return describe_group(self, g);
    },
    [self](reset_atom, reset_offsets_request& r) {
      return reset_offsets(self, r);
    },
    [self](delete_atom, group_atom, std::string& g) {
      return delete_group(self, g);
    },
    // -- queue groups: one queue coordinator per group ------------------------
    [self](create_atom, group_atom, std::string& g, queue_group_config& qc) {
      return create_queue_group(self, g, qc);
    },
    [self](receive_atom, queue_receive_request& r) {
      return receive_queued(self, r);
    },
    [self](ack_atom, queue_ack_request& r) { return ack_queued(self, r); },
    [self](describe_atom, queue_atom, std::string& g) {
      return describe_queue_group(self, g);
    },
    [self](alter_atom, group_atom, std::string& g, queue_group_config& qc) {
      return alter_queue_group(self, g, qc);
    },
    [self](leave_atom, queue_atom, std::string& g, std::string& m) {
      return leave_queue_group(self, g, m);
    },
    // -- DLQ operations: relayed to the DLQ manager ---------------------------
    [self](list_atom, dlq_atom) { return list_dlqs_at_homes(self); },
    [self](show_atom, dlq_show_request& r) { return show_dlq(self, r); },
    [self](redrive_atom, dlq_redrive_request& r) {
      return redrive_dlq(self, r);
    },
    [self](purge_atom, dlq_purge_request& r) { return purge_dlq(self, r); },
    [self](purge_atom, topic_partition& tp, offset b) {
      return purge_partition(self, tp, b);
    },
    // -- metadata updates (and re-checks the node sends itself) ---------------
    [self](update_atom, std::vector<topic_metadata>& topics) {
      apply_topic_list(self, topics);
    },
    // -- cluster ----------------------------------------------------------------
    [self](status_atom, const topic_partition& tp) {
      return serve_partition_status(self, tp);
    },
    [self](update_atom, broker_atom, broker_registration& r) {
      return register_broker(self, r);
    },
    [self](alter_atom, isr_atom, isr_change& c) { return alter_isr(self, c); },
    [self](assign_atom, isr_change& c) { return reassign_partition(self, c); },
    [self](raft_atom, raft_message& m) { deliver_raft_message(self, m); },
    [self](delete_atom, broker_atom, int32_t id) {
      return remove_broker(self, id);
    },
    [self](fetch_atom, raft_atom, uint64_t a) {
      return fetch_raft_log(self, a);
    },
    // -- users and ACLs: through the metadata actor -----------------------------
    [self](update_atom, user_atom, scram_credential& c) {
      return upsert_user(self, c);
    },
    [self](delete_atom, user_atom, std::string& n) {
      return delete_user(self, n);
    },
    [self](list_atom, user_atom) { return list_users(self); },
    [self](create_atom, acl_atom, acl_entry& x) { return add_acl(self, x); },
    [self](delete_atom, acl_atom, acl_entry& x) { return remove_acl(self, x); },
    [self](list_atom, acl_atom) { return list_acls(self); },
    [self](connect_atom, int32_t id, const caf::actor& p) {
      peer_link_changed(self, id, p);
    },
    [self](connect_atom, int32_t id) -> int32_t {
      peer_probed(self, id, self->current_sender());
      return self->state.cfg.node_id;
    },
    [self](update_atom, const raft_status& rs) {
      raft_status_changed(self, rs);
    },
    [self](tick_atom) { cluster_tick(self); },
  });
}

} // namespace ferry
