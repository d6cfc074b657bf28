// RecordBatch v2 codec: round trips, then one test per kind of damage. Each
// damaged batch must give its own error code, never a crash (run this binary
// under -fsanitize=address,undefined to be sure).

#include "broker/compression.hpp"
#include "broker/crc32c.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace ferry;
namespace L = ferry::batch_layout;

namespace {

// -- helpers -------------------------------------------------------------------

record make_record(int32_t delta, timestamp_ms ts, std::optional<std::string> key,
                   std::optional<std::string> value,
                   std::vector<record_header> headers = {}) {
  record r;
  r.offset_delta = delta;
  r.timestamp = ts;
  r.key = std::move(key);
  r.value = std::move(value);
  r.headers = std::move(headers);
  return r;
}

// A mix of every shape a record can take.
std::vector<record> assorted_records() {
  std::vector<record> rs;
  rs.push_back(make_record(0, 1000, "k", "v"));
  rs.push_back(make_record(1, 1005, std::nullopt, "value without key"));
  rs.push_back(make_record(2, 999, "tombstone", std::nullopt));
  rs.push_back(make_record(3, 1010, "", ""));
  rs.push_back(make_record(4, 1010, std::string("\0bin\xff", 5),
                           std::string(300, 'x'),
                           {{"h1", "one"}, {"h-null", std::nullopt}, {"", ""}}));
  rs.push_back(make_record(5, 1020, std::nullopt, std::nullopt, {{"only", "h"}}));
  return rs;
}

batch_meta meta_for(compression codec) {
  batch_meta m;
  m.base_offset = offset{1234};
  m.partition_leader_epoch = 7;
  m.codec = codec;
  return m;
}

std::string encode_ok(const batch_meta& m, const std::vector<record>& rs) {
  auto b = encode_batch(m, rs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

template <class T>
ec code(const caf::expected<T>& x) {
  return x ? ec::none : code_of(x.error());
}

// Recomputes the CRC so that damage behind it reaches the record parser.
void fix_crc(std::string& b) {
  uint32_t c = crc32c(b.data() + L::attributes, b.size() - L::attributes);
  for (int i = 0; i < 4; ++i)
    b[L::crc + i] = static_cast<char>(c >> (24 - 8 * i));
}

void put_be(std::string& b, size_t pos, uint64_t v, int width) {
  for (int i = 0; i < width; ++i)
    b[pos + i] = static_cast<char>(v >> (8 * (width - 1 - i)));
}

// Kafka zigzag varint, written independently of broker/varint.hpp.
std::string zz(int64_t v) {
  uint64_t u = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  std::string out;
  while (u >= 0x80) {
    out.push_back(static_cast<char>((u & 0x7F) | 0x80));
    u >>= 7;
  }
  out.push_back(static_cast<char>(u));
  return out;
}

// A record from raw pieces: length prefix computed from `body` unless given.
std::string raw_record(const std::string& body,
                       std::optional<int64_t> length = std::nullopt) {
  return zz(length ? *length : static_cast<int64_t>(body.size())) + body;
}

// Body of a well-formed record: attrs, ts delta, offset delta, key, value, 0 headers.
std::string raw_body(int64_t offset_delta, const std::string& key,
                     const std::string& value) {
  return std::string(1, '\0') + zz(0) + zz(offset_delta)
         + zz(static_cast<int64_t>(key.size())) + key
         + zz(static_cast<int64_t>(value.size())) + value + zz(0);
}

// A batch around a hand-made records section, with a correct CRC.
std::string raw_batch(const std::string& section, int32_t count,
                      int32_t last_offset_delta, uint16_t attributes = 0) {
  std::string b(L::header_size, '\0');
  put_be(b, L::base_offset, 0, 8);
  put_be(b, L::batch_length, L::header_size - L::log_overhead + section.size(), 4);
  b[L::magic] = 2;
  put_be(b, L::attributes, attributes, 2);
  put_be(b, L::last_offset_delta, static_cast<uint32_t>(last_offset_delta), 4);
  put_be(b, L::base_timestamp, 1000, 8);
  put_be(b, L::max_timestamp, 1000, 8);
  put_be(b, L::producer_id, static_cast<uint64_t>(-1), 8);
  put_be(b, L::producer_epoch, 0xFFFF, 2);
  put_be(b, L::base_sequence, 0xFFFFFFFF, 4);
  put_be(b, L::records_count, static_cast<uint32_t>(count), 4);
  b += section;
  fix_crc(b);
  return b;
}

const compression all_codecs[] = {compression::none, compression::gzip,
                                  compression::lz4, compression::zstd};

std::string codec_name(compression c) {
  switch (c) {
    case compression::none: return "none";
    case compression::gzip: return "gzip";
    case compression::snappy: return "snappy";
    case compression::lz4: return "lz4";
    case compression::zstd: return "zstd";
  }
  return "unknown";
}

// -- round trips, per codec -------------------------------------------------------

class CodecRoundTrip : public ::testing::TestWithParam<compression> {};

TEST_P(CodecRoundTrip, AssortedRecords) {
  auto rs = assorted_records();
  auto m = meta_for(GetParam());
  auto b = encode_ok(m, rs);
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, rs);
  EXPECT_EQ(d->header.codec(), GetParam());
  EXPECT_EQ(d->header.base_offset, offset{1234});
  EXPECT_EQ(d->header.partition_leader_epoch, 7);
  EXPECT_EQ(d->header.records_count, 6);
  EXPECT_EQ(d->header.last_offset_delta, 5);
  EXPECT_EQ(d->header.base_timestamp, 1000);
  EXPECT_EQ(d->header.max_timestamp, 1020);
  EXPECT_EQ(d->header.total_size(), b.size());
  EXPECT_EQ(d->header.next_offset(), offset{1240});
}

TEST_P(CodecRoundTrip, OneMebibyteValue) {
  std::mt19937 gen{1};
  std::string big(1 << 20, '\0');
  for (auto& c : big)
    c = static_cast<char>('a' + gen() % 26);
  std::vector<record> rs{make_record(0, 5, "big", big)};
  auto b = encode_ok(meta_for(GetParam()), rs);
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, rs);
}

TEST_P(CodecRoundTrip, TenThousandRecords) {
  std::vector<record> rs;
  rs.reserve(10000);
  for (int i = 0; i < 10000; ++i)
    rs.push_back(make_record(i, 1'700'000'000'000 + i % 97,
                             "key-" + std::to_string(i),
                             i % 5 == 0 ? std::nullopt
                                        : std::optional{std::to_string(i * 31)},
                             i % 3 == 0 ? std::vector<record_header>{{"h", "x"}}
                                        : std::vector<record_header>{}));
  auto b = encode_ok(meta_for(GetParam()), rs);
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, rs);
  EXPECT_EQ(d->header.records_count, 10000);
  EXPECT_EQ(d->header.max_timestamp, 1'700'000'000'000 + 96);
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecRoundTrip, ::testing::ValuesIn(all_codecs),
                         [](const auto& info) { return codec_name(info.param); });

// -- encoder ---------------------------------------------------------------------

TEST(Encode, HeaderFieldsFollowMetaAndRecords) {
  batch_meta m;
  m.base_offset = offset{42};
  m.partition_leader_epoch = 3;
  m.ts_type = timestamp_type::log_append_time;
  m.transactional = true;
  m.producer_id = 4242;
  m.producer_epoch = 9;
  m.base_sequence = 100;
  std::vector<record> rs{make_record(0, 50, "a", "1"), make_record(1, 70, "b", "2"),
                         make_record(2, 60, "c", "3")};
  auto b = encode_ok(m, rs);
  auto h = parse_batch_header(b);
  ASSERT_TRUE(h) << describe(h.error());
  EXPECT_EQ(h->base_offset, offset{42});
  EXPECT_EQ(h->partition_leader_epoch, 3);
  EXPECT_EQ(h->magic, 2);
  EXPECT_EQ(h->producer_id, 4242);
  EXPECT_EQ(h->producer_epoch, 9);
  EXPECT_EQ(h->base_sequence, 100);
  EXPECT_EQ(h->base_timestamp, 50);
  EXPECT_EQ(h->max_timestamp, 70);
  EXPECT_EQ(h->last_offset_delta, 2);
  EXPECT_EQ(h->records_count, 3);
  EXPECT_EQ(h->ts_type(), timestamp_type::log_append_time);
  EXPECT_TRUE(h->transactional());
  EXPECT_FALSE(h->control());
  EXPECT_EQ(h->attributes, L::timestamp_type_bit | L::transactional_bit);
  EXPECT_EQ(static_cast<size_t>(h->batch_length) + L::log_overhead, b.size());
  EXPECT_FALSE(verify_batch_crc(b));
}

TEST(Encode, ExtremeTimestampsAndGappedDeltasRoundTrip) {
  std::vector<record> rs{make_record(0, INT64_MAX, "a", "1"),
                         make_record(5, INT64_MIN, "b", "2"),
                         make_record(INT32_MAX, -1, "c", "3")};
  auto b = encode_ok(meta_for(compression::none), rs);
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, rs);
  EXPECT_EQ(d->header.last_offset_delta, INT32_MAX);
}

TEST(Encode, EmptyRecordsIsInvalidArgument) {
  EXPECT_EQ(code(encode_batch(meta_for(compression::none), {})),
            ec::invalid_argument);
}

TEST(Encode, SnappyIsUnsupported) {
  EXPECT_EQ(code(encode_batch(meta_for(compression::snappy), assorted_records())),
            ec::unsupported_compression);
  EXPECT_EQ(code(encode_batch(meta_for(static_cast<compression>(6)),
                              assorted_records())),
            ec::unsupported_compression);
}

TEST(Encode, OffsetDeltasMustRise) {
  std::vector<record> dup{make_record(0, 1, "a", "1"), make_record(0, 1, "b", "2")};
  EXPECT_EQ(code(encode_batch(meta_for(compression::none), dup)),
            ec::invalid_argument);
  std::vector<record> neg{make_record(-1, 1, "a", "1")};
  EXPECT_EQ(code(encode_batch(meta_for(compression::none), neg)),
            ec::invalid_argument);
}

TEST(Encode, SmallBatchHasExpectedBytes) {
  // The worked example in broker/FORMAT.md.
  auto b = encode_ok(batch_meta{}, {make_record(0, 1000, "k", "v")});
  const unsigned char expected[] = {
    0, 0, 0, 0, 0, 0, 0, 0,                         // base offset
    0, 0, 0, 0x3A,                                  // batch length 58
    0, 0, 0, 0,                                     // leader epoch
    2,                                              // magic
    0x71, 0x6A, 0x61, 0x89,                         // crc (computed by hand)
    0, 0,                                           // attributes
    0, 0, 0, 0,                                     // last offset delta
    0, 0, 0, 0, 0, 0, 0x03, 0xE8,                   // base timestamp
    0, 0, 0, 0, 0, 0, 0x03, 0xE8,                   // max timestamp
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, // producer id
    0xFF, 0xFF,                                     // producer epoch
    0xFF, 0xFF, 0xFF, 0xFF,                         // base sequence
    0, 0, 0, 1,                                     // records count
    0x10, 0, 0, 0, 0x02, 'k', 0x02, 'v', 0};
  ASSERT_EQ(b.size(), sizeof expected);
  EXPECT_EQ(b, std::string(reinterpret_cast<const char*>(expected), sizeof expected));
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, std::vector<record>{make_record(0, 1000, "k", "v")});
}

// -- header-level access -----------------------------------------------------------

TEST(HeaderAccess, SetBaseOffsetAndEpochKeepTheCrcValid) {
  auto b = encode_ok(meta_for(compression::lz4), assorted_records());
  set_base_offset(b, offset{987654321012});
  set_partition_leader_epoch(b, 55);
  EXPECT_FALSE(verify_batch_crc(b));
  auto h = parse_batch_header(b);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->base_offset, offset{987654321012});
  EXPECT_EQ(h->partition_leader_epoch, 55);
  auto d = decode_batch(b);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(d->records, assorted_records());
  EXPECT_EQ(d->header.last_offset(), offset{987654321012 + 5});
}

TEST(HeaderAccess, ParseBatchHeaderAllowsFollowingBatches) {
  auto a = encode_ok(meta_for(compression::none), assorted_records());
  auto b = encode_ok(meta_for(compression::zstd), assorted_records());
  auto both = a + b;
  auto h = parse_batch_header(both);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->total_size(), a.size());
  auto h2 = parse_batch_header(std::string_view{both}.substr(a.size()));
  ASSERT_TRUE(h2);
  EXPECT_EQ(h2->codec(), compression::zstd);
  EXPECT_EQ(h2->total_size(), b.size());
}

TEST(HeaderAccess, MaxBatchBytesIsEnforced) {
  auto b = encode_ok(meta_for(compression::none), assorted_records());
  EXPECT_TRUE(parse_batch_header(b, b.size()));
  EXPECT_EQ(code(parse_batch_header(b, b.size() - 1)), ec::length_overflow);
  EXPECT_EQ(code(decode_batch(b, b.size() - 1)), ec::length_overflow);
}

// Found by tests/fuzz (fuzz_record_batch): a header whose last offset does not
// exist made next_offset() overflow a signed integer.
TEST(HeaderAccess, LastOffsetDeltaMustBeNonNegativeAndFitTheBaseOffset) {
  auto b = encode_ok(meta_for(compression::none), assorted_records());
  auto with_delta = [&](int32_t delta) {
    auto x = b;
    put_be(x, L::last_offset_delta, static_cast<uint32_t>(delta), 4);
    return x;
  };
  EXPECT_EQ(code(parse_batch_header(with_delta(-1))), ec::malformed_record);
  EXPECT_EQ(code(parse_batch_header(with_delta(-1342177278))), ec::malformed_record);
  EXPECT_EQ(code(decode_batch(with_delta(-1))), ec::malformed_record);
  auto high = b;
  set_base_offset(high, offset{std::numeric_limits<int64_t>::max() - 5});
  EXPECT_EQ(code(parse_batch_header(high)), ec::malformed_record); // delta 5: no next offset
  set_base_offset(high, offset{std::numeric_limits<int64_t>::max() - 6});
  auto h = parse_batch_header(high);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->next_offset(), offset{std::numeric_limits<int64_t>::max()});
}

// -- one test per kind of damage ------------------------------------------------------

TEST(Corruption, BadCrcIsCrcMismatch) {
  for (auto codec : all_codecs) {
    auto good = encode_ok(meta_for(codec), assorted_records());
    // Every byte the CRC covers, and the CRC itself.
    for (size_t i = L::crc; i < good.size(); ++i) {
      auto b = good;
      b[i] ^= 0x5A;
      auto d = decode_batch(b);
      ASSERT_EQ(code(d), ec::crc_mismatch)
        << codec_name(codec) << " byte " << i;
      EXPECT_EQ(code_of(verify_batch_crc(b)), ec::crc_mismatch);
    }
  }
  auto b = encode_ok(meta_for(compression::none), assorted_records());
  b.back() ^= 1;
  auto err = verify_batch_crc(b);
  EXPECT_NE(describe(err).find("stored 0x"), std::string::npos) << describe(err);
}

TEST(Corruption, TruncatedBatchAtEveryLength) {
  for (auto codec : all_codecs) {
    auto good = encode_ok(meta_for(codec), assorted_records());
    for (size_t n = 0; n < good.size(); ++n) {
      std::string_view cut{good.data(), n};
      ASSERT_EQ(code(decode_batch(cut)), ec::truncated_batch)
        << codec_name(codec) << " cut at " << n;
      ASSERT_EQ(code(parse_batch_header(cut)), ec::truncated_batch);
    }
    EXPECT_TRUE(decode_batch(good));
  }
}

TEST(Corruption, TrailingBytesAfterBatchAreMalformed) {
  auto b = encode_ok(meta_for(compression::none), assorted_records());
  b += "xx";
  EXPECT_EQ(code(decode_batch(b)), ec::malformed_record);
}

TEST(Corruption, BadVarint) {
  // Offset delta varint of 6 bytes (max 5 for a 32-bit varint).
  std::string body = std::string(1, '\0') + zz(0) + "\x80\x80\x80\x80\x80\x01"
                     + zz(-1) + zz(-1) + zz(0);
  auto d = decode_batch(raw_batch(raw_record(body), 1, 0));
  EXPECT_EQ(code(d), ec::bad_varint);
  EXPECT_NE(describe(d.error()).find("offset delta"), std::string::npos)
    << describe(d.error());
  // 5-byte varint whose last byte sets bits beyond 32.
  body = std::string(1, '\0') + zz(0) + zz(0) + "\xff\xff\xff\xff\x7f" + zz(-1)
         + zz(0);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))), ec::bad_varint);
  // Timestamp varlong of 11 bytes.
  body = std::string(1, '\0') + std::string(10, '\x80') + "\x01" + zz(0) + zz(-1)
         + zz(-1) + zz(0);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))), ec::bad_varint);
  // A varint that runs off the end of its record (continuation bit on the
  // last byte of the record).
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-1) + "\x80";
  d = decode_batch(raw_batch(raw_record(body), 1, 0));
  EXPECT_EQ(code(d), ec::bad_varint);
  EXPECT_NE(describe(d.error()).find("header count"), std::string::npos)
    << describe(d.error());
  // The record length varint itself runs off the end of the section.
  EXPECT_EQ(code(decode_batch(raw_batch("\xff\xff", 1, 0))), ec::bad_varint);
}

TEST(Corruption, WrongMagic) {
  auto good = encode_ok(meta_for(compression::none), assorted_records());
  for (int magic : {0, 1, 3, 0x7F, -1}) {
    auto b = good;
    b[L::magic] = static_cast<char>(magic);
    auto d = decode_batch(b);
    EXPECT_EQ(code(d), ec::bad_magic) << magic;
    EXPECT_EQ(code(parse_batch_header(b)), ec::bad_magic) << magic;
  }
}

TEST(Corruption, LengthOverflow) {
  auto good = encode_ok(meta_for(compression::none), assorted_records());
  // batch_length beyond the maximum.
  auto b = good;
  put_be(b, L::batch_length, 0x7FFFFFFF, 4);
  EXPECT_EQ(code(decode_batch(b)), ec::length_overflow);
  EXPECT_EQ(code(parse_batch_header(b)), ec::length_overflow);
  // batch_length below the fixed header.
  b = good;
  put_be(b, L::batch_length, L::header_size - L::log_overhead - 1, 4);
  EXPECT_EQ(code(decode_batch(b)), ec::length_overflow);
  // A key length larger than the rest of its record.
  std::string body = std::string(1, '\0') + zz(0) + zz(0) + zz(900) + "abc"
                     + zz(-1) + zz(0);
  auto d = decode_batch(raw_batch(raw_record(body), 1, 0));
  EXPECT_EQ(code(d), ec::length_overflow);
  EXPECT_NE(describe(d.error()).find("record 0: key length 900 exceeds remaining"),
            std::string::npos)
    << describe(d.error());
  // A value length larger than the rest of its record.
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(50) + "v" + zz(0);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
  // A record length larger than the rest of the section.
  body = raw_body(0, "k", "v");
  d = decode_batch(raw_batch(raw_record(body, 1000), 1, 0));
  EXPECT_EQ(code(d), ec::length_overflow);
  // A header count no record could hold.
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1'000'000);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
  // A header value running past its record.
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(1)
         + "h" + zz(10) + "x";
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
}

TEST(Corruption, NegativeLength) {
  auto good = encode_ok(meta_for(compression::none), assorted_records());
  auto b = good;
  put_be(b, L::batch_length, static_cast<uint32_t>(-5), 4);
  EXPECT_EQ(code(decode_batch(b)), ec::length_overflow);
  // Key length -2 (only -1, null, is allowed).
  std::string body = std::string(1, '\0') + zz(0) + zz(0) + zz(-2) + zz(-1) + zz(0);
  auto d = decode_batch(raw_batch(raw_record(body), 1, 0));
  EXPECT_EQ(code(d), ec::length_overflow);
  EXPECT_NE(describe(d.error()).find("negative"), std::string::npos);
  // Negative record length.
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(raw_body(0, "k", "v"), -3), 1,
                                        0))),
            ec::length_overflow);
  // Null header key (header keys may not be null).
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(-1)
         + zz(-1);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
  // Negative header count.
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(-1);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
  // Value length -7.
  body = std::string(1, '\0') + zz(0) + zz(0) + zz(-1) + zz(-7) + zz(0);
  EXPECT_EQ(code(decode_batch(raw_batch(raw_record(body), 1, 0))),
            ec::length_overflow);
}

TEST(Corruption, RecordCountMismatch) {
  std::string two = raw_record(raw_body(0, "a", "1")) + raw_record(raw_body(1, "b", "2"));
  ASSERT_TRUE(decode_batch(raw_batch(two, 2, 1)));
  // Count says more records than there are.
  auto d = decode_batch(raw_batch(two, 3, 2));
  EXPECT_EQ(code(d), ec::malformed_record) << describe(d.error());
  // Count says fewer: the rest are trailing bytes.
  EXPECT_EQ(code(decode_batch(raw_batch(two, 1, 1))), ec::malformed_record);
  // Negative count.
  EXPECT_EQ(code(decode_batch(raw_batch(two, -1, 1))), ec::malformed_record);
  // Same through an encoded, compressed batch.
  for (auto codec : all_codecs) {
    auto b = encode_ok(meta_for(codec), assorted_records());
    put_be(b, L::records_count, 7, 4);
    fix_crc(b);
    EXPECT_EQ(code(decode_batch(b)), ec::malformed_record) << codec_name(codec);
    put_be(b, L::records_count, 5, 4);
    fix_crc(b);
    EXPECT_EQ(code(decode_batch(b)), ec::malformed_record) << codec_name(codec);
  }
}

TEST(Corruption, OffsetDeltaInconsistency) {
  auto rec = [](int64_t delta) { return raw_record(raw_body(delta, "k", "v")); };
  // Repeated, falling, negative, and beyond last_offset_delta.
  EXPECT_EQ(code(decode_batch(raw_batch(rec(0) + rec(0), 2, 1))), ec::malformed_record);
  EXPECT_EQ(code(decode_batch(raw_batch(rec(1) + rec(0), 2, 1))), ec::malformed_record);
  EXPECT_EQ(code(decode_batch(raw_batch(rec(-1), 1, 0))), ec::malformed_record);
  EXPECT_EQ(code(decode_batch(raw_batch(rec(0) + rec(3), 2, 1))), ec::malformed_record);
  // Gaps below last_offset_delta are what compaction leaves: allowed.
  EXPECT_TRUE(decode_batch(raw_batch(rec(0) + rec(3), 2, 5)));
}

TEST(Corruption, RecordLengthDisagreesWithFields) {
  // Length claims two bytes more than the fields use (the next record's).
  std::string section = raw_record(raw_body(0, "a", "1"), 11)
                        + raw_record(raw_body(1, "b", "2"));
  auto d = decode_batch(raw_batch(section, 2, 1));
  EXPECT_EQ(code(d), ec::malformed_record) << describe(d.error());
  // Zero length: not even room for the attributes.
  EXPECT_EQ(code(decode_batch(raw_batch(zz(0), 1, 0))), ec::malformed_record);
}

TEST(Corruption, UnsupportedCompression) {
  std::string section = raw_record(raw_body(0, "a", "1"));
  auto d = decode_batch(raw_batch(section, 1, 0, 2)); // snappy
  EXPECT_EQ(code(d), ec::unsupported_compression);
  EXPECT_NE(describe(d.error()).find("snappy"), std::string::npos);
  for (uint16_t c : {5, 6, 7})
    EXPECT_EQ(code(decode_batch(raw_batch(section, 1, 0, c))),
              ec::unsupported_compression)
      << c;
  // Other attribute bits do not matter.
  EXPECT_TRUE(decode_batch(raw_batch(section, 1, 0, L::control_bit | 0x40)));
}

TEST(Corruption, CorruptCompressedPayload) {
  for (auto codec : {compression::gzip, compression::lz4, compression::zstd}) {
    auto good = encode_ok(meta_for(codec), assorted_records());
    std::string payload = good.substr(L::header_size);
    auto with_payload = [&](const std::string& p) {
      std::string b = good.substr(0, L::header_size) + p;
      put_be(b, L::batch_length, b.size() - L::log_overhead, 4);
      fix_crc(b);
      return b;
    };
    // Cut short at every length.
    for (size_t n = 0; n < payload.size(); ++n) {
      auto d = decode_batch(with_payload(payload.substr(0, n)));
      ASSERT_EQ(code(d), ec::decompression_failed)
        << codec_name(codec) << " payload cut at " << n;
    }
    // Not that codec's stream at all.
    EXPECT_EQ(code(decode_batch(with_payload(std::string(64, 'z')))),
              ec::decompression_failed)
      << codec_name(codec);
    // Garbage after a complete stream.
    EXPECT_EQ(code(decode_batch(with_payload(payload + "junkjunk"))),
              ec::decompression_failed)
      << codec_name(codec);
  }
  // gzip checks its own CRC-32: any flipped byte past the fixed header fails.
  auto good = encode_ok(meta_for(compression::gzip), assorted_records());
  for (size_t i = L::header_size + 10; i < good.size(); ++i) {
    auto b = good;
    b[i] ^= 0x21;
    fix_crc(b);
    ASSERT_EQ(code(decode_batch(b)), ec::decompression_failed) << i;
  }
}

TEST(Corruption, DecompressionBombIsBounded) {
  // 4 MiB of zeros compresses to a few KiB: a small batch, a large payload.
  std::vector<record> rs{make_record(0, 1, "k", std::string(4 << 20, '\0'))};
  for (auto codec : {compression::gzip, compression::lz4, compression::zstd}) {
    auto b = encode_ok(meta_for(codec), rs);
    ASSERT_LT(b.size(), 1u << 20) << codec_name(codec);
    auto d = decode_batch(b, 1 << 20);
    EXPECT_EQ(code(d), ec::length_overflow) << codec_name(codec);
    auto ok = decode_batch(b, (4 << 20) + 64);
    ASSERT_TRUE(ok) << describe(ok.error());
    EXPECT_EQ(ok->records, rs);
  }
  // Exactly at the limit is fine.
  std::string plain;
  for (auto codec : {compression::gzip, compression::lz4, compression::zstd}) {
    std::string comp;
    ASSERT_FALSE(compress(codec, std::string(100000, 'q'), comp));
    std::string out;
    EXPECT_FALSE(decompress(codec, comp, out, 100000)) << codec_name(codec);
    EXPECT_EQ(out, std::string(100000, 'q'));
    out.clear();
    EXPECT_EQ(code_of(decompress(codec, comp, out, 99999)), ec::length_overflow)
      << codec_name(codec);
  }
}

TEST(Interop, ZstdFrameWithoutContentSize) {
  // Kafka's Java producer streams into zstd, so its frames do not declare
  // their content size; the decoder must not depend on it.
  std::string section = raw_record(raw_body(0, "a", "1"))
                        + raw_record(raw_body(1, "b", std::string(5000, 'z')));
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx{ZSTD_createCCtx(),
                                                          ZSTD_freeCCtx};
  // As a stream whose size is not known up front (Kafka's case).
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 0);
  std::string frame(ZSTD_compressBound(section.size()) + 64, '\0');
  ZSTD_inBuffer in{section.data(), section.size(), 0};
  ZSTD_outBuffer out{frame.data(), frame.size(), 0};
  size_t rc;
  do {
    rc = ZSTD_compressStream2(cctx.get(), &out, &in, ZSTD_e_end);
    ASSERT_FALSE(ZSTD_isError(rc));
  } while (rc != 0);
  frame.resize(out.pos);
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()),
            ZSTD_CONTENTSIZE_UNKNOWN);
  auto d = decode_batch(raw_batch(frame, 2, 1, 4));
  ASSERT_TRUE(d) << describe(d.error());
  ASSERT_EQ(d->records.size(), 2u);
  EXPECT_EQ(d->records[1].value, std::string(5000, 'z'));
}

TEST(Interop, Lz4FrameIsKafkaStyle) {
  // Kafka's KafkaLZ4BlockInputStream expects: version 01, independent
  // blocks, no block checksum, 64 KiB maximum block size.
  std::string out;
  ASSERT_FALSE(compress(compression::lz4, std::string(1000, 'a'), out));
  ASSERT_GE(out.size(), 7u);
  EXPECT_EQ(out.substr(0, 4), std::string("\x04\x22\x4d\x18", 4));
  auto flg = static_cast<unsigned char>(out[4]);
  EXPECT_EQ(flg >> 6, 1);       // version
  EXPECT_TRUE(flg & 0x20);      // block independence
  EXPECT_FALSE(flg & 0x10);     // block checksum
  EXPECT_EQ(static_cast<unsigned char>(out[5]), 0x40); // 64 KiB blocks
}

TEST(Interop, GzipIsGzipFormat) {
  std::string out;
  ASSERT_FALSE(compress(compression::gzip, "hello hello hello", out));
  ASSERT_GE(out.size(), 18u);
  EXPECT_EQ(static_cast<unsigned char>(out[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(out[1]), 0x8b);
  // Two concatenated members decode to both payloads, as GZIPInputStream does.
  std::string second;
  ASSERT_FALSE(compress(compression::gzip, " world", second));
  std::string plain;
  ASSERT_FALSE(decompress(compression::gzip, out + second, plain, 1000));
  EXPECT_EQ(plain, "hello hello hello world");
}

TEST(Corruption, RandomDamageNeverCrashes) {
  // Random byte edits with the CRC fixed up, so the damage reaches the
  // decompressor and the record parser. Any outcome but a crash is fine, as
  // long as an error carries a codec error code.
  std::mt19937 gen{2024};
  for (auto codec : all_codecs) {
    auto good = encode_ok(meta_for(codec), assorted_records());
    for (int iter = 0; iter < 3000; ++iter) {
      auto b = good;
      int edits = 1 + static_cast<int>(gen() % 4);
      for (int e = 0; e < edits; ++e) {
        size_t i = L::records_count + gen() % (b.size() - L::records_count);
        b[i] = static_cast<char>(gen());
      }
      fix_crc(b);
      auto d = decode_batch(b);
      if (!d) {
        auto c = code_of(d.error());
        EXPECT_TRUE(c >= ec::truncated_batch && c <= ec::decompression_failed)
          << describe(d.error());
      }
    }
  }
}

} // namespace
