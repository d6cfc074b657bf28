#include "broker/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#  include <nmmintrin.h>
#  define FERRY_CRC32C_X86 1
#endif

namespace ferry {

namespace {

constexpr uint32_t poly = 0x82F63B78u; // reflected Castagnoli

// table[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i)
      c = (c >> 1) ^ (poly & (0u - (c & 1u)));
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (size_t k = 1; k < 8; ++k)
      t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}

constexpr auto tables = make_tables();

inline uint64_t load_le64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#ifdef FERRY_CRC32C_X86
uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc) {
  auto p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  // Align to 8 so the 64-bit loads do not straddle cache lines needlessly.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  // Four independent-ish words per iteration keep the crc32 unit busy.
  while (n >= 32) {
    uint64_t a, b, d, e;
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + 8, 8);
    std::memcpy(&d, p + 16, 8);
    std::memcpy(&e, p + 24, 8);
    c = _mm_crc32_u64(c, a);
    c = _mm_crc32_u64(c, b);
    c = _mm_crc32_u64(c, d);
    c = _mm_crc32_u64(c, e);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t a;
    std::memcpy(&a, p, 8);
    c = _mm_crc32_u64(c, a);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool detect_hardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

} // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  auto p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t w = load_le64(p) ^ c;
    c = tables[7][w & 0xFF] ^ tables[6][(w >> 8) & 0xFF]
        ^ tables[5][(w >> 16) & 0xFF] ^ tables[4][(w >> 24) & 0xFF]
        ^ tables[3][(w >> 32) & 0xFF] ^ tables[2][(w >> 40) & 0xFF]
        ^ tables[1][(w >> 48) & 0xFF] ^ tables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ tables[0][(c ^ *p++) & 0xFF];
    --n;
  }
  return ~c;
}

bool crc32c_hardware() {
#ifdef FERRY_CRC32C_X86
  static const bool hw = detect_hardware();
  return hw;
#else
  return false;
#endif
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#ifdef FERRY_CRC32C_X86
  if (crc32c_hardware())
    return crc32c_sse42(data, n, crc);
#endif
  return crc32c_portable(data, n, crc);
}

} // namespace ferry
