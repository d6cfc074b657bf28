#pragma once
// raft_metadata: the metadata_actor of every node (a node without --voters
// is a Raft quorum of one). It validates with broker/topic_config.hpp (topic
// names, config keys, replication factor), and every change is a command
// replicated through the local raft_node (actors/server/raft_node.hpp) and applied
// by a metadata_state_machine on every node.
//
// Commands and results use CAF's binary_serializer:
//   command: version byte 1, kind byte (metadata_command), then the fields:
//     create:    name, topic_config_v1 (the first eight fields)
//     create_v2: name, topic_config
//     remove:    name
//     alter:     name, map<string,string>
//     add_parts: name, int32 count
//     init_pid:  nothing
//     broker:    broker_registration (fenced=false registers, true fences);
//                kinds broker (6) and broker_v2 (14) hold older layouts
//                (without the Kafka listener / the peer port), broker_v3
//                (16) the current one
//     isr:       isr_change
//     reassign:  isr_change (target replicas in isr; empty completes)
//     remove_broker: int32 id
//     upsert_user: scram_credential (creates or replaces the credential)
//     delete_user: name
//     add_acl:     acl_entry (normalized; adding one twice keeps one)
//     remove_acl:  acl_entry (removes the equal entries; answers them)
//   result:  byte 0 then the topic_metadata / producer_identity, or
//            byte 1 then the ferry error code (uint8) and its context string.
//   snapshot: version byte 8, next producer id (int64), all topic_metadata,
//             all broker_registration, the moves in progress as isr_change,
//             the ids of the brokers being removed, the users'
//             scram_credential, the acl_entry list (versions 1 to 4,
//             without brokers / moves / removals / security, still restore).
//
// Users and ACLs (issue 16) are replicated like topics; after each change
// (and a restore) the state machine fills the node's security_registry
// (broker/security.hpp), which the front doors check requests against.
//
// Replica moves: reassign with a target adds the target's new replicas
// (replicas = old then new, ISR unchanged); the controller completes it
// (reassign with an empty list) once the whole target is in the ISR:
// replicas = target, ISR = ISR within target, and a leader outside the
// target hands over to the first live ISR member (epoch + 1).
//
// Members: the voters (fixed, --voters) and every broker that registered
// (a broker-only node joins by registering; fencing names members only).
//
// Removing a broker (remove_broker; only a broker-only node: voters are
// refused, and so is a removal that would leave fewer brokers that can hold
// replicas than some partition naming it has as replication factor): it is
// marked as being removed (no new replicas, no move targets) and after every
// applied command each partition that names it and is not moving starts a
// move whose target replaces it by the broker holding the fewest replicas
// (then the lowest id) among the placement brokers not in the partition;
// the controller completes these moves like any other. Once no partition
// names it, it is unregistered (it leaves brokers(); registering again
// brings it back).
//
// Brokers and leadership (the controller's decisions, applied identically
// everywhere): a fenced broker leaves every ISR (never as its last member)
// and every partition it led gets the first unfenced ISR member as leader
// with epoch + 1, or leader -1 (offline) when there is none: no unclean
// election. A fenced broker that registers again leads the offline
// partitions whose ISR names it (epoch + 1). ISR changes come from the
// partition's leader and apply only in its current epoch.
// Validation happens when a command is applied (so duplicates racing through
// the log are decided by log order, identically on every node); the leader
// also checks names and configs before proposing, with the same functions,
// so bad input never enters the log.
//
// Writes: forwarded to the local raft node. On a follower it answers
// not_leader with context "... leader=<id>" (-1 unknown); clients retry at
// that node (no forwarding). A leader cut off from the quorum answers
// request_timed_out after request_timeout (the change may still commit
// later).
//
// Reads (list, describe) come from the locally applied state: on a follower
// they may lag the leader by the entries not yet applied there.
//
// Subscribers: (update_atom, all topics) now and after every applied change
// (and after a snapshot restore) on every node, followers included, in apply
// order. The state machine sends them from the raft node's actor but with
// the raft_metadata actor as the sender (the node ignores topic updates
// from anyone but its metadata actor). init_pid does not
// change topics and sends nothing. Terminated subscribers are dropped.
//
// Partition assignment is deterministic: with b = the placement brokers
// sorted by id (the voters and the registered brokers, without the fenced
// ones and those being removed; voters count before they registered, as a
// fresh cluster creates topics while they register), partition p of a topic
// with replication factor rf gets replicas b[(p + k) % n] for k < rf, isr =
// the replicas, leader = the first of them, epoch 0. The replication factor
// may be at most min(max_replication_factor, n): policy_violation beyond.
//
// Producer ids: the next id is part of the replicated state; each init_pid
// is one log entry, so ids are unique across leader changes and restarts.

#include "actors/protocol/interfaces.hpp"
#include "broker/security.hpp"

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class raft_state_machine;

/// The kinds of replicated metadata commands (values are stable: they are in
/// the log).
enum class metadata_command : uint8_t {
  create = 1,
  remove = 2,
  alter = 3,
  add_parts = 4,
  init_pid = 5,
  broker = 6,
  isr = 7,
  reassign = 8,
  remove_broker = 9,
  upsert_user = 10,
  delete_user = 11,
  add_acl = 12,
  remove_acl = 13,
  /// A broker registration with its Kafka listener, without the peer port
  /// (still read); `broker` (6) holds the older layout without either.
  broker_v2 = 14,
  /// A topic create with topic_config as it is now (with cleanup.policy
  /// and the compaction settings); `create` (1) holds the older layout
  /// without them, still read.
  create_v2 = 15,
  /// A broker registration with its peer port (broker_registration as it
  /// is now); `broker_v2` (14) holds the layout without it, still read.
  broker_v3 = 16,
};

/// topic_config as command kind `create`, snapshots 1-6 and the legacy
/// LMDB topic records (metadata_import.hpp) store it: without
/// cleanup.policy and the compaction settings.
struct topic_config_v1 {
  topic_config cfg;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_config_v1& x) {
  auto& c = x.cfg;
  return f(caf::meta::type_name("ferry::topic_config"), c.partitions,
           c.replication_factor, c.retention_ms, c.retention_bytes,
           c.segment_bytes, c.segment_ms, c.max_message_bytes,
           c.min_insync_replicas);
}

/// topic_metadata as snapshots 1-6 store it.
struct topic_metadata_v1 {
  std::string name;
  topic_config_v1 config;
  std::vector<partition_assignment> partitions;

  topic_metadata upgrade() && {
    return topic_metadata{std::move(name), config.cfg, std::move(partitions)};
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, topic_metadata_v1& x) {
  return f(caf::meta::type_name("ferry::topic_metadata"), x.name, x.config,
           x.partitions);
}

/// Command encoders (see the file comment).
std::string encode_create_topic(const std::string& name,
                                const topic_config& tc);
std::string encode_delete_topic(const std::string& name);
std::string encode_alter_topic(const std::string& name,
                               const std::map<std::string, std::string>& ch);
std::string encode_add_partitions(const std::string& name, int32_t n);
std::string encode_init_pid();
std::string encode_broker(const broker_registration& reg);
std::string encode_isr_change(const isr_change& ch);
/// A replica move (target in ch.isr; empty: complete the move).
std::string encode_reassign(const isr_change& ch);
/// Removes a broker-only node (ferryctl cluster remove-node).
std::string encode_remove_broker(int32_t id);

std::string encode_upsert_user(const scram_credential& c);
std::string encode_delete_user(const std::string& name);
std::string encode_add_acl(const acl_entry& x);
std::string encode_remove_acl(const acl_entry& x);
/// Result decoders: the value, or the ferry error apply() returned.
caf::expected<user_info> decode_user_result(std::string_view result);
caf::expected<acl_entry> decode_acl_result(std::string_view result);
caf::expected<std::vector<acl_entry>>
decode_acls_result(std::string_view result);
caf::expected<topic_metadata> decode_topic_result(std::string_view result);
caf::expected<producer_identity> decode_pid_result(std::string_view result);
caf::expected<broker_registration>
decode_broker_result(std::string_view result);
caf::expected<partition_assignment>
decode_assignment_result(std::string_view result);

/// A metadata snapshot (the format restore() reads) holding `topics` and
/// the next producer id, with no brokers, moves or removals: the state a
/// data dir of the single-node metadata of before Raft-of-one starts from
/// (actors/server/metadata_import.hpp).
std::string encode_metadata_snapshot(int64_t next_producer_id,
                                     std::vector<topic_metadata> topics);

/// The replicated metadata state. apply/snapshot/restore run in the raft
/// node's actor; the read accessors and add_subscriber in the raft_metadata
/// actor, so all of them lock one mutex.
class metadata_state_machine {
public:
  /// `voters`: the quorum's node ids (the same list on every node).
  metadata_state_machine(std::vector<int32_t> voters,
                         int16_t max_replication_factor);

  /// A raft_state_machine adapter that drives this object.
  static std::shared_ptr<raft_state_machine>
  adapter(std::shared_ptr<metadata_state_machine> m);

  /// Applies one committed command; returns the encoded result.
  std::string apply(uint64_t index, std::string_view command);
  std::string snapshot();
  caf::error restore(uint64_t index, std::string_view snapshot);

  std::vector<topic_metadata> topics() const;
  /// Every broker registered (or fenced) so far.
  std::vector<broker_registration> brokers() const;
  /// Replica moves in progress (topic, partition, target in isr).
  std::vector<isr_change> reassignments() const;
  caf::expected<topic_metadata> topic(const std::string& name) const;
  /// The largest replication factor the configuration allows (the number
  /// of brokers that can hold replicas is checked separately).
  int16_t max_replication_factor() const;
  /// policy_violation when fewer brokers than `rf` can hold replicas now.
  caf::error check_replication_factor(int16_t rf) const;
  /// The brokers new replicas go to, by id: voters and registered brokers,
  /// without the fenced ones and those being removed.
  std::vector<int32_t> placement() const;
  /// Brokers being removed (their replicas are moving away).
  std::vector<int32_t> removing() const;
  /// The users (names and mechanisms, never keys) and the ACLs.
  std::vector<user_info> users() const;
  std::vector<acl_entry> acls() const;
  /// The registry to keep up to date with the users and ACLs (filled now).
  void set_security_registry(std::shared_ptr<security_registry> r);
  /// Sets the sender of topic updates (the raft_metadata actor; held weakly).
  void set_sender(caf::actor_addr sender);
  /// Adds a listener and sends it the current topic list.
  void add_subscriber(caf::actor listener);
  /// Drops a terminated listener.
  void remove_subscriber(const caf::actor_addr& listener);

private:
  /// The encoded result; `changed` when the topic list changed.
  caf::expected<std::string> apply_command(std::string_view command,
                                           bool& changed);
  bool fenced_locked(int32_t id) const;
  bool voter_locked(int32_t id) const;
  /// A voter or a registered broker.
  bool member_locked(int32_t id) const;
  std::vector<int32_t> placement_locked() const;
  caf::error check_rf_locked(int16_t rf) const;
  /// The broker that takes a seat given up by a departing one: the
  /// placement broker holding the fewest replicas (then the lowest id) that
  /// is not in `replicas`; -1: none.
  int32_t replacement_locked(const std::vector<int32_t>& replicas) const;
  /// Starts the moves off departing brokers (one per partition that names
  /// one and is not moving) and unregisters those that hold nothing any
  /// more. Runs after every successful command.
  void drive_removals_locked(bool& changed);
  /// The first ISR member other than `except` that is not fenced; -1: none
  /// (leadership is elected from the ISR only).
  int32_t first_live_locked(const std::vector<int32_t>& isr,
                            int32_t except) const;
  std::vector<isr_change> reassignments_locked() const;
  /// The assignment of (topic, p); unknown_topic / unknown_partition.
  caf::expected<partition_assignment*> partition_locked(const std::string& topic,
                                                        partition_id p);
  /// A broker was fenced: new leaders for what it led, ISRs without it.
  void fence_locked(int32_t id);
  /// A fenced broker registered again: it leads partitions that had no
  /// leader and whose ISR names it.
  void unfence_locked(int32_t id);
  std::vector<topic_metadata> topics_locked() const;
  void publish_security_locked();
  void notify_locked();
  void send_locked(const caf::actor& to, std::vector<topic_metadata> list);
  partition_assignment assignment(int32_t p, int16_t rf) const;

  mutable std::mutex mtx_;
  std::vector<int32_t> voters_;
  int16_t max_rf_;
  std::map<std::string, topic_metadata> topics_;
  int64_t next_producer_id_ = 0;
  std::map<int32_t, broker_registration> brokers_;
  /// Moves in progress by (topic, partition): the target replicas.
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> moving_;
  /// Brokers being removed (remove_broker): they leave brokers_ once no
  /// partition names them.
  std::set<int32_t> removing_;
  std::map<std::string, scram_credential> users_;
  std::vector<acl_entry> acls_;
  std::shared_ptr<security_registry> registry_;
  std::vector<caf::actor> subscribers_;
  caf::actor_addr sender_;
};

struct raft_metadata_config {
  /// The local raft node whose state machine is `machine`'s adapter.
  raft_actor raft;
  std::shared_ptr<metadata_state_machine> machine;
  /// How long a write waits for its entry to commit.
  caf::timespan request_timeout = std::chrono::seconds{5};
};

struct raft_metadata_state {
  raft_metadata_config cfg;
  static inline const char* name = "raft-metadata";
};

/// The metadata actor over a raft node. @pre cfg.raft and cfg.machine set.
metadata_actor::behavior_type
raft_metadata(metadata_actor::stateful_pointer<raft_metadata_state> self,
              raft_metadata_config cfg);

} // namespace ferry
