// libFuzzer harness: the decoders of the rows Ferry keeps in LMDB and of
// __consumer_state's record values, which a node reads back at every start
// (a damaged metadata.mdb, or a record written by a newer Ferry, must give
// a specific error, never a crash or a read past the value):
//   0 consumer_state value (any kind)   1 commit record value
//   2 offset key                         3 offset value
//   4 group value                        5 queue state key
//   6 queue position value               7 queue record value
//   8 partition key                      9 partition metadata value
//  10 producer state snapshot           11 Raft hard state
//  12 Raft log entry
// The first input byte picks the decoder (mod 13), the rest is the row.
// Property: a row that decodes encodes to bytes that decode again and
// encode to the same bytes (the encoding of a decoded row is canonical), so
// a row rewritten after it was read never changes meaning.

#include "broker/consumer_state.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/producer_state.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/raft_storage.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using namespace ferry;

/// decode(encode(decode(row))) must succeed and encode to the same bytes.
template <class Decode, class Encode>
void canonical(std::string_view row, Decode decode, Encode encode) {
  auto first = decode(row);
  if (!first)
    return;
  auto bytes = encode(*first);
  auto again = decode(bytes);
  if (!again)
    std::abort(); // an encoded row that does not decode
  if (encode(*again) != bytes)
    std::abort(); // the encoding moved on a second round
}

/// The same for decoders that fill an out-parameter.
template <class T, class Decode, class Encode>
void canonical_into(std::string_view row, Decode decode, Encode encode) {
  T first{};
  if (decode(row, first))
    return;
  auto bytes = encode(first);
  T again{};
  if (decode(bytes, again))
    std::abort();
  if (encode(again) != bytes)
    std::abort();
}

std::string encode_key_of(const offset_format::offset_key& k) {
  auto r = offset_format::encode_offset_key(k.group, k.topic, k.partition);
  if (!r)
    std::abort(); // a decoded key must be encodable
  return *r;
}

std::string encode_queue_key(const queue_state_format::decoded_key& k) {
  auto prefix = queue_state_format::encode_partition_prefix(k.group, k.topic, k.partition);
  if (!prefix)
    std::abort();
  return k.position ? queue_state_format::position_key(*prefix)
                    : queue_state_format::record_key(*prefix, k.off);
}

std::string encode_partition_key_of(const std::pair<std::string, partition_id>& k) {
  auto r = metadata_format::encode_partition_key(k.first, k.second);
  if (!r)
    std::abort();
  return *r;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  std::string_view row{reinterpret_cast<const char*>(data) + 1, size - 1};
  switch (data[0] % 13) {
    case 0:
      canonical(row, decode_consumer_state_value, encode_consumer_state_value);
      break;
    case 1:
      canonical(row, decode_offsets_value, encode_offsets_value);
      break;
    case 2:
      canonical(row, offset_format::decode_offset_key, encode_key_of);
      break;
    case 3:
      canonical_into<committed_offset>(row, offset_format::decode_offset_value,
                                       offset_format::encode_offset_value);
      break;
    case 4:
      canonical_into<group_record>(row, offset_format::decode_group_value,
                                   offset_format::encode_group_value);
      break;
    case 5:
      canonical(row, queue_state_format::decode_key, encode_queue_key);
      break;
    case 6:
      canonical(row, queue_state_format::decode_position_value,
                queue_state_format::encode_position_value);
      break;
    case 7:
      canonical_into<queue_record>(row, queue_state_format::decode_record_value,
                                   queue_state_format::encode_record_value);
      break;
    case 8:
      canonical(row, metadata_format::decode_partition_key, encode_partition_key_of);
      break;
    case 9:
      canonical(row, metadata_format::decode_partition_metadata,
                metadata_format::encode_partition_metadata);
      break;
    case 10:
      canonical(row, producer_state::decode_snapshot,
                [](const producer_state& s) { return s.encode_snapshot(s.end()); });
      break;
    case 11:
      canonical(row, raft_format::decode_hard_state, raft_format::encode_hard_state);
      break;
    case 12:
      canonical(row, raft_format::decode_entry, raft_format::encode_entry);
      break;
  }
  return 0;
}
