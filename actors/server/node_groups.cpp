// The node actor's consumer groups and queue groups: their coordinators, where
// each group is coordinated (its home) in a cluster, and the group and queue
// handlers. (See node_internal.hpp for how the node's files divide the work.)

#include "actors/server/node_internal.hpp"
#include "actors/server/stall_watch.hpp"

#include <functional>

namespace ferry::node_detail {

// -- groups -------------------------------------------------------------------

group_coordinator_actor spawn_coordinator(self_ptr self,
                                          const std::string& group) {
  auto& st = self->state;
  auto gc = st.cfg.group_defaults;
  gc.group = group;
  gc.offsets = st.offsets;
  gc.broker = internal_handle(self);
  gc.topics = topic_list(st);
  std::string where;
  if (cluster_mode(st)) {
    auto t = st.topics.find(consumer_state_topic);
    if (t != st.topics.end() && !t->second.partitions.empty()) {
      gc.state_topic = consumer_state_topic;
      gc.state_partition = partition_id{partition_for_key(
        group, static_cast<int32_t>(t->second.partitions.size()))};
      const auto& pa = t->second.partitions[static_cast<size_t>(gc.state_partition.value)];
      where = " (" + std::string{consumer_state_topic} + "/"
              + std::to_string(gc.state_partition.value) + " led here in epoch "
              + std::to_string(pa.epoch.value) + ", by this node's metadata)";
    }
  }
  // A fresh probe per coordinator: never shared through group_defaults.
  gc.probe = st.cfg.metrics
               ? std::make_shared<metrics::group_probe>(st.cfg.metrics, group)
               : nullptr;
  auto h = self->spawn(group_coordinator, std::move(gc));
  self->monitor(h);
  st.groups.emplace(group, h);
  // Info in a cluster: where a group is served from moves rarely, and when
  // it does this line says which node took it and on what metadata.
  if (where.empty())
    log::debug("node: started coordinator of group {}", group);
  else
    log::info("node: coordinating group {}{}", group, where);
  return h;
}

bool known_queue_group(self_ptr self, const std::string& group);

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
  qc.broker = internal_handle(self);
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
                      const queue_group_config* create, bool create_default) {
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
    ->request(internal_handle(self), std::chrono::seconds{30},
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
  if (forwarded)
    return unavailable("a peer forwarded the request to node "
                       + std::to_string(st.cfg.node_id) + ", whose metadata "
                       "says node " + std::to_string(*leader)
                       + " serves it (the nodes' metadata differs for a "
                       "moment: retry)");
  auto peer = st.peers.find(*leader);
  if (peer == st.peers.end() || !peer->second)
    return unavailable("served by node " + std::to_string(*leader)
                       + ", not reachable from node "
                       + std::to_string(st.cfg.node_id));
  return {false, peer->second, {}, *leader};
}

caf::error stalled_home_error(self_ptr self) {
  auto& st = self->state;
  if (!cluster_mode(st))
    return {};
  // A stall shorter than the fencing delay cannot have moved anything.
  auto limit = st.cfg.fence_after + st.cfg.cluster_tick;
  // At least this long, and until the local Raft node applied what a
  // current leader had committed after the stall (stall_watch's
  // note_caught_up): a timer alone (1.5 s, then 3 s) was too short in
  // loaded CI runs, where the woken node served old offsets after it.
  auto quarantine = std::max(std::chrono::milliseconds{3000},
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                               3 * st.cfg.raft_tick * static_cast<int64_t>(st.cfg.election_ticks)));
  if (!stall_watch::instance().stalled(limit, quarantine))
    return {};
  return make_error(ec::coordinator_not_available,
                    "node " + std::to_string(st.cfg.node_id)
                      + " stalled (paused?) and may have lost its leaderships; it "
                        "serves groups again once its metadata caught up");
}

bool state_loaded(const node_state& st, const std::string& key) {
  auto t = st.topics.find(consumer_state_topic);
  if (t == st.topics.end() || t->second.partitions.empty())
    return false;
  auto n = static_cast<int32_t>(t->second.partitions.size());
  auto r = st.replicas.find(
    topic_partition{consumer_state_topic, partition_id{partition_for_key(key, n)}});
  return r != st.replicas.end() && r->second.loaded && r->second.loaded->load()
         && !(r->second.behind && r->second.behind->load());
}

group_home_t group_home(self_ptr self, const std::string& group, bool forwarded) {
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
  if (leader && *leader == st.cfg.node_id)
    if (auto err = stalled_home_error(self))
      return group_home_t{false, broker_actor{}, std::move(err)};
  if (leader && *leader == st.cfg.node_id && !state_loaded(st, group))
    // Led here, but this node's replica of the group's state partition
    // is still replaying its log into the stores, which then show older
    // commits than were made (a coordinator serving from them would move
    // committed offsets backwards; found by tests/chaos).
    return group_home_t{false, broker_actor{},
                        make_error(ec::coordinator_not_available,
                                   "group " + group + ": its __consumer_state partition is "
                                   "still loading on node "
                                     + std::to_string(st.cfg.node_id))};
  return home_at(self, leader, "group " + group, forwarded);
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
  st.queue_homes_deferred = false;
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
    if (!state_loaded(st, name)) {
      // Its state is still being replayed here (a coordinator started now
      // would resume from an older state: a DLQ producer row behind the
      // DLQ, so dead letters written again; found by tests/chaos). The
      // cluster tick tries again.
      st.queue_homes_deferred = true;
      continue;
    }
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
                     const std::string& group, bool forwarded, Ts... xs) {
  auto home = group_home(self, group, forwarded);
  if (home.local)
    return false;
  if (home.err)
    rp.deliver(failed(self, std::move(home.err)));
  else
    forward_for(self, rp, home.node, home.remote, std::chrono::seconds{75},
              std::move(xs)...);
  return true;
}

/// Relays a queue group request whose reply is `T`.
/// `fwd`: the broker's own request, forwarded in a cluster when another
/// node coordinates the group.
template <class T, class Fwd, class... Ts>
caf::result<T> to_queue(self_ptr self, const std::string& group,
                        bool create_default, std::vector<std::string> topics,
                        Fwd fwd, Ts... xs) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<T>();
  when_ready(self, [self, rp, group, create_default, forwarded, topics, fwd,
                    xs...]() mutable {
    when_topics_known(self, std::move(topics), [self, rp, group, create_default,
                                                forwarded, fwd, xs...]() mutable {
      bool away = std::apply(
        [&](auto&... ys) { return forwarded_group(self, rp, group, forwarded, ys...); },
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
  });
  return rp;
}

/// Relays a group request whose reply is `T` (void: none) to the group's
/// coordinator, once this node knows the `topics` it names
/// (when_topics_known).
template <class T, class... Ts>
caf::result<T> to_group(self_ptr self, const std::string& group, bool create,
                        std::vector<std::string> topics, Ts... xs) {
  constexpr bool none = std::is_void_v<T>;
  bool forwarded = from_peer(self);
  auto rp = [self] {
    if constexpr (none)
      return self->make_response_promise();
    else
      return self->make_response_promise<T>();
  }();
  when_ready(self, [self, rp, group, create, forwarded, topics, xs...]() mutable {
    when_topics_known(self, std::move(topics), [self, rp, group, create, forwarded,
                                                xs...]() mutable {
      auto home = group_home(self, group, forwarded);
      if (!home.local) {
        if (home.err)
          rp.deliver(failed(self, std::move(home.err)));
        else if constexpr (none)
          forward_void_for(self, rp, home.node, home.remote, std::chrono::seconds{75},
                           std::move(xs)...);
        else
          forward_for(self, rp, home.node, home.remote, std::chrono::seconds{75},
                      std::move(xs)...);
        return;
      }
      auto c = coordinator(self, group, create);
      if (!c)
        rp.deliver(failed(self, std::move(c.error())));
      else if constexpr (none)
        relay_void(self, rp, *c, std::move(xs)...);
      else
        relay(self, rp, *c, std::move(xs)...);
    });
  });
  return rp;
}

/// The topics a commit names, each once.
std::vector<std::string> topics_of(const std::vector<partition_offset>& xs) {
  std::vector<std::string> out;
  for (auto& x : xs)
    if (std::find(out.begin(), out.end(), x.topic) == out.end())
      out.push_back(x.topic);
  return out;
}


caf::result<join_group_response> join_group(self_ptr self,
                                            join_group_request& req) {
  auto group = req.group;
  return to_group<join_group_response>(self, group, true, {}, join_atom_v,
                                       std::move(req));
}

caf::result<sync_group_response> sync_group(self_ptr self,
                                            sync_group_request& req) {
  auto group = req.group;
  return to_group<sync_group_response>(self, group, true, {}, sync_atom_v,
                                       std::move(req));
}

caf::result<void> heartbeat_group(self_ptr self, heartbeat_request& req) {
  auto group = req.group;
  return to_group<void>(self, group, true, {}, heartbeat_atom_v,
                       std::move(req));
}

caf::result<void> leave_group(self_ptr self, leave_group_request& req) {
  auto group = req.group;
  return to_group<void>(self, group, true, {}, leave_atom_v, std::move(req));
}

caf::result<void> commit_offsets(self_ptr self, commit_offsets_request& req) {
  auto group = req.group;
  auto topics = topics_of(req.offsets);
  return to_group<void>(self, group, true, std::move(topics), commit_atom_v,
                        std::move(req));
}

caf::result<std::vector<partition_offset>>
fetch_offsets(self_ptr self, fetch_offsets_request& req) {
  auto group = req.group;
  return to_group<std::vector<partition_offset>>(
    self, group, true, {}, offsets_atom_v, std::move(req));
}

namespace {

using group_list = std::vector<group_description>;

/// Describes the groups this node knows: its stream group coordinators,
/// and its queue groups ("Unknown" where their coordinator runs elsewhere).
/// `done` gets the list.
void describe_local_groups(self_ptr self, std::function<void(group_list)> done) {
  when_ready(self, [self, done]() mutable {
    auto& st = self->state;
    auto out = std::make_shared<group_list>();
    out->resize(st.groups.size() + st.queue_configs.size());
    if (out->empty()) {
      done(group_list{});
      return;
    }
    auto pending = std::make_shared<size_t>(out->size());
    auto one_done = [out, pending, done]() mutable {
      if (--*pending == 0)
        done(std::move(*out));
    };
    size_t i = 0;
    for (auto& [name, g] : st.groups) {
      (*out)[i].group = name;
      (*out)[i].mode = "stream";
      (*out)[i].state = "Unknown";
      self->request(g, st.cfg.status_timeout, describe_atom_v, group_atom_v)
        .then(
          [out, one_done, i](group_description& gd) mutable {
            (*out)[i] = std::move(gd);
            one_done();
          },
          [one_done](caf::error&) mutable { one_done(); });
      ++i;
    }
    for (auto& [name, qc] : st.queue_configs) {
      (*out)[i].group = name;
      (*out)[i].mode = "queue";
      (*out)[i].state = "Unknown";
      auto q = queue_coordinator_for(self, name, nullptr);
      if (!q) {
        one_done();
        ++i;
        continue;
      }
      self->request(*q, st.cfg.status_timeout, describe_atom_v, group_atom_v)
        .then(
          [out, one_done, i](group_description& gd) mutable {
            (*out)[i] = std::move(gd);
            one_done();
          },
          [one_done](caf::error&) mutable { one_done(); });
      ++i;
    }
  });
}

/// Which of two descriptions of one group (from two nodes) to show: the
/// one its coordinator gave (a known state; with more members when both).
bool better_description(const group_description& a, const group_description& b) {
  bool a_known = a.state != "Unknown";
  bool b_known = b.state != "Unknown";
  if (a_known != b_known)
    return a_known;
  return a.members.size() > b.members.size();
}

/// Asks every linked peer's broker `xs...` (answered from its own state:
/// it came from a peer) and hands each answer to `add`; `finish` runs once
/// every peer answered or failed (one that does not answer within 5 s is
/// logged as `what` and left out).
template <class T, class Add, class Finish, class... Ts>
void gather_from_peers(self_ptr self, const char* what, Add add, Finish finish, Ts... xs) {
  auto& st = self->state;
  auto pending = std::make_shared<size_t>(st.peers.size() + 1);
  auto done = [pending, finish]() mutable {
    if (--*pending == 0)
      finish();
  };
  for (auto& [id, peer] : st.peers) {
    if (!peer) {
      done();
      continue;
    }
    auto peer_id = id;
    forward_to<T>(
      self, id, peer, std::chrono::seconds{5},
      [add, done](T& x) mutable {
        add(x);
        done();
      },
      [done, peer_id, what](caf::error& err) mutable {
        log::warn("node: {}: node {} did not answer: {}", what, peer_id, err);
        done();
      },
      xs...);
  }
  done(); // the extra count: finishes also without peers
}

} // namespace

caf::result<group_list> list_groups(self_ptr self) {
  // A node coordinates the groups whose __consumer_state partition it
  // leads; in a cluster the list merges every linked peer's (as Kafka's
  // admin clients ask every broker). A peer's request is answered locally.
  // (Asked before make_response_promise, which takes the sender away.)
  bool fan_out = cluster_mode(self->state) && !from_peer(self);
  auto rp = self->make_response_promise<group_list>();
  describe_local_groups(self, [self, rp, fan_out](group_list local) mutable {
    auto& st = self->state;
    if (!fan_out || st.peers.empty()) {
      rp.deliver(std::move(local));
      return;
    }
    auto merged = std::make_shared<std::map<std::string, group_description>>();
    auto add = [merged](group_list& xs) {
      for (auto& x : xs) {
        auto [it, fresh] = merged->emplace(x.group, x);
        if (!fresh && better_description(x, it->second))
          it->second = std::move(x);
      }
    };
    add(local);
    gather_from_peers<group_list>(
      self, "group list", add,
      [rp, merged]() mutable {
        group_list out;
        for (auto& [name, d] : *merged)
          out.push_back(std::move(d));
        rp.deliver(std::move(out));
      },
      list_atom_v, group_atom_v);
  });
  return rp;
}

/// The queue groups in this node's store (see broker_core_actor's
/// (list_atom, queue_atom)): config, and the topics with stored state.
caf::expected<std::vector<queue_group_description>>
stored_queue_groups(self_ptr self) {
  auto& store = *self->state.cfg.store;
  auto groups = load_queue_groups(store);
  if (!groups)
    return std::move(groups.error());
  queue_state_store qs{store};
  std::vector<queue_group_description> out;
  for (auto& [name, qc] : *groups) {
    queue_group_description d;
    d.group = name;
    d.config = qc;
    if (auto parts = qs.partitions(name)) {
      std::set<std::string> topics;
      for (auto& r : *parts)
        if (topics.insert(r.topic).second) {
          queue_partition_description pd;
          pd.topic = r.topic;
          d.partitions.push_back(std::move(pd));
        }
    }
    out.push_back(std::move(d));
  }
  return out;
}

caf::result<std::vector<queue_group_description>> list_queue_groups(self_ptr self) {
  auto& st = self->state;
  auto local = stored_queue_groups(self);
  if (!local)
    return failed(self, std::move(local.error()));
  if (!cluster_mode(st) || from_peer(self) || st.peers.empty())
    return std::move(*local);
  // Merged with every linked peer's (each replicates other __consumer_state
  // partitions); a peer that does not answer is left out (its groups are
  // usually on other replicas too).
  auto rp = self->make_response_promise<std::vector<queue_group_description>>();
  auto merged = std::make_shared<std::map<std::string, queue_group_description>>();
  auto add = [merged](std::vector<queue_group_description>& xs) {
    for (auto& x : xs) {
      auto [it, fresh] = merged->emplace(x.group, x);
      if (fresh)
        continue;
      for (auto& p : x.partitions) // topics another replica knows of
        if (std::none_of(it->second.partitions.begin(), it->second.partitions.end(),
                         [&](auto& q) { return q.topic == p.topic; }))
          it->second.partitions.push_back(p);
    }
  };
  add(*local);
  gather_from_peers<std::vector<queue_group_description>>(
    self, "queue group list", add,
    [rp, merged]() mutable {
      std::vector<queue_group_description> out;
      for (auto& [name, d] : *merged)
        out.push_back(std::move(d));
      rp.deliver(std::move(out));
    },
    list_atom_v, queue_atom_v);
  return rp;
}

caf::result<group_description> describe_group(self_ptr self,
                                              std::string& group) {
  if (known_queue_group(self, group))
    return to_queue<group_description>(
      self, group, false, {},
      std::make_tuple(describe_atom_v, group_atom_v, group),
      describe_atom_v, group_atom_v);
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<group_description>();
  when_ready(self, [self, rp, group, forwarded]() mutable {
    auto home = group_home(self, group, forwarded);
    if (home.local) {
      auto c = coordinator(self, group, false);
      if (!c)
        rp.deliver(failed(self, std::move(c.error())));
      else
        relay(self, rp, *c, describe_atom_v, group_atom_v);
    } else if (home.err) {
      rp.deliver(failed(self, std::move(home.err)));
    } else {
      forward_for(self, rp, home.node, home.remote, std::chrono::seconds{30},
                  describe_atom_v, group_atom_v, group);
    }
  });
  return rp;
}

caf::result<std::vector<partition_offset>>
reset_offsets(self_ptr self, reset_offsets_request& req) {
  auto group = req.group;
  auto topics = req.topics;
  if (known_queue_group(self, group))
    return to_queue<std::vector<partition_offset>>(
      self, group, false, std::move(topics), std::make_tuple(reset_atom_v, req),
      reset_atom_v, req);
  return to_group<std::vector<partition_offset>>(self, group, true,
                                                 std::move(topics), reset_atom_v,
                                                 std::move(req));
}

caf::result<void> delete_group(self_ptr self, std::string& group) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise();
  when_ready(self, [self, rp, group, forwarded]() mutable {
    if (cluster_mode(self->state)) {
      auto home = group_home(self, group, forwarded);
      if (!home.local) {
        if (home.err)
          rp.deliver(failed(self, std::move(home.err)));
        else
          forward_void_for(self, rp, home.node, home.remote, std::chrono::seconds{75},
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
}

caf::result<queue_group_config> create_queue_group(self_ptr self,
                                                   std::string& group,
                                                   queue_group_config& qc) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<queue_group_config>();
  when_ready(self, [self, rp, group, qc, forwarded]() mutable {
    if (forwarded_group(self, rp, group, forwarded, create_atom_v, group_atom_v,
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
}

caf::result<std::vector<leased_message>>
receive_queued(self_ptr self, queue_receive_request& req) {
  auto group = req.group;
  auto topics = req.topics;
  if (!req.topic.empty())
    topics.push_back(req.topic);
  return to_queue<std::vector<leased_message>>(
    self, group, true, std::move(topics), std::make_tuple(receive_atom_v, req),
    receive_atom_v, req);
}

caf::result<queue_ack_response> ack_queued(self_ptr self,
                                           queue_ack_request& req) {
  auto group = req.group;
  return to_queue<queue_ack_response>(self, group, false, {},
                                      std::make_tuple(ack_atom_v, req),
                                      ack_atom_v, req);
}

caf::result<queue_group_description> describe_queue_group(self_ptr self,
                                                          std::string& group) {
  return to_queue<queue_group_description>(
    self, group, false, {},
    std::make_tuple(describe_atom_v, queue_atom_v, group),
    describe_atom_v, queue_atom_v);
}

caf::result<queue_group_config> alter_queue_group(self_ptr self,
                                                  std::string& group,
                                                  queue_group_config& qc) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<queue_group_config>();
  when_ready(self, [self, rp, group, qc, forwarded]() mutable {
    if (forwarded_group(self, rp, group, forwarded, alter_atom_v, group_atom_v,
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
}

caf::result<int64_t> leave_queue_group(self_ptr self, std::string& group,
                                       std::string& member) {
  return to_queue<int64_t>(
    self, group, false, {},
    std::make_tuple(leave_atom_v, queue_atom_v, group, member),
    leave_atom_v, queue_atom_v, member);
}

} // namespace ferry::node_detail
