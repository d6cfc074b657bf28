#include "broker/raft_core.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

namespace ferry {

namespace {

// Parses a whole decimal number in [0, max]; nullopt otherwise.
std::optional<uint64_t> parse_number(std::string_view s, uint64_t max) {
  if (s.empty() || s.size() > 10)
    return std::nullopt;
  uint64_t x = 0;
  for (auto c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    x = x * 10 + static_cast<uint64_t>(c - '0');
  }
  if (x > max)
    return std::nullopt;
  return x;
}

} // namespace

caf::expected<std::vector<raft_voter>> parse_voters(std::string_view text) {
  std::vector<raft_voter> out;
  auto bad = [](std::string_view item, const char* why) {
    return make_error(ec::invalid_config,
                      "--voters: '" + std::string{item} + "': " + why
                        + " (expected id@host:port,...)");
  };
  while (true) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    auto at = item.find('@');
    auto colon = item.rfind(':');
    if (at == std::string_view::npos || colon == std::string_view::npos
        || colon < at)
      return bad(item, "malformed");
    auto id = parse_number(item.substr(0, at), INT32_MAX);
    if (!id)
      return bad(item, "id must be a number in 0..2147483647");
    auto host = item.substr(at + 1, colon - at - 1);
    if (host.empty())
      return bad(item, "empty host");
    auto port = parse_number(item.substr(colon + 1), 65535);
    if (!port || *port == 0)
      return bad(item, "port must be in 1..65535");
    raft_voter v{static_cast<int32_t>(*id), std::string{host},
                 static_cast<uint16_t>(*port)};
    for (auto& w : out) {
      if (w.id == v.id)
        return bad(item, "duplicate id");
      if (w.host == v.host && w.port == v.port)
        return bad(item, "duplicate address");
    }
    out.push_back(std::move(v));
    if (comma == std::string_view::npos)
      return out;
    text.remove_prefix(comma + 1);
  }
}

caf::expected<std::unique_ptr<raft_core>> raft_core::make(raft_config cfg,
                                                          raft_log_store& store) {
  if (std::find(cfg.voters.begin(), cfg.voters.end(), cfg.id)
      == cfg.voters.end())
    return make_error(ec::invalid_argument,
                      "raft: node " + std::to_string(cfg.id)
                        + " is not among the voters");
  auto sorted = cfg.voters;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return make_error(ec::invalid_argument, "raft: duplicate voter id");
  if (cfg.election_ticks < 2 || cfg.heartbeat_ticks == 0
      || cfg.heartbeat_ticks >= cfg.election_ticks)
    return make_error(ec::invalid_argument,
                      "raft: need 0 < heartbeat_ticks < election_ticks, "
                      "election_ticks >= 2");
  if (cfg.max_append_entries == 0)
    return make_error(ec::invalid_argument, "raft: max_append_entries is 0");
  std::unique_ptr<raft_core> core{new raft_core(std::move(cfg), store)};
  if (auto err = core->load())
    return err;
  if (core->cfg_.voters.size() == 1)
    core->campaign(true);
  // A store that cannot be written now (a full disk) does not stop a
  // single voter: it campaigns again on a later tick.
  return core;
}

raft_core::raft_core(raft_config cfg, raft_log_store& store)
  : cfg_(std::move(cfg)), store_(store), rng_(cfg_.seed) {
}

caf::error raft_core::load() {
  auto st = store_.load();
  if (!st)
    return std::move(st.error());
  hard_ = st->hard;
  snap_ = std::move(st->snapshot);
  log_ = std::move(st->entries);
  // Only the snapshot is known to be committed; the rest is learned again.
  commit_ = snap_.index;
  handed_ = snap_.index;
  restore_pending_ = snap_.index > 0;
  reset_election_timer();
  return caf::none;
}

std::optional<uint64_t> raft_core::term_at(uint64_t index) const {
  if (index == snap_.index)
    return snap_.term;
  if (index < snap_.index || index > last_index())
    return std::nullopt;
  return log_[index - snap_.index - 1].term;
}

raft_status raft_core::status() const {
  raft_status s;
  s.id = cfg_.id;
  s.role = role_;
  s.term = hard_.term;
  s.leader = leader_;
  s.commit_index = commit_;
  s.last_applied = handed_;
  s.last_log_index = last_index();
  s.last_log_term = *term_at(last_index());
  s.snapshot_index = snap_.index;
  return s;
}

raft_log_chunk raft_core::committed_after(uint64_t after, size_t max) const {
  raft_log_chunk out;
  out.from = cfg_.id;
  out.term = hard_.term;
  out.leader = leader_;
  out.commit = commit_;
  if (after < snap_.index) {
    out.snapshot = snap_;
    after = snap_.index;
  }
  out.first = after + 1;
  for (auto i = after + 1; i <= commit_ && out.entries.size() < max; ++i)
    out.entries.push_back(log_[i - snap_.index - 1]);
  return out;
}

std::vector<raft_message> raft_core::take_messages() {
  return std::exchange(out_, {});
}

raft_commit_batch raft_core::take_committed() {
  raft_commit_batch out;
  if (restore_pending_) {
    out.restore = snap_;
    handed_ = snap_.index;
    restore_pending_ = false;
  }
  for (auto i = handed_ + 1; i <= commit_; ++i)
    out.entries.emplace_back(i, log_[i - snap_.index - 1]);
  handed_ = std::max(handed_, commit_);
  return out;
}

// -- persistence ------------------------------------------------------------------

void raft_core::write_failed(caf::error err) {
  write_failed_ = true;
  ++store_errors_;
  last_store_error_ = std::move(err);
}

bool raft_core::persist_hard(raft_hard_state hs) {
  if (hs == hard_)
    return true;
  if (auto err = store_.save_hard_state(hs)) {
    write_failed(std::move(err));
    return false;
  }
  hard_ = hs;
  return true;
}

bool raft_core::persist_append(uint64_t first, std::vector<raft_entry> entries) {
  if (auto err = store_.append(first, entries)) {
    write_failed(std::move(err));
    return false;
  }
  log_.resize(first - snap_.index - 1);
  for (auto& e : entries)
    log_.push_back(std::move(e));
  return true;
}

caf::error raft_core::compact(uint64_t index, std::string data) {
  if (failed_)
    return failed_;
  write_failed_ = false;
  if (index <= snap_.index || index > handed_)
    return make_error(ec::invalid_argument,
                      "raft compact: index " + std::to_string(index)
                        + " outside (" + std::to_string(snap_.index) + ", "
                        + std::to_string(handed_) + "]");
  raft_snapshot s{index, *term_at(index), std::move(data)};
  if (auto err = store_.save_snapshot(s, true)) {
    write_failed(err);
    return err; // the log stays as it was; compacting again later is fine
  }
  log_.erase(log_.begin(),
             log_.begin() + static_cast<std::ptrdiff_t>(index - snap_.index));
  snap_ = std::move(s);
  return caf::none;
}

// -- roles ------------------------------------------------------------------------

void raft_core::reset_election_timer() {
  election_elapsed_ = 0;
  std::uniform_int_distribution<uint32_t> dist{cfg_.election_ticks,
                                               2 * cfg_.election_ticks - 1};
  timeout_ = dist(rng_);
}

bool raft_core::in_lease() const {
  return leader_ != -1 && election_elapsed_ < cfg_.election_ticks;
}

void raft_core::become_follower(uint64_t term, int32_t leader) {
  if (term > hard_.term && !persist_hard({term, -1}))
    return;
  role_ = raft_role::follower;
  leader_ = leader;
  votes_.clear();
  peers_.clear();
  reset_election_timer();
}

void raft_core::campaign(bool pre) {
  votes_.clear();
  votes_[cfg_.id] = true;
  leader_ = -1;
  peers_.clear();
  reset_election_timer();
  uint64_t term = hard_.term + 1;
  if (pre) {
    role_ = raft_role::pre_candidate;
  } else {
    if (!persist_hard({term, cfg_.id}))
      return;
    role_ = raft_role::candidate;
  }
  if (votes_.size() >= quorum()) {
    if (pre)
      campaign(false);
    else
      become_leader();
    return;
  }
  for (auto v : cfg_.voters) {
    if (v == cfg_.id)
      continue;
    raft_message m;
    m.kind = pre ? raft_msg::pre_vote : raft_msg::vote;
    m.to = v;
    m.term = term;
    m.index = last_index();
    m.log_term = *term_at(last_index());
    send(std::move(m));
  }
}

void raft_core::become_leader() {
  role_ = raft_role::leader;
  leader_ = cfg_.id;
  votes_.clear();
  election_elapsed_ = 0;
  heartbeat_elapsed_ = 0;
  peers_.clear();
  for (auto v : cfg_.voters)
    peers_[v] = progress{last_index() + 1, 0, v == cfg_.id};
  // The no-op commits every earlier entry once it commits (§5.4.2).
  if (!persist_append(last_index() + 1,
                      {raft_entry{hard_.term, raft_entry_kind::noop, {}}})) {
    // Not a leader that cannot write: step down, so that a node that can
    // write is elected (this one can vote again once its store writes).
    become_follower(hard_.term, -1);
    return;
  }
  peers_[cfg_.id].match = last_index();
  broadcast_append();
  maybe_commit();
}

// -- inputs -----------------------------------------------------------------------

void raft_core::tick() {
  if (failed_)
    return;
  write_failed_ = false;
  ++election_elapsed_;
  if (role_ == raft_role::leader) {
    if (election_elapsed_ >= cfg_.election_ticks) {
      election_elapsed_ = 0;
      size_t active = 0;
      for (auto& [id, p] : peers_) {
        if (p.active || id == cfg_.id)
          ++active;
        p.active = false;
      }
      if (active < quorum()) {
        become_follower(hard_.term, -1);
        return;
      }
    }
    if (++heartbeat_elapsed_ >= cfg_.heartbeat_ticks) {
      heartbeat_elapsed_ = 0;
      // Carries entries to peers that are behind. A peer that lost some
      // rejects it (its prev index does not match), which rewinds next.
      broadcast_append();
    }
    return;
  }
  if (election_elapsed_ >= timeout_)
    campaign(true);
}

caf::expected<uint64_t> raft_core::propose(std::string data) {
  if (failed_)
    return failed_;
  write_failed_ = false;
  if (role_ != raft_role::leader)
    return make_error(ec::not_leader,
                      "not the Raft leader; leader=" + std::to_string(leader_));
  auto index = last_index() + 1;
  if (!persist_append(index, {raft_entry{hard_.term, raft_entry_kind::command,
                                         std::move(data)}})) {
    // A leader that cannot write holds every proposal up: step down (as
    // in become_leader).
    become_follower(hard_.term, -1);
    return last_store_error_;
  }
  peers_[cfg_.id].match = index;
  for (auto v : cfg_.voters)
    if (v != cfg_.id && peers_[v].next == index)
      send_append(v);
  maybe_commit();
  return index;
}

void raft_core::step(const raft_message& m) {
  if (failed_ || m.to != cfg_.id || m.from == cfg_.id
      || std::find(cfg_.voters.begin(), cfg_.voters.end(), m.from)
           == cfg_.voters.end())
    return;
  write_failed_ = false;
  bool request_vote = m.kind == raft_msg::pre_vote || m.kind == raft_msg::vote;
  if (m.term > hard_.term) {
    if (request_vote && in_lease()) {
      // Leader stickiness: a live leader exists, refuse without a term bump.
      raft_message r;
      r.kind = m.kind == raft_msg::pre_vote ? raft_msg::pre_vote_reply
                                            : raft_msg::vote_reply;
      r.to = m.from;
      r.term = hard_.term;
      send(std::move(r));
      return;
    }
    if (m.kind == raft_msg::pre_vote
        || (m.kind == raft_msg::pre_vote_reply && m.success)) {
      // Pre-vote traffic never changes terms.
    } else {
      bool from_leader = m.kind == raft_msg::append
                         || m.kind == raft_msg::snapshot;
      become_follower(m.term, from_leader ? m.from : -1);
      if (write_failed_)
        return; // the newer term is not on disk: as if m never came
    }
  } else if (m.term < hard_.term) {
    if (m.kind == raft_msg::append || m.kind == raft_msg::snapshot
        || m.kind == raft_msg::pre_vote) {
      // Tell a stale leader or pre-candidate about the newer term.
      raft_message r;
      r.kind = m.kind == raft_msg::pre_vote ? raft_msg::pre_vote_reply
                                            : raft_msg::append_reply;
      r.to = m.from;
      r.term = hard_.term;
      send(std::move(r));
    }
    return;
  }
  switch (m.kind) {
    case raft_msg::pre_vote:
    case raft_msg::vote:
      on_vote_request(m);
      break;
    case raft_msg::pre_vote_reply:
    case raft_msg::vote_reply:
      on_vote_reply(m);
      break;
    case raft_msg::append:
      on_append(m);
      break;
    case raft_msg::snapshot:
      on_snapshot(m);
      break;
    case raft_msg::append_reply:
      on_append_reply(m);
      break;
  }
}

bool raft_core::up_to_date(uint64_t index, uint64_t term) const {
  auto my_term = *term_at(last_index());
  return term > my_term || (term == my_term && index >= last_index());
}

void raft_core::on_vote_request(const raft_message& m) {
  bool pre = m.kind == raft_msg::pre_vote;
  bool can_vote = hard_.voted_for == m.from
                  || (hard_.voted_for == -1 && leader_ == -1)
                  || (pre && m.term > hard_.term);
  bool grant = can_vote && up_to_date(m.index, m.log_term);
  if (grant && !pre) {
    if (!persist_hard({hard_.term, m.from}))
      return;
    reset_election_timer();
  }
  raft_message r;
  r.kind = pre ? raft_msg::pre_vote_reply : raft_msg::vote_reply;
  r.to = m.from;
  r.term = grant && pre ? m.term : hard_.term;
  r.success = grant;
  send(std::move(r));
}

void raft_core::on_vote_reply(const raft_message& m) {
  bool pre = m.kind == raft_msg::pre_vote_reply;
  if (pre ? role_ != raft_role::pre_candidate : role_ != raft_role::candidate)
    return;
  // A granted pre-vote carries the term asked about: ours + 1.
  if (pre && m.success && m.term != hard_.term + 1)
    return;
  votes_.emplace(m.from, m.success);
  size_t yes = 0;
  size_t no = 0;
  for (auto& [id, granted] : votes_)
    ++(granted ? yes : no);
  if (yes >= quorum()) {
    if (pre)
      campaign(false);
    else
      become_leader();
  } else if (no >= quorum()) {
    become_follower(hard_.term, -1);
  }
}

void raft_core::on_append(const raft_message& m) {
  if (role_ != raft_role::follower)
    become_follower(hard_.term, m.from);
  leader_ = m.from;
  election_elapsed_ = 0;
  raft_message r;
  r.kind = raft_msg::append_reply;
  r.to = m.from;
  r.term = hard_.term;
  if (m.index < commit_) {
    // Everything up to our commit index matches the leader's log.
    r.success = true;
    r.index = commit_;
    send(std::move(r));
    return;
  }
  auto prev_term = term_at(m.index);
  if (!prev_term || *prev_term != m.log_term) {
    r.success = false;
    r.index = last_index();
    r.log_term = m.index;
    send(std::move(r));
    return;
  }
  // Append from the first entry that is new or conflicts; a conflicting
  // suffix is truncated (never below the commit index: that would break
  // Raft's safety, so it is treated as a fatal failure).
  for (size_t i = 0; i < m.entries.size(); ++i) {
    auto index = m.index + 1 + i;
    auto t = term_at(index);
    if (t && *t == m.entries[i].term)
      continue;
    if (index <= commit_) {
      failed_ = make_error(ec::corrupt_segment,
                           "raft: leader " + std::to_string(m.from)
                             + " conflicts with committed entry "
                             + std::to_string(index));
      return;
    }
    if (!persist_append(index, {m.entries.begin() + static_cast<std::ptrdiff_t>(i),
                                m.entries.end()}))
      return;
    break;
  }
  auto last_new = m.index + m.entries.size();
  commit_ = std::max(commit_, std::min(m.commit, last_new));
  r.success = true;
  r.index = last_new;
  send(std::move(r));
}

void raft_core::on_snapshot(const raft_message& m) {
  if (role_ != raft_role::follower)
    become_follower(hard_.term, m.from);
  leader_ = m.from;
  election_elapsed_ = 0;
  raft_message r;
  r.kind = raft_msg::append_reply;
  r.to = m.from;
  r.term = hard_.term;
  r.success = true;
  if (m.index <= commit_) {
    r.index = commit_;
    send(std::move(r));
    return;
  }
  auto t = term_at(m.index);
  if (t && *t == m.log_term) {
    // We hold the snapshot's last entry: our log already covers it.
    commit_ = m.index;
  } else {
    raft_snapshot s{m.index, m.log_term, m.snapshot};
    if (auto err = store_.save_snapshot(s, false)) {
      write_failed(std::move(err));
      return;
    }
    snap_ = std::move(s);
    log_.clear();
    commit_ = m.index;
    handed_ = std::min(handed_, m.index);
    restore_pending_ = true;
  }
  r.index = m.index;
  send(std::move(r));
}

void raft_core::on_append_reply(const raft_message& m) {
  if (role_ != raft_role::leader)
    return;
  auto it = peers_.find(m.from);
  if (it == peers_.end())
    return;
  auto& p = it->second;
  p.active = true;
  if (m.success) {
    if (m.index > p.match) {
      p.match = m.index;
      p.next = std::max(p.next, m.index + 1);
      maybe_commit();
      if (p.next <= last_index())
        send_append(m.from);
    }
    return;
  }
  // Rejected at prev index m.log_term; a rejection below what matched is stale.
  if (m.log_term < p.match || m.log_term == 0)
    return;
  p.next = std::max(p.match + 1, std::min(m.log_term, m.index + 1));
  send_append(m.from);
}

// -- leader -------------------------------------------------------------------------

void raft_core::send_append(int32_t peer) {
  auto& p = peers_[peer];
  raft_message m;
  m.to = peer;
  m.term = hard_.term;
  m.commit = commit_;
  auto prev = p.next - 1;
  if (prev < snap_.index) {
    m.kind = raft_msg::snapshot;
    m.index = snap_.index;
    m.log_term = snap_.term;
    m.snapshot = snap_.data;
    p.next = snap_.index + 1;
  } else {
    m.kind = raft_msg::append;
    m.index = prev;
    m.log_term = *term_at(prev);
    auto last = std::min(last_index(), prev + cfg_.max_append_entries);
    for (auto i = prev + 1; i <= last; ++i)
      m.entries.push_back(log_[i - snap_.index - 1]);
    p.next = last + 1;
  }
  send(std::move(m));
}

void raft_core::broadcast_append() {
  for (auto v : cfg_.voters)
    if (v != cfg_.id)
      send_append(v);
}

void raft_core::maybe_commit() {
  std::vector<uint64_t> matches;
  for (auto v : cfg_.voters)
    matches.push_back(v == cfg_.id ? last_index() : peers_[v].match);
  std::sort(matches.begin(), matches.end(), std::greater<>{});
  auto n = matches[quorum() - 1];
  if (n > commit_ && term_at(n) == hard_.term)
    commit_ = n;
}

void raft_core::send(raft_message m) {
  m.from = cfg_.id;
  out_.push_back(std::move(m));
}

} // namespace ferry
