#include "gui/console_types.hpp"

#include <QDateTime>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonParseError>
#include <QTimeZone>

namespace ferry::console {

qint64 topic_row::size_bytes() const {
  qint64 n = 0;
  for (auto& p : partitions)
    n += p.size_bytes;
  return n;
}

qint64 topic_row::messages() const {
  qint64 n = 0;
  for (auto& p : partitions)
    if (p.online)
      n += std::max<qint64>(0, p.high_watermark - p.log_start);
  return n;
}

int topic_row::offline_partitions() const {
  int n = 0;
  for (auto& p : partitions)
    if (!p.online || p.leader < 0)
      ++n;
  return n;
}

int topic_row::under_replicated_partitions() const {
  int n = 0;
  for (auto& p : partitions)
    if (p.under_replicated())
      ++n;
  return n;
}

qint64 group_row::total_lag() const {
  qint64 n = 0;
  for (auto& p : partitions)
    n += std::max<qint64>(0, p.lag);
  return n;
}

QByteArray queue_group_body(const queue_group_settings& s) {
  QJsonObject o{
    {QStringLiteral("maxAttempts"), s.max_attempts},
    {QStringLiteral("initialBackoffMs"), s.initial_backoff_ms},
    {QStringLiteral("maxBackoffMs"), s.max_backoff_ms},
    {QStringLiteral("backoffMultiplier"), s.backoff_multiplier},
    {QStringLiteral("jitter"), s.jitter},
    {QStringLiteral("visibilityTimeoutMs"), s.visibility_timeout_ms},
    {QStringLiteral("ordering"), s.ordering},
    {QStringLiteral("dlqTopic"), s.dlq_topic},
    {QStringLiteral("start"), s.start},
    {QStringLiteral("delayMs"), s.delay_ms},
  };
  return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

QUrl queue_group_url(const QString& scheme, const QString& host, int port,
                     const QString& group) {
  QUrl url;
  url.setScheme(scheme);
  url.setHost(host);
  url.setPort(port);
  // Tolerant mode keeps the %2F of "a/b" (the default would encode the '%').
  url.setPath(QStringLiteral("/v1/groups/%1/queue")
                .arg(QString::fromLatin1(QUrl::toPercentEncoding(group))),
              QUrl::TolerantMode);
  return url;
}

QString start_at(const QDateTime& t) {
  return t.toUTC().toString(Qt::ISODate);
}

QString http_error_text(int status, const QByteArray& body, const QString& transport_error) {
  auto err = QJsonDocument::fromJson(body).object().value(QStringLiteral("error")).toObject();
  auto code = err.value(QStringLiteral("code")).toString();
  auto message = err.value(QStringLiteral("message")).toString();
  if (!message.isEmpty())
    return code.isEmpty() ? message : QStringLiteral("%1: %2").arg(code, message);
  if (status > 0) {
    auto text = QString::fromUtf8(body).simplified();
    return text.isEmpty() ? QStringLiteral("HTTP %1").arg(status)
                          : QStringLiteral("HTTP %1: %2").arg(status).arg(text.left(200));
  }
  return transport_error;
}

QString render_payload(const QByteArray& bytes, payload_format fmt) {
  switch (fmt) {
    case payload_format::hex: {
      QString out;
      for (qsizetype i = 0; i < bytes.size(); i += 16) {
        auto line = bytes.mid(i, 16);
        out += QString::asprintf("%08llx  ", static_cast<long long>(i));
        out += QString::fromLatin1(line.toHex(' ')).leftJustified(48, ' ');
        out += "  ";
        for (char c : line)
          out += (c >= 32 && c < 127) ? QChar(c) : QChar('.');
        out += '\n';
      }
      return out;
    }
    case payload_format::json: {
      QJsonParseError err;
      auto doc = QJsonDocument::fromJson(bytes, &err);
      if (err.error == QJsonParseError::NoError && !doc.isNull())
        return QString::fromUtf8(doc.toJson(QJsonDocument::Indented));
      return QStringLiteral("(not JSON: %1)\n%2")
        .arg(err.errorString(), QString::fromUtf8(bytes));
    }
    case payload_format::text:
    default:
      return QString::fromUtf8(bytes);
  }
}

QString format_timestamp(qint64 ms) {
  if (ms <= 0)
    return {};
  return QDateTime::fromMSecsSinceEpoch(ms, QTimeZone::utc())
    .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss.zzz"));
}

QString format_bytes(qint64 bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? QStringLiteral("%1 B").arg(bytes)
                : QStringLiteral("%1 %2").arg(v, 0, 'f', 1).arg(units[u]);
}

bool matches(const message_row& m, const browse_request& req) {
  auto cs = Qt::CaseInsensitive;
  if (!req.key_contains.isEmpty()
      && (!m.has_key || !QString::fromUtf8(m.key).contains(req.key_contains, cs)))
    return false;
  if (!req.payload_contains.isEmpty()
      && (!m.has_value
          || !QString::fromUtf8(m.value).contains(req.payload_contains, cs)))
    return false;
  if (!req.header_contains.isEmpty()) {
    bool any = false;
    for (auto& h : m.headers)
      if ((h.key + '=' + QString::fromUtf8(h.value)).contains(req.header_contains, cs)) {
        any = true;
        break;
      }
    if (!any)
      return false;
  }
  return true;
}

} // namespace ferry::console
