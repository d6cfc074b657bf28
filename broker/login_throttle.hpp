#pragma once
// login_throttle: slows down password guessing from one source (issue 16).
// Every front door that checks passwords (the HTTP gateway's Basic logins
// and bearer tokens, the Kafka listener's SASL logins) counts the failed
// logins of each client address here. After `failures_allowed` failures,
// every further attempt from that address must wait: `base` after the
// first failure over the allowance, doubling with each further one, up to
// `max`. A successful login clears the address's count.
//
// Thread-safe (one mutex). It remembers at most 65,536 addresses; past
// that it forgets them all, so memory stays bounded under a flood of
// sources (a flood from that many addresses is not slowed by this anyway).

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace ferry {

class login_throttle {
public:
  using clock = std::chrono::steady_clock;

  login_throttle(int failures_allowed, std::chrono::milliseconds base,
                 std::chrono::milliseconds max)
    : failures_allowed_(failures_allowed), base_(base), max_(max < base ? base : max) {
  }

  /// How long `source` must still wait before its next attempt is checked
  /// (zero: it may try now).
  std::chrono::milliseconds locked_for(const std::string& source,
                                       clock::time_point now = clock::now()) const;

  /// Counts a failed login of `source`; returns its failures since its last
  /// success.
  int failed(const std::string& source, clock::time_point now = clock::now());

  /// A successful login of `source`: its count starts again.
  void succeeded(const std::string& source);

private:
  struct record {
    int failures = 0;
    clock::time_point locked_until{};
  };

  int failures_allowed_;
  std::chrono::milliseconds base_;
  std::chrono::milliseconds max_;
  mutable std::mutex mtx_;
  std::map<std::string, record> sources_;
};

} // namespace ferry
