#pragma once
// The console's table models, each a table_model over plain rows
// (console_types.hpp). Rows that a down node or offline partition affects
// say so in a status column and in red; nothing else changes.

#include "gui/console_types.hpp"
#include "gui/table_model.hpp"

namespace ferry::console {

/// Cluster nodes: id, endpoint, status, controller, metrics port.
table_model<node_row>* make_nodes_model(QObject* parent);

/// A partition with its topic, for the "offline or under-replicated" list.
struct partition_issue {
  QString topic;
  partition_row partition;
};
table_model<partition_issue>* make_partition_issues_model(QObject* parent);

/// Every partition of `snap` that is offline or under-replicated.
QList<partition_issue> partition_issues(const cluster_snapshot& snap);

/// Topics: name, partitions, size, messages, messages in/s, status.
table_model<topic_row>* make_topics_model(QObject* parent);

/// One topic's partitions: leader, epoch, replicas, ISR, log start, high
/// watermark, log end, size, status.
table_model<partition_row>* make_partitions_model(QObject* parent);

/// Consumer groups with their lag trend (computed by the view).
struct group_summary {
  group_row group;
  QString trend; ///< shrinking, growing, stalled, steady, caught up, "" = unknown
};
table_model<group_summary>* make_groups_model(QObject* parent);

/// One group's partitions: member, committed, end offset, lag, lag seconds,
/// and (queue groups; "-" otherwise or until /metrics has them) records in
/// flight, retrying and scheduled.
table_model<group_partition_row>* make_group_lag_model(QObject* parent);

/// Browsed messages: partition, offset, timestamp, key, headers, value.
table_model<message_row>* make_messages_model(QObject* parent);

/// DLQs: topic, source, groups, partitions, depth, redriven, total, oldest, rate.
table_model<dlq_row>* make_dlqs_model(QObject* parent);
table_model<acl_row>* make_acls_model(QObject* parent);

/// DLQ records with their failure details.
table_model<dlq_record_row>* make_dlq_records_model(QObject* parent);

/// Records grouped by error text, most frequent first.
struct error_count {
  QString error;
  int count = 0;
};
QList<error_count> group_by_error(const QList<dlq_record_row>& records);
table_model<error_count>* make_error_counts_model(QObject* parent);

/// Headers as "k=v, k2=v2".
QString headers_text(const QList<header_row>& headers);

} // namespace ferry::console
