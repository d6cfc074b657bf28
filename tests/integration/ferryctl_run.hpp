#pragma once
// ferryctl as a user runs it, for the integration tests: against one node's
// endpoint, with its output; ferryctl_json parses a --json answer (a
// non-zero exit or output that is not JSON fails the test and gives null;
// ferryctl_json_or_null, for polls, gives null on a non-zero exit).
// Needs FERRYCTL_PATH (set for the integration test binaries).

#include "process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace ferry::test {

inline command_result ferryctl(const std::string& endpoint,
                               std::vector<std::string> args,
                               const std::string& input = {},
                               std::chrono::milliseconds timeout =
                                 std::chrono::seconds{60}) {
  args.insert(args.begin(), {"--broker", endpoint});
  return run_command(FERRYCTL_PATH, args, timeout, input);
}

inline nlohmann::json ferryctl_json(const std::string& endpoint,
                                    std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  auto r = ferryctl(endpoint, std::move(args));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.out;
    return nlohmann::json{};
  }
}

/// For polling until something exists: ferryctl_json, but a non-zero exit
/// (e.g. unknown_group before a client has joined) gives null instead of a
/// failure; output that is not JSON still fails.
inline nlohmann::json ferryctl_json_or_null(const std::string& endpoint,
                                            std::vector<std::string> args) {
  args.insert(args.begin(), "--json");
  auto r = ferryctl(endpoint, std::move(args));
  if (r.exit_code != 0)
    return nlohmann::json{};
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.out;
    return nlohmann::json{};
  }
}

} // namespace ferry::test
