#pragma once
// lease_table: the queue-mode state of one (group, topic, partition): which
// records are leased to which member until when, which wait for a retry, which
// are done, and which must go to the dead-letter queue. Pure logic: no actors,
// no I/O, no clock (every time is a timestamp_ms argument, so tests and the
// coordinator's virtual time control it).
//
// Where it sits: the queue-mode coordinator owns one table per partition of
// the group, feeds it the partition's records as it reads them (offer), serves
// members from it (acquire/ack/nack/reject/extend), runs expire() on a timer
// at next_deadline(), and persists take_changes() through queue_state_store.
//
// The tracked range ("window") runs from committed() -- the first record not
// done -- to read_end() -- one past the last record offered. Records below
// committed() are done and forgotten; records at or above read_end() have not
// been read yet. Offsets in the range that were never offered (gaps left by
// compaction or control batches) count as done.
//
// Per record:
//
//   offer --> available --acquire--> leased --ack--> done
//               ^  ^                  |  |
//               |  +-- nack / expire -+  +-- reject, or the max_attempts-th
//               |      (retry after       failure (nack/expire) -->
//               |       backoff)          dead_letter (pending)
//               +-- release_member / redeliver_all_leases   |
//                   (no attempt counted)                    dead_lettered()
//                                                           v
//                                                          done
//
// Dead-lettering is two steps so that the move is exactly-once in effect
// across a crash: the table marks the record pending (persist that), the
// caller writes it to the DLQ topic with an idempotent produce, then calls
// dead_lettered(), which marks it done (persist that). A crash in between
// leaves the record pending after restart, so the caller repeats the
// idempotent write; the record is never lost and never written twice.
//
// Ordering: with queue_ordering::none any member gets any available record.
// With queue_ordering::key the records of one key are delivered one at a time
// in offset order: only the key's first record that is not done and not
// pending dead-letter may be leased, so a key whose record is leased or waits
// for a retry holds its later records back; a record that goes to the
// dead-letter queue releases its key at once. Records with a null key are not
// ordered. Keys are compared by a 64-bit hash: a collision only serialises two
// keys, it never reorders one.
//
// Memory is bounded by two limits. config().window bounds the records that
// need a member or the dead-letter queue now (available, leased, pending
// dead-letter, restored rows not read again yet); config().max_waiting
// bounds the records that only wait: for a retry time or a delayed delivery
// (delayed), or behind an earlier record of their key (parked, ordering=key).
// offer() refuses new records with ec::throttled while either is full. So
// records that wait do not hold back the records behind them: a key parked
// by a failing record, or a flood of delayed records, lets the partition
// run on until max_waiting records wait. Done records leave the window at
// once: above committed() they are kept as intervals of offsets (one
// interval for any run of done records, so the window slides past a record
// that keeps failing and the committed position waits). Errors are kept to
// max_error_bytes.
//
// Persistence: the table tracks what changed since take_changes(); a change
// set holds committed(), the records to upsert (failed at least once, done
// above committed(), or pending dead-letter) and the records whose rows must
// go. By default leases are not persisted: restore() starts without any, so
// records leased before a restart are delivered again. With
// config().persist_leases (a cluster, where another node takes over the
// group) a leased record has a row too (phase leased: member, lease id,
// deadline), every acquire, extend and release changes it, and restore()
// brings the leases back: the same ids, members, deadlines and attempts, so
// an ack with a lease id of the old owner works at the new one. Records read
// back by restore() are stubs until offer() reaches them again (the caller
// re-reads the partition from committed()); a restored lease can be acked,
// nacked, rejected, extended and expired before that (a record it frees
// becomes available once offered); pending dead letters are reported at
// once.
//
// Time: a lease stays valid until expire() ends it, even past its deadline
// (ack, nack, reject and extend do not look at the clock), so the owner
// decides when expiry happens: run expire(now) before acquire(now).
//
// Errors of member requests: ec::lease_not_found (offset not tracked, already
// committed, not leased, done, or a lease id that never held it),
// ec::lease_expired (the lease id is the record's last expired lease),
// ec::not_lease_owner (another member holds the lease), ec::invalid_argument.
//
// Not thread-safe: one owner (an actor) calls it. Movable.

#include "broker/error.hpp"
#include "broker/model.hpp"
#include "broker/record_batch.hpp"
#include "broker/retry_policy.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry {

/// Delivery order within a partition of a queue-mode group.
enum class queue_ordering : uint8_t {
  none = 0, ///< any member, any record
  key = 1,  ///< one record of a key at a time, in offset order
};

/// "none" or "key".
const char* to_string(queue_ordering x);

/// Parses "none" or "key"; ec::invalid_config otherwise.
caf::expected<queue_ordering> parse_queue_ordering(std::string_view x);

/// The error recorded when a lease runs out.
inline constexpr std::string_view lease_expired_error = "lease-expired";

/// Longest error text kept per record (longer ones are cut).
inline constexpr size_t max_error_bytes = 1024;

struct lease_table_config {
  retry_config retry;
  queue_ordering ordering = queue_ordering::none;
  /// Most records tracked at once that do not only wait (see above); >= 1.
  size_t window = 10'000;
  /// Most records that only wait (delayed or parked); >= 1.
  size_t max_waiting = 100'000;
  /// Longest lease acquire() or extend() grants, counted from "now".
  std::chrono::milliseconds max_visibility{12 * 3600 * 1000};
  /// Persist leases in the change sets and take them back in restore()
  /// (see the file comment). Off: restore() turns lease rows into records
  /// available at once (attempts kept).
  bool persist_leases = false;
  /// Seeds the jitter and the lease ids; 0 = from std::random_device. A
  /// fixed seed is for tests: give each incarnation (restore) its own, or the
  /// ids of stale leases from before a restart can match new leases.
  uint64_t seed = 0;

  /// ec::invalid_config naming the first bad setting.
  caf::error validate() const;
};

/// A record handed to a member by acquire().
struct lease {
  offset off{0};
  /// Names this lease in ack/nack/reject/extend; never 0.
  uint64_t lease_id = 0;
  /// The lease ends at this time unless extended.
  timestamp_ms deadline = 0;
  /// 1 + the failed attempts before this delivery.
  int32_t attempt = 1;
  bool has_key = false;
  uint64_t key_hash = 0;
  timestamp_ms timestamp = 0; ///< the record's, as offered
  bool operator==(const lease&) const = default;
};

/// A record as the caller reads it from the partition, for offer(span).
struct queue_candidate {
  offset off{0};
  /// The record key; nullopt for a null key. Borrowed for the call.
  std::optional<std::string_view> key;
  timestamp_ms timestamp = 0;
  /// Delayed delivery: not available before this time (0 = at once).
  timestamp_ms deliver_at = 0;
};

enum class failure_outcome : uint8_t {
  retry,       ///< available again at `available_at`
  dead_letter, ///< pending dead-letter: write it to the DLQ
};

/// What a failed attempt (nack, expiry) did to the record.
struct failure_result {
  failure_outcome outcome = failure_outcome::retry;
  int32_t attempts = 0;        ///< failed attempts so far
  timestamp_ms available_at = 0; ///< for retry only
  bool operator==(const failure_result&) const = default;
};

/// A lease that expire() ended.
struct expired_lease {
  offset off{0};
  std::string member;
  uint64_t lease_id = 0;
  failure_result result;
};

/// A record to write to the dead-letter queue, with what its headers say.
struct dead_letter_info {
  offset off{0};
  int32_t attempts = 0;
  std::string error;
  timestamp_ms first_failure = 0;
  timestamp_ms last_failure = 0;
  bool operator==(const dead_letter_info&) const = default;
};

/// Header names of a record in a dead-letter queue.
namespace dlq_header {
inline constexpr std::string_view original_topic = "ferry-original-topic";
inline constexpr std::string_view original_partition =
  "ferry-original-partition";
inline constexpr std::string_view original_offset = "ferry-original-offset";
inline constexpr std::string_view attempts = "ferry-attempts";
inline constexpr std::string_view error = "ferry-error";
inline constexpr std::string_view group = "ferry-group";
inline constexpr std::string_view first_failure_ts = "ferry-first-failure-ts";
inline constexpr std::string_view last_failure_ts = "ferry-last-failure-ts";
} // namespace dlq_header

/// The eight ferry-* headers of a dead-lettered record, numbers in decimal.
std::vector<record_header> dead_letter_headers(const dead_letter_info& x,
                                               std::string_view group,
                                               std::string_view topic,
                                               partition_id p);

/// The default DLQ topic of a group: "<topic>.<group>.dlq".
std::string default_dlq_topic(std::string_view topic, std::string_view group);

// -- persisted form (queue_state_store encodes these) -------------------------

/// What a persisted record row says.
enum class queue_record_phase : uint8_t {
  retry = 1,       ///< failed at least once; available at `available_at`
  done = 2,        ///< done above the committed position
  dead_letter = 3, ///< pending dead-letter
  leased = 4,      ///< leased (persist_leases only): member, lease_id, deadline
};

struct queue_record {
  offset off{0};
  queue_record_phase phase = queue_record_phase::retry;
  int32_t attempts = 0;
  timestamp_ms first_failure = 0;
  timestamp_ms last_failure = 0;
  timestamp_ms available_at = 0;
  std::string last_error;
  /// phase leased only: the lease.
  std::string member;
  uint64_t lease_id = 0;
  timestamp_ms deadline = 0;
  bool operator==(const queue_record&) const = default;
};

/// Everything a table persists: restore() takes it back.
struct queue_snapshot {
  offset committed{0};
  std::vector<queue_record> records; ///< ordered by offset
  bool operator==(const queue_snapshot&) const = default;
};

/// What changed since the last take_changes(): one write_batch.
struct queue_changes {
  offset committed{0};
  /// The store must drop every row of the partition not in `upserts`
  /// (after mark_all_dirty(); `erased` is then empty).
  bool full = false;
  std::vector<queue_record> upserts;
  std::vector<offset> erased;
};

/// Where a record stands, for tests and describe.
enum class record_status : uint8_t {
  unread,      ///< restored, not offered again yet
  available,   ///< may be leased now (if its key allows)
  delayed,     ///< waits for its retry time or its delivery time
  parked,      ///< ordering=key: waits behind an earlier record of its key
  leased,
  done,
  dead_letter, ///< pending dead-letter
};

const char* to_string(record_status x);

struct record_view {
  offset off{0};
  record_status status = record_status::unread;
  int32_t attempts = 0;
  timestamp_ms first_failure = 0;
  timestamp_ms last_failure = 0;
  timestamp_ms available_at = 0;
  std::string last_error;
  std::string member;      ///< leased only
  uint64_t lease_id = 0;   ///< leased only
  timestamp_ms deadline = 0; ///< leased only
};

struct lease_table_stats {
  offset committed{0};
  offset read_end{0};
  size_t tracked = 0;   ///< records not done in the window + done above committed
  size_t available = 0; ///< ready to lease (ignoring key order)
  size_t delayed = 0;   ///< waiting for a retry or a delayed delivery
  size_t scheduled = 0; ///< of those: delayed deliveries, no attempt yet
  size_t parked = 0;    ///< ordering=key: behind an earlier record of the key
  size_t leased = 0;
  size_t dead_letter = 0;
  size_t done = 0;      ///< done above committed
};

class lease_table {
public:
  /// A table whose first record is `start` (the group's initial position).
  static caf::expected<lease_table> make(lease_table_config cfg, offset start);

  /// A table from persisted state: committed position, retry counts, done
  /// marks, pending dead letters, and leases if cfg.persist_leases (else a
  /// lease row is a record available at once). Rows below the committed
  /// position are ignored. ec::invalid_argument for duplicate offsets, a
  /// retry row without attempts or a lease row without member or id.
  static caf::expected<lease_table> restore(lease_table_config cfg,
                                            const queue_snapshot& snap);

  // -- feeding records ------------------------------------------------------

  /// Adds the record at `off`, read from the partition. Offsets must grow:
  /// ec::invalid_argument if off < read_end(). ec::throttled while the window
  /// is full (offer it again once committed() advanced). Restored rows
  /// skipped over (off past them) belonged to records that are gone from the
  /// log (compaction) and are dropped.
  /// A record with deliver_at in the future waits (like a retry, without
  /// an attempt) until then; it holds its key as any record does.
  caf::error offer(offset off, std::optional<std::string_view> key,
                   timestamp_ms timestamp, timestamp_ms deliver_at = 0);

  /// Offers candidates in order; stops without error when the window is full.
  /// Returns how many it took.
  caf::expected<size_t> offer(std::span<const queue_candidate> records);

  /// How many more records offer() would take now: the free part of the
  /// window (0 while max_waiting records wait), or, after restore(), at
  /// least up to the last restored row.
  size_t room() const;

  /// Records that only wait: delayed or parked (bounded by max_waiting).
  size_t waiting() const noexcept {
    return waiting_.size() + key_held_;
  }

  /// Records tracked that are not done (restored rows not read again yet
  /// included): O(1).
  size_t not_done() const noexcept {
    return window_.size();
  }

  /// True if the record at `off` is tracked and not done: O(log n).
  bool tracks(offset off) const {
    return window_.count(off) != 0;
  }

  /// True if the record at `off` only waits: delayed or parked (as of the
  /// last `now` seen). O(log n).
  bool waits(offset off) const;

  /// Calls f(off) for the records that may be leased at `now`, in offset
  /// order (as acquire() would take them), until f returns false.
  template <class F>
  void for_each_ready(timestamp_ms now, F f) {
    observe(now);
    for (auto off : ready_)
      if (!f(off))
        return;
  }

  /// One past the last offered record: where the caller reads on.
  offset read_end() const noexcept {
    return read_end_;
  }

  /// The log start moved past records we track (retention): forgets every
  /// record below `off`, leased or pending ones too, and reads on from there.
  /// Returns how many tracked records were dropped.
  size_t skip_to(offset off);

  /// Records in [from, to) that the log no longer holds (compaction or
  /// retention removed them after they were read, and the caller dropped
  /// their contents while they waited), except those `keep` names: each one
  /// that is offered and neither leased nor pending dead-letter becomes
  /// done without a delivery, like an offset the log never had. Returns the
  /// offsets forgotten.
  std::vector<offset> forget(offset from, offset to,
                             const std::function<bool(offset)>& keep = {});

  // -- member requests --------------------------------------------------------

  /// Leases up to `max_records` available records to `member` until
  /// now + visibility (default: the retry config's visibility timeout), in
  /// offset order. Does not expire leases: call expire(now) first.
  /// ec::invalid_argument for an empty member or a visibility that is not
  /// positive or exceeds max_visibility.
  /// `skip`, if given, names records not to lease now (the caller has no
  /// contents for them yet); they stay available.
  caf::expected<std::vector<lease>>
  acquire(std::string_view member, size_t max_records, timestamp_ms now,
          std::optional<std::chrono::milliseconds> visibility = std::nullopt,
          const std::function<bool(offset)>& skip = {});

  /// The record is done.
  caf::error ack(std::string_view member, offset off, uint64_t lease_id);

  /// A failed attempt: the record is available again after
  /// max(delay, backoff(attempts)), or pending dead-letter once attempts
  /// reach max_attempts. `error` is recorded (cut to max_error_bytes).
  caf::expected<failure_result>
  nack(std::string_view member, offset off, uint64_t lease_id,
       timestamp_ms now,
       std::chrono::milliseconds delay = std::chrono::milliseconds{0},
       std::string_view error = {});

  /// A failed attempt that sends the record to the dead-letter queue now.
  caf::error reject(std::string_view member, offset off, uint64_t lease_id,
                    timestamp_ms now, std::string_view error = {});

  /// Prolongs a lease so it runs at least until now + extra (never shortens
  /// it; capped at now + max_visibility). Returns the new deadline.
  caf::expected<timestamp_ms> extend(std::string_view member, offset off,
                                     uint64_t lease_id, timestamp_ms now,
                                     std::chrono::milliseconds extra);

  // -- coordinator --------------------------------------------------------------

  /// Ends every lease with deadline <= now as a failed attempt with error
  /// "lease-expired" (backoff applies as for a nack).
  std::vector<expired_lease> expire(timestamp_ms now);

  /// The record pending dead-letter has been written to the DLQ: it is done.
  /// Idempotent (a done or committed record is fine). ec::invalid_argument if
  /// it is tracked but not pending dead-letter; ec::not_found if unknown.
  caf::error dead_lettered(offset off);

  /// The member is gone: its leases end without counting an attempt and
  /// their records are available at once. Returns how many.
  size_t release_member(std::string_view member);

  /// Every lease ends without counting an attempt (coordinator restart or
  /// failover). Returns how many.
  size_t redeliver_all_leases();

  /// The lease `lease_id` on `off` ends without counting an attempt (it was
  /// never handed out: its answer failed). False if no such live lease.
  bool release(offset off, uint64_t lease_id);

  // -- queries --------------------------------------------------------------

  /// The end of the contiguous prefix of done records: the group's position.
  offset committed() const noexcept {
    return committed_;
  }

  /// Records pending dead-letter, by offset (restored ones included).
  std::vector<dead_letter_info> pending_dead_letters() const;

  /// The earliest lease deadline: when expire() has work.
  std::optional<timestamp_ms> next_deadline() const;

  /// The earliest retry time of a delayed record.
  std::optional<timestamp_ms> next_retry() const;

  std::optional<record_view> find(offset off) const;

  lease_table_stats stats() const;

  const lease_table_config& config() const noexcept {
    return cfg_;
  }

  // -- persistence ----------------------------------------------------------

  /// True if take_changes() would return something to write (a new table
  /// has its position to write).
  bool has_changes() const;

  /// The changes since the last call, and forgets them: write them in one
  /// batch. If that write fails, call mark_all_dirty() so the next change set
  /// rewrites everything.
  queue_changes take_changes();

  /// Makes the next change set a full rewrite.
  void mark_all_dirty();

  /// The whole persisted form (what restore() takes).
  queue_snapshot snapshot() const;

  /// Checks the internal indexes against the records: O(window), for tests.
  /// ec::invalid_argument naming the first broken invariant.
  caf::error verify() const;

private:
  enum class state : uint8_t { available, leased, done, dead_letter };

  struct entry {
    state st = state::available;
    /// False for a restored row not offered again yet.
    bool offered = false;
    /// A row for it exists in the store (as of the last change set).
    bool persisted = false;
    bool has_key = false;
    uint64_t key_hash = 0;
    timestamp_ms timestamp = 0;
    int32_t attempts = 0;
    timestamp_ms first_failure = 0;
    timestamp_ms last_failure = 0;
    timestamp_ms available_at = 0;
    std::string last_error;
    // The current lease (leased) or the last one.
    std::string member;
    uint64_t lease_id = 0;
    timestamp_ms deadline = 0;
    /// The id of the record's last lease that expired.
    uint64_t expired_lease_id = 0;
  };

  using window_map = std::map<offset, entry>;

  lease_table(lease_table_config cfg, offset start);

  caf::expected<entry*> find_lease(std::string_view member, offset off,
                                   uint64_t lease_id);
  void observe(timestamp_ms now);
  void promote(timestamp_ms now);
  void index_available(offset off, entry& e);
  bool key_head(offset off, const entry& e) const;
  bool full() const;
  void hold_key(offset off, const entry& e);
  void release_key(offset off, const entry& e);
  void end_lease(offset off, entry& e);
  void set_done(offset off, entry& e);
  failure_result fail(offset off, entry& e, timestamp_ms now,
                      std::string_view error,
                      std::chrono::milliseconds min_delay, bool dead_letter);
  size_t release_if(bool all, std::string_view member);
  window_map::iterator drop(window_map::iterator it);
  void pop_prefix();
  bool needs_row(const entry& e) const;
  /// Disjoint half-open intervals [first, second) of offsets.
  using interval_set = std::map<int64_t, int64_t>;
  bool done_contains(offset off) const;
  static void done_insert(interval_set& set, offset off);
  /// Removes the offsets below `end` from `set`, calling each(off) for them.
  template <class F>
  static void trim_below(interval_set& set, offset end, F each);
  size_t done_count() const;
  queue_record to_record(offset off, const entry& e) const;

  lease_table_config cfg_;
  retry_policy policy_;
  offset committed_;
  offset read_end_;
  /// The largest `now` seen: records due by then go to ready_.
  timestamp_ms clock_ = 0;
  uint64_t next_lease_id_ = 1;
  /// The records not done (and restored rows not read again yet).
  window_map window_;
  /// Done records above committed_ (not in window_).
  interval_set done_;
  /// The subset of done_ with a row in the store (written by a change set or
  /// restored): erased when committed_ passes them.
  interval_set done_rows_;
  /// Available records whose retry time has come.
  std::set<offset> ready_;
  /// Available records waiting for their retry time.
  std::set<std::pair<timestamp_ms, offset>> waiting_;
  /// Leases by deadline.
  std::set<std::pair<timestamp_ms, offset>> deadlines_;
  /// Pending dead letters.
  std::set<offset> dead_letters_;
  /// ordering=key: per key hash, its offered records that are available or
  /// leased. Only the first may be leased; only the first is in ready_ or
  /// waiting_ (the others are parked).
  std::unordered_map<uint64_t, std::set<offset>> keys_;
  /// The parked records: the sum over keys_ of (records - 1).
  size_t key_held_ = 0;
  // Change tracking for take_changes().
  std::set<offset> dirty_;
  std::vector<offset> erased_;
  std::optional<offset> saved_committed_;
  bool full_ = false;
};

} // namespace ferry
