#pragma once
// Scrapes ferryd's /metrics every interval with QNetworkAccessManager and
// adds each scrape to a metrics_history. The URL comes from --metrics, or
// from the node's metrics port in the cluster description.

#include "gui/metrics_history.hpp"

#include <QObject>
#include <QTimer>
#include <QUrl>

#include <memory>

QT_BEGIN_NAMESPACE
class QNetworkAccessManager;
class QSslConfiguration;
QT_END_NAMESPACE

namespace ferry::console {

class metrics_sampler : public QObject {
  Q_OBJECT
public:
  explicit metrics_sampler(QObject* parent = nullptr);
  ~metrics_sampler() override;

  void set_url(const QUrl& url);
  /// https scrapes present this client certificate and trust only `ca`.
  /// Returns what is wrong with the files ("" when they load).
  QString set_tls(const QString& certificate, const QString& key, const QString& ca);
  QUrl url() const { return url_; }
  /// Starts scraping (at once, then every interval_ms).
  void start(int interval_ms = 2000);
  void stop();
  /// Scrapes once now.
  void scrape();

  const metrics_history& history() const { return history_; }

signals:
  void sampled();
  void failed(const QString& error);

private:
  QNetworkAccessManager* net_;
  QTimer timer_;
  QUrl url_;
  metrics_history history_;
  bool in_flight_ = false;
  std::unique_ptr<QSslConfiguration> ssl_;
};

} // namespace ferry::console
