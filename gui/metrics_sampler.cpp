#include "gui/metrics_sampler.hpp"

#include <QDateTime>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>

namespace ferry::console {

metrics_sampler::metrics_sampler(QObject* parent)
  : QObject(parent), net_(new QNetworkAccessManager(this)) {
  connect(&timer_, &QTimer::timeout, this, &metrics_sampler::scrape);
}

void metrics_sampler::set_url(const QUrl& url) {
  url_ = url;
}

void metrics_sampler::start(int interval_ms) {
  timer_.start(interval_ms);
  scrape();
}

void metrics_sampler::stop() {
  timer_.stop();
}

void metrics_sampler::scrape() {
  if (in_flight_ || !url_.isValid() || url_.isEmpty())
    return;
  in_flight_ = true;
  QNetworkRequest req(url_);
  req.setTransferTimeout(5000);
  auto* reply = net_->get(req);
  connect(reply, &QNetworkReply::finished, this, [this, reply] {
    in_flight_ = false;
    reply->deleteLater();
    if (reply->error() != QNetworkReply::NoError) {
      emit failed(QStringLiteral("metrics %1: %2").arg(url_.toString(), reply->errorString()));
      return;
    }
    history_.add(QDateTime::currentMSecsSinceEpoch(),
                 parse_metrics(QString::fromUtf8(reply->readAll())));
    emit sampled();
  });
}

} // namespace ferry::console
