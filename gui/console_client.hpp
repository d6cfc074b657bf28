#pragma once
// The console's only link to Ferry: a QObject that owns a CAF actor system,
// a reconnecting connection to one broker (actors/client/client_connection.hpp) and
// a producer, sends the broker's requests from throw-away actors, and turns
// each reply into a Qt signal delivered on the GUI thread. Models and views
// see only the plain values of console_types.hpp; no CAF header is included
// here.
//
// Lifecycle: construct on the GUI thread, call connect_to(); every request
// method returns at once and answers later with a signal (or failed()).
// Destruction stops the actors; replies that arrive later are dropped.

#include "gui/console_types.hpp"

#include <QObject>
#include <QString>

#include <memory>

namespace ferry::console {

class console_client : public QObject {
  Q_OBJECT
public:
  explicit console_client(QObject* parent = nullptr);
  /// With TLS: every connection speaks mutual TLS with these files
  /// (checked by the caller first: see ferry::check_tls).
  explicit console_client(const tls_files& tls, QObject* parent = nullptr);
  ~console_client() override;

  /// Starts connecting to "HOST:PORT" (replacing any previous broker).
  /// Returns an error text for a malformed address, else "".
  QString connect_to(const QString& address);

  /// Logs in as `user` with `password` from the next connect_to() on (nodes
  /// started with --auth scram); an empty user keeps what set_operator()
  /// or nothing set. The connection status then says "as USER".
  void set_login(const QString& user, const QString& password);
  /// Logs in with the cluster credential of a secret file
  /// (--cluster-secret-file), or with the credential itself when
  /// `is_credential`; "" on success, else why not.
  QString set_operator(const QString& secret_file, bool is_credential = false);

  /// The address given to connect_to().
  QString address() const;
  QString host() const;
  /// True when the console talks TLS (then the metrics port is https too).
  bool uses_tls() const;

  /// Milliseconds each broker request may take before failed() reports it.
  void set_request_timeout_ms(int ms);
  /// Records the message browser reads per poll (default 500); each poll
  /// reports progress and checks for Cancel.
  void set_browse_batch(int records);

  // -- requests (each answers with a signal or with failed()) ---------------
  void refresh_cluster();                       ///< -> cluster_updated
  void refresh_groups();                        ///< -> groups_updated
  void create_topic(const QString& name, int partitions, int replication_factor,
                    const QMap<QString, QString>& config); ///< -> done
  void delete_topic(const QString& name);       ///< -> done
  void alter_topic(const QString& name, const QMap<QString, QString>& config);
  /// Creates a queue-mode group with the broker's
  /// (create_atom, group_atom, group, queue_group_config) request, as every
  /// login may (user, operator, none) -> done(queue_group_created(group)),
  /// also when the group already has exactly these settings (the broker
  /// answers both alike), or failed() with the broker's error (invalid_config
  /// for bad settings, invalid_request for a group with other settings or a
  /// stream group of that name).
  void create_queue_group(const queue_group_settings& settings);
  /// The done() text of create_queue_group.
  static QString queue_group_created(const QString& group);
  /// Produces one message; partition -1 lets the partitioner decide.
  void produce(const message_row& msg);         ///< -> produced
  /// Reads a partition range and filters it; progress, matches, finished.
  void browse(const browse_request& req);
  void cancel_browse();
  void refresh_dlqs();                          ///< -> dlqs_updated
  /// The ACLs (needs describe on the cluster) -> acls_updated, or failed().
  void refresh_acls();
  /// Reads a DLQ (every partition) with an optional error / text filter.
  void show_dlq(const QString& topic, const QString& error_contains,
                const QString& grep, int max_records); ///< -> dlq_records
  /// Redrives in chunks with progress; -> redrive_progress, done.
  void redrive(const redrive_selection& sel);
  /// Stops the running redrive after its current chunk (rate-limited
  /// redrives go in chunks of about one second); -> done ("... stopped").
  void cancel_redrive();
  void purge_dlq(const QString& topic);         ///< -> done

signals:
  void connection_changed(bool connected, const QString& detail);
  void cluster_updated(const ferry::console::cluster_snapshot& snap);
  void groups_updated(const QList<ferry::console::group_row>& groups);
  void dlqs_updated(const QList<ferry::console::dlq_row>& dlqs);
  void acls_updated(const QList<ferry::console::acl_row>& acls);
  void dlq_records(const QString& topic,
                   const QList<ferry::console::dlq_record_row>& records,
                   qint64 scanned, bool end_reached);
  void redrive_progress(qint64 redriven, qint64 skipped);
  void produced(const QString& topic, int partition, qint64 offset);
  void browse_progress(qint64 scanned, qint64 total);
  void browse_matches(const QList<ferry::console::message_row>& rows);
  void browse_finished(qint64 scanned, qint64 matched, bool cancelled,
                       const QString& error);
  /// A finished operation ("topic orders created").
  void done(const QString& what);
  /// A failed request: what was tried and the broker's (or transport's) error.
  void failed(const QString& what, const QString& error);

public:
  struct impl;

private:
  std::unique_ptr<impl> d_;
};

} // namespace ferry::console
