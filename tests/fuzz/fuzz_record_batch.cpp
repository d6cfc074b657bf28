// libFuzzer harness: the RecordBatch v2 decoder (broker/record_batch.hpp),
// which every produce request, replica fetch and segment recovery runs on
// bytes from outside. Arbitrary bytes must give a batch or an error, never a
// crash, a sanitizer report or unbounded memory. A batch that decodes must
// survive a round trip: encoding its records again (without compression)
// and decoding that gives the same records.

#include "broker/record_batch.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in{reinterpret_cast<const char*>(data), size};
  // A decompression bomb must stop at the limit: 4 MiB here.
  constexpr size_t max_bytes = 4u << 20;
  auto hdr = ferry::parse_batch_header(in, max_bytes);
  if (hdr) {
    (void) ferry::verify_batch_crc(in.substr(0, hdr->total_size()));
    (void) hdr->codec();
    (void) hdr->next_offset();
  }
  auto batch = ferry::decode_batch(in, max_bytes);
  if (!batch || batch->records.empty())
    return 0;
  ferry::batch_meta meta;
  meta.base_offset = batch->header.base_offset;
  meta.partition_leader_epoch = batch->header.partition_leader_epoch;
  meta.producer_id = batch->header.producer_id;
  meta.producer_epoch = batch->header.producer_epoch;
  auto again = ferry::encode_batch(meta, batch->records);
  if (!again)
    return 0; // e.g. offset deltas the encoder does not accept
  auto back = ferry::decode_batch(*again, max_bytes);
  if (!back || back->records != batch->records)
    std::abort(); // a batch we accept must encode and decode to itself
  return 0;
}
