// TLS on the CAF port (issue 16, first part), across real processes:
// ferryd started with --tls-cert/--tls-key/--tls-ca serves clients with a
// certificate from its CA and refuses every other kind (none, plaintext,
// another CA, expired), and keeps serving; it refuses to start with TLS
// half-configured or broken; SIGHUP swaps in new files only when they
// pass the checks; a 3-node cluster replicates and fails over over mutual
// TLS. Certificates come from Debian's `openssl`; `openssl s_client` checks
// the port as an outside tool sees it.

#include "cluster_harness.hpp"
#include "ferryctl_run.hpp"
#include "process.hpp"
#include "test_certs.hpp"

#include "actors/client/tls.hpp"
#include "broker/error.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ferry::test::ferryctl;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using ferry::test::test_certs;

namespace {

/// ferryctl against `endpoint` with TLS args (may be empty) in front.
ferry::test::command_result ctl(const std::string& endpoint, std::vector<std::string> tls,
                                std::vector<std::string> args,
                                const std::string& input = {}) {
  tls.insert(tls.end(), args.begin(), args.end());
  tls.insert(tls.begin(), {"--connect-timeout", "3000"});
  return ferryctl(endpoint, tls, input, 60s);
}

/// `openssl s_client` to 127.0.0.1:port with `extra` args; its stdin stays
/// open for ~1 s so that a refusal of the client certificate (sent after the
/// handshake in TLS 1.3) reaches it. stdout + stderr.
std::string s_client(test_certs& certs, uint16_t port, std::vector<std::string> extra) {
  std::vector<std::string> args{"-c", "sleep 1 | /usr/bin/openssl s_client -connect 127.0.0.1:"
                                        + std::to_string(port) + " -CAfile "
                                        + certs.path("ca.pem")};
  for (auto& e : extra)
    args[1] += " " + e;
  args[1] += " 2>&1";
  auto r = run_command("/bin/sh", args, 20s);
  return r.out + r.err;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}


/// `curl` against https://127.0.0.1:port/path trusting the cluster CA, with
/// `extra` args (a client certificate...). stdout is the body followed by
/// a last line with the HTTP status (000 when no reply came).
ferry::test::command_result curl(test_certs& certs, const std::string& scheme, uint16_t port,
                                 const std::string& path, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"-sS", "--max-time", "10", "--cacert", certs.path("ca.pem"),
                                "-w", "\n%{http_code}"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(scheme + "://127.0.0.1:" + std::to_string(port) + path);
  return run_command("/usr/bin/curl", args, 30s);
}

std::vector<std::string> client_cert(test_certs& certs, const std::string& name) {
  return {"--cert", certs.path(name + ".pem"), "--key", certs.path(name + ".key")};
}

/// The status line curl printed last.
std::string status_of(const ferry::test::command_result& r) {
  auto nl = r.out.rfind('\n');
  return nl == std::string::npos ? r.out : r.out.substr(nl + 1);
}

} // namespace

TEST(Tls, RefusesToStartHalfConfiguredBrokenOrExposed) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  ASSERT_TRUE(certs.make_cert("node"));
  ASSERT_TRUE(certs.make_cert("other"));
  ASSERT_TRUE(certs.make_cert("old", "ca", -1));
  ferry::test::temp_dir dir{"ferry-tls-start"};
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--data-dir", (dir.path() / "d").string(), "--port", "0",
                                  "--metrics-port", "-1", "--http-port", "-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_command(FERRYD_PATH, args, 20s);
  };
  auto half = start({"--tls-cert", certs.path("node.pem")});
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_TRUE(contains(half.err, "missing: key, CA file")) << half.err;
  auto expired = start(certs.args("old"));
  EXPECT_EQ(expired.exit_code, 2);
  EXPECT_TRUE(contains(expired.err, "has expired")) << expired.err;
  auto mismatch = start({"--tls-cert", certs.path("node.pem"), "--tls-key",
                         certs.path("other.key"), "--tls-ca", certs.path("ca.pem")});
  EXPECT_EQ(mismatch.exit_code, 2);
  EXPECT_TRUE(contains(mismatch.err, "does not belong to the certificate")) << mismatch.err;
  // A cluster node's certificate is its client certificate towards its
  // peers too, so it must chain to the CA file. (A single node serves only
  // clients, and its certificate may come from another CA than theirs.)
  auto wrong_ca_args = certs.args("node", "otherca");
  wrong_ca_args.insert(wrong_ca_args.end(), {"--node-id", "1", "--voters",
                                             "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"});
  auto wrong_ca = start(wrong_ca_args);
  EXPECT_EQ(wrong_ca.exit_code, 2);
  EXPECT_TRUE(contains(wrong_ca.err, "does not verify against the CA file")) << wrong_ca.err;
  auto missing = start({"--tls-cert", certs.path("nope.pem"), "--tls-key",
                        certs.path("node.key"), "--tls-ca", certs.path("ca.pem")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, "cannot read TLS certificate")) << missing.err;
  // Not loopback: refused without --insecure (nothing is bound: it exits
  // before opening any port).
  auto exposed = start({"--host", "0.0.0.0"});
  EXPECT_EQ(exposed.exit_code, 2);
  EXPECT_TRUE(contains(exposed.err, "refusing to listen on 0.0.0.0")) << exposed.err;
  EXPECT_TRUE(contains(exposed.err, "--insecure")) << exposed.err;
}

TEST(Tls, MutualTlsServesGoodClientsAndRefusesEveryOther) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  ASSERT_TRUE(certs.make_cert("stranger", "otherca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("old", "ca", -1)) << certs.why();
  ferryd_process node{certs.args("node")};
  ASSERT_TRUE(node.start()) << node.output();
  EXPECT_TRUE(contains(node.output(), "TLS on every port")) << node.output();
  EXPECT_FALSE(contains(node.output(), "BEGIN")) << "no key material in the log";
  auto ep = node.endpoint();
  auto good = certs.args("client");

  auto created = ctl(ep, good, {"topic", "create", "secure", "--partitions", "2"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  auto produced = ctl(ep, good, {"produce", "secure"}, "one\ntwo\nthree\n");
  ASSERT_EQ(produced.exit_code, 0) << produced.err;

  // No TLS at all: the handshake fails, with a hint.
  auto plain = ctl(ep, {}, {"topic", "list"});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_TRUE(contains(plain.err, "a node with TLS needs --tls-cert")) << plain.err;
  // A certificate from another CA (the client trusts the node's CA).
  auto stranger = ctl(ep, {"--tls-cert", certs.path("stranger.pem"), "--tls-key",
                           certs.path("stranger.key"), "--tls-ca", certs.path("ca.pem")},
                      {"topic", "list"});
  EXPECT_NE(stranger.exit_code, 0);
  EXPECT_TRUE(contains(stranger.err, "TLS handshake failed")) << stranger.err;
  // The client does not trust the node's CA.
  auto distrust = ctl(ep, certs.args("client", "otherca"), {"topic", "list"});
  EXPECT_NE(distrust.exit_code, 0);
  EXPECT_TRUE(contains(distrust.err, "TLS handshake failed")) << distrust.err;
  // ferryctl refuses an expired certificate of its own before connecting.
  auto expired = ctl(ep, certs.args("old"), {"topic", "list"});
  EXPECT_EQ(expired.exit_code, 2);
  EXPECT_TRUE(contains(expired.err, "has expired")) << expired.err;

  // The port as openssl sees it: the node's certificate verifies against
  // the CA; no client certificate, an expired one, or one of another CA
  // gets an alert; a good one none.
  auto ok = s_client(certs, node.port(),
                     {"-cert", certs.path("client.pem"), "-key", certs.path("client.key")});
  EXPECT_TRUE(contains(ok, "Verify return code: 0 (ok)")) << ok;
  EXPECT_TRUE(contains(ok, "CN = node")) << ok;
  EXPECT_FALSE(contains(ok, "alert")) << ok;
  auto none = s_client(certs, node.port(), {});
  EXPECT_TRUE(contains(none, "alert certificate required")) << none;
  auto old = s_client(certs, node.port(),
                      {"-cert", certs.path("old.pem"), "-key", certs.path("old.key")});
  EXPECT_TRUE(contains(old, "alert certificate expired")) << old;
  auto other = s_client(certs, node.port(),
                        {"-cert", certs.path("stranger.pem"), "-key", certs.path("stranger.key")});
  EXPECT_TRUE(contains(other, "alert unknown ca")) << other;

  // After all of that the node still serves a good client everything: a
  // CAF-native producer in a TLS client system, then ferryctl.
  ASSERT_TRUE(node.running()) << node.output();
  {
    ferry::test::client_system cs{certs.settings("client")};
    ferry::producer_config pc;
    pc.bootstrap = ep;
    pc.acks = ferry::acks_mode::all;
    auto prod = ferry::spawn_producer(*cs.sys, pc);
    ASSERT_TRUE(prod) << ferry::error_text(prod.error());
    cs.track(*prod);
    auto reports = ferry::test::produce_one(*cs.sys, *prod, "secure", "four", 30s);
    ASSERT_TRUE(reports) << ferry::error_text(reports.error());
    ASSERT_EQ(reports->size(), 1u);
  }
  auto consumed = ctl(ep, good, {"consume", "secure", "--from-beginning", "--max", "4",
                                 "--timeout", "10000"});
  ASSERT_EQ(consumed.exit_code, 0) << consumed.err;
  for (auto* v : {"one", "two", "three", "four"})
    EXPECT_TRUE(contains(consumed.out, v)) << consumed.out;
}

TEST(Tls, SighupSwapsInCheckedFilesAndKeepsTheOldOnesOtherwise) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "renewed", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  // The operator's files, which the test overwrites.
  ferry::test::temp_dir ops{"ferry-tls-ops"};
  auto cert = (ops.path() / "node.pem").string();
  auto key = (ops.path() / "node.key").string();
  auto copy = [](const std::string& from, const std::string& to) {
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  };
  copy(certs.path("node.pem"), cert);
  copy(certs.path("node.key"), key);
  ferryd_process node{{"--tls-cert", cert, "--tls-key", key, "--tls-ca", certs.path("ca.pem")}};
  ASSERT_TRUE(node.start()) << node.output();
  auto key_args = std::vector<std::string>{"-cert", certs.path("client.pem"), "-key",
                                           certs.path("client.key")};
  EXPECT_TRUE(contains(s_client(certs, node.port(), key_args), "CN = node"));

  // Renewed files: swapped in, new connections see the new certificate.
  copy(certs.path("renewed.pem"), cert);
  copy(certs.path("renewed.key"), key);
  ASSERT_EQ(::kill(node.pid(), SIGHUP), 0);
  EXPECT_TRUE(ferry::test::wait_until(10s, [&] {
    return contains(node.output(), "SIGHUP: reloaded the TLS files");
  })) << node.output();
  auto renewed = s_client(certs, node.port(), key_args);
  EXPECT_TRUE(contains(renewed, "CN = renewed")) << renewed;
  // The HTTP API and metrics ports reloaded too.
  for (auto port : {node.http_port(), node.metrics_port()}) {
    auto https = curl(certs, "https", port, port == node.http_port() ? "/healthz" : "/metrics",
                      {"-v", "--cert", certs.path("client.pem"), "--key",
                       certs.path("client.key")});
    EXPECT_EQ(https.exit_code, 0) << https.err;
    EXPECT_TRUE(contains(https.err, "subject: CN=renewed")) << https.err;
  }

  // A broken certificate file: kept the old files, still serving.
  {
    std::ofstream out{cert, std::ios::trunc};
    out << "not a certificate\n";
  }
  ASSERT_EQ(::kill(node.pid(), SIGHUP), 0);
  EXPECT_TRUE(ferry::test::wait_until(10s, [&] {
    return contains(node.output(), "SIGHUP: kept the current TLS files");
  })) << node.output();
  ASSERT_TRUE(node.running()) << node.output();
  auto still = s_client(certs, node.port(), key_args);
  EXPECT_TRUE(contains(still, "CN = renewed")) << still;
  EXPECT_TRUE(contains(still, "Verify return code: 0 (ok)")) << still;
  auto listed = ctl(node.endpoint(), certs.args("client"), {"topic", "list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
}

TEST(Tls, ThreeNodeClusterReplicatesAndFailsOverOverMutualTls) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  ferry::test::cluster c{certs.settings("client")};
  c.add_node_args(certs.args("node"));
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "secure";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  auto bootstrap = c.endpoints();
  auto prod = ferry::test::make_producer(c, bootstrap);
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto send = [&](const std::string& value) {
    return ferry::test::produce_one(*c.cs.sys, *prod, topic, value);
  };
  auto first = send("before");
  ASSERT_TRUE(first) << ferry::error_text(first.error()) << "\n" << c.dump();
  // acks=all over RF=3: both followers fetched it over TLS links. The
  // links stay up: each pair of nodes keeps one connection (node 1 adopts
  // the connections of nodes 2 and 3, node 2 that of node 3).
  std::string out;
  for (int id = 1; id <= 3; ++id)
    EXPECT_FALSE(contains(c.node(id).output(), "is down")) << "node " << id << "\n"
                                                          << c.node(id).output();
  auto leader = c.leader_of(topic, 0);
  ASSERT_GE(leader, 1) << c.dump();
  c.kill(leader);
  ASSERT_TRUE(ferry::test::wait_until(30s, [&] {
    auto l = c.leader_of(topic, 0);
    return l >= 1 && l != leader;
  })) << "no new leader after killing node " << leader << "\n" << c.dump();
  auto second = send("after");
  ASSERT_TRUE(second) << ferry::error_text(second.error()) << "\n" << c.dump();
  auto restarted = c.restart(leader);
  ASSERT_TRUE(restarted.empty()) << restarted;
  // Read back through ferryctl with TLS from the restarted node, once it
  // has caught up.
  ASSERT_TRUE(ferry::test::wait_until(30s, [&] {
    auto r = ctl(c.endpoint(leader), certs.args("client"),
                 {"consume", topic, "--from-beginning", "--max", "2", "--timeout", "5000"});
    out = r.out + r.err;
    return r.exit_code == 0 && contains(r.out, "before") && contains(r.out, "after");
  })) << out << "\n" << c.dump();
}


// Clients that come and go (short-lived ferryctl runs, a refused
// certificate, a plaintext client) leave the nodes' links alone: before the
// OpenSSL error-queue fix in actors/client/tls.cpp each client that ended
// took every peer link of the node it used down (and with them the
// followers' fetches for ~12 s).
TEST(Tls, ClientsComingAndGoingLeaveTheNodeLinksUp) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  ASSERT_TRUE(certs.make_cert("stranger", "otherca")) << certs.why();
  ferry::test::cluster c{certs.settings("client")};
  c.add_node_args(certs.args("node"));
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "steady";
  auto why = c.create_topic(topic, 3, 3);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 3)) << c.dump();
  for (int id = 1; id <= 3; ++id) {
    for (int i = 0; i < 3; ++i) {
      auto r = ctl(c.endpoint(id), certs.args("client"), {"topic", "list"});
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    auto stranger = ctl(c.endpoint(id), certs.args("stranger", "ca"), {"topic", "list"});
    EXPECT_NE(stranger.exit_code, 0);
    auto plain = ctl(c.endpoint(id), {}, {"topic", "list"});
    EXPECT_NE(plain.exit_code, 0);
  }
  // Replication still flows at once: acks=all over RF=3.
  auto prod = ferry::test::make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  std::vector<ferry::client_message> msgs(3);
  for (int p = 0; p < 3; ++p) {
    msgs[p].topic = topic;
    msgs[p].partition = p;
    msgs[p].value = "after the clients";
  }
  auto sent = ferry::test::ask<std::vector<ferry::delivery_report>>(*c.cs.sys, *prod, 60s,
                                                                   ferry::produce_atom_v, msgs);
  ASSERT_TRUE(sent) << ferry::error_text(sent.error()) << "\n" << c.dump();
  for (int id = 1; id <= 3; ++id) {
    EXPECT_FALSE(contains(c.node(id).output(), "is down")) << "node " << id << "\n"
                                                          << c.node(id).output();
    EXPECT_FALSE(contains(c.node(id).output(), "unanswered")) << "node " << id;
  }
}

TEST(Tls, HttpsApiAndMetricsServeCertifiedClientsOnly) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  ASSERT_TRUE(certs.make_cert("stranger", "otherca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("old", "ca", -1)) << certs.why();
  ferryd_process node{certs.args("node")};
  ASSERT_TRUE(node.start()) << node.output();
  auto http = node.http_port();
  auto metrics = node.metrics_port();
  ASSERT_NE(http, 0) << node.output();
  ASSERT_NE(metrics, 0) << node.output();
  auto good = client_cert(certs, "client");

  // A certified client uses the whole API over https.
  auto json_post = [&](const std::string& path, const std::string& body) {
    auto args = good;
    args.insert(args.end(), {"-X", "POST", "-H", "Content-Type: application/json", "--data",
                             body});
    return curl(certs, "https", http, path, args);
  };
  auto created = json_post("/v1/topics", R"({"name":"web","partitions":1})");
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(status_of(created), "201") << created.out;
  auto produced = json_post("/v1/topics/web/messages?acks=all",
                            R"({"records":[{"key":"k","value":"over https"}]})");
  ASSERT_EQ(produced.exit_code, 0) << produced.err;
  EXPECT_EQ(status_of(produced), "200") << produced.out;
  auto fetched = curl(certs, "https", http,
                      "/v1/topics/web/partitions/0/messages?offset=earliest", good);
  ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
  EXPECT_TRUE(contains(fetched.out, "over https")) << fetched.out;

  // Refused: no client certificate, one of another CA, an expired one; a
  // client that does not trust the node's CA refuses the node itself.
  for (auto* port : {&http, &metrics}) {
    auto path = port == &http ? std::string{"/v1/topics"} : std::string{"/metrics"};
    auto none = curl(certs, "https", *port, path);
    EXPECT_NE(none.exit_code, 0) << none.out;
    EXPECT_TRUE(contains(none.err, "certificate required")) << none.err;
    auto stranger = curl(certs, "https", *port, path, client_cert(certs, "stranger"));
    EXPECT_NE(stranger.exit_code, 0) << stranger.out;
    EXPECT_TRUE(contains(stranger.err, "unknown ca")) << stranger.err;
    auto old = curl(certs, "https", *port, path, client_cert(certs, "old"));
    EXPECT_NE(old.exit_code, 0) << old.out;
    EXPECT_TRUE(contains(old.err, "certificate expired")) << old.err;
    auto distrust = run_command("/usr/bin/curl",
                                {"-sS", "--max-time", "10", "--cacert",
                                 certs.path("otherca.pem"), "--cert", certs.path("client.pem"),
                                 "--key", certs.path("client.key"),
                                 "https://127.0.0.1:" + std::to_string(*port) + path},
                                30s);
    EXPECT_EQ(distrust.exit_code, 60) << distrust.err; // peer certificate not verified
    // Plain HTTP on the TLS port: a plain 400 that says what to do.
    auto plain = curl(certs, "http", *port, path);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(status_of(plain), "400") << plain.out;
    EXPECT_TRUE(contains(plain.out, "this port speaks TLS")) << plain.out;
  }
  EXPECT_TRUE(contains(node.output(), "refused a TLS connection from 127.0.0.1"))
    << node.output();

  // And after all of that both ports still serve a certified client.
  ASSERT_TRUE(node.running()) << node.output();
  auto again = curl(certs, "https", http, "/v1/topics", good);
  EXPECT_EQ(status_of(again), "200") << again.out << again.err;
  EXPECT_TRUE(contains(again.out, "web")) << again.out;
  auto scraped = curl(certs, "https", metrics, "/metrics", good);
  EXPECT_EQ(status_of(scraped), "200") << scraped.out << scraped.err;
  EXPECT_TRUE(contains(scraped.out, "ferry_partition_high_watermark{")) << scraped.out;
  auto other = curl(certs, "https", metrics, "/v1/topics", good);
  EXPECT_EQ(status_of(other), "404") << other.out;
}

TEST(Tls, RequestedClientAuthLetsClientsWithoutACertificateUseHttps) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  ASSERT_TRUE(certs.make_cert("node")) << certs.why();
  ASSERT_TRUE(certs.make_cert("stranger", "otherca")) << certs.why();
  auto args = certs.args("node");
  args.insert(args.end(), {"--tls-client-auth", "requested"});
  ferryd_process node{args};
  ASSERT_TRUE(node.start()) << node.output();
  auto none = curl(certs, "https", node.http_port(), "/healthz");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(status_of(none), "200") << none.out;
  // A certificate that is sent must still be valid.
  auto stranger = curl(certs, "https", node.http_port(), "/healthz",
                       client_cert(certs, "stranger"));
  EXPECT_NE(stranger.exit_code, 0) << stranger.out;
  // The CAF port requires one regardless (CAF's TLS is mutual).
  auto plain = ctl(node.endpoint(), {}, {"topic", "list"});
  EXPECT_NE(plain.exit_code, 0);
  // Not mutual on every port: a non-loopback address still needs --insecure.
  auto exposed_args = args;
  exposed_args.insert(exposed_args.end(), {"--host", "0.0.0.0", "--port", "0"});
  ferry::test::temp_dir dir{"ferry-exposed"};
  exposed_args.insert(exposed_args.end(), {"--data-dir", (dir.path() / "d").string()});
  auto exposed = run_command(FERRYD_PATH, exposed_args, 20s);
  EXPECT_EQ(exposed.exit_code, 2) << exposed.err;
  EXPECT_TRUE(contains(exposed.err, "--insecure")) << exposed.err;
}

TEST(Tls, PrometheusScrapesTheMetricsPortOverMutualTls) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "prometheus"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  ferryd_process node{certs.args("node")};
  ASSERT_TRUE(node.start()) << node.output();
  // Two jobs on the same port: one with a client certificate, one without.
  ferry::test::temp_dir dir{"ferry-prometheus-tls"};
  auto target = "127.0.0.1:" + std::to_string(node.metrics_port());
  {
    std::ofstream out{dir.path() / "prometheus.yml"};
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
           "scrape_configs:\n"
           "  - job_name: ferry\n    scheme: https\n    tls_config:\n"
        << "      ca_file: " << certs.path("ca.pem") << "\n"
        << "      cert_file: " << certs.path("prometheus.pem") << "\n"
        << "      key_file: " << certs.path("prometheus.key") << "\n"
        << "    static_configs:\n      - targets: ['" << target << "']\n"
        << "  - job_name: nocert\n    scheme: https\n    tls_config:\n"
        << "      ca_file: " << certs.path("ca.pem") << "\n"
        << "    static_configs:\n      - targets: ['" << target << "']\n";
  }
  auto port = ferry::test::free_port();
  auto prom = ferry::test::child_process::start(
    "/usr/bin/prometheus",
    {"--config.file=" + (dir.path() / "prometheus.yml").string(),
     "--storage.tsdb.path=" + (dir.path() / "data").string(),
     "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"});
  ASSERT_TRUE(prom);
  struct stopper {
    ferry::test::child_process* p;
    ~stopper() {
      p->signal(SIGTERM);
      if (!p->wait_exit(15s))
        p->kill_and_reap();
    }
  } stop{prom.get()};
  // up per job, from Prometheus's query API (plain HTTP on loopback).
  auto up = [&](const std::string& job) {
    auto r = ferry::test::http_get(port, "/api/v1/query?query=up%7Bjob%3D%22" + job + "%22%7D",
                                   2s);
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded() || j["data"]["result"].empty())
      return std::string{};
    return j["data"]["result"][0]["value"][1].get<std::string>();
  };
  bool both = ferry::test::wait_until(40s, [&] {
    return up("ferry") == "1" && up("nocert") == "0";
  });
  EXPECT_TRUE(both) << "up ferry=" << up("ferry") << " nocert=" << up("nocert") << "\n"
                    << prom->combined();
  // A Ferry series made it through the TLS scrape.
  auto r = ferry::test::http_get(port, "/api/v1/query?query=ferry_disk_used_bytes", 2s);
  EXPECT_TRUE(contains(r.body, "ferry_disk_used_bytes")) << r.body;
}
