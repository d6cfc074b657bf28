#pragma once
// The console's main views. Each view connects a console_client's signals to
// its models and asks the client for data; none talks to the network
// itself. `confirm` decides yes/no questions (a QMessageBox by default;
// tests replace it).

#include "gui/console_types.hpp"
#include "gui/models.hpp"

#include <QWidget>

#include <functional>

QT_BEGIN_NAMESPACE
class QComboBox;
class QDateTimeEdit;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTableView;
QT_END_NAMESPACE

namespace ferry::console {

class console_client;
class line_chart;
class metrics_sampler;

/// Yes/no question for destructive operations.
using confirm_fn = std::function<bool(QWidget* parent, const QString& question)>;
confirm_fn default_confirm();

/// Nodes, controller, term, and partitions offline or under-replicated.
class cluster_view : public QWidget {
  Q_OBJECT
public:
  explicit cluster_view(console_client* client, QWidget* parent = nullptr);
  void show_snapshot(const cluster_snapshot& snap);
  table_model<node_row>* nodes() const { return nodes_; }
  table_model<partition_issue>* issues() const { return issues_; }

private:
  QLabel* summary_;
  table_model<node_row>* nodes_;
  table_model<partition_issue>* issues_;
};

/// Topics and one topic's partitions; create, delete, alter config.
class topics_view : public QWidget {
  Q_OBJECT
public:
  topics_view(console_client* client, metrics_sampler* metrics, QWidget* parent = nullptr);
  void show_topics(const QList<topic_row>& topics);
  void select_topic(const QString& name);
  QString selected_topic() const;
  table_model<topic_row>* topics() const { return topics_; }
  table_model<partition_row>* partitions() const { return partitions_; }
  confirm_fn confirm = default_confirm();

private:
  void show_selected();
  void create_topic();
  void delete_topic();
  void alter_config();
  console_client* client_;
  metrics_sampler* metrics_;
  table_model<topic_row>* topics_;
  table_model<partition_row>* partitions_;
  QTableView* topic_table_;
  QLabel* config_;
};

/// Consumer groups, per-partition lag, and lag / consume-rate charts;
/// creates queue groups.
class groups_view : public QWidget {
  Q_OBJECT
public:
  groups_view(console_client* client, metrics_sampler* metrics, QWidget* parent = nullptr);
  void show_groups(const QList<group_row>& groups);
  void select_group(const QString& name);
  QString selected_group() const;
  table_model<group_summary>* groups() const { return groups_; }
  table_model<group_partition_row>* lag() const { return lag_; }

private:
  void show_selected();
  void update_charts();
  /// The "Create queue group…" dialog; accepted, the client creates it.
  void create_queue_group();
  /// A group just created: selected once the list shows it.
  QString select_when_listed_;
  console_client* client_;
  metrics_sampler* metrics_;
  table_model<group_summary>* groups_;
  table_model<group_partition_row>* lag_;
  QTableView* group_table_;
  QLabel* trend_;
  line_chart* lag_chart_;
  line_chart* rate_chart_;
};

/// Reads a partition range with filters; shows payloads; produces.
class browser_view : public QWidget {
  Q_OBJECT
public:
  explicit browser_view(console_client* client, QWidget* parent = nullptr);
  void set_topics(const QList<topic_row>& topics);
  /// Starts reading with the current settings.
  void read();
  void set_topic(const QString& topic);
  void set_filters(const QString& key, const QString& header, const QString& payload);
  table_model<message_row>* messages() const { return messages_; }
  /// Selects a row and shows its payload in `fmt`.
  void show_row(int row, payload_format fmt);
  bool busy() const { return busy_; }

private:
  void show_selected();
  void produce_dialog(const message_row* base);
  console_client* client_;
  table_model<message_row>* messages_;
  QComboBox* topic_;
  QSpinBox* partition_;
  QRadioButton* by_offset_;
  QLineEdit* offset_;
  QDateTimeEdit* time_;
  QSpinBox* max_records_;
  QLineEdit* key_filter_;
  QLineEdit* header_filter_;
  QLineEdit* payload_filter_;
  QPushButton* read_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* status_;
  QTableView* table_;
  QComboBox* format_;
  QPlainTextEdit* detail_;
  bool busy_ = false;
};

/// DLQs, their records grouped and filtered by error; redrive and purge.
class dlq_view : public QWidget {
  Q_OBJECT
public:
  explicit dlq_view(console_client* client, QWidget* parent = nullptr);
  void show_dlqs(const QList<dlq_row>& dlqs);
  void select_dlq(const QString& topic);
  QString selected_dlq() const;
  /// Reloads the records of the selected DLQ with the filters.
  void load_records();
  /// Redrives the selected records (after confirmation).
  void redrive_selected();
  void redrive_all();
  /// Purges every record of the selected DLQ (after confirmation).
  void purge();
  table_model<dlq_row>* dlqs() const { return dlqs_; }
  table_model<dlq_record_row>* records() const { return records_; }
  /// The records shown, grouped by error (only while no error filter is set).
  table_model<error_count>* errors() const { return errors_; }
  QTableView* record_table() const { return record_table_; }
  QString detail_text() const;
  confirm_fn confirm = default_confirm();

private:
  void show_record();
  void redrive(redrive_selection sel, const QString& what);
  void redrive_range();
  console_client* client_;
  table_model<dlq_row>* dlqs_;
  table_model<error_count>* errors_;
  table_model<dlq_record_row>* records_;
  QTableView* dlq_table_;
  QTableView* error_table_;
  QTableView* record_table_;
  QLineEdit* error_filter_;
  QLineEdit* text_filter_;
  QLineEdit* to_topic_;
  QSpinBox* rate_;
  QPushButton* stop_;
  QLabel* status_;
  QPlainTextEdit* detail_;
};

/// Who may do what (read-only): the ACLs of a cluster started with --auth
/// scram, for a user who may describe the cluster. Changes are made with
/// ferryctl acl add/remove or POST /v1/acls.
class access_view : public QWidget {
  Q_OBJECT
public:
  explicit access_view(QWidget* parent = nullptr);
  void show_acls(const QList<acl_row>& acls);
  /// Shown instead of the table's contents when the list was refused.
  void show_error(const QString& text);
  table_model<acl_row>* acls() const { return acls_; }

private:
  QLabel* summary_;
  table_model<acl_row>* acls_;
};

/// Produce / consume rate, produce p99 and DLQ rate, per cluster or topic.
class charts_view : public QWidget {
  Q_OBJECT
public:
  charts_view(metrics_sampler* metrics, QWidget* parent = nullptr);
  void set_topics(const QList<topic_row>& topics);
  void update_charts();

private:
  metrics_sampler* metrics_;
  QComboBox* scope_;
  line_chart* produce_;
  line_chart* consume_;
  line_chart* p99_;
  line_chart* dlq_;
};

} // namespace ferry::console
