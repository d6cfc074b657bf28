#pragma once
// Big-endian fixed-width integers: the one implementation every format in
// Ferry uses (RecordBatch headers, segment and index files, LMDB keys and
// values, __consumer_state records, queue state). load/store work on raw
// bytes the caller has checked; append and reader work on strings and
// check lengths.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace ferry::be {

/// Big-endian fixed-width loads and stores. Callers guarantee the bytes exist.
template <class T>
inline T load(const char* p) {
  using U = std::make_unsigned_t<T>;
  U u;
  std::memcpy(&u, p, sizeof(U));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if constexpr (sizeof(U) == 2)
    u = __builtin_bswap16(u);
  else if constexpr (sizeof(U) == 4)
    u = __builtin_bswap32(u);
  else if constexpr (sizeof(U) == 8)
    u = __builtin_bswap64(u);
#endif
  return static_cast<T>(u);
}

template <class T>
inline void store(char* p, T v) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(v);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if constexpr (sizeof(U) == 2)
    u = __builtin_bswap16(u);
  else if constexpr (sizeof(U) == 4)
    u = __builtin_bswap32(u);
  else if constexpr (sizeof(U) == 8)
    u = __builtin_bswap64(u);
#endif
  std::memcpy(p, &u, sizeof(U));
}

/// Appends `v`, most significant byte first.
template <class T>
inline void append(std::string& out, T v) {
  char buf[sizeof(T)];
  store<T>(buf, v);
  out.append(buf, sizeof(T));
}

/// Reads a T from the front of `in` and drops it; false (and `in`
/// unchanged) when fewer than sizeof(T) bytes are left.
template <class T>
inline bool read(std::string_view& in, T& x) {
  if (in.size() < sizeof(T))
    return false;
  x = load<T>(in.data());
  in.remove_prefix(sizeof(T));
  return true;
}

/// Reads values one after another; `ok` turns false on the first short
/// read, after which every read yields a default value.
struct reader {
  std::string_view in;
  size_t pos = 0;
  bool ok = true;

  template <class T>
  T get() {
    if (in.size() - pos < sizeof(T)) {
      ok = false;
      pos = in.size();
      return T{};
    }
    auto x = load<T>(in.data() + pos);
    pos += sizeof(T);
    return x;
  }

  std::string bytes(size_t n) {
    if (in.size() - pos < n) {
      ok = false;
      pos = in.size();
      return {};
    }
    std::string out{in.substr(pos, n)};
    pos += n;
    return out;
  }

  /// Every read succeeded and consumed all of `in`.
  bool done() const {
    return ok && pos == in.size();
  }
};

} // namespace ferry::be
