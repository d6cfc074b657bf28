#pragma once
// node: the broker_actor of one ferryd process, the actor published on the
// node's CAF port. It supervises the rest of the node and routes requests.
//
// Children (all monitored):
// - the metadata actor: raft_metadata over this node's Raft member (a
//   quorum of one without --voters), spawned here unless
//   node_config::metadata names one; the node subscribes to it and
//   reacts to each (update_atom, topics): it spawns a partition replica per
//   hosted partition (data in <data-dir>/topics/<topic>-<partition>), stops
//   the replicas of deleted topics with data deletion, and sends config
//   changes to the replicas and the topic list to every group coordinator.
// - partition replicas: a crashed replica is logged and restarted after a
//   backoff (restart_backoff, doubling); after max_restarts crashes within
//   restart_window it stays offline (describe shows online=false, produce
//   and fetch get ec::not_leader) until the next restart of the node.
// - group coordinators: one per group, spawned on first use and for every
//   group in the offset store at start.
// - queue coordinators (queue-mode groups): one per queue group, spawned on
//   create (config stored in "queue_groups") or first receive (defaults),
//   and for every stored queue group at start (in a cluster: where the
//   group lives, see "Groups:" below); they get the topic list like the
//   group coordinators. Stream requests (join, sync, ...) naming a queue
//   group get invalid_request; group list, describe and delete cover both.
// - the DLQ manager (actors/server/dlq_manager.hpp): spawned on the first DLQ
//   request, gets the topic lists, ended on shutdown; the DLQ requests are
//   relayed to it. (purge_atom, topic_partition, offset) goes to the
//   partition's replica.
//
// Routing: produce, fetch and list-offsets go to the partition's replica by
// delegation (the replica answers the client directly: no extra hop);
// unknown topic -> ec::unknown_topic, partition out of range ->
// ec::unknown_partition, a partition not hosted or offline -> ec::not_leader.
// Topic admin goes to the metadata actor; create answers once the new
// replicas exist and answered a status request (or create_timeout passed).
// Describe asks every replica for its status with status_timeout; one that
// does not answer shows online=false and the rest still shows.
//
// Requests that arrive before the first metadata snapshot are held and served
// once it is in (so a fresh process never answers unknown_topic wrongly).
//
// Timers: the node sends itself (update_atom, {}) with delayed_send; an update
// whose sender is the node itself means "re-check" (restart crashed replicas,
// expire waits) and never replaces the topic list.
//
// Metrics (with node_config::metrics): the node owns a metrics::node_probe
// (the Raft member's term, role and commit index; the data dir's disk sampled at
// start and every disk_sample_interval by a small helper actor that watches
// the node), gives every replica it spawns a fresh partition_probe and every
// coordinator a fresh group_probe (so a restarted child never shares series
// state with its predecessor). Failed client requests count in
// ferry_request_errors_total: errors the node answers itself (unknown
// topic, bad partition, empty group name, ...) here; admin and group
// requests are relayed with request().then instead of delegation so their
// errors are counted here too (one more hop, negligible at their rates);
// produce, fetch and list-offsets keep delegating (no extra hop on the data
// path) and the replica counts its own errors through the node_probe it is
// given (partition_replica_config::node_probe).
//
// Cluster (node_config::voters set): the node spawns this node's Raft
// quorum member (actors/server/raft_node.hpp, LMDB state in the node's store) and
// raft_metadata over it as its metadata actor, and keeps a client link
// (actors/client/client_connection.hpp: reconnects with backoff) to every other
// voter's node. Raft messages travel node to node: (raft_atom, msg) to the
// peer's broker, which hands it to its own quorum member.
// - Broker-only nodes: a node whose id is not among the voters spawns a
//   raft_observer (actors/server/raft_node.hpp) instead: it pulls the committed
//   metadata log from the voters' nodes ((fetch_atom, raft_atom, index),
//   which a voter's node hands to its quorum member), applies it to its own
//   metadata_state_machine, and answers not_leader to writes, which the node
//   forwards to the Raft leader's node like any not_leader write. It never
//   votes or counts in a majority (the voters are fixed: --voters).
// - Links to brokers: every node also links to each registered broker that
//   is not a voter (opened on the cluster tick when it registers, reopened
//   when its endpoint changed, closed when it left the cluster), so
//   forwarding, follower fetches and describes reach broker-only nodes.
// - Readiness: replicas start, and requests are served, once the applied
//   metadata caught up (a leader is known and the applied index reached the
//   commit index in two probes one tick apart), so a restarted node never
//   acts on its old view.
// - Registration: once a leader is known and the port is open, the node
//   registers itself (endpoints) through the metadata; again whenever the
//   metadata shows it fenced.
// - Links: a link that connected counts as up (the peer is "alive" in
//   cluster describe, Raft and routing get its broker) only once the peer
//   answered a probe ((connect_atom, own id) -> its id) within
//   peer_probe_timeout; until then, and while it keeps failing (probed again
//   every cluster tick), the peer is down. A half-open link - the peer's
//   bytes reach this node, this node's do not reach the peer - still
//   completes CAF's connect (the server speaks first) and would otherwise
//   flap up and down every few seconds. down_since keeps the start of an
//   outage across such flaps.
// - One dialer per pair: two nodes that dial each other at the same moment
//   can leave CAF 0.17.6's BASP routing table pointing at a connection the
//   other side has not mapped (routing_table::select_alternative on a
//   handle never added), after which that side receives this node's
//   requests with no sender and its answers are lost: the link stays
//   "connected but does not answer" for good (seen at cluster start). So
//   of each pair one node dials first (a broker-only node dials the voters;
//   otherwise the higher id dials the lower); the other keeps its link
//   parked, with no connection, until the dialer's probe arrives (its
//   connection is established then, and CAF closes the second one as
//   redundant) or peer_dial_fallback passed, and parks it again whenever it
//   goes down or does not connect within two probe timeouts.
// - Broken routes: CAF 0.17.6 can also map a connection to no node after two
//   connections of a pair raced (after a pause both sides drop and redial):
//   the peer's messages over it then arrive with no sender, so this node's
//   answers are lost while its own requests are answered (the peer sees it
//   "connected but does not answer"; seen for 105 s, chaos seed 5102). A
//   peer's probes arriving without a sender for two probe timeouts show it
//   (one alone can be a connection whose handshake is still under way): the
//   node closes its CAF connections to that peer (basp_routes.hpp) and both
//   sides redial.
// - Controller (the node whose quorum member leads): fences a voter or a
//   registered broker that has not been up (linked and probed) for
//   fence_after (one never
//   seen: controller_grace after taking over or after the link to it was
//   opened); raft_metadata then moves leaderships and ISRs. It completes
//   every replica move whose target is in the ISR: the moves of ferryctl
//   partition reassign and those raft_metadata starts to empty a broker
//   being removed (ferryctl cluster remove-node: (delete_atom, broker_atom,
//   id), relayed to the metadata), which leaves the cluster once no
//   partition names it.
// - Roles: every hosted replica gets its assignment and the leader node's
//   broker (update_atom) whenever either changes; replicas' ISR changes
//   come here and go to the metadata.
// - Groups: the controller creates __consumer_state (state_partitions,
//   RF min(3, brokers that can hold replicas), retention.ms and
//   retention.bytes -1: kept whole, not compacted yet); a stream group is
//   coordinated by the node leading
//   its partition there, other nodes forward its requests; commits are
//   produced there with acks=all, and every replica of it applies the
//   records to its node's offset store (broker/consumer_state.hpp), so a
//   new coordinator starts from every acknowledged commit. Queue-mode
//   groups live at the same node: their config (create, alter, delete:
//   produced by that node), queue state, leases and DLQ producer rows
//   (produced by the queue coordinator before it answers) go through the
//   same partition, and every replica applies them to its node's
//   "queue_groups", "queue_state" and "queue_dlq_producers" rows; the node
//   reads a group's config from its store when it is not in memory. On
//   every metadata change the node ends its stream and queue coordinators
//   of groups whose partition is led elsewhere now (so a later return of
//   the leadership starts them fresh from the replicated state) and starts
//   a queue coordinator for each stored queue group whose partition it
//   leads, so a queue group goes on with its committed positions, attempts,
//   open leases and config when its coordinator's node dies. A
//   __consumer_state produce from an actor of this node is never forwarded
//   (not_leader unless this node leads the partition): a coordinator whose
//   group moved cannot write after its successor.
// - DLQ operations: show, redrive and purge of a DLQ topic are served by the
//   DLQ manager of the topic's home, the node leading the __consumer_state
//   partition of dlq_home_key(topic) (a NUL-prefixed key no group can
//   have); other nodes forward them there like group requests (a forwarded
//   one is never forwarded again; coordinator_not_available without a
//   leader). The manager produces its redrive producer rows, marks and mark
//   erases there (kinds 7-10) before it relies on them, and every replica
//   applies them to its node's dlq_store rows (actors/server/dlq_manager.hpp), so
//   a new home skips what the old one redrove. `dlq list` works at any
//   node: the local list, with each DLQ's entry taken from its home's list
//   (asked once per home node).
// - Routing: produce, consumer fetch and list offsets for a partition led
//   by another node are forwarded to that node's broker (request/answer, so
//   clients may talk to any node); a request forwarded by a peer is never
//   forwarded again (not_leader instead). Follower fetches are only served
//   locally. Metadata writes answered not_leader by the local quorum member
//   are forwarded once to the Raft leader's node. Describe asks each
//   partition's leader node for its live status, and shows each node at the
//   endpoint it registered (its voter entry until it registered: a voter
//   entry is this node's route to that node, which may be a proxy).
//
// Shutdown: an exit message (e.g. anon_send_exit(node, user_shutdown) from
// ferryd on SIGTERM) makes the node stop every replica with (stop_atom,
// false) (flush, checkpoint, close), end the coordinators and the metadata
// actor it spawned, and quit once all replicas answered or shutdown_timeout
// passed. Watch it with a monitor to know when the data is safe.

#include "actors/client/client_connection.hpp"
#include "actors/server/dlq_manager.hpp"
#include "actors/server/group_coordinator.hpp"
#include "actors/server/queue_coordinator.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/security.hpp"
#include "actors/server/fetch_session.hpp"
#include "actors/server/partition_replica.hpp"
#include "broker/raft_core.hpp"

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry {

class metadata_store;
class metadata_state_machine;
class offset_store;

class audit_log;
class scram_server;

namespace metrics {
class registry;
class node_probe;
} // namespace metrics

struct node_config {
  /// This node's id (leader of every partition in a cluster of one).
  int32_t node_id = 0;
  /// Root of this node's data: meta/ (LMDB, opened by the caller) and
  /// topics/<topic>-<partition>/ (one directory per replica).
  std::filesystem::path data_dir = "data";
  /// The node's store (ferryd opens it on <data-dir>/meta). Required: the
  /// metadata, the replicas' checkpoints and the group offsets live there.
  std::shared_ptr<metadata_store> store;
  /// Where topics live. Null: the node spawns its Raft quorum member over
  /// `store` (the only voter without voters) and raft_metadata over it.
  /// Tests may inject another metadata actor (then the node is ready on its
  /// first topic list).
  metadata_actor metadata;
  /// The Raft voters (--voters), this node included unless it is a
  /// broker-only node. Empty: a single node, a Raft quorum of one. See
  /// "Cluster" in the file comment.
  std::vector<raft_voter> voters;
  /// Raft timing: tick length, election timeout and heartbeat in ticks.
  caf::timespan raft_tick = std::chrono::milliseconds{50};
  uint32_t election_ticks = 10;
  uint32_t heartbeat_ticks = 2;
  /// The controller fences a broker whose link has been down this long.
  std::chrono::milliseconds fence_after{500};
  /// A peer link that connected counts as up once the peer answered a probe
  /// within this time (see "Links" in the file comment).
  std::chrono::milliseconds peer_probe_timeout{1000};
  /// A link to a peer that dials first is dialed from this side anyway
  /// after this long without the peer's probe (see "One dialer per pair").
  std::chrono::milliseconds peer_dial_fallback{10000};
  /// Follower replicas fetch through one fetch session per leader node
  /// (actors/server/fetch_session.hpp) instead of one long poll each: those
  /// spawned while the metadata places fetch_sessions_min_replicas or more
  /// partition replicas on the node (0: all). Replicas keep their choice
  /// until they restart. ferryd's default (--fetch-sessions auto) is 1,000:
  /// sessions gained ~18% at 3,000 partitions on 3 nodes and cost up to a
  /// third at 3 (tests/bench/README.md, "Fetch sessions by partition count").
  bool fetch_sessions = false;
  size_t fetch_sessions_min_replicas = 0;
  /// With replica_defaults.journal: a replica spawned while the metadata
  /// gives the node fewer partition replicas than this syncs its own
  /// segment file instead (few partitions: the journal's second copy of
  /// every byte costs more than the few fdatasyncs it saves). Counted from
  /// the metadata, not from the replicas running, so a topic of many
  /// partitions created on an idle node is journaled whole; replicas keep
  /// their choice until they restart. A directory the journal has records
  /// of (node_journal::adopted) always uses it. 0: every replica uses it.
  size_t journal_min_replicas = 0;
  /// A new controller waits this long for brokers it has not seen yet.
  std::chrono::milliseconds controller_grace{3000};
  /// Period of the cluster timer (registration, readiness, controller).
  std::chrono::milliseconds cluster_tick{200};
  /// In a cluster, how long a request naming a topic this node does not
  /// know waits for the topic to reach its metadata before it is answered
  /// unknown_topic (when_topics_known): a topic created through another
  /// node arrives here a Raft heartbeat or so after its create was answered.
  std::chrono::milliseconds topic_wait{2000};
  /// Partitions of __consumer_state (created by the controller; the group
  /// coordinator is the leader of partition_for_key(group)).
  int32_t state_partitions = 8;
  /// Cluster id shown by cluster describe.
  std::string cluster_id;
  /// Advertised endpoint for cluster describe. The port is shared because it
  /// is known only after the node was spawned and published (--port 0).
  std::string host = "127.0.0.1";
  std::shared_ptr<std::atomic<uint16_t>> port
    = std::make_shared<std::atomic<uint16_t>>(0);
  /// ferryd --peer-port: the port of this node's own actor system, where
  /// peers dial it (the voters' entries name it); `port` then belongs to
  /// the clients' actor system, whose front door (actors/server/
  /// front_door.hpp) passes client requests to this node. Registered
  /// with the metadata quorum (broker_registration::peer_port). Null: one
  /// actor system and `port` for both.
  std::shared_ptr<std::atomic<uint16_t>> peer_port;
  uint16_t http_port = 0;
  uint16_t metrics_port = 0;
  /// The Kafka listener's advertised endpoint (ferryd --kafka-port,
  /// --kafka-advertised-host); port 0 = none. Registered with the metadata
  /// quorum so every node's Kafka Metadata answer lists it.
  std::string kafka_host;
  uint16_t kafka_port = 0;
  /// The node's metrics (ferryd serves it with a metrics::exposer); null:
  /// no metrics. Probes from replica_defaults / group_defaults are ignored:
  /// the node creates one per spawned replica and coordinator.
  std::shared_ptr<metrics::registry> metrics;
  /// Filled with the replicated users and ACLs (broker/security.hpp) for
  /// the front doors to check; null: not kept.
  std::shared_ptr<security_registry> security;
  /// Sessions on the CAF port (issue 16; ferryd --auth scram): the node
  /// serves requests only in a session envelope whose credential checks
  /// out, after the ACLs allowed them (node_auth.cpp; see broker_actor in
  /// interfaces.hpp). Needs `security` and `cluster_credential`.
  bool auth = false;
  /// The nodes' shared credential (broker/security.hpp,
  /// cluster_credential()): the node's own actors and its peers send with
  /// it; it stands for the cluster, which no ACL restricts.
  std::string cluster_credential;
  /// The operator's credential of the same secret (ferryctl
  /// --cluster-secret-file): unrestricted too, but served as a client.
  std::string operator_credential;
  /// Lifetime of a session token from the in-band login.
  std::chrono::seconds session_ttl{3600};
  /// Failed logins of one user name allowed before each further one locks
  /// the name out for lockout_base * 2^n (at most lockout_max).
  int login_failures_allowed = 5;
  std::chrono::milliseconds login_lockout_base{1000};
  std::chrono::milliseconds login_lockout_max{60000};
  /// Denied requests, failed logins and admin changes on the CAF port (null:
  /// the node log only).
  std::shared_ptr<audit_log> audit;
  /// How often the data dir's disk is sampled (ferry_disk_*_bytes).
  std::chrono::milliseconds disk_sample_interval{10000};
  /// Settings of every replica the node spawns; topic, partition, dir,
  /// topic_cfg, node_id, epoch and store are filled in per partition.
  partition_replica_config replica_defaults;
  /// Settings of every group coordinator; group, offsets, broker and topics
  /// are filled in per group.
  group_config group_defaults;
  /// Settings of every queue coordinator; group, settings, store, broker,
  /// topics, topics_known and probe are filled in per group.
  queue_coordinator_config queue_defaults;
  /// Describe and cluster describe wait this long for each replica.
  std::chrono::milliseconds status_timeout{2000};
  /// Create waits at most this long for the new replicas to answer.
  std::chrono::milliseconds create_timeout{10000};
  /// Shutdown waits at most this long for the replicas to close.
  std::chrono::milliseconds shutdown_timeout{20000};
  /// First delay before restarting a crashed replica (doubles per crash).
  std::chrono::milliseconds restart_backoff{200};
  /// A replica crashing more often than this within restart_window stays
  /// offline.
  int max_restarts = 5;
  std::chrono::milliseconds restart_window{60000};
};

/// One hosted partition replica as the node tracks it.
struct hosted_replica {
  partition_actor handle;  ///< null while offline or waiting for a restart
  topic_config config;     ///< the config it was last given
  leader_epoch epoch{0};
  /// The assignment and leader handle it was last given.
  partition_assignment assignment;
  caf::actor leader_handle;
  /// As a follower, it fetches through this node's fetch session to the
  /// leader's node (decided when it was spawned, node_config::fetch_sessions).
  bool fetch_session = false;
  /// Recent crash times, for the restart limit.
  std::vector<caf::actor_clock::time_point> crashes;
  /// When a crashed replica may be spawned again.
  caf::actor_clock::time_point restart_at{};
  /// Crashed too often: not restarted any more.
  bool given_up = false;
  /// __consumer_state replicas in a cluster: set by the replica once it
  /// replayed its log into the node's stores (partition_replica_config::
  /// on_loaded); its groups are not coordinated here before that.
  std::shared_ptr<std::atomic<bool>> loaded;
  /// ... and set while batches it appended as a follower are not applied
  /// to the stores yet (partition_replica_config::on_behind): a node that
  /// just became its leader does not coordinate its groups before that.
  std::shared_ptr<std::atomic<bool>> behind;
};

/// A request waiting for topics this node does not know yet (see
/// node_config::topic_wait); `resume` serves it as if it arrived now.
struct topic_waiter {
  std::vector<std::string> topics;
  caf::actor_clock::time_point deadline;
  std::function<void()> resume;
};

/// A create request waiting for its replicas.
struct create_waiter {
  topic_metadata topic;
  caf::typed_response_promise<topic_metadata> promise;
  caf::actor_clock::time_point deadline;
};

struct node_state {
  node_config cfg;
  /// The latest topic list from the metadata actor, by name.
  std::map<std::string, topic_metadata> topics;
  /// True once the first topic list arrived and the metadata caught up
  /// (cluster_ready): requests are served from then on.
  bool ready = false;
  /// True once the first topic list arrived from the metadata actor.
  bool got_topics = false;
  /// Requests that arrived before `ready`, replayed in order.
  std::vector<std::function<void()>> deferred;
  /// Replicas hosted here, by (topic, partition): every produce and fetch
  /// looks its partition up (hashed: a std::map of 10,000 partitions is ~14
  /// string compares a lookup).
  std::unordered_map<topic_partition, hosted_replica, topic_partition_hash> replicas;
  /// Partition replicas the metadata places on this node (reconcile).
  size_t assigned_replicas = 0;
  /// Replicas told to stop with data deletion that have not answered yet;
  /// a topic re-created meanwhile waits for them.
  std::map<topic_partition, partition_actor> stopping;
  /// Group coordinators by group.
  std::map<std::string, group_coordinator_actor> groups;
  /// Queue-mode coordinators by group, and their stored configs (a name is
  /// either a stream group or a queue group).
  std::map<std::string, queue_coordinator_actor> queue_groups;
  std::map<std::string, queue_group_config> queue_configs;
  /// A queue group led here waits for its state partition to finish
  /// loading (sync_group_homes); the cluster tick tries again.
  bool queue_homes_deferred = false;
  /// Partition dirs this node does not host were deleted (once per start,
  /// reconcile), and the topic list for it is being asked for.
  bool swept_unhosted = false;
  bool sweep_asked = false;
  /// DLQ operations (list, show, redrive, purge); spawned on first use,
  /// gets the topic lists like the coordinators.
  dlq_manager_actor dlq;
  std::shared_ptr<offset_store> offsets;
  std::vector<create_waiter> create_waiters;
  std::vector<topic_waiter> topic_waiters;
  /// Whether the metadata actor is ours (ended on shutdown).
  bool own_metadata = false;
  /// Shutdown in progress: replicas still closing.
  bool shutting_down = false;
  size_t replicas_closing = 0;
  caf::error exit_reason;
  /// A re-check (update_atom to self) is already scheduled for this time.
  caf::actor_clock::time_point recheck_at{};
  /// Node-wide metrics (disk, Raft, request errors); null without metrics.
  std::shared_ptr<metrics::node_probe> probe;
  /// Samples the disk into `probe` periodically; ended on shutdown.
  caf::actor disk_sampler;

  // -- cluster (voters set) ---------------------------------------------------
  /// This node's quorum member and the replicated metadata it applies.
  raft_actor raft;
  std::shared_ptr<metadata_state_machine> machine;
  /// Its latest role, term and leader.
  raft_status raft_st;
  /// Links to the other voters and the brokers they lead to while up
  /// (connected and the peer answered a probe).
  std::map<int32_t, connection_actor> links;
  std::map<int32_t, broker_actor> peers;
  /// Connected links whose peer has not answered a probe yet, the probes in
  /// flight, and the peers already reported as not answering.
  std::map<int32_t, broker_actor> unconfirmed;
  std::set<int32_t> probing;
  std::set<int32_t> unanswered;
  /// Since when a peer has not been up (controller: fence after
  /// fence_after); the start of the outage, kept across flapping.
  std::map<int32_t, caf::actor_clock::time_point> down_since;
  /// Peers that were up (probed) at least once since their link opened:
  /// only their outages count from down_since; a peer never up yet gets
  /// controller_grace (a node starting with its peers must not fence them
  /// for the connect failures before they listen).
  std::set<int32_t> seen_up;
  /// The endpoint each link connects to and when it was opened (a broker
  /// never seen gets controller_grace from then).
  std::map<int32_t, std::pair<std::string, uint16_t>> link_endpoints;
  std::map<int32_t, caf::actor_clock::time_point> linked_at;
  /// Each link's listener (linked to the node; unlinked before a close).
  std::map<int32_t, caf::actor> link_listeners;
  /// Links to peers that dial first, waiting with no connection for the
  /// peer's probe (since when); those dialed from here, since when (parked
  /// again if not connected within two probe timeouts); when each peer last
  /// probed this node.
  std::map<int32_t, caf::actor_clock::time_point> parked;
  std::map<int32_t, caf::actor_clock::time_point> dialed_at;
  std::map<int32_t, caf::actor_clock::time_point> probed_by;
  /// Each peer's CAF node (from the sender of its answers to probes), and
  /// since when its probes arrive without a sender (repair_route).
  std::map<int32_t, caf::node_id> peer_nodes;
  std::map<int32_t, caf::actor_clock::time_point> senderless_since;
  /// This node's fetch session to each leader node and the broker it
  /// fetches from.
  struct session_link {
    fetch_session_actor handle;
    caf::actor broker;
  };
  std::map<int32_t, session_link> fetch_sessions;
  /// Leader side of the fetch sessions (fetch_round): per follower node,
  /// the long polls it started here (each parked in its replica), the
  /// answers not yet sent, and its round waiting for one.
  struct follower_session {
    uint64_t id = 0;
    /// Partition -> the number of its long poll (a newer one replaces it).
    std::map<topic_partition, uint64_t> polls;
    std::vector<fetch_result> ready;
    size_t ready_bytes = 0;
    std::optional<caf::typed_response_promise<std::vector<fetch_result>>> waiting;
  };
  std::map<int32_t, follower_session> follower_sessions;
  uint64_t next_poll = 1;
  /// Client requests forwarded to the leader on another node, by that
  /// node's id: each fails at once when the link to the node goes down.
  /// CAF 0.17 never answers a request in flight to a node that went away;
  /// without this a producer waited for its request timeout (30 s by
  /// default), holding its window for the partition.
  std::map<int32_t, std::map<uint64_t, std::function<void(const caf::error&)>>>
    forwards;
  uint64_t forward_seq = 0;
  /// When this node last became the controller.
  caf::actor_clock::time_point controller_since{};
  /// Fences proposed and not answered yet.
  std::set<int32_t> fencing;
  /// This incarnation is registered (and not fenced since).
  bool registered = false;
  bool registering = false;
  /// The controller is creating __consumer_state.
  bool creating_state_topic = false;
  /// Replica moves the controller is completing.
  std::set<topic_partition> completing;
  /// The applied metadata caught up with the quorum: replicas start only
  /// then (a restarted node must not act on an old view).
  bool cluster_ready = false;
  uint64_t ready_probe_applied = 0;
  int ready_probes = 0;

  // -- sessions on the CAF port (node_auth.cpp) -------------------------------
  /// The handlers of broker_core_actor, run by the session envelope.
  caf::behavior core;
  /// The handle the node gives its own actors (coordinators, replicas, the
  /// metadata subscription, links): the node itself without auth, else a
  /// session proxy that wraps what they send in the cluster credential.
  broker_actor internal;
  /// In-band logins between their two steps, by conversation id.
  struct pending_login {
    std::shared_ptr<scram_server> server;
    caf::actor_clock::time_point deadline;
    std::string user; ///< the name the client-first message claimed
  };
  std::map<uint64_t, pending_login> logins;
  /// Failed logins per user name (brute force is slowed per name: CAF
  /// shows actors no peer address).
  struct login_failures {
    int count = 0;
    caf::actor_clock::time_point locked_until{};
  };
  std::map<std::string, login_failures> failures;
  /// Session tokens checked before: token -> (user, expiry in Unix ms, the
  /// security registry version it was checked against).
  struct checked_token {
    std::string user;
    int64_t expires_ms = 0;
    uint64_t version = 0;
  };
  std::unordered_map<std::string, checked_token> sessions;
  /// True while a peer's request (cluster credential, remote sender) runs:
  /// what from_peer() means with sessions on.
  bool peer_call = false;

  static inline const char* name = "node";
};

/// The broker node. @pre cfg.store != nullptr
broker_actor::behavior_type
node(broker_actor::stateful_pointer<node_state> self, node_config cfg);

/// Whether `m` is one of the requests only nodes send each other (Raft,
/// registrations, ISR changes, a follower's fetch, link probes, ...):
/// everything the ACLs do not name (node_auth.cpp). The front door of a
/// node's client port refuses these (front_door.hpp).
bool is_node_to_node_request(caf::message m);

/// The directory of a replica: <data-dir>/topics/<topic>-<partition>.
std::filesystem::path replica_dir(const std::filesystem::path& data_dir,
                                  const std::string& topic, partition_id p);

} // namespace ferry
