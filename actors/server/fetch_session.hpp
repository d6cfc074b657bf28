#pragma once
// fetch_session: a follower node's one fetch loop to one leader node.
//
// Every follower replica on this node whose leader is node L sends its
// (fetch_atom, fetch_request) here instead of to L's broker (the node hands
// the replicas this actor as their leader's handle). The session sends all
// the requests it holds to L as ONE (fetch_atom, std::vector<fetch_request>)
// per round (Kafka's replica fetcher thread per broker pair, KIP-227), and
// answers each replica from the round's result:
// - data, a divergence, a moved log start, an error, or a high watermark
//   that moved: the replica gets it (and fetches again, from the session);
// - nothing (`waiting`, or an empty answer with the same high watermark):
//   the request stays here for the next round, until it has waited its
//   max_wait_ms; then the replica gets the empty answer, as a single long
//   poll would have given it.
// A round that fails (the link went down, timed out) fails every request in
// it: the replicas retry after their backoff, as before. A round holds at
// most max_round_partitions requests (taken round-robin) asking for
// round_max_bytes together, so its answer stays bounded when a follower has
// much to catch up on many partitions.
//
// The next round waits for the replicas just answered to ask again (they
// append and sync first; without waiting, each would go in a round of its
// own), for at most `linger`. Requests that arrive while rounds are out go
// in a new round (up to max_rounds_out): the leader node then answers the
// round it holds parked for this follower (its partitions come back
// `waiting` and go again), so a partition whose data is waiting for this
// follower's ack never waits for another partition's long poll.
//
// Thread-free: an event-based actor on the node's scheduler. Experimental
// and off by default (ferryd --fetch-sessions): measured slower than one
// long poll per partition so far; see actors/README.md, "Fetch sessions".

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
  /// Node ids, for log lines.
  int32_t node_id = -1;
  int32_t leader_id = -1;
  caf::actor leader_broker;
  /// How long a round waits for the replicas it answered to ask again.
  std::chrono::milliseconds linger{2};
  /// A round is given up when unanswered this long past its max wait.
  std::chrono::milliseconds round_margin{10000};
  /// Bounds on one round: partitions in it, and the bytes they ask for
  /// together (each its share, at least min_partition_bytes, at most what
  /// its replica asked for; a replica answers at least one whole batch).
  size_t max_round_partitions = 512;
  /// Rounds in flight at once: requests that arrive while a round is
  /// parked at the leader (nothing for its partitions) go in a new one,
  /// which makes the leader answer the parked one (see serve_fetch_many).
  size_t max_rounds_out = 4;
  size_t round_max_bytes = 32u << 20;
  size_t min_partition_bytes = 64u << 10;
};

/// Nothing for a follower in answer `r` to `req`: no data, no divergence,
/// no log start past its offset (the session keeps such a request for the
/// next round; the leader node parks a round of only such answers).
inline bool fetch_is_idle(const fetch_request& req, const fetch_response& r) {
  return r.data.empty() && r.diverging_end < offset{0}
         && r.log_start <= req.from && r.next_offset == req.from;
}

fetch_session_actor spawn_fetch_session(caf::actor_system& sys,
                                        fetch_session_config cfg);

} // namespace ferry
