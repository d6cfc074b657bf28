#pragma once
// Every typed actor interface of Ferry, in one place: the protocol between
// clients (actors/client/), the server actors (actors/server/) and the
// front ends (actors/http/). Callers compile against this header. The value
// types these interfaces carry live in broker/messages.hpp. Both ends of a
// remote connection must register the same types (ferry::register_types),
// or CAF's typed handshake fails.

#include "broker/messages.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <memory>

// -- in-process messages ---------------------------------------------------------

namespace ferry {

/// The answers of one multi-partition produce, gathered in the node without
/// an answer message per partition (actors/server/produce_gather.hpp).
struct produce_gather;
struct produce_answers;

/// Where a replica writes its answer to one batch of a multi-partition
/// produce: slot `index` of the node's gather.
struct produce_slot {
  std::shared_ptr<produce_gather> gather;
  size_t index = 0;
};

/// A multi-partition produce's answers, all in: sent to the node by the
/// last one to let go of the gather.
struct produce_gathered {
  std::shared_ptr<produce_answers> answers;
};

} // namespace ferry

// Never serialized: a peer cannot send them (CAF drops a message with a
// type it cannot deserialize), so the node serves them without a session.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ferry::produce_slot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ferry::produce_gathered)

// -- typed actor interfaces -----------------------------------------------------

namespace ferry {

/// The metadata a node needs: topics, partitions, configs, producer ids.
/// Implemented by server/raft_metadata.hpp on every node (a node without
/// --voters is a Raft quorum of one).
using metadata_actor = caf::typed_actor<
  /// Creates a topic (name validated, config checked); topic_exists,
  /// invalid_topic_name, invalid_config, policy_violation.
  caf::replies_to<create_atom, topic_atom, std::string, topic_config>::with<topic_metadata>,
  /// Deletes a topic and returns what it was; unknown_topic.
  caf::replies_to<delete_atom, topic_atom, std::string>::with<topic_metadata>,
  /// All topics.
  caf::replies_to<list_atom, topic_atom>::with<std::vector<topic_metadata>>,
  /// One topic; unknown_topic.
  caf::replies_to<describe_atom, topic_atom, std::string>::with<topic_metadata>,
  /// Changes per-topic config keys (retention.ms, retention.bytes,
  /// segment.bytes, segment.ms, max.message.bytes, min.insync.replicas);
  /// invalid_config names the key.
  caf::replies_to<alter_atom, topic_atom, std::string, std::map<std::string, std::string>>::with<topic_metadata>,
  /// Grows a topic to `n` partitions (never shrinks: invalid_request).
  caf::replies_to<add_parts_atom, std::string, int32_t>::with<topic_metadata>,
  /// Hands out a new idempotent producer id (unique across restarts).
  caf::replies_to<init_pid_atom>::with<producer_identity>,
  /// Registers (fenced=false) or fences (fenced=true) a broker; answers the
  /// stored registration. Fencing moves the leadership of every partition it
  /// leads to the next live ISR member (epoch + 1; leader -1 when none) and
  /// removes it from every ISR (never the last member); registering elects
  /// it for partitions left without a leader whose ISR names it.
  caf::replies_to<update_atom, broker_atom, broker_registration>::with<broker_registration>,
  /// Every broker registered so far.
  caf::replies_to<list_atom, broker_atom>::with<std::vector<broker_registration>>,
  /// A partition leader's ISR change; answers the new assignment.
  /// not_leader / fenced_leader_epoch when the proposer no longer leads in
  /// that epoch; invalid_request for an ISR without the leader or with
  /// non-replicas.
  caf::replies_to<alter_atom, isr_atom, isr_change>::with<partition_assignment>,
  /// Moves a partition's replicas to the target list in `isr` (ferryctl
  /// partition reassign; `leader` and `epoch` are ignored): the new
  /// replicas join as followers next to the old ones; once all of the
  /// target is in the ISR the controller completes the move (the same
  /// request with an empty list): replicas = target, the leader moves
  /// within the ISR if it is not in the target. Answers the assignment.
  caf::replies_to<assign_atom, isr_change>::with<partition_assignment>,
  /// The listener receives (update_atom, std::vector<topic_metadata>) with
  /// the full topic list now and after every change.
  caf::reacts_to<subscribe_atom, caf::actor>,
  /// Removes broker-only node `id` (ferryctl cluster remove-node): every
  /// replica it holds moves to another broker (like a reassign, completed
  /// by the controller), then it is unregistered. Answers its registration
  /// at the start. invalid_request for a voter or an unknown broker,
  /// policy_violation when too few brokers would be left for a partition's
  /// replication factor.
  caf::replies_to<delete_atom, broker_atom, int32_t>::with<broker_registration>,
  /// Users (issue 16): creates a user or replaces its credential (derived
  /// by the caller; the password never travels); invalid_request.
  caf::replies_to<update_atom, user_atom, scram_credential>::with<user_info>,
  /// Deletes a user; unknown_user.
  caf::replies_to<delete_atom, user_atom, std::string>::with<user_info>,
  caf::replies_to<list_atom, user_atom>::with<std::vector<user_info>>,
  /// ACLs (broker/security.hpp): adds one (answered normalized; adding an
  /// existing one changes nothing); invalid_request names a bad field.
  caf::replies_to<create_atom, acl_atom, acl_entry>::with<acl_entry>,
  /// Removes the entries equal to this one (normalized) and answers them.
  caf::replies_to<delete_atom, acl_atom, acl_entry>::with<std::vector<acl_entry>>,
  caf::replies_to<list_atom, acl_atom>::with<std::vector<acl_entry>>>;

/// One hosted partition replica (leader role; the follower role comes with
/// replication). Appends with group commit: produce requests queue up, one
/// flush covers them, then they are answered.
using partition_actor = caf::typed_actor<
  /// Appends one batch; validates size, CRC and idempotence (duplicates are
  /// answered with the original offsets and duplicate=true).
  caf::replies_to<produce_atom, produce_request>::with<produce_response>,
  /// Internal: the same for one batch of a multi-partition produce the node
  /// took; the answer goes into the slot instead of a response message.
  caf::reacts_to<produce_atom, produce_request, produce_slot>,
  /// Reads below the high watermark, long-polling per min_bytes/max_wait_ms.
  caf::replies_to<fetch_atom, fetch_request>::with<fetch_response>,
  /// Earliest, latest or by timestamp.
  caf::replies_to<offsets_atom, list_offsets_request>::with<offset>,
  /// Where a leader epoch ends (leader only).
  caf::replies_to<offsets_atom, epoch_end_request>::with<epoch_end>,
  /// Live state for describe.
  caf::replies_to<status_atom>::with<partition_status>,
  /// New topic config (retention, segment size, max message size).
  caf::reacts_to<update_atom, topic_config>,
  /// Internal: group-commit flush after the queued appends.
  caf::reacts_to<flush_atom>,
  /// Internal: the parked fetches' timer fired (the value is unused).
  caf::reacts_to<expire_atom, uint64_t>,
  /// Internal: periodic retention and time-based flush.
  caf::reacts_to<tick_atom>,
  /// Internal: the node's log cleaner finished this replica's clean (its
  /// result; none on success).
  caf::reacts_to<clean_atom, caf::error>,
  /// Deletes the records below an offset: moves the log start to
  /// min(offset, high watermark); answers the log start after it.
  caf::replies_to<purge_atom, offset>::with<offset>,
  /// Stops the replica; with `true` also deletes its data (topic deleted).
  caf::replies_to<stop_atom, bool>::with<bool>,
  /// The partition's assignment changed (leader, epoch, replicas, ISR): the
  /// replica takes the leader role when it is the leader, else follows the
  /// leader node's broker (the handle; null while unknown or offline).
  caf::reacts_to<update_atom, partition_assignment, caf::actor>,
  /// Internal (follower): fetch from the leader again (for the follower
  /// incarnation with this number; stale ones are ignored).
  caf::reacts_to<fetch_atom, uint64_t>>;

/// Coordinator of one consumer group (stream mode: Kafka semantics).
using group_coordinator_actor = caf::typed_actor<
  caf::replies_to<join_atom, join_group_request>::with<join_group_response>,
  caf::replies_to<sync_atom, sync_group_request>::with<sync_group_response>,
  /// Answers rebalance_in_progress when the member must rejoin, and
  /// unknown_member / illegal_generation / fenced_instance_id when fenced.
  caf::reacts_to<heartbeat_atom, heartbeat_request>,
  caf::reacts_to<leave_atom, leave_group_request>,
  /// Checks generation and membership (or an empty group for admin commits).
  caf::reacts_to<commit_atom, commit_offsets_request>,
  caf::replies_to<offsets_atom, fetch_offsets_request>::with<std::vector<partition_offset>>,
  caf::replies_to<describe_atom, group_atom>::with<group_description>,
  /// Only while the group is empty (group_not_empty otherwise).
  caf::replies_to<reset_atom, reset_offsets_request>::with<std::vector<partition_offset>>,
  /// Deletes the group's offsets; only while empty.
  caf::reacts_to<delete_atom, group_atom>,
  /// Internal: a member's session or rebalance timer fired.
  caf::reacts_to<expire_atom, std::string, uint64_t>,
  /// Internal: the topic list changed (new partitions trigger a rebalance).
  caf::reacts_to<update_atom, std::vector<topic_metadata>>>;

/// The requests of the node's front door (see broker_actor): what a client,
/// a peer node or the node's own actors ask of it.
using broker_core_actor = caf::typed_actor<
  caf::replies_to<produce_atom, produce_request>::with<produce_response>,
  /// Batches for many partitions in one request (Kafka's Produce carries
  /// many partitions): each is served as a single produce would be (by the
  /// local replica, or forwarded to its leader's node); the answer holds one
  /// produce_result per request, in order. Batches of one partition are
  /// appended in their order in the vector.
  caf::replies_to<produce_atom, std::vector<produce_request>>::with<std::vector<produce_result>>,
  caf::replies_to<fetch_atom, fetch_request>::with<fetch_response>,
  /// A round of a follower node's fetch session (fetch_round): the
  /// partitions this node leads that the follower starts long polls for;
  /// answered with the long polls' answers that came in since the session's
  /// last round, at once if there are any, else when the first one comes (a
  /// newer round of the session answers a waiting one).
  caf::replies_to<fetch_atom, fetch_round>::with<std::vector<fetch_result>>,
  caf::replies_to<offsets_atom, list_offsets_request>::with<offset>,
  /// Where a leader epoch of a partition ends, answered by its leader.
  caf::replies_to<offsets_atom, epoch_end_request>::with<epoch_end>,
  caf::replies_to<init_pid_atom>::with<producer_identity>,
  caf::replies_to<create_atom, topic_atom, std::string, topic_config>::with<topic_metadata>,
  caf::replies_to<delete_atom, topic_atom, std::string>::with<topic_metadata>,
  caf::replies_to<list_atom, topic_atom>::with<std::vector<topic_metadata>>,
  caf::replies_to<describe_atom, topic_atom, std::string>::with<topic_description>,
  caf::replies_to<alter_atom, topic_atom, std::string, std::map<std::string, std::string>>::with<topic_metadata>,
  caf::replies_to<add_parts_atom, std::string, int32_t>::with<topic_metadata>,
  caf::replies_to<cluster_atom>::with<cluster_description>,
  /// The nodes and the endpoints clients reach them at (Kafka's Metadata
  /// brokers), without cluster_atom's partition status: the producer and
  /// consumer use it to send partition requests to leaders directly.
  caf::replies_to<list_atom, broker_atom>::with<std::vector<node_info>>,
  caf::replies_to<join_atom, join_group_request>::with<join_group_response>,
  caf::replies_to<sync_atom, sync_group_request>::with<sync_group_response>,
  caf::reacts_to<heartbeat_atom, heartbeat_request>,
  caf::reacts_to<leave_atom, leave_group_request>,
  caf::reacts_to<commit_atom, commit_offsets_request>,
  caf::replies_to<offsets_atom, fetch_offsets_request>::with<std::vector<partition_offset>>,
  caf::replies_to<list_atom, group_atom>::with<std::vector<group_description>>,
  caf::replies_to<describe_atom, group_atom, std::string>::with<group_description>,
  caf::replies_to<reset_atom, reset_offsets_request>::with<std::vector<partition_offset>>,
  caf::reacts_to<delete_atom, group_atom, std::string>,
  /// Queue mode: creates a queue-mode group (idempotent for the same
  /// config); answers the stored config. invalid_config, invalid_request
  /// (a stream group of that name exists, or another config).
  caf::replies_to<create_atom, group_atom, std::string, queue_group_config>::with<queue_group_config>,
  /// Queue mode: leases records (creates the group with defaults on first
  /// use); long polls up to wait_ms when none is available.
  caf::replies_to<receive_atom, queue_receive_request>::with<std::vector<leased_message>>,
  /// Queue mode: ack, nack, reject or extend one lease.
  caf::replies_to<ack_atom, queue_ack_request>::with<queue_ack_response>,
  /// Queue mode: positions, record counts and DLQ per partition.
  caf::replies_to<describe_atom, queue_atom, std::string>::with<queue_group_description>,
  /// Queue mode: every queue group's config (group, config, and one entry
  /// per topic it has state for in `partitions`, topic names only). A node
  /// stores the groups of the __consumer_state partitions it replicates, so
  /// in a cluster the node merges its own with every linked peer's (a
  /// peer's request is answered from its store alone). Nodes only (the DLQ
  /// manager tells DLQs by it).
  caf::replies_to<list_atom, queue_atom>::with<std::vector<queue_group_description>>,
  /// Queue mode: changes a queue group's max_attempts, backoff, jitter,
  /// visibility and ordering (stored; dlq_topic cannot change:
  /// invalid_config). Leases held at that moment are released (their
  /// records are delivered again without counting an attempt). Answers the
  /// stored config. unknown_group, invalid_request (a stream group).
  caf::replies_to<alter_atom, group_atom, std::string, queue_group_config>::with<queue_group_config>,
  /// Queue mode: member (group, member) leaves: its leases end without
  /// counting an attempt (records available at once) and its parked
  /// receives answer empty. Answers how many leases were released.
  caf::replies_to<leave_atom, queue_atom, std::string, std::string>::with<int64_t>,
  /// DLQ operations (see dlq_* above); unknown_topic for an unknown DLQ.
  caf::replies_to<list_atom, dlq_atom>::with<std::vector<dlq_info>>,
  caf::replies_to<show_atom, dlq_show_request>::with<dlq_show_response>,
  caf::replies_to<redrive_atom, dlq_redrive_request>::with<dlq_redrive_response>,
  caf::replies_to<purge_atom, dlq_purge_request>::with<dlq_purge_response>,
  /// Deletes the records of a partition below an offset (Kafka's
  /// DeleteRecords; used by DLQ purge): moves the log start to
  /// min(offset, high watermark) and answers the log start after it.
  caf::replies_to<purge_atom, topic_partition, offset>::with<offset>,
  /// Cluster: the live status of one partition from the node hosting it
  /// (describe asks each partition's leader node).
  caf::replies_to<status_atom, topic_partition>::with<partition_status>,
  /// Cluster: a broker registers or is fenced (relayed to the controller).
  caf::replies_to<update_atom, broker_atom, broker_registration>::with<broker_registration>,
  /// Cluster: a partition leader's ISR change (relayed to the controller).
  caf::replies_to<alter_atom, isr_atom, isr_change>::with<partition_assignment>,
  /// Cluster: moves a partition's replicas (see metadata_actor).
  caf::replies_to<assign_atom, isr_change>::with<partition_assignment>,
  /// Cluster: a Raft message from a peer, for this node's quorum member.
  caf::reacts_to<raft_atom, raft_message>,
  /// Cluster: removes a broker-only node (see metadata_actor).
  caf::replies_to<delete_atom, broker_atom, int32_t>::with<broker_registration>,
  /// Users and ACLs (see metadata_actor; writes go to the Raft leader:
  /// not_leader elsewhere, retried by admin_client).
  caf::replies_to<update_atom, user_atom, scram_credential>::with<user_info>,
  caf::replies_to<delete_atom, user_atom, std::string>::with<user_info>,
  caf::replies_to<list_atom, user_atom>::with<std::vector<user_info>>,
  caf::replies_to<create_atom, acl_atom, acl_entry>::with<acl_entry>,
  caf::replies_to<delete_atom, acl_atom, acl_entry>::with<std::vector<acl_entry>>,
  caf::replies_to<list_atom, acl_atom>::with<std::vector<acl_entry>>,
  /// Cluster: committed metadata log entries after an index, for a
  /// broker-only node (answered by this node's quorum member; not_leader on
  /// a broker-only node).
  caf::replies_to<fetch_atom, raft_atom, uint64_t>::with<raft_log_chunk>,
  /// Internal: the link to peer node `id` is up (its broker handle) or down
  /// (a null handle).
  caf::reacts_to<connect_atom, int32_t, caf::actor>,
  /// Cluster: a peer's link probe (the asking node's id): answers this
  /// node's id at once (also before the node is ready). A peer counts a
  /// link as up only once this round trip succeeded.
  caf::replies_to<connect_atom, int32_t>::with<int32_t>,
  /// Internal: this node's quorum member changed role, term or leader.
  caf::reacts_to<update_atom, raft_status>,
  /// Internal (cluster): the registration, readiness and controller timer.
  caf::reacts_to<tick_atom>,
  /// Internal: the metadata changed; start, stop or reconfigure replicas.
  caf::reacts_to<update_atom, std::vector<topic_metadata>>>;

/// The node's front door: the actor published on the node's port. Clients
/// (producer, consumer, ferryctl, the console, the HTTP gateway) send every
/// request here; it routes to partitions, coordinators and the metadata.
///
/// Sessions (issue 16). With `ferryd --auth scram` the node serves a
/// request only inside a session envelope, (auth_atom, credential,
/// request): the credential is a user's session token from the in-band
/// SASL login, or the cluster credential of the nodes (derived from
/// --cluster-secret-file). The node checks the credential and the ACLs of
/// the request (actors/server/node_auth.cpp) before it handles it; a bare
/// request gets authentication_failed. CAF lets a connected peer address
/// any actor that ever talked to it by its small id and even name a local
/// actor as the sender, so nothing here trusts a sender or a handle:
/// the credential travels in every message. Without --auth both forms are
/// served. Client code never builds envelopes: the connection hands it a
/// session proxy (actors/client/session_proxy.hpp) that wraps every request.
using broker_actor = broker_core_actor::extend<
  /// One step of the in-band SCRAM-SHA-256 login (sasl_step).
  /// authentication_failed (a wrong password and an unknown user alike),
  /// login_throttled, invalid_request for a malformed message.
  caf::replies_to<auth_atom, sasl_step>::with<sasl_step>,
  /// A request of broker_core_actor on behalf of a credential: answered as
  /// the request itself would be. authentication_failed for a missing,
  /// expired or forged credential, authorization_failed when no ACL allows
  /// the request.
  caf::replies_to<auth_atom, std::string, caf::message>::with<caf::message>,
  /// Internal: a multi-partition produce's answers are all in (from its
  /// gather, actors/server/produce_gather.hpp); the node answers the client.
  caf::reacts_to<produce_atom, produce_gathered>>;

/// Coordinator of one queue-mode group (issue 4): leases records of the
/// partitions it reads, counts attempts, retries with backoff and writes
/// exhausted or rejected records to the group's DLQ topic.
using queue_coordinator_actor = caf::typed_actor<
  caf::replies_to<receive_atom, queue_receive_request>::with<std::vector<leased_message>>,
  /// lease_not_found, lease_expired, not_lease_owner, invalid_request.
  caf::replies_to<ack_atom, queue_ack_request>::with<queue_ack_response>,
  caf::replies_to<describe_atom, queue_atom>::with<queue_group_description>,
  /// Applies a new config (the node validated and stored it): saves the
  /// state, then reopens the partitions with it (leases are released).
  caf::replies_to<alter_atom, group_atom, queue_group_config>::with<queue_group_config>,
  /// The member left: releases its leases, answers its parked receives
  /// with nothing; answers how many leases were released.
  caf::replies_to<leave_atom, queue_atom, std::string>::with<int64_t>,
  /// Moves the group's position on the named topics (all it reads if none)
  /// and forgets their tracked records (retries, parked keys, pending dead
  /// letters); group_not_empty while records of them are leased.
  caf::replies_to<reset_atom, reset_offsets_request>::with<std::vector<partition_offset>>,
  /// The stream-mode view (mode "queue") for group list and describe.
  caf::replies_to<describe_atom, group_atom>::with<group_description>,
  /// Erases the group's state; group_not_empty while leases or receives
  /// are outstanding.
  caf::reacts_to<delete_atom, group_atom>,
  /// The topic list changed.
  caf::reacts_to<update_atom, std::vector<topic_metadata>>,
  /// Internal: persist the changes of the requests handled so far.
  caf::reacts_to<flush_atom>,
  /// Internal: the timer (lease expiry, retries, long polls) with its token.
  caf::reacts_to<tick_atom, uint64_t>>;

/// A CAF-native producer (client library): partitioner, batching, linger,
/// compression, acks, retries, idempotence, reconnects.
using producer_actor = caf::typed_actor<
  /// Answers once the message is acknowledged per acks (or failed).
  caf::replies_to<produce_atom, client_message>::with<delivery_report>,
  /// Many messages in one request (the data path for bulk producers): one
  /// answer once all are acknowledged, reports[i] for messages[i]. The
  /// first failure fails the whole request with that error; messages of it
  /// that were acknowledged before stay written (like N single produces of
  /// which one failed), so retry per idempotence rules or check offsets.
  caf::replies_to<produce_atom, std::vector<client_message>>::with<std::vector<delivery_report>>,
  /// Answers once everything sent so far is acknowledged or failed.
  caf::replies_to<flush_atom>::with<bool>,
  /// Internal: the linger timer of a partition's open batch fired.
  caf::reacts_to<tick_atom, uint64_t>,
  caf::reacts_to<stop_atom>>;

/// A CAF-native consumer (client library): standalone (assign) or a group
/// member (subscribe); fetches with long poll; commits offsets.
using consumer_actor = caf::typed_actor<
  /// Next messages; waits up to the given ms (long poll) when none.
  caf::replies_to<poll_atom, int32_t>::with<std::vector<consumed_message>>,
  /// Commits the positions of everything returned by poll so far.
  caf::replies_to<commit_atom>::with<bool>,
  /// Moves a partition's position.
  caf::reacts_to<seek_atom, topic_partition, offset>,
  /// The partitions currently assigned.
  caf::replies_to<assign_atom>::with<std::vector<topic_partition>>,
  /// Internal: heartbeat / auto-commit timer.
  caf::reacts_to<tick_atom>,
  /// Leaves the group (commits first with auto commit) and stops.
  caf::replies_to<stop_atom>::with<bool>>;

/// A CAF-native queue-mode consumer (client library,
/// actors/client/queue_consumer.hpp): one member of a queue group reading one
/// topic; reconnects by itself.
using queue_consumer_actor = caf::typed_actor<
  /// Leases up to `max` records; waits up to wait_ms (long poll) when none.
  caf::replies_to<receive_atom, int32_t, int64_t>::with<std::vector<leased_message>>,
  /// Ack, nack, reject or extend a leased record (group, member and topic
  /// are filled in by the consumer).
  caf::replies_to<ack_atom, queue_ack_request>::with<queue_ack_response>,
  /// Leaves the group (its leases are released at once) and stops;
  /// answers how many leases were released (0 when the broker was gone).
  caf::replies_to<stop_atom>::with<int64_t>>;

/// One member of the Raft metadata quorum (actors/server/raft_node.hpp): replicates
/// opaque commands and applies the committed ones to its state machine.
using raft_actor = caf::typed_actor<
  /// A Raft RPC or reply from a peer (peers send these to each other).
  caf::reacts_to<raft_atom, raft_message>,
  /// Replicates a command; answers once it is committed and applied, with
  /// its index and the state machine's result. not_leader (context
  /// "leader=<id>", -1 if unknown) on a follower or when the entry was
  /// overwritten by a new leader before it committed.
  caf::replies_to<propose_atom, std::string>::with<raft_applied>,
  /// Role, term, leader, commit index, last applied.
  caf::replies_to<status_atom>::with<raft_status>,
  /// The listener receives (update_atom, raft_status) now and whenever the
  /// role, term or leader changes.
  caf::reacts_to<subscribe_atom, caf::actor>,
  /// Sets (or replaces, after a reconnect) the handle of peer `id`.
  caf::reacts_to<connect_atom, int32_t, caf::actor>,
  /// Internal: the Raft clock.
  caf::reacts_to<tick_atom>,
  /// The committed entries after an index (at most 256), for an observer
  /// (raft_log_chunk). An observer itself answers not_leader.
  caf::replies_to<fetch_atom, raft_atom, uint64_t>::with<raft_log_chunk>>;

} // namespace ferry

CAF_BEGIN_TYPE_ID_BLOCK(ferry_actors, caf::id_block::ferry::end)
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::metadata_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::partition_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::group_coordinator_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::broker_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::queue_coordinator_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::queue_consumer_actor))
  CAF_ADD_TYPE_ID(ferry_actors, (ferry::raft_actor))
CAF_END_TYPE_ID_BLOCK(ferry_actors)

namespace ferry {

/// Registers every Ferry message type and the ferry error category with a
/// config. Call on every actor system that talks to Ferry actors.
void register_types(caf::actor_system_config& cfg);

} // namespace ferry
