#include "metrics/prometheus_text.hpp"

#include <charconv>
#include <system_error>

namespace ferry::metrics {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

bool is_name_start(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
         || (colon && c == ':');
}

bool is_name_char(char c, bool colon) {
  return is_name_start(c, colon) || (c >= '0' && c <= '9');
}

/// Reads the characters of a line from left to right.
struct cursor {
  std::string_view s;
  size_t i = 0;

  bool done() const { return i >= s.size(); }
  char peek() const { return s[i]; }
  void skip_blanks() {
    while (!done() && is_blank(s[i]))
      ++i;
  }
  /// A metric name (colons allowed) or a label name; "" if none.
  std::string_view name(bool colon) {
    auto start = i;
    if (!done() && is_name_start(s[i], colon))
      for (++i; !done() && is_name_char(s[i], colon); ++i)
        ;
    return s.substr(start, i - start);
  }
  /// Up to the next blank.
  std::string_view token() {
    auto start = i;
    while (!done() && !is_blank(s[i]))
      ++i;
    return s.substr(start, i - start);
  }
};

/// A quoted label value after its opening quote, unescaped; nullopt when
/// the closing quote is missing. An unknown escape stays as written.
std::optional<std::string> quoted(cursor& c) {
  std::string out;
  while (!c.done()) {
    char ch = c.s[c.i++];
    if (ch == '"')
      return out;
    if (ch != '\\' || c.done()) {
      out += ch;
      continue;
    }
    char next = c.s[c.i++];
    if (next == 'n')
      out += '\n';
    else if (next == '\\' || next == '"')
      out += next;
    else {
      out += '\\';
      out += next;
    }
  }
  return std::nullopt;
}

/// `{a="x",b="y"}` (trailing comma and blanks allowed), after the '{'.
bool labels(cursor& c, std::map<std::string, std::string>& out) {
  for (;;) {
    c.skip_blanks();
    if (c.done())
      return false;
    if (c.peek() == '}') {
      ++c.i;
      return true;
    }
    auto key = c.name(false);
    if (key.empty())
      return false;
    c.skip_blanks();
    if (c.done() || c.peek() != '=')
      return false;
    ++c.i;
    c.skip_blanks();
    if (c.done() || c.peek() != '"')
      return false;
    ++c.i;
    auto value = quoted(c);
    if (!value)
      return false;
    out[std::string{key}] = std::move(*value);
    c.skip_blanks();
    if (c.done())
      return false;
    if (c.peek() == ',')
      ++c.i;
    else if (c.peek() != '}')
      return false;
  }
}

/// A sample value: a decimal or exponent number, +Inf, -Inf or NaN (as Go's
/// ParseFloat: any case, "Infinity" too). Locale-independent.
std::optional<double> number(std::string_view t) {
  if (!t.empty() && t.front() == '+') {
    t.remove_prefix(1);
    if (!t.empty() && (t.front() == '+' || t.front() == '-'))
      return std::nullopt;
  }
  if (t.empty())
    return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || end != t.data() + t.size())
    return std::nullopt;
  return v;
}

std::optional<int64_t> integer(std::string_view t) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc{} || end != t.data() + t.size())
    return std::nullopt;
  return v;
}

} // namespace

std::optional<text_sample> parse_text_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  cursor c{line};
  c.skip_blanks();
  if (c.done() || c.peek() == '#')
    return std::nullopt;
  text_sample s;
  s.name = std::string{c.name(true)};
  if (s.name.empty() || c.done())
    return std::nullopt;
  if (c.peek() == '{') {
    ++c.i;
    if (!labels(c, s.labels))
      return std::nullopt;
  } else if (!is_blank(c.peek())) {
    return std::nullopt;
  }
  c.skip_blanks();
  auto value = number(c.token());
  if (!value)
    return std::nullopt;
  s.value = *value;
  c.skip_blanks();
  if (!c.done()) {
    auto ts = integer(c.token());
    if (!ts)
      return std::nullopt;
    s.timestamp_ms = *ts;
    c.skip_blanks();
  }
  if (!c.done())
    return std::nullopt;
  return s;
}

std::vector<text_sample> parse_text(std::string_view text) {
  std::vector<text_sample> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto s = parse_text_line(line))
      out.push_back(std::move(*s));
  }
  return out;
}

} // namespace ferry::metrics
