#pragma once
// The audit log (issue 16): one JSON line per denied request and per admin
// change, saying who, what and from where:
//
//   {"time":"2026-12-02T05:01:02.345Z","principal":"User:alice",
//    "source":"127.0.0.1:50412","via":"http","action":"write",
//    "resource":"topic orders","outcome":"denied","detail":"..."}
//
// outcome: "denied" (authentication or authorization refused), "ok" or the
// error code of an admin change that was allowed. Secrets never appear:
// a failed login names the user it claimed, never the password.
// Thread-safe; every line is written and flushed at once (a crash loses at
// most the line being written). Lines survive restarts (the file is
// appended to).

#include <caf/expected.hpp>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace ferry {

struct audit_event {
  std::string principal; ///< "User:alice"; "anonymous" before a login
  std::string source;    ///< "ip:port"
  std::string via;       ///< "http", "caf"
  std::string action;    ///< "login", "read", "create topic", ...
  std::string resource;  ///< "topic orders", "cluster", "user bob"
  std::string outcome;   ///< "denied", "ok", an error code
  std::string detail;    ///< why, in words (optional)
};

class audit_log {
public:
  /// Opens (creates, appends to) `path`; io_error naming it.
  static caf::expected<std::shared_ptr<audit_log>> open(const std::string& path);

  ~audit_log();
  audit_log(const audit_log&) = delete;
  audit_log& operator=(const audit_log&) = delete;

  void write(const audit_event& e);

  /// Lines written since open().
  uint64_t lines() const;

  const std::string& path() const {
    return path_;
  }

private:
  audit_log(std::FILE* f, std::string path);
  mutable std::mutex mtx_;
  std::FILE* file_;
  std::string path_;
  uint64_t lines_ = 0;
};

} // namespace ferry
