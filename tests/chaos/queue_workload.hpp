#pragma once
// The chaos suite's third workload (tests/chaos/README.md): queue mode.
//
// An idempotent acks=all producer (the load driver of acked_writes.hpp)
// writes "k<key>:<seq>" records into topic `chaos-q`; queue group
// `chaos-qg` (max 4 attempts, backoff 100..400 ms, 5 s leases, DLQ topic
// `chaos-q-dlq`) is served by two workers on threads of their own, each a
// CAF queue consumer that talks to every node. What a worker does with a
// record depends on its key (keys 0..9):
//   k0 rejects (poison: straight to the DLQ), k1 nacks every attempt (to
//   the DLQ after 4), k2 nacks its first attempt and acks the second, every
//   other key acks.
// A redriver copies the DLQ into topic `chaos-redriven` every few seconds
// through a node drawn at random, while the faults run.
//
// Checks, once the producer stopped and the group settled (every partition
// done up to its HW, nothing waiting for the DLQ), after one last redrive:
//   - every acknowledged record was processed (an ack the coordinator
//     confirmed, or one whose answer was lost) or is in the DLQ;
//   - no record is in the DLQ twice, and none was both processed (a
//     confirmed ack) and dead-lettered;
//   - every record of k0 and k1 is in the DLQ; a record of another key is
//     there only after its attempts ran out (leases that expired while a
//     node was paused count as attempts, as in SQS);
//   - every DLQ record was copied to `chaos-redriven` exactly once (by its
//     ferry-redriven-from header), and nothing else is there.
// The queue topic itself goes through check_acked_writes() like the stream
// topic (no loss, no duplicate, per-key order).

#include "acked_writes.hpp"
#include "cluster_harness.hpp"

#include "actors/client/queue_consumer.hpp"
#include "actors/server/dlq_manager.hpp"
#include "broker/lease_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ferry::test {

class queue_workload {
public:
  static constexpr const char* topic = "chaos-q";
  static constexpr const char* group = "chaos-qg";
  static constexpr const char* dlq = "chaos-q-dlq";
  static constexpr const char* redriven = "chaos-redriven";
  static constexpr int32_t partitions = 3;
  static constexpr int keys = 10;
  static constexpr int max_attempts = 4;

  queue_workload(cluster& c, uint64_t seed, double rate) : c_(c), rng_(seed), rate_(rate) {
  }

  ~queue_workload() {
    stop_workers();
  }

  /// Creates the topics, the group and its workers, and starts producing.
  /// "" or why not.
  std::string start() {
    for (auto name : {topic, dlq, redriven}) {
      auto why = c_.create_topic(name, partitions);
      if (!why.empty())
        return std::string{"create "} + name + ": " + why;
      if (!c_.wait_placed(name, partitions))
        return std::string{name} + ": not every partition got a leader and the full ISR";
    }
    auto prod = make_producer(c_, c_.endpoints());
    if (!prod)
      return "producer: " + ferry::error_text(prod.error());
    book = std::make_shared<ledger>();
    load_options opt;
    opt.topic = topic;
    opt.keys = keys;
    opt.rate = rate_;
    opt.window = 16;
    driver_ = c_.cs.track(c_.cs.sys->spawn(load_driver, *prod, book, opt));
    ferry::queue_group_config qc;
    qc.max_attempts = max_attempts;
    qc.initial_backoff_ms = 100;
    qc.max_backoff_ms = 400;
    qc.jitter = 0.0;
    qc.visibility_timeout_ms = 5000;
    qc.dlq_topic = dlq;
    for (int i = 1; i <= 2; ++i) {
      auto conn = client_connection(c_, c_.endpoints());
      if (!conn)
        return "no connection for worker " + std::to_string(i);
      ferry::queue_consumer_config qcc;
      qcc.group = group;
      qcc.topic = topic;
      qcc.member_id = "worker-" + std::to_string(i);
      qcc.group_config = qc;
      qcc.alter_existing = true;
      qcc.request_timeout = 10s;
      qcc.retry_backoff = 200ms;
      auto w = ferry::spawn_queue_consumer(*c_.cs.sys, qcc, conn);
      if (!w)
        return "worker " + std::to_string(i) + ": " + ferry::error_text(w.error());
      workers_.push_back(c_.cs.track(*w));
    }
    running_ = true;
    for (auto& w : workers_)
      threads_.emplace_back([this, w] { work_loop(w); });
    threads_.emplace_back([this] { redrive_loop(); });
    return "";
  }

  /// Stops the producer and waits until it has its last answer.
  bool stop_producing(std::chrono::milliseconds t) {
    caf::anon_send(driver_, ferry::stop_atom_v);
    std::unique_lock<std::mutex> guard{book->mtx};
    return book->cv.wait_for(guard, t, [&] { return book->done; });
  }

  /// Waits until every partition of the group is done up to its HW and
  /// nothing waits for the DLQ; `state` tells where it stands.
  bool wait_settled(const std::map<int32_t, int64_t>& hws, std::chrono::milliseconds t,
                    std::string& state) {
    return wait_until(t, [&] {
      auto d = describe();
      if (!d) {
        state = " no description";
        return false;
      }
      state.clear();
      bool ok = d->partitions.size() == static_cast<size_t>(partitions);
      for (auto& p : d->partitions) {
        auto i = hws.find(p.partition.value);
        auto hw = i == hws.end() ? -1 : i->second;
        state += " p" + std::to_string(p.partition.value) + " committed "
                 + std::to_string(p.committed.value) + "/" + std::to_string(hw) + " leased "
                 + std::to_string(p.leased) + " delayed " + std::to_string(p.delayed)
                 + " dlq-pending " + std::to_string(p.dead_letter_pending) + ";";
        ok = ok && p.committed.value >= hw && p.dead_letter_pending == 0;
      }
      return ok;
    }, 500ms);
  }

  /// Ends the workers and the redriver.
  void stop_workers() {
    running_ = false;
    for (auto& t : threads_)
      if (t.joinable())
        t.join();
    threads_.clear();
    for (auto& w : workers_)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    workers_.clear();
  }

  /// The final redrive, the reads and every check (gtest failures).
  /// `acked` is the producer's ledger of the queue topic.
  void check(const std::vector<ack_entry>& acked) {
    using namespace std::chrono_literals;
    // One last redrive through any node, until it answers.
    auto deadline = steady_clock::now() + 60s;
    bool last_done = false;
    while (!last_done && steady_clock::now() < deadline) {
      for (int id = 1; id <= c_.voters() && !last_done; ++id)
        last_done = redrive_once(id, 20s);
      if (!last_done)
        std::this_thread::sleep_for(500ms);
    }
    EXPECT_TRUE(last_done) << "the final redrive of " << dlq << " did not succeed in 60 s";
    auto dead = read_topic(dlq);
    auto copies = read_topic(redriven);
    if (!dead || !copies)
      return;
    std::lock_guard<std::mutex> guard{mtx_};
    // The DLQ: each source record once.
    std::map<std::string, const log_record*> dead_by_value;
    for (auto& [p, recs] : *dead)
      for (auto& r : recs) {
        ++dead_letters;
        auto [it, fresh] = dead_by_value.emplace(r.value, &r);
        if (!fresh && ++dlq_duplicates <= 10)
          ADD_FAILURE() << r.value << " is in " << dlq << " twice (" << p << "@" << r.off
                        << ", attempts " << r.header(ferry::dlq_header::attempts) << ")";
      }
    for (auto& a : acked) {
      auto value = "k" + std::to_string(a.key) + ":" + std::to_string(a.seq);
      bool processed = acked_ok_.count(value) > 0;
      bool unknown = ack_unknown_.count(value) > 0;
      auto d = dead_by_value.find(value);
      bool in_dlq = d != dead_by_value.end();
      if (!processed && !unknown && !in_dlq && ++lost <= 10)
        ADD_FAILURE() << value << " (" << topic << "-" << a.partition << "@" << a.off
                      << ") was neither processed nor dead-lettered";
      if (processed && in_dlq && ++both <= 10)
        ADD_FAILURE() << value << " was processed (a confirmed ack) and dead-lettered";
      if (a.key <= 1 && !in_dlq && ++failing_not_dead <= 10)
        ADD_FAILURE() << value << " always fails but is not in " << dlq;
      if (a.key > 1 && in_dlq) {
        ++expired_dead;
        auto attempts = d->second->header(ferry::dlq_header::attempts);
        if (attempts.empty() || std::stoi(attempts) < max_attempts)
          ADD_FAILURE() << value << " of a working key is in " << dlq << " after " << attempts
                        << " attempts";
      }
    }
    // The redrive: each DLQ record copied once, nothing else.
    std::map<std::string, int> copied;
    for (auto& [p, recs] : *copies)
      for (auto& r : recs) {
        ++redrive_copies;
        auto from = r.header(ferry::redrive_header::redriven_from);
        if (++copied[from] == 2 && ++redrive_duplicates <= 10)
          ADD_FAILURE() << "DLQ record " << from << " (" << r.value << ") was redriven twice";
      }
    for (auto& [p, recs] : *dead)
      for (auto& r : recs) {
        auto from = std::string{dlq} + "/" + std::to_string(p) + "/" + std::to_string(r.off);
        if (copied.erase(from) == 0 && ++redrive_missing <= 10)
          ADD_FAILURE() << "DLQ record " << from << " (" << r.value << ") was never redriven";
      }
    for (auto& [from, n] : copied)
      ADD_FAILURE() << "a redriven copy from " << from << " matches no DLQ record";
  }

  /// Called by the test before check(): the HWs of the queue topic.
  std::shared_ptr<ledger> book;

  // Counters for the summary line.
  int64_t deliveries = 0;      // records leased to the workers
  int64_t acks_confirmed = 0;  // acks (of k2..k9) the coordinator confirmed
  int64_t settle_errors = 0;   // ack/nack/reject requests that failed
  int64_t redrives_ok = 0;     // redrive requests answered during the run
  int64_t redrives_failed = 0;
  std::map<std::string, int64_t> redrive_errors; // failed redrives by node and error
  int64_t redriven_during = 0; // records those redrives copied
  int64_t dead_letters = 0;
  int64_t dlq_duplicates = 0;
  int64_t lost = 0;
  int64_t both = 0;
  int64_t failing_not_dead = 0;
  int64_t expired_dead = 0;    // working keys dead-lettered after expiries
  int64_t redrive_copies = 0;
  int64_t redrive_duplicates = 0;
  int64_t redrive_missing = 0;

private:
  using ms = std::chrono::milliseconds;

  std::optional<ferry::queue_group_description> describe() {
    using namespace std::chrono_literals;
    for (int id = 1; id <= c_.voters(); ++id) {
      if (!c_.up(id))
        continue;
      auto b = c_.broker(id);
      if (!b)
        continue;
      auto d = ask<ferry::queue_group_description>(*c_.cs.sys, *b, 5s, ferry::describe_atom_v,
                                                   ferry::queue_atom_v, std::string{group});
      if (d)
        return std::move(*d);
    }
    return std::nullopt;
  }

  /// One redrive of the whole DLQ into `redriven` through node `id`.
  bool redrive_once(int id, std::chrono::milliseconds t) {
    if (!c_.up(id))
      return false;
    auto b = c_.broker(id);
    if (!b)
      return false;
    ferry::dlq_redrive_request req;
    req.topic = dlq;
    req.to_topic = redriven;
    auto r = ask<ferry::dlq_redrive_response>(*c_.cs.sys, *b, t, ferry::redrive_atom_v, req);
    std::lock_guard<std::mutex> guard{mtx_};
    if (!r) {
      ++redrives_failed;
      ++redrive_errors["node " + std::to_string(id) + ": " + ferry::error_text(r.error())];
      return false;
    }
    ++redrives_ok;
    redriven_during += r->redriven;
    return true;
  }

  void redrive_loop() {
    using namespace std::chrono_literals;
    while (running_) {
      int id = 0;
      int pause_ms = 0;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        id = std::uniform_int_distribution<int>{1, c_.voters()}(rng_);
        pause_ms = std::uniform_int_distribution<int>{1500, 4000}(rng_);
      }
      redrive_once(id, 15s);
      for (int waited = 0; running_ && waited < pause_ms; waited += 100)
        std::this_thread::sleep_for(100ms);
    }
  }

  void work_loop(ferry::queue_consumer_actor w) {
    using namespace std::chrono_literals;
    caf::scoped_actor self{*c_.cs.sys};
    while (running_) {
      std::vector<ferry::leased_message> got;
      self->request(w, 20s, ferry::receive_atom_v, int32_t{100}, int64_t{300})
        .receive([&](std::vector<ferry::leased_message>& xs) { got = std::move(xs); },
                 [&](caf::error&) { std::this_thread::sleep_for(100ms); });
      if (got.empty())
        continue;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        deliveries += static_cast<int64_t>(got.size());
      }
      for (auto& lm : got) {
        auto& m = lm.message;
        int key = std::stoi(m.key.substr(1));
        ferry::queue_ack_request req;
        bool is_ack = false;
        if (key == 0) {
          req = ferry::make_ack(lm, ferry::queue_ack_kind::reject, "poison " + m.value);
        } else if (key == 1 || (key == 2 && lm.attempt == 1)) {
          req = ferry::make_ack(lm, ferry::queue_ack_kind::nack, "fails");
        } else {
          req = ferry::make_ack(lm, ferry::queue_ack_kind::ack);
          is_ack = true;
        }
        self->request(w, 15s, ferry::ack_atom_v, req)
          .receive(
            [&](ferry::queue_ack_response&) {
              std::lock_guard<std::mutex> guard{mtx_};
              if (is_ack) {
                ++acks_confirmed;
                acked_ok_.insert(m.value);
              }
            },
            [&](caf::error& e) {
              std::lock_guard<std::mutex> guard{mtx_};
              ++settle_errors;
              // A refused lease means the ack did not happen; any other
              // error (a node died) leaves its outcome unknown.
              if (is_ack && !ferry::is(e, ferry::ec::lease_expired)
                  && !ferry::is(e, ferry::ec::lease_not_found)
                  && !ferry::is(e, ferry::ec::not_lease_owner))
                ack_unknown_.insert(m.value);
            });
      }
    }
  }

  /// Every record of each partition of `name` up to the HW, read through
  /// its leader.
  std::optional<std::map<int32_t, std::vector<log_record>>> read_topic(const std::string& name) {
    std::map<int32_t, std::vector<log_record>> out;
    for (int32_t p = 0; p < partitions; ++p) {
      auto leader = c_.leader_of(name, p);
      auto st = leader >= 1 ? c_.status(leader, name, p)
                            : caf::expected<ferry::partition_status>{caf::sec::invalid_argument};
      if (!st) {
        ADD_FAILURE() << name << "-" << p << ": no status from its leader " << leader;
        return std::nullopt;
      }
      std::string why;
      auto recs = fetch_all(c_, leader, name, p, st->high_watermark.value, why);
      if (!recs) {
        ADD_FAILURE() << "reading " << name << "-" << p << ": " << why;
        return std::nullopt;
      }
      out[p] = std::move(*recs);
    }
    return out;
  }

  cluster& c_;
  std::mt19937_64 rng_;
  double rate_;
  caf::actor driver_;
  std::vector<ferry::queue_consumer_actor> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> running_{false};
  std::mutex mtx_;
  std::set<std::string> acked_ok_;
  std::set<std::string> ack_unknown_;
};

} // namespace ferry::test
