// Users, ACLs and the audit log (issue 16), across real processes: a ferryd
// with TLS and --auth scram; users and ACLs made with ferryctl (over the
// CAF port, where the client certificate is the credential) and over HTTP;
// curl logs in with HTTP Basic over https. Each operation is denied without
// an ACL, allowed with one, denied again by a deny and after removal; a user
// who may not read a topic gets none of its records through its DLQ or its
// group's description; failed logins are slowed down; denials and admin
// changes are in the audit log, secrets nowhere; a bearer token stands for
// the password until it expires or the password changes.

#include "cluster_harness.hpp"
#include "ferryctl_run.hpp"
#include "process.hpp"
#include "test_certs.hpp"

#include "broker/scram_exchange.hpp"
#include "broker/security.hpp"

#include <caf/openssl/remote_actor.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ferry::test::ferryctl;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using ferry::test::test_certs;
using json = nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct reply {
  int status = 0;
  std::string body;
  std::string headers;
  json j() const { return json::parse(body, nullptr, false); }
  std::string code() const {
    auto x = j();
    return x.is_object() && x.contains("error") ? x["error"].value("code", "") : "";
  }
};

/// curl -X METHOD https://127.0.0.1:PORT/path with `auth` (curl arguments:
/// -u user:password, -H "Authorization: ...", or none).
reply https(const std::string& ca, uint16_t port, const std::vector<std::string>& auth,
            const std::string& method, const std::string& path, const std::string& body = {}) {
  std::vector<std::string> args{"-sS", "--max-time", "20", "--cacert", ca,
                                "-X", method, "-D", "-", "-w", "\n%{http_code}"};
  args.insert(args.end(), auth.begin(), auth.end());
  if (!body.empty())
    args.insert(args.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
  args.push_back("https://127.0.0.1:" + std::to_string(port) + path);
  auto r = run_command("/usr/bin/curl", args, 40s);
  reply out;
  auto nl = r.out.rfind('\n');
  if (r.exit_code != 0 || nl == std::string::npos) {
    ADD_FAILURE() << "curl " << path << ": exit " << r.exit_code << ": " << r.err;
    return out;
  }
  out.status = std::atoi(r.out.c_str() + nl + 1);
  auto all = r.out.substr(0, nl);
  auto split = all.find("\r\n\r\n");
  out.headers = split == std::string::npos ? all : all.substr(0, split);
  out.body = split == std::string::npos ? "" : all.substr(split + 4);
  return out;
}

class auth_node : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.why();
    for (auto* name : {"node", "client"})
      ASSERT_TRUE(certs_.make_cert(name)) << certs_.why();
    audit_ = (dir_.path() / "audit.log").string();
    auto args = certs_.args("node");
    // Browsers and scripts log in with a password and no client
    // certificate: the HTTP port only asks for one.
    args.insert(args.end(), {"--auth", "scram", "--superusers", "admin", "--audit-log",
                             audit_, "--tls-client-auth", "requested",
                             "--cluster-secret-file", certs_.secret_file()});
    auto extra = extra_args();
    args.insert(args.end(), extra.begin(), extra.end());
    node_ = std::make_unique<ferryd_process>(args);
    ASSERT_TRUE(node_->start()) << node_->output();
    ASSERT_NE(node_->http_port(), 0);
    ASSERT_EQ(user_create("admin", "admin-secret-1").exit_code, 0);
    ASSERT_EQ(user_create("alice", "alice-secret-1").exit_code, 0);
  }

  void TearDown() override {
    if (node_) {
      EXPECT_EQ(node_->stop(), 0) << node_->output();
    }
  }

  /// More ferryd arguments (fixtures below).
  virtual std::vector<std::string> extra_args() const {
    return {};
  }

  /// ferryctl over the CAF port with the client certificate, as the
  /// cluster's operator (--cluster-secret-file).
  ferry::test::command_result ctl(std::vector<std::string> args,
                                  const std::string& input = {}) {
    auto tls = certs_.args("client");
    tls.insert(tls.end(), {"--cluster-secret-file", certs_.secret_file()});
    tls.insert(tls.end(), args.begin(), args.end());
    return ferryctl(node_->endpoint(), tls, input, 60s);
  }

  /// ferryctl logged in as `user` (its password in a file); an empty user:
  /// no login at all.
  ferry::test::command_result ctl_as(const std::string& user, const std::string& password,
                                     std::vector<std::string> args,
                                     const std::string& input = {}) {
    auto full = certs_.args("client");
    if (!user.empty()) {
      auto file = (dir_.path() / (user + ".password")).string();
      std::ofstream{file} << password << "\n";
      full.insert(full.end(), {"--user", user, "--password-file", file});
    }
    full.insert(full.end(), args.begin(), args.end());
    return ferryctl(node_->endpoint(), full, input, 60s);
  }

  ferry::test::command_result user_create(const std::string& name,
                                          const std::string& password) {
    auto r = ctl({"user", "create", name, "--password-stdin"}, password + "\n");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  }

  void acl(const std::string& verb, std::vector<std::string> args) {
    std::vector<std::string> full{"acl", verb};
    full.insert(full.end(), args.begin(), args.end());
    auto r = ctl(full);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  }

  /// curl https://127.0.0.1:HTTP/path as `user` (empty: no credentials).
  reply http(const std::string& user, const std::string& password, const std::string& method,
             const std::string& path, const std::string& body = {}) {
    std::vector<std::string> auth;
    if (!user.empty())
      auth = {"-u", user + ":" + password};
    return curl(auth, method, path, body);
  }

  /// The same with `Authorization: Bearer <token>`.
  reply bearer(const std::string& token, const std::string& method, const std::string& path,
               const std::string& body = {}) {
    return curl({"-H", "Authorization: Bearer " + token}, method, path, body);
  }

  reply curl(const std::vector<std::string>& auth, const std::string& method,
             const std::string& path, const std::string& body) {
    return https(certs_.path("ca.pem"), node_->http_port(), auth, method, path, body);
  }

  reply admin(const std::string& method, const std::string& path,
              const std::string& body = {}) {
    return http("admin", "admin-secret-1", method, path, body);
  }

  reply alice(const std::string& method, const std::string& path,
              const std::string& body = {}) {
    return http("alice", "alice-secret-1", method, path, body);
  }

  std::string audit_text() {
    std::ifstream in{audit_};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// The audit lines that contain every one of `parts`.
  int audit_lines(std::vector<std::string> parts) {
    std::istringstream in{audit_text()};
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      bool all = true;
      for (auto& p : parts)
        all = all && contains(line, p);
      n += all ? 1 : 0;
    }
    return n;
  }

  test_certs certs_;
  ferry::test::temp_dir dir_{"ferry-auth"};
  std::string audit_;
  std::unique_ptr<ferryd_process> node_;
};

} // namespace

TEST(Auth, RefusesToStartWithoutTlsOrWithBadFlags) {
  ferry::test::temp_dir dir{"ferry-auth-start"};
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--data-dir", (dir.path() / "d").string(), "--port", "0",
                                  "--metrics-port", "-1", "--http-port", "-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_command(FERRYD_PATH, args, 20s);
  };
  auto plain = start({"--auth", "scram"});
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_TRUE(contains(plain.err, "--auth scram needs TLS")) << plain.err;
  auto su = start({"--superusers", "admin"});
  EXPECT_EQ(su.exit_code, 2);
  EXPECT_TRUE(contains(su.err, "--superusers needs --auth scram")) << su.err;
  auto bad = start({"--auth", "kerberos"});
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(auth_node, LoginNeedsAKnownUserAndTheRightPassword) {
  auto none = http("", "", "GET", "/v1/topics");
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_EQ(none.code(), "authentication_failed");
  EXPECT_TRUE(contains(none.headers, "WWW-Authenticate: Basic realm=\"ferry\""))
    << none.headers;
  auto wrong = http("alice", "alice-secret-2", "GET", "/v1/topics");
  EXPECT_EQ(wrong.status, 401);
  auto unknown = http("mallory", "alice-secret-1", "GET", "/v1/topics");
  EXPECT_EQ(unknown.status, 401);
  // The reply does not tell an unknown user from a wrong password.
  EXPECT_EQ(wrong.body, unknown.body);
  EXPECT_EQ(alice("GET", "/v1/topics").status, 200);
  // Health needs no login (load balancers, probes).
  EXPECT_EQ(http("", "", "GET", "/healthz").status, 200);
  // The metrics port is not behind users (scraped with a certificate).
  // Users: listed without keys; a new password replaces the old one.
  auto users = ctl({"--json", "user", "list"});
  ASSERT_EQ(users.exit_code, 0) << users.err;
  auto uj = json::parse(users.out, nullptr, false);
  ASSERT_TRUE(uj.is_array()) << users.out;
  EXPECT_EQ(uj.size(), 2u);
  EXPECT_FALSE(contains(users.out, "key")) << users.out;
  user_create("alice", "alice-secret-3");
  EXPECT_EQ(http("alice", "alice-secret-1", "GET", "/v1/topics").status, 401);
  EXPECT_EQ(http("alice", "alice-secret-3", "GET", "/v1/topics").status, 200);
  auto del = ctl({"user", "delete", "alice"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  EXPECT_EQ(http("alice", "alice-secret-3", "GET", "/v1/topics").status, 401);
  auto again = ctl({"user", "delete", "alice"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(contains(again.err, "unknown_user")) << again.err;
  // Failed logins are in the audit log with the claimed user, never a
  // password; none is in the node's log either.
  EXPECT_GE(audit_lines({"\"login\"", "\"denied\"", "wrong password", "User:alice"}), 1)
    << audit_text();
  EXPECT_GE(audit_lines({"\"login\"", "unknown user", "User:mallory"}), 1) << audit_text();
  for (auto* secret : {"alice-secret", "admin-secret"}) {
    EXPECT_FALSE(contains(audit_text(), secret));
    EXPECT_FALSE(contains(node_->output(), secret));
  }
  EXPECT_TRUE(contains(node_->output(), "login failed for user 'mallory' from 127.0.0.1"))
    << node_->output();
}

TEST_F(auth_node, EachOperationNeedsAnAclAndADenyWins) {
  auto created = admin("POST", "/v1/topics", R"({"name":"orders","partitions":1})");
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_EQ(admin("POST", "/v1/topics", R"({"name":"secret","partitions":1})").status, 201);
  const std::string record = R"({"records":[{"key":"k","value":"v1"}]})";
  const std::string fetch = "/v1/topics/orders/partitions/0/messages?offset=earliest";

  // Nothing without an ACL: produce, fetch, describe, create, delete; the
  // topic list shows nothing.
  auto denied = alice("POST", "/v1/topics/orders/messages?acks=all", record);
  EXPECT_EQ(denied.status, 403) << denied.body;
  EXPECT_EQ(denied.code(), "authorization_failed");
  EXPECT_TRUE(contains(denied.body, "User:alice may not write topic orders")) << denied.body;
  EXPECT_EQ(alice("GET", fetch).status, 403);
  EXPECT_EQ(alice("GET", "/v1/topics/orders").status, 403);
  EXPECT_EQ(alice("POST", "/v1/topics", R"({"name":"mine"})").status, 403);
  EXPECT_EQ(alice("DELETE", "/v1/topics/orders").status, 403);
  EXPECT_EQ(alice("GET", "/v1/cluster").status, 403);
  auto list = alice("GET", "/v1/topics");
  ASSERT_EQ(list.status, 200);
  EXPECT_TRUE(list.j()["topics"].empty()) << list.body;

  // write: allowed with the ACL.
  acl("add", {"--principal", "User:alice", "--operation", "write", "--topic", "orders"});
  auto produced = alice("POST", "/v1/topics/orders/messages?acks=all", record);
  EXPECT_EQ(produced.status, 200) << produced.body;
  EXPECT_EQ(alice("GET", fetch).status, 403) << "write does not allow read";
  // read by a prefixed ACL; write implies describe, so the list shows it.
  acl("add", {"--principal", "User:alice", "--operation", "read", "--topic", "ord",
              "--prefixed"});
  auto fetched = alice("GET", fetch);
  ASSERT_EQ(fetched.status, 200) << fetched.body;
  EXPECT_TRUE(contains(fetched.body, "v1")) << fetched.body;
  list = alice("GET", "/v1/topics");
  ASSERT_EQ(list.j()["topics"].size(), 1u) << list.body;
  EXPECT_EQ(list.j()["topics"][0]["name"], "orders");
  EXPECT_EQ(alice("GET", "/v1/topics/orders").status, 200);
  EXPECT_EQ(alice("GET", "/v1/topics/secret").status, 403);
  // A deny wins over the allow; removing it allows again.
  acl("add", {"--principal", "User:alice", "--operation", "read", "--topic", "orders",
              "--deny"});
  EXPECT_EQ(alice("GET", fetch).status, 403);
  acl("remove", {"--principal", "User:alice", "--operation", "read", "--topic", "orders",
                 "--deny"});
  EXPECT_EQ(alice("GET", fetch).status, 200);
  // Removing the allow denies again.
  acl("remove", {"--principal", "User:alice", "--operation", "read", "--topic", "ord",
                 "--prefixed"});
  EXPECT_EQ(alice("GET", fetch).status, 403);
  auto gone = ctl({"acl", "remove", "--principal", "User:alice", "--operation", "read",
                   "--topic", "ord", "--prefixed"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_TRUE(contains(gone.err, "no such ACL")) << gone.err;
  // ferryctl acl list shows what is left.
  auto listed = ctl({"acl", "list", "--principal", "alice"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(contains(listed.out, "User:alice  allow       write")) << listed.out;
  EXPECT_FALSE(contains(listed.out, "deny")) << listed.out;

  // The same over HTTP: alice may not change ACLs; the admin may, and the
  // cluster describe ACL lets alice describe the cluster, delete then
  // removes the ACL.
  const std::string cluster_acl =
    R"({"principal":"User:alice","resourceType":"cluster","operation":"describe"})";
  auto self_grant = alice("POST", "/v1/acls", cluster_acl);
  EXPECT_EQ(self_grant.status, 403) << self_grant.body;
  EXPECT_TRUE(contains(self_grant.body, "may not alter the cluster")) << self_grant.body;
  auto granted = admin("POST", "/v1/acls", cluster_acl);
  ASSERT_EQ(granted.status, 201) << granted.body;
  EXPECT_EQ(granted.j()["resourceName"], "cluster");
  EXPECT_EQ(alice("GET", "/v1/cluster").status, 200);
  auto acls = admin("GET", "/v1/acls");
  ASSERT_EQ(acls.status, 200);
  EXPECT_EQ(acls.j()["acls"].size(), 2u) << acls.body;
  auto revoked = admin("DELETE", "/v1/acls", cluster_acl);
  ASSERT_EQ(revoked.status, 200) << revoked.body;
  EXPECT_EQ(revoked.j()["removed"].size(), 1u);
  EXPECT_EQ(alice("GET", "/v1/cluster").status, 403);
  auto badacl = admin("POST", "/v1/acls",
                      R"({"principal":"User:alice","resourceType":"topic",)"
                      R"("resourceName":"x","operation":"steal"})");
  EXPECT_EQ(badacl.status, 400);
  EXPECT_TRUE(contains(badacl.body, "operation 'steal'")) << badacl.body;

  // Users over HTTP: the admin creates carol, who logs in; then deletes her.
  auto carol = admin("POST", "/v1/users", R"({"name":"carol","password":"carol-pw-1"})");
  ASSERT_EQ(carol.status, 201) << carol.body;
  EXPECT_EQ(http("carol", "carol-pw-1", "GET", "/v1/topics").status, 200);
  EXPECT_EQ(alice("POST", "/v1/users", R"({"name":"eve","password":"x"})").status, 403);
  auto users = admin("GET", "/v1/users");
  ASSERT_EQ(users.status, 200);
  EXPECT_EQ(users.j()["users"].size(), 3u) << users.body;
  EXPECT_EQ(admin("DELETE", "/v1/users/carol").status, 200);
  EXPECT_EQ(http("carol", "carol-pw-1", "GET", "/v1/topics").status, 401);
  EXPECT_EQ(admin("DELETE", "/v1/users/carol").status, 404);

  // The audit log: denials (who, what, from where) and admin changes with
  // their outcome.
  EXPECT_GE(audit_lines({"\"principal\":\"User:alice\"", "\"action\":\"write\"",
                         "\"resource\":\"topic orders\"", "\"outcome\":\"denied\"",
                         "\"source\":\"127.0.0.1:"}),
            1)
    << audit_text();
  EXPECT_GE(audit_lines({"User:admin", "\"action\":\"create\"", "topic orders",
                         "\"outcome\":\"ok\""}),
            1)
    << audit_text();
  EXPECT_GE(audit_lines({"User:admin", "add acl", "allow User:alice describe cluster"}), 1)
    << audit_text();
  EXPECT_GE(audit_lines({"User:admin", "\"action\":\"delete\"", "user carol",
                         "\"outcome\":\"unknown_user\""}),
            1)
    << audit_text();
  EXPECT_FALSE(contains(audit_text(), "carol-pw-1"));
}

TEST_F(auth_node, NoRecordsOfAnUnreadableTopicThroughItsDlqOrGroup) {
  ASSERT_EQ(admin("POST", "/v1/topics", R"({"name":"secret","partitions":1})").status, 201);
  ASSERT_EQ(admin("POST", "/v1/topics/secret/messages?acks=all",
                  R"({"records":[{"key":"k","value":"classified"}]})")
              .status,
            200);
  // The admin's worker rejects the record: it goes to secret.workers.dlq.
  auto got = admin("POST", "/v1/groups/workers/queue/secret/receive",
                   R"({"member":"w1","max":10,"waitMs":5000})");
  ASSERT_EQ(got.status, 200) << got.body;
  auto recs = got.j()["records"];
  ASSERT_EQ(recs.size(), 1u) << got.body;
  json rej{{"member", "w1"},
           {"partition", recs[0]["partition"]},
           {"offset", recs[0]["offset"]},
           {"leaseId", recs[0]["leaseId"]},
           {"error", "bad"}};
  ASSERT_EQ(admin("POST", "/v1/groups/workers/queue/secret/reject", rej.dump()).status, 200);
  const std::string dlq = "/v1/dlq/secret.workers.dlq";
  json shown;
  for (int i = 0; i < 100 && shown.empty(); ++i) {
    auto s = admin("GET", dlq);
    if (s.status == 200 && !s.j()["records"].empty())
      shown = s.j()["records"];
    else
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(shown.size(), 1u) << "the admin sees the dead letter";

  // alice: no ACL on the DLQ -> 403; the DLQ list hides it.
  EXPECT_EQ(alice("GET", dlq).status, 403);
  auto dlqs = alice("GET", "/v1/dlq");
  ASSERT_EQ(dlqs.status, 200);
  EXPECT_TRUE(dlqs.j()["dlqs"].empty()) << dlqs.body;
  // Read on the DLQ but not on its source topic: its records stay hidden.
  acl("add", {"--principal", "User:alice", "--operation", "read", "--dlq",
              "secret.workers.dlq"});
  auto s = alice("GET", dlq);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_TRUE(s.j()["records"].empty()) << s.body;
  EXPECT_FALSE(contains(s.body, "classified")) << s.body;
  // The same through the CAF port (ferryctl logged in as alice).
  auto as_alice = [&](std::vector<std::string> args) {
    return ctl_as("alice", "alice-secret-1", std::move(args));
  };
  auto caf_dlq = as_alice({"dlq", "show", "secret.workers.dlq"});
  EXPECT_EQ(caf_dlq.exit_code, 0) << caf_dlq.err;
  EXPECT_FALSE(contains(caf_dlq.out, "classified")) << caf_dlq.out;
  EXPECT_EQ(alice("POST", dlq + "/redrive", R"({"all":true})").status, 403);
  EXPECT_EQ(alice("POST", dlq + "/purge", "{}").status, 403);
  // The group: describe allowed on the group, but not on the topic: its
  // partitions are left out.
  EXPECT_EQ(alice("GET", "/v1/groups/workers").status, 403);
  acl("add", {"--principal", "User:alice", "--operation", "describe", "--group", "workers"});
  auto g = alice("GET", "/v1/groups/workers");
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_FALSE(contains(g.body, "\"secret\"")) << g.body;
  auto caf_group = as_alice({"--json", "group", "describe", "workers"});
  EXPECT_EQ(caf_group.exit_code, 0) << caf_group.err;
  EXPECT_FALSE(contains(caf_group.out, "\"secret\"")) << caf_group.out;
  auto admin_group = ctl({"--json", "group", "describe", "workers"});
  EXPECT_TRUE(contains(admin_group.out, "\"secret\"")) << admin_group.out;
  auto ga = admin("GET", "/v1/groups/workers");
  EXPECT_TRUE(contains(ga.body, "\"secret\"")) << ga.body;
  // Receiving from the queue needs read on the group and on the topic.
  EXPECT_EQ(alice("POST", "/v1/groups/workers/queue/secret/receive",
                  R"({"member":"a1","waitMs":0})")
              .status,
            403);
  // With read on the source topic the DLQ shows the record.
  acl("add", {"--principal", "User:alice", "--operation", "read", "--topic", "secret"});
  auto s2 = alice("GET", dlq);
  ASSERT_EQ(s2.status, 200) << s2.body;
  EXPECT_TRUE(contains(s2.body, "classified")) << s2.body;
  auto caf_dlq2 = as_alice({"dlq", "show", "secret.workers.dlq"});
  EXPECT_TRUE(contains(caf_dlq2.out, "classified")) << caf_dlq2.out << caf_dlq2.err;
}

TEST_F(auth_node, FailedLoginsFromOneAddressAreSlowedDown) {
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(http("alice", "guess-" + std::to_string(i), "GET", "/v1/topics").status, 401);
  // Now even the right password waits: 429 with Retry-After, the password
  // is not even checked.
  auto locked = alice("GET", "/v1/topics");
  EXPECT_EQ(locked.status, 429) << locked.body;
  EXPECT_EQ(locked.code(), "login_throttled");
  EXPECT_TRUE(contains(locked.headers, "Retry-After: ")) << locked.headers;
  // Once the lockout (1 s after the fifth failure) is over, the right
  // password works (and resets the count).
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    std::this_thread::sleep_for(200ms);
    status = alice("GET", "/v1/topics").status;
  }
  EXPECT_EQ(status, 200);
  EXPECT_EQ(http("alice", "guess-again", "GET", "/v1/topics").status, 401);
  EXPECT_EQ(alice("GET", "/v1/topics").status, 200);
}

TEST_F(auth_node, BearerTokensStandForThePasswordUntilTheyExpireOrItChanges) {
  ASSERT_EQ(admin("POST", "/v1/topics", R"({"name":"t","partitions":1})").status, 201);
  acl("add", {"--principal", "User:alice", "--operation", "read", "--topic", "t"});
  auto issued = alice("POST", "/v1/tokens");
  ASSERT_EQ(issued.status, 201) << issued.body;
  EXPECT_TRUE(contains(issued.headers, "Cache-Control: no-store")) << issued.headers;
  auto tj = issued.j();
  ASSERT_TRUE(tj.is_object()) << issued.body;
  EXPECT_EQ(tj.value("tokenType", ""), "Bearer");
  EXPECT_EQ(tj.value("user", ""), "alice");
  EXPECT_EQ(tj.value("expiresInSeconds", 0), 3600);
  auto token = tj.value("token", "");
  ASSERT_FALSE(token.empty()) << issued.body;

  // The token is alice: her ACLs apply, no password needed.
  auto list = bearer(token, "GET", "/v1/topics");
  EXPECT_EQ(list.status, 200) << list.body;
  EXPECT_TRUE(contains(list.body, "\"t\"")) << list.body;
  EXPECT_EQ(bearer(token, "GET", "/v1/topics/t/partitions/0/messages?offset=0").status, 200);
  auto denied = bearer(token, "DELETE", "/v1/topics/t");
  EXPECT_EQ(denied.status, 403) << denied.body;
  EXPECT_TRUE(contains(denied.body, "User:alice may not delete topic t")) << denied.body;
  // The scheme is case-insensitive (RFC 7235).
  auto lower = curl({"-H", "Authorization: bearer " + token}, "GET", "/v1/topics", "");
  EXPECT_EQ(lower.status, 200) << lower.body;
  // A token is not traded for another.
  auto again = bearer(token, "POST", "/v1/tokens");
  EXPECT_EQ(again.status, 401) << again.body;

  // Lifetimes: from 1 s to --http-token-max-ttl (86400 by default).
  for (auto* bad : {R"({"ttlSeconds":0})", R"({"ttlSeconds":86401})", R"({"ttlSeconds":"60"})",
                    R"({"ttl":60})", "[1]", "{"}) {
    auto r = alice("POST", "/v1/tokens", bad);
    EXPECT_EQ(r.status, 400) << bad << " " << r.body;
    EXPECT_EQ(r.code(), "invalid_request") << bad << " " << r.body;
  }
  auto brief = alice("POST", "/v1/tokens", R"({"ttlSeconds":1})");
  ASSERT_EQ(brief.status, 201) << brief.body;
  EXPECT_EQ(brief.j().value("expiresInSeconds", 0), 1);
  auto brief_token = brief.j().value("token", "");
  std::this_thread::sleep_for(1500ms);
  auto expired = bearer(brief_token, "GET", "/v1/topics");
  EXPECT_EQ(expired.status, 401) << expired.body;
  EXPECT_TRUE(contains(expired.body, "bearer token expired")) << expired.body;
  EXPECT_TRUE(contains(expired.headers, "error=\"invalid_token\"")) << expired.headers;

  // One character changed: refused.
  auto altered = token;
  altered[altered.size() / 2] = altered[altered.size() / 2] == 'A' ? 'B' : 'A';
  auto forged = bearer(altered, "GET", "/v1/topics");
  EXPECT_EQ(forged.status, 401) << forged.body;
  EXPECT_EQ(forged.code(), "authentication_failed");
  EXPECT_EQ(bearer(token, "GET", "/v1/topics").status, 200);

  // A new password ends every token of the user.
  user_create("alice", "alice-secret-2");
  auto stale = bearer(token, "GET", "/v1/topics");
  EXPECT_EQ(stale.status, 401) << stale.body;
  EXPECT_TRUE(contains(stale.body, "invalid bearer token")) << stale.body;

  // Issued tokens are audited, never written anywhere.
  EXPECT_GE(audit_lines({"\"issue token\"", "User:alice", "\"allowed\""}), 2) << audit_text();
  EXPECT_FALSE(contains(audit_text(), token));
  EXPECT_FALSE(contains(node_->output(), token));

  // Forged tokens count as failed logins: the address is slowed down.
  reply last;
  for (int i = 0; i < 8 && last.status != 429; ++i)
    last = bearer(altered, "GET", "/v1/topics");
  EXPECT_EQ(last.status, 429) << last.body;
  EXPECT_EQ(last.code(), "login_throttled");
}

// A 3-node cluster with TLS and users: users and ACLs reach every node
// through the metadata quorum, a token issued by one node works on the
// others, a user keeps writing through another node while the partition
// leader is SIGKILLed, and the restarted node serves the user again. While
// it has not loaded the users it answers 503 security_loading, never a 401.
TEST_F(auth_node, CafPortNeedsALoginAndChecksEachRequestAgainstTheAcls) {
  ASSERT_EQ(ctl({"topic", "create", "orders", "--partitions", "1"}).exit_code, 0);
  auto alice = [&](std::vector<std::string> args, const std::string& input = {}) {
    return ctl_as("alice", "alice-secret-1", std::move(args), input);
  };
  // No login, a wrong password, an unknown user: refused alike.
  auto none = ctl_as("", "", {"topic", "list"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_TRUE(contains(none.err, "requires a login")) << none.err;
  for (auto [user, pw] : {std::pair{"alice", "wrong"}, std::pair{"mallory", "x"}}) {
    auto r = ctl_as(user, pw, {"topic", "list"});
    EXPECT_NE(r.exit_code, 0) << user;
    EXPECT_TRUE(contains(r.err, "authentication_failed: authentication failed")) << r.err;
  }
  // Alice without ACLs: the list hides orders, each operation is refused.
  auto list = alice({"topic", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_FALSE(contains(list.out, "orders")) << list.out;
  auto described = alice({"topic", "describe", "orders"});
  EXPECT_NE(described.exit_code, 0);
  EXPECT_TRUE(contains(described.err, "User:alice may not describe topic orders"))
    << described.err;
  for (auto& args : std::vector<std::vector<std::string>>{
         {"topic", "delete", "orders"},
         {"user", "list"},
         {"acl", "add", "--principal", "User:alice", "--operation", "all", "--cluster"}}) {
    auto r = alice(args);
    EXPECT_NE(r.exit_code, 0) << args[0] << " " << args[1];
    EXPECT_TRUE(contains(r.err, "authorization_failed")) << r.err;
  }
  // Write allowed: produce works (and the topic shows), read still not.
  acl("add", {"--principal", "User:alice", "--topic", "orders", "--operation", "write"});
  auto produced = alice({"produce", "orders"}, "first\n");
  EXPECT_EQ(produced.exit_code, 0) << produced.err;
  EXPECT_TRUE(contains(produced.out, "produced 1 messages")) << produced.out << produced.err;
  EXPECT_TRUE(contains(alice({"topic", "list"}).out, "orders"));
  std::vector<std::string> consume{"consume", "orders", "--from-beginning", "--max", "1",
                                   "--timeout", "5000"};
  auto denied = alice(consume);
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_TRUE(contains(denied.err, "User:alice may not read topic orders")) << denied.err;
  // Read allowed: the record comes back; a deny wins over it; removing the
  // deny allows again, removing the allow denies again.
  acl("add", {"--principal", "User:alice", "--topic", "orders", "--operation", "read"});
  auto read = alice(consume);
  EXPECT_EQ(read.exit_code, 0) << read.err;
  EXPECT_TRUE(contains(read.out, "first")) << read.out;
  acl("add", {"--principal", "User:alice", "--topic", "orders", "--operation", "read", "--deny"});
  EXPECT_TRUE(contains(alice(consume).err, "may not read topic orders"));
  acl("remove",
      {"--principal", "User:alice", "--topic", "orders", "--operation", "read", "--deny"});
  EXPECT_TRUE(contains(alice(consume).out, "first"));
  acl("remove", {"--principal", "User:alice", "--topic", "orders", "--operation", "read"});
  EXPECT_TRUE(contains(alice(consume).err, "may not read topic orders"));
  // The superuser logs in the same way and may do everything.
  auto admin_list = ctl_as("admin", "admin-secret-1", {"user", "list"});
  EXPECT_EQ(admin_list.exit_code, 0) << admin_list.err;
  EXPECT_TRUE(contains(admin_list.out, "alice")) << admin_list.out;
  // Denials through the CAF port are audited, with who and from where.
  EXPECT_GE(audit_lines({"\"via\":\"caf\"", "User:alice may not read topic orders"}), 1)
    << audit_text();
  EXPECT_GE(audit_lines({"\"via\":\"caf\"", "\"action\":\"login\"", "mallory"}), 1)
    << audit_text();
}

TEST_F(auth_node, BareForgedOrReplayedRequestsAreRefusedWhoeverTheySayTheyAre) {
  ASSERT_EQ(ctl({"topic", "create", "orders", "--partitions", "1"}).exit_code, 0);
  // A client with the cluster's certificate but no session: it talks to
  // the node's broker actor directly, as a hostile program could.
  ferry::test::client_system cs{certs_.settings("client")};
  auto node = caf::openssl::remote_actor<ferry::broker_actor>(*cs.sys, "127.0.0.1",
                                                               node_->port());
  ASSERT_TRUE(node) << ferry::error_text(node.error());
  auto refused = [](const caf::error& err, const std::string& part) {
    auto text = ferry::error_text(err);
    return text.find("authentication_failed") != std::string::npos
           && text.find(part) != std::string::npos;
  };
  using topics = std::vector<ferry::topic_metadata>;
  auto bare = ferry::test::ask<topics>(*cs.sys, *node, 10s, ferry::list_atom_v,
                                       ferry::topic_atom_v);
  ASSERT_FALSE(bare);
  EXPECT_TRUE(refused(bare.error(), "requires a login")) << ferry::error_text(bare.error());
  auto untyped = caf::actor_cast<caf::actor>(*node);
  auto list_in = [&](std::string credential) {
    return ferry::test::ask<topics>(*cs.sys, untyped, 10s, ferry::auth_atom_v,
                                    std::move(credential),
                                    caf::make_message(ferry::list_atom_v, ferry::topic_atom_v));
  };
  // Forged credentials: a made-up session token, another cluster's
  // credential, alice's token with a changed byte.
  auto forged = list_in("fry1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAYWxpY2U.AAAA");
  ASSERT_FALSE(forged);
  EXPECT_TRUE(refused(forged.error(), "")) << ferry::error_text(forged.error());
  auto other = ferry::cluster_credential(std::string(64, 'x'));
  ASSERT_TRUE(other);
  auto wrong_cluster = list_in(*other);
  ASSERT_FALSE(wrong_cluster);
  // (The client port's front door turns away every cluster credential,
  // right or wrong: nodes talk on their own port.)
  EXPECT_TRUE(refused(wrong_cluster.error(), "cluster credential is not accepted"))
    << ferry::error_text(wrong_cluster.error());
  // A real login, step by step.
  ferry::scram_client client{"alice", "alice-secret-1"};
  ferry::sasl_step s1;
  s1.mechanism = "SCRAM-SHA-256";
  s1.data = *client.first();
  auto a1 = ferry::test::ask<ferry::sasl_step>(*cs.sys, *node, 10s, ferry::auth_atom_v, s1);
  ASSERT_TRUE(a1) << ferry::error_text(a1.error());
  auto fin = client.final(a1->data);
  ASSERT_TRUE(fin) << ferry::error_text(fin.error());
  ferry::sasl_step s2;
  s2.mechanism = s1.mechanism;
  s2.conversation = a1->conversation;
  s2.data = *fin;
  auto a2 = ferry::test::ask<ferry::sasl_step>(*cs.sys, *node, 10s, ferry::auth_atom_v, s2);
  ASSERT_TRUE(a2) << ferry::error_text(a2.error());
  ASSERT_TRUE(a2->done);
  EXPECT_FALSE(client.verify(a2->data));
  EXPECT_EQ(a2->user, "alice");
  // The same final message again: that conversation is over.
  auto replayed = ferry::test::ask<ferry::sasl_step>(*cs.sys, *node, 10s, ferry::auth_atom_v, s2);
  ASSERT_FALSE(replayed);
  EXPECT_TRUE(refused(replayed.error(), "")) << ferry::error_text(replayed.error());
  // Alice's token works in an envelope (orders hidden: no ACL) ...
  auto mine = list_in(a2->token);
  ASSERT_TRUE(mine) << ferry::error_text(mine.error());
  for (auto& t : *mine)
    EXPECT_NE(t.name, "orders");
  // ... but not altered, and never for the nodes' own requests.
  auto altered = a2->token;
  altered[altered.size() / 2] = altered[altered.size() / 2] == 'A' ? 'B' : 'A';
  auto bad = list_in(altered);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(refused(bad.error(), "")) << ferry::error_text(bad.error());
  auto raft = ferry::test::ask<ferry::raft_log_chunk>(
    *cs.sys, untyped, 10s, ferry::auth_atom_v, a2->token,
    caf::make_message(ferry::fetch_atom_v, ferry::raft_atom_v, uint64_t{0}));
  ASSERT_FALSE(raft);
  EXPECT_TRUE(contains(ferry::error_text(raft.error()), "not served on the client port"))
    << ferry::error_text(raft.error());
  // The node still serves its users.
  EXPECT_EQ(ctl({"topic", "list"}).exit_code, 0);
}

/// A node that locks a user out for 10 s after five failed logins (the
/// default 1 s could pass between two ferryctl runs on a busy machine).
class auth_node_long_lockout : public auth_node {
protected:
  std::vector<std::string> extra_args() const override {
    return {"--login-lockout-ms", "10000"};
  }
};

TEST_F(auth_node_long_lockout, FailedCafLoginsOfOneUserAreSlowedDown) {
  // Five wrong passwords are answered as such; after them alice is locked
  // out for a while, even with the right password.
  for (int i = 0; i < 5; ++i) {
    auto r = ctl_as("alice", "wrong-" + std::to_string(i), {"topic", "list"});
    EXPECT_TRUE(contains(r.err, "authentication failed")) << r.err;
  }
  auto locked = ctl_as("alice", "alice-secret-1", {"topic", "list"});
  EXPECT_NE(locked.exit_code, 0);
  EXPECT_TRUE(contains(locked.err, "login_throttled")) << locked.err;
  // Other users are not affected.
  EXPECT_EQ(ctl_as("admin", "admin-secret-1", {"topic", "list"}).exit_code, 0);
}

/// A node whose CAF sessions last 10 s (the shortest --session-ttl).
class auth_node_short_sessions : public auth_node {
protected:
  std::vector<std::string> extra_args() const override {
    return {"--session-ttl", "10"};
  }
};

TEST_F(auth_node_short_sessions, ClientsLogInAgainBeforeTheirSessionEnds) {
  ASSERT_EQ(ctl({"topic", "create", "orders", "--partitions", "1"}).exit_code, 0);
  acl("add", {"--principal", "User:alice", "--topic", "orders", "--operation", "write"});
  ferry::client_credentials creds;
  creds.user = "alice";
  creds.password = "alice-secret-1";
  ferry::test::client_system cs{certs_.settings("client"), creds};
  auto addr = ferry::parse_broker_address(node_->endpoint());
  ASSERT_TRUE(addr);
  auto conn = cs.track(ferry::spawn_connection(*cs.sys, *addr));
  auto broker = ferry::test::ask<ferry::broker_actor>(*cs.sys, conn, 20s, ferry::connect_atom_v);
  ASSERT_TRUE(broker) << ferry::error_text(broker.error());
  auto list = [&] {
    return ferry::test::ask<std::vector<ferry::topic_metadata>>(
      *cs.sys, *broker, 10s, ferry::list_atom_v, ferry::topic_atom_v);
  };
  auto first = list();
  ASSERT_TRUE(first) << ferry::error_text(first.error());
  EXPECT_EQ(first->size(), 1u);
  // Past the first token's end: the connection logged in again at 80% of
  // it and handed the new token to its session proxy, so the same handle
  // keeps working.
  std::this_thread::sleep_for(13s);
  auto later = list();
  ASSERT_TRUE(later) << ferry::error_text(later.error());
  EXPECT_EQ(later->size(), 1u);
  auto out = node_->output();
  size_t logins = 0;
  for (auto at = out.find("user 'alice' logged in"); at != std::string::npos;
       at = out.find("user 'alice' logged in", at + 1))
    ++logins;
  EXPECT_GE(logins, 2u) << out;
}

TEST(AuthCluster, ThreeNodesWithTlsAndUsersReplicateAndFailOver) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  for (auto* name : {"node", "client"})
    ASSERT_TRUE(certs.make_cert(name)) << certs.why();
  // The nodes talk on peer ports (needed with --auth in a cluster), with
  // certificates of a CA of their own; clients see node.pem (from ca).
  ASSERT_TRUE(certs.make_ca("nodeca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("peer", "nodeca")) << certs.why();
  ferry::test::cluster c{certs.settings("client"), certs.operator_credentials()};
  c.use_peer_ports();
  auto node_args = certs.args("node");
  node_args.insert(node_args.end(), {"--auth", "scram", "--superusers", "admin",
                                     "--tls-client-auth", "requested", "--http-port", "0",
                                     "--cluster-secret-file", certs.secret_file(),
                                     "--peer-tls-ca", certs.path("nodeca.pem"),
                                     "--peer-tls-cert", certs.path("peer.pem"),
                                     "--peer-tls-key", certs.path("peer.key")});
  c.add_node_args(node_args);
  ASSERT_CLUSTER_STARTED(c);
  auto ctl = [&](int id, std::vector<std::string> args, const std::string& input = {}) {
    auto full = certs.args("client");
    full.insert(full.end(), {"--cluster-secret-file", certs.secret_file()});
    full.insert(full.end(), args.begin(), args.end());
    return ferryctl(c.endpoint(id), full, input, 60s);
  };
  const std::string topic = "secure";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  // Users and ACLs made through different nodes.
  auto made = ctl(1, {"user", "create", "alice", "--password-stdin"}, "alice-secret-1\n");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  made = ctl(2, {"user", "create", "carol", "--password-stdin"}, "carol-secret-1\n");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (auto* op : {"write", "read"}) {
    auto r = ctl(3, {"acl", "add", "--principal", "User:alice", "--operation", op, "--topic", topic});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto ca = certs.path("ca.pem");
  auto as_alice = std::vector<std::string>{"-u", "alice:alice-secret-1"};
  auto call = [&](int id, const std::vector<std::string>& auth, const std::string& method,
                  const std::string& path, const std::string& body = {}) {
    return https(ca, c.node(id).http_port(), auth, method, path, body);
  };
  // Every node knows alice and her ACLs (applied from the quorum's log).
  for (int id = 1; id <= 3; ++id) {
    reply r;
    EXPECT_TRUE(ferry::test::wait_until(20s, [&] {
      r = call(id, as_alice, "GET", "/v1/topics/" + topic);
      return r.status == 200;
    })) << "node " << id << ": " << r.status << " " << r.body;
  }
  // A token from node 1 writes through node 2.
  auto issued = call(1, as_alice, "POST", "/v1/tokens");
  ASSERT_EQ(issued.status, 201) << issued.body;
  auto as_token =
    std::vector<std::string>{"-H", "Authorization: Bearer " + issued.j().value("token", "")};
  auto before = call(2, as_token, "POST", "/v1/topics/" + topic + "/messages",
                     R"({"key":"k","value":"before"})");
  EXPECT_EQ(before.status, 200) << before.body;
  // Carol has no ACL; mallory is nobody.
  auto carol = call(3, {"-u", "carol:carol-secret-1"}, "POST",
                    "/v1/topics/" + topic + "/messages", R"({"value":"x"})");
  EXPECT_EQ(carol.status, 403) << carol.body;
  EXPECT_EQ(call(3, {"-u", "mallory:x"}, "GET", "/v1/topics").status, 401);

  auto leader = c.leader_of(topic, 0);
  ASSERT_GE(leader, 1) << c.dump();
  c.kill(leader);
  int other = leader == 1 ? 2 : 1;
  reply after;
  EXPECT_TRUE(ferry::test::wait_until(40s, [&] {
    after = call(other, as_token, "POST", "/v1/topics/" + topic + "/messages",
                 R"({"key":"k","value":"after"})");
    return after.status == 200;
  })) << after.status << " " << after.body << "\n" << c.dump();

  auto restarted = c.restart(leader);
  ASSERT_TRUE(restarted.empty()) << restarted;
  // From its first answer on, the restarted node either serves alice or
  // says it is not ready yet: still loading the users, or its link to the
  // partition's new leader not up yet (not_leader): never "unknown user".
  std::set<int> statuses;
  reply got;
  EXPECT_TRUE(ferry::test::wait_until(40s, [&] {
    got = call(leader, as_token, "GET",
               "/v1/topics/" + topic + "/partitions/0/messages?offset=0&limit=10");
    statuses.insert(got.status);
    if (got.status == 503) {
      EXPECT_TRUE(got.code() == "security_loading" || got.code() == "not_leader")
        << got.body;
    }
    return got.status == 200 && contains(got.body, "before") && contains(got.body, "after");
  })) << got.status << " " << got.body << "\n" << c.dump();
  EXPECT_EQ(statuses.count(401), 0u);
  std::cout << "[restart] statuses from node " << leader << ":";
  for (auto st : statuses)
    std::cout << " " << st;
  std::cout << "\n";
#ifdef FERRY_CONSOLE_PATH
  // The console over mutual TLS: it lists the topics through the CAF port
  // (its screenshot mode fails without them) and scrapes the node's
  // metrics port over https with the same client certificate.
  ferry::test::temp_dir shots{"ferry-console-tls"};
  auto tls = certs.args("client");
  std::vector<std::string> console_args{"QT_QPA_PLATFORM=offscreen", FERRY_CONSOLE_PATH,
                                        "--broker", c.endpoint(other), "--screenshot",
                                        shots.path().string(), "--screenshot-wait", "3"};
  console_args.insert(console_args.end(), tls.begin(), tls.end());
  console_args.insert(console_args.end(), {"--cluster-secret-file", certs.secret_file()});
  auto console = run_command("/usr/bin/env", console_args, 120s);
  EXPECT_EQ(console.exit_code, 0) << console.out << console.err;
  std::cout << "[console] " << console.out;
  EXPECT_TRUE(contains(console.out, "wrote ")) << console.out;
  EXPECT_TRUE(contains(console.out, "scrapes from https://")) << console.out;
  EXPECT_FALSE(contains(console.out, "metrics: 0 scrapes")) << console.out;
  EXPECT_TRUE(contains(console.out, "access.png")) << console.out;
  // The same console logged in as alice (who may read and write the
  // topic): it lists it through her session.
  auto pw = (shots.path() / "alice.password").string();
  std::ofstream{pw} << "alice-secret-1\n";
  std::vector<std::string> as_alice_args{"QT_QPA_PLATFORM=offscreen", FERRY_CONSOLE_PATH,
                                         "--broker", c.endpoint(other), "--user", "alice",
                                         "--password-file", pw, "--screenshot",
                                         (shots.path() / "alice").string(),
                                         "--screenshot-wait", "1"};
  as_alice_args.insert(as_alice_args.end(), tls.begin(), tls.end());
  std::filesystem::create_directories(shots.path() / "alice");
  auto alice_console = run_command("/usr/bin/env", as_alice_args, 120s);
  EXPECT_EQ(alice_console.exit_code, 0) << alice_console.out << alice_console.err;
  EXPECT_TRUE(contains(alice_console.out, "wrote ")) << alice_console.out;
  // A wrong password: no topics arrive, the console says so and fails.
  std::ofstream{pw} << "wrong\n";
  as_alice_args[9] = (shots.path() / "wrong").string();
  std::filesystem::create_directories(shots.path() / "wrong");
  auto refused_console = run_command("/usr/bin/env", as_alice_args, 120s);
  EXPECT_NE(refused_console.exit_code, 0) << refused_console.out << refused_console.err;
  // Without a certificate the console refuses to start half-configured.
  auto half = run_command("/usr/bin/env", {"QT_QPA_PLATFORM=offscreen", FERRY_CONSOLE_PATH,
                                           "--broker", c.endpoint(other), "--tls-ca",
                                           certs.path("ca.pem"), "--screenshot",
                                           shots.path().string()},
                          60s);
  EXPECT_EQ(half.exit_code, 2) << half.out << half.err;
#endif
}
