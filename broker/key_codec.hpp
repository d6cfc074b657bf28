#pragma once
// Helpers shared by the LMDB stores (metadata_store, offset_store,
// queue_state_store, ...) for their key and value layouts: fixed-width
// big-endian integers (keys sort by number under LMDB's bytewise order),
// NUL-free names, and the error for bytes that do not decode.

#include "broker/error.hpp"

#include <caf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace ferry::key_codec {

/// Appends the low `bytes` bytes of `x`, most significant first.
inline void put_be(std::string& out, uint64_t x, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

/// Reads `bytes` big-endian bytes at `pos`; the caller checks the length.
inline uint64_t get_be(std::string_view in, size_t pos, int bytes) {
  uint64_t x = 0;
  for (int i = 0; i < bytes; ++i)
    x = (x << 8) | static_cast<uint8_t>(in[pos + i]);
  return x;
}

/// A name usable as a NUL-terminated key component.
inline bool valid_name(std::string_view x) {
  return !x.empty() && x.find('\0') == std::string_view::npos;
}

/// The error for a stored key or value that does not decode.
inline caf::error corrupt(std::string what) {
  return make_error(ec::corrupt_segment, std::move(what));
}

} // namespace ferry::key_codec
