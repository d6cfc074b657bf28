#pragma once
// metadata_import: opens the data dir of a single-node ferryd from before
// "one metadata path" (commit af7074b and earlier). Such a node kept its
// metadata outside Raft, in two sub-databases of the metadata_store:
//   "cluster.topics"   key: topic name; value: version byte 1, then the
//                      topic_metadata in CAF's binary serialization.
//   "cluster.counters" key "producer_id.limit": int64 big-endian; every
//                      producer id below it may have been handed out.
// Today every node keeps its metadata in a Raft log (a node without
// --voters is a quorum of one), so at start a node without --voters calls
// import_legacy_metadata before its Raft member opens the log:
// - Raft log store empty (no snapshot, no entries) and legacy rows present:
//   the topics, every partition assigned to this node (leader, sole replica
//   and ISR; the epoch kept), and the next producer id = the limit are
//   saved as the Raft snapshot at index 1, term 1 (hard state term >= 1),
//   then the legacy rows are erased.
// - Raft log store not empty: an import already happened (or the node ran
//   Raft before); leftover legacy rows (a crash between the two steps) are
//   erased.
// Offsets, queue state and partition checkpoints live in their own
// sub-databases, which did not change: they are not touched.
// A record that does not decode fails the start with ec::corrupt_segment
// naming it (nothing is written then): dropping a topic silently would
// lose its data on the next reconcile.

#include "broker/error.hpp"

#include <cstddef>
#include <cstdint>

namespace ferry {

class metadata_store;
class raft_log_store;

/// Sub-database names and keys of the legacy format (the file comment).
namespace legacy_metadata_format {
inline constexpr const char* topics_db = "cluster.topics";
inline constexpr const char* counters_db = "cluster.counters";
inline constexpr const char* producer_id_limit_key = "producer_id.limit";
inline constexpr uint8_t topic_value_version = 1;
} // namespace legacy_metadata_format

/// Moves legacy single-node metadata from `store` into `raft` (see the
/// file comment). Returns the number of topics imported (0: nothing to do).
caf::expected<size_t> import_legacy_metadata(metadata_store& store,
                                             raft_log_store& raft,
                                             int32_t node_id);

} // namespace ferry
