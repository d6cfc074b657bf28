#pragma once
// The front door of a node's client port (ferryd --peer-port).
//
// Why it exists: CAF 0.17.6's BASP lets anyone on a connection of an actor
// system send any message to any actor of that system that ever crossed a
// connection (actors are addressed by small sequential ids), name a local
// actor as the sender, and answer requests (responses are matched by
// request id only). Credentials inside messages cannot cover that. So with
// --peer-port a node runs two actor systems: its own (the node actor,
// replicas, Raft, coordinators, the HTTP and Kafka front ends), listening
// on the peer port for the other nodes only (with TLS: certificates from
// --peer-tls-ca); and the clients' system, listening on --port, in which
// this front door is the only actor ever published or sent to a client.
// A client's messages to any other id land in the clients' system, which
// holds no actor of the node's, and have no route to the node's system
// (the clients' system never connects to it: the front door reaches the
// node in-process).
//
// What it passes on: every request to the node actor, keeping the sender
// and the request id, so the node answers the client directly (through the
// clients' system's connection). What it refuses:
// - the requests only nodes send each other (is_node_to_node_request():
//   Raft, registrations, ISR changes, a follower's fetch, link probes):
//   authorization_failed;
// - with sessions on, an envelope carrying the cluster credential (the
//   nodes' own, which the node trusts without users and ACLs):
//   authentication_failed. The operator credential (ferryctl
//   --cluster-secret-file) and users' session tokens pass.
// Each refusal is logged (the first ten, then every thousandth) and written
// to the audit log.
// - a response (a message with a response id): dropped; the front door
//   asks nothing, and the node must never see a client's forged answer.
//
// The front door has no mailbox (like CAF's decorators): each message is
// checked and handed to the node on the caller's thread, without an
// execution unit, so the node's actors keep running on the node system's
// scheduler. It has no system message handling, so an exit_msg with reason
// kill or a forged down_msg from a client is refused like any other
// node-to-node message instead of ending it.

#include "actors/protocol/interfaces.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace ferry {

class audit_log;

struct front_door_config {
  /// The node actor (in the node's actor system).
  caf::actor node;
  /// The cluster credential refused in envelopes; empty: sessions off.
  std::string cluster_credential;
  /// Where refusals are recorded (one line each, principal "anonymous":
  /// the front door checks no credential); null: nowhere.
  std::shared_ptr<audit_log> audit;
};

/// Makes the front door in `sys` (the clients' actor system): an actor
/// without a mailbox, so nothing a client sends can end it; it lives while
/// referenced (the published port holds it). After the node ended it
/// answers requests with request_receiver_down (CAF's bounce).
broker_actor spawn_front_door(caf::actor_system& sys, front_door_config cfg);

} // namespace ferry
