// Peer ports (issue 16: ferryd --peer-port), across real processes. A node
// with a peer port runs its actors in an actor system only peers connect to
// (mutual TLS with the node CA, --peer-tls-ca) and serves clients from a
// second one, whose only actor is the front door (actors/server/
// front_door.hpp). The tests probe both ports as a hostile client would:
// a certificate of the clients' CA does not open the peer port; on the
// client port the node's answers come from the node actor, but a request
// sent to that actor's handle goes nowhere (the clients' system has no
// route to the node's), node-to-node requests and the cluster credential
// are refused; the same probes on the peer port, with a node certificate,
// are answered (so the probe itself works). A 3-node cluster with peer
// ports, TLS and users replicates, fails over and shows clients their
// client ports.

#include "cluster_harness.hpp"
#include "ferryctl_run.hpp"
#include "process.hpp"
#include "test_certs.hpp"

#include "actors/client/tls.hpp"
#include "broker/error.hpp"
#include "broker/security.hpp"

#include <caf/io/remote_actor.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ferry::test::ferryctl;
using ferry::test::ferryd_process;
using ferry::test::run_command;
using ferry::test::temp_dir;
using ferry::test::test_certs;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// The port of ferryd's "peers on H:P" line; 0 if none.
uint16_t peer_port_of(const std::string& output) {
  std::smatch m;
  static const std::regex line{"peers on [^:\\s]+:([0-9]+)"};
  if (!std::regex_search(output, m, line))
    return 0;
  return static_cast<uint16_t>(std::stoi(m[1].str()));
}

/// What one request got: the answer's type as text (or the error) and the
/// actor that sent the answer.
struct probe_result {
  bool answered = false;
  std::string error;
  caf::strong_actor_ptr answerer;
};

/// Sends `msg` to `dest` from a scoped actor and waits up to `timeout` for
/// an answer of type T.
template <class T>
probe_result probe(caf::actor_system& sys, const caf::actor& dest, caf::message msg,
                   caf::timespan timeout) {
  probe_result out;
  caf::scoped_actor self{sys};
  self->request(dest, timeout, std::move(msg))
    .receive(
      [&](T&) {
        out.answered = true;
        out.answerer = self->current_sender();
      },
      [&](caf::error& err) { out.error = ferry::error_text(err); });
  return out;
}

caf::message in_envelope(const std::string& credential, caf::message req) {
  return caf::make_message(ferry::auth_atom_v, credential, std::move(req));
}

/// openssl s_client to 127.0.0.1:port trusting `cafile`, with a client
/// certificate; stdout + stderr.
std::string s_client(test_certs& certs, uint16_t port, const std::string& cafile,
                     const std::string& cert) {
  std::string cmd = "sleep 1 | /usr/bin/openssl s_client -connect 127.0.0.1:"
                    + std::to_string(port) + " -CAfile " + certs.path(cafile) + " -cert "
                    + certs.path(cert + ".pem") + " -key " + certs.path(cert + ".key")
                    + " 2>&1";
  auto r = run_command("/bin/sh", {"-c", cmd}, 20s);
  return r.out + r.err;
}

} // namespace

TEST(PeerPort, RefusesHalfConfiguredPeerPorts) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  ASSERT_TRUE(certs.make_ca("nodeca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("node", "nodeca")) << certs.why();
  auto run = [&](std::vector<std::string> args) {
    temp_dir dir{"ferry-peer-flags"};
    args.insert(args.begin(), {"--data-dir", (dir.path() / "d").string(), "--metrics-port",
                               "-1", "--http-port", "-1"});
    return run_command(ferryd_process::default_program(), args, 30s);
  };
  auto no_ca = run({"--peer-port", "0", "--tls-cert", certs.path("node.pem"), "--tls-key",
                    certs.path("node.key"), "--tls-ca", certs.path("nodeca.pem")});
  EXPECT_EQ(no_ca.exit_code, 2);
  EXPECT_TRUE(contains(no_ca.err, "needs --peer-tls-ca")) << no_ca.err;
  auto ca_alone = run({"--peer-tls-ca", certs.path("nodeca.pem")});
  EXPECT_EQ(ca_alone.exit_code, 2);
  EXPECT_TRUE(contains(ca_alone.err, "--peer-tls-ca needs --peer-port")) << ca_alone.err;
  auto same = run({"--port", "19999", "--peer-port", "19999"});
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_TRUE(contains(same.err, "must differ from --port")) << same.err;
  auto other_entry = run({"--node-id", "1", "--voters", "1@127.0.0.1:19998", "--peer-port",
                          "19997"});
  EXPECT_EQ(other_entry.exit_code, 2);
  EXPECT_TRUE(contains(other_entry.err, "differs from this node's voter entry"))
    << other_entry.err;
  // Sessions in a cluster: the nodes must talk on a port of their own.
  auto auth_cluster = run({"--node-id", "1", "--voters", "1@127.0.0.1:19998", "--auth",
                           "scram"});
  EXPECT_EQ(auth_cluster.exit_code, 2);
  EXPECT_TRUE(contains(auth_cluster.err, "--auth scram in a cluster (--voters) needs --peer-port"))
    << auth_cluster.err;
  auto cert_alone = run({"--peer-port", "0", "--peer-tls-cert", certs.path("node.pem")});
  EXPECT_EQ(cert_alone.exit_code, 2);
  EXPECT_TRUE(contains(cert_alone.err, "need --peer-tls-ca")) << cert_alone.err;
}

TEST(PeerPort, ClientsReachOnlyTheFrontDoorAndOnlyNodesOpenThePeerPort) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  ASSERT_TRUE(certs.make_ca("nodeca")) << certs.why();
  // Two CAs: nodes' certificates from nodeca, clients' from ca.
  ASSERT_TRUE(certs.make_cert("node", "nodeca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("client", "ca")) << certs.why();
  ferryd_process node{{"--tls-cert", certs.path("node.pem"), "--tls-key",
                       certs.path("node.key"), "--tls-ca", certs.path("ca.pem"),
                       "--peer-port", "0", "--peer-tls-ca", certs.path("nodeca.pem"),
                       "--auth", "scram", "--superusers", "admin", "--cluster-secret-file",
                       certs.secret_file()}};
  ASSERT_TRUE(node.start()) << node.output();
  auto peer_port = peer_port_of(node.output());
  ASSERT_NE(peer_port, 0) << node.output();
  ASSERT_NE(peer_port, node.port());
  auto secret = ferry::read_cluster_secret(certs.secret_file());
  ASSERT_TRUE(secret);
  auto cluster_cred = ferry::cluster_credential(*secret);
  ASSERT_TRUE(cluster_cred);
  auto operator_cred = certs.operator_credentials().token;
  ASSERT_FALSE(operator_cred.empty());

  // ferryctl with a client certificate: served on the client port ...
  auto client_args = certs.args("client", "nodeca");
  client_args.insert(client_args.end(), {"--cluster-secret-file", certs.secret_file(),
                                         "--connect-timeout", "3000"});
  auto ctl = [&](uint16_t port, std::vector<std::string> args, const std::string& input = {}) {
    auto full = client_args;
    full.insert(full.end(), args.begin(), args.end());
    return ferryctl("127.0.0.1:" + std::to_string(port), full, input, 60s);
  };
  auto made = ctl(node.port(), {"topic", "create", "orders", "--partitions", "2"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto produced = ctl(node.port(), {"produce", "orders"}, "one\ntwo\n");
  ASSERT_EQ(produced.exit_code, 0) << produced.err;
  auto consumed = ctl(node.port(), {"consume", "orders", "--from-beginning", "--max", "2",
                                    "--timeout", "10000"});
  ASSERT_EQ(consumed.exit_code, 0) << consumed.err;
  EXPECT_TRUE(contains(consumed.out, "one") && contains(consumed.out, "two")) << consumed.out;
  // ... but its certificate does not open the peer port.
  auto refused = ctl(peer_port, {"topic", "list"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(contains(refused.err, "TLS handshake failed")) << refused.err;
  auto seen = s_client(certs, peer_port, "nodeca.pem", "client");
  EXPECT_TRUE(contains(seen, "alert unknown ca")) << seen;
  auto as_node = s_client(certs, peer_port, "nodeca.pem", "node");
  EXPECT_TRUE(contains(as_node, "Verify return code: 0 (ok)")) << as_node;
  EXPECT_FALSE(contains(as_node, "alert")) << as_node;

  using topics = std::vector<ferry::topic_metadata>;
  auto list_topics = caf::make_message(ferry::list_atom_v, ferry::topic_atom_v);
  auto raft_fetch = caf::make_message(ferry::fetch_atom_v, ferry::raft_atom_v, uint64_t{0});
  // The client port, as a client program that talks CAF itself.
  {
    ferry::test::client_system cs{certs.settings("client", "nodeca")};
    auto door = caf::openssl::remote_actor<ferry::broker_actor>(*cs.sys, "127.0.0.1",
                                                                node.port());
    ASSERT_TRUE(door) << ferry::error_text(door.error());
    auto untyped = caf::actor_cast<caf::actor>(*door);
    auto listed = probe<topics>(*cs.sys, untyped, in_envelope(operator_cred, list_topics), 10s);
    ASSERT_TRUE(listed.answered) << listed.error;
    ASSERT_TRUE(listed.answerer);
    // The node actor answered, from the node's own actor system ...
    EXPECT_NE(listed.answerer->node(), door->node());
    // ... and its handle leads nowhere from here.
    auto direct = probe<topics>(*cs.sys, caf::actor_cast<caf::actor>(listed.answerer),
                        in_envelope(operator_cred, list_topics), 3s);
    EXPECT_FALSE(direct.answered) << "a client reached the node actor past the front door";
    // Node-to-node requests and the nodes' credential are refused.
    auto raft = probe<ferry::raft_log_chunk>(*cs.sys, untyped, in_envelope(operator_cred, raft_fetch), 10s);
    EXPECT_FALSE(raft.answered);
    EXPECT_TRUE(contains(raft.error, "not served on the client port")) << raft.error;
    auto link_probe = probe<int32_t>(*cs.sys, untyped,
                            caf::make_message(ferry::connect_atom_v, int32_t{7}), 10s);
    EXPECT_FALSE(link_probe.answered);
    EXPECT_TRUE(contains(link_probe.error, "not served on the client port"))
      << link_probe.error;
    auto as_cluster = probe<topics>(*cs.sys, untyped, in_envelope(*cluster_cred, list_topics), 10s);
    EXPECT_FALSE(as_cluster.answered);
    EXPECT_TRUE(contains(as_cluster.error, "cluster credential is not accepted"))
      << as_cluster.error;
    // A plain request still needs a login (the node's own check).
    auto bare = probe<topics>(*cs.sys, untyped, list_topics, 10s);
    EXPECT_FALSE(bare.answered);
    EXPECT_TRUE(contains(bare.error, "authentication_failed")) << bare.error;
    // System messages are just messages here: an exit with reason kill and a
    // forged down message naming the node neither end the front door nor
    // reach the node.
    caf::anon_send_exit(untyped, caf::exit_reason::kill);
    caf::anon_send(untyped, caf::down_msg{caf::actor_cast<caf::actor_addr>(listed.answerer),
                                          caf::exit_reason::kill});
    std::this_thread::sleep_for(500ms);
    auto after = probe<topics>(*cs.sys, untyped, in_envelope(operator_cred, list_topics), 10s);
    EXPECT_TRUE(after.answered) << "the front door ended: " << after.error;
  }
  // The peer port with a node certificate: the same probes are answered.
  {
    ferry::test::client_system ns{certs.settings("node", "nodeca")};
    auto peer = caf::openssl::remote_actor<ferry::broker_actor>(*ns.sys, "127.0.0.1",
                                                                peer_port);
    ASSERT_TRUE(peer) << ferry::error_text(peer.error());
    auto untyped = caf::actor_cast<caf::actor>(*peer);
    auto listed = probe<topics>(*ns.sys, untyped, in_envelope(*cluster_cred, list_topics), 10s);
    ASSERT_TRUE(listed.answered) << listed.error;
    ASSERT_TRUE(listed.answerer);
    EXPECT_EQ(listed.answerer->node(), peer->node());
    auto direct = probe<topics>(*ns.sys, caf::actor_cast<caf::actor>(listed.answerer),
                        in_envelope(*cluster_cred, list_topics), 10s);
    EXPECT_TRUE(direct.answered) << direct.error;
    auto raft = probe<ferry::raft_log_chunk>(*ns.sys, untyped, in_envelope(*cluster_cred, raft_fetch), 10s);
    EXPECT_TRUE(raft.answered) << raft.error;
  }
  // After all of that the node serves its clients.
  ASSERT_TRUE(node.running()) << node.output();
  auto again = ctl(node.port(), {"topic", "list"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "orders")) << again.out;
  EXPECT_TRUE(contains(node.output(), "front door: refused")) << node.output();
}

// A single node without TLS or users (the README's default) serves its
// clients through the front door too: before, a client could end the node
// actor with a CAF exit message (reason kill ends any actor it reaches,
// whatever its exit handler says), and ferryd with it.
TEST(PeerPort, ASingleNodeWithoutSecurityServesClientsOnlyThroughItsFrontDoor) {
  ferryd_process node{{}};
  ASSERT_TRUE(node.start()) << node.output();
  auto made = ferryctl(node.endpoint(), {"topic", "create", "orders"}, {}, 30s);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  using topics = std::vector<ferry::topic_metadata>;
  auto list_topics = caf::make_message(ferry::list_atom_v, ferry::topic_atom_v);
  {
    ferry::test::client_system cs;
    auto door = caf::io::remote_actor<ferry::broker_actor>(*cs.sys, "127.0.0.1", node.port());
    ASSERT_TRUE(door) << ferry::error_text(door.error());
    auto untyped = caf::actor_cast<caf::actor>(*door);
    auto listed = probe<topics>(*cs.sys, untyped, list_topics, 10s);
    ASSERT_TRUE(listed.answered) << listed.error;
    ASSERT_TRUE(listed.answerer);
    EXPECT_NE(listed.answerer->node(), door->node());
    auto raft_fetch = caf::make_message(ferry::fetch_atom_v, ferry::raft_atom_v, uint64_t{0});
    auto raft = probe<ferry::raft_log_chunk>(*cs.sys, untyped, raft_fetch, 10s);
    EXPECT_FALSE(raft.answered);
    EXPECT_TRUE(contains(raft.error, "not served on the client port")) << raft.error;
    // Kill messages to the node actor's handle and to the front door.
    caf::anon_send_exit(caf::actor_cast<caf::actor>(listed.answerer), caf::exit_reason::kill);
    caf::anon_send_exit(untyped, caf::exit_reason::kill);
    std::this_thread::sleep_for(500ms);
    auto after = probe<topics>(*cs.sys, untyped, list_topics, 10s);
    EXPECT_TRUE(after.answered) << "the front door or the node ended: " << after.error;
  }
  ASSERT_TRUE(node.running()) << node.output();
  auto again = ferryctl(node.endpoint(), {"topic", "list"}, {}, 30s);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "orders")) << again.out;
}

TEST(PeerPort, ThreeNodesWithPeerPortsTlsAndUsersReplicateAndFailOver) {
  test_certs certs;
  ASSERT_TRUE(certs.ok()) << certs.why();
  ASSERT_TRUE(certs.make_ca("nodeca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("node", "nodeca")) << certs.why();
  ASSERT_TRUE(certs.make_cert("client", "ca")) << certs.why();
  ferry::test::cluster c{certs.settings("client", "nodeca"), certs.operator_credentials()};
  c.use_peer_ports();
  c.add_node_args({"--tls-cert", certs.path("node.pem"), "--tls-key", certs.path("node.key"),
                   "--tls-ca", certs.path("ca.pem"), "--peer-tls-ca", certs.path("nodeca.pem"),
                   "--auth", "scram", "--superusers", "admin", "--cluster-secret-file",
                   certs.secret_file()});
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "secure";
  auto why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  // Clients see the client ports (the voters' entries name peer ports).
  // A voter shows no port until its registration is applied.
  std::string shown;
  EXPECT_TRUE(ferry::test::wait_until(20s, [&] {
    auto cd = c.describe(1);
    if (!cd)
      return false;
    shown = ferry::test::render(*cd);
    if (cd->nodes.size() != 3u)
      return false;
    for (auto& n : cd->nodes)
      if (n.port != c.port(n.id))
        return false;
    return true;
  })) << shown;
  auto prod = ferry::test::make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto send = [&](const std::string& value) {
    return ferry::test::produce_one(*c.cs.sys, *prod, topic, value);
  };
  auto first = send("before");
  ASSERT_TRUE(first) << ferry::error_text(first.error()) << "\n" << c.dump();
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
  // The restarted node catches up over its peer port and serves both
  // records to ferryctl on its client port.
  auto args = certs.args("client", "nodeca");
  args.insert(args.end(), {"--cluster-secret-file", certs.secret_file(), "consume", topic,
                           "--from-beginning", "--max", "2", "--timeout", "5000"});
  std::string out;
  EXPECT_TRUE(ferry::test::wait_until(40s, [&] {
    auto r = ferryctl(c.endpoint(leader), args, "", 60s);
    out = r.out + r.err;
    return r.exit_code == 0 && contains(r.out, "before") && contains(r.out, "after");
  })) << out << "\n" << c.dump();
  // No node ever dialled another's client port: every link is a peer link.
  for (int id = 1; id <= 3; ++id)
    EXPECT_FALSE(contains(c.node(id).output(), "front door: refused"))
      << "node " << id << "\n" << c.node(id).output();
}

// A broker-only node with a peer port of its own (picked free: --peer-port
// 0) registers it with the quorum; the voters dial it there (its replica
// joins the ISR) and clients see its client port.
TEST(PeerPort, ABrokerOnlyNodeRegistersItsPeerPortAndReplicates) {
  ferry::test::cluster c;
  c.use_peer_ports();
  ASSERT_CLUSTER_STARTED(c);
  auto why = c.add_broker();
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  auto peer4 = peer_port_of(c.node(4).output());
  ASSERT_NE(peer4, 0) << c.node(4).output();
  ASSERT_NE(peer4, c.port(4));
  std::string shown;
  ASSERT_TRUE(ferry::test::wait_until(20s, [&] {
    for (int id : {1, 4}) {
      auto cd = c.describe(id);
      if (!cd)
        return false;
      shown = ferry::test::render(*cd);
      bool found = false;
      for (auto& n : cd->nodes)
        if (n.id == 4)
          found = !n.voter && n.alive && n.port == c.port(4);
      if (!found)
        return false;
    }
    return true;
  })) << "node 4 is not shown alive at its client port\n" << shown << "\n" << c.dump();
  const std::string topic = "onto4";
  why = c.create_topic(topic, 1);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, 1)) << c.dump();
  {
    auto pa = c.reassign(4, topic, 0, {2, 3, 4});
    ASSERT_TRUE(pa) << ferry::error_text(pa.error()) << "\n" << c.dump();
  }
  ASSERT_TRUE(ferry::test::wait_until(30s, [&] {
    auto cd = c.describe(2);
    auto ps = cd ? ferry::test::find_partition(*cd, topic, 0) : nullptr;
    return ps && ferry::test::same_members(ps->replicas, {2, 3, 4})
           && ferry::test::same_members(ps->isr, {2, 3, 4}) && ps->online;
  })) << "the move onto node 4 did not complete\n" << c.dump();
  auto prod = ferry::test::make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto sent = ferry::test::produce_one(*c.cs.sys, *prod, topic, "on four");
  ASSERT_TRUE(sent) << ferry::error_text(sent.error()) << "\n" << c.dump();
  // acks=all over the ISR {2,3,4}: node 4 has it.
  ASSERT_TRUE(ferry::test::wait_until(20s, [&] {
    auto st = c.status(4, topic, 0);
    return st && st->high_watermark.value >= 1;
  })) << c.dump();
}
