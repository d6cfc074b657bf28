// The text-format reader (metrics/prometheus_text.hpp): labels and their
// escapes, comments, +Inf/-Inf/NaN, timestamps, malformed lines, and a
// registry's own page read back.

#include "metrics/prometheus_text.hpp"

#include "metrics/metrics.hpp"
#include "metrics/partition_probe.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

using namespace ferry;
using metrics::parse_text;
using metrics::parse_text_line;

namespace {

TEST(prometheus_text, reads_names_labels_and_values_and_skips_comments) {
  auto s = parse_text("# HELP ferry_messages_in_total Records appended.\n"
                      "# TYPE ferry_messages_in_total counter\n"
                      "\n"
                      "ferry_messages_in_total{partition=\"0\",topic=\"orders\"} 10\n"
                      "  ferry_raft_term 3  \n"
                      "ferry:recorded{a=\"1\" , b = \"2\",} 2.5e1\n");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "ferry_messages_in_total");
  EXPECT_EQ(s[0].labels,
            (std::map<std::string, std::string>{{"partition", "0"},
                                                {"topic", "orders"}}));
  EXPECT_EQ(s[0].value, 10.0);
  EXPECT_FALSE(s[0].timestamp_ms);
  EXPECT_EQ(s[1].name, "ferry_raft_term");
  EXPECT_TRUE(s[1].labels.empty());
  EXPECT_EQ(s[1].value, 3.0);
  EXPECT_EQ(s[2].name, "ferry:recorded");
  EXPECT_EQ(s[2].labels.at("b"), "2");
  EXPECT_EQ(s[2].value, 25.0);
}

TEST(prometheus_text, label_values_unescape_and_may_hold_any_character) {
  auto s = parse_text_line(
    R"(m{q="say \"hi\"",path="C:\\dir",text="two\nlines",odd="}, {=",raw="a\tb"} 1)");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->labels.at("q"), "say \"hi\"");
  EXPECT_EQ(s->labels.at("path"), "C:\\dir");
  EXPECT_EQ(s->labels.at("text"), "two\nlines");
  EXPECT_EQ(s->labels.at("odd"), "}, {=");
  EXPECT_EQ(s->labels.at("raw"), "a\\tb"); // not an escape: kept as written
  EXPECT_EQ(s->value, 1.0);
  auto empty = parse_text_line("m{} 4");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->labels.empty());
  EXPECT_EQ(empty->value, 4.0);
}

TEST(prometheus_text, values_take_inf_nan_and_timestamps) {
  auto s = parse_text("b{le=\"+Inf\"} +Inf\n"
                      "c -Inf\n"
                      "d NaN\n"
                      "e nan\n"
                      "f -1.5e-3 1712345678901\n"
                      "g 7 -5\n"
                      "h +2\r\n");
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[0].labels.at("le"), "+Inf");
  EXPECT_EQ(s[0].value, std::numeric_limits<double>::infinity());
  EXPECT_EQ(s[1].value, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(s[2].value));
  EXPECT_TRUE(std::isnan(s[3].value));
  EXPECT_DOUBLE_EQ(s[4].value, -0.0015);
  EXPECT_EQ(s[4].timestamp_ms, int64_t{1712345678901});
  EXPECT_EQ(s[5].timestamp_ms, int64_t{-5});
  EXPECT_EQ(s[6].name, "h");
  EXPECT_EQ(s[6].value, 2.0);
  EXPECT_FALSE(s[6].timestamp_ms);
}

TEST(prometheus_text, malformed_lines_are_skipped) {
  for (const auto* line : {
         "garbage",                 // no value
         "m",                       // no value
         "m x",                     // not a number
         "m 1 2 3",                 // more than value and timestamp
         "m 1 1.5",                 // timestamp not an integer
         "m{a=\"x\" 1",             // labels not closed
         "m{a=x} 1",                // value not quoted
         "m{a=\"x} 1",              // quote not closed
         "m{a=\"x\"b=\"y\"} 1",     // no comma
         "m{1a=\"x\"} 1",           // bad label name
         "m{=\"x\"} 1",             // no label name
         "m{a=\"x\"}",              // no value after labels
         "1m 1",                    // bad metric name
         "m-x 1",                   // bad metric name
         "m 1x",                    // trailing junk in the value
         "m ++1",                   // two signs
         "",
         "   ",
         "# TYPE m counter",
       })
    EXPECT_FALSE(parse_text_line(line)) << line;
  auto s = parse_text("garbage\nm 1\nm{a=\"x\" 2\nn 3");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "m");
  EXPECT_EQ(s[1].name, "n"); // the last line needs no line end
  EXPECT_EQ(s[1].value, 3.0);
}

TEST(prometheus_text, reads_back_what_a_registry_serves) {
  auto reg = std::make_shared<metrics::registry>();
  metrics::partition_probe probe{reg, "or\"ders", partition_id{0}};
  probe.log_state(offset{2}, offset{12}, offset{12}, 1000);
  probe.produced(3, 300, std::chrono::microseconds{50});
  auto text = reg->text();
  auto samples = parse_text(text);
  auto find = [&](const std::string& name,
                  const std::map<std::string, std::string>& labels)
    -> const metrics::text_sample* {
    for (auto& s : samples)
      if (s.name == name && s.labels == labels)
        return &s;
    return nullptr;
  };
  std::map<std::string, std::string> tp{{"topic", "or\"ders"},
                                        {"partition", "0"}};
  auto* hw = find("ferry_partition_high_watermark", tp);
  ASSERT_NE(hw, nullptr) << text;
  EXPECT_EQ(hw->value, 12.0);
  auto* start = find("ferry_partition_log_start_offset", tp);
  ASSERT_NE(start, nullptr) << text;
  EXPECT_EQ(start->value, 2.0);
  auto* inf = find("ferry_produce_latency_seconds_bucket",
                   {{"topic", "or\"ders"}, {"le", "+Inf"}});
  ASSERT_NE(inf, nullptr) << text;
  EXPECT_EQ(inf->value, 1.0);
  auto* count = find("ferry_produce_latency_seconds_count", {{"topic", "or\"ders"}});
  ASSERT_NE(count, nullptr) << text;
  EXPECT_EQ(count->value, 1.0);
  // Every line that is not a comment is a sample.
  size_t lines = 0;
  for (size_t i = 0, j; i < text.size(); i = j + 1) {
    j = text.find('\n', i);
    if (j == std::string::npos)
      j = text.size();
    if (j > i && text[i] != '#')
      ++lines;
  }
  EXPECT_EQ(samples.size(), lines) << text;
}

} // namespace
