// DLQ operations end to end against a real ferryd: a queue group whose
// worker rejects some records (driven with the broker's receive/ack requests
// over CAF), then `ferryctl dlq list/show/redrive/purge` and the HTTP
// endpoints. The redrive round trip: dead-lettered records are redriven to
// the original topic and consumed from it exactly once; a second redrive
// skips them, also after a restart of ferryd; purge removes them.

#include "tests/integration/process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using json = nlohmann::json;

const std::string dlq = "orders.workers.dlq";

/// A CAF client of one ferryd: the broker handle through a connection.
struct client {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  ferry::connection_actor conn;
  ferry::broker_actor broker;

  explicit client(const ferryd_process& d) {
    ferry::configure_client(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    auto addr = ferry::parse_broker_address(d.endpoint());
    EXPECT_TRUE(addr);
    if (!addr)
      return;
    conn = ferry::spawn_connection(*sys, *addr);
    caf::scoped_actor self{*sys};
    self->request(conn, 15s, ferry::connect_atom_v)
      .receive([&](ferry::broker_actor& b) { broker = b; },
               [&](caf::error& err) {
                 ADD_FAILURE() << ferry::error_text(err);
               });
  }

  ~client() {
    if (conn)
      caf::anon_send_exit(conn, caf::exit_reason::kill);
    sys.reset();
  }

  template <class T, class... Ts>
  std::optional<T> ask(Ts... xs) {
    caf::scoped_actor self{*sys};
    std::optional<T> out;
    self->request(broker, 30s, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) {
                 ADD_FAILURE() << ferry::error_text(err);
               });
    return out;
  }

  std::vector<ferry::leased_message> receive(int64_t wait_ms) {
    ferry::queue_receive_request req{"workers", "orders", "w1", 100, 0,
                                     wait_ms};
    return ask<std::vector<ferry::leased_message>>(ferry::receive_atom_v, req)
      .value_or(std::vector<ferry::leased_message>{});
  }

  void settle(const ferry::leased_message& m, ferry::queue_ack_kind kind) {
    ferry::queue_ack_request req;
    req.group = "workers";
    req.member_id = "w1";
    req.topic = m.message.topic;
    req.partition = m.message.partition;
    req.off = m.message.off;
    req.lease_id = m.lease_id;
    req.kind = kind;
    req.error = "cannot parse " + m.message.value;
    ask<ferry::queue_ack_response>(ferry::ack_atom_v, req);
  }
};

std::map<std::string, std::string> headers_of(const ferry::consumed_message& m) {
  std::map<std::string, std::string> out;
  for (auto& h : m.headers)
    out[h.key] = h.value;
  return out;
}

/// What curl got: status and body.
struct http_result {
  int status = 0;
  std::string body;
  json j() const { return json::parse(body, nullptr, false); }
};

http_result http(uint16_t port, const std::string& method,
                 const std::string& path, const std::string& body = {}) {
  std::vector<std::string> args{"-s", "-m", "30", "-X", method,
                                "-w", "\n%{http_code}"};
  if (!body.empty()) {
    args.push_back("-H");
    args.push_back("Content-Type: application/json");
    args.push_back("--data-binary");
    args.push_back(body);
  }
  args.push_back("http://127.0.0.1:" + std::to_string(port) + path);
  auto r = run_command("/usr/bin/curl", args, 40s);
  http_result out;
  auto nl = r.out.rfind('\n');
  if (r.exit_code != 0 || nl == std::string::npos)
    return out;
  out.body = r.out.substr(0, nl);
  out.status = std::atoi(r.out.c_str() + nl + 1);
  return out;
}

class dlq_ops : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(node_.start()) << node_.output();
    read_http_port();
  }

  void TearDown() override {
    EXPECT_EQ(node_.stop(), 0) << node_.output();
  }

  void read_http_port() {
    static const std::regex http_line{R"(http on ([^\s:]+):([0-9]+)\r?\n)"};
    auto m = node_.child()->wait_for(http_line, 10s);
    ASSERT_TRUE(m) << "no 'http on' line:\n" << node_.output();
    http_port_ = static_cast<uint16_t>(std::stoi((*m)[2]));
  }

  ferry::test::command_result ctl(std::vector<std::string> args,
                                  const std::string& input = {}) {
    args.insert(args.begin(), {"--broker", node_.endpoint()});
    return run_command(FERRYCTL_PATH, args, 60s, input);
  }

  /// `ferryctl --json dlq list`, the entry of `dlq` (or null).
  json dlq_entry() {
    auto r = ctl({"--json", "dlq", "list"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = json::parse(r.out, nullptr, false);
    if (j.is_array())
      for (auto& x : j)
        if (x.value("topic", "") == dlq)
          return x;
    return json{};
  }

  ferryd_process node_{{"--http-port", "0"}};
  uint16_t http_port_ = 0;
};

TEST_F(dlq_ops, redrive_round_trip_with_ferryctl_and_http) {
  auto created = ctl({"topic", "create", "orders"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  auto produced = ctl({"produce", "orders"}, "ok-1\nbad-1\nok-2\nbad-2\n");
  ASSERT_EQ(produced.exit_code, 0) << produced.err;

  // A worker that rejects the bad records.
  {
    client c{node_};
    ASSERT_TRUE(c.broker);
    int settled = 0;
    for (int round = 0; round < 20 && settled < 4; ++round) {
      for (auto& m : c.receive(1000)) {
        bool bad = m.message.value.rfind("bad", 0) == 0;
        c.settle(m, bad ? ferry::queue_ack_kind::reject
                        : ferry::queue_ack_kind::ack);
        ++settled;
      }
    }
    ASSERT_EQ(settled, 4);
  }
  // The coordinator writes the DLQ asynchronously.
  json entry;
  for (int i = 0; i < 100; ++i) {
    entry = dlq_entry();
    if (entry.is_object() && entry.value("depth", 0) == 2)
      break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(entry.is_object()) << "no DLQ listed";
  EXPECT_EQ(entry["depth"], 2);
  EXPECT_EQ(entry["total"], 2);
  EXPECT_EQ(entry["sourceTopic"], "orders");
  EXPECT_EQ(entry["groups"], json::array({"workers"}));
  EXPECT_GT(entry["ratePerSecond"].get<double>(), 0.0);
  EXPECT_GT(entry["oldestTimestamp"].get<int64_t>(), 0);

  // list and show as tables.
  auto list = ctl({"dlq", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("DLQ"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find(dlq), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("workers"), std::string::npos) << list.out;
  auto show = ctl({"dlq", "show", dlq});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("bad-1"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("bad-2"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("cannot parse bad-1"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("orders/0/1"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("ok-1"), std::string::npos) << show.out;
  auto grep = ctl({"--json", "dlq", "show", dlq, "--grep", "bad-2"});
  ASSERT_EQ(grep.exit_code, 0) << grep.err;
  auto gj = json::parse(grep.out, nullptr, false);
  ASSERT_TRUE(gj.is_object()) << grep.out;
  ASSERT_EQ(gj["records"].size(), 1u) << grep.out;
  EXPECT_EQ(gj["records"][0]["value"], "bad-2");
  EXPECT_EQ(gj["records"][0]["originalOffset"], 3);
  EXPECT_EQ(gj["records"][0]["attempts"], 1);
  EXPECT_EQ(gj["records"][0]["headers"]["ferry-group"], "workers");

  // A careful operator tool: redrive needs --all or --offsets, not both.
  EXPECT_NE(ctl({"dlq", "redrive", dlq}).exit_code, 0);
  EXPECT_NE(ctl({"dlq", "redrive", dlq, "--all", "--offsets", "0-1"}).exit_code,
            0);
  EXPECT_NE(ctl({"dlq", "redrive", dlq, "--all", "--rate", "fast"}).exit_code,
            0);

  // Redrive: back to orders, consumed once.
  auto redrive = ctl({"dlq", "redrive", dlq, "--all", "--rate", "50/s"});
  ASSERT_EQ(redrive.exit_code, 0) << redrive.err;
  EXPECT_NE(redrive.out.find("redriven 2 records, skipped 0"),
            std::string::npos)
    << redrive.out;
  {
    client c{node_};
    ASSERT_TRUE(c.broker);
    std::vector<std::string> seen;
    for (int round = 0; round < 6; ++round) {
      auto got = c.receive(round < 2 ? 2000 : 300);
      for (auto& m : got) {
        seen.push_back(m.message.value);
        auto h = headers_of(m.message);
        EXPECT_EQ(h["ferry-redrive-count"], "1");
        EXPECT_EQ(h["ferry-redriven-from"].rfind(dlq + "/0/", 0), 0u);
        c.settle(m, ferry::queue_ack_kind::ack);
      }
    }
    EXPECT_EQ(seen, (std::vector<std::string>{"bad-1", "bad-2"}));
  }
  auto again = ctl({"dlq", "redrive", dlq, "--all"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("redriven 0 records, skipped 2"), std::string::npos)
    << again.out;
  entry = dlq_entry();
  EXPECT_EQ(entry["depth"], 0);
  EXPECT_EQ(entry["redriven"], 2);

  // The marks survive a restart of ferryd.
  ASSERT_EQ(node_.stop(), 0) << node_.output();
  ASSERT_TRUE(node_.start()) << node_.output();
  read_http_port();
  auto after = ctl({"--json", "dlq", "redrive", dlq, "--all"});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  auto aj = json::parse(after.out, nullptr, false);
  EXPECT_EQ(aj["redriven"], 0) << after.out;
  EXPECT_EQ(aj["skipped"], 2) << after.out;

  // HTTP: the same operations.
  auto hl = http(http_port_, "GET", "/v1/dlq");
  ASSERT_EQ(hl.status, 200) << hl.body;
  ASSERT_EQ(hl.j()["dlqs"].size(), 1u) << hl.body;
  EXPECT_EQ(hl.j()["dlqs"][0]["redriven"], 2);
  auto hs = http(http_port_, "GET", "/v1/dlq/" + dlq + "?grep=bad-1&max=10");
  ASSERT_EQ(hs.status, 200) << hs.body;
  ASSERT_EQ(hs.j()["records"].size(), 1u) << hs.body;
  EXPECT_EQ(hs.j()["records"][0]["redriven"], true);
  EXPECT_EQ(hs.j()["endReached"], true);
  auto hr = http(http_port_, "POST", "/v1/dlq/" + dlq + "/redrive",
                 R"({"all":true})");
  ASSERT_EQ(hr.status, 200) << hr.body;
  EXPECT_EQ(hr.j()["skipped"], 2);
  EXPECT_EQ(hr.j()["redriven"], 0);
  auto hbad = http(http_port_, "POST", "/v1/dlq/" + dlq + "/redrive", "{}");
  EXPECT_EQ(hbad.status, 400) << hbad.body;

  // Purge: the first record with ferryctl, the rest over HTTP.
  auto purge = ctl({"dlq", "purge", dlq, "--before", "1"});
  ASSERT_EQ(purge.exit_code, 0) << purge.err;
  EXPECT_NE(purge.out.find("purged 1 records"), std::string::npos)
    << purge.out;
  auto hp = http(http_port_, "POST", "/v1/dlq/" + dlq + "/purge", "{}");
  ASSERT_EQ(hp.status, 200) << hp.body;
  EXPECT_EQ(hp.j()["purged"], 1);
  EXPECT_EQ(hp.j()["logStarts"][0]["offset"], 2);
  entry = dlq_entry();
  EXPECT_EQ(entry["total"], 0);
  EXPECT_EQ(entry["depth"], 0);
  EXPECT_EQ(entry["redriven"], 0);
  auto empty = ctl({"--json", "dlq", "show", dlq});
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_TRUE(json::parse(empty.out, nullptr, false)["records"].empty())
    << empty.out;
  // Errors name the problem.
  auto missing = ctl({"dlq", "show", "nope.dlq"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("unknown_topic"), std::string::npos)
    << missing.err;
  auto notdlq = ctl({"dlq", "purge", "orders"});
  EXPECT_EQ(notdlq.exit_code, 1);
  EXPECT_NE(notdlq.err.find("invalid_request"), std::string::npos)
    << notdlq.err;
}

} // namespace
