#include "broker/login_throttle.hpp"

#include <algorithm>

namespace ferry {

std::chrono::milliseconds login_throttle::locked_for(const std::string& source,
                                                     clock::time_point now) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = sources_.find(source);
  if (i == sources_.end() || now >= i->second.locked_until)
    return std::chrono::milliseconds{0};
  return std::chrono::ceil<std::chrono::milliseconds>(i->second.locked_until - now);
}

int login_throttle::failed(const std::string& source, clock::time_point now) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (sources_.size() >= 65536 && sources_.count(source) == 0)
    sources_.clear();
  auto& rec = sources_[source];
  auto failures = ++rec.failures;
  auto over = failures - failures_allowed_;
  if (over >= 0) {
    auto wait = base_ * (int64_t{1} << std::min(over, 20));
    rec.locked_until = now + std::min(wait, max_);
  }
  return failures;
}

void login_throttle::succeeded(const std::string& source) {
  std::lock_guard<std::mutex> guard{mtx_};
  sources_.erase(source);
}

} // namespace ferry
