// Kafka compatibility: batches written by an independent implementation
// (kafka-python, see testdata/README.md; made by
// tests/tools/make_kafka_vectors.py) must decode to exactly the records that
// went into them, and uncompressed ones must re-encode to the same bytes.

#include "broker/compression.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace ferry;
using nlohmann::json;

namespace {

const char* testdata_file = FERRY_TESTDATA_DIR "/kafka_record_batch_v2.json";

// The file, loaded once. An empty array if it cannot be read (the
// FileLoads test then fails loudly).
const json& cases() {
  static const json all = [] {
    std::ifstream in{testdata_file};
    if (!in)
      return json::array();
    auto doc = json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.contains("cases"))
      return json::array();
    return doc["cases"];
  }();
  return all;
}

// Test names must be identifiers: "null key, null or empty values" ->
// "null_key_null_or_empty_values".
std::string test_name(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_')
    out.pop_back();
  return out;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (auto& c : cases())
    names.push_back(c.at("name").get<std::string>());
  return names;
}

std::vector<std::string> compressed_case_names() {
  std::vector<std::string> names;
  for (auto& c : cases())
    if (c.at("compression") != "none")
      names.push_back(c.at("name").get<std::string>());
  return names;
}

const json& find_case(const std::string& name) {
  for (auto& c : cases())
    if (c.at("name") == name)
      return c;
  static const json none;
  return none;
}

std::string unhex(const std::string& hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    ADD_FAILURE() << "bad hex digit " << c;
    return 0;
  };
  EXPECT_EQ(hex.size() % 2, 0u);
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return out;
}

std::string tohex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::optional<std::string> nullable_hex(const json& j) {
  if (j.is_null())
    return std::nullopt;
  return unhex(j.get<std::string>());
}

// Integers may be stored as numbers or as strings; accept both.
int64_t as_int(const json& j) {
  if (j.is_string())
    return std::stoll(j.get<std::string>());
  return j.get<int64_t>();
}

bool as_bool(const json& j) {
  if (j.is_string())
    return j.get<std::string>() == "true" || j.get<std::string>() == "True";
  return j.get<bool>();
}

compression codec_of(const std::string& name) {
  static const std::map<std::string, compression> codecs{
    {"none", compression::none}, {"gzip", compression::gzip},
    {"snappy", compression::snappy}, {"lz4", compression::lz4},
    {"zstd", compression::zstd}};
  auto i = codecs.find(name);
  EXPECT_NE(i, codecs.end()) << "unknown codec " << name;
  return i == codecs.end() ? compression::none : i->second;
}

std::vector<record> expected_records(const json& c) {
  std::vector<record> out;
  for (auto& jr : c.at("records")) {
    record r;
    r.offset_delta = static_cast<int32_t>(as_int(jr.at("offset_delta")));
    r.timestamp = as_int(jr.at("timestamp"));
    r.key = nullable_hex(jr.at("key"));
    r.value = nullable_hex(jr.at("value"));
    if (jr.contains("headers"))
      for (auto& h : jr.at("headers"))
        r.headers.push_back({h.at(0).get<std::string>(), nullable_hex(h.at(1))});
    out.push_back(std::move(r));
  }
  return out;
}

batch_meta meta_of(const json& c) {
  batch_meta m;
  m.base_offset = offset{as_int(c.at("base_offset"))};
  m.partition_leader_epoch = static_cast<int32_t>(as_int(c.at("partition_leader_epoch")));
  m.codec = codec_of(c.at("compression").get<std::string>());
  m.ts_type = c.at("timestamp_type") == "log_append" ? timestamp_type::log_append_time
                                                     : timestamp_type::create_time;
  m.transactional = as_bool(c.at("transactional"));
  m.producer_id = as_int(c.at("producer_id"));
  m.producer_epoch = static_cast<int16_t>(as_int(c.at("producer_epoch")));
  m.base_sequence = static_cast<int32_t>(as_int(c.at("base_sequence")));
  return m;
}

// Readable first difference between record lists.
::testing::AssertionResult same_records(const std::vector<record>& got,
                                        const std::vector<record>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "got " << got.size() << " records, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    auto& g = got[i];
    auto& w = want[i];
    auto fail = [&](const char* what) {
      return ::testing::AssertionFailure() << "record " << i << ": " << what
                                           << " differs";
    };
    if (g.offset_delta != w.offset_delta)
      return fail("offset_delta") << " (" << g.offset_delta << " vs "
                                  << w.offset_delta << ")";
    if (g.timestamp != w.timestamp)
      return fail("timestamp") << " (" << g.timestamp << " vs " << w.timestamp
                               << ")";
    if (g.key != w.key)
      return fail("key");
    if (g.value != w.value)
      return fail("value");
    if (g.headers != w.headers)
      return fail("headers");
  }
  return ::testing::AssertionSuccess();
}

class KafkaCompat : public ::testing::TestWithParam<std::string> {
protected:
  const json& c() const { return find_case(GetParam()); }
};

TEST_P(KafkaCompat, DecodesToExactRecordsAndHeader) {
  const json& tc = c();
  ASSERT_FALSE(tc.is_null()) << GetParam();
  auto bytes = unhex(tc.at("batch_hex").get<std::string>());
  auto want = expected_records(tc);
  auto meta = meta_of(tc);
  ASSERT_FALSE(want.empty());
  auto d = decode_batch(bytes);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_TRUE(same_records(d->records, want));
  auto& h = d->header;
  EXPECT_EQ(h.base_offset, meta.base_offset);
  EXPECT_EQ(h.partition_leader_epoch, meta.partition_leader_epoch);
  EXPECT_EQ(h.magic, 2);
  EXPECT_EQ(h.codec(), meta.codec) << "declared codec " << tc.at("compression");
  EXPECT_EQ(h.ts_type(), meta.ts_type);
  EXPECT_EQ(h.transactional(), meta.transactional);
  EXPECT_EQ(h.producer_id, meta.producer_id);
  EXPECT_EQ(h.producer_epoch, meta.producer_epoch);
  EXPECT_EQ(h.base_sequence, meta.base_sequence);
  EXPECT_EQ(h.records_count, static_cast<int32_t>(want.size()));
  EXPECT_EQ(h.last_offset_delta, want.back().offset_delta);
  EXPECT_EQ(h.base_timestamp, want.front().timestamp);
  timestamp_ms max_ts = want.front().timestamp;
  for (auto& r : want)
    max_ts = std::max(max_ts, r.timestamp);
  EXPECT_EQ(h.max_timestamp, max_ts);
  EXPECT_EQ(h.total_size(), bytes.size());
}

// A compressed case's records section really is compressed with its codec:
// smaller than the plain records, and Ferry's decompressor turns it into
// exactly the records section Ferry writes uncompressed.
class KafkaCompatCompressed : public KafkaCompat {};

TEST_P(KafkaCompatCompressed, SectionDecompressesToPlainRecords) {
  const json& tc = c();
  ASSERT_FALSE(tc.is_null()) << GetParam();
  auto meta = meta_of(tc);
  ASSERT_NE(meta.codec, compression::none);
  auto bytes = unhex(tc.at("batch_hex").get<std::string>());
  ASSERT_GT(bytes.size(), batch_layout::header_size);
  auto section = std::string_view{bytes}.substr(batch_layout::header_size);
  auto plain_meta = meta;
  plain_meta.codec = compression::none;
  auto plain = encode_batch(plain_meta, expected_records(tc));
  ASSERT_TRUE(plain) << describe(plain.error());
  auto want = std::string_view{*plain}.substr(batch_layout::header_size);
  EXPECT_LT(section.size(), want.size()) << "not compressed";
  std::string got;
  auto err = decompress(meta.codec, section, got, default_max_batch_bytes);
  ASSERT_FALSE(err) << describe(err);
  EXPECT_EQ(tohex(got), tohex(want));
}

TEST_P(KafkaCompat, EncodesToSameBytesOrSameRecords) {
  const json& tc = c();
  ASSERT_FALSE(tc.is_null()) << GetParam();
  auto want = expected_records(tc);
  auto meta = meta_of(tc);
  auto b = encode_batch(meta, want);
  ASSERT_TRUE(b) << describe(b.error());
  if (as_bool(tc.at("byte_exact"))) {
    EXPECT_EQ(tohex(*b), tc.at("batch_hex").get<std::string>());
  } else {
    // Compressed bytes depend on the compressor build; the records must not.
    auto d = decode_batch(*b);
    ASSERT_TRUE(d) << describe(d.error());
    EXPECT_TRUE(same_records(d->records, want));
    EXPECT_EQ(d->header.codec(), meta.codec);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, KafkaCompat, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Cases, KafkaCompatCompressed,
                         ::testing::ValuesIn(compressed_case_names()),
                         [](const auto& info) { return test_name(info.param); });

TEST(KafkaCompatData, FileLoadsWithEveryKindOfCase) {
  ASSERT_FALSE(cases().empty()) << "cannot read " << testdata_file;
  std::set<std::string> codecs;
  std::set<std::string> names;
  size_t exact = 0;
  for (auto& c : cases()) {
    codecs.insert(c.at("compression").get<std::string>());
    EXPECT_TRUE(names.insert(test_name(c.at("name").get<std::string>())).second)
      << "duplicate test name for " << c.at("name");
    exact += as_bool(c.at("byte_exact")) ? 1 : 0;
  }
  for (auto codec : {"none", "gzip", "lz4", "zstd"})
    EXPECT_TRUE(codecs.count(codec)) << "no " << codec << " case";
  EXPECT_GT(exact, 0u);
}

} // namespace
