#pragma once
// partition_replica: one hosted partition replica, as leader or follower.
// Owns the partition's log (broker/partition_log.hpp) and its
// idempotent-producer table (broker/producer_state.hpp), and serves
// partition_actor.
//
// Roles (Kafka's ISR model; the assignment comes from the metadata through
// the node: cfg.assignment at spawn, then (update_atom, assignment, leader's
// broker) on every change):
// - Leader (assignment.leader == node_id): takes produce, consumer fetch and
//   list offsets. On taking the role for epoch E it records E in the epoch
//   history at its log end and stamps E into every batch it appends.
//   Followers fetch with replica_id = their id: the fetch offset is their
//   position (everything below it is durable on them); the leader keeps
//   positions and the time each follower was last caught up (fetched from
//   the leader's log end). HW = min over the ISR's positions (its own is
//   its durable end). A follower fetch names the epoch of the follower's
//   last batch; when that epoch ends earlier on the leader (or is unknown to
//   it), the answer carries diverging_epoch/diverging_end instead of data.
//   ISR changes are proposed to the controller through cfg.controller
//   ((alter_atom, isr_atom, isr_change), one at a time): shrink a follower
//   not caught up for replica_lag_max, expand a follower whose position
//   reached the HW (and the start of the current epoch). The ISR used for
//   the HW is the committed one (from the metadata). After a refusal no
//   change is proposed for isr_retry_backoff (a repeated refusal is logged
//   once).
// - Follower: pulls from the leader's broker from its log end (long poll),
//   appends the batches as they are (offsets, epochs and CRCs kept; a new
//   epoch in the batches is added to its history), records their producers,
//   flushes, takes the leader's HW (clamped to its log end), and fetches
//   again. Told to diverge, it truncates to diverging_end, rebuilds its
//   producer table, and fetches again. Produce, consumer fetch and list
//   offsets answer not_leader ("leader=<id>"). A leader that becomes a
//   follower fails its parked produces with not_leader (they may be
//   truncated) and answers its parked fetches.
//
// Produce path (group commit): a produce is validated (size, header,
// idempotence), appended to the log (page cache only), and its answer parked
// as a response promise; the first such append sends the replica ONE
// flush_atom. Every produce already in the mailbox is appended before that
// message arrives, so one log flush (one fdatasync per touched file) covers
// them all. The flush handler then advances the high watermark and answers
// every parked produce it covers, and wakes long-poll fetchers. With
// cfg.sync (ferryd) the fdatasync runs on the node's I/O threads: the flush
// handler starts it (partition_log::begin_flush) and returns; produces keep
// being appended; the pool's completion sends another flush_atom, whose
// handler finishes the flush (end_flush), advances and answers, and starts
// the next sync for what was appended meanwhile. A follower with cfg.sync
// fetches again only once what it appended is durable (its fetch offset
// tells the leader what it holds durably).
//
//   acks=0     answered at once (the client ignores the answer).
//   acks=1     answered once the leader's position covers the batch.
//   acks=all   answered once the high watermark covers it.
// The leader's position is its durable end under the default flush policy
// (flush.messages == 1: durable before ack), or its log end under a relaxed
// policy (then the log is flushed when flush_due() says so, checked per
// commit and per tick). HW = min over the ISR's positions (the leader's own
// and every in-sync follower's, as their fetches report them); with an ISR
// of one (replication factor 1) acks=1 and acks=all coincide.
//
// Backpressure: the bytes of appends not yet covered by the HW (plus parked
// duplicates) are bounded by max_pending_bytes; beyond it produce answers
// ec::throttled (retriable).
//
// Failure: an append error (disk_full, io_error, crc_mismatch...) answers
// that produce only; the log is unchanged. A flush error fences the replica:
// every parked produce gets the error, and so does every later produce and
// fetch (the page cache may hold data the disk lost), until a restart
// recovers the log from disk.
//
// Producer-state snapshots: kept in the node's metadata_store (if cfg.store)
// in sub-database "partition.producers" under the partition key of
// metadata_format::encode_partition_key, written on tick every
// snapshot_interval (when changed) and on stop. Each snapshot covers the
// durable end only; at start the table is loaded and the log replayed from
// the snapshot's end, so a stale snapshot (SIGKILL) costs only replay time.
// Without a store there is no snapshot: the whole log is replayed at start,
// and the HW checkpoint lives in memory only.
//
// Metrics: with cfg.probe set, every answered produce and consumer fetch
// (replica_id -1) is reported with its latency, and the log's offsets and
// size after every commit and retention pass. Fetches by followers
// (replica_id >= 0) and internal readers (replica_id -2: the group
// coordinator reading record timestamps for lag seconds) are not consumer
// traffic and are not counted. With cfg.node_probe, every error answered
// to a produce, a consumer fetch or a list offsets is counted by code.
//
// Lifecycle: spawn -> opens the log (failure: the actor quits with the
// error) -> serves -> stop_atom (flush, checkpoint, snapshot, close, maybe
// delete, answer true, quit) or an exit message / destruction (the same
// minus deletion; parked requests are answered with ec::log_closed).

#include "actors/protocol/interfaces.hpp"
#include "actors/server/produce_gather.hpp"
#include "broker/partition_log.hpp"
#include "broker/producer_state.hpp"

#include <caf/actor_clock.hpp>

#include <atomic>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace ferry {

class file_system;
class metadata_store;
class metadata_writer;
class sync_pool;
class node_journal;
class log_cleaner;
class dir_remover;

namespace metrics {
class node_probe;
class partition_probe;
} // namespace metrics

/// Sub-database of producer-state snapshots in the metadata_store.
inline constexpr const char* producer_snapshots_db = "partition.producers";

struct partition_replica_config {
  std::string topic;
  partition_id partition{0};
  /// This replica's own directory (created if missing).
  std::filesystem::path dir;
  topic_config topic_cfg;
  /// When appends are made durable; the default flushes before every ack.
  flush_policy flush;
  /// Time source of the log (retention, segment age) and of producer expiry;
  /// empty means the system clock.
  clock_fn clock;
  /// This node.
  int32_t node_id = 0;
  /// The partition's assignment (leader, epoch, replicas, ISR). Empty
  /// replicas: a cluster of one (leader = ISR = node_id in `epoch`).
  partition_assignment assignment;
  leader_epoch epoch{0};
  /// The leader node's broker when this replica starts as a follower.
  caf::actor leader_broker;
  /// Where ISR changes go (the node, which relays them to the controller).
  /// Null: the ISR never changes (a cluster of one).
  caf::actor controller;
  /// replica.lag.time.max.ms: an ISR follower not caught up for this long
  /// is shrunk out of the ISR.
  std::chrono::milliseconds replica_lag_max{10000};
  /// A produce waiting for its acks (acks=all: the ISR; acks=1: the
  /// flush) this long is answered request_timed_out, as Kafka answers
  /// REQUEST_TIMED_OUT: retriable, and the batch stays in the log, where it
  /// may still commit (an idempotent retry is then a duplicate). Checked on
  /// tick. Bounds how long a leader cut off from its followers and from the
  /// controller holds its clients.
  std::chrono::milliseconds ack_timeout{20000};
  /// How long a follower fetch waits at the leader for data (new data
  /// answers it at once). Kafka's replica.fetch.wait.max.ms is 500 ms, but
  /// Kafka sends one fetch per pair of brokers; here each follower replica
  /// long-polls on its own, so every idle follower costs a fetch round trip
  /// per wait: at 500 ms an idle 3-node cluster with 3,000 partitions
  /// (RF 3) kept each node ~38% busy, at 5 s ~3% (2026-12-03).
  std::chrono::milliseconds follower_fetch_wait{5000};
  /// Pause after a failed follower fetch.
  std::chrono::milliseconds follower_retry_backoff{100};
  /// Leader: after the controller refused an ISR change, no new proposal
  /// for this long (a follower that may not join - e.g. a fenced broker not
  /// registered again yet - would otherwise be proposed, refused and logged
  /// on every fetch).
  std::chrono::milliseconds isr_retry_backoff{1000};
  /// Called (on the replica's thread) with the whole log at start, again
  /// after a truncation cut records it had applied, and, as a follower,
  /// with the batches each fetch appended once they are durable and below
  /// the HW (a leader: once durable): the node applies __consumer_state
  /// records to its offset store this way. A store error (full disk, I/O,
  /// LMDB) keeps the batch for the next commit or tick; other errors are
  /// logged (the data stays appended). Returns the log records it applied.
  std::function<caf::expected<size_t>(std::string_view batches)> on_replicated;
  /// Called once (on the replica's thread) when its start is done, i.e.
  /// after the whole log went through on_replicated. Until then the node's
  /// stores may show older state than the log holds: the replay rewinds
  /// them while it passes the old records (a coordinator must not serve
  /// from them before this).
  std::function<void()> on_loaded;
  /// Called (on the replica's thread) with true when batches a follower
  /// fetch appended wait for their sync before on_replicated applies them,
  /// and with false once every one was applied (also when the replica led
  /// meanwhile). While true the node's stores are behind the log.
  std::function<void(bool behind)> on_behind;
  /// Node-wide store for the HW checkpoint and producer snapshots; may be
  /// null (see the file comment). Shared: it outlives the replica.
  std::shared_ptr<metadata_store> store;
  /// File layer; nullptr means the real one. Must outlive the replica.
  file_system* fs = nullptr;
  /// Bytes of appends waiting for their commit before produce is throttled.
  uint64_t max_pending_bytes = uint64_t{64} << 20;
  /// Period of retention, time-based flush, checkpoint and snapshot work.
  /// Zero disables the tick (tests drive it by sending tick_atom).
  std::chrono::milliseconds tick_interval{1000};
  /// A replica that had nothing to do for quiet_after ticks in a row (no
  /// appends, no parked produces, HW and ISR settled) ticks only every
  /// quiet_tick_interval, until a produce, a replicated append or a role
  /// change brings the short period back at once: 10,000 idle replicas
  /// then cost 1,000 timer messages a second, not 10,000. Retention of an
  /// idle partition is checked that much later (Kafka checks every 5 min).
  std::chrono::milliseconds quiet_tick_interval{10000};
  int quiet_after = 3;
  /// Long-poll fetches parked at once; more are answered immediately.
  size_t max_fetch_waiters = 1024;
  /// Upper bound of a fetch's max_wait_ms.
  std::chrono::milliseconds max_fetch_wait{std::chrono::seconds{60}};
  /// Least time between two producer snapshots.
  std::chrono::milliseconds snapshot_interval{std::chrono::seconds{30}};
  /// Least time between two HW checkpoints written on tick (log start, HW
  /// and epochs, see save_checkpoint; stop and close always write one).
  /// Kafka writes its HW checkpoint file every 5 s
  /// (replica.high.watermark.checkpoint.interval.ms). A restart starts from
  /// the last one and lets the HW catch up with the recovered log, so a
  /// longer interval costs nothing acknowledged; at every tick, 10,000 busy
  /// partitions cost the node 10,000 LMDB puts a second. 0: at every tick.
  std::chrono::milliseconds checkpoint_interval{std::chrono::seconds{5}};
  /// Producers idle this long are forgotten (Kafka's
  /// producer.id.expiration.ms). Negative: never.
  std::chrono::milliseconds producer_expiration{std::chrono::hours{24}};
  /// Metrics of this replica; null: none. One per replica (not shared via
  /// defaults): its series live as long as the probe, so the replica drops
  /// it when it stops.
  std::shared_ptr<metrics::partition_probe> probe;
  /// The node's probe: every error this replica answers to a client
  /// (produce, consumer fetch, list offsets; the node delegates those, so
  /// the error never passes through it) counts in ferry_request_errors_total.
  /// Null: not counted. Shared by every replica of the node.
  std::shared_ptr<metrics::node_probe> node_probe;
  /// The node's I/O threads. Set (ferryd): the group commit's fdatasync
  /// runs there (partition_log::begin_flush / end_flush) and this replica,
  /// on the shared scheduler, keeps appending and serving meanwhile; the
  /// pool's callback wakes it with a flush_atom. Null (the deterministic
  /// tests' default): the replica calls fdatasync itself, inline.
  std::shared_ptr<sync_pool> sync;
  /// The node's journal (broker/node_journal.hpp). Set (ferryd, unless
  /// --journal=false): the log records its file changes there and a group
  /// commit waits for the journal's round (one write and one fdatasync for
  /// every partition of the node) instead of syncing its own segment file;
  /// the journal's callback wakes the replica with a flush_atom as the
  /// pool's does. Removing the replica's directory is recorded there too.
  std::shared_ptr<node_journal> journal;
  /// With `journal`: appended bytes a partition's active segment keeps in
  /// memory and writes with one pwrite on the replica's tick (or when more
  /// do not fit, or at a roll or close); reads see them, the journal holds
  /// them durably. 0: written at every append. (log_config::
  /// journal_defer_bytes; ferryd --journal-defer-kib.)
  size_t journal_defer_bytes = 64u << 10;
  /// The node's log cleaner (broker/log_cleaner.hpp). Set (ferryd): a
  /// replica of a topic with cleanup.policy=compact checks on its tick
  /// whether a clean is due (partition_log::begin_clean), hands the job to
  /// the cleaner's thread, and swaps the result in when the cleaner's
  /// callback wakes it with a clean_atom. Null: never compacted.
  std::shared_ptr<log_cleaner> cleaner;
  /// The node's directory remover (broker/dir_remover.hpp). Set (ferryd):
  /// deleting the replica's data renames its directory into the trash and
  /// the remover's thread removes the files; the replica answers its stop
  /// without waiting. Null: the directory is removed in place, inline.
  std::shared_ptr<dir_remover> trash;
  /// Keys the cleaner never removes (clean_job::keep_key); may be null.
  std::function<bool(std::string_view key)> clean_keep_key;
  /// The node's batched metadata writes (with `store`): the tick's HW
  /// checkpoint and producer snapshot, and their erasure on delete, are
  /// queued there and written for many partitions in one LMDB transaction;
  /// the log's own checkpoints (retention, truncation, epochs) go through
  /// it synchronously (put_now). Null: every write is its own commit.
  std::shared_ptr<metadata_writer> meta_writer;
};

/// Counters for tests and metrics.
struct partition_replica_stats {
  /// flush_atom messages handled (group commits).
  uint64_t commits = 0;
  /// log->flush() calls.
  uint64_t log_flushes = 0;
  /// Batches appended.
  uint64_t appends = 0;
  /// Produces answered as duplicates.
  uint64_t duplicates = 0;
  /// Produces refused with ec::throttled.
  uint64_t throttled = 0;
  /// Fetches parked for a long poll.
  uint64_t parked_fetches = 0;
  /// Producer snapshots written.
  uint64_t snapshots = 0;
  /// Segments deleted by retention.
  uint64_t segments_deleted = 0;
  /// Cleans swapped in, and the bytes they removed.
  uint64_t cleans = 0;
  uint64_t clean_bytes_reclaimed = 0;
};

struct partition_replica_state {
  /// A produce waiting for its commit.
  struct pending_produce {
    offset last{0};
    uint64_t bytes = 0;
    acks_mode acks = acks_mode::all;
    produce_response response;
    /// Where the answer goes (a request's promise or a slot of a
    /// multi-partition produce); not pending for acks=0 (already answered).
    produce_answer promise;
    /// Records appended (0 for a duplicate), for metrics.
    uint64_t records = 0;
    /// When the produce arrived, for the latency metric.
    std::chrono::steady_clock::time_point arrived;
    /// When it is answered request_timed_out if not covered (actor clock).
    caf::actor_clock::time_point deadline{};
  };

  /// A parked long-poll fetch.
  struct fetch_waiter {
    fetch_request request;
    caf::typed_response_promise<fetch_response> promise;
    /// When the fetch arrived, for the latency metric.
    std::chrono::steady_clock::time_point arrived;
    /// When its max wait ends (actor clock).
    caf::actor_clock::time_point deadline;
  };

  partition_replica_config cfg;
  log_config log_cfg;
  // Declared before `log`, which borrows it.
  std::unique_ptr<partition_checkpoint> checkpoint;
  std::unique_ptr<partition_log> log;
  producer_state producers;
  /// The clean the node's cleaner is running for this log (null: none).
  std::shared_ptr<clean_job> cleaning;

  /// Oldest first; ordered by offset.
  std::deque<pending_produce> pending;
  uint64_t pending_bytes = 0;
  /// True while a flush_atom is in the mailbox.
  bool commit_scheduled = false;
  /// The last tick's write_deferred() failed (logged once until it works).
  bool deferred_write_failed = false;
  /// cfg.on_replicated failed on a store error: replicated_pending keeps
  /// that batch (and those after it) for the next commit or tick.
  bool apply_failed = false;

  /// A sync on cfg.sync's threads: its result, filled in there.
  struct sync_slot {
    std::atomic<bool> done{false};
    caf::error result;
  };
  /// The flush in flight on cfg.sync (at most one), when it began, and the
  /// slot its result lands in.
  std::optional<flush_job> sync_job;
  std::shared_ptr<sync_slot> sync_result;
  std::chrono::steady_clock::time_point sync_began;
  /// Follower: batches fetches appended, applied through cfg.on_replicated
  /// once durable and below the HW, and (with cfg.sync) the leader's HW the
  /// last fetch gave.
  std::vector<std::string> replicated_pending;
  offset leader_hw{-1};
  /// Records the start's replay applied through cfg.on_replicated (-1:
  /// none, no on_replicated).
  int64_t replayed_records = -1;
  /// The end of what went through cfg.on_replicated (a cut below it
  /// replays the log into the node's stores).
  offset applied_end{0};
  /// Set by a failed flush: answered to every later produce and fetch.
  caf::error fenced;

  /// The current assignment (see the file comment) and whether this replica
  /// leads in it.
  partition_assignment assignment;
  bool leader = true;
  /// Follower: the leader node's broker, and the incarnation of the fetch
  /// loop (bumped on every role or epoch change; stale answers are dropped).
  caf::actor leader_broker;
  uint64_t fetch_gen = 0;
  bool fetch_in_flight = false;
  /// When the fetch in flight was sent (see check_fetch_stall).
  caf::actor_clock::time_point fetch_sent{};
  /// Leader: an ISR change sent to the controller and not answered yet.
  bool isr_change_pending = false;
  /// Leader: no ISR proposal before this (after a refusal), and the last
  /// refusal logged as a warning (a repeat is logged at debug level).
  caf::actor_clock::time_point isr_retry_at{};
  std::string isr_refusal;
  /// The epoch of the last batch in the log (-1: empty): a follower's
  /// last_fetched_epoch.
  int32_t last_batch_epoch = -1;

  /// Positions of the replicas (log offsets they hold durably); the
  /// leader's own is updated on each commit, the followers' on each fetch.
  std::vector<int32_t> isr;
  std::map<int32_t, offset> positions;
  /// Leader: when each follower was last caught up (Kafka's rule, see
  /// follower_fetched), and the log end and time of its previous fetch.
  std::map<int32_t, caf::actor_clock::time_point> caught_up;
  std::map<int32_t, offset> last_fetch_end;
  std::map<int32_t, caf::actor_clock::time_point> last_fetch_time;

  std::map<uint64_t, fetch_waiter> waiters;
  uint64_t next_waiter_id = 1;
  /// The one expire_atom timer for parked fetches: when it fires (nullopt:
  /// none pending). One timer serves every waiter, re-armed for the next
  /// deadline: a timer per fetch cost a wake-up of CAF's clock thread per
  /// follower fetch.
  std::optional<caf::actor_clock::time_point> expiry_at;

  offset checkpointed_hw{-1};
  /// When a tick last wrote the HW checkpoint (nullopt: none since start).
  std::optional<caf::actor_clock::time_point> last_checkpoint;
  offset snapshot_end{-1};
  caf::actor_clock::time_point last_snapshot;

  partition_replica_stats stats;

  /// The periodic tick (cfg.tick_interval > 0): when the scheduled one is
  /// due (an earlier tick_atom is a stale one from before a wake-up and is
  /// dropped), idle ticks in a row, whether ticking at the quiet period,
  /// and the log end and HW at the last tick.
  caf::actor_clock::time_point tick_due{};
  int idle_ticks = 0;
  bool quiet = false;
  offset tick_log_end{-1};
  offset tick_hw{-1};

  /// Closes the log if still open and answers parked requests.
  ~partition_replica_state();

  static inline const char* name = "partition-replica";
};

/// The log configuration a topic config asks for.
log_config make_log_config(const topic_config& tc, flush_policy flush);

/// Serves one partition replica as leader.
/// @pre cfg.dir is this replica's own directory; cfg.topic_cfg is valid.
partition_actor::behavior_type
partition_replica(partition_actor::stateful_pointer<partition_replica_state> self,
                  partition_replica_config cfg);

} // namespace ferry
