#include "broker/lease_table.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>

namespace ferry {

namespace {

using std::chrono::milliseconds;

std::string cut_error(std::string_view error) {
  return std::string{error.substr(0, max_error_bytes)};
}

std::string off_str(offset off) {
  return std::to_string(off.value);
}

uint64_t first_lease_id(uint64_t seed) {
  // Random start: ids of a table before a restart do not collide with the
  // ids of the restored table, so a stale id cannot ack a new lease.
  std::mt19937_64 gen{seed != 0 ? seed ^ 0x9e3779b97f4a7c15ull
                                : std::random_device{}()};
  return (gen() >> 1) | 1;
}

} // namespace

const char* to_string(queue_ordering x) {
  switch (x) {
    case queue_ordering::none: return "none";
    case queue_ordering::key: return "key";
  }
  return "unknown";
}

caf::expected<queue_ordering> parse_queue_ordering(std::string_view x) {
  if (x == "none")
    return queue_ordering::none;
  if (x == "key")
    return queue_ordering::key;
  return make_error(ec::invalid_config,
                    "ordering must be none or key, not '" + std::string{x}
                      + "'");
}

const char* to_string(record_status x) {
  switch (x) {
    case record_status::unread: return "unread";
    case record_status::available: return "available";
    case record_status::delayed: return "delayed";
    case record_status::parked: return "parked";
    case record_status::leased: return "leased";
    case record_status::done: return "done";
    case record_status::dead_letter: return "dead_letter";
  }
  return "unknown";
}

caf::error lease_table_config::validate() const {
  if (auto err = retry.validate())
    return err;
  if (window < 1)
    return make_error(ec::invalid_config, "queue: window must be >= 1");
  if (max_waiting < 1)
    return make_error(ec::invalid_config, "queue: max waiting must be >= 1");
  if (max_visibility.count() <= 0)
    return make_error(ec::invalid_config,
                      "queue: max visibility must be positive");
  if (retry.visibility_timeout > max_visibility)
    return make_error(ec::invalid_config,
                      "queue: visibility timeout exceeds max visibility");
  return caf::none;
}

std::vector<record_header> dead_letter_headers(const dead_letter_info& x,
                                               std::string_view group,
                                               std::string_view topic,
                                               partition_id p) {
  auto h = [](std::string_view k, std::string v) {
    return record_header{std::string{k}, std::move(v)};
  };
  return {
    h(dlq_header::original_topic, std::string{topic}),
    h(dlq_header::original_partition, std::to_string(p.value)),
    h(dlq_header::original_offset, off_str(x.off)),
    h(dlq_header::attempts, std::to_string(x.attempts)),
    h(dlq_header::error, x.error),
    h(dlq_header::group, std::string{group}),
    h(dlq_header::first_failure_ts, std::to_string(x.first_failure)),
    h(dlq_header::last_failure_ts, std::to_string(x.last_failure)),
  };
}

std::string default_dlq_topic(std::string_view topic, std::string_view group) {
  std::string out{topic};
  out += '.';
  out += group;
  out += ".dlq";
  return out;
}

// -- construction ---------------------------------------------------------------

lease_table::lease_table(lease_table_config cfg, offset start)
  : cfg_(cfg),
    policy_(cfg.retry, cfg.seed),
    committed_(start),
    read_end_(start),
    next_lease_id_(first_lease_id(cfg.seed)) {
}

caf::expected<lease_table> lease_table::make(lease_table_config cfg,
                                             offset start) {
  if (auto err = cfg.validate())
    return err;
  if (start.value < 0)
    return make_error(ec::invalid_argument,
                      "queue: negative start offset " + off_str(start));
  return lease_table{cfg, start};
}

caf::expected<lease_table> lease_table::restore(lease_table_config cfg,
                                                const queue_snapshot& snap) {
  auto t = make(cfg, snap.committed);
  if (!t)
    return t;
  t->saved_committed_ = snap.committed;
  for (const auto& r : snap.records) {
    if (r.off < snap.committed)
      continue;
    if (r.phase == queue_record_phase::retry && r.attempts < 1)
      return make_error(ec::invalid_argument,
                        "queue: retry row " + off_str(r.off)
                          + " without attempts");
    entry e;
    e.persisted = true;
    if (r.phase == queue_record_phase::leased
        && (r.member.empty() || r.lease_id == 0))
      return make_error(ec::invalid_argument,
                        "queue: lease row " + off_str(r.off)
                          + " without member or lease id");
    e.attempts = r.attempts;
    e.first_failure = r.first_failure;
    e.last_failure = r.last_failure;
    e.available_at = r.available_at;
    e.last_error = cut_error(r.last_error);
    if (r.phase == queue_record_phase::done) {
      // Done records are not in the window: an interval of done offsets.
      if (t->window_.count(r.off) > 0 || t->done_contains(r.off))
        return make_error(ec::invalid_argument,
                          "queue: duplicate row " + off_str(r.off));
      t->done_insert(t->done_, r.off);
      t->done_insert(t->done_rows_, r.off);
      continue;
    }
    switch (r.phase) {
      case queue_record_phase::retry: e.st = state::available; break;
      case queue_record_phase::dead_letter: e.st = state::dead_letter; break;
      case queue_record_phase::leased:
        if (cfg.persist_leases) {
          e.st = state::leased;
          e.member = r.member;
          e.lease_id = r.lease_id;
          e.deadline = r.deadline;
        } else {
          // Delivered again, as after a restart without lease rows; the row
          // is rewritten (or erased) by the next change set.
          e.st = state::available;
          t->dirty_.insert(r.off);
        }
        break;
      default:
        return make_error(ec::invalid_argument,
                          "queue: row " + off_str(r.off) + " has phase "
                            + std::to_string(static_cast<int>(r.phase)));
    }
    if (t->done_contains(r.off) || !t->window_.emplace(r.off, std::move(e)).second)
      return make_error(ec::invalid_argument,
                        "queue: duplicate row " + off_str(r.off));
    if (r.phase == queue_record_phase::dead_letter)
      t->dead_letters_.insert(r.off);
    if (r.phase == queue_record_phase::leased && cfg.persist_leases)
      t->deadlines_.emplace(r.deadline, r.off);
  }
  return t;
}

// -- feeding records ------------------------------------------------------------

caf::error lease_table::offer(offset off, std::optional<std::string_view> key,
                              timestamp_ms timestamp, timestamp_ms deliver_at) {
  if (off < read_end_)
    return make_error(ec::invalid_argument,
                      "queue: offered " + off_str(off)
                        + " below the read position " + off_str(read_end_));
  if (done_contains(off)) { // restored as done: nothing to deliver
    for (auto i = window_.lower_bound(read_end_);
         i != window_.end() && i->first < off;)
      i = drop(i);
    read_end_ = off + 1;
    pop_prefix();
    return caf::none;
  }
  auto it = window_.find(off);
  if (it == window_.end() && full()
      && (window_.empty() || off > window_.rbegin()->first)) {
    // Restored rows that this offer would skip free no room: records up to
    // the last restored row are always taken, so a full window of restored
    // rows cannot deadlock the reader.
    return make_error(ec::throttled,
                      "queue: window of " + std::to_string(cfg_.window)
                        + " records (" + std::to_string(waiting())
                        + " of at most "
                        + std::to_string(cfg_.max_waiting)
                        + " waiting besides) is full at "
                        + off_str(committed_));
  }
  // Restored rows between the read position and `off` name records that are
  // no longer in the log.
  for (auto i = window_.lower_bound(read_end_);
       i != window_.end() && i->first < off;)
    i = drop(i);
  it = window_.find(off);
  if (it == window_.end())
    it = window_.emplace(off, entry{}).first;
  auto& e = it->second;
  e.offered = true;
  e.has_key = key.has_value();
  e.key_hash = key ? std::hash<std::string_view>{}(*key) : 0;
  e.timestamp = timestamp;
  // Delayed delivery: computed from the record, so it needs no row and a
  // restart (which reads the record again) keeps it.
  e.available_at = std::max(e.available_at, deliver_at);
  if (e.st == state::available) {
    hold_key(off, e);
    index_available(off, e);
  } else if (e.st == state::leased) {
    hold_key(off, e); // a restored lease holds its key
  }
  read_end_ = off + 1;
  pop_prefix();
  return caf::none;
}

caf::expected<size_t> lease_table::offer(std::span<const queue_candidate> cs) {
  size_t n = 0;
  for (const auto& c : cs) {
    if (auto err = offer(c.off, c.key, c.timestamp, c.deliver_at)) {
      if (is(err, ec::throttled))
        return n;
      return err;
    }
    ++n;
  }
  return n;
}

bool lease_table::full() const {
  auto w = waiting();
  return window_.size() - w >= cfg_.window || w >= cfg_.max_waiting;
}

size_t lease_table::room() const {
  size_t n = full() ? 0 : cfg_.window - (window_.size() - waiting());
  // Offers up to the last restored row are taken even in a full window.
  if (!window_.empty() && window_.rbegin()->first >= read_end_)
    n = std::max(n, static_cast<size_t>(window_.rbegin()->first - read_end_)
                      + 1);
  return n;
}

size_t lease_table::skip_to(offset off) {
  size_t n = 0;
  for (auto it = window_.begin(); it != window_.end() && it->first < off;) {
    it = drop(it);
    ++n;
  }
  read_end_ = std::max(read_end_, off);
  pop_prefix();
  return n;
}

std::vector<offset> lease_table::forget(offset from, offset to,
                                        const std::function<bool(offset)>& keep) {
  std::vector<offset> gone;
  for (auto it = window_.lower_bound(from);
       it != window_.end() && it->first < to; ++it) {
    auto& e = it->second;
    if (!e.offered || e.st == state::leased || e.st == state::dead_letter
        || (keep && keep(it->first)))
      continue;
    gone.push_back(it->first);
  }
  for (auto off : gone)
    set_done(off, window_.at(off));
  return gone;
}

// -- member requests ------------------------------------------------------------

caf::expected<std::vector<lease>>
lease_table::acquire(std::string_view member, size_t max_records,
                     timestamp_ms now,
                     std::optional<std::chrono::milliseconds> visibility,
                     const std::function<bool(offset)>& skip) {
  if (member.empty())
    return make_error(ec::invalid_argument, "queue: empty member id");
  auto vis = visibility.value_or(cfg_.retry.visibility_timeout);
  if (vis.count() <= 0 || vis > cfg_.max_visibility)
    return make_error(ec::invalid_argument,
                      "queue: visibility " + std::to_string(vis.count())
                        + " ms is outside (0, "
                        + std::to_string(cfg_.max_visibility.count()) + "]");
  observe(now);
  std::vector<lease> out;
  for (auto it = ready_.begin();
       it != ready_.end() && out.size() < max_records;) {
    auto off = *it;
    auto& e = window_.at(off);
    if (cfg_.ordering == queue_ordering::key && e.has_key
        && *keys_.at(e.key_hash).begin() != off) {
      ++it; // an earlier record of its key is not finished
      continue;
    }
    if (skip && skip(off)) {
      ++it;
      continue;
    }
    it = ready_.erase(it);
    e.st = state::leased;
    e.member.assign(member);
    e.lease_id = next_lease_id_++;
    if (next_lease_id_ == 0)
      next_lease_id_ = 1;
    e.deadline = now + vis.count();
    deadlines_.emplace(e.deadline, off);
    if (cfg_.persist_leases)
      dirty_.insert(off);
    out.push_back(lease{off, e.lease_id, e.deadline, e.attempts + 1,
                        e.has_key, e.key_hash, e.timestamp});
  }
  return out;
}

caf::expected<lease_table::entry*>
lease_table::find_lease(std::string_view member, offset off,
                        uint64_t lease_id) {
  if (off < committed_)
    return make_error(ec::lease_not_found,
                      "record " + off_str(off)
                        + " is below the committed position "
                        + off_str(committed_));
  if (done_contains(off))
    return make_error(ec::lease_not_found,
                      "lease " + std::to_string(lease_id) + ": record "
                        + off_str(off) + " is done");
  auto it = window_.find(off);
  // A restored lease may be answered before the reader offered its record.
  if (it == window_.end()
      || (!it->second.offered && it->second.st != state::leased))
    return make_error(ec::lease_not_found,
                      "record " + off_str(off) + " is not tracked");
  auto& e = it->second;
  if (e.st == state::leased && e.lease_id == lease_id) {
    if (e.member != member)
      return make_error(ec::not_lease_owner,
                        "record " + off_str(off) + " is leased to "
                          + e.member);
    return &e;
  }
  if (lease_id != 0 && e.expired_lease_id == lease_id)
    return make_error(ec::lease_expired,
                      "lease " + std::to_string(lease_id) + " on record "
                        + off_str(off) + " expired");
  const char* why = "is not leased";
  switch (e.st) {
    case state::leased: why = "has another lease"; break;
    case state::done: why = "is done"; break;
    case state::dead_letter: why = "is pending dead-letter"; break;
    case state::available: break;
  }
  return make_error(ec::lease_not_found,
                    "lease " + std::to_string(lease_id) + ": record "
                      + off_str(off) + " " + why);
}

caf::error lease_table::ack(std::string_view member, offset off,
                            uint64_t lease_id) {
  auto e = find_lease(member, off, lease_id);
  if (!e)
    return std::move(e.error());
  end_lease(off, **e);
  set_done(off, **e);
  return caf::none;
}

caf::expected<failure_result>
lease_table::nack(std::string_view member, offset off, uint64_t lease_id,
                  timestamp_ms now, std::chrono::milliseconds delay,
                  std::string_view error) {
  auto e = find_lease(member, off, lease_id);
  if (!e)
    return std::move(e.error());
  observe(now);
  end_lease(off, **e);
  return fail(off, **e, now, error, std::max(delay, milliseconds{0}), false);
}

caf::error lease_table::reject(std::string_view member, offset off,
                               uint64_t lease_id, timestamp_ms now,
                               std::string_view error) {
  auto e = find_lease(member, off, lease_id);
  if (!e)
    return std::move(e.error());
  observe(now);
  end_lease(off, **e);
  fail(off, **e, now, error, milliseconds{0}, true);
  return caf::none;
}

caf::expected<timestamp_ms>
lease_table::extend(std::string_view member, offset off, uint64_t lease_id,
                    timestamp_ms now, std::chrono::milliseconds extra) {
  if (extra.count() <= 0)
    return make_error(ec::invalid_argument,
                      "queue: extension must be positive");
  auto found = find_lease(member, off, lease_id);
  if (!found)
    return std::move(found.error());
  auto& e = **found;
  auto deadline = std::max(e.deadline,
                           now + std::min(extra, cfg_.max_visibility).count());
  if (deadline != e.deadline) {
    deadlines_.erase({e.deadline, off});
    e.deadline = deadline;
    deadlines_.emplace(e.deadline, off);
    if (cfg_.persist_leases)
      dirty_.insert(off);
  }
  return e.deadline;
}

// -- coordinator ----------------------------------------------------------------

std::vector<expired_lease> lease_table::expire(timestamp_ms now) {
  observe(now);
  std::vector<expired_lease> out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto off = deadlines_.begin()->second;
    auto& e = window_.at(off);
    expired_lease x;
    x.off = off;
    x.member = e.member;
    x.lease_id = e.lease_id;
    e.expired_lease_id = e.lease_id;
    end_lease(off, e);
    x.result = fail(off, e, now, lease_expired_error, milliseconds{0}, false);
    out.push_back(std::move(x));
  }
  return out;
}

caf::error lease_table::dead_lettered(offset off) {
  if (off < committed_ || done_contains(off))
    return caf::none;
  auto it = window_.find(off);
  if (it == window_.end())
    return make_error(ec::not_found,
                      "queue: record " + off_str(off) + " is not tracked");
  auto& e = it->second;
  if (e.st == state::done)
    return caf::none;
  if (e.st != state::dead_letter)
    return make_error(ec::invalid_argument,
                      "queue: record " + off_str(off)
                        + " is not pending dead-letter");
  dead_letters_.erase(off);
  set_done(off, e);
  return caf::none;
}

size_t lease_table::release_member(std::string_view member) {
  return release_if(false, member);
}

size_t lease_table::redeliver_all_leases() {
  return release_if(true, {});
}

bool lease_table::release(offset off, uint64_t lease_id) {
  auto it = window_.find(off);
  if (it == window_.end() || it->second.st != state::leased
      || it->second.lease_id != lease_id)
    return false;
  auto& e = it->second;
  deadlines_.erase({e.deadline, off});
  e.st = state::available;
  e.member.clear();
  e.available_at = std::min(e.available_at, clock_);
  index_available(off, e);
  if (cfg_.persist_leases)
    dirty_.insert(off);
  return true;
}

size_t lease_table::release_if(bool all, std::string_view member) {
  size_t n = 0;
  for (auto it = deadlines_.begin(); it != deadlines_.end();) {
    auto off = it->second;
    auto& e = window_.at(off);
    if (!all && e.member != member) {
      ++it;
      continue;
    }
    it = deadlines_.erase(it);
    e.st = state::available;
    e.member.clear();
    // Not a failure: due at once, whatever its last retry time said.
    e.available_at = std::min(e.available_at, clock_);
    index_available(off, e);
    if (cfg_.persist_leases)
      dirty_.insert(off);
    ++n;
  }
  return n;
}

// -- queries ----------------------------------------------------------------------

std::vector<dead_letter_info> lease_table::pending_dead_letters() const {
  std::vector<dead_letter_info> out;
  out.reserve(dead_letters_.size());
  for (auto off : dead_letters_) {
    const auto& e = window_.at(off);
    out.push_back(dead_letter_info{off, e.attempts, e.last_error,
                                   e.first_failure, e.last_failure});
  }
  return out;
}

std::optional<timestamp_ms> lease_table::next_deadline() const {
  if (deadlines_.empty())
    return std::nullopt;
  return deadlines_.begin()->first;
}

std::optional<timestamp_ms> lease_table::next_retry() const {
  if (waiting_.empty())
    return std::nullopt;
  return waiting_.begin()->first;
}

std::optional<record_view> lease_table::find(offset off) const {
  if (done_contains(off)) {
    record_view v;
    v.off = off;
    v.status = record_status::done;
    return v;
  }
  auto it = window_.find(off);
  if (it == window_.end())
    return std::nullopt;
  const auto& e = it->second;
  record_view v;
  v.off = off;
  v.attempts = e.attempts;
  v.first_failure = e.first_failure;
  v.last_failure = e.last_failure;
  v.available_at = e.available_at;
  v.last_error = e.last_error;
  switch (e.st) {
    case state::available:
      if (!e.offered)
        v.status = record_status::unread;
      else if (ready_.count(off) != 0)
        v.status = record_status::available;
      else if (waiting_.count({e.available_at, off}) != 0)
        v.status = record_status::delayed;
      else
        v.status = record_status::parked;
      break;
    case state::leased:
      v.status = record_status::leased;
      v.member = e.member;
      v.lease_id = e.lease_id;
      v.deadline = e.deadline;
      break;
    case state::done: v.status = record_status::done; break;
    case state::dead_letter: v.status = record_status::dead_letter; break;
  }
  return v;
}

bool lease_table::waits(offset off) const {
  auto it = window_.find(off);
  return it != window_.end() && it->second.st == state::available
         && it->second.offered && ready_.count(off) == 0;
}

lease_table_stats lease_table::stats() const {
  lease_table_stats s;
  s.committed = committed_;
  s.read_end = read_end_;
  s.done = done_count();
  s.tracked = window_.size() + s.done;
  s.available = ready_.size();
  s.delayed = waiting_.size();
  for (const auto& [at, off] : waiting_)
    if (window_.at(off).attempts == 0)
      ++s.scheduled;
  s.parked = key_held_;
  s.leased = deadlines_.size();
  s.dead_letter = dead_letters_.size();
  return s;
}

// -- persistence --------------------------------------------------------------------

bool lease_table::has_changes() const {
  return full_ || !dirty_.empty() || !erased_.empty()
         || saved_committed_ != committed_;
}

queue_changes lease_table::take_changes() {
  queue_changes ch;
  ch.committed = committed_;
  ch.full = full_;
  for (auto off : dirty_) {
    auto it = window_.find(off);
    if (it == window_.end()) {
      if (done_contains(off)) {
        queue_record r;
        r.off = off;
        r.phase = queue_record_phase::done;
        ch.upserts.push_back(std::move(r));
        done_insert(done_rows_, off);
      }
      continue;
    }
    auto& e = it->second;
    if (needs_row(e)) {
      ch.upserts.push_back(to_record(off, e));
      e.persisted = true;
    } else if (e.persisted) {
      ch.erased.push_back(off);
      e.persisted = false;
    }
  }
  if (!full_)
    ch.erased.insert(ch.erased.end(), erased_.begin(), erased_.end());
  std::sort(ch.erased.begin(), ch.erased.end());
  dirty_.clear();
  erased_.clear();
  full_ = false;
  saved_committed_ = committed_;
  return ch;
}

void lease_table::mark_all_dirty() {
  full_ = true;
  erased_.clear();
  for (auto& [off, e] : window_) {
    dirty_.insert(off);
    e.persisted = false;
  }
  for (auto& [from, to] : done_)
    for (auto off = from; off < to; ++off)
      dirty_.insert(offset{off});
  done_rows_.clear(); // the full rewrite writes them again
}

queue_snapshot lease_table::snapshot() const {
  queue_snapshot s;
  s.committed = committed_;
  for (const auto& [off, e] : window_)
    if (needs_row(e))
      s.records.push_back(to_record(off, e));
  for (const auto& [from, to] : done_)
    for (auto off = from; off < to; ++off) {
      queue_record r;
      r.off = offset{off};
      r.phase = queue_record_phase::done;
      s.records.push_back(std::move(r));
    }
  std::sort(s.records.begin(), s.records.end(),
            [](const queue_record& a, const queue_record& b) { return a.off < b.off; });
  return s;
}

bool lease_table::needs_row(const entry& e) const {
  return e.st == state::done || e.st == state::dead_letter || e.attempts > 0
         || (cfg_.persist_leases && e.st == state::leased);
}

queue_record lease_table::to_record(offset off, const entry& e) const {
  queue_record r;
  r.off = off;
  switch (e.st) {
    case state::done: r.phase = queue_record_phase::done; break;
    case state::dead_letter: r.phase = queue_record_phase::dead_letter; break;
    case state::leased:
      if (cfg_.persist_leases) {
        r.phase = queue_record_phase::leased;
        r.member = e.member;
        r.lease_id = e.lease_id;
        r.deadline = e.deadline;
        break;
      }
      r.phase = queue_record_phase::retry;
      break;
    default: r.phase = queue_record_phase::retry; break;
  }
  r.attempts = e.attempts;
  r.first_failure = e.first_failure;
  r.last_failure = e.last_failure;
  r.available_at = e.available_at;
  r.last_error = e.last_error;
  return r;
}

caf::error lease_table::verify() const {
  auto broken = [](std::string what) {
    return make_error(ec::invalid_argument,
                      "lease_table invariant: " + std::move(what));
  };
  if (committed_ > read_end_)
    return broken("committed " + off_str(committed_) + " > read end "
                  + off_str(read_end_));
  if (!window_.empty() && window_.begin()->first < committed_)
    return broken("record " + off_str(window_.begin()->first)
                  + " below committed");
  for (const auto& [off, e] : window_)
    if (e.st == state::done)
      return broken("done record " + off_str(off) + " in the window");
  for (const auto& [from, to] : done_) {
    if (from >= to || offset{from} < committed_)
      return broken("done interval [" + std::to_string(from) + ", "
                    + std::to_string(to) + ") below committed or empty");
    auto w = window_.lower_bound(offset{from});
    if (w != window_.end() && w->first < offset{to})
      return broken("record " + off_str(w->first) + " both done and tracked");
  }
  for (const auto& [from, to] : done_rows_)
    for (auto off = from; off < to; ++off)
      if (!done_contains(offset{off}))
        return broken("done row " + std::to_string(off) + " not done");
  auto expect_committed = window_.empty()
                            ? read_end_
                            : std::min(window_.begin()->first, read_end_);
  if (committed_ != expect_committed)
    return broken("committed " + off_str(committed_) + " should be "
                  + off_str(expect_committed));
  size_t avail = 0, leased = 0, dlq = 0, keyed = 0;
  for (const auto& [off, e] : window_) {
    auto where = "record " + off_str(off) + ": ";
    if (e.offered != (off < read_end_))
      return broken(where + "offered flag disagrees with the read end");
    bool in_ready = ready_.count(off) != 0;
    bool in_wait = waiting_.count({e.available_at, off}) != 0;
    bool in_dl = deadlines_.count({e.deadline, off}) != 0;
    bool in_dlq = dead_letters_.count(off) != 0;
    if (e.st == state::available && e.offered && !key_head(off, e)) {
      if (in_ready || in_wait)
        return broken(where + "parked but queued");
    } else if (e.st == state::available && e.offered) {
      if (in_ready == in_wait)
        return broken(where + "available but not in exactly one queue");
      ++avail;
    } else if (in_ready || in_wait) {
      return broken(where + "queued but not available");
    }
    if ((e.st == state::leased) != in_dl)
      return broken(where + "lease and deadline index disagree");
    if (e.st == state::leased) {
      ++leased;
      if (e.member.empty())
        return broken(where + "lease without member");
      if (!e.offered && !cfg_.persist_leases)
        return broken(where + "lease on an unread record");
    }
    if ((e.st == state::dead_letter) != in_dlq)
      return broken(where + "dead-letter index disagrees");
    if (in_dlq)
      ++dlq;
    bool holds = cfg_.ordering == queue_ordering::key && e.offered
                 && e.has_key
                 && (e.st == state::available || e.st == state::leased);
    auto k = keys_.find(e.key_hash);
    bool in_keys = e.has_key && k != keys_.end() && k->second.count(off) != 0;
    if (holds != in_keys)
      return broken(where + "key index disagrees");
    if (holds)
      ++keyed;
  }
  if (ready_.size() + waiting_.size() != avail)
    return broken("stale entries in the available queues");
  if (deadlines_.size() != leased)
    return broken("stale entries in the deadline index");
  if (dead_letters_.size() != dlq)
    return broken("stale entries in the dead-letter index");
  size_t key_entries = 0, held = 0;
  for (const auto& [h, offs] : keys_) {
    if (offs.empty())
      return broken("empty key set");
    key_entries += offs.size();
    held += offs.size() - 1;
  }
  if (key_entries != keyed)
    return broken("stale entries in the key index");
  if (held != key_held_)
    return broken("parked count " + std::to_string(key_held_) + " should be "
                  + std::to_string(held));
  if (cfg_.ordering == queue_ordering::key) {
    // At most one leased record per key, and it is the key's first.
    for (const auto& [h, offs] : keys_) {
      for (auto off : offs) {
        if (window_.at(off).st == state::leased && off != *offs.begin())
          return broken("record " + off_str(off)
                        + " leased behind an earlier record of its key");
      }
    }
  }
  return caf::none;
}

// -- internals ----------------------------------------------------------------------

void lease_table::observe(timestamp_ms now) {
  if (now > clock_)
    clock_ = now;
  promote(clock_);
}

void lease_table::promote(timestamp_ms now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    ready_.insert(waiting_.begin()->second);
    waiting_.erase(waiting_.begin());
  }
}

void lease_table::index_available(offset off, entry& e) {
  if (!e.offered)
    return; // a restored stub: offer() indexes it when it is read again
  if (!key_head(off, e))
    return; // parked: release_key() indexes it when its turn comes
  if (e.available_at <= clock_)
    ready_.insert(off);
  else
    waiting_.emplace(e.available_at, off);
}

bool lease_table::key_head(offset off, const entry& e) const {
  if (cfg_.ordering != queue_ordering::key || !e.has_key)
    return true;
  auto k = keys_.find(e.key_hash);
  return k == keys_.end() || *k->second.begin() == off;
}

void lease_table::hold_key(offset off, const entry& e) {
  if (cfg_.ordering != queue_ordering::key || !e.has_key)
    return;
  auto& offs = keys_[e.key_hash];
  if (offs.insert(off).second && offs.size() > 1)
    ++key_held_;
}

void lease_table::release_key(offset off, const entry& e) {
  if (!e.has_key)
    return;
  auto k = keys_.find(e.key_hash);
  if (k == keys_.end())
    return;
  auto& offs = k->second;
  bool head = *offs.begin() == off;
  if (offs.erase(off) == 0)
    return;
  if (offs.empty()) {
    keys_.erase(k);
    return;
  }
  --key_held_;
  if (head) { // the key's next record takes its turn
    auto next = *offs.begin();
    auto& n = window_.at(next);
    if (n.st == state::available)
      index_available(next, n);
  }
}

void lease_table::end_lease(offset off, entry& e) {
  deadlines_.erase({e.deadline, off});
  e.st = state::available; // the caller sets the real next state
  e.member.clear();
}

void lease_table::set_done(offset off, entry& e) {
  // Leaves the window (which bounds the records not done): an interval
  // of done offsets remembers it until the committed position passes it.
  release_key(off, e);
  ready_.erase(off);
  waiting_.erase({e.available_at, off});
  dead_letters_.erase(off);
  if (e.persisted) // its retry or lease row is replaced by a done row
    done_insert(done_rows_, off);
  window_.erase(off);
  done_insert(done_, off);
  dirty_.insert(off);
  pop_prefix();
}

failure_result lease_table::fail(offset off, entry& e, timestamp_ms now,
                                 std::string_view error,
                                 std::chrono::milliseconds min_delay,
                                 bool dead_letter) {
  if (e.attempts < INT32_MAX)
    ++e.attempts;
  if (e.attempts == 1)
    e.first_failure = now;
  e.last_failure = now;
  e.last_error = cut_error(error);
  dirty_.insert(off);
  failure_result r;
  r.attempts = e.attempts;
  if (dead_letter || policy_.exhausted(e.attempts)) {
    e.st = state::dead_letter;
    dead_letters_.insert(off);
    release_key(off, e);
    r.outcome = failure_outcome::dead_letter;
    return r;
  }
  auto delay = std::max(min_delay, policy_.backoff(e.attempts));
  e.st = state::available;
  e.available_at = now + delay.count();
  index_available(off, e);
  r.outcome = failure_outcome::retry;
  r.available_at = e.available_at;
  return r;
}

lease_table::window_map::iterator lease_table::drop(window_map::iterator it) {
  auto off = it->first;
  auto& e = it->second;
  ready_.erase(off);
  waiting_.erase({e.available_at, off});
  if (e.st == state::leased)
    deadlines_.erase({e.deadline, off});
  dead_letters_.erase(off);
  release_key(off, e);
  if (e.persisted)
    erased_.push_back(off);
  dirty_.erase(off);
  return window_.erase(it);
}

void lease_table::pop_prefix() {
  committed_ = window_.empty() ? read_end_
                               : std::min(window_.begin()->first, read_end_);
  // Done offsets below the position are forgotten; their rows (if written)
  // go with the next change set.
  trim_below(done_, committed_, [this](offset off) { dirty_.erase(off); });
  trim_below(done_rows_, committed_,
             [this](offset off) { erased_.push_back(off); });
}

template <class F>
void lease_table::trim_below(interval_set& set, offset end, F each) {
  while (!set.empty() && offset{set.begin()->first} < end) {
    auto [from, to] = *set.begin();
    set.erase(set.begin());
    auto cut = std::min(to, end.value);
    if (to > cut)
      set.emplace(cut, to);
    for (auto off = from; off < cut; ++off)
      each(offset{off});
  }
}

bool lease_table::done_contains(offset off) const {
  auto it = done_.upper_bound(off.value);
  if (it == done_.begin())
    return false;
  --it;
  return off.value < it->second;
}

void lease_table::done_insert(interval_set& set, offset off) {
  auto x = off.value;
  auto next = set.upper_bound(x);
  if (next != set.begin()) {
    auto prev = std::prev(next);
    if (x < prev->second)
      return; // already in
    if (prev->second == x) {
      prev->second = x + 1;
      if (next != set.end() && next->first == x + 1) {
        prev->second = next->second;
        set.erase(next);
      }
      return;
    }
  }
  if (next != set.end() && next->first == x + 1) {
    auto end = next->second;
    set.erase(next);
    set.emplace(x, end);
    return;
  }
  set.emplace(x, x + 1);
}

size_t lease_table::done_count() const {
  size_t n = 0;
  for (const auto& [from, to] : done_)
    n += static_cast<size_t>(to - from);
  return n;
}

} // namespace ferry
