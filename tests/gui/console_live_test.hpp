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
};
