#pragma once
// dlq_store: the durable facts of DLQ redrives in the broker's metadata_store
// (LMDB): which DLQ records were redriven (the "redriven marks") and the
// idempotent producers that re-produce them. No actor code.
//
// Lifecycle: construct over an open metadata_store, which it borrows (the
// store must outlive it). Thread-safe like the metadata_store.
//
// Encoding (mirrored in broker/FORMAT.md, "DLQ redrives"); integers
// big-endian:
//
//   sub-database "dlq_redriven"
//     key   = DLQ topic bytes, 0x00, partition (int32), offset (int64, >= 0)
//     value = version (1 byte, = 1), redriven at ts ms (int64), target
//             partition (int32), target offset (int64), target topic bytes
//             (the rest of the value)
//   sub-database "dlq_redrive_producers"
//     key   = DLQ topic bytes, 0x00, DLQ partition (int32), target topic
//             bytes, 0x00, target partition (int32)
//     value = version (1 byte, = 1), producer id (int64), epoch (int16),
//             last DLQ offset (int64, -1 = none), last sequence (int32,
//             -1 = none)
//
// A mark is written after the redriven copy was acknowledged. The producer
// row is written before each produce with the DLQ offset its sequence was
// assigned to: a redrive retried after a crash finds the same offset and
// reuses the sequence, so the broker answers a copy that landed before the
// crash as a duplicate (the same scheme as the queue coordinator's
// "queue_dlq_producers" rows). Marks below a partition's log start are
// dropped by purge; all marks and producers of a topic go when it is
// deleted.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace ferry {

class metadata_store;

namespace dlq_store_format {

inline constexpr std::string_view marks_db = "dlq_redriven";
inline constexpr std::string_view producers_db = "dlq_redrive_producers";
inline constexpr uint8_t mark_value_version = 1;
inline constexpr uint8_t producer_value_version = 1;
inline constexpr size_t mark_value_header_bytes = 1 + 8 + 4 + 8;
inline constexpr size_t producer_value_bytes = 1 + 8 + 2 + 8 + 4;

/// topic 0x00 partition(4). ec::invalid_argument for an empty or
/// NUL-containing topic or a negative partition.
caf::expected<std::string> partition_prefix(std::string_view topic,
                                            partition_id p);

} // namespace dlq_store_format

/// Where a redriven record went.
struct redrive_mark {
  timestamp_ms at = 0;
  std::string target_topic;
  partition_id target_partition{0};
  offset target_offset{0};
  bool operator==(const redrive_mark&) const = default;
};

/// The idempotent producer of (DLQ partition, target partition).
struct redrive_producer {
  producer_id pid{-1};
  int16_t epoch = 0;
  offset last_offset{-1}; ///< the DLQ offset `last_seq` was assigned to
  int32_t last_seq = -1;
  bool operator==(const redrive_producer&) const = default;
};

class dlq_store {
public:
  /// @param store borrowed; must outlive this object.
  explicit dlq_store(metadata_store& store);

  /// Records that (topic, p, off) was redriven.
  caf::error mark(std::string_view topic, partition_id p, offset off,
                  const redrive_mark& m);

  /// The mark of (topic, p, off), or nullopt.
  caf::expected<std::optional<redrive_mark>>
  get_mark(std::string_view topic, partition_id p, offset off);

  /// Offsets in [from, to) of (topic, p) with a mark.
  caf::expected<std::set<int64_t>> marked(std::string_view topic,
                                          partition_id p, offset from,
                                          offset to);

  /// Erases the marks of (topic, p) below `before`; answers how many.
  caf::expected<size_t> erase_below(std::string_view topic, partition_id p,
                                    offset before);

  /// Erases every mark and producer row of `topic` in one txn.
  caf::error erase_topic(std::string_view topic);

  /// Topics with marks or producer rows.
  caf::expected<std::set<std::string>> topics();

  /// The producer of (dlq, p) -> (target, tp), or nullopt.
  caf::expected<std::optional<redrive_producer>>
  get_producer(std::string_view dlq, partition_id p, std::string_view target,
               partition_id tp);

  caf::error put_producer(std::string_view dlq, partition_id p,
                          std::string_view target, partition_id tp,
                          const redrive_producer& x);

private:
  metadata_store& store_;
};

} // namespace ferry
