#include "actors/server/fetch_session.hpp"

#include "broker/error.hpp"
#include "broker/logging.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <set>
#include <utility>
#include <vector>

namespace ferry {

namespace {

struct fetch_session_state {
  struct entry {
    fetch_request req;
    caf::typed_response_promise<fetch_response> rp;
    /// When the replica asked (its long poll runs from then).
    caf::actor_clock::time_point since;
  };
  fetch_session_config cfg;
  /// Requests for the next round, and those in the round in flight.
  std::map<topic_partition, entry> pending;
  std::map<topic_partition, entry> in_flight;
  /// The high watermark each replica was last handed.
  std::map<topic_partition, offset> last_hw;
  /// Replicas the last round answered that have not asked again yet.
  std::set<topic_partition> answered;
  /// Where the next round starts taking pending requests.
  topic_partition cursor;
  /// The rounds in flight (by number) and the partitions in each.
  std::map<uint64_t, std::vector<topic_partition>> out;
  bool lingering = false;
  uint64_t round = 0;
  uint64_t linger_gen = 0;
  caf::actor_clock::time_point last_sent{};

  static inline const char* name = "ferry.fetch_session";
};

using session_ptr
  = fetch_session_actor::stateful_pointer<fetch_session_state>;

void maybe_send(session_ptr self);

void on_round(session_ptr self, uint64_t round,
              std::vector<fetch_result>& results) {
  auto& st = self->state;
  auto o = st.out.find(round);
  if (o == st.out.end())
    return; // failed already (link change)
  auto order = std::move(o->second);
  st.out.erase(o);
  auto now = self->clock().now();
  for (size_t i = 0; i < order.size(); ++i) {
    auto& tp = order[i];
    auto f = st.in_flight.find(tp);
    if (f == st.in_flight.end())
      continue;
    auto e = std::move(f->second);
    st.in_flight.erase(f);
    if (i >= results.size()) {
      e.rp.deliver(make_error(ec::invalid_request, "the leader's fetch answer has "
                                              + std::to_string(results.size())
                                              + " results for "
                                              + std::to_string(order.size())
                                              + " partitions"));
      continue;
    }
    auto& r = results[i];
    if (r.error) {
      e.rp.deliver(std::move(r.error)); // the replica retries after backoff
      continue;
    }
    bool newer = st.pending.count(tp) > 0; // the replica asked again
    if (!newer) {
      auto hw = st.last_hw.find(tp);
      bool same_hw = hw != st.last_hw.end()
                     && hw->second == r.response.high_watermark;
      auto waited = now - e.since;
      bool expired = waited >= std::chrono::milliseconds{e.req.max_wait_ms};
      if (!expired
          && (r.waiting || (fetch_is_idle(e.req, r.response) && same_hw))) {
        st.pending.emplace(tp, std::move(e)); // next round, same long poll
        continue;
      }
      if (r.waiting) {
        // Waited its whole max wait while other partitions kept answering
        // the rounds: the empty answer a long poll gives (the known HW).
        fetch_response empty;
        empty.next_offset = e.req.from;
        empty.high_watermark = hw != st.last_hw.end() ? hw->second : offset{0};
        empty.log_end = e.req.from;
        e.rp.deliver(std::move(empty));
        continue;
      }
    }
    if (r.waiting) {
      // Superseded while nothing came: the replica ignores this answer.
      e.rp.deliver(make_error(ec::request_timed_out,
                              "fetch superseded by a newer one"));
      continue;
    }
    st.last_hw[tp] = r.response.high_watermark;
    if (!newer)
      st.answered.insert(tp);
    e.rp.deliver(std::move(r.response));
  }
  maybe_send(self);
}

void fail_round(session_ptr self, uint64_t round, const caf::error& err) {
  auto& st = self->state;
  auto o = st.out.find(round);
  if (o == st.out.end())
    return;
  log::debug("fetch session {} -> {}: round failed: {}", st.cfg.node_id,
             st.cfg.leader_id, err);
  for (auto& tp : o->second)
    if (auto f = st.in_flight.find(tp); f != st.in_flight.end()) {
      f->second.rp.deliver(err);
      st.in_flight.erase(f);
    }
  st.out.erase(o);
  maybe_send(self);
}

void send_round(session_ptr self) {
  auto& st = self->state;
  st.lingering = false;
  st.answered.clear();
  // At most max_round_partitions, taken round-robin from where the last
  // round stopped, each asking for its share of round_max_bytes (at least
  // min_partition_bytes): a round's answer stays bounded when many
  // partitions have much to catch up.
  auto n = std::min(st.pending.size(), st.cfg.max_round_partitions);
  auto share = static_cast<int32_t>(std::max<size_t>(
    st.cfg.min_partition_bytes, st.cfg.round_max_bytes / std::max<size_t>(n, 1)));
  std::vector<fetch_request> reqs;
  std::vector<topic_partition> order;
  reqs.reserve(n);
  order.reserve(n);
  int32_t max_wait = 0;
  auto i = st.pending.lower_bound(st.cursor);
  while (reqs.size() < n) {
    if (i == st.pending.end())
      i = st.pending.begin();
    auto req = i->second.req;
    req.max_bytes = std::min(req.max_bytes, share);
    max_wait = std::max(max_wait, req.max_wait_ms);
    reqs.push_back(std::move(req));
    order.push_back(i->first);
    auto node = st.pending.extract(i++);
    st.in_flight.insert(std::move(node));
  }
  if (i != st.pending.end())
    st.cursor = i->first;
  else if (!st.pending.empty())
    st.cursor = st.pending.begin()->first;
  ++st.round;
  st.out.emplace(st.round, order);
  st.last_sent = self->clock().now();
  auto timeout = std::chrono::milliseconds{max_wait} + st.cfg.round_margin;
  self
    ->request(caf::actor_cast<broker_actor>(st.cfg.leader_broker), timeout,
              fetch_atom_v, std::move(reqs))
    .then(
      [self, round = st.round](std::vector<fetch_result>& results) {
        on_round(self, round, results);
      },
      [self, round = st.round](caf::error& err) {
        fail_round(self, round, err);
      });
}

void maybe_send(session_ptr self) {
  auto& st = self->state;
  if (st.pending.empty() || !st.cfg.leader_broker
      || st.out.size() >= st.cfg.max_rounds_out)
    return;
  // Wait (linger) for the replicas just answered, and after sending a
  // round: requests trickling in go together in the next one.
  bool wait = !st.answered.empty()
              || (!st.out.empty()
                  && self->clock().now() - st.last_sent < st.cfg.linger);
  if (!wait) {
    send_round(self);
    return;
  }
  if (!st.lingering) {
    st.lingering = true;
    self->delayed_send(self, st.cfg.linger, tick_atom_v, ++st.linger_gen);
  }
}

fetch_session_actor::behavior_type
fetch_session(session_ptr self, fetch_session_config cfg) {
  self->state.cfg = std::move(cfg);
  return {
    [self](fetch_atom, fetch_request& req) -> caf::result<fetch_response> {
      auto& st = self->state;
      auto tp = topic_partition{req.topic, req.partition};
      auto rp = self->make_response_promise<fetch_response>();
      if (auto old = st.pending.find(tp); old != st.pending.end()) {
        old->second.rp.deliver(make_error(ec::request_timed_out,
                                          "fetch superseded by a newer one"));
        st.pending.erase(old);
      }
      st.pending.emplace(tp, fetch_session_state::entry{
                               std::move(req), rp, self->clock().now()});
      if (st.answered.erase(tp) > 0 && st.answered.empty() && st.lingering)
        st.lingering = false; // everyone is back: no need to wait more
      maybe_send(self);
      return rp;
    },
    [self](update_atom, caf::actor& broker) {
      auto& st = self->state;
      if (broker == st.cfg.leader_broker)
        return;
      st.cfg.leader_broker = std::move(broker);
      // Rounds sent over the old link: their answers may never come. Their
      // requests fail now (the replicas retry), late answers are dropped.
      auto err = make_error(ec::request_timed_out,
                            "the link to leader node "
                              + std::to_string(st.cfg.leader_id)
                              + " changed during the fetch");
      while (!st.out.empty())
        fail_round(self, st.out.begin()->first, err);
      maybe_send(self);
    },
    [self](tick_atom, uint64_t gen) {
      auto& st = self->state;
      if (!st.lingering || gen != st.linger_gen)
        return;
      st.lingering = false;
      st.answered.clear();
      maybe_send(self);
    },
  };
}

} // namespace

fetch_session_actor spawn_fetch_session(caf::actor_system& sys,
                                        fetch_session_config cfg) {
  return sys.spawn(fetch_session, std::move(cfg));
}

} // namespace ferry
