#include "broker/audit_log.hpp"

#include "broker/error.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace ferry {

namespace {

std::string utc_now() {
  using namespace std::chrono;
  auto now = system_clock::now();
  auto secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

} // namespace

caf::expected<std::shared_ptr<audit_log>>
audit_log::open(const std::string& path) {
  auto* f = std::fopen(path.c_str(), "a");
  if (f == nullptr)
    return make_error(ec::io_error, "cannot open the audit log " + path + ": "
                                      + std::strerror(errno));
  return std::shared_ptr<audit_log>{new audit_log(f, path)};
}

audit_log::audit_log(std::FILE* f, std::string path)
  : file_(f), path_(std::move(path)) {
}

audit_log::~audit_log() {
  std::fclose(file_);
}

void audit_log::write(const audit_event& e) {
  nlohmann::json j{{"time", utc_now()},        {"principal", e.principal},
                   {"source", e.source},       {"via", e.via},
                   {"action", e.action},       {"resource", e.resource},
                   {"outcome", e.outcome}};
  if (!e.detail.empty())
    j["detail"] = e.detail;
  auto line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard<std::mutex> guard{mtx_};
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
  ++lines_;
}

uint64_t audit_log::lines() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return lines_;
}

} // namespace ferry
