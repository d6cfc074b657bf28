#pragma once
// metrics::family<T>: one metric family, its series (prometheus::Counter,
// Gauge or Histogram) kept by their labels in an ordered map.
//
// What prometheus::Family (prometheus-cpp 1.0.1) does, with a removal that
// costs a map lookup: that Family's Remove(T*) walks its series one by one
// to find the pointer, so removing every series of a large family costs
// the square of its size. A deleted 10,000-partition topic removed six
// partition series per replica that way: ~9 s of the scheduler's time on
// this 2-core VM before a describe was answered (tests/bench/README.md).
//
// Collected as prometheus-cpp's families are: a family without series is
// left out; a series' labels come in name order.
//
// Internal to metrics/ (includes prometheus-cpp). Thread-safe.

#include "metrics/metrics.hpp"

#include <prometheus/client_metric.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::metrics {

template <class T>
class family {
public:
  /// `buckets`: the upper bounds of a histogram's series (T = Histogram).
  family(std::string name, std::string help, std::vector<double> buckets = {})
    : name_(std::move(name)), help_(std::move(help)), buckets_(std::move(buckets)) {
  }

  /// The series with `l`, added if new.
  T& add(const labels& l) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = series_.find(l);
    if (i == series_.end())
      i = series_.emplace(l, make()).first;
    return *i->second;
  }

  /// Removes the series with `l` (if any): the next collect leaves it out.
  void remove(const labels& l) {
    std::lock_guard<std::mutex> guard{mtx_};
    series_.erase(l);
  }

  /// Appends this family (if it has series) to `out`.
  void collect(std::vector<prometheus::MetricFamily>& out) const {
    std::lock_guard<std::mutex> guard{mtx_};
    if (series_.empty())
      return;
    prometheus::MetricFamily f;
    f.name = name_;
    f.help = help_;
    f.type = T::metric_type;
    f.metric.reserve(series_.size());
    for (auto& [l, s] : series_) {
      auto m = s->Collect();
      m.label.reserve(l.size());
      for (auto& [k, v] : l)
        m.label.push_back(prometheus::ClientMetric::Label{k, v});
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }

private:
  std::unique_ptr<T> make() const {
    if constexpr (std::is_same_v<T, prometheus::Histogram>)
      return std::make_unique<T>(buckets_);
    else
      return std::make_unique<T>();
  }

  std::string name_;
  std::string help_;
  std::vector<double> buckets_;
  mutable std::mutex mtx_;
  std::map<labels, std::unique_ptr<T>> series_;
};

} // namespace ferry::metrics
