#include "broker/compression.hpp"

#include <lz4frame.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <memory>

namespace ferry {

namespace {

// Output grows by doubling from an estimate (or the capacity `out` already
// has, or a size the stream declares), never past the limit.
size_t next_capacity(const std::string& out, size_t start, size_t in_size,
                     size_t max_out, size_t hint = 0) {
  size_t have = out.size() - start;
  size_t want = have == 0 ? std::max({in_size * 4, size_t{4096},
                                      out.capacity() - start, hint})
                          : have * 2;
  return std::min(want, max_out);
}

caf::error bomb(const char* name, size_t max_out) {
  return make_error(ec::length_overflow,
                    std::string{name} + ": decompressed records exceed "
                      + std::to_string(max_out) + " bytes");
}

// -- gzip ---------------------------------------------------------------------

caf::error gzip_compress(std::string_view in, std::string& out) {
  z_stream zs{};
  // 15 + 16: a gzip wrapper, as Kafka's GZIPOutputStream writes.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                   Z_DEFAULT_STRATEGY)
      != Z_OK)
    return make_error(ec::invalid_argument, "gzip: deflateInit2 failed");
  size_t start = out.size();
  out.resize(start + deflateBound(&zs, static_cast<uLong>(in.size())) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.next_out = reinterpret_cast<Bytef*>(out.data() + start);
  size_t in_left = in.size();
  size_t out_left = out.size() - start;
  int rc = Z_OK;
  while (rc == Z_OK || rc == Z_BUF_ERROR) {
    if (zs.avail_in == 0 && in_left > 0) {
      zs.avail_in = static_cast<uInt>(std::min<size_t>(in_left, UINT_MAX));
      in_left -= zs.avail_in;
    }
    if (zs.avail_out == 0) {
      if (out_left == 0) {
        size_t used = reinterpret_cast<char*>(zs.next_out) - out.data();
        out.resize(out.size() * 2);
        zs.next_out = reinterpret_cast<Bytef*>(out.data() + used);
        out_left = out.size() - used;
      }
      zs.avail_out = static_cast<uInt>(std::min<size_t>(out_left, UINT_MAX));
      out_left -= zs.avail_out;
    }
    rc = deflate(&zs, in_left == 0 ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_END)
      break;
  }
  size_t used = reinterpret_cast<char*>(zs.next_out) - out.data();
  deflateEnd(&zs);
  if (rc != Z_STREAM_END)
    return make_error(ec::invalid_argument,
                      "gzip: deflate failed with " + std::to_string(rc));
  out.resize(used);
  return caf::none;
}

caf::error gzip_decompress(std::string_view in, std::string& out,
                           size_t max_out) {
  z_stream zs{};
  // 15 + 16: gzip only (the Kafka wire format).
  if (inflateInit2(&zs, 15 + 16) != Z_OK)
    return make_error(ec::decompression_failed, "gzip: inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard{&zs, inflateEnd};
  size_t start = out.size();
  size_t used = start;
  const char* ip = in.data();
  size_t in_left = in.size();
  // The trailer's ISIZE (size mod 2^32 of the last member) sizes the output
  // in one step in the usual single-member case; only a hint.
  size_t declared = 0;
  if (in.size() >= 18) {
    auto q = reinterpret_cast<const unsigned char*>(in.data() + in.size() - 4);
    size_t isize = q[0] | q[1] << 8 | q[2] << 16 | size_t{q[3]} << 24;
    if (isize < max_out)
      declared = isize + 1;
  }
  for (;;) {
    if (zs.avail_in == 0 && in_left > 0) {
      zs.avail_in = static_cast<uInt>(std::min<size_t>(in_left, UINT_MAX));
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(ip));
      ip += zs.avail_in;
      in_left -= zs.avail_in;
    }
    // When the limit is reached, inflate into a one-byte probe: the stream
    // may legitimately have only its trailer left.
    char probe;
    bool full = false;
    if (used == out.size()) {
      full = used - start >= max_out;
      if (!full)
        out.resize(start + next_capacity(out, start, in.size(), max_out, declared));
    }
    uInt avail = full ? 1
                      : static_cast<uInt>(
                        std::min<size_t>(out.size() - used, UINT_MAX));
    zs.next_out = reinterpret_cast<Bytef*>(full ? &probe : out.data() + used);
    zs.avail_out = avail;
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t produced = avail - zs.avail_out;
    if (full && produced > 0)
      return bomb("gzip", max_out);
    used += produced;
    bool input_done = zs.avail_in == 0 && in_left == 0;
    if (rc == Z_STREAM_END) {
      if (input_done) {
        out.resize(used);
        return caf::none;
      }
      // Concatenated gzip members are valid gzip (GZIPInputStream reads them);
      // anything else after the trailer fails the next header check.
      if (inflateReset(&zs) != Z_OK)
        return make_error(ec::decompression_failed, "gzip: inflateReset failed");
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      out.resize(used);
      return make_error(ec::decompression_failed,
                        std::string{"gzip: "}
                          + (zs.msg ? zs.msg : "inflate failed"));
    }
    if (input_done && zs.avail_out > 0) {
      out.resize(used);
      return make_error(ec::decompression_failed,
                        "gzip: stream truncated after "
                          + std::to_string(in.size()) + " compressed bytes");
    }
  }
}

// -- lz4 frame ------------------------------------------------------------------

caf::error lz4_compress(std::string_view in, std::string& out) {
  // Kafka's settings (KafkaLZ4BlockOutputStream): 64 KiB independent blocks,
  // no block or content checksum, no content size.
  LZ4F_preferences_t prefs{};
  prefs.frameInfo.blockSizeID = LZ4F_max64KB;
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
  prefs.frameInfo.blockChecksumFlag = LZ4F_noBlockChecksum;
  prefs.frameInfo.contentSize = 0;
  size_t start = out.size();
  size_t bound = LZ4F_compressFrameBound(in.size(), &prefs);
  out.resize(start + bound);
  size_t n = LZ4F_compressFrame(out.data() + start, bound, in.data(), in.size(),
                                &prefs);
  if (LZ4F_isError(n)) {
    out.resize(start);
    return make_error(ec::invalid_argument,
                      std::string{"lz4: "} + LZ4F_getErrorName(n));
  }
  out.resize(start + n);
  return caf::none;
}

caf::error lz4_decompress(std::string_view in, std::string& out,
                          size_t max_out) {
  // One context per thread: creating one per batch costs two 64 KiB
  // buffer allocations on the hot path.
  thread_local std::unique_ptr<LZ4F_dctx, LZ4F_errorCode_t (*)(LZ4F_dctx*)>
    ctx{nullptr, LZ4F_freeDecompressionContext};
  if (!ctx) {
    LZ4F_dctx* raw = nullptr;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&raw, LZ4F_VERSION)))
      return make_error(ec::decompression_failed, "lz4: cannot create context");
    ctx.reset(raw);
  }
  // A previous call may have stopped mid-frame (damaged input).
  LZ4F_resetDecompressionContext(ctx.get());
  size_t start = out.size();
  size_t used = start;
  const char* ip = in.data();
  const char* iend = in.data() + in.size();
  size_t declared = 0; // LZ4F reports the content size only mid-stream
  size_t hint = 1;
  for (;;) {
    // At the limit, decode into a one-byte probe: only the end mark (or
    // another empty frame) may remain.
    char probe;
    bool full = false;
    if (used == out.size()) {
      full = used - start >= max_out;
      if (!full)
        out.resize(start + next_capacity(out, start, in.size(), max_out, declared));
    }
    size_t dst = full ? 1 : out.size() - used;
    size_t src = static_cast<size_t>(iend - ip);
    hint = LZ4F_decompress(ctx.get(), full ? &probe : out.data() + used, &dst,
                           ip, &src, nullptr);
    if (LZ4F_isError(hint)) {
      out.resize(used);
      return make_error(ec::decompression_failed,
                        std::string{"lz4: "} + LZ4F_getErrorName(hint));
    }
    if (full && dst > 0)
      return bomb("lz4", max_out);
    ip += src;
    used += dst;
    if (hint == 0 && ip == iend)
      break;
    if (src == 0 && dst == 0)
      break; // cannot progress: the frame is cut short
  }
  out.resize(used);
  if (hint != 0)
    return make_error(ec::decompression_failed,
                      "lz4: frame truncated after " + std::to_string(in.size())
                        + " compressed bytes");
  return caf::none;
}

// -- zstd -----------------------------------------------------------------------

caf::error zstd_compress(std::string_view in, std::string& out) {
  size_t start = out.size();
  size_t bound = ZSTD_compressBound(in.size());
  out.resize(start + bound);
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx{
    ZSTD_createCCtx(), ZSTD_freeCCtx};
  if (!ctx)
    return make_error(ec::invalid_argument, "zstd: cannot create context");
  size_t n = ZSTD_compressCCtx(ctx.get(), out.data() + start, bound, in.data(),
                               in.size(), ZSTD_CLEVEL_DEFAULT);
  if (ZSTD_isError(n)) {
    out.resize(start);
    return make_error(ec::invalid_argument,
                      std::string{"zstd: "} + ZSTD_getErrorName(n));
  }
  out.resize(start + n);
  return caf::none;
}

caf::error zstd_decompress(std::string_view in, std::string& out,
                           size_t max_out) {
  // One context per thread, reset per call (see lz4_decompress).
  thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx{
    ZSTD_createDCtx(), ZSTD_freeDCtx};
  if (!ctx)
    return make_error(ec::decompression_failed, "zstd: cannot create context");
  ZSTD_DCtx_reset(ctx.get(), ZSTD_reset_session_and_parameters);
  // A frame may ask for a window up to 2^31; allow what max_out could need
  // (at least 16 MiB, which covers every level's default), at most zstd's
  // default limit of 2^27.
  int wlog = 24;
  while (wlog < 27 && (size_t{1} << wlog) < max_out)
    ++wlog;
  ZSTD_DCtx_setParameter(ctx.get(), ZSTD_d_windowLogMax, wlog);
  size_t start = out.size();
  size_t used = start;
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  // Kafka's frames often lack it; when present it is only a hint (bounded
  // by max_out below), never trusted for correctness.
  size_t declared = 0;
  if (auto cs = ZSTD_getFrameContentSize(in.data(), in.size());
      cs != ZSTD_CONTENTSIZE_UNKNOWN && cs != ZSTD_CONTENTSIZE_ERROR && cs < max_out)
    declared = static_cast<size_t>(cs) + 1;
  size_t rc = 1;
  // Streaming: Kafka's frames need not declare their content size.
  for (;;) {
    char probe;
    bool full = false;
    if (used == out.size()) {
      full = used - start >= max_out;
      if (!full)
        out.resize(start + next_capacity(out, start, in.size(), max_out, declared));
    }
    ZSTD_outBuffer ob{full ? &probe : out.data() + used,
                      full ? 1 : out.size() - used, 0};
    size_t before = ib.pos;
    rc = ZSTD_decompressStream(ctx.get(), &ob, &ib);
    if (ZSTD_isError(rc)) {
      out.resize(used);
      return make_error(ec::decompression_failed,
                        std::string{"zstd: "} + ZSTD_getErrorName(rc));
    }
    if (full && ob.pos > 0)
      return bomb("zstd", max_out);
    used += ob.pos;
    if (rc == 0 && ib.pos == ib.size)
      break;
    if (ob.pos == 0 && ib.pos == before)
      break; // cannot progress: the frame is cut short
  }
  out.resize(used);
  if (rc != 0)
    return make_error(ec::decompression_failed,
                      "zstd: frame truncated after " + std::to_string(in.size())
                        + " compressed bytes");
  return caf::none;
}

caf::error unsupported(ferry::compression codec) {
  if (codec == compression::snappy)
    return make_error(ec::unsupported_compression,
                      "snappy (codec 2) is not supported");
  return make_error(ec::unsupported_compression,
                    "unknown compression codec "
                      + std::to_string(static_cast<int>(codec)));
}

} // namespace

caf::error compress(ferry::compression codec, std::string_view in,
                    std::string& out) {
  switch (codec) {
    case compression::none:
      out.append(in);
      return caf::none;
    case compression::gzip:
      return gzip_compress(in, out);
    case compression::lz4:
      return lz4_compress(in, out);
    case compression::zstd:
      return zstd_compress(in, out);
    default:
      return unsupported(codec);
  }
}

caf::error decompress(ferry::compression codec, std::string_view in,
                      std::string& out, size_t max_out) {
  switch (codec) {
    case compression::none:
      if (in.size() > max_out)
        return bomb("none", max_out);
      out.append(in);
      return caf::none;
    case compression::gzip:
      return gzip_decompress(in, out, max_out);
    case compression::lz4:
      return lz4_decompress(in, out, max_out);
    case compression::zstd:
      return zstd_decompress(in, out, max_out);
    default:
      return unsupported(codec);
  }
}

} // namespace ferry
