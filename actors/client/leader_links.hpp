#pragma once
// The client library's connections to partition leaders, as Kafka clients
// keep one connection per broker: a producer or consumer learns each
// partition's leader from the topic metadata (list_atom, topic_atom) and
// where each node is reached from (list_atom, broker_atom), and opens a
// connection_actor of its own to every node that leads one of its
// partitions. Its partition requests go there; while a leader is unknown,
// its endpoint cannot be dialed or its link is down, they go through the
// client's bootstrap connection, whose node relays them and names the
// leader in its answer (hint()).
//
// Owned by one client actor (no locking). The owner subscribes to each link
// as to its bootstrap connection: a (connect_atom, broker_actor) whose
// sender is a link goes to on_connect(). Link connections end with
// stop_all(), which the owner calls when it ends (also through the functor
// from stopper(), attached to the actor: it runs however the actor exits).

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"

#include <caf/actor_addr.hpp>
#include <caf/fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry {

class leader_links {
public:
  /// `enabled` false: route() always answers "no link" (everything goes
  /// through the bootstrap connection) and no link is ever opened.
  explicit leader_links(bool enabled = true);

  bool enabled() const { return enabled_; }

  /// Every partition's leader from a topic list (replaces what was known).
  void set_leaders(const std::vector<topic_metadata>& topics);

  /// A relayed answer named `leader` as tp's leader. True if that is new.
  bool hint(const topic_partition& tp, int32_t leader);

  /// tp's leader node, -1 if unknown.
  int32_t leader_of(const topic_partition& tp) const;

  /// Where the nodes are reached, from (list_atom, broker_atom).
  void set_nodes(const std::vector<node_info>& nodes);

  /// True if `node`'s endpoint is known.
  bool knows_node(int32_t node) const { return endpoints_.count(node) > 0; }

  /// The connected link to tp's leader and the leader's id; {nullptr, -1}
  /// when there is none (yet). Opens the link on first use (spawned in
  /// `sys`, `listener` subscribed) when the leader's endpoint is known and
  /// dialable: not a wildcard address such as 0.0.0.0.
  std::pair<broker_actor, int32_t> route(const topic_partition& tp,
                                         caf::actor_system& sys,
                                         const connection_listener& listener);

  /// For a (connect_atom, hdl) the owner received from `from`: the node id
  /// if `from` is one of the links (its handle is now `hdl`; null: lost),
  /// nullopt otherwise (the bootstrap connection, or a link closed since).
  std::optional<int32_t> on_connect(const caf::actor_addr& from, broker_actor hdl);

  /// Closes the links to nodes that lead none of `partitions` any more, or
  /// whose endpoint changed, except those in `busy` (requests in flight).
  void prune(const std::set<topic_partition>& partitions, const std::set<int32_t>& busy);

  /// Stops every link connection.
  void stop_all();

  /// A functor for attach_functor: stops every link the owner ever opened
  /// and did not close, when the owner ends.
  std::function<void(const caf::error&)> stopper() const;

  /// Open links (connected or not), for tests and logs.
  size_t size() const { return links_.size(); }

private:
  struct link {
    broker_endpoint ep;
    connection_actor conn;
    broker_actor broker; ///< null while (re)connecting
  };

  void close(std::map<int32_t, link>::iterator i);

  bool enabled_;
  std::unordered_map<topic_partition, int32_t, topic_partition_hash> leaders_;
  std::map<int32_t, broker_endpoint> endpoints_;
  std::map<int32_t, link> links_;
  /// The link connections not yet stopped, shared with stopper().
  std::shared_ptr<std::vector<connection_actor>> conns_;
};

} // namespace ferry
