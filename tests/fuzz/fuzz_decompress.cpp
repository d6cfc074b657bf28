// libFuzzer harness: the decompressors (broker/compression.hpp) on arbitrary
// bytes. The first byte picks the codec (gzip, lz4, zstd, snappy, none);
// the output is capped at 1 MiB, which a decompression bomb must hit as
// length_overflow instead of allocating without bound. Whatever decompresses
// must compress and decompress back to itself.

#include "broker/compression.hpp"
#include "broker/record_batch.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  static constexpr ferry::compression codecs[] = {
    ferry::compression::gzip, ferry::compression::lz4, ferry::compression::zstd,
    ferry::compression::snappy, ferry::compression::none};
  auto codec = codecs[data[0] % 5];
  std::string_view in{reinterpret_cast<const char*>(data + 1), size - 1};
  constexpr size_t max_out = 1u << 20;
  std::string out;
  if (auto err = ferry::decompress(codec, in, out, max_out))
    return 0;
  if (out.size() > max_out)
    std::abort(); // the cap did not hold
  std::string packed;
  if (ferry::compress(codec, out, packed))
    std::abort(); // it decompressed, so the codec is supported
  std::string back;
  if (ferry::decompress(codec, packed, back, max_out) || back != out)
    std::abort();
  return 0;
}
