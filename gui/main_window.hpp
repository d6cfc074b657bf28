#pragma once
// The console window: a connect bar (recent clusters remembered in
// QSettings), one tab per view, and an event list where every error and
// finished operation appears. Refreshes the cluster, groups and DLQs every
// refresh interval while connected.

#include "gui/console_types.hpp"

#include <QMainWindow>
#include <QStringList>
#include <QUrl>

#include <functional>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QTabWidget;
class QTimer;
QT_END_NAMESPACE

namespace ferry::console {

class browser_view;
class charts_view;
class access_view;
class cluster_view;
class dlq_view;
class console_client;
class groups_view;
class metrics_sampler;
class topics_view;

class main_window : public QMainWindow {
  Q_OBJECT
public:
  /// `metrics_url` empty: taken from the connected node's metrics port.
  main_window(console_client* client, metrics_sampler* metrics, QUrl metrics_url = {},
              QWidget* parent = nullptr);

  /// Connects to "HOST:PORT"; once connected, it is remembered among the
  /// recent clusters (an address that never answers is not).
  void connect_to(const QString& address);
  /// Asks for everything now (also done by the refresh timer).
  void refresh();
  void set_refresh_interval_ms(int ms);

  /// Saves one PNG per view into `dir` (cluster.png, topics.png, ...),
  /// selecting the first topic, group and DLQ and reading the first topic
  /// on the way; then calls `done` with the files written or an error.
  /// `collect_ms`: how long metrics are sampled first (for the charts).
  void take_screenshots(const QString& dir, int collect_ms,
                        std::function<void(QStringList files, QString error)> done);

  cluster_view* cluster() const { return cluster_; }
  topics_view* topics() const { return topics_; }
  groups_view* groups() const { return groups_; }
  browser_view* browser() const { return browser_; }
  dlq_view* dlq() const { return dlq_; }
  charts_view* charts() const { return charts_; }
  QTabWidget* tabs() const { return tabs_; }
  /// The event list's lines, newest last.
  QStringList events() const;

private:
  void log(const QString& line, bool error);
  /// Refills the address drop-down from the recent clusters.
  void show_recent(const QString& current);
  void show_snapshot(const cluster_snapshot& snap);
  /// The connection is lost: the node we talk to and the partitions it
  /// leads are shown as down / offline until it answers again.
  void mark_unreachable();
  console_client* client_;
  metrics_sampler* metrics_;
  bool metrics_fixed_;
  access_view* access_;
  QComboBox* address_;
  /// The login for nodes started with --auth scram (empty: none, or the
  /// one given on the command line).
  QLineEdit* user_;
  QLineEdit* password_;
  QLabel* state_;
  QTabWidget* tabs_;
  cluster_view* cluster_;
  topics_view* topics_;
  groups_view* groups_;
  browser_view* browser_;
  dlq_view* dlq_;
  charts_view* charts_;
  QListWidget* events_;
  QTimer* timer_;
  QString last_error_;
  cluster_snapshot last_snapshot_;
};

} // namespace ferry::console
