// stall_watch's decision (actors/server/stall_watch.hpp) on given clock
// readings: when a node back from a pause serves its groups again.

#include "actors/server/stall_watch.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

using ferry::stall_watch;

namespace {

int64_t ms(int64_t n) {
  return std::chrono::duration_cast<stall_watch::clock::duration>(
           std::chrono::milliseconds{n})
    .count();
}

// A 5 s pause that ended at t=100 s; limit 2 s, quarantine 3 s.
bool stalled(int64_t now, int64_t caught_up) {
  return stall_watch::stalled_at(now, now - ms(100), ms(5000), ms(100'000), caught_up,
                                 ms(2000), ms(3000));
}

} // namespace

TEST(stall_watch, a_short_gap_never_stalls) {
  EXPECT_FALSE(stall_watch::stalled_at(ms(10'000), ms(9'900), ms(1500), ms(9'000), 0,
                                       ms(2000), ms(3000)));
}

TEST(stall_watch, a_running_pause_stalls) {
  EXPECT_TRUE(stall_watch::stalled_at(ms(10'000), ms(7'000), 0, 0, 0, ms(2000), ms(3000)));
}

TEST(stall_watch, after_a_pause_groups_wait_for_the_quarantine_and_a_catch_up) {
  EXPECT_TRUE(stalled(ms(101'000), 0)) << "in quarantine";
  EXPECT_TRUE(stalled(ms(104'000), 0)) << "no catch-up evidence yet";
  EXPECT_TRUE(stalled(ms(104'000), ms(99'000))) << "evidence from before the gap";
  EXPECT_TRUE(stalled(ms(104'100), ms(104'000))) << "a moment after the catch-up";
  EXPECT_FALSE(stalled(ms(104'300), ms(104'000)));
}

// Raft brings catch-up evidence with every heartbeat. Only the first after
// the gap counts: before, each one moved the time, which was then never
// 250 ms old, and the node refused its groups for good (chaos seed 608).
TEST(stall_watch, heartbeats_after_the_catch_up_do_not_extend_the_stall) {
  int64_t caught_up = 0;
  caught_up = stall_watch::first_caught_up(caught_up, ms(100'000), ms(104'000));
  EXPECT_EQ(caught_up, ms(104'000));
  for (int64_t t = 104'050; t <= 110'000; t += 50) {
    caught_up = stall_watch::first_caught_up(caught_up, ms(100'000), ms(t));
    EXPECT_EQ(caught_up, ms(104'000));
    if (t >= 104'300) {
      EXPECT_FALSE(stalled(ms(t), caught_up)) << "still refusing at " << t << " ms";
    }
  }
  // A later pause needs evidence of its own.
  EXPECT_EQ(stall_watch::first_caught_up(caught_up, ms(200'000), ms(204'000)), ms(204'000));
}

// What waited in the node's sockets during the pause arrives first: a
// leader's heartbeat sent before the pause names a commit index the node
// has applied, but the metadata may have changed since (chaos seed 5203:
// the woken node served offsets from before the pause as the group's home,
// its link to the Raft leader down). Evidence in the first second after
// the gap does not count; later evidence (fresh heartbeats) does.
TEST(stall_watch, evidence_right_after_the_gap_is_not_taken) {
  int64_t caught_up = 0;
  for (int64_t t = 100'000; t < 101'000; t += 10)
    caught_up = stall_watch::first_caught_up(caught_up, ms(100'000), ms(t));
  EXPECT_EQ(caught_up, 0) << "messages from before the pause do not count";
  EXPECT_TRUE(stalled(ms(104'000), caught_up)) << "no evidence yet: still refusing";
  caught_up = stall_watch::first_caught_up(caught_up, ms(100'000), ms(104'000));
  EXPECT_EQ(caught_up, ms(104'000));
  EXPECT_FALSE(stalled(ms(104'300), caught_up));
}
