// The console's models and metric math on hand-made values: every model
// passes QAbstractItemModelTester through resets and in-place updates, and
// the rows a down node or offline partition affects say so. No network.

// CAF (broker/messages.hpp) before Qt: Qt's `emit` / `signals` macros break
// CAF headers; moc (this file has Q_OBJECT) cannot parse them.
#ifndef Q_MOC_RUN
#include "broker/messages.hpp"
#include "broker/start_position.hpp"
#endif

#include "gui/console_types.hpp"
#include "gui/metrics_history.hpp"
#include "gui/models.hpp"

#include <QAbstractItemModelTester>
#include <QTimeZone>
#include <QtTest/QtTest>

using namespace ferry::console;

namespace {

partition_row part(int id, bool online = true, QList<int> replicas = {1},
                   QList<int> isr = {1}) {
  partition_row p;
  p.partition = id;
  p.leader = online ? 1 : -1;
  p.replicas = replicas;
  p.isr = isr;
  p.log_start = 10;
  p.high_watermark = 25;
  p.log_end = 25;
  p.size_bytes = 4096;
  p.online = online;
  return p;
}

topic_row topic(QString name, QList<partition_row> parts) {
  topic_row t;
  t.name = std::move(name);
  t.partitions = std::move(parts);
  t.config.insert("retention.ms", "1000");
  return t;
}

QString cell(QAbstractItemModel* m, int row, int col, int role = Qt::DisplayRole) {
  return m->data(m->index(row, col), role).toString();
}

int column_of(QAbstractItemModel* m, const QString& header) {
  for (int c = 0; c < m->columnCount(); ++c)
    if (m->headerData(c, Qt::Horizontal).toString() == header)
      return c;
  return -1;
}

/// Runs a model through empty -> rows -> same count (in place) -> fewer ->
/// empty under QAbstractItemModelTester.
template <class Row>
void exercise(table_model<Row>* m, QList<Row> rows) {
  QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(m->rowCount(), 0);
  m->set_rows(rows);
  QCOMPARE(m->rowCount(), rows.size());
  QVERIFY(m->columnCount() > 0);
  for (int r = 0; r < m->rowCount(); ++r)
    for (int c = 0; c < m->columnCount(); ++c) {
      QVERIFY(m->data(m->index(r, c)).isValid());
      QVERIFY(!m->headerData(c, Qt::Horizontal).toString().isEmpty());
    }
  m->set_rows(rows); // same count: dataChanged
  auto fewer = rows;
  fewer.removeLast();
  m->set_rows(fewer);
  QCOMPARE(m->rowCount(), fewer.size());
  m->set_rows({});
  QCOMPARE(m->rowCount(), 0);
  QVERIFY(!m->data(m->index(5, 0)).isValid());
  QVERIFY(m->row_at(0) == nullptr);
}

} // namespace

class models_test : public QObject {
  Q_OBJECT
private slots:
  void nodes_model_marks_down_nodes() {
    auto* m = make_nodes_model(this);
    QList<node_row> rows{{1, "127.0.0.1", 9092, 8080, 9464, true, true},
                         {2, "127.0.0.1", 9093, 0, 0, false, false},
                         {4, "127.0.0.1", 9095, 0, 0, true, false, false, true}};
    exercise(m, rows);
    m->set_rows(rows);
    int status = column_of(m, "Status");
    QCOMPARE(cell(m, 0, status), QString("up"));
    QCOMPARE(cell(m, 1, status), QString("down"));
    QVERIFY(m->data(m->index(1, status), Qt::ForegroundRole).isValid());
    QVERIFY(!m->data(m->index(0, status), Qt::ForegroundRole).isValid());
    QCOMPARE(cell(m, 1, column_of(m, "Metrics port")), QString("-"));
    int role = column_of(m, "Role");
    QCOMPARE(cell(m, 0, role), QString("voter"));
    QCOMPARE(cell(m, 2, role), QString("broker (removing)"));
  }

  void topics_model_shows_size_messages_and_problems() {
    auto* m = make_topics_model(this);
    auto healthy = topic("orders", {part(0), part(1)});
    healthy.messages_in_per_sec = 12.5;
    auto broken = topic("events", {part(0), part(1, false), part(2, true, {1, 2}, {1})});
    exercise(m, {healthy, broken});
    m->set_rows({healthy, broken});
    QCOMPARE(cell(m, 0, column_of(m, "Partitions")), QString("2"));
    QCOMPARE(cell(m, 0, column_of(m, "Messages")), QString("30")); // 2 x (25 - 10)
    QCOMPARE(cell(m, 0, column_of(m, "Size")), QString("8.0 KiB"));
    QCOMPARE(cell(m, 0, column_of(m, "In msg/s")), QString("12.5"));
    QCOMPARE(cell(m, 0, column_of(m, "Status")), QString("ok"));
    QCOMPARE(cell(m, 1, column_of(m, "Status")), QString("1 offline, 1 under-replicated"));
    QCOMPARE(cell(m, 1, column_of(m, "In msg/s")), QString("-"));
    // The offline partition's messages are unknown, not counted as zero.
    QCOMPARE(cell(m, 1, column_of(m, "Messages")), QString("30"));
    // A compacted topic's offsets have gaps: the span is an upper bound.
    auto table = topic("prices", {part(0)});
    table.config.insert("cleanup.policy", "compact");
    m->set_rows({table});
    QCOMPARE(cell(m, 0, column_of(m, "Messages")), QString::fromUtf8("\u2264 15"));
    QCOMPARE(cell(m, 0, column_of(m, "Cleanup")), QString("compact"));
  }

  void partitions_model_says_which_partition_is_down() {
    auto* m = make_partitions_model(this);
    exercise(m, {part(0), part(1, false), part(2, true, {1, 2}, {1})});
    m->set_rows({part(0), part(1, false), part(2, true, {1, 2}, {1})});
    int status = column_of(m, "Status");
    QCOMPARE(cell(m, 0, status), QString("ok"));
    QVERIFY(cell(m, 1, status).startsWith("offline"));
    QCOMPARE(cell(m, 1, column_of(m, "High watermark")), QString("?"));
    QCOMPARE(cell(m, 1, column_of(m, "Leader")), QString("none"));
    QCOMPARE(cell(m, 2, status), QString("under-replicated"));
    QCOMPARE(cell(m, 2, column_of(m, "Replicas")), QString("1,2"));
    QCOMPARE(cell(m, 2, column_of(m, "ISR")), QString("1"));
  }

  void partition_issues_lists_only_problem_partitions() {
    cluster_snapshot snap;
    snap.topics = {topic("a", {part(0), part(1, false)}),
                   topic("b", {part(0, true, {1, 2}, {1})})};
    auto issues = partition_issues(snap);
    QCOMPARE(issues.size(), 2);
    QCOMPARE(issues[0].topic, QString("a"));
    QCOMPARE(issues[0].partition.partition, 1);
    QCOMPARE(issues[1].topic, QString("b"));
    exercise(make_partition_issues_model(this), issues);
  }

  void groups_and_lag_models() {
    group_row g;
    g.name = "billing";
    g.mode = "stream";
    g.state = "Stable";
    g.members = {"m-1"};
    g.partitions = {{"orders", 0, "m-1", 5, 0, 10, 5, 2.5},
                    {"orders", 1, "", -1, 0, 7, 7, -1}};
    QCOMPARE(g.total_lag(), 12);
    auto* groups = make_groups_model(this);
    group_summary other{g, ""};
    other.group.name = "audit";
    exercise(groups, {group_summary{g, "growing"}, other});
    groups->set_rows({group_summary{g, "growing"}});
    QCOMPARE(cell(groups, 0, column_of(groups, "Total lag")), QString("12"));
    QCOMPARE(cell(groups, 0, column_of(groups, "Trend")), QString("growing"));
    auto* lag = make_group_lag_model(this);
    exercise(lag, g.partitions);
    lag->set_rows(g.partitions);
    QCOMPARE(cell(lag, 1, column_of(lag, "Committed")), QString("none"));
    QCOMPARE(cell(lag, 0, column_of(lag, "Lag (s)")), QString("2.5"));
    QCOMPARE(cell(lag, 1, column_of(lag, "Lag (s)")), QString("-"));
    // A stream group has no leases: its queue columns say "-".
    for (auto h : {"In flight", "Retrying", "Scheduled"}) {
      QVERIFY2(column_of(lag, h) >= 0, h);
      QCOMPARE(cell(lag, 0, column_of(lag, h)), QString("-"));
    }
    QCOMPARE(g.total_in_flight(), -1);
  }

  void queue_group_lag_model_shows_in_flight_retrying_scheduled() {
    group_row g;
    g.name = "workers";
    g.mode = "queue";
    g.partitions = {{"jobs", 0, "", 3, 0, 10, 7, 4.0},
                    {"jobs", 1, "", 0, 0, 6, 6, -1},
                    {"jobs", 2, "", -1, 0, 0, 0, -1}};
    // Partition 0: 2 leased, 1 waiting out a backoff, 3 delayed; partition
    // 1: all zero; partition 2: not scraped yet.
    g.partitions[0].in_flight = 2;
    g.partitions[0].retrying = 1;
    g.partitions[0].scheduled = 3;
    g.partitions[1].in_flight = 0;
    g.partitions[1].retrying = 0;
    g.partitions[1].scheduled = 0;
    QCOMPARE(g.total_in_flight(), 2);
    auto* lag = make_group_lag_model(this);
    exercise(lag, g.partitions);
    lag->set_rows(g.partitions);
    int in_flight = column_of(lag, "In flight"), retrying = column_of(lag, "Retrying"),
        scheduled = column_of(lag, "Scheduled");
    QVERIFY(in_flight > column_of(lag, "Lag (s)") && retrying > in_flight
            && scheduled > retrying);
    QCOMPARE(cell(lag, 0, in_flight), QString("2"));
    QCOMPARE(cell(lag, 0, retrying), QString("1"));
    QCOMPARE(cell(lag, 0, scheduled), QString("3"));
    // Numbers (they sort as numbers), not text.
    QCOMPARE(lag->data(lag->index(0, in_flight)).typeId(), QMetaType::LongLong);
    QCOMPARE(cell(lag, 1, in_flight), QString("0"));
    QCOMPARE(cell(lag, 1, retrying), QString("0"));
    QCOMPARE(cell(lag, 1, scheduled), QString("0"));
    QCOMPARE(cell(lag, 2, in_flight), QString("-"));
    QCOMPARE(cell(lag, 2, retrying), QString("-"));
    QCOMPARE(cell(lag, 2, scheduled), QString("-"));
    // Nothing known anywhere: no total either.
    for (auto& p : g.partitions)
      p.in_flight = -1;
    QCOMPARE(g.total_in_flight(), -1);
  }

  void queue_group_config_from_settings() {
    // The defaults are the broker's.
    QVERIFY(to_queue_group_config(queue_group_settings{}) == ferry::queue_group_config{});
    QCOMPARE(queue_group_settings{}.start, ferry::start_earliest);
    QCOMPARE(queue_group_settings::start_latest, ferry::start_latest);

    // Every setting reaches its field (none at its default).
    queue_group_settings s;
    s.group = "workers"; // the request's other argument
    s.start = ferry::start_latest;
    s.max_attempts = 3;
    s.initial_backoff_ms = 250;
    s.max_backoff_ms = 5000;
    s.backoff_multiplier = 1.5;
    s.jitter = 0.25;
    s.visibility_timeout_ms = 45000;
    s.ordering = "key";
    s.dlq_topic = "jobs.failed";
    s.delay_ms = 43'200'000;
    auto qc = to_queue_group_config(s);
    QCOMPARE(qc.mode, std::string("queue"));
    QCOMPARE(qc.start, int64_t{-1});
    QCOMPARE(qc.max_attempts, 3);
    QCOMPARE(qc.initial_backoff_ms, int64_t{250});
    QCOMPARE(qc.max_backoff_ms, int64_t{5000});
    QCOMPARE(qc.backoff_multiplier, 1.5);
    QCOMPARE(qc.jitter, 0.25);
    QCOMPARE(qc.visibility_timeout_ms, int64_t{45000});
    QCOMPARE(qc.ordering, std::string("key"));
    QCOMPARE(qc.dlq_topic, std::string("jobs.failed"));
    QCOMPARE(qc.delay_ms, int64_t{43'200'000});
    ferry::queue_group_config want;
    want.start = -1;
    want.max_attempts = 3;
    want.initial_backoff_ms = 250;
    want.max_backoff_ms = 5000;
    want.backoff_multiplier = 1.5;
    want.jitter = 0.25;
    want.visibility_timeout_ms = 45000;
    want.ordering = "key";
    want.dlq_topic = "jobs.failed";
    want.delay_ms = 43'200'000;
    QVERIFY(qc == want);

    // A time is epoch ms, whatever its zone: 10:00 at +02:00 is 08:00 UTC,
    // 2026-12-01T08:00:00Z = 1796112000000.
    s.start = start_at(QDateTime(QDate(2026, 12, 1), QTime(10, 0), QTimeZone(2 * 3600)));
    QCOMPARE(s.start, qint64{1'796'112'000'000});
    QCOMPARE(to_queue_group_config(s).start, int64_t{1'796'112'000'000});
    QCOMPARE(start_at(QDateTime(QDate(2026, 12, 1), QTime(8, 0, 5, 250), QTimeZone::utc())),
             qint64{1'796'112'005'250});
    QCOMPARE(start_at(QDateTime(QDate(1970, 1, 1), QTime(0, 0), QTimeZone::utc())), qint64{0});
  }

  void messages_and_dlq_models() {
    message_row m;
    m.topic = "orders";
    m.offset = 7;
    m.has_key = true;
    m.key = "k1";
    m.value = "{\"id\":1}";
    m.headers = {{"trace", "abc"}};
    message_row tomb = m;
    tomb.offset = 8;
    tomb.has_value = false;
    auto* msgs = make_messages_model(this);
    exercise(msgs, {m, tomb});
    msgs->set_rows({m, tomb});
    QCOMPARE(cell(msgs, 0, column_of(msgs, "Headers")), QString("trace=abc"));
    QCOMPARE(cell(msgs, 1, column_of(msgs, "Value")), QString("(null)"));

    dlq_row d;
    d.topic = "orders.billing.dlq";
    d.groups = {"billing"};
    d.depth = 3;
    exercise(make_dlqs_model(this), {d, d});
    dlq_record_row r;
    r.message = m;
    r.original_topic = "orders";
    r.original_partition = 0;
    r.original_offset = 41;
    r.error = "bad payload";
    auto r2 = r;
    r2.error = "timeout";
    auto r3 = r;
    auto* recs = make_dlq_records_model(this);
    exercise(recs, {r, r2, r3});
    recs->set_rows({r});
    QCOMPARE(cell(recs, 0, column_of(recs, "Original")), QString("orders[0]@41"));
    auto groups = group_by_error({r, r2, r3});
    QCOMPARE(groups.size(), 2);
    QCOMPARE(groups[0].error, QString("bad payload"));
    QCOMPARE(groups[0].count, 2);
    exercise(make_error_counts_model(this), groups);
  }

  void browse_filters_look_at_key_headers_and_payload() {
    message_row m;
    m.has_key = true;
    m.key = "user-42";
    m.value = "hello World";
    m.headers = {{"trace", "abc"}};
    browse_request req;
    QVERIFY(matches(m, req));
    req.key_contains = "USER";
    QVERIFY(matches(m, req));
    req.payload_contains = "world";
    QVERIFY(matches(m, req));
    req.header_contains = "trace=ab";
    QVERIFY(matches(m, req));
    req.header_contains = "trace=zz";
    QVERIFY(!matches(m, req));
    browse_request only_key;
    only_key.key_contains = "x";
    m.has_key = false;
    QVERIFY(!matches(m, only_key));
  }

  void payload_renders_as_text_json_and_hex() {
    QByteArray json = "{\"a\":1,\"b\":[1,2]}";
    QVERIFY(render_payload(json, payload_format::json).contains("\n    \"a\": 1"));
    QVERIFY(render_payload("nope", payload_format::json).startsWith("(not JSON"));
    auto hex = render_payload(QByteArray("AB\x01", 3), payload_format::hex);
    QVERIFY(hex.startsWith("00000000  41 42 01"));
    QVERIFY(hex.contains("AB."));
    QCOMPARE(render_payload("plain", payload_format::text), QString("plain"));
    QCOMPARE(format_timestamp(0), QString());
    QCOMPARE(format_timestamp(1000), QString("1970-01-01 00:00:01.000"));
  }

  void metrics_text_parses_with_labels() {
    auto s = parse_metrics(
      "# HELP ferry_messages_in_total x\n"
      "# TYPE ferry_messages_in_total counter\n"
      "ferry_messages_in_total{topic=\"orders\"} 10\n"
      "ferry_messages_in_total{topic=\"a\\\"b\"} 2.5e1\n"
      "ferry_raft_term 3\n"
      "garbage\n");
    QCOMPARE(s.size(), 3);
    QCOMPARE(s[0].labels.value("topic"), QString("orders"));
    QCOMPARE(s[1].labels.value("topic"), QString("a\"b"));
    QCOMPARE(s[1].value, 25.0);
    QCOMPARE(s[2].name, QString("ferry_raft_term"));
  }

  void metrics_text_unescapes_labels_takes_timestamps_rejects_junk() {
    auto s = parse_metrics("ferry_bytes_in_total{topic=\"a}b,c\",note=\"x\\ny\"} 7 1712345678901\r\n"
                           "ferry_raft_term 1 junk\n");
    QCOMPARE(s.size(), 1);
    QCOMPARE(s[0].labels.value("topic"), QString("a}b,c"));
    QCOMPARE(s[0].labels.value("note"), QString("x\ny"));
    QCOMPARE(s[0].value, 7.0);
  }

  void history_derives_rates_and_p99() {
    metrics_history h;
    auto scrape = [](double in_a, double in_b, double fast, double slow) {
      return parse_metrics(
        QString("ferry_messages_in_total{topic=\"a\"} %1\n"
                "ferry_messages_in_total{topic=\"b\"} %2\n"
                "ferry_produce_latency_seconds_bucket{topic=\"a\",le=\"0.001\"} %3\n"
                "ferry_produce_latency_seconds_bucket{topic=\"a\",le=\"0.01\"} %4\n"
                "ferry_produce_latency_seconds_bucket{topic=\"a\",le=\"+Inf\"} %4\n")
          .arg(in_a)
          .arg(in_b)
          .arg(fast)
          .arg(fast + slow));
    };
    h.add(1000, scrape(0, 0, 0, 0));
    h.add(3000, scrape(100, 20, 98, 2));
    auto all = h.rate("ferry_messages_in_total");
    QCOMPARE(all.size(), 1);
    QCOMPARE(all[0].y(), 60.0); // 120 records in 2 s
    QCOMPARE(all[0].x(), 0.0);
    QCOMPARE(h.rate("ferry_messages_in_total", {{"topic", "b"}})[0].y(), 10.0);
    auto p99 = h.quantile("ferry_produce_latency_seconds", 0.99);
    QCOMPARE(p99.size(), 1);
    // 98 of 100 below 1 ms; the 99th lies halfway into (1 ms, 10 ms].
    QVERIFY(qAbs(p99[0].y() - 0.0055) < 1e-9);
    QCOMPARE(h.latest("ferry_messages_in_total"), 120.0);
    QCOMPARE(h.latest("nosuch"), -1.0);
    // A counter reset (restart) is not a negative rate.
    h.add(5000, scrape(4, 0, 0, 0));
    QCOMPARE(h.rate("ferry_messages_in_total").back().y(), 2.0);
  }

  void lag_trend_tells_growing_shrinking_and_stalled() {
    QList<QPointF> growing{{-40, 100}, {-20, 200}, {0, 300}};
    QList<QPointF> shrinking{{-40, 300}, {-20, 200}, {0, 100}};
    QList<QPointF> flat{{-40, 100}, {-20, 100}, {0, 100}};
    QList<QPointF> consuming{{-20, 5}, {0, 5}};
    QList<QPointF> idle{{-20, 0}, {0, 0}};
    QCOMPARE(lag_trend(growing, consuming), QString("growing"));
    QCOMPARE(lag_trend(shrinking, consuming), QString("shrinking"));
    QCOMPARE(lag_trend(flat, consuming), QString("steady"));
    QCOMPARE(lag_trend(flat, idle), QString("stalled"));
    QCOMPARE(lag_trend({{-20, 5}, {0, 0}}, idle), QString("caught up"));
    QCOMPARE(lag_trend({{0, 5}}, idle), QString());
  }
};

QTEST_MAIN(models_test)
#include "models_test.moc"
