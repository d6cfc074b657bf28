#include "actors/server/fetch_session.hpp"

#include "broker/error.hpp"
#include "broker/logging.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace ferry {

namespace {

struct fetch_session_state {
  struct entry {
    fetch_request req;
    caf::typed_response_promise<fetch_response> rp;
  };
  fetch_session_config cfg;
  /// Long polls for the next round, and those the leader holds.
  std::map<topic_partition, entry> fresh;
  std::map<topic_partition, entry> held;
  /// This incarnation of the session, its last round and rounds in flight.
  uint64_t session = 0;
  uint64_t round = 0;
  size_t rounds_out = 0;
  /// A send is queued behind the messages already in the mailbox (so the
  /// replicas asking in one burst share a round).
  bool send_queued = false;
  uint64_t send_gen = 0;

  static inline const char* name = "ferry.fetch_session";
};

using session_ptr = fetch_session_actor::stateful_pointer<fetch_session_state>;

uint64_t new_session_id() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0)
    id = gen();
  return id;
}

void maybe_send(session_ptr self);

/// Every long poll the leader held fails with `err` (the replicas fetch
/// again after their backoff), and the session starts anew.
void fail_held(session_ptr self, const caf::error& err) {
  auto& st = self->state;
  for (auto& [tp, e] : st.held)
    e.rp.deliver(err);
  st.held.clear();
  st.session = new_session_id();
  st.round = 0;
  st.rounds_out = 0; // late answers of the old session are ignored
}

void on_answer(session_ptr self, uint64_t session,
               std::vector<fetch_result>& results) {
  auto& st = self->state;
  if (session != st.session)
    return; // a round of an older session
  --st.rounds_out;
  for (auto& r : results) {
    if (r.topic.empty()) {
      log::debug("fetch session {} -> {}: {}", st.cfg.node_id,
                 st.cfg.leader_id, r.error);
      fail_held(self, r.error ? r.error
                              : make_error(ec::request_timed_out,
                                           "the leader node reset the fetch session"));
      maybe_send(self);
      return;
    }
    auto i = st.held.find(topic_partition{r.topic, r.partition});
    if (i == st.held.end())
      continue; // superseded by a newer long poll of the replica
    auto rp = std::move(i->second.rp);
    st.held.erase(i);
    if (r.error)
      rp.deliver(std::move(r.error));
    else
      rp.deliver(std::move(r.response));
  }
  maybe_send(self);
}

void send_round(session_ptr self) {
  auto& st = self->state;
  fetch_round rd;
  rd.follower = st.cfg.node_id;
  rd.session = st.session;
  rd.round = ++st.round;
  rd.fetches.reserve(st.fresh.size());
  int32_t max_wait = 0;
  for (auto& [tp, e] : st.held)
    max_wait = std::max(max_wait, e.req.max_wait_ms);
  for (auto& [tp, e] : st.fresh) {
    auto req = e.req;
    req.max_bytes = std::min(req.max_bytes, st.cfg.max_partition_bytes);
    max_wait = std::max(max_wait, req.max_wait_ms);
    rd.fetches.push_back(std::move(req));
  }
  st.held.merge(st.fresh);
  st.fresh.clear();
  ++st.rounds_out;
  auto timeout = std::chrono::milliseconds{max_wait} + st.cfg.round_margin;
  self
    ->request(caf::actor_cast<broker_actor>(st.cfg.leader_broker), timeout,
              fetch_atom_v, std::move(rd))
    .then(
      [self, session = st.session](std::vector<fetch_result>& results) {
        on_answer(self, session, results);
      },
      [self, session = st.session](caf::error& err) {
        auto& st = self->state;
        if (session != st.session)
          return;
        log::debug("fetch session {} -> {}: round failed: {}",
                   st.cfg.node_id, st.cfg.leader_id, err);
        fail_held(self, err);
        maybe_send(self);
      });
}

void maybe_send(session_ptr self) {
  auto& st = self->state;
  if (!st.cfg.leader_broker || st.send_queued)
    return;
  // One round waits at the leader while it holds long polls; new long polls
  // go in a second round (which makes the leader answer the waiting one).
  bool want = (st.rounds_out == 0 && !st.held.empty()) || !st.fresh.empty();
  if (!want || st.rounds_out >= st.cfg.max_rounds_out)
    return;
  st.send_queued = true;
  self->send(self, tick_atom_v, ++st.send_gen);
}

fetch_session_actor::behavior_type
fetch_session(session_ptr self, fetch_session_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.session = new_session_id();
  return {
    [self](fetch_atom, fetch_request& req) -> caf::result<fetch_response> {
      auto& st = self->state;
      auto tp = topic_partition{req.topic, req.partition};
      auto rp = self->make_response_promise<fetch_response>();
      auto superseded = make_error(ec::request_timed_out,
                                   "fetch superseded by a newer one");
      // A replica has one fetch out; a newer one (after a stall) replaces
      // the old, at the leader too (the answer to the old is dropped there).
      for (auto* m : {&st.fresh, &st.held})
        if (auto old = m->find(tp); old != m->end()) {
          old->second.rp.deliver(superseded);
          m->erase(old);
        }
      st.fresh.emplace(tp, fetch_session_state::entry{std::move(req), rp});
      maybe_send(self);
      return rp;
    },
    [self](update_atom, caf::actor& broker) {
      auto& st = self->state;
      if (broker == st.cfg.leader_broker)
        return;
      st.cfg.leader_broker = std::move(broker);
      // Long polls sent over the old link: their answers may never come.
      fail_held(self, make_error(ec::request_timed_out,
                                 "the link to leader node "
                                   + std::to_string(st.cfg.leader_id)
                                   + " changed during the fetch"));
      maybe_send(self);
    },
    [self](tick_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.send_gen || !st.send_queued)
        return;
      st.send_queued = false;
      bool want = (st.rounds_out == 0 && !st.held.empty()) || !st.fresh.empty();
      if (want && st.cfg.leader_broker && st.rounds_out < st.cfg.max_rounds_out)
        send_round(self);
    },
  };
}

} // namespace

fetch_session_actor spawn_fetch_session(caf::actor_system& sys,
                                        fetch_session_config cfg) {
  return sys.spawn(fetch_session, std::move(cfg));
}

} // namespace ferry
