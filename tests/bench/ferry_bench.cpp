// ferry-bench: load generator for a running broker. Prints throughput and
// latency percentiles.
//
//   produce  send N messages through the producer actor, --send-batch per
//            request (the batch API; 1: one request per message); latency
//            is send -> delivery report. With --rate R the load is open-loop: message i
//            is due at start + i/R, whatever happened to earlier messages,
//            and its latency runs from that intended send time (so a stall
//            is charged to every message it delayed: no coordinated
//            omission). --window still caps the messages in flight; a
//            message held back by it is late, and its latency says so.
//   consume  read N messages from the earliest offsets; throughput only
//   e2e      produce and consume at once; latency is the producer's
//            timestamp (in the payload) -> the consumer's poll returning it
//   queue    --workers members of a new queue-mode group lease and ack the
//            --messages records already in the topic (produce them first),
//            over the CAF queue consumer (--via caf) or the HTTP API (--via
//            http, --http-port; one keep-alive connection per worker, the
//            acks of a receive in one batch call). --poison-pct P: P%
//            of the records (chosen by offset) are nacked on every attempt,
//            so each takes --max-attempts deliveries and then goes to the
//            DLQ. Prints records acked per second, and with poison the
//            records settled (acked + dead-lettered) and deliveries per second.
//
// Without --rate the producer is kept pipelined (closed loop): a driver actor
// keeps up to --window messages in flight (whole requests of --send-batch)
// and never waits for one round trip per request; latency then runs from the
// actual send. With --rate, each pacing tick sends what is due in requests of
// up to --send-batch; every message's latency still runs from its own
// intended send time.

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "actors/client/queue_consumer.hpp"
#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <iomanip>
#include <iostream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using json = nlohmann::json;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

struct bench_options {
  std::string mode;
  std::string broker = default_broker_address();
  std::string topic = "ferry-bench";
  int64_t messages = 100000;
  size_t size = 1024;
  int64_t keys = 0;
  int32_t partitions = 3;
  int16_t replication_factor = 1;
  std::string acks = "all";
  /// Producer batch.size and linger.ms. 1 MiB batches (max.message.bytes,
  /// the broker's default limit; the producer's per-record estimate leaves
  /// room for the batch header): a quarter of the requests, appends and
  /// fsyncs of 256 KB ones at full speed, and ~15% more msgs/s with
  /// --window 16384 (2026-11-29, single node, fresh data dirs: 945k-1006k
  /// against 825k-887k). linger 1 ms:
  /// at 50k msgs/s a batch waits at most 1 ms; under load it still grows to
  /// batch.size, since a lingered batch stays open while the partition's
  /// requests are all in flight (see producer.cpp, open_due).
  size_t batch_bytes = 1048576;
  int64_t linger_ms = 1;
  std::string compression = "none";
  /// Messages in flight (sent, not answered): 16 MB of 1 KB messages, room
  /// for 5 requests of 1 MiB in flight on each of 3 partitions. CAF 0.17
  /// keeps pending responses in a flat map, O(n) each: with --send-batch 1
  /// keep it ~1000.
  size_t window = 16384;
  /// Messages per produce request to the producer actor (the batch API,
  /// one answer per request); 1: the single-message API.
  size_t send_batch = 256;
  int64_t timeout_ms = 120000;
  double rate = 0; ///< messages/s; 0: closed loop, as fast as --window allows
  int64_t tick_us = 250; ///< pacing timer period with --rate
  /// Off: every request goes through the --broker node, which relays what
  /// other nodes lead (the client library's behaviour before 2026-11-30).
  bool route_to_leaders = true;
  bool json = false;
  /// A node started with --tls-*: this client's certificate, key, CA.
  tls_settings tls;
  std::string user;
  std::string password_file;
  std::string cluster_secret_file;
  // queue mode
  int32_t workers = 4;
  std::string via = "caf";
  uint16_t http_port = 8080;
  double poison_pct = 0;
  int32_t max_attempts = 3;
  int32_t receive_max = 500;
};

/// Latencies in nanoseconds, reduced to the usual percentiles in ms.
struct latency_summary {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

latency_summary summarize(std::vector<int64_t> ns) {
  latency_summary out;
  if (ns.empty())
    return out;
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) {
    auto i = static_cast<size_t>(q * static_cast<double>(ns.size() - 1) + 0.5);
    return static_cast<double>(ns[std::min(i, ns.size() - 1)]) / 1e6;
  };
  out.p50 = at(0.50);
  out.p99 = at(0.99);
  out.p999 = at(0.999);
  out.max = static_cast<double>(ns.back()) / 1e6;
  return out;
}

struct run_result {
  int64_t ok = 0;
  int64_t failed = 0;
  double seconds = 0;
  std::vector<int64_t> latencies_ns;
  /// With --rate: actual send time minus intended send time, per message.
  std::vector<int64_t> send_lag_ns;
  std::string first_error;
};

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// -- produce driver ---------------------------------------------------------------

struct produce_driver_state {
  producer_actor prod;
  bench_options opt;
  uint64_t run_id = 0;
  std::string payload;
  int64_t sent = 0;
  int64_t answered = 0;
  run_result res;
  steady::time_point start;
  int64_t start_wall_ns = 0;
  std::shared_ptr<std::promise<run_result>> done;
  bool tick_pending = false;
  bool finished = false;

  /// With --rate: when message i is due.
  steady::time_point intended(int64_t i) const {
    auto ns = static_cast<double>(i) * 1e9 / opt.rate;
    return start + std::chrono::nanoseconds{static_cast<int64_t>(ns)};
  }

  /// With --rate: how many messages are due by `now` (all of 0..n-1).
  int64_t due_by(steady::time_point now) const {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count();
    auto n = static_cast<int64_t>(static_cast<double>(ns) * opt.rate / 1e9) + 1;
    // Rounding: never count a message whose intended time is still ahead.
    while (n > 0 && intended(n - 1) > now)
      --n;
    return std::min(n, opt.messages);
  }

  /// `sent_ns`: the wall clock at the (actual) send, for closed loop.
  client_message make_message(int64_t i, int64_t sent_ns) const {
    client_message m;
    m.topic = opt.topic;
    if (opt.keys > 0) {
      m.has_key = true;
      m.key = "key-" + std::to_string(i % opt.keys);
    }
    m.value = payload;
    // The payload carries the send time (with --rate: the intended one) and
    // the run id, for e2e latency.
    auto ts = opt.rate > 0 ? start_wall_ns + (intended(i) - start).count() : sent_ns;
    std::memcpy(m.value.data(), &ts, sizeof(ts));
    std::memcpy(m.value.data() + 8, &run_id, sizeof(run_id));
    return m;
  }
};

caf::behavior produce_driver(caf::stateful_actor<produce_driver_state>* self,
                             producer_actor prod, bench_options opt, uint64_t run_id,
                             std::shared_ptr<std::promise<run_result>> done) {
  auto& st = self->state;
  st.prod = prod;
  st.opt = opt;
  st.run_id = run_id;
  st.done = std::move(done);
  st.payload.resize(std::max<size_t>(opt.size, 16));
  std::mt19937_64 rng{run_id};
  for (auto& c : st.payload)
    c = static_cast<char>('a' + rng() % 26);
  st.res.latencies_ns.reserve(static_cast<size_t>(opt.messages));
  if (opt.rate > 0)
    st.res.send_lag_ns.reserve(static_cast<size_t>(opt.messages));
  st.start = steady::now();
  st.start_wall_ns = wall_ns();
  auto finish = [self] {
    auto& st = self->state;
    if (st.finished)
      return;
    st.finished = true;
    st.res.seconds = std::chrono::duration<double>(steady::now() - st.start).count();
    st.done->set_value(std::move(st.res));
    self->quit();
  };
  auto pump = std::make_shared<std::function<void()>>();
  // Accounts for the answer to messages [first, first + n), sent at t0.
  auto answered = [self, pump, finish](int64_t first, int64_t n, steady::time_point t0,
                                       caf::error* err) {
    auto& st = self->state;
    auto now = steady::now();
    if (err) {
      if (st.res.first_error.empty())
        st.res.first_error = error_text(*err);
      st.res.failed += n;
    } else {
      for (int64_t k = 0; k < n; ++k) {
        // Open loop: from each message's intended send time.
        auto from = st.opt.rate > 0 ? st.intended(first + k) : t0;
        st.res.latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - from).count());
      }
      st.res.ok += n;
    }
    st.answered += n;
    if (st.answered == st.opt.messages)
      finish();
    else
      (*pump)();
  };
  *pump = [self, pump, answered] {
    auto& st = self->state;
    auto paced = st.opt.rate > 0;
    auto per_request = static_cast<int64_t>(std::max<size_t>(st.opt.send_batch, 1));
    auto window = static_cast<int64_t>(st.opt.window);
    while (st.sent < st.opt.messages) {
      auto in_flight = st.sent - st.answered;
      auto n = std::min(per_request, st.opt.messages - st.sent);
      if (paced) {
        // Open loop: send what is due by now (in requests of up to
        // --send-batch), then wait for the pacing tick. A message the
        // window holds back is late and its latency says so.
        auto now = steady::now();
        n = std::min({n, st.due_by(now) - st.sent, window - in_flight});
        if (n <= 0) {
          if (!st.tick_pending && in_flight < window) {
            st.tick_pending = true;
            auto wait = std::max(std::chrono::duration_cast<std::chrono::microseconds>(
                                   st.intended(st.sent) - now),
                                 std::chrono::microseconds{st.opt.tick_us});
            self->delayed_send(self, wait, tick_atom_v);
          }
          return;
        }
      } else if (in_flight + n > window && in_flight > 0) {
        return; // closed loop: whole requests only, as answers free room
      }
      auto first = st.sent;
      st.sent += n;
      auto t0 = steady::now();
      auto t0_wall = wall_ns();
      if (paced)
        for (int64_t k = 0; k < n; ++k)
          st.res.send_lag_ns.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - st.intended(first + k))
              .count());
      if (st.opt.send_batch <= 1) {
        // The single-message API: one request per message.
        self->request(st.prod, caf::infinite, produce_atom_v, st.make_message(first, t0_wall))
          .then([answered, first, t0](delivery_report&) { answered(first, 1, t0, nullptr); },
                [answered, first, t0](caf::error& err) { answered(first, 1, t0, &err); });
        continue;
      }
      std::vector<client_message> msgs;
      msgs.reserve(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        msgs.push_back(st.make_message(first + k, t0_wall));
      self->request(st.prod, caf::infinite, produce_atom_v, std::move(msgs))
        .then([answered, first, n,
               t0](std::vector<delivery_report>&) { answered(first, n, t0, nullptr); },
              [answered, first, n, t0](caf::error& err) { answered(first, n, t0, &err); });
    }
  };
  (*pump)();
  // All work happens in response handlers and, with --rate, pacing ticks.
  return {[self, pump](tick_atom) {
    self->state.tick_pending = false;
    (*pump)();
  }};
}

// -- consume driver ---------------------------------------------------------------

struct consume_driver_state {
  consumer_actor cons;
  bench_options opt;
  uint64_t run_id = 0; ///< 0: count every message
  run_result res;
  int64_t bytes = 0;
  bool started = false;
  steady::time_point start;
  steady::time_point last_data;
  std::shared_ptr<std::promise<run_result>> done;
};

caf::behavior consume_driver(caf::stateful_actor<consume_driver_state>* self,
                             consumer_actor cons, bench_options opt, uint64_t run_id,
                             std::shared_ptr<std::promise<run_result>> done) {
  auto& st = self->state;
  st.cons = cons;
  st.opt = opt;
  st.run_id = run_id;
  st.done = std::move(done);
  st.start = steady::now();
  st.last_data = st.start;
  st.res.latencies_ns.reserve(static_cast<size_t>(opt.messages));
  auto finish = [self] {
    auto& st = self->state;
    st.res.seconds = std::chrono::duration<double>(st.last_data - st.start).count();
    st.done->set_value(std::move(st.res));
    self->quit();
  };
  auto loop = std::make_shared<std::function<void()>>();
  *loop = [self, loop, finish] {
    auto& st = self->state;
    self->request(st.cons, milliseconds{30000}, poll_atom_v, int32_t{200})
      .then(
        [self, loop, finish](std::vector<consumed_message>& msgs) {
          auto& st = self->state;
          auto now = steady::now();
          auto now_ns = wall_ns();
          for (auto& m : msgs) {
            if (st.run_id != 0) {
              uint64_t id = 0;
              int64_t ts = 0;
              if (m.value.size() < 16)
                continue;
              std::memcpy(&ts, m.value.data(), sizeof(ts));
              std::memcpy(&id, m.value.data() + 8, sizeof(id));
              if (id != st.run_id)
                continue;
              st.res.latencies_ns.push_back(now_ns - ts);
            }
            if (!st.started) {
              st.started = true;
              if (st.run_id == 0)
                st.start = now; // consume: time from the first message
            }
            st.bytes += static_cast<int64_t>(m.value.size() + m.key.size());
            ++st.res.ok;
          }
          if (!msgs.empty())
            st.last_data = now;
          if (st.res.ok >= st.opt.messages
              || now - st.last_data > milliseconds{st.opt.timeout_ms}) {
            finish();
            return;
          }
          (*loop)();
        },
        [self, finish](caf::error& err) {
          auto& st = self->state;
          st.res.first_error = error_text(err);
          finish();
        });
  };
  (*loop)();
  return {[](int32_t) {}}; // all work happens in response handlers
}

// -- queue driver ---------------------------------------------------------------------

/// What every queue worker adds to (several threads: atomics).
struct queue_counts {
  std::atomic<int64_t> acked{0};
  std::atomic<int64_t> dead{0};       ///< nacks answered with dead_letter
  std::atomic<int64_t> deliveries{0}; ///< leases received
  std::atomic<int64_t> failures{0};   ///< failed requests
  std::atomic<int64_t> first_ns{0};   ///< first lease (steady clock)
  std::atomic<int64_t> last_ns{0};    ///< last settle
  std::atomic<bool> stop{false};
  std::mutex mtx;
  std::string first_error;

  void error(const std::string& text) {
    ++failures;
    std::lock_guard<std::mutex> guard{mtx};
    if (first_error.empty())
      first_error = text;
  }
};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           steady::now().time_since_epoch())
    .count();
}

/// The bench's poison records: P% of the offsets of each partition.
bool is_poison(int32_t partition, int64_t off, double pct) {
  if (pct <= 0)
    return false;
  auto h = static_cast<uint64_t>(off) * 0x9E3779B97F4A7C15ull
           ^ static_cast<uint64_t>(partition) * 0xC2B2AE3D27D4EB4Full;
  return static_cast<double>((h >> 20) % 10000) < pct * 100.0;
}

void note_first(queue_counts& c) {
  int64_t zero = 0;
  c.first_ns.compare_exchange_strong(zero, steady_ns());
}

/// One CAF worker: receive up to receive_max, settle them all at once,
/// receive again.
caf::behavior queue_worker(caf::event_based_actor* self, queue_consumer_actor qc,
                           bench_options opt, std::shared_ptr<queue_counts> counts) {
  auto loop = std::make_shared<std::function<void()>>();
  *loop = [self, qc, opt, counts, loop] {
    if (counts->stop.load())
      return self->quit();
    self->request(qc, milliseconds{40000}, receive_atom_v, opt.receive_max, int64_t{1000})
      .then(
        [self, qc, opt, counts, loop](std::vector<leased_message>& xs) {
          if (xs.empty())
            return (*loop)();
          note_first(*counts);
          counts->deliveries += static_cast<int64_t>(xs.size());
          auto left = std::make_shared<size_t>(xs.size());
          for (auto& m : xs) {
            bool poison = is_poison(m.message.partition.value, m.message.off.value,
                                    opt.poison_pct);
            auto req = make_ack(m, poison ? queue_ack_kind::nack : queue_ack_kind::ack,
                                poison ? "bench poison" : "");
            self->request(qc, milliseconds{30000}, ack_atom_v, req)
              .then(
                [counts, left, loop, poison](queue_ack_response& r) {
                  if (!poison)
                    ++counts->acked;
                  else if (r.dead_letter)
                    ++counts->dead;
                  counts->last_ns = steady_ns();
                  if (--*left == 0)
                    (*loop)();
                },
                [counts, left, loop](caf::error& e) {
                  counts->error(error_text(e));
                  if (--*left == 0)
                    (*loop)();
                });
          }
        },
        [self, counts, loop](caf::error& e) {
          counts->error(error_text(e));
          (*loop)();
        });
  };
  (*loop)();
  return {[](int32_t) {}}; // all work happens in response handlers
}

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

/// One HTTP worker on its own thread: a keep-alive connection, one receive
/// (long poll 1 s) then one request per settle.
void http_queue_worker(const bench_options& opt, const std::string& group, int index,
                       queue_counts& counts) {
  try {
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver{io};
    beast::tcp_stream stream{io};
    stream.connect(resolver.resolve("127.0.0.1", std::to_string(opt.http_port)));
    beast::flat_buffer buf;
    auto call = [&](const std::string& target, const json& body) {
      bhttp::request<bhttp::string_body> req{bhttp::verb::post, target, 11};
      req.set(bhttp::field::host, "127.0.0.1");
      req.set(bhttp::field::content_type, "application/json");
      req.keep_alive(true);
      req.body() = body.dump();
      req.prepare_payload();
      bhttp::write(stream, req);
      bhttp::response<bhttp::string_body> res;
      bhttp::read(stream, buf, res);
      if (res.result_int() != 200)
        throw std::runtime_error(target + ": HTTP " + std::to_string(res.result_int())
                                 + " " + res.body());
      return json::parse(res.body());
    };
    auto member = "bench-" + std::to_string(index);
    auto base = "/v1/groups/" + group + "/queue/" + opt.topic;
    while (!counts.stop.load()) {
      auto got = call(base + "/receive",
                      json{{"member", member}, {"max", opt.receive_max}, {"waitMs", 1000}});
      auto& recs = got["records"];
      if (recs.empty())
        continue;
      note_first(counts);
      counts.deliveries += static_cast<int64_t>(recs.size());
      // One batch ack and one batch nack per receive.
      json acks = json::array(), nacks = json::array();
      for (auto& r : recs) {
        auto part = r["partition"].get<int32_t>();
        auto off = r["offset"].get<int64_t>();
        json one{{"partition", part}, {"offset", off}, {"leaseId", r["leaseId"]}};
        if (is_poison(part, off, opt.poison_pct)) {
          one["error"] = "bench poison";
          nacks.push_back(std::move(one));
        } else {
          acks.push_back(std::move(one));
        }
      }
      for (auto* batch : {&acks, &nacks}) {
        if (batch->empty())
          continue;
        bool nack = batch == &nacks;
        auto ans = call(base + (nack ? "/nack" : "/ack"),
                        json{{"member", member}, {"records", *batch}});
        for (auto& r : ans["results"]) {
          if (r.contains("error"))
            counts.error(r["error"].dump());
          else if (!nack)
            ++counts.acked;
          else if (r.value("deadLetter", false))
            ++counts.dead;
        }
        counts.last_ns = steady_ns();
      }
    }
  } catch (const std::exception& e) {
    counts.error(std::string{"http worker: "} + e.what());
  }
}

// -- setup ----------------------------------------------------------------------------

/// Creates the topic unless it exists; its partition count.
caf::expected<int32_t> ensure_topic(caf::scoped_actor& self, broker_actor broker,
                                    const bench_options& opt) {
  caf::expected<int32_t> out{0};
  caf::error err;
  self->request(broker, milliseconds{30000}, describe_atom_v, topic_atom_v, opt.topic)
    .receive([&](topic_description& d) { out = static_cast<int32_t>(d.partitions.size()); },
             [&](caf::error& e) { err = std::move(e); });
  if (!err)
    return out;
  if (!is(err, ec::unknown_topic))
    return err;
  topic_config cfg;
  cfg.partitions = opt.partitions;
  cfg.replication_factor = opt.replication_factor;
  err = caf::error{};
  self->request(broker, milliseconds{30000}, create_atom_v, topic_atom_v, opt.topic, cfg)
    .receive([&](topic_metadata& t) { out = static_cast<int32_t>(t.partitions.size()); },
             [&](caf::error& e) { err = std::move(e); });
  if (err && !is(err, ec::topic_exists))
    return err;
  return out;
}

void print_line(const std::string& what, const run_result& r, const bench_options& opt,
                bool with_latency) {
  auto mps = r.seconds > 0 ? static_cast<double>(r.ok) / r.seconds : 0.0;
  auto mbps = mps * static_cast<double>(opt.size) / 1e6;
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  os << what << ": " << r.ok << " msgs in " << std::setprecision(3) << r.seconds << " s, "
     << std::setprecision(0) << mps << " msgs/s, " << std::setprecision(1) << mbps << " MB/s";
  if (with_latency) {
    auto l = summarize(r.latencies_ns);
    os << std::setprecision(3) << "; latency ms p50 " << l.p50 << " p99 " << l.p99
       << " p99.9 " << l.p999 << " max " << l.max;
  }
  if (!r.send_lag_ns.empty()) {
    auto l = summarize(r.send_lag_ns);
    os << std::setprecision(0) << "; target " << opt.rate << " msgs/s"
       << std::setprecision(3) << ", send lag ms p99 " << l.p99 << " max " << l.max;
  }
  if (r.failed > 0)
    os << "; failed " << r.failed << " (" << r.first_error << ")";
  else if (!r.first_error.empty())
    os << "; error: " << r.first_error;
  std::cout << os.str() << '\n';
}

json to_json(const run_result& r, const bench_options& opt, bool with_latency) {
  auto mps = r.seconds > 0 ? static_cast<double>(r.ok) / r.seconds : 0.0;
  json out{{"messages", r.ok},
           {"failed", r.failed},
           {"seconds", r.seconds},
           {"msgs_per_sec", mps},
           {"mb_per_sec", mps * static_cast<double>(opt.size) / 1e6}};
  if (with_latency) {
    auto l = summarize(r.latencies_ns);
    out["latency_ms"] = json{{"p50", l.p50}, {"p99", l.p99}, {"p99.9", l.p999}, {"max", l.max}};
  }
  if (!r.send_lag_ns.empty()) {
    auto l = summarize(r.send_lag_ns);
    out["target_msgs_per_sec"] = opt.rate;
    out["send_lag_ms"] = json{{"p50", l.p50}, {"p99", l.p99}, {"p99.9", l.p999}, {"max", l.max}};
  }
  if (!r.first_error.empty())
    out["error"] = r.first_error;
  return out;
}

} // namespace

int main(int argc, char** argv) {
  bench_options opt;
  CLI::App app{"ferry-bench: throughput and latency of a Ferry broker"};
  app.add_option("mode", opt.mode, "produce, consume or e2e")
    ->required()
    ->check(CLI::IsMember({"produce", "consume", "e2e", "queue"}));
  app.add_option("--broker", opt.broker, "HOST:PORT (env FERRY_BROKER)")->capture_default_str();
  app.add_option("--topic", opt.topic)->capture_default_str();
  app.add_option("--messages", opt.messages)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--size", opt.size, "payload bytes (>= 16)")->capture_default_str();
  app.add_option("--keys", opt.keys, "distinct keys (0: null keys, sticky)")->capture_default_str();
  app.add_option("--partitions", opt.partitions, "when creating the topic")->capture_default_str();
  app.add_option("--replication-factor", opt.replication_factor)->capture_default_str();
  app.add_option("--acks", opt.acks, "0, 1 or all")->capture_default_str();
  app.add_option("--batch-bytes", opt.batch_bytes)->capture_default_str();
  app.add_option("--linger-ms", opt.linger_ms)->capture_default_str();
  app.add_option("--compression", opt.compression)->capture_default_str();
  app.add_option("--window", opt.window, "messages in flight")->capture_default_str();
  app.add_option("--send-batch", opt.send_batch,
                 "messages per produce request (batch API); 1: one request per message")
    ->capture_default_str()
    ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--rate", opt.rate,
                 "produce/e2e: target msgs/s, paced open-loop; latency from the intended "
                 "send time (0: closed loop, as fast as --window allows)")
    ->capture_default_str()
    ->check(CLI::NonNegativeNumber);
  app.add_option("--tick-us", opt.tick_us, "shortest pacing timer period with --rate")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{10}, int64_t{100000}));
  app.add_option("--timeout", opt.timeout_ms, "ms without progress before giving up")
    ->capture_default_str();
  app.add_flag("!--no-route-to-leaders", opt.route_to_leaders,
               "send everything through the --broker node (it relays to the "
               "partition leaders) instead of to each leader directly");
  app.add_flag("--json", opt.json);
  app.add_option("--workers", opt.workers, "queue: group members")
    ->capture_default_str()
    ->check(CLI::Range(1, 256));
  app.add_option("--via", opt.via, "queue: caf (queue consumer actors) or http")
    ->capture_default_str()
    ->check(CLI::IsMember({"caf", "http"}));
  app.add_option("--http-port", opt.http_port, "queue --via http: the node's HTTP port")
    ->capture_default_str();
  app.add_option("--poison-pct", opt.poison_pct,
                 "queue: share of records nacked on every attempt (then the DLQ)")
    ->capture_default_str()
    ->check(CLI::Range(0.0, 100.0));
  app.add_option("--max-attempts", opt.max_attempts, "queue: the group's max attempts")
    ->capture_default_str()
    ->check(CLI::Range(1, 100));
  app.add_option("--receive-max", opt.receive_max, "queue: records per receive")
    ->capture_default_str()
    ->check(CLI::Range(1, 10000));
  app.add_option("--tls-cert", opt.tls.certificate,
                 "client certificate for a node with TLS (with --tls-key, --tls-ca); "
                 "also $FERRY_TLS_CERT");
  app.add_option("--tls-key", opt.tls.key, "its private key; also $FERRY_TLS_KEY");
  app.add_option("--tls-ca", opt.tls.ca, "CA of the node's certificate; also $FERRY_TLS_CA");
  app.add_option("--user", opt.user, "log in as this user (--auth scram); also $FERRY_USER");
  app.add_option("--password-file", opt.password_file,
                 "its password's file; also $FERRY_PASSWORD_FILE or $FERRY_PASSWORD");
  app.add_option("--cluster-secret-file", opt.cluster_secret_file,
                 "log in as the cluster's operator; also $FERRY_CLUSTER_SECRET_FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto fail = [](const std::string& text) {
    std::cerr << "ferry-bench: " << text << std::endl;
    std::fflush(nullptr);
    std::_Exit(1);
  };
  opt.size = std::max<size_t>(opt.size, 16);
  // One request per message: CAF's pending-response map is O(n) per
  // response, so the single-message API keeps the old, smaller window.
  if (opt.send_batch <= 1 && app.count("--window") == 0)
    opt.window = 1000;
  auto addr = parse_broker_address(opt.broker);
  if (!addr)
    fail(error_text(addr.error()));
  auto acks = parse_acks(opt.acks);
  if (!acks)
    fail(error_text(acks.error()));
  auto codec = parse_compression(opt.compression);
  if (!codec)
    fail(error_text(codec.error()));

  caf::actor_system_config cfg;
  configure_client(cfg);
  tls_from_environment(opt.tls);
  if (opt.tls.requested()) {
    if (auto err = check_tls(opt.tls, tls_role::client))
      fail("--tls-cert/--tls-key/--tls-ca: " + error_text(err));
    configure_tls(cfg, opt.tls);
  }
  // Nodes with --auth scram: a user's login or the operator's.
  auto creds = load_credentials(opt.user, opt.password_file, opt.cluster_secret_file);
  if (!creds)
    fail(error_text(creds.error()));
  if (!creds->empty())
    configure_credentials(cfg, *creds);
  // Two cores are shared with the broker: idle workers must not spin.
  cfg.set("scheduler.max-threads", 2);
  cfg.set("work-stealing.aggressive-poll-attempts", 10);
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{cfg};
  addr->connect_wait = milliseconds{5000};
  auto conn = spawn_connection(sys, *addr);
  caf::scoped_actor self{sys};
  broker_actor broker;
  caf::error err;
  self->request(conn, milliseconds{8000}, connect_atom_v)
    .receive([&](broker_actor& b) { broker = b; }, [&](caf::error& e) { err = e; });
  if (!broker)
    fail("cannot connect to " + opt.broker + ": " + error_text(err));
  auto parts = ensure_topic(self, broker, opt);
  if (!parts)
    fail(error_text(parts.error()));
  if (*parts <= 0)
    *parts = opt.partitions;

  std::random_device rd;
  uint64_t run_id = (static_cast<uint64_t>(rd()) << 32) | rd();
  if (run_id == 0)
    run_id = 1;
  json report{{"mode", opt.mode},     {"topic", opt.topic},   {"messages", opt.messages},
              {"size", opt.size},     {"keys", opt.keys},     {"partitions", *parts},
              {"acks", opt.acks},     {"batch_bytes", opt.batch_bytes},
              {"linger_ms", opt.linger_ms}, {"compression", opt.compression},
              {"rate", opt.rate}, {"send_batch", opt.send_batch},
              {"window", opt.window}};

  std::vector<topic_partition> tps;
  for (int32_t p = 0; p < *parts; ++p)
    tps.push_back(topic_partition{opt.topic, partition_id{p}});

  auto make_consumer = [&](bool from_end) {
    consumer_config ccfg;
    ccfg.partitions = tps;
    ccfg.auto_offset_reset = "earliest";
    ccfg.enable_auto_commit = false;
    ccfg.max_poll_records = 5000;
    ccfg.fetch_max_wait = milliseconds{100};
    ccfg.route_to_leaders = opt.route_to_leaders;
    auto cons = spawn_consumer(sys, ccfg, conn);
    if (!cons)
      fail(error_text(cons.error()));
    if (from_end) {
      // Start at the current end so e2e counts only this run's messages.
      for (auto& tp : tps) {
        offset end{0};
        caf::error e;
        self->request(broker, milliseconds{10000}, offsets_atom_v,
                      list_offsets_request{tp.topic, tp.partition, -1})
          .receive([&](offset o) { end = o; }, [&](caf::error& x) { e = x; });
        if (e)
          fail(error_text(e));
        self->send(*cons, seek_atom_v, tp, end);
      }
    }
    return *cons;
  };

  auto make_producer = [&] {
    producer_config pcfg;
    pcfg.client_id = "ferry-bench";
    pcfg.acks = *acks;
    pcfg.codec = *codec;
    pcfg.batch_size = opt.batch_bytes;
    pcfg.linger = milliseconds{opt.linger_ms};
    pcfg.buffer_memory = std::max<size_t>(64u << 20, opt.window * (opt.size + 64) * 2);
    pcfg.route_to_leaders = opt.route_to_leaders;
    auto prod = spawn_producer(sys, pcfg, conn);
    if (!prod)
      fail(error_text(prod.error()));
    return *prod;
  };

  int rc = 0;
  std::vector<caf::actor> stop_list;
  if (opt.mode == "produce" || opt.mode == "e2e") {
    std::shared_ptr<std::promise<run_result>> consumed;
    std::future<run_result> consumed_f;
    consumer_actor cons;
    if (opt.mode == "e2e") {
      cons = make_consumer(true);
      consumed = std::make_shared<std::promise<run_result>>();
      consumed_f = consumed->get_future();
      sys.spawn(consume_driver, cons, opt, run_id, consumed);
    }
    auto prod = make_producer();
    auto produced = std::make_shared<std::promise<run_result>>();
    auto produced_f = produced->get_future();
    sys.spawn(produce_driver, prod, opt, run_id, produced);
    auto pr = produced_f.get();
    report["produce"] = to_json(pr, opt, true);
    if (!opt.json)
      print_line("produce", pr, opt, true);
    if (pr.failed > 0)
      rc = 1;
    if (opt.mode == "e2e") {
      auto cr = consumed_f.get();
      report["e2e"] = to_json(cr, opt, true);
      if (!opt.json)
        print_line("e2e", cr, opt, true);
      if (cr.ok < opt.messages)
        rc = 1;
      stop_list.push_back(caf::actor_cast<caf::actor>(cons));
    }
    stop_list.push_back(caf::actor_cast<caf::actor>(prod));
  } else if (opt.mode == "queue") {
    // A new group, so the run reads the topic from its start.
    auto group = "ferry-bench-" + std::to_string(run_id % 1000000007);
    queue_group_config qcfg;
    qcfg.max_attempts = opt.max_attempts;
    qcfg.initial_backoff_ms = 10;
    qcfg.max_backoff_ms = 50;
    qcfg.jitter = 0;
    caf::error cerr;
    self->request(broker, milliseconds{30000}, create_atom_v, group_atom_v, group, qcfg)
      .receive([](queue_group_config&) {}, [&](caf::error& e) { cerr = e; });
    if (cerr)
      fail("create queue group " + group + ": " + error_text(cerr));
    auto counts = std::make_shared<queue_counts>();
    std::vector<std::thread> threads;
    std::vector<queue_consumer_actor> members;
    for (int32_t i = 0; i < opt.workers; ++i) {
      if (opt.via == "http") {
        threads.emplace_back([&opt, &group, i, counts] {
          http_queue_worker(opt, group, i, *counts);
        });
        continue;
      }
      queue_consumer_config qc;
      qc.group = group;
      qc.topic = opt.topic;
      qc.client_id = "ferry-bench";
      auto m = spawn_queue_consumer(sys, qc, conn);
      if (!m)
        fail(error_text(m.error()));
      members.push_back(*m);
      sys.spawn(queue_worker, *m, opt, counts);
    }
    // Done when every record is acked or dead-lettered, or nothing moved
    // for --timeout.
    int64_t poison = 0;
    for (int32_t p = 0; p < *parts; ++p) {
      // The expected count is what the bench's choice marks among the
      // offsets the topic holds: read each partition's end.
      offset end{0};
      caf::error e;
      self->request(broker, milliseconds{10000}, offsets_atom_v,
                    list_offsets_request{opt.topic, partition_id{p}, -1})
        .receive([&](offset o) { end = o; }, [&](caf::error& x) { e = x; });
      if (e)
        fail(error_text(e));
      for (int64_t o = 0; o < end.value; ++o)
        poison += is_poison(p, o, opt.poison_pct) ? 1 : 0;
    }
    auto last_progress = steady::now();
    int64_t seen = -1;
    while (true) {
      std::this_thread::sleep_for(milliseconds{50});
      auto settled = counts->acked.load() + counts->dead.load();
      if (settled >= opt.messages)
        break;
      if (settled != seen) {
        seen = settled;
        last_progress = steady::now();
      } else if (steady::now() - last_progress > milliseconds{opt.timeout_ms}) {
        counts->error("no progress for --timeout ms at " + std::to_string(settled)
                      + " settled");
        break;
      }
    }
    counts->stop = true;
    for (auto& t : threads)
      t.join();
    for (auto& m : members)
      self->request(m, milliseconds{10000}, stop_atom_v)
        .receive([](int64_t) {}, [](caf::error&) {});
    double secs = static_cast<double>(counts->last_ns.load() - counts->first_ns.load()) / 1e9;
    run_result rr;
    rr.ok = counts->acked.load();
    rr.failed = counts->failures.load();
    rr.seconds = secs;
    rr.first_error = counts->first_error;
    auto q = to_json(rr, opt, false);
    q["via"] = opt.via;
    q["workers"] = opt.workers;
    q["poison_pct"] = opt.poison_pct;
    q["poison_records"] = poison;
    q["dead_lettered"] = counts->dead.load();
    q["deliveries"] = counts->deliveries.load();
    q["settled_per_sec"] = secs > 0 ? static_cast<double>(rr.ok + counts->dead.load()) / secs : 0;
    q["deliveries_per_sec"] = secs > 0 ? static_cast<double>(counts->deliveries.load()) / secs : 0;
    report["queue"] = q;
    report["group"] = group;
    if (!opt.json) {
      print_line("queue (" + opt.via + ", " + std::to_string(opt.workers) + " workers) acked", rr,
                 opt, false);
      if (opt.poison_pct > 0)
        std::cout << "  poison " << poison << " records, dead-lettered " << counts->dead.load()
                  << ", deliveries " << counts->deliveries.load() << ", settled/s "
                  << static_cast<int64_t>(q["settled_per_sec"].get<double>()) << '\n';
    }
    if (rr.ok + counts->dead.load() < opt.messages || rr.failed > 0)
      rc = 1;
  } else {
    auto cons = make_consumer(false);
    auto consumed = std::make_shared<std::promise<run_result>>();
    auto consumed_f = consumed->get_future();
    sys.spawn(consume_driver, cons, opt, uint64_t{0}, consumed);
    auto cr = consumed_f.get();
    report["consume"] = to_json(cr, opt, false);
    if (!opt.json)
      print_line("consume", cr, opt, false);
    if (cr.ok < opt.messages)
      rc = 1;
    stop_list.push_back(caf::actor_cast<caf::actor>(cons));
  }
  if (opt.json)
    std::cout << report.dump() << std::endl;
  for (auto& a : stop_list)
    self->send_exit(a, caf::exit_reason::user_shutdown);
  self->send_exit(conn, caf::exit_reason::user_shutdown);
  return rc;
}
