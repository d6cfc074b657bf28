#include "gui/views.hpp"

#include "gui/charts.hpp"
#include "gui/console_client.hpp"
#include "gui/metrics_sampler.hpp"

#include <QComboBox>
#include <QDateTimeEdit>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QSet>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTimeZone>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace ferry::console {

namespace {

QTableView* make_table(QAbstractItemModel* model, QWidget* parent) {
  auto* t = new QTableView(parent);
  t->setModel(model);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setAlternatingRowColors(true);
  t->verticalHeader()->hide();
  t->horizontalHeader()->setStretchLastSection(true);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setWordWrap(false);
  return t;
}

int selected_row(QTableView* t) {
  auto rows = t->selectionModel() ? t->selectionModel()->selectedRows() : QModelIndexList{};
  return rows.isEmpty() ? -1 : rows.front().row();
}

QList<int> selected_rows(QTableView* t) {
  QList<int> out;
  if (t->selectionModel())
    for (auto& i : t->selectionModel()->selectedRows())
      out.push_back(i.row());
  std::sort(out.begin(), out.end());
  return out;
}

/// Parses "k=v, k2=v2" (also newline-separated) in order, keeping
/// duplicates; "" on success, else the problem.
QString parse_pair_list(const QString& text, QList<QPair<QString, QString>>& out) {
  for (auto part : text.split(QRegularExpression(QStringLiteral("[,\\n]")), Qt::SkipEmptyParts)) {
    part = part.trimmed();
    if (part.isEmpty())
      continue;
    auto eq = part.indexOf('=');
    if (eq <= 0)
      return QStringLiteral("'%1' is not key=value").arg(part);
    out.push_back({part.left(eq).trimmed(), part.mid(eq + 1).trimmed()});
  }
  return {};
}

/// parse_pair_list into a map (the last value of a key wins).
QString parse_pairs(const QString& text, QMap<QString, QString>& out) {
  QList<QPair<QString, QString>> list;
  auto err = parse_pair_list(text, list);
  for (auto& [k, v] : list)
    out.insert(k, v);
  return err;
}

QLabel* heading(const QString& text, QWidget* parent) {
  auto* l = new QLabel(QStringLiteral("<b>%1</b>").arg(text), parent);
  return l;
}

} // namespace

confirm_fn default_confirm() {
  return [](QWidget* parent, const QString& question) {
    return QMessageBox::question(parent, QStringLiteral("Ferry console"), question)
           == QMessageBox::Yes;
  };
}

// -- cluster ---------------------------------------------------------------------

cluster_view::cluster_view(console_client*, QWidget* parent)
  : QWidget(parent),
    summary_(new QLabel(QStringLiteral("not connected"), this)),
    nodes_(make_nodes_model(this)),
    issues_(make_partition_issues_model(this)) {
  auto* lay = new QVBoxLayout(this);
  summary_->setTextFormat(Qt::RichText);
  lay->addWidget(summary_);
  lay->addWidget(heading(QStringLiteral("Nodes"), this));
  lay->addWidget(make_table(nodes_, this), 1);
  lay->addWidget(heading(QStringLiteral("Partitions offline or under-replicated"), this));
  lay->addWidget(make_table(issues_, this), 1);
}

void cluster_view::show_snapshot(const cluster_snapshot& snap) {
  int down = 0;
  for (auto& n : snap.nodes)
    if (!n.alive)
      ++down;
  int parts = 0;
  for (auto& t : snap.topics)
    parts += t.partitions.size();
  auto issues = partition_issues(snap);
  summary_->setText(
    QStringLiteral("Cluster <b>%1</b> &nbsp; controller: node %2 &nbsp; Raft term: %3 &nbsp; "
                   "nodes: %4 (%5 down) &nbsp; topics: %6 &nbsp; partitions: %7 "
                   "(%8 with problems)")
      .arg(snap.cluster_id.toHtmlEscaped(),
           snap.controller < 0 ? QStringLiteral("none") : QString::number(snap.controller))
      .arg(snap.raft_term)
      .arg(snap.nodes.size())
      .arg(down)
      .arg(snap.topics.size())
      .arg(parts)
      .arg(issues.size()));
  nodes_->set_rows(snap.nodes);
  issues_->set_rows(issues);
}

// -- topics ----------------------------------------------------------------------

topics_view::topics_view(console_client* client, metrics_sampler* metrics, QWidget* parent)
  : QWidget(parent),
    client_(client),
    metrics_(metrics),
    topics_(make_topics_model(this)),
    partitions_(make_partitions_model(this)),
    config_(new QLabel(this)) {
  auto* lay = new QVBoxLayout(this);
  auto* buttons = new QHBoxLayout;
  auto* create = new QPushButton(QStringLiteral("Create topic…"), this);
  auto* del = new QPushButton(QStringLiteral("Delete topic…"), this);
  auto* alter = new QPushButton(QStringLiteral("Alter config…"), this);
  create->setObjectName(QStringLiteral("create_topic"));
  del->setObjectName(QStringLiteral("delete_topic"));
  alter->setObjectName(QStringLiteral("alter_config"));
  buttons->addWidget(create);
  buttons->addWidget(del);
  buttons->addWidget(alter);
  buttons->addStretch();
  lay->addLayout(buttons);
  auto* split = new QSplitter(Qt::Vertical, this);
  topic_table_ = make_table(topics_, split);
  topic_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  auto* lower = new QWidget(split);
  auto* ll = new QVBoxLayout(lower);
  ll->setContentsMargins(0, 0, 0, 0);
  ll->addWidget(heading(QStringLiteral("Partitions"), lower));
  ll->addWidget(make_table(partitions_, lower), 1);
  config_->setWordWrap(true);
  config_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  ll->addWidget(config_);
  split->addWidget(topic_table_);
  split->addWidget(lower);
  lay->addWidget(split, 1);
  connect(topic_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { show_selected(); });
  connect(topics_, &QAbstractItemModel::dataChanged, this, [this] { show_selected(); });
  connect(topics_, &QAbstractItemModel::modelReset, this, [this] { show_selected(); });
  connect(create, &QPushButton::clicked, this, &topics_view::create_topic);
  connect(del, &QPushButton::clicked, this, &topics_view::delete_topic);
  connect(alter, &QPushButton::clicked, this, &topics_view::alter_config);
}

void topics_view::show_topics(const QList<topic_row>& topics) {
  auto selected = selected_topic();
  auto rows = topics;
  if (metrics_ != nullptr) {
    auto& h = metrics_->history();
    for (auto& t : rows) {
      auto r = h.rate(QStringLiteral("ferry_messages_in_total"), {{"topic", t.name}});
      if (!r.isEmpty())
        t.messages_in_per_sec = r.back().y();
      else if (h.size() >= 2)
        t.messages_in_per_sec = 0;
    }
  }
  bool same_names = rows.size() == topics_->rows().size();
  for (int i = 0; same_names && i < rows.size(); ++i)
    same_names = rows[i].name == topics_->rows()[i].name;
  if (!same_names && !topics_->rows().isEmpty())
    topics_->set_rows({}); // force a reset: row identities changed
  topics_->set_rows(rows);
  if (!selected.isEmpty())
    select_topic(selected);
}

void topics_view::select_topic(const QString& name) {
  for (int i = 0; i < topics_->rows().size(); ++i)
    if (topics_->rows()[i].name == name) {
      if (selected_row(topic_table_) != i)
        topic_table_->selectRow(i);
      return;
    }
}

QString topics_view::selected_topic() const {
  auto* r = topics_->row_at(selected_row(topic_table_));
  return r == nullptr ? QString{} : r->name;
}

void topics_view::show_selected() {
  auto* r = topics_->row_at(selected_row(topic_table_));
  if (r == nullptr) {
    partitions_->set_rows({});
    config_->setText(QStringLiteral("Select a topic to see its partitions and config."));
    return;
  }
  partitions_->set_rows(r->partitions);
  QStringList cfg;
  for (auto i = r->config.begin(); i != r->config.end(); ++i)
    cfg << QStringLiteral("%1=%2").arg(i.key(), i.value());
  config_->setText(QStringLiteral("<b>%1</b> config: %2").arg(r->name.toHtmlEscaped(), cfg.join(", ")));
}

void topics_view::create_topic() {
  QDialog dlg(this);
  dlg.setWindowTitle(QStringLiteral("Create topic"));
  auto* form = new QFormLayout(&dlg);
  auto* name = new QLineEdit(&dlg);
  auto* parts = new QSpinBox(&dlg);
  parts->setRange(1, 10000);
  parts->setValue(3);
  auto* rf = new QSpinBox(&dlg);
  rf->setRange(1, 16);
  auto* cfg = new QLineEdit(&dlg);
  cfg->setPlaceholderText(QStringLiteral("retention.ms=86400000, segment.bytes=..."));
  name->setObjectName(QStringLiteral("name"));
  parts->setObjectName(QStringLiteral("partitions"));
  rf->setObjectName(QStringLiteral("replication_factor"));
  cfg->setObjectName(QStringLiteral("config"));
  form->addRow(QStringLiteral("Name"), name);
  form->addRow(QStringLiteral("Partitions"), parts);
  form->addRow(QStringLiteral("Replication factor"), rf);
  form->addRow(QStringLiteral("Config"), cfg);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dlg);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
  if (dlg.exec() != QDialog::Accepted)
    return;
  QMap<QString, QString> config;
  if (auto err = parse_pairs(cfg->text(), config); !err.isEmpty()) {
    emit client_->failed(QStringLiteral("create topic"), err);
    return;
  }
  client_->create_topic(name->text().trimmed(), parts->value(), rf->value(), config);
}

void topics_view::delete_topic() {
  auto name = selected_topic();
  if (name.isEmpty())
    return;
  if (confirm(this, QStringLiteral("Delete topic '%1' and all its data?").arg(name)))
    client_->delete_topic(name);
}

void topics_view::alter_config() {
  auto* row = topics_->row_at(selected_row(topic_table_));
  if (row == nullptr)
    return;
  auto name = row->name;
  auto current = row->config;
  // The dialog starts with the topic's config, one key=value per line: the
  // operator edits rather than retypes, and only the keys whose value
  // changed (or that are new) are sent.
  QStringList lines;
  for (auto i = current.begin(); i != current.end(); ++i)
    lines << QStringLiteral("%1=%2").arg(i.key(), i.value());
  bool ok = false;
  auto text = QInputDialog::getMultiLineText(this, QStringLiteral("Alter config of %1").arg(name),
                                             QStringLiteral("key=value, one per line "
                                                            "(retention.ms, retention.bytes, "
                                                            "segment.bytes, segment.ms, "
                                                            "max.message.bytes, "
                                                            "min.insync.replicas)"),
                                             lines.join('\n'), &ok);
  if (!ok || text.trimmed().isEmpty())
    return;
  QMap<QString, QString> config;
  if (auto err = parse_pairs(text, config); !err.isEmpty()) {
    emit client_->failed(QStringLiteral("alter topic %1").arg(name), err);
    return;
  }
  QMap<QString, QString> changed;
  for (auto i = config.begin(); i != config.end(); ++i)
    if (!current.contains(i.key()) || current.value(i.key()) != i.value())
      changed.insert(i.key(), i.value());
  if (changed.isEmpty()) {
    emit client_->done(QStringLiteral("topic %1 config unchanged").arg(name));
    return;
  }
  client_->alter_topic(name, changed);
}

// -- groups ----------------------------------------------------------------------

groups_view::groups_view(console_client* client, metrics_sampler* metrics, QWidget* parent)
  : QWidget(parent),
    client_(client),
    metrics_(metrics),
    groups_(make_groups_model(this)),
    lag_(make_group_lag_model(this)),
    trend_(new QLabel(this)),
    lag_chart_(new line_chart(QStringLiteral("Lag"), QStringLiteral("records"), this)),
    rate_chart_(new line_chart(QStringLiteral("Consume rate"), QStringLiteral("records/s"), this)) {
  auto* lay = new QVBoxLayout(this);
  auto* buttons = new QHBoxLayout;
  auto* create = new QPushButton(QStringLiteral("Create queue group…"), this);
  create->setObjectName(QStringLiteral("create_queue_group"));
  buttons->addWidget(create);
  buttons->addStretch();
  lay->addLayout(buttons);
  auto* split = new QSplitter(Qt::Vertical, this);
  group_table_ = make_table(groups_, split);
  group_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  auto* mid = new QWidget(split);
  auto* ml = new QVBoxLayout(mid);
  ml->setContentsMargins(0, 0, 0, 0);
  trend_->setObjectName(QStringLiteral("group_summary"));
  ml->addWidget(trend_);
  ml->addWidget(make_table(lag_, mid), 1);
  auto* charts = new QWidget(split);
  auto* cl = new QHBoxLayout(charts);
  cl->setContentsMargins(0, 0, 0, 0);
  cl->addWidget(lag_chart_);
  cl->addWidget(rate_chart_);
  split->addWidget(group_table_);
  split->addWidget(mid);
  split->addWidget(charts);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  split->setStretchFactor(2, 2);
  lay->addWidget(split, 1);
  connect(group_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { show_selected(); });
  connect(groups_, &QAbstractItemModel::dataChanged, this, [this] { show_selected(); });
  connect(groups_, &QAbstractItemModel::modelReset, this, [this] { show_selected(); });
  if (metrics_ != nullptr)
    connect(metrics_, &metrics_sampler::sampled, this, [this] { update_charts(); });
  connect(create, &QPushButton::clicked, this, &groups_view::create_queue_group);
  connect(client_, &console_client::done, this, [this](const QString& what) {
    // queue_group_created()'s text with the group captured (letters and
    // digits are not escaped).
    static const QRegularExpression made(QRegularExpression::anchoredPattern(
      QRegularExpression::escape(console_client::queue_group_created(QStringLiteral("GROUP0NAME")))
        .replace(QStringLiteral("GROUP0NAME"), QStringLiteral("(.+)"))));
    if (auto m = made.match(what); m.hasMatch())
      select_when_listed_ = m.captured(1);
  });
}

void groups_view::show_groups(const QList<group_row>& groups) {
  auto* cur = groups_->row_at(selected_row(group_table_));
  auto selected = cur == nullptr ? QString{} : cur->group.name;
  QList<group_summary> rows;
  for (auto g : groups) {
    group_summary s;
    if (metrics_ != nullptr) {
      auto& h = metrics_->history();
      for (auto& p : g.partitions) {
        auto v = h.latest(QStringLiteral("ferry_consumergroup_lag_seconds"),
                          {{"group", g.name}, {"topic", p.topic},
                           {"partition", QString::number(p.partition)}});
        p.lag_seconds = v;
        if (g.mode == QStringLiteral("queue")) {
          // ferry_queue_records by state; -1 (shown "-") until scraped.
          auto records = [&](const char* state) {
            auto n = h.latest(QStringLiteral("ferry_queue_records"),
                              {{"group", g.name}, {"topic", p.topic},
                               {"partition", QString::number(p.partition)},
                               {"state", QString::fromLatin1(state)}});
            return n < 0 ? qint64{-1} : static_cast<qint64>(std::llround(n));
          };
          p.in_flight = records("leased");
          p.retrying = records("retrying");
          p.scheduled = records("scheduled");
        }
      }
      auto lag = h.gauge(QStringLiteral("ferry_consumergroup_lag"), {{"group", g.name}});
      auto rate = h.rate(QStringLiteral("ferry_consumergroup_committed_offset"),
                         {{"group", g.name}});
      // Trend over the last minute.
      auto recent = [](QList<QPointF> pts) {
        pts.erase(std::remove_if(pts.begin(), pts.end(),
                                 [](const QPointF& p) { return p.x() < -60; }),
                  pts.end());
        return pts;
      };
      s.trend = lag_trend(recent(lag), recent(rate));
      if (s.trend.isEmpty() && g.total_lag() == 0)
        s.trend = QStringLiteral("caught up");
    }
    s.group = g;
    rows.push_back(s);
  }
  bool same = rows.size() == groups_->rows().size();
  for (int i = 0; same && i < rows.size(); ++i)
    same = rows[i].group.name == groups_->rows()[i].group.name;
  if (!same && !groups_->rows().isEmpty())
    groups_->set_rows({});
  groups_->set_rows(rows);
  if (!select_when_listed_.isEmpty()) {
    for (auto& r : rows)
      if (r.group.name == select_when_listed_) {
        selected = select_when_listed_;
        select_when_listed_.clear();
        break;
      }
  }
  if (!selected.isEmpty())
    select_group(selected);
}

QString groups_view::selected_group() const {
  auto* r = groups_->row_at(selected_row(group_table_));
  return r == nullptr ? QString{} : r->group.name;
}

void groups_view::create_queue_group() {
  const queue_group_settings defaults; // the broker's defaults
  QDialog dlg(this);
  dlg.setWindowTitle(QStringLiteral("Create queue group"));
  auto* form = new QFormLayout(&dlg);
  auto* name = new QLineEdit(&dlg);
  name->setPlaceholderText(QStringLiteral("group name"));
  auto* start = new QComboBox(&dlg);
  start->addItem(QStringLiteral("earliest (each partition's log start)"),
                 QStringLiteral("earliest"));
  start->addItem(QStringLiteral("latest (records after the first read)"),
                 QStringLiteral("latest"));
  start->addItem(QStringLiteral("at a time (UTC)"), QString{});
  start->setCurrentIndex(defaults.start == queue_group_settings::start_latest ? 1 : 0);
  auto* start_time = new QDateTimeEdit(&dlg);
  start_time->setTimeSpec(Qt::UTC);
  start_time->setDisplayFormat(QStringLiteral("yyyy-MM-dd HH:mm:ss 'UTC'"));
  start_time->setCalendarPopup(true);
  // Start positions before the epoch would be the broker's -1 / -2.
  start_time->setMinimumDateTime(QDateTime::fromMSecsSinceEpoch(0, Qt::UTC));
  auto now = QDateTime::currentDateTimeUtc();
  start_time->setDateTime(now.addSecs(-now.time().second()));
  start_time->setEnabled(false);
  auto* attempts = new QSpinBox(&dlg);
  attempts->setRange(1, 1'000'000);
  attempts->setValue(defaults.max_attempts);
  auto ms_box = [&dlg](int lo, int hi, qint64 value) {
    auto* box = new QSpinBox(&dlg);
    box->setRange(lo, hi);
    box->setSuffix(QStringLiteral(" ms"));
    box->setGroupSeparatorShown(true);
    box->setValue(static_cast<int>(value));
    return box;
  };
  auto* initial_backoff = ms_box(0, 86'400'000, defaults.initial_backoff_ms);
  auto* max_backoff = ms_box(0, 86'400'000, defaults.max_backoff_ms);
  auto* multiplier = new QDoubleSpinBox(&dlg);
  multiplier->setRange(1.0, 100.0);
  multiplier->setDecimals(2);
  multiplier->setSingleStep(0.5);
  multiplier->setValue(defaults.backoff_multiplier);
  auto* jitter = new QDoubleSpinBox(&dlg);
  jitter->setRange(0.0, 1.0);
  jitter->setDecimals(2);
  jitter->setSingleStep(0.1);
  jitter->setValue(defaults.jitter);
  auto* visibility = ms_box(1, 43'200'000, defaults.visibility_timeout_ms);
  auto* ordering = new QComboBox(&dlg);
  ordering->addItem(QStringLiteral("none (any record to any member)"), QStringLiteral("none"));
  ordering->addItem(QStringLiteral("key (one record per key at a time)"), QStringLiteral("key"));
  ordering->setCurrentIndex(ordering->findData(defaults.ordering));
  auto* dlq = new QLineEdit(defaults.dlq_topic, &dlg);
  dlq->setPlaceholderText(QStringLiteral("default: <topic>.<group>.dlq"));
  auto* delay = ms_box(0, 43'200'000, defaults.delay_ms);
  delay->setSpecialValueText(QStringLiteral("none"));
  name->setObjectName(QStringLiteral("group"));
  start->setObjectName(QStringLiteral("start"));
  start_time->setObjectName(QStringLiteral("start_time"));
  attempts->setObjectName(QStringLiteral("max_attempts"));
  initial_backoff->setObjectName(QStringLiteral("initial_backoff_ms"));
  max_backoff->setObjectName(QStringLiteral("max_backoff_ms"));
  multiplier->setObjectName(QStringLiteral("backoff_multiplier"));
  jitter->setObjectName(QStringLiteral("jitter"));
  visibility->setObjectName(QStringLiteral("visibility_timeout_ms"));
  ordering->setObjectName(QStringLiteral("ordering"));
  dlq->setObjectName(QStringLiteral("dlq_topic"));
  delay->setObjectName(QStringLiteral("delay_ms"));
  connect(start, &QComboBox::currentIndexChanged, start_time,
          [start, start_time] { start_time->setEnabled(start->currentData().toString().isEmpty()); });
  form->addRow(QStringLiteral("Group"), name);
  form->addRow(QStringLiteral("Start position"), start);
  form->addRow(QStringLiteral("Start time"), start_time);
  form->addRow(QStringLiteral("Max attempts"), attempts);
  form->addRow(QStringLiteral("Initial backoff"), initial_backoff);
  form->addRow(QStringLiteral("Max backoff"), max_backoff);
  form->addRow(QStringLiteral("Backoff multiplier"), multiplier);
  form->addRow(QStringLiteral("Jitter"), jitter);
  form->addRow(QStringLiteral("Visibility timeout"), visibility);
  form->addRow(QStringLiteral("Ordering"), ordering);
  form->addRow(QStringLiteral("DLQ topic"), dlq);
  form->addRow(QStringLiteral("Delivery delay"), delay);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dlg);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
  if (dlg.exec() != QDialog::Accepted)
    return;
  queue_group_settings s;
  s.group = name->text().trimmed();
  auto where = start->currentData().toString();
  s.start = where == QStringLiteral("earliest") ? queue_group_settings::start_earliest
            : where == QStringLiteral("latest") ? queue_group_settings::start_latest
                                                : start_at(start_time->dateTime());
  s.max_attempts = attempts->value();
  s.initial_backoff_ms = initial_backoff->value();
  s.max_backoff_ms = max_backoff->value();
  s.backoff_multiplier = multiplier->value();
  s.jitter = jitter->value();
  s.visibility_timeout_ms = visibility->value();
  s.ordering = ordering->currentData().toString();
  s.dlq_topic = dlq->text().trimmed();
  s.delay_ms = delay->value();
  client_->create_queue_group(s);
}

void groups_view::select_group(const QString& name) {
  for (int i = 0; i < groups_->rows().size(); ++i)
    if (groups_->rows()[i].group.name == name) {
      if (selected_row(group_table_) != i)
        group_table_->selectRow(i);
      return;
    }
}

void groups_view::show_selected() {
  auto* r = groups_->row_at(selected_row(group_table_));
  if (r == nullptr) {
    lag_->set_rows({});
    trend_->setText(QStringLiteral("Select a group to see its partitions, lag and charts."));
    lag_chart_->clear_series();
    rate_chart_->clear_series();
    return;
  }
  lag_->set_rows(r->group.partitions);
  // Queue groups: the records leased to members right now, once /metrics
  // has them.
  auto in_flight = r->group.total_in_flight();
  trend_->setText(QStringLiteral("<b>%1</b> (%2, %3, generation %4, assignor %5) &nbsp; total lag "
                                 "%6%7 &nbsp; trend: <b>%8</b> &nbsp; members: %9")
                    .arg(r->group.name.toHtmlEscaped(), r->group.mode, r->group.state)
                    .arg(r->group.generation)
                    .arg(r->group.assignor.isEmpty() ? QStringLiteral("-") : r->group.assignor)
                    .arg(r->group.total_lag())
                    .arg(in_flight < 0 ? QString{}
                                       : QStringLiteral(" &nbsp; in flight %1").arg(in_flight))
                    .arg(r->trend.isEmpty() ? QStringLiteral("collecting samples") : r->trend)
                    .arg(r->group.members.isEmpty() ? QStringLiteral("none")
                                                    : r->group.members.join(", ")));
  update_charts();
}

void groups_view::update_charts() {
  auto* r = groups_->row_at(selected_row(group_table_));
  if (r == nullptr || metrics_ == nullptr)
    return;
  auto& h = metrics_->history();
  label_filter f{{"group", r->group.name}};
  lag_chart_->set_series(QStringLiteral("lag"),
                         h.gauge(QStringLiteral("ferry_consumergroup_lag"), f));
  rate_chart_->set_series(QStringLiteral("committed records/s"),
                          h.rate(QStringLiteral("ferry_consumergroup_committed_offset"), f));
}

// -- message browser -------------------------------------------------------------

browser_view::browser_view(console_client* client, QWidget* parent)
  : QWidget(parent), client_(client), messages_(make_messages_model(this)) {
  auto* lay = new QVBoxLayout(this);
  auto* where = new QHBoxLayout;
  topic_ = new QComboBox(this);
  topic_->setMinimumWidth(160);
  partition_ = new QSpinBox(this);
  partition_->setRange(0, 9999);
  by_offset_ = new QRadioButton(QStringLiteral("from offset"), this);
  by_offset_->setChecked(true);
  auto* by_time = new QRadioButton(QStringLiteral("from time (UTC)"), this);
  offset_ = new QLineEdit(this);
  offset_->setPlaceholderText(QStringLiteral("earliest"));
  offset_->setMaximumWidth(110);
  time_ = new QDateTimeEdit(QDateTime::currentDateTimeUtc().addSecs(-3600), this);
  time_->setTimeSpec(Qt::UTC);
  time_->setDisplayFormat(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
  max_records_ = new QSpinBox(this);
  max_records_->setRange(1, 10'000'000);
  max_records_->setValue(10000);
  where->addWidget(new QLabel(QStringLiteral("Topic"), this));
  where->addWidget(topic_);
  where->addWidget(new QLabel(QStringLiteral("Partition"), this));
  where->addWidget(partition_);
  where->addWidget(by_offset_);
  where->addWidget(offset_);
  where->addWidget(by_time);
  where->addWidget(time_);
  where->addWidget(new QLabel(QStringLiteral("records to scan"), this));
  where->addWidget(max_records_);
  where->addStretch();
  lay->addLayout(where);
  auto* filters = new QHBoxLayout;
  key_filter_ = new QLineEdit(this);
  key_filter_->setPlaceholderText(QStringLiteral("key contains"));
  header_filter_ = new QLineEdit(this);
  header_filter_->setPlaceholderText(QStringLiteral("header (k=v) contains"));
  payload_filter_ = new QLineEdit(this);
  payload_filter_->setPlaceholderText(QStringLiteral("payload contains"));
  read_ = new QPushButton(QStringLiteral("Read"), this);
  cancel_ = new QPushButton(QStringLiteral("Cancel"), this);
  cancel_->setEnabled(false);
  auto* produce = new QPushButton(QStringLiteral("Produce…"), this);
  auto* reproduce = new QPushButton(QStringLiteral("Re-produce selected…"), this);
  topic_->setObjectName(QStringLiteral("topic"));
  partition_->setObjectName(QStringLiteral("partition"));
  offset_->setObjectName(QStringLiteral("offset"));
  max_records_->setObjectName(QStringLiteral("max_records"));
  key_filter_->setObjectName(QStringLiteral("key_filter"));
  header_filter_->setObjectName(QStringLiteral("header_filter"));
  payload_filter_->setObjectName(QStringLiteral("payload_filter"));
  read_->setObjectName(QStringLiteral("read"));
  cancel_->setObjectName(QStringLiteral("cancel"));
  produce->setObjectName(QStringLiteral("produce"));
  reproduce->setObjectName(QStringLiteral("reproduce"));
  filters->addWidget(key_filter_);
  filters->addWidget(header_filter_);
  filters->addWidget(payload_filter_);
  filters->addWidget(read_);
  filters->addWidget(cancel_);
  filters->addWidget(produce);
  filters->addWidget(reproduce);
  lay->addLayout(filters);
  auto* prog = new QHBoxLayout;
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_ = new QLabel(this);
  progress_->setObjectName(QStringLiteral("progress"));
  status_->setObjectName(QStringLiteral("status"));
  prog->addWidget(progress_, 1);
  prog->addWidget(status_, 2);
  lay->addLayout(prog);
  auto* split = new QSplitter(Qt::Vertical, this);
  table_ = make_table(messages_, split);
  table_->setObjectName(QStringLiteral("messages"));
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  auto* lower = new QWidget(split);
  auto* ll = new QVBoxLayout(lower);
  ll->setContentsMargins(0, 0, 0, 0);
  auto* fmt = new QHBoxLayout;
  format_ = new QComboBox(lower);
  format_->addItems({QStringLiteral("text"), QStringLiteral("JSON (pretty)"), QStringLiteral("hex")});
  fmt->addWidget(new QLabel(QStringLiteral("Payload as"), lower));
  fmt->addWidget(format_);
  fmt->addStretch();
  ll->addLayout(fmt);
  detail_ = new QPlainTextEdit(lower);
  detail_->setReadOnly(true);
  detail_->setFont(QFont(QStringLiteral("monospace")));
  ll->addWidget(detail_, 1);
  split->addWidget(table_);
  split->addWidget(lower);
  lay->addWidget(split, 1);

  connect(read_, &QPushButton::clicked, this, &browser_view::read);
  connect(cancel_, &QPushButton::clicked, client_, &console_client::cancel_browse);
  connect(produce, &QPushButton::clicked, this, [this] { produce_dialog(nullptr); });
  connect(reproduce, &QPushButton::clicked, this, [this] {
    auto* m = messages_->row_at(selected_row(table_));
    if (m == nullptr) {
      status_->setText(QStringLiteral("select a message to re-produce"));
      return;
    }
    auto copy = *m;
    produce_dialog(&copy);
  });
  connect(format_, &QComboBox::currentIndexChanged, this, [this] { show_selected(); });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { show_selected(); });
  connect(client_, &console_client::browse_matches, this, [this](const QList<message_row>& rows) {
    if (!busy_)
      return;
    bool first = messages_->rowCount() == 0;
    auto all = messages_->rows();
    all.append(rows);
    messages_->set_rows(all);
    if (first)
      table_->resizeColumnsToContents();
  });
  connect(client_, &console_client::browse_progress, this, [this](qint64 scanned, qint64 total) {
    progress_->setRange(0, static_cast<int>(std::min<qint64>(total, INT32_MAX)));
    progress_->setValue(static_cast<int>(std::min<qint64>(scanned, INT32_MAX)));
    status_->setText(QStringLiteral("scanned %1 of %2, %3 match").arg(scanned).arg(total).arg(messages_->rowCount()));
  });
  connect(client_, &console_client::browse_finished, this,
          [this](qint64 scanned, qint64 matched, bool cancelled, const QString& error) {
            busy_ = false;
            read_->setEnabled(true);
            cancel_->setEnabled(false);
            if (!error.isEmpty())
              status_->setText(QStringLiteral("stopped after %1 records: %2").arg(scanned).arg(error));
            else if (cancelled)
              status_->setText(QStringLiteral("cancelled after %1 records, %2 match").arg(scanned).arg(matched));
            else if (matched >= browse_request{}.max_matches)
              status_->setText(QStringLiteral("stopped at %1 matches after %2 records: narrow the "
                                              "filters or start later to see more")
                                 .arg(matched)
                                 .arg(scanned));
            else
              status_->setText(QStringLiteral("done: scanned %1 records, %2 match").arg(scanned).arg(matched));
            if (progress_->maximum() <= 1 && scanned == 0) {
              progress_->setRange(0, 1);
              progress_->setValue(1);
            }
          });
  connect(client_, &console_client::produced, this, [this](const QString& t, int p, qint64 o) {
    status_->setText(QStringLiteral("produced to %1[%2] at offset %3").arg(t).arg(p).arg(o));
  });
}

void browser_view::set_topics(const QList<topic_row>& topics) {
  auto cur = topic_->currentText();
  QStringList names;
  for (auto& t : topics)
    names << t.name;
  QStringList have;
  for (int i = 0; i < topic_->count(); ++i)
    have << topic_->itemText(i);
  if (have != names) {
    topic_->clear();
    topic_->addItems(names);
    if (names.contains(cur))
      topic_->setCurrentText(cur);
  }
}

void browser_view::set_topic(const QString& topic) {
  if (topic_->findText(topic) < 0)
    topic_->addItem(topic);
  topic_->setCurrentText(topic);
}

void browser_view::set_filters(const QString& key, const QString& header,
                               const QString& payload) {
  key_filter_->setText(key);
  header_filter_->setText(header);
  payload_filter_->setText(payload);
}

void browser_view::read() {
  if (topic_->currentText().isEmpty()) {
    status_->setText(QStringLiteral("choose a topic"));
    return;
  }
  browse_request req;
  req.topic = topic_->currentText();
  req.partition = partition_->value();
  if (by_offset_->isChecked()) {
    auto text = offset_->text().trimmed();
    if (text.isEmpty() || text == QStringLiteral("earliest")) {
      req.from_offset = -2;
    } else {
      bool ok = false;
      req.from_offset = text.toLongLong(&ok);
      if (!ok || req.from_offset < 0) {
        status_->setText(QStringLiteral("offset must be a number >= 0 (or empty for earliest)"));
        return;
      }
    }
  } else {
    req.from_timestamp_ms = time_->dateTime().toMSecsSinceEpoch();
  }
  req.max_records = max_records_->value();
  req.key_contains = key_filter_->text();
  req.header_contains = header_filter_->text();
  req.payload_contains = payload_filter_->text();
  messages_->set_rows({});
  detail_->clear();
  busy_ = true;
  read_->setEnabled(false);
  cancel_->setEnabled(true);
  progress_->setRange(0, 0); // busy until the first progress report
  status_->setText(QStringLiteral("reading %1[%2]…").arg(req.topic).arg(req.partition));
  client_->browse(req);
}

void browser_view::show_row(int row, payload_format fmt) {
  format_->setCurrentIndex(static_cast<int>(fmt));
  if (messages_->row_at(row) != nullptr)
    table_->selectRow(row);
}

void browser_view::show_selected() {
  auto* m = messages_->row_at(selected_row(table_));
  if (m == nullptr) {
    detail_->clear();
    return;
  }
  auto fmt = static_cast<payload_format>(format_->currentIndex());
  QString text = QStringLiteral("%1[%2] offset %3  %4 UTC\nkey: %5\n")
                   .arg(m->topic)
                   .arg(m->partition)
                   .arg(m->offset)
                   .arg(format_timestamp(m->timestamp_ms))
                   .arg(m->has_key ? QString::fromUtf8(m->key) : QStringLiteral("(null)"));
  for (auto& h : m->headers)
    text += QStringLiteral("header %1: %2\n").arg(h.key, QString::fromUtf8(h.value));
  text += QStringLiteral("\n");
  text += m->has_value ? render_payload(m->value, fmt) : QStringLiteral("(null value)");
  detail_->setPlainText(text);
}

void browser_view::produce_dialog(const message_row* base) {
  QDialog dlg(this);
  dlg.setWindowTitle(base ? QStringLiteral("Re-produce message") : QStringLiteral("Produce message"));
  auto* form = new QFormLayout(&dlg);
  auto* topic = new QLineEdit(base ? base->topic : topic_->currentText(), &dlg);
  auto* part = new QSpinBox(&dlg);
  part->setRange(-1, 9999);
  part->setSpecialValueText(QStringLiteral("partitioner"));
  // A re-produced copy goes where the original is (same partition), unless
  // the user changes it.
  part->setValue(base ? base->partition : -1);
  auto* key = new QLineEdit(base && base->has_key ? QString::fromUtf8(base->key) : QString{}, &dlg);
  auto* headers = new QLineEdit(base ? headers_text(base->headers) : QString{}, &dlg);
  auto* value = new QPlainTextEdit(base ? QString::fromUtf8(base->value) : QString{}, &dlg);
  topic->setObjectName(QStringLiteral("topic"));
  part->setObjectName(QStringLiteral("partition"));
  key->setObjectName(QStringLiteral("key"));
  headers->setObjectName(QStringLiteral("headers"));
  value->setObjectName(QStringLiteral("value"));
  form->addRow(QStringLiteral("Topic"), topic);
  form->addRow(QStringLiteral("Partition"), part);
  form->addRow(QStringLiteral("Key (empty = null)"), key);
  form->addRow(QStringLiteral("Headers k=v, …"), headers);
  form->addRow(QStringLiteral("Value"), value);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dlg);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dlg, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dlg, &QDialog::reject);
  if (dlg.exec() != QDialog::Accepted)
    return;
  message_row m;
  m.topic = topic->text().trimmed();
  m.partition = part->value();
  m.has_key = !key->text().isEmpty();
  m.key = key->text().toUtf8();
  m.value = value->toPlainText().toUtf8();
  if (base != nullptr) {
    // Fields the user left as they were are copied byte for byte (binary
    // payloads, a null value, an empty key, header order and duplicates
    // survive the text boxes).
    if (key->text() == (base->has_key ? QString::fromUtf8(base->key) : QString{})) {
      m.has_key = base->has_key;
      m.key = base->key;
    }
    if (value->toPlainText() == QString::fromUtf8(base->value)) {
      m.has_value = base->has_value;
      m.value = base->value;
    }
  }
  if (base != nullptr && headers->text() == headers_text(base->headers)) {
    m.headers = base->headers;
  } else {
    QList<QPair<QString, QString>> hs;
    if (auto err = parse_pair_list(headers->text(), hs); !err.isEmpty()) {
      status_->setText(err);
      emit client_->failed(QStringLiteral("produce to %1").arg(m.topic), err);
      return;
    }
    for (auto& [k, v] : hs)
      m.headers.push_back(header_row{k, v.toUtf8()});
  }
  client_->produce(m);
}

// -- DLQ inspector ---------------------------------------------------------------

dlq_view::dlq_view(console_client* client, QWidget* parent)
  : QWidget(parent),
    client_(client),
    dlqs_(make_dlqs_model(this)),
    errors_(make_error_counts_model(this)),
    records_(make_dlq_records_model(this)) {
  auto* lay = new QVBoxLayout(this);
  auto* split = new QSplitter(Qt::Vertical, this);
  dlq_table_ = make_table(dlqs_, split);
  dlq_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  auto* mid = new QWidget(split);
  auto* ml = new QVBoxLayout(mid);
  ml->setContentsMargins(0, 0, 0, 0);
  auto* filters = new QHBoxLayout;
  error_filter_ = new QLineEdit(mid);
  error_filter_->setPlaceholderText(QStringLiteral("error contains"));
  text_filter_ = new QLineEdit(mid);
  text_filter_->setPlaceholderText(QStringLiteral("key, value or header contains"));
  auto* load = new QPushButton(QStringLiteral("Show records"), mid);
  filters->addWidget(error_filter_);
  filters->addWidget(text_filter_);
  filters->addWidget(load);
  ml->addLayout(filters);
  auto* actions = new QHBoxLayout;
  to_topic_ = new QLineEdit(mid);
  to_topic_->setPlaceholderText(QStringLiteral("redrive to: original topic"));
  rate_ = new QSpinBox(mid);
  rate_->setRange(0, 1'000'000);
  rate_->setValue(100);
  rate_->setSuffix(QStringLiteral(" msg/s"));
  rate_->setSpecialValueText(QStringLiteral("unlimited"));
  auto* sel = new QPushButton(QStringLiteral("Redrive selected…"), mid);
  auto* range = new QPushButton(QStringLiteral("Redrive range…"), mid);
  auto* all = new QPushButton(QStringLiteral("Redrive all…"), mid);
  auto* purge = new QPushButton(QStringLiteral("Purge…"), mid);
  stop_ = new QPushButton(QStringLiteral("Stop redrive"), mid);
  stop_->setObjectName(QStringLiteral("stop_redrive"));
  stop_->setEnabled(false);
  error_filter_->setObjectName(QStringLiteral("error_filter"));
  text_filter_->setObjectName(QStringLiteral("text_filter"));
  load->setObjectName(QStringLiteral("show_records"));
  to_topic_->setObjectName(QStringLiteral("to_topic"));
  rate_->setObjectName(QStringLiteral("rate"));
  sel->setObjectName(QStringLiteral("redrive_selected"));
  range->setObjectName(QStringLiteral("redrive_range"));
  all->setObjectName(QStringLiteral("redrive_all"));
  purge->setObjectName(QStringLiteral("purge"));
  actions->addWidget(to_topic_);
  actions->addWidget(new QLabel(QStringLiteral("rate"), mid));
  actions->addWidget(rate_);
  actions->addWidget(sel);
  actions->addWidget(range);
  actions->addWidget(all);
  actions->addWidget(stop_);
  actions->addWidget(purge);
  ml->addLayout(actions);
  status_ = new QLabel(mid);
  status_->setObjectName(QStringLiteral("status"));
  ml->addWidget(status_);
  auto* inner = new QSplitter(Qt::Horizontal, mid);
  error_table_ = make_table(errors_, inner);
  error_table_->setObjectName(QStringLiteral("errors"));
  error_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  record_table_ = make_table(records_, inner);
  record_table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  inner->addWidget(error_table_);
  inner->addWidget(record_table_);
  inner->setStretchFactor(0, 1);
  inner->setStretchFactor(1, 3);
  ml->addWidget(inner, 1);
  detail_ = new QPlainTextEdit(split);
  detail_->setReadOnly(true);
  detail_->setFont(QFont(QStringLiteral("monospace")));
  split->addWidget(dlq_table_);
  split->addWidget(mid);
  split->addWidget(detail_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 2);
  split->setStretchFactor(2, 2);
  lay->addWidget(split, 1);

  connect(dlq_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { load_records(); });
  connect(load, &QPushButton::clicked, this, &dlq_view::load_records);
  connect(error_table_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    if (auto* e = errors_->row_at(i.row())) {
      error_filter_->setText(e->error);
      load_records();
    }
  });
  connect(record_table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { show_record(); });
  connect(sel, &QPushButton::clicked, this, &dlq_view::redrive_selected);
  connect(range, &QPushButton::clicked, this, &dlq_view::redrive_range);
  connect(all, &QPushButton::clicked, this, &dlq_view::redrive_all);
  connect(purge, &QPushButton::clicked, this, &dlq_view::purge);
  connect(stop_, &QPushButton::clicked, this, [this] {
    client_->cancel_redrive();
    status_->setText(QStringLiteral("stopping the redrive after the current chunk…"));
  });
  connect(client_, &console_client::failed, this, [this](const QString& what, const QString&) {
    if (what.startsWith(QStringLiteral("dlq redrive")))
      stop_->setEnabled(false);
  });
  connect(client_, &console_client::dlq_records, this,
          [this](const QString& topic, const QList<dlq_record_row>& rows, qint64 scanned,
                 bool end) {
            if (topic != selected_dlq())
              return;
            records_->set_rows({});
            records_->set_rows(rows);
            record_table_->resizeColumnsToContents();
            if (error_filter_->text().isEmpty())
              errors_->set_rows(group_by_error(rows));
            status_->setText(QStringLiteral("%1 record(s) shown, %2 scanned%3")
                               .arg(rows.size())
                               .arg(scanned)
                               .arg(end ? QString{} : QStringLiteral(" (more: narrow the filter)")));
          });
  connect(client_, &console_client::redrive_progress, this, [this](qint64 n, qint64 skipped) {
    status_->setText(QStringLiteral("redriving: %1 redriven, %2 skipped (already redriven)")
                       .arg(n)
                       .arg(skipped));
  });
  connect(client_, &console_client::done, this, [this](const QString& what) {
    if (what.startsWith(QStringLiteral("redrove")))
      stop_->setEnabled(false);
    if (what.contains(QStringLiteral("redrove")) || what.contains(QStringLiteral("purged"))) {
      status_->setText(what);
      load_records();
      client_->refresh_dlqs();
    }
  });
}

void dlq_view::show_dlqs(const QList<dlq_row>& dlqs) {
  auto selected = selected_dlq();
  bool same = dlqs.size() == dlqs_->rows().size();
  for (int i = 0; same && i < dlqs.size(); ++i)
    same = dlqs[i].topic == dlqs_->rows()[i].topic;
  if (!same && !dlqs_->rows().isEmpty())
    dlqs_->set_rows({});
  {
    QSignalBlocker block(dlq_table_->selectionModel());
    dlqs_->set_rows(dlqs);
  }
  if (!selected.isEmpty())
    select_dlq(selected);
}

void dlq_view::select_dlq(const QString& topic) {
  for (int i = 0; i < dlqs_->rows().size(); ++i)
    if (dlqs_->rows()[i].topic == topic) {
      if (selected_row(dlq_table_) != i)
        dlq_table_->selectRow(i);
      return;
    }
}

QString dlq_view::selected_dlq() const {
  auto* r = dlqs_->row_at(selected_row(dlq_table_));
  return r == nullptr ? QString{} : r->topic;
}

void dlq_view::load_records() {
  auto topic = selected_dlq();
  if (topic.isEmpty()) {
    records_->set_rows({});
    errors_->set_rows({});
    return;
  }
  status_->setText(QStringLiteral("loading %1…").arg(topic));
  client_->show_dlq(topic, error_filter_->text(), text_filter_->text(), 500);
}

QString dlq_view::detail_text() const {
  return detail_->toPlainText();
}

void dlq_view::show_record() {
  auto* r = records_->row_at(selected_row(record_table_));
  if (r == nullptr) {
    detail_->clear();
    return;
  }
  auto& m = r->message;
  QString text = QStringLiteral("%1[%2] offset %3  %4 UTC\n")
                   .arg(m.topic)
                   .arg(m.partition)
                   .arg(m.offset)
                   .arg(format_timestamp(m.timestamp_ms));
  text += QStringLiteral("original: %1[%2] offset %3, group %4, attempts %5\nerror: %6\n"
                         "first failure %7, last failure %8\n")
            .arg(r->original_topic)
            .arg(r->original_partition)
            .arg(r->original_offset)
            .arg(r->group)
            .arg(r->attempts)
            .arg(r->error, format_timestamp(r->first_failure_ms),
                 format_timestamp(r->last_failure_ms));
  text += QStringLiteral("key: %1\nheaders:\n")
            .arg(m.has_key ? QString::fromUtf8(m.key) : QStringLiteral("(null)"));
  for (auto& h : m.headers)
    text += QStringLiteral("  %1: %2\n").arg(h.key, QString::fromUtf8(h.value));
  text += QStringLiteral("value:\n") + (m.has_value ? QString::fromUtf8(m.value) : QStringLiteral("(null)"));
  detail_->setPlainText(text);
}

void dlq_view::redrive(redrive_selection sel, const QString& what) {
  auto* d = dlqs_->row_at(selected_row(dlq_table_));
  if (d == nullptr) {
    status_->setText(QStringLiteral("select a DLQ first"));
    return;
  }
  sel.dlq_topic = d->topic;
  sel.partition_count = d->partitions;
  sel.to_topic = to_topic_->text().trimmed();
  sel.rate_per_second = rate_->value();
  auto target = sel.to_topic.isEmpty() ? QStringLiteral("their original topics") : sel.to_topic;
  auto rate = sel.rate_per_second == 0 ? QStringLiteral("no rate limit")
                                       : QStringLiteral("at most %1 msg/s").arg(sel.rate_per_second);
  if (!confirm(this, QStringLiteral("Redrive %1 of %2 to %3 (%4)?").arg(what, d->topic, target, rate)))
    return;
  status_->setText(QStringLiteral("redriving %1…").arg(what));
  stop_->setEnabled(true);
  client_->redrive(sel);
}

void dlq_view::redrive_selected() {
  redrive_selection sel;
  for (int i : selected_rows(record_table_))
    if (auto* r = records_->row_at(i))
      sel.records.push_back({r->message.partition, r->message.offset});
  if (sel.records.isEmpty()) {
    status_->setText(QStringLiteral("select records to redrive"));
    return;
  }
  redrive(sel, QStringLiteral("%1 selected record(s)").arg(sel.records.size()));
}

void dlq_view::redrive_range() {
  bool ok = false;
  auto text = QInputDialog::getText(this, QStringLiteral("Redrive range"),
                                    QStringLiteral("PARTITION:FROM-TO (TO empty = the end), "
                                                   "e.g. 0:100-250"),
                                    QLineEdit::Normal, QStringLiteral("0:0-"), &ok);
  if (!ok)
    return;
  static const QRegularExpression re(QStringLiteral(R"(^\s*(\d+)\s*:\s*(\d+)\s*-\s*(\d*)\s*$)"));
  auto m = re.match(text);
  if (!m.hasMatch()) {
    status_->setText(QStringLiteral("range must look like 0:100-250"));
    return;
  }
  redrive_selection sel;
  sel.partition = m.captured(1).toInt();
  sel.from_offset = m.captured(2).toLongLong();
  sel.to_offset = m.captured(3).isEmpty() ? -1 : m.captured(3).toLongLong();
  redrive(sel, QStringLiteral("partition %1 offsets %2..%3")
                 .arg(sel.partition)
                 .arg(sel.from_offset)
                 .arg(sel.to_offset < 0 ? QStringLiteral("end") : QString::number(sel.to_offset)));
}

void dlq_view::redrive_all() {
  redrive(redrive_selection{}, QStringLiteral("all records"));
}

void dlq_view::purge() {
  auto topic = selected_dlq();
  if (topic.isEmpty())
    return;
  if (confirm(this, QStringLiteral("Purge every record of %1? This cannot be undone.").arg(topic)))
    client_->purge_dlq(topic);
}

// -- charts ----------------------------------------------------------------------

access_view::access_view(QWidget* parent)
  : QWidget(parent),
    summary_(new QLabel(QStringLiteral("ACLs: not loaded (a cluster without --auth has none)"),
                        this)),
    acls_(make_acls_model(this)) {
  auto* lay = new QVBoxLayout(this);
  summary_->setWordWrap(true);
  lay->addWidget(summary_);
  lay->addWidget(heading(QStringLiteral("ACLs (deny wins; read, write, delete, alter and "
                                        "redrive imply describe; superusers are not "
                                        "listed)"),
                         this));
  lay->addWidget(make_table(acls_, this), 1);
  lay->addWidget(new QLabel(QStringLiteral("Change them with ferryctl acl add / acl remove, "
                                           "or POST /v1/acls."),
                            this));
}

void access_view::show_acls(const QList<acl_row>& acls) {
  int deny = 0;
  QSet<QString> principals;
  for (auto& a : acls) {
    principals.insert(a.principal);
    if (a.permission == QStringLiteral("deny"))
      ++deny;
  }
  summary_->setText(QStringLiteral("%1 ACLs (%2 deny) for %3 principals")
                      .arg(acls.size())
                      .arg(deny)
                      .arg(principals.size()));
  acls_->set_rows(acls);
}

void access_view::show_error(const QString& text) {
  summary_->setText(QStringLiteral("ACLs not shown: %1").arg(text));
  acls_->set_rows({});
}

charts_view::charts_view(metrics_sampler* metrics, QWidget* parent)
  : QWidget(parent),
    metrics_(metrics),
    scope_(new QComboBox(this)),
    produce_(new line_chart(QStringLiteral("Produce rate"), QStringLiteral("msg/s"), this)),
    consume_(new line_chart(QStringLiteral("Consume rate"), QStringLiteral("msg/s"), this)),
    p99_(new line_chart(QStringLiteral("Produce latency p99"), QStringLiteral("ms"), this)),
    dlq_(new line_chart(QStringLiteral("DLQ rate"), QStringLiteral("records/s"), this)) {
  auto* lay = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(QStringLiteral("Scope"), this));
  scope_->addItem(QStringLiteral("whole cluster"));
  top->addWidget(scope_);
  top->addStretch();
  lay->addLayout(top);
  auto* grid = new QGridLayout;
  grid->addWidget(produce_, 0, 0);
  grid->addWidget(consume_, 0, 1);
  grid->addWidget(p99_, 1, 0);
  grid->addWidget(dlq_, 1, 1);
  lay->addLayout(grid, 1);
  connect(scope_, &QComboBox::currentIndexChanged, this, [this] { update_charts(); });
  connect(metrics_, &metrics_sampler::sampled, this, [this] { update_charts(); });
}

void charts_view::set_topics(const QList<topic_row>& topics) {
  auto cur = scope_->currentText();
  QStringList want{QStringLiteral("whole cluster")};
  for (auto& t : topics)
    want << QStringLiteral("topic ") + t.name;
  QStringList have;
  for (int i = 0; i < scope_->count(); ++i)
    have << scope_->itemText(i);
  if (have == want)
    return;
  QSignalBlocker block(scope_);
  scope_->clear();
  scope_->addItems(want);
  if (want.contains(cur))
    scope_->setCurrentText(cur);
}

void charts_view::update_charts() {
  auto& h = metrics_->history();
  label_filter f;
  auto scope = scope_->currentText();
  if (scope.startsWith(QStringLiteral("topic ")))
    f.insert(QStringLiteral("topic"), scope.mid(6));
  produce_->set_series(QStringLiteral("messages in/s"),
                       h.rate(QStringLiteral("ferry_messages_in_total"), f));
  consume_->set_series(QStringLiteral("messages out/s"),
                       h.rate(QStringLiteral("ferry_messages_out_total"), f));
  auto p99 = h.quantile(QStringLiteral("ferry_produce_latency_seconds"), 0.99, f);
  for (auto& p : p99)
    p.setY(p.y() * 1000.0);
  p99_->set_series(QStringLiteral("p99 ms"), p99);
  // DLQ counters are labelled with the source topic.
  dlq_->set_series(QStringLiteral("dead-lettered/s"),
                   h.rate(QStringLiteral("ferry_dlq_messages_total"), f));
}

} // namespace ferry::console
