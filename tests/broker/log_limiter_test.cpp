// log::limiter (broker/logging.hpp): one line per interval for an event that
// happens on every partition of a busy node, with what it held back.

#include "broker/logging.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

TEST(log_limiter, the_first_event_goes_out_and_the_rest_of_the_interval_is_counted) {
  ferry::log::limiter lim{10s};
  auto t0 = steady::time_point{} + 1000s;
  auto first = lim.note(t0, 120);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->held_back, 0u);
  EXPECT_EQ(first->worst, 120);
  EXPECT_FALSE(lim.note(t0 + 1s, 150).has_value());
  EXPECT_FALSE(lim.note(t0 + 5s, 400).has_value());
  EXPECT_FALSE(lim.note(t0 + 9999ms, 130).has_value());
  // The next line reports the three held back and the slowest of them.
  auto second = lim.note(t0 + 10s, 110);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->held_back, 3u);
  EXPECT_EQ(second->worst, 400);
  // Counts start again after each line.
  EXPECT_FALSE(lim.note(t0 + 11s, 105).has_value());
  auto third = lim.note(t0 + 25s, 101);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->held_back, 1u);
  EXPECT_EQ(third->worst, 105);
  // A quiet stretch: the next event goes out at once, with nothing held back.
  auto fourth = lim.note(t0 + 100s, 300);
  ASSERT_TRUE(fourth.has_value());
  EXPECT_EQ(fourth->held_back, 0u);
  EXPECT_EQ(fourth->worst, 300);
}

TEST(log_limiter, many_threads_at_once_let_one_line_through_and_lose_no_count) {
  ferry::log::limiter lim{1h};
  auto t0 = steady::time_point{} + 1000s;
  constexpr int threads = 4;
  constexpr int each = 5000;
  std::atomic<int> lines{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      while (!go.load())
        std::this_thread::yield();
      for (int k = 0; k < each; ++k)
        if (lim.note(t0 + std::chrono::milliseconds{k}, i * each + k))
          lines.fetch_add(1);
    });
  go = true;
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(lines.load(), 1);
  auto next = lim.note(t0 + 2h, 0);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->held_back, static_cast<uint64_t>(threads * each - 1));
  EXPECT_EQ(next->worst, threads * each - 1);
}

} // namespace
