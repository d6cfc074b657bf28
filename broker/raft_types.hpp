#pragma once
// The value types of Ferry's Raft (the metadata quorum): log entries, the
// persistent hard state, snapshots and the one wire message. Plain structs
// with CAF inspectors, so actors/protocol/interfaces.hpp can register them as message
// types; no CAF runtime here (broker/ stays actor-free).
//
// Indexes and terms are uint64_t, starting at 1; index 0 / term 0 mean
// "nothing" (the empty log before the first entry). Node ids are the int32_t
// ids of node_info.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

/// What a log entry carries.
enum class raft_entry_kind : uint8_t {
  /// An opaque command for the state machine.
  command = 0,
  /// The no-op a new leader appends to commit its predecessors' entries
  /// (Raft §5.4.2). Never handed to the state machine.
  noop = 1,
};

/// One log entry. Its index is its position, so it is not stored here.
struct raft_entry {
  uint64_t term = 0;
  raft_entry_kind kind = raft_entry_kind::command;
  std::string data;
  bool operator==(const raft_entry&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_entry& x) {
  return f(caf::meta::type_name("ferry::raft_entry"), x.term, x.kind, x.data);
}

/// Term and vote: written durably before a node votes or answers a newer
/// term (Raft Figure 2, "persistent state").
struct raft_hard_state {
  uint64_t term = 0;
  /// -1 = voted for nobody in `term`.
  int32_t voted_for = -1;
  bool operator==(const raft_hard_state&) const = default;
};

/// A state machine snapshot covering every entry up to `index` (§7).
struct raft_snapshot {
  /// Last included index and its term; 0/0 = no snapshot.
  uint64_t index = 0;
  uint64_t term = 0;
  /// The state machine's snapshot() bytes.
  std::string data;
  bool operator==(const raft_snapshot&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_snapshot& x) {
  return f(caf::meta::type_name("ferry::raft_snapshot"), x.index, x.term,
           x.data);
}

/// The kinds of raft_message (Raft §5, pre-vote from Ongaro's thesis §9.6,
/// InstallSnapshot §7).
enum class raft_msg : uint8_t {
  /// "Would you vote for me in term+1?" Sent with term = the candidate's
  /// current term + 1 but without changing anyone's term.
  pre_vote = 0,
  pre_vote_reply,
  /// RequestVote.
  vote,
  vote_reply,
  /// AppendEntries (also the heartbeat when `entries` is empty).
  append,
  append_reply,
  /// InstallSnapshot, the whole snapshot in one message; answered with an
  /// append_reply.
  snapshot,
};

/// One Raft RPC or reply. Which fields mean what depends on `kind`:
///
/// | kind              | index             | log_term        | commit        |
/// |-------------------|-------------------|-----------------|---------------|
/// | (pre_)vote        | last log index    | last log term   | -             |
/// | append            | prev log index    | prev log term   | leader commit |
/// | append_reply ok   | match index       | -               | -             |
/// | append_reply fail | replier's last index | rejected prev index | -      |
/// | snapshot          | last incl. index  | last incl. term | leader commit |
///
/// `success` is "vote granted" for vote replies and "log matched" for
/// append replies. Replies carry the replier's term (for a pre-vote reply:
/// the term asked about when granted).
struct raft_message {
  raft_msg kind = raft_msg::append;
  int32_t from = -1;
  int32_t to = -1;
  uint64_t term = 0;
  uint64_t index = 0;
  uint64_t log_term = 0;
  uint64_t commit = 0;
  bool success = false;
  std::vector<raft_entry> entries;
  /// InstallSnapshot only: the snapshot bytes.
  std::string snapshot;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_message& x) {
  return f(caf::meta::type_name("ferry::raft_message"), x.kind, x.from, x.to,
           x.term, x.index, x.log_term, x.commit, x.success, x.entries,
           x.snapshot);
}

/// A node's role.
enum class raft_role : uint8_t { follower = 0, pre_candidate, candidate, leader };

/// "follower", "pre_candidate", "candidate", "leader".
inline const char* to_string(raft_role r) {
  switch (r) {
    case raft_role::follower: return "follower";
    case raft_role::pre_candidate: return "pre_candidate";
    case raft_role::candidate: return "candidate";
    case raft_role::leader: return "leader";
  }
  return "?";
}

/// What a node reports about itself (status request, leadership changes).
struct raft_status {
  int32_t id = -1;
  raft_role role = raft_role::follower;
  uint64_t term = 0;
  /// The leader this node knows of in `term`; -1 = none.
  int32_t leader = -1;
  uint64_t commit_index = 0;
  uint64_t last_applied = 0;
  uint64_t last_log_index = 0;
  uint64_t last_log_term = 0;
  /// Last index covered by the newest snapshot (0 = none).
  uint64_t snapshot_index = 0;
  bool operator==(const raft_status&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_status& x) {
  return f(caf::meta::type_name("ferry::raft_status"), x.id, x.role, x.term,
           x.leader, x.commit_index, x.last_applied, x.last_log_index,
           x.last_log_term, x.snapshot_index);
}

/// The answer to a proposal: its log index and what the state machine's
/// apply() returned for it.
struct raft_applied {
  uint64_t index = 0;
  std::string result;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_applied& x) {
  return f(caf::meta::type_name("ferry::raft_applied"), x.index, x.result);
}

/// Committed log entries as a voter hands them to an observer (a node that
/// is not a voter: it pulls the metadata log and applies it, see
/// actors/server/raft_node.hpp, raft_observer). Everything here is committed, so
/// any voter may answer, the leader or a lagging follower alike.
struct raft_log_chunk {
  /// The answering voter's id, term, known leader (-1 none) and commit
  /// index.
  int32_t from = -1;
  uint64_t term = 0;
  int32_t leader = -1;
  uint64_t commit = 0;
  /// Set (index > 0) when the entries the observer asked for were compacted
  /// away: restore it first; `entries` continue after it.
  raft_snapshot snapshot;
  /// Index of entries[0].
  uint64_t first = 0;
  /// Committed entries, no-ops included (they keep the indexes contiguous).
  std::vector<raft_entry> entries;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, raft_log_chunk& x) {
  return f(caf::meta::type_name("ferry::raft_log_chunk"), x.from, x.term,
           x.leader, x.commit, x.snapshot, x.first, x.entries);
}

} // namespace ferry
