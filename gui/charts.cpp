#include "gui/charts.hpp"

#include <QtCharts/QChart>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <QPainter>

#include <algorithm>

namespace ferry::console {

line_chart::line_chart(const QString& title, const QString& unit, QWidget* parent)
  : QChartView(new QChart, parent), x_(new QValueAxis), y_(new QValueAxis) {
  auto* c = chart();
  c->setTitle(title);
  c->legend()->setAlignment(Qt::AlignBottom);
  c->setMargins(QMargins(4, 4, 4, 4));
  x_->setTitleText(QStringLiteral("seconds ago"));
  x_->setRange(-300, 0);
  x_->setLabelFormat(QStringLiteral("%d"));
  y_->setTitleText(unit);
  y_->setRange(0, 1);
  y_->setLabelFormat(QStringLiteral("%.4g"));
  c->addAxis(x_, Qt::AlignBottom);
  c->addAxis(y_, Qt::AlignLeft);
  setRenderHint(QPainter::Antialiasing);
  setMinimumHeight(200);
}

void line_chart::set_series(const QString& name, const QList<QPointF>& points) {
  auto* s = series_.value(name, nullptr);
  if (s == nullptr) {
    s = new QLineSeries;
    s->setName(name);
    chart()->addSeries(s);
    s->attachAxis(x_);
    s->attachAxis(y_);
    series_.insert(name, s);
  }
  s->replace(points);
  rescale();
}

void line_chart::clear_series() {
  for (auto* s : series_) {
    chart()->removeSeries(s);
    delete s;
  }
  series_.clear();
  rescale();
}

int line_chart::point_count(const QString& name) const {
  auto* s = series_.value(name, nullptr);
  return s == nullptr ? 0 : s->count();
}

void line_chart::rescale() {
  double lo = 0, hi = 0, left = 0;
  for (auto* s : series_)
    for (auto& p : s->points()) {
      hi = std::max(hi, p.y());
      lo = std::min(lo, p.y());
      left = std::min(left, p.x());
    }
  y_->setRange(lo, hi <= lo ? lo + 1 : hi * 1.1);
  y_->applyNiceNumbers();
  x_->setRange(std::min(-60.0, left), 0);
}

} // namespace ferry::console
