#pragma once
// consumer_state: the records of the internal topic __consumer_state, where
// a cluster keeps consumer group offsets replicated (the design's "offsets
// go to an internal replicated topic, with an LMDB view on the
// coordinator").
//
// A group lives in partition partition_for_key(group, partitions) of the
// topic; the coordinator of the group is that partition's leader. Every
// offset commit is one record, produced with acks=all before the commit is
// answered:
//   key   = the group name
//   value = version byte 1, then (big-endian) the number of offsets
//           (uint32) and per offset: topic length (uint16), topic bytes,
//           partition (int32), offset (int64), commit timestamp ms (int64),
//           metadata length (uint32), metadata bytes.
// Every replica of a partition (leader and followers) applies the records
// it holds to its node's offset_store, so the node that takes over a
// partition's leadership already has every acknowledged commit in its LMDB
// view (apply is idempotent: a commit overwrites the same keys). Records
// are never compacted away in this version (retention is the topic's).

#include "broker/offset_store.hpp"

#include <caf/expected.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ferry {

inline constexpr const char* consumer_state_topic = "__consumer_state";

/// The record value of one commit.
std::string encode_offsets_value(const std::vector<committed_offset>& offsets);

/// Decodes a record value; ec::corrupt_segment when malformed.
caf::expected<std::vector<committed_offset>>
decode_offsets_value(std::string_view value);

/// One RecordBatch v2 holding the commit of `group` (timestamp `now_ms`).
caf::expected<std::string>
make_commit_batch(const std::string& group,
                  const std::vector<committed_offset>& offsets,
                  int64_t now_ms);

/// Applies every commit record in `batches` (whole batches back to back, as
/// a log read returns them) to `store`; a group not yet listed there gets
/// its entry. Returns the number of records applied; a damaged batch or
/// record stops with its error (what came before is applied).
caf::expected<size_t> apply_consumer_state(offset_store& store,
                                           std::string_view batches);

} // namespace ferry
