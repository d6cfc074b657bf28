#pragma once
// Ferry's own logging (Debian builds CAF with its logger compiled out).
//
//   ferry::log::info("created topic {} with {} partitions", name, n);
//
// fmt-style formatting, checked at compile time. Lines go to stderr (and,
// when configured, also to a file) as
//   2024-05-01 12:00:00.123 INFO  created topic orders with 3 partitions
// Thread-safe; usable before init() (stderr, level info). spdlog stays in
// logging.cpp: this header pulls in only fmt's core formatting.
// A disabled level costs one relaxed atomic load; arguments are not
// formatted.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ferry::log {

enum class level : int { trace = 0, debug, info, warn, error, critical, off };

/// "trace", "debug", "info", "warn", "error", "critical", "off".
const char* to_string(level x);

/// Parses a level name (case-insensitive; "warning" and "err" are accepted).
std::optional<level> parse_level(std::string_view name);

struct options {
  level min_level = level::info;
  /// Also append to this file when not empty.
  std::string file;
  /// Colors on stderr when it is a terminal.
  bool color = true;
};

/// (Re)configures the sinks. Returns an error text ("" on success), e.g.
/// when the log file cannot be opened; stderr logging works either way.
std::string init(const options& opts);

void set_level(level x);
level current_level();

namespace detail {
inline std::atomic<int> min_level{static_cast<int>(level::info)};
void write(level lvl, std::string_view msg);
} // namespace detail

inline bool enabled(level x) {
  return static_cast<int>(x)
         >= detail::min_level.load(std::memory_order_relaxed);
}

/// Writes what is buffered (the file sink) to disk.
void flush();

template <class... Ts>
void write(level lvl, fmt::format_string<Ts...> fmt_str, Ts&&... xs) {
  if (!enabled(lvl))
    return;
  detail::write(lvl, fmt::format(fmt_str, std::forward<Ts>(xs)...));
}

template <class... Ts>
void trace(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::trace, f, std::forward<Ts>(xs)...);
}
template <class... Ts>
void debug(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::debug, f, std::forward<Ts>(xs)...);
}
template <class... Ts>
void info(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::info, f, std::forward<Ts>(xs)...);
}
template <class... Ts>
void warn(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::warn, f, std::forward<Ts>(xs)...);
}
template <class... Ts>
void error(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::error, f, std::forward<Ts>(xs)...);
}
template <class... Ts>
void critical(fmt::format_string<Ts...> f, Ts&&... xs) {
  write(level::critical, f, std::forward<Ts>(xs)...);
}

/// Lets one line per `interval` through for an event that may happen
/// thousands of times a second on several threads (a slow flush on every
/// partition of a busy node made 10,588 warnings in a 5-s run), and counts
/// the others: the line that goes out can say how many were held back
/// since the last one and the largest value among them. Thread-safe.
///
///   static log::limiter slow{std::chrono::seconds{10}};
///   if (auto r = slow.note(steady_clock::now(), ms))
///     log::warn("... took {} ms ({} more since, slowest {} ms)", ms,
///               r->held_back, r->worst);
class limiter {
public:
  struct report {
    /// Events since the last line that went out, not logged.
    uint64_t held_back = 0;
    /// The largest value among those and this one.
    int64_t worst = 0;
  };

  explicit limiter(std::chrono::nanoseconds interval) : interval_(interval.count()) {}

  /// A report when this event is to be logged; nullopt when it is only counted.
  std::optional<report> note(std::chrono::steady_clock::time_point now, int64_t value) {
    auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch())
               .count();
    auto next = next_.load(std::memory_order_relaxed);
    if (t < next || !next_.compare_exchange_strong(next, t + interval_)) {
      held_.fetch_add(1, std::memory_order_relaxed);
      auto w = worst_.load(std::memory_order_relaxed);
      while (value > w && !worst_.compare_exchange_weak(w, value)) {
      }
      return std::nullopt;
    }
    report r;
    r.held_back = held_.exchange(0);
    r.worst = std::max(worst_.exchange(std::numeric_limits<int64_t>::min()), value);
    return r;
  }

private:
  int64_t interval_;
  std::atomic<int64_t> next_{std::numeric_limits<int64_t>::min()};
  std::atomic<uint64_t> held_{0};
  std::atomic<int64_t> worst_{std::numeric_limits<int64_t>::min()};
};

} // namespace ferry::log

// -- formatters: strong types print their value, errors via describe() ------

template <>
struct fmt::formatter<ferry::offset> : fmt::formatter<int64_t> {
  auto format(ferry::offset x, format_context& ctx) const {
    return fmt::formatter<int64_t>::format(x.value, ctx);
  }
};
template <>
struct fmt::formatter<ferry::partition_id> : fmt::formatter<int32_t> {
  auto format(ferry::partition_id x, format_context& ctx) const {
    return fmt::formatter<int32_t>::format(x.value, ctx);
  }
};
template <>
struct fmt::formatter<ferry::leader_epoch> : fmt::formatter<int32_t> {
  auto format(ferry::leader_epoch x, format_context& ctx) const {
    return fmt::formatter<int32_t>::format(x.value, ctx);
  }
};
template <>
struct fmt::formatter<ferry::producer_id> : fmt::formatter<int64_t> {
  auto format(ferry::producer_id x, format_context& ctx) const {
    return fmt::formatter<int64_t>::format(x.value, ctx);
  }
};
template <>
struct fmt::formatter<caf::error> : fmt::formatter<std::string_view> {
  auto format(const caf::error& x, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(ferry::describe(x), ctx);
  }
};
