#include "broker/logging.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::log {

namespace {

constexpr const char* pattern = "%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v";

spdlog::level::level_enum to_spdlog(level x) {
  switch (x) {
    case level::trace: return spdlog::level::trace;
    case level::debug: return spdlog::level::debug;
    case level::info: return spdlog::level::info;
    case level::warn: return spdlog::level::warn;
    case level::error: return spdlog::level::err;
    case level::critical: return spdlog::level::critical;
    case level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::shared_ptr<spdlog::logger> make_logger(const options& opts,
                                            std::string& err) {
  std::vector<spdlog::sink_ptr> sinks;
  auto mode = opts.color ? spdlog::color_mode::automatic
                         : spdlog::color_mode::never;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>(mode));
  if (!opts.file.empty()) {
    try {
      sinks.push_back(
        std::make_shared<spdlog::sinks::basic_file_sink_mt>(opts.file));
    } catch (const std::exception& e) {
      err = std::string{"cannot open log file "} + opts.file + ": " + e.what();
    }
  }
  auto lg = std::make_shared<spdlog::logger>("ferry", sinks.begin(),
                                             sinks.end());
  lg->set_pattern(pattern);
  lg->set_level(spdlog::level::trace); // filtering happens in enabled()
  // Lines are rare and matter most right before a crash: flush each one.
  lg->flush_on(spdlog::level::trace);
  return lg;
}

struct registry {
  std::mutex mtx;
  std::shared_ptr<spdlog::logger> logger;
};

registry& reg() {
  static registry r;
  return r;
}

std::shared_ptr<spdlog::logger> get_logger() {
  auto& r = reg();
  std::lock_guard<std::mutex> guard{r.mtx};
  if (!r.logger) {
    std::string ignored;
    r.logger = make_logger(options{}, ignored);
  }
  return r.logger;
}

} // namespace

const char* to_string(level x) {
  switch (x) {
    case level::trace: return "trace";
    case level::debug: return "debug";
    case level::info: return "info";
    case level::warn: return "warn";
    case level::error: return "error";
    case level::critical: return "critical";
    case level::off: return "off";
  }
  return "info";
}

std::optional<level> parse_level(std::string_view name) {
  std::string s{name};
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  if (s == "trace")
    return level::trace;
  if (s == "debug")
    return level::debug;
  if (s == "info")
    return level::info;
  if (s == "warn" || s == "warning")
    return level::warn;
  if (s == "error" || s == "err")
    return level::error;
  if (s == "critical" || s == "fatal")
    return level::critical;
  if (s == "off" || s == "none")
    return level::off;
  return std::nullopt;
}

std::string init(const options& opts) {
  std::string err;
  auto lg = make_logger(opts, err);
  {
    auto& r = reg();
    std::lock_guard<std::mutex> guard{r.mtx};
    if (r.logger)
      r.logger->flush();
    r.logger = std::move(lg);
  }
  set_level(opts.min_level);
  return err;
}

void set_level(level x) {
  detail::min_level.store(static_cast<int>(x), std::memory_order_relaxed);
}

level current_level() {
  return static_cast<level>(detail::min_level.load(std::memory_order_relaxed));
}

void flush() {
  get_logger()->flush();
}

void detail::write(level lvl, std::string_view msg) {
  get_logger()->log(to_spdlog(lvl), "{}", msg);
}

} // namespace ferry::log
