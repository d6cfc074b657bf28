// broker/security.hpp: SCRAM-SHA-256 credentials and the ACL decision (and
// broker/login_throttle.hpp, which the front doors use with it).

#include "broker/security.hpp"

#include "broker/error.hpp"
#include "broker/login_throttle.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

namespace ferry {
namespace {

std::string hex(const std::string& raw) {
  std::string out;
  char buf[3];
  for (unsigned char c : raw) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

// RFC 7677's example (user "user", password "pencil", 4096 iterations);
// the keys were computed with Python's hashlib (PBKDF2-HMAC-SHA-256, then
// HMAC "Client Key" hashed, and HMAC "Server Key").
scram_credential rfc7677() {
  scram_credential c;
  c.user = "user";
  c.salt = unhex("5b6d99689d12358eeca04b141236fa81");
  c.iterations = 4096;
  c.stored_key = unhex(
    "586e5df283e6dceb5c3e791d8b8528ec191e664045ce971792e2e6b5bb13e2a6");
  c.server_key = unhex(
    "c1f3cbc1c13a9d35a14c0990eed97629ea225863e566a4314ab99f3f00e5d9d5");
  return c;
}

TEST(Scram, VerifiesTheRfc7677PasswordAndNoOther) {
  auto c = rfc7677();
  EXPECT_FALSE(validate_credential(c));
  EXPECT_TRUE(verify_password(c, "pencil"));
  EXPECT_FALSE(verify_password(c, "pencil "));
  EXPECT_FALSE(verify_password(c, "Pencil"));
  EXPECT_FALSE(verify_password(c, ""));
}

TEST(Scram, NewCredentialsHaveFreshSaltsAndVerify) {
  auto a = make_scram_credential("alice", "s3cret!");
  auto b = make_scram_credential("alice", "s3cret!");
  ASSERT_TRUE(a) << describe(a.error());
  ASSERT_TRUE(b);
  EXPECT_EQ(a->salt.size(), 16u);
  EXPECT_NE(a->salt, b->salt);
  EXPECT_NE(a->stored_key, b->stored_key);
  EXPECT_EQ(a->stored_key.size(), 32u);
  EXPECT_EQ(a->iterations, 4096);
  EXPECT_FALSE(validate_credential(*a));
  EXPECT_TRUE(verify_password(*a, "s3cret!"));
  EXPECT_FALSE(verify_password(*a, "s3cret"));
  // The stored credential holds no trace of the password.
  EXPECT_EQ(a->stored_key.find("s3cret"), std::string::npos);
  EXPECT_NE(hex(a->stored_key), hex(b->stored_key));
}

TEST(Scram, RejectsBadNamesPasswordsAndIterations) {
  EXPECT_TRUE(is(make_scram_credential("", "x").error(), ec::invalid_request));
  EXPECT_TRUE(
    is(make_scram_credential("a b", "x").error(), ec::invalid_request));
  EXPECT_TRUE(is(make_scram_credential("bob", "").error(), ec::invalid_request));
  EXPECT_TRUE(
    is(make_scram_credential("bob", "pw", 1000).error(), ec::invalid_request));
  auto c = rfc7677();
  c.stored_key.pop_back();
  EXPECT_TRUE(is(validate_credential(c), ec::invalid_request));
  c = rfc7677();
  c.mechanism = "SCRAM-SHA-1";
  EXPECT_TRUE(is(validate_credential(c), ec::invalid_request));
}

acl_entry acl(std::string principal, std::string type, std::string name,
              std::string op, std::string permission = "allow",
              std::string pattern = "literal") {
  acl_entry x;
  x.principal = std::move(principal);
  x.resource_type = std::move(type);
  x.resource_name = std::move(name);
  x.operation = std::move(op);
  x.permission = std::move(permission);
  x.pattern_type = std::move(pattern);
  EXPECT_FALSE(normalize_acl(x));
  return x;
}

TEST(Acl, NormalizesAndRejectsWithTheFieldNamed) {
  acl_entry x;
  x.principal = "alice";
  x.resource_type = "TOPIC";
  x.resource_name = "orders";
  x.operation = "Read";
  x.pattern_type = "";
  x.permission = "";
  ASSERT_FALSE(normalize_acl(x));
  EXPECT_EQ(x.principal, "User:alice");
  EXPECT_EQ(x.resource_type, "topic");
  EXPECT_EQ(x.operation, "read");
  EXPECT_EQ(x.pattern_type, "literal");
  EXPECT_EQ(x.permission, "allow");
  auto check = [](acl_entry y, const std::string& word) {
    auto err = normalize_acl(y);
    ASSERT_TRUE(is(err, ec::invalid_request));
    EXPECT_NE(describe(err).find(word), std::string::npos) << describe(err);
  };
  auto good = x;
  auto y = good;
  y.operation = "fly";
  check(y, "operation");
  y = good;
  y.resource_type = "queue";
  check(y, "resource type");
  y = good;
  y.pattern_type = "regex";
  check(y, "pattern type");
  y = good;
  y.permission = "maybe";
  check(y, "permission");
  y = good;
  y.principal = "User:a b";
  check(y, "principal");
  y = good;
  y.resource_name = "";
  check(y, "name");
  auto c = acl("User:*", "cluster", "whatever", "alter");
  EXPECT_EQ(c.resource_name, "cluster");
}

TEST(Acl, NothingIsAllowedWithoutAnEntry) {
  std::vector<acl_entry> none;
  EXPECT_FALSE(authorize(none, {}, "alice", "topic", "orders", "read"));
  EXPECT_TRUE(authorize(none, {"admin"}, "admin", "topic", "orders", "delete"));
  EXPECT_FALSE(authorize(none, {"admin"}, "", "topic", "orders", "read"));
}

TEST(Acl, LiteralPrefixedAndWildcardNamesMatch) {
  std::vector<acl_entry> xs{
    acl("User:alice", "topic", "orders", "read"),
    acl("User:alice", "topic", "logs.", "write", "allow", "prefixed"),
    acl("User:*", "group", "*", "read"),
  };
  EXPECT_TRUE(authorize(xs, {}, "alice", "topic", "orders", "read"));
  EXPECT_FALSE(authorize(xs, {}, "alice", "topic", "orders2", "read"));
  EXPECT_FALSE(authorize(xs, {}, "alice", "topic", "orders", "write"));
  EXPECT_TRUE(authorize(xs, {}, "alice", "topic", "logs.app", "write"));
  EXPECT_FALSE(authorize(xs, {}, "alice", "topic", "logs", "write"));
  EXPECT_FALSE(authorize(xs, {}, "bob", "topic", "orders", "read"));
  EXPECT_TRUE(authorize(xs, {}, "bob", "group", "anything", "read"));
  EXPECT_FALSE(authorize(xs, {}, "bob", "dlq", "anything", "read"));
}

TEST(Acl, ReadWriteDeleteAlterAndRedriveImplyDescribe) {
  std::vector<acl_entry> xs{acl("alice", "topic", "orders", "read"),
                            acl("alice", "dlq", "orders.dlq", "redrive")};
  EXPECT_TRUE(authorize(xs, {}, "alice", "topic", "orders", "describe"));
  EXPECT_TRUE(authorize(xs, {}, "alice", "dlq", "orders.dlq", "describe"));
  EXPECT_FALSE(authorize(xs, {}, "alice", "dlq", "orders.dlq", "read"));
  std::vector<acl_entry> create{acl("alice", "topic", "orders", "create")};
  EXPECT_FALSE(authorize(create, {}, "alice", "topic", "orders", "describe"));
  std::vector<acl_entry> all{acl("alice", "topic", "*", "all")};
  EXPECT_TRUE(authorize(all, {}, "alice", "topic", "x", "redrive"));
}

TEST(Acl, DenyWinsOverEveryAllowButNotOverSuperusers) {
  std::vector<acl_entry> xs{
    acl("User:*", "topic", "*", "all"),
    acl("alice", "topic", "secret", "read", "deny"),
  };
  EXPECT_TRUE(authorize(xs, {}, "alice", "topic", "orders", "read"));
  EXPECT_FALSE(authorize(xs, {}, "alice", "topic", "secret", "read"));
  // A deny names exactly its operation.
  EXPECT_TRUE(authorize(xs, {}, "alice", "topic", "secret", "describe"));
  EXPECT_TRUE(authorize(xs, {}, "bob", "topic", "secret", "read"));
  std::vector<acl_entry> deny_all{acl("User:*", "topic", "sec", "all", "deny",
                                      "prefixed"),
                                  acl("alice", "topic", "secret", "read")};
  EXPECT_FALSE(authorize(deny_all, {}, "alice", "topic", "secret", "read"));
  EXPECT_TRUE(authorize(deny_all, {"alice"}, "alice", "topic", "secret", "read"));
}

TEST(SecurityRegistry, AnswersFromWhatWasSetAndBumpsItsVersion) {
  security_registry r;
  auto v0 = r.version();
  r.set_superusers({"admin"});
  auto c = make_scram_credential("alice", "pw-1");
  ASSERT_TRUE(c);
  r.set({{"alice", *c}}, {acl("alice", "topic", "t", "write")});
  EXPECT_GT(r.version(), v0);
  ASSERT_TRUE(r.user("alice"));
  EXPECT_FALSE(r.user("bob"));
  EXPECT_TRUE(r.authorize("alice", "topic", "t", "write"));
  EXPECT_FALSE(r.authorize("alice", "topic", "t", "read"));
  EXPECT_TRUE(r.authorize("admin", "cluster", "cluster", "alter"));
  EXPECT_TRUE(r.is_superuser("admin"));
  EXPECT_EQ(describe_denial("alice", "topic", "t", "read"),
            "User:alice may not read topic t");
  EXPECT_EQ(describe_denial("alice", "cluster", "cluster", "alter"),
            "User:alice may not alter the cluster");
}

TEST(SecurityRegistry, AllowsSomewhereWhenAnAllowIsNotOverriddenByADeny) {
  security_registry r;
  r.set_superusers({"admin"});
  r.set({}, {acl("alice", "topic", "orders", "write"),
             acl("bob", "topic", "logs-", "all", "allow", "prefixed"),
             acl("carol", "topic", "x", "write"), acl("carol", "topic", "x", "write", "deny"),
             acl("dave", "topic", "y", "read")});
  EXPECT_TRUE(r.allows_somewhere("alice", "topic", "write"));
  EXPECT_TRUE(r.allows_somewhere("bob", "topic", "write")); // "all", prefixed
  EXPECT_FALSE(r.allows_somewhere("carol", "topic", "write")); // denied where allowed
  EXPECT_FALSE(r.allows_somewhere("dave", "topic", "write"));   // read only
  EXPECT_FALSE(r.allows_somewhere("alice", "group", "write"));
  EXPECT_FALSE(r.allows_somewhere("nobody", "topic", "write"));
  EXPECT_TRUE(r.allows_somewhere("admin", "topic", "write"));
  EXPECT_FALSE(r.allows_somewhere("", "topic", "write"));
}

TEST(LoginThrottle, LocksAnAddressOutPastItsAllowanceDoublingUpToTheMaximum) {
  login_throttle t{2, std::chrono::milliseconds{1000}, std::chrono::milliseconds{3000}};
  auto now = login_throttle::clock::now();
  EXPECT_EQ(t.failed("10.0.0.1", now), 1);
  EXPECT_EQ(t.locked_for("10.0.0.1", now).count(), 0);
  EXPECT_EQ(t.failed("10.0.0.1", now), 2); // the allowance reached: 1 s
  EXPECT_EQ(t.locked_for("10.0.0.1", now).count(), 1000);
  EXPECT_EQ(t.locked_for("10.0.0.2", now).count(), 0); // another address
  t.failed("10.0.0.1", now); // 2 s
  EXPECT_EQ(t.locked_for("10.0.0.1", now).count(), 2000);
  t.failed("10.0.0.1", now); // 4 s, capped at 3 s
  EXPECT_EQ(t.locked_for("10.0.0.1", now).count(), 3000);
  EXPECT_EQ(t.locked_for("10.0.0.1", now + std::chrono::seconds{3}).count(), 0);
  t.succeeded("10.0.0.1");
  EXPECT_EQ(t.locked_for("10.0.0.1", now).count(), 0);
  EXPECT_EQ(t.failed("10.0.0.1", now), 1); // counted from zero again
}

// -- bearer tokens ------------------------------------------------------------------

/// The message of an authentication_failed error ("" for another error).
std::string error_text(const caf::error& e) {
  std::string prefix = "authentication_failed: ";
  auto text = describe(e);
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : "";
}

TEST(BearerToken, VerifiesUntilItExpiresAndNamesItsUser) {
  auto c = make_scram_credential("alice", "pw-1");
  ASSERT_TRUE(c);
  auto t = issue_bearer_token(*c, 1'000'000, 60'000);
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_EQ(t->rfind("fry1.", 0), 0u) << *t;
  // Only URL-safe characters: it goes into headers and shell variables.
  for (auto ch : *t)
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-'
                || ch == '_' || ch == '.')
      << *t;
  auto user = bearer_token_user(*t);
  ASSERT_TRUE(user);
  EXPECT_EQ(*user, "alice");
  auto ok = verify_bearer_token(*c, *t, 1'000'000 + 59'999);
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->user, "alice");
  EXPECT_EQ(ok->issued_ms, 1'000'000);
  EXPECT_EQ(ok->expires_ms, 1'060'000);
  auto late = verify_bearer_token(*c, *t, 1'060'000);
  ASSERT_FALSE(late);
  EXPECT_TRUE(is(late.error(), ec::authentication_failed));
  EXPECT_EQ(error_text(late.error()), "bearer token expired");
  // Two tokens of one user at one time differ (a random nonce).
  auto t2 = issue_bearer_token(*c, 1'000'000, 60'000);
  ASSERT_TRUE(t2);
  EXPECT_NE(*t, *t2);
  EXPECT_FALSE(issue_bearer_token(*c, 1'000'000, 0));
}

TEST(BearerToken, AlteredForgedOrOtherUsersTokensAreInvalid) {
  auto alice = make_scram_credential("alice", "pw-1");
  auto bob = make_scram_credential("bob", "pw-1");
  ASSERT_TRUE(alice && bob);
  auto t = issue_bearer_token(*alice, 1'000, 60'000);
  ASSERT_TRUE(t);
  auto invalid = [&](const scram_credential& c, const std::string& token) {
    auto r = verify_bearer_token(c, token, 2'000);
    if (r)
      return std::string{"accepted"};
    EXPECT_TRUE(is(r.error(), ec::authentication_failed));
    return error_text(r.error());
  };
  // Every single character changed in the payload or the MAC.
  for (size_t i = 5; i < t->size(); ++i) {
    if ((*t)[i] == '.')
      continue;
    auto bad = *t;
    bad[i] = bad[i] == 'A' ? 'B' : 'A';
    auto why = invalid(*alice, bad);
    EXPECT_TRUE(why == "invalid bearer token" || why == "malformed bearer token")
      << "position " << i << ": " << why;
  }
  // Checked with another user's key (the name in it is alice's).
  EXPECT_EQ(invalid(*bob, *t), "invalid bearer token");
  // A new password of the same user: every old token is invalid.
  auto renewed = make_scram_credential("alice", "pw-2");
  ASSERT_TRUE(renewed);
  EXPECT_EQ(invalid(*renewed, *t), "invalid bearer token");
  // A token naming alice, made with bob's key (bob forging alice's).
  auto forged_src = *bob;
  forged_src.user = "alice";
  auto forged = issue_bearer_token(forged_src, 1'000, 60'000);
  ASSERT_TRUE(forged);
  EXPECT_EQ(invalid(*alice, *forged), "invalid bearer token");
  for (const std::string& junk : std::vector<std::string>{"", "fry1.", "fry1..", "Basic abc", "fry1.AAAA.AAAA",
                           "fry2." + t->substr(5), t->substr(0, t->rfind('.')),
                           *t + "=", std::string(5000, 'a')})
    EXPECT_EQ(invalid(*alice, junk), "malformed bearer token") << junk;
  EXPECT_FALSE(bearer_token_user("fry1.x.y"));
}

} // namespace
} // namespace ferry
