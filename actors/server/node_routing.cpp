// The node actor's routing and forwarding: which replica or node serves a
// partition request, and the data path handlers (produce, fetch, list offsets,
// status, purge). (See node_internal.hpp for how the node's files divide the
// work.)

#include "actors/server/node_internal.hpp"

namespace ferry::node_detail {

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
  auto leader = r->leader;
  forward_to<T>(
    self, leader, r->remote, std::chrono::seconds{75},
    [rp, leader](T& x) mutable {
      if constexpr (std::is_same_v<T, produce_response>
                    || std::is_same_v<T, fetch_response>)
        x.leader = leader; // the client goes there directly next
      rp.deliver(std::move(x));
    },
    [self, rp](caf::error& err) mutable { rp.deliver(failed(self, std::move(err))); },
    atom, std::move(req));
}


caf::result<produce_response> serve_produce(self_ptr self,
                                            produce_request& req) {
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
}

caf::result<std::vector<produce_result>>
serve_produce_many(self_ptr self, std::vector<produce_request>& reqs) {
  using results = std::vector<produce_result>;
  auto rp = self->make_response_promise<results>();
  if (reqs.empty()) {
    rp.deliver(results{});
    return rp;
  }
  when_ready(self, [self, rp, reqs = std::move(reqs)]() mutable {
    struct gather {
      results out;
      size_t left = 0;
      caf::typed_response_promise<results> rp;
    };
    auto g = std::make_shared<gather>();
    g->out.resize(reqs.size());
    g->left = reqs.size();
    g->rp = rp;
    auto done = [g](size_t i) {
      if (--g->left == 0)
        g->rp.deliver(std::move(g->out));
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto& req = reqs[i];
      auto r = route_client(self, req.topic, req.partition, false);
      if (!r) {
        g->out[i].error = failed(self, std::move(r.error()));
        done(i);
        continue;
      }
      auto ok = [g, done, i, leader = r->local ? -1 : r->leader](
                  produce_response& x) {
        if (leader >= 0)
          x.leader = leader; // the client goes there directly next
        g->out[i].response = std::move(x);
        done(i);
      };
      auto fail = [self, g, done, i](caf::error& err) {
        g->out[i].error = failed(self, std::move(err));
        done(i);
      };
      if (r->local) {
        // The replica answers within its ack timeout.
        self->request(r->local, caf::infinite, produce_atom_v, std::move(req))
          .then(std::move(ok), std::move(fail));
      } else {
        if (self->state.probe)
          self->state.probe->forwarded("produce");
        forward_to<produce_response>(self, r->leader, r->remote,
                                     std::chrono::seconds{75}, std::move(ok),
                                     std::move(fail), produce_atom_v,
                                     std::move(req));
      }
    }
  });
  return rp;
}

caf::result<fetch_response> serve_fetch(self_ptr self, fetch_request& req) {
  auto rp = self->make_response_promise<fetch_response>();
  when_ready(self, [self, rp, req = std::move(req)]() mutable {
    bool follower = req.replica_id >= 0;
    serve_partition(self, rp, fetch_atom_v, std::move(req), follower);
  });
  return rp;
}

namespace {

/// One round of a follower node's fetch session (serve_fetch_many).
struct fetch_round {
  std::vector<fetch_request> reqs;
  std::vector<partition_actor> replicas; // null: answered with an error
  std::vector<fetch_result> out;
  std::vector<bool> got;
  size_t left = 0;
  bool delivered = false;
  caf::typed_response_promise<std::vector<fetch_result>> rp;

  void deliver() {
    if (delivered)
      return;
    delivered = true;
    for (size_t i = 0; i < out.size(); ++i)
      if (!got[i])
        out[i].waiting = true;
    rp.deliver(std::move(out));
  }
};

/// Phase 2: every partition idle at once, so each waits (parks in its
/// replica) up to its max wait; the first with something answers the
/// round, the rest come back `waiting` (a replica keeps one parked fetch
/// per follower: the next round's replaces it).
void park_round(self_ptr self, std::shared_ptr<fetch_round> g) {
  self->state.parked_rounds[g->reqs.front().replica_id]
    = [w = std::weak_ptr<fetch_round>{g}] {
        if (auto r = w.lock())
          r->deliver();
      };
  g->left = 0;
  for (size_t i = 0; i < g->reqs.size(); ++i)
    if (g->replicas[i]) {
      g->got[i] = false;
      ++g->left;
    }
  for (size_t i = 0; i < g->reqs.size(); ++i) {
    if (!g->replicas[i])
      continue;
    self->request(g->replicas[i], caf::infinite, fetch_atom_v, g->reqs[i])
      .then(
        [g, i](fetch_response& r) {
          if (g->delivered)
            return;
          bool something = !fetch_is_idle(g->reqs[i], r);
          g->out[i].response = std::move(r);
          g->got[i] = true;
          if (something || --g->left == 0)
            g->deliver();
        },
        [g, i](caf::error& err) {
          if (g->delivered)
            return;
          g->out[i].error = std::move(err);
          g->got[i] = true;
          g->deliver();
        });
  }
}

} // namespace

caf::result<std::vector<fetch_result>>
serve_fetch_many(self_ptr self, std::vector<fetch_request>& reqs) {
  using results = std::vector<fetch_result>;
  auto rp = self->make_response_promise<results>();
  if (reqs.empty()) {
    rp.deliver(results{});
    return rp;
  }
  when_ready(self, [self, rp, reqs = std::move(reqs)]() mutable {
    // The follower node's round parked here is answered now: this newer one
    // carries requests that must not wait for its long poll.
    auto& parked = self->state.parked_rounds;
    if (auto k = parked.find(reqs.front().replica_id); k != parked.end()) {
      auto kick = std::move(k->second);
      parked.erase(k);
      kick();
    }
    auto g = std::make_shared<fetch_round>();
    g->rp = rp;
    g->out.resize(reqs.size());
    g->got.assign(reqs.size(), true);
    g->replicas.resize(reqs.size());
    g->reqs = std::move(reqs);
    // Phase 1: every partition answers at once (no wait).
    g->left = g->reqs.size();
    auto done = [self, g] {
      if (--g->left > 0)
        return;
      for (size_t i = 0; i < g->reqs.size(); ++i)
        if (g->out[i].error || !fetch_is_idle(g->reqs[i], g->out[i].response)
            || g->reqs[i].max_wait_ms <= 0) {
          g->deliver();
          return;
        }
      park_round(self, g);
    };
    for (size_t i = 0; i < g->reqs.size(); ++i) {
      auto& req = g->reqs[i];
      auto r = req.replica_id >= 0
                 ? route(self, req.topic, req.partition)
                 : caf::expected<partition_actor>{make_error(
                   ec::invalid_request,
                   "a multi-partition fetch is for followers only")};
      if (!r) {
        g->out[i].error = failed(self, std::move(r.error()));
        done();
        continue;
      }
      g->replicas[i] = *r;
      auto now_req = req;
      now_req.max_wait_ms = 0;
      self->request(*r, caf::infinite, fetch_atom_v, std::move(now_req))
        .then(
          [g, i, done](fetch_response& x) {
            g->out[i].response = std::move(x);
            done();
          },
          [self, g, i, done](caf::error& err) {
            g->out[i].error = failed(self, std::move(err));
            g->replicas[i] = nullptr;
            done();
          });
    }
  });
  return rp;
}

caf::result<offset> serve_list_offsets(self_ptr self,
                                       list_offsets_request& req) {
  auto rp = self->make_response_promise<offset>();
  when_ready(self, [self, rp, req = std::move(req)]() mutable {
    serve_partition(self, rp, offsets_atom_v, std::move(req), false);
  });
  return rp;
}

caf::result<offset> purge_partition(self_ptr self, topic_partition& tp,
                                    offset before) {
  auto rp = self->make_response_promise<offset>();
  when_ready(self, [self, rp, tp, before]() mutable {
    auto r = route(self, tp.topic, tp.partition);
    if (!r)
      rp.deliver(failed(self, std::move(r.error())));
    else
      relay(self, rp, *r, purge_atom_v, before);
  });
  return rp;
}

caf::result<partition_status>
serve_partition_status(self_ptr self, const topic_partition& tp) {
  auto rp = self->make_response_promise<partition_status>();
  when_ready(self, [self, rp, tp]() mutable {
    auto r = route(self, tp.topic, tp.partition);
    if (!r)
      rp.deliver(failed(self, std::move(r.error())));
    else
      relay(self, rp, *r, status_atom_v);
  });
  return rp;
}

} // namespace ferry::node_detail
