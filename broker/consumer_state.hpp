#pragma once
// consumer_state: the records of the internal topic __consumer_state, where
// a cluster keeps consumer group state replicated (the design's "offsets and
// queue-mode state go to an internal replicated topic, with the LMDB view on
// the coordinator").
//
// A group lives in partition partition_for_key(group, partitions) of the
// topic; the coordinator of the group is that partition's leader. Every
// change is produced there with acks=all before it is answered (stream
// commits by group_coordinator, queue-mode state by queue_coordinator, queue
// group configs by the node, stream group deletes by group_coordinator). Every
// replica of a partition (leader and followers) applies the records it holds
// to its node's stores (apply_consumer_state), so the node that takes over a
// partition's leadership already has every acknowledged change in its LMDB
// view: stream offsets in the offset_store, queue state in the
// metadata_store's "queue_state", "queue_groups" and "queue_dlq_producers"
// rows (the same rows a single node writes directly, see
// broker/queue_state_store.hpp and actors/server/queue_coordinator.hpp).
// Records apply in log order and every apply overwrites or erases whole
// rows, so replaying the log (a replica replays all of it at start) ends in
// the same state.
//
// The topic is compacted (cleanup.policy=compact, like Kafka's
// __consumer_offsets): every record's key names the one row (or the one
// erase) its value sets, so a newer record of a key makes the older one
// obsolete and the cleaner may drop it, and a record with a null value (a
// tombstone) erases its key's row and goes once delete.retention.ms old.
// A replay then reads about one record per live row, not the history.
//
// Record keys (format 2, since this version). A group's keys are the group
// name, a NUL byte, a tag, and the tag's fields (topic = length (uint16)
// and bytes, partition int32, offsets int64, all big-endian):
//   'c' topic partition            stream commit of that partition; value
//                                  kind 1 with one offset; tombstone:
//                                  the committed offset is erased
//   'S'                            tombstone only: the stream group is
//                                  deleted (offsets and entry)
//   'g'                            queue group config (kind 2); tombstone:
//                                  the config row is erased
//   'G'                            queue group delete (kind 3), kept: it
//                                  erases every queue row of the group
//                                  written before it
//   'p' topic partition            queue position (kind 4, no rows)
//   'F' topic partition            queue full rewrite (kind 4, full flag,
//                                  no rows), kept: erases the partition's
//                                  rows written before it
//   'r' topic partition offset     one queue row (kind 12: the
//                                  "queue_state" row value); tombstone: the
//                                  row is erased
//   'd' topic partition            queue DLQ producer row (kind 5);
//                                  tombstone: erased
//   'E' topic partition            queue partition erase (kind 6), kept
// A DLQ topic's keys are dlq_home_key(topic), a NUL byte, a tag and its
// fields:
//   'm' partition offset           redrive mark (kind 7)
//   'P' partition target-topic target-partition
//                                  redrive producer row (kind 8)
//   'B' partition                  marks erase below (kind 9), kept
//   'T'                            DLQ topic erase (kind 10), kept
// A logical record (consumer_state_record) becomes one or more log records
// in one batch: a commit one per partition; a queue change set its 'p' (or
// 'F') record, then one 'r' record or tombstone per row; a queue group
// delete its 'G' record and a 'g' tombstone; a partition erase its 'E'
// record and 'p', 'F', 'd' tombstones; a stream group delete its commit
// tombstones and the 'S' tombstone. Reading a batch back
// (decode_consumer_state_batches) joins them again. Kept records ('G', 'F',
// 'E', 'B', 'T') stay the latest of their key until the thing is written
// again, so their erase still applies to older records that no tombstone
// made obsolete.
//
// Format 1 (before this version): the key is the group name (or
// dlq_home_key(topic)) alone and one record holds a whole commit or change
// set. Such records still apply, and the cleaner never removes them
// (consumer_state_legacy_key): under one key they would overwrite each
// other.
//
// Record value = a kind byte, then (integers big-endian):
//   1 commit (stream offsets; the original format, "version 1"):
//       number of offsets (uint32), per offset: topic length (uint16), topic
//       bytes, partition (int32), offset (int64), commit timestamp ms
//       (int64), metadata length (uint32), metadata bytes.
//   2 queue group config upsert: the "queue_groups" row value (the rest of
//       the record; version byte 1 first).
//   3 queue group delete: nothing more. Erases the group's config, queue
//       state and DLQ producer rows.
//   4 queue partition change set (a lease_table change set): topic length
//       (uint16), topic, partition (int32), committed (int64), flags (1
//       byte: bit 0 = full, the rest 0), upsert count (uint32), per upsert:
//       offset (int64), row value length (uint32), the "queue_state" record
//       row value (version 1 for retry/done/dead-letter rows, version 2 for
//       lease rows); erased count (uint32), per erased: offset (int64).
//   5 queue DLQ producer row: topic length (uint16), topic, partition
//       (int32), the "queue_dlq_producers" row value (the rest).
//   6 queue partition erase (its topic was deleted): topic length (uint16),
//       topic, partition (int32). Erases the partition's queue state and DLQ
//       producer row.
// DLQ redrive bookkeeping (the dlq_store rows of broker/dlq_store.hpp,
// produced by the dlq_manager at the DLQ topic's home; record key =
// dlq_home_key(DLQ topic), which no group name can equal):
//   7 DLQ redrive mark: topic length (uint16), DLQ topic, partition (int32),
//       offset (int64), redriven at ts ms (int64), target partition (int32),
//       target offset (int64), target topic (the rest, non-empty). Writes
//       the "dlq_redriven" row.
//   8 DLQ redrive producer row: topic length (uint16), DLQ topic, partition
//       (int32), target topic length (uint16), target topic, target
//       partition (int32), producer id (int64), epoch (int16), last DLQ
//       offset (int64), last sequence (int32). Writes the
//       "dlq_redrive_producers" row.
//   9 DLQ marks erase below (purge): topic length (uint16), DLQ topic,
//       partition (int32), before (int64). Erases the partition's marks
//       below `before`.
//  10 DLQ topic erase (the DLQ topic was deleted): topic length (uint16),
//       DLQ topic. Erases every mark and producer row of the topic.
//  11 stream group delete: nothing more (format 2 writes it as the 'S'
//       tombstone).
//  12 queue row (format 2, key 'r'): the "queue_state" record row value.
// Any other kind decodes to ec::unknown_record_kind (a newer writer);
// truncated values and trailing bytes to ec::corrupt_segment.
//
// Worked example: group "g" commits t-0 at offset 5, ts 1000, no metadata:
//   key 67 00 63 | 00 01 74 | 00 00 00 00   ("g" NUL 'c' "t" 0)
//   value 01 | 00 00 00 01 | 00 01 74 | 00 00 00 00
//                    | 00 00 00 00 00 00 00 05 | 00 00 00 00 00 00 03 e8
//                    | 00 00 00 00

#include "broker/dlq_store.hpp"
#include "broker/lease_table.hpp"
#include "broker/model.hpp"
#include "broker/offset_store.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class metadata_store;

inline constexpr const char* consumer_state_topic = "__consumer_state";

/// segment.bytes of __consumer_state as a cluster creates it: a restart
/// replays the compacted part plus at most about this much.
inline constexpr int64_t consumer_state_segment_bytes = int64_t{4} << 20;

/// The kind byte that starts a record value.
enum class consumer_state_kind : uint8_t {
  commit = 1,
  queue_group = 2,
  queue_group_delete = 3,
  queue_partition = 4,
  queue_dlq_producer = 5,
  queue_partition_erase = 6,
  dlq_mark = 7,
  dlq_producer = 8,
  dlq_erase_below = 9,
  dlq_topic_erase = 10,
  stream_group_delete = 11,
  queue_row = 12, ///< in values only: decodes to queue_partition
};

/// The record key (and partition key in __consumer_state) of a DLQ topic's
/// redrive bookkeeping: a NUL byte, "dlq:", the topic. Group names never
/// contain NUL, so it never collides with a group.
std::string dlq_home_key(std::string_view dlq_topic);

/// One record of __consumer_state, decoded. Which fields mean something
/// depends on `kind` (see the file comment).
struct consumer_state_record {
  consumer_state_kind kind = consumer_state_kind::commit;
  std::string group; ///< the record key
  /// commit
  std::vector<committed_offset> offsets;
  /// queue_group: the encoded "queue_groups" value; queue_dlq_producer: the
  /// encoded "queue_dlq_producers" value.
  std::string row;
  /// queue_partition, queue_dlq_producer, queue_partition_erase; the DLQ
  /// topic of the dlq_* kinds.
  std::string topic;
  partition_id partition{0};
  /// queue_partition
  queue_changes changes;
  /// dlq_mark: the marked offset and the mark; dlq_erase_below: `before`.
  offset off{0};
  redrive_mark mark;
  /// dlq_producer: the target partition and the producer row.
  std::string target_topic;
  partition_id target_partition{0};
  redrive_producer producer;
  /// commit: erase `offsets`' partitions (their other fields unused)
  /// instead of committing them (a stream group delete writes these).
  bool erase = false;
  /// queue_partition: false when only rows were read (a compacted log may
  /// hold a change set's rows without its position record): the stored
  /// position and the other rows stay as they are.
  bool has_position = true;
};

/// True for a format-1 key (the group name or dlq_home_key alone), whose
/// records the cleaner must keep (see the file comment).
bool consumer_state_legacy_key(std::string_view key);

/// The record value of one commit.
std::string encode_offsets_value(const std::vector<committed_offset>& offsets);

/// Decodes a commit record value; ec::corrupt_segment when malformed.
caf::expected<std::vector<committed_offset>>
decode_offsets_value(std::string_view value);

/// The record value of `x` (x.group is the key, not part of it).
std::string encode_consumer_state_value(const consumer_state_record& x);

/// Decodes a record value (any kind; group is left empty).
/// ec::unknown_record_kind for a kind this build does not know,
/// ec::corrupt_segment when malformed.
caf::expected<consumer_state_record>
decode_consumer_state_value(std::string_view value);

/// One RecordBatch v2 holding the commit of `group` (timestamp `now_ms`).
caf::expected<std::string>
make_commit_batch(const std::string& group,
                  const std::vector<committed_offset>& offsets,
                  int64_t now_ms);

/// One RecordBatch v2 holding `records` in order, each as its format-2 log
/// records (see the file comment). ec::invalid_argument if empty or if a
/// record's names cannot form a key (empty group, NUL in a name).
caf::expected<std::string>
make_consumer_state_batch(const std::vector<consumer_state_record>& records,
                          int64_t now_ms);

/// Applies one record to the node's stores: a commit to `offsets` (a group
/// not yet listed there gets its entry), queue records to `store` (through
/// queue_state_store). Idempotent.
caf::error apply_consumer_state_record(offset_store& offsets,
                                       metadata_store& store,
                                       const consumer_state_record& x);

/// The logical records of `batches` (whole batches back to back), in log
/// order: format-2 log records of one batch that one record wrote come back
/// as that record. A damaged batch or record or an unknown kind gives its
/// error.
caf::expected<std::vector<consumer_state_record>>
decode_consumer_state_batches(std::string_view batches);

/// Applies every record in `batches` (whole batches back to back, as a log
/// read returns them), in order. Returns the number of log records read; a
/// damaged batch or record or an unknown kind stops with its error (what
/// came before is applied).
caf::expected<size_t> apply_consumer_state(offset_store& offsets,
                                           metadata_store& store,
                                           std::string_view batches);

} // namespace ferry
