// CAF (through broker/messages.hpp) before Qt: Qt's `emit` / `signals` macros
// break CAF headers.
#include "broker/messages.hpp"

#include "gui/console_types.hpp"

#include <QDateTime>
#include <QJsonDocument>
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

qint64 group_row::total_in_flight() const {
  qint64 n = -1;
  for (auto& p : partitions)
    if (p.in_flight >= 0)
      n = std::max<qint64>(0, n) + p.in_flight;
  return n;
}

qint64 start_at(const QDateTime& t) {
  return t.toMSecsSinceEpoch();
}

ferry::queue_group_config to_queue_group_config(const queue_group_settings& s) {
  ferry::queue_group_config qc;
  qc.mode = "queue";
  qc.max_attempts = s.max_attempts;
  qc.initial_backoff_ms = s.initial_backoff_ms;
  qc.max_backoff_ms = s.max_backoff_ms;
  qc.backoff_multiplier = s.backoff_multiplier;
  qc.jitter = s.jitter;
  qc.visibility_timeout_ms = s.visibility_timeout_ms;
  qc.ordering = s.ordering.toStdString();
  qc.dlq_topic = s.dlq_topic.toStdString();
  qc.start = s.start;
  qc.delay_ms = s.delay_ms;
  return qc;
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
