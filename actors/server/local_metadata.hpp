#pragma once
// local_metadata: the metadata_actor of a cluster of one node. Topics, their
// configs and partition assignments (leader = this node, replicas = isr =
// {this node}, epoch 0) live in memory and in the node's metadata_store, so
// they survive restarts. raft_metadata implements the same interface for a
// cluster (ferryd --voters); nothing outside may assume either.
//
// Persistence (sub-databases of the metadata_store, see broker/FORMAT.md):
//   "cluster.topics"   key: topic name; value: version byte 1, then the
//                      topic_metadata in CAF's binary serialization.
//   "cluster.counters" key "producer_id.limit": int64 big-endian; every id
//                      below it may have been handed out.
// Producer ids are reserved in blocks (one durable commit per block, not per
// id); a restart skips the rest of the last block, so ids stay unique.
//
// Every change is written durably before it is applied in memory and before
// anyone hears of it: subscribers first get (update_atom, all topics), sent
// with this actor as the sender, then the requester gets its answer. A failed write leaves everything unchanged
// and answers the store's error (lmdb_error, disk_full).
//
// Lifecycle: spawn with a store that outlives the actor; it loads the topics
// at start (a store that cannot be read makes the actor quit with that error).
// Subscribers are monitored and dropped when they terminate.

#include "actors/protocol/interfaces.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace ferry {

class metadata_store;

struct local_metadata_config {
  /// This node's id: leader and only replica of every partition.
  int32_t node_id = 0;
  /// Shared with the node (one LMDB environment per data dir).
  std::shared_ptr<metadata_store> store;
  /// Producer ids reserved per durable commit.
  int64_t producer_id_block = 1000;
  /// The largest replication factor accepted: a node alone holds 1 replica.
  int16_t max_replication_factor = 1;
};

struct local_metadata_state {
  local_metadata_config cfg;
  /// Topics by name.
  std::map<std::string, topic_metadata> topics;
  std::vector<caf::actor> subscribers;
  /// Next producer id to hand out, and the end of the reserved block.
  int64_t next_producer_id = 0;
  int64_t producer_id_limit = 0;
  static inline const char* name = "local-metadata";
};

/// The metadata actor of a single node. @pre cfg.store != nullptr
metadata_actor::behavior_type
local_metadata(metadata_actor::stateful_pointer<local_metadata_state> self,
               local_metadata_config cfg);

/// Sub-database names and keys (mirrors the file comment).
namespace local_metadata_format {
inline constexpr const char* topics_db = "cluster.topics";
inline constexpr const char* counters_db = "cluster.counters";
inline constexpr const char* producer_id_limit_key = "producer_id.limit";
inline constexpr uint8_t topic_value_version = 1;
} // namespace local_metadata_format

} // namespace ferry
