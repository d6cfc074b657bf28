#pragma once
// queue_coordinator: the coordinator of one queue-mode consumer group (issue
// 4). Many members consume the same partitions: the coordinator reads each
// partition itself, leases records to members for a visibility timeout,
// counts failed attempts, retries with backoff and moves exhausted or
// rejected records to the group's dead-letter topic. The node spawns one per
// queue group (on create, on first receive, and for every stored queue group
// at start) and routes receive, ack and describe to it.
//
// Per (topic, partition) the coordinator keeps a lease_table (the pure state
// machine, broker/lease_table.hpp) opened from the queue_state_store, a cache
// of the tracked records' contents, a reader and a DLQ writer. A topic
// becomes active on its first receive (or when it has stored state) and
// stays active; its partitions follow the topic metadata.
//
// Reader: one fetch in flight per partition through the broker handle, long
// polled (fetch_wait), from the table's read position, while the table has
// room() and the cache is under max_cached_bytes. Records are offered in
// order; what does not fit is fetched again later. A record that keeps
// failing (or a key parked behind one) holds the committed offset, not the
// reader: done records leave the window, and records that only wait (a
// retry or delivery time, or parked behind their key) count against
// max_waiting, not the window. Their contents are dropped once half the
// cache budget is used and read again (one fetch beside the reader) when
// they may be leased, so they do not pause the reader either. A partition the group has no state
// for begins at the group's start position (settings.start) when the group
// first reads its topic -- earliest (offset 0), latest or a time, looked up
// with list offsets before the first fetch and stored before anything is
// leased -- and at offset 0 when the topic gains it later; offset_out_of_range
// moves it to the log start (records lost to retention are skipped). Broker
// errors retry after retry_backoff.
//
// Reset (reset_atom): refused with group_not_empty while records of the
// topics are leased; else each partition of the topics becomes a table at
// its target offset with nothing tracked (retries, parked keys and pending
// dead letters are forgotten), stored as a full rewrite before the answer
// (cluster mode: replicated). Targets as for stream groups (offset_lookup.hpp).
//
// Receive: reads `topic` and `topics` (receive_topics; one member may serve
// several queues, each leased_message names its topic); expires due leases,
// then leases from the partitions of those topics in turn (a rotating start
// per topic list, so no topic starves another) up to max_records. Nothing
// available and wait_ms > 0: the request waits (a response promise) until
// records arrive on any of its topics, retries come due, leases expire, or
// wait_ms passes (then it gets an empty list); a topic of a waiting receive
// that is deleted fails it with unknown_topic. A partition's first fetch is
// not long polled, and until every partition of the topics answered it, a
// receive with wait_ms 0 waits for them (so the first receive on a topic
// sees what is there).
//
// Ack family: expire(now) first (so an ack after the deadline answers
// lease_expired even if the timer has not fired), then ack / nack / reject /
// extend on the table. Replies wait for the save of their changes (extend
// changes nothing stored and answers at once, except in cluster mode; a
// failed local save is logged and retried, and the replies do not wait for
// the retry).
//
// Leave: (leave_atom, queue_atom, member) ends the member's leases without a
// failed attempt (lease_table::release_member: the records are available at
// once, nothing is stored) and answers its parked receives with nothing.
//
// Alter: (alter_atom, group_atom, config) -- the node validated and stored
// the config -- saves the pending changes, then reopens every partition from
// the store with the new table settings (lease_table cannot change its retry
// policy or ordering in place). Leases end as in a restart (delivered again,
// attempts kept); the DLQ topic cannot change.
//
// Persistence (group commit): a request marks its partition dirty and the
// coordinator sends itself one flush_atom; the flush saves each dirty table's
// take_changes() with queue_state_store::save (one write_batch per change
// set), then answers the waiting acks and starts DLQ writes. A failed save
// marks the table all-dirty and retries after retry_backoff. Leases are not
// stored: after a restart they are delivered again (attempts kept).
//
// Cluster mode (cfg.state_topic set: the group's partition of
// __consumer_state, whose leader is this coordinator's node): the store is
// the node's view of that partition, which every replica keeps by applying
// its records (broker/consumer_state.hpp). The tables persist leases
// (lease_table_config::persist_leases). A flush produces every dirty table's
// change set as one record each, in one batch, with acks=all, one flush in
// flight at a time (changes made meanwhile go in the next); only after the
// produce succeeded are the change sets saved to the store and the waiting
// replies answered -- acks, extends, and receives too: a receive that leased
// records is answered after its lease rows are replicated, so a lease handed
// out is a lease the next coordinator knows (same id, member, deadline,
// attempt). A failed produce answers the waiting replies with
// coordinator_not_available, ends the leases of the waiting receives without
// an attempt, marks the tables all-dirty and sends everything again after
// retry_backoff. DLQ producer rows go through the partition the same way
// before the DLQ produce that uses them; a partition whose topic is gone is
// erased by a record too. A cluster-mode alter reopens the tables from their
// own state (leases kept) and rewrites it whole. The exit handler does not
// flush (the group moved away or the node stops: nothing unreplicated was
// answered). The node never forwards a __consumer_state produce of its own
// actors to another node (not_leader instead), so a coordinator that has
// just lost the leadership cannot write after its successor: its produce
// reaches only its own node's replica, which takes it only as the leader of
// the current epoch.
//
// Dead letters, exactly once in effect: a record pending dead-letter (saved
// as such before anything else happens) is written to the DLQ topic with an
// idempotent produce, one record per batch, one write in flight per source
// partition. Each source partition has its own producer id from init_pid,
// its DLQ partition (source partition mod the DLQ's partition count, chosen
// once) and a sequence counter, persisted in the "queue_dlq_producers" row
// with the offset the last sequence was assigned to. Before a produce the
// row says (offset, seq); the same offset after a restart reuses seq, so a
// write that landed before a crash is answered as a duplicate by the broker
// and never appears twice. Only after the produce succeeded does the table
// mark the record done (dead_lettered) and save it. out_of_order_sequence,
// unknown_producer_id and invalid_producer_epoch mean the broker lost or
// fenced the producer: a fresh producer id is taken and the write repeated.
// The DLQ topic (config dlq_topic, default "<topic>.<group>.dlq") is created
// on demand through the broker with the source topic's partition count and
// retention.ms -1 (dead letters are never deleted by time). A DLQ record
// keeps the key, value, timestamp and headers (minus old ferry-* DLQ
// headers) and gets the eight ferry-* headers of dead_letter_headers().
//
// Timers: one (tick_atom, token) at the earliest of lease deadlines, retry
// times, long-poll deadlines and retry_at of readers, DLQ writers and the
// flush; an earlier need replaces it (the old token goes stale), so it works
// under virtual time. Time for the tables (lease deadlines, failure
// timestamps) comes from cfg.clock (wall clock ms by default).
//
// Metrics (with cfg.probe): committed per partition after each save;
// redelivered (a lease with attempt > 1), lease_expired, dead_lettered (after
// the DLQ produce), dlq_depth (DLQ high watermark - log start as produce
// answers report it, summed over the DLQ partitions this group wrote); every
// cfg.metrics_interval the members (seen within max(visibility timeout,
// 30 s)) and, per partition, the lag (high watermark - committed, records
// not yet done) and lag seconds (age of the record at the committed offset)
// from a 1-byte fetch there, like a stream group's (same series, so the
// lag alerts and dashboards cover queue groups). describe_group shows the
// same lag and members.
//
// Stored configs: the node keeps each queue group's queue_group_config in
// the "queue_groups" sub-database (save_queue_group / load_queue_groups), so
// the group and its settings survive a restart; in a cluster the node
// produces it to __consumer_state and every replica applies it there.
//
// Encodings (all integers big-endian):
//   sub-database "queue_groups"
//     key   = group bytes
//     value = version (1 byte, = 1), max_attempts (int32), initial backoff
//             ms (int64), max backoff ms (int64), multiplier (IEEE-754
//             binary64 bits, 8), jitter (binary64 bits, 8), visibility ms
//             (int64), ordering (1 byte: 0 none, 1 key), DLQ topic length
//             (uint16), DLQ topic bytes ("" = default); version 2 (a
//             start other than earliest, or a delay) then the start
//             position (int64: -2 earliest, -1 latest, else a timestamp
//             ms) and the delivery delay ms (int64)
//   sub-database "queue_dlq_producers"
//     key   = group bytes, 0x00, topic bytes, 0x00, partition (int32)
//     value = version (1 byte, = 1), producer id (int64), epoch (int16),
//             DLQ partition (int32, -1 = not chosen), last offset (int64,
//             -1 = none), last sequence (int32, -1 = none)

#include "actors/protocol/interfaces.hpp"
#include "broker/lease_table.hpp"
#include "broker/partition_log.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/record_batch.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class metadata_store;

namespace metrics {
class group_probe;
} // namespace metrics

// -- stored group configs -----------------------------------------------------

namespace queue_group_format {

inline constexpr std::string_view groups_db = queue_state_format::groups_db;
inline constexpr std::string_view producers_db =
  queue_state_format::producers_db;
inline constexpr uint8_t group_value_version = 1;
/// A config whose start is not earliest (written only then, so a node of an
/// earlier version reads every other config).
inline constexpr uint8_t group_value_version_start = 2;
inline constexpr uint8_t producer_value_version = 1;
inline constexpr size_t producer_value_bytes = 1 + 8 + 2 + 4 + 8 + 4;

std::string encode_group_value(const queue_group_config& x);
/// ec::corrupt_segment if truncated, trailing bytes or unknown version.
caf::expected<queue_group_config> decode_group_value(std::string_view value);

} // namespace queue_group_format

/// Longest delivery delay (group default or header): 12 hours.
inline constexpr int64_t max_delivery_delay_ms = 43'200'000;

/// The header that delays one record's delivery: ms after its timestamp.
inline constexpr std::string_view delay_header = "ferry-delay-ms";

/// ec::invalid_config naming the first bad setting (mode must be "queue").
caf::error validate(const queue_group_config& x);

/// The lease table settings of a group config. @pre validate(x) is none
lease_table_config to_lease_table_config(const queue_group_config& x);

/// The DLQ topic of `topic` in a group: the configured one or the default.
std::string dlq_topic_of(const queue_group_config& x, std::string_view topic,
                         std::string_view group);

/// Stores (creates or replaces) a queue group's config.
caf::error save_queue_group(metadata_store& store, std::string_view group,
                            const queue_group_config& x);

/// Every stored queue group, by name.
caf::expected<std::map<std::string, queue_group_config>>
load_queue_groups(metadata_store& store);

/// One stored queue group's config; nullopt if there is none.
caf::expected<std::optional<queue_group_config>>
load_queue_group(metadata_store& store, std::string_view group);

/// Erases the group's config, queue state and DLQ producer rows.
caf::error erase_queue_group(metadata_store& store, std::string_view group);

// -- the actor ----------------------------------------------------------------

/// How to run a queue coordinator.
struct queue_coordinator_config {
  std::string group;
  /// The group's settings. @pre validate(settings) is none
  queue_group_config settings;
  /// Queue state, DLQ producer rows and the group's config live here.
  /// Required; shared by the node's coordinators.
  std::shared_ptr<metadata_store> store;
  /// Fetch, produce (DLQ), create topic, describe topic, init_pid.
  broker_actor broker;
  /// Initial topic metadata (later ones arrive as update_atom).
  std::vector<topic_metadata> topics;
  /// False while `topics` is not yet the cluster's list (node start): the
  /// first update is then authoritative. Topics that vanish from an
  /// authoritative list lose their queue state.
  bool topics_known = true;
  /// Long-poll wait of the coordinator's own fetches.
  caf::timespan fetch_wait = std::chrono::milliseconds{500};
  int32_t fetch_max_bytes = 1 << 20;
  /// Timeout of requests to the broker (added to fetch_wait for fetches).
  caf::timespan broker_timeout = std::chrono::seconds{10};
  /// Delay before a failed fetch, DLQ write or save is tried again.
  caf::timespan retry_backoff = std::chrono::seconds{1};
  /// Most records tracked per partition that a member or the DLQ can take
  /// now (lease_table window: available, leased, pending dead-letter; done
  /// records above the committed offset are intervals outside it).
  size_t window = 10'000;
  /// Most records per partition that only wait: for a retry or delivery
  /// time, or behind an earlier record of their key (lease_table
  /// max_waiting). About 250 bytes each, without their contents.
  size_t max_waiting = 100'000;
  /// Record bytes cached per partition before the reader pauses. Records
  /// that only wait keep their contents in the first half only; past it
  /// their contents are read again when they may be leased.
  size_t max_cached_bytes = size_t{16} << 20;
  /// Most records one receive returns.
  int32_t max_receive_records = 10'000;
  /// Seeds the jitter and lease ids; 0 = random. Give a restarted
  /// coordinator another seed (lease ids must not repeat).
  uint64_t seed = 0;
  /// Metrics of this group; null: none.
  std::shared_ptr<metrics::group_probe> probe;
  /// With a probe: how often members, lag and lag seconds are refreshed
  /// (one 1-byte fetch per partition at its committed offset); 0: never.
  caf::timespan metrics_interval = std::chrono::seconds{5};
  /// Cluster mode: the group's partition of __consumer_state. Non-empty:
  /// every state change (and DLQ producer row) is produced there with
  /// acks=all before it is applied to `store` and answered, and leases are
  /// persisted (see the file comment). Empty: `store` is written directly.
  std::string state_topic;
  partition_id state_partition{0};
  /// Wall clock in ms; empty means the system clock.
  clock_fn clock;
};

/// The idempotent producer that writes one source partition's dead letters
/// (the persisted "queue_dlq_producers" row).
struct dlq_producer {
  producer_id pid{-1};
  int16_t epoch = 0;
  partition_id dlq_partition{-1};
  offset last_offset{-1}; ///< the record `last_seq` was assigned to
  int32_t last_seq = -1;
  bool operator==(const dlq_producer&) const = default;
};

/// One source partition of the group.
struct queue_partition_state {
  topic_partition key;
  /// Tells async replies of an old incarnation (topic deleted, re-created).
  uint64_t incarnation = 0;
  std::optional<lease_table> table;
  /// Contents of tracked records that are not done.
  std::map<offset, record> cache;
  size_t cached_bytes = 0;
  // Reader.
  offset fetch_at{0};
  bool fetching = false;
  timestamp_ms fetch_retry_at = 0;
  /// A fetch that reads again contents dropped while records waited.
  bool reloading = false;
  timestamp_ms reload_retry_at = 0;
  offset high_watermark{-1};
  /// The last fetch failed (logged once per run of failures).
  bool fetch_failing = false;
  /// A first fetch (not long polled) was answered or failed: until then a
  /// receive without wait waits for it instead of answering "nothing".
  bool read_once = false;
  /// A "ferry-delay-ms" header that is not a delay was logged.
  bool bad_delay_logged = false;
  /// A new partition waits for the group's start position (latest or a
  /// time) to be looked up before its first fetch; nothing is stored yet.
  bool start_pending = false;
  // Persistence.
  bool dirty = false;
  /// Cluster mode: its last change set is in the produce in flight.
  bool saving = false;
  // DLQ writer.
  std::string dlq_topic;
  std::optional<dlq_producer> producer;
  bool dlq_busy = false;
  timestamp_ms dlq_retry_at = 0;
  int64_t dead_lettered = 0;
};

/// A receive waiting for records (long poll).
struct queue_waiter {
  queue_receive_request request;
  timestamp_ms deadline = 0;
  caf::typed_response_promise<std::vector<leased_message>> promise;
};

/// An ack answered once its changes are durable.
struct queue_pending_reply {
  caf::typed_response_promise<queue_ack_response> promise;
  queue_ack_response response;
};

/// Cluster mode: a receive answered once its leases are replicated.
struct queue_pending_receive {
  caf::typed_response_promise<std::vector<leased_message>> promise;
  std::vector<leased_message> messages;
  std::string member;
};

struct queue_coordinator_state {
  queue_coordinator_config cfg;
  lease_table_config table_cfg;
  std::unique_ptr<queue_state_store> queue_store;
  /// Partition count per topic; topics_known as in the config.
  std::map<std::string, topic_metadata> topics;
  bool topics_known = false;
  /// Topics members consume (or with stored state).
  std::set<std::string> active;
  std::map<topic_partition, queue_partition_state> partitions;
  uint64_t next_incarnation = 1;
  /// Rotating start partition of receives, per topic.
  std::map<std::string, size_t> rotation;
  /// Parked receives in arrival order.
  std::map<uint64_t, queue_waiter> waiters;
  uint64_t next_waiter = 1;
  /// Flush.
  bool flush_scheduled = false;
  timestamp_ms flush_retry_at = 0;
  std::vector<queue_pending_reply> after_flush;
  /// Other requests answered by the flush (reset): called with its outcome.
  std::vector<std::function<void(const caf::error&)>> after_flush_calls;
  /// Cluster mode: receives whose leases wait for the flush.
  std::vector<queue_pending_receive> receives_after_flush;
  /// Cluster mode: a state produce is in flight (one at a time, in order).
  bool flushing = false;
  /// Timer.
  uint64_t timer_token = 0;
  timestamp_ms timer_at = 0; ///< 0 = no timer
  /// DLQ depth per (DLQ topic, partition), for the probe.
  std::map<topic_partition, int64_t> dlq_depths;
  /// Members: when each last received or acked (leave forgets it). One
  /// seen within max(visibility timeout, 30 s) counts as a member.
  std::map<std::string, timestamp_ms> members_seen;
  /// While a topic is activated for the first time: its name (its new
  /// partitions take the group's start position).
  std::string first_read_topic;
  /// While an alter reopens the partitions: those that were waiting for
  /// their start position.
  std::set<topic_partition> start_pending_again;

  int64_t settings_start() const {
    return cfg.settings.start;
  }

  static inline const char* name = "queue_coordinator";
};

/// Coordinates one queue-mode group.
/// @pre cfg.store != nullptr, validate(cfg.settings) is none
queue_coordinator_actor::behavior_type
queue_coordinator(
  queue_coordinator_actor::stateful_pointer<queue_coordinator_state> self,
  queue_coordinator_config cfg);

} // namespace ferry
