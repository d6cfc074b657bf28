#include "gui/main_window.hpp"

#include "gui/console_client.hpp"
#include "gui/metrics_sampler.hpp"
#include "gui/views.hpp"

#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStatusBar>
#include <QLineEdit>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <memory>

namespace ferry::console {

namespace {

constexpr int max_recent = 10;

QStringList recent_clusters() {
  QSettings s;
  return s.value(QStringLiteral("recent_clusters")).toStringList();
}

void remember_cluster(const QString& address) {
  QSettings s;
  auto list = s.value(QStringLiteral("recent_clusters")).toStringList();
  list.removeAll(address);
  list.prepend(address);
  while (list.size() > max_recent)
    list.removeLast();
  s.setValue(QStringLiteral("recent_clusters"), list);
}

} // namespace

main_window::main_window(console_client* client, metrics_sampler* metrics, QUrl metrics_url,
                         QWidget* parent)
  : QMainWindow(parent),
    client_(client),
    metrics_(metrics),
    metrics_fixed_(!metrics_url.isEmpty()),
    timer_(new QTimer(this)) {
  setWindowTitle(QStringLiteral("Ferry console"));
  if (metrics_fixed_)
    metrics_->set_url(metrics_url);
  auto* central = new QWidget(this);
  auto* lay = new QVBoxLayout(central);
  auto* bar = new QHBoxLayout;
  address_ = new QComboBox(central);
  address_->setObjectName(QStringLiteral("address"));
  address_->setEditable(true);
  address_->addItems(recent_clusters());
  address_->setMinimumWidth(220);
  address_->setToolTip(QStringLiteral("any node's HOST:PORT"));
  user_ = new QLineEdit(central);
  user_->setObjectName(QStringLiteral("user"));
  user_->setPlaceholderText(QStringLiteral("user"));
  user_->setToolTip(QStringLiteral("a user of a cluster started with --auth scram "
                                   "(empty: no login)"));
  user_->setMaximumWidth(120);
  password_ = new QLineEdit(central);
  password_->setObjectName(QStringLiteral("password"));
  password_->setPlaceholderText(QStringLiteral("password"));
  password_->setEchoMode(QLineEdit::Password);
  password_->setMaximumWidth(140);
  auto* go = new QPushButton(QStringLiteral("Connect"), central);
  state_ = new QLabel(QStringLiteral("not connected"), central);
  bar->addWidget(new QLabel(QStringLiteral("Cluster"), central));
  bar->addWidget(address_);
  bar->addWidget(user_);
  bar->addWidget(password_);
  bar->addWidget(go);
  bar->addWidget(state_, 1);
  lay->addLayout(bar);

  tabs_ = new QTabWidget(central);
  cluster_ = new cluster_view(client_, tabs_);
  topics_ = new topics_view(client_, metrics_, tabs_);
  groups_ = new groups_view(client_, metrics_, tabs_);
  browser_ = new browser_view(client_, tabs_);
  dlq_ = new dlq_view(client_, tabs_);
  charts_ = new charts_view(metrics_, tabs_);
  access_ = new access_view(tabs_);
  tabs_->addTab(cluster_, QStringLiteral("Cluster"));
  tabs_->addTab(topics_, QStringLiteral("Topics"));
  tabs_->addTab(groups_, QStringLiteral("Consumer groups"));
  tabs_->addTab(browser_, QStringLiteral("Messages"));
  tabs_->addTab(dlq_, QStringLiteral("DLQ"));
  tabs_->addTab(charts_, QStringLiteral("Charts"));
  tabs_->addTab(access_, QStringLiteral("Access"));
  events_ = new QListWidget(central);
  events_->setMaximumHeight(90);
  auto* split = new QSplitter(Qt::Vertical, central);
  split->addWidget(tabs_);
  split->addWidget(events_);
  split->setStretchFactor(0, 5);
  split->setStretchFactor(1, 1);
  lay->addWidget(split, 1);
  setCentralWidget(central);

  connect(go, &QPushButton::clicked, this, [this] { connect_to(address_->currentText()); });
  connect(address_->lineEdit(), &QLineEdit::returnPressed, this,
          [this] { connect_to(address_->currentText()); });
  connect(password_, &QLineEdit::returnPressed, this,
          [this] { connect_to(address_->currentText()); });
  connect(timer_, &QTimer::timeout, this, &main_window::refresh);
  connect(client_, &console_client::connection_changed, this,
          [this](bool up, const QString& detail) {
            state_->setText(detail);
            state_->setStyleSheet(up ? QString{} : QStringLiteral("color: #c02020"));
            log(detail, !up);
            if (up) {
              // Only an address that answered becomes a recent cluster.
              auto before = recent_clusters();
              remember_cluster(client_->address());
              if (recent_clusters() != before)
                show_recent(client_->address());
              refresh();
            } else {
              mark_unreachable();
            }
          });
  connect(client_, &console_client::cluster_updated, this, [this](const cluster_snapshot& snap) {
    last_snapshot_ = snap;
    show_snapshot(snap);
    browser_->set_topics(snap.topics);
    charts_->set_topics(snap.topics);
    if (!metrics_fixed_) {
      // The node we talk to tells its metrics port; reach it on the host we
      // connected to (the node may report a wildcard address).
      auto port = client_->address().section(':', -1).toInt();
      for (auto& n : snap.nodes)
        if (n.metrics_port > 0 && (n.port == port || snap.nodes.size() == 1)) {
          QUrl url(QStringLiteral("%1://%2:%3/metrics")
                     .arg(client_->uses_tls() ? QStringLiteral("https") : QStringLiteral("http"),
                          client_->host())
                     .arg(n.metrics_port));
          if (metrics_->url() != url) {
            metrics_->set_url(url);
            metrics_->start();
          }
          break;
        }
    }
  });
  connect(client_, &console_client::groups_updated, groups_, &groups_view::show_groups);
  connect(client_, &console_client::dlqs_updated, dlq_, &dlq_view::show_dlqs);
  connect(client_, &console_client::acls_updated, access_, &access_view::show_acls);
  connect(client_, &console_client::failed, this, [this](const QString& what,
                                                        const QString& error) {
    if (what == QStringLiteral("acl list"))
      access_->show_error(error);
  });
  connect(client_, &console_client::done, this, [this](const QString& what) {
    log(what, false);
    refresh();
  });
  connect(client_, &console_client::browse_finished, this,
          [this](qint64 scanned, qint64, bool, const QString& error) {
            if (!error.isEmpty())
              log(QStringLiteral("message read failed after %1 records: %2").arg(scanned).arg(error),
                  true);
          });
  connect(client_, &console_client::produced, this, [this](const QString& t, int p, qint64 o) {
    log(QStringLiteral("produced to %1[%2] at offset %3").arg(t).arg(p).arg(o), false);
  });
  connect(client_, &console_client::failed, this, [this](const QString& what, const QString& err) {
    log(QStringLiteral("%1 failed: %2").arg(what, err), true);
  });
  connect(metrics_, &metrics_sampler::failed, this,
          [this](const QString& err) { log(err, true); });
  resize(1400, 900);
}

void main_window::show_snapshot(const cluster_snapshot& snap) {
  cluster_->show_snapshot(snap);
  topics_->show_topics(snap.topics);
}

void main_window::mark_unreachable() {
  if (last_snapshot_.nodes.isEmpty())
    return;
  auto snap = last_snapshot_;
  auto port = client_->address().section(':', -1).toInt();
  QList<int> down;
  for (auto& n : snap.nodes)
    if (n.port == port || snap.nodes.size() == 1) {
      n.alive = false;
      down.push_back(n.id);
    }
  for (auto& t : snap.topics)
    for (auto& p : t.partitions)
      if (down.contains(p.leader))
        p.online = false;
  show_snapshot(snap);
}

void main_window::connect_to(const QString& address) {
  // A typed user and password replace the login given on the command line.
  if (!user_->text().trimmed().isEmpty() && !password_->text().isEmpty())
    client_->set_login(user_->text().trimmed(), password_->text());
  auto err = client_->connect_to(address);
  if (!err.isEmpty()) {
    log(QStringLiteral("cannot connect: %1").arg(err), true);
    return;
  }
  // Remembered once connected (connection_changed), not before.
  state_->setText(QStringLiteral("connecting to %1…").arg(address));
  if (metrics_fixed_)
    metrics_->start();
  if (!timer_->isActive())
    timer_->start(2000);
  refresh();
}

void main_window::show_recent(const QString& current) {
  // The drop-down lists the recent clusters, the current one shown.
  QSignalBlocker block(address_);
  address_->clear();
  address_->addItems(recent_clusters());
  address_->setCurrentText(current);
}

void main_window::set_refresh_interval_ms(int ms) {
  timer_->setInterval(ms);
}

void main_window::refresh() {
  client_->refresh_cluster();
  client_->refresh_groups();
  client_->refresh_dlqs();
  // Only while it is shown: a user who may not describe the cluster would
  // get the same refusal every refresh.
  if (tabs_->currentWidget() == access_)
    client_->refresh_acls();
}

QStringList main_window::events() const {
  QStringList out;
  for (int i = 0; i < events_->count(); ++i)
    out << events_->item(i)->text();
  return out;
}

void main_window::log(const QString& line, bool error) {
  // A request that keeps failing the same way is shown once, not every refresh.
  if (error && line == last_error_)
    return;
  if (error)
    last_error_ = line;
  else
    last_error_.clear(); // the same error after a success is news again
  auto* item = new QListWidgetItem(
    QStringLiteral("%1  %2").arg(QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss")), line));
  if (error)
    item->setForeground(QColor(0xc0, 0x20, 0x20));
  events_->addItem(item);
  while (events_->count() > 500)
    delete events_->takeItem(0);
  events_->scrollToBottom();
  if (error)
    statusBar()->showMessage(line, 10000);
}

void main_window::take_screenshots(const QString& dir, int collect_ms,
                                   std::function<void(QStringList, QString)> done) {
  if (!QDir().mkpath(dir)) {
    done({}, QStringLiteral("cannot create %1").arg(dir));
    return;
  }
  struct run {
    QElapsedTimer clock;
    int stage = 0;
    QStringList files;
  };
  auto r = std::make_shared<run>();
  r->clock.start();
  auto* tick = new QTimer(this);
  tick->setInterval(250);
  connect(tick, &QTimer::timeout, this, [this, r, tick, dir, done, collect_ms] {
    auto elapsed = r->clock.elapsed();
    switch (r->stage) {
      case 0: // data and a few metrics scrapes
        if ((topics_->topics()->rowCount() > 0 && elapsed >= collect_ms)
            || elapsed > collect_ms + 20000) {
          if (topics_->topics()->rowCount() == 0) {
            tick->deleteLater();
            done({}, QStringLiteral("no topics arrived from %1").arg(client_->address()));
            return;
          }
          // Select the busiest non-DLQ topic and read it.
          const topic_row* best = nullptr;
          for (auto& t : topics_->topics()->rows())
            if (!t.name.endsWith(QStringLiteral(".dlq"))
                && (best == nullptr || t.messages() > best->messages()))
              best = &t;
          if (best == nullptr)
            best = &topics_->topics()->rows().front();
          topics_->select_topic(best->name);
          browser_->set_topic(best->name);
          browser_->read();
          if (groups_->groups()->rowCount() > 0)
            groups_->select_group(groups_->groups()->rows().front().group.name);
          if (dlq_->dlqs()->rowCount() > 0)
            dlq_->select_dlq(dlq_->dlqs()->rows().front().topic);
          r->stage = 1;
          r->clock.restart();
        }
        return;
      case 1: // the browse and the DLQ records
        if ((!browser_->busy() && r->clock.elapsed() > 1500) || r->clock.elapsed() > 15000) {
          if (dlq_->records()->rowCount() > 0)
            dlq_->record_table()->selectRow(0);
          browser_->show_row(0, payload_format::json);
          r->stage = 2;
        }
        return;
      default: { // one tab per tick
        int i = r->stage - 2;
        if (i > 0) {
          // Grab the tab shown on the previous tick (it has been laid out).
          static const char* names[] = {"cluster", "topics", "groups", "messages",
                                        "dlq", "charts", "access"};
          auto file = QDir(dir).filePath(QString::fromLatin1(names[i - 1]) + ".png");
          if (!grab().save(file)) {
            tick->deleteLater();
            done(r->files, QStringLiteral("cannot write %1").arg(file));
            return;
          }
          r->files << file;
        }
        if (i == tabs_->count()) {
          tick->deleteLater();
          done(r->files, {});
          return;
        }
        tabs_->setCurrentIndex(i);
        if (tabs_->currentWidget() == access_)
          client_->refresh_acls();
        ++r->stage;
        return;
      }
    }
  });
  tick->start();
}

} // namespace ferry::console
