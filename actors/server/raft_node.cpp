#include "actors/server/raft_node.hpp"
#include "actors/server/stall_watch.hpp"

#include "broker/error.hpp"
#include "broker/logging.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <utility>

namespace ferry {

namespace {

using self_ptr = raft_actor::stateful_pointer<raft_node_state>;

void stop(self_ptr self, caf::error err) {
  log::error("raft {}: stopping: {}", self->state.cfg.raft.id, describe(err));
  for (auto& [index, p] : self->state.waiting)
    p.promise.deliver(err);
  self->state.waiting.clear();
  for (auto& p : self->state.leaderless)
    p.promise.deliver(err);
  self->state.leaderless.clear();
  self->quit(std::move(err));
}

raft_status current_status(self_ptr self) {
  auto s = self->state.core->status();
  s.last_applied = self->state.last_applied;
  return s;
}

// Answers the proposal waiting at `index`: it committed if the committed
// entry has the term it was proposed in, else it was overwritten.
void settle(self_ptr self, uint64_t index, uint64_t term,
            const std::string* result) {
  auto& waiting = self->state.waiting;
  auto it = waiting.find(index);
  if (it == waiting.end())
    return;
  if (it->second.term == term && result != nullptr)
    it->second.promise.deliver(raft_applied{index, *result});
  else
    it->second.promise.deliver(make_error(
      ec::not_leader, "entry " + std::to_string(index)
                        + " was overwritten by a newer leader; leader="
                        + std::to_string(self->state.core->leader())));
  waiting.erase(it);
}

// Applies what the core committed; false if the actor stopped.
bool apply_committed(self_ptr self) {
  auto& st = self->state;
  auto batch = st.core->take_committed();
  if (batch.restore) {
    auto& snap = *batch.restore;
    if (auto err = st.cfg.machine->restore(snap.index, snap.data)) {
      stop(self, std::move(err));
      return false;
    }
    st.last_applied = snap.index;
    // Proposals inside the snapshot: their outcome cannot be told apart.
    while (!st.waiting.empty() && st.waiting.begin()->first <= snap.index) {
      st.waiting.begin()->second.promise.deliver(make_error(
        ec::not_leader, "outcome unknown: a snapshot replaced entry "
                          + std::to_string(st.waiting.begin()->first)));
      st.waiting.erase(st.waiting.begin());
    }
  }
  for (auto& [index, e] : batch.entries) {
    if (e.kind == raft_entry_kind::command) {
      auto result = st.cfg.machine->apply(index, e.data);
      settle(self, index, e.term, &result);
    } else {
      settle(self, index, e.term, nullptr);
    }
    st.last_applied = index;
  }
  auto threshold = st.cfg.snapshot_threshold;
  if (threshold > 0
      && st.last_applied >= st.core->snapshot_index() + threshold) {
    if (auto err = st.core->compact(st.last_applied,
                                    st.cfg.machine->snapshot())) {
      if (st.core->failure()) {
        stop(self, std::move(err));
        return false;
      }
      // A store that cannot be written now (counted and logged as a store
      // error): the log stays longer; the next applied entry tries again.
    }
  }
  return true;
}

void report(self_ptr self) {
  auto& st = self->state;
  auto s = current_status(self);
  if (s.role == st.reported.role && s.term == st.reported.term
      && s.leader == st.reported.leader)
    return;
  st.reported = s;
  for (auto& sub : st.subscribers)
    caf::anon_send(sub, update_atom_v, s);
}

// Logs failed store writes: the first at once, then at most one line per
// store_error_log_period with the count since the last line.
void log_store_errors(self_ptr self) {
  auto& st = self->state;
  auto n = st.core->store_errors();
  if (n == st.store_errors_logged)
    return;
  auto now = self->clock().now();
  if (st.store_errors_logged > 0 && now < st.store_error_log_at)
    return;
  log::warn("raft {}: {} write(s) of the Raft log store failed, the last: {} "
            "(each dropped the message or proposal that needed it; Raft "
            "retries, and this node takes part again once writes succeed)",
            st.cfg.raft.id, n - st.store_errors_logged,
            describe(st.core->last_store_error()));
  st.store_errors_logged = n;
  st.store_error_log_at = now + store_error_log_period;
}

// After every input: stop on a broken invariant, send, apply, report.
void flush(self_ptr self) {
  auto& st = self->state;
  if (st.core->failure()) {
    stop(self, st.core->failure());
    return;
  }
  log_store_errors(self);
  for (auto& m : st.core->take_messages()) {
    auto it = st.cfg.peers.find(m.to);
    if (it != st.cfg.peers.end() && it->second)
      caf::anon_send(it->second, raft_atom_v, std::move(m));
  }
  if (!apply_committed(self))
    return;
  report(self);
}

// Proposes `command` now: answered once committed, or not_leader.
void propose_now(self_ptr self, std::string command,
                 caf::typed_response_promise<raft_applied> rp) {
  auto& st = self->state;
  auto index = st.core->propose(std::move(command));
  if (!index) {
    // not_leader, a failed store write (a full disk), or the core stopped.
    rp.deliver(std::move(index.error()));
    flush(self);
    return;
  }
  st.waiting[*index] = raft_node_state::pending{st.core->term(), rp};
  flush(self);
}

// Proposals parked while no leader was known: proposed once this node
// leads; answered not_leader naming the leader once another one does, or
// with leader=-1 when leader_wait runs out.
void settle_leaderless(self_ptr self) {
  auto& st = self->state;
  if (st.leaderless.empty() || !st.core)
    return;
  auto now = self->clock().now();
  auto parked = std::move(st.leaderless);
  st.leaderless.clear();
  for (auto& p : parked) {
    if (st.core->role() == raft_role::leader) {
      propose_now(self, std::move(p.command), p.promise);
    } else if (st.core->leader() >= 0) {
      p.promise.deliver(make_error(ec::not_leader,
                                   "not the Raft leader; leader="
                                     + std::to_string(st.core->leader())));
    } else if (now >= p.deadline) {
      p.promise.deliver(make_error(
        ec::not_leader,
        "no Raft leader elected within "
          + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                             st.cfg.leader_wait)
                             .count())
          + " ms (is a majority of the voters up and connected?); leader=-1"));
    } else {
      st.leaderless.push_back(std::move(p));
    }
  }
}

} // namespace

raft_actor::behavior_type raft_node(self_ptr self, raft_node_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  auto core = st.cfg.store && st.cfg.machine
                ? raft_core::make(st.cfg.raft, *st.cfg.store)
                : caf::expected<std::unique_ptr<raft_core>>{make_error(
                  ec::invalid_argument, "raft node: store and machine needed")};
  if (!core) {
    log::error("raft {}: cannot start: {}", st.cfg.raft.id,
               describe(core.error()));
    self->quit(std::move(core.error()));
    return {
      [](raft_atom, const raft_message&) {},
      [](propose_atom, const std::string&) -> caf::result<raft_applied> {
        return make_error(ec::log_closed, "raft node failed to start");
      },
      [](status_atom) -> caf::result<raft_status> {
        return make_error(ec::log_closed, "raft node failed to start");
      },
      [](subscribe_atom, const caf::actor&) {},
      [](connect_atom, int32_t, const caf::actor&) {},
      [](tick_atom) {},
      [](fetch_atom, raft_atom, uint64_t) -> caf::result<raft_log_chunk> {
        return make_error(ec::log_closed, "raft node failed to start");
      },
    };
  }
  st.core = std::move(*core);
  st.reported.role = raft_role::follower;
  st.reported.term = 0;
  st.reported.leader = -1;
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove(subs.begin(), subs.end(), msg.source), subs.end());
  });
  // A single voter elected itself in make(): apply and report now.
  flush(self);
  self->delayed_send(self, st.cfg.tick_interval, tick_atom_v);
  return {
    [self](raft_atom, const raft_message& m) {
      auto& st = self->state;
      st.core->step(m);
      flush(self);
      settle_leaderless(self);
      // Evidence that this node's metadata is current, for a node back
      // from a stall (stall_watch.hpp, stalled_home_error).
      auto& core = *st.core;
      bool from_leader = core.role() == raft_role::follower && m.from == core.leader()
                         && (m.kind == raft_msg::append || m.kind == raft_msg::snapshot)
                         && m.term == core.term() && st.last_applied >= m.commit;
      bool still_leading = core.role() == raft_role::leader && m.term == core.term()
                           && m.kind == raft_msg::append_reply && m.success;
      if (from_leader || still_leading)
        stall_watch::instance().note_caught_up();
    },
    [self](propose_atom, std::string& command) -> caf::result<raft_applied> {
      auto& st = self->state;
      if (st.core->role() != raft_role::leader && st.core->leader() < 0
          && !st.core->failure() && st.cfg.leader_wait.count() > 0) {
        // An election is due or running: wait for its outcome.
        auto rp = self->make_response_promise<raft_applied>();
        st.leaderless.push_back(raft_node_state::leaderless_proposal{
          std::move(command), rp, self->clock().now() + st.cfg.leader_wait});
        return rp;
      }
      auto rp = self->make_response_promise<raft_applied>();
      propose_now(self, std::move(command), rp);
      return rp;
    },
    [self](status_atom) -> caf::result<raft_status> {
      return current_status(self);
    },
    [self](subscribe_atom, const caf::actor& listener) {
      if (!listener)
        return;
      self->monitor(listener);
      self->state.subscribers.push_back(listener);
      caf::anon_send(listener, update_atom_v, current_status(self));
    },
    [self](connect_atom, int32_t id, const caf::actor& peer) {
      self->state.cfg.peers[id] = peer;
    },
    [self](tick_atom) {
      self->state.core->tick();
      flush(self);
      settle_leaderless(self);
      self->delayed_send(self, self->state.cfg.tick_interval, tick_atom_v);
    },
    [self](fetch_atom, raft_atom, uint64_t after) -> raft_log_chunk {
      return self->state.core->committed_after(after, observer_chunk_entries);
    },
  };
}

// -- raft_observer ------------------------------------------------------------

namespace {

using observer_ptr = raft_actor::stateful_pointer<raft_observer_state>;

raft_status observer_status(observer_ptr self) {
  auto& st = self->state;
  raft_status s;
  s.id = st.cfg.id;
  s.role = raft_role::follower;
  s.term = st.term;
  s.leader = st.leader;
  s.commit_index = std::max(st.commit, st.last_applied);
  s.last_applied = st.last_applied;
  s.last_log_index = st.last_applied;
  s.snapshot_index = st.snapshot_index;
  return s;
}

void observer_report(observer_ptr self) {
  auto& st = self->state;
  auto s = observer_status(self);
  if (s.term == st.reported.term && s.leader == st.reported.leader)
    return;
  st.reported = s;
  for (auto& sub : st.subscribers)
    caf::anon_send(sub, update_atom_v, s);
}

void observer_fetch(observer_ptr self);

/// Applies a chunk; false when the state machine refused a snapshot (the
/// actor stopped).
bool observer_apply(observer_ptr self, raft_log_chunk& c) {
  auto& st = self->state;
  if (c.snapshot.index > st.last_applied) {
    if (auto err = st.cfg.machine->restore(c.snapshot.index,
                                           c.snapshot.data)) {
      log::error("raft observer {}: snapshot at {} does not restore: {}",
                 st.cfg.id, c.snapshot.index, describe(err));
      self->quit(std::move(err));
      return false;
    }
    st.last_applied = c.snapshot.index;
    st.snapshot_index = c.snapshot.index;
  }
  for (size_t k = 0; k < c.entries.size(); ++k) {
    auto index = c.first + k;
    if (index <= st.last_applied)
      continue;
    if (index != st.last_applied + 1)
      break; // cannot happen: chunks are contiguous
    auto& e = c.entries[k];
    if (e.kind == raft_entry_kind::command)
      st.cfg.machine->apply(index, e.data);
    st.last_applied = index;
  }
  // A lagging voter may know an older term only: the newest view wins.
  if (c.term > st.term || (c.term == st.term && c.leader >= 0)) {
    st.term = c.term;
    st.leader = c.leader;
  }
  st.commit = std::max(st.commit, c.commit);
  return true;
}

/// The voter to ask: the leader while it answers, else the next voter with a
/// handle in turn.
int32_t observer_source(observer_ptr self) {
  auto& st = self->state;
  if (st.leader >= 0 && !st.leader_failed && st.cfg.peers.count(st.leader) > 0
      && st.cfg.peers[st.leader])
    return st.leader;
  auto n = st.cfg.voters.size();
  for (size_t k = 0; k < n; ++k) {
    auto id = st.cfg.voters[(st.rotation + k) % n];
    auto p = st.cfg.peers.find(id);
    if (p != st.cfg.peers.end() && p->second) {
      st.rotation = (st.rotation + k) % n;
      return id;
    }
  }
  return -1;
}

void observer_fetch(observer_ptr self) {
  auto& st = self->state;
  if (st.fetching)
    return;
  auto id = observer_source(self);
  if (id < 0)
    return;
  st.fetching = true;
  self
    ->request(st.cfg.peers[id], st.cfg.request_timeout, fetch_atom_v,
              raft_atom_v, st.last_applied)
    .then(
      [self, id](raft_log_chunk& c) {
        auto& st = self->state;
        st.fetching = false;
        if (id == st.leader)
          st.leader_failed = false;
        if (!observer_apply(self, c))
          return;
        if (c.leader != id && c.leader >= 0)
          st.leader_failed = false; // try the leader it named
        observer_report(self);
        // More committed entries than one chunk: go on at once.
        if (st.last_applied < c.commit && !c.entries.empty())
          observer_fetch(self);
      },
      [self, id](caf::error& err) {
        auto& st = self->state;
        st.fetching = false;
        log::debug("raft observer {}: fetch from {} failed: {}", st.cfg.id,
                   id, describe(err));
        if (id == st.leader)
          st.leader_failed = true;
        ++st.rotation;
      });
}

} // namespace

raft_actor::behavior_type raft_observer(observer_ptr self,
                                        raft_observer_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  std::sort(st.cfg.voters.begin(), st.cfg.voters.end());
  if (!st.cfg.machine || st.cfg.voters.empty()) {
    log::error("raft observer {}: state machine and voters needed",
               st.cfg.id);
    self->quit(make_error(ec::invalid_argument,
                          "raft observer: state machine and voters needed"));
  }
  st.reported.role = raft_role::follower;
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove(subs.begin(), subs.end(), msg.source), subs.end());
  });
  self->delayed_send(self, st.cfg.poll_interval, tick_atom_v);
  return {
    [](raft_atom, const raft_message&) {
      // Observers take no part in elections or replication.
    },
    [self](propose_atom, const std::string&) -> caf::result<raft_applied> {
      return make_error(ec::not_leader,
                        "node " + std::to_string(self->state.cfg.id)
                          + " is not a voter; leader="
                          + std::to_string(self->state.leader));
    },
    [self](status_atom) -> caf::result<raft_status> {
      return observer_status(self);
    },
    [self](subscribe_atom, const caf::actor& listener) {
      if (!listener)
        return;
      self->monitor(listener);
      self->state.subscribers.push_back(listener);
      caf::anon_send(listener, update_atom_v, observer_status(self));
    },
    [self](connect_atom, int32_t id, const caf::actor& peer) {
      auto& st = self->state;
      if (std::find(st.cfg.voters.begin(), st.cfg.voters.end(), id)
          == st.cfg.voters.end())
        return; // only voters have the log
      st.cfg.peers[id] = peer;
      if (id == st.leader && peer)
        st.leader_failed = false;
    },
    [self](tick_atom) {
      observer_fetch(self);
      self->delayed_send(self, self->state.cfg.poll_interval, tick_atom_v);
    },
    [self](fetch_atom, raft_atom, uint64_t) -> caf::result<raft_log_chunk> {
      return make_error(ec::not_leader,
                        "node " + std::to_string(self->state.cfg.id)
                          + " is not a voter and has no metadata log; leader="
                          + std::to_string(self->state.leader));
    },
  };
}

} // namespace ferry
