// The node actor's routing and forwarding: which replica or node serves a
// partition request, and the data path handlers (produce, fetch, list offsets,
// status, purge). (See node_internal.hpp for how the node's files divide the
// work.)

#include "actors/server/node_internal.hpp"
#include "actors/server/produce_gather.hpp"

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
/// node goes to that node (unless the request was `forwarded` here already:
/// nodes whose metadata disagree must not pass it back and forth).
/// `follower`: a follower fetch, only ever served by the local replica.
caf::expected<route_target> route_client(self_ptr self,
                                         const std::string& topic,
                                         partition_id p, bool follower,
                                         bool forwarded) {
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
        if (forwarded || peer == st.peers.end())
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
void serve_partition_now(self_ptr self, caf::typed_response_promise<T> rp,
                         Atom atom, Req req, bool follower, bool forwarded) {
  auto r = route_client(self, req.topic, req.partition, follower, forwarded);
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

/// serve_partition_now, once this node knows the topic (when_topics_known).
template <class T, class Req, class Atom>
void serve_partition(self_ptr self, caf::typed_response_promise<T> rp,
                     Atom atom, Req req, bool follower, bool forwarded) {
  if (knows_topics(self->state, req.topic)) { // the data path: no copies
    serve_partition_now(self, rp, atom, std::move(req), follower, forwarded);
    return;
  }
  auto topic = req.topic;
  when_topics_known(self, {std::move(topic)},
                    [self, rp, atom, req = std::move(req), follower, forwarded]() mutable {
                      serve_partition_now(self, rp, atom, std::move(req), follower,
                                          forwarded);
                    });
}


caf::result<produce_response> serve_produce(self_ptr self,
                                            produce_request& req) {
  // The coordinators of this node (and the node itself) write group
  // state only where they are the partition's leader: a coordinator
  // whose group just moved away must not reach the new leader through
  // a forward (a late write would land after the new coordinator's).
  // (The sender is read before make_response_promise takes it.)
  auto& sender = self->current_sender();
  bool own_state = req.topic == consumer_state_topic && sender
                   && sender->node() == self->node();
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<produce_response>();
  when_ready(self, [self, rp, own_state, forwarded, req = std::move(req)]() mutable {
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
    serve_partition(self, rp, produce_atom_v, std::move(req), false, forwarded);
  });
  return rp;
}

namespace {

/// serve_produce_many once the node knows every topic of `reqs` (or stopped
/// waiting for them). The local batches go to their replicas with a slot
/// of one gather each (produce_gather.hpp): no answer message per batch,
/// and no pending answers for the node to search (CAF 0.17 keeps an
/// actor's pending answers in a vector it searches and erases linearly).
/// The node sends them itself, so one partition's batches reach its
/// replica in the order the node took them.
void produce_many_now(self_ptr self,
                      caf::typed_response_promise<std::vector<produce_result>> rp,
                      bool forwarded, std::vector<produce_request>& reqs) {
  auto g = std::make_shared<produce_gather>(caf::actor_cast<broker_actor>(self),
                                            std::move(rp), reqs.size());
  auto& out = g->answers->out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto& req = reqs[i];
    auto r = route_client(self, req.topic, req.partition, false, forwarded);
    if (!r) {
      out[i].error = failed(self, std::move(r.error()));
      continue;
    }
    if (r->local) {
      // Stays if the replica ends with the batch still in its mailbox.
      out[i].error = make_error(ec::log_closed,
                                "the replica of " + tp_name(req.topic, req.partition)
                                  + " stopped before answering");
      g->answers->from_replica[i] = 1;
      self->send(r->local, produce_atom_v, std::move(req), produce_slot{g, i});
      continue;
    }
    auto ok = [g, i, leader = r->leader](produce_response& x) {
      x.leader = leader; // the client goes there directly next
      g->answers->out[i].response = std::move(x);
    };
    auto fail = [self, g, i](caf::error& err) {
      g->answers->out[i].error = failed(self, std::move(err));
    };
    if (self->state.probe)
      self->state.probe->forwarded("produce");
    forward_to<produce_response>(self, r->leader, r->remote,
                                 std::chrono::seconds{75}, std::move(ok),
                                 std::move(fail), produce_atom_v,
                                 std::move(req));
  }
}

} // namespace

caf::result<std::vector<produce_result>>
serve_produce_many(self_ptr self, std::vector<produce_request>& reqs) {
  using results = std::vector<produce_result>;
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<results>();
  if (reqs.empty()) {
    rp.deliver(results{});
    return rp;
  }
  when_ready(self, [self, rp, forwarded, reqs = std::move(reqs)]() mutable {
    auto& st = self->state;
    if (std::all_of(reqs.begin(), reqs.end(),
                    [&st](auto& r) { return knows_topics(st, r.topic); })) {
      produce_many_now(self, rp, forwarded, reqs);
      return;
    }
    std::vector<std::string> topics;
    for (auto& r : reqs)
      if (std::find(topics.begin(), topics.end(), r.topic) == topics.end())
        topics.push_back(r.topic);
    when_topics_known(self, std::move(topics),
                      [self, rp, forwarded, reqs = std::move(reqs)]() mutable {
                        produce_many_now(self, rp, forwarded, reqs);
                      });
  });
  return rp;
}

void produce_gathered_in(self_ptr self, produce_gathered& x) {
  if (!x.answers)
    return;
  auto& a = *x.answers;
  for (size_t i = 0; i < a.out.size(); ++i)
    if (a.from_replica[i] && a.out[i].error)
      failed(self, a.out[i].error);
  a.rp.deliver(std::move(a.out));
}

caf::result<fetch_response> serve_fetch(self_ptr self, fetch_request& req) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<fetch_response>();
  when_ready(self, [self, rp, forwarded, req = std::move(req)]() mutable {
    bool follower = req.replica_id >= 0;
    serve_partition(self, rp, fetch_atom_v, std::move(req), follower, forwarded);
  });
  return rp;
}

namespace {

using follower_session = node_state::follower_session;

/// A round's answer holds at most this many bytes of data; the rest goes in
/// the next round (a follower catching up on many partitions).
constexpr size_t round_max_bytes = 16u << 20;

std::vector<fetch_result> take_ready(follower_session& fs) {
  std::vector<fetch_result> out;
  size_t bytes = 0;
  size_t n = 0;
  while (n < fs.ready.size()
         && (n == 0 || bytes + fs.ready[n].response.data.size() <= round_max_bytes)) {
    bytes += fs.ready[n].response.data.size();
    ++n;
  }
  out.assign(std::make_move_iterator(fs.ready.begin()),
             std::make_move_iterator(fs.ready.begin() + static_cast<ptrdiff_t>(n)));
  fs.ready.erase(fs.ready.begin(), fs.ready.begin() + static_cast<ptrdiff_t>(n));
  fs.ready_bytes -= std::min(fs.ready_bytes, bytes);
  return out;
}

/// A long poll of follower `node`'s session `session` was answered.
void poll_answered(self_ptr self, int32_t node, uint64_t session,
                   const topic_partition& tp, uint64_t poll, fetch_result r) {
  auto& st = self->state;
  auto i = st.follower_sessions.find(node);
  if (i == st.follower_sessions.end() || i->second.id != session)
    return; // the session is gone (its link went down, or a new one began)
  auto& fs = i->second;
  auto p = fs.polls.find(tp);
  if (p == fs.polls.end() || p->second != poll)
    return; // replaced by a newer long poll of the partition
  fs.polls.erase(p);
  fs.ready_bytes += r.response.data.size();
  fs.ready.push_back(std::move(r));
  if (fs.waiting) {
    auto rp = std::move(*fs.waiting);
    fs.waiting.reset();
    rp.deliver(take_ready(fs));
  }
}

/// Starts follower `node`'s long poll `req` at the partition's replica.
void start_poll(self_ptr self, int32_t node, follower_session& fs,
                fetch_request& req) {
  auto& st = self->state;
  topic_partition tp{req.topic, req.partition};
  auto poll = st.next_poll++;
  fs.polls[tp] = poll;
  auto fail = [&](caf::error err) {
    fs.polls.erase(tp);
    fs.ready.push_back(fetch_result{tp.topic, tp.partition, {}, std::move(err)});
  };
  if (req.replica_id != node) {
    fail(make_error(ec::invalid_request,
                    "a fetch session carries its own node's follower fetches only"));
    return;
  }
  auto r = route(self, req.topic, req.partition);
  if (!r) {
    fail(failed(self, std::move(r.error())));
    return;
  }
  self->request(*r, caf::infinite, fetch_atom_v, std::move(req))
    .then(
      [self, node, session = fs.id, tp, poll](fetch_response& x) {
        poll_answered(self, node, session, tp, poll,
                      fetch_result{tp.topic, tp.partition, std::move(x), {}});
      },
      [self, node, session = fs.id, tp, poll](caf::error& err) {
        poll_answered(self, node, session, tp, poll,
                      fetch_result{tp.topic, tp.partition, {},
                                   failed(self, std::move(err))});
      });
}

} // namespace

caf::result<std::vector<fetch_result>>
serve_fetch_round(self_ptr self, fetch_round& rd) {
  using results = std::vector<fetch_result>;
  auto rp = self->make_response_promise<results>();
  when_ready(self, [self, rp, rd = std::move(rd)]() mutable {
    auto& st = self->state;
    auto& fs = st.follower_sessions[rd.follower];
    if (fs.id != rd.session) {
      if (fs.waiting)
        fs.waiting->deliver(results{}); // the old session's waiting round
      fs = follower_session{};
      if (rd.round != 1) {
        // A session this node does not know (it restarted, or the session's
        // link went down here): its long polls are gone.
        st.follower_sessions.erase(rd.follower);
        rp.deliver(results{fetch_result{
          {}, partition_id{0}, {},
          make_error(ec::request_timed_out,
                     "node " + std::to_string(st.cfg.node_id)
                       + " does not know this fetch session (it restarted "
                         "or lost the link): fetch again")}});
        return;
      }
      fs.id = rd.session;
    }
    // A newer round: the waiting one answers now with what there is.
    if (fs.waiting) {
      auto old = std::move(*fs.waiting);
      fs.waiting.reset();
      old.deliver(take_ready(fs));
    }
    for (auto& req : rd.fetches)
      start_poll(self, rd.follower, fs, req);
    if (!fs.ready.empty()) {
      rp.deliver(take_ready(fs));
      return;
    }
    if (fs.polls.empty()) {
      // Nothing it could wait for: the follower's long polls are not here.
      st.follower_sessions.erase(rd.follower);
      rp.deliver(results{fetch_result{
        {}, partition_id{0}, {},
        make_error(ec::request_timed_out,
                   "node " + std::to_string(st.cfg.node_id)
                     + " holds no long poll of this fetch session: fetch again")}});
      return;
    }
    fs.waiting = rp;
  });
  return rp;
}

caf::result<offset> serve_list_offsets(self_ptr self,
                                       list_offsets_request& req) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<offset>();
  when_ready(self, [self, rp, forwarded, req = std::move(req)]() mutable {
    serve_partition(self, rp, offsets_atom_v, std::move(req), false, forwarded);
  });
  return rp;
}

caf::result<epoch_end> serve_epoch_end(self_ptr self, epoch_end_request& req) {
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<epoch_end>();
  when_ready(self, [self, rp, forwarded, req = std::move(req)]() mutable {
    serve_partition(self, rp, offsets_atom_v, std::move(req), false, forwarded);
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
