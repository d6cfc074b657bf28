#pragma once
// producer_state: one partition's idempotent-producer table, as Kafka's
// ProducerStateManager keeps it. Per producer id: the current epoch and the
// last five batches' (first seq, last seq, first offset, last offset), enough
// to answer a retried batch with its original offsets and to reject gaps and
// zombie (older-epoch) producers.
//
// Lifecycle (owned by a partition replica, single-threaded, no I/O of its own
// except rebuild(), which reads the log):
//   decode_snapshot() or a default table -> rebuild(log) replays the batch
//   headers the snapshot does not cover -> per produce: check() -> append to
//   the log -> record() -> now and then encode_snapshot(durable end) into the
//   partition's metadata store. After a log truncation: truncate_to(new end)
//   (or, exactly, reload the snapshot and rebuild).
//
// Snapshot format (all integers big-endian), version 1:
//   magic "FPST" (4) | version (1) | end offset (8) | producer count (4) |
//   count x { producer id (8) | epoch (2) | last timestamp (8) |
//             batch count (1, 1..5) |
//             batch count x { first seq (4) | last seq (4) |
//                             first offset (8) | last offset (8) } } |
//   CRC-32C of every preceding byte (4)
// Example: one producer 7, epoch 0, one batch seq 0..2 at offsets 10..12,
// snapshot end 13: 4+1+8+4 + (8+2+8+1 + 24) + 4 = 64 bytes.
//
// A snapshot at end E holds only batches whose last offset is below E, so it
// may be taken at the durable end while later appends are still unflushed;
// replaying the log from E restores the rest.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ferry {

class partition_log;
struct batch_header;

/// Batches remembered per producer for duplicate detection (Kafka's value).
inline constexpr size_t producer_batches_kept = 5;

/// Sequence arithmetic with Kafka's wraparound: after INT32_MAX comes 0.
/// @pre seq >= 0, n >= 0
int32_t increment_sequence(int32_t seq, int32_t n);

/// One remembered batch of a producer.
struct producer_batch {
  int32_t first_seq = 0;
  int32_t last_seq = 0;
  offset first_offset{0};
  offset last_offset{0};
  bool operator==(const producer_batch&) const = default;
};

/// What a partition knows about one producer id.
struct producer_entry {
  int16_t epoch = -1;
  /// Oldest first, at most producer_batches_kept, never empty in a table.
  std::deque<producer_batch> batches;
  /// Max timestamp of the newest batch (for expiry).
  timestamp_ms last_timestamp = 0;

  int32_t last_seq() const { return batches.empty() ? -1 : batches.back().last_seq; }
  bool operator==(const producer_entry&) const = default;
};

/// What check() decided.
struct sequence_check {
  enum kind_t : uint8_t {
    /// Append it (and record() it afterwards).
    fresh,
    /// A retry of a remembered batch: answer with these offsets, no append.
    duplicate,
    /// producer id -1: no idempotence, append as is.
    not_idempotent,
  };
  kind_t kind = fresh;
  offset base_offset{0}; ///< duplicate only
  offset last_offset{0}; ///< duplicate only
};

class producer_state {
public:
  /// Decides what to do with a batch of `count` records (count >= 1) from
  /// (pid, epoch) starting at sequence `base_seq`. Errors:
  /// invalid_producer_epoch (epoch older than the known one),
  /// out_of_order_sequence (a gap, a seq behind the last one that is not a
  /// remembered duplicate, or a new epoch not starting at 0),
  /// invalid_request (pid >= 0 with a negative epoch, seq or count).
  /// An unknown producer may start at any sequence (its state may have been
  /// expired), as Kafka accepts.
  caf::expected<sequence_check> check(producer_id pid, int16_t epoch,
                                      int32_t base_seq, int32_t count) const;

  /// check() with the batch's own fields (count = last offset delta + 1).
  caf::expected<sequence_check> check(const batch_header& h) const;

  /// Remembers an appended batch. A newer epoch replaces the entry's batches;
  /// an older one is ignored. No-op for pid < 0.
  void record(producer_id pid, int16_t epoch, int32_t base_seq, int32_t count,
              offset first, offset last, timestamp_ms max_ts);

  /// record() from a header whose base offset is the assigned one. Skips
  /// batches without producer id or sequence. `seen` (the append time, if
  /// known) ages the entry when it is later than the batch's timestamps:
  /// a producer of records with old timestamps (a DLQ redrive, a replay)
  /// is active now, not when its records were made.
  void record(const batch_header& h, timestamp_ms seen = 0);

  /// Forgets batches at or above `end`; producers left without batches are
  /// removed (treated as unknown afterwards). end() drops to at most `end`.
  void truncate_to(offset end);

  /// Removes producers whose last timestamp is older than now - max_age_ms.
  /// Returns how many were removed.
  size_t expire(timestamp_ms now, int64_t max_age_ms);

  /// Replays the batch headers of `log` from end() to the log's end, so the
  /// table covers the whole log. A table ahead of the log (a snapshot newer
  /// than the log after a crash) is cleared and rebuilt from the log start;
  /// one behind the log start replays from the log start.
  caf::error rebuild(const partition_log& log, size_t chunk_bytes = 1u << 20);

  /// The snapshot of every batch below `end` (see the file comment).
  std::string encode_snapshot(offset end) const;

  /// Parses a snapshot. corrupt_segment for a truncated, oversized or
  /// inconsistent one (the context names the field), crc_mismatch for a
  /// damaged one; never reads past `bytes`.
  static caf::expected<producer_state> decode_snapshot(std::string_view bytes);

  /// The table reflects the log's batches below this offset.
  offset end() const { return end_; }

  /// The entry of `pid`, or nullptr.
  const producer_entry* find(producer_id pid) const;

  /// Producer id -> the last offset of its newest batch (what the log
  /// cleaner must not remove entirely).
  std::unordered_map<int64_t, int64_t> last_offsets() const;

  size_t size() const { return producers_.size(); }

  void clear();

  bool operator==(const producer_state&) const = default;

private:
  std::unordered_map<int64_t, producer_entry> producers_;
  offset end_{0};
};

} // namespace ferry
