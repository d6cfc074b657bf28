#pragma once
// Helpers shared by the LMDB stores (metadata_store, offset_store,
// queue_state_store, ...) for their key and value layouts: fixed-width
// big-endian integers (keys sort by number under LMDB's bytewise order),
// NUL-free names, and the error for bytes that do not decode.

#include "broker/big_endian.hpp"
#include "broker/error.hpp"

#include <caf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace ferry::key_codec {

/// Appends the low `bytes` (1..8) bytes of `x`, most significant first.
inline void put_be(std::string& out, uint64_t x, int bytes) {
  char buf[8];
  be::store<uint64_t>(buf, x);
  out.append(buf + 8 - bytes, static_cast<size_t>(bytes));
}

/// Reads `bytes` (1..8) big-endian bytes at `pos`; the caller checks the length.
inline uint64_t get_be(std::string_view in, size_t pos, int bytes) {
  char buf[8] = {};
  std::memcpy(buf + 8 - bytes, in.data() + pos, static_cast<size_t>(bytes));
  return be::load<uint64_t>(buf);
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
