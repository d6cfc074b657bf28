#pragma once
// The Kafka wire protocol, as far as Ferry's Kafka listener speaks it
// (actors/kafka/kafka_listener.hpp): primitive types, request and response
// headers, and the bodies of the APIs in `supported_apis()`, each in the
// versions listed there. Pure code: no sockets, no actors, so it is
// unit-tested and fuzzed on its own (tests/kafka, tests/fuzz).
//
// Framing: every request and response is an int32 size followed by that many
// bytes. A request is a header (api_key int16, api_version int16,
// correlation_id int32, client_id nullable string; in "flexible" versions
// also tagged fields) and the body; a response is the correlation_id (plus
// tagged fields in flexible versions, but never for ApiVersions) and the
// body. All integers are big-endian. Fields and versions follow Apache
// Kafka's message definitions (clients/src/main/resources/common/message/
// *.json); each decode/encode function names the versions it handles.
//
// Decoders never trust a length: a string, array or bytes field longer than
// what is left of the frame, a negative length where none is allowed, or
// bytes left over after the body fail with ec::invalid_request naming the
// field. Arrays are capped by the bytes left (each element takes at least
// one byte), so a forged count cannot make the decoder allocate.

#include "broker/error.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::kafka {

/// API keys (Kafka's ApiKeys). Only the ones Ferry answers, plus the ones
/// its answers mention.
enum class api : int16_t {
  produce = 0,
  fetch = 1,
  list_offsets = 2,
  metadata = 3,
  offset_commit = 8,
  offset_fetch = 9,
  find_coordinator = 10,
  join_group = 11,
  heartbeat = 12,
  leave_group = 13,
  sync_group = 14,
  describe_groups = 15,
  list_groups = 16,
  sasl_handshake = 17,
  api_versions = 18,
  create_topics = 19,
  delete_topics = 20,
  delete_records = 21,
  init_producer_id = 22,
  offset_for_leader_epoch = 23,
  describe_configs = 32,
  alter_configs = 33,
  sasl_authenticate = 36,
  create_partitions = 37,
};

/// Kafka error codes (Kafka's Errors), the ones Ferry answers.
enum class error_code : int16_t {
  unknown_server_error = -1,
  none = 0,
  offset_out_of_range = 1,
  corrupt_message = 2,
  unknown_topic_or_partition = 3,
  leader_not_available = 5,
  not_leader_or_follower = 6,
  request_timed_out = 7,
  message_too_large = 10,
  offset_metadata_too_large = 12,
  coordinator_load_in_progress = 14,
  coordinator_not_available = 15,
  not_coordinator = 16,
  invalid_topic_exception = 17,
  record_list_too_large = 18,
  not_enough_replicas = 19,
  not_enough_replicas_after_append = 20,
  invalid_required_acks = 21,
  illegal_generation = 22,
  inconsistent_group_protocol = 23,
  invalid_group_id = 24,
  unknown_member_id = 25,
  invalid_session_timeout = 26,
  rebalance_in_progress = 27,
  topic_authorization_failed = 29,
  group_authorization_failed = 30,
  cluster_authorization_failed = 31,
  unsupported_version = 35,
  unsupported_sasl_mechanism = 33,
  illegal_sasl_state = 34,
  topic_already_exists = 36,
  invalid_partitions = 37,
  invalid_replication_factor = 38,
  invalid_replica_assignment = 39,
  invalid_config = 40,
  invalid_request = 42,
  unsupported_for_message_format = 43,
  policy_violation = 44,
  out_of_order_sequence_number = 45,
  duplicate_sequence_number = 46,
  invalid_producer_epoch = 47,
  kafka_storage_error = 56,
  sasl_authentication_failed = 58,
  unknown_producer_id = 59,
  non_empty_group = 68,
  group_id_not_found = 69,
  fenced_leader_epoch = 74,
  unknown_leader_epoch = 75,
  unsupported_compression_type = 76,
  fenced_instance_id = 82,
  invalid_record = 87,
  throttling_quota_exceeded = 89,
};

/// The Kafka error code for a Ferry error (ec::none -> none; anything
/// unknown -> unknown_server_error).
error_code to_kafka(const caf::error& err);

/// One API and the versions Ferry answers.
struct api_range {
  api key;
  int16_t min_version;
  int16_t max_version;
};

/// What ApiVersions advertises, in key order.
const std::vector<api_range>& supported_apis();

/// The supported range of `key`, if Ferry answers it at all.
std::optional<api_range> supported(int16_t key);

/// True if requests of `key` at `version` use the flexible (tagged fields,
/// compact types) encoding and a v2 request header.
bool flexible_request(int16_t key, int16_t version);

// -- primitives ---------------------------------------------------------------

/// Bounds-checked reader over one frame. The first failure sticks: every
/// later read returns a zero value, and error() names the first field that
/// did not fit.
class reader {
public:
  explicit reader(std::string_view buf) : buf_(buf) {
  }

  int8_t i8(const char* what);
  int16_t i16(const char* what);
  int32_t i32(const char* what);
  int64_t i64(const char* what);
  bool boolean(const char* what);
  /// Unsigned varint (protobuf style, at most 5 bytes for 32 bits).
  uint32_t uvarint(const char* what);
  std::string string(const char* what);
  std::optional<std::string> nullable_string(const char* what);
  std::string compact_string(const char* what);
  std::optional<std::string> compact_nullable_string(const char* what);
  /// int32-sized bytes; nullopt for a null (-1) value.
  std::optional<std::string_view> nullable_bytes(const char* what);
  /// An int32 array count (-1: null, returned as -1) checked against the
  /// bytes left at `min_element_bytes` per element.
  int32_t array(const char* what, size_t min_element_bytes = 1);
  /// As array(), but a null array fails the read (0 is returned then).
  int32_t required_array(const char* what, size_t min_element_bytes = 1);
  /// A compact array count (uvarint N+1; 0 = null, returned as -1).
  int32_t compact_array(const char* what, size_t min_element_bytes = 1);
  /// Skips a tagged-fields section (Ferry knows no tags it must read).
  void tagged_fields(const char* what);

  bool ok() const {
    return error_.empty();
  }
  size_t remaining() const {
    return buf_.size() - pos_;
  }
  size_t position() const {
    return pos_;
  }
  const std::string& error() const {
    return error_;
  }
  /// Marks the read failed (for semantic checks by the caller).
  void fail(std::string what);
  /// Fails unless every byte was read.
  void expect_end(const char* what);

private:
  bool need(size_t n, const char* what);
  std::string_view take(size_t n);

  std::string_view buf_;
  size_t pos_ = 0;
  std::string error_;
};

/// Appends Kafka-encoded values to a string.
class writer {
public:
  void i8(int8_t x);
  void i16(int16_t x);
  void i32(int32_t x);
  void i64(int64_t x);
  void boolean(bool x) {
    i8(x ? 1 : 0);
  }
  void uvarint(uint32_t x);
  void string(std::string_view x);
  void nullable_string(const std::optional<std::string>& x);
  void compact_string(std::string_view x);
  void bytes(std::string_view x);
  void null_bytes() {
    i32(-1);
  }
  void array(int32_t n) {
    i32(n);
  }
  void compact_array(int32_t n) {
    uvarint(static_cast<uint32_t>(n + 1));
  }
  /// An empty tagged-fields section.
  void no_tags() {
    uvarint(0);
  }
  /// As bytes(), but `x` is not copied: what was written so far becomes a
  /// finished chunk and `x` the next one (take_chunks() hands them out), so
  /// a fetch answer's stored batches go to the socket as they are.
  void bytes_moved(std::string&& x);
  /// Overwrites 4 bytes at `pos` (a size written before its payload); `pos`
  /// counts from the first byte written, across chunks.
  void patch_i32(size_t pos, int32_t x);

  /// What was written since the last moved bytes (all of it without
  /// bytes_moved()).
  std::string& buffer() {
    return out_;
  }
  /// Every byte written, chunks included.
  size_t size() const {
    return chunked_ + out_.size();
  }
  /// Everything written, in order, as chunks (one without bytes_moved());
  /// the writer is empty afterwards.
  std::vector<std::string> take_chunks();

private:
  std::vector<std::string> chunks_;
  size_t chunked_ = 0; ///< bytes in chunks_
  std::string out_;
};

// -- headers ------------------------------------------------------------------

struct request_header {
  int16_t api_key = 0;
  int16_t api_version = 0;
  int32_t correlation_id = 0;
  std::optional<std::string> client_id;
};

/// Reads the header of one request frame (the bytes after the size). For a
/// key/version Ferry does not answer, only the fixed part is read (enough to
/// answer with the correlation id); the reader then points at the body.
request_header read_request_header(reader& in);

/// Starts a response frame: the size (patched by finish_response) and the
/// correlation id; `flexible_header` adds the empty tagged-fields section.
void begin_response(writer& out, int32_t correlation_id, bool flexible_header);
/// Writes the frame size into a frame started with begin_response.
void finish_response(writer& out);

// -- ApiVersions (key 18), v0-3 ----------------------------------------------

/// The answer to ApiVersions at `version` (0-3); with error
/// unsupported_version it is always encoded as v0, as Kafka does, so a
/// client asking a newer version than Ferry knows learns what it can use.
void write_api_versions_response(writer& out, int16_t version, error_code err);

// -- Metadata (key 3), v0-8 ----------------------------------------------------

struct metadata_request {
  /// nullopt: every topic.
  std::optional<std::vector<std::string>> topics;
  bool allow_auto_topic_creation = true;
};

metadata_request read_metadata_request(reader& in, int16_t version);

struct metadata_broker {
  int32_t node_id = 0;
  std::string host;
  int32_t port = 0;
};

struct metadata_partition {
  error_code error = error_code::none;
  int32_t partition = 0;
  int32_t leader = -1;
  int32_t leader_epoch = -1;
  std::vector<int32_t> replicas;
  std::vector<int32_t> isr;
  std::vector<int32_t> offline;
};

struct metadata_topic {
  error_code error = error_code::none;
  std::string name;
  bool internal = false;
  std::vector<metadata_partition> partitions;
};

struct metadata_response {
  std::vector<metadata_broker> brokers;
  std::optional<std::string> cluster_id;
  int32_t controller_id = -1;
  std::vector<metadata_topic> topics;
};

void write_metadata_response(writer& out, int16_t version,
                             const metadata_response& x);

// -- Produce (key 0), v3-8 -----------------------------------------------------

struct produce_partition_data {
  int32_t partition = 0;
  /// The partition's records (RecordBatch v2 bytes); nullopt for null.
  std::optional<std::string_view> records;
};

struct produce_topic_data {
  std::string name;
  std::vector<produce_partition_data> partitions;
};

/// Views into the frame it was read from: keep the frame alive.
struct produce_request_v {
  std::optional<std::string> transactional_id;
  int16_t acks = -1;
  int32_t timeout_ms = 0;
  std::vector<produce_topic_data> topics;
};

produce_request_v read_produce_request(reader& in, int16_t version);

struct produce_partition_response {
  int32_t partition = 0;
  error_code error = error_code::none;
  int64_t base_offset = -1;
  int64_t log_append_time_ms = -1;
  int64_t log_start_offset = -1;
  /// v8+: a text for the error.
  std::optional<std::string> error_message;
};

struct produce_topic_response {
  std::string name;
  std::vector<produce_partition_response> partitions;
};

void write_produce_response(writer& out, int16_t version,
                            const std::vector<produce_topic_response>& topics);

// -- Fetch (key 1), v4-11 ------------------------------------------------------

struct fetch_partition_req {
  int32_t partition = 0;
  int32_t current_leader_epoch = -1;
  int64_t fetch_offset = 0;
  int32_t partition_max_bytes = 0;
};

struct fetch_topic_req {
  std::string name;
  std::vector<fetch_partition_req> partitions;
};

struct fetch_request_v {
  int32_t replica_id = -1;
  int32_t max_wait_ms = 0;
  int32_t min_bytes = 0;
  int32_t max_bytes = 0x7fffffff;
  int8_t isolation_level = 0;
  int32_t session_id = 0;
  int32_t session_epoch = -1;
  std::vector<fetch_topic_req> topics;
};

fetch_request_v read_fetch_request(reader& in, int16_t version);

struct fetch_partition_resp {
  int32_t partition = 0;
  error_code error = error_code::none;
  int64_t high_watermark = -1;
  int64_t last_stable_offset = -1;
  int64_t log_start_offset = -1;
  /// RecordBatch bytes (possibly empty).
  std::string records;
};

struct fetch_topic_resp {
  std::string name;
  std::vector<fetch_partition_resp> partitions;
};

struct fetch_response_v {
  error_code error = error_code::none;
  int32_t session_id = 0;
  std::vector<fetch_topic_resp> topics;
};

void write_fetch_response(writer& out, int16_t version,
                          const fetch_response_v& x);
/// The same, moving each partition's records into the writer's chunks
/// (writer::bytes_moved) instead of copying them; `x`'s records are empty
/// afterwards.
void write_fetch_response(writer& out, int16_t version, fetch_response_v&& x);

// -- ListOffsets (key 2), v1-5 -------------------------------------------------

struct list_offsets_partition_req {
  int32_t partition = 0;
  int32_t current_leader_epoch = -1;
  /// -2 earliest, -1 latest, else a timestamp in ms.
  int64_t timestamp = -1;
};

struct list_offsets_topic_req {
  std::string name;
  std::vector<list_offsets_partition_req> partitions;
};

struct list_offsets_request_v {
  int32_t replica_id = -1;
  int8_t isolation_level = 0;
  std::vector<list_offsets_topic_req> topics;
};

list_offsets_request_v read_list_offsets_request(reader& in, int16_t version);

struct list_offsets_partition_resp {
  int32_t partition = 0;
  error_code error = error_code::none;
  int64_t timestamp = -1;
  int64_t offset = -1;
  int32_t leader_epoch = -1;
};

struct list_offsets_topic_resp {
  std::string name;
  std::vector<list_offsets_partition_resp> partitions;
};

void write_list_offsets_response(
  writer& out, int16_t version,
  const std::vector<list_offsets_topic_resp>& topics);

// -- InitProducerId (key 22), v0-1 ---------------------------------------------

struct init_producer_id_request {
  std::optional<std::string> transactional_id;
  int32_t transaction_timeout_ms = 0;
};

init_producer_id_request read_init_producer_id_request(reader& in,
                                                       int16_t version);

void write_init_producer_id_response(writer& out, int16_t version,
                                     error_code err, int64_t producer_id,
                                     int16_t producer_epoch);

// -- OffsetForLeaderEpoch (key 23), v0-3 ---------------------------------------

struct epoch_partition_req {
  int32_t partition = 0;
  int32_t current_leader_epoch = -1; ///< v2+
  int32_t leader_epoch = -1;
};

struct epoch_topic_req {
  std::string name;
  std::vector<epoch_partition_req> partitions;
};

struct offset_for_leader_epoch_request_v {
  int32_t replica_id = -1; ///< v3+ (older: a consumer)
  std::vector<epoch_topic_req> topics;
};

offset_for_leader_epoch_request_v read_offset_for_leader_epoch_request(reader& in,
                                                                       int16_t version);

struct epoch_partition_resp {
  error_code error = error_code::none;
  int32_t partition = 0;
  int32_t leader_epoch = -1; ///< v1+
  int64_t end_offset = -1;
};

struct epoch_topic_resp {
  std::string name;
  std::vector<epoch_partition_resp> partitions;
};

void write_offset_for_leader_epoch_response(writer& out, int16_t version,
                                            const std::vector<epoch_topic_resp>& topics);

// -- SaslHandshake (key 17), v0-1, and SaslAuthenticate (key 36), v0-1 ----------
//
// A SASL login on a Kafka connection: SaslHandshake names the mechanism
// (the answer lists the ones the listener offers); then the mechanism's
// tokens are exchanged. After a v1 handshake each token travels in a
// SaslAuthenticate request and response; after a v0 handshake (kafka-python
// 2.0 sends only v0) they travel as raw frames, a 4-byte size and the
// token, with no request header, until the login ends.

/// The mechanism a SaslHandshake request names.
std::string read_sasl_handshake_request(reader& in, int16_t version);

void write_sasl_handshake_response(writer& out, int16_t version, error_code err,
                                   const std::vector<std::string>& mechanisms);

/// The token a SaslAuthenticate request carries.
std::string read_sasl_authenticate_request(reader& in, int16_t version);

/// `session_lifetime_ms` (v1+): 0 asks for no re-authentication.
void write_sasl_authenticate_response(writer& out, int16_t version, error_code err,
                                      const std::optional<std::string>& message,
                                      std::string_view auth_bytes,
                                      int64_t session_lifetime_ms);

// -- any other request -----------------------------------------------------------

/// The answer to a request whose key or version Ferry does not answer: the
/// correlation id and the error code unsupported_version (35) as the body's
/// first field, which is where every Kafka response that has a top-level
/// error code keeps it.
void write_unsupported_response(writer& out, int32_t correlation_id);

} // namespace ferry::kafka
