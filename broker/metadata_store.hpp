#pragma once
// metadata_store: the broker's small durable facts in one LMDB environment
// (see FORMAT.md, "LMDB"). Per-partition metadata lives in the sub-database
// "partitions"; other sub-databases are created on demand through the generic
// keyed API (put/get/erase/scan_prefix/write_batch).
//
// Thread-safe: any thread may call any method (writes are serialised by the
// lmdb::env). Every write is one durable LMDB commit (~270 us): group many
// changes with write_batch(). Values returned are copies.

#include "broker/error.hpp"
#include "broker/lmdb.hpp"
#include "broker/model.hpp"
#include "broker/partition_checkpoint.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

/// The encodings of the "partitions" sub-database. Mirrors FORMAT.md.
namespace metadata_format {

/// Sub-database of per-partition metadata.
inline constexpr std::string_view partitions_db = "partitions";

/// Key: topic bytes, one 0x00, partition id as 4-byte big-endian int32.
inline constexpr size_t partition_key_suffix_bytes = 1 + 4;

/// Value: version (1 byte), log_start (8), high_watermark (8), epoch count
/// (4), then count x { epoch (4), start_offset (8) }; all big-endian.
inline constexpr uint8_t partition_value_version = 1;
inline constexpr size_t partition_value_header_bytes = 1 + 8 + 8 + 4;
inline constexpr size_t epoch_entry_bytes = 4 + 8;

/// The key of (topic, partition). ec::invalid_argument if the topic is empty
/// or contains a NUL byte, or the partition is negative.
caf::expected<std::string> encode_partition_key(std::string_view topic,
                                                partition_id p);

/// The prefix every key of `topic` starts with (topic + 0x00).
std::string topic_key_prefix(std::string_view topic);

/// Splits a partition key; ec::corrupt_segment if it is malformed.
caf::expected<std::pair<std::string, partition_id>>
decode_partition_key(std::string_view key);

std::string encode_partition_metadata(const partition_metadata& md);

/// ec::corrupt_segment if `value` is truncated, has trailing bytes or an
/// unknown version (the context says which).
caf::expected<partition_metadata> decode_partition_metadata(
  std::string_view value);

} // namespace metadata_format

/// One partition's metadata with its name, as list_partitions() returns it.
struct partition_record {
  std::string topic;
  partition_id partition{0};
  partition_metadata metadata;
  bool operator==(const partition_record&) const = default;
};

/// Puts and erases that write_batch() applies in one txn, in order.
class metadata_batch {
public:
  void put(std::string_view db, std::string_view key, std::string_view value);
  /// Erasing a missing key is not an error.
  void erase(std::string_view db, std::string_view key);
  void put_partition(std::string_view topic, partition_id p,
                     const partition_metadata& md);
  void erase_partition(std::string_view topic, partition_id p);

  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }

private:
  friend class metadata_store;
  struct op {
    bool erase = false;
    std::string db;
    std::string key;
    std::string value;
  };
  std::vector<op> ops_;
  // The first invalid argument given; write_batch() then writes nothing.
  caf::error error_;
};

class metadata_store {
public:
  /// Called for each entry; return false to stop.
  using scan_fn = std::function<bool(std::string_view key,
                                     std::string_view value)>;

  /// Opens (creating if needed) the store in `dir`, its own LMDB environment.
  static caf::expected<std::unique_ptr<metadata_store>>
  open(const std::filesystem::path& dir, lmdb::env_options opts = {});

  // -- partitions ---------------------------------------------------------

  /// ec::not_found if never saved; ec::corrupt_segment if undecodable.
  caf::expected<partition_metadata> get_partition(std::string_view topic,
                                                  partition_id p);
  caf::error put_partition(std::string_view topic, partition_id p,
                           const partition_metadata& md);
  /// Erasing a missing partition is not an error.
  caf::error erase_partition(std::string_view topic, partition_id p);
  /// All partitions, ordered by topic then partition id.
  caf::expected<std::vector<partition_record>> list_partitions();
  /// The partitions of one topic, ordered by partition id.
  caf::expected<std::vector<partition_record>>
  list_partitions(std::string_view topic);

  // -- generic keyed API (sub-databases created on demand) ----------------

  caf::error put(std::string_view db, std::string_view key,
                 std::string_view value);
  /// ec::not_found if the key (or the whole sub-database) is missing.
  caf::expected<std::string> get(std::string_view db, std::string_view key);
  /// Erasing a missing key is not an error.
  caf::error erase(std::string_view db, std::string_view key);
  /// Calls fn for each key of `db` starting with `prefix`, in key order, in
  /// one read txn. fn must not call back into this store's writers. A missing
  /// sub-database is empty.
  caf::error scan_prefix(std::string_view db, std::string_view prefix,
                         const scan_fn& fn);
  /// Applies every op of `batch` in one txn: all or nothing. Sub-databases
  /// it names are created first (empty), each in its own txn.
  caf::error write_batch(const metadata_batch& batch);

  lmdb::env& environment() { return *env_; }

private:
  explicit metadata_store(std::unique_ptr<lmdb::env> e, lmdb::dbi partitions);
  caf::expected<std::vector<partition_record>>
  list_with_prefix(std::string_view prefix);

  std::unique_ptr<lmdb::env> env_;
  lmdb::dbi partitions_;
};

/// A partition_checkpoint kept in a metadata_store under (topic, partition).
/// The store is borrowed: it must outlive this object.
class lmdb_partition_checkpoint final : public partition_checkpoint {
public:
  lmdb_partition_checkpoint(metadata_store& store, std::string topic,
                            partition_id p);
  caf::expected<std::optional<partition_metadata>> load() override;
  /// Durable when it returns, unless the store was opened with no_sync.
  caf::error save(const partition_metadata& md) override;

private:
  metadata_store& store_;
  std::string topic_;
  partition_id partition_;
};

} // namespace ferry
