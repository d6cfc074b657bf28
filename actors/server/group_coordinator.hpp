#pragma once
// group_coordinator: the coordinator of one stream-mode consumer group (Kafka
// semantics). One actor per group; the broker routes the group's requests to
// it and forwards topic metadata (update_atom) to it.
//
// State machine (Kafka's):
//
//   Empty --join--> PreparingRebalance --all known members rejoined, or the
//   rebalance timeout (stragglers removed)--> CompletingRebalance --every
//   member synced--> Stable --join of a new member / changed subscription /
//   leave / session expiry / partition count change--> PreparingRebalance
//
// A rebalance that ends with no members leaves the group Empty. Each completed
// rebalance increments the generation; the assignment is computed here (server
// side) with the assignor every member supports (choose_assignor) and handed
// out by sync. Join responses wait (response promises) until the rebalance
// completes; nothing blocks except the offset store's LMDB commit.
//
// Timers are delayed (expire_atom, id, token) messages to self; a timer whose
// token is no longer current is ignored, so they work under virtual time.
// Per member: the session timeout (reset by join, sync, heartbeat, commit).
// Per group: the rebalance timeout (max over the members) and the initial
// rebalance delay (group.initial.rebalance.delay.ms) of an Empty group.
//
// Static members (KIP-345): a member that rejoins with a known group instance
// id and no member id replaces the old member id and keeps its assignment
// without a rebalance (unless its subscription changed); requests that still
// carry the old member id get fenced_instance_id.
//
// Cooperative-sticky: partitions moving between members are first only
// revoked; once every member synced that generation, the coordinator starts
// the follow-up rebalance itself (members see rebalance_in_progress on their
// next heartbeat and rejoin without the revoked partitions).
//
// Client-side groups (Kafka clients; join_group_request::protocol_type not
// empty, "consumer" for Kafka consumers): the protocol names and metadata
// are opaque; the protocol is the one every member supports that most
// members prefer (Kafka's vote); the leader (kept across generations while
// it stays) gets every member's metadata in its join answer and hands out
// the assignments in its sync. Other members' syncs wait for the leader's
// (a rebalance starting first answers them rebalance_in_progress); the
// leader's sync makes the group Stable. For "consumer" groups the
// assignment bytes are read (ConsumerProtocol) to show each member's
// partitions in describe and the lag metrics. A known member's rejoin
// rebalances when its metadata changed or it is the leader (Kafka's rule).
// A group has one protocol type: a join with another gets
// inconsistent_group_protocol.
//
// Offsets: commit is durable in the offset_store before the reply. Describe
// and reset ask the broker handle for log start (-2) and end (-1) offsets.
//
// Metrics (with cfg.probe): members after every join, leave and expiry;
// committed offsets on every commit and reset; and every metrics_interval a
// refresh (an (expire_atom, "#metrics", token) timer) that reads the
// group's committed offsets and asks the broker, per partition, for log
// start and end and, when behind, for one batch at the first unconsumed
// offset (fetch with replica_id -2, max_bytes 1: one batch, not counted as
// consumer traffic) to get that record's timestamp:
//   lag         = max(0, HW - max(committed, log start))
//   lag_seconds = lag > 0 ? (now - timestamp of the record at
//                 max(committed, log start)) / 1000 : 0
// Partitions without a committed offset have no series; partitions whose
// topic is gone (unknown_topic / unknown_partition) lose theirs. A group that
// has neither an offset-store entry nor members (never used, or deleted) has
// no series at all.

#include "actors/protocol/interfaces.hpp"
#include "broker/assignors.hpp"
#include "broker/offset_store.hpp"
#include "broker/partition_log.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace ferry {

namespace metrics {
class group_probe;
} // namespace metrics

/// How to run a group coordinator.
struct group_config {
  /// The group's name (requests naming another group get invalid_request).
  std::string group;
  /// Where offsets and the group's entry live. Shared by the coordinators of
  /// a node; required.
  std::shared_ptr<offset_store> offsets;
  /// Asked for list offsets (describe lag, reset). May be null: describe then
  /// reports log offsets and lag as -1, and reset fails with
  /// coordinator_not_available.
  broker_actor broker;
  /// Initial topic metadata (later ones arrive as update_atom messages).
  std::vector<topic_metadata> topics;
  /// group.initial.rebalance.delay.ms: how long the first rebalance of an
  /// Empty group waits for more members (0 in tests).
  caf::timespan initial_rebalance_delay = std::chrono::seconds{3};
  /// group.min/max.session.timeout.ms: the accepted session timeouts.
  caf::timespan min_session_timeout = std::chrono::milliseconds{6000};
  caf::timespan max_session_timeout = std::chrono::minutes{30};
  /// Timeout of requests to the broker handle.
  caf::timespan broker_timeout = std::chrono::seconds{10};
  /// Seeds the member id suffixes; 0 = from std::random_device.
  uint64_t member_id_seed = 0;
  /// Metrics of this group; null: none (and no metrics timer). One per
  /// group (not shared via defaults).
  std::shared_ptr<metrics::group_probe> probe;
  /// Period of the lag refresh (see the file comment).
  caf::timespan metrics_interval = std::chrono::seconds{10};
  /// Wall clock for lag seconds; empty means the system clock.
  clock_fn clock;
  /// Cluster: the __consumer_state partition of this group
  /// (broker/consumer_state.hpp). Non-empty: every commit (and reset) is
  /// also produced there with acks=all through `broker`, and answered only
  /// once that write is acknowledged (coordinator_not_available otherwise:
  /// the client retries). Empty: the local offset store alone (one node).
  std::string state_topic;
  partition_id state_partition{0};
};

/// Kafka's group states.
enum class group_phase : uint8_t {
  empty,
  preparing_rebalance,
  completing_rebalance,
  stable,
};

/// "Empty", "PreparingRebalance", "CompletingRebalance", "Stable".
const char* to_string(group_phase x);

/// One member of the group, as the coordinator tracks it.
struct group_member {
  std::string member_id;
  std::string group_instance_id; ///< "" for dynamic members
  std::string client_id;
  caf::timespan session_timeout{0};
  caf::timespan rebalance_timeout{0};
  std::vector<std::string> assignors;
  std::vector<std::string> topics;
  /// What the member said it owns when it last joined (cooperative).
  std::vector<topic_partition> owned;
  /// Its partitions in the current generation.
  std::vector<topic_partition> assignment;
  /// Client-side groups: the type, one metadata per name in `assignors`,
  /// the assignment bytes from the leader's sync, and a sync waiting for it.
  std::string protocol_type;
  std::vector<std::string> protocol_metadata;
  std::string assignment_bytes;
  caf::typed_response_promise<sync_group_response> sync_promise;
  /// Pending while the member waits for the rebalance to complete.
  caf::typed_response_promise<join_group_response> join_promise;
  bool awaiting_join = false;
  /// Synced in the current generation.
  bool synced = false;
  /// The token of its live session timer.
  uint64_t session_token = 0;
  /// The highest commit sequence seen from it under this member id
  /// (commit_offsets_request::sequence).
  int64_t commit_sequence = 0;
};

struct group_state {
  group_config cfg;
  group_phase phase = group_phase::empty;
  int32_t generation = 0;
  /// Assignor (protocol) of the current generation.
  std::string assignor;
  /// "" (server-side assignment) or the client-side protocol type of the
  /// current generation.
  std::string protocol_type;
  std::string leader;
  /// By member id.
  std::map<std::string, group_member> members;
  /// Group instance id -> member id of static members.
  std::map<std::string, std::string> static_members;
  /// Partition count per topic from the metadata.
  topic_partition_counts partitions;
  /// Timer tokens: every scheduled timer gets a fresh one.
  uint64_t next_token = 1;
  uint64_t rebalance_token = 0;
  uint64_t delay_token = 0;
  /// The initial rebalance delay is running.
  bool delay_pending = false;
  /// A member joined while the initial delay ran (extends it).
  bool joined_during_delay = false;
  /// What is left of the rebalance timeout for extending the initial delay.
  caf::timespan delay_remaining{0};
  /// The current generation withheld partitions (cooperative-sticky).
  bool revocation_pending = false;
  /// The group has an entry in the offset store.
  bool registered = false;
  /// Cluster mode: commits are numbered as they are made; a replicated
  /// commit is stored here only for partitions no later commit stored
  /// already (acknowledgements may come back out of order).
  uint64_t commit_seq = 0;
  std::map<partition_ref, uint64_t> stored_seq;
  /// Cluster mode: the numbers (commit_seq) of the commits being
  /// replicated now, and the offset fetches that wait for them: each for
  /// the commits in flight when it came (up to its `after`), so a fetch
  /// never shows offsets older than a commit whose outcome is pending, and
  /// later commits cannot keep it waiting.
  std::set<uint64_t> commits_in_flight;
  struct waiting_fetch {
    caf::typed_response_promise<std::vector<partition_offset>> rp;
    fetch_offsets_request req;
    uint64_t after = 0;
  };
  std::vector<waiting_fetch> fetches_waiting;
  /// Token of the live metrics timer.
  uint64_t metrics_token = 0;
  /// A lag refresh waits for the broker's answers.
  bool metrics_refreshing = false;
  std::mt19937_64 rng;

  static inline const char* name = "group_coordinator";
};

/// Coordinates one consumer group. @pre cfg.offsets != nullptr
group_coordinator_actor::behavior_type
group_coordinator(group_coordinator_actor::stateful_pointer<group_state> self,
                  group_config cfg);

} // namespace ferry
