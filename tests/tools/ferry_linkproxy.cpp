// ferry-linkproxy: the link proxy of the partition tests
// (tests/integration/link_proxy.hpp) as a program, to cut the links of a
// local cluster by hand.
//
//   ferry-linkproxy --nodes 1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094
//                   [--listen-base 19000]
//
// For every ordered pair of nodes (i, j) it listens on a loopback port
// (--listen-base + an index, or free ports) that forwards to node j, prints
//   node I: --voters 1@127.0.0.1:P,2@...,3@...
// per node (start ferryd --node-id I with exactly that list: its own entry
// is its real endpoint, the others are proxy ports), then "ready", and reads
// commands from stdin, one per line:
//   set FROM TO pass|blackhole|reset    one direction (bytes FROM -> TO)
//   cut A B [MODE]                      both directions (default blackhole)
//   isolate ID [MODE]                   ID from every other node
//   heal                                everything passes
//   status                              mode and counters per direction
//   quit                                (also end of input, SIGINT, SIGTERM)
// Each command answers "ok" (once it is in effect) or "error: WHY". Clients
// keep using the nodes' real endpoints.

#include "../integration/link_proxy.hpp"

#include <poll.h>
#include <signal.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using ferry::test::link_mode;
using ferry::test::link_proxy;

struct node_ep {
  int id = 0;
  std::string host;
  uint16_t port = 0;
};

std::optional<int> parse_int(const std::string& s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size())
    return std::nullopt;
  return v;
}

/// "ID@HOST:PORT,..." or why not.
std::optional<std::vector<node_ep>> parse_nodes(const std::string& text, std::string& why) {
  std::vector<node_ep> out;
  std::stringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) {
    auto at = item.find('@');
    auto colon = item.rfind(':');
    if (at == std::string::npos || colon == std::string::npos || colon < at) {
      why = "'" + item + "': expected ID@HOST:PORT";
      return std::nullopt;
    }
    auto id = parse_int(item.substr(0, at));
    auto port = parse_int(item.substr(colon + 1));
    if (!id || *id < 0 || !port || *port <= 0 || *port > 65535) {
      why = "'" + item + "': bad id or port";
      return std::nullopt;
    }
    for (auto& n : out)
      if (n.id == *id) {
        why = "node " + std::to_string(*id) + " given twice";
        return std::nullopt;
      }
    out.push_back(node_ep{*id, item.substr(at + 1, colon - at - 1), static_cast<uint16_t>(*port)});
  }
  if (out.size() < 2) {
    why = "at least two nodes are needed";
    return std::nullopt;
  }
  return out;
}

std::optional<link_mode> parse_mode(const std::string& s) {
  if (s == "pass")
    return link_mode::pass;
  if (s == "blackhole")
    return link_mode::blackhole;
  if (s == "reset")
    return link_mode::reset;
  return std::nullopt;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "ferry-linkproxy: %s\n"
               "usage: ferry-linkproxy --nodes ID@HOST:PORT,ID@HOST:PORT[,...] "
               "[--listen-base PORT]\n",
               why);
  return 2;
}

/// One command line; "ok", "error: ...", or "" for quit.
std::string run(link_proxy& net, const std::vector<node_ep>& nodes, const std::string& line,
                bool& quit) {
  std::stringstream in{line};
  std::vector<std::string> w;
  for (std::string x; in >> x;)
    w.push_back(x);
  if (w.empty())
    return "";
  auto known = [&](const std::string& s) -> std::optional<int> {
    auto id = parse_int(s);
    if (!id)
      return std::nullopt;
    for (auto& n : nodes)
      if (n.id == *id)
        return id;
    return std::nullopt;
  };
  std::vector<int> ids;
  for (auto& n : nodes)
    ids.push_back(n.id);
  auto& cmd = w[0];
  if (cmd == "quit" || cmd == "exit") {
    quit = true;
    return "ok";
  }
  if (cmd == "heal" && w.size() == 1) {
    net.heal();
    return "ok";
  }
  if (cmd == "status" && w.size() == 1)
    return net.describe() + "ok";
  if (cmd == "set" && w.size() == 4) {
    auto a = known(w[1]), b = known(w[2]);
    auto m = parse_mode(w[3]);
    if (!a || !b || *a == *b)
      return "error: set needs two different known node ids";
    if (!m)
      return "error: mode must be pass, blackhole or reset";
    net.set(*a, *b, *m);
    return "ok";
  }
  if ((cmd == "cut" && (w.size() == 3 || w.size() == 4))
      || (cmd == "isolate" && (w.size() == 2 || w.size() == 3))) {
    bool is_cut = cmd == "cut";
    auto mode_word = w.size() == (is_cut ? 4u : 3u) ? w.back() : std::string{"blackhole"};
    auto m = parse_mode(mode_word);
    if (!m)
      return "error: mode must be pass, blackhole or reset";
    auto a = known(w[1]);
    if (!a)
      return "error: unknown node id " + w[1];
    if (!is_cut) {
      net.isolate(*a, ids, *m);
      return "ok";
    }
    auto b = known(w[2]);
    if (!b || *a == *b)
      return "error: cut needs two different known node ids";
    net.cut(*a, *b, *m);
    return "ok";
  }
  return "error: unknown command '" + line
         + "' (set FROM TO MODE | cut A B [MODE] | isolate ID [MODE] | heal | status | quit)";
}

volatile sig_atomic_t stop_signal = 0;

} // namespace

int main(int argc, char** argv) {
  std::string nodes_text;
  int listen_base = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--nodes" || a == "--listen-base") && i + 1 < argc) {
      std::string v = argv[++i];
      if (a == "--nodes") {
        nodes_text = v;
      } else {
        auto p = parse_int(v);
        if (!p || *p <= 0 || *p > 65535)
          return usage("--listen-base must be a port");
        listen_base = *p;
      }
    } else if (a == "-h" || a == "--help") {
      usage("a fault-injecting proxy between the nodes of a Ferry cluster");
      return 0;
    } else {
      return usage(("unexpected argument " + a).c_str());
    }
  }
  if (nodes_text.empty())
    return usage("--nodes is required");
  std::string why;
  auto nodes = parse_nodes(nodes_text, why);
  if (!nodes)
    return usage(("--nodes: " + why).c_str());
  link_proxy net;
  int index = 0;
  for (auto& from : *nodes)
    for (auto& to : *nodes) {
      if (from.id == to.id)
        continue;
      auto listen = listen_base > 0 ? listen_base + index : 0;
      ++index;
      if (listen > 65535)
        return usage("--listen-base too high for this many links");
      if (net.add(from.id, to.id, to.port, &why, to.host, static_cast<uint16_t>(listen)) == 0) {
        std::fprintf(stderr, "ferry-linkproxy: link %d -> %d: %s\n", from.id, to.id,
                     why.c_str());
        return 1;
      }
    }
  if (!net.start(&why)) {
    std::fprintf(stderr, "ferry-linkproxy: %s\n", why.c_str());
    return 1;
  }
  for (auto& me : *nodes) {
    std::string voters;
    for (auto& other : *nodes) {
      auto ep = other.id == me.id
                  ? other.host + ":" + std::to_string(other.port)
                  : "127.0.0.1:" + std::to_string(net.port(me.id, other.id));
      voters += (voters.empty() ? "" : ",") + std::to_string(other.id) + "@" + ep;
    }
    std::cout << "node " << me.id << ": --voters " << voters << "\n";
  }
  std::cout << "ready" << std::endl;
  struct sigaction sa{};
  sa.sa_handler = [](int) { stop_signal = 1; };
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::string buf;
  bool quit = false;
  while (!quit && !stop_signal) {
    pollfd pfd{0, POLLIN, 0};
    if (::poll(&pfd, 1, 500) <= 0)
      continue;
    char chunk[4096];
    auto n = ::read(0, chunk, sizeof(chunk));
    if (n <= 0)
      break;
    buf.append(chunk, static_cast<size_t>(n));
    for (auto nl = buf.find('\n'); nl != std::string::npos && !quit; nl = buf.find('\n')) {
      auto line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      auto answer = run(net, *nodes, line, quit);
      if (!answer.empty())
        std::cout << answer << std::endl;
    }
  }
  net.stop();
  return 0;
}
