// ferryd: one Ferry broker node.
//
//   ferryd [--data-dir DIR] [--host H] [--port P] [--node-id N]
//          [--config FILE] [--log-level L] [--log-file F] ...
//
// The node's broker_actor is published on H:P (CAF port, default 9092; 0
// picks a free port). Once the stored topics are recovered and the port is
// open, ferryd prints exactly one line to stdout and flushes it:
//
//   listening on HOST:PORT
//
// Tests and scripts wait for that line to learn the port. Logs go to stderr.
// SIGTERM or SIGINT: the node stops every partition replica (flush,
// checkpoint, close), then ferryd exits 0. A second signal exits at once
// (1). A node that ends on its own (e.g. its metadata store failed) exits 1.
// Exit codes: 0 clean shutdown, 1 runtime failure (port taken, data dir in
// use or unusable), CLI11's codes (>= 100) for bad options.

#include "actors/interfaces.hpp"
#include "actors/node.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

namespace {

constexpr const char* ferry_version = "0.1.0";

// -- signals: the handler only writes a byte to a self-pipe -------------------

int signal_pipe[2] = {-1, -1};
std::atomic<int> last_signal{0};

extern "C" void on_signal(int sig) {
  auto saved = errno;
  last_signal.store(sig);
  char c = 's';
  auto n = ::write(signal_pipe[1], &c, 1);
  (void) n;
  errno = saved;
}

bool install_signal_handlers() {
  if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return false;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(SIGTERM, &sa, nullptr) != 0
      || ::sigaction(SIGINT, &sa, nullptr) != 0)
    return false;
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}

/// Waits for a byte on the self-pipe: 's' (signal) or 'd' (node down).
/// Returns 0 on timeout.
char wait_event(std::chrono::milliseconds timeout) {
  pollfd pfd{signal_pipe[0], POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return 0;
    auto r = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (r > 0) {
      char c = 0;
      if (::read(signal_pipe[0], &c, 1) == 1)
        return c;
    }
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

// -- the data dir --------------------------------------------------------------

/// Holds an exclusive flock on <data-dir>/ferryd.lock for the process's
/// lifetime, so two ferryds never share a data dir.
bool lock_data_dir(const std::filesystem::path& dir, std::string& why) {
  auto path = dir / "ferryd.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = "cannot open " + path.string() + ": " + std::strerror(errno);
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    auto n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
      pid.pop_back();
    why = "data dir " + dir.string() + " is in use by another ferryd (pid "
          + pid + ")";
    ::close(fd);
    return false;
  }
  auto text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    auto n = ::pwrite(fd, text.data(), text.size(), 0);
    (void) n;
  }
  // fd stays open (and locked) until the process exits.
  return true;
}

/// The cluster id of this data dir, created on first start.
caf::expected<std::string> cluster_id(ferry::metadata_store& store) {
  constexpr const char* db = "cluster.node";
  constexpr const char* key = "cluster_id";
  auto id = store.get(db, key);
  if (id)
    return *id;
  if (!ferry::is(id.error(), ferry::ec::not_found))
    return std::move(id.error());
  std::random_device rd;
  std::string out;
  static constexpr char hex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    auto b = rd() & 0xff;
    out += hex[b >> 4];
    out += hex[b & 0xf];
  }
  if (auto err = store.put(db, key, out))
    return err;
  return out;
}

struct options {
  std::string data_dir = "./data";
  std::string host = "127.0.0.1";
  uint16_t port = 9092;
  int32_t node_id = 0;
  std::string log_level = "info";
  std::string log_file;
  int shutdown_timeout_s = 30;
  int startup_timeout_s = 600;
  int status_timeout_ms = 2000;
};

} // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  options opt;
  CLI::App app{"ferryd: one Ferry broker node (a cluster of one without "
               "peers).\nPrints \"listening on HOST:PORT\" to stdout once "
               "ready; SIGTERM/SIGINT shut it down cleanly.",
               "ferryd"};
  app.option_defaults()->always_capture_default();
  app.set_config("--config", "",
                 "read options from an INI or TOML file, keys as the long "
                 "option names (data-dir = \"/var/lib/ferry\"); command-line "
                 "options win");
  app.add_option("--data-dir,-d", opt.data_dir,
                 "data directory (topics, LMDB metadata)");
  app.add_option("--host", opt.host, "address to listen on");
  app.add_option("--port,-p", opt.port,
                 "CAF port for clients (0 picks a free one)")
    ->check(CLI::Range(0, 65535));
  app.add_option("--node-id", opt.node_id, "this node's id")
    ->check(CLI::NonNegativeNumber);
  app.add_option("--log-level", opt.log_level,
                 "trace, debug, info, warn, error, critical or off")
    ->check(CLI::IsMember({"trace", "debug", "info", "warn", "warning",
                           "error", "critical", "off"},
                          CLI::ignore_case));
  app.add_option("--log-file", opt.log_file,
                 "also append log lines to this file");
  app.add_option("--shutdown-timeout", opt.shutdown_timeout_s,
                 "seconds a clean shutdown may take before ferryd gives up")
    ->check(CLI::Range(1, 3600));
  app.add_option("--startup-timeout", opt.startup_timeout_s,
                 "seconds log recovery may take before the port opens")
    ->check(CLI::Range(1, 86400));
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (show_version) {
    std::printf("ferryd %s\n", ferry_version);
    return 0;
  }
  ferry::log::options lo;
  lo.min_level = ferry::log::parse_level(opt.log_level)
                   .value_or(ferry::log::level::info);
  lo.file = opt.log_file;
  if (auto err = ferry::log::init(lo); !err.empty())
    ferry::log::warn("{}", err);
  if (!install_signal_handlers()) {
    ferry::log::critical("cannot install signal handlers: {}",
                         std::strerror(errno));
    return 1;
  }
  namespace fs = std::filesystem;
  fs::path data_dir = opt.data_dir;
  {
    std::error_code ec;
    fs::create_directories(data_dir, ec);
    if (ec) {
      ferry::log::critical("cannot create data dir {}: {}", data_dir.string(),
                           ec.message());
      return 1;
    }
    auto abs = fs::absolute(data_dir, ec);
    if (!ec)
      data_dir = abs.lexically_normal();
  }
  std::string why;
  if (!lock_data_dir(data_dir, why)) {
    ferry::log::critical("{}", why);
    return 1;
  }
  ferry::log::info("ferryd {} starting: node {}, data dir {}", ferry_version,
                   opt.node_id, data_dir.string());
  ferry::log::debug("options: host {}, port {}, log level {}, log file \"{}\", "
                    "shutdown timeout {} s, startup timeout {} s",
                    opt.host, opt.port, opt.log_level, opt.log_file,
                    opt.shutdown_timeout_s, opt.startup_timeout_s);
  auto store = ferry::metadata_store::open(data_dir / "meta");
  if (!store) {
    ferry::log::critical("cannot open the metadata store in {}: {}",
                         (data_dir / "meta").string(), store.error());
    return 1;
  }
  std::shared_ptr<ferry::metadata_store> shared_store{std::move(*store)};
  auto cid = cluster_id(*shared_store);
  if (!cid) {
    ferry::log::critical("cannot read the cluster id: {}", cid.error());
    return 1;
  }
  int exit_code = 0;
  {
    caf::actor_system_config cfg;
    ferry::register_types(cfg);
    cfg.load<caf::io::middleman>();
    // Without heartbeats a silent peer is never noticed (see STACK.md).
    cfg.set("middleman.heartbeat-interval", caf::timespan{1s});
    cfg.set("middleman.connection-timeout", caf::timespan{3s});
    caf::actor_system sys{cfg};
    ferry::node_config nc;
    nc.node_id = opt.node_id;
    nc.data_dir = data_dir;
    nc.store = shared_store;
    nc.cluster_id = *cid;
    nc.host = opt.host;
    nc.shutdown_timeout = std::chrono::seconds{opt.shutdown_timeout_s};
    auto port_slot = nc.port;
    auto node = sys.spawn(ferry::node, std::move(nc));
    node->attach_functor([](const caf::error&) {
      char c = 'd';
      auto n = ::write(signal_pipe[1], &c, 1);
      (void) n;
    });
    auto stop_node = [&](std::chrono::seconds timeout) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      auto deadline = std::chrono::steady_clock::now() + timeout;
      for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
        auto ev = wait_event(std::max(left, 1ms));
        if (ev == 'd')
          return true;
        if (ev == 's') {
          ferry::log::warn("second {}: exiting without waiting",
                           signal_name(last_signal.load()));
          ferry::log::flush();
          std::_Exit(1);
        }
        if (ev == 0)
          return false;
      }
    };
    // Wait until the recovered topics are served: a cluster describe asks
    // every replica for its status, which it answers once its log is open.
    {
      caf::scoped_actor self{sys};
      bool ok = false;
      self
        ->request(node, std::chrono::seconds{opt.startup_timeout_s},
                  ferry::cluster_atom_v)
        .receive(
          [&](const ferry::cluster_description& cd) {
            ok = true;
            size_t parts = 0, online = 0;
            for (auto& t : cd.topics)
              for (auto& p : t.partitions) {
                ++parts;
                if (p.online)
                  ++online;
              }
            ferry::log::info("recovered {} topics, {} of {} partitions online",
                             cd.topics.size(), online, parts);
          },
          [&](const caf::error& err) {
            ferry::log::critical("startup failed: {}", sys.render(err));
          });
      if (!ok) {
        stop_node(std::chrono::seconds{opt.shutdown_timeout_s});
        exit_code = 1;
      }
    }
    if (exit_code == 0) {
      auto actual = sys.middleman().publish(node, opt.port, opt.host.c_str(),
                                            true);
      if (!actual) {
        ferry::log::critical("cannot listen on {}:{}: {}", opt.host, opt.port,
                             sys.render(actual.error()));
        std::fprintf(stderr, "ferryd: cannot listen on %s:%u: %s\n",
                     opt.host.c_str(), static_cast<unsigned>(opt.port),
                     sys.render(actual.error()).c_str());
        stop_node(std::chrono::seconds{opt.shutdown_timeout_s});
        exit_code = 1;
      } else {
        port_slot->store(*actual);
        ferry::log::info("ferryd {} serving on {}:{} (cluster {})",
                         ferry_version, opt.host, *actual, *cid);
        // The stable line tests and scripts wait for.
        std::printf("listening on %s:%u\n", opt.host.c_str(),
                    static_cast<unsigned>(*actual));
        std::fflush(stdout);
        char ev = 0;
        while ((ev = wait_event(1h)) == 0) {
          // keep waiting
        }
        if (ev == 's') {
          ferry::log::info("received {}, shutting down",
                           signal_name(last_signal.load()));
          if (!stop_node(std::chrono::seconds{opt.shutdown_timeout_s} + 5s)) {
            ferry::log::critical("shutdown did not finish in time");
            ferry::log::flush();
            std::_Exit(1);
          }
        } else {
          ferry::log::critical("the node terminated unexpectedly");
          exit_code = 1;
        }
      }
    }
    // The actor system waits for every actor; the node has stopped its
    // children, so this is quick. A watchdog keeps it bounded anyway.
    std::thread watchdog{[timeout = opt.shutdown_timeout_s] {
      std::this_thread::sleep_for(std::chrono::seconds{timeout});
      ferry::log::critical("actor system did not stop in time");
      ferry::log::flush();
      std::_Exit(1);
    }};
    watchdog.detach();
    node = nullptr;
  }
  shared_store.reset();
  ferry::log::info("ferryd stopped");
  ferry::log::flush();
  return exit_code;
}
