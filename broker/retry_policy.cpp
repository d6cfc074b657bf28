#include "broker/retry_policy.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry {

caf::error retry_config::validate() const {
  auto bad = [](std::string what) {
    return make_error(ec::invalid_config, "retry: " + std::move(what));
  };
  if (initial_backoff.count() < 0)
    return bad("initial backoff must not be negative");
  if (!(multiplier >= 1.0) || !std::isfinite(multiplier))
    return bad("multiplier must be a finite number >= 1");
  if (max_backoff < initial_backoff)
    return bad("max backoff must be >= the initial backoff");
  if (!(jitter >= 0.0 && jitter <= 1.0))
    return bad("jitter must be in [0, 1]");
  if (max_attempts < 1)
    return bad("max attempts must be >= 1");
  if (visibility_timeout.count() <= 0)
    return bad("visibility timeout must be positive");
  return caf::none;
}

retry_policy::retry_policy(retry_config cfg, uint64_t seed)
  : cfg_(cfg), rng_(seed != 0 ? seed : std::random_device{}()) {
  // Clamp instead of failing: the constructor cannot report an error and a
  // caller that skipped validate() still gets sane delays.
  cfg_.initial_backoff = std::max(cfg_.initial_backoff,
                                  std::chrono::milliseconds{0});
  cfg_.max_backoff = std::max(cfg_.max_backoff, cfg_.initial_backoff);
  if (!(cfg_.multiplier >= 1.0) || !std::isfinite(cfg_.multiplier))
    cfg_.multiplier = 1.0;
  if (!(cfg_.jitter >= 0.0))
    cfg_.jitter = 0.0;
  cfg_.jitter = std::min(cfg_.jitter, 1.0);
  cfg_.max_attempts = std::max(cfg_.max_attempts, int32_t{1});
}

std::chrono::milliseconds retry_policy::ceiling(int32_t failures) const {
  if (failures < 1)
    return std::chrono::milliseconds{0};
  // In double so multiplier^n cannot overflow; compared before converting.
  auto cap = static_cast<double>(cfg_.max_backoff.count());
  auto x = static_cast<double>(cfg_.initial_backoff.count())
           * std::pow(cfg_.multiplier, failures - 1);
  if (!(x < cap))
    return cfg_.max_backoff;
  return std::chrono::milliseconds{static_cast<int64_t>(x)};
}

std::chrono::milliseconds retry_policy::floor(int32_t failures) const {
  auto c = ceiling(failures).count();
  auto f = static_cast<double>(c) * (1.0 - cfg_.jitter);
  return std::chrono::milliseconds{
    std::clamp(static_cast<int64_t>(std::ceil(f)), int64_t{0}, c)};
}

std::chrono::milliseconds retry_policy::backoff(int32_t failures) {
  auto lo = floor(failures).count();
  auto hi = ceiling(failures).count();
  if (lo >= hi)
    return std::chrono::milliseconds{hi};
  std::uniform_int_distribution<int64_t> dist{lo, hi};
  return std::chrono::milliseconds{dist(rng_)};
}

} // namespace ferry
