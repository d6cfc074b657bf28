#pragma once
// Where a partition log keeps the small facts that are not in its segments:
// log start offset, high watermark checkpoint and leader epoch history.
// The LMDB-backed implementation lives in metadata_store.hpp; tests may use
// memory_checkpoint.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <optional>
#include <vector>

namespace ferry {

/// A leader epoch and the first offset written in it.
struct epoch_entry {
  leader_epoch epoch{0};
  offset start_offset{0};
  bool operator==(const epoch_entry&) const = default;
};

/// Per-partition metadata kept outside the segment files.
struct partition_metadata {
  /// First offset still readable; advanced by retention and truncate_prefix.
  offset log_start{0};
  /// Last checkpointed high watermark (consumers read below it).
  offset high_watermark{0};
  /// Leader epoch history, ascending by epoch and start offset.
  std::vector<epoch_entry> epochs;
  bool operator==(const partition_metadata&) const = default;
};

/// Durable home of one partition's metadata. save() returns only once the
/// data is durable.
class partition_checkpoint {
public:
  virtual ~partition_checkpoint() = default;
  /// The last saved metadata, or nullopt if none was ever saved.
  virtual caf::expected<std::optional<partition_metadata>> load() = 0;
  virtual caf::error save(const partition_metadata& md) = 0;
  /// The save of a log's clean close(). What it adds to the saves before it
  /// is at most a newer high watermark and epoch (the log's start and
  /// truncations were saved when they happened, epochs are read back from
  /// the batches at open), so it need not be durable at once: a checkpoint
  /// that batches writes queues it (metadata_writer: one transaction for
  /// every partition a stopping node closes, instead of one each). Losing
  /// it costs what a crash costs. By default: save().
  virtual caf::error save_at_close(const partition_metadata& md) {
    return save(md);
  }
};

/// Keeps metadata in memory: for tests and for logs that need no durability.
class memory_checkpoint final : public partition_checkpoint {
public:
  caf::expected<std::optional<partition_metadata>> load() override {
    return saved_;
  }
  caf::error save(const partition_metadata& md) override {
    saved_ = md;
    return caf::none;
  }

private:
  std::optional<partition_metadata> saved_;
};

} // namespace ferry
