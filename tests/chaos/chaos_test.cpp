// The chaos suite (issue 18): a three-node ferryd cluster whose nodes reach
// each other only through the link proxy (tests/integration/link_proxy.hpp),
// a keyed acks=all workload through the idempotent CAF producer, a nemesis
// that injects faults on a seeded random schedule, and a checker that knows
// what must hold. See tests/chaos/README.md.
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
//     no two leaders named for one partition epoch by any node; after a
//     clean stop the three logs are byte-identical below the HW.
//
// Each run prints its seed and one summary line ("[chaos] summary ...",
// read by tests/chaos/soak.sh). Environment:
//   FERRY_CHAOS_SEED        the seed (default: random, printed)
//   FERRY_CHAOS_FAULTS      faults per run (default 6)
//   FERRY_CHAOS_PARTITIONS  partitions of the topic, RF 3 (default 6)
//   FERRY_CHAOS_RATE        messages per second the workload offers (800)
// plus FERRY_TEST_LOG_LEVEL / FERRY_TEST_LOG_DIR (cluster_harness.hpp).
// Every wait is bounded; every ferryd is SIGKILLed when the test ends, also
// on failure.

#include "acked_writes.hpp"
#include "cluster_harness.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
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
};

constexpr fault_kind all_faults[] = {
  fault_kind::kill_leader,   fault_kind::kill_controller, fault_kind::kill_any,
  fault_kind::pause,         fault_kind::isolate,         fault_kind::isolate_reset,
  fault_kind::cut_in,        fault_kind::cut_out,         fault_kind::kill_two,
  fault_kind::kill_and_pause, fault_kind::kill_and_isolate,
};

/// The nemesis: draws faults from its seed, applies and undoes them.
class nemesis {
public:
  nemesis(cluster& c, uint64_t seed, std::string topic, int32_t partitions)
    : c_(c), rng_(seed), topic_(std::move(topic)), partitions_(partitions) {
  }

  int kills = 0;
  int pauses = 0;
  int cuts = 0;

  /// Applies one random fault, holds it while `watch` observes the
  /// cluster, then undoes it. Returns what it did; "" in `why` or the
  /// reason a node could not be restarted.
  std::string run_one(leader_tracker& leaders, std::string& why) {
    auto kind = all_faults[pick(0, std::size(all_faults) - 1)];
    auto hold = ms{pick(1500, 6000)};
    int a = node_for(kind);
    int b = other_than(a);
    std::ostringstream what;
    std::vector<int> killed;
    std::vector<int> frozen;
    bool links_cut = false;
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
        for (int id = 1; id <= cluster::size; ++id)
          if (id != a)
            c_.net().set(id, a, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::cut_out:
        what << "one-way cut: node " << a << " reaches nobody";
        for (int id = 1; id <= cluster::size; ++id)
          if (id != a)
            c_.net().set(a, id, link_mode::blackhole);
        links_cut = true;
        ++cuts;
        break;
      case fault_kind::kill_two:
        hold = ms{pick(1000, 3000)};
        what << "SIGKILL nodes " << a << " and " << b << " (no majority)";
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
    }
    what << " for " << hold.count() << " ms";
    leaders.watch(c_, hold, topic_, partitions_);
    if (links_cut)
      c_.heal();
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
    return static_cast<int>(pick(1, cluster::size));
  }

  int other_than(int a) {
    auto b = static_cast<int>(pick(1, cluster::size - 1));
    return b >= a ? b + 1 : b;
  }

  cluster& c_;
  std::mt19937_64 rng_;
  std::string topic_;
  int32_t partitions_;
};

/// Every partition has a leader and the full ISR {1,2,3}.
bool recovered(cluster& c, const std::string& topic, int32_t partitions,
               leader_tracker& leaders) {
  auto cd = c.describe_controller();
  if (!cd)
    return false;
  leaders.observe(*cd, topic, partitions);
  for (int32_t p = 0; p < partitions; ++p) {
    auto ps = find_partition(*cd, topic, p);
    if (!ps || ps->leader < 1 || !same_members(ps->isr, {1, 2, 3}))
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
  std::cout << "[chaos] seed " << seed << " (rerun: FERRY_CHAOS_SEED=" << seed
            << "), faults " << faults << ", partitions " << partitions << ", rate " << rate
            << " msgs/s\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));

  cluster c{cluster::behind_proxy};
  ASSERT_CLUSTER_STARTED(c);
  const std::string topic = "chaos";
  auto why = c.create_topic(topic, partitions);
  ASSERT_TRUE(why.empty()) << why << "\n" << c.dump();
  ASSERT_TRUE(c.wait_placed(topic, partitions))
    << "not every partition got a leader and ISR {1,2,3}\n" << c.dump();

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
  auto found = check_acked_writes(c, topic, partitions, acked, 60s);
  int disk_diffs = -1;
  if (found.why.empty()) {
    auto codes = c.stop_all();
    for (auto& [id, code] : codes)
      EXPECT_EQ(code, 0) << "node " << id << " did not stop cleanly\n"
                         << tail(c.node(id).output(), 3000);
    disk_diffs = check_logs_on_disk(c, topic, partitions, found.hws);
  }
  bool pass = !::testing::Test::HasFailure();
  std::cout << "[chaos] summary seed=" << seed << " faults=" << applied
            << " kills=" << nem.kills << " pauses=" << nem.pauses << " cuts=" << nem.cuts
            << " partitions=" << partitions << " sent=" << sent << " acked=" << acked.size()
            << " failed=" << failed << " lost=" << found.missing
            << " mismatched=" << found.mismatched << " duplicated=" << found.duplicates
            << " reordered=" << found.reordered << " doubly_acked=" << found.doubly_acked
            << " epochs_backwards=" << found.epochs_backwards
            << " epoch_conflicts=" << leaders.epoch_conflicts
            << " leader_changes=" << leaders.changes
            << " controller_changes=" << leaders.controller_changes
            << " unrecovered=" << unrecovered << " disk_diffs=" << disk_diffs
            << " seconds=" << static_cast<int>(seconds_since(t0))
            << " result=" << (pass ? "PASS" : "FAIL") << "\n";
}

} // namespace
