#pragma once
// retry_policy: when a queue-mode record that failed may be delivered again,
// and when it has failed too often. No actor code, no clock: callers pass the
// number of failed attempts and add the delay to their own "now".
//
// Backoff after the n-th failure (n >= 1):
//
//   ceiling(n) = min(max_backoff, initial_backoff * multiplier^(n-1))
//   floor(n)   = ceiling(n) * (1 - jitter)
//   backoff(n) = uniform integer in [floor(n), ceiling(n)] milliseconds
//
// jitter = 1 is "full jitter" (uniform in [0, ceiling]), 0.5 "equal jitter"
// (half fixed, half random), 0 no jitter. Jitter spreads the retries of many
// records that failed together (a downstream outage) instead of retrying them
// in lockstep.
//
// Worked example, defaults (1 s, x2, cap 60 s, full jitter): failures 1..8 give
// ceilings 1, 2, 4, 8, 16, 32, 60, 60 s; each delay is drawn below its ceiling.
//
// Lifecycle: a value; copies draw from their own copy of the RNG. Not
// thread-safe (backoff() advances the RNG). A fixed seed gives the same
// sequence of delays on every run (std::mt19937_64 with libstdc++).

#include "broker/error.hpp"

#include <chrono>
#include <cstdint>
#include <random>

namespace ferry {

/// Jitter fractions with well-known names.
inline constexpr double full_jitter = 1.0;
inline constexpr double equal_jitter = 0.5;
inline constexpr double no_jitter = 0.0;

/// A queue-mode group's retry settings (configurable per group).
struct retry_config {
  /// Ceiling of the backoff after the first failure.
  std::chrono::milliseconds initial_backoff{1000};
  /// Growth of the ceiling per further failure; >= 1.
  double multiplier = 2.0;
  /// Cap of the ceiling; >= initial_backoff.
  std::chrono::milliseconds max_backoff{60'000};
  /// Share of the ceiling drawn at random, in [0, 1].
  double jitter = full_jitter;
  /// Failed attempts (nack, expired lease, reject) after which a record goes
  /// to the dead-letter queue; >= 1.
  int32_t max_attempts = 5;
  /// Lease length when a member does not ask for one; > 0.
  std::chrono::milliseconds visibility_timeout{30'000};

  /// ec::invalid_config naming the first setting outside its domain.
  caf::error validate() const;
};

class retry_policy {
public:
  /// @param seed seeds the jitter; 0 draws a seed from std::random_device.
  /// @pre cfg.validate() is none (values outside the domain are clamped).
  explicit retry_policy(retry_config cfg = {}, uint64_t seed = 0);

  const retry_config& config() const noexcept {
    return cfg_;
  }

  /// The largest backoff after `failures` failures; 0 for failures < 1.
  std::chrono::milliseconds ceiling(int32_t failures) const;

  /// The smallest backoff after `failures` failures.
  std::chrono::milliseconds floor(int32_t failures) const;

  /// A delay in [floor, ceiling], drawn with the policy's RNG.
  std::chrono::milliseconds backoff(int32_t failures);

  /// True once a record with `failures` failed attempts must be dead-lettered.
  bool exhausted(int32_t failures) const noexcept {
    return failures >= cfg_.max_attempts;
  }

private:
  retry_config cfg_;
  std::mt19937_64 rng_;
};

} // namespace ferry
