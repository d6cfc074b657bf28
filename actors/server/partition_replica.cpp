#include "actors/server/partition_replica.hpp"

#include "broker/dir_remover.hpp"
#include "broker/error.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/metadata_writer.hpp"
#include "broker/record_batch.hpp"
#include "broker/node_journal.hpp"
#include "broker/sync_pool.hpp"
#include "broker/topic_config.hpp"
#include "metrics/node_probe.hpp"
#include "metrics/partition_probe.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

namespace ferry {

namespace {

using replica_ptr = partition_actor::stateful_pointer<partition_replica_state>;
using steady_clock = std::chrono::steady_clock;

std::string name_of(const partition_replica_state& st) {
  return st.cfg.topic + "/" + std::to_string(st.cfg.partition.value);
}

caf::error not_leader_error(const partition_replica_state& st) {
  return make_error(ec::not_leader,
                    "node " + std::to_string(st.cfg.node_id)
                      + " follows partition " + name_of(st)
                      + " (leader=" + std::to_string(st.assignment.leader)
                      + ")");
}

bool in_isr(const partition_replica_state& st, int32_t id) {
  return std::find(st.isr.begin(), st.isr.end(), id) != st.isr.end();
}

// -- metrics ------------------------------------------------------------------

// Records of fetched data at or after `from` (the first batch may start
// before it).
uint64_t records_from(std::string_view data, offset from) {
  uint64_t n = 0;
  while (!data.empty()) {
    auto h = parse_batch_header(data, std::numeric_limits<int32_t>::max());
    if (!h)
      break;
    auto first = std::max(h->base_offset, from);
    if (h->last_offset() >= first)
      n += std::min<uint64_t>(static_cast<uint64_t>(h->records_count),
                              static_cast<uint64_t>(h->last_offset() - first)
                                + 1);
    data.remove_prefix(h->total_size());
  }
  return n;
}

// Consumer traffic only (see the header).
void observe_fetch(const partition_replica_state& st, const fetch_request& req,
                   const fetch_response& resp,
                   steady_clock::time_point arrived) {
  if (!st.cfg.probe || req.replica_id != -1)
    return;
  st.cfg.probe->fetched(records_from(resp.data, req.from), resp.data.size(),
                        steady_clock::now() - arrived);
}

void observe_produce(const partition_replica_state& st, uint64_t records,
                     uint64_t bytes, steady_clock::time_point arrived) {
  if (st.cfg.probe)
    st.cfg.probe->produced(records, bytes, steady_clock::now() - arrived);
}

// An error answered to a client request (see cfg.node_probe).
void count_failure(const partition_replica_state& st, const caf::error& err) {
  if (st.cfg.node_probe && err)
    st.cfg.node_probe->request_failed(err);
}

// Fetch errors count for consumers only, like fetch traffic.
void count_fetch_failure(const partition_replica_state& st,
                         const fetch_request& req, const caf::error& err) {
  if (req.replica_id == -1)
    count_failure(st, err);
}

// Counts `res` if it is an error answered right away.
template <class T>
caf::result<T> counted(const partition_replica_state& st, caf::result<T> res) {
  if (res.flag == caf::rt_error)
    count_failure(st, res.err);
  return res;
}

void report_log(const partition_replica_state& st) {
  if (st.cfg.probe && st.log)
    st.cfg.probe->log_state(st.log->log_start(), st.log->log_end(),
                            st.log->high_watermark(), st.log->size_bytes());
}

// -- group commit and the high watermark ----------------------------------------

// Flushing before every ack is the default; any other policy lets acks and
// the HW run ahead of the disk (as Kafka does without flush.messages=1).
bool durable_acks(const partition_replica_state& st) {
  return st.cfg.flush.messages == 1;
}

offset leader_position(const partition_replica_state& st) {
  return durable_acks(st) ? st.log->durable_end() : st.log->log_end();
}

// min.insync.replicas in effect (never more than there are replicas).
size_t min_isr(const partition_replica_state& st) {
  return std::min<size_t>(
    static_cast<size_t>(effective_min_insync(st.cfg.topic_cfg)),
    std::max<size_t>(st.assignment.replicas.size(), 1));
}

bool covered(const partition_replica_state& st, offset last, acks_mode acks) {
  if (acks == acks_mode::leader)
    return last < st.positions.at(st.cfg.node_id);
  return last < st.log->high_watermark();
}

void wake_ticks(replica_ptr self);

void schedule_commit(replica_ptr self) {
  auto& st = self->state;
  if (st.commit_scheduled)
    return;
  st.commit_scheduled = true;
  self->send(self, flush_atom_v);
}

// Serves a fetch from what is readable now.
caf::expected<fetch_response> read_fetch(const partition_replica_state& st,
                                         const fetch_request& req) {
  auto start = st.log->log_start();
  auto end = st.log->log_end();
  if (req.from < start || req.from > end)
    return make_error(ec::offset_out_of_range,
                      "fetch offset " + std::to_string(req.from.value)
                        + " is outside the log [" + std::to_string(start.value)
                        + ", " + std::to_string(end.value) + "] of "
                        + name_of(st));
  auto hw = st.log->high_watermark();
  // Followers (replica_id >= 0) copy the whole log; consumers stop at the HW.
  auto upto = req.replica_id >= 0 ? end : hw;
  fetch_response resp;
  resp.next_offset = req.from;
  resp.high_watermark = hw;
  resp.log_start = start;
  resp.log_end = end;
  if (req.from < upto) {
    auto rd = st.log->read(req.from, static_cast<size_t>(req.max_bytes), upto);
    if (!rd)
      return std::move(rd.error());
    resp.data = std::move(rd->data);
    resp.next_offset = rd->next_offset;
  }
  return resp;
}

// Answers parked fetch `w` with `resp` (its data, or the error reading it)
// and counts it.
void answer_waiter(partition_replica_state& st,
                   partition_replica_state::fetch_waiter& w,
                   caf::expected<fetch_response>&& resp) {
  if (resp) {
    observe_fetch(st, w.request, *resp, w.arrived);
    w.promise.deliver(std::move(*resp));
  } else {
    count_fetch_failure(st, w.request, resp.error());
    w.promise.deliver(std::move(resp.error()));
  }
}

// Answers parked fetches that now have min_bytes (or all of them); with
// `followers_only` only those of followers (their reads end at the log end,
// not the HW).
void wake_waiters(replica_ptr self, bool all, bool followers_only = false) {
  auto& st = self->state;
  for (auto i = st.waiters.begin(); i != st.waiters.end();) {
    auto& w = i->second;
    if (followers_only && w.request.replica_id < 0) {
      ++i;
      continue;
    }
    auto resp = read_fetch(st, w.request);
    if (resp && !all
        && resp->data.size()
             < static_cast<size_t>(std::max(w.request.min_bytes, 0))) {
      ++i;
      continue;
    }
    answer_waiter(st, w, std::move(resp));
    i = st.waiters.erase(i);
  }
}

// Moves the leader's position and the HW, answers the produces they cover.
void advance(replica_ptr self) {
  auto& st = self->state;
  if (!st.leader) {
    // A follower's HW comes from its leader (follower_apply).
    report_log(st);
    return;
  }
  auto old_hw = st.log->high_watermark();
  auto old_position = st.positions[st.cfg.node_id];
  st.positions[st.cfg.node_id] = leader_position(st);
  bool grew = st.positions[st.cfg.node_id] > old_position;
  auto hw = st.log->log_end();
  for (auto id : st.isr) {
    auto i = st.positions.find(id);
    hw = std::min(hw, i == st.positions.end() ? offset{0} : i->second);
  }
  if (hw > old_hw)
    st.log->set_high_watermark(hw);
  for (auto i = st.pending.begin(); i != st.pending.end();) {
    if (!covered(st, i->last, i->acks)) {
      ++i;
      continue;
    }
    if (i->promise.pending()) {
      if (i->acks == acks_mode::all && st.isr.size() < min_isr(st)) {
        // The ISR shrank below min.insync.replicas after the append (Kafka's
        // NOT_ENOUGH_REPLICAS_AFTER_APPEND): fewer copies than promised.
        auto err = make_error(ec::not_enough_replicas,
                              "appended to " + name_of(st)
                                + " but the ISR shrank to "
                                + std::to_string(st.isr.size())
                                + " members, min.insync.replicas is "
                                + std::to_string(min_isr(st)));
        count_failure(st, err);
        i->promise.deliver(std::move(err));
      } else {
        i->response.log_start = st.log->log_start();
        observe_produce(st, i->records, i->bytes, i->arrived);
        i->promise.deliver(i->response);
      }
    }
    st.pending_bytes -= i->bytes;
    i = st.pending.erase(i);
  }
  if (st.log->high_watermark() > old_hw && !st.waiters.empty())
    wake_waiters(self, false);
  else if (grew && !st.waiters.empty())
    wake_waiters(self, false, true); // followers read up to the log end
  report_log(st);
}

void fail_pending(partition_replica_state& st, const caf::error& err) {
  for (auto& p : st.pending)
    if (p.promise.pending()) {
      count_failure(st, err);
      p.promise.deliver(err);
    }
  st.pending.clear();
  st.pending_bytes = 0;
}

void fence(replica_ptr self, caf::error err) {
  auto& st = self->state;
  log::error("partition {}: flush failed, replica fenced until restart: {}",
             name_of(st), err);
  st.fenced = err;
  fail_pending(st, err);
  for (auto& [id, w] : st.waiters) {
    count_fetch_failure(st, w.request, err);
    w.promise.deliver(err);
  }
  st.waiters.clear();
}

// A flush that takes longer than this is logged (a slow disk shows in every
// acks=all latency).
constexpr auto slow_flush = std::chrono::milliseconds{100};

void observe_flush(const partition_replica_state& st,
                   steady_clock::duration took);

caf::expected<offset> flush_log(partition_replica_state& st) {
  auto t0 = steady_clock::now();
  auto r = st.log->flush();
  observe_flush(st, steady_clock::now() - t0);
  return r;
}

void follower_synced(replica_ptr self);
void apply_durable_replicated(partition_replica_state& st);
int64_t replay_into_node(partition_replica_state& st);
void drop_pending_from(partition_replica_state& st, offset end);
void follower_fetch(replica_ptr self);

void observe_flush(const partition_replica_state& st,
                   steady_clock::duration took) {
  if (st.cfg.probe)
    st.cfg.probe->flushed(took);
  if (took < slow_flush)
    return;
  // One line per 10 s for the whole node: under load a node with 10,000
  // partitions saw every one of them wait 100-200 ms, and logged each.
  static log::limiter slow_flushes{std::chrono::seconds{10}};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  auto r = slow_flushes.note(steady_clock::now(), ms);
  if (!r)
    return;
  if (r->held_back == 0)
    log::warn("partition {}: flush took {} ms", name_of(st), ms);
  else
    log::warn("partition {}: flush took {} ms ({} more flushes of {} ms or more "
              "since the last such line, the slowest {} ms)",
              name_of(st), ms, r->held_back, slow_flush.count(), r->worst);
}

// Whether what is appended needs a flush now. Followers make every fetch
// durable before the next one (their fetch offset is their durable end).
bool flush_needed(const partition_replica_state& st) {
  if (durable_acks(st) || !st.leader)
    return st.log->durable_end() < st.log->log_end();
  return st.log->flush_due();
}

// Finishes the sync in flight on cfg.sync if it is done. False: still
// running (its completion sends a flush_atom), or it failed (fenced).
bool finish_sync(replica_ptr self) {
  auto& st = self->state;
  if (!st.sync_job)
    return true;
  if (!st.sync_result->done.load(std::memory_order_acquire))
    return false;
  auto job = std::move(*st.sync_job);
  st.sync_job.reset();
  auto result = std::move(st.sync_result->result);
  st.sync_result.reset();
  observe_flush(st, steady_clock::now() - st.sync_began);
  if (auto r = st.log->end_flush(job, std::move(result)); !r) {
    fence(self, std::move(r.error()));
    return false;
  }
  return true;
}

// Starts a flush on cfg.sync's threads. False: it could not start (fenced).
bool start_sync(replica_ptr self) {
  auto& st = self->state;
  auto job = st.log->begin_flush();
  if (!job) {
    fence(self, std::move(job.error()));
    return false;
  }
  if (!job->file && job->journal_seq == 0) {
    // Nothing dirty: durable already (a roll synced it, say).
    if (auto r = st.log->end_flush(*job, caf::none); !r) {
      fence(self, std::move(r.error()));
      return false;
    }
    return true;
  }
  auto slot = std::make_shared<partition_replica_state::sync_slot>();
  st.sync_result = slot;
  st.sync_began = steady_clock::now();
  auto file = job->file;
  st.sync_job = std::move(*job);
  partition_actor me = self;
  auto done = [slot, me](caf::error err) {
    slot->result = std::move(err);
    slot->done.store(true, std::memory_order_release);
    caf::anon_send(me, flush_atom_v);
  };
  if (st.sync_job->journal_seq != 0)
    st.cfg.journal->when_durable(st.sync_job->journal_seq, std::move(done));
  else
    st.cfg.sync->submit(std::move(file), std::move(done));
  return true;
}

// The group commit: one flush for everything appended since the last one.
// `inline_sync`: flush on this thread even with cfg.sync (shutting down).
void commit(replica_ptr self, bool inline_sync = false) {
  auto& st = self->state;
  if (st.fenced || !st.log)
    return;
  if (!finish_sync(self)) {
    if (st.fenced || !inline_sync)
      return;
    // Shutting down with a sync still running: flush() syncs again here
    // (the log does not trust a sync it has not seen finish).
    st.sync_job.reset();
    st.sync_result.reset();
  }
  ++st.stats.commits;
  if (flush_needed(st)) {
    ++st.stats.log_flushes;
    if ((st.cfg.sync || st.cfg.journal) && !inline_sync) {
      if (!start_sync(self))
        return;
    } else if (auto r = flush_log(st); !r) {
      fence(self, std::move(r.error()));
      return;
    }
  }
  advance(self);
  if (!st.leader)
    follower_synced(self);
  else
    apply_durable_replicated(st);
}

// -- checkpoints and snapshots ---------------------------------------------------

caf::expected<std::string> snapshot_key(const partition_replica_state& st) {
  return metadata_format::encode_partition_key(st.cfg.topic, st.cfg.partition);
}

void save_snapshot(replica_ptr self) {
  auto& st = self->state;
  if (!st.cfg.store || !st.log)
    return;
  auto end = st.log->durable_end();
  if (end == st.snapshot_end)
    return;
  auto key = snapshot_key(st);
  if (!key) {
    log::warn("partition {}: no producer snapshot: {}", name_of(st), key.error());
    return;
  }
  if (st.cfg.meta_writer) {
    st.cfg.meta_writer->put_later(producer_snapshots_db, *key,
                                  st.producers.encode_snapshot(end));
  } else if (auto err = st.cfg.store->put(producer_snapshots_db, *key,
                                          st.producers.encode_snapshot(end))) {
    log::warn("partition {}: producer snapshot failed: {}", name_of(st), err);
    return;
  }
  st.snapshot_end = end;
  st.last_snapshot = self->clock().now();
  ++st.stats.snapshots;
}

// False: nothing to save (the HW did not move) or it failed.
bool save_checkpoint(partition_replica_state& st) {
  if (!st.log || st.log->high_watermark() == st.checkpointed_hw)
    return false;
  if (st.cfg.meta_writer && st.cfg.store) {
    // Queued: written with other partitions' in one transaction.
    auto key = snapshot_key(st);
    if (!key) {
      log::warn("partition {}: no checkpoint: {}", name_of(st), key.error());
      return false;
    }
    partition_metadata md{st.log->log_start(), st.log->high_watermark(),
                          st.log->epochs()};
    st.cfg.meta_writer->put_later(metadata_format::partitions_db, *key,
                                  metadata_format::encode_partition_metadata(md));
    st.checkpointed_hw = st.log->high_watermark();
    return true;
  }
  if (auto err = st.log->checkpoint()) {
    log::warn("partition {}: checkpoint failed: {}", name_of(st), err);
    return false;
  }
  st.checkpointed_hw = st.log->high_watermark();
  return true;
}

// Loads the last snapshot (if any) and replays the log after it.
caf::error load_producers(partition_replica_state& st) {
  if (st.cfg.store) {
    if (auto key = snapshot_key(st)) {
      auto bytes = st.cfg.meta_writer
                     ? st.cfg.meta_writer->get(producer_snapshots_db, *key)
                     : st.cfg.store->get(producer_snapshots_db, *key);
      if (bytes) {
        if (auto snap = producer_state::decode_snapshot(*bytes)) {
          st.producers = std::move(*snap);
          st.snapshot_end = st.producers.end();
        } else {
          log::warn("partition {}: ignoring producer snapshot: {}",
                    name_of(st), snap.error());
        }
      } else if (!is(bytes.error(), ec::not_found)) {
        log::warn("partition {}: cannot read producer snapshot: {}",
                  name_of(st), bytes.error());
      }
    }
  }
  return st.producers.rebuild(*st.log);
}

// Flushes, answers what can be answered, saves state and closes the log.
// With `discard` (the replica's data is deleted next) nothing is flushed,
// saved or checkpointed: waiting fetches get what the log has, produces not
// yet acked fail, and the log is dropped (partition_log::discard).
void shut_down(replica_ptr self, bool discard = false) {
  auto& st = self->state;
  if (!st.log)
    return;
  if (!st.fenced && !discard) {
    st.commit_scheduled = false;
    commit(self, true);
  }
  if (!st.fenced) {
    wake_waiters(self, true);
    if (!discard)
      save_snapshot(self);
  }
  // Retriable for clients: the partition lives on elsewhere (a replica
  // moved away, a node stopping); the producer retries at the new leader
  // (idempotence keeps a write that did land from landing twice).
  fail_pending(st, make_error(ec::not_leader,
                              "partition " + name_of(st)
                                + " is shutting down on this node (leader=-1)"));
  if (discard)
    st.log->discard();
  else if (auto err = st.log->close())
    log::warn("partition {}: close failed: {}", name_of(st), err);
  st.log.reset();
}

// -- replication ------------------------------------------------------------------

// The epoch of the last batch in the log (-1: empty), read from the log.
int32_t read_last_batch_epoch(const partition_replica_state& st) {
  if (st.log->log_end() <= st.log->log_start())
    return -1;
  auto rd = st.log->read(st.log->log_end() - 1, 1, st.log->log_end());
  if (!rd || rd->data.empty())
    return -1;
  auto h = parse_batch_header(rd->data, std::numeric_limits<int32_t>::max());
  return h ? h->partition_leader_epoch : -1;
}

// Leader: the divergence answer for a follower whose last batch's epoch
// ends earlier here (or is unknown here); nothing when its log matches.
std::optional<fetch_response> divergence(const partition_replica_state& st,
                                         const fetch_request& req) {
  if (req.last_fetched_epoch < 0)
    return std::nullopt;
  const auto& ep = st.log->epochs();
  fetch_response r;
  r.next_offset = req.from;
  r.high_watermark = st.log->high_watermark();
  r.log_start = st.log->log_start();
  r.log_end = st.log->log_end();
  // The largest epoch here that is not newer than the follower's.
  auto it = std::upper_bound(ep.begin(), ep.end(), req.last_fetched_epoch,
                             [](int32_t e, const epoch_entry& x) {
                               return e < x.epoch.value;
                             });
  if (it == ep.begin()) {
    // Every epoch here is newer: nothing of the follower's is known here.
    r.diverging_epoch = -1;
    r.diverging_end = std::min(req.from, ep.empty() ? st.log->log_start()
                                                    : ep.front().start_offset);
    return r;
  }
  auto found = std::prev(it);
  auto end = it == ep.end() ? st.log->log_end() : it->start_offset;
  if (found->epoch.value == req.last_fetched_epoch && req.from <= end)
    return std::nullopt;
  r.diverging_epoch = found->epoch.value;
  r.diverging_end = std::min(end, req.from);
  return r;
}

// Leader: sends an ISR change to the controller (one at a time).
void propose_isr(replica_ptr self, std::vector<int32_t> isr) {
  auto& st = self->state;
  if (!st.cfg.controller || st.isr_change_pending || !st.leader
      || self->clock().now() < st.isr_retry_at)
    return;
  st.isr_change_pending = true;
  isr_change ch;
  ch.topic = st.cfg.topic;
  ch.partition = st.cfg.partition;
  ch.leader = st.cfg.node_id;
  ch.epoch = st.assignment.epoch;
  ch.isr = isr;
  log::info("partition {}: proposing ISR of {} members (now {})", name_of(st),
            isr.size(), st.isr.size());
  auto epoch = st.assignment.epoch;
  self
    ->request(caf::actor_cast<broker_actor>(st.cfg.controller),
              std::chrono::seconds{10}, alter_atom_v, isr_atom_v,
              std::move(ch))
    .then(
      [self, epoch](const partition_assignment& pa) {
        auto& st = self->state;
        st.isr_change_pending = false;
        st.isr_refusal.clear();
        // The node brings the same change with the topic list; taking it now
        // saves a round and is safe: it is committed.
        if (st.leader && pa.epoch == epoch && pa.leader == st.cfg.node_id
            && st.assignment.epoch == epoch) {
          st.assignment.isr = pa.isr;
          st.isr = pa.isr;
          if (st.cfg.probe)
            st.cfg.probe->replication(st.isr.size(),
                                      st.assignment.replicas.size());
          advance(self);
        }
      },
      [self](caf::error& err) {
        auto& st = self->state;
        st.isr_change_pending = false;
        st.isr_retry_at = self->clock().now() + st.cfg.isr_retry_backoff;
        auto text = describe(err);
        if (text == st.isr_refusal) {
          log::debug("partition {}: ISR change refused again: {}",
                     name_of(st), text);
          return;
        }
        st.isr_refusal = std::move(text);
        log::warn("partition {}: ISR change refused: {} (no new proposal "
                  "for {} ms)",
                  name_of(st), st.isr_refusal,
                  st.cfg.isr_retry_backoff.count());
      });
}

// Leader: a follower fetched from `from` (its durable end).
void follower_fetched(replica_ptr self, int32_t id, offset from) {
  auto& st = self->state;
  if (std::find(st.assignment.replicas.begin(), st.assignment.replicas.end(),
                id)
      == st.assignment.replicas.end())
    return; // not a replica of this partition: a reader, not a follower
  auto end = st.log->log_end();
  auto now = self->clock().now();
  st.positions[id] = std::min(from, end);
  // Kafka's rule: caught up now when at the end; else caught up as of the
  // previous fetch when this one reaches the end that fetch saw.
  if (from >= end) {
    st.caught_up[id] = now;
  } else if (auto prev = st.last_fetch_end.find(id);
             prev != st.last_fetch_end.end() && from >= prev->second) {
    st.caught_up[id] = std::max(st.caught_up[id], st.last_fetch_time[id]);
  }
  st.last_fetch_end[id] = end;
  st.last_fetch_time[id] = now;
  advance(self);
  // A follower back at the HW (and in the current epoch) rejoins the ISR.
  const auto& ep = st.log->epochs();
  auto epoch_start = ep.empty() ? offset{0} : ep.back().start_offset;
  if (!in_isr(st, id) && from >= st.log->high_watermark()
      && from >= epoch_start) {
    auto isr = st.isr;
    isr.push_back(id);
    propose_isr(self, std::move(isr));
  }
}

// Leader (tick): followers not caught up for replica_lag_max leave the ISR.
void check_isr_lag(replica_ptr self) {
  auto& st = self->state;
  if (!st.leader || !st.cfg.controller || st.isr_change_pending)
    return;
  auto now = self->clock().now();
  std::vector<int32_t> keep;
  for (auto id : st.isr) {
    auto i = st.caught_up.find(id);
    if (id == st.cfg.node_id || i == st.caught_up.end()
        || now - i->second <= st.cfg.replica_lag_max
        || st.positions[id] >= st.log->log_end())
      keep.push_back(id);
    else
      log::warn("partition {}: follower {} not caught up for {} ms: "
                "leaving the ISR",
                name_of(st), id,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                  now - i->second)
                  .count());
  }
  if (keep.size() < st.isr.size())
    propose_isr(self, std::move(keep));
}

void follower_fetch(replica_ptr self);

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string out;
  for (auto id : ids)
    out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

// Leader (tick): produces still waiting for their acks after ack_timeout
// are answered request_timed_out. Their entries stay until the HW covers
// them (or the replica steps down): pending_bytes still counts their bytes.
void fail_overdue_produces(replica_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  for (auto& p : st.pending) {
    if (!p.promise.pending() || p.deadline > now)
      continue;
    auto err = make_error(ec::request_timed_out,
                          "appended to " + name_of(st) + " but not "
                            + (p.acks == acks_mode::all
                                 ? "replicated to the ISR (" + ids_text(st.isr) + ")"
                                 : std::string{"flushed"})
                            + " within "
                            + std::to_string(st.cfg.ack_timeout.count())
                            + " ms (offsets up to " + std::to_string(p.last.value)
                            + "); it may still commit");
    count_failure(st, err);
    p.promise.deliver(std::move(err));
  }
}

// Follower: applies a fetch answer; an error means "retry after a pause".
caf::error follower_apply(replica_ptr self, fetch_response& r) {
  auto& st = self->state;
  if (r.diverging_epoch >= 0 || r.diverging_end >= offset{0}) {
    // Our end of the diverging epoch: where our next newer epoch starts.
    auto own_end = st.log->log_end();
    for (auto& e : st.log->epochs())
      if (e.epoch.value > r.diverging_epoch) {
        own_end = e.start_offset;
        break;
      }
    auto target = std::max(std::min(r.diverging_end, own_end),
                           st.log->log_start());
    if (target >= st.log->log_end())
      // Nothing to cut, yet the leader sees a divergence (our epoch
      // history lost entries?): fetch again after the backoff, not at once.
      return make_error(ec::fenced_leader_epoch,
                        "leader reports a divergence at "
                          + std::to_string(r.diverging_end.value)
                          + " but the log ends at "
                          + std::to_string(st.log->log_end().value));
    auto old_end = st.log->log_end();
    auto cut = st.log->truncate_to(target);
    if (!cut)
      return std::move(cut.error());
    log::warn("partition {}: log diverged from leader {} (epoch {}): "
              "truncated from {} to {}",
              name_of(st), st.assignment.leader, r.diverging_epoch, old_end,
              *cut);
    drop_pending_from(st, *cut);
    if (st.cfg.on_replicated && *cut < st.applied_end) {
      // The node's stores took records the cut removed (applied as a
      // leader above the HW): the log's last word on each key again.
      replay_into_node(st);
      st.applied_end = *cut;
    }
    st.producers = producer_state{};
    if (auto err = st.producers.rebuild(*st.log))
      return err;
    st.snapshot_end = offset{-1};
    st.last_batch_epoch = read_last_batch_epoch(st);
    report_log(st);
    return caf::none;
  }
  if (r.data.empty() && r.log_start > st.log->log_end()) {
    log::warn("partition {}: leader's log starts at {}, beyond this log's "
              "end {}: starting over there",
              name_of(st), r.log_start, st.log->log_end());
    if (auto err = st.log->truncate_fully_and_start_at(r.log_start))
      return err;
    drop_pending_from(st, offset{0});
    st.producers = producer_state{};
    st.snapshot_end = offset{-1};
    st.last_batch_epoch = -1;
    report_log(st);
    return caf::none;
  }
  std::string_view data = r.data;
  bool appended = false;
  std::vector<std::string_view> fresh; // appended batches, for the hook
  while (!data.empty()) {
    auto h = parse_batch_header(data, std::numeric_limits<int32_t>::max());
    if (!h)
      return std::move(h.error());
    auto size = h->total_size();
    if (size > data.size())
      break; // a cut-off last batch: fetched again next time
    auto batch = data.substr(0, size);
    data.remove_prefix(size);
    if (h->last_offset() < st.log->log_end())
      continue; // held already (the first batch may start before `from`)
    const auto& ep = st.log->epochs();
    if (ep.empty() || h->partition_leader_epoch > ep.back().epoch.value)
      if (auto err = st.log->add_epoch(leader_epoch{h->partition_leader_epoch}))
        return err;
    auto info = st.log->append_replicated(batch);
    if (!info)
      return std::move(info.error());
    st.producers.record(*h, st.cfg.clock ? st.cfg.clock() : system_now_ms());
    st.last_batch_epoch = h->partition_leader_epoch;
    ++st.stats.appends;
    appended = true;
    if (st.cfg.on_replicated)
      fresh.push_back(batch);
  }
  if (appended)
    wake_ticks(self);
  if (appended && st.cfg.sync) {
    // Durable on the I/O threads; follower_synced applies the rest and
    // follower_fetch waits for it.
    if (st.replicated_pending.empty() && !fresh.empty() && st.cfg.on_behind)
      st.cfg.on_behind(true);
    for (auto b : fresh)
      st.replicated_pending.emplace_back(b);
    st.leader_hw = std::max(st.leader_hw, r.high_watermark);
    schedule_commit(self);
    return caf::none;
  }
  if (appended) {
    ++st.stats.log_flushes;
    if (auto flushed = flush_log(st); !flushed) {
      fence(self, flushed.error());
      return std::move(flushed.error());
    }
    // Durable now: applied in order with anything a failed apply kept,
    // once below the HW (apply_durable_replicated).
    if (!fresh.empty()) {
      if (st.replicated_pending.empty() && st.cfg.on_behind)
        st.cfg.on_behind(true);
      for (auto b : fresh)
        st.replicated_pending.emplace_back(b);
    }
  }
  auto hw = std::min(r.high_watermark, st.log->log_end());
  if (hw > st.log->high_watermark())
    st.log->set_high_watermark(hw);
  // Batches an earlier fetch appended that this HW now covers.
  apply_durable_replicated(st);
  report_log(st);
  return caf::none;
}

// Passes the whole log through cfg.on_replicated (applying is idempotent and
// in order, so each key ends at the log's last record for it); returns the
// records applied.
int64_t replay_into_node(partition_replica_state& st) {
  auto t0 = std::chrono::steady_clock::now();
  int64_t replayed = 0;
  for (auto at = st.log->log_start(); at < st.log->log_end();) {
    auto rd = st.log->read(at, size_t{1} << 20, st.log->log_end());
    if (!rd || rd->data.empty())
      break;
    if (auto n = st.cfg.on_replicated(rd->data))
      replayed += static_cast<int64_t>(*n);
    else
      log::warn("partition {}: replaying into the node failed: {}",
                name_of(st), n.error());
    at = rd->next_offset;
  }
  log::info("partition {}: replayed {} records ({} to {}) into the node's "
            "stores in {} ms",
            name_of(st), replayed, st.log->log_start().value,
            st.log->log_end().value,
            std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - t0)
              .count());
  return replayed;
}

// Batches at or past `end` a truncation cut are not applied any more.
void drop_pending_from(partition_replica_state& st, offset end) {
  std::erase_if(st.replicated_pending, [end](const std::string& b) {
    auto h = parse_batch_header(b, std::numeric_limits<int32_t>::max());
    return !h || h->next_offset() > end;
  });
  if (st.replicated_pending.empty() && st.cfg.on_behind)
    st.cfg.on_behind(false);
}

// Applies (cfg.on_replicated) the batches follower fetches appended, once
// durable, in log order. Called after every commit in either role: a
// follower that becomes leader before its last fetch's sync finished
// applies them as leader (before, they were left out of the node's stores
// until a restart: the node's new group coordinator served commits older
// than the log's, and a DLQ home a producer row behind; tests/chaos seed
// 1108, and likely 607). A follower applies only what is below its HW (the
// leader's, as its fetches report it): above it a batch may be cut by a
// truncation after a leader change, and a store that kept a cut commit
// served offsets higher than the group's, then lower once another node
// served the group (tests/chaos seed 5001). A leader applies all that is
// durable: its log is the one the others follow.
void apply_durable_replicated(partition_replica_state& st) {
  if (st.replicated_pending.empty() || !st.log)
    return;
  auto limit = st.log->durable_end();
  if (!st.leader)
    limit = std::min(limit, st.log->high_watermark());
  size_t n = 0;
  for (; n < st.replicated_pending.size(); ++n) {
    auto& b = st.replicated_pending[n];
    auto h = parse_batch_header(b, std::numeric_limits<int32_t>::max());
    if (h && h->next_offset() > limit)
      break;
    if (h)
      st.applied_end = std::max(st.applied_end, h->next_offset());
    if (auto r = st.cfg.on_replicated(b); !r) {
      // A store that could not write (a full disk, an I/O error) gets the
      // batch again on the next commit or tick, in order, and the replica
      // stays behind meanwhile: dropped, its commits were missing from the
      // node's store until a restart, and a coordinator on this node then
      // served offsets older than the log's (tests/chaos/README.md).
      bool retry = is(r.error(), ec::disk_full) || is(r.error(), ec::io_error)
                   || is(r.error(), ec::lmdb_error);
      if (!st.apply_failed)
        log::warn("partition {}: applying replicated data failed: {}{}",
                  name_of(st), r.error(),
                  retry ? " (retried on the next commit or tick)" : "");
      if (retry) {
        st.apply_failed = true;
        break;
      }
      continue;
    }
    if (st.apply_failed) {
      log::info("partition {}: replicated data applied again", name_of(st));
      st.apply_failed = false;
    }
  }
  st.replicated_pending.erase(st.replicated_pending.begin(),
                              st.replicated_pending.begin()
                                + static_cast<std::ptrdiff_t>(n));
  if (st.replicated_pending.empty() && st.cfg.on_behind)
    st.cfg.on_behind(false);
}

// Follower with cfg.sync (from commit): once the last fetch's appends are
// durable, applies them to the node, takes the leader's HW, and fetches on.
void follower_synced(replica_ptr self) {
  auto& st = self->state;
  if (st.leader || st.fenced || !st.log || st.sync_job
      || st.log->durable_end() < st.log->log_end())
    return;
  if (st.leader_hw >= offset{0}) {
    auto hw = std::min(st.leader_hw, st.log->log_end());
    if (hw > st.log->high_watermark())
      st.log->set_high_watermark(hw);
    st.leader_hw = offset{-1};
    report_log(st);
  }
  apply_durable_replicated(st);
  follower_fetch(self);
}

// Follower: one fetch from the leader; the answer triggers the next one.
void follower_fetch(replica_ptr self) {
  auto& st = self->state;
  if (st.leader || st.fenced || !st.log || !st.leader_broker
      || st.fetch_in_flight)
    return;
  // The fetch offset says "durable up to here": with cfg.sync, not before
  // the sync of the last fetch's appends finished (follower_synced calls
  // this again then).
  if (st.cfg.sync
      && (st.sync_job || st.log->durable_end() < st.log->log_end())) {
    schedule_commit(self);
    return;
  }
  fetch_request req;
  req.topic = st.cfg.topic;
  req.partition = st.cfg.partition;
  req.from = st.log->log_end();
  req.max_bytes = static_cast<int32_t>(
    std::max<uint32_t>(st.log_cfg.max_batch_bytes, 1u << 20));
  req.min_bytes = 1;
  req.max_wait_ms = static_cast<int32_t>(st.cfg.follower_fetch_wait.count());
  req.replica_id = st.cfg.node_id;
  req.leader_epoch = st.assignment.epoch.value;
  req.last_fetched_epoch = st.last_batch_epoch;
  auto gen = st.fetch_gen;
  st.fetch_in_flight = true;
  st.fetch_sent = self->clock().now();
  // No CAF request timeout: setting and cancelling one per fetch woke CAF's
  // clock thread twice per fetch. check_fetch_stall (on tick) gives up on a
  // fetch unanswered for fetch_stall_after instead.
  self
    ->request(caf::actor_cast<broker_actor>(st.leader_broker), caf::infinite,
              fetch_atom_v, std::move(req))
    .then(
      [self, gen](fetch_response& r) {
        auto& st = self->state;
        if (gen != st.fetch_gen || st.leader || !st.log)
          return; // a stale answer: the role changed meanwhile
        st.fetch_in_flight = false;
        if (auto err = follower_apply(self, r)) {
          log::warn("partition {}: cannot apply data from leader {}: {}",
                    name_of(st), st.assignment.leader, err);
          self->delayed_send(self, st.cfg.follower_retry_backoff,
                             fetch_atom_v, gen);
          return;
        }
        follower_fetch(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.fetch_gen)
          return;
        st.fetch_in_flight = false;
        log::debug("partition {}: fetch from leader {} failed: {}",
                   name_of(st), st.assignment.leader, err);
        self->delayed_send(self, st.cfg.follower_retry_backoff, fetch_atom_v,
                           gen);
      });
}

// Long enough for the longest legitimate answer (a parked fetch) plus a
// slow link.
caf::timespan fetch_stall_after(const partition_replica_config& c) {
  return c.follower_fetch_wait + std::chrono::seconds{10};
}

// Follower (tick): a fetch unanswered for fetch_stall_after (lost with a
// dying link, say) is given up: its answer, should it still come, is
// dropped (fetch_gen), and a new fetch goes out.
void check_fetch_stall(replica_ptr self) {
  auto& st = self->state;
  if (st.leader || !st.fetch_in_flight)
    return;
  auto waited = self->clock().now() - st.fetch_sent;
  if (waited < fetch_stall_after(st.cfg))
    return;
  log::warn("partition {}: fetch from leader {} unanswered for {} ms: "
            "fetching again",
            name_of(st), st.assignment.leader,
            std::chrono::duration_cast<std::chrono::milliseconds>(waited)
              .count());
  ++st.fetch_gen;
  st.fetch_in_flight = false;
  follower_fetch(self);
}

// Takes the role the assignment gives this node.
void set_role(replica_ptr self, const partition_assignment& pa,
              caf::actor leader_broker) {
  auto& st = self->state;
  wake_ticks(self);
  bool was_leader = st.leader;
  auto old = st.assignment;
  st.assignment = pa;
  st.isr = pa.isr;
  bool lead = pa.leader == st.cfg.node_id;
  bool new_term = old.epoch != pa.epoch || old.leader != pa.leader
                  || was_leader != lead;
  if (st.cfg.probe)
    st.cfg.probe->replication(st.isr.size(),
                              std::max<size_t>(pa.replicas.size(), 1));
  if (lead) {
    st.leader = true;
    st.leader_broker = nullptr;
    if (new_term) {
      ++st.fetch_gen;
      st.fetch_in_flight = false;
      const auto& ep = st.log->epochs();
      if (ep.empty() || ep.back().epoch < pa.epoch)
        if (auto err = st.log->add_epoch(pa.epoch))
          log::error("partition {}: cannot record epoch {}: {}", name_of(st),
                     pa.epoch.value, err);
      // Follower positions are learned afresh from their fetches; until
      // then the HW stays where it is.
      auto now = self->clock().now();
      auto own = st.positions[st.cfg.node_id];
      st.positions.clear();
      st.positions[st.cfg.node_id] = own;
      st.caught_up.clear();
      st.last_fetch_end.clear();
      st.last_fetch_time.clear();
      for (auto id : pa.replicas)
        st.caught_up[id] = now;
      log::info("partition {}: leader in epoch {} (log end {}, HW {})",
                name_of(st), pa.epoch.value, st.log->log_end(),
                st.log->high_watermark());
    }
    advance(self);
    // What it fetched as a follower and held back for the HW: its log is
    // the one the others follow now.
    apply_durable_replicated(st);
    return;
  }
  st.leader = false;
  // A new handle of the leader's node means a new connection: a fetch in
  // flight went over the old one, whose answer never comes. Fetch again
  // now rather than after fetch_stall_after.
  bool new_link = st.leader_broker != leader_broker;
  st.leader_broker = std::move(leader_broker);
  if (was_leader) {
    // Appended but not committed: the new leader may not have it.
    fail_pending(st, not_leader_error(st));
    wake_waiters(self, true);
  }
  if (new_term || was_leader)
    st.last_batch_epoch = read_last_batch_epoch(st);
  if (new_term || new_link || !st.fetch_in_flight) {
    if (new_term || new_link) {
      ++st.fetch_gen;
      st.fetch_in_flight = false;
    }
    if (new_term) {
      log::info("partition {}: follower of node {} in epoch {} (log end {})",
                name_of(st), pa.leader, pa.epoch.value, st.log->log_end());
    }
    follower_fetch(self);
  }
}

// -- the periodic tick ----------------------------------------------------------

// The due time is rounded down to a multiple of `grid` on the clock (if
// that is still more than half the period away), so the ticks of all
// replicas fire together: CAF's clock thread wakes once per grid step for
// all of them instead of once per replica (10,000 busy partitions ticking
// every second at their own moments kept it waking 10,000 times a second,
// 8% of the node's CPU). Quiet ticks use whole seconds, busy ones a tenth
// of their period.
void schedule_tick(replica_ptr self, std::chrono::milliseconds in,
                   std::chrono::milliseconds grid) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto due = now + in;
  if (grid.count() > 0) {
    auto steps = due.time_since_epoch() / grid;
    auto rounded = caf::actor_clock::time_point{
      std::chrono::duration_cast<caf::actor_clock::duration_type>(grid * steps)};
    if (rounded > now + in / 2)
      due = rounded;
  }
  st.tick_due = due;
  self->delayed_send(self, due - now, tick_atom_v);
}

std::chrono::milliseconds busy_grid(const partition_replica_state& st) {
  return st.cfg.tick_interval / 10;
}

// Activity on a quiet replica: back to the short period now.
void wake_ticks(replica_ptr self) {
  auto& st = self->state;
  st.idle_ticks = 0;
  if (!st.quiet || st.cfg.tick_interval.count() <= 0)
    return;
  st.quiet = false;
  schedule_tick(self, st.cfg.tick_interval, busy_grid(st));
}

// After a tick: the period of the next one.
void reschedule_tick(replica_ptr self) {
  auto& st = self->state;
  if (st.cfg.tick_interval.count() <= 0)
    return;
  bool idle = st.log && st.pending.empty() && !st.sync_job
              && !st.isr_change_pending
              && st.log->log_end() == st.tick_log_end
              && st.log->high_watermark() == st.tick_hw
              && st.isr.size() >= st.assignment.replicas.size();
  if (st.log) {
    st.tick_log_end = st.log->log_end();
    st.tick_hw = st.log->high_watermark();
  }
  st.idle_ticks = idle ? st.idle_ticks + 1 : 0;
  st.quiet = st.idle_ticks >= st.cfg.quiet_after
             && st.cfg.quiet_tick_interval > st.cfg.tick_interval;
  if (st.quiet)
    schedule_tick(self, st.cfg.quiet_tick_interval, std::chrono::seconds{1});
  else
    schedule_tick(self, st.cfg.tick_interval, busy_grid(st));
}

// -- produce ------------------------------------------------------------------

// The produce just queued in st.pending waits for its commit: its answer
// goes to `slot` (a multi-partition produce) or to the request's promise.
caf::result<produce_response> park(replica_ptr self, produce_slot* slot) {
  auto& p = self->state.pending.back();
  if (slot) {
    p.promise = produce_answer{std::move(*slot)};
    return caf::delegated<produce_response>{};
  }
  auto rp = self->make_response_promise<produce_response>();
  p.promise = produce_answer{rp};
  return rp;
}

// `slot`: the produce came in a multi-partition produce (null: a request).
caf::result<produce_response> produce(replica_ptr self, produce_request& req,
                                      produce_slot* slot) {
  auto& st = self->state;
  auto arrived = steady_clock::now();
  if (st.fenced)
    return st.fenced;
  if (!st.leader)
    return not_leader_error(st);
  if (req.topic != st.cfg.topic || req.partition != st.cfg.partition)
    return make_error(ec::unknown_partition,
                      req.topic + "/" + std::to_string(req.partition.value)
                        + " is not served by replica " + name_of(st));
  auto limit = static_cast<size_t>(st.cfg.topic_cfg.max_message_bytes)
               + batch_layout::header_size;
  if (req.batch.size() > limit)
    return make_error(ec::message_too_large,
                      "batch of " + std::to_string(req.batch.size())
                        + " bytes exceeds max.message.bytes "
                        + std::to_string(st.cfg.topic_cfg.max_message_bytes)
                        + " (+" + std::to_string(batch_layout::header_size)
                        + " bytes of batch header) of " + st.cfg.topic);
  auto hdr = parse_batch_header(req.batch, limit);
  if (!hdr)
    return std::move(hdr.error());
  if (hdr->total_size() != req.batch.size())
    return make_error(ec::invalid_request,
                      "a produce carries exactly one batch; "
                        + std::to_string(req.batch.size() - hdr->total_size())
                        + " bytes follow it");
  if (hdr->transactional() || hdr->control())
    return make_error(ec::policy_violation, "transactions are not supported");
  if (st.cfg.topic_cfg.cleanup_policy & cleanup_compact) {
    // Compaction keeps the latest record per key: a record without one
    // could never be kept (Kafka refuses it too).
    auto d = decode_batch(req.batch, limit);
    if (!d)
      return std::move(d.error());
    for (size_t i = 0; i < d->records.size(); ++i)
      if (!d->records[i].key)
        return make_error(ec::malformed_record,
                          "record " + std::to_string(i) + " has no key; "
                            + st.cfg.topic + " has cleanup.policy="
                            + cleanup_policy_name(st.cfg.topic_cfg.cleanup_policy)
                            + " and keeps the latest record per key");
  }
  if (req.acks == acks_mode::all && st.isr.size() < min_isr(st))
    return make_error(ec::not_enough_replicas,
                      "ISR of " + name_of(st) + " has "
                        + std::to_string(st.isr.size())
                        + " members, min.insync.replicas is "
                        + std::to_string(min_isr(st)));
  // Idempotence before the append, which checks the CRC: a damaged retry of
  // a remembered batch is answered as the duplicate it claims to be, which
  // is harmless (nothing is written) and saves a CRC pass on every append.
  auto chk = st.producers.check(*hdr);
  if (!chk)
    return std::move(chk.error());
  if (chk->kind == sequence_check::duplicate) {
    ++st.stats.duplicates;
    produce_response resp{chk->base_offset, chk->last_offset,
                          st.log->log_start(), true};
    if (req.acks == acks_mode::none
        || covered(st, chk->last_offset, req.acks)) {
      observe_produce(st, 0, 0, arrived);
      return resp;
    }
    // The original is appended but not yet committed: answer with it.
    st.pending.push_back({chk->last_offset, 0, req.acks, resp, {}, 0, arrived,
                          self->clock().now() + st.cfg.ack_timeout});
    return park(self, slot);
  }
  if (st.pending_bytes > 0
      && st.pending_bytes + req.batch.size() > st.cfg.max_pending_bytes) {
    ++st.stats.throttled;
    return make_error(ec::throttled,
                      "partition " + name_of(st) + " has "
                        + std::to_string(st.pending_bytes)
                        + " bytes waiting for a flush (limit "
                        + std::to_string(st.cfg.max_pending_bytes) + ")");
  }
  set_partition_leader_epoch(req.batch, st.assignment.epoch.value);
  auto info = st.log->append(req.batch);
  if (!info)
    return std::move(info.error());
  ++st.stats.appends;
  st.last_batch_epoch = st.assignment.epoch.value;
  hdr->base_offset = info->base_offset;
  st.producers.record(*hdr, st.cfg.clock ? st.cfg.clock() : system_now_ms());
  produce_response resp{info->base_offset, info->last_offset,
                        st.log->log_start(), false};
  uint64_t records = info->records;
  st.pending.push_back({info->last_offset, info->bytes, req.acks, resp, {},
                        records, arrived, self->clock().now() + st.cfg.ack_timeout});
  st.pending_bytes += info->bytes;
  schedule_commit(self);
  wake_ticks(self);
  // Followers copy the log end, not only what is flushed: handing them the
  // batch now lets their write and fdatasync run while ours does (the HW
  // still waits for this replica's flush, see leader_position). Answering
  // them only after our flush would put two fsyncs in a row on every
  // acks=all produce.
  if (durable_acks(st) && !st.waiters.empty())
    wake_waiters(self, false, true);
  if (req.acks == acks_mode::none) {
    observe_produce(st, records, info->bytes, arrived);
    return resp;
  }
  return park(self, slot);
}

// -- fetch and offsets -----------------------------------------------------------

// Parked fetches share one timer (see expiry_at): armed for `deadline`
// unless one fires no later.
void arm_expiry(replica_ptr self, caf::actor_clock::time_point deadline) {
  auto& st = self->state;
  if (st.expiry_at && *st.expiry_at <= deadline)
    return;
  st.expiry_at = deadline;
  auto now = self->clock().now();
  self->delayed_send(self, deadline > now ? deadline - now : caf::timespan{0},
                     expire_atom_v, uint64_t{0});
}

// The timer fired: answers the fetches whose wait is over (with what there
// is, maybe nothing) and re-arms for the next deadline.
void expire_waiters(replica_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  if (st.expiry_at && *st.expiry_at <= now)
    st.expiry_at.reset(); // this is the timer that fired (or a later one)
  std::optional<caf::actor_clock::time_point> next;
  for (auto i = st.waiters.begin(); i != st.waiters.end();) {
    auto& w = i->second;
    if (w.deadline > now) {
      if (!next || w.deadline < *next)
        next = w.deadline;
      ++i;
      continue;
    }
    answer_waiter(st, w, read_fetch(st, w.request));
    i = st.waiters.erase(i);
  }
  if (next)
    arm_expiry(self, *next);
}


// A client that names the leader epoch it knows (Kafka's
// current_leader_epoch, KIP-320; -1: none): an older one is fenced, a newer
// one is news to this replica; either way the client refreshes metadata.
caf::error check_known_epoch(const partition_replica_state& st, int32_t known) {
  if (known < 0 || known == st.assignment.epoch.value)
    return {};
  if (known < st.assignment.epoch.value)
    return make_error(ec::fenced_leader_epoch,
                      "a client asks " + name_of(st) + " in leader epoch "
                        + std::to_string(known) + ", the leader is in epoch "
                        + std::to_string(st.assignment.epoch.value));
  return make_error(ec::not_leader,
                    "a client knows leader epoch " + std::to_string(known) + " of "
                      + name_of(st) + ", which is still in epoch "
                      + std::to_string(st.assignment.epoch.value));
}

caf::result<fetch_response> fetch(replica_ptr self, fetch_request& req) {
  auto& st = self->state;
  auto arrived = steady_clock::now();
  if (st.fenced)
    return st.fenced;
  if (req.topic != st.cfg.topic || req.partition != st.cfg.partition)
    return make_error(ec::unknown_partition,
                      req.topic + "/" + std::to_string(req.partition.value)
                        + " is not served by replica " + name_of(st));
  if (req.max_bytes <= 0)
    return make_error(ec::invalid_request,
                      "fetch max_bytes must be positive, got "
                        + std::to_string(req.max_bytes));
  if (!st.leader)
    return not_leader_error(st);
  if (req.replica_id < 0)
    if (auto err = check_known_epoch(st, req.leader_epoch))
      return err;
  if (req.replica_id >= 0) {
    if (req.leader_epoch >= 0 && req.leader_epoch != st.assignment.epoch.value)
      return make_error(ec::fenced_leader_epoch,
                        "follower " + std::to_string(req.replica_id)
                          + " fetches " + name_of(st) + " in leader epoch "
                          + std::to_string(req.leader_epoch)
                          + ", the leader is in epoch "
                          + std::to_string(st.assignment.epoch.value));
    if (auto div = divergence(st, req))
      return std::move(*div);
    if (req.from < st.log->log_start()) {
      // Below our log start (retention, purge): the follower starts over
      // at it (see follower_apply).
      fetch_response r;
      r.next_offset = req.from;
      r.high_watermark = st.log->high_watermark();
      r.log_start = st.log->log_start();
      r.log_end = st.log->log_end();
      return r;
    }
    follower_fetched(self, req.replica_id, req.from);
  }
  auto resp = read_fetch(st, req);
  if (!resp)
    return std::move(resp.error());
  if (req.max_wait_ms <= 0
      || resp->data.size() >= static_cast<size_t>(std::max(req.min_bytes, 0))
      || st.waiters.size() >= st.cfg.max_fetch_waiters) {
    observe_fetch(st, req, *resp, arrived);
    return std::move(*resp);
  }
  if (req.replica_id >= 0) {
    // One parked fetch per follower: a fetch session's next round replaces
    // the one its last round left here (answered now; nobody reads it).
    for (auto i = st.waiters.begin(); i != st.waiters.end(); ++i)
      if (i->second.request.replica_id == req.replica_id) {
        answer_waiter(st, i->second, read_fetch(st, i->second.request));
        st.waiters.erase(i);
        break;
      }
  }
  auto wait = std::min(std::chrono::milliseconds{req.max_wait_ms},
                       st.cfg.max_fetch_wait);
  auto id = st.next_waiter_id++;
  auto rp = self->make_response_promise<fetch_response>();
  auto deadline = self->clock().now() + wait;
  st.waiters.emplace(id, partition_replica_state::fetch_waiter{req, rp, arrived,
                                                               deadline});
  ++st.stats.parked_fetches;
  arm_expiry(self, deadline);
  return rp;
}

// A client's request for the leader: fenced, not the leader, another
// partition, or another leader epoch than the client knows, else nothing.
caf::error check_leader_request(const partition_replica_state& st, const std::string& topic,
                                partition_id partition, int32_t known_epoch) {
  if (st.fenced)
    return st.fenced;
  if (!st.leader)
    return not_leader_error(st);
  if (topic != st.cfg.topic || partition != st.cfg.partition)
    return make_error(ec::unknown_partition,
                      topic + "/" + std::to_string(partition.value)
                        + " is not served by replica " + name_of(st));
  return check_known_epoch(st, known_epoch);
}

caf::result<offset> list_offsets(replica_ptr self,
                                 const list_offsets_request& req) {
  auto& st = self->state;
  if (auto err = check_leader_request(st, req.topic, req.partition, req.leader_epoch))
    return err;
  auto hw = st.log->high_watermark();
  if (req.timestamp == -2)
    return st.log->log_start();
  if (req.timestamp == -1)
    return hw;
  if (req.timestamp < 0)
    return make_error(ec::invalid_request,
                      "list offsets timestamp " + std::to_string(req.timestamp)
                        + ": use -2 (earliest), -1 (latest) or a time in ms");
  auto found = st.log->offset_for_timestamp(req.timestamp);
  if (!found)
    return std::move(found.error());
  if (!*found || **found >= hw)
    return hw;
  return std::max(**found, st.log->log_start());
}

caf::result<epoch_end> end_of_epoch(replica_ptr self, const epoch_end_request& req) {
  auto& st = self->state;
  if (auto err = check_leader_request(st, req.topic, req.partition,
                                      req.current_leader_epoch))
    return err;
  // Kafka's rules (its leader epoch cache's endOffsetFor).
  epoch_end r;
  auto asked = req.leader_epoch;
  if (asked < 0 || asked > st.assignment.epoch.value)
    return r; // unknown: -1, -1
  const auto& ep = st.log->epochs();
  if (ep.empty() || asked >= ep.back().epoch.value) {
    // The latest epoch with batches, or one since then without any: it
    // ends at the log end.
    r.leader_epoch = asked;
    r.end_offset = st.log->log_end();
    return r;
  }
  auto next = std::upper_bound(ep.begin(), ep.end(), asked,
                               [](int32_t e, const epoch_entry& x) {
                                 return e < x.epoch.value;
                               });
  // Older than every epoch here: it ends where the log's first epoch starts.
  r.leader_epoch = next == ep.begin() ? asked : std::prev(next)->epoch.value;
  r.end_offset = next->start_offset;
  return r;
}

// -- compaction -------------------------------------------------------------------

void report_cleaning(const partition_replica_state& st) {
  if (!st.cfg.probe || !st.log || !(st.cfg.topic_cfg.cleanup_policy & cleanup_compact))
    return;
  auto c = st.log->cleaning();
  st.cfg.probe->cleaning(c.dirty_ratio, c.last_clean_ms);
}

// A compacted log whose clean is due goes to the node's cleaner; its
// callback (on the cleaner's thread) only sends the result back here.
void maybe_clean(replica_ptr self) {
  auto& st = self->state;
  if (!st.cfg.cleaner || st.cleaning || st.fenced
      || !(st.cfg.topic_cfg.cleanup_policy & cleanup_compact))
    return;
  auto now = st.cfg.clock ? st.cfg.clock() : system_now_ms();
  auto job = st.log->begin_clean(now);
  if (!job) {
    log::warn("partition {}: cannot start a clean: {}", name_of(st), job.error());
    return;
  }
  if (!*job)
    return;
  st.cleaning = std::make_shared<clean_job>(std::move(**job));
  st.cleaning->map_budget_bytes = st.cfg.cleaner->dedupe_buffer_bytes();
  st.cleaning->keep_key = st.cfg.clean_keep_key;
  auto addr = self->address();
  st.cfg.cleaner->submit(st.cleaning, st.producers.last_offsets(),
                         [addr](caf::error err) {
                           if (auto hdl = caf::actor_cast<caf::actor>(addr))
                             caf::anon_send(hdl, clean_atom_v, std::move(err));
                         });
}

void finish_clean(replica_ptr self, caf::error result) {
  auto& st = self->state;
  auto job = std::move(st.cleaning);
  if (!job || !st.log)
    return;
  auto done = st.log->end_clean(*job, std::move(result));
  if (!done) {
    if (!is(done.error(), ec::log_closed))
      log::warn("partition {}: clean failed: {}", name_of(st), done.error());
    return;
  }
  ++st.stats.cleans;
  st.stats.clean_bytes_reclaimed += done->bytes_reclaimed;
  if (st.cfg.cleaner)
    st.cfg.cleaner->count_swapped(*done);
  log::info("partition {}: cleaned {} records to {} ({} bytes reclaimed, {} "
            "tombstones removed), clean up to offset {}",
            name_of(st), done->records_read, done->records_kept,
            done->bytes_reclaimed, done->tombstones_removed,
            job->mapped_end);
  report_log(st);
  report_cleaning(st);
}

// -- tick ---------------------------------------------------------------------

void tick(replica_ptr self) {
  auto& st = self->state;
  if (!st.log || st.fenced)
    return;
  auto ret = st.log->enforce_retention();
  if (!ret) {
    log::warn("partition {}: retention failed: {}", name_of(st), ret.error());
  } else if (ret->segments_deleted > 0) {
    st.stats.segments_deleted += ret->segments_deleted;
    log::info("partition {}: retention deleted {} segments ({} bytes), log "
              "start now {}",
              name_of(st), ret->segments_deleted, ret->bytes_deleted,
              ret->new_log_start);
    // Waiters whose offset fell below the log start hear about it now.
    if (!st.waiters.empty())
      wake_waiters(self, false);
    report_log(st);
  }
  if (!st.commit_scheduled && !durable_acks(st) && st.log->flush_due())
    commit(self);
  if (st.fenced)
    return;
  // Appends a journaled log kept in memory go to the segment file now.
  if (auto err = st.log->write_deferred()) {
    if (!st.deferred_write_failed)
      log::warn("partition {}: writing appended data to its segment file "
                "failed: {} (the node journal holds it; retried every tick)",
                name_of(st), err);
    st.deferred_write_failed = true;
  } else if (st.deferred_write_failed) {
    log::info("partition {}: appended data written to its segment file again",
              name_of(st));
    st.deferred_write_failed = false;
  }
  // Replicated batches the node's stores failed to take: try again.
  if (st.apply_failed)
    apply_durable_replicated(st);
  maybe_clean(self);
  report_cleaning(st);
  // At most every checkpoint_interval; a HW that moves after a quiet spell
  // is saved at once.
  auto now_tp = self->clock().now();
  if (!st.last_checkpoint
      || now_tp - *st.last_checkpoint >= st.cfg.checkpoint_interval) {
    if (save_checkpoint(st))
      st.last_checkpoint = now_tp;
  }
  if (st.cfg.producer_expiration.count() >= 0) {
    auto now = st.cfg.clock ? st.cfg.clock() : system_now_ms();
    st.producers.expire(now, st.cfg.producer_expiration.count());
  }
  if (self->clock().now() - st.last_snapshot >= st.cfg.snapshot_interval)
    save_snapshot(self);
}

} // namespace

partition_replica_state::~partition_replica_state() {
  // The exit paths normally closed the log already; this is the last resort
  // (e.g. the actor system shutting down).
  for (auto& [id, w] : waiters) {
    auto err = make_error(ec::log_closed, "partition replica stopped");
    count_fetch_failure(*this, w.request, err);
    w.promise.deliver(std::move(err));
  }
  fail_pending(*this, make_error(ec::log_closed, "partition replica stopped"));
  if (log) {
    if (auto err = log->close())
      log::warn("partition {}: close failed: {}", name_of(*this), err);
  }
}

log_config make_log_config(const topic_config& tc, flush_policy flush) {
  log_config lc;
  lc.segment_bytes = static_cast<uint64_t>(std::max<int64_t>(tc.segment_bytes, 1));
  lc.segment_ms = std::chrono::milliseconds{tc.segment_ms};
  lc.retention_bytes = tc.retention_bytes;
  lc.retention_ms = std::chrono::milliseconds{tc.retention_ms};
  lc.max_batch_bytes = static_cast<uint32_t>(std::max(tc.max_message_bytes, 0))
                       + static_cast<uint32_t>(batch_layout::header_size);
  lc.flush = flush;
  if (!(tc.cleanup_policy & cleanup_delete)) {
    // compact alone: nothing is deleted by age or size.
    lc.retention_bytes = -1;
    lc.retention_ms = std::chrono::milliseconds{-1};
  }
  auto& cc = lc.compaction;
  cc.compact = (tc.cleanup_policy & cleanup_compact) != 0;
  cc.min_cleanable_dirty_ratio = tc.min_cleanable_dirty_ratio;
  cc.min_compaction_lag = std::chrono::milliseconds{tc.min_compaction_lag_ms};
  cc.max_compaction_lag = std::chrono::milliseconds{tc.max_compaction_lag_ms};
  cc.delete_retention = std::chrono::milliseconds{tc.delete_retention_ms};
  return lc;
}

partition_actor::behavior_type
partition_replica(partition_actor::stateful_pointer<partition_replica_state> self,
                  partition_replica_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.log_cfg = make_log_config(st.cfg.topic_cfg, st.cfg.flush);
  st.log_cfg.journal_defer_bytes = st.cfg.journal_defer_bytes;
  if (st.cfg.store && st.cfg.meta_writer)
    st.checkpoint = std::make_unique<writer_partition_checkpoint>(
      *st.cfg.meta_writer, st.cfg.topic, st.cfg.partition);
  else if (st.cfg.store)
    st.checkpoint = std::make_unique<lmdb_partition_checkpoint>(
      *st.cfg.store, st.cfg.topic, st.cfg.partition);
  else
    st.checkpoint = std::make_unique<memory_checkpoint>();
  auto opened = partition_log::open(st.cfg.dir, st.log_cfg, st.checkpoint.get(),
                                    st.cfg.fs, st.cfg.clock, st.cfg.journal.get());
  if (!opened) {
    log::error("partition {}: cannot open log in {}: {}", name_of(st),
               st.cfg.dir.string(), opened.error());
    self->quit(std::move(opened.error()));
    return partition_actor::behavior_type::make_empty_behavior();
  }
  st.log = std::move(*opened);
  if (const auto& rec = st.log->recovery(); rec.bytes_truncated > 0)
    log::warn("partition {}: recovery cut {} bytes: {}", name_of(st),
              rec.bytes_truncated, rec.reason);
  if (st.cfg.assignment.replicas.empty()) {
    // A cluster of one.
    st.cfg.assignment.partition = st.cfg.partition;
    st.cfg.assignment.leader = st.cfg.node_id;
    st.cfg.assignment.epoch = st.cfg.epoch;
    st.cfg.assignment.replicas = {st.cfg.node_id};
    st.cfg.assignment.isr = {st.cfg.node_id};
  }
  st.assignment = st.cfg.assignment;
  st.leader = st.assignment.leader == st.cfg.node_id;
  st.leader_broker = st.cfg.leader_broker;
  const auto& epochs = st.log->epochs();
  if (st.leader
      && (epochs.empty() || epochs.back().epoch < st.assignment.epoch)) {
    if (auto err = st.log->add_epoch(st.assignment.epoch)) {
      self->quit(std::move(err));
      return partition_actor::behavior_type::make_empty_behavior();
    }
  }
  st.last_batch_epoch = read_last_batch_epoch(st);
  if (st.cfg.on_replicated) {
    // The node's view of this log may have missed what was appended just
    // before a crash: replay all of it (applying is idempotent). A
    // compacted log holds about one record per live row, so this follows
    // the live state, not the history.
    st.replayed_records = replay_into_node(st);
    st.applied_end = st.log->log_end();
  }
  if (auto err = load_producers(st)) {
    log::error("partition {}: cannot rebuild producer state: {}", name_of(st),
               err);
    self->quit(std::move(err));
    return partition_actor::behavior_type::make_empty_behavior();
  }
  st.isr = st.assignment.isr;
  if (st.cfg.probe)
    st.cfg.probe->replication(st.isr.size(), st.assignment.replicas.size());
  st.last_snapshot = self->clock().now();
  st.checkpointed_hw = st.log->high_watermark();
  if (st.leader) {
    auto now = self->clock().now();
    for (auto id : st.assignment.replicas)
      st.caught_up[id] = now;
  }
  // Everything recovered from disk is durable: the HW catches up with it
  // (in a cluster of one; with followers once they report).
  advance(self);
  follower_fetch(self);
  if (st.cfg.on_loaded)
    st.cfg.on_loaded();
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a linked actor ended normally: not our business
    shut_down(self);
    self->quit(std::move(msg.reason));
  });
  if (st.cfg.tick_interval.count() > 0)
    schedule_tick(self, st.cfg.tick_interval, busy_grid(st));
  return {
    [self](produce_atom, produce_request& req) -> caf::result<produce_response> {
      return counted(self->state, produce(self, req, nullptr));
    },
    [self](produce_atom, produce_request& req, produce_slot& slot) {
      auto res = counted(self->state, produce(self, req, &slot));
      if (res.flag == caf::rt_value)
        produce_answer{std::move(slot)}.deliver(
          std::move(res.value.get_mutable_as<produce_response>(0)));
      else if (res.flag == caf::rt_error)
        produce_answer{std::move(slot)}.deliver(std::move(res.err));
      // Otherwise it waits in st.pending with the slot.
    },
    [self](fetch_atom, fetch_request& req) -> caf::result<fetch_response> {
      auto res = fetch(self, req);
      if (res.flag == caf::rt_error)
        count_fetch_failure(self->state, req, res.err);
      return res;
    },
    [self](offsets_atom, const epoch_end_request& req) -> caf::result<epoch_end> {
      return end_of_epoch(self, req);
    },
    [self](offsets_atom, const list_offsets_request& req) -> caf::result<offset> {
      return counted(self->state, list_offsets(self, req));
    },
    [self](status_atom) -> caf::result<partition_status> {
      auto& st = self->state;
      partition_status s;
      s.partition = st.cfg.partition;
      s.leader = st.assignment.leader;
      s.epoch = st.assignment.epoch;
      s.replicas = st.assignment.replicas;
      s.isr = st.isr;
      s.log_start = st.log->log_start();
      s.log_end = st.log->log_end();
      s.high_watermark = st.log->high_watermark();
      s.size_bytes = static_cast<int64_t>(st.log->size_bytes());
      s.online = !st.fenced;
      if (st.cfg.topic_cfg.cleanup_policy & cleanup_compact) {
        auto c = st.log->cleaning();
        s.dirty_ratio = c.dirty_ratio;
        s.last_clean_ms = c.last_clean_ms;
      }
      s.replayed_records = st.replayed_records;
      return s;
    },
    [self](clean_atom, caf::error& result) { finish_clean(self, std::move(result)); },
    [self](update_atom, const topic_config& tc) {
      auto& st = self->state;
      st.cfg.topic_cfg = tc;
      st.log_cfg = make_log_config(tc, st.cfg.flush);
      st.log_cfg.journal_defer_bytes = st.cfg.journal_defer_bytes;
      st.log->set_config(st.log_cfg);
    },
    [self](flush_atom) {
      self->state.commit_scheduled = false;
      commit(self);
    },
    [self](expire_atom, uint64_t) { expire_waiters(self); },
    [self](tick_atom) {
      auto& st = self->state;
      if (st.cfg.tick_interval.count() > 0 && self->clock().now() < st.tick_due)
        return; // a stale tick from before a wake-up (see tick_due)
      tick(self);
      check_isr_lag(self);
      check_fetch_stall(self);
      if (st.leader)
        fail_overdue_produces(self);
      reschedule_tick(self);
    },
    [self](purge_atom, offset before) -> caf::result<offset> {
      auto& st = self->state;
      if (st.fenced)
        return st.fenced;
      auto target = std::min(before, st.log->high_watermark());
      if (auto err = st.log->advance_log_start(target))
        return err;
      report_log(st);
      log::info("partition {}: log start moved to {} (records deleted)",
                name_of(st), st.log->log_start());
      return st.log->log_start();
    },
    [self](update_atom, const partition_assignment& pa,
           const caf::actor& leader_broker) {
      if (self->state.fenced || !self->state.log)
        return;
      set_role(self, pa, leader_broker);
    },
    [self](fetch_atom, uint64_t gen) {
      if (gen == self->state.fetch_gen)
        follower_fetch(self);
    },
    [self](stop_atom, bool delete_data) -> caf::result<bool> {
      auto& st = self->state;
      shut_down(self, delete_data);
      if (delete_data) {
        // The log was dropped without a flush or checkpoint (shut_down);
        // the directory is renamed into the trash here and its files are
        // removed on the remover's thread. (Closing and removing inline, a
        // 10,000-partition delete kept the scheduler busy ~8 s.)
        if (auto err = delete_partition_dir(st.cfg.dir, st.cfg.trash.get(),
                                            st.cfg.journal.get()))
          log::warn("partition {}: {}", name_of(st), err);
        if (st.cfg.store && st.cfg.meta_writer) {
          if (auto key = snapshot_key(st)) {
            st.cfg.meta_writer->erase_later(metadata_format::partitions_db,
                                            *key);
            st.cfg.meta_writer->erase_later(producer_snapshots_db, *key);
          }
        } else if (st.cfg.store) {
          metadata_batch batch;
          batch.erase_partition(st.cfg.topic, st.cfg.partition);
          if (auto key = snapshot_key(st))
            batch.erase(producer_snapshots_db, *key);
          if (auto err = st.cfg.store->write_batch(batch))
            log::warn("partition {}: cannot erase its metadata: {}",
                      name_of(st), err);
        }
        // The partition is gone: so are its series (if no one else holds
        // the probe).
        st.cfg.probe.reset();
      }
      auto rp = self->make_response_promise<bool>();
      rp.deliver(true);
      self->quit();
      return rp;
    },
  };
}

} // namespace ferry
