// Network partitions of a running three-node cluster: the nodes talk to
// each other only through an in-process link proxy (link_proxy.hpp, started
// by cluster{cluster::behind_proxy}: each node's --voters names a proxy port
// for every other node), which cuts directed links at run time while every
// process keeps running. Clients (this test) dial the nodes' real ports, so
// the test still talks to a node the others cannot reach.
//   0. LinkProxy.PassBlackholeResetAndHeal: the proxy alone, on sockets;
//      LinkProxy.DirectConnectionsAreSeenWithoutTheProxy: the check that no
//      node connects to another around the proxy (/proc) finds the direct
//      connections of a cluster started without it.
//   1. ClusterPartition.IsolatedLeaderStopsTakingWritesAndTruncatesAfterHealing:
//      the leader L of a partition (RF 3, min.insync 2; L is not the
//      controller) is cut off both ways (blackhole: nothing is closed, CAF's
//      heartbeats notice) while a client keeps sending acks=all produces
//      straight to L. No produce sent after the cut is acknowledged (each
//      fails with a retriable error or times out); the controller fences L
//      and the majority elects a new leader in epoch + 1 (also shown by
//      `ferryctl --json cluster describe` through a majority node), which
//      takes acks=all writes. After healing L truncates what it appended
//      alone, follows, rejoins the ISR; every acknowledged record is there
//      exactly once, none sent to L during the cut is, and the three logs
//      are byte-identical up to the HW. The same with other cuts:
//      - LeaderThatCannotHearTheOthersIsReplaced: the others' bytes do not
//        reach L, L's reach them. A half-open link: CAF's connect still
//        completes on the others' side (the server speaks first), so before
//        the node required a probe round trip for "up" the link flapped up
//        every few seconds and L was never fenced. L's answers to fetches
//        parked before the cut still arrive, so records sent to L during
//        the cut may survive (never acknowledged).
//      - LeaderThatCannotReachTheOthersIsReplaced: L's bytes do not reach
//        the others.
//      - LeaderWhoseConnectionsAreRefusedIsReplaced: reset (closed, refused).
//   2. ClusterPartition.LeaderCutOffFromOneFollowerKeepsAcknowledgedWrites:
//      non-transitive partition: L and one follower F cannot reach each
//      other, both still reach the controller C (the third replica). Ferry
//      keeps L as the leader (C sees it), L shrinks F out of the ISR after
//      replica_lag_max (through C) and goes on acknowledging acks=all
//      writes with ISR {L, C}; after healing F catches up and rejoins. No
//      acknowledged write is lost, one leader per epoch.
//   3. ClusterPartition.IsolatedControllerStepsDownAndTheMajorityTakesOver:
//      the Raft leader (controller) C, also the leader of a partition that a
//      client keeps producing to straight at C, is isolated: it steps down
//      (check quorum), the majority elects a new controller in a higher
//      term, which fences C and moves its partition leaderships; writes go
//      on through the majority, none sent to C during the cut is
//      acknowledged or kept; after healing all three agree on one
//      controller and the logs are identical.
// Every wait is bounded; the proxy thread and every ferryd are stopped when a
// test ends, also on failure. FERRY_TEST_LOG_LEVEL / FERRY_TEST_LOG_DIR as in
// cluster_harness.hpp.

#include "cluster_harness.hpp"

#include <caf/event_based_actor.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <mutex>
#include <regex>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using steady = std::chrono::steady_clock;

/// Sends `msgs` in bulk requests of up to 500 (each must succeed); the
/// delivery reports in order, or nullopt (and `why`).
std::optional<std::vector<ferry::delivery_report>>
produce_all(cluster& c, ferry::producer_actor prod,
            const std::vector<ferry::client_message>& msgs, std::string& why,
            caf::timespan timeout = caf::timespan{60s}) {
  std::vector<ferry::delivery_report> out;
  for (size_t i = 0; i < msgs.size(); i += 500) {
    std::vector<ferry::client_message> chunk(
      msgs.begin() + static_cast<ptrdiff_t>(i),
      msgs.begin() + static_cast<ptrdiff_t>(std::min(msgs.size(), i + 500)));
    auto r = ask<std::vector<ferry::delivery_report>>(*c.cs.sys, prod, timeout,
                                                      ferry::produce_atom_v, chunk);
    if (!r) {
      why = "produce of messages " + std::to_string(i) + "..: " + ferry::error_text(r.error());
      return std::nullopt;
    }
    out.insert(out.end(), r->begin(), r->end());
  }
  return out;
}

/// `n` messages for topic-p with values prefix0, prefix1, ...
std::vector<ferry::client_message> make_messages(const std::string& topic, int32_t p,
                                                 const std::string& prefix, int n) {
  std::vector<ferry::client_message> out;
  for (int i = 0; i < n; ++i) {
    ferry::client_message m;
    m.topic = topic;
    m.partition = p;
    m.has_key = true;
    m.key = "k" + std::to_string(i % 10);
    m.value = prefix + std::to_string(i);
    out.push_back(std::move(m));
  }
  return out;
}

/// One produce sent straight to a node by direct_writer.
struct direct_write {
  std::string value;
  int phase = 0;           ///< the writer's phase when it was sent
  bool answered = false;
  std::optional<int64_t> off;  ///< acknowledged at
  std::string error;           ///< or refused with
  bool retriable = false;
};

/// Sends a one-record acks=all produce to one node's broker every `period`
/// (pipelined: each with its own `timeout`), recording what happens to each.
/// The phase (set by the test) is stamped on each write when it is sent.
/// stop() stops sending and waits (bounded) for the outstanding answers; the
/// destructor stops it too (before the cluster goes away).
class direct_writer {
public:
  direct_writer(caf::actor_system& sys, ferry::broker_actor dest, std::string topic,
                int32_t partition, std::string prefix,
                std::chrono::milliseconds period = 100ms,
                std::chrono::milliseconds timeout = 3s)
    : st_(std::make_shared<shared>()) {
    auto st = st_;
    actor_ = sys.spawn([st, dest, topic, partition, prefix, period,
                        timeout](caf::event_based_actor* self) -> caf::behavior {
      self->send(self, ferry::tick_atom_v);
      return {
        [=](ferry::tick_atom) {
          if (st->stopping)
            return;
          size_t idx;
          ferry::produce_request req;
          {
            std::lock_guard<std::mutex> guard{st->mtx};
            idx = st->writes.size();
            direct_write w;
            w.value = prefix + std::to_string(idx);
            w.phase = st->phase.load();
            st->writes.push_back(w);
            ferry::record rec;
            rec.timestamp = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
            rec.key = "direct";
            rec.value = w.value;
            auto batch = ferry::encode_batch(ferry::batch_meta{}, {rec});
            req.batch = batch ? *batch : std::string{};
          }
          req.topic = topic;
          req.partition = ferry::partition_id{partition};
          req.acks = ferry::acks_mode::all;
          self->request(dest, caf::timespan{timeout}, ferry::produce_atom_v, req)
            .then(
              [st, idx](const ferry::produce_response& r) {
                std::lock_guard<std::mutex> guard{st->mtx};
                st->writes[idx].answered = true;
                st->writes[idx].off = r.base_offset.value;
              },
              [st, idx](caf::error& err) {
                std::lock_guard<std::mutex> guard{st->mtx};
                st->writes[idx].answered = true;
                st->writes[idx].error = ferry::error_text(err);
                st->writes[idx].retriable = ferry::is_retriable(err);
              });
          self->delayed_send(self, caf::timespan{period}, ferry::tick_atom_v);
        },
      };
    });
  }

  direct_writer(const direct_writer&) = delete;
  direct_writer& operator=(const direct_writer&) = delete;

  ~direct_writer() {
    stop();
  }

  void phase(int x) {
    st_->phase = x;
  }

  /// Stops sending; waits up to `wait` for the outstanding answers.
  void stop(std::chrono::milliseconds wait = 5s) {
    if (!actor_)
      return;
    st_->stopping = true;
    wait_until(wait, [&] {
      std::lock_guard<std::mutex> guard{st_->mtx};
      for (auto& w : st_->writes)
        if (!w.answered)
          return false;
      return true;
    }, 20ms);
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    actor_ = nullptr;
  }

  std::vector<direct_write> writes() const {
    std::lock_guard<std::mutex> guard{st_->mtx};
    return st_->writes;
  }

private:
  struct shared {
    std::mutex mtx;
    std::vector<direct_write> writes;
    std::atomic<int> phase{0};
    std::atomic<bool> stopping{false};
  };
  std::shared_ptr<shared> st_;
  caf::actor actor_;
};

/// Epoch -> the leaders seen in it (by any describe or status): never two.
class epoch_leaders {
public:
  void see(int32_t epoch, int32_t leader) {
    if (epoch >= 0 && leader >= 1)
      seen_[epoch].insert(leader);
  }
  void see(const ferry::cluster_description& cd, const std::string& topic, int32_t p) {
    if (auto ps = find_partition(cd, topic, p))
      see(ps->epoch.value, ps->leader);
  }
  /// "" or the epochs with two leaders.
  std::string conflicts() const {
    std::string out;
    for (auto& [e, ls] : seen_)
      if (ls.size() > 1) {
        out += "epoch " + std::to_string(e) + " had leaders";
        for (auto l : ls)
          out += " " + std::to_string(l);
        out += "; ";
      }
    return out;
  }
  std::string render() const {
    std::string out;
    for (auto& [e, ls] : seen_) {
      out += " e" + std::to_string(e) + "=";
      for (auto l : ls)
        out += std::to_string(l);
    }
    return out;
  }

private:
  std::map<int32_t, std::set<int32_t>> seen_;
};

/// The nodes of a three-node cluster other than `ids`.
std::vector<int> all_but(std::initializer_list<int> ids) {
  std::vector<int> out;
  for (int id = 1; id <= 3; ++id)
    if (std::find(ids.begin(), ids.end(), id) == ids.end())
      out.push_back(id);
  return out;
}

/// Starts a proxied cluster with `topic` (3 partitions, RF 3, min.insync 2)
/// placed and every node registered; checks that every directed link
/// carries traffic through the proxy and that no node process holds a
/// connection to another node's real port.
#define START_PROXIED_CLUSTER(c, topic)                                                      \
  do {                                                                                       \
    ASSERT_CLUSTER_STARTED(c);                                                               \
    auto why_ = (c).create_topic((topic), 3, 2);                                             \
    ASSERT_TRUE(why_.empty()) << why_ << "\n" << (c).dump();                                 \
    ASSERT_TRUE((c).wait_placed((topic), 3)) << (c).dump();                                  \
    ASSERT_TRUE((c).wait_registered()) << "not every node registered\n" << (c).dump();       \
    for (int a_ = 1; a_ <= (c).voters(); ++a_)                                              \
      for (int b_ = 1; b_ <= (c).voters(); ++b_)                                            \
        if (a_ != b_) {                                                                      \
          EXPECT_GT((c).net().stats(a_, b_).bytes, 0u)                                       \
            << "no bytes from node " << a_ << " to node " << b_ << " crossed the proxy";     \
          EXPECT_GE((c).net().connections(a_, b_), 1u) << a_ << "<->" << b_;                 \
        }                                                                                    \
    auto direct_ = (c).direct_peer_connections();                                            \
    EXPECT_TRUE(direct_.empty()) << "CAF bypasses the proxy:\n" << direct_;                  \
    std::cout << "[partition] links through the proxy:\n" << (c).net().describe();           \
  } while (false)

/// Waits until the ISR of topic-p is {1,2,3} and every replica's log end
/// equals the leader's HW; fills `hw` and `state`.
bool wait_whole(cluster& c, const std::string& topic, int32_t p, int64_t& hw, std::string& state,
                epoch_leaders& el, std::chrono::milliseconds timeout = 20s) {
  return wait_until(timeout, [&] {
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    el.see(*cd, topic, p);
    auto ps = find_partition(*cd, topic, p);
    if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
      return false;
    auto lead = c.status(ps->leader, topic, p);
    if (!lead)
      return false;
    state = "leader " + std::to_string(ps->leader) + " epoch " + std::to_string(ps->epoch.value)
            + " hw " + std::to_string(lead->high_watermark.value) + "; log ends:";
    bool equal = lead->high_watermark == lead->log_end;
    for (int id = 1; id <= c.voters(); ++id) {
      auto st = c.status(id, topic, p);
      if (!st)
        return false;
      state += " node " + std::to_string(id) + "=" + std::to_string(st->log_end.value);
      equal = equal && st->log_end == lead->log_end;
    }
    hw = lead->high_watermark.value;
    return equal;
  });
}

/// Checks topic-p read through node `via` up to `hw`: every value of
/// `acked` (value -> offset) exactly once at its offset, none of `absent`,
/// nothing unknown except `in_doubt` (at most once), batch epochs never
/// going down. Returns the records.
std::vector<log_record> check_log(cluster& c, int via, const std::string& topic, int32_t p,
                                  int64_t hw, const std::map<std::string, int64_t>& acked,
                                  const std::set<std::string>& absent,
                                  const std::set<std::string>& in_doubt) {
  std::string why;
  auto recs = fetch_all(c, via, topic, p, hw, why);
  if (!recs) {
    ADD_FAILURE() << why << "\n" << c.dump();
    return {};
  }
  std::map<std::string, int> count;
  int32_t last_epoch = -1;
  size_t unknown = 0;
  for (auto& r : *recs) {
    ++count[r.value];
    EXPECT_GE(r.batch_epoch, last_epoch) << "batch epoch went down at offset " << r.off;
    last_epoch = std::max(last_epoch, r.batch_epoch);
    if (!acked.count(r.value) && !in_doubt.count(r.value) && ++unknown <= 5)
      ADD_FAILURE() << "unexpected record '" << r.value << "' at offset " << r.off;
    if (absent.count(r.value))
      ADD_FAILURE() << "'" << r.value << "' (sent to the isolated leader during the cut) is "
                    << "in the log at offset " << r.off;
  }
  size_t missing = 0;
  for (auto& [value, off] : acked) {
    auto n = count[value];
    if (n != 1 && ++missing <= 5)
      ADD_FAILURE() << "acknowledged '" << value << "' (offset " << off << ") is in the log "
                    << n << " times";
  }
  for (auto& r : *recs) {
    if (auto a = acked.find(r.value); a != acked.end()) {
      EXPECT_EQ(a->second, r.off) << "'" << r.value << "' acknowledged at another offset";
    }
  }
  for (auto& v : in_doubt)
    EXPECT_LE(count[v], 1) << "'" << v << "' (never acknowledged) is in the log twice";
  EXPECT_EQ(missing, 0u);
  return *recs;
}

/// Stops the cluster and compares the three logs of topic-p on disk; first
/// checks that no node talks to another one around the proxy.
void stop_and_compare(cluster& c, const std::string& topic, int32_t p, int64_t hw) {
  auto direct = c.direct_peer_connections();
  EXPECT_TRUE(direct.empty()) << "CAF bypasses the proxy:\n" << direct;
  auto codes = c.stop_all();
  for (auto& [id, code] : codes)
    EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                       << tail(c.node(id).output(), 3000);
  std::map<int, int64_t> log_ends;
  auto diff = compare_logs_on_disk(c, topic, p, hw, log_ends);
  EXPECT_TRUE(diff.empty()) << diff;
  for (auto& [id, end] : log_ends)
    EXPECT_EQ(end, hw) << "node " << id << " log end on disk";
}

// -- 0: the proxy alone ----------------------------------------------------------

/// A listening socket on a free loopback port.
int listen_loopback(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::listen(fd, 8) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  port = ntohs(a.sin_port);
  return fd;
}

int dial_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Accepts within `ms`, else -1.
int accept_within(int lfd, int ms) {
  pollfd pfd{lfd, POLLIN, 0};
  if (::poll(&pfd, 1, ms) <= 0)
    return -1;
  return ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
}

/// What arrives on `fd` within `ms`: the bytes, "<eof>", "<reset>" or "<none>".
std::string receive_within(int fd, int ms) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, ms) <= 0)
    return "<none>";
  char buf[256];
  auto n = ::recv(fd, buf, sizeof(buf), 0);
  if (n > 0)
    return std::string(buf, static_cast<size_t>(n));
  return n == 0 ? "<eof>" : "<reset>";
}

struct fd_guard {
  std::vector<int> fds;
  ~fd_guard() {
    for (auto fd : fds)
      if (fd >= 0)
        ::close(fd);
  }
  int operator()(int fd) {
    fds.push_back(fd);
    return fd;
  }
};

/// A partition (0..2) of `topic` with a live leader other than node `ctl`
/// (the controller), or -1.
int32_t partition_led_by_other_than(const ferry::cluster_description& cd,
                                    const std::string& topic, int ctl) {
  for (int32_t q = 0; q < 3; ++q)
    if (auto ps = find_partition(cd, topic, q); ps && ps->leader >= 1 && ps->leader != ctl)
      return q;
  return -1;
}

TEST(LinkProxy, PassBlackholeResetAndHeal) {
  fd_guard fds;
  uint16_t target = 0;
  int lfd = fds(listen_loopback(target));
  ASSERT_GE(lfd, 0);
  link_proxy net;
  std::string why;
  auto p12 = net.add(1, 2, target, &why);
  ASSERT_NE(p12, 0) << why;
  ASSERT_TRUE(net.start(&why)) << why;
  int a = fds(dial_loopback(p12));
  ASSERT_GE(a, 0);
  int b = fds(accept_within(lfd, 2000));
  ASSERT_GE(b, 0) << "the proxy did not connect to the target";
  // The proxy counts the connection after its connect returns; the target's
  // accept may return first.
  EXPECT_TRUE(wait_until(2s, [&] { return net.connections(1, 2) == 1u; }, 10ms))
    << net.connections(1, 2) << " connections\n" << net.describe();
  // pass, both ways.
  ASSERT_EQ(::send(a, "ping", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(receive_within(b, 2000), "ping");
  ASSERT_EQ(::send(b, "pong", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(receive_within(a, 2000), "pong");
  // 1 -> 2 blackholed: held, not delivered, not closed; 2 -> 1 still flows.
  net.set(1, 2, link_mode::blackhole);
  ASSERT_EQ(::send(a, "held", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(receive_within(b, 300), "<none>");
  ASSERT_EQ(::send(b, "back", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(receive_within(a, 2000), "back");
  // Healed: the held bytes arrive.
  net.heal();
  EXPECT_EQ(receive_within(b, 2000), "held");
  // (counted right after the send: the receiver may be quicker)
  EXPECT_TRUE(wait_until(2s, [&] { return net.stats(1, 2).bytes == 8; }, 10ms))
    << net.describe();
  EXPECT_TRUE(wait_until(2s, [&] { return net.stats(2, 1).bytes == 8; }, 10ms))
    << net.describe();
  // A close propagates while the direction passes.
  ::shutdown(b, SHUT_WR);
  EXPECT_EQ(receive_within(a, 2000), "<eof>");
  // reset (2 -> 1 is enough): existing connections die, new ones are reset.
  int a2 = fds(dial_loopback(p12));
  int b2 = fds(accept_within(lfd, 2000));
  ASSERT_GE(b2, 0);
  net.set(2, 1, link_mode::reset);
  EXPECT_EQ(receive_within(a2, 2000), "<reset>");
  EXPECT_EQ(receive_within(b2, 2000), "<reset>");
  int a3 = fds(dial_loopback(p12));
  EXPECT_EQ(receive_within(a3, 2000), "<reset>");
  EXPECT_EQ(accept_within(lfd, 200), -1) << "a connection got through a reset link";
  EXPECT_GE(net.stats(1, 2).resets, 2u);
  // Healed: new connections work again.
  net.heal();
  int a4 = fds(dial_loopback(p12));
  int b4 = fds(accept_within(lfd, 2000));
  ASSERT_GE(b4, 0);
  ASSERT_EQ(::send(a4, "again", 5, MSG_NOSIGNAL), 5);
  EXPECT_EQ(receive_within(b4, 2000), "again");
  std::cout << net.describe();
  net.stop();
  EXPECT_EQ(receive_within(b4, 2000), "<eof>") << "stop() closes every connection";
}

// The bypass check of START_PROXIED_CLUSTER sees the connections of a
// cluster without the proxy.
TEST(LinkProxy, DirectConnectionsAreSeenWithoutTheProxy) {
  cluster c;
  ASSERT_CLUSTER_STARTED(c);
  auto direct = c.direct_peer_connections();
  EXPECT_FALSE(direct.empty()) << "no direct node-to-node connection found in /proc";
  std::cout << direct;
}

// -- 1 ------------------------------------------------------------------------

/// How the leader is cut off from the two other nodes.
enum class cut_kind {
  both_ways,        ///< blackhole in both directions: a cut cable
  leader_deaf,      ///< the others' bytes do not reach L; L's reach them
  leader_mute,      ///< L's bytes do not reach the others; theirs reach L
  refused,          ///< reset: connections closed, new ones refused
};

const char* to_string(cut_kind k) {
  switch (k) {
    case cut_kind::both_ways:
      return "both ways";
    case cut_kind::leader_deaf:
      return "L deaf";
    case cut_kind::leader_mute:
      return "L mute";
    case cut_kind::refused:
      return "refused";
  }
  return "?";
}

void isolated_leader_case(cut_kind kind) {
  auto t0 = steady::now();
  cluster c{cluster::behind_proxy};
  // L answers the produces it cannot replicate itself (request_timed_out)
  // after 500 ms, before the direct writer's own 3 s timeout.
  c.add_node_args({"--produce-ack-timeout-ms", "500"});
  const std::string topic = "cut";
  START_PROXIED_CLUSTER(c, topic);
  std::cout << "[partition] cut: " << to_string(kind) << "\n";
  epoch_leaders el;

  // A partition led by a node that is not the controller.
  auto cd0 = c.describe_controller();
  ASSERT_TRUE(cd0) << c.dump();
  const int ctl = cd0->controller;
  const int32_t p = partition_led_by_other_than(*cd0, topic, ctl);
  ASSERT_GE(p, 0) << render(*cd0);
  const int leader = find_partition(*cd0, topic, p)->leader;
  const int32_t epoch0 = find_partition(*cd0, topic, p)->epoch.value;
  el.see(*cd0, topic, p);
  auto others = all_but({leader});
  std::cout << "[partition] " << topic << "-" << p << ": leader L = node " << leader
            << " in epoch " << epoch0 << ", controller node " << ctl << "\n";

  // 200 acks=all writes through every node.
  std::string why;
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto first = make_messages(topic, p, "a", 200);
  auto first_reports = produce_all(c, *prod, first, why);
  ASSERT_TRUE(first_reports) << why << "\n" << c.dump();
  std::map<std::string, int64_t> acked;
  for (size_t i = 0; i < first.size(); ++i)
    acked[first[i].value] = (*first_reports)[i].off.value;

  // A client keeps producing straight to L (its real port: not cut).
  auto l_broker = c.broker(leader);
  ASSERT_TRUE(l_broker) << ferry::error_text(l_broker.error());
  direct_writer writer{*c.cs.sys, *l_broker, topic, p, "d"};
  ASSERT_TRUE(wait_until(5s, [&] {
    for (auto& w : writer.writes())
      if (w.off)
        return true;
    return false;
  })) << "no direct write to L was acknowledged before the cut\n" << c.dump();

  // Cut L off both ways (blackhole: nothing closed, nothing delivered).
  auto tc = steady::now();
  switch (kind) {
    case cut_kind::both_ways:
      c.isolate(leader);
      break;
    case cut_kind::leader_deaf:
      for (auto id : others)
        c.net().set(id, leader, link_mode::blackhole);
      break;
    case cut_kind::leader_mute:
      for (auto id : others)
        c.net().set(leader, id, link_mode::blackhole);
      break;
    case cut_kind::refused:
      c.isolate(leader, link_mode::reset);
      break;
  }
  writer.phase(1);
  std::cout << "[partition] L cut off (" << to_string(kind) << ") at " << seconds_since(t0)
            << " s\n";

  // The majority: L fenced (dead), a new leader in a higher epoch.
  int new_leader = -1;
  int32_t epoch1 = -1;
  std::string seen;
  bool moved = wait_until(15s, [&] {
    int agreed = 0;
    seen.clear();
    for (auto id : others) {
      auto cd = c.describe(id);
      if (!cd) {
        seen += "node " + std::to_string(id) + ": " + ferry::error_text(cd.error()) + "; ";
        continue;
      }
      el.see(*cd, topic, p);
      auto ps = find_partition(*cd, topic, p);
      if (!ps)
        continue;
      bool l_dead = false;
      for (auto& n : cd->nodes)
        if (n.id == leader)
          l_dead = !n.alive;
      seen += "node " + std::to_string(id) + ": leader " + std::to_string(ps->leader) + " epoch "
              + std::to_string(ps->epoch.value) + " isr " + join_ids(ps->isr)
              + (l_dead ? " L dead" : " L alive") + "; ";
      if (l_dead && ps->leader >= 1 && ps->leader != leader && ps->epoch.value > epoch0
          && (agreed == 0 || (ps->leader == new_leader && ps->epoch.value == epoch1))) {
        new_leader = ps->leader;
        epoch1 = ps->epoch.value;
        ++agreed;
      }
    }
    return agreed == static_cast<int>(others.size());
  }, 200ms);
  ASSERT_TRUE(moved) << "no new leader in the majority within 15 s of the cut: " << seen << "\n"
                     << c.dump();
  std::cout << "[partition] after " << seconds_since(tc) << " s the majority has leader node "
            << new_leader << " in epoch " << epoch1 << " (" << seen << ")\n";
  EXPECT_EQ(epoch1, epoch0 + 1);

  // ferryctl through a majority node shows it too.
  auto ctl_out = run_command(FERRYCTL_PATH, {"--broker", c.endpoint(others.front()), "--json",
                                             "cluster", "describe"},
                             20s);
  ASSERT_EQ(ctl_out.exit_code, 0) << ctl_out.err;
  {
    auto j = nlohmann::json::parse(ctl_out.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << ctl_out.out;
    bool l_alive = true;
    for (auto& n : j["nodes"])
      if (n["id"] == leader)
        l_alive = n["alive"].get<bool>();
    EXPECT_FALSE(l_alive) << "ferryctl cluster describe through node " << others.front()
                          << " still shows L alive:\n" << ctl_out.out;
    int32_t shown_leader = -1, shown_epoch = -1;
    for (auto& t : j["topics"])
      if (t["name"] == topic)
        for (auto& ps : t["partition_status"])
          if (ps["partition"] == p) {
            shown_leader = ps["leader"].get<int32_t>();
            shown_epoch = ps["leader_epoch"].get<int32_t>();
          }
    EXPECT_EQ(shown_leader, new_leader) << ctl_out.out;
    EXPECT_EQ(shown_epoch, epoch1) << ctl_out.out;
  }

  // The majority takes acks=all writes.
  auto majority = make_producer(c, c.endpoints(others));
  ASSERT_TRUE(majority) << ferry::error_text(majority.error());
  auto second = make_messages(topic, p, "b", 100);
  auto second_reports = produce_all(c, *majority, second, why);
  ASSERT_TRUE(second_reports) << "the majority did not take writes: " << why << "\n" << c.dump();
  for (size_t i = 0; i < second.size(); ++i)
    acked[second[i].value] = (*second_reports)[i].off.value;

  // L, still cut off, as it sees itself; then stop writing to it.
  auto l_cut = c.status(leader, topic, p);
  ASSERT_TRUE(l_cut) << ferry::error_text(l_cut.error());
  el.see(l_cut->epoch.value, l_cut->leader);
  writer.stop();
  std::cout << "[partition] L during the cut: leader " << l_cut->leader << " epoch "
            << l_cut->epoch.value << " log end " << l_cut->log_end.value << " hw "
            << l_cut->high_watermark.value << "\n";

  // No produce sent to L after the cut was acknowledged; each failed with a
  // retriable error (or timed out).
  std::set<std::string> absent, in_doubt;
  std::map<std::string, int> outcomes;
  size_t direct_acked = 0, during_cut = 0;
  for (auto& w : writer.writes()) {
    if (w.phase == 1) {
      ++during_cut;
      // A deaf L still answers the follower fetches parked at it before the
      // cut, and its answers arrive: what it appended then may survive
      // (never acknowledged, so either way is right). Otherwise nothing L
      // appended during the cut can reach another node.
      (kind == cut_kind::leader_deaf ? in_doubt : absent).insert(w.value);
      EXPECT_FALSE(w.off) << "'" << w.value << "', sent to L during the cut, was acknowledged "
                          << "at offset " << *w.off;
      EXPECT_TRUE(w.answered && (w.off || w.retriable))
        << "'" << w.value << "': " << (w.answered ? w.error : "no answer");
      ++outcomes[w.off ? "acknowledged" : w.error.substr(0, 80)];
    } else if (w.off) {
      ++direct_acked;
      acked[w.value] = *w.off;
    } else {
      in_doubt.insert(w.value);
    }
  }
  std::cout << "[partition] direct writes to L: " << direct_acked << " acknowledged before the "
            << "cut, " << in_doubt.size() << " in doubt, " << during_cut << " sent during the cut:\n";
  for (auto& [text, n] : outcomes)
    std::cout << "    x" << n << " " << text << "\n";
  EXPECT_GE(during_cut, 5u);
  if (kind == cut_kind::both_ways) {
    // Cut off from followers and controller alike, L never learns it lost
    // the partition: its own ack timeout answers the writes it holds.
    size_t timed_out_at_l = 0;
    for (auto& w : writer.writes())
      if (w.phase == 1 && w.error.find("not replicated to the ISR") != std::string::npos)
        ++timed_out_at_l;
    EXPECT_GE(timed_out_at_l, 1u) << "no write during the cut was answered by L's "
                                  << "--produce-ack-timeout-ms";
  }

  // Heal: L truncates, follows, rejoins the ISR.
  c.heal();
  auto th = steady::now();
  int64_t hw = -1;
  std::string state;
  ASSERT_TRUE(wait_whole(c, topic, p, hw, state, el))
    << "L did not rejoin within 20 s of healing: " << state << "\n" << c.dump();
  std::cout << "[partition] whole again " << seconds_since(th) << " s after healing: " << state
            << "\n";
  auto l_out = c.node(leader).output();
  auto cut_line = l_out.find("partition " + topic + "/" + std::to_string(p)
                             + ": log diverged from leader");
  if (l_cut->log_end.value > l_cut->high_watermark.value) {
    EXPECT_NE(cut_line, std::string::npos)
      << "L appended past its HW alone but logged no truncation";
  }
  if (cut_line != std::string::npos)
    std::cout << "[partition] L: "
              << l_out.substr(cut_line, l_out.find('\n', cut_line) - cut_line) << "\n";

  auto recs = check_log(c, new_leader, topic, p, hw, acked, absent, in_doubt);
  EXPECT_EQ(static_cast<size_t>(hw), recs.size());
  EXPECT_TRUE(el.conflicts().empty()) << el.conflicts();
  std::cout << "[partition] " << recs.size() << " records, " << acked.size()
            << " acknowledged; leaders by epoch:" << el.render() << "\n";
  stop_and_compare(c, topic, p, hw);
  std::cout << "[partition] test took " << seconds_since(t0) << " s\n";
}

TEST(ClusterPartition, IsolatedLeaderStopsTakingWritesAndTruncatesAfterHealing) {
  isolated_leader_case(cut_kind::both_ways);
}

TEST(ClusterPartition, LeaderThatCannotHearTheOthersIsReplaced) {
  isolated_leader_case(cut_kind::leader_deaf);
}

TEST(ClusterPartition, LeaderThatCannotReachTheOthersIsReplaced) {
  isolated_leader_case(cut_kind::leader_mute);
}

TEST(ClusterPartition, LeaderWhoseConnectionsAreRefusedIsReplaced) {
  isolated_leader_case(cut_kind::refused);
}

// -- 2 ------------------------------------------------------------------------

TEST(ClusterPartition, LeaderCutOffFromOneFollowerKeepsAcknowledgedWrites) {
  auto t0 = steady::now();
  cluster c{cluster::behind_proxy};
  // replica.lag.time.max.ms 2 s instead of 10 s: F leaves the ISR sooner
  // (and the leader's log line shows the setting took).
  c.add_node_args({"--replica-lag-max-ms", "2000"});
  const std::string topic = "split";
  START_PROXIED_CLUSTER(c, topic);
  epoch_leaders el;

  auto cd0 = c.describe_controller();
  ASSERT_TRUE(cd0) << c.dump();
  const int ctl = cd0->controller;
  const int32_t p = partition_led_by_other_than(*cd0, topic, ctl);
  ASSERT_GE(p, 0) << render(*cd0);
  const int leader = find_partition(*cd0, topic, p)->leader;
  const int32_t epoch0 = find_partition(*cd0, topic, p)->epoch.value;
  const int follower = all_but({leader, ctl}).front();
  el.see(*cd0, topic, p);
  std::cout << "[split] " << topic << "-" << p << ": leader L = node " << leader << " (epoch "
            << epoch0 << "), controller C = node " << ctl << ", follower F = node " << follower
            << "\n";

  std::string why;
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto first = make_messages(topic, p, "a", 200);
  auto first_reports = produce_all(c, *prod, first, why);
  ASSERT_TRUE(first_reports) << why << "\n" << c.dump();
  std::map<std::string, int64_t> acked;
  for (size_t i = 0; i < first.size(); ++i)
    acked[first[i].value] = (*first_reports)[i].off.value;

  auto l_broker = c.broker(leader);
  ASSERT_TRUE(l_broker) << ferry::error_text(l_broker.error());
  direct_writer writer{*c.cs.sys, *l_broker, topic, p, "d", 100ms, 4s};

  // L <-> F cut; both still reach C.
  auto tc = steady::now();
  c.cut(leader, follower);
  writer.phase(1);
  std::cout << "[split] L <-> F cut at " << seconds_since(t0) << " s\n";

  // Ferry's answer: L stays the leader and drops F from the ISR (through C).
  std::string state;
  bool shrunk = wait_until(25s, [&] {
    auto cd = c.describe(ctl);
    if (!cd)
      return false;
    el.see(*cd, topic, p);
    auto ps = find_partition(*cd, topic, p);
    if (!ps)
      return false;
    state = "leader " + std::to_string(ps->leader) + " epoch " + std::to_string(ps->epoch.value)
            + " isr " + join_ids(ps->isr);
    return ps->leader >= 1 && !same_members(ps->isr, {1, 2, 3}) && ps->isr.size() >= 2;
  }, 200ms);
  ASSERT_TRUE(shrunk) << "the ISR did not shrink within 25 s of the cut: " << state << "\n"
                      << c.dump();
  std::cout << "[split] after " << seconds_since(tc) << " s the controller shows " << state
            << "\n";
  // "partition split/P: follower F not caught up for N ms: leaving the ISR",
  // with N at least the configured 2000 and below the default 10000.
  {
    std::smatch m;
    auto log = c.node(leader).output();
    const std::regex shrink_line{"follower " + std::to_string(follower)
                                        + " not caught up for ([0-9]+) ms: leaving the ISR"};
    ASSERT_TRUE(std::regex_search(log, m, shrink_line))
      << "no ISR shrink logged by the leader:\n" << tail(log, 3000);
    auto lag_ms = std::stol(m[1].str());
    EXPECT_GE(lag_ms, 2000) << m[0];
    EXPECT_LT(lag_ms, 10000) << "--replica-lag-max-ms 2000 not applied? " << m[0];
  }

  // acks=all writes go on (ISR of 2 = min.insync).
  auto second = make_messages(topic, p, "b", 100);
  auto second_reports = produce_all(c, *prod, second, why, caf::timespan{30s});
  ASSERT_TRUE(second_reports) << "no writes with L cut off from F: " << why << "\n" << c.dump();
  for (size_t i = 0; i < second.size(); ++i)
    acked[second[i].value] = (*second_reports)[i].off.value;
  if (auto cd = c.describe(ctl))
    el.see(*cd, topic, p);
  writer.stop();
  std::set<std::string> in_doubt;
  size_t direct_acked = 0;
  std::map<std::string, int> outcomes;
  for (auto& w : writer.writes()) {
    if (w.off) {
      ++direct_acked;
      acked[w.value] = *w.off;
    } else {
      in_doubt.insert(w.value);
      EXPECT_TRUE(w.retriable) << "'" << w.value << "': " << w.error;
      ++outcomes[w.error.substr(0, 80)];
    }
  }
  std::cout << "[split] direct writes to L: " << direct_acked << " acknowledged, "
            << in_doubt.size() << " not:\n";
  for (auto& [text, n] : outcomes)
    std::cout << "    x" << n << " " << text << "\n";

  c.heal();
  auto th = steady::now();
  int64_t hw = -1;
  ASSERT_TRUE(wait_whole(c, topic, p, hw, state, el))
    << "F did not rejoin within 20 s of healing: " << state << "\n" << c.dump();
  std::cout << "[split] whole again " << seconds_since(th) << " s after healing: " << state
            << "\n";
  auto recs = check_log(c, ctl, topic, p, hw, acked, {}, in_doubt);
  EXPECT_EQ(static_cast<size_t>(hw), recs.size());
  EXPECT_TRUE(el.conflicts().empty()) << el.conflicts();
  std::cout << "[split] " << recs.size() << " records, " << acked.size()
            << " acknowledged; leaders by epoch:" << el.render() << "\n";
  stop_and_compare(c, topic, p, hw);
  std::cout << "[split] test took " << seconds_since(t0) << " s\n";
}

// -- 3 ------------------------------------------------------------------------

TEST(ClusterPartition, IsolatedControllerStepsDownAndTheMajorityTakesOver) {
  auto t0 = steady::now();
  cluster c{cluster::behind_proxy};
  const std::string topic = "ctl";
  START_PROXIED_CLUSTER(c, topic);
  epoch_leaders el;

  auto cd0 = c.describe_controller();
  ASSERT_TRUE(cd0) << c.dump();
  const int ctl = cd0->controller;
  const int64_t term0 = cd0->raft_term;
  int32_t p = -1;
  for (int32_t q = 0; q < 3 && p < 0; ++q)
    if (auto ps = find_partition(*cd0, topic, q); ps && ps->leader == ctl)
      p = q;
  ASSERT_GE(p, 0) << "the controller leads no partition of " << topic << "\n" << render(*cd0);
  const int32_t epoch0 = find_partition(*cd0, topic, p)->epoch.value;
  el.see(*cd0, topic, p);
  auto others = all_but({ctl});
  std::cout << "[controller] controller C = node " << ctl << " (term " << term0 << "), leads "
            << topic << "-" << p << " in epoch " << epoch0 << "\n";

  // A client keeps producing straight to C, which also leads p.
  auto c_broker = c.broker(ctl);
  ASSERT_TRUE(c_broker) << ferry::error_text(c_broker.error());
  direct_writer writer{*c.cs.sys, *c_broker, topic, p, "d"};
  ASSERT_TRUE(wait_until(5s, [&] {
    for (auto& w : writer.writes())
      if (w.off)
        return true;
    return false;
  })) << "no direct write to C was acknowledged before the cut\n" << c.dump();

  auto tc = steady::now();
  c.isolate(ctl);
  writer.phase(1);

  // The majority: a new controller in a higher term, C dead, p moved.
  std::string seen;
  int new_ctl = -1;
  bool taken = wait_until(20s, [&] {
    seen.clear();
    int agreed = 0;
    for (auto id : others) {
      auto cd = c.describe(id);
      if (!cd)
        return false;
      el.see(*cd, topic, p);
      auto ps = find_partition(*cd, topic, p);
      bool c_dead = false;
      for (auto& n : cd->nodes)
        if (n.id == ctl)
          c_dead = !n.alive;
      seen += "node " + std::to_string(id) + ": controller " + std::to_string(cd->controller)
              + " term " + std::to_string(cd->raft_term)
              + (ps ? " leader " + std::to_string(ps->leader) + " epoch "
                        + std::to_string(ps->epoch.value)
                    : std::string{" ?"})
              + "; ";
      if (cd->controller >= 1 && cd->controller != ctl && cd->raft_term > term0 && c_dead && ps
          && ps->leader >= 1 && ps->leader != ctl && ps->epoch.value > epoch0
          && (agreed == 0 || cd->controller == new_ctl)) {
        new_ctl = cd->controller;
        ++agreed;
      }
    }
    return agreed == static_cast<int>(others.size());
  }, 200ms);
  ASSERT_TRUE(taken) << "the majority did not take over within 20 s: " << seen << "\n"
                     << c.dump();
  std::cout << "[controller] after " << seconds_since(tc) << " s: " << seen << "\n";

  // C, cut off, no longer claims to lead the quorum (check quorum).
  std::string c_view;
  bool stepped_down = wait_until(10s, [&] {
    auto cd = c.describe(ctl);
    if (!cd)
      return false;
    c_view = "controller " + std::to_string(cd->controller) + " term "
             + std::to_string(cd->raft_term);
    return cd->controller != ctl;
  }, 200ms);
  EXPECT_TRUE(stepped_down) << "node " << ctl << " still sees itself as the controller: "
                            << c_view;
  std::cout << "[controller] C's own view: " << c_view << "\n";

  // Writes go on through the majority.
  std::string why;
  auto prod = make_producer(c, c.endpoints(others));
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto msgs = make_messages(topic, p, "m", 100);
  auto reports = produce_all(c, *prod, msgs, why);
  ASSERT_TRUE(reports) << why << "\n" << c.dump();
  std::map<std::string, int64_t> acked;
  for (size_t i = 0; i < msgs.size(); ++i)
    acked[msgs[i].value] = (*reports)[i].off.value;
  writer.stop();
  std::set<std::string> absent, in_doubt;
  size_t during_cut = 0;
  for (auto& w : writer.writes()) {
    if (w.phase == 1) {
      ++during_cut;
      absent.insert(w.value);
      EXPECT_FALSE(w.off) << "'" << w.value << "', sent to C during the cut, was acknowledged";
      EXPECT_TRUE(w.answered && (w.off || w.retriable))
        << "'" << w.value << "': " << (w.answered ? w.error : "no answer");
    } else if (w.off) {
      acked[w.value] = *w.off;
    } else {
      in_doubt.insert(w.value);
    }
  }
  std::cout << "[controller] " << during_cut << " produces sent to C during the cut, none "
            << "acknowledged\n";

  // Heal: one controller for all three, C back in the ISR.
  c.heal();
  auto th = steady::now();
  std::string views;
  bool agreed = wait_until(20s, [&] {
    views.clear();
    std::set<std::pair<int32_t, int64_t>> seen_ctl;
    for (int id = 1; id <= c.voters(); ++id) {
      auto cd = c.describe(id);
      if (!cd)
        return false;
      views += "node " + std::to_string(id) + ": " + std::to_string(cd->controller) + "/"
               + std::to_string(cd->raft_term) + "; ";
      for (auto& n : cd->nodes)
        if (!n.alive)
          return false;
      seen_ctl.emplace(cd->controller, cd->raft_term);
    }
    return seen_ctl.size() == 1 && seen_ctl.begin()->first >= 1;
  }, 200ms);
  ASSERT_TRUE(agreed) << "no single controller within 20 s of healing: " << views << "\n"
                      << c.dump();
  int64_t hw = -1;
  std::string state;
  ASSERT_TRUE(wait_whole(c, topic, p, hw, state, el))
    << "C did not rejoin within 20 s of healing: " << state << "\n" << c.dump();
  std::cout << "[controller] whole again " << seconds_since(th) << " s after healing (" << views
            << "): " << state << "\n";
  auto recs = check_log(c, ctl, topic, p, hw, acked, absent, in_doubt);
  EXPECT_EQ(static_cast<size_t>(hw), recs.size());
  EXPECT_TRUE(el.conflicts().empty()) << el.conflicts();
  stop_and_compare(c, topic, p, hw);
  std::cout << "[controller] test took " << seconds_since(t0) << " s\n";
}

} // namespace
