#pragma once
// Plain values the console's models and views work on. The client object
// (console_client) builds them from broker replies; nothing here knows CAF or
// the network, so models are tested with hand-made values.

#include <QByteArray>
#include <QDateTime>
#include <QList>
#include <QMap>
#include <QPair>
#include <QString>
#include <QStringList>

namespace ferry {
struct queue_group_config; // broker/messages.hpp
}

namespace ferry::console {

/// One node of the cluster as cluster_description reports it.
struct node_row {
  int id = 0;
  QString host;
  int port = 0;
  int http_port = 0;
  int metrics_port = 0;
  bool alive = false;
  bool controller = false;
  /// A voter of the metadata quorum; false: a broker-only node.
  bool voter = true;
  /// `ferryctl cluster remove-node` is moving its replicas away.
  bool removing = false;
};

/// Live state of one partition.
struct partition_row {
  int partition = 0;
  int leader = -1; ///< -1 = no leader (offline)
  int epoch = 0;
  QList<int> replicas;
  QList<int> isr;
  qint64 log_start = 0;
  qint64 log_end = 0;
  qint64 high_watermark = 0;
  qint64 size_bytes = 0;
  bool online = false; ///< false when the broker could not reach the replica
  /// Compacted topics: the leader log's dirty ratio; -1 otherwise.
  double dirty_ratio = -1;
  /// Under-replicated: fewer in-sync replicas than replicas.
  bool under_replicated() const { return online && isr.size() < replicas.size(); }
};

/// One topic with its partitions.
struct topic_row {
  QString name;
  int replication_factor = 1;
  QMap<QString, QString> config; ///< Kafka key -> value
  QList<partition_row> partitions;
  /// Messages appended per second from /metrics; negative = not known yet.
  double messages_in_per_sec = -1;

  qint64 size_bytes() const;
  qint64 messages() const; ///< sum of (high watermark - log start)
  int offline_partitions() const;
  int under_replicated_partitions() const;
};

/// What the cluster view shows.
struct cluster_snapshot {
  QString cluster_id;
  int controller = -1;
  qint64 raft_term = 0;
  QList<node_row> nodes;
  QList<topic_row> topics;
};

/// One partition of a consumer group.
struct group_partition_row {
  QString topic;
  int partition = 0;
  QString member; ///< "" = unassigned
  qint64 committed = -1; ///< -1 = nothing committed
  qint64 log_start = 0;
  qint64 log_end = 0;
  qint64 lag = 0;
  double lag_seconds = -1; ///< from /metrics; negative = not known
  // Queue-mode groups only, from ferry_queue_records (/metrics); negative =
  // not known (stream groups, or no scrape yet).
  qint64 in_flight = -1; ///< state "leased": delivered to a member, not settled
  qint64 retrying = -1;  ///< state "retrying": waiting out a retry backoff
  qint64 scheduled = -1; ///< state "scheduled": delayed delivery not due yet
};

/// A consumer group (stream or queue mode).
struct group_row {
  QString name;
  QString mode;
  QString state;
  QString assignor;
  int generation = 0;
  QStringList members;
  QList<group_partition_row> partitions;
  qint64 total_lag() const;
  /// Sum of the partitions' known in-flight counts; -1 when none is known.
  qint64 total_in_flight() const;
};

/// One header of a message (values are bytes).
struct header_row {
  QString key;
  QByteArray value;
};

/// One record read from a partition.
struct message_row {
  QString topic;
  int partition = 0;
  qint64 offset = 0;
  qint64 timestamp_ms = 0;
  bool has_key = false;
  QByteArray key;
  bool has_value = true;
  QByteArray value;
  QList<header_row> headers;
};

/// One dead-letter topic.
/// One ACL entry (broker/security.hpp's model), as ferryctl acl list shows it.
struct acl_row {
  QString principal;
  QString permission;
  QString operation;
  QString resource_type;
  QString pattern;
  QString name;
};

struct dlq_row {
  QString topic;
  QStringList groups;
  QString source_topic;
  int partitions = 0;
  qint64 depth = 0;
  qint64 redriven = 0;
  qint64 total = 0;
  qint64 oldest_timestamp_ms = 0;
  double rate_per_second = 0;
};

/// One dead-lettered record with its ferry-* headers decoded.
struct dlq_record_row {
  message_row message;
  QString original_topic;
  int original_partition = -1;
  qint64 original_offset = -1;
  int attempts = 0;
  QString error;
  QString group;
  qint64 first_failure_ms = 0;
  qint64 last_failure_ms = 0;
  int redrive_count = 0;
  bool redriven = false;
};

/// What the message browser reads and how it filters. Every record of the
/// range is looked at; the filters only decide which ones are shown.
struct browse_request {
  QString topic;
  int partition = 0;
  qint64 from_offset = -2;      ///< -2 = log start; used when from_timestamp < 0
  qint64 from_timestamp_ms = -1; ///< >= 0: start at the first record at/after it
  qint64 max_records = 10000;   ///< records to scan (the range's length)
  int max_matches = 1000;       ///< stop once this many matched
  QString key_contains;
  QString header_contains;      ///< substring of "key=value" of any header
  QString payload_contains;
};

/// Selection for a DLQ redrive.
struct redrive_selection {
  QString dlq_topic;
  QString to_topic;           ///< "" = each record's original topic
  QList<QPair<int, qint64>> records; ///< (partition, offset); empty = range
  int partition = -1;         ///< range: -1 = every partition
  int partition_count = 1;    ///< the DLQ's partitions (for partition -1)
  qint64 from_offset = 0;
  qint64 to_offset = -1;      ///< -1 = the end
  int rate_per_second = 0;    ///< 0 = unlimited
};

/// A queue-mode consumer group to create with the broker's
/// `(create_atom, group_atom, group, queue_group_config)` request. The
/// defaults are the broker's (queue_group_config).
struct queue_group_settings {
  QString group;
  /// Where each partition begins the first time the group reads its topic:
  /// start_earliest, start_latest, or a time in epoch ms (start_at()).
  qint64 start = start_earliest;
  int max_attempts = 5;             ///< failed attempts before the DLQ, >= 1
  qint64 initial_backoff_ms = 1000;
  qint64 max_backoff_ms = 60000;
  double backoff_multiplier = 2.0;  ///< >= 1
  double jitter = 1.0;              ///< 0..1: share of the backoff drawn at random
  qint64 visibility_timeout_ms = 30000;
  QString ordering = QStringLiteral("none"); ///< "none" or "key"
  QString dlq_topic;                ///< "" = <topic>.<group>.dlq
  qint64 delay_ms = 0;              ///< delivery delay of every record, 0..12 h

  /// The start positions (broker/start_position.hpp).
  static constexpr qint64 start_earliest = -2;
  static constexpr qint64 start_latest = -1;
};

/// A start time as the broker's start position: ms since the epoch.
qint64 start_at(const QDateTime& t);

/// The broker's queue_group_config for `s` (mode "queue", every setting of
/// `s`; the group is the request's other argument). Defined in
/// console_types.cpp, which includes broker/messages.hpp; callers include it
/// too (before any Qt header).
ferry::queue_group_config to_queue_group_config(const queue_group_settings& s);

/// Text of a payload in the chosen rendering.
enum class payload_format { text, json, hex };
QString render_payload(const QByteArray& bytes, payload_format fmt);

/// Milliseconds since the epoch as "yyyy-MM-dd HH:mm:ss.zzz" (UTC); "" for 0.
QString format_timestamp(qint64 ms);

/// Bytes as "12.3 MiB".
QString format_bytes(qint64 bytes);

/// True if `m` passes the browse filters of `req` (case-insensitive).
bool matches(const message_row& m, const browse_request& req);

/// The client certificate, its key and the CA of a TLS cluster (PEM file
/// paths; all empty: plaintext).
struct tls_files {
  QString certificate;
  QString key;
  QString ca;
  bool enabled() const { return !certificate.isEmpty(); }
};

} // namespace ferry::console
