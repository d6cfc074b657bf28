#pragma once
// The chaos suite's topology workload (tests/chaos/README.md): the cluster
// changes shape while traffic runs and the faults hit.
//
// start(): a broker-only node (id 4, or 6 with five voters;
// cluster::add_broker: it dials the voters' real ports, so the link proxy
// does not cut it; the nemesis faults only the voters) joins; topic
// `chaos-topo` (3 partitions, RF 3) gets an idempotent acks=all producer
// (acked_writes.hpp, 100 msgs/s). Then a thread, every 1.5-4 s, through a
// node drawn at random (any of them):
//   - creates a topic `chaos-t<n>` (2 partitions, RF 3), or
//   - deletes the oldest of those it created, or
//   - reassigns a partition of `chaos-topo` to 3 nodes drawn from all
//     (the move completes once the new replicas are in the ISR).
// finish(), after the faults: the broker-only node is removed (its
// replicas move to the voters), every `chaos-t*` topic left is deleted.
// Checks: every create or delete answered OK held (a created topic is in
// the describe until deleted; a deleted one is not); the broker-only node leaves the
// cluster and holds no replica; after the last deletes no node lists a
// `chaos-t*` topic and no data dir holds its files; `chaos-topo` passes
// check_acked_writes like the other topics (the caller runs it).

#include "acked_writes.hpp"
#include "cluster_harness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ferry::test {

class topology_workload {
public:
  static constexpr const char* topic = "chaos-topo";
  static constexpr int32_t partitions = 3;
  topology_workload(cluster& c, uint64_t seed, double rate)
    : broker_only(c.voters() + 1), c_(c), rng_(seed), rate_(rate) {
  }

  /// The broker-only node's id: the one after the voters (4 or 6).
  const int broker_only;

  ~topology_workload() {
    stop();
  }

  /// Adds the broker-only node, creates the topic, starts the producer and the changes.
  /// "" or why not.
  std::string start() {
    using namespace std::chrono_literals;
    auto why = c_.add_broker();
    if (!why.empty())
      return "add broker-only node: " + why;
    bool joined = wait_until(30s, [&] {
      auto cd = c_.describe(broker_only);
      if (!cd)
        return false;
      for (auto& n : cd->nodes)
        if (n.id == broker_only)
          return n.alive && !n.voter && cd->controller >= 1;
      return false;
    });
    if (!joined)
      return "node " + std::to_string(broker_only) + " did not join as an alive broker-only node";
    why = c_.create_topic(topic, partitions);
    if (!why.empty())
      return std::string{"create "} + topic + ": " + why;
    if (!c_.wait_placed(topic, partitions))
      return std::string{topic} + ": not every partition got a leader and the full ISR";
    auto prod = make_producer(c_, c_.endpoints());
    if (!prod)
      return "producer: " + ferry::error_text(prod.error());
    book = std::make_shared<ledger>();
    load_options opt;
    opt.topic = topic;
    opt.keys = 10;
    opt.rate = rate_;
    opt.window = 16;
    driver_ = c_.cs.track(c_.cs.sys->spawn(load_driver, *prod, book, opt));
    running_ = true;
    thread_ = std::thread{[this] { change_loop(); }};
    return "";
  }

  /// Ends the changes (not the producer).
  void stop() {
    running_ = false;
    if (thread_.joinable())
      thread_.join();
  }

  /// Stops the producer and waits until it has its last answer.
  bool stop_producing(std::chrono::milliseconds t) {
    caf::anon_send(driver_, ferry::stop_atom_v);
    std::unique_lock<std::mutex> guard{book->mtx};
    return book->cv.wait_for(guard, t, [&] { return book->done; });
  }

  /// After the faults: the created/deleted checks, the broker-only node removed, the
  /// remaining chaos-t* topics deleted and gone everywhere (gtest
  /// failures). Call before check_acked_writes of `topic`.
  void finish() {
    using namespace std::chrono_literals;
    stop();
    // What was answered OK held.
    std::string state;
    bool held = wait_until(30s, [&] {
      auto cd = c_.describe_controller();
      if (!cd)
        return false;
      state.clear();
      for (auto& name : created_)
        if (!find_topic(*cd, name))
          state += " " + name + " (created) missing;";
      for (auto& name : deleted_)
        if (find_topic(*cd, name))
          state += " " + name + " (deleted) still there;";
      return state.empty();
    }, 300ms);
    EXPECT_TRUE(held) << "topic changes answered OK did not hold:" << state << "\n" << c_.dump();
    // The broker-only node leaves: its replicas move to the voters.
    auto removed = ask_any<ferry::broker_registration>(60s, ferry::delete_atom_v,
                                                       ferry::broker_atom_v,
                                                       int32_t{broker_only});
    EXPECT_TRUE(removed) << "removing node " << broker_only << ": " << last_error_ << "\n" << c_.dump();
    if (removed) {
      bool left = wait_until(60s, [&] {
        state.clear();
        for (int id = 1; id <= c_.voters(); ++id) {
          auto cd = c_.describe(id);
          if (!cd)
            return false;
          for (auto& n : cd->nodes)
            if (n.id == broker_only) {
              state = "node " + std::to_string(id) + " still lists node "
                      + std::to_string(broker_only);
              return false;
            }
          for (auto& t : cd->topics)
            for (auto& p : t.partitions)
              if (std::count(p.replicas.begin(), p.replicas.end(), broker_only) > 0) {
                state = t.name + "-" + std::to_string(p.partition.value) + " still on node "
                        + std::to_string(broker_only);
                return false;
              }
        }
        return true;
      }, 300ms);
      EXPECT_TRUE(left) << "node " << broker_only << " did not leave within 60 s: " << state << "\n" << c_.dump();
      removed_ok = left;
    }
    // Every chaos-t* topic goes; nothing of them stays on any node.
    auto deadline = steady_clock::now() + 60s;
    bool gone = false;
    while (!gone && steady_clock::now() < deadline) {
      auto cd = c_.describe_controller();
      if (!cd) {
        std::this_thread::sleep_for(300ms);
        continue;
      }
      std::vector<std::string> left;
      for (auto& t : cd->topics)
        if (t.name.rfind("chaos-t", 0) == 0 && t.name != topic)
          left.push_back(t.name);
      for (auto& name : left)
        if (ask_any<ferry::topic_metadata>(10s, ferry::delete_atom_v, ferry::topic_atom_v, name))
          ++deletes_ok;
      gone = left.empty();
      if (!gone)
        std::this_thread::sleep_for(300ms);
    }
    EXPECT_TRUE(gone) << "chaos-t* topics could not all be deleted in 60 s\n" << c_.dump();
    bool clean = wait_until(30s, [&] {
      state.clear();
      for (int id = 1; id <= c_.count(); ++id) {
        if (id <= c_.voters()) {
          auto cd = c_.describe(id);
          if (!cd)
            return false;
          for (auto& t : cd->topics)
            if (t.name.rfind("chaos-t", 0) == 0 && t.name != topic)
              state += " node " + std::to_string(id) + " lists " + t.name + ";";
        }
        std::error_code ec;
        auto dir = c_.node(id).data_dir() / "topics";
        for (auto it = std::filesystem::directory_iterator(dir, ec);
             !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
          auto name = it->path().filename().string();
          if (name.rfind("chaos-t", 0) == 0 && name.rfind(topic, 0) != 0)
            state += " node " + std::to_string(id) + " keeps " + name + ";";
        }
      }
      return state.empty();
    }, 500ms);
    EXPECT_TRUE(clean) << "deleted topics left something behind:" << state;
  }

  std::shared_ptr<ledger> book;

  // Counters for the summary line.
  int64_t creates_ok = 0;
  int64_t creates_failed = 0;
  int64_t deletes_ok = 0;
  int64_t deletes_failed = 0;
  int64_t reassigns_ok = 0;
  int64_t reassigns_failed = 0;
  bool removed_ok = false;

private:
  /// One request through the first node (1..count) that answers it;
  /// retries retriable errors until `t` passed.
  template <class T, class... Ts>
  caf::expected<T> ask_any(std::chrono::milliseconds t, Ts... xs) {
    using namespace std::chrono_literals;
    auto deadline = steady_clock::now() + t;
    caf::error last = caf::make_error(caf::sec::request_timeout);
    while (steady_clock::now() < deadline) {
      for (int id = 1; id <= c_.voters(); ++id) {
        if (!c_.up(id))
          continue;
        auto b = c_.broker(id);
        if (!b)
          continue;
        auto r = ask<T>(*c_.cs.sys, *b, 10s, xs...);
        if (r)
          return r;
        last = r.error();
        if (!ferry::is_retriable(last) && !ferry::is(last, ferry::ec::coordinator_not_available)
            && !ferry::is(last, ferry::ec::not_leader) && last != caf::sec::request_timeout)
          break;
      }
      if (!ferry::is_retriable(last) && !ferry::is(last, ferry::ec::coordinator_not_available)
          && !ferry::is(last, ferry::ec::not_leader) && last != caf::sec::request_timeout)
        break;
      std::this_thread::sleep_for(300ms);
    }
    last_error_ = ferry::error_text(last);
    return last;
  }

  /// A node drawn from all (voters and the broker-only one) that is up, or -1.
  int any_node() {
    for (int tries = 0; tries < 8; ++tries) {
      int id = std::uniform_int_distribution<int>{1, c_.count()}(rng_);
      if (id > c_.voters() || c_.up(id))
        return id;
    }
    return -1;
  }

  void change_loop() {
    using namespace std::chrono_literals;
    while (running_) {
      int pause_ms = std::uniform_int_distribution<int>{1500, 4000}(rng_);
      for (int waited = 0; running_ && waited < pause_ms; waited += 100)
        std::this_thread::sleep_for(100ms);
      if (!running_)
        break;
      int id = any_node();
      if (id < 1)
        continue;
      auto b = c_.broker(id);
      if (!b)
        continue;
      int what = std::uniform_int_distribution<int>{0, 9}(rng_);
      if (what < 4 || (what < 7 && live_.empty())) {
        auto name = "chaos-t" + std::to_string(next_topic_++);
        ferry::topic_config tc;
        tc.partitions = 2;
        tc.replication_factor = 3;
        tc.min_insync_replicas = 2;
        auto md = ask<ferry::topic_metadata>(*c_.cs.sys, *b, 10s, ferry::create_atom_v,
                                             ferry::topic_atom_v, name, tc);
        if (md) {
          ++creates_ok;
          created_.insert(name);
          live_.push_back(name);
        } else {
          ++creates_failed; // its outcome is unknown: finish() deletes it if it exists
        }
      } else if (what < 7) {
        auto name = live_.front();
        auto md = ask<ferry::topic_metadata>(*c_.cs.sys, *b, 10s, ferry::delete_atom_v,
                                             ferry::topic_atom_v, name);
        if (md) {
          ++deletes_ok;
          live_.pop_front();
          created_.erase(name);
          deleted_.insert(name);
        } else if (ferry::is(md.error(), ferry::ec::unknown_topic)) {
          ++deletes_failed;
          ADD_FAILURE() << name << ", whose create was answered OK, is unknown to node " << id
                        << " when deleted: " << ferry::error_text(md.error());
          live_.pop_front();
          created_.erase(name);
        } else {
          ++deletes_failed; // unknown outcome: created_ no longer vouches for it
          live_.pop_front();
          created_.erase(name);
        }
      } else {
        std::vector<int32_t> nodes;
        for (int id = 1; id <= broker_only; ++id)
          nodes.push_back(id);
        std::shuffle(nodes.begin(), nodes.end(), rng_);
        ferry::isr_change mv;
        mv.topic = topic;
        mv.partition = ferry::partition_id{std::uniform_int_distribution<int32_t>{
          0, partitions - 1}(rng_)};
        mv.isr = {nodes[0], nodes[1], nodes[2]};
        auto pa = ask<ferry::partition_assignment>(*c_.cs.sys, *b, 10s, ferry::assign_atom_v,
                                                   mv);
        ++(pa ? reassigns_ok : reassigns_failed);
      }
    }
  }

  cluster& c_;
  std::mt19937_64 rng_;
  double rate_;
  caf::actor driver_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  int next_topic_ = 1;
  std::set<std::string> created_;  // answered OK and not deleted since
  std::set<std::string> deleted_;  // deletes answered OK
  std::deque<std::string> live_;   // created, oldest first
  std::string last_error_;
};

} // namespace ferry::test
