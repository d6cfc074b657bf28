// The pure Raft core (broker/raft_core.hpp) over in-memory stores, with a
// hand-driven message queue: single voter, election, replication and commit,
// no commit without a majority, pre-vote without term growth, log
// truncation of an uncommitted suffix, snapshot install, config checks.

#include "broker/raft_core.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <set>

using namespace ferry;

namespace {

/// N cores wired by a queue; `cut` nodes neither send nor receive.
struct cluster {
  /// `prepare` may fill the stores before the cores load them.
  explicit cluster(
    size_t n, uint64_t seed = 1,
    const std::function<void(std::vector<raft_memory_store>&)>& prepare = {},
    size_t max_append_entries = 64) {
    std::vector<int32_t> voters;
    for (size_t i = 1; i <= n; ++i)
      voters.push_back(static_cast<int32_t>(i));
    stores.resize(n);
    if (prepare)
      prepare(stores);
    for (size_t i = 0; i < n; ++i) {
      raft_config c;
      c.id = voters[i];
      c.voters = voters;
      c.seed = seed * 100 + i;
      c.election_ticks = 10;
      c.heartbeat_ticks = 2;
      c.max_append_entries = max_append_entries;
      auto core = raft_core::make(c, stores[i]);
      EXPECT_TRUE(core);
      cores.push_back(std::move(*core));
    }
  }

  raft_core& node(int32_t id) { return *cores[static_cast<size_t>(id - 1)]; }

  void pump() {
    for (int round = 0; round < 100; ++round) {
      std::vector<raft_message> msgs;
      for (auto& c : cores) {
        for (auto& m : c->take_messages())
          msgs.push_back(std::move(m));
        auto b = c->take_committed();
        if (b.restore)
          restored.insert(c->id());
        for (auto& [i, e] : b.entries)
          applied[c->id()].emplace_back(i, e.data);
      }
      if (msgs.empty())
        return;
      for (auto& m : msgs)
        if (!cut.count(m.from) && !cut.count(m.to) && (!allow || allow(m)))
          node(m.to).step(m);
    }
  }

  void ticks(int n) {
    for (int i = 0; i < n; ++i) {
      for (auto& c : cores)
        c->tick();
      pump();
    }
  }

  int32_t leader() {
    int32_t out = -1;
    uint64_t term = 0;
    for (auto& c : cores)
      if (c->role() == raft_role::leader && !cut.count(c->id())
          && c->term() >= term) {
        out = c->id();
        term = c->term();
      }
    return out;
  }

  /// Ticks one node only (the others' clocks stand still).
  void tick_only(int32_t id, int n) {
    for (int i = 0; i < n; ++i) {
      node(id).tick();
      pump();
    }
  }

  std::vector<raft_memory_store> stores;
  /// When set, only messages it accepts are delivered.
  std::function<bool(const raft_message&)> allow;
  std::vector<std::unique_ptr<raft_core>> cores;
  std::set<int32_t> cut;
  std::set<int32_t> restored;
  std::map<int32_t, std::vector<std::pair<uint64_t, std::string>>> applied;
};

} // namespace

TEST(RaftCore, SingleVoterIsLeaderAtOnceAndCommitsEachProposal) {
  raft_memory_store store;
  raft_config c;
  c.id = 4;
  c.voters = {4};
  auto core = raft_core::make(c, store);
  ASSERT_TRUE(core);
  EXPECT_EQ((*core)->role(), raft_role::leader);
  EXPECT_EQ((*core)->term(), 1u);
  auto idx = (*core)->propose("x");
  ASSERT_TRUE(idx);
  EXPECT_EQ(*idx, 2u); // after the leader's no-op
  EXPECT_EQ((*core)->commit_index(), 2u);
  auto b = (*core)->take_committed();
  ASSERT_EQ(b.entries.size(), 2u);
  EXPECT_EQ(b.entries[0].second.kind, raft_entry_kind::noop);
  EXPECT_EQ(b.entries[1].second.data, "x");
}

TEST(RaftCore, BadConfigsAreRefused) {
  raft_memory_store store;
  raft_config c;
  c.id = 9;
  c.voters = {1, 2, 3};
  EXPECT_TRUE(is(raft_core::make(c, store).error(), ec::invalid_argument));
  c.voters = {9, 9};
  EXPECT_TRUE(is(raft_core::make(c, store).error(), ec::invalid_argument));
  c.voters = {9};
  c.heartbeat_ticks = c.election_ticks;
  EXPECT_TRUE(is(raft_core::make(c, store).error(), ec::invalid_argument));
}

TEST(RaftCore, ElectsOneLeaderAndReplicates) {
  cluster cl{3};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  for (auto& c : cl.cores) {
    EXPECT_EQ(c->leader(), l);
    EXPECT_EQ(c->term(), cl.node(l).term());
  }
  auto idx = cl.node(l).propose("a");
  ASSERT_TRUE(idx);
  cl.pump();
  cl.ticks(3);
  for (auto& c : cl.cores)
    EXPECT_GE(c->commit_index(), *idx) << "node " << c->id();
  auto follower = l == 1 ? 2 : 1;
  auto refused = cl.node(follower).propose("b");
  ASSERT_FALSE(refused);
  EXPECT_TRUE(is(refused.error(), ec::not_leader));
}

TEST(RaftCore, MinorityLeaderDoesNotCommitAndItsSuffixIsTruncated) {
  cluster cl{3, 7};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  auto base = cl.node(l).commit_index();
  cl.cut.insert(l);
  auto idx = cl.node(l).propose("lost");
  ASSERT_TRUE(idx);
  cl.pump();
  EXPECT_EQ(cl.node(l).commit_index(), base);
  cl.ticks(60); // the rest elect a new leader; the old one steps down
  auto l2 = cl.leader();
  ASSERT_NE(l2, -1);
  ASSERT_NE(l2, l);
  EXPECT_NE(cl.node(l).role(), raft_role::leader);
  ASSERT_TRUE(cl.node(l2).propose("kept"));
  cl.cut.clear();
  cl.ticks(20);
  // Everyone holds "kept" at the index "lost" had; "lost" is gone.
  for (auto& c : cl.cores) {
    bool saw_kept = false;
    for (auto& [i, d] : cl.applied[c->id()]) {
      EXPECT_NE(d, "lost");
      saw_kept |= d == "kept";
    }
    EXPECT_TRUE(saw_kept) << "node " << c->id();
  }
}

TEST(RaftCore, PreVoteKeepsAPartitionedNodeFromRaisingItsTerm) {
  cluster cl{3, 3};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  auto term = cl.node(l).term();
  auto loner = l == 3 ? 1 : 3;
  cl.cut.insert(loner);
  cl.ticks(100);
  EXPECT_EQ(cl.node(loner).term(), term);
  cl.cut.clear();
  cl.ticks(30);
  EXPECT_EQ(cl.leader(), l);
  EXPECT_EQ(cl.node(l).term(), term);
  EXPECT_EQ(cl.node(loner).leader(), l);
}

TEST(RaftCore, LaggingFollowerGetsTheSnapshot) {
  cluster cl{3, 5};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  auto lag = l == 2 ? 3 : 2;
  cl.cut.insert(lag);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(cl.node(l).propose("c" + std::to_string(i)));
  cl.ticks(2);
  auto applied = cl.node(l).commit_index();
  ASSERT_FALSE(cl.node(l).compact(applied, "snap"));
  EXPECT_EQ(cl.node(l).snapshot_index(), applied);
  cl.cut.clear();
  cl.ticks(10);
  EXPECT_TRUE(cl.restored.count(lag));
  EXPECT_EQ(cl.node(lag).snapshot_index(), applied);
  EXPECT_GE(cl.node(lag).commit_index(), applied);
  // The store holds the installed snapshot, not the old log.
  auto st = cl.stores[static_cast<size_t>(lag - 1)].load();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->snapshot.data, "snap");
}

TEST(RaftCore, CommittedAfterHandsObserversOnlyCommittedEntriesAndTheSnapshot) {
  cluster cl{3, 6};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(cl.node(l).propose("e" + std::to_string(i)));
  cl.ticks(2);
  auto commit = cl.node(l).commit_index();
  auto c = cl.node(l).committed_after(0, 100);
  EXPECT_EQ(c.from, l);
  EXPECT_EQ(c.leader, l);
  EXPECT_EQ(c.term, cl.node(l).term());
  EXPECT_EQ(c.commit, commit);
  EXPECT_EQ(c.snapshot.index, 0u);
  EXPECT_EQ(c.first, 1u);
  ASSERT_EQ(c.entries.size(), commit); // the no-op and e0..e4
  EXPECT_EQ(c.entries.back().data, "e4");
  // At most `max` entries, from after + 1.
  auto part = cl.node(l).committed_after(2, 2);
  EXPECT_EQ(part.first, 3u);
  ASSERT_EQ(part.entries.size(), 2u);
  EXPECT_TRUE(cl.node(l).committed_after(commit, 10).entries.empty());
  // An entry the leader has not committed yet (no majority) is not handed out.
  cl.cut = {l == 1 ? 2 : 1, l == 3 ? 2 : 3};
  ASSERT_TRUE(cl.node(l).propose("pending"));
  cl.pump();
  EXPECT_EQ(cl.node(l).committed_after(0, 100).entries.size(), commit);
  cl.cut.clear();
  cl.ticks(3);
  // After compaction: the snapshot first, then what follows it.
  auto applied = cl.node(l).commit_index();
  ASSERT_GT(applied, commit);
  ASSERT_FALSE(cl.node(l).compact(commit, "snap"));
  auto s = cl.node(l).committed_after(1, 100);
  EXPECT_EQ(s.snapshot.index, commit);
  EXPECT_EQ(s.snapshot.data, "snap");
  EXPECT_EQ(s.first, commit + 1);
  ASSERT_EQ(s.entries.size(), applied - commit);
  EXPECT_EQ(s.entries.back().data, "pending");
  // A follower answers too (committed entries are final everywhere).
  auto f = l == 1 ? 2 : 1;
  auto fc = cl.node(f).committed_after(0, 100);
  EXPECT_EQ(fc.leader, l);
  EXPECT_EQ(fc.first + fc.entries.size() - 1, cl.node(f).commit_index());
}

// Raft paper, Figure 8: a leader must not commit an entry of an earlier term
// by counting replicas, because a later leader may still overwrite it.
// S1 leads term 4 holding (2, term 2), which S2 and S3 also hold: a majority.
// S1 must not commit it; S5 (holding (2, term 3)) can still win term 5 and
// replace it everywhere.
TEST(RaftCore, EntriesOfEarlierTermsAreNotCommittedByCounting) {
  auto e = [](uint64_t term) {
    return raft_entry{term, raft_entry_kind::command, "t" + std::to_string(term)};
  };
  cluster cl{5, 11, [&](std::vector<raft_memory_store>& st) {
               // Logs as in Figure 8 (b); everyone has seen term 3.
               ASSERT_FALSE(st[0].append(1, {e(1), e(2)}));
               ASSERT_FALSE(st[1].append(1, {e(1), e(2)}));
               ASSERT_FALSE(st[2].append(1, {e(1)}));
               ASSERT_FALSE(st[3].append(1, {e(1)}));
               ASSERT_FALSE(st[4].append(1, {e(1), e(3)}));
               for (auto& s : st)
                 ASSERT_FALSE(s.save_hard_state({3, 5}));
             },
             1};
  // S1 wins term 4 with S3 and S4 (only election traffic flows).
  cl.cut = {2, 5};
  cl.allow = [](const raft_message& m) {
    return m.kind != raft_msg::append && m.kind != raft_msg::append_reply;
  };
  for (int i = 0; i < 20 && cl.node(1).role() != raft_role::leader; ++i)
    cl.tick_only(1, 1);
  ASSERT_EQ(cl.node(1).role(), raft_role::leader);
  ASSERT_EQ(cl.node(1).term(), 4u);
  // S1 replicates (2, term 2) to S3 but not its no-op (3, term 4).
  cl.cut = {2, 4, 5};
  cl.allow = [](const raft_message& m) {
    return !(m.kind == raft_msg::append && m.to == 3 && !m.entries.empty()
             && m.index + m.entries.size() >= 3);
  };
  cl.tick_only(1, 2);
  ASSERT_EQ(cl.node(3).term_at(2), 2u);
  // S2 acknowledges index 2 in term 4: S1, S2, S3 hold (2, term 2).
  raft_message ack;
  ack.kind = raft_msg::append_reply;
  ack.from = 2;
  ack.to = 1;
  ack.term = 4;
  ack.success = true;
  ack.index = 2;
  cl.node(1).step(ack);
  EXPECT_LT(cl.node(1).commit_index(), 2u);
  // S1 goes away; S5 wins term 5 (its last term 3 beats term 2) with S2
  // and S4, and replaces (2, term 2) on everyone left. (Its first pre-vote
  // for term 4 is refused with term 4, which it adopts; the next succeeds.)
  cl.cut = {1};
  cl.allow = nullptr;
  for (int i = 0; i < 60 && cl.node(5).role() != raft_role::leader; ++i)
    cl.tick_only(5, 1);
  ASSERT_EQ(cl.node(5).role(), raft_role::leader);
  cl.ticks(5);
  for (int32_t id = 2; id <= 5; ++id) {
    EXPECT_EQ(cl.node(id).term_at(2), 3u) << "node " << id;
    EXPECT_GE(cl.node(id).commit_index(), 2u) << "node " << id;
  }
}

// Crash safety: by the time a vote grant or an append acknowledgement is
// handed out for sending, the store already holds the vote or the entries.
TEST(RaftCore, VotesAndEntriesAreDurableBeforeTheyAreAnswered) {
  raft_memory_store store;
  raft_config c;
  c.id = 2;
  c.voters = {1, 2, 3};
  auto core = raft_core::make(c, store);
  ASSERT_TRUE(core);
  raft_message vote;
  vote.kind = raft_msg::vote;
  vote.from = 1;
  vote.to = 2;
  vote.term = 1;
  (*core)->step(vote);
  auto out = (*core)->take_messages();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, raft_msg::vote_reply);
  EXPECT_TRUE(out[0].success);
  auto st = store.load();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->hard, (raft_hard_state{1, 1}));
  // A second candidate of the same term is refused (one vote per term).
  vote.from = 3;
  (*core)->step(vote);
  out = (*core)->take_messages();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].success);
  raft_message app;
  app.kind = raft_msg::append;
  app.from = 1;
  app.to = 2;
  app.term = 1;
  app.entries = {raft_entry{1, raft_entry_kind::noop, {}},
                 raft_entry{1, raft_entry_kind::command, "x"}};
  (*core)->step(app);
  out = (*core)->take_messages();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].success);
  EXPECT_EQ(out[0].index, 2u);
  st = store.load();
  ASSERT_TRUE(st);
  ASSERT_EQ(st->entries.size(), 2u);
  EXPECT_EQ(st->entries[1].data, "x");
}

// -- a store that cannot be written (a full disk) -----------------------------------
//
// A failed store write changes nothing (LMDB aborts the transaction), so
// the core drops the input that needed it, as if it was lost on the
// network, and goes on; it never stops for it.

caf::error disk_full_error() {
  return make_error(ec::disk_full, "test: no space left on device");
}

TEST(RaftCore, AFollowerThatCannotWriteAcknowledgesNothingAndCatchesUpOnceItCan) {
  cluster cl{3};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  auto a = cl.node(l).propose("a");
  ASSERT_TRUE(a);
  cl.ticks(3);
  auto f = l == 1 ? 2 : 1;
  ASSERT_EQ(cl.node(f).last_index(), *a);
  cl.stores[static_cast<size_t>(f - 1)].fail_writes = disk_full_error();
  auto b = cl.node(l).propose("b");
  auto c = cl.node(l).propose("c");
  ASSERT_TRUE(b && c);
  cl.ticks(10);
  // The leader commits with the other follower; f holds and acknowledged
  // nothing new, and is still a working follower.
  EXPECT_GE(cl.node(l).commit_index(), *c);
  EXPECT_EQ(cl.node(f).last_index(), *a);
  EXPECT_LT(cl.node(f).commit_index(), *b) << "nothing f does not hold is committed there";
  EXPECT_FALSE(cl.node(f).failure());
  EXPECT_GT(cl.node(f).store_errors(), 0u);
  EXPECT_TRUE(is(cl.node(f).last_store_error(), ec::disk_full));
  EXPECT_EQ(cl.node(f).role(), raft_role::follower);
  EXPECT_EQ(cl.leader(), l) << "a follower that cannot write does not disturb the leader";
  auto on_disk = cl.stores[static_cast<size_t>(f - 1)].load();
  ASSERT_TRUE(on_disk);
  EXPECT_EQ(on_disk->entries.size(), *a);
  // Writable again: f catches up from the leader's next heartbeats.
  cl.stores[static_cast<size_t>(f - 1)].fail_writes = caf::error{};
  cl.ticks(10);
  EXPECT_GE(cl.node(f).last_index(), *c);
  EXPECT_GE(cl.node(f).commit_index(), *c);
  EXPECT_EQ(cl.node(f).term_at(*c), cl.node(l).term_at(*c));
}

TEST(RaftCore, ALeaderThatCannotWriteRefusesTheProposalAndStepsDownForOneThatCan) {
  cluster cl{3, 5};
  cl.ticks(40);
  auto l = cl.leader();
  ASSERT_NE(l, -1);
  auto last = cl.node(l).last_index();
  cl.stores[static_cast<size_t>(l - 1)].fail_writes = disk_full_error();
  auto x = cl.node(l).propose("x");
  ASSERT_FALSE(x);
  EXPECT_TRUE(is(x.error(), ec::disk_full)) << describe(x.error());
  EXPECT_EQ(cl.node(l).last_index(), last) << "the refused proposal is not in the log";
  EXPECT_NE(cl.node(l).role(), raft_role::leader);
  EXPECT_FALSE(cl.node(l).failure());
  // The two that can write elect one of them (l can neither campaign nor
  // vote: both need a write) and commit without l.
  int32_t l2 = -1;
  for (int i = 0; i < 100 && l2 == -1; ++i) {
    cl.ticks(1);
    auto now = cl.leader();
    if (now != -1 && now != l)
      l2 = now;
  }
  ASSERT_NE(l2, -1) << "a node that can write was elected";
  auto y = cl.node(l2).propose("y");
  ASSERT_TRUE(y);
  cl.ticks(5);
  EXPECT_GE(cl.node(l2).commit_index(), *y);
  // l writes again: it follows l2 and holds y, never x.
  cl.stores[static_cast<size_t>(l - 1)].fail_writes = caf::error{};
  cl.ticks(20);
  EXPECT_EQ(cl.node(l).leader(), l2);
  EXPECT_GE(cl.node(l).commit_index(), *y);
  auto b = cl.node(l).take_committed();
  for (auto& [i, e] : b.entries)
    EXPECT_NE(e.data, "x") << "at " << i;
}

TEST(RaftCore, NoLeaderWhileEveryStoreIsFullAndOneLeaderPerTermOnceTheyWrite) {
  cluster cl{3, 3, [](std::vector<raft_memory_store>& st) {
               for (auto& s : st)
                 s.fail_writes = disk_full_error();
             }};
  std::map<uint64_t, std::set<int32_t>> leaders; // term -> who led it
  auto observe = [&] {
    for (auto& c : cl.cores)
      if (c->role() == raft_role::leader)
        leaders[c->term()].insert(c->id());
  };
  for (int i = 0; i < 100; ++i) {
    cl.ticks(1);
    observe();
  }
  EXPECT_TRUE(leaders.empty()) << "nobody can record a vote, so nobody is elected";
  for (auto& c : cl.cores) {
    EXPECT_EQ(c->term(), 0u) << "node " << c->id() << ": no term it did not write";
    EXPECT_FALSE(c->failure());
    EXPECT_GT(c->store_errors(), 0u);
  }
  for (auto& s : cl.stores)
    s.fail_writes = caf::error{};
  for (int i = 0; i < 100 && cl.leader() == -1; ++i) {
    cl.ticks(1);
    observe();
  }
  ASSERT_NE(cl.leader(), -1);
  auto idx = cl.node(cl.leader()).propose("after");
  ASSERT_TRUE(idx);
  cl.ticks(5);
  for (auto& c : cl.cores)
    EXPECT_GE(c->commit_index(), *idx) << "node " << c->id();
  for (auto& [term, who] : leaders)
    EXPECT_EQ(who.size(), 1u) << "term " << term;
}

TEST(RaftCore, ASingleVoterWithAFullStoreLeadsOnceItCanWrite) {
  raft_memory_store store;
  store.fail_writes = disk_full_error();
  raft_config c;
  c.id = 1;
  c.voters = {1};
  auto core = raft_core::make(c, store);
  ASSERT_TRUE(core) << "a full store is no reason not to start";
  EXPECT_NE((*core)->role(), raft_role::leader);
  EXPECT_FALSE((*core)->propose("x"));
  store.fail_writes = caf::error{};
  for (int i = 0; i < 40 && (*core)->role() != raft_role::leader; ++i)
    (*core)->tick();
  ASSERT_EQ((*core)->role(), raft_role::leader);
  auto idx = (*core)->propose("y");
  ASSERT_TRUE(idx);
  EXPECT_EQ((*core)->commit_index(), *idx);
}

TEST(RaftCore, ParsesTheVoterList) {
  auto v = parse_voters("1@10.0.0.1:9092,2@node-b:9093,3@[::1]:9094");
  ASSERT_TRUE(v) << describe(v.error());
  ASSERT_EQ(v->size(), 3u);
  EXPECT_EQ((*v)[0], (raft_voter{1, "10.0.0.1", 9092}));
  EXPECT_EQ((*v)[1], (raft_voter{2, "node-b", 9093}));
  EXPECT_EQ((*v)[2], (raft_voter{3, "[::1]", 9094}));
  auto one = parse_voters("7@localhost:1");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->size(), 1u);
  for (auto bad : {"", "1@h", "x@h:1", "1@:9", "1@h:0", "1@h:65536", "-1@h:9",
                   "1@h:9,1@g:9", "1@h:9,2@h:9", "1@h:9,", "2147483648@h:9"}) {
    auto r = parse_voters(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_TRUE(is(r.error(), ec::invalid_config)) << bad;
  }
}
