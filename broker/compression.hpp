#pragma once
// Compression of a RecordBatch's records section, in the exact stream formats
// Kafka clients write: gzip (RFC 1952, as java.util.zip.GZIPOutputStream),
// lz4 (LZ4 frame format, 64 KiB independent blocks, no checksums), zstd (a
// standard frame; Kafka's may lack the content size). Snappy is not supported.
// Used by the codec in record_batch.cpp; other code should not need it.

#include "broker/error.hpp"
#include "broker/record_batch.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry {

/// Appends the compressed form of `in` to `out`. `codec` none copies;
/// snappy and unknown values give unsupported_compression.
caf::error compress(ferry::compression codec, std::string_view in,
                    std::string& out);

/// Appends the decompressed form of `in` to `out`, producing at most
/// `max_out` bytes: more is length_overflow (a decompression bomb), damaged
/// input is decompression_failed, snappy and unknown codecs are
/// unsupported_compression. Memory use is bounded by `max_out` plus the
/// codec's window (zstd's window is capped too). On error `out` holds
/// unspecified partial output.
caf::error decompress(ferry::compression codec, std::string_view in,
                      std::string& out, size_t max_out);

} // namespace ferry
