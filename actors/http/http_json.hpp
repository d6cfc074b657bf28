#pragma once
// The HTTP API's JSON: Ferry values to JSON and back, value encodings, and
// the mapping of Ferry errors to HTTP statuses. No Beast and no actors here:
// actors/http/http_gateway.cpp does the transport and the actor round trips and
// calls these to read request bodies and to render replies.
//
// Field names are camelCase (nextOffset, highWatermark, replicationFactor);
// topic config keys keep their Kafka names ("retention.ms"). Every function
// that reads client input returns ec::invalid_request (or invalid_config for
// config values) with a message naming the field, never throws.
//
// Values (and keys) are bytes in the log. On write a record's "encoding"
// says how its "value" becomes bytes:
//   absent  a JSON string is stored as its UTF-8 text, null is a tombstone,
//           any other JSON value is stored as its compact JSON text
//   json    any JSON value is stored as its compact JSON text
//   string  the value must be a JSON string: its UTF-8 text
//   base64  the value must be a JSON string: base64 (standard or URL-safe
//           alphabet, padding optional) of the bytes
// On read `?encoding=` asks for one rendering; each message says which one
// it got in "encoding" (a value that is not valid JSON falls back to string,
// one that is not UTF-8 falls back to base64):
//   auto (default)  json if the bytes parse as JSON, else string if valid
//                   UTF-8, else base64
//   json | string | base64  as named, with the fallbacks above
// Keys and header values are strings on both sides: "keyEncoding" and
// "headersEncoding" ("string" or "base64") on write; on read a key (or any
// header value) that is not valid UTF-8 comes as base64 with
// "keyEncoding":"base64" (or "headersEncoding":"base64", then for all header
// values of that message). Headers are written as an object or as an array
// of {"key","value"}, and read as an object (duplicate keys: the last wins).

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/record_batch.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::http_api {

using json = nlohmann::json;

// -- errors -----------------------------------------------------------------

/// An error as the HTTP API reports it.
struct api_error {
  unsigned status = 500;
  std::string code;    ///< a ferry ec name, e.g. "unknown_topic"
  std::string message; ///< what exactly was wrong
};

/// The HTTP status of a ferry error code:
///   400 invalid_request, invalid_argument, invalid_config,
///       invalid_topic_name, policy_violation and the codec errors
///   404 unknown_topic, unknown_partition, unknown_group, unknown_member,
///       not_found, lease_not_found
///   409 topic_exists, group_not_empty, rebalance_in_progress,
///       illegal_generation, fenced_instance_id, not_lease_owner, and the
///       idempotent-producer errors
///   410 lease_expired
///   413 message_too_large
///   416 offset_out_of_range (the offset is outside [logStart, logEnd])
///   429 throttled
///   503 not_leader, coordinator_not_available, not_enough_replicas,
///       log_closed
///   504 request_timed_out
///   507 disk_full
///   500 everything else (io_error, corrupt_segment, lmdb_error, ...)
unsigned status_of(ec code);

/// Any error of a request: ferry errors per status_of with their context as
/// the message; CAF's request_timeout as 504 request_timed_out; other CAF
/// errors (receiver down, no route) as 503 not_leader.
api_error to_api_error(const caf::error& err);

/// {"error":{"code":...,"message":...}}
json error_body(const std::string& code, const std::string& message);

// -- small parsers (query strings, path parameters) ----------------------------

/// A decimal integer in [lo, hi] (no sign for lo >= 0, no spaces, no
/// trailing characters); invalid_request naming `what` otherwise.
caf::expected<int64_t> parse_int(std::string_view text, int64_t lo, int64_t hi,
                                 std::string_view what);

/// The JSON body of a request; invalid_request with the parser's message.
/// An empty body is invalid too.
caf::expected<json> parse_body(std::string_view body);

// -- value encodings -----------------------------------------------------------

enum class value_encoding { automatic, json, string, base64 };

/// "auto", "json", "string", "base64"; nullopt for anything else.
std::optional<value_encoding> parse_encoding(std::string_view text);

const char* to_string(value_encoding x);

std::string base64_encode(std::string_view bytes);

/// Standard or URL-safe alphabet, padding optional; nullopt if invalid.
std::optional<std::string> base64_decode(std::string_view text);

bool valid_utf8(std::string_view text);

// -- produce ---------------------------------------------------------------

/// One record of a produce request.
struct produce_item {
  int32_t partition = -1; ///< -1: hashed key or round robin
  record rec;             ///< offset_delta is set when batching
};

/// Reads a produce body: one record {"key","value","headers","encoding",
/// "keyEncoding","partition","timestamp"} or {"records":[...]} (at most
/// `max_records`). A record must have "value" (null for a tombstone).
/// `default_partition` (-1 or the request's partition) fills records
/// without their own; `now` fills missing timestamps.
caf::expected<std::vector<produce_item>>
parse_produce(const json& body, int32_t default_partition, timestamp_ms now,
              size_t max_records = 100000);

/// "0", "1", "all" or "-1".
std::optional<acks_mode> parse_acks(std::string_view text);

// -- fetch -----------------------------------------------------------------

/// Messages rendered from a fetch response.
struct rendered_messages {
  json messages = json::array();
  offset next{0}; ///< where the next read should start
};

/// Decodes the batches of `resp` and renders the records at or after
/// `from`, at most `limit` of them. With fewer records than `limit`
/// next = resp.next_offset, else the offset after the last one rendered.
caf::expected<rendered_messages>
render_messages(const fetch_response& resp, offset from, size_t limit,
                value_encoding enc);

/// One record as a message object {"offset","timestamp","key","value",
/// "headers","encoding"}.
json render_message(offset off, const record& rec, value_encoding enc);

// -- topics, groups, cluster -------------------------------------------------

/// A create-topic body {"name","partitions","replicationFactor","config"}.
struct topic_spec {
  std::string name;
  topic_config config;
};

/// partitions and replicationFactor default to 1; config keys as in
/// broker/topic_config.hpp, values numbers or decimal strings.
caf::expected<topic_spec> parse_topic_spec(const json& body);

/// A PATCH body {"config":{...},"partitions":N}; at least one of them.
struct topic_patch {
  std::map<std::string, std::string> config;
  std::optional<int32_t> partitions;
};

caf::expected<topic_patch> parse_topic_patch(const json& body);

/// A standalone commit: {"topic","partition","offset","metadata"} or
/// {"offsets":[...]} of those.
caf::expected<std::vector<partition_offset>> parse_commit(const json& body);

// -- queue mode -------------------------------------------------------------

/// A queue receive body {"member","max","visibilityMs","waitMs","topics"}:
/// member required; max in [1, max_records] (default 100); visibilityMs >= 0
/// (0 = the group's); waitMs in [0, max_wait_ms] (default 0); topics: more
/// topics to read besides `topic` (the path's), required when `topic` is ""
/// (at most max_receive_topics in all).
caf::expected<queue_receive_request>
parse_queue_receive(const json& body, const std::string& group,
                    const std::string& topic, int32_t max_records,
                    int64_t max_wait_ms);

/// An ack/nack/reject/extend body {"member","partition","offset","leaseId",
/// "delayMs","extendMs","error"}: member, partition, offset and leaseId
/// (a number or a decimal string) required; extendMs > 0 for extend; "topic"
/// (the record's) required when `topic` (the path's) is "".
caf::expected<queue_ack_request> parse_queue_ack(const json& body,
                                                 const std::string& group,
                                                 const std::string& topic,
                                                 queue_ack_kind kind);

/// The most records one batch settle ({"records":[...]}) may name.
inline constexpr size_t max_settle_batch = 1000;

/// A batch settle body {"member","topic","records":[{...},...]}: each
/// element an ack body (parse_queue_ack) whose "member" and "topic" default
/// to the outer ones (and `topic`, the path's). 1..max_settle_batch records.
caf::expected<std::vector<queue_ack_request>>
parse_queue_ack_batch(const json& body, const std::string& group,
                      const std::string& topic, queue_ack_kind kind);

/// {"records":[...]}: each a message (render_message) plus "topic",
/// "partition", "leaseId" (a decimal string: it may exceed 2^53),
/// "attempt" and "deadline" (ms since the epoch).
json to_json(const std::vector<leased_message>& xs, value_encoding enc);

/// The answer to an ack family request; fields as the kind has them.
json to_json(const queue_ack_response& x, queue_ack_kind kind);

/// {"topic" or "topics":[...], "to", "value", "dryRun"}; "to" is earliest,
/// latest, timestamp or offset (the last two need "value").
caf::expected<reset_offsets_request> parse_reset(const json& body,
                                                 const std::string& group);

json to_json(const topic_config& x);
json to_json(const topic_metadata& x);
json to_json(const topic_description& x);
json to_json(const cluster_description& x);
json to_json(const group_description& x);

/// A queue group's config from a JSON object with any of maxAttempts,
/// initialBackoffMs, maxBackoffMs, backoffMultiplier, jitter,
/// visibilityTimeoutMs, ordering and dlqTopic; a field left out keeps its
/// value in `base` (the defaults when creating, the group's config when
/// altering). Other fields and bad values are ec::invalid_request (the
/// broker checks the ranges that depend on each other).
caf::expected<queue_group_config> parse_queue_config(const json& body,
                                                     queue_group_config base);
json to_json(const queue_group_config& x);
json to_json(const queue_group_description& x);
json to_json(const std::vector<partition_offset>& x);

// -- DLQ operations (GET/POST /v1/dlq...) ------------------------------------

json to_json(const dlq_info& x);
/// A DLQ record: render_message's fields plus "partition", "originalTopic",
/// "originalPartition", "originalOffset", "attempts", "error", "group",
/// "firstFailureTimestamp", "lastFailureTimestamp", "redriveCount",
/// "redriven".
json to_json(const dlq_record& x, value_encoding enc);
json to_json(const dlq_show_response& x, value_encoding enc);
json to_json(const dlq_redrive_response& x);
json to_json(const dlq_purge_response& x);

/// A redrive body {"to","partition","fromOffset","toOffset","offsets":
/// [{"partition","offset"}],"ratePerSecond","maxRecords","all"}: exactly
/// one of "all":true, a range (fromOffset/toOffset) or offsets.
caf::expected<dlq_redrive_request> parse_dlq_redrive(const json& body,
                                                     const std::string& topic);

/// A purge body {"beforeOffset","partition"} (both optional: everything).
caf::expected<dlq_purge_request> parse_dlq_purge(const json& body,
                                                 const std::string& topic);

// -- users and ACLs (GET/POST/DELETE /v1/users, /v1/acls) ----------------------

/// {"name","mechanism","iterations"} (never a key).
json to_json(const user_info& x);
/// {"principal","resourceType","resourceName","patternType","operation",
///  "permission"}.
json to_json(const acl_entry& x);

/// A new user {"name","password","iterations"(optional)}.
struct user_spec {
  std::string name;
  std::string password;
  int32_t iterations = 4096;
};
caf::expected<user_spec> parse_user_spec(const json& body);

/// An ACL in to_json's shape; patternType defaults to "literal" and
/// permission to "allow". Field values are checked by normalize_acl().
caf::expected<acl_entry> parse_acl(const json& body);

} // namespace ferry::http_api
