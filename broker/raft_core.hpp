#pragma once
// raft_core: the Raft algorithm as a deterministic state machine. No CAF
// runtime, no clock, no threads: the owner feeds it ticks (tick()), peer
// messages (step()) and proposals (propose()), and after each call collects
// the messages to send (take_messages()) and the committed entries to apply
// (take_committed()). Given the same seed, the same inputs give the same
// outputs, which is what the deterministic tests rely on.
//
// What it implements:
// - Raft §5: leader election, log replication with the log matching check,
//   commit by majority counting of entries of the current term only (§5.4.2;
//   a new leader appends a no-op so earlier entries commit). Election
//   timeouts are randomized in [election_ticks, 2 * election_ticks) from the
//   seeded RNG.
// - Pre-vote (Ongaro's thesis §9.6): a node whose timer fires first asks
//   "would you vote for me in term+1?" without touching any term; only with
//   a majority of yes does it start a real election. A node that heard from
//   a leader within the last election_ticks refuses (pre-)votes for a newer
//   term (leader stickiness), so a partitioned node that rejoins cannot
//   depose a healthy leader and its term does not run away.
// - Check quorum: a leader that has not heard from a majority within
//   election_ticks steps down, so a cut-off leader stops claiming the role.
// - Snapshots (§7): compact() replaces the log prefix the state machine has
//   applied by its snapshot; a follower whose next entry was compacted away
//   gets the snapshot in one InstallSnapshot message.
// - Persistence through raft_log_store, synchronously and before any
//   message that depends on it is queued: term and vote before a vote is
//   granted or a newer term answered, entries before they are acknowledged.
//   A store write that fails (a full disk) changes nothing: the store's
//   write is one transaction, and the core changes its memory only after
//   it. The input that needed it is dropped as if lost on the network (no
//   vote granted, no append acknowledged, a proposal refused with the
//   store's error; a leader that cannot write steps down), which
//   Raft tolerates; store_errors() counts them. Only a broken invariant (a
//   leader conflicting with a committed entry) stops the core: failure()
//   is set, every later input is ignored, and the owner must stop the node.
//
// Retransmission: a leader sends new entries as they are proposed
// (optimistically advancing the peer's next index) and a heartbeat every
// heartbeat_ticks, whose prev index is the peer's next - 1. A follower that
// lost messages rejects it, which rewinds next (rejections carry the
// follower's last index so the leader skips back quickly), so dropped,
// duplicated or reordered messages only cost time.
//
// A single voter is a quorum of one: it elects itself during make() and
// commits each proposal as it is appended.

#include "broker/error.hpp"
#include "broker/raft_storage.hpp"
#include "broker/raft_types.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

/// Settings of one Raft member.
struct raft_config {
  /// This node's id; must be one of `voters`.
  int32_t id = 0;
  /// Every voter of the quorum, this node included (1, 3 or 5 usually).
  std::vector<int32_t> voters;
  /// Election timeout: a random number of ticks in [election_ticks,
  /// 2 * election_ticks). Also the leader's check-quorum period.
  uint32_t election_ticks = 10;
  /// A leader sends heartbeats (and retransmissions) every this many ticks.
  /// @pre heartbeat_ticks < election_ticks
  uint32_t heartbeat_ticks = 1;
  /// Seeds the election-timeout RNG.
  uint64_t seed = 0;
  /// At most this many entries per AppendEntries message.
  size_t max_append_entries = 64;
};

/// One voter as given on the command line.
struct raft_voter {
  int32_t id = 0;
  std::string host;
  uint16_t port = 0;
  bool operator==(const raft_voter&) const = default;
};

/// Parses `--voters id@host:port,...` (e.g. "1@10.0.0.1:9092,2@[::1]:9093";
/// the port follows the last ':'). ec::invalid_config, naming the bad item,
/// for an empty list, a malformed item, an id outside 0..2^31-1, a port
/// outside 1..65535, or a duplicate id or address.
caf::expected<std::vector<raft_voter>> parse_voters(std::string_view text);

/// What take_committed() hands over, in this order: first a snapshot the
/// state machine must restore (a follower that installed one, or a node
/// that restarted with one), then committed entries in index order.
struct raft_commit_batch {
  std::optional<raft_snapshot> restore;
  /// (index, entry); no-ops included (the owner skips them).
  std::vector<std::pair<uint64_t, raft_entry>> entries;
};

class raft_core {
public:
  /// Loads the persisted state from `store` (borrowed; must outlive the
  /// core) and starts as a follower; a single voter becomes leader at once.
  /// ec::invalid_argument for a config whose id is not among the voters or
  /// whose ticks are zero or inconsistent.
  static caf::expected<std::unique_ptr<raft_core>> make(raft_config cfg,
                                                        raft_log_store& store);

  /// One unit of logical time passed.
  void tick();

  /// A message from a peer (any order, duplicates allowed).
  void step(const raft_message& m);

  /// Appends a command (leader only) and returns its index. The entry is
  /// committed later, or overwritten if leadership is lost first: the owner
  /// learns which when that index is handed out by take_committed() with
  /// this term or another one. ec::not_leader (context names the known
  /// leader, "leader=-1" if none) on a non-leader.
  caf::expected<uint64_t> propose(std::string data);

  /// Replaces the applied log prefix up to `index` by `data` (the state
  /// machine's snapshot after applying `index`).
  /// @pre snapshot_index() < index <= the last index handed out
  caf::error compact(uint64_t index, std::string data);

  /// Messages queued since the last call.
  std::vector<raft_message> take_messages();

  /// What an observer that has applied up to `after` needs next: the
  /// snapshot when `after` lies before it, then at most `max` committed
  /// entries from after + 1 (or from the snapshot). Read-only.
  raft_log_chunk committed_after(uint64_t after, size_t max) const;

  /// What became committed since the last call.
  raft_commit_batch take_committed();

  // -- observers -------------------------------------------------------------

  raft_status status() const;
  raft_role role() const { return role_; }
  uint64_t term() const { return hard_.term; }
  int32_t leader() const { return leader_; }
  int32_t id() const { return cfg_.id; }
  uint64_t commit_index() const { return commit_; }
  uint64_t last_index() const { return snap_.index + log_.size(); }
  uint64_t snapshot_index() const { return snap_.index; }
  /// The term of entry `index`, if it is in the log or is the snapshot's
  /// last entry.
  std::optional<uint64_t> term_at(uint64_t index) const;
  /// Why the core stopped (a broken invariant); it ignores all input after it.
  const caf::error& failure() const { return failed_; }
  /// Store writes that failed (each dropped the input that needed it).
  uint64_t store_errors() const { return store_errors_; }
  const caf::error& last_store_error() const { return last_store_error_; }

private:
  struct progress {
    uint64_t next = 1;
    uint64_t match = 0;
    /// Heard from since the last check-quorum round.
    bool active = false;
  };

  raft_core(raft_config cfg, raft_log_store& store);
  caf::error load();

  // Role changes.
  void become_follower(uint64_t term, int32_t leader);
  void campaign(bool pre);
  void become_leader();
  void reset_election_timer();

  // Message handlers.
  void on_vote_request(const raft_message& m);
  void on_vote_reply(const raft_message& m);
  void on_append(const raft_message& m);
  void on_snapshot(const raft_message& m);
  void on_append_reply(const raft_message& m);

  // Leader helpers.
  void send_append(int32_t peer);
  void broadcast_append();
  void maybe_commit();

  // Persistence; each returns false after a failed write (write_failed).
  void write_failed(caf::error err);
  bool persist_hard(raft_hard_state hs);
  bool persist_append(uint64_t first, std::vector<raft_entry> entries);

  void send(raft_message m);
  bool up_to_date(uint64_t index, uint64_t term) const;
  size_t quorum() const { return cfg_.voters.size() / 2 + 1; }
  bool in_lease() const;

  raft_config cfg_;
  raft_log_store& store_;
  std::mt19937_64 rng_;

  raft_hard_state hard_;
  raft_role role_ = raft_role::follower;
  int32_t leader_ = -1;
  raft_snapshot snap_;
  /// Entries snap_.index + 1 ... last_index().
  std::vector<raft_entry> log_;
  uint64_t commit_ = 0;
  /// Last index handed out by take_committed().
  uint64_t handed_ = 0;
  bool restore_pending_ = false;

  uint32_t election_elapsed_ = 0;
  uint32_t heartbeat_elapsed_ = 0;
  uint32_t timeout_ = 0;
  /// (Pre-)votes of the current campaign: voter -> granted.
  std::map<int32_t, bool> votes_;
  std::map<int32_t, progress> peers_;

  std::vector<raft_message> out_;
  caf::error failed_;
  /// A store write of the current input failed.
  bool write_failed_ = false;
  uint64_t store_errors_ = 0;
  caf::error last_store_error_;
};

} // namespace ferry
