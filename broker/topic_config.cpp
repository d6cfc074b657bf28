#include "broker/topic_config.hpp"

#include "broker/messages.hpp" // the topic_config struct (a message type)

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>

namespace ferry {

namespace {

constexpr std::string_view retention_ms_key = "retention.ms";
constexpr std::string_view retention_bytes_key = "retention.bytes";
constexpr std::string_view segment_bytes_key = "segment.bytes";
constexpr std::string_view segment_ms_key = "segment.ms";
constexpr std::string_view max_message_bytes_key = "max.message.bytes";
constexpr std::string_view min_insync_replicas_key = "min.insync.replicas";
constexpr std::string_view cleanup_policy_key = "cleanup.policy";
constexpr std::string_view dirty_ratio_key = "min.cleanable.dirty.ratio";
constexpr std::string_view min_lag_key = "min.compaction.lag.ms";
constexpr std::string_view max_lag_key = "max.compaction.lag.ms";
constexpr std::string_view delete_retention_key = "delete.retention.ms";

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// Printable form of a (possibly hostile) value for an error message.
std::string quoted(std::string_view value) {
  std::string out = "\"";
  for (auto c : value.substr(0, 64)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    } else {
      out += c;
    }
  }
  if (value.size() > 64)
    out += "...";
  out += '"';
  return out;
}

caf::error bad_value(std::string_view key, std::string_view value,
                     std::string_view why) {
  std::string msg{key};
  msg += '=';
  msg += quoted(value);
  msg += ": ";
  msg += why;
  return make_error(ec::invalid_config, std::move(msg));
}

// A plain decimal integer (optional leading '-'), nothing else.
caf::expected<int64_t> parse_int(std::string_view key, std::string_view value) {
  int64_t out = 0;
  if (value.empty())
    return bad_value(key, value, "empty value, expected an integer");
  auto first = value.data();
  auto last = value.data() + value.size();
  auto [ptr, err] = std::from_chars(first, last, out);
  if (err == std::errc::result_out_of_range)
    return bad_value(key, value, "integer out of range");
  if (err != std::errc{} || ptr != last)
    return bad_value(key, value, "not an integer");
  return out;
}

std::string range_text(int64_t lo, int64_t hi) {
  return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

caf::error check_range(std::string_view key, int64_t v, int64_t lo, int64_t hi,
                       bool allow_minus_one) {
  if (allow_minus_one && v == -1)
    return caf::none;
  if (v >= lo && v <= hi)
    return caf::none;
  auto why = range_text(lo, hi);
  if (allow_minus_one)
    why += " or -1";
  return bad_value(key, std::to_string(v), why);
}

constexpr int64_t i64_max = std::numeric_limits<int64_t>::max();

/// Kafka's list syntax: "compact", "delete", "compact,delete" (any order,
/// spaces around the commas allowed).
caf::expected<int8_t> parse_cleanup_policy(std::string_view value) {
  int8_t policy = 0;
  std::string_view rest = value;
  for (;;) {
    auto comma = rest.find(',');
    auto item = rest.substr(0, comma);
    while (!item.empty() && item.front() == ' ')
      item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ')
      item.remove_suffix(1);
    if (item == "delete")
      policy |= cleanup_delete;
    else if (item == "compact")
      policy |= cleanup_compact;
    else
      return bad_value(cleanup_policy_key, value,
                       "expected delete, compact or compact,delete");
    if (comma == std::string_view::npos)
      break;
    rest.remove_prefix(comma + 1);
  }
  return policy;
}

caf::expected<double> parse_ratio(std::string_view key, std::string_view value) {
  double out = 0;
  auto [ptr, err] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || err != std::errc{} || ptr != value.data() + value.size()
      || !(out >= 0.0 && out <= 1.0))
    return bad_value(key, value, "expected a decimal number in [0, 1]");
  return out;
}

std::string ratio_text(double v) {
  char buf[32];
  auto [ptr, err] = std::to_chars(buf, buf + sizeof buf, v);
  if (err != std::errc{})
    return std::to_string(v);
  return std::string{buf, ptr};
}

} // namespace

std::string cleanup_policy_name(int8_t policy) {
  switch (policy) {
    case cleanup_compact:
      return "compact";
    case cleanup_compact | cleanup_delete:
      return "compact,delete";
    default:
      return "delete";
  }
}

const std::vector<std::string>& topic_config_keys() {
  static const std::vector<std::string> keys{
    std::string{retention_ms_key},    std::string{retention_bytes_key},
    std::string{segment_bytes_key},   std::string{segment_ms_key},
    std::string{max_message_bytes_key}, std::string{min_insync_replicas_key},
    std::string{cleanup_policy_key},  std::string{dirty_ratio_key},
    std::string{min_lag_key},         std::string{max_lag_key},
    std::string{delete_retention_key},
  };
  return keys;
}

int32_t effective_min_insync(const topic_config& cfg) {
  if (cfg.min_insync_replicas > 0)
    return cfg.min_insync_replicas;
  return std::max<int32_t>(cfg.replication_factor, 1) / 2 + 1;
}

topic_config with_defaults(topic_config cfg) {
  cfg.min_insync_replicas = effective_min_insync(cfg);
  return cfg;
}

caf::error validate_topic_name(std::string_view name) {
  if (name.empty())
    return make_error(ec::invalid_topic_name, "topic name is empty");
  if (name.size() > max_topic_name_length)
    return make_error(ec::invalid_topic_name,
                      "topic name has " + std::to_string(name.size())
                        + " characters, at most "
                        + std::to_string(max_topic_name_length)
                        + " are allowed");
  if (name == "." || name == "..")
    return make_error(ec::invalid_topic_name,
                      "topic name " + quoted(name) + " is not allowed");
  for (size_t i = 0; i < name.size(); ++i) {
    if (!valid_name_char(name[i]))
      return make_error(ec::invalid_topic_name,
                        "topic name " + quoted(name)
                          + " has an invalid character at position "
                          + std::to_string(i)
                          + "; allowed are [a-zA-Z0-9._-]");
  }
  return caf::none;
}

caf::error validate_partition_count(int32_t n) {
  if (n >= min_partitions && n <= max_partitions)
    return caf::none;
  return make_error(ec::invalid_config,
                    "partitions=" + std::to_string(n) + ": "
                      + range_text(min_partitions, max_partitions));
}

caf::error validate_replication_factor(int16_t rf, int16_t max_supported) {
  if (rf < 1)
    return make_error(ec::invalid_config,
                      "replication.factor=" + std::to_string(rf)
                        + ": must be at least 1");
  if (rf > max_supported) {
    if (max_supported <= 1)
      return make_error(ec::policy_violation,
                        "replication factor " + std::to_string(rf)
                          + " needs " + std::to_string(rf)
                          + " brokers; this node runs alone (start a cluster "
                            "with ferryd --voters)");
    return make_error(ec::policy_violation,
                      "replication factor " + std::to_string(rf)
                        + " exceeds the " + std::to_string(max_supported)
                        + " brokers that can hold replicas");
  }
  return caf::none;
}

caf::error validate_topic_config(const topic_config& cfg,
                                 int16_t max_replication) {
  if (auto err = validate_partition_count(cfg.partitions))
    return err;
  if (auto err = validate_replication_factor(cfg.replication_factor,
                                             max_replication))
    return err;
  if (auto err = check_range(retention_ms_key, cfg.retention_ms, 1, i64_max,
                             true))
    return err;
  if (auto err = check_range(retention_bytes_key, cfg.retention_bytes, 1,
                             i64_max, true))
    return err;
  if (auto err = check_range(segment_bytes_key, cfg.segment_bytes,
                             min_segment_bytes, max_segment_bytes, false))
    return err;
  if (auto err = check_range(segment_ms_key, cfg.segment_ms, 1, i64_max,
                             false))
    return err;
  if (auto err = check_range(max_message_bytes_key, cfg.max_message_bytes,
                             min_max_message_bytes, max_max_message_bytes,
                             false))
    return err;
  if (cfg.min_insync_replicas < 0)
    return bad_value(min_insync_replicas_key,
                     std::to_string(cfg.min_insync_replicas),
                     "must be at least 1 (or 0: a majority of the "
                     "replication factor)");
  if (cfg.min_insync_replicas > cfg.replication_factor)
    return bad_value(min_insync_replicas_key,
                     std::to_string(cfg.min_insync_replicas),
                     "exceeds the replication factor "
                       + std::to_string(cfg.replication_factor));
  if (cfg.cleanup_policy < 1 || cfg.cleanup_policy > 3)
    return bad_value(cleanup_policy_key, std::to_string(cfg.cleanup_policy),
                     "expected delete, compact or compact,delete");
  if (!(cfg.min_cleanable_dirty_ratio >= 0.0 && cfg.min_cleanable_dirty_ratio <= 1.0))
    return bad_value(dirty_ratio_key, ratio_text(cfg.min_cleanable_dirty_ratio),
                     "expected a decimal number in [0, 1]");
  if (auto err = check_range(min_lag_key, cfg.min_compaction_lag_ms, 0, i64_max, false))
    return err;
  if (auto err = check_range(max_lag_key, cfg.max_compaction_lag_ms, 1, i64_max, false))
    return err;
  if (cfg.max_compaction_lag_ms < cfg.min_compaction_lag_ms)
    return bad_value(max_lag_key, std::to_string(cfg.max_compaction_lag_ms),
                     "must be at least min.compaction.lag.ms ("
                       + std::to_string(cfg.min_compaction_lag_ms) + ")");
  if (auto err = check_range(delete_retention_key, cfg.delete_retention_ms, 0,
                             i64_max, false))
    return err;
  return caf::none;
}

caf::error set_topic_config_value(topic_config& cfg, std::string_view key,
                                  std::string_view value) {
  auto known = [&](std::string_view k) { return key == k; };
  if (known(cleanup_policy_key)) {
    auto p = parse_cleanup_policy(value);
    if (!p)
      return std::move(p.error());
    cfg.cleanup_policy = *p;
    return caf::none;
  }
  if (known(dirty_ratio_key)) {
    auto r = parse_ratio(key, value);
    if (!r)
      return std::move(r.error());
    cfg.min_cleanable_dirty_ratio = *r;
    return caf::none;
  }
  if (known(min_lag_key) || known(max_lag_key) || known(delete_retention_key)) {
    auto v = parse_int(key, value);
    if (!v)
      return std::move(v.error());
    if (auto err = check_range(key, *v, known(max_lag_key) ? 1 : 0, i64_max, false))
      return err;
    (known(min_lag_key)   ? cfg.min_compaction_lag_ms
     : known(max_lag_key) ? cfg.max_compaction_lag_ms
                          : cfg.delete_retention_ms) = *v;
    return caf::none;
  }
  if (!known(retention_ms_key) && !known(retention_bytes_key)
      && !known(segment_bytes_key) && !known(segment_ms_key)
      && !known(max_message_bytes_key) && !known(min_insync_replicas_key)) {
    std::string all;
    for (auto& k : topic_config_keys()) {
      if (!all.empty())
        all += ", ";
      all += k;
    }
    return make_error(ec::invalid_config, "unknown config key " + quoted(key)
                                            + " (value " + quoted(value)
                                            + "); known keys: " + all);
  }
  auto v = parse_int(key, value);
  if (!v)
    return std::move(v.error());
  if (known(retention_ms_key)) {
    if (auto err = check_range(key, *v, 1, i64_max, true))
      return err;
    cfg.retention_ms = *v;
  } else if (known(retention_bytes_key)) {
    if (auto err = check_range(key, *v, 1, i64_max, true))
      return err;
    cfg.retention_bytes = *v;
  } else if (known(segment_bytes_key)) {
    if (auto err = check_range(key, *v, min_segment_bytes, max_segment_bytes,
                               false))
      return err;
    cfg.segment_bytes = *v;
  } else if (known(segment_ms_key)) {
    if (auto err = check_range(key, *v, 1, i64_max, false))
      return err;
    cfg.segment_ms = *v;
  } else if (known(max_message_bytes_key)) {
    if (auto err = check_range(key, *v, min_max_message_bytes,
                               max_max_message_bytes, false))
      return err;
    cfg.max_message_bytes = static_cast<int32_t>(*v);
  } else {
    if (auto err = check_range(key, *v, 1, INT16_MAX, false))
      return err;
    cfg.min_insync_replicas = static_cast<int32_t>(*v);
  }
  return caf::none;
}

caf::expected<topic_config>
apply_topic_config(topic_config base,
                   const std::map<std::string, std::string>& changes,
                   int16_t max_replication) {
  for (auto& [key, value] : changes)
    if (auto err = set_topic_config_value(base, key, value))
      return err;
  if (auto err = validate_topic_config(base, max_replication))
    return err;
  return base;
}

std::map<std::string, std::string> render_topic_config(const topic_config& cfg) {
  return {
    {std::string{retention_ms_key}, std::to_string(cfg.retention_ms)},
    {std::string{retention_bytes_key}, std::to_string(cfg.retention_bytes)},
    {std::string{segment_bytes_key}, std::to_string(cfg.segment_bytes)},
    {std::string{segment_ms_key}, std::to_string(cfg.segment_ms)},
    {std::string{max_message_bytes_key},
     std::to_string(cfg.max_message_bytes)},
    {std::string{min_insync_replicas_key},
     std::to_string(effective_min_insync(cfg))},
    {std::string{cleanup_policy_key}, cleanup_policy_name(cfg.cleanup_policy)},
    {std::string{dirty_ratio_key}, ratio_text(cfg.min_cleanable_dirty_ratio)},
    {std::string{min_lag_key}, std::to_string(cfg.min_compaction_lag_ms)},
    {std::string{max_lag_key}, std::to_string(cfg.max_compaction_lag_ms)},
    {std::string{delete_retention_key}, std::to_string(cfg.delete_retention_ms)},
  };
}

} // namespace ferry
