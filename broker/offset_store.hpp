#pragma once
// offset_store: committed offsets of consumer groups and the list of groups,
// durable in the broker's metadata_store (LMDB). No actor code.
//
// Lifecycle: construct over an open metadata_store, which it borrows (the
// store must outlive it). Thread-safe like the metadata_store: coordinators of
// different groups may share one offset_store. Every write method is one
// durable LMDB txn (~270 us): commit() takes all offsets of a request at once.
//
// Encoding (mirrored in broker/FORMAT.md, "Consumer group offsets"); all
// integers big-endian:
//
//   sub-database "group_offsets"
//     key   = group bytes, 0x00, topic bytes, 0x00, partition (int32, 4 bytes)
//     value = version (1 byte, = 1), offset (int64), commit timestamp ms
//             (int64), metadata length (uint32), metadata bytes
//   sub-database "groups"
//     key   = group bytes
//     value = version (1 byte, = 1), generation (int32), mode length (1 byte),
//             mode bytes ("stream"), assignor length (1 byte), assignor bytes
//
// Keys sort by group, then topic, then partition id (NUL ends each name, so
// "a" sorts before "ab"), so one prefix scan over "group 0x00" reads a group.
// Group and topic names must be non-empty and free of NUL bytes; partitions
// non-negative. A value that is truncated, has trailing bytes or an unknown
// version decodes to ec::corrupt_segment naming the key.
//
// Worked example: group "g", topic "t", partition 2, offset 42, committed at
// ts 1000, metadata "m":
//   key   67 00 74 00 00 00 00 02
//   value 01 | 00 00 00 00 00 00 00 2a | 00 00 00 00 00 00 03 e8
//            | 00 00 00 01 | 6d

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <caf/expected.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class metadata_store;

/// One committed offset of a group.
struct committed_offset {
  std::string topic;
  partition_id partition{0};
  offset committed{-1};
  std::string metadata;
  timestamp_ms commit_timestamp = 0;
  bool operator==(const committed_offset&) const = default;
};

/// A group's entry in the list of groups.
struct group_record {
  std::string group;
  int32_t generation = 0;  ///< last completed generation
  std::string mode = "stream";
  std::string assignor;    ///< of that generation; "" if none
  bool operator==(const group_record&) const = default;
};

/// The encodings (exposed for tests and FORMAT.md).
namespace offset_format {

inline constexpr std::string_view offsets_db = "group_offsets";
inline constexpr std::string_view groups_db = "groups";
inline constexpr uint8_t offset_value_version = 1;
inline constexpr size_t offset_value_header_bytes = 1 + 8 + 8 + 4;
inline constexpr uint8_t group_value_version = 1;
/// Longest metadata string accepted (Kafka's offset.metadata.max.bytes).
inline constexpr size_t max_metadata_bytes = 4096;

/// ec::invalid_argument for an empty or NUL-containing name or a negative
/// partition.
caf::expected<std::string> encode_offset_key(std::string_view group,
                                             std::string_view topic,
                                             partition_id p);
/// group + 0x00: every offset key of the group starts with it.
std::string group_key_prefix(std::string_view group);

struct offset_key {
  std::string group;
  std::string topic;
  partition_id partition{0};
};
/// ec::corrupt_segment if malformed.
caf::expected<offset_key> decode_offset_key(std::string_view key);

std::string encode_offset_value(const committed_offset& x);
/// Fills committed, metadata and commit_timestamp of `out`.
caf::error decode_offset_value(std::string_view value, committed_offset& out);

std::string encode_group_value(const group_record& x);
/// Fills everything but the name.
caf::error decode_group_value(std::string_view value, group_record& out);

} // namespace offset_format

class offset_store {
public:
  /// @param store borrowed; must outlive this object.
  explicit offset_store(metadata_store& store);

  /// Stores all `offsets` of `group` in one txn, and, when `record` is given,
  /// the group's entry too. Durable when it returns (unless the store was
  /// opened with no_sync). Validation errors (ec::invalid_argument) write
  /// nothing.
  caf::error commit(std::string_view group,
                    const std::vector<committed_offset>& offsets,
                    const std::optional<group_record>& record = std::nullopt);

  /// Every committed offset of `group`, ordered by topic then partition.
  caf::expected<std::vector<committed_offset>> fetch(std::string_view group);

  /// One committed offset, or nullopt if none.
  caf::expected<std::optional<committed_offset>>
  fetch(std::string_view group, std::string_view topic, partition_id p);

  /// Creates or replaces the group's entry.
  caf::error put_group(const group_record& record);

  /// The group's entry, or nullopt if it has none.
  caf::expected<std::optional<group_record>> get_group(std::string_view group);

  /// Every group entry, ordered by name.
  caf::expected<std::vector<group_record>> list_groups();

  /// Erases one committed offset (not an error if there is none).
  caf::error erase(std::string_view group, std::string_view topic,
                   partition_id p);

  /// Erases the group's offsets and its entry in one txn.
  caf::error delete_group(std::string_view group);

private:
  metadata_store& store_;
};

} // namespace ferry
