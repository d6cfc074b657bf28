#include "actors/client/consumer.hpp"

#include "actors/client/leader_links.hpp"

#include "broker/error.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace ferry {

caf::error validate(const consumer_config& cfg) {
  auto bad = [](std::string what) { return make_error(ec::invalid_config, std::move(what)); };
  if (cfg.auto_offset_reset != "earliest" && cfg.auto_offset_reset != "latest"
      && cfg.auto_offset_reset != "none")
    return bad("auto.offset.reset '" + cfg.auto_offset_reset
               + "': expected earliest, latest or none");
  if (cfg.topics.empty() && cfg.partitions.empty())
    return bad("a consumer needs topics (subscribe) or partitions (assign)");
  for (auto& t : cfg.topics)
    if (t.empty())
      return bad("empty topic name");
  if (cfg.fetch_max_bytes <= 0 || cfg.fetch_min_bytes < 0 || cfg.max_poll_records <= 0)
    return bad("fetch.max.bytes and max.poll.records must be > 0");
  if (cfg.fetch_max_total_bytes <= 0)
    return bad("fetch_max_total_bytes must be > 0");
  if (cfg.heartbeat_interval.count() <= 0 || cfg.session_timeout.count() <= 0
      || cfg.auto_commit_interval.count() <= 0 || cfg.request_timeout.count() <= 0)
    return bad("heartbeat, session, auto-commit and request timeouts must be > 0");
  if (cfg.heartbeat_interval >= cfg.session_timeout)
    return bad("heartbeat.interval.ms must be below session.timeout.ms");
  if (!cfg.group_id.empty() && cfg.partitions.empty() && cfg.assignors.empty())
    return bad("a group member needs at least one assignor");
  return {};
}

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// The consumer's full interface: the public one plus connection updates
/// and poll deadlines.
using consumer_impl = consumer_actor::extend<caf::reacts_to<connect_atom, broker_actor>,
                                             caf::reacts_to<expire_atom, uint64_t>>;

constexpr milliseconds tick_period{100};
constexpr int64_t earliest_ts = -2;
constexpr int64_t latest_ts = -1;

/// One assigned partition.
struct part_state {
  topic_partition tp;
  offset position{-1}; ///< next offset poll hands out; -1 = not known yet
  offset fetch_at{-1}; ///< next offset to fetch (runs ahead of position)
  offset committed{-1}; ///< last committed by us (skip re-commits)
  bool resolving = false;
  bool fetching = false;
  /// The last fetch ended at the high watermark: the next one is a long
  /// poll and reserves nothing of fetch_max_total_bytes.
  bool caught_up = false;
  int32_t via = -1; ///< the leader link of the fetch in flight; -1: bootstrap
  /// Renewed (renew_epoch) on seek/reset/reconnect: replies to requests
  /// sent under an older value are dropped. Values come from one counter
  /// of the consumer, so a partition dropped and assigned again (a new
  /// part_state) never reuses the value of a request still in flight.
  uint64_t epoch = 0;
  std::deque<consumed_message> buffer;
  size_t buffered_bytes = 0;
  caf::error error; ///< surfaced by the next poll
  clock::time_point retry_at{};
};

struct poll_waiter {
  caf::typed_response_promise<std::vector<consumed_message>> rp;
  uint64_t id = 0;
};

enum class phase { idle, joining, syncing, stable };

struct consumer_state {
  consumer_config cfg;
  connection_actor conn;
  broker_actor broker;
  uint64_t conn_gen = 0;

  std::map<topic_partition, part_state> parts;
  uint64_t last_epoch = 0; ///< source of part_state::epoch values
  int64_t commit_sequence = 0; ///< the last commit's sequence (commit_request)
  std::map<topic_partition, offset> pending_seeks;
  std::vector<poll_waiter> waiters;
  uint64_t next_waiter = 1;
  size_t rotate = 0; ///< where the next poll starts, for fairness
  /// Bytes reserved by fetches in flight that may bring data back (not
  /// caught up); bounded by cfg.fetch_max_total_bytes.
  int64_t reserved_bytes = 0;
  bool budget_blocked = false; ///< a fetch waits for reserved_bytes to fall
  topic_partition kick_after; ///< the last partition that reserved bytes
  caf::error fatal; ///< surfaced by every poll (e.g. fenced)

  // Group membership.
  bool group_mode = false; ///< subscribe with a group id
  phase ph = phase::idle;
  uint64_t group_gen = 0; ///< bumps per join round: stale replies dropped
  std::string member_id;
  int32_t generation = -1;
  std::string assignor;
  bool heartbeat_in_flight = false;
  clock::time_point last_heartbeat{};
  clock::time_point join_retry_at{};
  bool rejoin_after_sync = false;
  bool left_for_poll_timeout = false;
  bool commit_before_join = false; ///< a reconnect commit runs first
  /// Commit requests not answered yet. A fetch of the group's committed
  /// offsets waits for them, so a member that restarts from its commits
  /// (an eager rebalance gave its partitions up) reads its own latest one,
  /// not the one before a commit still on its way to the coordinator.
  int commits_in_flight = 0;

  // Standalone subscription without a group.
  bool metadata_requested = false;
  clock::time_point metadata_retry_at{};

  /// Fetch routing: leaders and node endpoints, refreshed by
  /// refresh_leaders() (every metadata_max_age, or when wanted).
  leader_links links;
  bool leaders_requested = false;
  bool leaders_wanted = true;
  clock::time_point leaders_at{};

  clock::time_point last_poll = clock::now();
  clock::time_point last_commit = clock::now();
  bool stopping = false;

  static inline const char* name = "ferry.consumer";
};

using consumer_pointer = consumer_impl::stateful_pointer<consumer_state>;

std::string tp_text(const topic_partition& tp) {
  return tp.topic + "-" + std::to_string(tp.partition.value);
}

size_t message_bytes(const consumed_message& m) {
  return 64 + m.key.size() + m.value.size();
}

bool cooperative(const consumer_state& st) {
  return st.assignor == "cooperative-sticky";
}

/// Voids the replies to every request of `p` in flight; returns the new epoch.
uint64_t renew_epoch(consumer_state& st, part_state& p) {
  p.epoch = ++st.last_epoch;
  return p.epoch;
}

// -- poll ----------------------------------------------------------------------

void maybe_fetch(consumer_pointer self, part_state& p);

std::vector<consumed_message> take(consumer_pointer self) {
  auto& st = self->state;
  std::vector<consumed_message> out;
  if (st.parts.empty())
    return out;
  auto limit = static_cast<size_t>(st.cfg.max_poll_records);
  std::vector<part_state*> order;
  order.reserve(st.parts.size());
  for (auto& [tp, p] : st.parts)
    order.push_back(&p);
  auto start = st.rotate++ % order.size();
  std::rotate(order.begin(), order.begin() + static_cast<ptrdiff_t>(start), order.end());
  for (auto* p : order) {
    while (!p->buffer.empty() && out.size() < limit) {
      auto& m = p->buffer.front();
      p->buffered_bytes -= std::min(p->buffered_bytes, message_bytes(m));
      p->position = m.off + 1;
      out.push_back(std::move(m));
      p->buffer.pop_front();
    }
    if (out.size() >= limit)
      break;
  }
  for (auto* p : order)
    maybe_fetch(self, *p);
  return out;
}

caf::error take_error(consumer_state& st) {
  if (st.fatal)
    return st.fatal;
  for (auto& [tp, p] : st.parts)
    if (p.error)
      return std::exchange(p.error, caf::error{});
  return {};
}

bool has_data(const consumer_state& st) {
  for (auto& [tp, p] : st.parts)
    if (!p.buffer.empty())
      return true;
  return false;
}

void serve_waiters(consumer_pointer self) {
  auto& st = self->state;
  while (!st.waiters.empty()) {
    if (auto err = take_error(st)) {
      st.waiters.front().rp.deliver(err);
      st.waiters.erase(st.waiters.begin());
      continue;
    }
    if (!has_data(st))
      return;
    st.waiters.front().rp.deliver(take(self));
    st.waiters.erase(st.waiters.begin());
  }
}

// -- positions -------------------------------------------------------------------

void set_position(consumer_pointer self, part_state& p, offset pos) {
  p.position = pos;
  p.fetch_at = pos;
  p.caught_up = false;
  p.resolving = false;
  p.buffer.clear();
  p.buffered_bytes = 0;
  p.fetching = false;
  renew_epoch(self->state, p);
  maybe_fetch(self, p);
}

/// Finds a position by list offsets: -2 earliest, -1 latest.
void lookup_offset(consumer_pointer self, part_state& p, int64_t ts) {
  auto& st = self->state;
  if (!st.broker)
    return;
  p.resolving = true;
  auto epoch = renew_epoch(st, p);
  auto tp = p.tp;
  self->request(st.broker, st.cfg.request_timeout, offsets_atom_v,
                list_offsets_request{tp.topic, tp.partition, ts})
    .then(
      [self, tp, epoch](offset off) {
        auto& st = self->state;
        auto i = st.parts.find(tp);
        if (i == st.parts.end() || i->second.epoch != epoch)
          return;
        set_position(self, i->second, off);
      },
      [self, tp, epoch](caf::error& err) {
        auto& st = self->state;
        auto i = st.parts.find(tp);
        if (i == st.parts.end() || i->second.epoch != epoch)
          return;
        auto& p = i->second;
        p.resolving = false;
        p.retry_at = clock::now() + (is_retriable(err) ? st.cfg.retry_backoff
                                                        : milliseconds{1000});
        if (!is_retriable(err)) {
          p.error = err;
          serve_waiters(self);
        }
      });
}

/// Applies auto.offset.reset to a partition without a valid position.
void apply_reset(consumer_pointer self, part_state& p, const std::string& why) {
  auto& st = self->state;
  auto& policy = st.cfg.auto_offset_reset;
  if (policy == "earliest") {
    lookup_offset(self, p, earliest_ts);
  } else if (policy == "latest") {
    lookup_offset(self, p, latest_ts);
  } else {
    p.resolving = false;
    p.fetching = false;
    p.position = offset{-1};
    p.fetch_at = offset{-1};
    p.error = make_error(ec::offset_out_of_range,
                         why + " for " + tp_text(p.tp) + " and auto.offset.reset is none");
    serve_waiters(self);
  }
}

/// Gives each partition without a position one: a pending seek, else the
/// group's committed offset, else auto.offset.reset.
void resolve_positions(consumer_pointer self) {
  auto& st = self->state;
  if (!st.broker)
    return;
  auto now = clock::now();
  std::vector<topic_partition> need;
  for (auto& [tp, p] : st.parts) {
    if (p.position.value >= 0 || p.resolving || p.error || now < p.retry_at)
      continue;
    if (auto s = st.pending_seeks.find(tp); s != st.pending_seeks.end()) {
      auto off = s->second;
      st.pending_seeks.erase(s);
      if (off.value >= 0)
        set_position(self, p, off);
      else
        lookup_offset(self, p, off.value);
      continue;
    }
    if (st.cfg.group_id.empty()) {
      apply_reset(self, p, "no position");
      continue;
    }
    if (st.commits_in_flight > 0)
      continue; // asked again once they are answered (and on every tick)
    p.resolving = true;
    need.push_back(tp);
  }
  if (need.empty())
    return;
  std::map<topic_partition, uint64_t> epochs;
  for (auto& tp : need)
    epochs[tp] = renew_epoch(st, st.parts[tp]);
  self->request(st.broker, st.cfg.request_timeout, offsets_atom_v,
                fetch_offsets_request{st.cfg.group_id, need})
    .then(
      [self, epochs](std::vector<partition_offset>& offsets) {
        auto& st = self->state;
        std::map<topic_partition, offset> committed;
        for (auto& po : offsets)
          committed[topic_partition{po.topic, po.partition}] = po.committed;
        for (auto& [tp, epoch] : epochs) {
          auto i = st.parts.find(tp);
          if (i == st.parts.end() || i->second.epoch != epoch)
            continue;
          auto& p = i->second;
          auto c = committed.find(tp);
          if (c != committed.end() && c->second.value >= 0) {
            p.committed = c->second;
            set_position(self, p, c->second);
          } else {
            apply_reset(self, p, "no committed offset");
          }
        }
      },
      [self, epochs](caf::error& err) {
        auto& st = self->state;
        for (auto& [tp, epoch] : epochs) {
          auto i = st.parts.find(tp);
          if (i == st.parts.end() || i->second.epoch != epoch)
            continue;
          auto& p = i->second;
          p.resolving = false;
          if (code_of(err) == ec::unknown_group) {
            apply_reset(self, p, "no committed offset");
            continue;
          }
          p.retry_at = clock::now() + st.cfg.retry_backoff;
          if (!is_retriable(err)) {
            p.error = err;
            p.retry_at = clock::now() + milliseconds{1000};
          }
        }
        serve_waiters(self);
      });
}

// -- fetching ----------------------------------------------------------------------

void on_fetched(consumer_pointer self, part_state& p, fetch_response& resp) {
  std::string_view data = resp.data;
  auto from = p.fetch_at;
  offset next = from;
  size_t pos = 0;
  while (pos < data.size()) {
    auto hdr = parse_batch_header(data.substr(pos));
    if (!hdr) {
      // A fetch may end inside a batch that did not fit max_bytes.
      if (!is(hdr.error(), ec::truncated_batch) || pos == 0)
        p.error = std::move(hdr.error());
      break;
    }
    auto size = hdr->total_size();
    auto dec = decode_batch(data.substr(pos, size));
    if (!dec) {
      p.error = make_error(code_of(dec.error()) == ec::none ? ec::corrupt_segment
                                                            : code_of(dec.error()),
                           "fetch of " + tp_text(p.tp) + " at offset "
                             + std::to_string(next.value) + ": "
                             + error_text(dec.error()));
      break;
    }
    pos += size;
    if (!hdr->control()) {
      for (auto& r : dec->records) {
        auto off = hdr->base_offset + r.offset_delta;
        if (off < from)
          continue; // the batch started before the requested offset
        consumed_message m;
        m.topic = p.tp.topic;
        m.partition = p.tp.partition;
        m.off = off;
        m.timestamp = r.timestamp;
        if (r.key) {
          m.has_key = true;
          m.key = std::move(*r.key);
        }
        m.has_value = r.value.has_value();
        if (r.value)
          m.value = std::move(*r.value);
        for (auto& h : r.headers)
          if (h.value)
            m.headers.push_back(message_header{std::move(h.key), std::move(*h.value)});
        p.buffered_bytes += message_bytes(m);
        p.buffer.push_back(std::move(m));
      }
    }
    next = std::max(next, hdr->next_offset());
  }
  if (pos == 0 && !p.error && resp.next_offset > from)
    next = resp.next_offset; // nothing returned, but the broker moved on
  p.fetch_at = next;
  p.caught_up = p.fetch_at >= resp.high_watermark;
  if (p.error) {
    p.retry_at = clock::now() + milliseconds{1000};
    serve_waiters(self);
  }
}

void refresh_leaders(consumer_pointer self);

void fetch_all(consumer_pointer self);

// A fetch's reply (or failure) gives its reservation back; fetches that
// waited for it start, beginning after the last partition that reserved.
void release_fetch_bytes(consumer_pointer self, int64_t reserve) {
  auto& st = self->state;
  st.reserved_bytes -= reserve;
  if (reserve > 0 && st.budget_blocked) {
    st.budget_blocked = false;
    fetch_all(self);
  }
}

void maybe_fetch(consumer_pointer self, part_state& p) {
  auto& st = self->state;
  if (st.stopping || p.fetching || p.resolving || p.fetch_at.value < 0
      || p.error || p.buffered_bytes >= st.cfg.max_buffered_bytes
      || clock::now() < p.retry_at)
    return;
  // The leader's node over our link to it; else the bootstrap node relays.
  auto [hdl, via] = st.links.route(p.tp, self->system(),
                                   caf::actor_cast<connection_listener>(self));
  if (!hdl) {
    hdl = st.broker;
    via = -1;
  }
  if (!hdl)
    return;
  int64_t reserve = p.caught_up ? 0 : st.cfg.fetch_max_bytes;
  if (reserve > 0 && st.reserved_bytes > 0
      && st.reserved_bytes + reserve > st.cfg.fetch_max_total_bytes) {
    st.budget_blocked = true;
    return;
  }
  st.reserved_bytes += reserve;
  if (reserve > 0)
    st.kick_after = p.tp;
  p.fetching = true;
  p.via = via;
  auto epoch = p.epoch;
  auto tp = p.tp;
  fetch_request req{tp.topic,
                    tp.partition,
                    p.fetch_at,
                    st.cfg.fetch_max_bytes,
                    st.cfg.fetch_min_bytes,
                    static_cast<int32_t>(st.cfg.fetch_max_wait.count()),
                    -1};
  self->request(hdl, st.cfg.fetch_max_wait + st.cfg.request_timeout, fetch_atom_v,
                std::move(req))
    .then(
      [self, tp, epoch, reserve](fetch_response& resp) {
        release_fetch_bytes(self, reserve);
        auto& st = self->state;
        auto i = st.parts.find(tp);
        if (i == st.parts.end() || i->second.epoch != epoch)
          return;
        auto& p = i->second;
        p.fetching = false;
        // Relayed: the next fetch goes to the leader it names.
        if (st.links.hint(tp, resp.leader) && !st.links.knows_node(resp.leader))
          refresh_leaders(self);
        on_fetched(self, p, resp);
        serve_waiters(self);
        maybe_fetch(self, p);
      },
      [self, tp, epoch, reserve](caf::error& err) {
        release_fetch_bytes(self, reserve);
        auto& st = self->state;
        auto i = st.parts.find(tp);
        if (i == st.parts.end() || i->second.epoch != epoch)
          return;
        auto& p = i->second;
        p.fetching = false;
        p.caught_up = false;
        if (code_of(err) == ec::offset_out_of_range) {
          p.buffer.clear();
          p.buffered_bytes = 0;
          apply_reset(self, p, "fetch offset " + std::to_string(p.fetch_at.value)
                                 + " out of range");
          return;
        }
        if (is_retriable(err)) {
          if (code_of(err) == ec::not_leader || p.via >= 0)
            refresh_leaders(self); // the leader moved, or its node went
          p.retry_at = clock::now() + st.cfg.retry_backoff;
          return;
        }
        p.error = err;
        p.retry_at = clock::now() + milliseconds{1000};
        serve_waiters(self);
      });
}

// Every partition that may fetch does, beginning after the last one that
// took part of fetch_max_total_bytes (so a budget that frees up goes round).
void fetch_all(consumer_pointer self) {
  auto& parts = self->state.parts;
  auto start = parts.upper_bound(self->state.kick_after);
  for (auto i = start; i != parts.end(); ++i)
    maybe_fetch(self, i->second);
  for (auto i = parts.begin(); i != start; ++i)
    maybe_fetch(self, i->second);
}

// -- commits ---------------------------------------------------------------------

std::vector<partition_offset> uncommitted(const consumer_state& st, bool all) {
  std::vector<partition_offset> out;
  for (auto& [tp, p] : st.parts)
    if (p.position.value >= 0 && (all || p.position != p.committed))
      out.push_back(partition_offset{tp.topic, tp.partition, p.position, ""});
  return out;
}

commit_offsets_request commit_request(consumer_state& st,
                                      std::vector<partition_offset> offsets) {
  commit_offsets_request req;
  req.group = st.cfg.group_id;
  req.group_instance_id = st.cfg.group_instance_id;
  req.offsets = std::move(offsets);
  // Group members commit as themselves; assign-mode consumers with a group
  // id commit as standalone (generation -1, no member id).
  // Numbered, so that a late copy (forwarded by a node that was then cut
  // off, after a later commit went through another node) is refused
  // instead of moving the offsets back (commit_offsets_request::sequence).
  if (st.group_mode) {
    req.member_id = st.member_id;
    req.generation = st.generation;
    req.sequence = ++st.commit_sequence;
  }
  return req;
}

void handle_group_error(consumer_pointer self, const caf::error& err);

/// One commit request was answered (or failed): once none is left, the
/// partitions waiting for their committed offsets ask for them.
void commit_answered(consumer_pointer self) {
  auto& st = self->state;
  if (--st.commits_in_flight == 0 && !st.stopping)
    resolve_positions(self);
}

/// Commits positions; `then` runs with the outcome (none on success).
template <class F>
void commit(consumer_pointer self, std::vector<partition_offset> offsets, F then) {
  auto& st = self->state;
  if (st.cfg.group_id.empty()) {
    then(make_error(ec::invalid_config, "commit needs a group.id"));
    return;
  }
  if (offsets.empty()) {
    then(caf::error{});
    return;
  }
  if (!st.broker) {
    then(make_error(ec::request_timed_out, "commit: not connected"));
    return;
  }
  st.last_commit = clock::now();
  auto req = commit_request(st, offsets);
  ++st.commits_in_flight;
  self->request(st.broker, st.cfg.request_timeout, commit_atom_v, std::move(req))
    .then(
      [self, offsets, then]() mutable {
        auto& st = self->state;
        for (auto& po : offsets)
          if (auto i = st.parts.find(topic_partition{po.topic, po.partition});
              i != st.parts.end())
            i->second.committed = po.committed;
        then(caf::error{});
        commit_answered(self);
      },
      [self, then, gen = st.group_gen](caf::error& err) mutable {
        auto& st = self->state;
        auto code = code_of(err);
        // Only a member still in the round it committed from reacts; a
        // commit racing a rejoin just fails.
        if ((code == ec::rebalance_in_progress || code == ec::illegal_generation
             || code == ec::unknown_member)
            && st.ph == phase::stable && gen == st.group_gen)
          handle_group_error(self, err);
        then(err);
        commit_answered(self);
      });
}

// -- group membership -----------------------------------------------------------------

void start_join(consumer_pointer self);

void drop_partition(consumer_state& st, const topic_partition& tp) {
  st.parts.erase(tp);
}

/// Eager protocols give every partition up before joining (committing first
/// when auto-commit is on); cooperative keeps them across the rebalance.
void revoke_for_join(consumer_pointer self, bool can_commit) {
  auto& st = self->state;
  if (cooperative(st) || st.parts.empty())
    return;
  if (can_commit && st.cfg.enable_auto_commit)
    commit(self, uncommitted(st, false), [](const caf::error&) {});
  st.parts.clear();
}

void apply_assignment(consumer_pointer self, std::vector<topic_partition> assigned) {
  auto& st = self->state;
  std::set<topic_partition> now{assigned.begin(), assigned.end()};
  std::vector<topic_partition> revoked;
  for (auto& [tp, p] : st.parts)
    if (now.count(tp) == 0)
      revoked.push_back(tp);
  if (!revoked.empty()) {
    if (st.cfg.enable_auto_commit) {
      std::vector<partition_offset> offsets;
      for (auto& tp : revoked) {
        auto& p = st.parts[tp];
        if (p.position.value >= 0 && p.position != p.committed)
          offsets.push_back(partition_offset{tp.topic, tp.partition, p.position, ""});
      }
      commit(self, std::move(offsets), [](const caf::error&) {});
    }
    for (auto& tp : revoked)
      drop_partition(st, tp);
    // Cooperative: the revoked partitions go to others in a second round.
    if (cooperative(st))
      st.rejoin_after_sync = true;
  }
  for (auto& tp : assigned)
    if (st.parts.count(tp) == 0) {
      auto& p = st.parts[tp];
      p.tp = tp;
    }
  resolve_positions(self);
}

void schedule_rejoin(consumer_pointer self, milliseconds delay) {
  auto& st = self->state;
  st.ph = phase::idle;
  ++st.group_gen;
  st.heartbeat_in_flight = false;
  st.join_retry_at = clock::now() + delay;
}

/// Reacts to a coordinator error on heartbeat, commit, join or sync.
void handle_group_error(consumer_pointer self, const caf::error& err) {
  auto& st = self->state;
  if (!st.group_mode || st.stopping)
    return;
  switch (code_of(err)) {
    case ec::rebalance_in_progress:
      if (st.ph == phase::stable) {
        revoke_for_join(self, true);
        schedule_rejoin(self, milliseconds{0});
        start_join(self);
      }
      return;
    case ec::unknown_member:
    case ec::illegal_generation:
      // Fenced: the partitions may be someone else's already; no commit.
      if (code_of(err) == ec::unknown_member)
        st.member_id.clear();
      st.generation = -1;
      st.parts.clear();
      schedule_rejoin(self, milliseconds{0});
      start_join(self);
      return;
    case ec::fenced_instance_id:
      st.fatal = err;
      st.parts.clear();
      schedule_rejoin(self, milliseconds{3600000});
      serve_waiters(self);
      return;
    default:
      return;
  }
}

void start_sync(consumer_pointer self) {
  auto& st = self->state;
  st.ph = phase::syncing;
  auto gen = st.group_gen;
  sync_group_request req{st.cfg.group_id, st.member_id, st.cfg.group_instance_id,
                         st.generation, {}};
  self->request(st.broker, st.cfg.max_poll_interval + st.cfg.request_timeout, sync_atom_v,
                std::move(req))
    .then(
      [self, gen](sync_group_response& resp) {
        auto& st = self->state;
        if (gen != st.group_gen || st.stopping)
          return;
        st.ph = phase::stable;
        st.generation = resp.generation;
        st.last_heartbeat = clock::now();
        st.rejoin_after_sync = false;
        apply_assignment(self, std::move(resp.assignment));
        if (st.rejoin_after_sync) {
          schedule_rejoin(self, milliseconds{0});
          start_join(self);
        }
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.group_gen || st.stopping)
          return;
        auto code = code_of(err);
        if (code == ec::rebalance_in_progress || code == ec::unknown_member
            || code == ec::illegal_generation || code == ec::fenced_instance_id) {
          st.ph = phase::stable; // so handle_group_error treats it as a rebalance
          handle_group_error(self, err);
          return;
        }
        schedule_rejoin(self, st.cfg.retry_backoff);
      });
}

void start_join(consumer_pointer self) {
  auto& st = self->state;
  if (!st.group_mode || !st.broker || st.stopping || st.ph != phase::idle
      || st.commit_before_join || clock::now() < st.join_retry_at)
    return;
  st.ph = phase::joining;
  auto gen = ++st.group_gen;
  join_group_request req;
  req.group = st.cfg.group_id;
  req.member_id = st.member_id;
  req.group_instance_id = st.cfg.group_instance_id;
  req.client_id = st.cfg.client_id;
  req.session_timeout_ms = static_cast<int32_t>(st.cfg.session_timeout.count());
  req.rebalance_timeout_ms = static_cast<int32_t>(st.cfg.max_poll_interval.count());
  req.assignors = st.cfg.assignors;
  req.topics = st.cfg.topics;
  for (auto& [tp, p] : st.parts)
    req.owned.push_back(tp);
  self->request(st.broker, st.cfg.max_poll_interval + st.cfg.request_timeout, join_atom_v,
                std::move(req))
    .then(
      [self, gen](join_group_response& resp) {
        auto& st = self->state;
        if (gen != st.group_gen || st.stopping)
          return;
        st.member_id = resp.member_id;
        st.generation = resp.generation;
        st.assignor = resp.assignor;
        start_sync(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.group_gen || st.stopping)
          return;
        auto code = code_of(err);
        st.ph = phase::idle;
        if (code == ec::unknown_member) {
          st.member_id.clear();
          st.join_retry_at = clock::now();
          start_join(self);
          return;
        }
        if (code == ec::fenced_instance_id || code == ec::invalid_config
            || code == ec::invalid_request || code == ec::policy_violation
            || code == ec::unknown_topic || code == ec::invalid_topic_name) {
          // Surface to poll, keep trying slowly (the topic may appear).
          st.fatal = code == ec::fenced_instance_id ? err : caf::error{};
          if (!st.fatal && !st.waiters.empty()) {
            st.waiters.front().rp.deliver(err);
            st.waiters.erase(st.waiters.begin());
          }
          st.join_retry_at = clock::now() + milliseconds{1000};
          return;
        }
        st.join_retry_at = clock::now() + st.cfg.retry_backoff;
      });
}

void heartbeat(consumer_pointer self) {
  auto& st = self->state;
  if (st.ph != phase::stable || st.heartbeat_in_flight || !st.broker)
    return;
  st.heartbeat_in_flight = true;
  st.last_heartbeat = clock::now();
  auto gen = st.group_gen;
  heartbeat_request req{st.cfg.group_id, st.member_id, st.cfg.group_instance_id,
                        st.generation};
  self->request(st.broker, std::min(st.cfg.session_timeout, st.cfg.request_timeout),
                heartbeat_atom_v, std::move(req))
    .then(
      [self, gen]() {
        auto& st = self->state;
        if (gen == st.group_gen)
          st.heartbeat_in_flight = false;
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.group_gen)
          return;
        st.heartbeat_in_flight = false;
        handle_group_error(self, err);
      });
}

/// After a reconnect: commits what poll returned (as the old member, or as
/// a standalone client when the coordinator forgot the member, which it
/// allows only while the group is empty, e.g. after a broker restart), then
/// rejoins. Without this the next owner would re-read those messages.
void commit_then_rejoin(consumer_pointer self) {
  auto& st = self->state;
  auto offsets = uncommitted(st, false);
  auto rejoin = [self] {
    auto& st = self->state;
    st.commit_before_join = false;
    revoke_for_join(self, false);
    start_join(self);
  };
  if (!st.cfg.enable_auto_commit || offsets.empty()) {
    rejoin();
    return;
  }
  st.commit_before_join = true;
  auto gen = st.conn_gen;
  commit(self, offsets, [self, offsets, gen, rejoin](const caf::error& err) {
    auto& st = self->state;
    if (gen != st.conn_gen)
      return;
    auto code = code_of(err);
    if (code != ec::unknown_member && code != ec::illegal_generation) {
      rejoin();
      return;
    }
    commit_offsets_request req;
    req.group = st.cfg.group_id;
    req.offsets = offsets;
    ++st.commits_in_flight;
    self->request(st.broker, st.cfg.request_timeout, commit_atom_v, std::move(req))
      .then(
        [self, gen, offsets, rejoin]() {
          auto& st = self->state;
          if (gen == st.conn_gen) {
            for (auto& po : offsets)
              if (auto i = st.parts.find(topic_partition{po.topic, po.partition});
                  i != st.parts.end())
                i->second.committed = po.committed;
            rejoin();
          }
          commit_answered(self);
        },
        [self, gen, rejoin](caf::error&) {
          if (gen == self->state.conn_gen)
            rejoin();
          commit_answered(self);
        });
  });
}

void send_leave(consumer_pointer self) {
  auto& st = self->state;
  if (!st.group_mode || !st.broker || st.member_id.empty()
      || !st.cfg.group_instance_id.empty())
    return;
  self->send(st.broker, leave_atom_v,
             leave_group_request{st.cfg.group_id, st.member_id, st.cfg.group_instance_id});
}

// -- standalone subscription ----------------------------------------------------------

void request_metadata(consumer_pointer self) {
  auto& st = self->state;
  if (st.group_mode || !st.cfg.partitions.empty() || st.metadata_requested || !st.broker
      || clock::now() < st.metadata_retry_at)
    return;
  st.metadata_requested = true;
  auto gen = st.conn_gen;
  self->request(st.broker, st.cfg.request_timeout, list_atom_v, topic_atom_v)
    .then(
      [self, gen](std::vector<topic_metadata>& topics) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.metadata_requested = false;
        std::map<std::string, int32_t> counts;
        for (auto& t : topics)
          counts[t.name] = t.partitions.empty() ? t.config.partitions
                                                : static_cast<int32_t>(t.partitions.size());
        for (auto& topic : st.cfg.topics) {
          auto i = counts.find(topic);
          if (i == counts.end()) {
            st.fatal = make_error(ec::unknown_topic, "topic '" + topic + "' does not exist");
            continue;
          }
          for (int32_t n = 0; n < i->second; ++n) {
            topic_partition tp{topic, partition_id{n}};
            if (st.parts.count(tp) == 0)
              st.parts[tp].tp = tp;
          }
        }
        if (st.fatal) {
          st.metadata_retry_at = clock::now() + milliseconds{1000};
          serve_waiters(self);
          st.fatal = caf::error{};
          return;
        }
        resolve_positions(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.metadata_requested = false;
        st.metadata_retry_at = clock::now() + st.cfg.retry_backoff;
      });
}

bool needs_metadata(const consumer_state& st) {
  if (st.group_mode || !st.cfg.partitions.empty())
    return false;
  std::set<std::string> have;
  for (auto& [tp, p] : st.parts)
    have.insert(tp.topic);
  for (auto& t : st.cfg.topics)
    if (have.count(t) == 0)
      return true;
  return false;
}

// -- fetch routing -------------------------------------------------------------------

/// Asks the bootstrap node for the partition leaders, then for where the
/// nodes are reached; closes links no partition of ours is led through.
void refresh_leaders(consumer_pointer self) {
  auto& st = self->state;
  st.leaders_wanted = true;
  if (!st.links.enabled() || !st.broker || st.leaders_requested)
    return;
  st.leaders_requested = true;
  st.leaders_wanted = false;
  auto gen = st.conn_gen;
  auto failed = [self, gen](caf::error&) {
    auto& st = self->state;
    if (gen != st.conn_gen)
      return;
    st.leaders_requested = false;
    st.leaders_wanted = true; // again on a later tick
  };
  self->request(st.broker, st.cfg.request_timeout, list_atom_v, topic_atom_v)
    .then(
      [self, gen, failed](std::vector<topic_metadata>& topics) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.links.set_leaders(topics);
        self->request(st.broker, st.cfg.request_timeout, list_atom_v, broker_atom_v)
          .then(
            [self, gen](std::vector<node_info>& nodes) {
              auto& st = self->state;
              if (gen != st.conn_gen)
                return;
              st.leaders_requested = false;
              st.leaders_at = clock::now();
              st.links.set_nodes(nodes);
              std::set<topic_partition> parts;
              std::set<int32_t> busy;
              for (auto& [tp, p] : st.parts) {
                parts.insert(tp);
                if (p.fetching && p.via >= 0)
                  busy.insert(p.via);
              }
              st.links.prune(parts, busy);
              fetch_all(self);
            },
            failed);
      },
      failed);
}

// -- timer -------------------------------------------------------------------------

void on_tick(consumer_pointer self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  auto now = clock::now();
  if (st.broker) {
    if (st.group_mode) {
      if (st.ph == phase::idle && !st.left_for_poll_timeout)
        start_join(self);
      if (st.ph == phase::stable && now - st.last_heartbeat >= st.cfg.heartbeat_interval)
        heartbeat(self);
      if (st.ph == phase::stable && now - st.last_poll > st.cfg.max_poll_interval) {
        // The application stopped polling: give the partitions to others.
        if (st.cfg.enable_auto_commit)
          commit(self, uncommitted(st, false), [](const caf::error&) {});
        send_leave(self);
        st.parts.clear();
        st.member_id.clear();
        schedule_rejoin(self, milliseconds{0});
        st.left_for_poll_timeout = true;
      }
    } else if (needs_metadata(st)) {
      request_metadata(self);
    }
    if (st.leaders_wanted || now - st.leaders_at >= st.cfg.metadata_max_age)
      refresh_leaders(self);
    resolve_positions(self);
    fetch_all(self);
    if (st.cfg.enable_auto_commit && !st.cfg.group_id.empty()
        && now - st.last_commit >= st.cfg.auto_commit_interval
        && (!st.group_mode || st.ph == phase::stable))
      commit(self, uncommitted(st, false), [](const caf::error&) {});
  }
  self->delayed_send(self, tick_period, tick_atom_v);
}

// -- the actor ---------------------------------------------------------------------

consumer_impl::behavior_type consumer(consumer_pointer self, consumer_config cfg,
                                      connection_actor conn, bool owns_conn) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.conn = conn;
  st.group_mode = st.cfg.partitions.empty() && !st.cfg.group_id.empty();
  for (auto& tp : st.cfg.partitions)
    st.parts[tp].tp = tp;
  st.links = leader_links{st.cfg.route_to_leaders};
  self->attach_functor(st.links.stopper());
  if (owns_conn)
    self->attach_functor([conn](const caf::error&) { caf::anon_send(conn, stop_atom_v); });
  self->send(conn, subscribe_atom_v, caf::actor_cast<connection_listener>(self));
  self->delayed_send(self, tick_period, tick_atom_v);
  return {
    [self](poll_atom, int32_t max_wait) -> caf::result<std::vector<consumed_message>> {
      auto& st = self->state;
      st.last_poll = clock::now();
      if (st.left_for_poll_timeout) {
        st.left_for_poll_timeout = false;
        start_join(self);
      }
      if (auto err = take_error(st))
        return err;
      auto msgs = take(self);
      if (!msgs.empty() || max_wait <= 0)
        return msgs;
      auto rp = self->make_response_promise<std::vector<consumed_message>>();
      auto id = st.next_waiter++;
      st.waiters.push_back(poll_waiter{rp, id});
      self->delayed_send(self, milliseconds{max_wait}, expire_atom_v, id);
      return rp;
    },
    [self](commit_atom) -> caf::result<bool> {
      auto& st = self->state;
      auto rp = self->make_response_promise<bool>();
      commit(self, uncommitted(st, true), [rp](const caf::error& err) mutable {
        if (err)
          rp.deliver(err);
        else
          rp.deliver(true);
      });
      return rp;
    },
    [self](seek_atom, topic_partition& tp, offset off) {
      auto& st = self->state;
      auto i = st.parts.find(tp);
      if (i == st.parts.end()) {
        st.pending_seeks[tp] = off;
        return;
      }
      auto& p = i->second;
      p.error = caf::error{};
      if (off.value >= 0) {
        set_position(self, p, off);
        return;
      }
      p.position = offset{-1};
      p.fetch_at = offset{-1};
      p.buffer.clear();
      p.buffered_bytes = 0;
      p.fetching = false;
      lookup_offset(self, p, off.value);
    },
    [self](assign_atom) -> std::vector<topic_partition> {
      std::vector<topic_partition> out;
      for (auto& [tp, p] : self->state.parts)
        out.push_back(tp);
      return out;
    },
    [self](tick_atom) { on_tick(self); },
    [self](stop_atom) -> caf::result<bool> {
      auto& st = self->state;
      if (st.stopping)
        return true;
      auto rp = self->make_response_promise<bool>();
      auto finish = [self, rp]() mutable {
        send_leave(self);
        auto& st = self->state;
        st.stopping = true;
        for (auto& w : st.waiters)
          w.rp.deliver(std::vector<consumed_message>{});
        st.waiters.clear();
        rp.deliver(true);
        self->quit();
      };
      bool can_commit = st.cfg.enable_auto_commit && !st.cfg.group_id.empty() && st.broker
                        && (!st.group_mode || st.ph == phase::stable);
      if (!can_commit) {
        finish();
        return rp;
      }
      commit(self, uncommitted(st, false), [finish](const caf::error&) mutable { finish(); });
      return rp;
    },
    [self](connect_atom, broker_actor& hdl) {
      auto& st = self->state;
      auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (from && from != st.conn.address()) {
        // A leader link connected or lost its node (or closed since).
        bool lost = !hdl;
        auto node = st.links.on_connect(from, std::move(hdl));
        if (!node)
          return;
        if (lost) {
          // The fetches in flight there are void: fetched again elsewhere.
          for (auto& [tp, p] : st.parts)
            if (p.fetching && p.via == *node && !p.resolving) {
              renew_epoch(st, p);
              p.fetching = false;
            }
          refresh_leaders(self); // the leaders may have moved
        }
        fetch_all(self);
        return;
      }
      ++st.conn_gen;
      st.commit_before_join = false;
      st.metadata_requested = false;
      st.leaders_requested = false;
      st.leaders_wanted = true;
      for (auto& [tp, p] : st.parts) {
        renew_epoch(st, p); // replies from the old connection are void
        p.fetching = false;
        p.resolving = false;
      }
      if (!hdl) {
        st.broker = nullptr;
        if (st.group_mode && st.ph != phase::idle)
          schedule_rejoin(self, milliseconds{0});
        return;
      }
      st.broker = std::move(hdl);
      if (st.group_mode) {
        if (st.ph != phase::idle)
          schedule_rejoin(self, milliseconds{0});
        commit_then_rejoin(self);
      } else {
        request_metadata(self);
      }
      refresh_leaders(self);
      resolve_positions(self);
      fetch_all(self);
    },
    [self](expire_atom, uint64_t id) {
      auto& st = self->state;
      auto i = std::find_if(st.waiters.begin(), st.waiters.end(),
                            [id](const poll_waiter& w) { return w.id == id; });
      if (i == st.waiters.end())
        return;
      if (auto err = take_error(st))
        i->rp.deliver(err);
      else
        i->rp.deliver(take(self));
      st.waiters.erase(i);
    },
  };
}

} // namespace

caf::expected<consumer_actor> spawn_consumer(caf::actor_system& sys,
                                             consumer_config cfg,
                                             connection_actor conn) {
  if (auto err = validate(cfg))
    return err;
  if (!conn)
    return make_error(ec::invalid_argument, "spawn_consumer: no connection");
  consumer_actor hdl = sys.spawn(consumer, std::move(cfg), std::move(conn), false);
  return hdl;
}

caf::expected<consumer_actor> spawn_consumer(caf::actor_system& sys,
                                             consumer_config cfg) {
  if (auto err = validate(cfg))
    return err;
  auto addr = parse_broker_address(cfg.bootstrap);
  if (!addr)
    return std::move(addr.error());
  auto conn = spawn_connection(sys, std::move(*addr));
  consumer_actor hdl = sys.spawn(consumer, std::move(cfg), std::move(conn), true);
  return hdl;
}

} // namespace ferry
