// broker/scram_exchange.hpp: the SCRAM-SHA-256 login exchange, both ends.
//
// The exchange runs on GNU SASL, which makes its own nonces, so RFC 7677's
// example cannot be replayed message for message. Instead this file has its
// own SCRAM arithmetic (OpenSSL, RFC 5802 section 3), checked first against
// RFC 7677's literal messages, and then checks both ends against it with
// the RFC's password, salt, iterations and (where the test writes the other
// side's message) the RFC's nonces.

#include "broker/scram_exchange.hpp"

#include "broker/error.hpp"
#include "broker/security.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry {
namespace {

// -- an independent SCRAM-SHA-256 ---------------------------------------------

std::string b64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  auto n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(raw.data()),
                           static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string unb64(std::string_view in) {
  std::string out(in.size() / 4 * 3, '\0');
  auto n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(in.data()),
                           static_cast<int>(in.size()));
  EXPECT_GE(n, 0);
  size_t pad = 0;
  for (auto i = in.rbegin(); i != in.rend() && *i == '='; ++i)
    ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md,
       &len);
  return std::string{reinterpret_cast<char*>(md), len};
}

std::string sha256(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return std::string{reinterpret_cast<char*>(md), sizeof(md)};
}

std::string xor_of(std::string a, std::string_view b) {
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<char>(a[i] ^ b[i]);
  return a;
}

struct keys {
  std::string client_key;
  std::string stored_key;
  std::string server_key;
};

keys derive(std::string_view password, std::string_view salt, int iterations) {
  std::string salted(32, '\0');
  PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                    reinterpret_cast<const unsigned char*>(salt.data()),
                    static_cast<int>(salt.size()), iterations, EVP_sha256(),
                    32, reinterpret_cast<unsigned char*>(salted.data()));
  keys k;
  k.client_key = hmac(salted, "Client Key");
  k.stored_key = sha256(k.client_key);
  k.server_key = hmac(salted, "Server Key");
  return k;
}

/// AuthMessage of RFC 5802: client-first-message-bare "," server-first
/// "," client-final-message-without-proof.
std::string auth_message(std::string_view client_first,
                         std::string_view server_first,
                         std::string_view final_without_proof) {
  return std::string{client_first.substr(3)} + "," + std::string{server_first}
         + "," + std::string{final_without_proof};
}

std::string proof(const keys& k, std::string_view auth) {
  return b64(xor_of(k.client_key, hmac(k.stored_key, auth)));
}

std::string signature(const keys& k, std::string_view auth) {
  return b64(hmac(k.server_key, auth));
}

/// The nonce (r=) of a server-first or client-final message.
std::string nonce_of(const std::string& msg) {
  auto at = msg.find("r=");
  EXPECT_NE(at, std::string::npos) << msg;
  return msg.substr(at + 2, msg.find(',', at) - at - 2);
}

// -- the RFC 7677 example ------------------------------------------------------

constexpr std::string_view rfc_salt_b64 = "W22ZaJ0SNY7soEsUEjb6gQ==";
constexpr std::string_view rfc_client_nonce = "rOprNGfwEbeRWgbNEkqO";
constexpr std::string_view rfc_server_nonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

scram_credential rfc7677_credential() {
  auto k = derive("pencil", unb64(rfc_salt_b64), 4096);
  scram_credential c;
  c.user = "user";
  c.salt = unb64(rfc_salt_b64);
  c.iterations = 4096;
  c.stored_key = k.stored_key;
  c.server_key = k.server_key;
  return c;
}

// -- helpers --------------------------------------------------------------------

scram_server::lookup only(scram_credential c) {
  return [c](const std::string& user) -> std::optional<scram_credential> {
    if (user == c.user)
      return c;
    return std::nullopt;
  };
}

scram_credential credential(const std::string& user, const std::string& pw) {
  auto c = make_scram_credential(user, pw);
  EXPECT_TRUE(c) << describe(c.error());
  return *c;
}

/// A conversation run up to the client-final message.
struct half_done {
  scram_server server;
  scram_client client;
  std::string client_first;
  std::string server_first;
  std::string client_final;
};

half_done run_to_client_final(const scram_server::lookup& find,
                              const std::string& user, const std::string& pw) {
  half_done x{scram_server{}, scram_client{user, pw}, {}, {}, {}};
  auto c1 = x.client.first();
  if (!c1) {
    ADD_FAILURE() << describe(c1.error());
    return x;
  }
  x.client_first = *c1;
  auto s1 = x.server.first(x.client_first, find);
  if (!s1) {
    ADD_FAILURE() << describe(s1.error());
    return x;
  }
  x.server_first = *s1;
  auto c2 = x.client.final(x.server_first);
  if (!c2) {
    ADD_FAILURE() << describe(c2.error());
    return x;
  }
  x.client_final = *c2;
  return x;
}

/// `msg` with the proof (everything after the last "p=") replaced.
std::string with_proof(const std::string& msg, const std::string& proof) {
  return msg.substr(0, msg.rfind(",p=")) + ",p=" + proof;
}

const std::string generic_failure = "authentication_failed: authentication failed";

// -- tests ------------------------------------------------------------------------

TEST(ScramExchange, TheTestArithmeticReproducesRfc7677) {
  // RFC 7677 section 3, literally.
  auto k = derive("pencil", unb64(rfc_salt_b64), 4096);
  std::string c1 = "n,,n=user,r=" + std::string{rfc_client_nonce};
  std::string s1 = "r=" + std::string{rfc_client_nonce}
                   + std::string{rfc_server_nonce} + ",s="
                   + std::string{rfc_salt_b64} + ",i=4096";
  std::string without_proof = "c=biws,r=" + std::string{rfc_client_nonce}
                              + std::string{rfc_server_nonce};
  auto auth = auth_message(c1, s1, without_proof);
  EXPECT_EQ(proof(k, auth), "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
  EXPECT_EQ(signature(k, auth), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
  // And the same keys as security_test's RFC 7677 credential.
  EXPECT_EQ(b64(k.stored_key), "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=");
  EXPECT_FALSE(validate_credential(rfc7677_credential()));
}

TEST(ScramExchange, ServerAcceptsTheRfc7677ClientAndSignsAsTheRfcSays) {
  // The test is the client, with the RFC's nonce; the server adds its own.
  auto cred = rfc7677_credential();
  auto k = derive("pencil", cred.salt, 4096);
  scram_server server;
  std::string c1 = "n,,n=user,r=" + std::string{rfc_client_nonce};
  auto s1 = server.first(c1, only(cred));
  ASSERT_TRUE(s1) << describe(s1.error());
  auto nonce = nonce_of(*s1);
  EXPECT_EQ(nonce.substr(0, rfc_client_nonce.size()), rfc_client_nonce);
  EXPECT_GT(nonce.size(), rfc_client_nonce.size());
  EXPECT_EQ(s1->substr(s1->find(",s=")),
            ",s=" + std::string{rfc_salt_b64} + ",i=4096");
  auto without_proof = "c=biws,r=" + nonce;
  auto auth = auth_message(c1, *s1, without_proof);
  auto s2 = server.final(without_proof + ",p=" + proof(k, auth));
  ASSERT_TRUE(s2) << describe(s2.error());
  EXPECT_EQ(*s2, "v=" + signature(k, auth));
  EXPECT_EQ(server.user(), "user");
}

TEST(ScramExchange, ClientAnswersTheRfc7677ServerAsTheRfcSays) {
  // The test is the server, with the RFC's nonce, salt and iterations.
  auto k = derive("pencil", unb64(rfc_salt_b64), 4096);
  scram_client client{"user", "pencil"};
  auto c1 = client.first();
  ASSERT_TRUE(c1) << describe(c1.error());
  ASSERT_EQ(c1->substr(0, 12), "n,,n=user,r=");
  auto cnonce = c1->substr(12);
  EXPECT_GE(cnonce.size(), 16u);
  std::string s1 = "r=" + cnonce + std::string{rfc_server_nonce} + ",s="
                   + std::string{rfc_salt_b64} + ",i=4096";
  auto c2 = client.final(s1);
  ASSERT_TRUE(c2) << describe(c2.error());
  auto without_proof = "c=biws,r=" + cnonce + std::string{rfc_server_nonce};
  auto auth = auth_message(*c1, s1, without_proof);
  EXPECT_EQ(*c2, without_proof + ",p=" + proof(k, auth));
  EXPECT_FALSE(client.verify("v=" + signature(k, auth)));
}

TEST(ScramExchange, FullExchangeWithAStoredCredentialSucceeds) {
  auto cred = credential("alice", "correct horse");
  scram_server server;
  scram_client client{"alice", "correct horse"};
  auto c1 = client.first();
  ASSERT_TRUE(c1) << describe(c1.error());
  EXPECT_EQ(c1->substr(0, 13), "n,,n=alice,r=");
  auto s1 = server.first(*c1, only(cred));
  ASSERT_TRUE(s1) << describe(s1.error());
  EXPECT_NE(s1->find(",s=" + b64(cred.salt) + ",i=4096"), std::string::npos)
    << *s1;
  EXPECT_EQ(server.user(), "");
  auto c2 = client.final(*s1);
  ASSERT_TRUE(c2) << describe(c2.error());
  EXPECT_EQ(c2->substr(0, 7), "c=biws,");
  auto s2 = server.final(*c2);
  ASSERT_TRUE(s2) << describe(s2.error());
  EXPECT_EQ(s2->substr(0, 2), "v=");
  EXPECT_EQ(server.user(), "alice");
  EXPECT_FALSE(client.verify(*s2));
}

TEST(ScramExchange, ConversationsAreIndependentObjects) {
  // Two logins interleaved, and moved around mid-way.
  auto a = credential("alice", "pw-a");
  auto b = credential("bob", "pw-b");
  auto find = [&](const std::string& u) -> std::optional<scram_credential> {
    if (u == "alice")
      return a;
    if (u == "bob")
      return b;
    return std::nullopt;
  };
  auto x = run_to_client_final(find, "alice", "pw-a");
  auto y = run_to_client_final(find, "bob", "pw-b");
  scram_server moved = std::move(y.server);
  auto sy = moved.final(y.client_final);
  auto sx = x.server.final(x.client_final);
  ASSERT_TRUE(sx) << describe(sx.error());
  ASSERT_TRUE(sy) << describe(sy.error());
  EXPECT_EQ(x.server.user(), "alice");
  EXPECT_EQ(moved.user(), "bob");
  EXPECT_EQ(y.server.user(), ""); // moved from
  EXPECT_TRUE(is(y.server.final(y.client_final).error(), ec::invalid_request));
  EXPECT_FALSE(x.client.verify(*sx));
  EXPECT_FALSE(y.client.verify(*sy));
}

TEST(ScramExchange, WrongPasswordFailsWithAGenericError) {
  auto cred = credential("alice", "right password");
  auto x = run_to_client_final(only(cred), "alice", "wrong password");
  auto s2 = x.server.final(x.client_final);
  ASSERT_FALSE(s2);
  EXPECT_TRUE(is(s2.error(), ec::authentication_failed));
  auto text = describe(s2.error());
  EXPECT_EQ(text, generic_failure);
  EXPECT_EQ(text.find("proof"), std::string::npos);
  EXPECT_EQ(text.find("alice"), std::string::npos);
  EXPECT_EQ(text.find(b64(cred.salt)), std::string::npos);
  EXPECT_EQ(x.server.user(), "");
}

TEST(ScramExchange, UnknownUserFailsExactlyLikeAWrongPassword) {
  auto cred = credential("alice", "right password");
  std::vector<std::string> asked;
  auto find = [&](const std::string& u) -> std::optional<scram_credential> {
    asked.push_back(u);
    return u == "alice" ? std::optional{cred} : std::nullopt;
  };
  auto wrong = run_to_client_final(find, "alice", "wrong password");
  auto wrong_err = wrong.server.final(wrong.client_final);
  ASSERT_FALSE(wrong_err);

  auto unknown = run_to_client_final(find, "mallory", "any password");
  auto unknown_err = unknown.server.final(unknown.client_final);
  ASSERT_FALSE(unknown_err);
  EXPECT_EQ(describe(unknown_err.error()), describe(wrong_err.error()));
  EXPECT_EQ(describe(unknown_err.error()), generic_failure);
  EXPECT_EQ(asked, (std::vector<std::string>{"alice", "mallory"}));

  // The server-first message looks like a real one, and an unknown name
  // gets the same salt every time (a changing salt would give it away).
  auto salt_of = [](const std::string& server_first) {
    return server_first.substr(server_first.find(",s="));
  };
  auto again = run_to_client_final(find, "mallory", "other");
  EXPECT_EQ(salt_of(again.server_first), salt_of(unknown.server_first));
  EXPECT_EQ(unb64(salt_of(again.server_first).substr(3, 24)).size(), 16u);
  auto other = run_to_client_final(find, "trudy", "other");
  EXPECT_NE(salt_of(other.server_first), salt_of(unknown.server_first));
  EXPECT_NE(again.server_first, unknown.server_first); // the nonces differ

  // A stored credential that does not fit (another user's, or broken)
  // fails the same way, and so does a name no ferry user can have (which
  // is not even looked up).
  auto misfiled = [&](const std::string&) -> std::optional<scram_credential> {
    return cred; // always alice's
  };
  auto x = run_to_client_final(misfiled, "bob", "right password");
  EXPECT_EQ(describe(x.server.final(x.client_final).error()), generic_failure);
  auto broken = cred;
  broken.stored_key.resize(5);
  auto y = run_to_client_final(only(broken), "alice", "right password");
  EXPECT_EQ(describe(y.server.final(y.client_final).error()), generic_failure);
  asked.clear();
  scram_server odd;
  EXPECT_TRUE(odd.first("n,,n=al=2Cice,r=abcdef", find));
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(describe(odd.final("c=biws,r=abcdef,p=" + b64(std::string(32, 'x')))
                       .error()),
            generic_failure);
}

TEST(ScramExchange, ReplayedClientFinalFailsInANewConversation) {
  auto cred = credential("alice", "pw");
  auto x = run_to_client_final(only(cred), "alice", "pw");
  ASSERT_TRUE(x.server.final(x.client_final));
  // An eavesdropper replays both client messages to a new conversation.
  scram_server replay;
  auto s1 = replay.first(x.client_first, only(cred));
  ASSERT_TRUE(s1) << describe(s1.error());
  EXPECT_NE(nonce_of(*s1), nonce_of(x.server_first));
  auto s2 = replay.final(x.client_final);
  ASSERT_FALSE(s2);
  EXPECT_EQ(describe(s2.error()), generic_failure);
  EXPECT_EQ(replay.user(), "");
}

/// librdkafka before 2.6.1: client-final carries r=<client nonce><server
/// nonce> (its client nonce twice) and a proof over that message.
std::string librdkafka_final(const keys& k, const std::string& client_first,
                             const std::string& server_first, std::string nonce) {
  auto without_proof = "c=biws,r=" + nonce;
  auto auth = auth_message(client_first, server_first, without_proof);
  return without_proof + ",p=" + proof(k, auth);
}

TEST(ScramExchange, TheKafkaListenerTakesLibrdkafkasDoubledNonceAndNothingLooser) {
  auto cred = rfc7677_credential();
  auto k = derive("pencil", unb64(rfc_salt_b64), 4096);
  auto client_first = "n,,n=user,r=" + std::string{rfc_client_nonce};
  auto start = [&](bool lenient, std::string& server_first) {
    auto server = std::make_unique<scram_server>(lenient);
    auto s1 = server->first(client_first, only(cred));
    EXPECT_TRUE(s1) << describe(s1.error());
    server_first = s1 ? *s1 : "";
    return server;
  };
  // Accepted with the option: the server's signature is RFC 5802's over the
  // message as sent.
  std::string sf;
  auto lenient = start(true, sf);
  auto doubled = std::string{rfc_client_nonce} + nonce_of(sf);
  auto final_msg = librdkafka_final(k, client_first, sf, doubled);
  auto out = lenient->final(final_msg);
  ASSERT_TRUE(out) << describe(out.error());
  EXPECT_EQ(*out, "v=" + signature(k, auth_message(client_first, sf,
                                                   final_msg.substr(0, final_msg.rfind(",p=")))));
  EXPECT_EQ(lenient->user(), "user");
  // A correct client still goes through GNU SASL with the option on.
  auto strict_ok = start(true, sf);
  auto right = librdkafka_final(k, client_first, sf, nonce_of(sf));
  EXPECT_TRUE(strict_ok->final(right));
  // Without the option the doubled nonce fails, as before.
  auto strict = start(false, sf);
  auto refused = strict->final(librdkafka_final(k, client_first, sf,
                                                std::string{rfc_client_nonce} + nonce_of(sf)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(describe(refused.error()), generic_failure);
  // Looser forms fail: any other prefix, a wrong proof, a replay into a
  // new conversation (another server nonce), another channel binding.
  auto other_prefix = start(true, sf);
  EXPECT_FALSE(other_prefix->final(librdkafka_final(k, client_first, sf, "x" + nonce_of(sf))));
  auto bad_proof = start(true, sf);
  auto tampered = librdkafka_final(derive("crayon", unb64(rfc_salt_b64), 4096), client_first,
                                   sf, std::string{rfc_client_nonce} + nonce_of(sf));
  auto r = bad_proof->final(tampered);
  ASSERT_FALSE(r);
  EXPECT_EQ(describe(r.error()), generic_failure);
  EXPECT_EQ(bad_proof->user(), "");
  auto replay = start(true, sf);
  EXPECT_FALSE(replay->final(final_msg));
  auto binding = start(true, sf);
  auto y_final = librdkafka_final(k, client_first, sf,
                                  std::string{rfc_client_nonce} + nonce_of(sf));
  y_final.replace(0, 6, "c=eSws");
  EXPECT_FALSE(binding->final(y_final));
  // One try per conversation, as always.
  auto twice = start(true, sf);
  EXPECT_FALSE(twice->final(tampered));
  EXPECT_FALSE(twice->final(librdkafka_final(k, client_first, sf,
                                             std::string{rfc_client_nonce} + nonce_of(sf))));
}

TEST(ScramExchange, OutOfOrderCallsAreInvalidRequests) {
  auto cred = credential("alice", "pw");
  // final() before first().
  scram_server early;
  auto e = early.final("c=biws,r=abc,p=" + b64(std::string(32, 'x')));
  ASSERT_FALSE(e);
  EXPECT_TRUE(is(e.error(), ec::invalid_request)) << describe(e.error());

  // final() twice after a success: invalid_request, the user stays.
  auto x = run_to_client_final(only(cred), "alice", "pw");
  ASSERT_TRUE(x.server.final(x.client_final));
  auto twice = x.server.final(x.client_final);
  ASSERT_FALSE(twice);
  EXPECT_TRUE(is(twice.error(), ec::invalid_request));
  EXPECT_EQ(x.server.user(), "alice");

  // first() twice.
  auto y = run_to_client_final(only(cred), "alice", "pw");
  auto again = y.server.first(y.client_first, only(cred));
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::invalid_request));
  // ... which ends that conversation.
  EXPECT_TRUE(is(y.server.final(y.client_final).error(), ec::invalid_request));

  // One proof per conversation: after a failed final() the right proof is
  // refused too (gsasl alone would check it).
  auto z = run_to_client_final(only(cred), "alice", "pw");
  auto bad = with_proof(z.client_final, b64(std::string(32, '\0')));
  EXPECT_EQ(describe(z.server.final(bad).error()), generic_failure);
  auto late = z.server.final(z.client_final);
  ASSERT_FALSE(late);
  EXPECT_TRUE(is(late.error(), ec::invalid_request));
  EXPECT_EQ(z.server.user(), "");

  // The client, too.
  scram_client c{"alice", "pw"};
  EXPECT_TRUE(is(c.final("r=abc,s=c2FsdA==,i=4096").error(), ec::invalid_request));
  scram_client d{"alice", "pw"};
  EXPECT_TRUE(is(d.verify("v=abc"), ec::invalid_request));
  scram_client f{"alice", "pw"};
  ASSERT_TRUE(f.first());
  EXPECT_TRUE(is(f.first().error(), ec::invalid_request));
}

TEST(ScramExchange, TamperedClientFinalMessagesFail) {
  auto cred = credential("alice", "pw");
  auto tampered = [&](auto change) {
    auto x = run_to_client_final(only(cred), "alice", "pw");
    auto s2 = x.server.final(change(std::as_const(x)));
    if (s2)
      return std::string{"accepted"};
    EXPECT_EQ(x.server.user(), "");
    return describe(s2.error());
  };
  // A changed nonce (last character of the server's part).
  EXPECT_EQ(tampered([](const half_done& x) {
              auto m = x.client_final;
              auto end = m.find(",p=") - 1;
              m[end] = m[end] == 'A' ? 'B' : 'A';
              return m;
            }),
            generic_failure);
  // The nonce of the client-first message alone (without the server's).
  EXPECT_EQ(tampered([](const half_done& x) {
              auto cnonce = x.client_first.substr(x.client_first.find(",r=") + 3);
              const auto& m = x.client_final;
              return "c=biws,r=" + cnonce + m.substr(m.find(",p="));
            }),
            generic_failure);
  // Another channel-binding flag (y,,) than client-first sent.
  EXPECT_EQ(tampered([](const half_done& x) {
              return "c=eSws" + x.client_final.substr(6);
            }),
            generic_failure);
  // One bit of the proof.
  EXPECT_EQ(tampered([](const half_done& x) {
              const auto& m = x.client_final;
              auto p = unb64(m.substr(m.rfind(",p=") + 3));
              p[0] = static_cast<char>(p[0] ^ 1);
              return with_proof(m, b64(p));
            }),
            generic_failure);
  // An extension added in front of the proof: the AuthMessage changes.
  EXPECT_EQ(tampered([](const half_done& x) {
              const auto& m = x.client_final;
              auto at = m.rfind(",p=");
              return m.substr(0, at) + ",x=1" + m.substr(at);
            }),
            generic_failure);
  // And the untouched message passes (the changes above are the cause).
  EXPECT_EQ(tampered([](const half_done& x) { return x.client_final; }),
            "accepted");
}

TEST(ScramExchange, MalformedMessagesToTheServerAreInvalidRequests) {
  auto cred = credential("alice", "pw");
  auto first_error = [&](std::string_view msg) {
    scram_server s;
    auto r = s.first(msg, only(cred));
    EXPECT_FALSE(r) << msg;
    return r ? ec::none : code_of(r.error());
  };
  for (std::string_view m :
       {"", "garbage", "n,,n=alice", "n,,r=abcdef", "n,,n=,r=abcdef",
        "n,,n=alice,r=", "n,,n=al=ice,r=abcdef", "n,,n=alice,r=abc,1",
        "x,,n=alice,r=abcdef", "n,n=alice,r=abcdef",
        "p=tls-unique,,n=alice,r=abcdef", "n,a=bob,n=alice,r=abcdef",
        "n,,m=x,n=alice,r=abcdef", "n,,n=alice,r=ab\tcd"})
    EXPECT_EQ(first_error(m), ec::invalid_request) << m;
  // What is refused on purpose says so.
  auto refusal = [&](std::string_view msg) {
    scram_server s;
    auto r = s.first(msg, only(cred));
    return r ? std::string{"accepted"} : describe(r.error());
  };
  EXPECT_EQ(refusal("p=tls-unique,,n=alice,r=abcdef"),
            "invalid_request: SCRAM channel binding (SCRAM-SHA-256-PLUS) is "
            "not supported");
  EXPECT_EQ(refusal("n,a=bob,n=alice,r=abcdef"),
            "invalid_request: SCRAM authorization identities (a=) are not "
            "supported");
  EXPECT_EQ(refusal("n,,m=x,n=alice,r=abcdef"),
            "invalid_request: mandatory SCRAM extensions (m=) are not "
            "supported");
  // "y,," (the client could bind, but thinks the server cannot) is fine.
  EXPECT_EQ(refusal("y,,n=alice,r=abcdef"), "accepted");
  EXPECT_EQ(first_error(std::string_view{"n,,n=alice,r=ab\0cd", 18}),
            ec::invalid_request);
  EXPECT_EQ(first_error("n,,n=alice,r=" + std::string(5000, 'a')),
            ec::invalid_request);
  EXPECT_EQ(first_error("n,,n=" + std::string(4000, 'a') + "\xc3\xa9,r=ab"),
            ec::invalid_request);

  auto final_error = [&](auto make) {
    auto x = run_to_client_final(only(cred), "alice", "pw");
    auto msg = make(x);
    auto r = x.server.final(msg);
    EXPECT_FALSE(r) << msg;
    EXPECT_EQ(x.server.user(), "");
    return r ? ec::none : code_of(r.error());
  };
  auto nonce = [](const half_done& x) { return nonce_of(x.server_first); };
  EXPECT_EQ(final_error([](auto&) { return std::string{}; }),
            ec::invalid_request);
  EXPECT_EQ(final_error([](auto&) { return std::string{"garbage"}; }),
            ec::invalid_request);
  EXPECT_EQ(final_error([&](auto& x) { return "c=biws,r=" + nonce(x); }),
            ec::invalid_request); // no proof
  EXPECT_EQ(final_error([&](auto& x) { return "c=biws,r=" + nonce(x) + ",p="; }),
            ec::invalid_request); // empty proof
  EXPECT_EQ(final_error([&](auto& x) {
              return "c=biws,r=" + nonce(x) + ",p=!!!!not*base64";
            }),
            ec::invalid_request);
  EXPECT_EQ(final_error([&](auto& x) {
              return "c=biws,r=" + nonce(x) + ",p=" + b64(std::string(16, 'x'));
            }),
            ec::invalid_request); // a proof of the wrong length
  EXPECT_EQ(final_error([&](auto& x) {
              return "c=!!!!,r=" + nonce(x) + ",p=" + b64(std::string(32, 'x'));
            }),
            ec::invalid_request); // c= is not base64
  EXPECT_EQ(final_error([&](auto& x) {
              return "r=" + nonce(x) + ",p=" + b64(std::string(32, 'x'));
            }),
            ec::invalid_request); // no c=
  EXPECT_EQ(final_error([](auto& x) { return x.client_final + "\n"; }),
            ec::invalid_request);
  EXPECT_EQ(final_error([](auto& x) {
              return x.client_final + std::string(5000, 'A');
            }),
            ec::invalid_request);
}

TEST(ScramExchange, MalformedOrHostileServerMessagesAreRefused) {
  auto client_error = [](auto make) {
    scram_client c{"alice", "pw"};
    auto c1 = c.first();
    EXPECT_TRUE(c1);
    auto cnonce = c1->substr(c1->find(",r=") + 3);
    auto r = c.final(make(cnonce));
    EXPECT_FALSE(r);
    return r ? std::string{"accepted"} : describe(r.error());
  };
  auto code = [&](auto make) {
    auto text = client_error(make);
    return text.substr(0, text.find(':'));
  };
  EXPECT_EQ(code([](auto&) { return std::string{}; }), "invalid_request");
  EXPECT_EQ(code([](auto&) { return std::string{"garbage"}; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=c2FsdA=="; }),
            "invalid_request"); // no iterations
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=,i=4096"; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=!!!!,i=4096"; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=c2FsdA==,i=4x96"; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) { return "m=x,r=" + n + "xyz,s=c2FsdA==,i=4096"; }),
            "invalid_request");
  // Too few iterations (a downgrade) or so many the client would spin.
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=c2FsdA==,i=1"; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) { return "r=" + n + "xyz,s=c2FsdA==,i=4095"; }),
            "invalid_request");
  EXPECT_EQ(code([](auto& n) {
              return "r=" + n + "xyz,s=c2FsdA==,i=99999999999999999999";
            }),
            "invalid_request");
  // A nonce that is not ours extended.
  EXPECT_EQ(client_error([](auto&) {
              return std::string{"r=somebodyelse,s=c2FsdA==,i=4096"};
            }),
            "authentication_failed: the server's SCRAM nonce does not extend "
            "the client's");
  EXPECT_EQ(code([](auto& n) { return "r=" + n + ",s=c2FsdA==,i=4096"; }),
            "authentication_failed"); // no server part
  EXPECT_EQ(code([](auto& n) { return "r=" + n.substr(1) + "xyz,s=c2FsdA==,i=4096"; }),
            "authentication_failed");
  EXPECT_EQ(client_error([](auto&) { return std::string{"e=unknown-user"}; }),
            "authentication_failed: the server refused the login: unknown-user");

  // Server-final messages.
  auto verify_error = [](std::string_view msg) {
    scram_client c{"alice", "pw"};
    auto c1 = c.first();
    auto cnonce = c1->substr(c1->find(",r=") + 3);
    EXPECT_TRUE(c.final("r=" + cnonce + "xyz,s=c2FsdA==,i=4096"));
    return describe(c.verify(msg));
  };
  EXPECT_EQ(verify_error(""), "invalid_request: malformed SCRAM server-final "
                              "message: empty");
  EXPECT_EQ(verify_error("garbage").substr(0, 15), "invalid_request");
  EXPECT_EQ(verify_error("v=").substr(0, 15), "invalid_request");
  EXPECT_EQ(verify_error("v=abc,x").substr(0, 15), "invalid_request");
  EXPECT_EQ(verify_error("e=invalid-proof"),
            "authentication_failed: the server refused the login: "
            "invalid-proof");
  EXPECT_EQ(verify_error("v=" + b64(std::string(32, '\0'))),
            "authentication_failed: the server's SCRAM signature is wrong");
}

TEST(ScramExchange, VerifyRejectsAServerThatDoesNotKnowTheCredential) {
  auto cred = credential("alice", "pw");
  auto other = credential("alice", "another pw");

  // A server with another credential for alice refuses her proof, so the
  // client never gets a signature; forced to check one anyway (32 zero
  // bytes, or the signature of another conversation), it says no.
  auto x = run_to_client_final(only(other), "alice", "pw");
  EXPECT_EQ(describe(x.server.final(x.client_final).error()), generic_failure);
  EXPECT_EQ(describe(x.client.verify("v=" + b64(std::string(32, '\0')))),
            "authentication_failed: the server's SCRAM signature is wrong");

  auto y = run_to_client_final(only(cred), "alice", "pw");
  auto z = run_to_client_final(only(cred), "alice", "pw");
  auto sy = y.server.final(y.client_final);
  ASSERT_TRUE(sy);
  EXPECT_TRUE(is(z.client.verify(*sy), ec::authentication_failed));

  // A server that has StoredKey (enough to check the proof) but not
  // ServerKey accepts the client, and the client catches it.
  auto impostor = cred;
  impostor.server_key = other.server_key;
  auto w = run_to_client_final(only(impostor), "alice", "pw");
  auto sw = w.server.final(w.client_final);
  ASSERT_TRUE(sw) << describe(sw.error());
  EXPECT_EQ(describe(w.client.verify(*sw)),
            "authentication_failed: the server's SCRAM signature is wrong");
}

TEST(ScramExchange, ParallelConversationsShareOneLibraryHandle) {
  auto cred = credential("alice", "pw");
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 3; ++i) {
        scram_server server;
        scram_client client{"alice", "pw"};
        auto c1 = client.first();
        auto s1 = c1 ? server.first(*c1, only(cred)) : c1;
        auto c2 = s1 ? client.final(*s1) : s1;
        auto s2 = c2 ? server.final(*c2) : c2;
        if (s2 && !client.verify(*s2) && server.user() == "alice")
          ++ok;
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(ok.load(), 12);
}

TEST(ScramExchange, ClientRefusesBadUserNamesAndPasswords) {
  EXPECT_TRUE(is(scram_client("", "pw").first().error(), ec::invalid_request));
  EXPECT_TRUE(
    is(scram_client("a,b", "pw").first().error(), ec::invalid_request));
  EXPECT_TRUE(is(scram_client("alice", "").first().error(), ec::invalid_request));
  EXPECT_TRUE(is(scram_client("alice", std::string{"p\0w", 3}).first().error(),
                 ec::invalid_request));
}

} // namespace
} // namespace ferry
