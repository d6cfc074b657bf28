#pragma once
// A three-node (or five-node) ferryd cluster for multi-process tests (used by
// cluster_failover_test.cpp; written so cluster_test.cpp can switch to it).
//
// cluster::start() picks three free loopback ports, launches
//   ferryd --node-id N --voters 1@127.0.0.1:P1,2@...,3@... --metrics-port 0
//          --http-port -1 (unless add_node_args() names one)
//          [--log-level $FERRY_TEST_LOG_LEVEL]
//          [--log-file $FERRY_TEST_LOG_DIR/node<N>.log]
// per node (own temp data dir, process.hpp), waits for every "listening on"
// line (retrying with fresh ports when one was taken meanwhile), and opens one
// client connection per node for describes and status requests.
// add_broker() starts one more node, a broker-only one (id 4, 5, ...: not in
// --voters; it follows the voters' metadata log and hosts replicas); most
// helpers below cover the voters 1..3 only, stop_all() and dump() every node.
// kill() is SIGKILL, restart() starts a node again on its data dir and port,
// freeze()/thaw() are SIGSTOP/SIGCONT (a frozen node neither sends nor
// answers: a network partition of that node; describes skip it),
// stop_all() is one SIGTERM each (after a SIGCONT) with a bounded wait.
// Every child is SIGKILLed by its destructor, also after a failed assertion.
//
// Behind a link proxy (cluster{cluster::behind_proxy}, link_proxy.hpp): the
// nodes reach each other only through an in-process TCP forwarder, one port
// per directed pair: node i's --voters names the proxy port P(i,j) for every
// other node j and its own real port for itself (ferryd takes its own port
// from its entry; nothing compares voter lists across nodes: Raft and the
// metadata use the ids only, describe shows a peer's registered endpoint).
// net() switches directed links between pass, blackhole and reset at run
// time (isolate(), cut(), heal() are shortcuts); clients (this harness's
// links, producers, ferryctl) still dial the real ports, so a test can talk
// to a node the others cannot reach. direct_peer_connections() lists any
// connection a node process holds to another node's real port (none when
// CAF keeps to the proxy). The proxy thread is stopped after the nodes are
// killed, also on failure.
// The client actors of `cs` are killed before its actor system goes away.
//
// Helpers: ask() (one bounded request from a scoped actor), wait_until(),
// find_partition()/render() for cluster describes, fetch_all() (read a
// partition through a node and decode it), compare_logs_on_disk() (the
// replicas of a stopped cluster, byte for byte up to the HW),
// client_connection()/make_producer() (an idempotent acks=all producer).

#include "client_system.hpp"
#include "link_proxy.hpp"
#include "process.hpp"

#include "actors/client/client_connection.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "broker/error.hpp"
#include "broker/partition_checkpoint.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::test {

using steady_clock = std::chrono::steady_clock;

/// Polls `done` every `step` until it returns true or `timeout` passed.
template <class F>
bool wait_until(std::chrono::milliseconds timeout, F&& done,
                std::chrono::milliseconds step = std::chrono::milliseconds{100}) {
  auto deadline = steady_clock::now() + timeout;
  for (;;) {
    if (done())
      return true;
    if (steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(step);
  }
}

inline double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

inline std::string join_ids(const std::vector<int32_t>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? "," : "") + std::to_string(xs[i]);
  return out + "]";
}

inline bool same_members(std::vector<int32_t> a, std::vector<int32_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

/// `rf` replicas, every one of them in the ISR.
inline bool full_isr(const ferry::partition_status& ps, size_t rf = 3) {
  return ps.replicas.size() == rf && same_members(ps.isr, ps.replicas);
}

/// One request from a blocking scoped actor; request_timeout if no answer.
template <class T, class Handle, class... Ts>
caf::expected<T> ask(caf::actor_system& sys, const Handle& dest, caf::timespan timeout,
                     Ts&&... xs) {
  if (!dest)
    return caf::make_error(caf::sec::invalid_argument, "no handle");
  caf::scoped_actor self{sys};
  std::optional<caf::expected<T>> out;
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& err) { out = std::move(err); });
  if (!out)
    return caf::make_error(caf::sec::request_timeout);
  return std::move(*out);
}

inline const ferry::topic_description* find_topic(const ferry::cluster_description& cd,
                                                  const std::string& topic) {
  for (auto& t : cd.topics)
    if (t.name == topic)
      return &t;
  return nullptr;
}

inline const ferry::partition_status*
find_partition(const ferry::cluster_description& cd, const std::string& topic, int32_t p) {
  if (auto t = find_topic(cd, topic))
    for (auto& ps : t->partitions)
      if (ps.partition.value == p)
        return &ps;
  return nullptr;
}

/// One line per node and per partition (topics starting with "__" only when
/// `internal`).
inline std::string render(const ferry::cluster_description& cd, bool internal = false) {
  std::ostringstream os;
  os << "controller=" << cd.controller << " term=" << cd.raft_term << " nodes=";
  for (auto& n : cd.nodes)
    os << n.id << (n.alive ? "(alive" : "(dead") << (n.controller ? ",ctl) " : ") ");
  os << "\n";
  for (auto& t : cd.topics) {
    if (!internal && t.name.rfind("__", 0) == 0)
      continue;
    for (auto& ps : t.partitions)
      os << "    " << t.name << "-" << ps.partition.value << ": leader=" << ps.leader
         << " epoch=" << ps.epoch.value << " replicas=" << join_ids(ps.replicas)
         << " isr=" << join_ids(ps.isr) << " log_end=" << ps.log_end.value
         << " hw=" << ps.high_watermark.value << (ps.online ? " online" : " OFFLINE") << "\n";
  }
  return os.str();
}

inline std::string tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

/// One record read back from a log.
struct log_record {
  int64_t off = 0;
  std::string key;
  std::string value;
  int32_t batch_epoch = 0; // partition leader epoch of its batch
  std::vector<ferry::record_header> headers;
  // Who wrote its batch: the idempotent producer's id and the record's
  // sequence (-1 without one), so a duplicate's report tells a resend
  // under a new producer id from a renumbered one.
  int64_t producer_id = -1;
  int32_t sequence = -1;

  /// The value of header `key`, "" without one.
  std::string header(std::string_view key) const {
    for (auto& h : headers)
      if (h.key == key)
        return h.value.value_or("");
    return "";
  }
};

/// Appends the records at or after `from` of the whole batches in `data`;
/// returns the offset after the last batch, or nullopt (and `why`) on damage.
inline std::optional<int64_t> decode_batches(std::string_view data, int64_t from,
                                             std::vector<log_record>& out, std::string& why) {
  int64_t next = from;
  while (!data.empty()) {
    auto h = ferry::parse_batch_header(data);
    if (!h) {
      why = "parse_batch_header: " + ferry::describe(h.error());
      return std::nullopt;
    }
    auto b = ferry::decode_batch(data.substr(0, h->total_size()));
    if (!b) {
      why = "decode_batch: " + ferry::describe(b.error());
      return std::nullopt;
    }
    for (auto& rec : b->records) {
      auto off = h->base_offset.value + rec.offset_delta;
      if (off >= from)
        out.push_back(log_record{off, rec.key.value_or(""), rec.value.value_or(""),
                                 h->partition_leader_epoch, std::move(rec.headers),
                                 h->producer_id,
                                 h->base_sequence < 0 ? -1
                                                      : h->base_sequence + rec.offset_delta});
    }
    next = h->next_offset().value;
    data.remove_prefix(h->total_size());
  }
  return next;
}

/// Three (or `voters`) ferryd nodes (ids 1..N, all Raft voters) on fixed ports.
class cluster {
public:
  struct behind_proxy_t {};
  static constexpr behind_proxy_t behind_proxy{};

  cluster() = default;
  /// `voters` nodes (3 or 5), all Raft voters, linked directly.
  explicit cluster(int voters) : voters_(voters) {
  }
  /// Nodes talk to each other through a link_proxy (see the file comment);
  /// `voters` nodes (3 or 5) form the metadata quorum.
  explicit cluster(behind_proxy_t, int voters = 3) : proxied_(true), voters_(voters) {
  }
  /// The harness's own clients (readiness checks, links, producers) use
  /// TLS with these files; the nodes need matching --tls-* args.
  explicit cluster(const ferry::tls_settings& client_tls) : cs(client_tls) {
  }
  /// The same, logging in with `creds` (nodes with --auth scram).
  cluster(const ferry::tls_settings& client_tls, const ferry::client_credentials& creds)
    : cs(client_tls, creds) {
  }
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  /// Every node gets a peer port of its own (ferryd --peer-port; call
  /// before start(), not behind a proxy): --voters names the peer ports,
  /// port()/endpoint() stay the client ports, peer_port() names the other.
  void use_peer_ports() { peer_ports_on_ = true; }
  uint16_t peer_port(int id) const { return peer_ports_.at(static_cast<size_t>(id - 1)); }
  std::string peer_endpoint(int id) const {
    return "127.0.0.1:" + std::to_string(peer_port(id));
  }

  /// More ferryd options for every node start() launches (call before it).
  void add_node_args(std::vector<std::string> args) {
    node_args_.insert(node_args_.end(), args.begin(), args.end());
  }

  /// Called by start() for each voter after its data dir is chosen and
  /// before its process is launched (e.g. to mount a small file system
  /// there: tests/chaos); "" or why not, which fails start().
  void before_launch(std::function<std::string(int, const std::filesystem::path&)> f) {
    before_launch_ = std::move(f);
  }

  /// "" on success, else why not.
  std::string start() {
    using namespace std::chrono_literals;
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      ports_ = free_tcp_ports(peer_ports_on_ ? 2 * voters_ : voters_);
      if (ports_.size() != static_cast<size_t>(peer_ports_on_ ? 2 * voters_ : voters_))
        return "cannot pick free ports";
      peer_ports_.clear();
      if (peer_ports_on_) {
        peer_ports_.assign(ports_.begin() + voters_, ports_.end());
        ports_.resize(static_cast<size_t>(voters_));
      }
      nodes_.clear();
      if (proxied_) {
        net_.reset(); // a retry: the old proxy's listeners go first
        net_ = std::make_unique<link_proxy>();
        for (int i = 1; i <= voters_; ++i)
          for (int j = 1; j <= voters_; ++j)
            if (i != j && net_->add(i, j, port(j), &why) == 0)
              return "link proxy: " + why;
        if (!net_->start(&why))
          return "link proxy: " + why;
      }
      for (int id = 1; id <= voters_; ++id) {
        std::string voters;
        for (int other = 1; other <= voters_; ++other) {
          auto ep = proxied_ && other != id
                      ? "127.0.0.1:" + std::to_string(net_->port(id, other))
                    : peer_ports_on_ ? peer_endpoint(other)
                                     : endpoint(other);
          voters += (other > 1 ? "," : "") + std::to_string(other) + "@" + ep;
        }
        std::vector<std::string> args{"--node-id", std::to_string(id), "--voters", voters,
                                      "--metrics-port", "0"};
        if (peer_ports_on_)
          args.insert(args.end(), {"--peer-port", std::to_string(peer_port(id))});
        // No HTTP API unless the node arguments ask for one.
        if (std::find(node_args_.begin(), node_args_.end(), "--http-port") == node_args_.end())
          args.insert(args.end(), {"--http-port", "-1"});
        args.insert(args.end(), node_args_.begin(), node_args_.end());
        if (auto lvl = std::getenv("FERRY_TEST_LOG_LEVEL"); lvl && *lvl) {
          args.push_back("--log-level");
          args.push_back(lvl);
        }
        if (auto dir = std::getenv("FERRY_TEST_LOG_DIR"); dir && *dir) {
          args.push_back("--log-file");
          args.push_back(std::string{dir} + "/node" + std::to_string(id) + ".log");
        }
        nodes_.push_back(std::make_unique<ferryd_process>(std::move(args)));
      }
      if (before_launch_)
        for (int id = 1; id <= voters_; ++id)
          if (auto w = before_launch_(id, node(id).data_dir()); !w.empty())
            return "node " + std::to_string(id) + ": " + w;
      for (int id = 1; id <= voters_; ++id)
        if (!node(id).launch(port(id)))
          return "cannot launch ferryd for node " + std::to_string(id);
      why.clear();
      bool port_taken = false;
      for (int id = 1; id <= voters_; ++id)
        if (!node(id).wait_started(30s)) {
          auto out = node(id).output();
          why += "node " + std::to_string(id) + " did not start:\n" + tail(out, 3000) + "\n";
          // CAF 0.17 says "tcp socket creation failed" when the bind
          // fails because another process took the port meanwhile.
          port_taken = port_taken || out.find("in use") != std::string::npos
                       || out.find("cannot listen on") != std::string::npos;
        }
      if (why.empty() || !port_taken)
        break;
      std::cout << "[cluster] a port was taken, retrying with fresh ports\n";
    }
    if (!why.empty())
      return why;
    for (int id = 1; id <= voters_; ++id) {
      ferry::connection_config cc;
      cc.host = "127.0.0.1";
      cc.port = port(id);
      cc.connect_wait = 1s;
      cc.backoff_min = 50ms;
      cc.backoff_max = 300ms;
      links_.push_back(cs.track(ferry::spawn_connection(*cs.sys, cc)));
    }
    std::string ports, pids;
    for (int id = 1; id <= voters_; ++id) {
      ports += (id > 1 ? ", " : "") + std::to_string(port(id));
      pids += (id > 1 ? ", " : "") + std::to_string(node(id).pid());
    }
    std::cout << "[cluster] nodes on ports " << ports << " (pids " << pids << ")"
              << (proxied_ ? ", linked through a proxy" : "") << "\n";
    return "";
  }

  /// Starts broker-only node `count() + 1` (on a free port, with the voters'
  /// --voters list) and links to it. "" or why not.
  std::string add_broker() {
    using namespace std::chrono_literals;
    int id = count() + 1;
    std::string voters;
    for (int v = 1; v <= voters_; ++v)
      voters += (v > 1 ? "," : "") + std::to_string(v) + "@"
                + (peer_ports_on_ ? peer_endpoint(v) : endpoint(v));
    std::vector<std::string> args{"--node-id",      std::to_string(id), "--voters", voters,
                                  "--metrics-port", "0", "--http-port", "-1"};
    if (peer_ports_on_) // a free one, registered with the quorum
      args.insert(args.end(), {"--peer-port", "0"});
    if (auto lvl = std::getenv("FERRY_TEST_LOG_LEVEL"); lvl && *lvl) {
      args.push_back("--log-level");
      args.push_back(lvl);
    }
    if (auto dir = std::getenv("FERRY_TEST_LOG_DIR"); dir && *dir) {
      args.push_back("--log-file");
      args.push_back(std::string{dir} + "/node" + std::to_string(id) + ".log");
    }
    std::string why;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      auto ports = free_tcp_ports(1);
      if (ports.size() != 1)
        return "cannot pick a free port";
      auto proc = std::make_unique<ferryd_process>(args);
      if (proc->start(ports[0], 30s)) {
        nodes_.push_back(std::move(proc));
        ports_.push_back(ports[0]);
        ferry::connection_config cc;
        cc.host = "127.0.0.1";
        cc.port = ports[0];
        cc.connect_wait = 1s;
        cc.backoff_min = 50ms;
        cc.backoff_max = 300ms;
        links_.push_back(cs.track(ferry::spawn_connection(*cs.sys, cc)));
        std::cout << "[cluster] broker-only node " << id << " on port " << ports[0]
                  << " (pid " << node(id).pid() << ")\n";
        return "";
      }
      why = tail(proc->output(), 3000);
      if (why.find("in use") == std::string::npos
          && why.find("cannot listen on") == std::string::npos)
        break;
    }
    return "broker-only node " + std::to_string(id) + " did not start:\n" + why;
  }

  /// Nodes started so far (voters and broker-only ones).
  int count() const { return static_cast<int>(nodes_.size()); }
  /// The voters' count: nodes 1..voters() are Raft voters, later ones broker-only.
  int voters() const { return voters_; }
  /// 1..voters().
  std::vector<int> voter_ids() const {
    std::vector<int> out;
    for (int id = 1; id <= voters_; ++id)
      out.push_back(id);
    return out;
  }

  ferryd_process& node(int id) { return *nodes_.at(static_cast<size_t>(id - 1)); }
  uint16_t port(int id) const { return ports_.at(static_cast<size_t>(id - 1)); }
  std::string endpoint(int id) const { return "127.0.0.1:" + std::to_string(port(id)); }
  /// "h:p,h:p" of the given nodes (every voter by default).
  std::string endpoints(std::vector<int> ids = {}) const {
    if (ids.empty())
      ids = voter_ids();
    std::string out;
    for (auto id : ids)
      out += (out.empty() ? "" : ",") + endpoint(id);
    return out;
  }
  bool running(int id) { return node(id).running(); }
  /// Running and not frozen: it can answer.
  bool up(int id) { return running(id) && frozen_.count(id) == 0; }

  void kill(int id) { node(id).kill9(); }

  /// SIGSTOP / SIGCONT.
  void freeze(int id) {
    if (auto* ch = node(id).child()) {
      ch->signal(SIGSTOP);
      frozen_.insert(id);
    }
  }
  void thaw(int id) {
    if (auto* ch = node(id).child())
      ch->signal(SIGCONT);
    frozen_.erase(id);
  }

  /// The link proxy between the nodes (only with behind_proxy).
  link_proxy& net() {
    if (!net_)
      throw std::logic_error("cluster: not started behind a link proxy");
    return *net_;
  }

  /// Cuts node `id` off from every other node, both ways.
  void isolate(int id, link_mode m = link_mode::blackhole) {
    net().isolate(id, voter_ids(), m);
  }

  /// Both directions between a and b.
  void cut(int a, int b, link_mode m = link_mode::blackhole) {
    net().cut(a, b, m);
  }

  /// Every link passes again.
  void heal() {
    net().heal();
  }

  /// Established TCP connections from one node process to another node's
  /// real port (what a proxied cluster must not have: CAF bypassing the
  /// proxy), one line each; "" if none. From /proc/<pid>/fd (socket inodes)
  /// and /proc/net/tcp{,6}.
  std::string direct_peer_connections() {
    std::string out;
    std::map<unsigned long, int> owner; // socket inode -> node id
    for (int id = 1; id <= voters_; ++id) {
      if (!running(id))
        continue;
      auto dir = "/proc/" + std::to_string(node(id).pid()) + "/fd";
      std::error_code ec;
      for (auto& e : std::filesystem::directory_iterator{dir, ec}) {
        auto target = std::filesystem::read_symlink(e.path(), ec).string();
        if (!ec && target.rfind("socket:[", 0) == 0)
          owner[std::stoul(target.substr(8, target.size() - 9))] = id;
      }
    }
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream in{table};
      std::string line;
      std::getline(in, line); // header
      while (std::getline(in, line)) {
        std::istringstream ls{line};
        std::string sl, local, remote, st, queues, timer, retr, uid, timeout;
        unsigned long inode = 0;
        ls >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
        if (st != "01")
          continue; // not ESTABLISHED
        auto o = owner.find(inode);
        if (o == owner.end())
          continue;
        auto rport = static_cast<uint16_t>(
          std::stoul(remote.substr(remote.find(':') + 1), nullptr, 16));
        for (int id = 1; id <= voters_; ++id)
          if (id != o->second && rport == port(id))
            out += "node " + std::to_string(o->second) + " has a direct connection to node "
                   + std::to_string(id) + "'s port " + std::to_string(rport) + "\n";
      }
    }
    return out;
  }

  /// Starts node `id` again on its data dir and port. "" or why not.
  std::string restart(int id) {
    using namespace std::chrono_literals;
    frozen_.erase(id);
    if (node(id).start(port(id), 30s))
      return "";
    return "node " + std::to_string(id) + " did not restart:\n" + tail(node(id).output(), 3000);
  }

  /// SIGCONT + one SIGTERM each, then waits (SIGKILL after `timeout`); the
  /// exit status per node (0 clean, 137 killed, -1 not running).
  std::map<int, int> stop_all(std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
    for (int id = 1; id <= count(); ++id)
      if (node(id).running()) {
        thaw(id);
        node(id).child()->signal(SIGTERM);
      }
    std::map<int, int> codes;
    auto deadline = steady_clock::now() + timeout;
    for (int id = 1; id <= count(); ++id) {
      auto* child = node(id).child();
      if (!child) {
        codes[id] = -1;
        continue;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline
                                                                        - steady_clock::now());
      auto status = child->wait_exit(std::max(left, std::chrono::milliseconds{0}));
      codes[id] = status ? *status : child->kill_and_reap();
    }
    return codes;
  }

  /// Node `id`'s broker actor through its link (fails while it is down).
  caf::expected<ferry::broker_actor> broker(int id) {
    using namespace std::chrono_literals;
    if (!up(id))
      return caf::make_error(caf::sec::invalid_argument, "node not up");
    return ask<ferry::broker_actor>(*cs.sys, links_.at(static_cast<size_t>(id - 1)), 2s,
                                    ferry::connect_atom_v);
  }

  /// Asks node `via` to move `topic`/`p` onto `replicas`, as `ferryctl
  /// partition reassign` does: the new assignment once the quorum took it.
  /// The move itself completes later (wait for it in describe()).
  caf::expected<ferry::partition_assignment> reassign(int via, const std::string& topic,
                                                      int32_t p, std::vector<int32_t> replicas) {
    using namespace std::chrono_literals;
    auto b = broker(via);
    if (!b)
      return b.error();
    ferry::isr_change mv;
    mv.topic = topic;
    mv.partition = ferry::partition_id{p};
    mv.isr = std::move(replicas);
    return ask<ferry::partition_assignment>(*cs.sys, *b, 10s, ferry::assign_atom_v, mv);
  }

  caf::expected<ferry::cluster_description> describe(int id) {
    using namespace std::chrono_literals;
    auto b = broker(id);
    if (!b)
      return b.error();
    return ask<ferry::cluster_description>(*cs.sys, *b, 3s, ferry::cluster_atom_v);
  }

  /// The describe of the first node up that answers (its id in `from`).
  std::optional<ferry::cluster_description> describe_any(int* from = nullptr) {
    for (int id = 1; id <= voters_; ++id)
      if (up(id))
        if (auto cd = describe(id)) {
          if (from)
            *from = id;
          return std::move(*cd);
        }
    return std::nullopt;
  }

  /// The controller's describe when it is up and answers, else any node's.
  std::optional<ferry::cluster_description> describe_controller() {
    int from = -1;
    auto cd = describe_any(&from);
    if (!cd)
      return std::nullopt;
    auto ctl = cd->controller;
    if (ctl >= 1 && ctl <= voters_ && ctl != from && up(ctl))
      if (auto cc = describe(ctl))
        return std::move(*cc);
    return cd;
  }

  /// Node `id`'s own replica of topic-p.
  caf::expected<ferry::partition_status> status(int id, const std::string& topic, int32_t p) {
    using namespace std::chrono_literals;
    auto b = broker(id);
    if (!b)
      return b.error();
    return ask<ferry::partition_status>(*cs.sys, *b, 3s, ferry::status_atom_v,
                                        ferry::topic_partition{topic, ferry::partition_id{p}});
  }

  /// Creates a topic with RF 3 through any node, retrying retriable errors.
  /// `base` gives every other setting (e.g. cleanup.policy).
  std::string create_topic(const std::string& name, int32_t partitions,
                           int32_t min_insync = 2,
                           std::chrono::milliseconds timeout = std::chrono::seconds{20},
                           ferry::topic_config base = {}) {
    using namespace std::chrono_literals;
    ferry::topic_config tc = base;
    tc.partitions = partitions;
    tc.replication_factor = 3;
    tc.min_insync_replicas = min_insync;
    std::string last;
    auto deadline = steady_clock::now() + timeout;
    int attempts = 0;
    while (steady_clock::now() < deadline) {
      for (int id = 1; id <= voters_ && steady_clock::now() < deadline; ++id) {
        auto b = broker(id);
        if (!b)
          continue;
        ++attempts;
        auto md = ask<ferry::topic_metadata>(*cs.sys, *b, 10s, ferry::create_atom_v,
                                             ferry::topic_atom_v, name, tc);
        if (md || (ferry::is(md.error(), ferry::ec::topic_exists) && attempts > 1))
          return "";
        last = "node " + std::to_string(id) + ": " + ferry::error_text(md.error());
        if (!ferry::is_retriable(md.error())
            && !ferry::is(md.error(), ferry::ec::coordinator_not_available))
          return "create " + name + " failed: " + last;
      }
      std::this_thread::sleep_for(200ms);
    }
    return "create " + name + " did not succeed in time; last error " + last;
  }

  /// Every node's describe (or error) and the tail of its output.
  std::string dump(size_t output_tail = 2000) {
    std::ostringstream os;
    os << "---- cluster state ----\n";
    for (int id = 1; id <= count(); ++id) {
      os << "node " << id << " (port " << port(id) << ", pid " << node(id).pid()
         << (running(id) ? (up(id) ? ", running" : ", FROZEN") : ", NOT running") << "): ";
      auto cd = describe(id);
      if (cd)
        os << render(*cd);
      else
        os << "describe failed: " << ferry::error_text(cd.error()) << "\n";
    }
    if (net_)
      os << "---- link proxy ----\n" << net_->describe();
    for (int id = 1; id <= count(); ++id)
      os << "---- node " << id << " output (tail) ----\n"
         << tail(node(id).output(), output_tail) << "\n";
    return os.str();
  }

  /// Every node up shows a controller and `voters()` nodes, all alive.
  bool wait_ready(std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
    return wait_until(timeout, [&] {
      for (int id = 1; id <= voters_; ++id) {
        auto cd = describe(id);
        if (!cd || cd->controller < 1 || cd->nodes.size() != static_cast<size_t>(voters_))
          return false;
        for (auto& n : cd->nodes)
          if (!n.alive)
            return false;
      }
      return true;
    });
  }

  /// Every node up lists every node with its metrics port, which comes from
  /// a node's registration with the controller (the harness runs ferryd with
  /// metrics on a random port): every node has registered.
  bool wait_registered(std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
    return wait_until(timeout, [&] {
      for (int id = 1; id <= voters_; ++id) {
        if (!up(id))
          continue;
        auto cd = describe(id);
        if (!cd || cd->nodes.size() != static_cast<size_t>(voters_))
          return false;
        for (auto& n : cd->nodes)
          if (n.metrics_port == 0)
            return false;
      }
      return true;
    });
  }

  /// The controller's describe shows every partition of `topic` online with
  /// a leader and exactly `isr` in its ISR (by default: every one of its
  /// replicas, and as many as the replication factor `rf`).
  bool wait_placed(const std::string& topic, int32_t partitions,
                   std::chrono::milliseconds timeout = std::chrono::seconds{20},
                   std::vector<int32_t> isr = {}, size_t rf = 3) {
    return wait_until(timeout, [&] {
      auto cd = describe_controller();
      if (!cd)
        return false;
      auto t = find_topic(*cd, topic);
      if (!t || (partitions > 0 && t->partitions.size() != static_cast<size_t>(partitions))
          || t->partitions.empty())
        return false;
      for (auto& ps : t->partitions)
        if (ps.leader < 1 || !ps.online
            || (isr.empty() ? !full_isr(ps, rf) : !same_members(ps.isr, isr)))
          return false;
      return true;
    });
  }

  /// The value of the metric sample `series` (name and labels exactly as
  /// exposed, e.g. `ferry_forwarded_requests_total{kind="produce"}`) on
  /// node `id`, read from its /metrics (port from its describe); 0 when the
  /// node does not expose that series (yet); nullopt when the scrape failed.
  std::optional<double> metric(int id, const std::string& series) {
    auto cd = describe(id);
    if (!cd)
      return std::nullopt;
    uint16_t port = 0;
    for (auto& n : cd->nodes)
      if (n.id == id)
        port = n.metrics_port;
    if (port == 0)
      return std::nullopt;
    auto r = http_get(port, "/metrics");
    if (r.status != 200)
      return std::nullopt;
    std::istringstream in{r.body};
    for (std::string line; std::getline(in, line);)
      if (line.size() > series.size() + 1 && line.compare(0, series.size(), series) == 0
          && line[series.size()] == ' ')
        return std::stod(line.substr(series.size() + 1));
    return 0.0;
  }

  /// The leader of topic-p per the controller's describe (-1 if unknown).
  int32_t leader_of(const std::string& topic, int32_t p) {
    auto cd = describe_controller();
    auto ps = cd ? find_partition(*cd, topic, p) : nullptr;
    return ps ? ps->leader : -1;
  }

  // Declared first: destroyed last, after the nodes were killed.
  client_system cs;

private:
  bool proxied_ = false;
  int voters_ = 3;
  std::vector<std::string> node_args_;
  std::function<std::string(int, const std::filesystem::path&)> before_launch_;
  std::vector<uint16_t> ports_;
  bool peer_ports_on_ = false;
  std::vector<uint16_t> peer_ports_;
  std::vector<ferry::connection_actor> links_;
  // Before nodes_: stopped after every node was killed.
  std::unique_ptr<link_proxy> net_;
  std::vector<std::unique_ptr<ferryd_process>> nodes_;
  std::set<int> frozen_;
};

#define ASSERT_CLUSTER_STARTED(c)                                                        \
  do {                                                                                   \
    auto why_ = (c).start();                                                             \
    ASSERT_TRUE(why_.empty()) << why_;                                                   \
    ASSERT_TRUE((c).wait_ready()) << "no controller / not all nodes alive within 20 s\n" \
                                  << (c).dump();                                         \
  } while (false)

/// A connection (tracked by the cluster's client system) with quick reconnects.
inline ferry::connection_actor client_connection(cluster& c, const std::string& bootstrap) {
  using namespace std::chrono_literals;
  auto addr = ferry::parse_broker_address(bootstrap);
  if (!addr) {
    ADD_FAILURE() << "bootstrap " << bootstrap << ": " << ferry::error_text(addr.error());
    return {};
  }
  addr->connect_wait = 5s;
  addr->backoff_min = 50ms;
  addr->backoff_max = 500ms;
  return c.cs.track(ferry::spawn_connection(*c.cs.sys, *addr));
}

/// An idempotent acks=all producer on its own connection to `bootstrap`;
/// it sends to partition leaders directly unless `route_to_leaders` is false.
inline caf::expected<ferry::producer_actor> make_producer(cluster& c,
                                                          const std::string& bootstrap,
                                                          bool route_to_leaders = true) {
  using namespace std::chrono_literals;
  ferry::producer_config pc;
  pc.bootstrap = bootstrap;
  pc.acks = ferry::acks_mode::all;
  pc.idempotence = true;
  pc.linger = 2ms;
  pc.request_timeout = 5000ms;
  pc.retry_backoff = 50ms;
  pc.retry_backoff_max = 500ms;
  pc.delivery_timeout = 45000ms;
  pc.route_to_leaders = route_to_leaders;
  auto conn = client_connection(c, bootstrap);
  if (!conn)
    return caf::make_error(caf::sec::invalid_argument, "no connection");
  auto p = ferry::spawn_producer(*c.cs.sys, pc, conn);
  if (p)
    c.cs.track(*p);
  return p;
}

/// Produces one record with `value` to `topic` through `prod` and waits up
/// to `timeout` for its delivery report.
inline caf::expected<std::vector<ferry::delivery_report>>
produce_one(caf::actor_system& sys, const ferry::producer_actor& prod, const std::string& topic,
            const std::string& value, caf::timespan timeout = std::chrono::seconds{60}) {
  std::vector<ferry::client_message> msgs(1);
  msgs[0].topic = topic;
  msgs[0].value = value;
  return ask<std::vector<ferry::delivery_report>>(sys, prod, timeout, ferry::produce_atom_v,
                                                  msgs);
}

/// Reads topic-p from offset 0 up to `hw` through node `id`.
inline std::optional<std::vector<log_record>>
fetch_all(cluster& c, int id, const std::string& topic, int32_t p, int64_t hw,
          std::string& why) {
  using namespace std::chrono_literals;
  std::vector<log_record> out;
  auto b = c.broker(id);
  if (!b) {
    why = "no broker for node " + std::to_string(id) + ": " + ferry::error_text(b.error());
    return std::nullopt;
  }
  int64_t next = 0;
  auto deadline = steady_clock::now() + 30s;
  while (next < hw) {
    if (steady_clock::now() > deadline) {
      why = "fetching took longer than 30 s (at offset " + std::to_string(next) + ")";
      return std::nullopt;
    }
    ferry::fetch_request req;
    req.topic = topic;
    req.partition = ferry::partition_id{p};
    req.from = ferry::offset{next};
    req.max_wait_ms = 0;
    auto r = ask<ferry::fetch_response>(*c.cs.sys, *b, 10s, ferry::fetch_atom_v, req);
    if (!r) {
      why = "fetch at " + std::to_string(next) + ": " + ferry::error_text(r.error());
      return std::nullopt;
    }
    if (r->data.empty()) {
      why = "fetch at " + std::to_string(next) + " returned nothing (hw "
            + std::to_string(r->high_watermark.value) + ")";
      return std::nullopt;
    }
    auto n = decode_batches(r->data, next, out, why);
    if (!n)
      return std::nullopt;
    if (*n <= next) {
      why = "fetch at " + std::to_string(next) + " did not advance";
      return std::nullopt;
    }
    next = *n;
  }
  return out;
}

/// Compares topic-p in the (stopped) nodes' data dirs up to `hw`, byte for
/// byte (nodes `ids`, every voter by default); fills each node's log end.
/// "" or the first difference.
inline std::string compare_logs_on_disk(cluster& c, const std::string& topic, int32_t p,
                                        int64_t hw, std::map<int, int64_t>& log_ends,
                                        std::vector<int> ids = {}) {
  if (ids.empty())
    ids = c.voter_ids();
  std::map<int, std::string> bytes;
  for (int id : ids) {
    auto dir = c.node(id).data_dir() / "topics" / (topic + "-" + std::to_string(p));
    if (!std::filesystem::exists(dir))
      return "node " + std::to_string(id) + ": no log dir " + dir.string();
    ferry::memory_checkpoint cp;
    auto log = ferry::partition_log::open(dir, ferry::log_config{}, &cp);
    if (!log)
      return "node " + std::to_string(id) + ": open " + dir.string() + ": "
             + ferry::describe(log.error());
    log_ends[id] = (*log)->log_end().value;
    auto from = (*log)->log_start();
    if (from.value != 0)
      return "node " + std::to_string(id) + ": log starts at " + std::to_string(from.value);
    std::string data;
    while (from.value < hw) {
      auto r = (*log)->read(from, 1 << 20, ferry::offset{hw});
      if (!r)
        return "node " + std::to_string(id) + ": read at " + std::to_string(from.value) + ": "
               + ferry::describe(r.error());
      if (r->data.empty() || r->next_offset.value <= from.value)
        break;
      data += r->data;
      from = r->next_offset;
    }
    (*log)->close();
    bytes[id] = std::move(data);
  }
  auto first = ids.front();
  for (int id : ids) {
    auto& a = bytes[first];
    auto& b = bytes[id];
    if (a == b)
      continue;
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i])
      ++i;
    return "logs of node " + std::to_string(first) + " (" + std::to_string(a.size())
           + " bytes) and node "
           + std::to_string(id) + " (" + std::to_string(b.size())
           + " bytes) below hw differ first at byte " + std::to_string(i);
  }
  std::cout << "[cluster] " << topic << "-" << p << ": " << bytes[first].size()
            << " bytes below hw " << hw << " identical on nodes " << join_ids({ids.begin(), ids.end()})
            << "\n";
  return "";
}

} // namespace ferry::test
