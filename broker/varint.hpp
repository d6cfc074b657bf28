#pragma once
// Kafka's variable-length integers (protobuf-style base-128, little-endian
// groups, high bit = more) with zigzag sign mapping, plus the big-endian
// fixed-width helpers the batch header uses. Header-only: the codec's hot loop.
//
// Readers never read past `end`; they report failure instead of throwing.

#include "broker/big_endian.hpp" // ferry::be, used with the varints everywhere

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace ferry::varint {

/// Longest encodings: 5 bytes for 32-bit, 10 for 64-bit values.
inline constexpr size_t max_len32 = 5;
inline constexpr size_t max_len64 = 10;

inline constexpr uint64_t zigzag64(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline constexpr uint32_t zigzag32(int32_t v) {
  return (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31);
}
inline constexpr int64_t unzigzag64(uint64_t u) {
  return static_cast<int64_t>((u >> 1) ^ (0 - (u & 1)));
}
inline constexpr int32_t unzigzag32(uint32_t u) {
  return static_cast<int32_t>((u >> 1) ^ (0u - (u & 1u)));
}

/// Bytes the unsigned varint encoding of `u` takes.
inline constexpr size_t size_unsigned(uint64_t u) {
  size_t n = 1;
  while (u >= 0x80) {
    u >>= 7;
    ++n;
  }
  return n;
}
inline constexpr size_t size_signed(int64_t v) { return size_unsigned(zigzag64(v)); }

/// Writes `u` at `out` (room for max_len64 bytes); returns the end.
inline char* put_unsigned(char* out, uint64_t u) {
  while (u >= 0x80) {
    *out++ = static_cast<char>(static_cast<uint8_t>(u) | 0x80);
    u >>= 7;
  }
  *out++ = static_cast<char>(u);
  return out;
}
inline char* put_signed(char* out, int64_t v) { return put_unsigned(out, zigzag64(v)); }

/// Outcome of a read.
enum class status : uint8_t {
  ok,
  /// Input ended before the last byte (high bit clear).
  truncated,
  /// More bytes than the width allows, or bits beyond it set.
  too_long,
};

/// Reads an unsigned varint of at most `max_bytes` bytes from [*p, end).
/// On success advances *p. A value over 64 bits (10th byte > 1) is too_long.
inline status get_unsigned(const char** p, const char* end, uint64_t* out,
                           size_t max_bytes = max_len64) {
  auto q = reinterpret_cast<const uint8_t*>(*p);
  auto e = reinterpret_cast<const uint8_t*>(end);
  // Fast path: one byte (lengths, deltas, small counts are the common case).
  if (q < e && *q < 0x80) {
    *out = *q;
    *p += 1;
    return status::ok;
  }
  uint64_t result = 0;
  for (size_t i = 0; i < max_bytes; ++i) {
    if (q + i >= e)
      return status::truncated;
    uint64_t b = q[i];
    result |= (b & 0x7F) << (7 * i);
    if (b < 0x80) {
      // Last byte of a maximal encoding may only carry the remaining bits.
      if (i == max_bytes - 1) {
        unsigned used = static_cast<unsigned>(7 * i);
        unsigned width = max_bytes == max_len32 ? 32 : 64;
        if (width - used < 7 && (b >> (width - used)) != 0)
          return status::too_long;
      }
      *out = result;
      *p += i + 1;
      return status::ok;
    }
  }
  return status::too_long;
}

/// Zigzag varint of 32 bits (Kafka "varint").
inline status get_varint(const char** p, const char* end, int32_t* out) {
  uint64_t u;
  auto st = get_unsigned(p, end, &u, max_len32);
  if (st == status::ok)
    *out = unzigzag32(static_cast<uint32_t>(u));
  return st;
}

/// Zigzag varint of 64 bits (Kafka "varlong").
inline status get_varlong(const char** p, const char* end, int64_t* out) {
  uint64_t u;
  auto st = get_unsigned(p, end, &u, max_len64);
  if (st == status::ok)
    *out = unzigzag64(u);
  return st;
}

} // namespace ferry::varint

