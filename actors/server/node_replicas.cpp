// The node actor's replicas: spawn, stop and restart partition replicas so the
// hosted ones follow the topic list; wait for the replicas of a new topic;
// gather status. (See node_internal.hpp for how the node's files divide the
// work.)

#include "actors/server/node_internal.hpp"

#include "broker/dir_remover.hpp"
#include "broker/node_journal.hpp"

#include "broker/metadata_writer.hpp"

#include <algorithm>
#include <filesystem>

namespace ferry::node_detail {

/// Sends the node a re-check after `delay`.
void schedule_recheck(self_ptr self, caf::timespan delay) {
  auto at = now(self) + delay;
  auto& st = self->state;
  // One pending re-check that fires no later than `at` is enough.
  if (st.recheck_at != time_point{} && st.recheck_at >= now(self)
      && st.recheck_at <= at)
    return;
  st.recheck_at = at;
  delayed_send_self(self, delay, update_atom_v, std::vector<topic_metadata>{});
}

// -- replicas -----------------------------------------------------------------

/// Removes a replica's data when its actor could not do it (crashed or did
/// not answer): the directory, the checkpoint and the producer snapshot.
void delete_replica_data(self_ptr self, const topic_partition& key) {
  auto& st = self->state;
  auto dir = replica_dir(st.cfg.data_dir, key.topic, key.partition);
  if (auto err = delete_partition_dir(dir, st.cfg.replica_defaults.trash.get(),
                                      st.cfg.replica_defaults.journal.get()))
    log::error("node: {}", err);
  if (auto& w = st.cfg.replica_defaults.meta_writer) {
    // Behind any write the replica queued there before it died.
    if (auto k = metadata_format::encode_partition_key(key.topic, key.partition)) {
      w->erase_later(metadata_format::partitions_db, *k);
      w->erase_later(producer_snapshots_db, *k);
    }
    return;
  }
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
        return apply_consumer_state(*offsets, *store, batches);
      };
    if (key.topic == consumer_state_topic) {
      // Format-1 records (before compaction) share one key per group: never
      // cleaned away.
      rc.clean_keep_key = [](std::string_view k) {
        return consumer_state_legacy_key(k);
      };
      auto loaded = std::make_shared<std::atomic<bool>>(false);
      r.loaded = loaded;
      rc.on_loaded = [loaded] { loaded->store(true); };
      auto behind = std::make_shared<std::atomic<bool>>(false);
      r.behind = behind;
      rc.on_behind = [behind](bool b) { behind->store(b); };
    }
    rc.assignment = pa;
    r.fetch_session = use_fetch_session(st);
    rc.leader_broker = replica_leader(self, pa, r.fetch_session);
    rc.controller = caf::actor_cast<caf::actor>(internal_handle(self));
    r.assignment = pa;
    r.leader_handle = rc.leader_broker;
  }
  // A fresh probe per spawn: never shared through replica_defaults.
  rc.probe = st.cfg.metrics ? std::make_shared<metrics::partition_probe>(
                                st.cfg.metrics, key.topic, key.partition)
                            : nullptr;
  rc.node_probe = st.probe;
  if (rc.journal
      && replica_count(st) < st.cfg.journal_min_replicas
      && !rc.journal->adopted(rc.dir))
    rc.journal = nullptr;
  // On the shared scheduler: fdatasync runs on rc.sync's threads (if set).
  r.handle = self->spawn(partition_replica, std::move(rc));
  r.config = md.config;
  r.epoch = pa.epoch;
  self->monitor(r.handle);
  log::debug("node: started replica {}", tp_name(key.topic, key.partition));
}

/// Answers create waiters whose replicas all exist (after a status round
/// trip, so the logs are open) or whose deadline passed.
void check_create_waiters(self_ptr self);

/// Brings the hosted replicas in line with the topic list.
/// Once per start, when the metadata has caught up: asks the metadata actor
/// for its topic list (the applied state, so no list from before the
/// catch-up decides) and deletes the partition dirs on disk that neither
/// that list nor the node's own places here and that no replica runs on, as
/// a stopped replica's data (their topic was deleted, or the partition
/// moved to other brokers, while this node was down; found by the chaos
/// suite's topic deletes). A dir whose name is not "<topic>-<partition>" is
/// left alone. A failed request is tried again at the next reconcile.
void sweep_unhosted_dirs(self_ptr self) {
  auto& st = self->state;
  if (st.swept_unhosted || st.sweep_asked || !st.cfg.metadata || !metadata_caught_up(st))
    return;
  st.sweep_asked = true;
  self->request(st.cfg.metadata, st.cfg.status_timeout, list_atom_v, topic_atom_v)
    .then(
      [self](std::vector<topic_metadata>& list) {
        auto& st = self->state;
        st.sweep_asked = false;
        if (st.swept_unhosted || st.shutting_down)
          return;
        st.swept_unhosted = true;
        auto placed_here = [&](const topic_metadata* md, partition_id p) {
          return md && static_cast<size_t>(p.value) < md->partitions.size()
                 && hosts(st, md->partitions[static_cast<size_t>(p.value)]);
        };
        std::vector<topic_partition> stale;
        std::error_code ec;
        for (auto it = std::filesystem::directory_iterator(st.cfg.data_dir / "topics", ec);
             !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
          std::error_code ec2;
          if (!it->is_directory(ec2))
            continue;
          auto name = it->path().filename().string();
          auto dash = name.rfind('-');
          if (dash == std::string::npos || dash == 0 || dash + 1 == name.size()
              || dash + 10 < name.size()
              || !std::all_of(name.begin() + static_cast<std::ptrdiff_t>(dash) + 1, name.end(),
                              [](char c) { return c >= '0' && c <= '9'; }))
            continue;
          topic_partition key{name.substr(0, dash), partition_id{static_cast<int32_t>(
                                                      std::stol(name.substr(dash + 1)))}};
          if (st.replicas.count(key) > 0 || st.stopping.count(key) > 0)
            continue;
          auto own = st.topics.find(key.topic);
          auto fresh = std::find_if(list.begin(), list.end(),
                                    [&](auto& md) { return md.name == key.topic; });
          if (placed_here(own == st.topics.end() ? nullptr : &own->second, key.partition)
              || placed_here(fresh == list.end() ? nullptr : &*fresh, key.partition))
            continue;
          stale.push_back(key);
        }
        for (auto& key : stale) {
          log::info("node: deleting the data of {}: not hosted here (its topic was deleted, "
                    "or it moved to other brokers, while this node was down)",
                    tp_name(key.topic, key.partition));
          delete_replica_data(self, key);
        }
      },
      [self](caf::error& err) {
        self->state.sweep_asked = false;
        log::debug("node: cannot list topics to clean up unhosted partition dirs: {}", err);
      });
}

void reconcile(self_ptr self) {
  auto& st = self->state;
  if (st.shutting_down)
    return;
  if (!metadata_caught_up(st)) {
    check_topic_waiters(self); // the ones whose wait is over
    return;
  }
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
  size_t assigned = 0;
  for (auto& [name, md] : st.topics)
    for (auto& pa : md.partitions)
      if (hosts(st, pa))
        ++assigned;
  st.assigned_replicas = assigned;
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
          auto lh = replica_leader(self, pa, r.fetch_session);
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
  sweep_unhosted_dirs(self);
  check_create_waiters(self);
  check_topic_waiters(self);
}

void check_topic_waiters(self_ptr self) {
  auto& st = self->state;
  if (st.topic_waiters.empty())
    return;
  auto t_now = now(self);
  auto waiting = std::move(st.topic_waiters);
  st.topic_waiters.clear();
  std::vector<std::function<void()>> ready;
  for (auto& w : waiting) {
    bool known = std::all_of(w.topics.begin(), w.topics.end(),
                             [&st](const std::string& t) { return knows_topics(st, t); });
    if (known || t_now >= w.deadline || st.shutting_down)
      ready.push_back(std::move(w.resume));
    else
      st.topic_waiters.push_back(std::move(w));
  }
  // A re-check at the first deadline left (an earlier one may have been
  // pending when they were parked).
  if (!st.topic_waiters.empty()) {
    auto first = std::min_element(st.topic_waiters.begin(), st.topic_waiters.end(),
                                  [](auto& a, auto& b) { return a.deadline < b.deadline; });
    schedule_recheck(self, first->deadline - t_now);
  }
  // Resumed after the loop, which rebuilt topic_waiters: each resumed
  // request runs its *_now function, which serves it without waiting again.
  for (auto& f : ready)
    f();
}

bool use_fetch_session(const node_state& st) {
  return st.cfg.fetch_sessions
         && replica_count(st) >= st.cfg.fetch_sessions_min_replicas;
}

caf::actor replica_leader(self_ptr self, const partition_assignment& pa,
                          bool session) {
  auto& st = self->state;
  auto b = leader_handle(st, pa);
  if (!b || !session)
    return b;
  auto& s = st.fetch_sessions[pa.leader];
  if (!s.handle) {
    fetch_session_config fc;
    fc.node_id = st.cfg.node_id;
    fc.leader_id = pa.leader;
    fc.leader_broker = b;
    s.handle = spawn_fetch_session(self->system(), std::move(fc));
    s.broker = b;
    log::info("node {}: a fetch session to node {} carries this node's "
              "follower fetches from it ({} partition replicas placed here)",
              st.cfg.node_id, pa.leader, replica_count(st));
  } else if (s.broker != b) {
    s.broker = b;
    self->send(s.handle, update_atom_v, b);
  }
  return caf::actor_cast<caf::actor>(s.handle);
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
      slot.dirty_ratio = ps.dirty_ratio;
      slot.last_clean_ms = ps.last_clean_ms;
      slot.replayed_records = ps.replayed_records;
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


} // namespace ferry::node_detail
