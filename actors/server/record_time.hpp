#pragma once
// record_timestamp_at: the timestamp of one record in fetched data, for lag
// seconds (group_coordinator and queue_coordinator: how old the first
// record a group has not consumed is).

#include "broker/model.hpp"
#include "broker/record_batch.hpp"

#include <optional>
#include <string_view>

namespace ferry {

/// The timestamp of the record at `at` in `data` (fetched batches whose
/// first batch contains `at`); nullopt if the first batch does not. A
/// damaged batch gives its first record's time (close enough for lag).
inline std::optional<timestamp_ms> record_timestamp_at(std::string_view data,
                                                       offset at) {
  auto h = parse_batch_header(data);
  if (!h || at < h->base_offset || at > h->last_offset())
    return std::nullopt;
  if (h->ts_type() == timestamp_type::log_append_time)
    return h->max_timestamp;
  if (at == h->base_offset || h->records_count <= 1)
    return h->base_timestamp;
  auto batch = decode_batch(data.substr(0, h->total_size()));
  if (!batch)
    return h->base_timestamp;
  for (const auto& r : batch->records)
    if (h->base_offset + r.offset_delta >= at)
      return r.timestamp;
  return h->base_timestamp;
}

} // namespace ferry
