#pragma once
// link_proxy: a fault-injecting TCP forwarder between the nodes of a test
// cluster (in-process: one thread, poll(), no CAF).
//
// Shape: for every ordered pair of nodes (i, j) the proxy listens on a
// loopback port P(i,j) and forwards each connection accepted there to node
// j's real endpoint. Node i's --voters list names P(i,j) for every other node j
// (its own entry keeps its real port), so every byte node i sends to node j
// passes the proxy: on a connection node i opened through P(i,j) (upstream)
// or on one node j opened through P(j,i) (downstream; CAF's BASP answers
// and may keep only one of the two connections a pair of nodes opens, see
// caf::io::basp::routing_table::add_alternative). CAF never learns a peer's
// real port (BASP automatic connections are off by default), so it cannot
// bypass the proxy; clients (tests, ferryctl) connect to the real ports.
//
// Faults are per DIRECTED link (from i to j), switched at run time, and
// apply to every connection between i and j whichever side opened it:
//   pass       bytes flow.
//   blackhole  bytes from i to j are no longer read from i's socket nor
//              written to j's (held, not dropped): like a cut cable, nothing
//              is closed and neither side learns anything - CAF's heartbeat
//              timeout (connection-timeout) is what notices. i's writes fill
//              the socket buffers. A close by i is not seen either. On heal
//              the held bytes flow (as TCP would retransmit them), unless a
//              side closed the connection meanwhile.
//   reset      every connection between i and j is closed with a RST and
//              new ones through P(i,j) are accepted and reset at once (a
//              "connection refused/reset" network).
// A symmetric partition is both directions; an asymmetric one only one of
// them. Connections accepted during a blackhole are connected to the target
// and then held, like a SYN that got through before the cable was cut.
//
// Bounded and stoppable: each direction buffers at most buffer_limit bytes
// (then stops reading its source: back pressure), control calls take a
// mutex and wake the thread through a pipe, stop() (also the destructor)
// joins the thread and closes every socket.
//
// Operators get the same proxy as a program: ferry-linkproxy
// (tests/tools/ferry_linkproxy.cpp) prints each node's --voters and takes
// pass/blackhole/reset commands on stdin.
//
//   link_proxy net;
//   auto p12 = net.add(1, 2, port_of_node_2);   // node 1 dials 127.0.0.1:p12
//   net.start();
//   net.set(1, 2, link_mode::blackhole);        // 1 -> 2 cut, 2 -> 1 flows
//   net.isolate(3, {1, 2, 3});                  // 3 cut from everyone
//   net.heal();                                  // everything passes again

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::test {

enum class link_mode { pass, blackhole, reset };

inline const char* to_string(link_mode m) {
  switch (m) {
    case link_mode::pass:
      return "pass";
    case link_mode::blackhole:
      return "blackhole";
    case link_mode::reset:
      return "reset";
  }
  return "?";
}

/// Counters of one directed link.
struct link_stats {
  uint64_t bytes = 0;     ///< forwarded from `from` to `to`
  uint64_t accepted = 0;  ///< connections accepted on P(from, to)
  uint64_t resets = 0;    ///< connections between the two closed by `reset`
};

class link_proxy {
public:
  static constexpr size_t buffer_limit = size_t{1} << 20;

  link_proxy() = default;
  link_proxy(const link_proxy&) = delete;
  link_proxy& operator=(const link_proxy&) = delete;

  ~link_proxy() {
    stop();
  }

  /// Listens on 127.0.0.1:`listen_port` (0: a free port) for node `from`
  /// and forwards to `target_host`:`target_port` (node `to`; an IPv4
  /// address). Returns the port, or 0 and `why`. Call before start().
  uint16_t add(int from, int to, uint16_t target_port, std::string* why = nullptr,
               const std::string& target_host = "127.0.0.1", uint16_t listen_port = 0) {
    auto fail = [&](const std::string& what) -> uint16_t {
      if (why)
        *why = what + ": " + std::strerror(errno);
      return 0;
    };
    in_addr target{};
    if (from == to || thread_.joinable()
        || ::inet_pton(AF_INET, target_host.c_str(), &target) != 1) {
      if (why)
        *why = from == to            ? "a link needs two nodes"
               : thread_.joinable() ? "add() after start()"
                                    : "not an IPv4 address: " + target_host;
      return 0;
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return fail("socket");
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(listen_port);
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
        || ::listen(fd, 64) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      auto r = fail("bind/listen");
      ::close(fd);
      return r;
    }
    listener l;
    l.fd = fd;
    l.from = from;
    l.to = to;
    l.port = ntohs(addr.sin_port);
    l.target = target;
    l.target_port = target_port;
    listeners_.push_back(l);
    std::lock_guard<std::mutex> guard{mtx_};
    modes_[{from, to}];
    modes_[{to, from}];
    return l.port;
  }

  /// The port of P(from, to), 0 if there is none.
  uint16_t port(int from, int to) const {
    for (auto& l : listeners_)
      if (l.from == from && l.to == to)
        return l.port;
    return 0;
  }

  /// Starts the forwarding thread. False (and `why`) if it cannot.
  bool start(std::string* why = nullptr) {
    if (thread_.joinable())
      return true;
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      if (why)
        *why = std::string{"pipe: "} + std::strerror(errno);
      return false;
    }
    stopping_ = false;
    thread_ = std::thread{[this] { run(); }};
    return true;
  }

  /// Stops the thread and closes every socket. Idempotent.
  void stop() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        stopping_ = true;
      }
      wake();
      thread_.join();
    }
    for (auto& c : conns_)
      close_conn(*c, false);
    conns_.clear();
    for (auto& l : listeners_)
      if (l.fd >= 0)
        ::close(l.fd);
    listeners_.clear();
    for (auto& fd : wake_)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  }

  /// Sets the directed link from -> to.
  void set(int from, int to, link_mode m) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      modes_[{from, to}] = m;
    }
    apply();
  }

  /// Both directions between a and b.
  void cut(int a, int b, link_mode m = link_mode::blackhole) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      modes_[{a, b}] = m;
      modes_[{b, a}] = m;
    }
    apply();
  }

  /// Both directions between `id` and every other node of `nodes`.
  void isolate(int id, const std::vector<int>& nodes, link_mode m = link_mode::blackhole) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto other : nodes)
        if (other != id) {
          modes_[{id, other}] = m;
          modes_[{other, id}] = m;
        }
    }
    apply();
  }

  /// Every link passes again.
  void heal() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& [key, m] : modes_)
        m = link_mode::pass;
    }
    apply();
  }

  link_mode mode(int from, int to) const {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = modes_.find({from, to});
    return i == modes_.end() ? link_mode::pass : i->second;
  }

  link_stats stats(int from, int to) const {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = stats_.find({from, to});
    return i == stats_.end() ? link_stats{} : i->second;
  }

  /// Open connections between a and b (through either proxy port).
  size_t connections(int a, int b) const {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = open_.find(std::make_pair(std::min(a, b), std::max(a, b)));
    return i == open_.end() ? 0 : i->second;
  }

  /// One line per directed link: mode, bytes, connections accepted, resets.
  std::string describe() const {
    std::lock_guard<std::mutex> guard{mtx_};
    std::string out;
    for (auto& [key, m] : modes_) {
      auto s = stats_.find(key);
      auto st = s == stats_.end() ? link_stats{} : s->second;
      out += std::to_string(key.first) + "->" + std::to_string(key.second) + " "
             + to_string(m) + " bytes=" + std::to_string(st.bytes)
             + " accepted=" + std::to_string(st.accepted)
             + " resets=" + std::to_string(st.resets) + "\n";
    }
    return out;
  }

private:
  using link_key = std::pair<int, int>;

  struct listener {
    int fd = -1;
    int from = 0;
    int to = 0;
    uint16_t port = 0;
    in_addr target{};
    uint16_t target_port = 0;
  };

  /// One direction of a forwarded connection.
  struct half {
    int src = -1;
    int dst = -1;
    std::string buf;    ///< read from src, not yet written to dst
    size_t sent = 0;    ///< of buf
    bool eof = false;   ///< src closed its sending side
    bool shut = false;  ///< dst's sending side shut down after eof
  };

  /// A connection accepted on P(from, to): a is node `from`'s socket, b the
  /// one to node `to`. up carries from -> to, down to -> from.
  struct conn {
    int from = 0;
    int to = 0;
    int a = -1;
    int b = -1;
    half up;
    half down;
    /// poll() reported a hang-up or error on a / b while the direction out
    /// of it was blocked: left out of poll() (no busy loop) until it passes.
    bool hup_a = false;
    bool hup_b = false;
    bool dead = false;
  };

  /// Wakes the thread and waits (at most 2 s) until it works with the
  /// modes set so far: once a control call returns, no byte crosses a link
  /// that it blocked and every connection it reset is closed.
  void apply() {
    std::unique_lock<std::mutex> guard{mtx_};
    auto want = ++wanted_gen_;
    if (!thread_.joinable())
      return;
    guard.unlock();
    wake();
    guard.lock();
    applied_cv_.wait_for(guard, std::chrono::seconds{2},
                         [&] { return applied_gen_ >= want || stopping_; });
  }

  void wake() {
    if (wake_[1] >= 0) {
      char c = 'w';
      auto n = ::write(wake_[1], &c, 1);
      (void) n;
    }
  }

  void close_conn(conn& c, bool rst) {
    for (int* fd : {&c.a, &c.b})
      if (*fd >= 0) {
        if (rst) {
          linger lg{1, 0};
          ::setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        ::close(*fd);
        *fd = -1;
      }
    if (!c.dead) {
      c.dead = true;
      auto key = std::make_pair(std::min(c.from, c.to), std::max(c.from, c.to));
      std::lock_guard<std::mutex> guard{mtx_};
      if (open_[key] > 0)
        --open_[key];
    }
  }

  void accept_on(listener& l, const std::map<link_key, link_mode>& modes) {
    for (;;) {
      int fd = ::accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        return; // EAGAIN or a transient error: poll again
      {
        std::lock_guard<std::mutex> guard{mtx_};
        ++stats_[{l.from, l.to}].accepted;
      }
      auto m1 = modes.at({l.from, l.to});
      auto m2 = modes.at({l.to, l.from});
      if (m1 == link_mode::reset || m2 == link_mode::reset) {
        linger lg{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        ::close(fd);
        std::lock_guard<std::mutex> guard{mtx_};
        ++stats_[{l.from, l.to}].resets;
        continue;
      }
      // Blocking connect: immediate on loopback and a LAN (a target that
      // drops SYNs would stall the proxy: not a use case).
      int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr = l.target;
      addr.sin_port = htons(l.target_port);
      if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        if (out >= 0)
          ::close(out);
        linger lg{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        ::close(fd);
        continue;
      }
      ::fcntl(out, F_SETFL, ::fcntl(out, F_GETFL) | O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<conn>();
      c->from = l.from;
      c->to = l.to;
      c->a = fd;
      c->b = out;
      c->up.src = fd;
      c->up.dst = out;
      c->down.src = out;
      c->down.dst = fd;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        ++open_[std::make_pair(std::min(l.from, l.to), std::max(l.from, l.to))];
      }
      conns_.push_back(std::move(c));
    }
  }

  /// Moves bytes of one direction as far as poll said it can. False: the
  /// connection failed (closed with a RST).
  bool pump(half& h, link_key key, bool can_read, bool can_write) {
    if (can_read && !h.eof && h.buf.size() - h.sent < buffer_limit) {
      char tmp[65536];
      auto n = ::recv(h.src, tmp, sizeof(tmp), 0);
      if (n > 0) {
        if (h.sent > 0 && h.sent == h.buf.size()) {
          h.buf.clear();
          h.sent = 0;
        }
        h.buf.append(tmp, static_cast<size_t>(n));
      } else if (n == 0) {
        h.eof = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;
      }
    }
    if (can_write && h.sent < h.buf.size()) {
      auto n = ::send(h.dst, h.buf.data() + h.sent, h.buf.size() - h.sent, MSG_NOSIGNAL);
      if (n > 0) {
        h.sent += static_cast<size_t>(n);
        std::lock_guard<std::mutex> guard{mtx_};
        stats_[key].bytes += static_cast<uint64_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;
      }
      if (h.sent == h.buf.size()) {
        h.buf.clear();
        h.sent = 0;
      }
    }
    if (h.eof && !h.shut && h.sent == h.buf.size()) {
      ::shutdown(h.dst, SHUT_WR);
      h.shut = true;
    }
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<conn*> owners; // per pollfd after the wake pipe and listeners
    for (;;) {
      std::map<link_key, link_mode> modes;
      uint64_t gen = 0;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (stopping_)
          return;
        modes = modes_;
        gen = wanted_gen_;
      }
      // Resets first: close every connection of a reset pair.
      for (auto& c : conns_)
        if (!c->dead
            && (modes[{c->from, c->to}] == link_mode::reset
                || modes[{c->to, c->from}] == link_mode::reset)) {
          close_conn(*c, true);
          std::lock_guard<std::mutex> guard{mtx_};
          ++stats_[{c->from, c->to}].resets;
        }
      // Done both ways: close.
      for (auto& c : conns_)
        if (!c->dead && c->up.shut && c->down.shut)
          close_conn(*c, false);
      conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                  [](auto& c) { return c->dead; }),
                   conns_.end());
      {
        std::lock_guard<std::mutex> guard{mtx_};
        applied_gen_ = gen;
      }
      applied_cv_.notify_all();
      fds.clear();
      owners.clear();
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      for (auto& l : listeners_)
        fds.push_back(pollfd{l.fd, POLLIN, 0});
      for (auto& c : conns_) {
        bool up_pass = modes[{c->from, c->to}] == link_mode::pass;
        bool down_pass = modes[{c->to, c->from}] == link_mode::pass;
        // Shutdowns owed after an eof whose buffer drained.
        if (up_pass && c->up.eof && !c->up.shut)
          pump(c->up, {c->from, c->to}, false, true);
        if (down_pass && c->down.eof && !c->down.shut)
          pump(c->down, {c->to, c->from}, false, true);
        short ea = 0, eb = 0;
        // a: read for up, write for down; b: the other way round.
        if (up_pass && !c->up.eof && c->up.buf.size() - c->up.sent < buffer_limit)
          ea |= POLLIN;
        if (down_pass && c->down.sent < c->down.buf.size())
          ea |= POLLOUT;
        if (down_pass && !c->down.eof && c->down.buf.size() - c->down.sent < buffer_limit)
          eb |= POLLIN;
        if (up_pass && c->up.sent < c->up.buf.size())
          eb |= POLLOUT;
        // A hung-up side whose outgoing direction is blocked stays silent.
        if (up_pass)
          c->hup_a = false;
        if (down_pass)
          c->hup_b = false;
        fds.push_back(pollfd{c->hup_a ? -1 : c->a, ea, 0});
        owners.push_back(c.get());
        fds.push_back(pollfd{c->hup_b ? -1 : c->b, eb, 0});
        owners.push_back(c.get());
      }
      int n = ::poll(fds.data(), fds.size(), 1000);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      if (fds[0].revents & POLLIN) {
        char buf[64];
        while (::read(wake_[0], buf, sizeof(buf)) > 0) {
        }
      }
      for (size_t i = 0; i < listeners_.size(); ++i)
        if (fds[1 + i].revents & POLLIN)
          accept_on(listeners_[i], modes);
      size_t base = 1 + listeners_.size();
      for (size_t k = 0; k < owners.size(); k += 2) {
        auto* c = owners[k];
        if (c->dead)
          continue;
        auto ra = fds[base + k].revents;
        auto rb = fds[base + k + 1].revents;
        bool up_pass = modes[{c->from, c->to}] == link_mode::pass;
        bool down_pass = modes[{c->to, c->from}] == link_mode::pass;
        if ((ra & (POLLHUP | POLLERR)) && !up_pass)
          c->hup_a = true;
        if ((rb & (POLLHUP | POLLERR)) && !down_pass)
          c->hup_b = true;
        bool a_in = up_pass && (ra & (POLLIN | POLLHUP | POLLERR));
        bool a_out = ra & (POLLOUT | POLLERR);
        bool b_in = down_pass && (rb & (POLLIN | POLLHUP | POLLERR));
        bool b_out = rb & (POLLOUT | POLLERR);
        bool ok = true;
        if (up_pass)
          ok = pump(c->up, {c->from, c->to}, a_in, b_out);
        if (ok && down_pass)
          ok = pump(c->down, {c->to, c->from}, b_in, a_out);
        // A side that hung up after its eof was seen is gone for good (it
        // reset or closed both ways): nothing more can reach it.
        if (ok && up_pass && c->up.eof && (ra & (POLLHUP | POLLERR)))
          ok = false;
        if (ok && down_pass && c->down.eof && (rb & (POLLHUP | POLLERR)))
          ok = false;
        if (!ok)
          close_conn(*c, true);
      }
    }
  }

  std::vector<listener> listeners_;
  std::vector<std::unique_ptr<conn>> conns_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  mutable std::mutex mtx_;
  std::condition_variable applied_cv_;
  bool stopping_ = false;
  uint64_t wanted_gen_ = 0;
  uint64_t applied_gen_ = 0;
  std::map<link_key, link_mode> modes_;
  std::map<link_key, link_stats> stats_;
  std::map<std::pair<int, int>, size_t> open_;
};

} // namespace ferry::test
