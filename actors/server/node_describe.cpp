// The node actor's cluster description: the nodes as this node knows them,
// cluster and topic describe. (See node_internal.hpp for how the node's files
// divide the work.)

#include "actors/server/node_internal.hpp"

namespace ferry::node_detail {

/// The cluster's nodes as this node knows them, with the endpoints clients
/// reach them at: the voters, then registered broker-only nodes, by id.
std::vector<node_info> cluster_nodes(self_ptr self) {
  auto& st = self->state;
  std::vector<node_info> out;
  node_info me;
  me.id = st.cfg.node_id;
  me.host = st.cfg.host;
  me.port = st.cfg.port ? st.cfg.port->load() : 0;
  me.http_port = st.cfg.http_port;
  me.metrics_port = st.cfg.metrics_port;
  me.kafka_host = st.cfg.kafka_host;
  me.kafka_port = st.cfg.kafka_port;
  me.alive = true;
  me.controller = !st.raft || st.raft_st.leader == st.cfg.node_id;
  if (!cluster_mode(st)) {
    out.push_back(std::move(me));
    return out;
  }
  std::map<int32_t, broker_registration> regs;
  if (st.machine)
    for (auto& b : st.machine->brokers())
      regs.emplace(b.id, b);
  std::set<int32_t> removing;
  if (st.machine)
    for (auto id : st.machine->removing())
      removing.insert(id);
  // The voters (always), then the registered broker-only nodes, by id.
  std::map<int32_t, node_info> nodes;
  // With peer ports (ferryd --peer-port) the voters' entries name the
  // ports the nodes dial each other at, which clients cannot use: a voter
  // shows the port it registered, and none before that.
  for (auto& v : st.cfg.voters) {
    node_info ni;
    ni.id = v.id;
    ni.host = v.host;
    ni.port = st.cfg.peer_port ? 0 : v.port;
    nodes[v.id] = ni;
  }
  for (auto& [id, b] : regs) {
    if (nodes.count(id) > 0)
      continue;
    node_info ni;
    ni.id = id;
    ni.host = b.host;
    ni.port = b.port;
    ni.voter = false;
    nodes[id] = ni;
  }
  if (nodes.count(st.cfg.node_id) == 0) {
    me.voter = false; // not registered yet (or removed): still shown
    nodes[st.cfg.node_id] = me;
  }
  for (auto& [id, ni] : nodes) {
    if (id == st.cfg.node_id) {
      auto voter = ni.voter;
      ni = me;
      ni.voter = voter;
    } else {
      if (auto r = regs.find(id); r != regs.end()) {
        // The endpoint the broker registered (where clients reach it)
        // over this node's voter entry, which may name a different route
        // (a proxy, a NAT) from this node to that one.
        if (!r->second.host.empty() && r->second.port != 0) {
          ni.host = r->second.host;
          ni.port = r->second.port;
        }
        ni.http_port = r->second.http_port;
        ni.metrics_port = r->second.metrics_port;
        ni.kafka_host = r->second.kafka_host;
        ni.kafka_port = r->second.kafka_port;
      }
      ni.alive = st.peers.count(id) > 0;
    }
    ni.controller = id == st.raft_st.leader;
    ni.removing = removing.count(id) > 0;
    out.push_back(ni);
  }
  return out;
}

/// Answers `rp` with the nodes, the controller (the Raft leader: this node
/// on a single node) and the live state of every topic.
void describe_cluster(self_ptr self, std::vector<topic_metadata> topics,
                      caf::typed_response_promise<cluster_description> rp) {
  auto& st = self->state;
  auto cd = std::make_shared<cluster_description>();
  cd->cluster_id = st.cfg.cluster_id;
  cd->controller = st.cfg.node_id;
  cd->raft_term = 0;
  if (st.raft) {
    cd->controller = st.raft_st.leader;
    cd->raft_term = static_cast<int64_t>(st.raft_st.term);
  }
  cd->nodes = cluster_nodes(self);
  cd->topics.resize(topics.size());
  if (topics.empty()) {
    rp.deliver(std::move(*cd));
    return;
  }
  auto pending = std::make_shared<size_t>(topics.size());
  for (size_t i = 0; i < topics.size(); ++i) {
    gather_status(self, topics[i],
                  [rp, cd, pending, i](topic_description td) mutable {
                    cd->topics[i] = std::move(td);
                    if (--*pending == 0)
                      rp.deliver(std::move(*cd));
                  });
  }
}


caf::result<topic_description> describe_topic(self_ptr self,
                                              std::string& name) {
  auto rp = self->make_response_promise<topic_description>();
  // Asked once the node is ready (see list_topics): a restarted node's
  // metadata may not know the topic yet.
  // In a cluster also once it knows the topic (a create answered by
  // another node reaches this one a moment later).
  when_ready(self, [self, rp, name = std::move(name)]() mutable {
    auto topic = name;
    when_topics_known(self, {std::move(topic)}, [self, rp, name]() mutable {
      auto& st = self->state;
      self
        ->request(st.cfg.metadata, st.cfg.status_timeout, describe_atom_v,
                  topic_atom_v, std::move(name))
        .then(
          [self, rp](topic_metadata& md) mutable {
            gather_status(self, md, [rp](topic_description td) mutable {
              rp.deliver(std::move(td));
            });
          },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
    });
  });
  return rp;
}

caf::result<cluster_description> describe_cluster_request(self_ptr self) {
  auto rp = self->make_response_promise<cluster_description>();
  // The list is asked for once the node is ready: before, the metadata
  // may not have caught up (a Raft member restoring its snapshot).
  when_ready(self, [self, rp]() mutable {
    auto& st = self->state;
    self->request(st.cfg.metadata, st.cfg.status_timeout, list_atom_v,
                  topic_atom_v)
      .then(
        [self, rp](std::vector<topic_metadata>& list) mutable {
          describe_cluster(self, std::move(list), rp);
        },
        [self, rp](caf::error& err) mutable {
          rp.deliver(failed(self, std::move(err)));
        });
  });
  return rp;
}

} // namespace ferry::node_detail
