#include "broker/record_batch.hpp"

#include "broker/crc32c.hpp"
#include "broker/varint.hpp"

#include <cstdio>
#include <string>

namespace ferry {

namespace L = batch_layout;

caf::expected<batch_header> parse_batch_header(std::string_view buf,
                                                size_t max_batch_bytes) {
  if (buf.size() < L::header_size)
    return make_error(ec::truncated_batch,
                      "batch header needs " + std::to_string(L::header_size)
                        + " bytes, have " + std::to_string(buf.size()));
  const char* p = buf.data();
  batch_header h;
  h.magic = be::load<int8_t>(p + L::magic);
  if (h.magic != L::current_magic)
    return make_error(ec::bad_magic,
                      "magic " + std::to_string(h.magic) + ", expected 2");
  h.base_offset = offset{be::load<int64_t>(p + L::base_offset)};
  h.batch_length = be::load<int32_t>(p + L::batch_length);
  constexpr auto min_len = static_cast<int64_t>(L::header_size - L::log_overhead);
  if (h.batch_length < min_len
      || static_cast<uint64_t>(h.batch_length) + L::log_overhead > max_batch_bytes)
    return make_error(ec::length_overflow,
                      "batch_length " + std::to_string(h.batch_length)
                        + " outside [" + std::to_string(min_len) + ", "
                        + std::to_string(max_batch_bytes - L::log_overhead)
                        + "]");
  if (buf.size() < h.total_size())
    return make_error(ec::truncated_batch,
                      "batch_length " + std::to_string(h.batch_length)
                        + " needs " + std::to_string(h.total_size())
                        + " bytes, have " + std::to_string(buf.size()));
  h.partition_leader_epoch = be::load<int32_t>(p + L::partition_leader_epoch);
  h.crc = be::load<uint32_t>(p + L::crc);
  h.attributes = be::load<int16_t>(p + L::attributes);
  h.last_offset_delta = be::load<int32_t>(p + L::last_offset_delta);
  h.base_timestamp = be::load<int64_t>(p + L::base_timestamp);
  h.max_timestamp = be::load<int64_t>(p + L::max_timestamp);
  h.producer_id = be::load<int64_t>(p + L::producer_id);
  h.producer_epoch = be::load<int16_t>(p + L::producer_epoch);
  h.base_sequence = be::load<int32_t>(p + L::base_sequence);
  h.records_count = be::load<int32_t>(p + L::records_count);
  return h;
}

caf::error verify_batch_crc(std::string_view batch) {
  if (batch.size() < L::header_size)
    return make_error(ec::truncated_batch,
                      "batch of " + std::to_string(batch.size())
                        + " bytes is shorter than its header");
  uint32_t stored = be::load<uint32_t>(batch.data() + L::crc);
  uint32_t computed = crc32c(batch.data() + L::attributes,
                             batch.size() - L::attributes);
  if (stored != computed) {
    char msg[64];
    std::snprintf(msg, sizeof msg, "stored 0x%08x computed 0x%08x", stored,
                  computed);
    return make_error(ec::crc_mismatch, msg);
  }
  return caf::none;
}

void set_base_offset(std::span<char> batch, offset base) {
  if (batch.size() >= L::base_offset + 8)
    be::store<int64_t>(batch.data() + L::base_offset, base.value);
}

void set_partition_leader_epoch(std::span<char> batch, int32_t epoch) {
  if (batch.size() >= L::partition_leader_epoch + 4)
    be::store<int32_t>(batch.data() + L::partition_leader_epoch, epoch);
}

caf::expected<std::string> encode_batch(const batch_meta&,
                                        const std::vector<record>&) {
  return make_error(ec::invalid_argument, "encode_batch: not yet implemented");
}

caf::expected<decoded_batch> decode_batch(std::string_view, size_t) {
  return make_error(ec::invalid_argument, "decode_batch: not yet implemented");
}

} // namespace ferry
