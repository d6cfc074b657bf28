#pragma once
// queue_state_store: the durable state of queue-mode groups, per (group,
// topic, partition), in the broker's metadata_store (LMDB). What a lease_table
// needs to resume after a restart: the committed position, the attempts and
// failure details of records that failed at least once, the records done
// above the committed position, and the records pending dead-letter. Leases
// are stored only by a table with persist_leases (cluster mode, where the
// rows come from __consumer_state, broker/consumer_state.hpp); otherwise
// they are delivered again after a restart. No actor code.
//
// Lifecycle: construct over an open metadata_store, which it borrows (the
// store must outlive it). Thread-safe like the metadata_store. Each save() is
// one write_batch: one durable LMDB txn (~270 us), so the coordinator saves
// the changes of a whole request (or a timer tick) at once. Save before
// writing a pending dead letter to the DLQ, so a crash cannot lose the mark.
//
// Encoding (mirrored in broker/FORMAT.md, "Queue-mode group state"); all
// integers big-endian:
//
//   sub-database "queue_state"
//     prefix         = group bytes, 0x00, topic bytes, 0x00,
//                      partition (int32, 4 bytes)
//     position key   = prefix, 0x00
//     position value = version (1 byte, = 1), committed offset (int64)
//     record key     = prefix, 0x01, offset (int64, >= 0)
//     record value   = version (1 byte, = 1), phase (1 byte: 1 = retry,
//                      2 = done, 3 = dead-letter pending), attempts (int32),
//                      first failure ts ms (int64), last failure ts ms
//                      (int64), available-at ts ms (int64), error length
//                      (uint16), error bytes (UTF-8, at most 1024)
//     lease row value = version (1 byte, = 2), phase (1 byte, = 4 leased),
//                      then as above (attempts .. error bytes), then member
//                      length (uint16, >= 1), member bytes, lease id
//                      (uint64, != 0), deadline ts ms (int64)
//
// Keys sort by group, topic, partition, then the position row before the
// record rows in offset order; one prefix scan over "group 0x00" reads a
// group. A partition with record rows has a position row (both are written in
// the same batch). Record rows below the position are stale and ignored on
// load. A retry row has attempts >= 1. Anything else -- a truncated value,
// trailing bytes, an unknown version or phase, a malformed key -- decodes to
// ec::corrupt_segment naming the group, topic, partition and row.
//
// Worked example: group "g", topic "t", partition 0, committed 5; record 7
// failed twice (first at ts 1000, last at 2000, error "boom"), retry at 6000:
//   position key   67 00 74 00 00 00 00 00 00
//   position value 01 | 00 00 00 00 00 00 00 05
//   record key     67 00 74 00 00 00 00 00 01 | 00 00 00 00 00 00 00 07
//   record value   01 | 01 | 00 00 00 02 | 00 00 00 00 00 00 03 e8
//                  | 00 00 00 00 00 00 07 d0 | 00 00 00 00 00 00 17 70
//                  | 00 04 | 62 6f 6f 6d

#include "broker/error.hpp"
#include "broker/lease_table.hpp"
#include "broker/model.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class metadata_store;

/// The encodings (exposed for tests and FORMAT.md).
namespace queue_state_format {

inline constexpr std::string_view queue_db = "queue_state";
/// The group configs and DLQ producer rows (encoded by
/// actors/server/queue_coordinator.hpp, queue_group_format).
inline constexpr std::string_view groups_db = "queue_groups";
inline constexpr std::string_view producers_db = "queue_dlq_producers";
inline constexpr uint8_t position_kind = 0x00;
inline constexpr uint8_t record_kind = 0x01;
inline constexpr uint8_t position_value_version = 1;
inline constexpr size_t position_value_bytes = 1 + 8;
inline constexpr uint8_t record_value_version = 1;
inline constexpr size_t record_value_header_bytes = 1 + 1 + 4 + 8 + 8 + 8 + 2;
/// Version of lease rows (phase 4), which end with the lease.
inline constexpr uint8_t lease_value_version = 2;
/// member length + lease id + deadline after the error bytes.
inline constexpr size_t lease_tail_bytes = 2 + 8 + 8;

/// group 0x00 topic 0x00 partition(4). ec::invalid_argument for an empty or
/// NUL-containing name or a negative partition.
caf::expected<std::string> encode_partition_prefix(std::string_view group,
                                                   std::string_view topic,
                                                   partition_id p);
/// group 0x00: every key of the group starts with it.
std::string group_prefix(std::string_view group);
std::string position_key(std::string_view partition_prefix);
std::string record_key(std::string_view partition_prefix, offset off);
/// The "queue_dlq_producers" key: group 0x00 topic 0x00 partition(int32).
std::string producer_key(std::string_view group, std::string_view topic,
                         partition_id p);

struct decoded_key {
  std::string group;
  std::string topic;
  partition_id partition{0};
  bool position = false; ///< else a record row
  offset off{0};         ///< record rows only
};
/// ec::corrupt_segment if malformed.
caf::expected<decoded_key> decode_key(std::string_view key);

std::string encode_position_value(offset committed);
caf::expected<offset> decode_position_value(std::string_view value);

/// Cuts the error to max_error_bytes.
std::string encode_record_value(const queue_record& r);
/// Fills every field but `off`.
caf::error decode_record_value(std::string_view value, queue_record& out);

} // namespace queue_state_format

/// A partition with stored queue state.
struct queue_partition_ref {
  std::string topic;
  partition_id partition{0};
  bool operator==(const queue_partition_ref&) const = default;
};

class queue_state_store {
public:
  /// @param store borrowed; must outlive this object.
  explicit queue_state_store(metadata_store& store);

  /// Writes a change set of lease_table::take_changes() in one txn: the
  /// position, the upserted rows, the erased rows (with changes.full: every
  /// other row of the partition). Rows below the position are erased instead
  /// of written. ec::invalid_argument (nothing written) for bad names or a
  /// negative offset. With `position` false only the rows are written (the
  /// stored position and every other row stay; changes.committed and
  /// changes.full are ignored).
  caf::error save(std::string_view group, std::string_view topic,
                  partition_id p, const queue_changes& changes,
                  bool position = true);

  /// Replaces the partition's state by `snap` in one txn.
  caf::error replace(std::string_view group, std::string_view topic,
                     partition_id p, const queue_snapshot& snap);

  /// The stored state, or nullopt if the partition has none.
  caf::expected<std::optional<queue_snapshot>>
  load(std::string_view group, std::string_view topic, partition_id p);

  /// The stored state as a table (restore), or a new table starting at
  /// `initial` if the partition has none.
  caf::expected<lease_table> open_table(std::string_view group,
                                        std::string_view topic,
                                        partition_id p,
                                        const lease_table_config& cfg,
                                        offset initial);

  /// The partitions of `group` with stored state, ordered.
  caf::expected<std::vector<queue_partition_ref>>
  partitions(std::string_view group);

  /// Erases the partition's state (not an error if there is none).
  caf::error erase(std::string_view group, std::string_view topic,
                   partition_id p);

  /// Erases all queue state of the group in one txn.
  caf::error erase_group(std::string_view group);

  /// Erases the partition's state and its DLQ producer row in one txn.
  caf::error erase_partition_all(std::string_view group,
                                 std::string_view topic, partition_id p);

  /// Erases the group's config row, queue state and DLQ producer rows in one
  /// txn. ec::invalid_argument for a bad name.
  caf::error erase_group_all(std::string_view group);

private:
  caf::error scan_keys(std::string_view prefix, std::vector<std::string>& out);

  metadata_store& store_;
};

} // namespace ferry
