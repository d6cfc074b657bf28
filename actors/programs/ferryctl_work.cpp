// ferryctl work: runs CMD once per record of the TOPICs.
//
//   ferryctl work TOPIC [TOPIC...] --group G [--mode queue|stream] --exec CMD
//                 [--concurrency N] [--max-idle 20s]
//                 [--max-attempts N] [--backoff-ms MS] [--max-backoff-ms MS]
//                 [--backoff-multiplier X] [--jitter J] [--visibility-ms MS]
//                 [--ordering none|key] [--dlq-topic T]
//
// CMD runs through /bin/sh -c with the record's value on stdin and in its
// environment FERRY_TOPIC, FERRY_PARTITION, FERRY_OFFSET, FERRY_KEY (or
// FERRY_KEY_NULL=1), FERRY_ATTEMPT, FERRY_GROUP and FERRY_HEADER_<NAME> per
// header (upper case, other characters than letters and digits as '_').
// CMD's stdout goes to ferryctl's stderr; its stderr is passed through too,
// and its first line is the error of a failed run.
//
// Exit code 0 acks, 2 rejects (dead-letter now), anything else (a signal
// too) nacks with the first line of stderr as the error. One line per run
// goes to stdout:
//   orders/0@17 attempt=1 key=k1 -> ack
//   orders/0@18 attempt=2 key=k2 -> nack (timeout talking to db) retry in 1830 ms
//   orders/1@4 attempt=1 key=null -> reject (bad payload) dead-letter
//
// Several topics: one member reads them all (queue mode: each receive leases
// from the partitions of every topic in turn; stream mode: the group's
// partitions of every topic are split among its members); a failed record
// goes to its own topic's DLQ (<topic>.<group>.dlq) unless --dlq-topic names
// one for all.
//
// Queue mode (default): a queue_consumer member; up to N children run at
// once on dedicated threads (never on CAF's), each lease is extended while
// its child runs longer than half the visibility timeout. --max-attempts,
// the backoff settings (the retry after failure n waits a random time up
// to min(max, backoff * multiplier^(n-1)), of which the share `jitter` is
// random), --visibility-ms, --ordering and --dlq-topic create the group with
// them, or alter an existing group's settings (other settings are kept).
//
// Stream mode: a stream group member (no auto commit) plus the stream_dlq
// helper: a failed run is retried in the worker with backoff, after
// --max-attempts (default 5) or at once on exit 2 the record goes to
// <topic>.<group>.dlq with the ferry-* headers, and the polled batch is
// committed once every record is processed or dead-lettered. Records of
// one partition run in order; up to N partitions run at once.
//
// --max-idle ends the worker (exit 0) after that long without a record
// (0 = never). SIGINT/SIGTERM stop it: running children get SIGTERM, their
// records are not settled, and the member leaves (queue mode: the broker
// releases its leases at once; stream mode: nothing is committed past the
// last completed batch).

#include "actors/programs/ferryctl_work.hpp"
#include "actors/programs/ferryctl_common.hpp"

#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "actors/client/queue_consumer.hpp"
#include "actors/client/stream_dlq.hpp"
#include "broker/error.hpp"
#include "broker/start_position.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ferry::ctl {

namespace {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

struct work_options {
  std::vector<std::string> topics;
  std::string group;
  std::string mode = "queue";
  std::string exec;
  int32_t concurrency = 1;
  std::string max_idle = "0";
  std::optional<int32_t> max_attempts;
  std::optional<int64_t> backoff_ms;
  std::optional<int64_t> visibility_ms;
  std::optional<int64_t> max_backoff_ms;
  std::optional<double> backoff_multiplier;
  std::optional<double> jitter;
  std::optional<std::string> ordering;
  std::optional<std::string> dlq_topic;
  std::optional<std::string> start;
  std::optional<int64_t> delay_ms;
  int64_t request_timeout_ms = 30000;
};

work_options& opts() {
  static work_options x;
  return x;
}

volatile std::sig_atomic_t stop_requested = 0;

void on_stop_signal(int) {
  stop_requested = 1;
}

/// "20s", "500ms", "2m", "1h" or a number of seconds; nullopt if malformed.
std::optional<milliseconds> parse_duration(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
    ++i;
  if (i == 0 || i > 12)
    return std::nullopt;
  auto n = std::stoll(text.substr(0, i));
  auto unit = text.substr(i);
  if (unit.empty() || unit == "s")
    return milliseconds{n * 1000};
  if (unit == "ms")
    return milliseconds{n};
  if (unit == "m")
    return milliseconds{n * 60'000};
  if (unit == "h")
    return milliseconds{n * 3'600'000};
  return std::nullopt;
}

int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// -- running a child ---------------------------------------------------------------

/// How a child ended.
struct child_result {
  int status = -1;         ///< exit code, or 128 + signal
  bool signaled = false;
  std::string first_line;  ///< first line of its stderr
  std::string spawn_error; ///< non-empty: it never ran
};

/// The pids of running children, so a signal can end them.
class child_registry {
public:
  void add(pid_t pid) {
    std::lock_guard<std::mutex> guard{mtx_};
    pids_.insert(pid);
  }
  /// Called after the child exited and before it is reaped (the pid cannot
  /// be reused until then).
  void remove(pid_t pid) {
    std::lock_guard<std::mutex> guard{mtx_};
    pids_.erase(pid);
  }
  void signal_all(int sig) {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto pid : pids_)
      ::kill(-pid, sig); // the child's process group
  }

private:
  std::mutex mtx_;
  std::set<pid_t> pids_;
};

std::string env_name(const std::string& header) {
  std::string out = "FERRY_HEADER_";
  for (unsigned char c : header)
    out += std::isalnum(c) ? static_cast<char>(std::toupper(c)) : '_';
  return out;
}

/// The child's environment: ours (minus FERRY_* of an outer worker) plus the
/// record's.
std::vector<std::string> child_env(const consumed_message& m, int32_t attempt,
                                   const std::string& group) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view v{*e};
    if (v.rfind("FERRY_TOPIC=", 0) == 0 || v.rfind("FERRY_PARTITION=", 0) == 0
        || v.rfind("FERRY_OFFSET=", 0) == 0 || v.rfind("FERRY_KEY", 0) == 0
        || v.rfind("FERRY_ATTEMPT=", 0) == 0 || v.rfind("FERRY_GROUP=", 0) == 0
        || v.rfind("FERRY_HEADER_", 0) == 0)
      continue;
    env.emplace_back(v);
  }
  auto no_nul = [](std::string s) {
    if (auto i = s.find('\0'); i != std::string::npos)
      s.resize(i);
    return s;
  };
  env.push_back("FERRY_TOPIC=" + m.topic);
  env.push_back("FERRY_PARTITION=" + std::to_string(m.partition.value));
  env.push_back("FERRY_OFFSET=" + std::to_string(m.off.value));
  if (m.has_key)
    env.push_back("FERRY_KEY=" + no_nul(m.key));
  else
    env.push_back("FERRY_KEY_NULL=1");
  env.push_back("FERRY_ATTEMPT=" + std::to_string(attempt));
  env.push_back("FERRY_GROUP=" + group);
  for (auto& h : m.headers)
    env.push_back(env_name(h.key) + "=" + no_nul(h.value));
  return env;
}

/// Runs `/bin/sh -c cmd` with `input` on stdin. Blocks the calling thread
/// (a worker thread, never a CAF thread) until the child exited.
child_result run_child(const std::string& cmd, const std::vector<std::string>& env,
                       const std::string& input, child_registry& reg) {
  child_result res;
  int in_pipe[2];
  int err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    res.spawn_error = std::string{"pipe: "} + std::strerror(errno);
    return res;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    res.spawn_error = std::string{"pipe: "} + std::strerror(errno);
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    return res;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&fa, 2, 1); // CMD's stdout -> our stderr
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  // The child starts with default signal handling (we ignore SIGPIPE).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  // Its own process group: a stop signals the whole group (a shell that
  // did not exec its command keeps children that hold our pipes).
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK
                                    | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c";
  std::string cmd_copy = cmd;
  char* argv[] = {sh.data(), dash_c.data(), cmd_copy.data(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in_pipe[0]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    res.spawn_error = std::string{"posix_spawn /bin/sh: "} + std::strerror(rc);
    ::close(in_pipe[1]);
    ::close(err_pipe[0]);
    return res;
  }
  reg.add(pid);
  int in_fd = in_pipe[1];
  int err_fd = err_pipe[0];
  fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  fcntl(err_fd, F_SETFL, fcntl(err_fd, F_GETFL) | O_NONBLOCK);
  size_t written = 0;
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  std::string captured;
  bool line_done = false;
  char buf[4096];
  // After the child exited, a grandchild may still hold its stderr: read
  // what is there, then stop.
  auto child_exited = [pid] {
    siginfo_t info;
    info.si_pid = 0;
    return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0
           && info.si_pid == pid;
  };
  bool exited = false;
  while (err_fd >= 0) {
    pollfd fds[2];
    nfds_t n = 0;
    fds[n++] = pollfd{err_fd, POLLIN, 0};
    if (in_fd >= 0)
      fds[n++] = pollfd{in_fd, POLLOUT, 0};
    int ready = ::poll(fds, n, 100);
    if (ready < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (ready == 0) {
      if (exited)
        break; // exited and nothing more to read
      exited = child_exited();
      continue;
    }
    if (n > 1 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      auto w = ::write(in_fd, input.data() + written, input.size() - written);
      if (w > 0)
        written += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
        ::close(in_fd); // done, or EPIPE: the child does not read stdin
        in_fd = -1;
      }
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      auto r = ::read(err_fd, buf, sizeof(buf));
      if (r < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (r <= 0) {
        ::close(err_fd);
        err_fd = -1;
        break;
      }
      // Pass CMD's stderr through for the operator.
      [[maybe_unused]] auto ignored = ::write(2, buf, static_cast<size_t>(r));
      if (!line_done) {
        captured.append(buf, static_cast<size_t>(r));
        if (auto nl = captured.find('\n'); nl != std::string::npos) {
          captured.resize(nl);
          line_done = true;
        } else if (captured.size() > max_error_bytes) {
          captured.resize(max_error_bytes);
          line_done = true;
        }
      }
    }
  }
  if (in_fd >= 0)
    ::close(in_fd);
  if (err_fd >= 0)
    ::close(err_fd);
  // Wait without reaping, forget the pid, then reap: a signal sent by
  // child_registry never reaches a reused pid.
  siginfo_t info;
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0
         && errno == EINTR) {
  }
  reg.remove(pid);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    res.status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.signaled = true;
    res.status = 128 + WTERMSIG(status);
  }
  res.first_line = captured;
  if (!res.first_line.empty() && res.first_line.back() == '\r')
    res.first_line.pop_back();
  return res;
}

/// The error text of a failed run.
std::string failure_text(const child_result& r) {
  if (!r.spawn_error.empty())
    return r.spawn_error;
  if (!r.first_line.empty())
    return r.first_line;
  if (r.signaled)
    return "killed by signal " + std::to_string(r.status - 128);
  return "exit code " + std::to_string(r.status);
}

std::string record_text(const consumed_message& m, int32_t attempt) {
  return m.topic + "/" + std::to_string(m.partition.value) + "@"
         + std::to_string(m.off.value) + " attempt=" + std::to_string(attempt)
         + " key=" + (m.has_key ? m.key : std::string{"null"});
}

void print_line(const std::string& line) {
  static std::mutex mtx;
  std::lock_guard<std::mutex> guard{mtx};
  std::cout << line << std::endl;
}

// -- a small pool of dedicated threads -------------------------------------------

class worker_pool {
public:
  explicit worker_pool(int32_t n) {
    for (int32_t i = 0; i < n; ++i)
      threads_.emplace_back([this] { run(); });
  }
  ~worker_pool() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      closing_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      t.join();
  }
  void submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      jobs_.push_back(std::move(f));
    }
    cv_.notify_one();
  }

private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock{mtx_};
        cv_.wait(lock, [this] { return closing_ || !jobs_.empty(); });
        if (jobs_.empty())
          return;
        f = std::move(jobs_.front());
        jobs_.pop_front();
      }
      f();
    }
  }
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

/// Finished runs, handed from the pool to the main thread.
template <class T>
class result_queue {
public:
  void push(T x) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      items_.push_back(std::move(x));
    }
    cv_.notify_all();
  }
  /// Everything there now, waiting up to `wait` for the first item.
  std::vector<T> take(milliseconds wait) {
    std::unique_lock<std::mutex> lock{mtx_};
    cv_.wait_for(lock, wait, [this] { return !items_.empty(); });
    std::vector<T> out(std::make_move_iterator(items_.begin()),
                       std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<T> items_;
};


// -- queue mode ---------------------------------------------------------------------

/// Creates the group with the given settings or alters the given ones of an
/// existing group.
void apply_group_settings(admin_client& admin) {
  auto& o = opts();
  if (!o.max_attempts && !o.backoff_ms && !o.visibility_ms && !o.max_backoff_ms
      && !o.backoff_multiplier && !o.jitter && !o.ordering && !o.dlq_topic
      && !o.start && !o.delay_ms)
    return;
  std::optional<queue_group_config> current;
  auto described = admin.request<queue_group_description>(describe_atom_v,
                                                          queue_atom_v, o.group);
  if (described)
    current = described->config;
  else if (!is(described.error(), ec::unknown_group))
    fail(described.error());
  auto qc = current.value_or(queue_group_config{});
  if (o.max_attempts)
    qc.max_attempts = *o.max_attempts;
  if (o.backoff_ms) {
    qc.initial_backoff_ms = *o.backoff_ms;
    qc.max_backoff_ms = std::max(qc.max_backoff_ms, *o.backoff_ms);
  }
  if (o.visibility_ms)
    qc.visibility_timeout_ms = *o.visibility_ms;
  if (o.max_backoff_ms) {
    qc.max_backoff_ms = *o.max_backoff_ms;
    if (!o.backoff_ms)
      qc.initial_backoff_ms = std::min(qc.initial_backoff_ms, *o.max_backoff_ms);
  }
  if (o.backoff_multiplier)
    qc.backoff_multiplier = *o.backoff_multiplier;
  if (o.jitter)
    qc.jitter = *o.jitter;
  if (o.ordering)
    qc.ordering = *o.ordering;
  if (o.dlq_topic) // the broker refuses to change it on an existing group
    qc.dlq_topic = *o.dlq_topic;
  if (o.start) {
    auto start = parse_start_position(*o.start);
    if (!start)
      fail(make_error(ec::invalid_config, "--" + describe(start.error()).substr(
                                                    std::string_view{"invalid_config: "}.size())));
    qc.start = *start;
  }
  if (o.delay_ms)
    qc.delay_ms = *o.delay_ms;
  if (current && *current == qc)
    return;
  if (current)
    call<queue_group_config>(admin, alter_atom_v, group_atom_v, o.group, qc);
  else
    call<queue_group_config>(admin, create_atom_v, group_atom_v, o.group, qc);
}

struct queue_run {
  uint64_t id = 0;
  leased_message lease;
  child_result result;
};

struct in_flight {
  leased_message lease;
  int64_t visibility_ms = 0;
  timestamp_ms deadline = 0;
};

int run_queue(caf::actor_system& sys, connection_actor conn, broker_actor broker,
              milliseconds max_idle) {
  auto& o = opts();
  caf::scoped_actor self{sys};
  milliseconds timeout{o.request_timeout_ms};
  admin_client admin{sys, broker, timeout};
  apply_group_settings(admin);
  queue_consumer_config qcfg;
  qcfg.group = o.group;
  qcfg.topics = o.topics;
  qcfg.client_id = "ferryctl-work";
  qcfg.request_timeout = timeout;
  auto qc = spawn_queue_consumer(sys, qcfg, conn);
  if (!qc)
    fail(qc.error());
  child_registry reg;
  result_queue<queue_run> done;
  std::map<uint64_t, in_flight> running;
  uint64_t next_id = 1;
  auto last_record = steady::now();
  caf::error fatal;
  {
    worker_pool pool{o.concurrency};
    auto settle = [&](queue_run& r) {
      auto& m = r.lease.message;
      auto head = record_text(m, r.lease.attempt) + " -> ";
      queue_ack_request req;
      std::string line;
      if (r.result.spawn_error.empty() && r.result.status == 0) {
        req = make_ack(r.lease, queue_ack_kind::ack);
      } else if (r.result.spawn_error.empty() && r.result.status == 2) {
        req = make_ack(r.lease, queue_ack_kind::reject, failure_text(r.result));
      } else {
        req = make_ack(r.lease, queue_ack_kind::nack, failure_text(r.result));
      }
      self->request(*qc, timeout + milliseconds{1000}, ack_atom_v, req)
        .receive(
          [&](queue_ack_response& resp) {
            switch (req.kind) {
              case queue_ack_kind::ack:
                line = head + "ack";
                break;
              case queue_ack_kind::reject:
                line = head + "reject (" + req.error + ") dead-letter";
                break;
              default:
                line = head + "nack (" + req.error + ")";
                if (resp.dead_letter)
                  line += " dead-letter after " + std::to_string(resp.attempts)
                          + " attempts";
                else
                  line += " retry in "
                          + std::to_string(std::max<int64_t>(
                            0, resp.retry_at - wall_ms()))
                          + " ms";
            }
          },
          [&](caf::error& e) { line = head + "settle failed: " + error_text(e); });
      print_line(line);
      last_record = steady::now(); // idle counts from the last run's end
    };
    while (stop_requested == 0) {
      for (auto& r : done.take(milliseconds{0})) {
        running.erase(r.id);
        settle(r);
      }
      // Keep the leases of long runs alive.
      auto now = wall_ms();
      for (auto& [id, f] : running) {
        if (now < f.deadline - f.visibility_ms / 2)
          continue;
        auto req = make_ack(f.lease, queue_ack_kind::extend, {}, f.visibility_ms);
        self->request(*qc, timeout, ack_atom_v, req)
          .receive([&](queue_ack_response& resp) { f.deadline = resp.deadline; },
                   [&](caf::error& e) {
                     print_line(record_text(f.lease.message, f.lease.attempt)
                                + " -> extend failed: " + error_text(e));
                     f.deadline = now + f.visibility_ms; // do not retry at once
                   });
      }
      auto free = o.concurrency - static_cast<int32_t>(running.size());
      if (free <= 0) {
        for (auto& r : done.take(milliseconds{100})) {
          running.erase(r.id);
          settle(r);
        }
        continue;
      }
      if (running.empty() && max_idle.count() > 0) {
        auto idle = std::chrono::duration_cast<milliseconds>(steady::now() - last_record);
        if (idle >= max_idle)
          break;
      }
      // While commands run, a receive does not wait: the loop waits for the
      // first command to end instead (below), so its settle goes out at once.
      // (A receive waiting meanwhile held the settle back; with ordering=key
      // the key's next record only comes after it, so such keys ran at one
      // record per wait.)
      int64_t wait = running.empty() ? 500 : 0;
      if (running.empty() && max_idle.count() > 0) {
        auto idle = std::chrono::duration_cast<milliseconds>(steady::now() - last_record);
        wait = std::max<int64_t>(1, std::min<int64_t>(wait, (max_idle - idle).count()));
      }
      std::vector<leased_message> got;
      caf::error err;
      self->request(*qc, milliseconds{wait} + timeout + milliseconds{1000}, receive_atom_v,
                    free, wait)
        .receive([&](std::vector<leased_message>& xs) { got = std::move(xs); },
                 [&](caf::error& e) { err = std::move(e); });
      if (err) {
        if (!is_retriable(err)) {
          fatal = err;
          break;
        }
        std::this_thread::sleep_for(milliseconds{200});
        continue;
      }
      if (got.empty() && !running.empty()) {
        for (auto& r : done.take(milliseconds{100})) {
          running.erase(r.id);
          settle(r);
        }
        continue;
      }
      if (!got.empty())
        last_record = steady::now();
      auto recv_now = wall_ms();
      for (auto& lm : got) {
        auto id = next_id++;
        auto vis = std::max<int64_t>(1000, lm.deadline - recv_now);
        running.emplace(id, in_flight{lm, vis, lm.deadline});
        pool.submit([&done, &reg, id, lm, group = o.group, cmd = o.exec] {
          auto env = child_env(lm.message, lm.attempt, group);
          auto res = run_child(cmd, env, lm.message.has_value ? lm.message.value : "", reg);
          done.push(queue_run{id, lm, std::move(res)});
        });
      }
    }
    if (stop_requested != 0)
      reg.signal_all(SIGTERM);
    // The pool's destructor waits for the children; their records are not
    // settled: the leave below releases them.
  }
  int64_t released = 0;
  self->request(*qc, milliseconds{10000}, stop_atom_v)
    .receive([&](int64_t n) { released = n; }, [](caf::error&) {});
  if (stop_requested != 0)
    std::cerr << "ferryctl: work stopped; " << released << " leases released\n";
  if (fatal)
    fail(fatal);
  return 0;
}

// -- stream mode ----------------------------------------------------------------------

struct stream_batch_result {
  bool ok = true;
  std::string error;
};

int run_stream(caf::actor_system& sys, connection_actor conn, milliseconds max_idle) {
  auto& o = opts();
  caf::scoped_actor self{sys};
  milliseconds timeout{o.request_timeout_ms};
  consumer_config ccfg;
  ccfg.client_id = "ferryctl-work";
  ccfg.group_id = o.group;
  ccfg.topics = o.topics;
  ccfg.auto_offset_reset = "earliest";
  if (o.start) {
    if (*o.start != "earliest" && *o.start != "latest")
      fail(make_error(ec::invalid_config,
                      "--start '" + *o.start
                        + "': a stream group starts at earliest or latest "
                          "(ferryctl group reset-offsets --to-datetime moves it "
                          "to a time)"));
    ccfg.auto_offset_reset = *o.start;
  }
  ccfg.enable_auto_commit = false;
  ccfg.session_timeout = milliseconds{10000};
  ccfg.heartbeat_interval = milliseconds{1000};
  ccfg.fetch_max_wait = milliseconds{200};
  ccfg.max_poll_records = std::max(100, o.concurrency * 20);
  auto cons = spawn_consumer(sys, ccfg, conn);
  if (!cons)
    fail(cons.error());
  producer_config pcfg;
  pcfg.client_id = "ferryctl-work-dlq";
  pcfg.linger = milliseconds{0};
  auto prod = spawn_producer(sys, pcfg, conn);
  if (!prod) {
    caf::anon_send_exit(*cons, caf::exit_reason::user_shutdown);
    fail(prod.error());
  }
  stream_dlq_config dcfg;
  dcfg.group = o.group;
  dcfg.retry.max_attempts = o.max_attempts.value_or(5);
  dcfg.retry.initial_backoff = milliseconds{o.backoff_ms.value_or(1000)};
  dcfg.retry.max_backoff = o.max_backoff_ms
                             ? milliseconds{*o.max_backoff_ms}
                             : std::max(dcfg.retry.initial_backoff, milliseconds{60000});
  if (o.backoff_multiplier)
    dcfg.retry.multiplier = *o.backoff_multiplier;
  if (o.jitter)
    dcfg.retry.jitter = *o.jitter;
  if (o.dlq_topic)
    dcfg.dlq_topic = *o.dlq_topic;
  dcfg.request_timeout = timeout;
  stream_dlq helper{sys, conn, *prod, dcfg};
  child_registry reg;
  std::atomic<bool> cancel{false};
  auto last_record = steady::now();
  bool assigned = false;
  auto started = steady::now();
  std::string fatal;
  {
    worker_pool pool{o.concurrency};
    while (stop_requested == 0) {
      int64_t wait = 500;
      if (max_idle.count() > 0) {
        auto idle = std::chrono::duration_cast<milliseconds>(steady::now() - last_record);
        if (idle >= max_idle)
          break;
        wait = std::max<int64_t>(1, std::min<int64_t>(wait, (max_idle - idle).count()));
      }
      std::vector<consumed_message> msgs;
      caf::error err;
      self->request(*cons, milliseconds{wait} + timeout, poll_atom_v, static_cast<int32_t>(wait))
        .receive([&](std::vector<consumed_message>& xs) { msgs = std::move(xs); },
                 [&](caf::error& e) { err = std::move(e); });
      if (err) {
        if (!is_retriable(err)) {
          fatal = error_text(err);
          break;
        }
        std::this_thread::sleep_for(milliseconds{200});
        continue;
      }
      if (msgs.empty()) {
        if (!assigned) {
          // The idle clock starts once the group gave us partitions.
          self->request(*cons, timeout, assign_atom_v)
            .receive([&](std::vector<topic_partition>& tps) { assigned = !tps.empty(); },
                     [](caf::error&) {});
          // A member that never gets partitions still ends (30 s grace).
          if (!assigned && max_idle.count() > 0
              && steady::now() - started < max_idle + std::chrono::seconds{30})
            last_record = steady::now();
        }
        continue;
      }
      assigned = true;
      last_record = steady::now();
      // One job per partition: its records in order.
      std::map<int32_t, std::vector<consumed_message>> by_partition;
      for (auto& m : msgs)
        by_partition[m.partition.value].push_back(std::move(m));
      result_queue<stream_batch_result> results;
      for (auto& [p, list] : by_partition) {
        pool.submit([&results, &helper, &reg, &cancel, list = std::move(list),
                     group = o.group, cmd = o.exec] {
          stream_batch_result br;
          for (auto& m : list) {
            auto handler = [&](const consumed_message& msg, int32_t attempt) {
              if (cancel.load())
                return handler_result::failure("worker stopping");
              auto res = run_child(cmd, child_env(msg, attempt, group),
                                   msg.has_value ? msg.value : "", reg);
              auto head = record_text(msg, attempt) + " -> ";
              if (res.spawn_error.empty() && res.status == 0) {
                print_line(head + "ok");
                return handler_result::success();
              }
              auto text = failure_text(res);
              if (res.spawn_error.empty() && res.status == 2) {
                print_line(head + "reject (" + text + ")");
                return handler_result::dead_letter(text);
              }
              print_line(head + "failed (" + text + ")");
              return handler_result::failure(text);
            };
            auto out = helper.process(m, handler, &cancel);
            if (!out) {
              br.ok = false;
              br.error = error_text(out.error());
              break;
            }
            if (out->cancelled() || (cancel.load() && !out->processed)) {
              br.ok = false;
              br.error = "stopped";
              break;
            }
            if (out->dead_lettered)
              print_line(record_text(m, out->attempts) + " -> dead-letter to "
                         + out->report.topic + "/"
                         + std::to_string(out->report.partition.value) + "@"
                         + std::to_string(out->report.off.value));
          }
          results.push(std::move(br));
        });
      }
      size_t pending = by_partition.size();
      bool ok = true;
      std::string error;
      while (pending > 0) {
        if (stop_requested != 0 && !cancel.load()) {
          cancel = true;
          reg.signal_all(SIGTERM);
        }
        for (auto& r : results.take(milliseconds{100})) {
          --pending;
          if (!r.ok && ok) {
            ok = false;
            error = r.error;
          }
        }
      }
      if (!ok) {
        if (stop_requested == 0)
          fatal = "cannot dead-letter a record: " + error;
        break; // nothing of this batch is committed
      }
      caf::error cerr;
      self->request(*cons, timeout, commit_atom_v)
        .receive([](bool) {}, [&](caf::error& e) { cerr = std::move(e); });
      if (cerr)
        print_line("commit failed: " + error_text(cerr)
                   + " (the batch may be delivered again)");
      last_record = steady::now(); // idle counts from the last run's end
    }
  }
  self->request(*cons, milliseconds{10000}, stop_atom_v).receive([](bool) {}, [](caf::error&) {});
  self->request(*prod, milliseconds{10000}, flush_atom_v).receive([](bool) {}, [](caf::error&) {});
  caf::anon_send_exit(*prod, caf::exit_reason::user_shutdown);
  if (stop_requested != 0)
    std::cerr << "ferryctl: work stopped\n";
  if (!fatal.empty())
    throw failure{fatal};
  return 0;
}

} // namespace

void add_work_command(CLI::App& app, std::function<void()> on_selected) {
  auto& o = opts();
  auto w = app.add_subcommand("work", "run a command once per record (queue or stream group)");
  w->add_option("topic", o.topics, "the topics to read (one member reads them all)")
    ->required();
  w->add_option("--group", o.group, "consumer group")->required();
  w->add_option("--mode", o.mode, "queue (leases) or stream (partitions, retry then DLQ)")
    ->check(CLI::IsMember({"queue", "stream"}))
    ->capture_default_str();
  w->add_option("--exec", o.exec,
                "command for /bin/sh -c: value on stdin, FERRY_* in the environment; "
                "exit 0 acks, 2 dead-letters, else retry")
    ->required();
  w->add_option("--concurrency", o.concurrency, "commands running at once")
    ->check(CLI::Range(1, 256))
    ->capture_default_str();
  w->add_option("--max-idle", o.max_idle,
                "exit 0 after this long without a record (20s, 500ms, 2m; 0 = never)")
    ->capture_default_str();
  w->add_option("--max-attempts", o.max_attempts,
                "failed attempts before the DLQ (queue: sets the group's config)")
    ->check(CLI::Range(1, 1000000));
  w->add_option("--backoff-ms", o.backoff_ms,
                "first retry backoff in ms (queue: sets the group's config)")
    ->check(CLI::Range(int64_t{0}, int64_t{86400000}));
  w->add_option("--visibility-ms", o.visibility_ms,
                "lease time in ms (queue mode: sets the group's config)")
    ->check(CLI::Range(int64_t{1}, int64_t{43200000}));
  w->add_option("--max-backoff-ms", o.max_backoff_ms,
                "cap of the retry backoff in ms (queue: sets the group's config)")
    ->check(CLI::Range(int64_t{0}, int64_t{86400000}));
  w->add_option("--backoff-multiplier", o.backoff_multiplier,
                "growth of the backoff per failed attempt (default 2; queue: sets "
                "the group's config)")
    ->check(CLI::Range(1.0, 100.0));
  w->add_option("--jitter", o.jitter,
                "share of each backoff drawn at random: 1 full jitter (default), 0.5 "
                "equal, 0 none (queue: sets the group's config)")
    ->check(CLI::Range(0.0, 1.0));
  w->add_option("--ordering", o.ordering,
                "none (any member, any record) or key (one record of a key at a "
                "time, in order; queue: sets the group's config)")
    ->check(CLI::IsMember({"none", "key"}));
  w->add_option("--start", o.start,
                "where a new group begins on a partition it has no position on: "
                "earliest (default), latest, or a time (2026-12-01T08:00:00Z, or "
                "epoch ms; queue: sets the group's config)");
  w->add_option("--delay-ms", o.delay_ms,
                "deliver each record this long after its timestamp unless its "
                "ferry-delay-ms header says otherwise (queue: sets the group's config)")
    ->check(CLI::Range(int64_t{0}, int64_t{43200000}));
  w->add_option("--dlq-topic", o.dlq_topic,
                "dead-letter topic (default <topic>.<group>.dlq; queue: only when "
                "the group is created)");
  w->callback(std::move(on_selected));
}

int run_work(caf::actor_system& sys, connection_actor conn, broker_actor broker) {
  auto& o = opts();
  try {
    auto idle = parse_duration(o.max_idle);
    if (!idle)
      throw failure{"invalid_config: --max-idle '" + o.max_idle
                         + "': expected e.g. 20s, 500ms, 2m"};
    if (o.mode == "stream" && o.visibility_ms)
      throw failure{"invalid_config: --visibility-ms is for --mode queue"};
    if (o.mode == "stream" && o.ordering)
      throw failure{"invalid_config: --ordering is for --mode queue (a stream "
                         "group keeps each partition in order)"};
    if (o.mode == "stream" && o.delay_ms)
      throw failure{"invalid_config: --delay-ms is for --mode queue"};
    // Children may exit without reading stdin: EPIPE, not SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    {
      // Fails early on an unknown topic.
      admin_client admin{sys, broker, milliseconds{o.request_timeout_ms}};
      std::set<std::string> seen;
      for (auto& t : o.topics) {
        if (!seen.insert(t).second)
          throw failure{"invalid_config: topic " + t + " is named twice"};
        call<topic_description>(admin, describe_atom_v, topic_atom_v, t);
      }
    }
    if (o.mode == "stream")
      return run_stream(sys, conn, *idle);
    return run_queue(sys, conn, broker, *idle);
  } catch (const failure& f) {
    return report(f);
  }
}

} // namespace ferry::ctl
