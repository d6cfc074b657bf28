#include "gui/metrics_history.hpp"

#include "metrics/prometheus_text.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace ferry::console {

namespace {

bool matches(const metric_sample& s, const QString& name, const label_filter& f) {
  if (s.name != name)
    return false;
  for (auto i = f.begin(); i != f.end(); ++i)
    if (s.labels.value(i.key()) != i.value())
      return false;
  return true;
}

} // namespace

QList<metric_sample> parse_metrics(const QString& text) {
  QList<metric_sample> out;
  for (auto& t : metrics::parse_text(text.toStdString())) {
    metric_sample s;
    s.name = QString::fromStdString(t.name);
    for (auto& [k, v] : t.labels)
      s.labels.insert(QString::fromStdString(k), QString::fromStdString(v));
    s.value = t.value;
    out.push_back(std::move(s));
  }
  return out;
}

void metrics_history::add(qint64 time_ms, const QList<metric_sample>& samples) {
  scrapes_.push_back(scrape{time_ms, samples});
  while (!scrapes_.empty() && scrapes_.front().time_ms < time_ms - keep_ms_)
    scrapes_.pop_front();
}

double metrics_history::sum(const scrape& s, const QString& name,
                            const label_filter& f) const {
  double total = 0;
  bool any = false;
  for (auto& m : s.samples)
    if (matches(m, name, f)) {
      total += m.value;
      any = true;
    }
  return any ? total : NAN;
}

double metrics_history::latest(const QString& name, const label_filter& f) const {
  if (scrapes_.empty())
    return -1;
  auto v = sum(scrapes_.back(), name, f);
  return std::isnan(v) ? -1 : v;
}

QList<QPointF> metrics_history::rate(const QString& name, const label_filter& f) const {
  QList<QPointF> out;
  if (scrapes_.size() < 2)
    return out;
  auto now = scrapes_.back().time_ms;
  for (size_t i = 1; i < scrapes_.size(); ++i) {
    auto& a = scrapes_[i - 1];
    auto& b = scrapes_[i];
    double dt = (b.time_ms - a.time_ms) / 1000.0;
    if (dt <= 0)
      continue;
    double va = sum(a, name, f);
    double vb = sum(b, name, f);
    if (std::isnan(vb))
      continue;
    if (std::isnan(va))
      va = 0; // the series appeared: it counted from zero
    double d = vb - va;
    if (d < 0)
      d = vb; // counter reset (restart)
    out.push_back(QPointF((b.time_ms - now) / 1000.0, d / dt));
  }
  return out;
}

QList<QPointF> metrics_history::gauge(const QString& name, const label_filter& f) const {
  QList<QPointF> out;
  if (scrapes_.empty())
    return out;
  auto now = scrapes_.back().time_ms;
  for (auto& s : scrapes_) {
    auto v = sum(s, name, f);
    if (!std::isnan(v))
      out.push_back(QPointF((s.time_ms - now) / 1000.0, v));
  }
  return out;
}

QList<QPointF> metrics_history::quantile(const QString& histogram, double q,
                                         const label_filter& f) const {
  QList<QPointF> out;
  if (scrapes_.size() < 2)
    return out;
  auto bucket = histogram + QStringLiteral("_bucket");
  auto buckets = [&](const scrape& s) {
    std::map<double, double> le; // upper bound -> cumulative count (summed)
    for (auto& m : s.samples)
      if (matches(m, bucket, f)) {
        auto bound = m.labels.value(QStringLiteral("le"));
        double ub = bound == QStringLiteral("+Inf") ? INFINITY : bound.toDouble();
        le[ub] += m.value;
      }
    return le;
  };
  auto now = scrapes_.back().time_ms;
  for (size_t i = 1; i < scrapes_.size(); ++i) {
    auto a = buckets(scrapes_[i - 1]);
    auto b = buckets(scrapes_[i]);
    if (b.empty())
      continue;
    std::map<double, double> delta;
    for (auto& [ub, c] : b)
      delta[ub] = std::max(0.0, c - (a.count(ub) ? a[ub] : 0.0));
    double total = delta.rbegin()->second;
    if (total <= 0)
      continue;
    double rank = q * total;
    double prev_ub = 0, prev_c = 0, value = 0;
    for (auto& [ub, c] : delta) {
      if (c >= rank) {
        if (std::isinf(ub))
          value = prev_ub; // as Prometheus: the highest finite bound
        else
          value = prev_ub + (ub - prev_ub) * ((rank - prev_c) / std::max(1e-12, c - prev_c));
        break;
      }
      prev_ub = ub;
      prev_c = c;
    }
    out.push_back(QPointF((scrapes_[i].time_ms - now) / 1000.0, value));
  }
  return out;
}

QString lag_trend(const QList<QPointF>& lag, const QList<QPointF>& consume_rate) {
  if (lag.size() < 2)
    return {};
  if (lag.back().y() <= 0)
    return QStringLiteral("caught up");
  double consumed = 0;
  for (auto& p : consume_rate)
    consumed += std::max(0.0, p.y());
  if (!consume_rate.isEmpty() && consumed <= 0)
    return QStringLiteral("stalled");
  // Least-squares slope of lag over time (records per second).
  double n = lag.size(), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto& p : lag) {
    sx += p.x();
    sy += p.y();
    sxx += p.x() * p.x();
    sxy += p.x() * p.y();
  }
  double den = n * sxx - sx * sx;
  double slope = den == 0 ? 0 : (n * sxy - sx * sy) / den;
  double mean = sy / n;
  double threshold = std::max(0.5, 0.001 * mean); // 0.1% of the lag per second
  if (slope > threshold)
    return QStringLiteral("growing");
  if (slope < -threshold)
    return QStringLiteral("shrinking");
  return QStringLiteral("steady");
}

} // namespace ferry::console
