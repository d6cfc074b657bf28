#pragma once
// Process harness for multi-process tests: start `ferryd` as a child with its
// own temp data dir, `--port 0` and `--metrics-port 0` (unless the extra
// arguments name --metrics-port), learn its ports from the lines
//   listening on HOST:PORT
//   metrics on HOST:METRICS_PORT
// that ferryd prints (stdout, flushed) once its CAF port is open, stop it with
// SIGTERM (bounded wait, then SIGKILL), kill -9 it, restart it on the same
// data dir; and run a command (ferryctl) capturing exit code, stdout and
// stderr with a timeout.
//
// A cluster's nodes must know each other's ports before they start and may
// wait for each other: free_tcp_ports() picks ports, launch() starts a node
// without waiting and wait_started() waits for its "listening on" line
// (start() is the two in one).
//
// Every wait is bounded. Destructors always kill and reap their child, even
// when a test fails (ASSERT_* returns early) or throws. Children also get
// PR_SET_PDEATHSIG(SIGKILL), so a crashed test binary leaves no ferryd
// behind. Note: the death signal follows the *thread* that started the child;
// start children from the test's main thread (or a thread that outlives them).
//
// Header-only so every integration test file can include it.
//
//   ferry::test::ferryd_process d;              // own temp dir, --port 0
//   ASSERT_TRUE(d.start()) << d.output();       // waits for "listening on"
//   auto r = ferry::test::run_command(FERRYCTL_PATH,
//     {"--broker", d.endpoint(), "topic", "list"});
//   EXPECT_EQ(r.exit_code, 0) << r.err;
//   EXPECT_EQ(d.stop(), 0);                     // SIGTERM -> clean exit

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/http_get.hpp"
#include "tests/temp_dir.hpp"

namespace ferry::test {

/// A port that was free a moment ago (bind to 0, read it, close).
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}


using namespace std::chrono_literals;

/// Exit status as a shell shows it: the exit code, or 128 + signal number.
inline int decode_wait_status(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return -1;
}

/// A child process with its stdout and stderr captured by a reader thread.
/// Movable only through unique_ptr; the destructor kills and reaps.
class child_process {
public:
  /// Starts `program` with `args` (argv[0] is the program). stdin is
  /// `stdin_data` (then EOF). Returns nullptr if the pipes cannot be made;
  /// a failing exec shows up as exit code 127 with a message on stderr.
  static std::unique_ptr<child_process>
  start(const std::string& program, const std::vector<std::string>& args,
        const std::string& stdin_data = {}) {
    // A child that exits before reading its stdin must not kill the test
    // with SIGPIPE.
    static std::once_flag ignore_sigpipe;
    std::call_once(ignore_sigpipe, [] { ::signal(SIGPIPE, SIG_IGN); });
    int out[2], err[2], in[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
      return nullptr;
    if (::pipe2(err, O_CLOEXEC) != 0) {
      close_all({out[0], out[1]});
      return nullptr;
    }
    if (::pipe2(in, O_CLOEXEC) != 0) {
      close_all({out[0], out[1], err[0], err[1]});
      return nullptr;
    }
    // Build argv before fork: the child may only call async-signal-safe
    // functions (the parent has threads).
    std::vector<std::string> storage;
    storage.push_back(program);
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : storage)
      argv.push_back(s.data());
    argv.push_back(nullptr);
    auto parent = ::getpid();
    auto pid = ::fork();
    if (pid < 0) {
      close_all({out[0], out[1], err[0], err[1], in[0], in[1]});
      return nullptr;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(126);
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      // Own process group: a SIGINT at the terminal does not hit children.
      ::setpgid(0, 0);
      ::execv(argv[0], argv.data());
      static constexpr char msg[] = "child_process: exec failed\n";
      auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      (void) n;
      ::_exit(127);
    }
    close_all({out[1], err[1], in[0]});
    std::unique_ptr<child_process> self{new child_process};
    self->pid_ = pid;
    self->reader_ = std::thread{[p = self.get(), o = out[0], e = err[0],
                                 i = in[1], data = stdin_data] {
      p->pump(o, e, i, data);
    }};
    return self;
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  ~child_process() {
    kill_and_reap();
    if (reader_.joinable())
      reader_.join();
  }

  pid_t pid() const { return pid_; }

  /// True until the child was reaped.
  bool running() {
    poll_exit();
    return !exit_status_.has_value();
  }

  /// Sends a signal (no-op once reaped).
  void signal(int sig) {
    if (!exit_status_ && pid_ > 0)
      ::kill(pid_, sig);
  }

  /// Waits up to `timeout` for the child to exit; its status (exit code or
  /// 128 + signal), or nullopt if it is still running.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      poll_exit();
      if (exit_status_)
        return exit_status_;
      if (std::chrono::steady_clock::now() >= deadline)
        return std::nullopt;
      std::this_thread::sleep_for(5ms);
    }
  }

  /// SIGKILL and reap (waits at most 10 s, which SIGKILL never needs).
  /// Returns the exit status.
  int kill_and_reap() {
    if (!exit_status_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait_exit(10s);
    }
    return exit_status_.value_or(-1);
  }

  /// Waits until the reader saw EOF on both pipes (after the child exited,
  /// unless a grandchild kept them open), at most `timeout`.
  bool wait_output_closed(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> guard{mtx_};
    return cv_.wait_for(guard, timeout, [this] { return eof_; });
  }

  /// Waits until the combined output matches `re`; the match and its
  /// groups ([0] is the whole match), or nullopt on timeout or when the
  /// child's output ended without a match.
  std::optional<std::vector<std::string>>
  wait_for(const std::regex& re, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> guard{mtx_};
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::smatch m;
      if (std::regex_search(combined_, m, re)) {
        std::vector<std::string> groups;
        for (auto& g : m)
          groups.push_back(g.str());
        return groups;
      }
      if (eof_ || std::chrono::steady_clock::now() >= deadline)
        return std::nullopt;
      cv_.wait_until(guard, deadline);
    }
  }

  std::string out() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return out_;
  }
  std::string err() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return err_;
  }
  /// stdout and stderr interleaved as they arrived.
  std::string combined() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return combined_;
  }

private:
  child_process() = default;

  static void close_all(std::initializer_list<int> fds) {
    for (auto fd : fds)
      ::close(fd);
  }

  void poll_exit() {
    std::lock_guard<std::mutex> guard{wait_mtx_};
    if (exit_status_ || pid_ <= 0)
      return;
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      exit_status_ = decode_wait_status(status);
    else if (r < 0 && errno == ECHILD)
      exit_status_ = -1;
  }

  void pump(int out_fd, int err_fd, int in_fd, std::string data) {
    size_t written = 0;
    if (data.empty()) {
      ::close(in_fd);
      in_fd = -1;
    } else {
      ::fcntl(in_fd, F_SETFL, ::fcntl(in_fd, F_GETFL) | O_NONBLOCK);
    }
    bool out_open = true, err_open = true;
    char buf[8192];
    while (out_open || err_open) {
      pollfd fds[3];
      nfds_t n = 0;
      if (out_open)
        fds[n++] = pollfd{out_fd, POLLIN, 0};
      if (err_open)
        fds[n++] = pollfd{err_fd, POLLIN, 0};
      if (in_fd >= 0)
        fds[n++] = pollfd{in_fd, POLLOUT, 0};
      auto r = ::poll(fds, n, 200);
      if (r < 0 && errno != EINTR)
        break;
      for (nfds_t k = 0; k < n; ++k) {
        if (fds[k].revents == 0)
          continue;
        if (fds[k].fd == in_fd) {
          auto w = ::write(in_fd, data.data() + written, data.size() - written);
          if (w > 0)
            written += static_cast<size_t>(w);
          if (w < 0 && errno != EAGAIN && errno != EINTR)
            written = data.size();
          if (written >= data.size() || (fds[k].revents & (POLLERR | POLLHUP))) {
            ::close(in_fd);
            in_fd = -1;
          }
          continue;
        }
        auto got = ::read(fds[k].fd, buf, sizeof(buf));
        if (got < 0 && errno == EINTR)
          continue;
        if (got <= 0) {
          if (fds[k].fd == out_fd)
            out_open = false;
          else
            err_open = false;
          continue;
        }
        std::lock_guard<std::mutex> guard{mtx_};
        std::string_view chunk{buf, static_cast<size_t>(got)};
        (fds[k].fd == out_fd ? out_ : err_).append(chunk);
        combined_.append(chunk);
        cv_.notify_all();
      }
    }
    if (in_fd >= 0)
      ::close(in_fd);
    ::close(out_fd);
    ::close(err_fd);
    std::lock_guard<std::mutex> guard{mtx_};
    eof_ = true;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  std::mutex wait_mtx_;
  std::optional<int> exit_status_;
  std::thread reader_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::string out_, err_, combined_;
  bool eof_ = false;
};

/// What run_command() saw.
struct command_result {
  int exit_code = -1; ///< exit code, 128 + signal, or -1 if it never ran
  bool timed_out = false;
  std::string out;
  std::string err;
};

/// Runs `program args...` to completion (stdin = `stdin_data`), killing it
/// after `timeout`.
inline command_result run_command(const std::string& program,
                                  const std::vector<std::string>& args,
                                  std::chrono::milliseconds timeout = 30s,
                                  const std::string& stdin_data = {}) {
  command_result res;
  auto child = child_process::start(program, args, stdin_data);
  if (!child) {
    res.err = "cannot start " + program + ": " + std::strerror(errno);
    return res;
  }
  auto status = child->wait_exit(timeout);
  if (!status) {
    res.timed_out = true;
    child->kill_and_reap();
  }
  child->wait_output_closed(5s);
  res.exit_code = child->kill_and_reap();
  res.out = child->out();
  res.err = child->err();
  return res;
}

/// `n` distinct TCP ports on 127.0.0.1 that were free a moment ago (each
/// bound to port 0 and read back; all held open until all are picked, then
/// closed). For programs that must know each other's ports before they start
/// (a cluster's --voters list). Another process may take one in between:
/// callers retry with fresh ports when a start fails. Empty on error.
inline std::vector<uint16_t> free_tcp_ports(size_t n) {
  std::vector<uint16_t> ports;
  std::vector<int> fds;
  for (size_t i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      break;
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      break;
    ports.push_back(ntohs(addr.sin_port));
  }
  for (auto fd : fds)
    ::close(fd);
  if (ports.size() != n)
    ports.clear();
  return ports;
}

/// A ferryd child with its own data dir. Not thread-safe.
class ferryd_process {
public:
  /// The path of the ferryd binary: $FERRY_TEST_FERRYD when set (soaks run
  /// a copy while the build dir is rebuilt), else FERRYD_PATH in the
  /// integration tests.
  static std::string default_program() {
    if (auto p = std::getenv("FERRY_TEST_FERRYD"); p && *p)
      return p;
#ifdef FERRYD_PATH
    return FERRYD_PATH;
#else
    return "ferryd";
#endif
  }

  /// `extra_args` are appended to `--data-dir D --port P --host 127.0.0.1`
  /// and, unless they contain --metrics-port / --http-port,
  /// `--metrics-port 0` / `--http-port 0` (so parallel tests never fight
  /// over the default metrics and HTTP ports).
  explicit ferryd_process(std::vector<std::string> extra_args = {},
                          std::string program = default_program())
    : program_(std::move(program)), extra_args_(std::move(extra_args)),
      own_dir_(std::make_unique<temp_dir>("ferryd")),
      data_dir_(own_dir_->path() / "data") {
  }

  /// Uses `data_dir` (not removed afterwards) instead of a temp dir.
  ferryd_process(std::filesystem::path data_dir,
                 std::vector<std::string> extra_args,
                 std::string program = default_program())
    : program_(std::move(program)), extra_args_(std::move(extra_args)),
      data_dir_(std::move(data_dir)) {
  }

  ferryd_process(const ferryd_process&) = delete;
  ferryd_process& operator=(const ferryd_process&) = delete;

  ~ferryd_process() {
    kill9();
  }

  /// Starts ferryd on `port` (0: a free one) and waits up to `timeout` for
  /// its "listening on" line. False if it exited or timed out first (the
  /// child is then killed; output() says why).
  bool start(uint16_t port = 0, std::chrono::milliseconds timeout = 30s) {
    return launch(port) && wait_started(timeout);
  }

  /// The first half of start(): starts ferryd on `port` without waiting
  /// for its "listening on" line; wait_started() is the second half. For
  /// nodes that come up only together (a cluster whose nodes wait for their
  /// quorum): launch each, then wait for each. False if it cannot fork.
  bool launch(uint16_t port = 0) {
    kill9();
    std::vector<std::string> args{"--data-dir", data_dir_.string(),
                                  "--port",     std::to_string(port),
                                  "--host",     "127.0.0.1"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    bool metrics_port_given = false;
    for (auto& a : extra_args_)
      if (a == "--metrics-port" || a.rfind("--metrics-port=", 0) == 0)
        metrics_port_given = true;
    if (!metrics_port_given) {
      args.push_back("--metrics-port");
      args.push_back("0");
    }
    // Likewise the HTTP API's default port (8080).
    bool http_port_given = false;
    for (auto& a : extra_args_)
      if (a == "--http-port" || a.rfind("--http-port=", 0) == 0)
        http_port_given = true;
    if (!http_port_given) {
      args.push_back("--http-port");
      args.push_back("0");
    }
    metrics_port_ = 0;
    http_port_ = 0;
    kafka_port_ = 0;
    if (child_)
      history_ += child_->combined();
    child_ = child_process::start(program_, args);
    return child_ != nullptr;
  }

  /// Waits up to `timeout` for the "listening on" line of the ferryd that
  /// launch() started. False if it exited or timed out first (the child is
  /// then killed; output() says why).
  bool wait_started(std::chrono::milliseconds timeout = 30s) {
    if (!child_)
      return false;
    static const std::regex listening{
      R"(listening on ([^\s:]+):([0-9]+)\r?\n)"};
    auto m = child_->wait_for(listening, timeout);
    if (!m) {
      // Most likely it exited (port taken...): let it finish so its real
      // exit status is kept, then make sure it is gone.
      child_->wait_exit(2s);
      child_->kill_and_reap();
      return false;
    }
    host_ = (*m)[1];
    port_ = static_cast<uint16_t>(std::stoi((*m)[2]));
    // Printed together with "listening on" (same flush) when metrics are on.
    static const std::regex metrics_on{
      R"(listening on [^\n]*\n(metrics on ([^\s:]+):([0-9]+)\r?\n)?)"};
    if (auto mm = child_->wait_for(metrics_on, 1s); mm && !(*mm)[3].empty())
      metrics_port_ = static_cast<uint16_t>(std::stoi((*mm)[3]));
    // And "http on" after it, when the HTTP API is on.
    static const std::regex http_on{
      R"(listening on [^\n]*\n(metrics on [^\n]*\n)?(http on ([^\s:]+):([0-9]+)\r?\n)?)"};
    if (auto mh = child_->wait_for(http_on, 1s); mh && !(*mh)[4].empty())
      http_port_ = static_cast<uint16_t>(std::stoi((*mh)[4]));
    // And "kafka on" last, with --kafka-port.
    bool kafka = false;
    for (auto& a : extra_args_)
      if (a == "--kafka-port" || a.rfind("--kafka-port=", 0) == 0)
        kafka = true;
    static const std::regex kafka_on{R"(kafka on ([^\s:]+):([0-9]+)\r?\n)"};
    if (kafka)
      if (auto mk = child_->wait_for(kafka_on, 2s))
        kafka_port_ = static_cast<uint16_t>(std::stoi((*mk)[2]));
    return true;
  }

  /// SIGTERM, then waits up to `timeout` for the exit; SIGKILL after that.
  /// Returns the exit status (0 for a clean shutdown), 128 + 9 if it had to
  /// be killed, or -1 if nothing was running.
  int stop(std::chrono::milliseconds timeout = 30s) {
    if (!child_ || !child_->running())
      return child_ ? child_->kill_and_reap() : -1;
    child_->signal(SIGTERM);
    auto status = child_->wait_exit(timeout);
    if (!status)
      return child_->kill_and_reap();
    return *status;
  }

  /// SIGKILL and reap: a crash without any chance to flush.
  void kill9() {
    if (child_)
      child_->kill_and_reap();
  }

  /// Starts again on the same data dir. With `same_port` on the port it had
  /// (the CAF port is published with SO_REUSEADDR), else on a fresh one.
  bool restart(bool same_port = true,
               std::chrono::milliseconds timeout = 30s) {
    auto port = same_port ? port_ : uint16_t{0};
    kill9();
    return start(port, timeout);
  }

  bool running() { return child_ && child_->running(); }
  uint16_t port() const { return port_; }
  /// The metrics port from "metrics on HOST:PORT"; 0 with metrics disabled.
  uint16_t metrics_port() const { return metrics_port_; }
  /// The HTTP API's port from "http on HOST:PORT"; 0 with it disabled.
  uint16_t http_port() const { return http_port_; }
  /// The Kafka listener's port from "kafka on HOST:PORT"; 0 without one.
  uint16_t kafka_port() const { return kafka_port_; }
  const std::string& host() const { return host_; }
  /// "127.0.0.1:PORT", as ferryctl's --broker takes it.
  std::string endpoint() const { return host_ + ":" + std::to_string(port_); }
  const std::filesystem::path& data_dir() const { return data_dir_; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }
  child_process* child() { return child_.get(); }

  /// stdout and stderr of every run so far (earlier runs first).
  std::string output() const {
    return history_ + (child_ ? child_->combined() : std::string{});
  }

private:
  std::string program_;
  std::vector<std::string> extra_args_;
  std::unique_ptr<temp_dir> own_dir_;
  std::filesystem::path data_dir_;
  std::unique_ptr<child_process> child_;
  std::string history_;
  std::string host_ = "127.0.0.1";
  uint16_t port_ = 0;
  uint16_t metrics_port_ = 0;
  uint16_t http_port_ = 0;
  uint16_t kafka_port_ = 0;
};

} // namespace ferry::test
