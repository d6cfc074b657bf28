#pragma once
// Reading the Prometheus text exposition format (version 0.0.4), what a
// /metrics page serves: one sample a line,
//
//   name{label="value",...} value [timestamp]
//
// Lines starting with '#' (HELP, TYPE, comments) and blank lines are skipped;
// so are malformed lines (a page is read as far as it makes sense). Label
// values unescape \\, \" and \n; values take +Inf, -Inf and NaN (any case);
// the timestamp, if any, is milliseconds since the epoch. Plain C++ (no
// prometheus-cpp, no Qt, no broker): library ferry_prometheus_text, which
// the console's charts and the tests both read scrapes with.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::metrics {

/// One sample: metric name, labels, value and optional timestamp.
struct text_sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

/// The sample on one line; nullopt for a comment, a blank or a malformed
/// line.
std::optional<text_sample> parse_text_line(std::string_view line);

/// Every sample of a page, in page order (\n or \r\n line ends).
std::vector<text_sample> parse_text(std::string_view text);

} // namespace ferry::metrics
