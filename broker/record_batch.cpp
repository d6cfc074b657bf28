#include "broker/record_batch.hpp"

#include <limits>

#include "broker/compression.hpp"
#include "broker/crc32c.hpp"
#include "broker/varint.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

namespace ferry {

namespace L = batch_layout;

caf::expected<batch_header> parse_batch_header(std::string_view buf,
                                                size_t max_batch_bytes) {
  if (buf.size() < L::header_size)
    return make_error(ec::truncated_batch,
                      "batch header needs " + std::to_string(L::header_size)
                        + " bytes, have " + std::to_string(buf.size()));
  const char* p = buf.data();
  batch_header h;
  h.magic = be::load<int8_t>(p + L::magic);
  if (h.magic != L::current_magic)
    return make_error(ec::bad_magic,
                      "magic " + std::to_string(h.magic) + ", expected 2");
  h.base_offset = offset{be::load<int64_t>(p + L::base_offset)};
  h.batch_length = be::load<int32_t>(p + L::batch_length);
  constexpr auto min_len = static_cast<int64_t>(L::header_size - L::log_overhead);
  if (h.batch_length < min_len
      || static_cast<uint64_t>(h.batch_length) + L::log_overhead > max_batch_bytes)
    return make_error(ec::length_overflow,
                      "batch_length " + std::to_string(h.batch_length)
                        + " outside [" + std::to_string(min_len) + ", "
                        + std::to_string(max_batch_bytes - L::log_overhead)
                        + "]");
  if (buf.size() < h.total_size())
    return make_error(ec::truncated_batch,
                      "batch_length " + std::to_string(h.batch_length)
                        + " needs " + std::to_string(h.total_size())
                        + " bytes, have " + std::to_string(buf.size()));
  h.partition_leader_epoch = be::load<int32_t>(p + L::partition_leader_epoch);
  h.crc = be::load<uint32_t>(p + L::crc);
  h.attributes = be::load<int16_t>(p + L::attributes);
  h.last_offset_delta = be::load<int32_t>(p + L::last_offset_delta);
  h.base_timestamp = be::load<int64_t>(p + L::base_timestamp);
  h.max_timestamp = be::load<int64_t>(p + L::max_timestamp);
  h.producer_id = be::load<int64_t>(p + L::producer_id);
  h.producer_epoch = be::load<int16_t>(p + L::producer_epoch);
  h.base_sequence = be::load<int32_t>(p + L::base_sequence);
  h.records_count = be::load<int32_t>(p + L::records_count);
  // last_offset() / next_offset() must exist: a negative delta, or one that
  // carries the base offset past INT64_MAX, is no batch (found by
  // tests/fuzz: signed overflow in next_offset()).
  if (h.last_offset_delta < 0)
    return make_error(ec::malformed_record,
                      "last_offset_delta " + std::to_string(h.last_offset_delta)
                        + " is negative");
  if (h.base_offset.value > std::numeric_limits<int64_t>::max() - 1 - h.last_offset_delta)
    return make_error(ec::malformed_record,
                      "base_offset " + std::to_string(h.base_offset.value)
                        + " + last_offset_delta "
                        + std::to_string(h.last_offset_delta) + " overflows");
  return h;
}

caf::error verify_batch_crc(std::string_view batch) {
  if (batch.size() < L::header_size)
    return make_error(ec::truncated_batch,
                      "batch of " + std::to_string(batch.size())
                        + " bytes is shorter than its header");
  uint32_t stored = be::load<uint32_t>(batch.data() + L::crc);
  uint32_t computed = crc32c(batch.data() + L::attributes,
                             batch.size() - L::attributes);
  if (stored != computed) {
    char msg[64];
    std::snprintf(msg, sizeof msg, "stored 0x%08x computed 0x%08x", stored,
                  computed);
    return make_error(ec::crc_mismatch, msg);
  }
  return caf::none;
}

void set_base_offset(std::span<char> batch, offset base) {
  if (batch.size() >= L::base_offset + 8)
    be::store<int64_t>(batch.data() + L::base_offset, base.value);
}

void set_partition_leader_epoch(std::span<char> batch, int32_t epoch) {
  if (batch.size() >= L::partition_leader_epoch + 4)
    be::store<int32_t>(batch.data() + L::partition_leader_epoch, epoch);
}

// -- encoding -------------------------------------------------------------------

namespace {

// Scratch for an uncompressed records section, reused per thread: fresh
// 100 KiB+ buffers per batch cost more in page faults than the codec itself.
// Capacity beyond scratch_keep is released after use.
constexpr size_t scratch_keep = 8u << 20;

class scratch {
public:
  explicit scratch(std::string& buf) : buf_(buf) { buf_.clear(); }
  ~scratch() {
    if (buf_.capacity() > scratch_keep)
      std::string{}.swap(buf_);
    else
      buf_.clear();
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  std::string& get() { return buf_; }

private:
  std::string& buf_;
};

thread_local std::string encode_scratch;
thread_local std::string decode_scratch;

} // namespace

namespace {

// Kafka's int32 lengths bound every string we write.
constexpr size_t max_field = static_cast<size_t>(INT32_MAX);

inline size_t nullable_size(const std::optional<std::string>& s) {
  return s ? varint::size_signed(static_cast<int64_t>(s->size())) + s->size()
           : 1;
}

// Bytes of a record after its length varint.
inline size_t record_body_size(const record& r, int64_t ts_delta) {
  size_t n = 1 // attributes
             + varint::size_signed(ts_delta)
             + varint::size_signed(r.offset_delta) + nullable_size(r.key)
             + nullable_size(r.value)
             + varint::size_signed(static_cast<int64_t>(r.headers.size()));
  for (auto& h : r.headers)
    n += varint::size_signed(static_cast<int64_t>(h.key.size())) + h.key.size()
         + nullable_size(h.value);
  return n;
}

inline char* put_bytes(char* out, const std::string& s) {
  out = varint::put_signed(out, static_cast<int64_t>(s.size()));
  if (!s.empty())
    std::memcpy(out, s.data(), s.size());
  return out + s.size();
}

inline char* put_nullable(char* out, const std::optional<std::string>& s) {
  if (!s)
    return varint::put_signed(out, -1);
  return put_bytes(out, *s);
}

// Wrapping difference: any pair of int64 timestamps round-trips.
inline int64_t ts_delta(timestamp_ms ts, timestamp_ms base) {
  return static_cast<int64_t>(static_cast<uint64_t>(ts)
                              - static_cast<uint64_t>(base));
}

caf::error check_record(const record& r, size_t i, int64_t prev_delta) {
  auto where = [&] { return "record " + std::to_string(i) + ": "; };
  if (r.offset_delta < 0 || r.offset_delta <= prev_delta)
    return make_error(ec::invalid_argument,
                      where() + "offset_delta " + std::to_string(r.offset_delta)
                        + " must be >= 0 and above the previous record's "
                        + std::to_string(prev_delta));
  auto too_long = [&](const char* what, size_t n) {
    return make_error(ec::length_overflow, where() + what + " of "
                                             + std::to_string(n)
                                             + " bytes exceeds int32");
  };
  if (r.key && r.key->size() > max_field)
    return too_long("key", r.key->size());
  if (r.value && r.value->size() > max_field)
    return too_long("value", r.value->size());
  if (r.headers.size() > max_field)
    return too_long("header count", r.headers.size());
  for (auto& h : r.headers) {
    if (h.key.size() > max_field)
      return too_long("header key", h.key.size());
    if (h.value && h.value->size() > max_field)
      return too_long("header value", h.value->size());
  }
  return caf::none;
}

// Writes the records section at `out`, which has room for exactly `size`.
void write_records(char* out, const std::vector<record>& records,
                   timestamp_ms base) {
  for (auto& r : records) {
    int64_t tsd = ts_delta(r.timestamp, base);
    out = varint::put_signed(out,
                             static_cast<int64_t>(record_body_size(r, tsd)));
    *out++ = 0; // attributes: unused in v2
    out = varint::put_signed(out, tsd);
    out = varint::put_signed(out, r.offset_delta);
    out = put_nullable(out, r.key);
    out = put_nullable(out, r.value);
    out = varint::put_signed(out, static_cast<int64_t>(r.headers.size()));
    for (auto& h : r.headers) {
      out = put_bytes(out, h.key);
      out = put_nullable(out, h.value);
    }
  }
}

// Room for the fixed header, then the records section (`section` bytes
// before compression) compressed with `codec`.
caf::expected<std::string> header_and_records(compression codec,
                                              const std::vector<record>& records,
                                              timestamp_ms base_ts, size_t section) {
  std::string out;
  if (codec == compression::none) {
    out.resize(L::header_size + section);
    write_records(out.data() + L::header_size, records, base_ts);
  } else {
    scratch guard{encode_scratch};
    std::string& plain = guard.get();
    plain.resize(section);
    write_records(plain.data(), records, base_ts);
    out.reserve(L::header_size + section / 2 + 64);
    out.resize(L::header_size);
    if (auto err = compress(codec, plain, out))
      return err;
  }
  if (out.size() - L::log_overhead > max_field)
    return make_error(ec::length_overflow,
                      "batch of " + std::to_string(out.size())
                        + " bytes exceeds int32 batch_length");
  return out;
}

} // namespace

caf::expected<std::string> encode_batch(const batch_meta& meta,
                                        const std::vector<record>& records) {
  if (records.empty())
    return make_error(ec::invalid_argument, "encode_batch: no records");
  if (records.size() > max_field)
    return make_error(ec::length_overflow,
                      std::to_string(records.size())
                        + " records exceed int32 records_count");
  if (meta.codec == compression::snappy
      || static_cast<uint8_t>(meta.codec) > static_cast<uint8_t>(compression::zstd))
    return make_error(ec::unsupported_compression,
                      "encode_batch: codec "
                        + std::to_string(static_cast<int>(meta.codec))
                        + (meta.codec == compression::snappy ? " (snappy)" : "")
                        + " is not supported");
  // One pass to validate and size, so the output is allocated once.
  const timestamp_ms base_ts = records.front().timestamp;
  timestamp_ms max_ts = base_ts;
  size_t section = 0;
  int64_t prev = -1;
  for (size_t i = 0; i < records.size(); ++i) {
    auto& r = records[i];
    if (auto err = check_record(r, i, prev))
      return err;
    prev = r.offset_delta;
    max_ts = std::max(max_ts, r.timestamp);
    size_t body = record_body_size(r, ts_delta(r.timestamp, base_ts));
    if (body > max_field)
      return make_error(ec::length_overflow,
                        "record " + std::to_string(i) + ": " + std::to_string(body)
                          + " bytes exceed int32");
    section += varint::size_signed(static_cast<int64_t>(body)) + body;
  }
  auto body = header_and_records(meta.codec, records, base_ts, section);
  if (!body)
    return std::move(body.error());
  std::string out = std::move(*body);
  char* p = out.data();
  uint16_t attrs = static_cast<uint16_t>(meta.codec);
  if (meta.ts_type == timestamp_type::log_append_time)
    attrs |= L::timestamp_type_bit;
  if (meta.transactional)
    attrs |= L::transactional_bit;
  be::store<int64_t>(p + L::base_offset, meta.base_offset.value);
  be::store<int32_t>(p + L::batch_length,
                     static_cast<int32_t>(out.size() - L::log_overhead));
  be::store<int32_t>(p + L::partition_leader_epoch, meta.partition_leader_epoch);
  be::store<int8_t>(p + L::magic, L::current_magic);
  be::store<uint16_t>(p + L::attributes, attrs);
  be::store<int32_t>(p + L::last_offset_delta, records.back().offset_delta);
  be::store<int64_t>(p + L::base_timestamp, base_ts);
  be::store<int64_t>(p + L::max_timestamp, max_ts);
  be::store<int64_t>(p + L::producer_id, meta.producer_id);
  be::store<int16_t>(p + L::producer_epoch, meta.producer_epoch);
  be::store<int32_t>(p + L::base_sequence, meta.base_sequence);
  be::store<int32_t>(p + L::records_count, static_cast<int32_t>(records.size()));
  be::store<uint32_t>(p + L::crc, crc32c(p + L::attributes,
                                         out.size() - L::attributes));
  return out;
}

caf::expected<std::string> rebuild_batch(std::string_view original,
                                         const std::vector<record>& kept) {
  auto h = parse_batch_header(original, std::numeric_limits<size_t>::max());
  if (!h)
    return std::move(h.error());
  size_t section = 0;
  int64_t prev = -1;
  for (size_t i = 0; i < kept.size(); ++i) {
    auto& r = kept[i];
    if (auto err = check_record(r, i, prev))
      return err;
    if (r.offset_delta > h->last_offset_delta)
      return make_error(ec::invalid_argument,
                        "rebuild_batch: offset delta "
                          + std::to_string(r.offset_delta) + " beyond the batch's "
                          + std::to_string(h->last_offset_delta));
    prev = r.offset_delta;
    size_t body = record_body_size(r, ts_delta(r.timestamp, h->base_timestamp));
    section += varint::size_signed(static_cast<int64_t>(body)) + body;
  }
  auto codec = kept.empty() ? compression::none : h->codec();
  auto body = header_and_records(codec, kept, h->base_timestamp, section);
  if (!body)
    return std::move(body.error());
  std::string out = std::move(*body);
  char* p = out.data();
  std::memcpy(p, original.data(), L::header_size);
  auto attrs = static_cast<uint16_t>(h->attributes);
  if (kept.empty())
    attrs = static_cast<uint16_t>(attrs & ~L::compression_mask);
  be::store<uint16_t>(p + L::attributes, attrs);
  be::store<int32_t>(p + L::batch_length,
                     static_cast<int32_t>(out.size() - L::log_overhead));
  be::store<int32_t>(p + L::records_count, static_cast<int32_t>(kept.size()));
  be::store<uint32_t>(p + L::crc, crc32c(p + L::attributes,
                                         out.size() - L::attributes));
  return out;
}

// -- decoding -------------------------------------------------------------------

namespace {

// Smallest encoded record: length, attributes, timestamp delta, offset delta,
// key length, value length, header count, one byte each.
constexpr size_t min_record_size = 7;

struct record_parser {
  const char* p;
  const char* end;
  const batch_header& h;
  size_t index = 0;       // record being parsed, for messages
  int64_t prev_delta = -1;

  std::string where() const { return "record " + std::to_string(index) + ": "; }

  caf::error varint_error(varint::status st, const char* field) const {
    return make_error(ec::bad_varint,
                      where() + field
                        + (st == varint::status::truncated
                             ? " varint runs off the end of the record"
                             : " varint is too long"));
  }

  // A length-prefixed field; -1 is null where `nullable`. Returns the view
  // through `out` (nullptr data for null).
  caf::error read_bytes(const char* rend, const char* field, bool nullable,
                        const char** data, int32_t* len) {
    if (auto st = varint::get_varint(&p, rend, len); st != varint::status::ok)
      return varint_error(st, field);
    if (*len < 0) {
      if (*len == -1 && nullable) {
        *data = nullptr;
        return caf::none;
      }
      return make_error(ec::length_overflow,
                        where() + field + " " + std::to_string(*len)
                          + " is negative");
    }
    if (static_cast<size_t>(*len) > static_cast<size_t>(rend - p))
      return make_error(ec::length_overflow,
                        where() + field + " " + std::to_string(*len)
                          + " exceeds remaining "
                          + std::to_string(rend - p) + " bytes");
    *data = p;
    p += *len;
    return caf::none;
  }

  caf::error nullable(const char* rend, const char* field,
                      std::optional<std::string>& out) {
    const char* data;
    int32_t len;
    if (auto err = read_bytes(rend, field, true, &data, &len))
      return err;
    if (data)
      out.emplace(data, static_cast<size_t>(len));
    return caf::none;
  }

  caf::error parse(record& r) {
    int32_t len;
    if (auto st = varint::get_varint(&p, end, &len); st != varint::status::ok)
      return make_error(ec::bad_varint,
                        where() + "length varint "
                          + (st == varint::status::truncated
                               ? "runs off the end of the records"
                               : "is too long"));
    if (len < 0)
      return make_error(ec::length_overflow,
                        where() + "length " + std::to_string(len)
                          + " is negative");
    if (static_cast<size_t>(len) > static_cast<size_t>(end - p))
      return make_error(ec::length_overflow,
                        where() + "length " + std::to_string(len)
                          + " exceeds remaining " + std::to_string(end - p)
                          + " bytes");
    const char* rend = p + len;
    if (len < 1)
      return make_error(ec::malformed_record,
                        where() + "length 0 leaves no room for attributes");
    ++p; // attributes: unused in v2
    int64_t tsd;
    if (auto st = varint::get_varlong(&p, rend, &tsd); st != varint::status::ok)
      return varint_error(st, "timestamp delta");
    r.timestamp = static_cast<int64_t>(static_cast<uint64_t>(h.base_timestamp)
                                       + static_cast<uint64_t>(tsd));
    if (auto st = varint::get_varint(&p, rend, &r.offset_delta);
        st != varint::status::ok)
      return varint_error(st, "offset delta");
    // Deltas rise strictly but may skip (compaction removes records).
    if (r.offset_delta <= prev_delta || r.offset_delta > h.last_offset_delta)
      return make_error(ec::malformed_record,
                        where() + "offset delta " + std::to_string(r.offset_delta)
                          + " not in (" + std::to_string(prev_delta) + ", "
                          + std::to_string(h.last_offset_delta) + "]");
    prev_delta = r.offset_delta;
    if (auto err = nullable(rend, "key length", r.key))
      return err;
    if (auto err = nullable(rend, "value length", r.value))
      return err;
    int32_t n;
    if (auto st = varint::get_varint(&p, rend, &n); st != varint::status::ok)
      return varint_error(st, "header count");
    if (n < 0)
      return make_error(ec::length_overflow,
                        where() + "header count " + std::to_string(n)
                          + " is negative");
    // Each header takes at least two bytes: bounds the reservation.
    if (static_cast<size_t>(n) > static_cast<size_t>(rend - p) / 2)
      return make_error(ec::length_overflow,
                        where() + "header count " + std::to_string(n)
                          + " exceeds what remaining "
                          + std::to_string(rend - p) + " bytes can hold");
    r.headers.resize(static_cast<size_t>(n));
    for (auto& hd : r.headers) {
      const char* data;
      int32_t klen;
      if (auto err = read_bytes(rend, "header key length", false, &data, &klen))
        return err;
      hd.key.assign(data, static_cast<size_t>(klen));
      if (auto err = nullable(rend, "header value length", hd.value))
        return err;
    }
    if (p != rend)
      return make_error(ec::malformed_record,
                        where() + std::to_string(rend - p)
                          + " bytes left over inside its length "
                          + std::to_string(len));
    return caf::none;
  }
};

} // namespace

caf::expected<decoded_batch> decode_batch(std::string_view batch,
                                          size_t max_batch_bytes) {
  decoded_batch result;
  if (auto hdr = parse_batch_header(batch, max_batch_bytes))
    result.header = *hdr;
  else
    return std::move(hdr.error());
  const batch_header& h = result.header;
  if (batch.size() != h.total_size())
    return make_error(ec::malformed_record,
                      std::to_string(batch.size() - h.total_size())
                        + " trailing bytes after the batch of "
                        + std::to_string(h.total_size()) + " bytes");
  if (auto err = verify_batch_crc(batch))
    return err;
  auto codec = h.codec();
  if (codec == compression::snappy
      || static_cast<uint8_t>(codec) > static_cast<uint8_t>(compression::zstd))
    return make_error(ec::unsupported_compression,
                      "attributes 0x" + [&] {
                        char buf[8];
                        std::snprintf(buf, sizeof buf, "%04x",
                                      static_cast<uint16_t>(h.attributes));
                        return std::string{buf};
                      }() + ": codec "
                        + std::to_string(static_cast<int>(codec))
                        + (codec == compression::snappy ? " (snappy)" : "")
                        + " is not supported");
  if (h.records_count < 0)
    return make_error(ec::malformed_record,
                      "records_count " + std::to_string(h.records_count)
                        + " is negative");
  std::string_view section = batch.substr(L::header_size);
  scratch guard{decode_scratch};
  if (codec != compression::none) {
    std::string& plain = guard.get();
    if (auto err = decompress(codec, section, plain, max_batch_bytes))
      return err;
    section = plain;
  }
  record_parser rp{section.data(), section.data() + section.size(), h};
  auto count = static_cast<size_t>(h.records_count);
  result.records.reserve(std::min(count, section.size() / min_record_size));
  for (; rp.index < count; ++rp.index) {
    if (rp.p == rp.end)
      return make_error(ec::malformed_record,
                        "records_count " + std::to_string(count)
                          + " but the records end after "
                          + std::to_string(rp.index));
    if (auto err = rp.parse(result.records.emplace_back()))
      return err;
  }
  if (rp.p != rp.end)
    return make_error(ec::malformed_record,
                      std::to_string(rp.end - rp.p)
                        + " trailing bytes after records_count "
                        + std::to_string(count) + " records");
  return result;
}

} // namespace ferry
