#include "gui/models.hpp"

#include <QBrush>
#include <QColor>

#include <algorithm>

namespace ferry::console {

namespace {

QString ints_text(const QList<int>& xs) {
  QStringList parts;
  for (int x : xs)
    parts.push_back(QString::number(x));
  return parts.join(',');
}

QVariant red_if(bool bad) {
  return bad ? QVariant{QBrush{QColor{0xc0, 0x20, 0x20}}} : QVariant{};
}

/// A column with a display value only (sorted numerically where numbers).
template <class Row, class F>
typename table_model<Row>::column col(QString header, F f) {
  return {std::move(header), [f](const Row& r, int role) -> QVariant {
            if (role == Qt::DisplayRole)
              return f(r);
            return {};
          }};
}

/// A column whose text turns red when `bad(row)`.
template <class Row, class F, class B>
typename table_model<Row>::column flagged(QString header, F f, B bad) {
  return {std::move(header), [f, bad](const Row& r, int role) -> QVariant {
            if (role == Qt::DisplayRole)
              return f(r);
            if (role == Qt::ForegroundRole)
              return red_if(bad(r));
            return {};
          }};
}

QString partition_state(const partition_row& p) {
  if (!p.online)
    return QStringLiteral("offline (replica unreachable)");
  if (p.leader < 0)
    return QStringLiteral("offline (no leader)");
  if (p.under_replicated())
    return QStringLiteral("under-replicated");
  return QStringLiteral("ok");
}

/// A count, or "-" when not known (negative).
QVariant count_or_dash(qint64 n) {
  return n < 0 ? QVariant{QStringLiteral("-")} : QVariant{n};
}

QString preview(const QByteArray& b, bool present) {
  if (!present)
    return QStringLiteral("(null)");
  auto s = QString::fromUtf8(b.left(200));
  s.replace('\n', ' ');
  return b.size() > 200 ? s + QStringLiteral("…") : s;
}

} // namespace

QString headers_text(const QList<header_row>& headers) {
  QStringList parts;
  for (auto& h : headers)
    parts.push_back(h.key + '=' + QString::fromUtf8(h.value));
  return parts.join(QStringLiteral(", "));
}

table_model<node_row>* make_nodes_model(QObject* parent) {
  using R = node_row;
  auto bad = [](const R& r) { return !r.alive; };
  return new table_model<R>(
    {
      col<R>("Node", [](const R& r) { return r.id; }),
      col<R>("Role", [](const R& r) {
        QString role = r.voter ? QStringLiteral("voter") : QStringLiteral("broker");
        return r.removing ? role + QStringLiteral(" (removing)") : role;
      }),
      // Port 0: not registered yet (with peer ports a voter's client port
      // is known once its registration is applied).
      col<R>("Endpoint", [](const R& r) {
        return r.port == 0 ? QStringLiteral("-") : QStringLiteral("%1:%2").arg(r.host).arg(r.port);
      }),
      flagged<R>("Status", [](const R& r) { return r.alive ? QStringLiteral("up") : QStringLiteral("down"); }, bad),
      col<R>("Controller", [](const R& r) { return r.controller ? QStringLiteral("yes") : QString{}; }),
      col<R>("HTTP port", [](const R& r) { return r.http_port == 0 ? QStringLiteral("-") : QString::number(r.http_port); }),
      col<R>("Metrics port", [](const R& r) { return r.metrics_port == 0 ? QStringLiteral("-") : QString::number(r.metrics_port); }),
    },
    parent);
}

QList<partition_issue> partition_issues(const cluster_snapshot& snap) {
  QList<partition_issue> out;
  for (auto& t : snap.topics)
    for (auto& p : t.partitions)
      if (!p.online || p.leader < 0 || p.under_replicated())
        out.push_back(partition_issue{t.name, p});
  return out;
}

table_model<partition_issue>* make_partition_issues_model(QObject* parent) {
  using R = partition_issue;
  auto bad = [](const R&) { return true; };
  return new table_model<R>(
    {
      col<R>("Topic", [](const R& r) { return r.topic; }),
      col<R>("Partition", [](const R& r) { return r.partition.partition; }),
      col<R>("Leader", [](const R& r) { return r.partition.leader; }),
      col<R>("Replicas", [](const R& r) { return ints_text(r.partition.replicas); }),
      col<R>("ISR", [](const R& r) { return ints_text(r.partition.isr); }),
      flagged<R>("Problem", [](const R& r) { return partition_state(r.partition); }, bad),
    },
    parent);
}

table_model<topic_row>* make_topics_model(QObject* parent) {
  using R = topic_row;
  auto bad = [](const R& r) {
    return r.offline_partitions() > 0 || r.under_replicated_partitions() > 0;
  };
  return new table_model<R>(
    {
      col<R>("Topic", [](const R& r) { return r.name; }),
      col<R>("Partitions", [](const R& r) { return static_cast<int>(r.partitions.size()); }),
      col<R>("RF", [](const R& r) { return r.replication_factor; }),
      col<R>("Cleanup", [](const R& r) {
        return r.config.value(QStringLiteral("cleanup.policy"), QStringLiteral("delete"));
      }),
      col<R>("Size", [](const R& r) { return format_bytes(r.size_bytes()); }),
      col<R>("Messages", [](const R& r) -> QVariant {
        // A compacted log has gaps: its offset span is only an upper bound.
        if (r.config.value(QStringLiteral("cleanup.policy")).contains(QStringLiteral("compact")))
          return QStringLiteral("\u2264 %1").arg(r.messages());
        return r.messages();
      }),
      col<R>("In msg/s", [](const R& r) {
        return r.messages_in_per_sec < 0 ? QStringLiteral("-")
                                         : QString::number(r.messages_in_per_sec, 'f', 1);
      }),
      flagged<R>("Status",
                 [](const R& r) {
                   QStringList s;
                   if (int n = r.offline_partitions())
                     s << QStringLiteral("%1 offline").arg(n);
                   if (int n = r.under_replicated_partitions())
                     s << QStringLiteral("%1 under-replicated").arg(n);
                   return s.isEmpty() ? QStringLiteral("ok") : s.join(", ");
                 },
                 bad),
    },
    parent);
}

table_model<partition_row>* make_partitions_model(QObject* parent) {
  using R = partition_row;
  auto bad = [](const R& r) { return partition_state(r) != QStringLiteral("ok"); };
  auto known = [](const R& r, qint64 v) -> QVariant {
    return r.online ? QVariant{v} : QVariant{QStringLiteral("?")};
  };
  return new table_model<R>(
    {
      col<R>("Partition", [](const R& r) { return r.partition; }),
      col<R>("Leader", [](const R& r) { return r.leader < 0 ? QStringLiteral("none") : QString::number(r.leader); }),
      col<R>("Epoch", [](const R& r) { return r.epoch; }),
      col<R>("Replicas", [](const R& r) { return ints_text(r.replicas); }),
      col<R>("ISR", [](const R& r) { return ints_text(r.isr); }),
      col<R>("Log start", [known](const R& r) { return known(r, r.log_start); }),
      col<R>("High watermark", [known](const R& r) { return known(r, r.high_watermark); }),
      col<R>("Log end", [known](const R& r) { return known(r, r.log_end); }),
      col<R>("Size", [](const R& r) { return r.online ? format_bytes(r.size_bytes) : QStringLiteral("?"); }),
      col<R>("Dirty ratio", [](const R& r) {
        return r.dirty_ratio < 0 ? QStringLiteral("-") : QString::number(r.dirty_ratio, 'f', 2);
      }),
      flagged<R>("Status", [](const R& r) { return partition_state(r); }, bad),
    },
    parent);
}

table_model<group_summary>* make_groups_model(QObject* parent) {
  using R = group_summary;
  return new table_model<R>(
    {
      col<R>("Group", [](const R& r) { return r.group.name; }),
      col<R>("Mode", [](const R& r) { return r.group.mode; }),
      col<R>("State", [](const R& r) { return r.group.state; }),
      col<R>("Members", [](const R& r) { return static_cast<int>(r.group.members.size()); }),
      col<R>("Partitions", [](const R& r) { return static_cast<int>(r.group.partitions.size()); }),
      col<R>("Total lag", [](const R& r) { return r.group.total_lag(); }),
      flagged<R>("Trend", [](const R& r) { return r.trend.isEmpty() ? QStringLiteral("-") : r.trend; },
                 [](const R& r) { return r.trend == "growing" || r.trend == "stalled"; }),
    },
    parent);
}

table_model<group_partition_row>* make_group_lag_model(QObject* parent) {
  using R = group_partition_row;
  return new table_model<R>(
    {
      col<R>("Topic", [](const R& r) { return r.topic; }),
      col<R>("Partition", [](const R& r) { return r.partition; }),
      col<R>("Member", [](const R& r) { return r.member.isEmpty() ? QStringLiteral("-") : r.member; }),
      col<R>("Committed", [](const R& r) { return r.committed < 0 ? QStringLiteral("none") : QString::number(r.committed); }),
      col<R>("End offset", [](const R& r) { return r.log_end; }),
      col<R>("Lag", [](const R& r) { return r.lag; }),
      col<R>("Lag (s)", [](const R& r) { return r.lag_seconds < 0 ? QStringLiteral("-") : QString::number(r.lag_seconds, 'f', 1); }),
      col<R>("In flight", [](const R& r) { return count_or_dash(r.in_flight); }),
      col<R>("Retrying", [](const R& r) { return count_or_dash(r.retrying); }),
      col<R>("Scheduled", [](const R& r) { return count_or_dash(r.scheduled); }),
    },
    parent);
}

table_model<message_row>* make_messages_model(QObject* parent) {
  using R = message_row;
  return new table_model<R>(
    {
      col<R>("Partition", [](const R& r) { return r.partition; }),
      col<R>("Offset", [](const R& r) { return r.offset; }),
      col<R>("Timestamp (UTC)", [](const R& r) { return format_timestamp(r.timestamp_ms); }),
      col<R>("Key", [](const R& r) { return preview(r.key, r.has_key); }),
      col<R>("Headers", [](const R& r) { return headers_text(r.headers); }),
      col<R>("Value", [](const R& r) { return preview(r.value, r.has_value); }),
    },
    parent);
}

table_model<acl_row>* make_acls_model(QObject* parent) {
  using R = acl_row;
  return new table_model<R>(
    {
      col<R>("Principal", [](const R& r) { return r.principal; }),
      flagged<R>("Permission", [](const R& r) { return r.permission; },
                 [](const R& r) { return r.permission == QStringLiteral("deny"); }),
      col<R>("Operation", [](const R& r) { return r.operation; }),
      col<R>("Resource", [](const R& r) { return r.resource_type; }),
      col<R>("Pattern", [](const R& r) { return r.pattern; }),
      col<R>("Name", [](const R& r) { return r.name; }),
    },
    parent);
}

table_model<dlq_row>* make_dlqs_model(QObject* parent) {
  using R = dlq_row;
  return new table_model<R>(
    {
      col<R>("DLQ topic", [](const R& r) { return r.topic; }),
      col<R>("Source topic", [](const R& r) { return r.source_topic.isEmpty() ? QStringLiteral("?") : r.source_topic; }),
      col<R>("Groups", [](const R& r) { return r.groups.join(", "); }),
      col<R>("Partitions", [](const R& r) { return r.partitions; }),
      flagged<R>("Depth", [](const R& r) { return r.depth; }, [](const R& r) { return r.depth > 0; }),
      col<R>("Redriven", [](const R& r) { return r.redriven; }),
      col<R>("Total", [](const R& r) { return r.total; }),
      col<R>("Oldest (UTC)", [](const R& r) { return format_timestamp(r.oldest_timestamp_ms); }),
      col<R>("Rate/s", [](const R& r) { return QString::number(r.rate_per_second, 'f', 2); }),
    },
    parent);
}

table_model<dlq_record_row>* make_dlq_records_model(QObject* parent) {
  using R = dlq_record_row;
  return new table_model<R>(
    {
      col<R>("Partition", [](const R& r) { return r.message.partition; }),
      col<R>("Offset", [](const R& r) { return r.message.offset; }),
      col<R>("Original", [](const R& r) {
        return QStringLiteral("%1[%2]@%3").arg(r.original_topic).arg(r.original_partition).arg(r.original_offset);
      }),
      col<R>("Attempts", [](const R& r) { return r.attempts; }),
      flagged<R>("Error", [](const R& r) { return r.error; }, [](const R&) { return true; }),
      col<R>("Group", [](const R& r) { return r.group; }),
      col<R>("First failure", [](const R& r) { return format_timestamp(r.first_failure_ms); }),
      col<R>("Last failure", [](const R& r) { return format_timestamp(r.last_failure_ms); }),
      col<R>("Redriven", [](const R& r) {
        return r.redriven ? QStringLiteral("yes") : (r.redrive_count > 0 ? QStringLiteral("%1x before").arg(r.redrive_count) : QStringLiteral("no"));
      }),
      col<R>("Key", [](const R& r) { return preview(r.message.key, r.message.has_key); }),
      col<R>("Value", [](const R& r) { return preview(r.message.value, r.message.has_value); }),
    },
    parent);
}

QList<error_count> group_by_error(const QList<dlq_record_row>& records) {
  QList<error_count> out;
  for (auto& r : records) {
    auto i = std::find_if(out.begin(), out.end(),
                          [&](const error_count& e) { return e.error == r.error; });
    if (i == out.end())
      out.push_back(error_count{r.error, 1});
    else
      ++i->count;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](auto& a, auto& b) { return a.count > b.count; });
  return out;
}

table_model<error_count>* make_error_counts_model(QObject* parent) {
  using R = error_count;
  return new table_model<R>(
    {
      col<R>("Error", [](const R& r) { return r.error.isEmpty() ? QStringLiteral("(none)") : r.error; }),
      col<R>("Records", [](const R& r) { return r.count; }),
    },
    parent);
}

} // namespace ferry::console
