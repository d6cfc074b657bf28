// Repairs CAF 0.17.6's BASP routes to one peer node by closing every
// connection to it, so that both sides reconnect with a fresh handshake.
//
// Why: CAF's routing table (caf/io/basp/routing_table.hpp) keeps two maps, a
// node's connection (direct_by_nid_) and each connection's node
// (direct_by_hdl_). A client handshake that "selects" a connection the table
// never added - two connections between the same pair of nodes racing, as
// after a pause when both sides dropped and redialed at once - makes
// select_alternative() insert that connection mapped to no node while the
// peer's route points at it. From then on this node's messages to the peer
// still arrive, but everything the peer sends over that connection arrives
// with no sender (the sender's proxy is made from the connection's node), so
// this node's answers to the peer go nowhere: the peer sees the link as
// "connected but does not answer" while this node's own requests are
// answered, and the heartbeats keep the connection open. Nothing in CAF's
// API closes one connection, so this goes to the BASP broker itself on the
// middleman's thread (where the broker runs), puts the table back in a state
// its own cleanup handles, and closes the connections as CAF's heartbeat
// timeout would.

#pragma once

#include <caf/fwd.hpp>
#include <caf/node_id.hpp>

namespace ferry {

/// Closes every BASP connection of `sys` to `peer` and drops its routes and
/// proxies (as when the connections are lost). Returns at once; the work
/// runs on the middleman's multiplexer thread. A no-op without a connection.
void reset_basp_connections(caf::actor_system& sys, const caf::node_id& peer);

} // namespace ferry
