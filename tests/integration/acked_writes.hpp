#pragma once
// Acknowledged writes under faults: a load driver that produces keyed
// messages through the idempotent acks=all producer and books every ack
// (ledger), a tracker of leader and controller changes seen in describes,
// and the checker that reads every partition back and compares it with the
// ledger. Shared by cluster_test.cpp (scripted leader kills) and
// tests/chaos/ (a seeded random fault schedule).
//
// Values are "k<key>:<seq>" with seq rising per key, so the checker can
// tell a lost, a duplicated and a reordered record apart:
//   - every acknowledged record is in the log at its acknowledged offset;
//   - no offset was acknowledged twice;
//   - no value is in the log twice (the producer is idempotent);
//   - each key's seqs rise strictly along the log (per-key order);
//   - the batches' leader epochs never go down along the log.
// check_logs_on_disk() then compares the stopped nodes' logs byte for byte
// below the high watermark.

#include "cluster_harness.hpp"

#include "actors/client/producer.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ferry::test {

struct ack_entry {
  int key = 0;
  int64_t seq = 0;
  int32_t partition = 0;
  int64_t off = 0;
};

/// What the load driver did; shared with the test thread.
struct ledger {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<ack_entry> acked;
  int64_t sent = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors; // error text -> count
  /// Acks that took longer than slow_ack: held up by a failover (the
  /// producer resent or waited for a new leader).
  int64_t slow_acks = 0;
  std::chrono::milliseconds max_ack_latency{0};
  bool done = false;

  size_t acked_count() {
    std::lock_guard<std::mutex> guard{mtx};
    return acked.size();
  }
};

constexpr std::chrono::milliseconds slow_ack{250};

struct load_options {
  int keys = 20;
  int window = 64;          // produce requests in flight
  double rate = 1500;       // messages per second, at most
  std::string topic;
  caf::timespan request_timeout = std::chrono::seconds{60};
};

struct driver_state {
  std::shared_ptr<ledger> book;
  ferry::producer_actor prod;
  load_options opt;
  int64_t counter = 0;
  int in_flight = 0;
  bool stopping = false;
  bool tick_scheduled = false;
  steady_clock::time_point started;
  static inline const char* name = "cluster-load";
};

using driver_ptr = caf::stateful_actor<driver_state>*;

/// Sends produce requests, one message each, keeping up to `window` in
/// flight and the rate below opt.rate; key k<i % keys>, value
/// "k<key>:<seq>" with seq = i / keys. Ends (and marks the ledger done)
/// once stopped and every request was answered.
inline void pump(driver_ptr self) {
  auto& st = self->state;
  while (!st.stopping && st.in_flight < st.opt.window) {
    auto budget = st.opt.rate * seconds_since(st.started) + st.opt.window;
    if (static_cast<double>(st.counter) >= budget) {
      if (!st.tick_scheduled) {
        st.tick_scheduled = true;
        self->delayed_send(self, 10ms, ferry::tick_atom_v);
      }
      break;
    }
    int key = static_cast<int>(st.counter % st.opt.keys);
    int64_t seq = st.counter / st.opt.keys;
    ++st.counter;
    ++st.in_flight;
    {
      std::lock_guard<std::mutex> guard{st.book->mtx};
      ++st.book->sent;
    }
    ferry::client_message m;
    m.topic = st.opt.topic;
    m.has_key = true;
    m.key = "k" + std::to_string(key);
    m.value = m.key + ":" + std::to_string(seq);
    auto sent_at = steady_clock::now();
    self->request(st.prod, st.opt.request_timeout, ferry::produce_atom_v, std::move(m))
      .then(
        [self, key, seq, sent_at](ferry::delivery_report& r) {
          auto& s = self->state;
          --s.in_flight;
          auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now()
                                                                               - sent_at);
          {
            std::lock_guard<std::mutex> guard{s.book->mtx};
            s.book->acked.push_back(ack_entry{key, seq, r.partition.value, r.off.value});
            if (latency > slow_ack)
              ++s.book->slow_acks;
            s.book->max_ack_latency = std::max(s.book->max_ack_latency, latency);
          }
          pump(self);
        },
        [self](caf::error& err) {
          auto& s = self->state;
          --s.in_flight;
          {
            std::lock_guard<std::mutex> guard{s.book->mtx};
            ++s.book->failed;
            ++s.book->errors[ferry::error_text(err)];
          }
          pump(self);
        });
  }
  if (st.stopping && st.in_flight == 0) {
    {
      std::lock_guard<std::mutex> guard{st.book->mtx};
      st.book->done = true;
    }
    st.book->cv.notify_all();
    self->quit();
  }
}

inline caf::behavior load_driver(driver_ptr self, ferry::producer_actor prod,
                          std::shared_ptr<ledger> book, load_options opt) {
  auto& st = self->state;
  st.prod = std::move(prod);
  st.book = std::move(book);
  st.opt = std::move(opt);
  st.started = steady_clock::now();
  self->send(self, ferry::tick_atom_v);
  return {
    [self](ferry::tick_atom) {
      self->state.tick_scheduled = false;
      pump(self);
    },
    [self](ferry::stop_atom) {
      self->state.stopping = true;
      pump(self);
    },
  };
}

/// Tracks leader changes seen in describes, per partition.
struct leader_tracker {
  std::map<int32_t, std::pair<int32_t, int32_t>> last; // partition -> (leader, epoch)
  int changes = 0;
  int32_t controller = -1;
  int controller_changes = 0;
  /// Every (partition, leader epoch) seen and the leader named with it; two
  /// different leaders named for one epoch (by any node) are a conflict.
  std::map<std::pair<int32_t, int32_t>, int32_t> epoch_leader;
  int epoch_conflicts = 0;
  /// Every Raft term seen and the controller (Raft leader) named with it;
  /// two controllers named for one term (by any node) break election safety.
  std::map<int64_t, int32_t> term_controller;
  int controller_conflicts = 0;

  void observe(const ferry::cluster_description& cd, const std::string& topic,
               int32_t partitions) {
    if (cd.controller >= 1) {
      auto [tc, fresh] = term_controller.emplace(cd.raft_term, cd.controller);
      if (!fresh && tc->second != cd.controller && ++controller_conflicts <= 10)
        ADD_FAILURE() << "Raft term " << cd.raft_term << " has controller " << tc->second
                      << " and controller " << cd.controller;
    }
    if (cd.controller >= 1 && cd.controller != controller) {
      if (controller >= 1) {
        ++controller_changes;
        std::cout << "[cluster] controller (Raft leader) " << controller << " -> "
                  << cd.controller << " (term " << cd.raft_term << ")\n";
      }
      controller = cd.controller;
    }
    for (int32_t p = 0; p < partitions; ++p) {
      auto ps = find_partition(cd, topic, p);
      if (!ps || ps->leader < 1)
        continue;
      auto now = std::make_pair(ps->leader, ps->epoch.value);
      auto [el, fresh] = epoch_leader.emplace(std::make_pair(p, ps->epoch.value), ps->leader);
      if (!fresh && el->second != ps->leader && ++epoch_conflicts <= 10)
        ADD_FAILURE() << "partition " << p << " epoch " << ps->epoch.value << " has leader "
                      << el->second << " and leader " << ps->leader;
      auto i = last.find(p);
      if (i == last.end()) {
        last.emplace(p, now);
      } else if (i->second.first != now.first) {
        ++changes;
        std::cout << "[cluster] partition " << p << ": leader " << i->second.first
                  << " (epoch " << i->second.second << ") -> " << now.first << " (epoch "
                  << now.second << ")\n";
        i->second = now;
      } else {
        i->second.second = std::max(i->second.second, now.second);
      }
    }
  }

  /// Sleeps `d` while observing the cluster.
  void watch(cluster& c, std::chrono::milliseconds d, const std::string& topic,
             int32_t partitions) {
    auto until = steady_clock::now() + d;
    while (steady_clock::now() < until) {
      if (auto cd = c.describe_controller())
        observe(*cd, topic, partitions);
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    }
  }
};


/// What check_acked_writes() found.
struct acked_check {
  bool converged = false;
  std::string why; // set when the check could not run to its end
  std::map<int32_t, int64_t> hws;
  std::map<int32_t, std::vector<int>> replicas; // partition -> its replicas' nodes
  int64_t acked = 0;
  int64_t in_log = 0;
  int64_t unacked_in_log = 0;
  int64_t missing = 0;
  int64_t mismatched = 0;
  int64_t duplicates = 0;
  int64_t reordered = 0;
  int64_t doubly_acked = 0;
  int64_t epochs_backwards = 0;
  std::set<int32_t> batch_epochs;

  bool clean() const {
    return why.empty() && missing == 0 && mismatched == 0 && duplicates == 0
           && reordered == 0 && doubly_acked == 0 && epochs_backwards == 0;
  }
};

/// Waits (up to `timeout`) until every partition has a leader, its three
/// replicas all in the ISR and the same log end on each of them with the HW
/// there; fills `hws` (partition -> HW at its leader), `replicas` (if
/// given: partition -> its replicas' nodes) and, when it gives up, `state`.
inline bool wait_converged(cluster& c, const std::string& topic, int32_t partitions,
                           std::chrono::milliseconds timeout, std::map<int32_t, int64_t>& hws,
                           std::string& state,
                           std::map<int32_t, std::vector<int>>* replicas = nullptr) {
  return wait_until(timeout, [&] {
    state.clear();
    auto cd = c.describe_controller();
    if (!cd)
      return false;
    bool ok = true;
    for (int32_t p = 0; p < partitions; ++p) {
      auto ps = find_partition(*cd, topic, p);
      if (!ps || ps->leader < 1 || !full_isr(*ps))
        return false;
      auto lead = c.status(ps->leader, topic, p);
      if (!lead)
        return false;
      state += "p" + std::to_string(p) + ": leader " + std::to_string(ps->leader)
               + " log_end=" + std::to_string(lead->log_end.value)
               + " hw=" + std::to_string(lead->high_watermark.value);
      if (lead->high_watermark != lead->log_end)
        ok = false;
      for (int32_t id : ps->replicas) {
        auto st = c.status(id, topic, p);
        if (!st)
          return false;
        state += "; node " + std::to_string(id) + " log_end=" + std::to_string(st->log_end.value);
        if (st->log_end != lead->log_end)
          ok = false;
      }
      state += "\n";
      hws[p] = lead->high_watermark.value;
      if (replicas)
        (*replicas)[p] = {ps->replicas.begin(), ps->replicas.end()};
    }
    return ok;
  });
}

/// Waits (up to `converge_timeout`) until the replicas converge
/// (wait_converged), then reads each partition back through its leader and
/// checks it against `acked` (see the file comment). Reports each finding
/// with ADD_FAILURE (the first 10 of a kind).
inline acked_check check_acked_writes(cluster& c, const std::string& topic, int32_t partitions,
                                      const std::vector<ack_entry>& acked,
                                      std::chrono::milliseconds converge_timeout) {
  acked_check out;
  out.acked = static_cast<int64_t>(acked.size());
  std::string state;
  out.converged = wait_converged(c, topic, partitions, converge_timeout, out.hws, state,
                                 &out.replicas);
  if (!out.converged) {
    out.why = "replicas of " + topic + " did not converge:\n" + state;
    ADD_FAILURE() << out.why << c.dump();
    return out;
  }
  std::map<int32_t, std::map<int64_t, const ack_entry*>> acked_at; // p -> off -> ack
  for (auto& a : acked) {
    auto [it, fresh] = acked_at[a.partition].emplace(a.off, &a);
    if (!fresh) {
      ++out.doubly_acked;
      ADD_FAILURE() << "offset " << a.partition << "@" << a.off << " acknowledged for k" << a.key
                    << ":" << a.seq << " and for k" << it->second->key << ":"
                    << it->second->seq;
    }
  }
  for (int32_t p = 0; p < partitions; ++p) {
    std::string why;
    auto reader = c.leader_of(topic, p);
    auto recs = fetch_all(c, reader >= 1 ? reader : 1, topic, p, out.hws[p], why);
    if (!recs) {
      out.why = "reading p" + std::to_string(p) + ": " + why;
      ADD_FAILURE() << out.why << "\n" << c.dump();
      return out;
    }
    out.in_log += static_cast<int64_t>(recs->size());
    std::map<int64_t, const log_record*> by_off;
    int64_t prev_off = -1;
    int32_t prev_epoch = -1;
    for (auto& r : *recs) {
      EXPECT_GT(r.off, prev_off) << "offsets not increasing in p" << p;
      prev_off = r.off;
      by_off[r.off] = &r;
      out.batch_epochs.insert(r.batch_epoch);
      if (r.batch_epoch < prev_epoch && ++out.epochs_backwards <= 10)
        ADD_FAILURE() << "p" << p << "@" << r.off << ": batch of leader epoch " << r.batch_epoch
                      << " after one of epoch " << prev_epoch;
      prev_epoch = std::max(prev_epoch, r.batch_epoch);
    }
    for (auto& [off, a] : acked_at[p]) {
      auto want = "k" + std::to_string(a->key) + ":" + std::to_string(a->seq);
      auto i = by_off.find(off);
      if (i == by_off.end()) {
        if (++out.missing <= 10)
          ADD_FAILURE() << "acknowledged " << want << " at " << p << "@" << off
                        << " is not in the log (hw " << out.hws[p] << ")";
      } else if (i->second->value != want || i->second->key != "k" + std::to_string(a->key)) {
        if (++out.mismatched <= 10)
          ADD_FAILURE() << "acknowledged " << want << " at " << p << "@" << off
                        << " but the log holds " << i->second->key << "=" << i->second->value;
      }
    }
    std::map<std::string, int64_t> last_seq;
    std::map<std::string, const log_record*> seen_values;
    for (auto& r : *recs) {
      auto colon = r.value.rfind(':');
      if (colon == std::string::npos) {
        ADD_FAILURE() << "unexpected value " << r.value << " at " << p << "@" << r.off;
        continue;
      }
      int64_t seq = std::stoll(r.value.substr(colon + 1));
      if (auto [first, fresh] = seen_values.emplace(r.value, &r); !fresh) {
        auto& f = *first->second;
        if (++out.duplicates <= 10)
          ADD_FAILURE() << "duplicate " << r.value << " at " << p << "@" << r.off
                        << " (producer " << r.producer_id << " seq " << r.sequence
                        << ", leader epoch " << r.batch_epoch << "), first at " << p << "@"
                        << f.off << " (producer " << f.producer_id << " seq " << f.sequence
                        << ", leader epoch " << f.batch_epoch << ")";
      } else if (auto it = last_seq.find(r.key); it != last_seq.end() && seq <= it->second) {
        if (++out.reordered <= 10)
          ADD_FAILURE() << r.value << " at " << p << "@" << r.off << " after seq " << it->second
                        << " of the same key";
      }
      last_seq[r.key] = std::max(last_seq[r.key], seq);
      if (!acked_at[p].count(r.off))
        ++out.unacked_in_log;
    }
  }
  EXPECT_EQ(out.missing, 0);
  EXPECT_EQ(out.mismatched, 0);
  EXPECT_EQ(out.duplicates, 0);
  EXPECT_EQ(out.reordered, 0);
  EXPECT_EQ(out.doubly_acked, 0);
  EXPECT_EQ(out.epochs_backwards, 0);
  return out;
}

/// Node `id`'s log file when FERRY_TEST_LOG_DIR sends the logs there, else "".
inline std::string node_log_file(int id) {
  auto dir = std::getenv("FERRY_TEST_LOG_DIR");
  if (!dir || !*dir)
    return {};
  return std::string{dir} + "/node" + std::to_string(id) + ".log";
}

/// The sizes of nodes 1..`nodes`' log files now (id -> bytes; absent: 0):
/// what an earlier run wrote into the same files (ferryd appends), which
/// controllers_per_term skips.
inline std::map<int, std::uintmax_t> node_log_sizes(int nodes) {
  std::map<int, std::uintmax_t> out;
  for (int id = 1; id <= nodes; ++id) {
    std::error_code ec;
    auto f = node_log_file(id);
    auto n = f.empty() ? 0 : std::filesystem::file_size(f, ec);
    out[id] = ec ? 0 : n;
  }
  return out;
}

/// The nodes that logged "controller in Raft term N", per term N: their
/// output of every run, and their log files when FERRY_TEST_LOG_DIR sends
/// the logs there (past `skip`, node_log_sizes at the start). A term with
/// two nodes breaks election safety.
inline std::map<int64_t, std::set<int>>
controllers_per_term(cluster& c, const std::map<int, std::uintmax_t>& skip = {}) {
  static const std::string mark = "controller in Raft term ";
  std::map<int64_t, std::set<int>> claims;
  for (int id = 1; id <= c.count(); ++id) {
    auto text = c.node(id).output();
    if (auto f = node_log_file(id); !f.empty()) {
      std::ifstream in(f);
      if (auto s = skip.find(id); s != skip.end())
        in.seekg(static_cast<std::streamoff>(s->second));
      text.append(std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{});
    }
    for (auto at = text.find(mark); at != std::string::npos; at = text.find(mark, at + 1))
      claims[std::strtoll(text.c_str() + at + mark.size(), nullptr, 10)].insert(id);
  }
  return claims;
}

/// After c.stop_all(): the logs of every partition on disk (on the nodes
/// `replicas` names for it, every voter without) are byte-identical below
/// the HW and end there. The number of partitions that differ.
inline int check_logs_on_disk(cluster& c, const std::string& topic, int32_t partitions,
                              const std::map<int32_t, int64_t>& hws,
                              const std::map<int32_t, std::vector<int>>& replicas = {}) {
  int bad = 0;
  for (int32_t p = 0; p < partitions; ++p) {
    auto hw = hws.count(p) ? hws.at(p) : 0;
    std::map<int, int64_t> log_ends;
    auto diff = compare_logs_on_disk(c, topic, p, hw, log_ends,
                                     replicas.count(p) ? replicas.at(p) : std::vector<int>{});
    EXPECT_TRUE(diff.empty()) << "p" << p << ": " << diff;
    bool ends_ok = true;
    for (auto& [id, end] : log_ends) {
      EXPECT_EQ(end, hw) << "node " << id << " p" << p << " log end on disk";
      ends_ok = ends_ok && end == hw;
    }
    if (!diff.empty() || !ends_ok)
      ++bad;
  }
  return bad;
}

} // namespace ferry::test
