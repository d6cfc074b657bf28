#include "broker/kafka_protocol.hpp"

#include <caf/sec.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

namespace ferry::kafka {

error_code to_kafka(const caf::error& err) {
  if (!err)
    return error_code::none;
  if (err.category() == caf::atom("system")
      && err.code() == static_cast<uint8_t>(caf::sec::request_timeout))
    return error_code::request_timed_out;
  if (err.category() != ferry_category())
    return error_code::unknown_server_error;
  switch (static_cast<ec>(err.code())) {
    case ec::none:
      return error_code::none;
    case ec::truncated_batch:
    case ec::crc_mismatch:
    case ec::bad_magic:
    case ec::bad_varint:
    case ec::length_overflow:
    case ec::decompression_failed:
      return error_code::corrupt_message;
    case ec::malformed_record:
      return error_code::invalid_record;
    case ec::unsupported_compression:
      return error_code::unsupported_compression_type;
    case ec::io_error:
    case ec::disk_full:
    case ec::corrupt_segment:
    case ec::lmdb_error:
      return error_code::kafka_storage_error;
    case ec::offset_out_of_range:
      return error_code::offset_out_of_range;
    case ec::log_closed:
    case ec::not_leader:
      return error_code::not_leader_or_follower;
    case ec::invalid_argument:
    case ec::invalid_request:
      return error_code::invalid_request;
    case ec::unknown_topic:
    case ec::unknown_partition:
      return error_code::unknown_topic_or_partition;
    case ec::invalid_topic_name:
      return error_code::invalid_topic_exception;
    case ec::topic_exists:
      return error_code::topic_already_exists;
    case ec::message_too_large:
      return error_code::message_too_large;
    case ec::invalid_config:
      return error_code::invalid_config;
    case ec::policy_violation:
      return error_code::policy_violation;
    case ec::throttled:
    case ec::request_timed_out:
      return error_code::request_timed_out;
    case ec::not_enough_replicas:
      return error_code::not_enough_replicas;
    case ec::fenced_leader_epoch:
      return error_code::fenced_leader_epoch;
    case ec::out_of_order_sequence:
      return error_code::out_of_order_sequence_number;
    case ec::invalid_producer_epoch:
      return error_code::invalid_producer_epoch;
    case ec::unknown_producer_id:
      return error_code::unknown_producer_id;
    case ec::authentication_failed:
    case ec::login_throttled:
      return error_code::sasl_authentication_failed;
    case ec::authorization_failed:
      return error_code::topic_authorization_failed;
    case ec::coordinator_not_available:
      return error_code::coordinator_not_available;
    case ec::unknown_member:
      return error_code::unknown_member_id;
    case ec::illegal_generation:
      return error_code::illegal_generation;
    case ec::rebalance_in_progress:
      return error_code::rebalance_in_progress;
    case ec::group_not_empty:
      return error_code::non_empty_group;
    case ec::unknown_group:
      return error_code::group_id_not_found;
    case ec::fenced_instance_id:
      return error_code::fenced_instance_id;
    case ec::inconsistent_group_protocol:
      return error_code::inconsistent_group_protocol;
    default:
      return error_code::unknown_server_error;
  }
}

const std::vector<api_range>& supported_apis() {
  // Versions: the non-flexible range of each API that librdkafka 2.0 and
  // kafka-python 2.0 negotiate (flexible encodings start at Produce v9,
  // Fetch v12, ListOffsets v6, Metadata v9; ApiVersions v3 is flexible and
  // is what librdkafka asks first).
  static const std::vector<api_range> xs{
    {api::produce, 3, 8},
    {api::fetch, 4, 11},
    {api::list_offsets, 1, 5},
    {api::metadata, 0, 8},
    {api::offset_commit, 0, 7},
    {api::offset_fetch, 0, 5},
    {api::find_coordinator, 0, 2},
    {api::join_group, 0, 5},
    {api::heartbeat, 0, 3},
    {api::leave_group, 0, 3},
    {api::sync_group, 0, 3},
    {api::describe_groups, 0, 4},
    {api::list_groups, 0, 2},
    {api::sasl_handshake, 0, 1},
    {api::api_versions, 0, 3},
    {api::create_topics, 0, 4},
    {api::delete_topics, 0, 3},
    {api::delete_records, 0, 1},
    {api::init_producer_id, 0, 1},
    {api::offset_for_leader_epoch, 0, 3},
    {api::describe_configs, 0, 2},
    {api::alter_configs, 0, 1},
    {api::sasl_authenticate, 0, 1},
    {api::create_partitions, 0, 1},
  };
  return xs;
}

std::optional<api_range> supported(int16_t key) {
  for (auto& r : supported_apis())
    if (static_cast<int16_t>(r.key) == key)
      return r;
  return std::nullopt;
}

bool flexible_request(int16_t key, int16_t version) {
  switch (static_cast<api>(key)) {
    case api::api_versions:
      return version >= 3;
    case api::produce:
      return version >= 9;
    case api::fetch:
      return version >= 12;
    case api::list_offsets:
      return version >= 6;
    case api::metadata:
      return version >= 9;
    case api::init_producer_id:
      return version >= 2;
    case api::offset_commit:
      return version >= 8;
    case api::offset_fetch:
      return version >= 6;
    case api::find_coordinator:
      return version >= 3;
    case api::join_group:
      return version >= 6;
    case api::heartbeat:
    case api::leave_group:
    case api::sync_group:
      return version >= 4;
    case api::describe_groups:
      return version >= 5;
    case api::list_groups:
      return version >= 3;
    case api::create_topics:
      return version >= 5;
    case api::delete_topics:
      return version >= 4;
    case api::delete_records:
    case api::alter_configs:
    case api::create_partitions:
      return version >= 2;
    case api::describe_configs:
      return version >= 4;
    case api::sasl_handshake:
      return false;
    case api::offset_for_leader_epoch:
      return version >= 4;
    case api::sasl_authenticate:
      return version >= 2;
  }
  return false;
}

// -- reader -------------------------------------------------------------------

void reader::fail(std::string what) {
  if (error_.empty())
    error_ = std::move(what);
  pos_ = buf_.size();
}

bool reader::need(size_t n, const char* what) {
  if (!ok())
    return false;
  if (remaining() < n) {
    fail(std::string{what} + ": needs " + std::to_string(n) + " bytes, "
         + std::to_string(remaining()) + " left");
    return false;
  }
  return true;
}

std::string_view reader::take(size_t n) {
  auto s = buf_.substr(pos_, n);
  pos_ += n;
  return s;
}

namespace {

template <class T>
T load_be(std::string_view s) {
  using U = std::make_unsigned_t<T>;
  U x = 0;
  for (auto c : s)
    x = static_cast<U>((x << 8) | static_cast<uint8_t>(c));
  return static_cast<T>(x);
}

template <class T>
void store_be(std::string& out, T v) {
  using U = std::make_unsigned_t<T>;
  auto x = static_cast<U>(v);
  for (int i = sizeof(T) - 1; i >= 0; --i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

} // namespace

int8_t reader::i8(const char* what) {
  return need(1, what) ? load_be<int8_t>(take(1)) : 0;
}

int16_t reader::i16(const char* what) {
  return need(2, what) ? load_be<int16_t>(take(2)) : 0;
}

int32_t reader::i32(const char* what) {
  return need(4, what) ? load_be<int32_t>(take(4)) : 0;
}

int64_t reader::i64(const char* what) {
  return need(8, what) ? load_be<int64_t>(take(8)) : 0;
}

bool reader::boolean(const char* what) {
  auto x = i8(what);
  if (ok() && x != 0 && x != 1)
    fail(std::string{what} + ": a boolean must be 0 or 1, not "
         + std::to_string(x));
  return x == 1;
}

uint32_t reader::uvarint(const char* what) {
  uint32_t x = 0;
  for (int i = 0; i < 5; ++i) {
    if (!need(1, what))
      return 0;
    auto b = static_cast<uint8_t>(take(1)[0]);
    if (i == 4 && (b & 0xf0) != 0) {
      fail(std::string{what} + ": varint overflows 32 bits");
      return 0;
    }
    x |= static_cast<uint32_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0)
      return x;
  }
  fail(std::string{what} + ": varint longer than 5 bytes");
  return 0;
}

std::string reader::string(const char* what) {
  auto s = nullable_string(what);
  if (ok() && !s) {
    fail(std::string{what} + ": null where a string is required");
    return {};
  }
  return s ? std::move(*s) : std::string{};
}

std::optional<std::string> reader::nullable_string(const char* what) {
  auto n = i16(what);
  if (!ok() || n == -1)
    return std::nullopt;
  if (n < 0) {
    fail(std::string{what} + ": negative length " + std::to_string(n));
    return std::nullopt;
  }
  if (!need(static_cast<size_t>(n), what))
    return std::nullopt;
  return std::string{take(static_cast<size_t>(n))};
}

std::string reader::compact_string(const char* what) {
  auto s = compact_nullable_string(what);
  if (ok() && !s) {
    fail(std::string{what} + ": null where a string is required");
    return {};
  }
  return s ? std::move(*s) : std::string{};
}

std::optional<std::string> reader::compact_nullable_string(const char* what) {
  auto n = uvarint(what);
  if (!ok() || n == 0)
    return std::nullopt;
  if (!need(n - 1, what))
    return std::nullopt;
  return std::string{take(n - 1)};
}

std::optional<std::string_view> reader::nullable_bytes(const char* what) {
  auto n = i32(what);
  if (!ok() || n == -1)
    return std::nullopt;
  if (n < 0) {
    fail(std::string{what} + ": negative length " + std::to_string(n));
    return std::nullopt;
  }
  if (!need(static_cast<size_t>(n), what))
    return std::nullopt;
  return take(static_cast<size_t>(n));
}

int32_t reader::array(const char* what, size_t min_element_bytes) {
  auto n = i32(what);
  if (!ok())
    return 0;
  if (n == -1)
    return -1;
  if (n < 0) {
    fail(std::string{what} + ": negative array length " + std::to_string(n));
    return 0;
  }
  if (static_cast<size_t>(n) > remaining() / std::max<size_t>(min_element_bytes, 1)) {
    fail(std::string{what} + ": " + std::to_string(n)
         + " elements cannot fit in the " + std::to_string(remaining())
         + " bytes left");
    return 0;
  }
  return n;
}

int32_t reader::required_array(const char* what, size_t min_element_bytes) {
  auto n = array(what, min_element_bytes);
  if (n == -1) {
    fail(std::string{what} + ": null where an array is required");
    return 0;
  }
  return n;
}

int32_t reader::compact_array(const char* what, size_t min_element_bytes) {
  auto n = uvarint(what);
  if (!ok())
    return 0;
  if (n == 0)
    return -1;
  auto count = n - 1;
  if (count > remaining() / std::max<size_t>(min_element_bytes, 1)) {
    fail(std::string{what} + ": " + std::to_string(count)
         + " elements cannot fit in the " + std::to_string(remaining())
         + " bytes left");
    return 0;
  }
  return static_cast<int32_t>(count);
}

void reader::tagged_fields(const char* what) {
  auto n = uvarint(what);
  for (uint32_t i = 0; ok() && i < n; ++i) {
    uvarint(what); // tag
    auto size = uvarint(what);
    if (need(size, what))
      take(size);
  }
}

void reader::expect_end(const char* what) {
  if (ok() && remaining() != 0)
    fail(std::string{what} + ": " + std::to_string(remaining())
         + " bytes left over after the body");
}

// -- writer -------------------------------------------------------------------

void writer::i8(int8_t x) {
  out_.push_back(static_cast<char>(x));
}

void writer::i16(int16_t x) {
  store_be(out_, x);
}

void writer::i32(int32_t x) {
  store_be(out_, x);
}

void writer::i64(int64_t x) {
  store_be(out_, x);
}

void writer::uvarint(uint32_t x) {
  while (x >= 0x80) {
    out_.push_back(static_cast<char>((x & 0x7f) | 0x80));
    x >>= 7;
  }
  out_.push_back(static_cast<char>(x));
}

void writer::string(std::string_view x) {
  i16(static_cast<int16_t>(std::min<size_t>(x.size(), 0x7fff)));
  out_.append(x.substr(0, 0x7fff));
}

void writer::nullable_string(const std::optional<std::string>& x) {
  if (!x)
    i16(-1);
  else
    string(*x);
}

void writer::compact_string(std::string_view x) {
  uvarint(static_cast<uint32_t>(x.size() + 1));
  out_.append(x);
}

void writer::bytes(std::string_view x) {
  i32(static_cast<int32_t>(x.size()));
  out_.append(x);
}

void writer::bytes_moved(std::string&& x) {
  i32(static_cast<int32_t>(x.size()));
  chunked_ += out_.size() + x.size();
  chunks_.push_back(std::move(out_));
  out_.clear();
  chunks_.push_back(std::move(x));
}

void writer::patch_i32(size_t pos, int32_t x) {
  auto u = static_cast<uint32_t>(x);
  for (int i = 0; i < 4; ++i) {
    // The byte's chunk (sizes are patched where they were written, so the
    // four bytes never straddle a moved chunk).
    auto at = pos + static_cast<size_t>(i);
    std::string* where = &out_;
    for (auto& c : chunks_) {
      if (at < c.size()) {
        where = &c;
        break;
      }
      at -= c.size();
    }
    (*where)[at] = static_cast<char>((u >> (8 * (3 - i))) & 0xff);
  }
}

std::vector<std::string> writer::take_chunks() {
  auto out = std::move(chunks_);
  chunks_.clear();
  chunked_ = 0;
  if (!out_.empty() || out.empty())
    out.push_back(std::move(out_));
  out_.clear();
  return out;
}

// -- headers ------------------------------------------------------------------

request_header read_request_header(reader& in) {
  request_header h;
  h.api_key = in.i16("request header api_key");
  h.api_version = in.i16("request header api_version");
  h.correlation_id = in.i32("request header correlation_id");
  auto r = supported(h.api_key);
  if (!in.ok() || !r || h.api_version < r->min_version
      || h.api_version > r->max_version) {
    // Not answered: the rest of the header may have a layout Ferry does not
    // know (an unknown flexible version); the correlation id is enough.
    // ApiVersions above Ferry's range still gets its v0 error answer; its
    // client_id is the same int16 string in every header version.
    if (in.ok() && h.api_key == static_cast<int16_t>(api::api_versions))
      h.client_id = in.nullable_string("request header client_id");
    return h;
  }
  h.client_id = in.nullable_string("request header client_id");
  if (flexible_request(h.api_key, h.api_version))
    in.tagged_fields("request header tagged fields");
  return h;
}

void begin_response(writer& out, int32_t correlation_id, bool flexible_header) {
  out.i32(0); // size, patched by finish_response
  out.i32(correlation_id);
  if (flexible_header)
    out.no_tags();
}

void finish_response(writer& out) {
  out.patch_i32(0, static_cast<int32_t>(out.size() - 4));
}

// -- ApiVersions --------------------------------------------------------------

void write_api_versions_response(writer& out, int16_t version, error_code err) {
  if (err == error_code::unsupported_version)
    version = 0;
  auto& apis = supported_apis();
  out.i16(static_cast<int16_t>(err));
  if (version >= 3) {
    out.compact_array(static_cast<int32_t>(apis.size()));
    for (auto& a : apis) {
      out.i16(static_cast<int16_t>(a.key));
      out.i16(a.min_version);
      out.i16(a.max_version);
      out.no_tags();
    }
    out.i32(0); // throttle_time_ms
    out.no_tags();
    return;
  }
  out.array(static_cast<int32_t>(apis.size()));
  for (auto& a : apis) {
    out.i16(static_cast<int16_t>(a.key));
    out.i16(a.min_version);
    out.i16(a.max_version);
  }
  if (version >= 1)
    out.i32(0); // throttle_time_ms
}

// -- Metadata -----------------------------------------------------------------

metadata_request read_metadata_request(reader& in, int16_t version) {
  metadata_request r;
  auto n = in.array("metadata topics", 2);
  if (n >= 0) {
    std::vector<std::string> names;
    names.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n && in.ok(); ++i)
      names.push_back(in.string("metadata topic name"));
    // v0 has no null array: an empty one asks for every topic.
    if (version > 0 || !names.empty())
      r.topics = std::move(names);
  }
  if (version >= 4)
    r.allow_auto_topic_creation = in.boolean("metadata allow_auto_topic_creation");
  if (version >= 8) {
    in.boolean("metadata include_cluster_authorized_operations");
    in.boolean("metadata include_topic_authorized_operations");
  }
  in.expect_end("metadata request");
  return r;
}

namespace {

void write_int_array(writer& out, const std::vector<int32_t>& xs) {
  out.array(static_cast<int32_t>(xs.size()));
  for (auto x : xs)
    out.i32(x);
}

} // namespace

void write_metadata_response(writer& out, int16_t version,
                             const metadata_response& x) {
  if (version >= 3)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(x.brokers.size()));
  for (auto& b : x.brokers) {
    out.i32(b.node_id);
    out.string(b.host);
    out.i32(b.port);
    if (version >= 1)
      out.nullable_string(std::nullopt); // rack
  }
  if (version >= 2)
    out.nullable_string(x.cluster_id);
  if (version >= 1)
    out.i32(x.controller_id);
  out.array(static_cast<int32_t>(x.topics.size()));
  for (auto& t : x.topics) {
    out.i16(static_cast<int16_t>(t.error));
    out.string(t.name);
    if (version >= 1)
      out.boolean(t.internal);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i16(static_cast<int16_t>(p.error));
      out.i32(p.partition);
      out.i32(p.leader);
      if (version >= 7)
        out.i32(p.leader_epoch);
      write_int_array(out, p.replicas);
      write_int_array(out, p.isr);
      if (version >= 5)
        write_int_array(out, p.offline);
    }
    if (version >= 8)
      out.i32(std::numeric_limits<int32_t>::min()); // authorized ops: not asked
  }
  if (version >= 8)
    out.i32(std::numeric_limits<int32_t>::min());
}

// -- Produce ------------------------------------------------------------------

produce_request_v read_produce_request(reader& in, int16_t version) {
  (void) version; // v3-8 share the request layout
  produce_request_v r;
  r.transactional_id = in.nullable_string("produce transactional_id");
  r.acks = in.i16("produce acks");
  r.timeout_ms = in.i32("produce timeout_ms");
  auto nt = in.array("produce topics", 6);
  for (int32_t i = 0; i < nt && in.ok(); ++i) {
    produce_topic_data t;
    t.name = in.string("produce topic name");
    auto np = in.array("produce partitions", 8);
    for (int32_t j = 0; j < np && in.ok(); ++j) {
      produce_partition_data p;
      p.partition = in.i32("produce partition index");
      p.records = in.nullable_bytes("produce records");
      t.partitions.push_back(p);
    }
    r.topics.push_back(std::move(t));
  }
  in.expect_end("produce request");
  return r;
}

void write_produce_response(writer& out, int16_t version,
                            const std::vector<produce_topic_response>& topics) {
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i16(static_cast<int16_t>(p.error));
      out.i64(p.base_offset);
      out.i64(p.log_append_time_ms);
      if (version >= 5)
        out.i64(p.log_start_offset);
      if (version >= 8) {
        out.array(0); // record_errors
        out.nullable_string(p.error_message);
      }
    }
  }
  out.i32(0); // throttle_time_ms
}

// -- Fetch --------------------------------------------------------------------

fetch_request_v read_fetch_request(reader& in, int16_t version) {
  fetch_request_v r;
  r.replica_id = in.i32("fetch replica_id");
  r.max_wait_ms = in.i32("fetch max_wait_ms");
  r.min_bytes = in.i32("fetch min_bytes");
  r.max_bytes = in.i32("fetch max_bytes");
  r.isolation_level = in.i8("fetch isolation_level");
  if (version >= 7) {
    r.session_id = in.i32("fetch session_id");
    r.session_epoch = in.i32("fetch session_epoch");
  }
  auto nt = in.array("fetch topics", 6);
  for (int32_t i = 0; i < nt && in.ok(); ++i) {
    fetch_topic_req t;
    t.name = in.string("fetch topic name");
    auto np = in.array("fetch partitions", 16);
    for (int32_t j = 0; j < np && in.ok(); ++j) {
      fetch_partition_req p;
      p.partition = in.i32("fetch partition");
      if (version >= 9)
        p.current_leader_epoch = in.i32("fetch current_leader_epoch");
      p.fetch_offset = in.i64("fetch fetch_offset");
      if (version >= 5)
        in.i64("fetch log_start_offset");
      p.partition_max_bytes = in.i32("fetch partition_max_bytes");
      t.partitions.push_back(p);
    }
    r.topics.push_back(std::move(t));
  }
  if (version >= 7) {
    auto nf = in.array("fetch forgotten_topics_data", 6);
    for (int32_t i = 0; i < nf && in.ok(); ++i) {
      in.string("fetch forgotten topic");
      auto np = in.array("fetch forgotten partitions", 4);
      for (int32_t j = 0; j < np && in.ok(); ++j)
        in.i32("fetch forgotten partition");
    }
  }
  if (version >= 11)
    in.string("fetch rack_id");
  in.expect_end("fetch request");
  return r;
}

namespace {

template <class Response, class Records>
void write_fetch(writer& out, int16_t version, Response& x, Records records) {
  out.i32(0); // throttle_time_ms
  if (version >= 7) {
    out.i16(static_cast<int16_t>(x.error));
    out.i32(x.session_id);
  }
  out.array(static_cast<int32_t>(x.topics.size()));
  for (auto& t : x.topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i16(static_cast<int16_t>(p.error));
      out.i64(p.high_watermark);
      out.i64(p.last_stable_offset);
      if (version >= 5)
        out.i64(p.log_start_offset);
      out.array(-1); // aborted_transactions: Ferry has no transactions
      if (version >= 11)
        out.i32(-1); // preferred_read_replica
      records(p.records);
    }
  }
}

} // namespace

void write_fetch_response(writer& out, int16_t version, const fetch_response_v& x) {
  write_fetch(out, version, x, [&](const std::string& r) { out.bytes(r); });
}

void write_fetch_response(writer& out, int16_t version, fetch_response_v&& x) {
  write_fetch(out, version, x, [&](std::string& r) {
    // Small ones are cheaper copied than sent as a buffer of their own.
    if (r.size() < 4096)
      out.bytes(r);
    else
      out.bytes_moved(std::move(r));
    r.clear();
  });
}

// -- ListOffsets --------------------------------------------------------------

list_offsets_request_v read_list_offsets_request(reader& in, int16_t version) {
  list_offsets_request_v r;
  r.replica_id = in.i32("list_offsets replica_id");
  if (version >= 2)
    r.isolation_level = in.i8("list_offsets isolation_level");
  auto nt = in.array("list_offsets topics", 6);
  for (int32_t i = 0; i < nt && in.ok(); ++i) {
    list_offsets_topic_req t;
    t.name = in.string("list_offsets topic name");
    auto np = in.array("list_offsets partitions", 12);
    for (int32_t j = 0; j < np && in.ok(); ++j) {
      list_offsets_partition_req p;
      p.partition = in.i32("list_offsets partition");
      if (version >= 4)
        p.current_leader_epoch = in.i32("list_offsets current_leader_epoch");
      p.timestamp = in.i64("list_offsets timestamp");
      t.partitions.push_back(p);
    }
    r.topics.push_back(std::move(t));
  }
  in.expect_end("list_offsets request");
  return r;
}

void write_list_offsets_response(
  writer& out, int16_t version,
  const std::vector<list_offsets_topic_resp>& topics) {
  if (version >= 2)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i32(p.partition);
      out.i16(static_cast<int16_t>(p.error));
      out.i64(p.timestamp);
      out.i64(p.offset);
      if (version >= 4)
        out.i32(p.leader_epoch);
    }
  }
}

// -- InitProducerId ---------------------------------------------------------------

init_producer_id_request read_init_producer_id_request(reader& in,
                                                       int16_t version) {
  (void) version; // v0-1 share the layout
  init_producer_id_request r;
  r.transactional_id = in.nullable_string("init_producer_id transactional_id");
  r.transaction_timeout_ms = in.i32("init_producer_id transaction_timeout_ms");
  in.expect_end("init_producer_id request");
  return r;
}

void write_init_producer_id_response(writer& out, int16_t version,
                                     error_code err, int64_t producer_id,
                                     int16_t producer_epoch) {
  (void) version;
  out.i32(0); // throttle_time_ms
  out.i16(static_cast<int16_t>(err));
  out.i64(producer_id);
  out.i16(producer_epoch);
}

// -- OffsetForLeaderEpoch ------------------------------------------------------------

offset_for_leader_epoch_request_v read_offset_for_leader_epoch_request(reader& in,
                                                                       int16_t version) {
  offset_for_leader_epoch_request_v r;
  if (version >= 3)
    r.replica_id = in.i32("offset_for_leader_epoch replica_id");
  auto nt = in.array("offset_for_leader_epoch topics", 6);
  for (int32_t i = 0; i < nt && in.ok(); ++i) {
    epoch_topic_req t;
    t.name = in.string("offset_for_leader_epoch topic name");
    auto np = in.array("offset_for_leader_epoch partitions", version >= 2 ? 12 : 8);
    for (int32_t j = 0; j < np && in.ok(); ++j) {
      epoch_partition_req p;
      p.partition = in.i32("offset_for_leader_epoch partition");
      if (version >= 2)
        p.current_leader_epoch = in.i32("offset_for_leader_epoch current_leader_epoch");
      p.leader_epoch = in.i32("offset_for_leader_epoch leader_epoch");
      t.partitions.push_back(p);
    }
    r.topics.push_back(std::move(t));
  }
  in.expect_end("offset_for_leader_epoch request");
  return r;
}

void write_offset_for_leader_epoch_response(writer& out, int16_t version,
                                            const std::vector<epoch_topic_resp>& topics) {
  if (version >= 2)
    out.i32(0); // throttle_time_ms
  out.array(static_cast<int32_t>(topics.size()));
  for (auto& t : topics) {
    out.string(t.name);
    out.array(static_cast<int32_t>(t.partitions.size()));
    for (auto& p : t.partitions) {
      out.i16(static_cast<int16_t>(p.error));
      out.i32(p.partition);
      if (version >= 1)
        out.i32(p.leader_epoch);
      out.i64(p.end_offset);
    }
  }
}

// -- SaslHandshake, SaslAuthenticate -----------------------------------------------

std::string read_sasl_handshake_request(reader& in, int16_t version) {
  (void) version; // v0-1 share the layout
  auto mechanism = in.string("sasl_handshake mechanism");
  in.expect_end("sasl_handshake request");
  return mechanism;
}

void write_sasl_handshake_response(writer& out, int16_t version, error_code err,
                                   const std::vector<std::string>& mechanisms) {
  (void) version;
  out.i16(static_cast<int16_t>(err));
  out.array(static_cast<int32_t>(mechanisms.size()));
  for (auto& m : mechanisms)
    out.string(m);
}

std::string read_sasl_authenticate_request(reader& in, int16_t version) {
  (void) version; // v0-1 share the layout
  auto bytes = in.nullable_bytes("sasl_authenticate auth_bytes");
  if (in.ok() && !bytes)
    in.fail("sasl_authenticate auth_bytes: null");
  in.expect_end("sasl_authenticate request");
  return bytes ? std::string{*bytes} : std::string{};
}

void write_sasl_authenticate_response(writer& out, int16_t version, error_code err,
                                      const std::optional<std::string>& message,
                                      std::string_view auth_bytes,
                                      int64_t session_lifetime_ms) {
  out.i16(static_cast<int16_t>(err));
  out.nullable_string(message);
  out.bytes(auth_bytes);
  if (version >= 1)
    out.i64(session_lifetime_ms);
}

// -- other --------------------------------------------------------------------

void write_unsupported_response(writer& out, int32_t correlation_id) {
  begin_response(out, correlation_id, false);
  out.i16(static_cast<int16_t>(error_code::unsupported_version));
  finish_response(out);
}

} // namespace ferry::kafka
