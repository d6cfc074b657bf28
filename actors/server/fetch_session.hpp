#pragma once
// fetch_session: a follower node's one fetch loop to one leader node.
//
// Every follower replica on this node whose leader is node L sends its
// (fetch_atom, fetch_request) here instead of to L's broker (the node hands
// the replicas this actor as their leader's handle). The session carries
// them to L in rounds, (fetch_atom, fetch_round), one request/response pair
// per round for all partitions (Kafka's replica fetcher per broker pair with
// incremental fetch sessions, KIP-227):
// - a round carries only the long polls that started since the last round
//   (a replica asks again after it appended and synced what it got);
// - L keeps each long poll, parked in its replica exactly as a single fetch
//   would be, until the replica answers it (data, a divergence, an error,
//   or nothing after its max_wait_ms), and answers a round with the answers
//   that came in since its last round: at once if there are any, else when
//   the first one comes;
// - the session keeps one round waiting at L; new long polls go in a second
//   round, which makes L answer the waiting one (L's answer then holds what
//   came meanwhile, possibly nothing).
// So a partition with nothing new costs nothing per round, and a busy one
// one answer in some round: many partitions share each round trip.
//
// A round that fails (the link went down, timed out) or a session L does
// not know (it restarted) fails every long poll L held: the replicas fetch
// again after their backoff, in a new session (a new incarnation number, so
// L drops what it kept for the old one).
//
// Thread-free: an event-based actor on the node's scheduler. Off by default
// (ferryd --fetch-sessions); see actors/README.md, "Fetch sessions".

#include "actors/protocol/interfaces.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <cstdint>

namespace ferry {

using fetch_session_actor = caf::typed_actor<
  /// A follower replica's fetch (answered when the session has something
  /// for it; see the file comment).
  caf::replies_to<fetch_atom, fetch_request>::with<fetch_response>,
  /// The leader node's broker (a new link: later rounds go there); null
  /// while the link is down (requests wait).
  caf::reacts_to<update_atom, caf::actor>,
  /// Internal: the linger of round n is over.
  caf::reacts_to<tick_atom, uint64_t>>;

struct fetch_session_config {
  /// Node ids: this node (the follower) and the leader node.
  int32_t node_id = -1;
  int32_t leader_id = -1;
  caf::actor leader_broker;
  /// A round is given up when unanswered this long past the longest
  /// max_wait_ms among its session's long polls.
  std::chrono::milliseconds round_margin{10000};
  /// Rounds in flight at once (one waiting at the leader, one carrying new
  /// long polls).
  size_t max_rounds_out = 2;
  /// Each long poll asks for at most this much (the leader answers at least
  /// one whole batch); bounds a round's answer when many partitions catch up.
  int32_t max_partition_bytes = 1 << 20;
};

fetch_session_actor spawn_fetch_session(caf::actor_system& sys,
                                        fetch_session_config cfg);

} // namespace ferry
