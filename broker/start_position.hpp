#pragma once
// start_position: where a consumer that has no position on a partition
// begins (a new queue group, Kafka's auto.offset.reset), and the ISO 8601
// date-times operators write for it. No actor code, no I/O.
//
// A start position is an int64: start_earliest (-2, the log start),
// start_latest (-1, the high watermark when the partition is first read),
// or a timestamp in ms since the epoch (the first record whose timestamp is
// >= it). These are the values of list_offsets_request::timestamp, so a
// start resolves with one offset lookup.
//
// Text forms (CLI, HTTP): "earliest", "latest", an ISO 8601 date-time
// (2026-12-01, 2026-12-01T08:00, 2026-12-01T08:00:00.250Z,
// 2026-12-01T08:00:00+02:00; UTC if no zone), or epoch milliseconds
// (digits only).

#include "broker/error.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

inline constexpr int64_t start_earliest = -2;
inline constexpr int64_t start_latest = -1;

/// ms since the epoch; ec::invalid_config (naming the expected form) if the
/// text is not YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+HH:MM|-HH:MM].
caf::expected<int64_t> parse_datetime_ms(std::string_view text);

/// A start position from its text form; ec::invalid_config otherwise.
caf::expected<int64_t> parse_start_position(std::string_view text);

/// "earliest", "latest", or the time as 2026-12-01T08:00:00.000Z.
std::string start_position_text(int64_t start);

/// ec::invalid_config unless start is -2, -1 or a timestamp >= 0.
caf::error validate_start_position(int64_t start);

} // namespace ferry
