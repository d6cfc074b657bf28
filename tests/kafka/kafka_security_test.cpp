// The Kafka listener with TLS and SASL (issues 16 and 17), across real
// processes: a ferryd with --tls-* and --auth scram serves Kafka clients
// from Debian (kcat 1.7 / librdkafka 2.0, kafka-python 2.0) as the same
// users, checked against the same ACLs, as HTTP and the CAF port. Users
// and ACLs are made with ferryctl as the cluster's operator. Every ferryd
// is stopped by its destructor; every client runs with a timeout.

#include "integration/ferryctl_run.hpp"
#include "integration/process.hpp"
#include "integration/test_certs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using namespace ferry::test;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string sasl_script() {
  return (std::filesystem::path{FERRY_SOURCE_DIR} / "tests/kafka/kafka_sasl_check.py").string();
}

/// A node with TLS (client certificates requested, not required: Kafka
/// clients log in with a password), --auth scram, an audit log and a Kafka
/// port; users admin (a superuser) and alice.
class KafkaSasl : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.why();
    for (auto* name : {"node", "client"})
      ASSERT_TRUE(certs_.make_cert(name)) << certs_.why();
    audit_ = (dir_.path() / "audit.log").string();
    auto args = certs_.args("node");
    args.insert(args.end(), {"--auth", "scram", "--superusers", "admin", "--audit-log",
                             audit_, "--tls-client-auth", "requested",
                             "--cluster-secret-file", certs_.secret_file(),
                             "--kafka-port", "0"});
    auto extra = extra_args();
    args.insert(args.end(), extra.begin(), extra.end());
    node_ = std::make_unique<ferryd_process>(args);
    ASSERT_TRUE(node_->start()) << node_->output();
    ASSERT_NE(node_->kafka_port(), 0) << node_->output();
    ctl_ok({"user", "create", "admin", "--password-stdin"}, "admin-secret-1\n");
    ctl_ok({"user", "create", "alice", "--password-stdin"}, "alice-secret-1\n");
  }

  void TearDown() override {
    if (node_) {
      EXPECT_EQ(node_->stop(), 0) << node_->output();
    }
  }

  virtual std::vector<std::string> extra_args() const {
    return {};
  }

  /// ferryctl as the cluster's operator (client certificate and secret).
  command_result ctl(std::vector<std::string> args, const std::string& input = {}) {
    auto full = certs_.args("client");
    full.insert(full.end(), {"--cluster-secret-file", certs_.secret_file()});
    full.insert(full.end(), args.begin(), args.end());
    return ferryctl(node_->endpoint(), full, input, 60s);
  }

  void ctl_ok(std::vector<std::string> args, const std::string& input = {}) {
    auto r = ctl(args, input);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  }

  std::string bootstrap() const {
    return "127.0.0.1:" + std::to_string(node_->kafka_port());
  }

  /// kcat over SASL_SSL as `user` with `mechanism`, then `args`.
  command_result kcat(const std::string& user, const std::string& password,
                      const std::string& mechanism, std::vector<std::string> args,
                      const std::string& input = {}, std::chrono::seconds timeout = 40s) {
    std::vector<std::string> full{"-b", bootstrap(), "-X", "security.protocol=SASL_SSL",
                                  "-X", "ssl.ca.location=" + certs_.path("ca.pem"),
                                  "-X", "sasl.mechanisms=" + mechanism,
                                  "-X", "sasl.username=" + user,
                                  "-X", "sasl.password=" + password};
    full.insert(full.end(), args.begin(), args.end());
    return run_command("/usr/bin/kcat", full, timeout, input);
  }

  command_result python(std::vector<std::string> args) {
    args.insert(args.begin(), sasl_script());
    return run_command("/usr/bin/python3", args, 120s);
  }

  test_certs certs_;
  temp_dir dir_{"ferry-kafka-sasl"};
  std::string audit_;
  std::unique_ptr<ferryd_process> node_;
};

TEST_F(KafkaSasl, KcatLogsInWithScramOrPlainAndEachRequestIsCheckedAgainstTheAcls) {
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/kcat"))
    << "kcat is missing: run deploy/install-deps.sh";
  ctl_ok({"topic", "create", "orders", "--partitions", "2"});
  ctl_ok({"topic", "create", "secret", "--partitions", "1"});
  // The superuser sees every topic (SCRAM-SHA-256 from librdkafka 2.0,
  // whose client-final nonce repeats its client nonce, as Kafka 3 takes).
  auto all = kcat("admin", "admin-secret-1", "SCRAM-SHA-256", {"-L", "-m", "20"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_TRUE(contains(all.out, "topic \"orders\"")) << all.out;
  EXPECT_TRUE(contains(all.out, "topic \"secret\"")) << all.out;
  // alice (PLAIN) may do nothing yet: no topics listed, no produce.
  auto none = kcat("alice", "alice-secret-1", "PLAIN", {"-L", "-m", "20"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(contains(none.out, " 0 topics")) << none.out;
  auto denied = kcat("alice", "alice-secret-1", "SCRAM-SHA-256",
                     {"-P", "-t", "orders", "-K", ":"}, "k1:first\n");
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_TRUE(contains(denied.err, "Topic authorization failed")) << denied.err;
  // Allowed to write: the record is stored.
  ctl_ok({"acl", "add", "--principal", "User:alice", "--operation", "write", "--topic",
          "orders"});
  auto wrote = kcat("alice", "alice-secret-1", "SCRAM-SHA-256",
                    {"-P", "-t", "orders", "-K", ":", "-X", "acks=all"}, "k1:first\n");
  ASSERT_EQ(wrote.exit_code, 0) << wrote.err;
  // Writing does not allow reading.
  auto unread = kcat("alice", "alice-secret-1", "PLAIN",
                     {"-C", "-t", "orders", "-e", "-o", "beginning", "-f", "%k=%s\\n"});
  EXPECT_TRUE(contains(unread.err, "Topic authorization failed")) << unread.err;
  EXPECT_FALSE(contains(unread.out, "k1=first")) << unread.out;
  ctl_ok({"acl", "add", "--principal", "User:alice", "--operation", "read", "--topic",
          "orders"});
  auto read = kcat("alice", "alice-secret-1", "PLAIN",
                   {"-C", "-t", "orders", "-e", "-o", "beginning", "-f", "%k=%s\\n"});
  EXPECT_EQ(read.exit_code, 0) << read.err;
  EXPECT_TRUE(contains(read.out, "k1=first")) << read.out << read.err;
  // Listing shows the topic alice may describe (read implies it), not the other.
  auto some = kcat("alice", "alice-secret-1", "PLAIN", {"-L", "-m", "20"});
  EXPECT_TRUE(contains(some.out, "topic \"orders\"")) << some.out;
  EXPECT_FALSE(contains(some.out, "secret")) << some.out;
  // A deny wins over the allow.
  ctl_ok({"acl", "add", "--principal", "User:alice", "--operation", "read", "--topic",
          "orders", "--deny"});
  auto again = kcat("alice", "alice-secret-1", "PLAIN",
                    {"-C", "-t", "orders", "-e", "-o", "beginning", "-f", "%k=%s\\n"});
  EXPECT_TRUE(contains(again.err, "Topic authorization failed")) << again.err;
  EXPECT_FALSE(contains(again.out, "k1=first")) << again.out;
  // A wrong password gets no metadata at all.
  auto wrong = kcat("alice", "wrong-password", "SCRAM-SHA-256", {"-L", "-m", "5"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_TRUE(contains(wrong.err, "unknown user or wrong password")) << wrong.err;
  // Denials and failed logins are audited (via kafka), passwords never.
  auto audit = slurp(audit_);
  EXPECT_TRUE(contains(audit, "\"via\":\"kafka\"")) << audit;
  // (librdkafka asks for the topic's metadata before it produces.)
  EXPECT_TRUE(contains(audit, "User:alice may not describe topic orders")) << audit;
  EXPECT_TRUE(contains(audit, "User:alice may not read topic orders")) << audit;
  EXPECT_TRUE(contains(audit, "wrong password")) << audit;
  for (auto* secret : {"alice-secret-1", "admin-secret-1", "wrong-password"}) {
    EXPECT_FALSE(contains(audit, secret)) << secret;
    EXPECT_FALSE(contains(node_->output(), secret)) << secret;
  }
}

TEST_F(KafkaSasl, KafkaPythonLogsInBothWaysAndTheLoginProtocolRefusesWhatItMust) {
  ctl_ok({"topic", "create", "jobs", "--partitions", "2"});
  ctl_ok({"topic", "create", "audit-only", "--partitions", "1"});
  ctl_ok({"acl", "add", "--principal", "User:alice", "--operation", "all", "--topic",
          "jobs"});
  ctl_ok({"acl", "add", "--principal", "User:alice", "--operation", "describe", "--topic",
          "audit-only"});
  // By hand: a request before the login, an unknown mechanism, a token
  // without a handshake, a wrong password, an unknown user, a replay.
  auto raw = python({"raw", bootstrap(), certs_.path("ca.pem")});
  EXPECT_EQ(raw.exit_code, 0) << raw.out << raw.err;
  for (auto* check : {"metadata-before-login-closes", "unsupported-mechanism",
                      "authenticate-without-handshake", "plain-wrong-password",
                      "scram-unknown-user", "scram-login", "scram-replay-refused"})
    EXPECT_TRUE(contains(raw.out, std::string{"ok "} + check)) << check << "\n" << raw.out;
  // kafka-python (SaslHandshake v0, then raw tokens) with both mechanisms.
  for (auto* mechanism : {"SCRAM-SHA-256", "PLAIN"}) {
    auto r = python({"clients", bootstrap(), certs_.path("ca.pem"), "alice",
                     "alice-secret-1", mechanism, "jobs", "30"});
    EXPECT_EQ(r.exit_code, 0) << mechanism << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "produced 30")) << mechanism << r.out << r.err;
    EXPECT_TRUE(contains(r.out, "consumed 30")) << mechanism << r.out << r.err;
  }
  auto d = python({"denied", bootstrap(), certs_.path("ca.pem"), "alice", "alice-secret-1",
                   "audit-only"});
  EXPECT_TRUE(contains(d.out, "denied write")) << d.out << d.err;
  // Nothing of the refused produce was stored.
  auto offsets = ctl({"topic", "describe", "audit-only", "--json"});
  ASSERT_EQ(offsets.exit_code, 0) << offsets.err;
  EXPECT_TRUE(std::regex_search(offsets.out, std::regex{R"("high_watermark":\s*0\b)"}))
    << offsets.out;
}

/// Five failed logins lock an address out for 10 s.
class KafkaSaslLockout : public KafkaSasl {
protected:
  std::vector<std::string> extra_args() const override {
    return {"--login-lockout-ms", "10000"};
  }
};

TEST_F(KafkaSaslLockout, FailedLoginsFromOneAddressAreSlowedDown) {
  // Exactly five wrong passwords, one login each (kcat would retry on its
  // own), then the right one from kcat: refused while the lockout lasts.
  auto guesses = python({"guess", bootstrap(), certs_.path("ca.pem"), "alice", "5"});
  ASSERT_TRUE(contains(guesses.out, "refused 5")) << guesses.out << guesses.err;
  auto locked = kcat("alice", "alice-secret-1", "SCRAM-SHA-256", {"-L", "-m", "3"}, {}, 20s);
  EXPECT_NE(locked.exit_code, 0);
  EXPECT_TRUE(contains(locked.err, "too many failed logins from 127.0.0.1")) << locked.err;
  EXPECT_TRUE(contains(node_->output(), "kafka: login failed for user 'alice'"))
    << node_->output();
}

/// A node with TLS on every port, client certificates required, no users.
class KafkaTls : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.why();
    for (auto* name : {"node", "client"})
      ASSERT_TRUE(certs_.make_cert(name)) << certs_.why();
    ASSERT_TRUE(certs_.make_cert("stranger", "otherca")) << certs_.why();
    auto args = certs_.args("node");
    args.insert(args.end(), {"--kafka-port", "0"});
    node_ = std::make_unique<ferryd_process>(args);
    ASSERT_TRUE(node_->start()) << node_->output();
    ASSERT_NE(node_->kafka_port(), 0) << node_->output();
  }

  void TearDown() override {
    if (node_) {
      EXPECT_EQ(node_->stop(), 0) << node_->output();
    }
  }

  /// kcat -L with `settings` (-X pairs).
  command_result metadata(const std::vector<std::string>& settings) {
    std::vector<std::string> args{"-b", "127.0.0.1:" + std::to_string(node_->kafka_port()),
                                  "-L", "-m", "5"};
    for (auto& s : settings)
      args.insert(args.end(), {"-X", s});
    return run_command("/usr/bin/kcat", args, 30s);
  }

  std::vector<std::string> ssl_as(const std::string& name, const std::string& ca = "ca") {
    return {"security.protocol=SSL", "ssl.ca.location=" + certs_.path("ca.pem"),
            "ssl.certificate.location=" + certs_.path(name + ".pem"),
            "ssl.key.location=" + certs_.path(name + ".key")};
  }

  test_certs certs_;
  std::unique_ptr<ferryd_process> node_;
};

TEST_F(KafkaTls, OnlyClientsWithACertificateFromTheClusterCaGetIn) {
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/kcat"))
    << "kcat is missing: run deploy/install-deps.sh";
  // Plaintext on the TLS port, no client certificate, one from another CA.
  EXPECT_NE(metadata({}).exit_code, 0);
  EXPECT_NE(metadata({"security.protocol=SSL", "ssl.ca.location=" + certs_.path("ca.pem")})
              .exit_code,
            0);
  EXPECT_NE(metadata(ssl_as("stranger")).exit_code, 0);
  // The node keeps serving the client it trusts.
  auto ok = metadata(ssl_as("client"));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "ssl://127.0.0.1:" + std::to_string(node_->kafka_port())))
    << ok.out;
  EXPECT_TRUE(contains(node_->output(), "TLS handshake failed")) << node_->output();
  // openssl s_client sees the node's certificate chain to the cluster CA.
  auto s = run_command("/usr/bin/openssl",
                       {"s_client", "-connect",
                        "127.0.0.1:" + std::to_string(node_->kafka_port()), "-CAfile",
                        certs_.path("ca.pem"), "-cert", certs_.path("client.pem"), "-key",
                        certs_.path("client.key"), "-brief"},
                       30s, "");
  EXPECT_TRUE(contains(s.out + s.err, "Verification: OK")) << s.out << s.err;
  EXPECT_TRUE(contains(s.out + s.err, "TLSv1.3")) << s.out << s.err;
}

} // namespace
