#pragma once
// The live widget tests (console_live_test.cpp). Declared here, Qt only, so
// moc never parses the CAF and harness headers the test file includes.

#include <QObject>

class console_live_test : public QObject {
  Q_OBJECT
private slots:
  void initTestCase();
  void topics_view_lists_topic_created_by_ferryctl();
  void dlq_view_shows_dead_lettered_record_and_redrives_it();
  void recent_clusters_are_remembered();
  void topic_dialogs_create_alter_and_delete();
  void produce_and_reproduce_dialogs();
  void browser_cancel_stops_long_filtered_scan();
  void dlq_groups_filters_and_redrives_a_range_rate_limited();
  void dlq_purge_asks_through_its_confirmation_box();
  void queue_group_dialog_creates_through_the_broker();
  void queue_group_dialog_works_as_operator_without_http_api();
  void queue_group_lag_seconds_reach_the_groups_view();
};
