// A data dir written by the single-node ferryd of before "one metadata
// path" (commit af7074b: topics in LMDB's cluster.topics, not in Raft), kept
// in tests/broker/testdata/legacy_single_node_datadir.tar.gz and made by
// tests/tools/make_legacy_datadir.sh (its header lists what is inside).
// Today's ferryd opens a copy and must keep the topics with their configs,
// the records, the stream group's committed offsets, the queue group's
// progress (acked and dead-lettered records are not delivered again), the
// DLQ, and it must run Raft: cluster describe shows a term and a controller.
// A second start (no legacy rows any more) sees the same.

#include "ferryctl_run.hpp"
#include "process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace ferry::test;
using json = nlohmann::json;

namespace {

class LegacyDataDir : public ::testing::Test {
protected:
  void SetUp() override {
    auto r = run_command("/bin/tar",
                         {"-C", tmp_.path().string(), "-xzf",
                          FERRY_TESTDATA_DIR
                          "/legacy_single_node_datadir.tar.gz"},
                         30s);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(std::filesystem::exists(tmp_.path() / "data" / "meta"));
    node_ = std::make_unique<ferryd_process>(
      tmp_.path() / "data", std::vector<std::string>{"--metrics-port", "-1"});
    ASSERT_TRUE(node_->start()) << node_->output();
  }

  void TearDown() override {
    if (node_)
      node_->stop(20s);
  }

  command_result ctl(std::vector<std::string> args,
                     std::chrono::milliseconds timeout = 60s) {
    return ferryctl(node_->endpoint(), std::move(args), {}, timeout);
  }

  json ctl_json(std::vector<std::string> args) {
    return ferryctl_json(node_->endpoint(), std::move(args));
  }

  /// The topics, their partition counts and retention as the node has them.
  void expect_topics() {
    auto list = ctl_json({"topic", "list"});
    std::map<std::string, std::pair<int, int64_t>> got;
    for (auto& t : list)
      got[t.value("name", "")] = {t.value("partitions", 0),
                                  t["config"].value("retention.ms", int64_t{0})};
    EXPECT_EQ(got.size(), 3u) << list.dump();
    EXPECT_EQ(got["orders"], std::make_pair(3, int64_t{86400000}));
    EXPECT_EQ(got["events"].first, 2); // grown from 1 before the upgrade
    EXPECT_EQ(got["events.jobs.dlq"].first, 2);
    for (auto& t : list)
      for (auto& a : t["assignments"]) {
        EXPECT_EQ(a.value("leader", -1), 0) << t.dump();
        EXPECT_EQ(a["isr"], json::array({0})) << t.dump();
      }
  }

  /// billing's committed offsets and the log ends of orders (partition 2
  /// ends at `end2`: the record produced after the upgrade lands there).
  void expect_billing(int64_t end2 = 12) {
    auto g = ctl_json({"group", "describe", "billing"});
    std::map<int, std::pair<int64_t, int64_t>> parts;
    for (auto& p : g["partitions"])
      parts[p.value("partition", -1)] = {p.value("committed_offset", int64_t{-1}),
                                         p.value("log_end_offset", int64_t{-1})};
    EXPECT_EQ(parts[0], std::make_pair(int64_t{6}, int64_t{6})) << g.dump();
    EXPECT_EQ(parts[1], std::make_pair(int64_t{6}, int64_t{12})) << g.dump();
    EXPECT_EQ(parts[2], std::make_pair(int64_t{0}, end2)) << g.dump();
  }

  void expect_raft() {
    auto cd = ctl_json({"cluster", "describe"});
    EXPECT_GE(cd.value("raft_term", int64_t{0}), 1) << cd.dump();
    EXPECT_EQ(cd.value("controller", -1), 0) << cd.dump();
  }

  temp_dir tmp_{"ferry-legacy"};
  std::unique_ptr<ferryd_process> node_;
};

} // namespace

TEST_F(LegacyDataDir, TopicsOffsetsQueueStateAndDlqSurviveTheUpgrade) {
  expect_topics();
  expect_raft();
  expect_billing();
  // Every record is still there.
  auto all = ctl({"consume", "orders", "--from-beginning", "--max", "30",
                  "--timeout", "5000"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::set<std::string> values;
  std::istringstream lines{all.out};
  for (std::string line; std::getline(lines, line);)
    values.insert(line);
  EXPECT_EQ(values.size(), 30u) << all.out;
  EXPECT_EQ(values.count("order-0") + values.count("order-29"), 2u);
  // The stream group resumes at its committed offsets: 18 records left.
  auto rest = ctl({"consume", "orders", "--group", "billing", "--timeout",
                   "3000", "--no-commit"});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(std::count(rest.out.begin(), rest.out.end(), '\n'), 18)
    << rest.out;
  // The queue group acked job-*, dead-lettered bad-*: only the late-*
  // records (produced after it ran) are delivered now.
  auto work = ctl({"work", "events", "--group", "jobs", "--exec",
                   "cat >/dev/null", "--max-idle", "2s"},
                  90s);
  ASSERT_EQ(work.exit_code, 0) << work.err;
  std::istringstream wl{work.out + work.err};
  std::vector<std::string> acks;
  for (std::string line; std::getline(wl, line);)
    if (line.find("-> ack") != std::string::npos)
      acks.push_back(line.substr(0, line.find(' ')));
  std::sort(acks.begin(), acks.end());
  EXPECT_EQ(acks, (std::vector<std::string>{"events/1@0", "events/1@1",
                                            "events/1@2"}))
    << work.out << work.err;
  auto dlqs = ctl_json({"dlq", "list"});
  ASSERT_EQ(dlqs.size(), 1u) << dlqs.dump();
  EXPECT_EQ(dlqs[0].value("topic", ""), "events.jobs.dlq");
  EXPECT_EQ(dlqs[0].value("depth", int64_t{0}), 2);
  // New writes work (an idempotent producer gets a fresh producer id).
  auto p = ferryctl(node_->endpoint(), {"produce", "orders", "--key", "k1"},
                    "after-upgrade\n");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  // A second start: the legacy rows are gone, Raft has everything.
  ASSERT_EQ(node_->stop(30s), 0) << node_->output();
  ASSERT_TRUE(node_->start()) << node_->output();
  // Imported by the first start only.
  auto out = node_->output();
  size_t imports = 0;
  for (auto at = out.find("imported 3 topics"); at != std::string::npos;
       at = out.find("imported 3 topics", at + 1))
    ++imports;
  EXPECT_EQ(imports, 1u) << out;
  expect_topics();
  expect_raft();
  expect_billing(13);
  auto again = ctl({"consume", "orders", "--from-beginning", "--max", "31",
                    "--timeout", "5000"});
  EXPECT_NE(again.out.find("after-upgrade"), std::string::npos) << again.out;
}
