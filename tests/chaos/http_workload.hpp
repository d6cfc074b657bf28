#pragma once
// The chaos suite's HTTP producer (tests/chaos/README.md): one thread posts
// one record at a time, `POST /v1/topics/chaos-http/messages` with
// acks=all, to the HTTP API of a node drawn at random (every node runs it,
// --http-port 0), at up to `rate` records per second. Values are
// "k<key>:<seq>" (10 keys). The HTTP API has no idempotent producer, so the
// workload never retries: a request without a 200 answer has an unknown
// outcome (it may still land, even after later ones, e.g. on a node that
// was paused with it).
//
// Checks (check()), on the converged cluster:
//   - every record answered 200 is in the log at the partition and offset
//     of its answer, with its value;
//   - no record is in the log twice (nothing retries it, so a second copy
//     would be the broker's own doing);
//   - per key, the records answered 200 appear in the order they were
//     sent (one request is in flight at a time);
//   - nothing is in the log that was never sent.

#include "acked_writes.hpp"
#include "cluster_harness.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ferry::test {

class http_workload {
public:
  static constexpr const char* topic = "chaos-http";
  static constexpr int32_t partitions = 3;
  static constexpr int keys = 10;

  http_workload(cluster& c, uint64_t seed, double rate) : c_(c), rng_(seed), rate_(rate) {
  }

  ~http_workload() {
    stop();
  }

  /// Creates the topic and starts posting. "" or why not.
  std::string start() {
    auto why = c_.create_topic(topic, partitions);
    if (!why.empty())
      return std::string{"create "} + topic + ": " + why;
    if (!c_.wait_placed(topic, partitions))
      return std::string{topic} + ": not every partition got a leader and the full ISR";
    for (int id = 1; id <= c_.voters(); ++id)
      if (c_.node(id).http_port() == 0)
        return "node " + std::to_string(id) + " serves no HTTP API";
    running_ = true;
    thread_ = std::thread{[this] { post_loop(); }};
    return "";
  }

  void stop() {
    running_ = false;
    if (thread_.joinable())
      thread_.join();
  }

  size_t acked_count() {
    std::lock_guard<std::mutex> guard{mtx_};
    return acked_.size();
  }

  /// Reads the topic back through its leaders; gtest failures for what is
  /// wrong. `hws` from check_acked_writes on the same topic.
  void check(const std::map<int32_t, int64_t>& hws) {
    std::lock_guard<std::mutex> guard{mtx_};
    std::map<std::string, std::pair<int32_t, int64_t>> where; // value -> first place
    std::map<std::pair<int32_t, int64_t>, std::string> at;
    std::map<int, int64_t> last_seq; // key -> seq of the last answered record seen
    for (int32_t p = 0; p < partitions; ++p) {
      auto hw = hws.count(p) ? hws.at(p) : 0;
      std::string why;
      auto leader = c_.leader_of(topic, p);
      auto recs = fetch_all(c_, leader >= 1 ? leader : 1, topic, p, hw, why);
      if (!recs) {
        ADD_FAILURE() << "reading " << topic << "-" << p << ": " << why;
        return;
      }
      in_log += static_cast<int64_t>(recs->size());
      for (auto& r : *recs) {
        at[{p, r.off}] = r.value;
        auto [it, fresh] = where.emplace(r.value, std::make_pair(p, r.off));
        if (!fresh && ++duplicated <= 10)
          ADD_FAILURE() << r.value << " is in " << topic << " twice: " << it->second.first
                        << "@" << it->second.second << " and " << p << "@" << r.off;
        auto sent = sent_values_.find(r.value);
        if (sent == sent_values_.end()) {
          ADD_FAILURE() << topic << "-" << p << "@" << r.off << " holds " << r.value
                        << ", which was never sent";
          continue;
        }
        if (!answered_.count(r.value))
          continue;
        auto key = sent->second.first;
        auto seq = sent->second.second;
        auto prev = last_seq.find(key);
        if (prev != last_seq.end() && prev->second >= seq && ++reordered <= 10)
          ADD_FAILURE() << "k" << key << ": " << r.value << " after seq " << prev->second;
        last_seq[key] = seq;
      }
    }
    for (auto& a : acked_) {
      auto i = at.find({a.partition, a.off});
      if (i == at.end() || i->second != a.value) {
        if (++lost <= 10)
          ADD_FAILURE() << "HTTP produce of " << a.value << " answered 200 at " << a.partition
                        << "@" << a.off << ", but the log has "
                        << (i == at.end() ? "nothing there" : i->second);
      }
    }
  }

  int64_t sent = 0;
  int64_t failed = 0;     // answered with an error or not at all
  int64_t in_log = 0;
  int64_t lost = 0;
  int64_t duplicated = 0;
  int64_t reordered = 0;
  std::map<std::string, int64_t> errors; // status or transport error -> count

private:
  struct acked_record {
    std::string value;
    int32_t partition = 0;
    int64_t off = 0;
  };

  void post_loop() {
    using namespace std::chrono_literals;
    auto t0 = steady_clock::now();
    int64_t counter = 0;
    while (running_) {
      auto due = t0 + std::chrono::microseconds{static_cast<int64_t>(1e6 * counter / rate_)};
      if (steady_clock::now() < due) {
        std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(due - steady_clock::now(),
                                                                        50ms));
        continue;
      }
      int key = static_cast<int>(counter % keys);
      int64_t seq = counter / keys;
      ++counter;
      auto value = "k" + std::to_string(key) + ":" + std::to_string(seq);
      int id = std::uniform_int_distribution<int>{1, c_.voters()}(rng_);
      uint16_t port = c_.up(id) ? c_.node(id).http_port() : 0;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        ++sent;
        sent_values_[value] = {key, seq};
      }
      if (port == 0) {
        note_failure("node down");
        continue;
      }
      nlohmann::json body{{"acks", "all"},
                          {"records", {{{"key", "k" + std::to_string(key)}, {"value", value}}}}};
      auto r = http_request(port, "POST", std::string{"/v1/topics/"} + topic + "/messages",
                            body.dump(), 5s);
      if (r.status != 200) {
        note_failure(r.status == 0 ? "transport: " + r.error.substr(0, 40)
                                   : "status " + std::to_string(r.status));
        continue;
      }
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.contains("offsets") || j["offsets"].size() != 1
          || !j["offsets"][0].contains("offset")) {
        ADD_FAILURE() << "HTTP produce answered 200 with " << r.body.substr(0, 300);
        note_failure("malformed 200");
        continue;
      }
      std::lock_guard<std::mutex> guard{mtx_};
      answered_.insert(value);
      acked_.push_back(acked_record{value, j["offsets"][0]["partition"].get<int32_t>(),
                                    j["offsets"][0]["offset"].get<int64_t>()});
    }
  }

  void note_failure(const std::string& what) {
    std::lock_guard<std::mutex> guard{mtx_};
    ++failed;
    ++errors[what];
  }

  cluster& c_;
  std::mt19937_64 rng_;
  double rate_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex mtx_;
  std::vector<acked_record> acked_;
  std::map<std::string, std::pair<int, int64_t>> sent_values_; // value -> (key, seq)
  std::set<std::string> answered_;
};

} // namespace ferry::test
