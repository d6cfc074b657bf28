#pragma once
// Kafka RecordBatch v2 (magic 2): Ferry's unit of storage, replication and
// transport. The layout is documented in broker/FORMAT.md; the offsets below
// mirror it exactly.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// Compression of the records section: attribute bits 0-2, as Kafka defines.
enum class compression : uint8_t { none = 0, gzip = 1, snappy = 2, lz4 = 3, zstd = 4 };

/// Attribute bit 3.
enum class timestamp_type : uint8_t { create_time = 0, log_append_time = 1 };

/// Byte positions of the fixed batch header (all integers big-endian).
namespace batch_layout {
inline constexpr size_t base_offset = 0;            // int64
inline constexpr size_t batch_length = 8;           // int32: bytes after this field
inline constexpr size_t partition_leader_epoch = 12; // int32
inline constexpr size_t magic = 16;                 // int8, always 2
inline constexpr size_t crc = 17;                   // uint32, CRC-32C of [attributes, end)
inline constexpr size_t attributes = 21;            // int16
inline constexpr size_t last_offset_delta = 23;     // int32
inline constexpr size_t base_timestamp = 27;        // int64
inline constexpr size_t max_timestamp = 35;         // int64
inline constexpr size_t producer_id = 43;           // int64
inline constexpr size_t producer_epoch = 51;        // int16
inline constexpr size_t base_sequence = 53;         // int32
inline constexpr size_t records_count = 57;         // int32
inline constexpr size_t header_size = 61;           // first record starts here
/// base_offset + batch_length: the bytes not counted in batch_length.
inline constexpr size_t log_overhead = 12;
inline constexpr int8_t current_magic = 2;
inline constexpr uint16_t compression_mask = 0x07;
inline constexpr uint16_t timestamp_type_bit = 0x08;
inline constexpr uint16_t transactional_bit = 0x10;
inline constexpr uint16_t control_bit = 0x20;
} // namespace batch_layout

/// Largest batch the codec accepts unless told otherwise (guards allocations).
inline constexpr size_t default_max_batch_bytes = 64u << 20;

/// One record header. Kafka allows a null header value.
struct record_header {
  std::string key;
  std::optional<std::string> value;
  bool operator==(const record_header&) const = default;
};

/// One record as a user sees it. Offsets and timestamps are absolute.
struct record {
  /// Position within the batch (offset = base offset + offset_delta).
  int32_t offset_delta = 0;
  /// Milliseconds since epoch.
  timestamp_ms timestamp = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<record_header> headers;
  bool operator==(const record&) const = default;
};

/// The fixed part of a batch, decoded.
struct batch_header {
  offset base_offset{0};
  int32_t batch_length = 0;
  int32_t partition_leader_epoch = 0;
  int8_t magic = 2;
  uint32_t crc = 0;
  int16_t attributes = 0;
  int32_t last_offset_delta = 0;
  timestamp_ms base_timestamp = 0;
  timestamp_ms max_timestamp = 0;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
  int32_t records_count = 0;

  /// Bytes of the whole batch including base offset and length.
  size_t total_size() const {
    return batch_layout::log_overhead + static_cast<size_t>(batch_length);
  }
  offset last_offset() const { return base_offset + last_offset_delta; }
  offset next_offset() const { return last_offset() + 1; }
  ferry::compression codec() const {
    return static_cast<ferry::compression>(attributes & batch_layout::compression_mask);
  }
  ferry::timestamp_type ts_type() const {
    return (attributes & batch_layout::timestamp_type_bit)
             ? timestamp_type::log_append_time
             : timestamp_type::create_time;
  }
  bool transactional() const { return attributes & batch_layout::transactional_bit; }
  bool control() const { return attributes & batch_layout::control_bit; }
};

/// What an encoder needs besides the records.
struct batch_meta {
  offset base_offset{0};
  int32_t partition_leader_epoch = 0;
  ferry::compression codec = compression::none;
  ferry::timestamp_type ts_type = timestamp_type::create_time;
  bool transactional = false;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
};

/// A batch decoded completely.
struct decoded_batch {
  batch_header header;
  std::vector<record> records;
};

// -- header-level access (cheap: no record parsing) --------------------------

/// Parses and checks the fixed header at the start of `buf`: enough bytes for
/// the header (truncated_batch), magic 2 (bad_magic), batch_length within
/// [header_size - log_overhead, max_batch_bytes] (length_overflow), and the
/// whole batch present in `buf` (truncated_batch). Does not check the CRC.
caf::expected<batch_header>
parse_batch_header(std::string_view buf,
                   size_t max_batch_bytes = default_max_batch_bytes);

/// Recomputes the CRC-32C over [attributes, end) of one complete batch and
/// compares it with the stored one (crc_mismatch).
caf::error verify_batch_crc(std::string_view batch);

/// Overwrites the base offset of a batch in place. Not covered by the CRC.
void set_base_offset(std::span<char> batch, offset base);

/// Overwrites the partition leader epoch in place. Not covered by the CRC.
void set_partition_leader_epoch(std::span<char> batch, int32_t epoch);

// -- full codec -------------------------------------------------------------

/// Encodes `records` as one batch. Records keep their offset_delta and
/// timestamp; the base timestamp is the first record's, the max timestamp the
/// largest. Compresses the records section with meta.codec (none, gzip, lz4,
/// zstd; snappy gives unsupported_compression). Empty `records` is
/// invalid_argument.
caf::expected<std::string> encode_batch(const batch_meta& meta,
                                        const std::vector<record>& records);

/// The batch `original` (one complete, valid batch) with only `kept` of its
/// records (log compaction): every header field stays as it was (base offset,
/// last offset delta, base and max timestamp, producer id, epoch and base
/// sequence, so offsets and idempotence survive) except batch_length,
/// records_count and the CRC; the records are written relative to the
/// original base timestamp and compressed with the original codec. With no
/// records the batch keeps only its header, uncompressed (Kafka keeps such
/// empty batches for producer state). `kept` must be records of `original`
/// in order.
caf::expected<std::string> rebuild_batch(std::string_view original,
                                         const std::vector<record>& kept);

/// Decodes one complete batch: header checks as parse_batch_header, then the
/// CRC, then decompression, then every record's varints and lengths. Each kind
/// of damage gives its own code (see ec); trailing bytes after `batch` are not
/// allowed (pass exactly one batch).
caf::expected<decoded_batch>
decode_batch(std::string_view batch,
             size_t max_batch_bytes = default_max_batch_bytes);

} // namespace ferry
