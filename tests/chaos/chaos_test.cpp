// The chaos suite (issue 18): a three- or five-node ferryd cluster whose nodes reach
// each other only through the link proxy (tests/integration/link_proxy.hpp),
// a keyed acks=all workload through the idempotent CAF producer, a consumer
// group, queue-mode workers with a DLQ and redrives (queue_workload.hpp), an
// HTTP producer (http_workload.hpp), topic and broker changes
// (topology_workload.hpp), a nemesis that injects faults on a seeded random
// schedule (full disks: small_disks.hpp), and a checker that knows what must
// hold. See tests/chaos/README.md.
//
// Chaos.RandomFaultsKeepEveryAcknowledgedWrite:
//   - faults, drawn from the seed: SIGKILL of a partition leader, of the
//     controller or of any node, then a restart on its data dir; SIGSTOP
//     pauses of up to 12 s (past --replica-lag-max-ms and CAF's link
//     timeouts); a node isolated both ways (blackholed, or its connections
//     reset); one-way cuts; and two at once (two nodes killed: no majority;
//     a kill plus a pause or an isolation of another node).
//   - after each fault is undone, the cluster must come back (every
//     partition with a leader and the full ISR) within a bound.
//   - the checker (acked_writes.hpp): every acknowledged record is read
//     back at its acknowledged offset; no offset acknowledged twice; no
//     record twice; per-key order; leader epochs never go down along a log;
//     no two leaders named for one partition epoch by any node, no two
//     controllers for one Raft term (describes and the nodes' logs); after a
//     clean stop the three logs are byte-identical below the HW.
//
// Each run prints its seed and one summary line ("[chaos] summary ...",
// read by tests/chaos/soak.sh). Environment:
//   FERRY_CHAOS_SEED        the seed (default: random, printed)
//   FERRY_CHAOS_NODES       voters, 3 (default) or 5; with 5 the nemesis
//                           also splits the cluster 2 | 3
//   FERRY_CHAOS_FAULTS      faults per run (default 6)
//   FERRY_CHAOS_PARTITIONS  partitions of the topic, RF 3 (default 6)
//   FERRY_CHAOS_RATE        messages per second the workload offers (800)
//   FERRY_CHAOS_QUEUE_RATE  messages per second into the queue topic (100)
//   FERRY_CHAOS_HTTP_RATE   HTTP produce requests per second (50)
//   FERRY_CHAOS_FAULT_KINDS the faults to draw from, e.g. "fill_disk,pause"
//                           (default all; names in name_of())
// plus FERRY_TEST_LOG_LEVEL / FERRY_TEST_LOG_DIR (cluster_harness.hpp).
// Every wait is bounded; every ferryd is SIGKILLed when the test ends, also
// on failure.

#include "acked_writes.hpp"
#include "cluster_harness.hpp"
#include "http_workload.hpp"
#include "queue_workload.hpp"
#include "small_disks.hpp"
#include "topology_workload.hpp"

#include "actors/client/consumer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace ferry::test;
using ms = std::chrono::milliseconds;

int64_t env_int(const char* name, int64_t fallback) {
  auto v = std::getenv(name);
  if (!v || !*v)
    return fallback;
  try {
    return std::stoll(v);
  } catch (...) {
    ADD_FAILURE() << name << "=" << v << " is not a number";
    return fallback;
  }
}

enum class fault_kind {
  kill_leader,
  kill_controller,
  kill_any,
  pause,
  isolate,
  isolate_reset,
  cut_in,
  cut_out,
  kill_two,
  kill_and_pause,
  kill_and_isolate,
  fill_disk,
  split,
};

constexpr fault_kind all_faults[] = {
  fault_kind::kill_leader,   fault_kind::kill_controller, fault_kind::kill_any,
  fault_kind::pause,         fault_kind::isolate,         fault_kind::isolate_reset,
  fault_kind::cut_in,        fault_kind::cut_out,         fault_kind::kill_two,
  fault_kind::kill_and_pause, fault_kind::kill_and_isolate, fault_kind::fill_disk,
  fault_kind::split,
};

const char* name_of(fault_kind k) {
  switch (k) {
    case fault_kind::kill_leader: return "kill_leader";
    case fault_kind::kill_controller: return "kill_controller";
    case fault_kind::kill_any: return "kill_any";
    case fault_kind::pause: return "pause";
    case fault_kind::isolate: return "isolate";
    case fault_kind::isolate_reset: return "isolate_reset";
    case fault_kind::cut_in: return "cut_in";
    case fault_kind::cut_out: return "cut_out";
    case fault_kind::kill_two: return "kill_two";
    case fault_kind::kill_and_pause: return "kill_and_pause";
    case fault_kind::kill_and_isolate: return "kill_and_isolate";
    case fault_kind::fill_disk: return "fill_disk";
    case fault_kind::split: return "split";
  }
  return "?";
}

/// The faults the nemesis draws from: FERRY_CHAOS_FAULT_KINDS (names of
/// name_of, comma-separated) or all. `split` (a minority of two nodes cut
/// from the majority) only with five voters: with three it is `isolate`,
/// and leaving it out keeps the three-node seeds' schedules as they were.
std::vector<fault_kind> fault_kinds(int voters) {
  std::vector<fault_kind> out;
  auto v = std::getenv("FERRY_CHAOS_FAULT_KINDS");
  std::string list = v ? v : "";
  for (auto k : all_faults)
    if ((k != fault_kind::split || voters > 3)
        && (list.empty() || ("," + list + ",").find(std::string{","} + name_of(k) + ",")
                              != std::string::npos))
      out.push_back(k);
  if (out.empty()) {
    ADD_FAILURE() << "FERRY_CHAOS_FAULT_KINDS=" << list << " names no fault";
    out.assign(std::begin(all_faults), std::end(all_faults));
  }
  return out;
}

/// Each node's data dir is a tmpfs of this size (when small_disks can
/// mount): room for a run, and what the disk fault fills up.
constexpr size_t node_disk_bytes = size_t{512} << 20;

// The private mount namespace, entered before main() starts any thread.
const bool disks_available = ferry::test::small_disks::instance().available();

/// The nemesis: draws faults from its seed, applies and undoes them.
class nemesis {
public:
  nemesis(cluster& c, uint64_t seed, std::string topic, int32_t partitions)
    : c_(c), rng_(seed), topic_(std::move(topic)), partitions_(partitions),
      kinds_(fault_kinds(c.voters())) {
  }

  int kills = 0;
  int pauses = 0;
  int cuts = 0;
  int disk_fills = 0;

  /// Applies one random fault, holds it while `watch` observes the
  /// cluster, then undoes it. Returns what it did; "" in `why` or the
  /// reason a node could not be restarted.
  std::string run_one(leader_tracker& leaders, std::string& why) {
    auto kind = kinds_[static_cast<size_t>(pick(0, static_cast<int64_t>(kinds_.size()) - 1))];
    if (kind == fault_kind::fill_disk && !disks_available)
      kind = fault_kind::kill_any;
    auto hold = ms{pick(1500, 6000)};
    int a = node_for(kind);
    int b = other_than(a);
    std::ostringstream what;
    std::vector<int> killed;
    std::vector<int> frozen;
    bool links_cut = false;
    int filled = -1;
    auto kill = [&](int id) {
      c_.kill(id);
      killed.push_back(id);
      ++kills;
    };
    switch (kind) {
      case fault_kind::kill_leader:
        what << "SIGKILL leader node " << a;
        kill(a);
        break;
      case fault_kind::kill_controller:
        what << "SIGKILL controller node " << a;
        kill(a);
        break;
      case fault_kind::kill_any:
        what << "SIGKILL node " << a;
        kill(a);
        break;
      case fault_kind::pause:
        hold = ms{pick(3000, 12000)};
        what << "SIGSTOP node " << a;
        c_.freeze(a);
        frozen.push_back(a);
        ++pauses;
        break;
      case fault_kind::isolate:
        what << "isolate node " << a << " (blackhole)";
        c_.isolate(a, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::isolate_reset:
        what << "isolate node " << a << " (reset)";
        c_.isolate(a, link_mode::reset);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::cut_in:
        what << "one-way cut: nothing reaches node " << a;
        for (int id = 1; id <= c_.voters(); ++id)
          if (id != a)
            c_.net().set(id, a, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::cut_out:
        what << "one-way cut: node " << a << " reaches nobody";
        for (int id = 1; id <= c_.voters(); ++id)
          if (id != a)
            c_.net().set(a, id, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::kill_two:
        hold = ms{pick(1000, 3000)};
        what << "SIGKILL nodes " << a << " and " << b
             << (c_.voters() <= 3 ? " (no majority)" : "");
        kill(a);
        kill(b);
        break;
      case fault_kind::kill_and_pause:
        hold = ms{pick(1000, 4000)};
        what << "SIGKILL node " << a << " + SIGSTOP node " << b;
        kill(a);
        c_.freeze(b);
        frozen.push_back(b);
        ++pauses;
        break;
      case fault_kind::kill_and_isolate:
        hold = ms{pick(1000, 4000)};
        what << "SIGKILL node " << a << " + isolate node " << b;
        kill(a);
        c_.isolate(b, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::fill_disk: {
        hold = ms{pick(2000, 8000)};
        std::string fill_why;
        auto taken = small_disks::instance().fill(c_.node(a).data_dir(), fill_why);
        what << "data dir of node " << a << " full (" << (taken >> 20) << " MiB of ballast"
             << (fill_why.empty() ? "" : "; " + fill_why) << ")";
        filled = a;
        ++disk_fills;
        break;
      }
      case fault_kind::split: {
        // Node a and voters/2 - 1 others (a minority) from the rest, both
        // ways; a is a leader, the controller or any node as drawn.
        std::vector<int> others;
        for (int id = 1; id <= c_.voters(); ++id)
          if (id != a)
            others.push_back(id);
        std::shuffle(others.begin(), others.end(), rng_);
        std::set<int> minority{a};
        for (int i = 0; static_cast<int>(minority.size()) < c_.voters() / 2; ++i)
          minority.insert(others[static_cast<size_t>(i)]);
        what << "split: nodes";
        for (int id : minority)
          what << " " << id;
        what << " cut from the others";
        for (int i = 1; i <= c_.voters(); ++i)
          for (int j = 1; j <= c_.voters(); ++j)
            if (minority.count(i) != minority.count(j))
              c_.net().set(i, j, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      }
    }
    what << " for " << hold.count() << " ms";
    leaders.watch(c_, hold, topic_, partitions_);
    if (links_cut)
      c_.heal();
    if (filled >= 1)
      small_disks::instance().release(c_.node(filled).data_dir());
    for (int id : frozen)
      c_.thaw(id);
    for (int id : killed) {
      auto w = c_.restart(id);
      if (!w.empty())
        why += w;
    }
    return what.str();
  }

  /// A pause between faults.
  ms gap() {
    return ms{pick(500, 2500)};
  }

private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>{lo, hi}(rng_);
  }

  int node_for(fault_kind kind) {
    if (kind == fault_kind::kill_leader) {
      auto p = static_cast<int32_t>(pick(0, partitions_ - 1));
      auto l = c_.leader_of(topic_, p);
      if (l >= 1)
        return l;
    }
    if (kind == fault_kind::kill_controller)
      if (auto cd = c_.describe_controller(); cd && cd->controller >= 1)
        return cd->controller;
    return static_cast<int>(pick(1, c_.voters()));
  }

  int other_than(int a) {
    auto b = static_cast<int>(pick(1, c_.voters() - 1));
    return b >= a ? b + 1 : b;
  }

  cluster& c_;
  std::mt19937_64 rng_;
  std::string topic_;
  int32_t partitions_;
  std::vector<fault_kind> kinds_;
};

/// The second workload: one member of consumer group `chaos-g` reads the
/// topic from the start and commits after every poll (auto commit off), on
/// a thread of its own; a sampler reads the group's committed offsets
/// through any node every ~300 ms. Checks: a committed offset never moves
/// backwards, and once the producer stopped the group reaches every
/// partition's HW and has seen every acknowledged record at least once.
class group_workload {
public:
  group_workload(cluster& c, std::string topic, int32_t partitions)
    : c_(c), topic_(std::move(topic)), partitions_(partitions) {
  }

  ~group_workload() {
    stop();
  }

  /// "" or why the consumer could not start.
  std::string start() {
    ferry::consumer_config cc;
    cc.group_id = group;
    cc.topics = {topic_};
    cc.auto_offset_reset = "earliest";
    cc.enable_auto_commit = false;
    cc.request_timeout = 10s;
    cc.session_timeout = 30s;
    cc.heartbeat_interval = 1s;
    auto conn = client_connection(c_, c_.endpoints());
    if (!conn)
      return "no connection for the consumer";
    auto cons = ferry::spawn_consumer(*c_.cs.sys, cc, conn);
    if (!cons)
      return ferry::error_text(cons.error());
    cons_ = c_.cs.track(*cons);
    running_ = true;
    reader_ = std::thread{[this] { read_loop(); }};
    sampler_ = std::thread{[this] { sample_loop(); }};
    return "";
  }

  void stop() {
    running_ = false;
    if (reader_.joinable())
      reader_.join();
    if (sampler_.joinable())
      sampler_.join();
  }

  size_t consumed_count() {
    std::lock_guard<std::mutex> guard{mtx_};
    return consumed_.size();
  }

  /// Committed offsets read now through any node that answers (`via`: its id).
  /// The group's committed offsets of every partition of the topic.
  ferry::fetch_offsets_request offsets_request() const {
    ferry::fetch_offsets_request req;
    req.group = group;
    for (int32_t p = 0; p < partitions_; ++p)
      req.partitions.push_back(ferry::topic_partition{topic_, ferry::partition_id{p}});
    return req;
  }

  std::optional<std::map<int32_t, int64_t>> committed_now(int* via = nullptr) {
    auto req = offsets_request();
    for (int id = 1; id <= c_.voters(); ++id) {
      if (!c_.up(id))
        continue;
      auto b = c_.broker(id);
      if (!b)
        continue;
      auto r = ask<std::vector<ferry::partition_offset>>(*c_.cs.sys, *b, 3s,
                                                         ferry::offsets_atom_v, req);
      if (!r)
        continue;
      std::map<int32_t, int64_t> out;
      for (auto& po : *r)
        out[po.partition.value] = po.committed.value;
      if (via)
        *via = id;
      return out;
    }
    return std::nullopt;
  }

  /// Waits until the committed offsets reach `hws`.
  bool wait_caught_up(const std::map<int32_t, int64_t>& hws, std::chrono::milliseconds t,
                      std::string& state) {
    return wait_until(t, [&] {
      auto now = committed_now();
      if (!now)
        return false;
      state.clear();
      bool ok = true;
      for (auto& [p, hw] : hws) {
        auto got = now->count(p) ? now->at(p) : -1;
        state += " p" + std::to_string(p) + " " + std::to_string(got) + "/" + std::to_string(hw);
        ok = ok && got >= hw;
      }
      return ok;
    }, 300ms);
  }

  /// Acknowledged records the group never delivered (reported, first 10).
  int64_t not_delivered(const std::vector<ack_entry>& acked) {
    std::lock_guard<std::mutex> guard{mtx_};
    int64_t n = 0;
    for (auto& a : acked) {
      auto want = "k" + std::to_string(a.key) + ":" + std::to_string(a.seq);
      auto i = consumed_.find({a.partition, a.off});
      if (i == consumed_.end() || i->second != want)
        if (++n <= 10)
          ADD_FAILURE() << "acknowledged " << want << " at " << a.partition << "@" << a.off
                        << (i == consumed_.end() ? " never delivered to the group"
                                                 : " delivered as " + i->second);
    }
    return n;
  }

  int64_t backwards = 0;       // committed offsets seen moving backwards
  int64_t samples = 0;         // successful samples
  int64_t commits_ok = 0;      // commits the consumer reported done
  int64_t commits_failed = 0;
  int64_t redelivered = 0;     // records delivered more than once
  std::map<std::string, int64_t> poll_errors; // by error text
  std::vector<std::string> gaps;              // forward jumps of delivered offsets

  static constexpr const char* group = "chaos-g";

private:
  void read_loop() {
    caf::scoped_actor self{*c_.cs.sys};
    while (running_) {
      std::vector<ferry::consumed_message> got;
      caf::error poll_err;
      self->request(cons_, 15s, ferry::poll_atom_v, int32_t{200})
        .receive([&](std::vector<ferry::consumed_message>& xs) { got = std::move(xs); },
                 [&](caf::error& err) { poll_err = std::move(err); });
      if (poll_err) {
        {
          std::lock_guard<std::mutex> guard{mtx_};
          ++poll_errors[ferry::error_text(poll_err)];
        }
        std::this_thread::sleep_for(100ms);
      }
      {
        std::lock_guard<std::mutex> guard{mtx_};
        for (auto& m : got) {
          auto [it, fresh] = consumed_.emplace(std::make_pair(m.partition.value, m.off.value),
                                               m.value);
          if (!fresh)
            ++redelivered;
          // A poll that hands out offsets past the last one handed out plus
          // one skipped records (going back is a redelivery, which is fine).
          auto& last = last_delivered_.emplace(m.partition.value, -1).first->second;
          if (last >= 0 && m.off.value > last + 1 && gaps.size() < 10)
            gaps.push_back("p" + std::to_string(m.partition.value) + " "
                           + std::to_string(last) + " -> " + std::to_string(m.off.value)
                           + " at " + std::to_string(seconds_since(t0_)) + " s");
          last = m.off.value;
        }
      }
      if (got.empty())
        continue;
      bool ok = false;
      self->request(cons_, 15s, ferry::commit_atom_v)
        .receive([&](bool b) { ok = b; }, [&](caf::error&) { ok = false; });
      std::lock_guard<std::mutex> guard{mtx_};
      ++(ok ? commits_ok : commits_failed);
    }
    caf::anon_send_exit(cons_, caf::exit_reason::user_shutdown);
  }

  /// What each node that is up answers for the group's committed offsets
  /// right now (each serves it or forwards it to the node it takes for the
  /// group's home): one line per node.
  std::string committed_by_node() {
    std::string out;
    auto req = offsets_request();
    for (int id = 1; id <= c_.voters(); ++id) {
      out += "  node " + std::to_string(id) + ":";
      auto b = c_.up(id) ? c_.broker(id) : caf::expected<ferry::broker_actor>{caf::sec::invalid_argument};
      if (!b) {
        out += " down\n";
        continue;
      }
      auto r = ask<std::vector<ferry::partition_offset>>(*c_.cs.sys, *b, 3s,
                                                         ferry::offsets_atom_v, req);
      if (!r) {
        out += " " + ferry::error_text(r.error()) + "\n";
        continue;
      }
      for (auto& po : *r)
        out += " p" + std::to_string(po.partition.value) + "=" + std::to_string(po.committed.value);
      out += "\n";
    }
    return out;
  }

  void sample_loop() {
    std::map<int32_t, int64_t> high;
    auto t0 = steady_clock::now();
    int fanouts = 0;
    while (running_) {
      int via = 0;
      if (auto now = committed_now(&via)) {
        bool back = false;
        {
          std::lock_guard<std::mutex> guard{mtx_};
          ++samples;
          for (auto& [p, off] : *now) {
            auto& h = high.emplace(p, -1).first->second;
            if (off < h) {
              back = true;
              if (++backwards <= 10)
                ADD_FAILURE() << "group " << group << ": committed offset of p" << p
                              << " moved backwards from " << h << " to " << off
                              << " (read via node " << via << " at " << seconds_since(t0)
                              << " s into the group workload)";
            }
            h = std::max(h, off);
          }
        }
        // Which node serves the lower offsets (seed 5001 in fresh-clone CI
        // runs, tests/chaos/README.md): ask each node at once, twice.
        if (back && fanouts < 3) {
          ++fanouts;
          for (int i = 0; i < 2; ++i)
            std::cout << "[chaos] committed offsets of " << group << " by node at "
                      << seconds_since(t0) << " s:\n" << committed_by_node() << std::flush;
        }
      }
      std::this_thread::sleep_for(300ms);
    }
  }

  cluster& c_;
  std::string topic_;
  int32_t partitions_;
  ferry::consumer_actor cons_;
  std::atomic<bool> running_{false};
  std::thread reader_;
  std::thread sampler_;
  std::mutex mtx_;
  std::map<std::pair<int32_t, int64_t>, std::string> consumed_;
  std::map<int32_t, int64_t> last_delivered_{};
  steady_clock::time_point t0_ = steady_clock::now();
};

/// Every partition has a leader and its three replicas in the ISR.
bool recovered(cluster& c, const std::string& topic, int32_t partitions,
               leader_tracker& leaders) {
  auto cd = c.describe_controller();
  if (!cd)
    return false;
  leaders.observe(*cd, topic, partitions);
  for (int32_t p = 0; p < partitions; ++p) {
    auto ps = find_partition(*cd, topic, p);
    if (!ps || ps->leader < 1 || !full_isr(*ps))
      return false;
  }
  return true;
}

TEST(Chaos, RandomFaultsKeepEveryAcknowledgedWrite) {
  auto t0 = steady_clock::now();
  uint64_t seed = static_cast<uint64_t>(env_int("FERRY_CHAOS_SEED", -1));
  if (seed == static_cast<uint64_t>(-1))
    seed = std::random_device{}() % 1000000;
  auto faults = static_cast<int>(env_int("FERRY_CHAOS_FAULTS", 6));
  auto partitions = static_cast<int32_t>(env_int("FERRY_CHAOS_PARTITIONS", 6));
  auto rate = static_cast<double>(env_int("FERRY_CHAOS_RATE", 800));
  auto queue_rate = static_cast<double>(env_int("FERRY_CHAOS_QUEUE_RATE", 100));
  auto http_rate = static_cast<double>(env_int("FERRY_CHAOS_HTTP_RATE", 50));
  auto voters = static_cast<int>(env_int("FERRY_CHAOS_NODES", 3));
  ASSERT_TRUE(voters == 3 || voters == 5) << "FERRY_CHAOS_NODES=" << voters << ": 3 or 5";
  std::cout << "[chaos] seed " << seed << " (rerun: FERRY_CHAOS_SEED=" << seed
            << "), nodes " << voters << ", faults " << faults << ", partitions " << partitions
            << ", rate " << rate << " msgs/s\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));

  // Logs an earlier run left in FERRY_TEST_LOG_DIR: not this run's.
  auto earlier_logs = node_log_sizes(voters + 1);
  cluster c{cluster::behind_proxy, voters};
  c.add_node_args({"--http-port", "0"}); // the HTTP producer's
  if (disks_available)
    c.before_launch([](int, const std::filesystem::path& dir) {
      return small_disks::instance().mount_at(dir, node_disk_bytes);
    });
  else
    std::cout << "[chaos] no disk faults: " << small_disks::instance().why_not() << "\n";
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "chaos";
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions))
    << "not every partition got a leader and its three replicas in the ISR\n" << c.dump();

  leader_tracker leaders;
  auto prod = make_producer(c, c.endpoints());
  ASSERT_TRUE(prod) << ferry::error_text(prod.error());
  auto book = std::make_shared<ledger>();
  load_options opt;
  opt.topic = topic;
  opt.keys = 50;
  opt.rate = rate;
  auto driver = c.cs.track(c.cs.sys->spawn(load_driver, *prod, book, opt));
  ASSERT_TRUE(wait_until(20s, [&] { return book->acked_count() >= 200; }))
    << "fewer than 200 acks in 20 s before any fault (acked " << book->acked_count() << ")\n"
    << c.dump();

  group_workload readers{c, topic, partitions};
  why = readers.start();
  ASSERT_TRUE(why.empty()) << "consumer: " << why;

  queue_workload queue{c, seed, queue_rate};
  why = queue.start();
  ASSERT_TRUE(why.empty()) << "queue workload: " << why << "\n" << c.dump();

  topology_workload topo{c, seed, 100};
  why = topo.start();
  ASSERT_TRUE(why.empty()) << "topology workload: " << why << "\n" << c.dump();

  http_workload posts{c, seed, http_rate};
  why = posts.start();
  ASSERT_TRUE(why.empty()) << "HTTP workload: " << why << "\n" << c.dump();

  nemesis nem{c, seed, topic, partitions};
  int applied = 0;
  int unrecovered = 0;
  for (int i = 0; i < faults; ++i) {
    auto acked_before = book->acked_count();
    auto tf = steady_clock::now();
    auto began = seconds_since(t0);
    std::string restart_failed;
    auto what = nem.run_one(leaders, restart_failed);
    ++applied;
    std::cout << "[chaos] fault " << i + 1 << "/" << faults << " at "
              << began << " s: " << what << "\n";
    if (!restart_failed.empty()) {
      ADD_FAILURE() << "fault " << i + 1 << " (" << what << "): " << restart_failed;
      break;
    }
    bool back = wait_until(60s, [&] { return recovered(c, topic, partitions, leaders); });
    std::cout << "[chaos] fault " << i + 1 << ": " << (back ? "recovered" : "NOT recovered")
              << " " << seconds_since(tf) << " s after it began; "
              << book->acked_count() - acked_before << " acks meanwhile\n";
    if (!back) {
      ++unrecovered;
      ADD_FAILURE() << "the cluster did not come back within 60 s of undoing fault " << i + 1
                    << " (" << what << ")\n" << c.dump();
      break;
    }
    leaders.watch(c, nem.gap(), topic, partitions);
  }

  // The producer still makes progress once the faults end.
  auto acked_after = book->acked_count();
  EXPECT_TRUE(wait_until(30s, [&] { return book->acked_count() >= acked_after + 100; }))
    << "the producer made no progress after the last fault\n" << c.dump();
  caf::anon_send(driver, ferry::stop_atom_v);
  {
    std::unique_lock<std::mutex> guard{book->mtx};
    ASSERT_TRUE(book->cv.wait_for(guard, 90s, [&] { return book->done; }))
      << "outstanding produce requests not answered within 90 s";
  }
  std::vector<ack_entry> acked;
  int64_t sent = 0, failed = 0;
  {
    std::lock_guard<std::mutex> guard{book->mtx};
    acked = book->acked;
    sent = book->sent;
    failed = book->failed;
    for (auto& [text, n] : book->errors)
      std::cout << "[chaos] produce error x" << n << ": " << text << "\n";
  }
  posts.stop();
  topo.stop();
  EXPECT_TRUE(topo.stop_producing(90s))
    << "outstanding produce requests to " << topology_workload::topic
    << " not answered within 90 s";
  EXPECT_TRUE(queue.stop_producing(90s))
    << "outstanding produce requests to " << queue_workload::topic
    << " not answered within 90 s";
  std::vector<ack_entry> queue_acked;
  {
    std::lock_guard<std::mutex> guard{queue.book->mtx};
    queue_acked = queue.book->acked;
  }
  std::vector<ack_entry> topo_acked;
  {
    std::lock_guard<std::mutex> guard{topo.book->mtx};
    topo_acked = topo.book->acked;
  }
  topo.finish(); // the broker-only node leaves: chaos-topo is on the voters again
  auto topo_found = check_acked_writes(c, topology_workload::topic,
                                       topology_workload::partitions, topo_acked, 90s);
  auto found = check_acked_writes(c, topic, partitions, acked, 60s);
  auto queue_found = check_acked_writes(c, queue_workload::topic, queue_workload::partitions,
                                        queue_acked, 60s);
  if (queue_found.why.empty()) {
    std::string state;
    EXPECT_TRUE(queue.wait_settled(queue_found.hws, 120s, state))
      << "queue group " << queue_workload::group << " did not settle within 120 s:" << state
      << "\n" << c.dump();
    queue.stop_workers();
    queue.check(queue_acked);
  }
  queue.stop_workers();
  for (auto& [text, n] : queue.redrive_errors)
    std::cout << "[chaos] redrive error x" << n << ": " << text << "\n";
  std::map<int32_t, int64_t> http_hws;
  std::map<int32_t, std::vector<int>> http_replicas;
  {
    std::string state;
    bool converged = wait_converged(c, http_workload::topic, http_workload::partitions, 60s,
                                    http_hws, state, &http_replicas);
    EXPECT_TRUE(converged) << "replicas of " << http_workload::topic << " did not converge:\n"
                           << state << c.dump();
    if (converged)
      posts.check(http_hws);
    else
      http_hws.clear();
    for (auto& [text, n] : posts.errors)
      std::cout << "[chaos] HTTP produce error x" << n << ": " << text << "\n";
  }
  int64_t undelivered = -1;
  if (found.why.empty()) {
    std::string state;
    EXPECT_TRUE(readers.wait_caught_up(found.hws, 60s, state))
      << "group " << group_workload::group << " did not commit up to the HW within 60 s:"
      << state << "\n" << c.dump();
    undelivered = readers.not_delivered(acked);
    EXPECT_EQ(undelivered, 0);
  }
  readers.stop();
  for (auto& [text, n] : readers.poll_errors)
    std::cout << "[chaos] group poll error x" << n << ": " << text << "\n";
  for (auto& g : readers.gaps)
    std::cout << "[chaos] group poll skipped offsets: " << g << "\n";
  EXPECT_EQ(readers.backwards, 0);
  if (readers.backwards > 0) {
    // Seen only in fresh-clone CI runs so far, where the node logs are not
    // kept (tests/chaos/README.md, seed 5001): what each node said about
    // its group state, from the output the harness holds.
    const char* keys[] = {"__consumer_state", "group " , "coordinat", "fenced",
                          "replayed", "truncated", "stalled", "listening on"};
    for (int id = 1; id <= c.count(); ++id) {
      std::istringstream lines{c.node(id).output()};
      std::vector<std::string> kept;
      for (std::string line; std::getline(lines, line);) {
        // Queue group lines (one per dead letter) crowded the group's own
        // out of the last 400 in the CI run of 2026-12-07.
        if (line.find("ISR change refused") != std::string::npos
            || line.find("queue group") != std::string::npos)
          continue;
        for (auto* k : keys)
          if (line.find(k) != std::string::npos) {
            kept.push_back(line);
            break;
          }
      }
      constexpr size_t most = 400;
      std::cout << "[chaos] node " << id << ": " << kept.size()
                << " lines about group state" << (kept.size() > most ? ", the last 400" : "")
                << ":\n";
      for (size_t i = kept.size() > most ? kept.size() - most : 0; i < kept.size(); ++i)
        std::cout << "  " << kept[i] << "\n";
    }
  }
  EXPECT_GT(readers.samples, 0) << "no committed offsets could be read";
  int disk_diffs = -1;
  if (found.why.empty()) {
    auto codes = c.stop_all();
    for (auto& [id, code] : codes)
      EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                         << tail(c.node(id).output(), 3000);
    disk_diffs = check_logs_on_disk(c, topic, partitions, found.hws, found.replicas);
    if (queue_found.why.empty())
      disk_diffs += check_logs_on_disk(c, queue_workload::topic, queue_workload::partitions,
                                       queue_found.hws, queue_found.replicas);
    if (topo_found.why.empty())
      disk_diffs += check_logs_on_disk(c, topology_workload::topic,
                                       topology_workload::partitions, topo_found.hws,
                                       topo_found.replicas);
    if (!http_hws.empty())
      disk_diffs += check_logs_on_disk(c, http_workload::topic, http_workload::partitions,
                                       http_hws, http_replicas);
  }
  // Election safety from the nodes' own words: one controller per Raft term
  // (the describes sampled during the run checked the same; leaders.observe).
  auto claims = controllers_per_term(c, earlier_logs);
  int logged_conflicts = 0;
  for (auto& [term, ids] : claims)
    if (ids.size() > 1 && ++logged_conflicts <= 10)
      ADD_FAILURE() << ids.size() << " nodes logged that they became controller in Raft term "
                    << term;
  EXPECT_FALSE(claims.empty()) << "no node logged 'controller in Raft term': the check saw nothing";
  bool pass = !::testing::Test::HasFailure();
  std::cout << "[chaos] summary seed=" << seed << " nodes=" << voters << " faults=" << applied
            << " kills=" << nem.kills << " pauses=" << nem.pauses << " cuts=" << nem.cuts
            << " disk_fills="
            << (disks_available ? std::to_string(nem.disk_fills) : std::string{"unavailable"})
            << " partitions=" << partitions << " sent=" << sent << " acked=" << acked.size()
            << " failed=" << failed << " lost=" << found.missing
            << " mismatched=" << found.mismatched << " duplicated=" << found.duplicates
            << " reordered=" << found.reordered << " doubly_acked=" << found.doubly_acked
            << " epochs_backwards=" << found.epochs_backwards
            << " epoch_conflicts=" << leaders.epoch_conflicts
            << " leader_changes=" << leaders.changes
            << " controller_changes=" << leaders.controller_changes
            << " controller_terms=" << claims.size()
            << " controller_conflicts=" << leaders.controller_conflicts + logged_conflicts
            << " unrecovered=" << unrecovered << " disk_diffs=" << disk_diffs
            << " group_commits=" << readers.commits_ok
            << " group_commit_failures=" << readers.commits_failed
            << " group_redelivered=" << readers.redelivered
            << " group_undelivered=" << undelivered
            << " commits_backwards=" << readers.backwards
            << " queue_acked=" << queue_acked.size()
            << " queue_lost=" << queue_found.missing + queue.lost
            << " queue_duplicated=" << queue_found.duplicates
            << " queue_deliveries=" << queue.deliveries
            << " queue_acks=" << queue.acks_confirmed
            << " dead_letters=" << queue.dead_letters
            << " dlq_duplicates=" << queue.dlq_duplicates
            << " processed_and_dead=" << queue.both
            << " expired_to_dlq=" << queue.expired_dead
            << " redrives=" << queue.redrives_ok << "/"
            << queue.redrives_ok + queue.redrives_failed
            << " redrive_copies=" << queue.redrive_copies
            << " redrive_duplicates=" << queue.redrive_duplicates
            << " redrive_missing=" << queue.redrive_missing
            << " topo_acked=" << topo_acked.size()
            << " topo_lost=" << topo_found.missing << " topo_duplicated=" << topo_found.duplicates
            << " topics_created=" << topo.creates_ok << "/"
            << topo.creates_ok + topo.creates_failed << " topics_deleted=" << topo.deletes_ok
            << "/" << topo.deletes_ok + topo.deletes_failed
            << " reassigns=" << topo.reassigns_ok << "/"
            << topo.reassigns_ok + topo.reassigns_failed
            << " broker_removed=" << (topo.removed_ok ? "yes" : "no")
            << " http_sent=" << posts.sent << " http_acked=" << posts.acked_count()
            << " http_failed=" << posts.failed << " http_lost=" << posts.lost
            << " http_duplicated=" << posts.duplicated << " http_reordered=" << posts.reordered
            << " seconds=" << static_cast<int>(seconds_since(t0))
            << " result=" << (pass ? "PASS" : "FAIL") << "\n";
}

} // namespace
