#pragma once
// A titled line chart over the last minutes (x: seconds before now), one
// line per named series. Views fill it from metrics_history.

#include <QList>
#include <QMap>
#include <QPointF>
#include <QString>
#include <QtCharts/QChartView>

QT_BEGIN_NAMESPACE
class QLineSeries;
class QValueAxis;
QT_END_NAMESPACE

namespace ferry::console {

class line_chart : public QChartView {
  Q_OBJECT
public:
  line_chart(const QString& title, const QString& unit, QWidget* parent = nullptr);

  /// Replaces the points of series `name` (created on first use).
  void set_series(const QString& name, const QList<QPointF>& points);
  /// Removes every series.
  void clear_series();
  /// Points of a series (for tests).
  int point_count(const QString& name) const;

private:
  void rescale();
  QMap<QString, QLineSeries*> series_;
  QValueAxis* x_;
  QValueAxis* y_;
};

} // namespace ferry::console
