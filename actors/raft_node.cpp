#include "actors/raft_node.hpp"

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
      stop(self, std::move(err));
      return false;
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

// After every input: stop on a store failure, send, apply, report.
void flush(self_ptr self) {
  auto& st = self->state;
  if (st.core->failure()) {
    stop(self, st.core->failure());
    return;
  }
  for (auto& m : st.core->take_messages()) {
    auto it = st.cfg.peers.find(m.to);
    if (it != st.cfg.peers.end() && it->second)
      caf::anon_send(it->second, raft_atom_v, std::move(m));
  }
  if (!apply_committed(self))
    return;
  report(self);
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
      self->state.core->step(m);
      flush(self);
    },
    [self](propose_atom, std::string& command) -> caf::result<raft_applied> {
      auto& st = self->state;
      auto index = st.core->propose(std::move(command));
      if (!index) {
        if (st.core->failure()) {
          flush(self);
          return st.core->failure();
        }
        return std::move(index.error());
      }
      auto rp = self->make_response_promise<raft_applied>();
      st.waiting[*index] = raft_node_state::pending{st.core->term(), rp};
      flush(self);
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
      self->delayed_send(self, self->state.cfg.tick_interval, tick_atom_v);
    },
  };
}

} // namespace ferry
