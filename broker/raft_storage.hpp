#pragma once
// Durable Raft state: the hard state (term, vote), the log and the newest
// snapshot. raft_log_store is the interface raft_core writes through;
// raft_storage keeps it in LMDB, raft_memory_store in memory (pure core
// tests). Every call returns once its change is durable (unless the env was
// opened with no_sync), so the core can answer a vote or acknowledge entries
// right after it returns: that is Raft's crash-safety rule.
//
// Log layout: the log holds entries snapshot.index+1 .. last, contiguous. A
// snapshot covers everything up to its index; saving one compacts the log.
//
// LMDB encoding (mirrored in broker/FORMAT.md, "Raft"); integers big-endian:
//
//   sub-database "raft.state"
//     key "hard"   value: version (1 byte, = 1), term (uint64),
//                         voted_for (int32, -1 = nobody)
//   sub-database "raft.log"
//     key: index (uint64, >= 1; keys sort by index)
//     value: version (1 byte, = 1), term (uint64), kind (1 byte: 0 command,
//            1 no-op), data (the rest)
//   sub-database "raft.snapshot"
//     key "meta"   value: version (1 byte, = 1), last included index
//                         (uint64), last included term (uint64)
//     key "data"   value: the state machine's snapshot bytes
//
// Worked example: term 3, voted for node 2; entry 5 of term 3 holding "ab":
//   raft.state "hard" -> 01 | 00 00 00 00 00 00 00 03 | 00 00 00 02
//   raft.log   00 00 00 00 00 00 00 05 -> 01 | 00 .. 00 03 | 00 | 61 62
//
// Anything that does not decode (short value, unknown version or kind, a
// gap in the log, an entry at or below the snapshot index) is
// ec::corrupt_segment naming the row.
//
// Lifecycle: raft_storage borrows an open lmdb::env (the node's
// metadata_store env, or its own in tests), which must outlive it. One
// raft_storage per env. Not thread-safe beyond what the env guarantees: one
// owner (the Raft actor) calls it.

#include "broker/error.hpp"
#include "broker/raft_types.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

namespace ferry {

namespace lmdb {
class env;
}

/// Everything a Raft node persisted, as load() returns it.
struct raft_persistent_state {
  raft_hard_state hard;
  raft_snapshot snapshot;
  /// Entries snapshot.index+1, snapshot.index+2, ...
  std::vector<raft_entry> entries;
};

/// Where raft_core keeps its durable state. Each call is one atomic change.
class raft_log_store {
public:
  virtual ~raft_log_store() = default;

  /// Everything stored (empty state for a new store).
  virtual caf::expected<raft_persistent_state> load() = 0;

  /// Replaces term and vote.
  virtual caf::error save_hard_state(const raft_hard_state& hs) = 0;

  /// Deletes every entry with index >= `first`, then stores `entries` at
  /// first, first+1, ... (empty `entries`: truncation only).
  /// @pre snapshot.index < first <= last stored index + 1
  virtual caf::error append(uint64_t first,
                            const std::vector<raft_entry>& entries) = 0;

  /// Stores `snap` as the newest snapshot and deletes the entries it covers
  /// (index <= snap.index); with keep_suffix = false also every later entry
  /// (a follower whose log conflicts with an installed snapshot).
  virtual caf::error save_snapshot(const raft_snapshot& snap,
                                   bool keep_suffix) = 0;
};

/// The LMDB raft_log_store (see the file comment for the encoding).
class raft_storage final : public raft_log_store {
public:
  /// Opens (creating if needed) the three sub-databases in `env`, which
  /// the caller keeps open for this object's lifetime.
  static caf::expected<std::unique_ptr<raft_storage>> open(lmdb::env& env);
  ~raft_storage() override;

  caf::expected<raft_persistent_state> load() override;
  caf::error save_hard_state(const raft_hard_state& hs) override;
  caf::error append(uint64_t first,
                    const std::vector<raft_entry>& entries) override;
  caf::error save_snapshot(const raft_snapshot& snap,
                           bool keep_suffix) override;

private:
  struct dbis;
  raft_storage(lmdb::env& env, std::unique_ptr<dbis> d);

  lmdb::env& env_;
  std::unique_ptr<dbis> dbis_;
};

/// A raft_log_store in memory, for tests of the pure core.
class raft_memory_store final : public raft_log_store {
public:
  caf::expected<raft_persistent_state> load() override;
  caf::error save_hard_state(const raft_hard_state& hs) override;
  caf::error append(uint64_t first,
                    const std::vector<raft_entry>& entries) override;
  caf::error save_snapshot(const raft_snapshot& snap,
                           bool keep_suffix) override;

  /// Number of successful calls that changed something (for tests).
  uint64_t writes = 0;
  /// While set, every write fails with it and changes nothing, as LMDB's
  /// do on a full disk (for tests).
  caf::error fail_writes;

private:
  raft_hard_state hard_;
  raft_snapshot snapshot_;
  std::map<uint64_t, raft_entry> log_;
};

/// The encodings of the LMDB layout (exposed for tests and FORMAT.md).
namespace raft_format {
inline constexpr std::string_view state_db = "raft.state";
inline constexpr std::string_view log_db = "raft.log";
inline constexpr std::string_view snapshot_db = "raft.snapshot";
inline constexpr std::string_view hard_key = "hard";
inline constexpr std::string_view meta_key = "meta";
inline constexpr std::string_view data_key = "data";
inline constexpr uint8_t version = 1;

std::string encode_hard_state(const raft_hard_state& hs);
caf::expected<raft_hard_state> decode_hard_state(std::string_view v);
std::string encode_index(uint64_t index);
std::string encode_entry(const raft_entry& e);
caf::expected<raft_entry> decode_entry(std::string_view v);
} // namespace raft_format

} // namespace ferry
