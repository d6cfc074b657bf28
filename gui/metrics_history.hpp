#pragma once
// Rates and percentiles from ferryd's Prometheus text (/metrics), sampled
// over time: parse_metrics() reads one scrape, metrics_history keeps the
// last minutes of scrapes and derives the series the charts draw. No
// network here (metrics_sampler fetches); tests feed text directly.

#include <QHash>
#include <QList>
#include <QMap>
#include <QPointF>
#include <QString>

#include <deque>

namespace ferry::console {

/// One series: metric name plus labels.
struct metric_sample {
  QString name;
  QMap<QString, QString> labels;
  double value = 0;
};

/// Parses Prometheus text exposition format (comments skipped, malformed
/// lines ignored): metrics::parse_text (metrics/prometheus_text.hpp) in Qt
/// types.
QList<metric_sample> parse_metrics(const QString& text);

/// Label filter: every given label must have the given value.
using label_filter = QMap<QString, QString>;

/// Scrapes over time (at most `keep_ms` old) and what the charts derive
/// from them. Times are ms since the epoch; series points are (time in s
/// relative to the newest scrape, value).
class metrics_history {
public:
  explicit metrics_history(qint64 keep_ms = 10 * 60 * 1000) : keep_ms_(keep_ms) {}

  void add(qint64 time_ms, const QList<metric_sample>& samples);
  bool empty() const { return scrapes_.empty(); }
  size_t size() const { return scrapes_.size(); }

  /// Sum of the latest values of `name` matching `filter`; nullopt-like -1
  /// when no scrape or no series matches.
  double latest(const QString& name, const label_filter& filter = {}) const;

  /// Per-second increase of the summed counter between consecutive scrapes.
  QList<QPointF> rate(const QString& name, const label_filter& filter = {}) const;

  /// Summed gauge over time.
  QList<QPointF> gauge(const QString& name, const label_filter& filter = {}) const;

  /// The q-quantile (0..1) of a histogram's observations between
  /// consecutive scrapes, in the histogram's unit; points without
  /// observations are left out.
  QList<QPointF> quantile(const QString& histogram, double q,
                          const label_filter& filter = {}) const;

private:
  struct scrape {
    qint64 time_ms;
    QList<metric_sample> samples;
  };
  double sum(const scrape& s, const QString& name, const label_filter& f) const;
  qint64 keep_ms_;
  std::deque<scrape> scrapes_;
};

/// How a group's lag moves over the points given (time in s, lag) with the
/// group's consume rate (time in s, records/s): "caught up" (lag 0),
/// "stalled" (lag > 0 and nothing consumed over the window), "growing",
/// "shrinking" or "steady"; "" with fewer than two points.
QString lag_trend(const QList<QPointF>& lag, const QList<QPointF>& consume_rate);

} // namespace ferry::console
