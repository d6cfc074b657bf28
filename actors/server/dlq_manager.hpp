#pragma once
// dlq_manager: the DLQ operations of a node (issue 4): list, show, redrive
// and purge dead-letter topics. The node spawns one and relays the broker
// requests (list_atom, dlq_atom), (show_atom, dlq_show_request),
// (redrive_atom, dlq_redrive_request) and (purge_atom, dlq_purge_request) to
// it, and sends it every topic list (update_atom) like the coordinators.
//
// Which topics are DLQs: for every queue group (the stored ones,
// load_queue_groups; in a cluster those of every node, asked from the broker
// with (list_atom, queue_atom) before each request) and every topic T, dlq_topic_of(group config, T, group) if that topic
// exists (source topic T); a configured dlq_topic that exists (source
// unknown unless the default naming matched); and any topic whose name ends
// in ".dlq" (a stream group's DLQ: "<topic>.<group>.dlq" of an existing
// topic names its source and group). Requests naming another existing topic get invalid_request
// ("not a DLQ"); a missing one unknown_topic.
//
// Everything goes through the broker handle (the node): describe topic for
// log start and high watermark, fetch (replica_id -2: an internal reader,
// not consumer traffic) to read records, list offsets by timestamp for the
// rate, init_pid and produce for redrives, (purge_atom, topic_partition,
// offset) for purge. Nothing blocks: each request is a chain of async
// requests held in a job.
//
// Redrive (one job at a time; later ones queue, so the producer sequences
// of a DLQ partition never interleave): reads the selected records in
// offset order, skips those with a redriven mark (counted as skipped), and
// re-produces each other record alone in one batch to its target: to_topic,
// or its ferry-original-topic; the partition is ferry-original-partition if
// the target has it, else the key's partition (murmur2) or 0 for no key.
// The copy keeps key, value, timestamp and headers, with
// ferry-redriven-from = "<dlq>/<partition>/<offset>" and
// ferry-redrive-count = the record's count + 1. Idempotence: each (DLQ
// partition, target partition) has a producer (init_pid) whose row in the
// dlq_store records the DLQ offset its last sequence was assigned to; a new
// record gets the next sequence (stored before the produce); a retry after
// a crash finds the same offset, reuses the sequence, and the broker
// answers the duplicate instead of appending it again. After the produce
// the record is marked redriven (dlq_store::mark). out_of_order_sequence,
// unknown_producer_id and invalid_producer_epoch take a fresh producer id
// (at most max_producer_resets times per record). rate_per_second > 0
// paces the produces with delayed (tick_atom, job) messages; max_records > 0
// stops after that many redriven records (next_offsets continue).
//
// Show: scans each selected partition from from_offset (clamped to the log
// start) while the shared max_scan budget lasts, keeps records matching the
// filters, merges them by (offset, partition), keeps max_records, and sets
// next_offsets so a follow-up request misses nothing.
//
// Purge: asks the broker to move each selected partition's log start to
// before_offset (-1 or beyond: the high watermark) and drops the marks below
// the new start.
//
// Topic list updates: marks and producer rows of topics not in the list are
// erased (a deleted DLQ loses its marks; a re-created one starts clean).
//
// Cluster mode (cfg.state_topic set, i.e. __consumer_state): the node sends
// every show, redrive and purge of a DLQ topic to the DLQ manager of the
// topic's home, the node leading partition partition_for_key(dlq_home_key(
// topic)) of __consumer_state, whose store is that partition's replicated
// view. Every redrive producer row, mark, purge's mark erase and deleted
// topic's erase is first produced there with acks=all as a
// __consumer_state record (kinds 7-10, broker/consumer_state.hpp), and only
// then written to the local dlq_store (every replica of the partition
// applies the same records to its node's store): the producer row before
// the redrive produce that uses it, the mark after that produce succeeded.
// The node refuses a __consumer_state produce of its own actors when it
// does not lead the partition, so a home that lost the leadership stops
// its running redrive at its next state produce (the job fails with
// not_leader), and a redrive repeated at the new home skips every mark the
// old one replicated and re-sends an unmarked record whose copy may have
// landed with the replicated producer row's sequence (a duplicate answer,
// no second copy). The topic-deleted erase is attempted by every node's
// manager (only the home's produce succeeds) and done locally in any case.
// Single-node mode (state_topic empty) writes the store directly.

#include "actors/protocol/interfaces.hpp"
#include "broker/dlq_store.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class metadata_store;

/// The headers a redrive adds.
namespace redrive_header {
inline constexpr std::string_view redriven_from = "ferry-redriven-from";
inline constexpr std::string_view redrive_count = "ferry-redrive-count";
} // namespace redrive_header

/// Local to a node (never remote): the node relays the broker's DLQ
/// requests here.
using dlq_manager_actor = caf::typed_actor<
  caf::replies_to<list_atom, dlq_atom>::with<std::vector<dlq_info>>,
  caf::replies_to<show_atom, dlq_show_request>::with<dlq_show_response>,
  caf::replies_to<redrive_atom, dlq_redrive_request>::with<dlq_redrive_response>,
  caf::replies_to<purge_atom, dlq_purge_request>::with<dlq_purge_response>,
  /// The topic list changed (drops marks of deleted topics).
  caf::reacts_to<update_atom, std::vector<topic_metadata>>,
  /// Internal: a paced redrive job may continue.
  caf::reacts_to<tick_atom, uint64_t>>;

struct dlq_manager_config {
  /// Queue group configs and the dlq_store live here. Required.
  std::shared_ptr<metadata_store> store;
  /// Describe, fetch, list offsets, init_pid, produce, purge.
  broker_actor broker;
  caf::timespan broker_timeout = std::chrono::seconds{10};
  int32_t fetch_max_bytes = 1 << 20;
  /// How often one record's produce may take a fresh producer id.
  int max_producer_resets = 3;
  /// Wall clock in ms (rate window, mark timestamps); empty: system clock.
  clock_fn clock;
  /// Cluster mode: the internal topic (__consumer_state) where redrive
  /// bookkeeping is produced before it is stored (see the file comment).
  /// Empty: the store is written directly.
  std::string state_topic;
};

/// A record read from a DLQ partition.
struct dlq_read_record {
  partition_id partition{0};
  offset off{0};
  record rec;
};

/// Decodes the ferry-* headers of a DLQ record (headers with null values
/// are dropped from `message.headers`).
dlq_record to_dlq_record(const std::string& topic, partition_id p,
                         offset off, const record& rec);

/// The redriven copy of a DLQ record (offset_delta 0, headers updated).
record redriven_copy(const std::string& dlq, partition_id p, offset off,
                     const record& rec);

/// Whether `name` ends in ".dlq".
bool has_dlq_suffix(std::string_view name);

struct dlq_redrive_job;

struct dlq_manager_state {
  dlq_manager_config cfg;
  std::unique_ptr<dlq_store> store;
  /// Cluster mode: partitions of cfg.state_topic (from the last topic list;
  /// 0: not known yet).
  int32_t state_partitions = 0;
  /// Cluster mode: the queue groups of the whole cluster, from the last
  /// (list_atom, queue_atom) answer of the broker (a node stores only the
  /// groups of the __consumer_state partitions it replicates); nullopt when
  /// that failed, and then the local store's groups are used.
  std::optional<std::vector<queue_group_description>> cluster_groups;
  /// Redrives: the running one first.
  std::deque<std::shared_ptr<dlq_redrive_job>> redrives;
  uint64_t next_job = 1;

  static inline const char* name = "dlq_manager";
};

/// Serves the DLQ operations of a node. @pre cfg.store != nullptr
dlq_manager_actor::behavior_type
dlq_manager(dlq_manager_actor::stateful_pointer<dlq_manager_state> self,
            dlq_manager_config cfg);

} // namespace ferry
