// ferryd: one Ferry broker node.
//
//   ferryd [--data-dir DIR] [--host H] [--port P] [--metrics-port M]
//          [--http-port A] [--node-id N] [--config FILE] [--log-level L]
//          [--log-file F] ...
//
// The node's broker_actor is published on H:P (CAF port, default 9092; 0
// picks a free port). Prometheus metrics are served at
// http://H:M/metrics (default 9464; 0 picks a free port; -1 disables them);
// the metrics port is opened first, so a taken one fails before recovery.
// The HTTP API (actors/http/http_gateway.hpp) listens on H:A (default 8080; 0
// picks a free port; -1 disables it); it is bound before recovery too and
// serves once the node is published.
// Once the stored topics are recovered and the port is open, ferryd prints
// to stdout and flushes:
//
//   listening on HOST:PORT
//   metrics on HOST:METRICS_PORT      (only with metrics enabled)
//   http on HOST:HTTP_PORT            (only with the HTTP API enabled)
//   kafka on HOST:KAFKA_PORT          (only with --kafka-port)
//
// Tests and scripts wait for those lines to learn the ports. Logs go to
// stderr.
// TLS: --tls-cert, --tls-key and --tls-ca (all three, checked before
// anything starts) turn TLS on for every port: the CAF port speaks mutual
// TLS, for clients and node-to-node links alike (actors/client/tls.hpp);
// the HTTP API and the metrics port speak https, requiring a client
// certificate from the CA too unless --tls-client-auth requested (metrics
// are then served by the HTTP gateway's metrics mode, not civetweb).
// The Kafka listener (--kafka-port) speaks TLS too, asking for a client
// certificate as the HTTP API does.
// ferryd serves checked copies of the files from <data-dir>/tls/; SIGHUP
// checks the files again and swaps the copies if they pass (new
// connections use them; existing ones keep theirs), else keeps the old
// ones and logs why.
// Listening on an address other than loopback needs TLS with client
// certificates required on every port, or --insecure.
// Users (issue 16): --auth scram makes the HTTP API require HTTP Basic
// credentials (or a bearer token from POST /v1/tokens, at most
// --http-token-max-ttl seconds long) of a user in the metadata quorum and
// check every request
// against the ACLs (actors/http/http_gateway.hpp); --superusers names the
// users no ACL restricts. It needs TLS (passwords never cross the network
// in the clear). On the CAF port a client logs in in-band (SCRAM-SHA-256)
// and every request carries its session token, checked against the same
// ACLs (actors/server/node_auth.cpp); the nodes and the HTTP gateway use the
// cluster credential derived from --cluster-secret-file (required with
// --auth scram), as does ferryctl --cluster-secret-file (how the first user
// is created). Kafka clients log in with SASL PLAIN or SCRAM-SHA-256 as the
// same users, checked against the same ACLs (actors/kafka/kafka_sasl.cpp).
// Denied requests and admin changes are written to
// --audit-log (default <data-dir>/audit.log with --auth scram).
// Peer ports (--peer-port, actors/server/front_door.hpp): the node's actors
// live in an actor system that listens only there, for the other nodes
// (with TLS: --peer-tls-ca, the nodes' CA); clients are served from a
// second actor system on --port whose only actor is a front door that
// passes their requests to the node. A single node (no --voters) and
// --auth scram always split the two: a single node keeps the node's system
// unpublished, a cluster with --auth scram needs --peer-port.
// SIGTERM or SIGINT: the node stops every partition replica (flush,
// checkpoint, close), then ferryd exits 0. A second signal exits at once
// (1). A node that ends on its own (e.g. its metadata store failed) exits 1.
// Exit codes: 0 clean shutdown, 1 runtime failure (port taken, data dir in
// use or unusable, metrics port taken), CLI11's codes (>= 100) for bad
// options.

#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "actors/http/http_gateway.hpp"
#include "actors/kafka/kafka_listener.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/server/front_door.hpp"
#include "actors/server/node.hpp"
#include "broker/audit_log.hpp"
#include "broker/cached_file_system.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/metadata_writer.hpp"
#include "broker/raft_core.hpp"
#include "broker/security.hpp"
#include "broker/node_journal.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/sync_pool.hpp"
#include "broker/dir_remover.hpp"
#include "metrics/exposer.hpp"
#include "metrics/metrics.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <CLI/CLI.hpp>

#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
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
  char c = sig == SIGHUP ? 'h' : 's';
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
      || ::sigaction(SIGINT, &sa, nullptr) != 0
      || ::sigaction(SIGHUP, &sa, nullptr) != 0)
    return false;
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}

/// Waits for a byte on the self-pipe: 's' (SIGTERM/SIGINT), 'h' (SIGHUP)
/// or 'd' (node down).
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

// -- metrics -------------------------------------------------------------------

/// Opens and closes a connection to host:port (best effort, never blocks):
/// wakes civetweb's listener, which otherwise notices a stop only at the end
/// of its 2 s poll quantum.
void poke(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  auto target = host == "0.0.0.0" ? std::string{"127.0.0.1"}
                : host == "::"    ? std::string{"::1"}
                                  : host;
  addrinfo* res = nullptr;
  if (::getaddrinfo(target.c_str(), std::to_string(port).c_str(), &hints,
                    &res)
      != 0)
    return;
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family,
                      ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                      ai->ai_protocol);
    if (fd < 0)
      continue;
    auto r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    (void) r;
    ::close(fd);
  }
  ::freeaddrinfo(res);
}

/// Destroys the exposer, poking its listener until it is gone (see poke()).
void stop_exposer(std::unique_ptr<ferry::metrics::exposer> ex,
                  const std::string& host) {
  using namespace std::chrono_literals;
  auto port = ex->port();
  std::atomic<bool> done{false};
  std::thread waker{[&] {
    while (!done.load()) {
      poke(host, port);
      std::this_thread::sleep_for(50ms);
    }
  }};
  ex.reset();
  done = true;
  waker.join();
}

// -- TLS ---------------------------------------------------------------------

/// Copies `from` to `to` through a temp file and a rename, so CAF (which
/// reads the files for every new connection) never sees a half-written one.
bool copy_atomically(const std::filesystem::path& from, const std::filesystem::path& to,
                     std::string& why) {
  std::ifstream in{from, std::ios::binary};
  if (!in) {
    why = "cannot read " + from.string() + ": " + std::strerror(errno);
    return false;
  }
  std::string bytes{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  auto tmp = to;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = "cannot write " + tmp.string() + ": " + std::strerror(errno);
    return false;
  }
  auto n = ::write(fd, bytes.data(), bytes.size());
  bool ok = n == static_cast<ssize_t>(bytes.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), to.c_str()) != 0) {
    why = "cannot write " + to.string() + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

/// Checks the operator's TLS files and installs copies of them under
/// `dir`; `served` names the copies. On failure nothing is replaced.
caf::error install_tls(const ferry::tls_settings& given, const std::filesystem::path& dir,
                       ferry::tls_settings& served,
                       ferry::tls_role role = ferry::tls_role::node) {
  if (auto err = ferry::check_tls(given, role))
    return err;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return ferry::make_error(ferry::ec::invalid_config,
                             "cannot create " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  ferry::tls_settings copies{(dir / "certificate.pem").string(), (dir / "key.pem").string(),
                             (dir / "ca.pem").string()};
  std::string why;
  if (!copy_atomically(given.certificate, copies.certificate, why)
      || !copy_atomically(given.key, copies.key, why)
      || !copy_atomically(given.ca, copies.ca, why))
    return ferry::make_error(ferry::ec::invalid_config, why);
  served = copies;
  return {};
}

/// Loopback addresses: 127.0.0.0/8, ::1, localhost.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
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
  /// Empty: --host.
  std::string advertised_host;
  uint16_t port = 9092;
  /// -1: none (peers use --port); else the port of the node's own actor
  /// system, where peers dial it (0 picks a free one).
  int peer_port = -1;
  /// With TLS and a peer port: the CA the peers' certificates chain to,
  /// and this node's certificate and key there (empty: --tls-cert/-key).
  std::string peer_tls_ca;
  std::string peer_tls_cert;
  std::string peer_tls_key;
  /// -1: no metrics.
  int metrics_port = 9464;
  /// -1: no HTTP API.
  int http_port = 8080;
  /// -1: no Kafka listener (the default).
  int kafka_port = -1;
  /// Empty: the advertised host.
  std::string kafka_advertised_host;
  int32_t node_id = 0;
  std::string voters;
  std::string log_level = "info";
  std::string log_file;
  int shutdown_timeout_s = 30;
  int startup_timeout_s = 600;
  int status_timeout_ms = 2000;
  /// replica.lag.time.max.ms (cluster mode).
  int64_t replica_lag_max_ms = 10000;
  int64_t replica_fetch_wait_ms = 5000;
  /// How long a produce may wait for its acks.
  int64_t produce_ack_timeout_ms = 20000;
  /// Threads of the node's sync pool; 0: sync_pool::default_threads.
  int io_threads = 0;
  /// log.cleaner.io.max.bytes.per.second; 0: unlimited.
  uint64_t cleaner_io_max_bytes_per_second = 0;
  /// log.cleaner.dedupe.buffer.size, in MiB.
  uint64_t cleaner_dedupe_buffer_mb = 128;
  std::string fetch_sessions = "auto";
  int fetch_sessions_min_partitions = 1000;
  std::string journal = "auto";
  int journal_min_partitions = 128;
  int journal_file_mb = 1024;
  int journal_defer_kib = 64;
  /// CAF's scheduler policy: "sharing" or "stealing".
  std::string scheduler = "sharing";
  /// Segment files open at once; 0: cached_file_system::default_max_open.
  int64_t max_open_files = 0;
  ferry::tls_settings tls;
  /// HTTP API and metrics with TLS: "required" or "requested".
  std::string tls_client_auth = "required";
  bool insecure = false;
  /// "none" or "scram".
  std::string auth = "none";
  std::vector<std::string> superusers;
  std::string audit_log;
  int64_t http_token_max_ttl = 86400;
  /// With --auth scram: the nodes' shared secret and its credential.
  std::string cluster_secret_file;
  std::string cluster_credential;
  std::string operator_credential;
  int64_t session_ttl = 3600;
  int64_t login_lockout_ms = 1000;
};

/// What both of ferryd's actor systems share (the node's, and with a front
/// door the clients'): Ferry's message types, the middleman with heartbeats
/// (without them a silent peer is never noticed, see STACK.md), TLS when
/// `tls` names a certificate, and `threads` scheduler workers of the
/// --scheduler policy.
void configure_system(caf::actor_system_config& cfg, const options& opt,
                      const ferry::tls_settings& tls, int threads) {
  ferry::register_types(cfg);
  cfg.load<caf::io::middleman>();
  if (!tls.certificate.empty())
    ferry::configure_tls(cfg, tls);
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds{1}});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds{3}});
  cfg.set("scheduler.max-threads", threads);
  // (The poll setting applies to --scheduler stealing; the default,
  // sharing, has workers wait on one queue's condition variable.)
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  cfg.set("scheduler.policy", caf::atom_from_string(opt.scheduler));
}

} // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  options opt;
  CLI::App app{"ferryd: one Ferry broker node (a cluster of one without "
               "peers).\nPrints \"listening on HOST:PORT\" (then \"metrics "
               "on HOST:METRICS_PORT\" unless metrics are off) to stdout once "
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
  app.add_option("--advertised-host", opt.advertised_host,
                 "address clients and other nodes reach this node at, "
                 "registered with the cluster and shown by cluster describe "
                 "(Kafka's advertised.listeners); empty: --host. Needed "
                 "when --host is 0.0.0.0 or a NAT sits in between: clients "
                 "send to partition leaders at this address");
  app.add_option("--port,-p", opt.port,
                 "CAF port for clients (0 picks a free one)")
    ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-port", opt.metrics_port,
                 "HTTP port of the Prometheus metrics (/metrics) on --host "
                 "(0 picks a free one, -1 disables metrics)")
    ->check(CLI::Range(-1, 65535));
  app.add_option("--http-port", opt.http_port,
                 "port of the HTTP API (/v1/...) on --host (0 picks a free "
                 "one, -1 disables it)")
    ->check(CLI::Range(-1, 65535));
  app.add_option("--kafka-port", opt.kafka_port,
                 "port of the Kafka wire-protocol listener on --host, for "
                 "Kafka clients (kcat, librdkafka, kafka-python, ...); 0 "
                 "picks a free one, -1 (the default) turns it off. The CAF "
                 "port has Kafka's 9092, so give this another, e.g. 29092 "
                 "(deploy/local-cluster.sh gives node i 19390+i). With the TLS "
                 "flags it speaks TLS (Kafka's SSL, asking for a client "
                 "certificate as --tls-client-auth says); with --auth scram "
                 "clients log in with SASL PLAIN or SCRAM-SHA-256 (SASL_SSL) as "
                 "the same users, checked against the same ACLs")
    ->check(CLI::Range(-1, 65535));
  app.add_option("--kafka-advertised-host", opt.kafka_advertised_host,
                 "host Kafka clients reach this node's Kafka listener at, "
                 "listed in every node's Kafka Metadata answer; empty: "
                 "--advertised-host");
  auto* node_id_opt = app.add_option("--node-id", opt.node_id, "this node's id")
    ->check(CLI::NonNegativeNumber);
  auto* port_opt = app.get_option("--port");
  app.add_option("--peer-port", opt.peer_port,
                 "a port of its own for the other nodes (0 picks a free one): "
                 "the node's actors then live in an actor system that only "
                 "peers connect to, and --port serves clients from a second "
                 "one through a front door that passes client requests on "
                 "(CAF lets anyone on a connection address every actor of its "
                 "system). The voters' entries (--voters) name peer ports; "
                 "with TLS it needs --peer-tls-ca")
    ->check(CLI::Range(0, 65535));
  app.add_option("--peer-tls-ca", opt.peer_tls_ca,
                 "with --peer-port and TLS: PEM CA certificates the peers' "
                 "certificates must chain to (the node CA; this node's peer "
                 "certificate must chain to it too). Give clients certificates "
                 "from another CA (--tls-ca): then no client certificate opens the "
                 "peer port");
  app.add_option("--peer-tls-cert", opt.peer_tls_cert,
                 "with --peer-tls-ca: this node's PEM certificate on the peer port "
                 "and towards its peers (default: --tls-cert)");
  app.add_option("--peer-tls-key", opt.peer_tls_key,
                 "the PEM private key of --peer-tls-cert (default: --tls-key)");
  app.add_option("--voters", opt.voters,
                 "cluster mode: every voter of the Raft metadata quorum as "
                 "id@host:port (its CAF port), comma-separated, e.g. "
                 "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103; this "
                 "node's entry gives its --port unless set. A --node-id not "
                 "in the list starts a broker-only node (not a voter: it "
                 "follows the metadata log, registers and hosts replicas). "
                 "Empty: a single node, a Raft quorum of one");
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
  app.add_option("--replica-lag-max-ms", opt.replica_lag_max_ms,
                 "cluster mode (replica.lag.time.max.ms): a follower not "
                 "caught up with its leader for this long leaves the ISR, "
                 "so acks=all stops waiting for it; it rejoins once caught "
                 "up")
    ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  app.add_option("--replica-fetch-wait-ms", opt.replica_fetch_wait_ms,
                 "cluster mode (replica.fetch.wait.max.ms): how long a "
                 "follower's fetch waits at its leader when there is nothing "
                 "new; new data answers it at once. Each follower replica "
                 "long-polls on its own, so an idle follower costs a round "
                 "trip per wait (Kafka's default, 500 ms, made an idle "
                 "3-node cluster with 3,000 partitions use ~38% of a core "
                 "per node)")
    ->check(CLI::Range(int64_t{10}, int64_t{600000}));
  app.add_option("--produce-ack-timeout-ms", opt.produce_ack_timeout_ms,
                 "a produce still waiting for its acks after this long (acks=all: "
                 "the in-sync replicas; acks=1: the flush) is answered "
                 "request_timed_out, a retriable error; the batch stays in the "
                 "log and may still commit")
    ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  app.add_option("--fetch-sessions", opt.fetch_sessions,
                 "cluster mode: on (or true) carries the follower fetches to "
                 "one leader node in rounds, one request/response pair per "
                 "round for all partitions (incremental fetch sessions: a "
                 "round holds only new long polls and answers). off (or "
                 "false): one long poll per partition, each its own request. "
                 "auto (default): on for follower replicas spawned while the "
                 "metadata places --fetch-sessions-min-partitions or more "
                 "partition replicas on the node (they keep that until they "
                 "restart): measured ~18% faster at 3,000 partitions on 3 "
                 "nodes, up to a third slower at 3")
    ->check(CLI::IsMember({"auto", "on", "off", "true", "false"}));
  app.add_option("--fetch-sessions-min-partitions",
                 opt.fetch_sessions_min_partitions,
                 "--fetch-sessions auto: the partition replicas the metadata "
                 "must place on the node before new follower replicas fetch "
                 "through sessions")
    ->check(CLI::Range(0, 1000000));
  app.add_option("--journal", opt.journal,
                 "on: every partition's appends also go to one node journal "
                 "(<data-dir>/journal), and one write + fdatasync of it makes a "
                 "round of appends of all partitions durable; segment files are "
                 "synced at checkpoints and the journal is replayed at start. "
                 "off: each partition fdatasyncs its own segment file (syncfs "
                 "for large rounds). auto (default): on once the metadata "
                 "places --journal-min-partitions or more partition replicas "
                 "on the node")
    ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--scheduler", opt.scheduler,
                 "how actors share the worker threads. sharing (default): one "
                 "queue for all workers. stealing: a queue per worker, idle "
                 "workers steal (CAF 0.17's steal walks the victim's whole "
                 "queue: with thousands of partitions busy it took most of "
                 "the node's CPU)")
    ->check(CLI::IsMember({"sharing", "stealing"}));
  app.add_option("--journal-min-partitions", opt.journal_min_partitions,
                 "--journal auto: replicas spawned while the metadata places "
                 "fewer than this many partition replicas on the node sync "
                 "their own files (they keep that until they restart)")
    ->check(CLI::Range(0, 1000000));
  app.add_option("--journal-file-mb", opt.journal_file_mb,
                 "size of a journal file; past it a new file starts and a "
                 "checkpoint (syncfs of the data directory's file system) lets "
                 "the older ones be deleted. Bounds the replay at start")
    ->check(CLI::Range(1, 4096));
  app.add_option("--journal-defer-kib", opt.journal_defer_kib,
                 "a journaled partition keeps up to this many KiB of appended "
                 "data in memory and writes it to its segment file with one "
                 "write on its tick (about once a second), when more does not "
                 "fit, or at a roll or stop; the journal holds it durably "
                 "meanwhile and reads see it. 0: every append is written to "
                 "the segment file at once")
    ->capture_default_str()
    ->check(CLI::Range(0, 16384));
  app.add_option("--cleaner-io-max-bytes-per-second",
                 opt.cleaner_io_max_bytes_per_second,
                 "bytes per second the log cleaner (compaction of topics with "
                 "cleanup.policy=compact) may read plus write, over all "
                 "partitions of this node; 0: unlimited")
    ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40));
  app.add_option("--cleaner-dedupe-buffer-mb", opt.cleaner_dedupe_buffer_mb,
                 "memory for the log cleaner's key map per clean, in MiB; a "
                 "partition with more distinct keys is cleaned in steps")
    ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  app.add_option("--io-threads", opt.io_threads,
                 "threads that run the group commit's fdatasync for every "
                 "partition of this node (0: 4 per core, at least 4); "
                 "partition replicas themselves run on the actor scheduler")
    ->check(CLI::Range(0, 256));
  app.add_option("--max-open-files", opt.max_open_files,
                 "segment files of all partitions open at once; beyond it the "
                 "least recently used idle one is closed and reopened when "
                 "next needed (0: the open-file limit, raised to its hard "
                 "maximum at start, minus 1024 for sockets and LMDB, at "
                 "most three quarters of it)")
    ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  bool show_version = false;
  app.add_option("--tls-cert", opt.tls.certificate,
                 "PEM certificate (chain) of this node: with --tls-key and --tls-ca the "
                 "CAF port speaks mutual TLS (clients and peers need a certificate "
                 "from --tls-ca); also FERRY_TLS_CERT");
  app.add_option("--tls-key", opt.tls.key,
                 "PEM private key of --tls-cert (unencrypted); also FERRY_TLS_KEY");
  app.add_option("--tls-ca", opt.tls.ca,
                 "PEM CA certificates that clients' and peers' certificates must chain "
                 "to; also FERRY_TLS_CA");
  app.add_option("--tls-client-auth", opt.tls_client_auth,
                 "with TLS, whether the HTTP API and metrics ports require a client "
                 "certificate from --tls-ca (required) or only check one if sent "
                 "(requested); the CAF port always requires one")
    ->check(CLI::IsMember({"required", "requested"}));
  app.add_flag("--insecure", opt.insecure,
               "allow listening on an address other than loopback without TLS that "
               "requires client certificates on every port");
  app.add_option("--auth", opt.auth,
                 "scram: every port requires a user (SCRAM-SHA-256, kept in the "
                 "metadata quorum: ferryctl user): the CAF port an in-band login, the "
                 "HTTP API Basic credentials or a bearer token; requests are checked "
                 "against the ACLs (ferryctl acl); needs TLS and --cluster-secret-file, "
                 "and in a cluster --peer-port. none: no users")
    ->check(CLI::IsMember({"none", "scram"}));
  app.add_option("--cluster-secret-file", opt.cluster_secret_file,
                 "with --auth scram: a file holding the secret the nodes of the "
                 "cluster share (at least 32 characters, e.g. openssl rand -hex 32); "
                 "nodes authenticate to each other with it, and ferryctl "
                 "--cluster-secret-file acts as the cluster's operator with it");
  app.add_option("--session-ttl", opt.session_ttl,
                 "with --auth scram: the lifetime in seconds of a CAF client's "
                 "session after its login (clients log in again before it ends)")
    ->check(CLI::Range(int64_t{10}, int64_t{7} * 86400));
  app.add_option("--login-lockout-ms", opt.login_lockout_ms,
                 "with --auth scram: after 5 failed logins (of one address on HTTP, of "
                 "one user name on the CAF port) each further attempt is refused for "
                 "this long, doubling per failure (HTTP up to 30 s, CAF up to 60 s)")
    ->check(CLI::Range(int64_t{100}, int64_t{600000}));
  app.add_option("--superusers", opt.superusers,
                 "users that no ACL restricts, e.g. admin,ops")
    ->delimiter(',');
  app.add_option("--audit-log", opt.audit_log,
                 "file for one JSON line per denied request and admin change "
                 "(default with --auth scram: <data-dir>/audit.log)");
  app.add_option("--http-token-max-ttl", opt.http_token_max_ttl,
                 "with --auth scram, the longest lifetime in seconds of an HTTP "
                 "bearer token (POST /v1/tokens; default lifetime 3600 s or this, "
                 "if shorter)")
    ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
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
  ferry::tls_from_environment(opt.tls);
  bool peer_port_on = opt.peer_port >= 0;
  if (!opt.peer_tls_ca.empty() && !peer_port_on) {
    std::fprintf(stderr, "ferryd: --peer-tls-ca needs --peer-port\n");
    return 2;
  }
  if ((!opt.peer_tls_cert.empty() || !opt.peer_tls_key.empty()) && opt.peer_tls_ca.empty()) {
    std::fprintf(stderr, "ferryd: --peer-tls-cert/--peer-tls-key need --peer-tls-ca\n");
    return 2;
  }
  if (!opt.peer_tls_ca.empty() && !opt.tls.requested()) {
    std::fprintf(stderr, "ferryd: --peer-tls-ca needs TLS (--tls-cert/--tls-key/--tls-ca)\n");
    return 2;
  }
  if (peer_port_on && opt.tls.requested() && opt.peer_tls_ca.empty()) {
    std::fprintf(stderr,
                 "ferryd: --peer-port with TLS needs --peer-tls-ca: the CA of the nodes' "
                 "certificates, so that only nodes open the peer port\n");
    return 2;
  }
  if (peer_port_on && opt.peer_port != 0 && opt.peer_port == opt.port) {
    std::fprintf(stderr, "ferryd: --peer-port must differ from --port\n");
    return 2;
  }
  // With sessions on, clients never share an actor system with the node's
  // actors (front_door.hpp): a single node keeps its own system unpublished,
  // a cluster node needs a peer port for the other nodes.
  if (opt.auth == "scram" && !opt.voters.empty() && !peer_port_on) {
    std::fprintf(stderr,
                 "ferryd: --auth scram in a cluster (--voters) needs --peer-port (and, "
                 "with TLS, --peer-tls-ca): the nodes reach each other there, and the "
                 "clients' port reaches none of the node's actors but its front door\n");
    return 2;
  }
  // A single node always serves its clients through the front door, so no
  // client can address the node's actors (a CAF exit message with reason
  // kill ends any actor it reaches, whatever its exit handler says). A
  // cluster node without --auth and without --peer-port still serves clients
  // and peers from one system.
  bool split = peer_port_on || opt.auth == "scram" || opt.voters.empty();
  // The peers' side: this node's certificate with the node CA.
  ferry::tls_settings peer_tls;
  if (peer_port_on && opt.tls.requested())
    peer_tls = ferry::tls_settings{
      opt.peer_tls_cert.empty() ? opt.tls.certificate : opt.peer_tls_cert,
      opt.peer_tls_key.empty() ? opt.tls.key : opt.peer_tls_key, opt.peer_tls_ca};
  if (opt.tls.requested()) {
    // With a peer port the clients' CA (--tls-ca) need not have signed this
    // node's certificate: the node CA (--peer-tls-ca) did.
    auto role = split ? ferry::tls_role::client : ferry::tls_role::node;
    if (auto err = ferry::check_tls(opt.tls, role)) {
      std::fprintf(stderr, "ferryd: --tls-cert/--tls-key/--tls-ca: %s\n",
                   ferry::describe(err).c_str());
      return 2;
    }
    if (peer_port_on)
      if (auto err = ferry::check_tls(peer_tls, ferry::tls_role::node)) {
        std::fprintf(stderr, "ferryd: the peer port's TLS files (--peer-tls-*): %s\n",
                     ferry::describe(err).c_str());
        return 2;
      }
  }
  bool mutual_everywhere = opt.tls.requested() && opt.tls_client_auth == "required";
  if (opt.auth == "scram" && !opt.tls.requested()) {
    std::fprintf(stderr,
                 "ferryd: --auth scram needs TLS (--tls-cert/--tls-key/--tls-ca): "
                 "passwords must not cross the network in the clear, and the CAF "
                 "port authenticates clients by their certificate\n");
    return 2;
  }
  if (opt.auth == "scram") {
    if (opt.cluster_secret_file.empty()) {
      std::fprintf(stderr,
                   "ferryd: --auth scram needs --cluster-secret-file: the nodes "
                   "authenticate to each other with it (openssl rand -hex 32 > F; the "
                   "same file on every node)\n");
      return 2;
    }
    auto secret = ferry::read_cluster_secret(opt.cluster_secret_file);
    if (!secret) {
      std::fprintf(stderr, "ferryd: --cluster-secret-file: %s\n",
                   ferry::describe(secret.error()).c_str());
      return 2;
    }
    auto cred = ferry::cluster_credential(*secret);
    if (!cred) {
      std::fprintf(stderr, "ferryd: --cluster-secret-file: %s\n",
                   ferry::describe(cred.error()).c_str());
      return 2;
    }
    opt.cluster_credential = std::move(*cred);
    opt.operator_credential = *ferry::operator_credential(*secret);
  } else if (!opt.cluster_secret_file.empty()) {
    std::fprintf(stderr, "ferryd: --cluster-secret-file needs --auth scram\n");
    return 2;
  }
  if (opt.auth != "scram" && !opt.superusers.empty()) {
    std::fprintf(stderr, "ferryd: --superusers needs --auth scram\n");
    return 2;
  }
  for (auto& u : opt.superusers)
    if (auto err = ferry::validate_user_name(u)) {
      std::fprintf(stderr, "ferryd: --superusers: %s\n",
                   ferry::describe(err).c_str());
      return 2;
    }
  if (!is_loopback(opt.host) && !opt.insecure && !mutual_everywhere) {
    std::fprintf(stderr,
                 "ferryd: refusing to listen on %s: without TLS that requires client "
                 "certificates on every port (--tls-cert/--tls-key/--tls-ca, "
                 "--tls-client-auth required) any process that reaches it could read "
                 "and delete every topic; pass --insecure to listen there anyway\n",
                 opt.host.c_str());
    return 2;
  }
  std::vector<ferry::raft_voter> voters;
  if (!opt.voters.empty()) {
    auto parsed = ferry::parse_voters(opt.voters);
    if (!parsed) {
      std::fprintf(stderr, "ferryd: --voters: %s\n",
                   ferry::describe(parsed.error()).c_str());
      return 2;
    }
    voters = std::move(*parsed);
    auto me = std::find_if(voters.begin(), voters.end(), [&](auto& v) {
      return v.id == opt.node_id;
    });
    if (node_id_opt->count() == 0) {
      std::fprintf(stderr, "ferryd: --voters needs --node-id (one of the "
                           "voters, or another id for a broker-only node)\n");
      return 2;
    }
    if (me == voters.end()) {
      // A broker-only node: it follows the voters' metadata log and hosts
      // replicas, but does not vote. Its endpoint is --host/--port (0: a
      // free port, registered once published).
    } else if (peer_port_on) {
      // The voters' entries name peer ports.
      if (opt.peer_port == 0)
        opt.peer_port = me->port;
      else if (opt.peer_port != me->port) {
        std::fprintf(stderr,
                     "ferryd: --peer-port %d differs from this node's voter entry "
                     "%s:%u (with --peer-port the voters name peer ports)\n",
                     opt.peer_port, me->host.c_str(), static_cast<unsigned>(me->port));
        return 2;
      }
    } else if (port_opt->count() == 0)
      opt.port = me->port;
    else if (opt.port != me->port) {
      std::fprintf(stderr,
                   "ferryd: --port %u differs from this node's voter entry "
                   "%s:%u\n",
                   static_cast<unsigned>(opt.port), me->host.c_str(),
                   static_cast<unsigned>(me->port));
      return 2;
    }
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
  if (!is_loopback(opt.host) && !mutual_everywhere)
    ferry::log::warn("listening on {} with --insecure: {}", opt.host,
                     opt.tls.requested()
                       ? "the HTTP API and metrics accept clients without a certificate"
                       : "every port is plaintext and unauthenticated");
  ferry::tls_settings served_tls;
  ferry::tls_settings served_peer_tls;
  // Without a peer port the node's certificate is also its client
  // certificate towards the peers: it chains to --tls-ca.
  auto served_role = split ? ferry::tls_role::client : ferry::tls_role::node;
  if (opt.tls.requested()) {
    if (auto err = install_tls(opt.tls, data_dir / "tls", served_tls, served_role)) {
      ferry::log::critical("TLS: {}", err);
      return 1;
    }
    if (peer_port_on)
      if (auto err = install_tls(peer_tls, data_dir / "tls" / "peer", served_peer_tls)) {
        ferry::log::critical("TLS (peer port): {}", err);
        return 1;
      }
    if (!ferry::openssl_error_queue_guarded())
      ferry::log::warn("TLS: OpenSSL's SSL_read/SSL_write are not the client library's "
                       "(actors/client/tls.cpp): one failed TLS connection may close the "
                       "others");
    auto left = ferry::certificate_seconds_left(opt.tls.certificate);
    ferry::log::info("TLS on every port: certificate {} (expires in {} days), CA {}; "
                     "client certificates: CAF port required, HTTP and metrics {}",
                     opt.tls.certificate, left ? *left / 86400 : -1, opt.tls.ca,
                     opt.tls_client_auth);
  }
  auto advertised = opt.advertised_host.empty() ? opt.host : opt.advertised_host;
  if (advertised == "0.0.0.0" || advertised == "::" || advertised == "[::]")
    ferry::log::warn("advertising the wildcard address {}: clients cannot "
                     "dial it, so they reach partition leaders only through "
                     "the node they connect to, and broker-only peers may "
                     "not find this node; set --advertised-host",
                     advertised);
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
  // Users and ACLs: filled by the metadata quorum, checked by the HTTP API.
  auto security = std::make_shared<ferry::security_registry>();
  security->set_superusers({opt.superusers.begin(), opt.superusers.end()});
  // Until the node has caught up with the quorum, the HTTP API answers 503
  // security_loading instead of refusing users it does not know yet.
  security->set_loaded(false);
  std::shared_ptr<ferry::audit_log> audit;
  if (opt.auth == "scram" && opt.audit_log.empty())
    opt.audit_log = (data_dir / "audit.log").string();
  if (!opt.audit_log.empty()) {
    auto a = ferry::audit_log::open(opt.audit_log);
    if (!a) {
      ferry::log::critical("{}", ferry::describe(a.error()));
      return 1;
    }
    audit = std::move(*a);
  }
  if (opt.auth == "scram") {
    std::string names;
    for (auto& u : opt.superusers)
      names += (names.empty() ? "" : ",") + u;
    ferry::log::info("auth scram: the HTTP API requires a user's password and "
                     "checks ACLs; superusers: {}; audit log {}",
                     names.empty() ? std::string{"none"} : names, opt.audit_log);
  }
  // Metrics first: a taken port fails before any recovery work.
  std::shared_ptr<ferry::metrics::registry> metrics_registry;
  std::unique_ptr<ferry::metrics::exposer> metrics_exposer;
  // With TLS the HTTP gateway's metrics mode serves /metrics (see
  // http_gateway.hpp: civetweb's TLS fails with OpenSSL 3).
  std::unique_ptr<ferry::http_gateway> metrics_tls;
  uint16_t metrics_port = 0;
  auto metrics_failed = [&](const caf::error& err) {
    auto msg = ferry::describe(err);
    ferry::log::critical("cannot serve metrics on {}:{}: {}", opt.host, opt.metrics_port,
                         msg);
    std::fprintf(stderr, "ferryd: cannot serve metrics on %s:%d: %s\n", opt.host.c_str(),
                 opt.metrics_port, msg.c_str());
    ferry::log::flush();
    return 1;
  };
  auto tls_of_port = [&] {
    return ferry::http_tls_config{served_tls.certificate, served_tls.key, served_tls.ca,
                                  opt.tls_client_auth == "required"};
  };
  if (opt.metrics_port >= 0 && !served_tls.certificate.empty()) {
    metrics_registry = std::make_shared<ferry::metrics::registry>();
    ferry::http_gateway_config mc;
    mc.host = opt.host;
    mc.port = static_cast<uint16_t>(opt.metrics_port);
    mc.name = "metrics";
    mc.threads = 1;
    mc.tls = tls_of_port();
    mc.metrics_text = [reg = metrics_registry.get()] {
      return ferry::metrics::text_format(*reg);
    };
    auto gw = ferry::http_gateway::listen(std::move(mc));
    if (!gw) {
      return metrics_failed(gw.error());
    }
    metrics_tls = std::move(*gw);
    metrics_tls->serve_metrics();
    metrics_port = metrics_tls->port();
  } else if (opt.metrics_port >= 0) {
    metrics_registry = std::make_shared<ferry::metrics::registry>();
    auto host = opt.host.find(':') != std::string::npos
                  ? "[" + opt.host + "]" // IPv6
                  : opt.host;
    auto ex = ferry::metrics::exposer::start(
      host + ":" + std::to_string(opt.metrics_port), metrics_registry);
    if (!ex) {
      return metrics_failed(ex.error());
    }
    metrics_exposer = std::move(*ex);
    metrics_port = metrics_exposer->port();
  }
  // The HTTP API binds now (a taken port fails before recovery) and serves
  // once the node is published. It must end before the actor system.
  std::unique_ptr<ferry::http_gateway> http;
  if (opt.http_port >= 0) {
    ferry::http_gateway_config hc;
    hc.host = opt.host;
    hc.port = static_cast<uint16_t>(opt.http_port);
    if (!served_tls.certificate.empty())
      hc.tls = tls_of_port();
    if (opt.auth == "scram")
      hc.security = security;
    hc.audit = audit;
    hc.token_max_ttl = std::chrono::seconds{opt.http_token_max_ttl};
    hc.login_lockout_base = std::chrono::milliseconds{opt.login_lockout_ms};
    hc.login_lockout_max = std::max(hc.login_lockout_max, hc.login_lockout_base);
    hc.token_ttl = std::min(hc.token_ttl, hc.token_max_ttl);
    auto gw = ferry::http_gateway::listen(std::move(hc));
    if (!gw) {
      auto msg = ferry::describe(gw.error());
      ferry::log::critical("cannot serve the HTTP API: {}", msg);
      std::fprintf(stderr, "ferryd: cannot serve the HTTP API: %s\n",
                   msg.c_str());
      ferry::log::flush();
      return 1;
    }
    http = std::move(*gw);
  }
  // The Kafka listener binds now too and serves once the node is published.
  std::unique_ptr<ferry::kafka_listener> kafka;
  if (opt.kafka_port >= 0) {
    ferry::kafka_listener_config kc;
    kc.host = opt.host;
    kc.port = static_cast<uint16_t>(opt.kafka_port);
    kc.node_id = opt.node_id;
    kc.advertised_host = opt.kafka_advertised_host.empty()
                           ? advertised
                           : opt.kafka_advertised_host;
    if (!served_tls.certificate.empty())
      kc.tls = tls_of_port();
    if (opt.auth == "scram") {
      kc.security = security;
      kc.audit = audit;
    }
    kc.login_lockout_base = std::chrono::milliseconds{opt.login_lockout_ms};
    kc.login_lockout_max = std::max(kc.login_lockout_max, kc.login_lockout_base);
    auto kl = ferry::kafka_listener::listen(std::move(kc));
    if (!kl) {
      auto msg = ferry::describe(kl.error());
      ferry::log::critical("cannot serve Kafka clients: {}", msg);
      std::fprintf(stderr, "ferryd: cannot serve Kafka clients: %s\n",
                   msg.c_str());
      ferry::log::flush();
      return 1;
    }
    kafka = std::move(*kl);
  }
  // Destroying the exposer can take up to 2 s (civetweb): it runs on its
  // own thread while the node shuts down, and is joined at the end.
  std::thread metrics_stopper;
  auto stop_metrics = [&] {
    if (metrics_tls) {
      metrics_tls->stop();
      metrics_tls.reset();
    }
    if (metrics_exposer && !metrics_stopper.joinable())
      metrics_stopper = std::thread{
        [ex = std::move(metrics_exposer), host = opt.host]() mutable {
          stop_exposer(std::move(ex), host);
        }};
  };
  int exit_code = 0;
  {
    caf::actor_system_config cfg;
    // CAF's scheduler defaults to at least 4 workers, each polling 500 times
    // 50 us apart before it sleeps: on 2 cores that idle polling took ~40%
    // of the broker's CPU under produce load. Replicas run on these
    // workers but never block them on fdatasync (the sync pool below
    // does that): one worker per core, and no 50 us sleep-and-poll phase at all
    // (after the short spinning phase a worker waits on its condition
    // variable and is woken when work is enqueued to it). Each of those
    // sleeps was a context switch: with 10 of them, a 3-node cluster at 30k
    // msgs/s made ~110k context switches/s on 2 cores and its p99 suffered.
    // Split (front_door.hpp): the node's own system speaks TLS with the node
    // CA on the peer port, and without one it listens nowhere.
    configure_system(cfg, opt, split ? served_peer_tls : served_tls,
                     static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
    // The node's links to its peers send with the cluster credential.
    if (!opt.cluster_credential.empty()) {
      ferry::client_credentials creds;
      creds.token = opt.cluster_credential;
      ferry::configure_credentials(cfg, creds);
    }
    // Declared before the actor system, so they outlive every replica that
    // holds them (and the pool is never destroyed on one of its threads).
    auto nofile = ferry::raise_open_file_limit();
    ferry::cached_file_system segment_files{
      opt.max_open_files > 0
        ? static_cast<size_t>(opt.max_open_files)
        : ferry::cached_file_system::default_max_open(nofile)};
    auto meta_writer = std::make_shared<ferry::metadata_writer>(shared_store);
    // With the journal only the first few partitions sync their own files,
    // each with its own fdatasync: a syncfs would write back every
    // journaled partition's segment data too, on the ack path.
    auto sync = std::make_shared<ferry::sync_pool>(ferry::sync_pool_options{
      .threads = opt.io_threads > 0
        ? static_cast<size_t>(opt.io_threads)
        : ferry::sync_pool::default_threads(std::thread::hardware_concurrency()),
      .syncfs_threshold = opt.journal == "off" ? size_t{8} : size_t{0}});
    // Before any replica opens its log: the journal's records are applied
    // to the segment files first.
    // With --journal off a journal left by an earlier run is still replayed
    // (and then emptied); it is not written any more.
    std::shared_ptr<ferry::node_journal> journal;
    {
      ferry::journal_options jo;
      jo.file_bytes = static_cast<uint64_t>(opt.journal_file_mb) << 20;
      jo.threads = opt.journal != "off";
      auto j = ferry::node_journal::open(data_dir, jo);
      if (!j) {
        auto msg = ferry::describe(j.error());
        ferry::log::critical("cannot open the node journal: {}", msg);
        std::fprintf(stderr, "ferryd: cannot open the node journal: %s\n",
                     msg.c_str());
        ferry::log::flush();
        return 1;
      }
      if (opt.journal != "off")
        journal = std::move(*j);
    }
    // Compaction of cleanup.policy=compact topics, for every partition of
    // the node on one thread (before the actor system: its callbacks only
    // send messages, and it outlives every replica).
    auto cleaner = std::make_shared<ferry::log_cleaner>(ferry::log_cleaner_options{
      .threads = 1,
      .io_max_bytes_per_second = opt.cleaner_io_max_bytes_per_second,
      .dedupe_buffer_bytes = opt.cleaner_dedupe_buffer_mb << 20});
    // Deleted partitions' directories go into <data-dir>/trash and are
    // removed on this thread, off the scheduler; what an earlier run left
    // there (killed mid-delete) is removed from the start.
    auto trash = std::make_shared<ferry::dir_remover>(data_dir);
    trash->sweep();
    caf::actor_system sys{cfg};
    ferry::node_config nc;
    nc.node_id = opt.node_id;
    nc.voters = voters;
    nc.data_dir = data_dir;
    nc.store = shared_store;
    nc.cluster_id = *cid;
    nc.host = advertised;
    nc.shutdown_timeout = std::chrono::seconds{opt.shutdown_timeout_s};
    nc.metrics = metrics_registry;
    nc.security = security;
    nc.auth = opt.auth == "scram";
    nc.cluster_credential = opt.cluster_credential;
    nc.operator_credential = opt.operator_credential;
    nc.session_ttl = std::chrono::seconds{opt.session_ttl};
    nc.login_lockout_base = std::chrono::milliseconds{opt.login_lockout_ms};
    nc.login_lockout_max = std::max(nc.login_lockout_max, nc.login_lockout_base);
    if (nc.auth)
      nc.audit = audit;
    nc.metrics_port = metrics_port;
    nc.http_port = http ? http->port() : 0;
    if (kafka) {
      nc.kafka_host = opt.kafka_advertised_host.empty()
                        ? advertised
                        : opt.kafka_advertised_host;
      nc.kafka_port = kafka->port();
    }
    // Replicas run on the scheduler; their fdatasync on these threads.
    nc.replica_defaults.sync = sync;
    nc.replica_defaults.journal = journal;
    nc.replica_defaults.journal_defer_bytes =
      static_cast<size_t>(opt.journal_defer_kib) << 10;
    nc.replica_defaults.cleaner = cleaner;
    nc.replica_defaults.trash = trash;
    nc.journal_min_replicas = opt.journal == "auto"
      ? static_cast<size_t>(opt.journal_min_partitions) : 0;
    nc.replica_defaults.fs = &segment_files;
    nc.replica_defaults.meta_writer = meta_writer;
    nc.fetch_sessions = opt.fetch_sessions != "off" && opt.fetch_sessions != "false";
    nc.fetch_sessions_min_replicas =
      opt.fetch_sessions == "auto"
        ? static_cast<size_t>(opt.fetch_sessions_min_partitions) : 0;
    nc.replica_defaults.replica_lag_max =
      std::chrono::milliseconds{opt.replica_lag_max_ms};
    nc.replica_defaults.follower_fetch_wait =
      std::chrono::milliseconds{opt.replica_fetch_wait_ms};
    nc.replica_defaults.ack_timeout =
      std::chrono::milliseconds{opt.produce_ack_timeout_ms};
    auto port_slot = nc.port;
    if (peer_port_on)
      nc.peer_port = std::make_shared<std::atomic<uint16_t>>(0);
    auto peer_port_slot = nc.peer_port;
    auto node = sys.spawn(ferry::node, std::move(nc));
    // What ferryd itself (the startup check, the HTTP gateway) asks the node
    // through: with sessions on, a session proxy with the cluster
    // credential (the gateway checks its users itself).
    auto front = opt.auth == "scram"
                   ? ferry::spawn_session_proxy(sys, node, opt.cluster_credential)
                   : node;
    node->attach_functor([](const caf::error&) {
      char c = 'd';
      auto n = ::write(signal_pipe[1], &c, 1);
      (void) n;
    });
    auto stop_node = [&](std::chrono::seconds timeout) {
      stop_metrics();
      if (http)
        http->stop();
      if (kafka)
        kafka->stop();
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
    // In a cluster the node serves once its metadata caught up with the
    // quorum, which needs the port open for the peers: no wait there.
    if (voters.empty()) {
      caf::scoped_actor self{sys};
      bool ok = false;
      self
        ->request(front, std::chrono::seconds{opt.startup_timeout_s},
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
    // Split (a single node, --peer-port or --auth scram): the clients'
    // system with the front door on --port (front_door.hpp); the node's own
    // system listens on the peer port, or nowhere without one.
    // Declared after `sys`, so it goes first.
    // (The system keeps a reference to its config: it lives as long.)
    std::unique_ptr<caf::actor_system_config> client_cfg;
    std::optional<caf::actor_system> client_sys;
    ferry::broker_actor door;
    caf::expected<uint16_t> peers{uint16_t{0}};
    if (exit_code == 0 && peer_port_on)
      peers = ferry::publish_broker(node, static_cast<uint16_t>(opt.peer_port), opt.host);
    if (exit_code == 0 && split) {
      if (!peers) {
        ferry::log::critical("cannot listen for peers on {}:{}: {}", opt.host, opt.peer_port,
                             sys.render(peers.error()));
        std::fprintf(stderr, "ferryd: cannot listen on %s:%d (--peer-port): %s\n",
                     opt.host.c_str(), opt.peer_port, sys.render(peers.error()).c_str());
        stop_node(std::chrono::seconds{opt.shutdown_timeout_s});
        exit_code = 1;
      } else {
        if (peer_port_on) {
          peer_port_slot->store(*peers);
          ferry::log::info("peers reach this node on {}:{}{}", opt.host, *peers,
                           served_peer_tls.certificate.empty()
                             ? ""
                             : " (mutual TLS, CA " + opt.peer_tls_ca + ")");
          std::printf("peers on %s:%u\n", opt.host.c_str(), static_cast<unsigned>(*peers));
        } else {
          ferry::log::info("clients reach the node only through its front door (the "
                           "node's own actor system listens nowhere: no --peer-port)");
        }
        client_cfg = std::make_unique<caf::actor_system_config>();
        // Only the front door runs here; the node's actors stay on `sys`.
        configure_system(*client_cfg, opt, served_tls, 1);
        client_sys.emplace(*client_cfg);
        door = ferry::spawn_front_door(
          *client_sys, ferry::front_door_config{
                         caf::actor_cast<caf::actor>(node),
                         opt.auth == "scram" ? opt.cluster_credential : std::string{},
                         opt.auth == "scram" ? audit : nullptr});
      }
    }
    if (exit_code == 0) {
      auto actual = split ? ferry::publish_broker(door, opt.port, opt.host)
                                 : ferry::publish_broker(node, opt.port, opt.host);
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
        const char* scheme = served_tls.certificate.empty() ? "http" : "https";
        if (metrics_port != 0) {
          ferry::log::info("metrics at {}://{}:{}/metrics", scheme, opt.host,
                           metrics_port);
          std::printf("metrics on %s:%u\n", opt.host.c_str(),
                      static_cast<unsigned>(metrics_port));
        }
        if (http) {
          http->serve(sys, front);
          ferry::log::info("HTTP API at {}://{}:{}/v1", scheme, opt.host,
                           http->port());
          std::printf("http on %s:%u\n", opt.host.c_str(),
                      static_cast<unsigned>(http->port()));
        }
        if (kafka) {
          kafka->serve(sys, front);
          ferry::log::info("Kafka listener at {}:{}", opt.host, kafka->port());
          std::printf("kafka on %s:%u\n", opt.host.c_str(),
                      static_cast<unsigned>(kafka->port()));
        }
        std::fflush(stdout);
        char ev = 0;
        while ((ev = wait_event(1h)) == 0 || ev == 'h') {
          if (ev != 'h')
            continue;
          if (served_tls.certificate.empty()) {
            ferry::log::info("SIGHUP: TLS is off, nothing to reload");
            continue;
          }
          auto again = opt.tls;
          ferry::tls_settings ignored;
          if (auto err = install_tls(again, data_dir / "tls", ignored, served_role)) {
            ferry::log::error("SIGHUP: kept the current TLS files: {}", err);
            continue;
          }
          if (peer_port_on)
            if (auto err = install_tls(peer_tls, data_dir / "tls" / "peer", ignored)) {
              ferry::log::error("SIGHUP: kept the current TLS files of the peer port: {}",
                                err);
              continue;
            }
          for (auto* gw : {http.get(), metrics_tls.get()})
            if (gw)
              if (auto err = gw->reload_tls())
                ferry::log::error("SIGHUP: the {} port kept its TLS context: {}",
                                  gw == http.get() ? "HTTP" : "metrics", err);
          if (kafka)
            if (auto err = kafka->reload_tls())
              ferry::log::error("SIGHUP: the Kafka port kept its TLS context: {}", err);
          auto left = ferry::certificate_seconds_left(opt.tls.certificate);
          ferry::log::info("SIGHUP: reloaded the TLS files (certificate expires in {} "
                           "days); new connections use them",
                           left ? *left / 86400 : -1);
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
    // children, so this is quick. A watchdog keeps it bounded anyway. After
    // a clean node shutdown every replica is flushed and closed and every
    // LMDB write committed, so a straggler (once: a replica held by a
    // message left in the BASP broker's mailbox, see below) only costs the
    // wait: exit with the clean status after a short grace and say so,
    // instead of failing the stop.
    auto grace = exit_code == 0 ? std::min(opt.shutdown_timeout_s, 10)
                                : opt.shutdown_timeout_s;
    std::thread watchdog{[grace, code = exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds{grace});
      if (code == 0)
        ferry::log::warn("actor system did not stop within {} s after the "
                         "node's clean shutdown; exiting",
                         grace);
      else
        ferry::log::critical("actor system did not stop in time");
      ferry::log::flush();
      std::_Exit(code);
    }};
    watchdog.detach();
    http.reset(); // before the actor system: it holds the node's handle
    kafka.reset(); // likewise; and its connections' bridge actors end with it
    node = nullptr;
    // The node ended after the down messages of its replicas (see
    // replica_closed in actors/server/node.cpp): a request the BASP broker answers
    // (through the middleman actor) is queued behind them. Once it is
    // answered, no left-over message in the broker's mailbox (CAF 0.17 keeps
    // it when the middleman stops) holds a replica and its thread.
    {
      caf::scoped_actor self{sys};
      self
        ->request(sys.middleman().actor_handle(), std::chrono::seconds{grace},
                  caf::get_atom_v, sys.node())
        .receive([](const caf::node_id&, const std::string&, uint16_t) {},
                 [&](const caf::error& err) {
                   ferry::log::warn("middleman did not answer: {}",
                                    sys.render(err));
                 });
    }
  }
  stop_metrics();
  if (metrics_stopper.joinable())
    metrics_stopper.join();
  metrics_registry.reset();
  shared_store.reset();
  ferry::log::info("ferryd stopped");
  ferry::log::flush();
  return exit_code;
}
