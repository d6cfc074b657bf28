// The node actor's DLQ relays: the DLQ manager, the home of a DLQ in a cluster,
// and the list, show, redrive and purge handlers. (See node_internal.hpp for
// how the node's files divide the work.)

#include "actors/server/node_internal.hpp"

namespace ferry::node_detail {

// -- DLQ operations -------------------------------------------------------------

/// The DLQ manager, spawned on first use (and again after a crash). In a
/// cluster it replicates its redrive bookkeeping through __consumer_state.
dlq_manager_actor dlq_manager_of(self_ptr self) {
  auto& st = self->state;
  if (!st.dlq) {
    dlq_manager_config dc;
    dc.store = st.cfg.store;
    dc.broker = internal_handle(self);
    if (cluster_mode(st))
      dc.state_topic = consumer_state_topic;
    st.dlq = self->spawn(dlq_manager, std::move(dc));
    self->monitor(st.dlq);
    if (st.ready)
      self->send(st.dlq, update_atom_v, topic_list(st));
  }
  return st.dlq;
}

/// How long a forwarded DLQ request may take (a redrive of many records).
constexpr auto dlq_forward_timeout = std::chrono::minutes{10};

/// Where the DLQ requests naming `topic` are served in a cluster: here
/// (local; also outside a cluster), at the node leading the
/// __consumer_state partition of dlq_home_key(topic) (remote), or nowhere
/// yet or its state still loading here (err: coordinator_not_available,
/// retriable).
group_home_t dlq_home(self_ptr self, const std::string& topic) {
  auto& st = self->state;
  if (!cluster_mode(st) || topic.empty())
    return {};
  auto key = dlq_home_key(topic);
  auto leader = state_leader(st, key);
  if (leader && *leader == st.cfg.node_id)
    if (auto err = stalled_home_error(self))
      return group_home_t{false, broker_actor{}, std::move(err)};
  if (leader && *leader == st.cfg.node_id && !state_loaded(st, key))
    // Its redrive producer rows and marks are still being replayed here.
    return group_home_t{false, broker_actor{},
                        make_error(ec::coordinator_not_available,
                                   "DLQ " + topic + ": its __consumer_state partition is "
                                   "still loading on node "
                                     + std::to_string(st.cfg.node_id))};
  return home_at(self, leader, "DLQ " + topic, false);
}

/// Relays a DLQ request whose reply is `T` to the DLQ manager; in a
/// cluster, one naming a DLQ `topic` goes to the topic's home (dlq_home).
template <class T, class... Ts>
caf::result<T> to_dlq_at(self_ptr self, const std::string& topic, Ts... xs) {
  // Decided now, before make_response_promise takes the sender away.
  bool forwarded = from_peer(self);
  auto rp = self->make_response_promise<T>();
  when_ready(self, [self, rp, topic, forwarded, xs...]() mutable {
    if (self->state.shutting_down) {
      rp.deliver(failed(self, make_error(ec::coordinator_not_available,
                                         "the node is shutting down")));
      return;
    }
    auto home = dlq_home(self, topic);
    if (!home.local && !home.err && forwarded)
      home.err = make_error(ec::coordinator_not_available,
                            "DLQ " + topic + ": its home moved away from node "
                              + std::to_string(self->state.cfg.node_id));
    if (!home.local) {
      if (home.err)
        rp.deliver(failed(self, std::move(home.err)));
      else
        forward_for(self, rp, home.node, home.remote, dlq_forward_timeout,
                  std::move(xs)...);
      return;
    }
    relay(self, rp, dlq_manager_of(self), std::move(xs)...);
  });
  return rp;
}

/// `dlq list`: the local manager's list; in a cluster each DLQ's entry
/// (its redriven count and depth come from the marks) is replaced by the
/// one of its home node, asked once per home (a peer's list request is
/// answered locally). A home that cannot be asked leaves the local entry.
caf::result<std::vector<dlq_info>> list_dlqs_at_homes(self_ptr self) {
  bool forwarded = from_peer(self); // before make_response_promise (see from_peer)
  auto rp = self->make_response_promise<std::vector<dlq_info>>();
  when_ready(self, [self, rp, forwarded]() mutable {
    if (self->state.shutting_down) {
      rp.deliver(failed(self, make_error(ec::coordinator_not_available,
                                         "the node is shutting down")));
      return;
    }
    if (!cluster_mode(self->state) || forwarded) {
      relay(self, rp, dlq_manager_of(self), list_atom_v, dlq_atom_v);
      return;
    }
    self->request(dlq_manager_of(self), caf::infinite, list_atom_v, dlq_atom_v)
      .then(
        [self, rp](std::vector<dlq_info>& local) mutable {
          auto out = std::make_shared<std::vector<dlq_info>>(std::move(local));
          std::map<caf::actor_addr,
                   std::pair<broker_actor, std::vector<size_t>>>
            homes;
          for (size_t i = 0; i < out->size(); ++i) {
            auto home = dlq_home(self, (*out)[i].topic);
            if (home.local || home.err)
              continue;
            auto& h = homes[caf::actor_cast<caf::actor_addr>(home.remote)];
            h.first = home.remote;
            h.second.push_back(i);
          }
          if (homes.empty()) {
            rp.deliver(std::move(*out));
            return;
          }
          auto pending = std::make_shared<size_t>(homes.size());
          for (auto& [addr, h] : homes) {
            auto idx = h.second;
            auto done = [rp, out, pending]() mutable {
              if (--*pending == 0)
                rp.deliver(std::move(*out));
            };
            self
              ->request(h.first, std::chrono::seconds{30}, list_atom_v,
                        dlq_atom_v)
              .then(
                [out, idx, done](std::vector<dlq_info>& remote) mutable {
                  for (auto i : idx)
                    for (auto& x : remote)
                      if (x.topic == (*out)[i].topic)
                        (*out)[i] = std::move(x);
                  done();
                },
                [out, idx, done](caf::error& err) mutable {
                  log::warn("node: DLQ list: cannot ask the home of {}: {}",
                            (*out)[idx.front()].topic, err);
                  done();
                });
          }
        },
        [self, rp](caf::error& err) mutable {
          rp.deliver(failed(self, std::move(err)));
        });
  });
  return rp;
}


caf::result<dlq_show_response> show_dlq(self_ptr self, dlq_show_request& req) {
  auto topic = req.topic;
  return to_dlq_at<dlq_show_response>(self, topic, show_atom_v,
                                      std::move(req));
}

caf::result<dlq_redrive_response> redrive_dlq(self_ptr self,
                                              dlq_redrive_request& req) {
  auto topic = req.topic;
  return to_dlq_at<dlq_redrive_response>(self, topic, redrive_atom_v,
                                         std::move(req));
}

caf::result<dlq_purge_response> purge_dlq(self_ptr self,
                                          dlq_purge_request& req) {
  auto topic = req.topic;
  return to_dlq_at<dlq_purge_response>(self, topic, purge_atom_v,
                                       std::move(req));
}

} // namespace ferry::node_detail
