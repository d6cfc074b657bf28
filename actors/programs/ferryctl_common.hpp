#pragma once
// What every ferryctl command shares: a failure ends the command with one
// line `ferryctl: <code>: <what>` on stderr and exit code 1, and broker
// requests go through the client library's admin_client, so every command
// (topic, group, dlq, work) retries not_leader and coordinator_not_available
// the same way until --request-timeout runs out.

#include "actors/client/admin.hpp"
#include "actors/client/client_connection.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <iostream>
#include <string>
#include <utility>

namespace ferry::ctl {

/// Thrown out of commands to exit with one line on stderr.
struct failure {
  std::string text;
};

[[noreturn]] inline void fail(const caf::error& err) {
  throw failure{error_text(err)};
}

/// The answer of a broker request, or a failure.
template <class Result, class... Ts>
Result call(admin_client& admin, const Ts&... xs) {
  auto r = admin.request<Result>(xs...);
  if (!r)
    fail(r.error());
  return std::move(*r);
}

/// A broker request with no answer, or a failure.
template <class... Ts>
void call_void(admin_client& admin, const Ts&... xs) {
  if (auto err = admin.request_void(xs...))
    fail(err);
}

/// Prints a failure the way every command does; returns the exit code.
inline int report(const failure& f) {
  std::cout.flush();
  std::cerr << "ferryctl: " << f.text << std::endl;
  return 1;
}

} // namespace ferry::ctl
