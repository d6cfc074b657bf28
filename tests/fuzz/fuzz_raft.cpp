// libFuzzer harness: Raft (broker/raft_core.hpp) under schedules the fuzzer
// picks. Three members with in-memory stores; each input byte is one event:
// a tick of a member, the delivery, loss, duplication or late delivery of a
// message in flight, a proposal, or a crash and restart of a member (its
// store survives, as on disk). After every event it checks what Raft
// promises, whatever the schedule:
//   - election safety: at most one leader per term;
//   - state machine safety / log matching: no two members ever hand out
//     different entries for one committed index, and each member hands out
//     indexes in order without gaps;
//   - a committed entry is in the log of every later leader (leader
//     completeness, checked on the entries it still holds).
// A violation aborts, and libFuzzer saves the schedule that led to it.

#include "broker/raft_core.hpp"
#include "broker/raft_storage.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using ferry::raft_core;
using ferry::raft_entry;
using ferry::raft_message;

[[noreturn]] void violated(const char* what, uint64_t a, uint64_t b) {
  std::fprintf(stderr, "raft safety violated: %s (%llu, %llu)\n", what,
               static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  std::abort();
}

struct member {
  ferry::raft_memory_store store;
  std::unique_ptr<raft_core> core;
  uint64_t applied = 0; // last index handed out by take_committed
};

struct sim {
  static constexpr int n = 3;
  member m[n];
  std::deque<raft_message> net;
  std::map<uint64_t, int32_t> leader_of_term;
  std::map<uint64_t, raft_entry> committed; // index -> entry, over all members
  // index -> the lowest term a member was in when it saw the entry committed:
  // the entry was committed in that term or earlier.
  std::map<uint64_t, uint64_t> committed_by;
  uint64_t proposals = 0;

  bool start(int i) {
    ferry::raft_config c;
    c.id = i + 1;
    c.voters = {1, 2, 3};
    c.election_ticks = 4;
    c.heartbeat_ticks = 1;
    c.seed = static_cast<uint64_t>(i) * 7919 + 1;
    c.max_append_entries = 4;
    auto core = raft_core::make(c, m[i].store);
    if (!core)
      return false;
    m[i].core = std::move(*core);
    m[i].applied = 0;
    return true;
  }

  void collect(int i) {
    auto& core = *m[i].core;
    for (auto& msg : core.take_messages())
      if (net.size() < 256)
        net.push_back(std::move(msg));
    auto batch = core.take_committed();
    if (batch.restore)
      m[i].applied = batch.restore->index;
    for (auto& [index, entry] : batch.entries) {
      if (index != m[i].applied + 1)
        violated("committed indexes out of order", index, m[i].applied);
      m[i].applied = index;
      auto [it, fresh] = committed.emplace(index, entry);
      if (!fresh && !(it->second == entry))
        violated("two entries committed at one index", index, it->second.term);
      auto [by, first] = committed_by.emplace(index, core.term());
      if (!first)
        by->second = std::min(by->second, core.term());
    }
    if (core.role() == ferry::raft_role::leader) {
      auto [it, fresh] = leader_of_term.emplace(core.term(), core.id());
      if (!fresh && it->second != core.id())
        violated("two leaders in one term", core.term(), static_cast<uint64_t>(it->second));
      // Leader completeness: a leader of a term after the one an entry was
      // committed in holds it (a leader of an older term that has not heard
      // of the newer ones yet need not: it cannot commit anything).
      for (auto& [index, entry] : committed) {
        if (core.term() <= committed_by.at(index))
          continue;
        if (index <= core.snapshot_index())
          continue;
        if (index > core.last_index())
          violated("a leader lacks a committed entry", index, core.last_index());
        if (auto t = core.term_at(index); t && *t != entry.term)
          violated("a leader holds another entry at a committed index", index,
                   *t);
      }
    }
  }

  void deliver(size_t k) {
    auto msg = net[k];
    net.erase(net.begin() + static_cast<std::ptrdiff_t>(k));
    if (msg.to < 1 || msg.to > n)
      return;
    auto i = msg.to - 1;
    m[i].core->step(msg);
    collect(i);
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sim s;
  for (int i = 0; i < sim::n; ++i)
    if (!s.start(i))
      std::abort();
  for (size_t pos = 0; pos < size && pos < 4096; ++pos) {
    uint8_t b = data[pos];
    int who = (b >> 4) % sim::n;
    switch (b & 0x0f) {
      case 0: case 1: case 2: case 3: // tick
        s.m[who].core->tick();
        s.collect(who);
        break;
      case 4: case 5: case 6: case 7: // deliver the oldest message, or a later one
        if (!s.net.empty())
          s.deliver((b & 0x0f) == 4 ? 0 : (b >> 4) % s.net.size());
        break;
      case 8: // lose a message
        if (!s.net.empty())
          s.net.erase(s.net.begin() + static_cast<std::ptrdiff_t>((b >> 4) % s.net.size()));
        break;
      case 9: // duplicate a message
        if (!s.net.empty() && s.net.size() < 256)
          s.net.push_back(s.net[(b >> 4) % s.net.size()]);
        break;
      case 10: case 11: { // propose
        auto& core = *s.m[who].core;
        if (core.role() == ferry::raft_role::leader) {
          (void) core.propose("cmd-" + std::to_string(++s.proposals));
          s.collect(who);
        }
        break;
      }
      case 12: // crash and restart: volatile state is lost, the store stays
        if (!s.start(who))
          std::abort();
        // committed entries are handed out again from the start
        s.collect(who);
        break;
      default: // deliver everything in flight
        for (int k = 0; k < 8 && !s.net.empty(); ++k)
          s.deliver(0);
        break;
    }
  }
  return 0;
}
