#include "broker/error.hpp"

#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace ferry {

caf::atom_value ferry_category() {
  return caf::atom("ferry");
}

const char* to_string(ec x) {
  switch (x) {
    case ec::none: return "none";
    case ec::truncated_batch: return "truncated_batch";
    case ec::crc_mismatch: return "crc_mismatch";
    case ec::bad_magic: return "bad_magic";
    case ec::bad_varint: return "bad_varint";
    case ec::length_overflow: return "length_overflow";
    case ec::malformed_record: return "malformed_record";
    case ec::unsupported_compression: return "unsupported_compression";
    case ec::decompression_failed: return "decompression_failed";
    case ec::io_error: return "io_error";
    case ec::disk_full: return "disk_full";
    case ec::offset_out_of_range: return "offset_out_of_range";
    case ec::corrupt_segment: return "corrupt_segment";
    case ec::log_closed: return "log_closed";
    case ec::invalid_argument: return "invalid_argument";
    case ec::lmdb_error: return "lmdb_error";
    case ec::not_found: return "not_found";
    case ec::unknown_record_kind: return "unknown_record_kind";
    case ec::unknown_topic: return "unknown_topic";
    case ec::unknown_partition: return "unknown_partition";
    case ec::topic_exists: return "topic_exists";
    case ec::invalid_topic_name: return "invalid_topic_name";
    case ec::message_too_large: return "message_too_large";
    case ec::invalid_config: return "invalid_config";
    case ec::policy_violation: return "policy_violation";
    case ec::invalid_request: return "invalid_request";
    case ec::not_leader: return "not_leader";
    case ec::throttled: return "throttled";
    case ec::request_timed_out: return "request_timed_out";
    case ec::not_enough_replicas: return "not_enough_replicas";
    case ec::fenced_leader_epoch: return "fenced_leader_epoch";
    case ec::out_of_order_sequence: return "out_of_order_sequence";
    case ec::invalid_producer_epoch: return "invalid_producer_epoch";
    case ec::unknown_producer_id: return "unknown_producer_id";
    case ec::unknown_member: return "unknown_member";
    case ec::illegal_generation: return "illegal_generation";
    case ec::rebalance_in_progress: return "rebalance_in_progress";
    case ec::group_not_empty: return "group_not_empty";
    case ec::unknown_group: return "unknown_group";
    case ec::coordinator_not_available: return "coordinator_not_available";
    case ec::fenced_instance_id: return "fenced_instance_id";
    case ec::lease_not_found: return "lease_not_found";
    case ec::lease_expired: return "lease_expired";
    case ec::not_lease_owner: return "not_lease_owner";
    case ec::inconsistent_group_protocol: return "inconsistent_group_protocol";
    case ec::authentication_failed: return "authentication_failed";
    case ec::authorization_failed: return "authorization_failed";
    case ec::login_throttled: return "login_throttled";
    case ec::unknown_user: return "unknown_user";
    case ec::security_loading: return "security_loading";
  }
  return "unknown_error";
}

caf::error make_error(ec x) {
  return caf::error{static_cast<uint8_t>(x), ferry_category()};
}

caf::error make_error(ec x, std::string context) {
  return caf::error{static_cast<uint8_t>(x), ferry_category(),
                    caf::make_message(std::move(context))};
}

bool is(const caf::error& err, ec x) {
  return err && err.category() == ferry_category()
         && err.code() == static_cast<uint8_t>(x);
}

ec code_of(const caf::error& err) {
  if (!err || err.category() != ferry_category())
    return ec::none;
  return static_cast<ec>(err.code());
}

std::string describe(const caf::error& err) {
  if (!err)
    return "ok";
  std::string out;
  if (err.category() == ferry_category())
    out = to_string(static_cast<ec>(err.code()));
  else
    out = caf::to_string(err.category()) + ":" + std::to_string(err.code());
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0)) {
    out += ": ";
    out += ctx.get_as<std::string>(0);
  } else if (!ctx.empty()) {
    out += ": ";
    out += caf::to_string(ctx);
  }
  return out;
}

} // namespace ferry
