#include "gui/metrics_sampler.hpp"

#include <QDateTime>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QSslKey>
#include <QSslSocket>
#include <QFile>

namespace ferry::console {

metrics_sampler::metrics_sampler(QObject* parent)
  : QObject(parent), net_(new QNetworkAccessManager(this)) {
  connect(&timer_, &QTimer::timeout, this, &metrics_sampler::scrape);
}

metrics_sampler::~metrics_sampler() = default;

void metrics_sampler::set_url(const QUrl& url) {
  url_ = url;
}

QString metrics_sampler::set_tls(const QString& certificate, const QString& key,
                                  const QString& ca) {
  auto certs = QSslCertificate::fromPath(certificate, QSsl::Pem);
  if (certs.isEmpty())
    return QStringLiteral("no certificate in %1").arg(certificate);
  QFile key_file(key);
  if (!key_file.open(QIODevice::ReadOnly))
    return QStringLiteral("cannot read %1").arg(key);
  auto pem = key_file.readAll();
  QSslKey k(pem, QSsl::Ec, QSsl::Pem);
  if (k.isNull())
    k = QSslKey(pem, QSsl::Rsa, QSsl::Pem);
  if (k.isNull())
    return QStringLiteral("no EC or RSA private key in %1").arg(key);
  auto cas = QSslCertificate::fromPath(ca, QSsl::Pem);
  if (cas.isEmpty())
    return QStringLiteral("no CA certificate in %1").arg(ca);
  auto conf = std::make_unique<QSslConfiguration>(QSslConfiguration::defaultConfiguration());
  conf->setLocalCertificate(certs.front());
  if (certs.size() > 1)
    conf->setLocalCertificateChain(certs);
  conf->setPrivateKey(k);
  conf->setCaCertificates(cas);
  conf->setPeerVerifyMode(QSslSocket::VerifyPeer);
  ssl_ = std::move(conf);
  return {};
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
  if (ssl_)
    req.setSslConfiguration(*ssl_);
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
