// CRC-32C: known vectors, hardware == table, chaining.

#include "broker/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace ferry;

namespace {

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen{seed};
  std::vector<unsigned char> v(n);
  for (auto& b : v)
    b = static_cast<unsigned char>(gen());
  return v;
}

} // namespace

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the customary check value.
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of("a"), 0xC1D04330u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i)
    inc[i] = static_cast<char>(i);
  EXPECT_EQ(crc_of(inc), 0x46DD794Eu);
  std::string dec(32, '\0');
  for (int i = 0; i < 32; ++i)
    dec[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc_of(dec), 0x113FDB5Cu);
}

TEST(Crc32c, PortableMatchesKnownVectors) {
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(std::string(32, '\xff').data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c_portable("", 0), 0u);
}

TEST(Crc32c, HardwareMatchesPortableOnRandomData) {
  if (!crc32c_hardware())
    GTEST_LOG_(INFO) << "no SSE4.2: crc32c() is the portable path";
  auto buf = random_bytes(4096 + 16, 42);
  // Every start alignment 0..15 and many lengths, including the tail sizes
  // around the 8- and 32-byte strides.
  for (size_t align = 0; align < 16; ++align) {
    for (size_t len = 0; len <= 300; ++len) {
      const unsigned char* p = buf.data() + align;
      ASSERT_EQ(crc32c(p, len), crc32c_portable(p, len))
        << "align " << align << " len " << len;
    }
    for (size_t len : {1000u, 1023u, 1024u, 1025u, 4095u, 4096u}) {
      const unsigned char* p = buf.data() + align;
      ASSERT_EQ(crc32c(p, len), crc32c_portable(p, len))
        << "align " << align << " len " << len;
    }
  }
}

TEST(Crc32c, HardwareMatchesPortableOnLongInputs) {
  // Inputs of 3 KiB and more take the three-lane path (several rounds here),
  // at every alignment and with tails of every length below a round.
  auto buf = random_bytes((1u << 20) + 64, 99);
  for (size_t align : {0u, 1u, 3u, 8u}) {
    for (size_t len : {3071u, 3072u, 3073u, 6144u, 9215u, 65536u, 262144u + 13u,
                       (1u << 20) + 1u}) {
      const unsigned char* p = buf.data() + align;
      ASSERT_EQ(crc32c(p, len), crc32c_portable(p, len))
        << "align " << align << " len " << len;
      // Chained from a non-zero CRC, split inside a round.
      uint32_t head = crc32c(p, 1000);
      ASSERT_EQ(crc32c(p + 1000, len - 1000, head), crc32c_portable(p, len))
        << "align " << align << " len " << len;
    }
  }
}

TEST(Crc32c, ChainingEqualsOneShot) {
  auto buf = random_bytes(2000, 7);
  uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 1000u, 1999u, 2000u}) {
    uint32_t a = crc32c(buf.data(), cut);
    EXPECT_EQ(crc32c(buf.data() + cut, buf.size() - cut, a), whole) << cut;
    uint32_t pa = crc32c_portable(buf.data(), cut);
    EXPECT_EQ(crc32c_portable(buf.data() + cut, buf.size() - cut, pa), whole)
      << cut;
  }
  // Byte at a time, alternating implementations.
  uint32_t c = 0;
  for (size_t i = 0; i < buf.size(); ++i)
    c = (i % 2) ? crc32c(&buf[i], 1, c) : crc32c_portable(&buf[i], 1, c);
  EXPECT_EQ(c, whole);
}

TEST(Crc32c, DetectsSingleBitFlips) {
  auto buf = random_bytes(256, 3);
  uint32_t orig = crc32c(buf.data(), buf.size());
  for (size_t bit = 0; bit < buf.size() * 8; bit += 13) {
    buf[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    EXPECT_NE(crc32c(buf.data(), buf.size()), orig) << bit;
    buf[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
}
