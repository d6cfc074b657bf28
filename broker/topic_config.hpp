#pragma once
// Validation of topic names and per-topic settings, and the conversion
// between topic_config (actors/protocol/interfaces.hpp) and Kafka-style key/value
// maps ("retention.ms" -> "604800000"). No actor code: the metadata actors
// call these before they record anything.
//
// Keys and bounds (Kafka names; bounds chosen to be Kafka-like):
//   retention.ms         -1 (forever) or [1, 2^63-1]
//   retention.bytes      -1 (unlimited) or [1, 2^63-1]
//   segment.bytes        [1 MiB, 2^31-1]
//   segment.ms           [1, 2^63-1]
//   max.message.bytes    [61 (a batch header), 64 MiB]
//   min.insync.replicas  [1, replication factor]
//   cleanup.policy       delete, compact, or both ("compact,delete")
//   min.cleanable.dirty.ratio  [0, 1] (a decimal, e.g. 0.5)
//   min.compaction.lag.ms      [0, 2^63-1]
//   max.compaction.lag.ms      [1, 2^63-1], at least min.compaction.lag.ms
//   delete.retention.ms        [0, 2^63-1]
// Partitions are in [1, 10000]; the replication factor is >= 1 and at most
// the number of brokers that can hold replicas (1 for a node alone).
//
// topic_config itself is a message type and so is defined in
// actors/protocol/interfaces.hpp; this header only declares it, keeping the typed
// actor headers out of broker/ users. Callers include interfaces.hpp.

#include "broker/error.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct topic_config;

/// Longest topic name (Kafka's limit).
inline constexpr size_t max_topic_name_length = 249;

/// Partition count bounds of a topic.
inline constexpr int32_t min_partitions = 1;
inline constexpr int32_t max_partitions = 10000;

/// Value bounds of the config keys (see the file comment).
inline constexpr int64_t min_segment_bytes = int64_t{1} << 20;
inline constexpr int64_t max_segment_bytes = INT32_MAX;
inline constexpr int32_t min_max_message_bytes = 61;
inline constexpr int32_t max_max_message_bytes = 64 << 20;

/// topic_config::cleanup_policy bits.
inline constexpr int8_t cleanup_delete = 1;
inline constexpr int8_t cleanup_compact = 2;

/// "delete", "compact" or "compact,delete".
std::string cleanup_policy_name(int8_t policy);

/// The config keys a topic understands, in a stable order.
const std::vector<std::string>& topic_config_keys();

/// ec::invalid_topic_name (the context says why) unless `name` matches
/// [a-zA-Z0-9._-]{1,249} and is neither "." nor "..".
caf::error validate_topic_name(std::string_view name);

/// ec::invalid_config unless n is in [1, 10000].
caf::error validate_partition_count(int32_t n);

/// ec::invalid_config for rf < 1; ec::policy_violation for rf greater than
/// `max_supported` (the brokers that can hold replicas; 1 for a node alone).
caf::error validate_replication_factor(int16_t rf, int16_t max_supported = 1);

/// Checks every field of `cfg` (partitions, replication factor, each key's
/// bounds, min.insync.replicas <= replication factor). The first problem
/// found is returned: invalid_config naming key and value, or
/// policy_violation for the replication factor.
caf::error validate_topic_config(const topic_config& cfg,
                                 int16_t max_replication = 1);

/// min.insync.replicas in effect: the configured value, or a majority of
/// the replication factor (rf / 2 + 1) when it is 0.
int32_t effective_min_insync(const topic_config& cfg);

/// `cfg` with its defaults resolved (min.insync.replicas 0 -> majority), as
/// a topic is stored at create.
topic_config with_defaults(topic_config cfg);

/// Sets one key of `cfg` from its string form. ec::invalid_config if the key
/// is unknown, the value is not a plain decimal integer, or it is out of
/// bounds; `cfg` is unchanged then. Cross-field rules are not checked here.
caf::error set_topic_config_value(topic_config& cfg, std::string_view key,
                                  std::string_view value);

/// `base` with every entry of `changes` applied, then validated as a whole
/// (validate_topic_config). All or nothing.
caf::expected<topic_config>
apply_topic_config(topic_config base,
                   const std::map<std::string, std::string>& changes,
                   int16_t max_replication = 1);

/// The keys of topic_config_keys() with their values as decimal strings.
std::map<std::string, std::string> render_topic_config(const topic_config& cfg);

} // namespace ferry
