#include "actors/server/queue_coordinator.hpp"

#include "actors/server/offset_lookup.hpp"
#include "actors/server/record_time.hpp"

#include "broker/big_endian.hpp"
#include "broker/consumer_state.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/producer_state.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/start_position.hpp"
#include "broker/topic_config.hpp"
#include "metrics/group_probe.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/system_messages.hpp>
#include <caf/unit.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <functional>
#include <limits>
#include <set>
#include <type_traits>
#include <utility>

namespace ferry {

// -- encodings ------------------------------------------------------------------

namespace {

std::string producer_key(std::string_view group, std::string_view topic,
                         partition_id p) {
  return queue_state_format::producer_key(group, topic, p);
}

std::string encode_producer(const dlq_producer& x) {
  std::string out;
  out.push_back(static_cast<char>(queue_group_format::producer_value_version));
  be::append(out, x.pid.value);
  be::append(out, x.epoch);
  be::append(out, x.dlq_partition.value);
  be::append(out, x.last_offset.value);
  be::append(out, x.last_seq);
  return out;
}

caf::expected<dlq_producer> decode_producer(std::string_view v) {
  be::reader rd{v};
  auto version = rd.get<uint8_t>();
  dlq_producer x;
  x.pid = producer_id{rd.get<int64_t>()};
  x.epoch = rd.get<int16_t>();
  x.dlq_partition = partition_id{rd.get<int32_t>()};
  x.last_offset = offset{rd.get<int64_t>()};
  x.last_seq = rd.get<int32_t>();
  if (!rd.done() || version != queue_group_format::producer_value_version)
    return make_error(ec::corrupt_segment,
                      "queue DLQ producer row: bad value of "
                        + std::to_string(v.size()) + " bytes");
  return x;
}

} // namespace

namespace queue_group_format {

std::string encode_group_value(const queue_group_config& x) {
  std::string out;
  out.push_back(static_cast<char>(group_value_version));
  be::append(out, x.max_attempts);
  be::append(out, x.initial_backoff_ms);
  be::append(out, x.max_backoff_ms);
  be::append(out, std::bit_cast<uint64_t>(x.backoff_multiplier));
  be::append(out, std::bit_cast<uint64_t>(x.jitter));
  be::append(out, x.visibility_timeout_ms);
  out.push_back(static_cast<char>(x.ordering == "key" ? 1 : 0));
  be::append(out, static_cast<uint16_t>(x.dlq_topic.size()));
  out.append(x.dlq_topic);
  if (x.start != start_earliest || x.delay_ms != 0) {
    // version 2: the start position and the delivery delay follow
    out[0] = static_cast<char>(group_value_version_start);
    be::append(out, x.start);
    be::append(out, x.delay_ms);
  }
  return out;
}

caf::expected<queue_group_config> decode_group_value(std::string_view value) {
  be::reader rd{value};
  auto version = rd.get<uint8_t>();
  queue_group_config x;
  x.max_attempts = rd.get<int32_t>();
  x.initial_backoff_ms = rd.get<int64_t>();
  x.max_backoff_ms = rd.get<int64_t>();
  x.backoff_multiplier = std::bit_cast<double>(rd.get<uint64_t>());
  x.jitter = std::bit_cast<double>(rd.get<uint64_t>());
  x.visibility_timeout_ms = rd.get<int64_t>();
  auto ordering = rd.get<uint8_t>();
  auto len = rd.get<uint16_t>();
  x.dlq_topic = rd.bytes(len);
  if (version == group_value_version_start) {
    x.start = rd.get<int64_t>();
    x.delay_ms = rd.get<int64_t>();
  }
  if (!rd.done()
      || (version != group_value_version
          && version != group_value_version_start)
      || ordering > 1 || validate_start_position(x.start) || x.delay_ms < 0)
    return make_error(ec::corrupt_segment,
                      "queue group config: bad value of "
                        + std::to_string(value.size()) + " bytes");
  x.ordering = ordering == 1 ? "key" : "none";
  return x;
}

} // namespace queue_group_format

namespace qgf = queue_group_format;

caf::error validate(const queue_group_config& x) {
  if (x.mode != "queue")
    return make_error(ec::invalid_config,
                      "mode '" + x.mode
                        + "': only queue groups are created explicitly "
                          "(stream groups exist once a member joins)");
  if (auto o = parse_queue_ordering(x.ordering); !o)
    return make_error(ec::invalid_config,
                      "ordering '" + x.ordering + "' is not none or key");
  if (x.initial_backoff_ms < 0 || x.max_backoff_ms < 0
      || x.visibility_timeout_ms <= 0)
    return make_error(ec::invalid_config,
                      "backoffs must be >= 0 and the visibility timeout > 0");
  if (auto err = to_lease_table_config(x).validate())
    return err;
  if (!x.dlq_topic.empty())
    if (auto err = validate_topic_name(x.dlq_topic))
      return make_error(ec::invalid_config,
                        "dlq topic: " + describe(err));
  if (x.delay_ms < 0 || x.delay_ms > max_delivery_delay_ms)
    return make_error(ec::invalid_config,
                      "delay_ms " + std::to_string(x.delay_ms)
                        + " is outside [0, "
                        + std::to_string(max_delivery_delay_ms) + "]");
  return validate_start_position(x.start);
}

lease_table_config to_lease_table_config(const queue_group_config& x) {
  using std::chrono::milliseconds;
  lease_table_config out;
  out.retry.max_attempts = x.max_attempts;
  out.retry.initial_backoff = milliseconds{x.initial_backoff_ms};
  out.retry.max_backoff = milliseconds{x.max_backoff_ms};
  out.retry.multiplier = x.backoff_multiplier;
  out.retry.jitter = x.jitter;
  out.retry.visibility_timeout = milliseconds{x.visibility_timeout_ms};
  out.ordering = x.ordering == "key" ? queue_ordering::key
                                     : queue_ordering::none;
  return out;
}

std::string dlq_topic_of(const queue_group_config& x, std::string_view topic,
                         std::string_view group) {
  if (!x.dlq_topic.empty())
    return x.dlq_topic;
  return default_dlq_topic(topic, group);
}

caf::error save_queue_group(metadata_store& store, std::string_view group,
                            const queue_group_config& x) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "queue group name must be non-empty without NUL");
  return store.put(qgf::groups_db, group, qgf::encode_group_value(x));
}

caf::expected<std::map<std::string, queue_group_config>>
load_queue_groups(metadata_store& store) {
  std::map<std::string, queue_group_config> out;
  caf::error bad;
  auto err = store.scan_prefix(qgf::groups_db, "",
                               [&](std::string_view k, std::string_view v) {
                                 auto x = qgf::decode_group_value(v);
                                 if (!x) {
                                   bad = make_error(
                                     ec::corrupt_segment,
                                     "queue group " + std::string{k} + ": "
                                       + describe(x.error()));
                                   return false;
                                 }
                                 out.emplace(std::string{k}, std::move(*x));
                                 return true;
                               });
  if (err)
    return err;
  if (bad)
    return bad;
  return out;
}

caf::error erase_queue_group(metadata_store& store, std::string_view group) {
  return queue_state_store{store}.erase_group_all(group);
}

caf::expected<std::optional<queue_group_config>>
load_queue_group(metadata_store& store, std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "queue group name must be non-empty without NUL");
  auto v = store.get(qgf::groups_db, group);
  if (!v) {
    if (is(v.error(), ec::not_found))
      return std::optional<queue_group_config>{};
    return std::move(v.error());
  }
  auto x = qgf::decode_group_value(*v);
  if (!x)
    return make_error(ec::corrupt_segment, "queue group " + std::string{group}
                                             + ": " + describe(x.error()));
  return std::optional<queue_group_config>{std::move(*x)};
}

// -- the actor ------------------------------------------------------------------

namespace {

using self_ptr
  = queue_coordinator_actor::stateful_pointer<queue_coordinator_state>;
using std::chrono::milliseconds;

caf::timespan ms_span(int64_t x) {
  return std::chrono::duration_cast<caf::timespan>(milliseconds{x});
}

int64_t span_ms(caf::timespan x) {
  return std::chrono::duration_cast<milliseconds>(x).count();
}

timestamp_ms now_ms(self_ptr self) {
  auto& c = self->state.cfg.clock;
  return c ? c() : system_now_ms();
}

std::string tp_text(const topic_partition& x) {
  return x.topic + "-" + std::to_string(x.partition.value);
}

template <class... Ts>
void send_self(self_ptr self, caf::timespan after, Ts&&... xs) {
  self->delayed_send(caf::actor_cast<queue_coordinator_actor>(self), after,
                     std::forward<Ts>(xs)...);
}

// Cluster mode: state goes through __consumer_state first.
bool cluster(self_ptr self) {
  return !self->state.cfg.state_topic.empty();
}

// Cluster mode: produces `recs` (in order, one batch) to the group's
// __consumer_state partition with acks=all; then done(error).
template <class F>
void replicate(self_ptr self, const std::vector<consumer_state_record>& recs,
               F done) {
  auto& st = self->state;
  if (!st.cfg.broker) {
    done(make_error(ec::coordinator_not_available, "no broker"));
    return;
  }
  auto batch = make_consumer_state_batch(recs, now_ms(self));
  if (!batch) {
    done(std::move(batch.error()));
    return;
  }
  produce_request pr;
  pr.topic = st.cfg.state_topic;
  pr.partition = st.cfg.state_partition;
  pr.acks = acks_mode::all;
  pr.batch = std::move(*batch);
  self
    ->request(st.cfg.broker, st.cfg.broker_timeout, produce_atom_v,
              std::move(pr))
    .then([done](produce_response&) mutable { done(caf::error{}); },
          [done](caf::error& err) mutable { done(std::move(err)); });
}

caf::error check_group(self_ptr self, const std::string& group) {
  if (group != self->state.cfg.group)
    return make_error(ec::invalid_request,
                      "request for group '" + group
                        + "' reached the queue coordinator of '"
                        + self->state.cfg.group + "'");
  return caf::none;
}

// The partition an async reply belongs to, unless it is gone or re-created.
queue_partition_state* find_part(self_ptr self, const topic_partition& key,
                                 uint64_t incarnation) {
  auto& ps = self->state.partitions;
  auto i = ps.find(key);
  if (i == ps.end() || i->second.incarnation != incarnation
      || !i->second.table)
    return nullptr;
  return &i->second;
}

size_t record_bytes(const record& r) {
  size_t n = 64;
  if (r.key)
    n += r.key->size();
  if (r.value)
    n += r.value->size();
  for (auto& h : r.headers)
    n += h.key.size() + (h.value ? h.value->size() : 0);
  return n;
}

void uncache(queue_partition_state& p, offset off) {
  auto i = p.cache.find(off);
  if (i == p.cache.end())
    return;
  p.cached_bytes -= std::min(p.cached_bytes, record_bytes(i->second));
  p.cache.erase(i);
}

// Drops the contents of records below the committed position.
void prune(queue_partition_state& p) {
  auto committed = p.table->committed();
  while (!p.cache.empty() && p.cache.begin()->first < committed)
    uncache(p, p.cache.begin()->first);
}

// The contents of records read while they only wait (a delivery time, or
// parked behind their key) are kept in the first half of the cache budget;
// past it they are not kept and are read again when the record may be
// leased (maybe_reload), so waiting records never pause the reader. (Records
// waiting for a retry keep theirs: they were leased a moment ago.)
bool keep_contents(self_ptr self, const queue_partition_state& p, offset off) {
  return p.cached_bytes < self->state.cfg.max_cached_bytes / 2
         || p.table->waiting() == 0 || !p.table->waits(off);
}

// True if some tracked record's contents are not cached (the cache holds
// tracked records only).
bool contents_missing(const queue_partition_state& p) {
  return p.cache.size() < p.table->not_done();
}

void schedule_timer(self_ptr self);
bool topic_read(self_ptr self, const std::string& topic);
bool topics_read(self_ptr self, const std::vector<std::string>& topics);
void maybe_fetch(self_ptr self, queue_partition_state& p);
void maybe_reload(self_ptr self, queue_partition_state& p, timestamp_ms now);
void on_reloaded(self_ptr self, queue_partition_state& p, offset from,
                 fetch_response& resp);
void reload_below_log_start(self_ptr self, queue_partition_state& p,
                            offset from);
void pump_dlq(self_ptr self, queue_partition_state& p);
void serve_waiters(self_ptr self, timestamp_ms now);

void schedule_flush(self_ptr self) {
  auto& st = self->state;
  if (st.flush_scheduled)
    return;
  st.flush_scheduled = true;
  self->send(caf::actor_cast<queue_coordinator_actor>(self), flush_atom_v);
}

void mark_dirty(self_ptr self, queue_partition_state& p) {
  p.dirty = true;
  schedule_flush(self);
}

// Ends the partition's due leases as failed attempts.
void expire_partition(self_ptr self, queue_partition_state& p,
                      timestamp_ms now) {
  auto ex = p.table->expire(now);
  if (ex.empty())
    return;
  auto& st = self->state;
  size_t dead = 0;
  for (auto& x : ex)
    if (x.result.outcome == failure_outcome::dead_letter)
      ++dead;
  log::debug("queue group {}: {} leases on {} expired ({} to the DLQ)",
             st.cfg.group, ex.size(), tp_text(p.key), dead);
  if (st.cfg.probe)
    st.cfg.probe->lease_expired(p.key.topic, ex.size());
  mark_dirty(self, p);
}

// -- timer ------------------------------------------------------------------------

void schedule_timer(self_ptr self) {
  auto& st = self->state;
  std::optional<timestamp_ms> due;
  auto consider = [&](std::optional<timestamp_ms> t) {
    if (t && *t > 0 && (!due || *t < *due))
      due = t;
  };
  for (auto& [key, p] : st.partitions) {
    if (!p.table)
      continue;
    consider(p.table->next_deadline());
    consider(p.table->next_retry());
    consider(p.fetch_retry_at);
    consider(p.dlq_retry_at);
    consider(p.reload_retry_at);
  }
  // A waiter on a topic not read yet is woken by the read (mark_read).
  for (auto& [id, w] : st.waiters)
    if (topics_read(self, w.request.topics))
      consider(w.deadline);
  consider(st.flush_retry_at);
  if (!due)
    return;
  if (st.timer_at != 0 && st.timer_at <= *due)
    return; // the pending tick comes first and reschedules
  st.timer_at = *due;
  ++st.timer_token;
  auto delay = std::max<timestamp_ms>(*due - now_ms(self), 0);
  send_self(self, ms_span(delay), tick_atom_v, st.timer_token);
}

// -- partitions -----------------------------------------------------------------

uint64_t partition_seed(uint64_t seed, const topic_partition& key) {
  if (seed == 0)
    return 0;
  auto h = std::hash<std::string>{}(key.topic) * 1000003u
           + static_cast<uint64_t>(key.partition.value) + 1;
  auto s = seed ^ (h * 0x9e3779b97f4a7c15ull);
  return s == 0 ? 1 : s;
}

// Opens a partition from the store, or from `snap` (cluster-mode alter:
// the table's own state, which the store may not have yet).
void open_partition(self_ptr self, const topic_partition& key,
                    const queue_snapshot* snap = nullptr) {
  auto& st = self->state;
  if (st.partitions.count(key) > 0)
    return;
  auto tc = st.table_cfg;
  tc.seed = partition_seed(st.cfg.seed, key);
  bool fresh = false; // no state: a new table
  caf::expected<lease_table> t{make_error(ec::invalid_argument)};
  if (snap != nullptr) {
    t = lease_table::restore(tc, *snap);
  } else if (auto loaded = st.queue_store->load(st.cfg.group, key.topic,
                                                key.partition);
             !loaded) {
    t = std::move(loaded.error());
  } else if (*loaded) {
    t = lease_table::restore(tc, **loaded);
  } else {
    fresh = true;
    t = lease_table::make(tc, offset{0});
  }
  if (!t) {
    log::error("queue group {}: cannot open the state of {}: {}",
               st.cfg.group, tp_text(key), t.error());
    return;
  }
  auto& p = st.partitions[key];
  p.key = key;
  p.incarnation = st.next_incarnation++;
  p.table = std::move(*t);
  if (snap != nullptr)
    p.table->mark_all_dirty(); // rewrite it whole under the new config
  p.fetch_at = p.table->read_end();
  p.dlq_topic = dlq_topic_of(st.cfg.settings, key.topic, st.cfg.group);
  auto row = st.cfg.store->get(qgf::producers_db,
                               producer_key(st.cfg.group, key.topic,
                                            key.partition));
  if (row) {
    if (auto x = decode_producer(*row))
      p.producer = *x;
    else
      log::error("queue group {}: DLQ producer of {}: {}", st.cfg.group,
                 tp_text(key), x.error());
  } else if (!is(row.error(), ec::not_found)) {
    log::error("queue group {}: cannot read the DLQ producer of {}: {}",
               st.cfg.group, tp_text(key), row.error());
  }
  auto s = p.table->stats();
  if (s.committed.value > 0 || s.tracked > 0)
    log::info("queue group {}: {} resumes at {} ({} leased, {} retrying, {} "
              "pending dead-letter)",
              st.cfg.group, tp_text(key), s.committed, s.leased,
              s.tracked - s.done - s.leased - s.dead_letter, s.dead_letter);
  // The group's start position applies to the partitions of a topic it
  // reads for the first time; the position is stored once resolved (a
  // restart before that resolves it again).
  if (fresh && st.settings_start() != start_earliest
      && (key.topic == st.first_read_topic
          || st.start_pending_again.count(key) > 0)) {
    p.start_pending = true;
  } else if (p.table->has_changes()) {
    mark_dirty(self, p);
  }
  maybe_fetch(self, p);
}

// Forgets a partition whose topic is gone, with its stored state.
void drop_partition(self_ptr self, const topic_partition& key) {
  auto& st = self->state;
  st.partitions.erase(key);
  if (cluster(self)) {
    consumer_state_record r;
    r.kind = consumer_state_kind::queue_partition_erase;
    r.group = st.cfg.group;
    r.topic = key.topic;
    r.partition = key.partition;
    replicate(self, {r}, [self, key](caf::error err) {
      auto& st = self->state;
      if (!err)
        err = st.queue_store->erase_partition_all(st.cfg.group, key.topic,
                                                  key.partition);
      if (err)
        log::error("queue group {}: cannot erase the state of {}: {}",
                   st.cfg.group, tp_text(key), err);
    });
  } else if (auto err = st.queue_store->erase_partition_all(
               st.cfg.group, key.topic, key.partition)) {
    log::error("queue group {}: cannot erase the state of {}: {}",
               st.cfg.group, tp_text(key), err);
  }
  if (st.cfg.probe)
    st.cfg.probe->forget(key.topic, key.partition);
  log::info("queue group {}: {} is gone; its queue state was erased",
            st.cfg.group, tp_text(key));
}

// Brings the partitions of active topics in line with the topic list.
void reconcile(self_ptr self) {
  auto& st = self->state;
  if (st.topics_known) {
    std::vector<topic_partition> gone;
    for (auto& [key, p] : st.partitions)
      if (st.topics.count(key.topic) == 0)
        gone.push_back(key);
    for (auto& key : gone) {
      drop_partition(self, key);
      st.active.erase(key.topic);
    }
    for (auto i = st.waiters.begin(); i != st.waiters.end();) {
      auto& ts = i->second.request.topics;
      auto g = std::find_if(ts.begin(), ts.end(), [&](const std::string& t) {
        return st.topics.count(t) == 0;
      });
      if (g != ts.end()) {
        i->second.promise.deliver(
          make_error(ec::unknown_topic, "topic " + *g + " was deleted"));
        i = st.waiters.erase(i);
      } else {
        ++i;
      }
    }
  }
  for (auto& topic : st.active) {
    auto t = st.topics.find(topic);
    if (t == st.topics.end())
      continue;
    for (auto& pa : t->second.partitions)
      open_partition(self, topic_partition{topic, pa.partition});
  }
}

caf::error activate(self_ptr self, const std::string& topic) {
  auto& st = self->state;
  if (st.topics.count(topic) == 0) {
    bool stored = false;
    for (auto& [key, p] : st.partitions)
      if (key.topic == topic)
        stored = true;
    if (!stored || st.topics_known)
      return make_error(ec::unknown_topic,
                        "topic " + topic + " does not exist");
  }
  if (st.active.insert(topic).second) {
    // No stored state on any partition (else the topic was active from the
    // start): the group reads it for the first time.
    st.first_read_topic = topic;
    reconcile(self);
    st.first_read_topic.clear();
  }
  return caf::none;
}

// -- reader ---------------------------------------------------------------------

// Every partition of the topic answered its first fetch (or failed it).
bool topic_read(self_ptr self, const std::string& topic) {
  auto& ps = self->state.partitions;
  for (auto i = ps.lower_bound(topic_partition{topic, partition_id{0}});
       i != ps.end() && i->first.topic == topic; ++i)
    if (i->second.table && !i->second.read_once)
      return false;
  return true;
}

bool topics_read(self_ptr self, const std::vector<std::string>& topics) {
  for (auto& t : topics)
    if (!topic_read(self, t))
      return false;
  return true;
}

// The partition's first fetch is over: receives waiting for it may answer.
void mark_read(self_ptr self, queue_partition_state& p) {
  if (p.read_once)
    return;
  p.read_once = true;
  serve_waiters(self, now_ms(self));
}

void fetch_failed(self_ptr self, queue_partition_state& p, caf::error err) {
  auto& st = self->state;
  mark_read(self, p);
  if (!p.fetch_failing)
    log::warn("queue group {}: cannot read {} at {}: {}; retrying",
              st.cfg.group, tp_text(p.key), p.fetch_at, err);
  p.fetch_failing = true;
  p.fetch_retry_at = now_ms(self) + span_ms(st.cfg.retry_backoff);
  schedule_timer(self);
}

// The delivery delay of a record: its "ferry-delay-ms" header, else the
// group's delay_ms. A header that is not a number in [0, 12 h] is logged
// (once per partition) and the group's delay applies.
int64_t delivery_delay(self_ptr self, queue_partition_state& p,
                       const record& r) {
  auto& st = self->state;
  for (auto& h : r.headers) {
    if (h.key != delay_header || !h.value)
      continue;
    int64_t v = -1;
    auto& text = *h.value;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc{} && end == text.data() + text.size() && v >= 0
        && v <= max_delivery_delay_ms)
      return v;
    if (!p.bad_delay_logged) {
      p.bad_delay_logged = true;
      log::warn("queue group {}: {} has a {} header '{}' that is not ms in "
                "[0, {}]; the group's delay ({} ms) applies",
                st.cfg.group, tp_text(p.key), delay_header, text.substr(0, 40),
                max_delivery_delay_ms, st.cfg.settings.delay_ms);
    }
    break;
  }
  return st.cfg.settings.delay_ms;
}

void on_fetched(self_ptr self, queue_partition_state& p,
                fetch_response& resp) {
  auto& st = self->state;
  auto from = p.fetch_at;
  std::string_view data = resp.data;
  std::vector<std::pair<offset, record>> recs;
  offset next = from;
  size_t pos = 0;
  caf::error bad;
  // Decode no more than the table takes (a window with little room would
  // otherwise decode a whole fetch to keep a few records of it).
  auto room = p.table->room();
  while (pos < data.size() && recs.size() < room) {
    auto hdr = parse_batch_header(data.substr(pos));
    if (!hdr) {
      // A fetch may end inside a batch that did not fit max_bytes.
      if (!is(hdr.error(), ec::truncated_batch) || pos == 0)
        bad = std::move(hdr.error());
      break;
    }
    auto size = hdr->total_size();
    auto dec = decode_batch(data.substr(pos, size));
    if (!dec) {
      bad = std::move(dec.error());
      break;
    }
    pos += size;
    if (!hdr->control())
      for (auto& r : dec->records) {
        auto off = hdr->base_offset + r.offset_delta;
        if (off < from || off < p.table->read_end())
          continue; // the batch started before the requested offset
        recs.emplace_back(off, std::move(r));
      }
    next = std::max(next, hdr->next_offset());
  }
  // Nothing returned, but the broker moved on (records gone to compaction,
  // control records). Not when records came and none was decoded: the
  // window may have filled while the fetch was out (records that waited
  // came due), and those records are read again later.
  if (data.empty() && !bad && resp.next_offset > from)
    next = resp.next_offset;
  p.high_watermark = resp.high_watermark;
  std::vector<queue_candidate> cs;
  cs.reserve(recs.size());
  for (auto& [off, r] : recs) {
    queue_candidate c;
    c.off = off;
    if (r.key)
      c.key = std::string_view{*r.key};
    c.timestamp = r.timestamp;
    if (auto d = delivery_delay(self, p, r); d > 0)
      c.deliver_at = r.timestamp + d;
    cs.push_back(c);
  }
  size_t taken = 0;
  if (auto n = p.table->offer(cs))
    taken = *n;
  else
    bad = std::move(n.error());
  for (size_t i = 0; i < taken; ++i) {
    // Done already (a restored done row): nothing to deliver. The cache
    // holds tracked records only, so its size tells maybe_reload whether
    // any contents are missing.
    if (!p.table->tracks(recs[i].first))
      continue;
    if (!keep_contents(self, p, recs[i].first))
      continue; // read again when it may be leased
    p.cached_bytes += record_bytes(recs[i].second);
    p.cache.emplace(recs[i].first, std::move(recs[i].second));
  }
  if (taken == recs.size())
    p.fetch_at = std::max(next, p.table->read_end());
  else
    p.fetch_at = recs[taken].first; // the window is full: read it again later
  if (p.table->has_changes())
    mark_dirty(self, p);
  prune(p);
  auto now = now_ms(self);
  if (bad) {
    fetch_failed(self, p, std::move(bad));
  } else if (p.fetch_failing) {
    p.fetch_failing = false;
    log::info("queue group {}: reading {} works again", st.cfg.group,
              tp_text(p.key));
  }
  if (taken > 0)
    serve_waiters(self, now);
  mark_read(self, p);
  pump_dlq(self, p);
  maybe_fetch(self, p);
  schedule_timer(self);
}

// One offset lookup for the partition's reader (which counts as fetching
// meanwhile); `then` gets the partition and the offset if it still exists,
// a failure retries like a failed fetch.
template <class F>
void reader_lookup(self_ptr self, queue_partition_state& p, int64_t timestamp,
                   F then) {
  auto& st = self->state;
  p.fetching = true;
  auto key = p.key;
  auto inc = p.incarnation;
  list_offsets_request req{key.topic, key.partition, timestamp};
  self->request(st.cfg.broker, st.cfg.broker_timeout, offsets_atom_v, req)
    .then(
      [self, key, inc, then](offset found) mutable {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->fetching = false;
        then(*p, found);
      },
      [self, key, inc](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->fetching = false;
        fetch_failed(self, *p, std::move(err));
      });
}

// A partition the group reads for the first time begins at the group's
// start position (latest, or a time): one offset lookup, then the table
// skips there and its position is stored before anything is leased.
void resolve_start(self_ptr self, queue_partition_state& p) {
  reader_lookup(self, p, self->state.settings_start(),
                [self](queue_partition_state& p, offset start) {
                  auto& st = self->state;
                  p.start_pending = false;
                  if (start > p.table->read_end()) {
                    p.table->skip_to(start);
                    p.fetch_at = std::max(start, p.table->read_end());
                  }
                  log::info("queue group {}: {} starts at {} ({})",
                            st.cfg.group, tp_text(p.key), p.fetch_at,
                            start_position_text(st.settings_start()));
                  mark_dirty(self, p);
                  maybe_fetch(self, p);
                });
}

// Reads again the contents of records that may be leased now but whose
// contents were dropped while they waited (keep_contents): one fetch in
// flight per partition, from the first such record, beside the reader.
void maybe_reload(self_ptr self, queue_partition_state& p, timestamp_ms now) {
  auto& st = self->state;
  if (!p.table || p.reloading || p.reload_retry_at != 0 || !st.cfg.broker
      || !contents_missing(p))
    return; // every tracked record's contents are there (the common case)
  std::optional<offset> from;
  size_t seen = 0;
  p.table->for_each_ready(now, [&](offset off) {
    if (p.cache.count(off) == 0) {
      from = off;
      return false;
    }
    return ++seen < 4096;
  });
  if (!from)
    return;
  fetch_request req;
  req.topic = p.key.topic;
  req.partition = p.key.partition;
  req.from = *from;
  // A few batches: the records that come due together are mostly near each
  // other (a parked key's next ones, delayed records produced together).
  req.max_bytes = std::min<int32_t>(st.cfg.fetch_max_bytes, 256 << 10);
  req.min_bytes = 1;
  req.max_wait_ms = 0;
  p.reloading = true;
  auto key = p.key;
  auto inc = p.incarnation;
  auto at = *from;
  self->request(st.cfg.broker, st.cfg.broker_timeout, fetch_atom_v, req)
    .then(
      [self, key, inc, at](fetch_response& resp) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->reloading = false;
        on_reloaded(self, *p, at, resp);
      },
      [self, key, inc, at](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->reloading = false;
        if (is(err, ec::offset_out_of_range))
          return reload_below_log_start(self, *p, at);
        log::warn("queue group {}: cannot read {} at {} again: {}; retrying",
                  self->state.cfg.group, tp_text(p->key), at, err);
        p->reload_retry_at = now_ms(self)
                             + span_ms(self->state.cfg.retry_backoff);
        schedule_timer(self);
      });
}

// Tracked records in [from, to) whose contents were dropped while they
// waited and that the log no longer has (compaction or retention removed
// them since they were read): done without a delivery, as the reader
// treats offsets the log never had. `keep` names the ones still there.
void forget_gone(self_ptr self, queue_partition_state& p, offset from,
                 offset to, const std::function<bool(offset)>& keep,
                 const char* why) {
  auto& st = self->state;
  auto gone = p.table->forget(from, to, [&](offset off) {
    return p.cache.count(off) > 0 || (keep && keep(off));
  });
  if (gone.empty())
    return;
  log::warn("queue group {}: {} records of {} from {} to {} are no longer "
            "in the log ({}); skipped",
            st.cfg.group, gone.size(), tp_text(p.key), gone.front(),
            gone.back(), why);
  prune(p);
  mark_dirty(self, p);
}

// A reload was refused as below the log's start: retention deleted records
// since they were read. Those without contents are skipped, up to the
// start; any other answer is retried later.
void reload_below_log_start(self_ptr self, queue_partition_state& p,
                            offset from) {
  auto& st = self->state;
  p.reloading = true;
  auto key = p.key;
  auto inc = p.incarnation;
  list_offsets_request req{key.topic, key.partition, -2};
  auto retry = [self](queue_partition_state& p) {
    p.reload_retry_at = now_ms(self) + span_ms(self->state.cfg.retry_backoff);
    schedule_timer(self);
  };
  self->request(st.cfg.broker, st.cfg.broker_timeout, offsets_atom_v, req)
    .then(
      [self, key, inc, from, retry](offset start) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->reloading = false;
        if (start <= from) {
          log::warn("queue group {}: {}@{} is out of range, yet the log "
                    "starts at {}; retrying",
                    self->state.cfg.group, tp_text(p->key), from, start);
          return retry(*p);
        }
        forget_gone(self, *p, offset{0}, start, {}, "retention");
        auto now = now_ms(self);
        serve_waiters(self, now);
        pump_dlq(self, *p);
        maybe_reload(self, *p, now);
        schedule_timer(self);
      },
      [self, key, inc, retry](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->reloading = false;
        log::warn("queue group {}: cannot look up where {} starts: {}; "
                  "retrying",
                  self->state.cfg.group, tp_text(p->key), err);
        retry(*p);
      });
}

void on_reloaded(self_ptr self, queue_partition_state& p, offset from,
                 fetch_response& resp) {
  auto& st = self->state;
  std::string_view data = resp.data;
  size_t pos = 0, cached = 0;
  bool found = false;
  offset reached = from; // one past the last whole batch of the answer
  std::set<offset> present; // the records at or after `from` it holds
  while (pos < data.size()) {
    auto hdr = parse_batch_header(data.substr(pos));
    if (!hdr)
      break; // the end of what fit, or damage the reader reports
    auto size = hdr->total_size();
    auto dec = decode_batch(data.substr(pos, size));
    if (!dec)
      break;
    pos += size;
    reached = std::max(reached, hdr->next_offset());
    if (hdr->control())
      continue;
    for (auto& r : dec->records) {
      auto off = hdr->base_offset + r.offset_delta;
      if (off < from)
        continue;
      present.insert(off);
      if (p.cache.count(off) > 0)
        continue;
      auto v = p.table->find(off);
      if (!v || v->status == record_status::done
          || v->status == record_status::unread)
        continue; // not tracked, or the reader brings it
      if (off == from)
        found = true;
      else if (!keep_contents(self, p, off))
        continue;
      p.cached_bytes += record_bytes(r);
      p.cache.emplace(off, std::move(r));
      ++cached;
    }
  }
  auto now = now_ms(self);
  if (!found && reached > from) {
    // The log holds later records but not this one: compaction removed
    // it (and any other record of [from, reached) the answer lacks).
    forget_gone(self, p, from, reached,
                [&](offset off) { return present.count(off) > 0; },
                "compaction");
  } else if (!found) {
    // Nothing at or after it came back: try again later rather than spin.
    log::warn("queue group {}: {}@{} could not be read again; retrying",
              st.cfg.group, tp_text(p.key), from);
    p.reload_retry_at = now + span_ms(st.cfg.retry_backoff);
    schedule_timer(self);
    return;
  }
  log::debug("queue group {}: read {} records of {} again from {}",
             st.cfg.group, cached, tp_text(p.key), from);
  serve_waiters(self, now);
  pump_dlq(self, p);
  maybe_reload(self, p, now);
  schedule_timer(self);
}

// The log start moved past the read position (retention): skip there.
void on_out_of_range(self_ptr self, queue_partition_state& p) {
  reader_lookup(self, p, -2, [self](queue_partition_state& p, offset start) {
    if (start > p.fetch_at) {
      auto dropped = p.table->skip_to(start);
      log::warn("queue group {}: {} starts at {} now (retention); {} "
                "tracked records skipped",
                self->state.cfg.group, tp_text(p.key), start, dropped);
      p.fetch_at = std::max(start, p.table->read_end());
      prune(p);
      while (!p.cache.empty() && p.cache.begin()->first < start)
        uncache(p, p.cache.begin()->first);
      mark_dirty(self, p);
      maybe_fetch(self, p);
    } else {
      fetch_failed(self, p,
                   make_error(ec::offset_out_of_range,
                              "read position "
                                + std::to_string(p.fetch_at.value)
                                + " is beyond the log"));
    }
  });
}

void maybe_fetch(self_ptr self, queue_partition_state& p) {
  auto& st = self->state;
  if (!p.table || p.fetching || p.fetch_retry_at != 0 || !st.cfg.broker)
    return;
  if (p.start_pending) {
    resolve_start(self, p);
    return;
  }
  if (p.table->room() == 0 || p.cached_bytes >= st.cfg.max_cached_bytes)
    return;
  fetch_request req;
  req.topic = p.key.topic;
  req.partition = p.key.partition;
  req.from = p.fetch_at;
  // A window with little room reads a little (about 1 KiB a record).
  req.max_bytes = static_cast<int32_t>(std::min<size_t>(
    static_cast<size_t>(st.cfg.fetch_max_bytes),
    std::max<size_t>(size_t{64} << 10, p.table->room() << 10)));
  req.min_bytes = 1;
  req.max_wait_ms = p.read_once
                      ? static_cast<int32_t>(span_ms(st.cfg.fetch_wait))
                      : 0;
  p.fetching = true;
  auto key = p.key;
  auto inc = p.incarnation;
  self
    ->request(st.cfg.broker, st.cfg.fetch_wait + st.cfg.broker_timeout,
              fetch_atom_v, std::move(req))
    .then(
      [self, key, inc](fetch_response& resp) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->fetching = false;
        on_fetched(self, *p, resp);
      },
      [self, key, inc](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->fetching = false;
        if (is(err, ec::offset_out_of_range))
          on_out_of_range(self, *p);
        else
          fetch_failed(self, *p, std::move(err));
      });
}

// -- receive ----------------------------------------------------------------------

consumed_message to_message(const topic_partition& key, offset off,
                            const record& r) {
  consumed_message m;
  m.topic = key.topic;
  m.partition = key.partition;
  m.off = off;
  m.timestamp = r.timestamp;
  if (r.key) {
    m.has_key = true;
    m.key = *r.key;
  }
  m.has_value = r.value.has_value();
  if (r.value)
    m.value = *r.value;
  for (auto& h : r.headers)
    if (h.value)
      m.headers.push_back(message_header{h.key, *h.value});
  return m;
}

// Leases what the partitions of the request's topics (req.topics, made
// whole by the receive handler) have available now.
caf::expected<std::vector<leased_message>>
acquire_for(self_ptr self, const queue_receive_request& req, timestamp_ms now) {
  auto& st = self->state;
  std::vector<queue_partition_state*> parts;
  std::string rotation_key;
  for (auto& topic : req.topics) {
    for (auto i = st.partitions.lower_bound(topic_partition{topic,
                                                            partition_id{0}});
         i != st.partitions.end() && i->first.topic == topic; ++i)
      if (i->second.table)
        parts.push_back(&i->second);
    rotation_key += topic;
    rotation_key += '\n'; // not in a topic name
  }
  std::vector<leased_message> out;
  if (parts.empty())
    return out;
  auto want = static_cast<size_t>(
    std::clamp(req.max_records, 1, std::max(st.cfg.max_receive_records, 1)));
  std::optional<milliseconds> vis;
  if (req.visibility_ms > 0)
    vis = milliseconds{req.visibility_ms};
  auto start = st.rotation[rotation_key]++ % parts.size();
  for (size_t n = 0; n < parts.size() && out.size() < want; ++n) {
    auto& p = *parts[(start + n) % parts.size()];
    uint64_t redelivered = 0;
    expire_partition(self, p, now);
    // Records whose contents were dropped while they waited are read again
    // first (maybe_reload); the others are leased meanwhile.
    std::function<bool(offset)> uncached;
    if (contents_missing(p))
      uncached = [&p](offset off) { return p.cache.count(off) == 0; };
    auto ls = p.table->acquire(req.member_id, want - out.size(), now, vis,
                               uncached);
    if (!ls)
      return make_error(ec::invalid_request, describe(ls.error()));
    if (!ls->empty() && p.table->has_changes())
      mark_dirty(self, p); // cluster mode: the leases are replicated first
    for (auto& l : *ls) {
      auto c = p.cache.find(l.off);
      if (c == p.cache.end()) {
        // Offered records are always cached: this is a bug, not a state.
        log::error("queue group {}: no contents for {}@{}; it will expire",
                   st.cfg.group, tp_text(p.key), l.off);
        continue;
      }
      leased_message m;
      m.message = to_message(p.key, l.off, c->second);
      m.lease_id = l.lease_id;
      m.attempt = l.attempt;
      m.deadline = l.deadline;
      if (l.attempt > 1)
        ++redelivered;
      out.push_back(std::move(m));
    }
    if (redelivered > 0 && st.cfg.probe)
      st.cfg.probe->redelivered(p.key.topic, redelivered);
    maybe_reload(self, p, now);
  }
  return out;
}

void serve_waiters(self_ptr self, timestamp_ms now) {
  auto& st = self->state;
  // A topic that had nothing for one waiter has nothing for the next.
  std::set<std::string> exhausted;
  for (auto i = st.waiters.begin(); i != st.waiters.end();) {
    auto& w = i->second;
    std::vector<leased_message> got;
    auto& ts = w.request.topics;
    // A receive without a wait answers once every partition was read once
    // (so the first receive sees what the topics hold); one with a wait
    // answers with the first records there are.
    bool read = w.request.wait_ms > 0 || topics_read(self, ts);
    if (read && std::any_of(ts.begin(), ts.end(), [&](const std::string& t) {
          return exhausted.count(t) == 0;
        })) {
      auto r = acquire_for(self, w.request, now);
      if (!r) {
        w.promise.deliver(std::move(r.error()));
        i = st.waiters.erase(i);
        continue;
      }
      got = std::move(*r);
      if (got.empty())
        exhausted.insert(ts.begin(), ts.end());
    }
    if (!got.empty() && cluster(self)) {
      // Answered once the leases are replicated.
      st.receives_after_flush.push_back(
        queue_pending_receive{w.promise, std::move(got), w.request.member_id});
      i = st.waiters.erase(i);
    } else if (!got.empty()
               || (w.deadline <= now && topics_read(self, w.request.topics))) {
      w.promise.deliver(std::move(got));
      i = st.waiters.erase(i);
    } else {
      ++i;
    }
  }
}

// -- persistence ------------------------------------------------------------------

void flush_replicated(self_ptr self);

void flush(self_ptr self) {
  if (cluster(self)) {
    flush_replicated(self);
    return;
  }
  auto& st = self->state;
  st.flush_scheduled = false;
  bool failed = false;
  for (auto& [key, p] : st.partitions) {
    if (!p.dirty || !p.table)
      continue;
    if (!p.table->has_changes()) {
      p.dirty = false;
      continue;
    }
    auto ch = p.table->take_changes();
    if (auto err = st.queue_store->save(st.cfg.group, key.topic,
                                        key.partition, ch)) {
      log::error("queue group {}: cannot save the state of {}: {}; retrying",
                 st.cfg.group, tp_text(key), err);
      p.table->mark_all_dirty();
      failed = true;
      continue;
    }
    p.dirty = false;
    if (st.cfg.probe)
      st.cfg.probe->committed(key.topic, key.partition, ch.committed);
  }
  if (failed)
    st.flush_retry_at = now_ms(self) + span_ms(st.cfg.retry_backoff);
  // The changes are applied in memory either way; a failed save is retried
  // and does not hold the replies.
  auto replies = std::move(st.after_flush);
  st.after_flush.clear();
  for (auto& r : replies)
    r.promise.deliver(std::move(r.response));
  auto calls = std::move(st.after_flush_calls);
  st.after_flush_calls.clear();
  for (auto& f : calls)
    f(failed ? make_error(ec::io_error, "queue group " + st.cfg.group
                                          + ": state not saved; retrying")
             : caf::error{});
  for (auto& [key, p] : st.partitions)
    pump_dlq(self, p);
  schedule_timer(self);
}

// One cluster-mode flush: its change sets and who waits for them.
struct queue_flight {
  std::vector<consumer_state_record> records;
  std::vector<std::pair<topic_partition, uint64_t>> parts; // + incarnation
  std::vector<queue_pending_reply> replies;
  std::vector<queue_pending_receive> receives;
  std::vector<std::function<void(const caf::error&)>> calls;
};

// The state produce of `f` is over: apply it and answer (ok), or answer
// coordinator_not_available and send everything again (failed).
void finish_flight(self_ptr self, queue_flight& f, caf::error err) {
  auto& st = self->state;
  for (auto& [key, inc] : f.parts)
    if (auto* p = find_part(self, key, inc))
      p->saving = false;
  if (!err) {
    // The leader's own view: followers apply the same records as they
    // fetch them (apply_consumer_state).
    for (auto& r : f.records) {
      auto key = topic_partition{r.topic, r.partition};
      if (auto e = st.queue_store->save(r.group, r.topic, r.partition,
                                        r.changes)) {
        log::error("queue group {}: replicated state of {} not saved here: "
                   "{}; rewriting it",
                   st.cfg.group, tp_text(key), e);
        if (auto i = st.partitions.find(key);
            i != st.partitions.end() && i->second.table) {
          i->second.table->mark_all_dirty();
          i->second.dirty = true;
        }
      } else if (st.cfg.probe) {
        st.cfg.probe->committed(r.topic, r.partition, r.changes.committed);
      }
    }
    for (auto& x : f.replies)
      x.promise.deliver(std::move(x.response));
    for (auto& x : f.receives)
      x.promise.deliver(std::move(x.messages));
    for (auto& x : f.calls)
      x(caf::error{});
  } else {
    log::warn("queue group {}: state not replicated to {}-{}: {}; retrying",
              st.cfg.group, st.cfg.state_topic, st.cfg.state_partition, err);
    for (auto& [key, inc] : f.parts)
      if (auto* p = find_part(self, key, inc)) {
        p->table->mark_all_dirty();
        p->dirty = true;
      }
    auto fail = make_error(ec::coordinator_not_available,
                           "queue group " + st.cfg.group
                             + ": state not replicated: " + describe(err));
    for (auto& x : f.replies)
      x.promise.deliver(fail);
    for (auto& x : f.calls)
      x(fail);
    // The member never saw these leases: they end without a failed attempt.
    for (auto& x : f.receives) {
      for (auto& m : x.messages) {
        auto i = st.partitions.find(
          topic_partition{m.message.topic, m.message.partition});
        if (i != st.partitions.end() && i->second.table
            && i->second.table->release(m.message.off, m.lease_id))
          i->second.dirty = true;
      }
      x.promise.deliver(fail);
    }
    st.flush_retry_at = now_ms(self) + span_ms(st.cfg.retry_backoff);
  }
  bool more = !st.after_flush.empty() || !st.receives_after_flush.empty()
              || !st.after_flush_calls.empty();
  for (auto& [key, p] : st.partitions) {
    pump_dlq(self, p);
    more = more || p.dirty;
  }
  if (more && !err)
    schedule_flush(self);
  serve_waiters(self, now_ms(self));
  schedule_timer(self);
}

// Cluster mode: one produce of every dirty table's change set (group
// commit); the replies wait for it. One flush in flight at a time, so the
// log has the change sets in the order they were taken.
void flush_replicated(self_ptr self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  if (st.flushing)
    return; // finish_flight flushes again
  auto f = std::make_shared<queue_flight>();
  for (auto& [key, p] : st.partitions) {
    if (!p.dirty || !p.table)
      continue;
    p.dirty = false;
    if (!p.table->has_changes())
      continue;
    consumer_state_record r;
    r.kind = consumer_state_kind::queue_partition;
    r.group = st.cfg.group;
    r.topic = key.topic;
    r.partition = key.partition;
    r.changes = p.table->take_changes();
    p.saving = true;
    f->records.push_back(std::move(r));
    f->parts.emplace_back(key, p.incarnation);
  }
  f->replies = std::move(st.after_flush);
  st.after_flush.clear();
  f->receives = std::move(st.receives_after_flush);
  st.receives_after_flush.clear();
  f->calls = std::move(st.after_flush_calls);
  st.after_flush_calls.clear();
  if (f->records.empty()) {
    finish_flight(self, *f, caf::error{});
    return;
  }
  st.flushing = true;
  replicate(self, f->records, [self, f](caf::error err) {
    self->state.flushing = false;
    finish_flight(self, *f, std::move(err));
  });
}

// -- DLQ writer -----------------------------------------------------------------

caf::error save_producer(self_ptr self, const queue_partition_state& p,
                         const dlq_producer& x) {
  auto& st = self->state;
  return st.cfg.store->put(qgf::producers_db,
                           producer_key(st.cfg.group, p.key.topic,
                                        p.key.partition),
                           encode_producer(x));
}

void dlq_retry_later(self_ptr self, queue_partition_state& p,
                     const caf::error& err, const char* what) {
  auto& st = self->state;
  log::warn("queue group {}: DLQ write of {} ({}) failed: {}; retrying",
            st.cfg.group, tp_text(p.key), what, err);
  p.dlq_retry_at = now_ms(self) + span_ms(st.cfg.retry_backoff);
  schedule_timer(self);
}

// Stores the DLQ producer row `x` (cluster mode: produced to the state
// partition first, the writer busy meanwhile), then pumps again.
void store_producer(self_ptr self, queue_partition_state& p,
                    const dlq_producer& x, const char* what) {
  auto& st = self->state;
  if (!cluster(self)) {
    if (auto err = save_producer(self, p, x)) {
      dlq_retry_later(self, p, err, what);
      return;
    }
    p.producer = x;
    pump_dlq(self, p);
    return;
  }
  consumer_state_record r;
  r.kind = consumer_state_kind::queue_dlq_producer;
  r.group = st.cfg.group;
  r.topic = p.key.topic;
  r.partition = p.key.partition;
  r.row = encode_producer(x);
  p.dlq_busy = true;
  auto key = p.key;
  auto inc = p.incarnation;
  replicate(self, {r}, [self, key, inc, x, what](caf::error err) {
    auto* p = find_part(self, key, inc);
    if (!p)
      return;
    p->dlq_busy = false;
    if (!err)
      err = save_producer(self, *p, x); // the leader's own view
    if (err) {
      dlq_retry_later(self, *p, err, what);
      return;
    }
    p->producer = x;
    pump_dlq(self, *p);
  });
}

// Takes a fresh producer id (first use, or the broker lost or fenced ours).
void init_producer(self_ptr self, queue_partition_state& p) {
  auto& st = self->state;
  p.dlq_busy = true;
  auto key = p.key;
  auto inc = p.incarnation;
  self->request(st.cfg.broker, st.cfg.broker_timeout, init_pid_atom_v)
    .then(
      [self, key, inc](producer_identity& id) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->dlq_busy = false;
        dlq_producer x;
        x.pid = id.id;
        x.epoch = id.epoch;
        if (p->producer)
          x.dlq_partition = p->producer->dlq_partition;
        store_producer(self, *p, x, "store producer id");
      },
      [self, key, inc](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->dlq_busy = false;
        dlq_retry_later(self, *p, err, "init producer id");
      });
}

void choose_dlq_partition(self_ptr self, queue_partition_state& p,
                          size_t dlq_partitions) {
  if (dlq_partitions == 0) {
    dlq_retry_later(self, p,
                    make_error(ec::unknown_partition,
                               "DLQ topic " + p.dlq_topic
                                 + " has no partitions"),
                    "choose partition");
    return;
  }
  auto x = *p.producer;
  x.dlq_partition = partition_id{static_cast<int32_t>(
    static_cast<size_t>(p.key.partition.value) % dlq_partitions)};
  store_producer(self, p, x, "store DLQ partition");
}

// Finds (or creates) the DLQ topic and picks this partition's DLQ partition.
void resolve_dlq_partition(self_ptr self, queue_partition_state& p) {
  auto& st = self->state;
  auto t = st.topics.find(p.dlq_topic);
  if (t != st.topics.end() && !t->second.partitions.empty()) {
    choose_dlq_partition(self, p, t->second.partitions.size());
    return;
  }
  topic_config tc;
  auto src = st.topics.find(p.key.topic);
  tc.partitions = src != st.topics.end() && !src->second.partitions.empty()
                    ? static_cast<int32_t>(src->second.partitions.size())
                    : 1;
  tc.retention_ms = -1; // dead letters are never deleted by age
  p.dlq_busy = true;
  auto key = p.key;
  auto inc = p.incarnation;
  auto name = p.dlq_topic;
  self
    ->request(st.cfg.broker, st.cfg.broker_timeout, create_atom_v,
              topic_atom_v, name, tc)
    .then(
      [self, key, inc](topic_metadata& md) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->dlq_busy = false;
        log::info("queue group {}: created DLQ topic {} with {} partitions",
                  self->state.cfg.group, md.name, md.partitions.size());
        auto n = md.partitions.size();
        self->state.topics[md.name] = std::move(md);
        choose_dlq_partition(self, *p, n);
      },
      [self, key, inc, name](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        if (!is(err, ec::topic_exists)) {
          p->dlq_busy = false;
          dlq_retry_later(self, *p, err, "create DLQ topic");
          return;
        }
        // Created meanwhile (by another group, or before our metadata).
        auto& st = self->state;
        self
          ->request(st.cfg.broker, st.cfg.broker_timeout, describe_atom_v,
                    topic_atom_v, name)
          .then(
            [self, key, inc](topic_description& td) {
              auto* p = find_part(self, key, inc);
              if (!p)
                return;
              p->dlq_busy = false;
              choose_dlq_partition(self, *p, td.partitions.size());
            },
            [self, key, inc](caf::error& err) {
              auto* p = find_part(self, key, inc);
              if (!p)
                return;
              p->dlq_busy = false;
              dlq_retry_later(self, *p, err, "describe DLQ topic");
            });
      });
}

bool is_dlq_header(std::string_view key) {
  namespace h = dlq_header;
  for (auto x : {h::original_topic, h::original_partition, h::original_offset,
                 h::attempts, h::error, h::group, h::first_failure_ts,
                 h::last_failure_ts})
    if (key == x)
      return true;
  return false;
}

void on_dlq_written(self_ptr self, queue_partition_state& p, offset off,
                    const produce_response& resp) {
  auto& st = self->state;
  if (auto err = p.table->dead_lettered(off))
    log::warn("queue group {}: {}@{} after its DLQ write: {}", st.cfg.group,
              tp_text(p.key), off, err);
  uncache(p, off);
  ++p.dead_lettered;
  log::info("queue group {}: {}@{} is in {}-{} at {}{}", st.cfg.group,
            tp_text(p.key), off, p.dlq_topic, p.producer->dlq_partition,
            resp.base_offset, resp.duplicate ? " (written before)" : "");
  if (st.cfg.probe) {
    st.cfg.probe->dead_lettered(p.key.topic);
    st.dlq_depths[topic_partition{p.dlq_topic, p.producer->dlq_partition}]
      = std::max<int64_t>(0, resp.last_offset.value + 1
                               - resp.log_start.value);
    int64_t depth = 0;
    for (auto& [k, d] : st.dlq_depths)
      if (k.topic == p.dlq_topic)
        depth += d;
    st.cfg.probe->dlq_depth(p.key.topic, static_cast<uint64_t>(depth));
  }
  prune(p);
  mark_dirty(self, p); // the next DLQ write starts after this save
  serve_waiters(self, now_ms(self));
  maybe_fetch(self, p);
}

void on_dlq_error(self_ptr self, queue_partition_state& p, caf::error err) {
  auto& st = self->state;
  switch (code_of(err)) {
    case ec::unknown_topic:
    case ec::unknown_partition:
      // The DLQ topic is gone: nothing of ours can be in it any more.
      log::warn("queue group {}: DLQ topic {} of {} is missing ({}); "
                "creating it again",
                st.cfg.group, p.dlq_topic, tp_text(p.key), err);
      st.topics.erase(p.dlq_topic);
      p.producer.reset();
      pump_dlq(self, p);
      return;
    case ec::out_of_order_sequence:
    case ec::unknown_producer_id:
    case ec::invalid_producer_epoch:
      // The broker lost or fenced our producer: its last write cannot be
      // remembered there, so a fresh id cannot duplicate it.
      log::warn("queue group {}: DLQ producer of {} refused ({}); taking a "
                "fresh producer id",
                st.cfg.group, tp_text(p.key), err);
      p.producer->pid = producer_id{-1};
      pump_dlq(self, p);
      return;
    default:
      dlq_retry_later(self, p, err, "produce");
  }
}

// Writes the first pending dead letter whose contents are cached, once its
// pending mark is saved. One write in flight per partition.
void pump_dlq(self_ptr self, queue_partition_state& p) {
  auto& st = self->state;
  if (!p.table || p.dlq_busy || p.dirty || p.saving || p.dlq_retry_at != 0
      || !st.cfg.broker)
    return;
  auto pending = p.table->pending_dead_letters();
  const dead_letter_info* info = nullptr;
  // The record the stored sequence number belongs to goes first: its write
  // may have reached the DLQ before a crash (its save did not), and only the
  // same sequence makes the DLQ answer "written before" instead of storing
  // it twice. Another record first would take a new sequence, and so would
  // this one after it.
  if (p.producer && p.producer->last_offset >= offset{0})
    for (auto& d : pending)
      if (d.off == p.producer->last_offset) {
        if (p.cache.count(d.off) == 0)
          return; // wait until the reader has re-read it
        info = &d;
        break;
      }
  if (info == nullptr)
    for (auto& d : pending)
      if (p.cache.count(d.off) > 0) {
        info = &d;
        break;
      }
  if (info == nullptr)
    return; // none, or the reader has not re-read them yet
  if (!p.producer || p.producer->pid.value < 0) {
    init_producer(self, p);
    return;
  }
  if (p.producer->dlq_partition.value < 0) {
    resolve_dlq_partition(self, p);
    return;
  }
  auto off = info->off;
  if (p.producer->last_offset != off) {
    // A new sequence number, stored before the write: a retry after a crash
    // finds it and sends the same one.
    auto x = *p.producer;
    x.last_offset = off;
    x.last_seq = x.last_seq < 0 ? 0 : increment_sequence(x.last_seq, 1);
    store_producer(self, p, x, "store sequence"); // then pumps again
    return;
  }
  auto rec = p.cache.at(off);
  rec.offset_delta = 0;
  rec.timestamp = info->last_failure;
  std::erase_if(rec.headers,
                [](const record_header& h) { return is_dlq_header(h.key); });
  for (auto& h : dead_letter_headers(*info, st.cfg.group, p.key.topic,
                                     p.key.partition))
    rec.headers.push_back(std::move(h));
  batch_meta meta;
  meta.producer_id = p.producer->pid.value;
  meta.producer_epoch = p.producer->epoch;
  meta.base_sequence = p.producer->last_seq;
  auto batch = encode_batch(meta, {rec});
  if (!batch) {
    dlq_retry_later(self, p, batch.error(), "encode");
    return;
  }
  produce_request req;
  req.topic = p.dlq_topic;
  req.partition = p.producer->dlq_partition;
  req.acks = acks_mode::all;
  req.batch = std::move(*batch);
  p.dlq_busy = true;
  auto key = p.key;
  auto inc = p.incarnation;
  self
    ->request(st.cfg.broker, st.cfg.broker_timeout, produce_atom_v,
              std::move(req))
    .then(
      [self, key, inc, off](produce_response& resp) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->dlq_busy = false;
        on_dlq_written(self, *p, off, resp);
      },
      [self, key, inc](caf::error& err) {
        auto* p = find_part(self, key, inc);
        if (!p)
          return;
        p->dlq_busy = false;
        on_dlq_error(self, *p, std::move(err));
      });
}

// -- ticks and acks ---------------------------------------------------------------

void on_tick(self_ptr self) {
  auto& st = self->state;
  st.timer_at = 0;
  auto now = now_ms(self);
  for (auto& [key, p] : st.partitions) {
    if (!p.table)
      continue;
    expire_partition(self, p, now);
    if (p.fetch_retry_at != 0 && p.fetch_retry_at <= now) {
      p.fetch_retry_at = 0;
      maybe_fetch(self, p);
    }
    if (p.dlq_retry_at != 0 && p.dlq_retry_at <= now) {
      p.dlq_retry_at = 0;
      pump_dlq(self, p);
    }
    if (p.reload_retry_at != 0 && p.reload_retry_at <= now)
      p.reload_retry_at = 0;
    maybe_reload(self, p, now);
  }
  if (st.flush_retry_at != 0 && st.flush_retry_at <= now) {
    st.flush_retry_at = 0;
    for (auto& [key, p] : st.partitions)
      if (p.dirty) {
        schedule_flush(self);
        break;
      }
  }
  serve_waiters(self, now);
  schedule_timer(self);
}

caf::result<queue_ack_response> on_ack(self_ptr self, queue_ack_request& req) {
  auto& st = self->state;
  if (auto err = check_group(self, req.group))
    return err;
  if (!req.member_id.empty())
    st.members_seen[req.member_id] = now_ms(self);
  auto i = st.partitions.find(topic_partition{req.topic, req.partition});
  if (i == st.partitions.end() || !i->second.table)
    return make_error(ec::lease_not_found,
                      "group " + st.cfg.group + " has no records of "
                        + tp_text(topic_partition{req.topic, req.partition}));
  auto& p = i->second;
  auto now = now_ms(self);
  expire_partition(self, p, now);
  queue_ack_response resp;
  caf::error err;
  auto& t = *p.table;
  switch (req.kind) {
    case queue_ack_kind::ack:
      err = t.ack(req.member_id, req.off, req.lease_id);
      if (!err)
        uncache(p, req.off);
      break;
    case queue_ack_kind::nack: {
      if (req.delay_ms < 0) {
        err = make_error(ec::invalid_request, "nack delay must be >= 0");
        break;
      }
      auto r = t.nack(req.member_id, req.off, req.lease_id, now,
                      milliseconds{req.delay_ms}, req.error);
      if (!r) {
        err = std::move(r.error());
        break;
      }
      resp.attempts = r->attempts;
      resp.dead_letter = r->outcome == failure_outcome::dead_letter;
      if (!resp.dead_letter)
        resp.retry_at = r->available_at;
      break;
    }
    case queue_ack_kind::reject:
      err = t.reject(req.member_id, req.off, req.lease_id, now, req.error);
      if (!err) {
        resp.dead_letter = true;
        if (auto v = t.find(req.off))
          resp.attempts = v->attempts;
      }
      break;
    case queue_ack_kind::extend: {
      if (req.extend_ms <= 0) {
        err = make_error(ec::invalid_request, "extension must be > 0 ms");
        break;
      }
      auto d = t.extend(req.member_id, req.off, req.lease_id, now,
                        milliseconds{req.extend_ms});
      if (!d)
        err = std::move(d.error());
      else
        resp.deadline = *d;
      break;
    }
    default:
      err = make_error(ec::invalid_request,
                       "unknown ack kind "
                         + std::to_string(static_cast<int>(req.kind)));
  }
  if (err) {
    schedule_timer(self);
    return err;
  }
  if (req.kind == queue_ack_kind::extend && !cluster(self))
    return resp; // leases are not stored: nothing to save
  prune(p);
  mark_dirty(self, p);
  serve_waiters(self, now); // a key may be free, or records due
  maybe_fetch(self, p);     // the window may have room
  maybe_reload(self, p, now);
  schedule_timer(self);
  auto rp = self->make_response_promise<queue_ack_response>();
  st.after_flush.push_back(queue_pending_reply{rp, resp});
  return rp;
}

// The member is gone: its leases end without a failed attempt, and its
// parked receives answer with nothing.
int64_t on_leave(self_ptr self, const std::string& member) {
  auto& st = self->state;
  st.members_seen.erase(member);
  int64_t released = 0;
  for (auto& [key, p] : st.partitions)
    if (p.table) {
      released += static_cast<int64_t>(p.table->release_member(member));
      if (p.table->has_changes())
        mark_dirty(self, p); // cluster mode: the lease rows go
    }
  for (auto i = st.waiters.begin(); i != st.waiters.end();) {
    if (i->second.request.member_id == member) {
      i->second.promise.deliver(std::vector<leased_message>{});
      i = st.waiters.erase(i);
    } else {
      ++i;
    }
  }
  if (released > 0)
    log::info("queue group {}: member {} left; {} leases released",
              st.cfg.group, member, released);
  serve_waiters(self, now_ms(self));
  schedule_timer(self);
  return released;
}

// A new config: saves what changed, then reopens every partition from the
// store with the new table settings. lease_table has no way to change its
// retry policy or ordering in place, so open leases end here (their records
// are delivered again, attempts kept): the same as a coordinator restart.
caf::result<queue_group_config> on_alter(self_ptr self,
                                         queue_group_config& qc) {
  auto& st = self->state;
  if (auto err = validate(qc))
    return err;
  if (qc.dlq_topic != st.cfg.settings.dlq_topic)
    return make_error(ec::invalid_config,
                      "dlq_topic of queue group " + st.cfg.group
                        + " cannot be altered");
  // Cluster mode: the tables reopen from their own state (the store may
  // lag behind a produce in flight) and keep their leases; the first
  // change set of each is a full rewrite.
  std::map<topic_partition, queue_snapshot> snaps;
  std::map<topic_partition, std::optional<dlq_producer>> producers;
  // Partitions still waiting for their start position keep waiting.
  st.start_pending_again.clear();
  for (auto& [key, p] : st.partitions)
    if (p.start_pending)
      st.start_pending_again.insert(key);
  if (cluster(self)) {
    for (auto& [key, p] : st.partitions)
      if (p.table && !p.start_pending) {
        snaps.emplace(key, p.table->snapshot());
        producers.emplace(key, p.producer);
      }
  } else {
    flush(self);
    for (auto& [key, p] : st.partitions)
      if (p.dirty)
        return make_error(ec::io_error, "queue group " + st.cfg.group
                                          + ": cannot save its state before "
                                            "the alter; try again");
  }
  std::map<topic_partition, int64_t> dead_lettered;
  for (auto& [key, p] : st.partitions)
    dead_lettered[key] = p.dead_lettered;
  st.cfg.settings = qc;
  auto window = st.table_cfg.window;
  auto max_waiting = st.table_cfg.max_waiting;
  st.table_cfg = to_lease_table_config(qc);
  st.table_cfg.window = window;
  st.table_cfg.max_waiting = max_waiting;
  st.table_cfg.persist_leases = cluster(self);
  // Fresh lease ids: acks of the old leases must not match new ones.
  if (st.cfg.seed != 0)
    st.cfg.seed = st.cfg.seed * 6364136223846793005ull + 1442695040888963407ull;
  st.partitions.clear();
  for (auto& [key, snap] : snaps) {
    open_partition(self, key, &snap);
    if (auto i = st.partitions.find(key); i != st.partitions.end())
      if (auto pr = producers[key])
        i->second.producer = pr;
  }
  reconcile(self);
  st.start_pending_again.clear();
  for (auto& [key, n] : dead_lettered)
    if (auto i = st.partitions.find(key); i != st.partitions.end())
      i->second.dead_lettered = n;
  log::info("queue group {}: config altered (max_attempts {}, visibility {} "
            "ms, ordering {})",
            st.cfg.group, qc.max_attempts, qc.visibility_timeout_ms,
            qc.ordering);
  schedule_timer(self);
  return st.cfg.settings;
}

// Reset: every partition of the topics starts over at its target as a
// table with nothing tracked (a full rewrite of its state); answered once
// that is stored (cluster mode: replicated).
caf::result<std::vector<partition_offset>>
on_reset(self_ptr self, const reset_offsets_request& req) {
  auto& st = self->state;
  if (auto ts = reset_lookup(req); !ts)
    return std::move(ts.error());
  std::vector<std::string> topics = req.topics;
  if (topics.empty())
    topics.assign(st.active.begin(), st.active.end());
  std::vector<topic_partition> parts;
  for (auto& t : topics) {
    auto i = st.topics.find(t);
    if (i == st.topics.end())
      return make_error(ec::unknown_topic, "topic '" + t + "'");
    for (auto& pa : i->second.partitions)
      parts.push_back(topic_partition{t, pa.partition});
  }
  auto leased = [self, topics]() -> caf::error {
    auto& st = self->state;
    for (auto& [key, p] : st.partitions)
      if (p.table && std::count(topics.begin(), topics.end(), key.topic) > 0)
        if (auto n = p.table->stats().leased; n > 0)
          return make_error(ec::group_not_empty,
                            "queue group " + st.cfg.group + " has " + std::to_string(n)
                              + " leased records on " + tp_text(key)
                              + "; stop its workers and reset once their "
                                "leases ended (acked, or the visibility "
                                "timeout passed)");
    return caf::none;
  };
  if (auto err = leased())
    return err;
  if (parts.empty())
    return std::vector<partition_offset>{};
  if (!st.cfg.broker)
    return make_error(ec::coordinator_not_available,
                      "the coordinator has no broker to list offsets");
  auto rp = self->make_response_promise<std::vector<partition_offset>>();
  resolve_reset_targets(
    self, st.cfg.broker, st.cfg.broker_timeout, parts, req,
    [self, rp, parts, topics, leased, dry = req.dry_run](
      caf::expected<std::vector<offset>> targets) mutable {
      if (!targets) {
        rp.deliver(std::move(targets.error()));
        return;
      }
      std::vector<partition_offset> out;
      for (size_t i = 0; i < parts.size(); ++i)
        out.push_back(partition_offset{parts[i].topic, parts[i].partition,
                                       (*targets)[i], {}});
      if (dry) {
        rp.deliver(std::move(out));
        return;
      }
      if (auto err = leased()) { // a receive came in meanwhile
        rp.deliver(std::move(err));
        return;
      }
      auto& st = self->state;
      for (auto& t : topics)
        st.active.insert(t);
      for (size_t i = 0; i < parts.size(); ++i) {
        auto& key = parts[i];
        std::optional<dlq_producer> producer;
        int64_t dead_lettered = 0;
        if (auto j = st.partitions.find(key); j != st.partitions.end()) {
          producer = j->second.producer;
          dead_lettered = j->second.dead_lettered;
          st.partitions.erase(j);
        }
        queue_snapshot snap;
        snap.committed = (*targets)[i];
        open_partition(self, key, &snap); // a full rewrite: marked dirty
        if (auto j = st.partitions.find(key); j != st.partitions.end()) {
          j->second.producer = producer;
          j->second.dead_lettered = dead_lettered;
          mark_dirty(self, j->second);
        }
      }
      log::info("queue group {}: reset to {} on {} partitions", st.cfg.group,
                out.empty() ? std::string{"-"}
                            : std::to_string(out.front().committed.value),
                out.size());
      st.after_flush_calls.push_back(
        [rp, out = std::move(out)](const caf::error& err) mutable {
          if (err)
            rp.deliver(err);
          else
            rp.deliver(std::move(out));
        });
      flush(self);
      serve_waiters(self, now_ms(self));
      schedule_timer(self);
    });
  return rp;
}

queue_group_description describe_queue(self_ptr self) {
  auto& st = self->state;
  queue_group_description out;
  out.group = st.cfg.group;
  out.config = st.cfg.settings;
  out.waiting_receives = static_cast<int32_t>(st.waiters.size());
  for (auto& [key, p] : st.partitions) {
    if (!p.table)
      continue;
    auto s = p.table->stats();
    queue_partition_description d;
    d.topic = key.topic;
    d.partition = key.partition;
    d.committed = s.committed;
    d.read_end = s.read_end;
    d.high_watermark = p.high_watermark;
    // Parked records (behind their key) count as available, as before.
    d.available = static_cast<int64_t>(s.available + s.parked);
    d.delayed = static_cast<int64_t>(s.delayed - s.scheduled);
    d.scheduled = static_cast<int64_t>(s.scheduled);
    d.leased = static_cast<int64_t>(s.leased);
    d.dead_letter_pending = static_cast<int64_t>(s.dead_letter);
    d.done = static_cast<int64_t>(s.done);
    d.dlq_topic = p.dlq_topic;
    d.dead_lettered = p.dead_lettered;
    out.partitions.push_back(std::move(d));
  }
  return out;
}

// -- metrics ------------------------------------------------------------------

/// The tick_atom token of the metrics refresh (timer tokens count up from 1).
constexpr uint64_t metrics_token = std::numeric_limits<uint64_t>::max();

/// Members seen within max(visibility timeout, 30 s); older ones are
/// forgotten.
std::vector<std::string> live_members(self_ptr self) {
  auto& st = self->state;
  auto horizon = std::max<int64_t>(st.cfg.settings.visibility_timeout_ms, 30'000);
  auto now = now_ms(self);
  std::vector<std::string> out;
  for (auto i = st.members_seen.begin(); i != st.members_seen.end();) {
    if (now - i->second > horizon) {
      i = st.members_seen.erase(i);
      continue;
    }
    out.push_back(i->first);
    ++i;
  }
  return out;
}

void schedule_metrics(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.probe && st.cfg.metrics_interval.count() > 0)
    send_self(self, st.cfg.metrics_interval, tick_atom_v, metrics_token);
}

/// Members now; per partition the lag and lag seconds once a 1-byte fetch
/// at the committed offset (as an internal reader, replica -2) answered. The
/// answer's high watermark also refreshes the partition's for describe.
// Records of the partition the group still has to process: past the
// committed offset, minus those done above it and those whose delayed
// delivery is not due (neither is work yet).
int64_t lag_of(const lease_table& t, offset high_watermark) {
  if (high_watermark.value < 0)
    return 0;
  auto s = t.stats();
  return std::max<int64_t>(0, high_watermark - t.committed()
                                - static_cast<int64_t>(s.done)
                                - static_cast<int64_t>(s.scheduled));
}

void refresh_metrics(self_ptr self) {
  auto& st = self->state;
  if (!st.cfg.probe)
    return;
  st.cfg.probe->members(live_members(self).size());
  for (auto& [key, p] : st.partitions) {
    if (!p.table)
      continue;
    auto s = p.table->stats();
    metrics::group_probe::queue_counts qc;
    qc.available = s.available;
    qc.parked = s.parked;
    qc.leased = s.leased;
    qc.retrying = s.delayed - s.scheduled;
    qc.scheduled = s.scheduled;
    qc.dead_letter_pending = s.dead_letter;
    st.cfg.probe->queue_records(key.topic, key.partition, qc);
    auto committed = p.table->committed();
    fetch_request req{key.topic, key.partition, committed, 1, 0, 0, -2};
    auto inc = p.incarnation;
    self
      ->request(st.cfg.broker, st.cfg.broker_timeout, fetch_atom_v,
                std::move(req))
      .then(
        [self, key, inc, committed](fetch_response& resp) {
          auto& st = self->state;
          auto* p = find_part(self, key, inc);
          if (!st.cfg.probe || !p || resp.high_watermark.value < 0)
            return;
          p->high_watermark = std::max(p->high_watermark, resp.high_watermark);
          auto lag = lag_of(*p->table, resp.high_watermark);
          st.cfg.probe->lag(key.topic, key.partition, lag);
          if (lag == 0) {
            st.cfg.probe->lag_seconds(key.topic, key.partition, 0.0);
            return;
          }
          // A record whose delayed delivery is not due is not late yet.
          auto since = record_timestamp_at(resp.data, committed);
          if (auto v = p->table->find(committed);
              since && v && v->status == record_status::delayed
              && v->attempts == 0)
            since = std::max(*since, v->available_at);
          if (since)
            st.cfg.probe->lag_seconds(
              key.topic, key.partition,
              static_cast<double>(std::max<int64_t>(0, now_ms(self) - *since))
                / 1000.0);
        },
        [self, key](caf::error& err) {
          log::debug("queue group {}: no lag for {}: {}", self->state.cfg.group,
                     tp_text(key), err);
        });
  }
}

group_description describe_group(self_ptr self) {
  auto& st = self->state;
  group_description out;
  out.group = st.cfg.group;
  out.mode = "queue";
  for (auto& m : live_members(self)) {
    member_description md;
    md.member_id = m;
    out.members.push_back(std::move(md));
  }
  // As for a stream group: no live member, nothing is being consumed.
  out.state = out.members.empty() ? "Empty" : "Stable";
  for (auto& [key, p] : st.partitions) {
    if (!p.table)
      continue;
    partition_lag l;
    l.topic = key.topic;
    l.partition = key.partition;
    l.committed = p.table->committed();
    l.log_end = p.high_watermark;
    l.lag = lag_of(*p.table, p.high_watermark);
    out.partitions.push_back(std::move(l));
  }
  return out;
}

} // namespace

queue_coordinator_actor::behavior_type
queue_coordinator(
  queue_coordinator_actor::stateful_pointer<queue_coordinator_state> self,
  queue_coordinator_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.table_cfg = to_lease_table_config(st.cfg.settings);
  st.table_cfg.window = std::max<size_t>(st.cfg.window, 1);
  st.table_cfg.max_waiting = std::max<size_t>(st.cfg.max_waiting, 1);
  // Cluster mode: another node takes over the group with its leases.
  st.table_cfg.persist_leases = !st.cfg.state_topic.empty();
  st.queue_store = std::make_unique<queue_state_store>(*st.cfg.store);
  for (auto& t : st.cfg.topics)
    st.topics.emplace(t.name, t);
  st.cfg.topics.clear();
  st.topics_known = st.cfg.topics_known;
  if (auto parts = st.queue_store->partitions(st.cfg.group)) {
    for (auto& ref : *parts) {
      st.active.insert(ref.topic);
      open_partition(self, topic_partition{ref.topic, ref.partition});
    }
  } else {
    log::error("queue group {}: cannot list its stored partitions: {}",
               st.cfg.group, parts.error());
  }
  reconcile(self);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    // Save what the handled requests changed before going. Not in a
    // cluster: the group moved (or the node stops), and a late produce must
    // not land after the new coordinator's; what was not replicated was not
    // answered either.
    if (!cluster(self))
      flush(self);
    self->quit(std::move(msg.reason));
  });
  schedule_metrics(self);
  return {
    [self](receive_atom, queue_receive_request& req)
      -> caf::result<std::vector<leased_message>> {
      auto& st = self->state;
      if (auto err = check_group(self, req.group))
        return err;
      if (req.member_id.empty())
        return make_error(ec::invalid_request, "receive: empty member id");
      if (req.max_records <= 0 || req.visibility_ms < 0 || req.wait_ms < 0)
        return make_error(ec::invalid_request,
                          "receive: max_records must be > 0, visibility and "
                          "wait >= 0");
      if (req.visibility_ms > st.table_cfg.max_visibility.count())
        return make_error(ec::invalid_request,
                          "receive: visibility above "
                            + std::to_string(
                              st.table_cfg.max_visibility.count())
                            + " ms");
      req.topics = receive_topics(req);
      req.topic.clear();
      if (req.topics.empty())
        return make_error(ec::invalid_request, "receive: no topic");
      if (req.topics.size() > max_receive_topics)
        return make_error(ec::invalid_request,
                          "receive: more than "
                            + std::to_string(max_receive_topics) + " topics");
      for (auto& t : req.topics)
        if (auto err = activate(self, t))
          return err;
      auto now = now_ms(self);
      st.members_seen[req.member_id] = now;
      auto got = acquire_for(self, req, now);
      if (!got)
        return std::move(got.error());
      if (!got->empty() && cluster(self)) {
        // The leases are handed out once their rows are replicated.
        auto rp = self->make_response_promise<std::vector<leased_message>>();
        st.receives_after_flush.push_back(
          queue_pending_receive{rp, std::move(*got), req.member_id});
        schedule_timer(self);
        return rp;
      }
      if (!got->empty() || (req.wait_ms == 0 && topics_read(self, req.topics))) {
        schedule_timer(self);
        return std::move(*got);
      }
      auto rp = self->make_response_promise<std::vector<leased_message>>();
      auto deadline = now + req.wait_ms;
      st.waiters.emplace(st.next_waiter++,
                         queue_waiter{std::move(req), deadline, rp});
      schedule_timer(self);
      return rp;
    },
    [self](ack_atom, queue_ack_request& req)
      -> caf::result<queue_ack_response> { return on_ack(self, req); },
    [self](describe_atom, queue_atom) -> queue_group_description {
      return describe_queue(self);
    },
    [self](describe_atom, group_atom) -> group_description {
      return describe_group(self);
    },
    [self](alter_atom, group_atom,
           queue_group_config& qc) -> caf::result<queue_group_config> {
      return on_alter(self, qc);
    },
    [self](reset_atom, const reset_offsets_request& req)
      -> caf::result<std::vector<partition_offset>> {
      return on_reset(self, req);
    },
    [self](leave_atom, queue_atom, std::string& member) -> caf::result<int64_t> {
      if (member.empty())
        return make_error(ec::invalid_request, "leave: empty member id");
      return on_leave(self, member);
    },
    [self](delete_atom, group_atom) -> caf::result<void> {
      auto& st = self->state;
      size_t leased = 0;
      for (auto& [key, p] : st.partitions)
        if (p.table)
          leased += p.table->stats().leased;
      if (leased > 0 || !st.waiters.empty())
        return make_error(ec::group_not_empty,
                          "queue group " + st.cfg.group + " has "
                            + std::to_string(leased) + " leased records and "
                            + std::to_string(st.waiters.size())
                            + " waiting receives");
      if (cluster(self)) {
        // The node replicates the delete record and applies it; a change
        // set still in flight would land after it.
        if (st.flushing)
          return make_error(ec::coordinator_not_available,
                            "queue group " + st.cfg.group
                              + ": its state is being replicated; try again");
      } else if (auto err = erase_queue_group(*st.cfg.store, st.cfg.group)) {
        return err;
      }
      st.partitions.clear();
      st.active.clear();
      auto replies = std::move(st.after_flush);
      st.after_flush.clear();
      for (auto& r : replies)
        r.promise.deliver(std::move(r.response));
      if (st.cfg.probe)
        st.cfg.probe->clear();
      log::info("queue group {}: deleted", st.cfg.group);
      return caf::unit;
    },
    [self](update_atom, std::vector<topic_metadata>& topics) {
      auto& st = self->state;
      st.topics.clear();
      for (auto& t : topics)
        st.topics.emplace(t.name, std::move(t));
      st.topics_known = true;
      reconcile(self);
      schedule_timer(self);
    },
    [self](flush_atom) { flush(self); },
    [self](tick_atom, uint64_t token) {
      if (token == metrics_token) {
        refresh_metrics(self);
        schedule_metrics(self);
        return;
      }
      if (token == self->state.timer_token)
        on_tick(self);
    },
  };
}

} // namespace ferry
