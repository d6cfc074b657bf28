#include "broker/start_position.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>

namespace ferry {

namespace {

bool read_int(std::string_view s, size_t& pos, size_t digits, int& out) {
  if (pos + digits > s.size())
    return false;
  int v = 0;
  for (size_t i = 0; i < digits; ++i) {
    auto c = s[pos + i];
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
    v = v * 10 + (c - '0');
  }
  pos += digits;
  out = v;
  return true;
}

bool expect(std::string_view s, size_t& pos, char c) {
  if (pos >= s.size() || s[pos] != c)
    return false;
  ++pos;
  return true;
}

} // namespace

caf::expected<int64_t> parse_datetime_ms(std::string_view s) {
  auto bad = [&] {
    return make_error(ec::invalid_config,
                      "'" + std::string{s}
                        + "': expected YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+HH:MM]");
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  int64_t millis = 0;
  int64_t zone_s = 0;
  size_t pos = 0;
  if (!read_int(s, pos, 4, y) || !expect(s, pos, '-') || !read_int(s, pos, 2, mo)
      || !expect(s, pos, '-') || !read_int(s, pos, 2, d))
    return bad();
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == ' ')) {
    ++pos;
    if (!read_int(s, pos, 2, h) || !expect(s, pos, ':') || !read_int(s, pos, 2, mi))
      return bad();
    if (pos < s.size() && s[pos] == ':') {
      ++pos;
      if (!read_int(s, pos, 2, sec))
        return bad();
      if (pos < s.size() && s[pos] == '.') {
        ++pos;
        int digits = 0;
        while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
          if (digits < 3)
            millis = millis * 10 + (s[pos] - '0');
          ++digits;
          ++pos;
        }
        if (digits == 0)
          return bad();
        for (; digits < 3; ++digits)
          millis *= 10;
      }
    }
    if (pos < s.size()) {
      if (s[pos] == 'Z') {
        ++pos;
      } else if (s[pos] == '+' || s[pos] == '-') {
        int sign = s[pos] == '-' ? -1 : 1;
        ++pos;
        int zh = 0, zm = 0;
        if (!read_int(s, pos, 2, zh))
          return bad();
        if (pos < s.size() && s[pos] == ':')
          ++pos;
        if (!read_int(s, pos, 2, zm) || zh > 23 || zm > 59)
          return bad();
        zone_s = sign * (zh * 3600 + zm * 60);
      }
    }
  }
  if (pos != s.size() || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31
      || h > 23 || mi > 59 || sec > 60)
    return bad();
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  auto t = timegm(&tm);
  return (static_cast<int64_t>(t) - zone_s) * 1000 + millis;
}

caf::expected<int64_t> parse_start_position(std::string_view text) {
  auto bad = [&] {
    return make_error(ec::invalid_config,
                      "start '" + std::string{text}
                        + "': expected earliest, latest, a date-time "
                          "YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+HH:MM] or epoch "
                          "milliseconds");
  };
  if (text == "earliest")
    return start_earliest;
  if (text == "latest")
    return start_latest;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || p != text.data() + text.size())
      return bad();
    return v;
  }
  auto t = parse_datetime_ms(text);
  if (!t)
    return bad();
  return t;
}

std::string start_position_text(int64_t start) {
  if (start == start_earliest)
    return "earliest";
  if (start == start_latest)
    return "latest";
  auto secs = static_cast<std::time_t>(start / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(start % 1000));
  return buf;
}

caf::error validate_start_position(int64_t start) {
  if (start == start_earliest || start == start_latest || start >= 0)
    return caf::none;
  return make_error(ec::invalid_config,
                    "start " + std::to_string(start)
                      + " is not -2 (earliest), -1 (latest) or a timestamp");
}

} // namespace ferry
