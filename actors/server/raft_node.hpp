#pragma once
// raft_node: one member of the Raft metadata quorum as a CAF actor. It wraps
// broker/raft_core.hpp (the algorithm) over a raft_log_store (LMDB in
// production: broker/raft_storage.hpp), drives it with a timer, moves its
// messages between peers, and applies committed commands to a
// raft_state_machine. A later raft_metadata actor implements metadata_actor
// on top of it: its commands are encoded metadata changes.
//
// Transport: peers are plain actor handles that receive
// (raft_atom, raft_message) and are told apart by raft_message::to; a node
// sends each outgoing message to the handle of its `to`. Production passes
// the peers' raft actors (local or remote proxies, replaced after a
// reconnect with connect_atom); tests pass a network actor that drops,
// duplicates, reorders and partitions. Messages to a peer without a handle
// are dropped (Raft retransmits).
//
// Clock: a delayed tick_atom every tick_interval (virtual time on CAF's test
// coordinator). Each tick is one raft_core::tick().
//
// Proposals: propose(bytes) is answered once the entry is committed and
// applied here, with its index and apply()'s result. A non-leader answers
// not_leader at once; an entry overwritten by a newer leader is answered
// not_leader when the overwriting entry commits. A leader cut off from the
// quorum never answers (callers use a request timeout), until it learns the
// outcome after the partition heals.
//
// State machine: apply() for each committed command, in index order, once
// per incarnation of the actor; restore() with a snapshot first when one
// exists (at start, or when the leader installs one). After
// snapshot_threshold applied entries beyond the last snapshot, the node
// takes snapshot() and compacts the log. All calls run in the actor.
//
// Cost: every proposal is one durable LMDB commit on the leader (~270 us on
// these machines) and every append message one on each follower, so this is
// a metadata log (thousands of changes per second), not a data path.
//
// Failure: a storage error (or a failing restore) stops the actor with that
// error; committed data is safe in the store and a respawn continues.
//
// Observers (raft_observer below): a node that is not a voter (a
// broker-only node) still needs the replicated metadata. It runs a
// raft_observer instead of a raft_node: same raft_actor interface, but it
// takes no part in Raft at all (never votes, never campaigns, never counts
// in a majority, keeps no log). Every poll_interval it asks one voter for
// the committed entries after its last applied index ((fetch_atom,
// raft_atom, index), answered by raft_node from raft_core::committed_after:
// the snapshot first when those entries were compacted away) and applies
// them to its state machine. Committed entries are final, so any voter may
// answer: it asks the leader the voters name, and the next voter in turn
// when that one fails. It starts empty (nothing durable): a restarted
// observer fetches the snapshot and the log again. Its status has the
// leader, term and commit index of the newest answer, so "applied reached
// commit" means it caught up with what that voter knew; propose answers
// not_leader with "leader=<id>" (the caller forwards writes there).

#include "actors/protocol/interfaces.hpp"
#include "broker/raft_core.hpp"

#include <caf/actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// What the replicated log drives. Implementations must be deterministic:
/// every node applies the same commands in the same order and must end in
/// the same state.
class raft_state_machine {
public:
  virtual ~raft_state_machine() = default;
  /// Applies the committed command at `index`; the result goes back to the
  /// proposer (if it was proposed on this node).
  virtual std::string apply(uint64_t index, std::string_view command) = 0;
  /// The whole state, as restore() takes it.
  virtual std::string snapshot() = 0;
  /// Replaces the whole state by a snapshot taken at `index`.
  virtual caf::error restore(uint64_t index, std::string_view snapshot) = 0;
};

struct raft_node_config {
  /// Id, voters, election and heartbeat ticks, RNG seed.
  raft_config raft;
  /// Durable Raft state (shared with whoever respawns the node).
  std::shared_ptr<raft_log_store> store;
  /// The state machine this node applies to (fresh or kept on respawn:
  /// restore() resets it either way when there is a snapshot).
  std::shared_ptr<raft_state_machine> machine;
  /// Peer id -> the actor that takes (raft_atom, raft_message) for it.
  std::map<int32_t, caf::actor> peers;
  /// Length of one Raft tick.
  caf::timespan tick_interval = std::chrono::milliseconds{50};
  /// Compact once this many entries are applied beyond the last snapshot
  /// (0 = never).
  uint64_t snapshot_threshold = 1000;
  /// A proposal while no leader is known (at start, during an election)
  /// waits this long for one: proposed here if this node wins, else
  /// answered not_leader with the winner's id (the node forwards it there).
  /// 0: answered not_leader (leader=-1) at once.
  caf::timespan leader_wait = std::chrono::seconds{3};
};

struct raft_node_state {
  raft_node_config cfg;
  std::unique_ptr<raft_core> core;
  /// Index of the last entry applied to the state machine.
  uint64_t last_applied = 0;
  /// Proposals waiting for their index: index -> (term, promise).
  struct pending {
    uint64_t term = 0;
    caf::typed_response_promise<raft_applied> promise;
  };
  std::map<uint64_t, pending> waiting;
  /// Proposals that arrived while no leader was known (see leader_wait).
  struct leaderless_proposal {
    std::string command;
    caf::typed_response_promise<raft_applied> promise;
    caf::actor_clock::time_point deadline;
  };
  std::vector<leaderless_proposal> leaderless;
  std::vector<caf::actor> subscribers;
  /// Role, term and leader last reported to subscribers.
  raft_status reported;
  /// Failed store writes logged so far, and when the next line may go out.
  uint64_t store_errors_logged = 0;
  caf::actor_clock::time_point store_error_log_at;
  static inline const char* name = "raft-node";
};

/// A Raft member. @pre cfg.store and cfg.machine are set; cfg.raft is valid
/// (else the actor quits with ec::invalid_argument).
raft_actor::behavior_type
raft_node(raft_actor::stateful_pointer<raft_node_state> self,
          raft_node_config cfg);

/// At most one log line per this period about failed Raft store writes.
constexpr auto store_error_log_period = std::chrono::seconds{5};

/// At most this many entries per answer to an observer's fetch.
constexpr size_t observer_chunk_entries = 256;

struct raft_observer_config {
  /// This node's id (not a voter).
  int32_t id = -1;
  /// The voters' ids: only they are asked.
  std::vector<int32_t> voters;
  /// What the committed commands are applied to.
  std::shared_ptr<raft_state_machine> machine;
  /// Voter id -> an actor answering (fetch_atom, raft_atom, uint64_t) for
  /// it (production: the voter's node; tests: the raft_node itself).
  /// Replaced with connect_atom (a null handle: the link is down).
  std::map<int32_t, caf::actor> peers;
  /// How often it asks for new entries.
  caf::timespan poll_interval = std::chrono::milliseconds{50};
  /// How long one fetch may take before the next voter is asked.
  caf::timespan request_timeout = std::chrono::seconds{1};
};

struct raft_observer_state {
  raft_observer_config cfg;
  uint64_t last_applied = 0;
  uint64_t snapshot_index = 0;
  /// The newest term, leader and commit index the voters told.
  uint64_t term = 0;
  int32_t leader = -1;
  uint64_t commit = 0;
  bool fetching = false;
  /// The leader did not answer the last fetch: ask the others in turn.
  bool leader_failed = false;
  size_t rotation = 0;
  std::vector<caf::actor> subscribers;
  raft_status reported;
  static inline const char* name = "raft-observer";
};

/// A non-voting follower of the metadata log (see "Observers" above).
/// @pre cfg.machine set, cfg.voters not empty.
raft_actor::behavior_type
raft_observer(raft_actor::stateful_pointer<raft_observer_state> self,
              raft_observer_config cfg);

} // namespace ferry
