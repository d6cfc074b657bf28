// Unit tests of queue-mode leasing: the retry policy, the lease table's
// transitions (ack, nack with backoff, expiry, reject, extend, dead-letter in
// two steps), the committed position over the done prefix, per-key ordering,
// the window cap, change tracking, and a randomized schedule of three members
// checked against a model (with restarts through the persisted form).

#include "broker/lease_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

using namespace ferry;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

// A persisted row with only the fields a test cares about.
queue_record row(int64_t off, queue_record_phase phase,
                 int32_t attempts = 0) {
  queue_record r;
  r.off = offset{off};
  r.phase = phase;
  r.attempts = attempts;
  return r;
}

// No jitter: delays are exact. 100 ms, x2, cap 1 s; 3 attempts; 1 s leases.
lease_table_config exact_config(queue_ordering ordering = queue_ordering::none,
                                size_t window = 1000) {
  lease_table_config c;
  c.retry.initial_backoff = 100ms;
  c.retry.multiplier = 2.0;
  c.retry.max_backoff = 1000ms;
  c.retry.jitter = no_jitter;
  c.retry.max_attempts = 3;
  c.retry.visibility_timeout = 1000ms;
  c.ordering = ordering;
  c.window = window;
  c.seed = 42;
  return c;
}

lease_table make_table(const lease_table_config& cfg,
                       offset start = offset{0}) {
  auto t = lease_table::make(cfg, start);
  EXPECT_TRUE(t) << describe(t.error());
  return std::move(*t);
}

void offer_range(lease_table& t, int64_t from, int64_t to,
                 std::optional<std::string> key = std::nullopt) {
  for (auto i = from; i < to; ++i) {
    auto err = t.offer(offset{i}, key, 1000 + i);
    ASSERT_FALSE(err) << describe(err);
  }
}

std::vector<lease> take(lease_table& t, std::string_view member, size_t n,
                        timestamp_ms now,
                        std::optional<milliseconds> vis = std::nullopt) {
  auto r = t.acquire(member, n, now, vis);
  EXPECT_TRUE(r) << describe(r.error());
  return r ? *r : std::vector<lease>{};
}

std::vector<int64_t> offsets_of(const std::vector<lease>& ls) {
  std::vector<int64_t> out;
  for (const auto& l : ls)
    out.push_back(l.off.value);
  return out;
}

using v64 = std::vector<int64_t>;

} // namespace

// -- retry policy -------------------------------------------------------------

TEST(retry_policy, ceilings_grow_exponentially_up_to_the_cap) {
  retry_config c;
  c.initial_backoff = 1000ms;
  c.multiplier = 2.0;
  c.max_backoff = 60'000ms;
  c.jitter = no_jitter;
  retry_policy p{c, 1};
  std::vector<int64_t> got;
  for (int n = 0; n <= 9; ++n)
    got.push_back(p.backoff(n).count());
  EXPECT_EQ(got, (v64{0, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000,
                      60000}));
  // Huge failure counts neither overflow nor exceed the cap.
  EXPECT_EQ(p.ceiling(1'000'000).count(), 60'000);
}

TEST(retry_policy, full_and_equal_jitter_stay_within_their_bounds) {
  retry_config c;
  c.initial_backoff = 1000ms;
  c.max_backoff = 8000ms;
  c.jitter = full_jitter;
  retry_policy full{c, 7};
  c.jitter = equal_jitter;
  retry_policy equal{c, 7};
  std::set<int64_t> distinct;
  for (int round = 0; round < 200; ++round) {
    for (int n = 1; n <= 6; ++n) {
      auto ceiling = full.ceiling(n).count();
      auto f = full.backoff(n).count();
      EXPECT_GE(f, 0);
      EXPECT_LE(f, ceiling);
      distinct.insert(f);
      auto e = equal.backoff(n).count();
      EXPECT_GE(e, ceiling / 2);
      EXPECT_LE(e, ceiling);
      EXPECT_EQ(equal.floor(n).count(), ceiling / 2);
    }
  }
  EXPECT_GT(distinct.size(), 100u) << "jitter does not vary";
}

TEST(retry_policy, a_fixed_seed_gives_the_same_delays) {
  retry_config c;
  retry_policy a{c, 99}, b{c, 99}, other{c, 100};
  std::vector<int64_t> xa, xb, xo;
  for (int n = 1; n <= 20; ++n) {
    xa.push_back(a.backoff(n % 7 + 1).count());
    xb.push_back(b.backoff(n % 7 + 1).count());
    xo.push_back(other.backoff(n % 7 + 1).count());
  }
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xo);
}

TEST(retry_policy, validate_names_the_bad_setting) {
  auto check = [](auto mutate, const char* what) {
    retry_config c;
    mutate(c);
    auto err = c.validate();
    EXPECT_TRUE(is(err, ec::invalid_config)) << what;
    EXPECT_NE(describe(err).find(what), std::string::npos) << describe(err);
  };
  EXPECT_FALSE(retry_config{}.validate());
  check([](retry_config& c) { c.multiplier = 0.5; }, "multiplier");
  check([](retry_config& c) { c.max_backoff = 1ms; }, "max backoff");
  check([](retry_config& c) { c.jitter = 1.5; }, "jitter");
  check([](retry_config& c) { c.max_attempts = 0; }, "max attempts");
  check([](retry_config& c) { c.visibility_timeout = 0ms; }, "visibility");
  check([](retry_config& c) { c.initial_backoff = -1ms; }, "initial");
  retry_config d;
  EXPECT_EQ(d.max_attempts, 5);
  EXPECT_EQ(d.visibility_timeout, 30'000ms);
}

// -- lease table ----------------------------------------------------------------

TEST(lease_table, rejects_a_bad_config) {
  auto c = exact_config();
  c.window = 0;
  EXPECT_TRUE(is(lease_table::make(c, offset{0}).error(), ec::invalid_config));
  c = exact_config();
  c.retry.visibility_timeout = 2h;
  c.max_visibility = 1h;
  EXPECT_TRUE(is(lease_table::make(c, offset{0}).error(), ec::invalid_config));
  EXPECT_TRUE(is(lease_table::make(exact_config(), offset{-1}).error(),
                 ec::invalid_argument));
  EXPECT_EQ(*parse_queue_ordering("key"), queue_ordering::key);
  EXPECT_TRUE(is(parse_queue_ordering("fifo").error(), ec::invalid_config));
}

TEST(lease_table, leases_records_in_order_and_ack_completes_them) {
  auto t = make_table(exact_config(), offset{10});
  offer_range(t, 10, 15);
  auto a = take(t, "m1", 3, 0);
  ASSERT_EQ(offsets_of(a), (v64{10, 11, 12}));
  std::set<uint64_t> ids;
  for (const auto& l : a) {
    EXPECT_NE(l.lease_id, 0u);
    EXPECT_EQ(l.deadline, 1000);
    EXPECT_EQ(l.attempt, 1);
    EXPECT_EQ(l.timestamp, 1000 + l.off.value);
    ids.insert(l.lease_id);
  }
  EXPECT_EQ(ids.size(), 3u);
  auto b = take(t, "m2", 10, 5, 200ms);
  ASSERT_EQ(offsets_of(b), (v64{13, 14}));
  EXPECT_EQ(b[0].deadline, 205);
  EXPECT_TRUE(take(t, "m3", 10, 5).empty());
  EXPECT_EQ(t.stats().leased, 5u);
  for (const auto& l : a)
    EXPECT_FALSE(t.ack("m1", l.off, l.lease_id));
  EXPECT_EQ(t.committed(), offset{13});
  EXPECT_FALSE(t.find(offset{10}));
  ASSERT_TRUE(t.find(offset{13}));
  EXPECT_EQ(t.find(offset{13})->status, record_status::leased);
  EXPECT_EQ(t.find(offset{13})->member, "m2");
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, committed_advances_only_over_the_contiguous_done_prefix) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 5);
  auto ls = take(t, "m", 5, 0);
  ASSERT_EQ(ls.size(), 5u);
  for (int i : {4, 2, 3}) {
    EXPECT_FALSE(t.ack("m", ls[i].off, ls[i].lease_id));
    EXPECT_EQ(t.committed(), offset{0}) << "after ack of " << i;
  }
  EXPECT_FALSE(t.ack("m", ls[1].off, ls[1].lease_id));
  EXPECT_EQ(t.committed(), offset{0});
  EXPECT_EQ(t.stats().done, 4u);
  EXPECT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_EQ(t.committed(), offset{5});
  EXPECT_EQ(t.stats().tracked, 0u);
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, gaps_in_the_offered_offsets_count_as_done) {
  auto t = make_table(exact_config());
  ASSERT_FALSE(t.offer(offset{0}, std::nullopt, 0));
  ASSERT_FALSE(t.offer(offset{3}, std::nullopt, 0));
  ASSERT_FALSE(t.offer(offset{7}, std::nullopt, 0));
  EXPECT_TRUE(is(t.offer(offset{7}, std::nullopt, 0), ec::invalid_argument));
  EXPECT_EQ(t.read_end(), offset{8});
  auto ls = take(t, "m", 10, 0);
  ASSERT_EQ(offsets_of(ls), (v64{0, 3, 7}));
  EXPECT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_EQ(t.committed(), offset{3});
  EXPECT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));
  EXPECT_FALSE(t.ack("m", ls[1].off, ls[1].lease_id));
  EXPECT_EQ(t.committed(), offset{8});
}

TEST(lease_table, nack_makes_the_record_available_only_after_the_backoff) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 2);
  auto l = take(t, "m", 1, 0).at(0);
  auto r = t.nack("m", l.off, l.lease_id, 10, 0ms, "db down");
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->outcome, failure_outcome::retry);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_EQ(r->available_at, 110); // 10 + 100 ms
  EXPECT_EQ(t.next_retry(), 110);
  EXPECT_EQ(t.find(offset{0})->status, record_status::delayed);
  EXPECT_EQ(t.find(offset{0})->last_error, "db down");
  // Before the backoff only the other record is there.
  EXPECT_EQ(offsets_of(take(t, "m", 10, 109)), (v64{1}));
  EXPECT_TRUE(take(t, "m", 10, 109).empty());
  auto again = take(t, "m", 10, 110);
  ASSERT_EQ(offsets_of(again), (v64{0}));
  EXPECT_EQ(again[0].attempt, 2);
  // The second failure doubles the backoff; a longer delay wins over it.
  r = t.nack("m", again[0].off, again[0].lease_id, 200, 0ms, "db down");
  EXPECT_EQ(r->available_at, 400);
  again = take(t, "m", 1, 400);
  ASSERT_EQ(again.size(), 1u);
  // Third failure = max_attempts (3): dead-letter, whatever the delay.
  r = t.nack("m", again[0].off, again[0].lease_id, 500, 5000ms, "still down");
  EXPECT_EQ(r->outcome, failure_outcome::dead_letter);
  EXPECT_EQ(r->attempts, 3);
}

TEST(lease_table, nack_delay_longer_than_the_backoff_wins) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 1);
  auto l = take(t, "m", 1, 0).at(0);
  auto r = t.nack("m", l.off, l.lease_id, 0, 750ms, "later");
  EXPECT_EQ(r->available_at, 750);
  EXPECT_TRUE(take(t, "m", 1, 749).empty());
  EXPECT_EQ(take(t, "m", 1, 750).size(), 1u);
}

TEST(lease_table, an_expired_lease_counts_as_a_failed_attempt) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 1);
  auto l = take(t, "m1", 1, 0, 500ms).at(0);
  EXPECT_EQ(t.next_deadline(), 500);
  EXPECT_TRUE(t.expire(499).empty());
  auto ex = t.expire(520);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].off, offset{0});
  EXPECT_EQ(ex[0].member, "m1");
  EXPECT_EQ(ex[0].lease_id, l.lease_id);
  EXPECT_EQ(ex[0].result.outcome, failure_outcome::retry);
  EXPECT_EQ(ex[0].result.attempts, 1);
  EXPECT_EQ(ex[0].result.available_at, 620);
  auto v = *t.find(offset{0});
  EXPECT_EQ(v.attempts, 1);
  EXPECT_EQ(v.last_error, lease_expired_error);
  EXPECT_EQ(v.first_failure, 520);
  EXPECT_EQ(v.last_failure, 520);
  EXPECT_FALSE(t.next_deadline());
  // The late member learns its lease is gone.
  EXPECT_TRUE(is(t.ack("m1", l.off, l.lease_id), ec::lease_expired));
  auto again = take(t, "m2", 1, 620);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
  EXPECT_NE(again[0].lease_id, l.lease_id);
  // Still expired for the old holder while someone else holds it.
  EXPECT_TRUE(is(t.ack("m1", l.off, l.lease_id), ec::lease_expired));
  EXPECT_FALSE(t.ack("m2", again[0].off, again[0].lease_id));
}

TEST(lease_table, max_attempts_lead_to_dead_letter_with_all_failure_info) {
  auto t = make_table(exact_config()); // max_attempts 3
  offer_range(t, 0, 2);
  auto l = take(t, "m", 1, 1000).at(0);
  ASSERT_TRUE(t.nack("m", l.off, l.lease_id, 1100, 0ms, "first"));
  l = take(t, "m", 1, 1200, 100ms).at(0);
  ASSERT_EQ(l.off, offset{0});
  ASSERT_EQ(t.expire(1300).size(), 1u); // second failure: lease-expired
  l = take(t, "m", 1, 2000).at(0);
  ASSERT_EQ(l.off, offset{0});
  auto r = t.nack("m", l.off, l.lease_id, 2500, 0ms, "third");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, failure_outcome::dead_letter);
  auto dl = t.pending_dead_letters();
  ASSERT_EQ(dl.size(), 1u);
  EXPECT_EQ(dl[0], (dead_letter_info{offset{0}, 3, "third", 1100, 2500}));
  EXPECT_EQ(t.find(offset{0})->status, record_status::dead_letter);
  // Pending: not leased again, and it holds the committed position.
  EXPECT_EQ(offsets_of(take(t, "m", 10, 3000)), (v64{1}));
  EXPECT_EQ(t.committed(), offset{0});
  auto hs = dead_letter_headers(dl[0], "g", "orders", partition_id{4});
  std::map<std::string, std::string> h;
  for (const auto& x : hs)
    h[x.key] = x.value.value_or("<null>");
  EXPECT_EQ(h.size(), 8u);
  EXPECT_EQ(h["ferry-original-topic"], "orders");
  EXPECT_EQ(h["ferry-original-partition"], "4");
  EXPECT_EQ(h["ferry-original-offset"], "0");
  EXPECT_EQ(h["ferry-attempts"], "3");
  EXPECT_EQ(h["ferry-error"], "third");
  EXPECT_EQ(h["ferry-group"], "g");
  EXPECT_EQ(h["ferry-first-failure-ts"], "1100");
  EXPECT_EQ(h["ferry-last-failure-ts"], "2500");
  EXPECT_EQ(default_dlq_topic("orders", "g"), "orders.g.dlq");
  // Second step: written to the DLQ, now it is done.
  EXPECT_FALSE(t.dead_lettered(offset{0}));
  EXPECT_TRUE(t.pending_dead_letters().empty());
  EXPECT_EQ(t.committed(), offset{1});
  EXPECT_FALSE(t.dead_lettered(offset{0})) << "repeating it is harmless";
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, expiry_at_max_attempts_dead_letters_with_lease_expired) {
  auto c = exact_config();
  c.retry.max_attempts = 1;
  auto t = make_table(c);
  offer_range(t, 0, 1);
  take(t, "m", 1, 0, 10ms);
  auto ex = t.expire(10);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].result.outcome, failure_outcome::dead_letter);
  auto dl = t.pending_dead_letters();
  ASSERT_EQ(dl.size(), 1u);
  EXPECT_EQ(dl[0].error, "lease-expired");
}

TEST(lease_table, reject_dead_letters_at_once) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 3);
  auto ls = take(t, "m", 3, 0);
  EXPECT_FALSE(t.reject("m", ls[1].off, ls[1].lease_id, 50, "bad payload"));
  auto dl = t.pending_dead_letters();
  ASSERT_EQ(dl.size(), 1u);
  EXPECT_EQ(dl[0], (dead_letter_info{offset{1}, 1, "bad payload", 50, 50}));
  EXPECT_TRUE(is(t.dead_lettered(offset{0}), ec::invalid_argument))
    << "a leased record is not pending dead-letter";
  EXPECT_TRUE(is(t.dead_lettered(offset{9}), ec::not_found));
  EXPECT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));
  EXPECT_EQ(t.committed(), offset{1});
  EXPECT_FALSE(t.dead_lettered(offset{1}));
  EXPECT_EQ(t.committed(), offset{3});
}

TEST(lease_table, errors_cut_to_the_limit) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 1);
  auto l = take(t, "m", 1, 0).at(0);
  std::string long_error(5000, 'x');
  EXPECT_FALSE(t.reject("m", l.off, l.lease_id, 0, long_error));
  EXPECT_EQ(t.pending_dead_letters().at(0).error.size(), max_error_bytes);
}

TEST(lease_table, extend_prolongs_a_lease_and_never_shortens_it) {
  auto c = exact_config();
  c.max_visibility = 10'000ms;
  auto t = make_table(c);
  offer_range(t, 0, 1);
  auto l = take(t, "m", 1, 0, 1000ms).at(0);
  auto d = t.extend("m", l.off, l.lease_id, 900, 1000ms);
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(*d, 1900);
  EXPECT_EQ(*t.extend("m", l.off, l.lease_id, 950, 10ms), 1900);
  EXPECT_TRUE(t.expire(1000).empty());
  EXPECT_EQ(t.next_deadline(), 1900);
  // Capped at now + max_visibility.
  EXPECT_EQ(*t.extend("m", l.off, l.lease_id, 1000, 1h), 11'000);
  EXPECT_TRUE(is(t.extend("m", l.off, l.lease_id, 1000, 0ms).error(),
                 ec::invalid_argument));
  EXPECT_TRUE(is(t.extend("x", l.off, l.lease_id, 1000, 10ms).error(),
                 ec::not_lease_owner));
  ASSERT_EQ(t.expire(11'000).size(), 1u);
  EXPECT_TRUE(is(t.extend("m", l.off, l.lease_id, 11'001, 10ms).error(),
                 ec::lease_expired));
}

TEST(lease_table, wrong_member_unknown_offset_and_stale_lease_errors) {
  auto t = make_table(exact_config(), offset{5});
  offer_range(t, 5, 8);
  auto ls = take(t, "m1", 2, 0);
  ASSERT_EQ(ls.size(), 2u);
  auto& l = ls[0];
  EXPECT_TRUE(is(t.ack("m2", l.off, l.lease_id), ec::not_lease_owner));
  EXPECT_TRUE(is(t.nack("m2", l.off, l.lease_id, 0).error(),
                 ec::not_lease_owner));
  EXPECT_TRUE(is(t.reject("m2", l.off, l.lease_id, 0), ec::not_lease_owner));
  EXPECT_TRUE(is(t.ack("m1", offset{99}, l.lease_id), ec::lease_not_found));
  EXPECT_TRUE(is(t.ack("m1", offset{4}, l.lease_id), ec::lease_not_found));
  EXPECT_TRUE(is(t.ack("m1", l.off, l.lease_id + 1000), ec::lease_not_found));
  EXPECT_TRUE(is(t.ack("m1", offset{7}, l.lease_id), ec::lease_not_found))
    << "offered but never leased";
  EXPECT_TRUE(is(t.ack("m1", l.off, ls[1].lease_id), ec::lease_not_found))
    << "a lease of another record";
  EXPECT_FALSE(t.ack("m1", l.off, l.lease_id));
  EXPECT_TRUE(is(t.ack("m1", l.off, l.lease_id), ec::lease_not_found))
    << "double ack";
  // Nack ends the lease: the same id no longer works.
  ASSERT_TRUE(t.nack("m1", ls[1].off, ls[1].lease_id, 0));
  EXPECT_TRUE(is(t.ack("m1", ls[1].off, ls[1].lease_id),
                 ec::lease_not_found));
  EXPECT_TRUE(is(t.acquire("", 1, 0).error(), ec::invalid_argument));
  EXPECT_TRUE(is(t.acquire("m", 1, 0, 0ms).error(), ec::invalid_argument));
  EXPECT_TRUE(is(t.acquire("m", 1, 0, 13h).error(), ec::invalid_argument));
  EXPECT_TRUE(is(t.offer(offset{3}, std::nullopt, 0), ec::invalid_argument));
}

TEST(lease_table, ordering_key_holds_later_records_of_a_key_during_a_retry) {
  auto t = make_table(exact_config(queue_ordering::key));
  // 0:a 1:b 2:a 3:a 4:(null) 5:b
  const char* keys[] = {"a", "b", "a", "a", nullptr, "b"};
  for (int i = 0; i < 6; ++i) {
    std::optional<std::string_view> k;
    if (keys[i])
      k = keys[i];
    ASSERT_FALSE(t.offer(offset{i}, k, 0));
  }
  auto ls = take(t, "m1", 10, 0);
  ASSERT_EQ(offsets_of(ls), (v64{0, 1, 4})) << "one record per key";
  EXPECT_TRUE(ls[0].has_key);
  EXPECT_FALSE(ls[2].has_key);
  EXPECT_EQ(ls[0].key_hash, std::hash<std::string_view>{}("a"));
  EXPECT_TRUE(take(t, "m2", 10, 0).empty());
  // b finishes: its next record comes.
  EXPECT_FALSE(t.ack("m1", ls[1].off, ls[1].lease_id));
  EXPECT_EQ(offsets_of(take(t, "m2", 10, 0)), (v64{5}));
  // a fails: while it waits for its retry, 2 and 3 stay back.
  ASSERT_TRUE(t.nack("m1", ls[0].off, ls[0].lease_id, 10, 0ms, "x"));
  EXPECT_TRUE(take(t, "m2", 10, 50).empty());
  auto retry = take(t, "m2", 10, 110);
  ASSERT_EQ(offsets_of(retry), (v64{0}));
  EXPECT_FALSE(t.verify()) << describe(t.verify());
  // a is dead-lettered: that releases the key at once.
  EXPECT_FALSE(t.reject("m2", retry[0].off, retry[0].lease_id, 120, "poison"));
  auto next = take(t, "m2", 10, 120);
  ASSERT_EQ(offsets_of(next), (v64{2}));
  EXPECT_FALSE(t.ack("m2", next[0].off, next[0].lease_id));
  EXPECT_EQ(offsets_of(take(t, "m3", 10, 120)), (v64{3}));
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, ordering_none_delivers_records_of_a_key_in_parallel) {
  auto t = make_table(exact_config(queue_ordering::none));
  offer_range(t, 0, 3, "same");
  EXPECT_EQ(offsets_of(take(t, "m", 10, 0)), (v64{0, 1, 2}));
}

TEST(lease_table, ordering_key_expiry_holds_and_max_attempts_release) {
  auto c = exact_config(queue_ordering::key);
  c.retry.max_attempts = 2;
  auto t = make_table(c);
  offer_range(t, 0, 2, "k");
  ASSERT_EQ(offsets_of(take(t, "m", 10, 0, 10ms)), (v64{0}));
  ASSERT_EQ(t.expire(10).size(), 1u);
  EXPECT_TRUE(take(t, "m", 10, 50).empty()) << "1 waits behind the retry";
  ASSERT_EQ(offsets_of(take(t, "m", 10, 110, 10ms)), (v64{0}));
  auto ex = t.expire(120);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].result.outcome, failure_outcome::dead_letter);
  EXPECT_EQ(offsets_of(take(t, "m", 10, 120)), (v64{1}));
}

TEST(lease_table, two_members_share_a_partition_without_double_leasing) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 100);
  std::set<int64_t> m1, m2;
  for (int round = 0; round < 20; ++round) {
    for (const auto& l : take(t, "m1", 3, round))
      EXPECT_TRUE(m1.insert(l.off.value).second);
    for (const auto& l : take(t, "m2", 4, round))
      EXPECT_TRUE(m2.insert(l.off.value).second);
  }
  EXPECT_EQ(m1.size() + m2.size(), 100u);
  for (auto o : m1)
    EXPECT_EQ(m2.count(o), 0u) << o;
  EXPECT_EQ(t.stats().leased, 100u);
}

TEST(lease_table, window_caps_the_records_not_done) {
  auto t = make_table(exact_config(queue_ordering::none, 4));
  offer_range(t, 0, 4);
  EXPECT_EQ(t.room(), 0u);
  EXPECT_TRUE(is(t.offer(offset{4}, std::nullopt, 0), ec::throttled));
  auto ls = take(t, "m", 10, 0);
  ASSERT_EQ(ls.size(), 4u);
  for (int i = 1; i < 4; ++i)
    EXPECT_FALSE(t.ack("m", ls[i].off, ls[i].lease_id));
  // Done records above an unfinished head leave the window: the reader goes
  // on while the committed position waits for the head.
  EXPECT_EQ(t.committed(), offset{0});
  EXPECT_EQ(t.room(), 3u);
  EXPECT_EQ(t.stats().done, 3u);
  offer_range(t, 4, 7);
  EXPECT_TRUE(is(t.offer(offset{7}, std::nullopt, 0), ec::throttled));
  EXPECT_EQ(offsets_of(take(t, "m", 10, 0)), (v64{4, 5, 6}));
  EXPECT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_EQ(t.committed(), offset{4});
  EXPECT_FALSE(t.verify()) << describe(t.verify());
  std::vector<std::string> keys(6, "k");
  std::vector<queue_candidate> cs;
  for (int i = 7; i < 13; ++i)
    cs.push_back(queue_candidate{offset{i}, keys[i - 7], 0});
  auto n = t.offer(cs);
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 1u) << "the span offer stops at the cap (4, 5, 6 leased)";
  EXPECT_EQ(t.read_end(), offset{8});
}

// Issue 20: one record that keeps failing and a key parked behind a failing
// record sit in front of 100,000 healthy records; the window (100 records)
// slides past them, every healthy record is delivered once and done, and
// the committed position waits for the head. The done records are rows of
// the change sets (so a restart knows them) and go once the head is done.
TEST(lease_table, a_poison_record_and_a_parked_key_do_not_stall_the_records_behind) {
  auto cfg = exact_config(queue_ordering::key, 100);
  cfg.retry.max_attempts = 1'000'000;
  auto t = make_table(cfg);
  ASSERT_FALSE(t.offer(offset{0}, "poison", 0));
  ASSERT_FALSE(t.offer(offset{1}, "k", 0)); // fails every time
  ASSERT_FALSE(t.offer(offset{2}, "k", 0)); // parked behind 1
  constexpr int64_t healthy = 100'000;
  const int64_t end = 3 + healthy;
  int64_t next = 3;
  int64_t done = 0;
  std::vector<int> delivered(static_cast<size_t>(end), 0);
  timestamp_ms now = 0;
  size_t rows = 0;
  for (int round = 0; done < healthy && round < 10'000; ++round) {
    while (next < end && t.room() > 0) {
      // Keys of their own: ordered, never held by the failing ones.
      ASSERT_FALSE(t.offer(offset{next}, "h" + std::to_string(next % 64), next));
      ++next;
    }
    for (auto& l : take(t, "m", 1000, now)) {
      ++delivered[static_cast<size_t>(l.off.value)];
      ASSERT_NE(l.off, offset{2}) << "leased while its key waits for record 1";
      if (l.off <= offset{1}) {
        ASSERT_TRUE(t.nack("m", l.off, l.lease_id, now, 0ms, "boom"));
      } else {
        ASSERT_FALSE(t.ack("m", l.off, l.lease_id));
        ++done;
      }
    }
    for (auto& r : t.take_changes().upserts)
      rows += r.phase == queue_record_phase::done ? 1 : 0;
    now += 2000; // past every backoff (cap 1 s)
  }
  ASSERT_EQ(done, healthy);
  for (int64_t i = 3; i < end; ++i)
    ASSERT_EQ(delivered[static_cast<size_t>(i)], 1) << "record " << i;
  EXPECT_GT(delivered[0], 10);
  EXPECT_EQ(t.committed(), offset{0});
  EXPECT_EQ(t.stats().done, static_cast<size_t>(healthy));
  EXPECT_EQ(rows, static_cast<size_t>(healthy));
  EXPECT_FALSE(t.verify()) << describe(t.verify());
  // A restart from the stored form knows what is done: only 0 and 1 come
  // again (2 once 1 is done).
  auto snap = t.snapshot();
  EXPECT_EQ(snap.records.size(), static_cast<size_t>(healthy) + 2);
  auto r = lease_table::restore(cfg, snap);
  ASSERT_TRUE(r) << describe(r.error());
  for (int64_t i = 0; i < end; ++i)
    ASSERT_FALSE(r->offer(offset{i}, i <= 2 ? std::optional<std::string_view>{i == 0 ? "poison" : "k"}
                                            : std::optional<std::string_view>{"h"},
                          i));
  // 0 and 1 wait for their retry time (the restored table's clock is 0), 2
  // is parked behind 1: all three only wait, the window is free.
  EXPECT_EQ(r->room(), 100u);
  EXPECT_EQ(r->waiting(), 3u);
  auto again = take(*r, "m", 1000, now);
  EXPECT_EQ(offsets_of(again), (v64{0, 1}));
  // The head is done at last: the position jumps to the end, and the change
  // set erases the done rows.
  ASSERT_FALSE(r->ack("m", again[0].off, again[0].lease_id));
  ASSERT_FALSE(r->ack("m", again[1].off, again[1].lease_id));
  auto last = take(*r, "m", 10, now);
  ASSERT_EQ(offsets_of(last), (v64{2}));
  ASSERT_FALSE(r->ack("m", last[0].off, last[0].lease_id));
  EXPECT_EQ(r->committed(), offset{end});
  auto ch = r->take_changes();
  EXPECT_EQ(ch.committed, offset{end});
  EXPECT_EQ(ch.erased.size(), static_cast<size_t>(healthy) + 2);
  EXPECT_EQ(r->stats().done, 0u);
  EXPECT_FALSE(r->verify()) << describe(r->verify());
}

// Issue 20: records that only wait -- parked behind a failing record of
// their key, or scheduled for a later delivery -- do not count against the
// window: with a window of 100, a parked key of 3,000 records and 2,000
// delayed ones, the 20,000 healthy records between them all get processed;
// max_waiting bounds the waiting ones.
TEST(lease_table, records_that_wait_leave_the_window_to_the_records_behind) {
  auto cfg = exact_config(queue_ordering::key, 100);
  cfg.max_waiting = 6'000;
  cfg.retry.max_attempts = 1'000'000;
  auto t = make_table(cfg);
  constexpr int64_t parked = 3'000, delayed = 2'000, healthy = 20'000;
  constexpr timestamp_ms later = 1'000'000'000;
  // Every fifth record is of the stuck key (until `parked` of them), every
  // fifth+1 a delayed one (until `delayed`), the others healthy.
  auto kind = [](int64_t i) {
    if (i == 0)
      return 's'; // the stuck key's first record: fails every time
    if (i % 5 == 0 && i / 5 <= parked)
      return 's';
    if (i % 5 == 1 && i / 5 < delayed)
      return 'd';
    return 'h';
  };
  const int64_t end = [&] {
    int64_t i = 0, h = 0;
    for (; h < healthy; ++i)
      h += kind(i) == 'h' ? 1 : 0;
    return std::max<int64_t>(i, parked * 5 + 1);
  }();
  std::vector<int> delivered(static_cast<size_t>(end), 0);
  int64_t next = 0, done = 0, expect_healthy = 0;
  for (int64_t i = 0; i < end; ++i)
    expect_healthy += kind(i) == 'h' ? 1 : 0;
  timestamp_ms now = 0;
  for (int round = 0; done < expect_healthy && round < 100'000; ++round) {
    while (next < end && t.room() > 0) {
      auto k = kind(next);
      // Healthy records share 97 keys (their later records are parked
      // behind the first for a while); each delayed one has its own.
      std::string key = k == 's'   ? "stuck"
                        : k == 'd' ? "d" + std::to_string(next)
                                   : "h" + std::to_string(next % 97);
      ASSERT_FALSE(t.offer(offset{next}, key, now, k == 'd' ? later : 0));
      ++next;
    }
    auto got = take(t, "m", 50, now);
    ASSERT_FALSE(got.empty()) << "stalled at " << next << " after " << done;
    for (auto& l : got) {
      ++delivered[static_cast<size_t>(l.off.value)];
      auto k = kind(l.off.value);
      ASSERT_NE(k, 'd') << "record " << l.off << " delivered early";
      if (k == 's') {
        ASSERT_EQ(l.off, offset{0}) << "leased behind the stuck record";
        ASSERT_TRUE(t.nack("m", l.off, l.lease_id, now, 0ms, "boom"));
      } else {
        ASSERT_FALSE(t.ack("m", l.off, l.lease_id));
        ++done;
      }
    }
    now += 2000; // past every backoff (cap 1 s)
  }
  ASSERT_EQ(done, expect_healthy);
  ASSERT_EQ(next, end);
  auto s = t.stats();
  EXPECT_EQ(s.parked, static_cast<size_t>(parked));
  EXPECT_EQ(s.scheduled, static_cast<size_t>(delayed));
  EXPECT_EQ(t.find(offset{5})->status, record_status::parked);
  EXPECT_EQ(t.find(offset{1})->status, record_status::delayed);
  EXPECT_FALSE(t.verify()) << describe(t.verify());
  // Records that wait fill max_waiting: then the reader stops (room 0)
  // until something stops waiting, whatever the window says.
  ASSERT_EQ(t.waiting(), 5'000u + 1u) << "the stuck record waits for its retry";
  auto more = end;
  while (t.room() > 0 && more < end + 10'000)
    ASSERT_FALSE(t.offer(offset{more++}, "stuck", now));
  EXPECT_EQ(more, end + 999);
  EXPECT_EQ(t.waiting(), cfg.max_waiting);
  EXPECT_EQ(t.stats().leased + t.stats().available, 0u);
  auto err = t.offer(offset{more}, "h", now);
  EXPECT_TRUE(is(err, ec::throttled)) << describe(err);
  // The stuck record goes to the dead-letter queue: its key runs again, one
  // record at a time in offset order; then the delayed ones come due.
  auto first = take(t, "m", 10, now);
  ASSERT_EQ(offsets_of(first), (v64{0}));
  ASSERT_FALSE(t.reject("m", first[0].off, first[0].lease_id, now, "poison"));
  ASSERT_FALSE(t.dead_lettered(offset{0}));
  int64_t expect = 5;
  for (int round = 0; expect < more && round < 10'000; ++round) {
    auto ls = take(t, "m", 50, now);
    ASSERT_EQ(ls.size(), 1u) << "key order allows one at a time";
    ASSERT_EQ(ls[0].off, offset{expect});
    ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
    expect = expect < parked * 5 ? expect + 5 : std::max(expect + 1, end);
  }
  EXPECT_EQ(expect, more);
  EXPECT_EQ(t.stats().parked, 0u);
  EXPECT_TRUE(take(t, "m", 50, later - 1).empty());
  EXPECT_EQ(take(t, "m", 5'000, later).size(), static_cast<size_t>(delayed));
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

// Issue 20: a record offered with a delivery time waits for it like a retry,
// without an attempt, and holds its key meanwhile.
TEST(lease_table, a_delayed_record_waits_for_its_time_without_an_attempt) {
  auto t = make_table(exact_config(queue_ordering::key));
  ASSERT_FALSE(t.offer(offset{0}, "k", 1000, 6000));
  ASSERT_FALSE(t.offer(offset{1}, "k", 1000));
  ASSERT_FALSE(t.offer(offset{2}, "other", 1000));
  EXPECT_EQ(offsets_of(take(t, "m", 10, 5999)), (v64{2}));
  auto s = t.stats();
  EXPECT_EQ(s.scheduled, 1u);
  EXPECT_EQ(s.delayed, 1u);
  EXPECT_EQ(t.find(offset{0})->status, record_status::delayed);
  EXPECT_EQ(t.next_retry(), timestamp_ms{6000});
  EXPECT_TRUE(t.take_changes().upserts.empty()) << "a delay needs no row";
  auto ls = take(t, "m", 10, 6000);
  ASSERT_EQ(offsets_of(ls), (v64{0}));
  EXPECT_EQ(ls[0].attempt, 1);
  EXPECT_EQ(t.stats().scheduled, 0u);
  ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_EQ(offsets_of(take(t, "m", 10, 6000)), (v64{1}));
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, release_member_and_redeliver_all_count_no_attempt) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 4);
  auto a = take(t, "m1", 2, 0);
  auto b = take(t, "m2", 2, 0);
  EXPECT_EQ(t.release_member("m1"), 2u);
  EXPECT_TRUE(is(t.ack("m1", a[0].off, a[0].lease_id), ec::lease_not_found));
  auto c = take(t, "m3", 10, 1);
  ASSERT_EQ(offsets_of(c), (v64{0, 1}));
  EXPECT_EQ(c[0].attempt, 1);
  EXPECT_EQ(t.redeliver_all_leases(), 4u);
  EXPECT_EQ(t.stats().leased, 0u);
  auto d = take(t, "m4", 10, 2);
  EXPECT_EQ(offsets_of(d), (v64{0, 1, 2, 3}));
  for (const auto& l : d)
    EXPECT_EQ(l.attempt, 1);
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, skip_to_forgets_records_gone_from_the_log) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 5);
  auto ls = take(t, "m", 2, 0);
  EXPECT_EQ(t.skip_to(offset{3}), 3u);
  EXPECT_EQ(t.committed(), offset{3});
  EXPECT_TRUE(is(t.ack("m", ls[0].off, ls[0].lease_id), ec::lease_not_found));
  EXPECT_EQ(offsets_of(take(t, "m", 10, 0)), (v64{3, 4}));
  EXPECT_EQ(t.skip_to(offset{10}), 2u);
  EXPECT_EQ(t.committed(), offset{10});
  EXPECT_EQ(t.read_end(), offset{10});
  EXPECT_FALSE(t.verify()) << describe(t.verify());
}

TEST(lease_table, change_sets_hold_exactly_the_rows_to_persist) {
  auto t = make_table(exact_config());
  EXPECT_TRUE(t.has_changes()) << "a new table must write its position";
  auto ch = t.take_changes();
  EXPECT_EQ(ch.committed, offset{0});
  EXPECT_TRUE(ch.upserts.empty());
  EXPECT_FALSE(t.has_changes());
  offer_range(t, 0, 4);
  auto ls = take(t, "m", 4, 0);
  EXPECT_FALSE(t.has_changes()) << "leases are not persisted";
  ASSERT_FALSE(t.ack("m", ls[2].off, ls[2].lease_id));       // done above head
  ASSERT_TRUE(t.nack("m", ls[1].off, ls[1].lease_id, 5, 0ms, "e")); // retry
  ASSERT_FALSE(t.reject("m", ls[3].off, ls[3].lease_id, 6, "r")); // DLQ
  ch = t.take_changes();
  EXPECT_FALSE(ch.full);
  ASSERT_EQ(ch.upserts.size(), 3u);
  EXPECT_EQ(ch.upserts[0].off, offset{1});
  EXPECT_EQ(ch.upserts[0].phase, queue_record_phase::retry);
  EXPECT_EQ(ch.upserts[0].attempts, 1);
  EXPECT_EQ(ch.upserts[0].available_at, 105);
  EXPECT_EQ(ch.upserts[0].last_error, "e");
  EXPECT_EQ(ch.upserts[1].phase, queue_record_phase::done);
  EXPECT_EQ(ch.upserts[2].phase, queue_record_phase::dead_letter);
  EXPECT_TRUE(ch.erased.empty());
  EXPECT_EQ(t.snapshot().records, ch.upserts);
  // The head finishes: committed moves to 1, then 1 and 2 follow.
  ASSERT_FALSE(t.ack("m", ls[0].off, ls[0].lease_id));
  ch = t.take_changes();
  EXPECT_EQ(ch.committed, offset{1});
  EXPECT_TRUE(ch.upserts.empty());
  EXPECT_TRUE(ch.erased.empty()) << "record 0 never had a row";
  auto again = take(t, "m", 1, 105).at(0);
  ASSERT_FALSE(t.ack("m", again.off, again.lease_id));
  ASSERT_FALSE(t.dead_lettered(offset{3}));
  ch = t.take_changes();
  EXPECT_EQ(ch.committed, offset{4});
  EXPECT_EQ(ch.erased, (std::vector<offset>{offset{1}, offset{2}, offset{3}}));
  // A failed write: the next change set rewrites everything.
  offer_range(t, 4, 6);
  auto l = take(t, "m", 1, 200).at(0);
  ASSERT_TRUE(t.nack("m", l.off, l.lease_id, 200, 0ms, "e"));
  (void) t.take_changes(); // lost
  t.mark_all_dirty();
  ch = t.take_changes();
  EXPECT_TRUE(ch.full);
  ASSERT_EQ(ch.upserts.size(), 1u);
  EXPECT_EQ(ch.upserts[0].off, offset{4});
}

TEST(lease_table, restore_starts_without_leases_and_keeps_failure_info) {
  auto t = make_table(exact_config(queue_ordering::key));
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(t.offer(offset{i}, std::string_view{i == 2 ? "b" : "a"}, 0));
  auto ls = take(t, "m", 10, 0); // 0 (a) and 2 (b)
  ASSERT_EQ(offsets_of(ls), (v64{0, 2}));
  ASSERT_TRUE(t.nack("m", ls[0].off, ls[0].lease_id, 10, 0ms, "e"));
  ASSERT_FALSE(t.reject("m", ls[1].off, ls[1].lease_id, 11, "r"));
  auto snap = t.snapshot();
  auto r = lease_table::restore(exact_config(queue_ordering::key), snap);
  ASSERT_TRUE(r) << describe(r.error());
  auto& u = *r;
  EXPECT_EQ(u.committed(), offset{0});
  EXPECT_EQ(u.read_end(), offset{0});
  EXPECT_EQ(u.find(offset{0})->status, record_status::unread);
  // Pending dead letters are known before the partition is read again.
  auto dl = u.pending_dead_letters();
  ASSERT_EQ(dl.size(), 1u);
  EXPECT_EQ(dl[0], (dead_letter_info{offset{2}, 1, "r", 11, 11}));
  for (int i = 0; i < 5; ++i)
    ASSERT_FALSE(u.offer(offset{i}, std::string_view{i == 2 ? "b" : "a"}, 0));
  EXPECT_TRUE(take(u, "m", 10, 50).empty()) << "0 still waits for its retry";
  auto again = take(u, "m", 10, 110);
  ASSERT_EQ(offsets_of(again), (v64{0}));
  EXPECT_EQ(again[0].attempt, 2);
  EXPECT_FALSE(u.verify()) << describe(u.verify());
  EXPECT_EQ(u.snapshot(), snap);
  // Malformed snapshots are refused.
  queue_snapshot bad;
  bad.records.push_back(row(1, queue_record_phase::retry, 0));
  EXPECT_TRUE(is(lease_table::restore(exact_config(), bad).error(),
                 ec::invalid_argument));
  bad.records = {row(1, queue_record_phase::done),
                 row(1, queue_record_phase::done)};
  EXPECT_TRUE(is(lease_table::restore(exact_config(), bad).error(),
                 ec::invalid_argument));
}

TEST(lease_table, restored_rows_of_records_gone_from_the_log_are_dropped) {
  queue_snapshot snap;
  snap.committed = offset{10};
  snap.records = {row(12, queue_record_phase::done),
                  queue_record{offset{14}, queue_record_phase::retry, 2, 1, 2,
                               3, "e", "", 0, 0},
                  row(3, queue_record_phase::done)};
  auto t = lease_table::restore(exact_config(), snap);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->find(offset{3})) << "below the position: ignored";
  ASSERT_FALSE(t->offer(offset{10}, std::nullopt, 0));
  ASSERT_FALSE(t->offer(offset{12}, std::nullopt, 0));
  ASSERT_FALSE(t->offer(offset{15}, std::nullopt, 0)); // 14 is gone
  EXPECT_FALSE(t->find(offset{14}));
  auto ch = t->take_changes();
  EXPECT_EQ(ch.erased, (std::vector<offset>{offset{14}}));
  auto ls = take(*t, "m", 10, 0);
  ASSERT_EQ(offsets_of(ls), (v64{10, 15}));
  ASSERT_FALSE(t->ack("m", ls[0].off, ls[0].lease_id));
  EXPECT_EQ(t->committed(), offset{15});
  EXPECT_FALSE(t->verify()) << describe(t->verify());
}

TEST(lease_table, a_window_full_of_restored_rows_still_reads_up_to_them) {
  // Found by the randomized schedule: after a restart the restored rows alone
  // can fill the window; the records between them must still be taken.
  queue_snapshot snap;
  snap.committed = offset{0};
  for (int i = 1; i <= 4; ++i)
    snap.records.push_back(row(i * 2, queue_record_phase::retry, 1));
  auto t = lease_table::restore(exact_config(queue_ordering::none, 4), snap);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->room(), 9u) << "offsets 0..8 are all below the last row";
  for (int i = 0; i < 9; ++i)
    ASSERT_FALSE(t->offer(offset{i}, std::nullopt, 0)) << i;
  EXPECT_EQ(t->room(), 0u);
  EXPECT_TRUE(is(t->offer(offset{9}, std::nullopt, 0), ec::throttled));
  auto ls = take(*t, "m", 10, 0);
  ASSERT_EQ(offsets_of(ls), (v64{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  for (const auto& l : ls)
    ASSERT_FALSE(t->ack("m", l.off, l.lease_id));
  EXPECT_EQ(t->committed(), offset{9});
  EXPECT_EQ(t->room(), 4u);
}

TEST(lease_table, restored_done_rows_take_no_room) {
  queue_snapshot snap;
  snap.committed = offset{0};
  for (int i = 1; i <= 4; ++i)
    snap.records.push_back(row(i * 2, queue_record_phase::done));
  auto t = lease_table::restore(exact_config(queue_ordering::none, 4), snap);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->room(), 4u);
  EXPECT_EQ(t->stats().done, 4u);
  EXPECT_EQ(t->find(offset{4})->status, record_status::done);
  for (int i = 0; i < 7; ++i) // 0, 1, 3, 5 fill the window; 2, 4, 6 are done
    ASSERT_FALSE(t->offer(offset{i}, std::nullopt, 0)) << i;
  EXPECT_TRUE(is(t->offer(offset{7}, std::nullopt, 0), ec::throttled));
  auto ls = take(*t, "m", 10, 0);
  ASSERT_EQ(offsets_of(ls), (v64{0, 1, 3, 5}));
  auto again = t->ack("m", offset{4}, 77);
  EXPECT_TRUE(is(again, ec::lease_not_found)) << describe(again);
  EXPECT_NE(describe(again).find("is done"), std::string::npos) << describe(again);
  for (const auto& l : ls)
    ASSERT_FALSE(t->ack("m", l.off, l.lease_id));
  EXPECT_EQ(t->committed(), offset{7});
  auto ch = t->take_changes();
  EXPECT_EQ(ch.erased, (std::vector<offset>{offset{2}, offset{4}, offset{6}}));
  EXPECT_TRUE(ch.upserts.empty());
  EXPECT_FALSE(t->verify()) << describe(t->verify());
}

// -- randomized schedule ------------------------------------------------------

namespace {

struct schedule_result {
  size_t acked = 0;
  size_t dead_lettered = 0;
  size_t restarts = 0;
  size_t steps = 0;
};

// The persisted rows, as a store would hold them after the change sets.
struct fake_store {
  offset committed{0};
  std::map<offset, queue_record> rows;

  void apply(const queue_changes& ch) {
    committed = ch.committed;
    if (ch.full)
      rows.clear();
    for (auto off : ch.erased)
      rows.erase(off);
    for (const auto& r : ch.upserts)
      rows[r.off] = r;
  }

  queue_snapshot snapshot() const {
    queue_snapshot s;
    s.committed = committed;
    for (const auto& [off, r] : rows)
      if (off >= committed)
        s.records.push_back(r);
    return s;
  }
};

// Three members acquire, ack, nack, reject, extend and let leases expire in
// a random order; the coordinator side expires leases, writes dead letters
// (sometimes crashing before dead_lettered), persists every change set
// (sometimes failing) and restarts. Checks the invariants after every step.
schedule_result run_schedule(uint64_t seed, queue_ordering ordering) {
  constexpr int64_t n_records = 300;
  const std::vector<std::string> members{"m0", "m1", "m2"};
  std::mt19937_64 rng{seed};
  auto chance = [&](int percent) {
    return static_cast<int>(rng() % 100) < percent;
  };
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };

  lease_table_config cfg;
  cfg.ordering = ordering;
  cfg.window = 40;
  cfg.seed = seed;
  cfg.retry.initial_backoff = 20ms;
  cfg.retry.max_backoff = 200ms;
  cfg.retry.jitter = full_jitter;
  cfg.retry.max_attempts = 4;
  cfg.retry.visibility_timeout = 100ms;
  cfg.max_visibility = 1000ms;

  // Record keys: 7 keys and some null keys.
  std::vector<std::optional<std::string>> keys;
  for (int64_t i = 0; i < n_records; ++i) {
    if (rng() % 5 == 0)
      keys.emplace_back(std::nullopt);
    else
      keys.emplace_back("k" + std::to_string(rng() % 7));
  }

  auto t = lease_table::make(cfg, offset{0});
  EXPECT_TRUE(t);
  fake_store store;
  bool save_failed = false;
  struct live {
    std::string member;
    uint64_t lease_id;
  };
  std::map<int64_t, live> leases; // live leases as the members see them
  std::vector<std::pair<int64_t, uint64_t>> stale; // ended leases
  std::set<int64_t> acked, dlq_written, dead;
  timestamp_ms now = 0;
  offset last_committed{0};
  schedule_result res;

  auto finished = [&](int64_t o) {
    return acked.count(o) != 0 || dead.count(o) != 0;
  };

  for (res.steps = 0; res.steps < 200'000; ++res.steps) {
    if (t->committed().value == n_records && t->pending_dead_letters().empty())
      break;
    now += static_cast<timestamp_ms>(rng() % 15);
    auto action = pick(100);
    if (action < 15) {
      // The coordinator reads the partition as far as the window allows.
      while (t->read_end().value < n_records && t->room() > 0) {
        auto o = t->read_end().value;
        std::optional<std::string_view> k;
        if (keys[o])
          k = *keys[o];
        auto err = t->offer(offset{o}, k, now);
        if (err) {
          ADD_FAILURE() << describe(err);
          return res;
        }
      }
    } else if (action < 40) {
      auto& m = members[pick(3)];
      auto got = t->acquire(m, 1 + pick(4), now);
      EXPECT_TRUE(got);
      for (const auto& l : *got) {
        EXPECT_EQ(leases.count(l.off.value), 0u)
          << "two live leases on " << l.off << " (seed " << seed << ")";
        EXPECT_FALSE(finished(l.off.value)) << "finished record leased";
        EXPECT_EQ(dlq_written.count(l.off.value), 0u);
        if (ordering == queue_ordering::key && keys[l.off.value]) {
          // No earlier record of the key may be unfinished, and no other
          // record of the key may be leased.
          for (int64_t o = t->committed().value; o < l.off.value; ++o) {
            if (keys[o] == keys[l.off.value] && !finished(o)) {
              auto v = t->find(offset{o});
              EXPECT_TRUE(v && v->status == record_status::dead_letter)
                << "record " << l.off << " leased before " << o
                << " of its key (seed " << seed << ")";
            }
          }
          for (const auto& [o, x] : leases)
            EXPECT_FALSE(keys[o] == keys[l.off.value])
              << "two leases on key " << *keys[o];
        }
        leases[l.off.value] = live{m, l.lease_id};
      }
    } else if (action < 75 && !leases.empty()) {
      auto it = std::next(leases.begin(),
                          static_cast<long>(pick(leases.size())));
      auto off = offset{it->first};
      auto x = it->second;
      auto what = pick(100);
      if (what < 60) {
        auto err = t->ack(x.member, off, x.lease_id);
        EXPECT_FALSE(err) << describe(err);
        EXPECT_TRUE(acked.insert(off.value).second);
        EXPECT_EQ(dead.count(off.value), 0u);
      } else if (what < 85) {
        auto r = t->nack(x.member, off, x.lease_id, now,
                         milliseconds{pick(3) * 10}, "nack");
        EXPECT_TRUE(r);
      } else if (what < 92) {
        EXPECT_FALSE(t->reject(x.member, off, x.lease_id, now, "reject"));
      } else {
        auto d = t->extend(x.member, off, x.lease_id, now, 50ms);
        EXPECT_TRUE(d);
        continue;
      }
      stale.emplace_back(off.value, x.lease_id);
      leases.erase(it);
    } else if (action < 85) {
      for (const auto& ex : t->expire(now)) {
        auto it = leases.find(ex.off.value);
        EXPECT_TRUE(it != leases.end()) << "expired an unknown lease";
        if (it != leases.end()) {
          EXPECT_EQ(it->second.lease_id, ex.lease_id);
          EXPECT_EQ(it->second.member, ex.member);
          leases.erase(it);
        }
        stale.emplace_back(ex.off.value, ex.lease_id);
      }
    } else if (action < 93) {
      // The coordinator moves pending dead letters to the DLQ topic; the
      // write is idempotent (a set). Sometimes it crashes in between.
      for (const auto& d : t->pending_dead_letters()) {
        EXPECT_EQ(acked.count(d.off.value), 0u) << "acked and dead-lettered";
        EXPECT_GE(d.attempts, 1);
        dlq_written.insert(d.off.value);
        if (chance(20))
          break; // "crash" before dead_lettered: it stays pending
        EXPECT_FALSE(t->dead_lettered(d.off));
        dead.insert(d.off.value);
      }
    } else if (action < 95 && !leases.empty()) {
      // A live lease id in the wrong hands is refused and stays live.
      auto it = std::next(leases.begin(),
                          static_cast<long>(pick(leases.size())));
      auto other = it->second.member == "m0" ? "m1" : "m0";
      EXPECT_TRUE(is(t->ack(other, offset{it->first}, it->second.lease_id),
                     ec::not_lease_owner));
      EXPECT_TRUE(is(t->nack(other, offset{it->first}, it->second.lease_id,
                             now).error(),
                     ec::not_lease_owner));
    } else if (action < 97 && !stale.empty()) {
      // An old lease id never works again.
      auto [o, id] = stale[pick(stale.size())];
      auto m = members[pick(3)];
      auto err = t->ack(m, offset{o}, id);
      EXPECT_TRUE(err) << "stale lease " << id << " acked " << o;
      EXPECT_TRUE(is(err, ec::lease_not_found) || is(err, ec::lease_expired)
                  || is(err, ec::not_lease_owner))
        << describe(err);
    } else if (!save_failed && !t->has_changes() && chance(30)) {
      // Restart from the persisted form: leases are delivered again.
      // Each incarnation gets its own seed, so its lease ids are new.
      auto rcfg = cfg;
      rcfg.seed = seed * 1000 + res.restarts + 1;
      auto r = lease_table::restore(rcfg, store.snapshot());
      EXPECT_TRUE(r) << describe(r.error());
      if (!r)
        return res;
      for (const auto& [o, x] : leases)
        stale.emplace_back(o, x.lease_id);
      leases.clear();
      // Dead letters written but not marked are pending again.
      for (const auto& d : r->pending_dead_letters())
        EXPECT_EQ(dead.count(d.off.value), 0u);
      t = std::move(r);
      ++res.restarts;
    }
    // Persist after every step; one write in 20 fails.
    if (t->has_changes()) {
      auto ch = t->take_changes();
      if (chance(5)) {
        t->mark_all_dirty();
        save_failed = true;
      } else {
        store.apply(ch);
        save_failed = false;
        EXPECT_EQ(store.snapshot(), t->snapshot())
          << "persisted rows diverge (seed " << seed << ")";
      }
    }
    // Invariants.
    if (auto err = t->verify()) {
      ADD_FAILURE() << describe(err) << " (seed " << seed << ", step "
                    << res.steps << ")";
      return res;
    }
    EXPECT_GE(t->committed(), last_committed) << "committed went back";
    for (auto o = last_committed.value; o < t->committed().value; ++o)
      EXPECT_TRUE(finished(o)) << "committed " << t->committed()
                               << " passes undone record " << o;
    last_committed = t->committed();
    if (::testing::Test::HasFailure())
      return res;
  }
  EXPECT_EQ(t->committed().value, n_records) << "did not finish (seed " << seed
                                             << ")";
  if (auto v = t->find(t->committed()))
    ADD_FAILURE() << "stuck at record " << v->off << ": "
                  << to_string(v->status) << ", " << v->attempts
                  << " attempts, read end " << t->read_end() << ", room "
                  << t->room() << ", " << res.restarts << " restarts";
  // Every record ended either acked or dead-lettered, never both.
  for (int64_t o = 0; o < n_records; ++o) {
    EXPECT_NE(acked.count(o) != 0, dead.count(o) != 0) << "record " << o;
    EXPECT_EQ(dead.count(o) != 0, dlq_written.count(o) != 0) << "record " << o;
  }
  res.acked = acked.size();
  res.dead_lettered = dead.size();
  return res;
}

} // namespace

class lease_table_schedule
  : public ::testing::TestWithParam<std::tuple<uint64_t, queue_ordering>> {};

TEST_P(lease_table_schedule, keeps_every_invariant_and_finishes_every_record) {
  auto [seed, ordering] = GetParam();
  auto res = run_schedule(seed, ordering);
  EXPECT_EQ(res.acked + res.dead_lettered, 300u);
  // The schedule exercised what it should.
  EXPECT_GT(res.dead_lettered, 0u);
  EXPECT_GT(res.acked, 0u);
  RecordProperty("steps", std::to_string(res.steps));
  RecordProperty("restarts", std::to_string(res.restarts));
}

INSTANTIATE_TEST_SUITE_P(
  seeds, lease_table_schedule,
  ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u),
                     ::testing::Values(queue_ordering::none,
                                       queue_ordering::key)),
  [](const auto& info) {
    return "seed" + std::to_string(std::get<0>(info.param)) + "_"
           + to_string(std::get<1>(info.param));
  });

// -- persisted leases (cluster mode) --------------------------------------------

namespace {

lease_table_config persisting_config(queue_ordering ordering
                                     = queue_ordering::none) {
  auto c = exact_config(ordering);
  c.persist_leases = true;
  return c;
}

// What a new coordinator on another node opens: the table's persisted form.
lease_table reopen_from(const lease_table& t, lease_table_config cfg) {
  auto r = lease_table::restore(cfg, t.snapshot());
  EXPECT_TRUE(r) << describe(r.error());
  return std::move(*r);
}

const queue_record* find_row(const queue_changes& ch, int64_t off) {
  for (const auto& r : ch.upserts)
    if (r.off.value == off)
      return &r;
  return nullptr;
}

} // namespace

TEST(lease_table_leases, acquire_and_extend_report_lease_rows) {
  auto t = make_table(persisting_config());
  offer_range(t, 0, 3);
  (void) t.take_changes();
  auto ls = take(t, "m1", 2, 10'000);
  ASSERT_EQ(ls.size(), 2u);
  ASSERT_TRUE(t.has_changes());
  auto ch = t.take_changes();
  ASSERT_EQ(ch.upserts.size(), 2u);
  auto* r = find_row(ch, 0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->phase, queue_record_phase::leased);
  EXPECT_EQ(r->member, "m1");
  EXPECT_EQ(r->lease_id, ls[0].lease_id);
  EXPECT_EQ(r->deadline, ls[0].deadline);
  EXPECT_EQ(r->attempts, 0);
  auto d = t.extend("m1", offset{0}, ls[0].lease_id, 10'500, 5000ms);
  ASSERT_TRUE(d);
  ch = t.take_changes();
  ASSERT_EQ(ch.upserts.size(), 1u);
  EXPECT_EQ(ch.upserts[0].deadline, *d);
  // The ack turns the lease row into a done row; the release erases it.
  ASSERT_FALSE(t.ack("m1", offset{0}, ls[0].lease_id));
  EXPECT_EQ(t.release_member("m1"), 1u);
  ch = t.take_changes();
  EXPECT_EQ(ch.committed, offset{1});
  EXPECT_TRUE(ch.upserts.empty());
  // 0 is below the position now, 1 is available without a failure.
  EXPECT_EQ(ch.erased, (std::vector<offset>{offset{0}, offset{1}}));
  EXPECT_FALSE(t.verify());
}

TEST(lease_table_leases, without_persistence_leases_make_no_rows) {
  auto t = make_table(exact_config());
  offer_range(t, 0, 3);
  (void) t.take_changes();
  take(t, "m1", 2, 10'000);
  EXPECT_FALSE(t.has_changes());
  EXPECT_TRUE(t.snapshot().records.empty());
}

TEST(lease_table_leases, restore_takes_over_leases_with_ids_members_attempts) {
  auto cfg = persisting_config();
  auto t = make_table(cfg);
  offer_range(t, 0, 4);
  auto first = take(t, "m1", 1, 10'000); // 0
  ASSERT_TRUE(t.nack("m1", offset{0}, first[0].lease_id, 10'000));
  auto ls = take(t, "m2", 3, 10'050); // 1, 2, 3 (0 waits for its backoff)
  ASSERT_EQ(offsets_of(ls), (v64{1, 2, 3}));
  auto again = take(t, "m1", 1, 20'100); // 0, attempt 2
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
  // Another coordinator opens the persisted state with a fresh seed.
  auto cfg2 = cfg;
  cfg2.seed = 4242;
  auto u = reopen_from(t, cfg2);
  ASSERT_FALSE(u.verify()) << describe(u.verify());
  EXPECT_EQ(u.stats().leased, 4u);
  auto v = u.find(offset{0});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, record_status::leased);
  EXPECT_EQ(v->member, "m1");
  EXPECT_EQ(v->lease_id, again[0].lease_id);
  EXPECT_EQ(v->deadline, again[0].deadline);
  EXPECT_EQ(v->attempts, 1);
  // Old lease ids work before the reader offered the records again.
  EXPECT_FALSE(u.ack("m2", offset{1}, ls[0].lease_id));
  EXPECT_TRUE(is(u.ack("m1", offset{2}, ls[1].lease_id), ec::not_lease_owner));
  auto nr = u.nack("m1", offset{0}, again[0].lease_id, 20'200);
  ASSERT_TRUE(nr) << describe(nr.error());
  EXPECT_EQ(nr->attempts, 2);
  auto ext = u.extend("m2", offset{3}, ls[2].lease_id, 20'200, 60'000ms);
  ASSERT_TRUE(ext) << describe(ext.error());
  ASSERT_FALSE(u.verify()) << describe(u.verify());
  // Nothing is handed out before the records are read again.
  EXPECT_TRUE(take(u, "m3", 10, 30'000).empty());
  offer_range(u, 0, 4);
  ASSERT_FALSE(u.verify()) << describe(u.verify());
  // 0 is due again (attempt 3); 2 is still leased to m2 until it expires.
  auto got = take(u, "m3", 10, 30'000);
  EXPECT_EQ(offsets_of(got), (v64{0}));
  EXPECT_EQ(got[0].attempt, 3);
  auto ex = u.expire(first[0].deadline + 1'000'000);
  // 0 (m3's), 2 and 3 expire; 0 reaches max_attempts.
  EXPECT_EQ(ex.size(), 3u);
  EXPECT_EQ(u.pending_dead_letters().size(), 1u);
  EXPECT_EQ(u.pending_dead_letters()[0].off, offset{0});
  EXPECT_EQ(u.pending_dead_letters()[0].attempts, 3);
  ASSERT_FALSE(u.verify()) << describe(u.verify());
}

TEST(lease_table_leases, new_ids_never_match_restored_ones) {
  auto cfg = persisting_config();
  cfg.seed = 0; // random, as in a cluster
  auto t = make_table(cfg);
  offer_range(t, 0, 2);
  auto ls = take(t, "m1", 1, 1000);
  auto u = reopen_from(t, cfg);
  offer_range(u, 0, 2);
  auto more = take(u, "m1", 1, 1000);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].off, offset{1});
  EXPECT_NE(more[0].lease_id, ls[0].lease_id);
}

TEST(lease_table_leases, restored_leases_hold_their_key) {
  auto cfg = persisting_config(queue_ordering::key);
  auto t = make_table(cfg);
  offer_range(t, 0, 3, "k");
  auto ls = take(t, "m1", 5, 1000);
  ASSERT_EQ(offsets_of(ls), (v64{0}));
  auto u = reopen_from(t, cfg);
  offer_range(u, 0, 3, "k");
  EXPECT_TRUE(take(u, "m2", 5, 1100).empty());
  ASSERT_FALSE(u.ack("m1", offset{0}, ls[0].lease_id));
  EXPECT_EQ(offsets_of(take(u, "m2", 5, 1200)), (v64{1}));
  ASSERT_FALSE(u.verify()) << describe(u.verify());
}

TEST(lease_table_leases, lease_rows_without_persistence_are_delivered_again) {
  auto t = make_table(persisting_config());
  offer_range(t, 0, 2);
  auto ls = take(t, "m1", 2, 1000);
  auto u = reopen_from(t, exact_config());
  EXPECT_EQ(u.stats().leased, 0u);
  EXPECT_TRUE(u.has_changes()); // the lease rows go
  offer_range(u, 0, 2);
  auto got = take(u, "m2", 5, 1100);
  EXPECT_EQ(offsets_of(got), (v64{0, 1}));
  EXPECT_EQ(got[0].attempt, 1);
  auto ch = u.take_changes();
  EXPECT_EQ(ch.erased, (std::vector<offset>{offset{0}, offset{1}}));
}

TEST(lease_table_leases, restore_rejects_a_lease_row_without_member_or_id) {
  queue_snapshot snap;
  snap.committed = offset{0};
  auto r = row(0, queue_record_phase::leased);
  r.lease_id = 7;
  snap.records.push_back(r);
  EXPECT_TRUE(is(lease_table::restore(persisting_config(), snap).error(),
                 ec::invalid_argument));
  snap.records[0].member = "m";
  snap.records[0].lease_id = 0;
  EXPECT_TRUE(is(lease_table::restore(persisting_config(), snap).error(),
                 ec::invalid_argument));
}

TEST(lease_table_leases, release_ends_one_lease_without_an_attempt) {
  auto t = make_table(persisting_config());
  offer_range(t, 0, 2);
  auto ls = take(t, "m1", 2, 1000);
  (void) t.take_changes();
  EXPECT_FALSE(t.release(offset{0}, ls[1].lease_id));
  EXPECT_TRUE(t.release(offset{0}, ls[0].lease_id));
  EXPECT_FALSE(t.release(offset{0}, ls[0].lease_id));
  auto got = take(t, "m2", 5, 1100);
  EXPECT_EQ(offsets_of(got), (v64{0}));
  EXPECT_EQ(got[0].attempt, 1);
  EXPECT_FALSE(t.verify());
}

// Records gone from the log while they waited (compaction, retention) are
// forgotten: done without a delivery, the key's next record takes its turn,
// and the committed position moves over them; leased records, records
// pending dead-letter and those the caller keeps stay.
TEST(lease_table, forget_makes_records_gone_from_the_log_done) {
  auto cfg = exact_config(queue_ordering::key, 100);
  cfg.retry.max_attempts = 1;
  auto t = make_table(cfg);
  for (int64_t i = 0; i < 8; ++i)
    ASSERT_FALSE(t.offer(offset{i}, i < 6 ? "k" : "x" + std::to_string(i), 0,
                         i == 7 ? 1'000'000 : 0));
  auto got = take(t, "m", 10, 0);
  ASSERT_EQ(got.size(), 2u); // 0 (key k's head) and 6
  ASSERT_EQ(got[0].off, offset{0});
  // 0 leased, 1..5 parked behind it, 6 leased, 7 delayed.
  auto gone = t.forget(offset{0}, offset{8},
                       [](offset off) { return off == offset{3}; });
  EXPECT_EQ(gone, (std::vector<offset>{offset{1}, offset{2}, offset{4},
                                       offset{5}, offset{7}}));
  EXPECT_EQ(t.committed(), offset{0});
  EXPECT_TRUE(t.tracks(offset{3}));
  ASSERT_FALSE(t.ack("m", offset{0}, got[0].lease_id));
  // Key k's next record is 3 (1 and 2 are gone): it may be leased now.
  auto next = take(t, "m", 10, 0);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].off, offset{3});
  ASSERT_FALSE(t.ack("m", offset{3}, next[0].lease_id));
  ASSERT_FALSE(t.ack("m", offset{6}, got[1].lease_id));
  EXPECT_EQ(t.committed(), offset{8});
  EXPECT_EQ(t.stats().parked, 0u);
  EXPECT_EQ(t.waiting(), 0u);
  EXPECT_FALSE(t.verify()) << describe(t.verify());
  // A record pending dead-letter is not forgotten.
  ASSERT_FALSE(t.offer(offset{8}, "z", 0));
  auto d = take(t, "m", 1, 0);
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(t.nack("m", offset{8}, d[0].lease_id, 0, 0ms, "boom"));
  EXPECT_TRUE(t.forget(offset{0}, offset{9}).empty());
  EXPECT_EQ(t.pending_dead_letters().size(), 1u);
}
