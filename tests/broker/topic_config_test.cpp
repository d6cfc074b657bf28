// Topic names and per-topic config: validation tables and the round trip
// between topic_config and its key/value form.

#include "broker/topic_config.hpp"

#include "actors/protocol/interfaces.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace ferry;

namespace {

std::string context_of(const caf::error& err) {
  return describe(err);
}

} // namespace

TEST(TopicName, AcceptsKafkaCharacterSet) {
  for (const std::string& name : std::vector<std::string>{"a", "orders", "Orders.v2", "my_topic-1", "__consumer_state", "...",
        "a.b", "0", std::string(249, 'x'), "A-Z_a-z.0-9"}) {
    EXPECT_FALSE(validate_topic_name(name)) << name;
  }
}

TEST(TopicName, RejectsBadNamesWithReason) {
  struct row {
    std::string name;
    std::string reason_part;
  };
  std::vector<row> rows{
    {"", "empty"},
    {".", "not allowed"},
    {"..", "not allowed"},
    {std::string(250, 'x'), "250 characters"},
    {"has space", "position 3"},
    {"slash/name", "position 5"},
    {"colon:x", "position 5"},
    {"tab\tx", "\\x09"},
    {"ümlaut", "position 0"},
    {std::string("nul\0x", 5), "position 3"},
  };
  for (auto& r : rows) {
    auto err = validate_topic_name(r.name);
    ASSERT_TRUE(is(err, ec::invalid_topic_name)) << r.name;
    EXPECT_NE(context_of(err).find(r.reason_part), std::string::npos)
      << context_of(err);
  }
}

TEST(TopicConfig, DefaultsAreValid) {
  EXPECT_FALSE(validate_topic_config(topic_config{}));
}

TEST(TopicConfig, PartitionBounds) {
  EXPECT_FALSE(validate_partition_count(1));
  EXPECT_FALSE(validate_partition_count(10000));
  EXPECT_TRUE(is(validate_partition_count(0), ec::invalid_config));
  EXPECT_TRUE(is(validate_partition_count(-3), ec::invalid_config));
  EXPECT_TRUE(is(validate_partition_count(10001), ec::invalid_config));
  topic_config cfg;
  cfg.partitions = 0;
  auto err = validate_topic_config(cfg);
  EXPECT_TRUE(is(err, ec::invalid_config));
  EXPECT_NE(context_of(err).find("partitions=0"), std::string::npos);
}

TEST(TopicConfig, ReplicationFactorAboveOneIsAPolicyViolation) {
  EXPECT_FALSE(validate_replication_factor(1));
  EXPECT_TRUE(is(validate_replication_factor(0), ec::invalid_config));
  auto err = validate_replication_factor(3);
  ASSERT_TRUE(is(err, ec::policy_violation));
  EXPECT_NE(context_of(err).find("replication factor 3 needs 3 brokers; this "
                                 "node runs alone (start a cluster with "
                                 "ferryd --voters)"),
            std::string::npos)
    << context_of(err);
  // A cluster that can place three replicas accepts it.
  EXPECT_FALSE(validate_replication_factor(3, 3));
  topic_config cfg;
  cfg.replication_factor = 2;
  EXPECT_TRUE(is(validate_topic_config(cfg), ec::policy_violation));
}

TEST(TopicConfig, ParsesEveryKey) {
  std::map<std::string, std::string> kv{
    {"retention.ms", "3600000"},     {"retention.bytes", "1073741824"},
    {"segment.bytes", "1048576"},    {"segment.ms", "60000"},
    {"max.message.bytes", "2000"},   {"min.insync.replicas", "1"},
  };
  auto cfg = apply_topic_config(topic_config{}, kv);
  ASSERT_TRUE(cfg) << describe(cfg.error());
  EXPECT_EQ(cfg->retention_ms, 3600000);
  EXPECT_EQ(cfg->retention_bytes, 1073741824);
  EXPECT_EQ(cfg->segment_bytes, 1048576);
  EXPECT_EQ(cfg->segment_ms, 60000);
  EXPECT_EQ(cfg->max_message_bytes, 2000);
  EXPECT_EQ(cfg->min_insync_replicas, 1);
}

TEST(TopicConfig, MinusOneMeansUnlimitedForRetention) {
  auto cfg = apply_topic_config(topic_config{}, {{"retention.ms", "-1"},
                                                 {"retention.bytes", "-1"}});
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->retention_ms, -1);
  EXPECT_EQ(cfg->retention_bytes, -1);
}

TEST(TopicConfig, BadValuesNameKeyAndValue) {
  struct row {
    std::string key;
    std::string value;
  };
  std::vector<row> rows{
    {"retention.ms", "abc"},           {"retention.ms", ""},
    {"retention.ms", "-2"},            {"retention.ms", "0"},
    {"retention.ms", "10 "},           {"retention.ms", " 10"},
    {"retention.ms", "1e3"},           {"retention.ms", "0x10"},
    {"retention.ms", "99999999999999999999"},
    {"retention.bytes", "-5"},         {"retention.bytes", "1.5"},
    {"segment.bytes", "1048575"},      {"segment.bytes", "2147483648"},
    {"segment.bytes", "-1"},           {"segment.ms", "0"},
    {"segment.ms", "-1"},              {"max.message.bytes", "60"},
    {"max.message.bytes", "67108865"}, {"max.message.bytes", "-1"},
    {"min.insync.replicas", "0"},      {"min.insync.replicas", "2"},
    {"min.insync.replicas", "x"},
  };
  for (auto& r : rows) {
    auto cfg = apply_topic_config(topic_config{}, {{r.key, r.value}});
    ASSERT_FALSE(cfg) << r.key << "=" << r.value;
    EXPECT_TRUE(is(cfg.error(), ec::invalid_config))
      << describe(cfg.error());
    auto text = context_of(cfg.error());
    EXPECT_NE(text.find(r.key), std::string::npos) << text;
  }
}

TEST(TopicConfig, UnknownKeyIsNamed) {
  auto cfg = apply_topic_config(topic_config{},
                                {{"message.timestamp.type", "LogAppendTime"}});
  ASSERT_FALSE(cfg);
  EXPECT_TRUE(is(cfg.error(), ec::invalid_config));
  auto text = context_of(cfg.error());
  EXPECT_NE(text.find("message.timestamp.type"), std::string::npos) << text;
  EXPECT_NE(text.find("LogAppendTime"), std::string::npos) << text;
  // The message lists what is known.
  EXPECT_NE(text.find("cleanup.policy"), std::string::npos) << text;
}

TEST(TopicConfig, CompactionKeysParseAsKafkaSpellsThem) {
  auto cfg = apply_topic_config(topic_config{},
                                {{"cleanup.policy", "compact"},
                                 {"min.cleanable.dirty.ratio", "0.25"},
                                 {"min.compaction.lag.ms", "1000"},
                                 {"max.compaction.lag.ms", "60000"},
                                 {"delete.retention.ms", "0"}});
  ASSERT_TRUE(cfg) << describe(cfg.error());
  EXPECT_EQ(cfg->cleanup_policy, cleanup_compact);
  EXPECT_DOUBLE_EQ(cfg->min_cleanable_dirty_ratio, 0.25);
  EXPECT_EQ(cfg->min_compaction_lag_ms, 1000);
  EXPECT_EQ(cfg->max_compaction_lag_ms, 60000);
  EXPECT_EQ(cfg->delete_retention_ms, 0);
  for (auto both : {"compact,delete", "delete,compact", "compact, delete"}) {
    auto c = apply_topic_config(topic_config{}, {{"cleanup.policy", both}});
    ASSERT_TRUE(c) << both;
    EXPECT_EQ(c->cleanup_policy, cleanup_compact | cleanup_delete);
    EXPECT_EQ(render_topic_config(*c)["cleanup.policy"], "compact,delete");
  }
  EXPECT_EQ(render_topic_config(topic_config{})["cleanup.policy"], "delete");
  EXPECT_EQ(render_topic_config(*cfg)["min.cleanable.dirty.ratio"], "0.25");
  // Defaults are Kafka's.
  topic_config d;
  EXPECT_EQ(d.cleanup_policy, cleanup_delete);
  EXPECT_DOUBLE_EQ(d.min_cleanable_dirty_ratio, 0.5);
  EXPECT_EQ(d.delete_retention_ms, 86400000);
}

TEST(TopicConfig, BadCompactionValuesAreNamed) {
  std::vector<std::pair<std::string, std::string>> rows{
    {"cleanup.policy", "compacted"}, {"cleanup.policy", ""},
    {"cleanup.policy", "compact,"},  {"cleanup.policy", "delete;compact"},
    {"min.cleanable.dirty.ratio", "1.5"}, {"min.cleanable.dirty.ratio", "-0.1"},
    {"min.cleanable.dirty.ratio", "half"}, {"min.cleanable.dirty.ratio", "nan"},
    {"min.compaction.lag.ms", "-1"},  {"max.compaction.lag.ms", "0"},
    {"delete.retention.ms", "-5"},    {"delete.retention.ms", "1d"},
  };
  for (auto& [key, value] : rows) {
    auto cfg = apply_topic_config(topic_config{}, {{key, value}});
    ASSERT_FALSE(cfg) << key << "=" << value;
    EXPECT_TRUE(is(cfg.error(), ec::invalid_config)) << describe(cfg.error());
    EXPECT_NE(context_of(cfg.error()).find(key), std::string::npos)
      << context_of(cfg.error());
  }
  // max.compaction.lag.ms below min.compaction.lag.ms.
  auto cfg = apply_topic_config(topic_config{}, {{"min.compaction.lag.ms", "5000"},
                                                 {"max.compaction.lag.ms", "1000"}});
  ASSERT_FALSE(cfg);
  EXPECT_NE(context_of(cfg.error()).find("max.compaction.lag.ms"), std::string::npos);
}

TEST(TopicConfig, FailedApplyChangesNothing) {
  topic_config base;
  base.retention_ms = 1234;
  auto cfg = apply_topic_config(base, {{"retention.ms", "5000"},
                                       {"segment.bytes", "1"}});
  EXPECT_FALSE(cfg);
  EXPECT_EQ(base.retention_ms, 1234);
  topic_config copy = base;
  EXPECT_TRUE(set_topic_config_value(copy, "segment.ms", "nope"));
  EXPECT_EQ(copy, base);
}

TEST(TopicConfig, RenderRoundTrips) {
  topic_config cfg;
  cfg.retention_ms = -1;
  cfg.retention_bytes = 5 << 20;
  cfg.segment_bytes = 2 << 20;
  cfg.segment_ms = 1000;
  cfg.max_message_bytes = 4096;
  auto kv = render_topic_config(cfg);
  ASSERT_EQ(kv.size(), topic_config_keys().size());
  for (auto& key : topic_config_keys())
    EXPECT_TRUE(kv.count(key)) << key;
  EXPECT_EQ(kv["retention.ms"], "-1");
  EXPECT_EQ(kv["max.message.bytes"], "4096");
  auto back = apply_topic_config(topic_config{}, kv);
  ASSERT_TRUE(back) << describe(back.error());
  // The default min.insync.replicas (0) renders as its effective value.
  EXPECT_EQ(kv["min.insync.replicas"], "1");
  EXPECT_EQ(*back, with_defaults(cfg));
}

TEST(TopicConfig, MinInsyncDefaultsToAMajorityOfTheReplicationFactor) {
  topic_config cfg;
  for (int16_t rf : {1, 2, 3, 4, 5}) {
    cfg.replication_factor = rf;
    cfg.min_insync_replicas = 0;
    EXPECT_EQ(effective_min_insync(cfg), rf / 2 + 1) << "rf " << rf;
    EXPECT_EQ(with_defaults(cfg).min_insync_replicas, rf / 2 + 1);
  }
  cfg.replication_factor = 3;
  cfg.min_insync_replicas = 1; // an explicit value stays
  EXPECT_EQ(with_defaults(cfg).min_insync_replicas, 1);
}
