#include "actors/client/leader_links.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <algorithm>

namespace ferry {

namespace {

/// An endpoint a client can dial: a wildcard listen address ("0.0.0.0",
/// "::") or a missing port names no particular host.
bool dialable(const broker_endpoint& ep) {
  return ep.port != 0 && !ep.host.empty() && ep.host != "0.0.0.0"
         && ep.host != "::" && ep.host != "[::]";
}

} // namespace

leader_links::leader_links(bool enabled)
  : enabled_(enabled), conns_(std::make_shared<std::vector<connection_actor>>()) {
}

void leader_links::set_leaders(const std::vector<topic_metadata>& topics) {
  leaders_.clear();
  for (auto& t : topics)
    for (auto& pa : t.partitions)
      if (pa.leader >= 0)
        leaders_[topic_partition{t.name, pa.partition}] = pa.leader;
}

bool leader_links::hint(const topic_partition& tp, int32_t leader) {
  if (leader < 0)
    return false;
  auto& ld = leaders_[tp];
  if (ld == leader)
    return false;
  ld = leader;
  return true;
}

int32_t leader_links::leader_of(const topic_partition& tp) const {
  auto i = leaders_.find(tp);
  return i == leaders_.end() ? -1 : i->second;
}

void leader_links::set_nodes(const std::vector<node_info>& nodes) {
  endpoints_.clear();
  for (auto& n : nodes)
    endpoints_[n.id] = broker_endpoint{n.host, n.port};
}

std::pair<broker_actor, int32_t>
leader_links::route(const topic_partition& tp, caf::actor_system& sys,
                    const connection_listener& listener) {
  if (!enabled_)
    return {broker_actor{}, -1};
  auto node = leader_of(tp);
  if (node < 0)
    return {broker_actor{}, -1};
  auto i = links_.find(node);
  if (i == links_.end()) {
    auto e = endpoints_.find(node);
    if (e == endpoints_.end() || !dialable(e->second))
      return {broker_actor{}, -1};
    connection_config cc;
    cc.endpoints = {e->second};
    cc.host = e->second.host;
    cc.port = e->second.port;
    auto conn = spawn_connection(sys, std::move(cc));
    conns_->push_back(conn);
    caf::anon_send(conn, subscribe_atom_v, listener);
    i = links_.emplace(node, link{e->second, conn, broker_actor{}}).first;
  }
  if (!i->second.broker)
    return {broker_actor{}, -1};
  return {i->second.broker, node};
}

std::optional<int32_t> leader_links::on_connect(const caf::actor_addr& from,
                                                broker_actor hdl) {
  for (auto& [node, l] : links_)
    if (l.conn.address() == from) {
      l.broker = std::move(hdl);
      return node;
    }
  return std::nullopt;
}

void leader_links::prune(const std::set<topic_partition>& partitions,
                         const std::set<int32_t>& busy) {
  std::set<int32_t> wanted;
  for (auto& tp : partitions)
    if (auto node = leader_of(tp); node >= 0)
      wanted.insert(node);
  for (auto i = links_.begin(); i != links_.end();) {
    auto e = endpoints_.find(i->first);
    bool moved = e == endpoints_.end() || !(e->second == i->second.ep);
    if ((wanted.count(i->first) > 0 && !moved) || busy.count(i->first) > 0) {
      ++i;
      continue;
    }
    auto next = std::next(i);
    close(i);
    i = next;
  }
}

void leader_links::close(std::map<int32_t, link>::iterator i) {
  caf::anon_send(i->second.conn, stop_atom_v);
  std::erase(*conns_, i->second.conn);
  links_.erase(i);
}

void leader_links::stop_all() {
  while (!links_.empty())
    close(links_.begin());
}

std::function<void(const caf::error&)> leader_links::stopper() const {
  return [conns = conns_](const caf::error&) {
    for (auto& c : *conns)
      caf::anon_send(c, stop_atom_v);
    conns->clear();
  };
}

} // namespace ferry
