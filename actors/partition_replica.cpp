#include "actors/partition_replica.hpp"

#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/record_batch.hpp"
#include "metrics/node_probe.hpp"
#include "metrics/partition_probe.hpp"

#include <caf/actor_cast.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <limits>
#include <system_error>
#include <utility>

namespace ferry {

namespace {

using replica_ptr = partition_actor::stateful_pointer<partition_replica_state>;
using steady_clock = std::chrono::steady_clock;

std::string name_of(const partition_replica_state& st) {
  return st.cfg.topic + "/" + std::to_string(st.cfg.partition.value);
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

bool covered(const partition_replica_state& st, offset last, acks_mode acks) {
  if (acks == acks_mode::leader)
    return last < st.positions.at(st.cfg.node_id);
  return last < st.log->high_watermark();
}

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

// Answers parked fetches that now have min_bytes (or all of them).
void wake_waiters(replica_ptr self, bool all) {
  auto& st = self->state;
  for (auto i = st.waiters.begin(); i != st.waiters.end();) {
    auto& w = i->second;
    auto resp = read_fetch(st, w.request);
    if (!resp) {
      count_fetch_failure(st, w.request, resp.error());
      w.promise.deliver(std::move(resp.error()));
    } else if (all
               || resp->data.size()
                    >= static_cast<size_t>(std::max(w.request.min_bytes, 0))) {
      observe_fetch(st, w.request, *resp, w.arrived);
      w.promise.deliver(std::move(*resp));
    } else {
      ++i;
      continue;
    }
    i = st.waiters.erase(i);
  }
}

// Moves the leader's position and the HW, answers the produces they cover.
void advance(replica_ptr self) {
  auto& st = self->state;
  auto old_hw = st.log->high_watermark();
  st.positions[st.cfg.node_id] = leader_position(st);
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
      i->response.log_start = st.log->log_start();
      observe_produce(st, i->records, i->bytes, i->arrived);
      i->promise.deliver(i->response);
    }
    st.pending_bytes -= i->bytes;
    i = st.pending.erase(i);
  }
  if (st.log->high_watermark() > old_hw && !st.waiters.empty())
    wake_waiters(self, false);
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

// The group commit: one flush for everything appended since the last one.
void commit(replica_ptr self) {
  auto& st = self->state;
  if (st.fenced || !st.log)
    return;
  ++st.stats.commits;
  bool need = durable_acks(st) ? st.log->durable_end() < st.log->log_end()
                               : st.log->flush_due();
  if (need) {
    ++st.stats.log_flushes;
    if (auto r = st.log->flush(); !r) {
      fence(self, std::move(r.error()));
      return;
    }
  }
  advance(self);
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
  if (auto err = st.cfg.store->put(producer_snapshots_db, *key,
                                   st.producers.encode_snapshot(end))) {
    log::warn("partition {}: producer snapshot failed: {}", name_of(st), err);
    return;
  }
  st.snapshot_end = end;
  st.last_snapshot = self->clock().now();
  ++st.stats.snapshots;
}

void save_checkpoint(partition_replica_state& st) {
  if (!st.log || st.log->high_watermark() == st.checkpointed_hw)
    return;
  if (auto err = st.log->checkpoint()) {
    log::warn("partition {}: checkpoint failed: {}", name_of(st), err);
    return;
  }
  st.checkpointed_hw = st.log->high_watermark();
}

// Loads the last snapshot (if any) and replays the log after it.
caf::error load_producers(partition_replica_state& st) {
  if (st.cfg.store) {
    if (auto key = snapshot_key(st)) {
      auto bytes = st.cfg.store->get(producer_snapshots_db, *key);
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
void shut_down(replica_ptr self) {
  auto& st = self->state;
  if (!st.log)
    return;
  if (!st.fenced) {
    st.commit_scheduled = false;
    commit(self);
  }
  if (!st.fenced) {
    wake_waiters(self, true);
    save_snapshot(self);
  }
  fail_pending(st, make_error(ec::log_closed, "partition " + name_of(st)
                                                + " is shutting down"));
  if (auto err = st.log->close())
    log::warn("partition {}: close failed: {}", name_of(st), err);
  st.log.reset();
}

// -- produce ------------------------------------------------------------------

caf::result<produce_response> produce(replica_ptr self, produce_request& req) {
  auto& st = self->state;
  auto arrived = steady_clock::now();
  if (st.fenced)
    return st.fenced;
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
  if (req.acks == acks_mode::all
      && st.isr.size() < static_cast<size_t>(st.cfg.topic_cfg.min_insync_replicas))
    return make_error(ec::not_enough_replicas,
                      "ISR of " + name_of(st) + " has "
                        + std::to_string(st.isr.size())
                        + " members, min.insync.replicas is "
                        + std::to_string(st.cfg.topic_cfg.min_insync_replicas));
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
    st.pending.push_back({chk->last_offset, 0, req.acks, resp, {}, 0, arrived});
    auto rp = self->make_response_promise<produce_response>();
    st.pending.back().promise = rp;
    return rp;
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
  set_partition_leader_epoch(req.batch, st.cfg.epoch.value);
  auto info = st.log->append(req.batch);
  if (!info)
    return std::move(info.error());
  ++st.stats.appends;
  hdr->base_offset = info->base_offset;
  st.producers.record(*hdr);
  produce_response resp{info->base_offset, info->last_offset,
                        st.log->log_start(), false};
  uint64_t records = info->records;
  st.pending.push_back(
    {info->last_offset, info->bytes, req.acks, resp, {}, records, arrived});
  st.pending_bytes += info->bytes;
  schedule_commit(self);
  if (req.acks == acks_mode::none) {
    observe_produce(st, records, info->bytes, arrived);
    return resp;
  }
  auto rp = self->make_response_promise<produce_response>();
  st.pending.back().promise = rp;
  return rp;
}

// -- fetch and offsets -----------------------------------------------------------

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
  auto resp = read_fetch(st, req);
  if (!resp)
    return std::move(resp.error());
  if (req.max_wait_ms <= 0
      || resp->data.size() >= static_cast<size_t>(std::max(req.min_bytes, 0))
      || st.waiters.size() >= st.cfg.max_fetch_waiters) {
    observe_fetch(st, req, *resp, arrived);
    return std::move(*resp);
  }
  auto wait = std::min(std::chrono::milliseconds{req.max_wait_ms},
                       st.cfg.max_fetch_wait);
  auto id = st.next_waiter_id++;
  auto rp = self->make_response_promise<fetch_response>();
  st.waiters.emplace(id,
                     partition_replica_state::fetch_waiter{req, rp, arrived});
  ++st.stats.parked_fetches;
  self->delayed_send(self, wait, expire_atom_v, id);
  return rp;
}

caf::result<offset> list_offsets(replica_ptr self,
                                 const list_offsets_request& req) {
  auto& st = self->state;
  if (st.fenced)
    return st.fenced;
  if (req.topic != st.cfg.topic || req.partition != st.cfg.partition)
    return make_error(ec::unknown_partition,
                      req.topic + "/" + std::to_string(req.partition.value)
                        + " is not served by replica " + name_of(st));
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
  save_checkpoint(st);
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
  return lc;
}

partition_actor::behavior_type
partition_replica(partition_actor::stateful_pointer<partition_replica_state> self,
                  partition_replica_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.log_cfg = make_log_config(st.cfg.topic_cfg, st.cfg.flush);
  if (st.cfg.store)
    st.checkpoint = std::make_unique<lmdb_partition_checkpoint>(
      *st.cfg.store, st.cfg.topic, st.cfg.partition);
  else
    st.checkpoint = std::make_unique<memory_checkpoint>();
  auto opened = partition_log::open(st.cfg.dir, st.log_cfg, st.checkpoint.get(),
                                    st.cfg.fs, st.cfg.clock);
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
  const auto& epochs = st.log->epochs();
  if (epochs.empty() || epochs.back().epoch < st.cfg.epoch) {
    if (auto err = st.log->add_epoch(st.cfg.epoch)) {
      self->quit(std::move(err));
      return partition_actor::behavior_type::make_empty_behavior();
    }
  }
  if (auto err = load_producers(st)) {
    log::error("partition {}: cannot rebuild producer state: {}", name_of(st),
               err);
    self->quit(std::move(err));
    return partition_actor::behavior_type::make_empty_behavior();
  }
  st.isr = {st.cfg.node_id};
  if (st.cfg.probe)
    st.cfg.probe->replication(st.isr.size(), 1);
  st.last_snapshot = self->clock().now();
  st.checkpointed_hw = st.log->high_watermark();
  // Everything recovered from disk is durable: the HW catches up with it.
  advance(self);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a linked actor ended normally: not our business
    shut_down(self);
    self->quit(std::move(msg.reason));
  });
  if (st.cfg.tick_interval.count() > 0)
    self->delayed_send(self, st.cfg.tick_interval, tick_atom_v);
  return {
    [self](produce_atom, produce_request& req) -> caf::result<produce_response> {
      return counted(self->state, produce(self, req));
    },
    [self](fetch_atom, fetch_request& req) -> caf::result<fetch_response> {
      auto res = fetch(self, req);
      if (res.flag == caf::rt_error)
        count_fetch_failure(self->state, req, res.err);
      return res;
    },
    [self](offsets_atom, const list_offsets_request& req) -> caf::result<offset> {
      return counted(self->state, list_offsets(self, req));
    },
    [self](status_atom) -> caf::result<partition_status> {
      auto& st = self->state;
      partition_status s;
      s.partition = st.cfg.partition;
      s.leader = st.cfg.node_id;
      s.epoch = st.cfg.epoch;
      s.replicas = {st.cfg.node_id};
      s.isr = st.isr;
      s.log_start = st.log->log_start();
      s.log_end = st.log->log_end();
      s.high_watermark = st.log->high_watermark();
      s.size_bytes = static_cast<int64_t>(st.log->size_bytes());
      s.online = !st.fenced;
      return s;
    },
    [self](update_atom, const topic_config& tc) {
      auto& st = self->state;
      st.cfg.topic_cfg = tc;
      st.log_cfg = make_log_config(tc, st.cfg.flush);
      st.log->set_config(st.log_cfg);
    },
    [self](flush_atom) {
      self->state.commit_scheduled = false;
      commit(self);
    },
    [self](expire_atom, uint64_t id) {
      auto& st = self->state;
      auto i = st.waiters.find(id);
      if (i == st.waiters.end())
        return; // answered already
      auto resp = read_fetch(st, i->second.request);
      if (resp) {
        observe_fetch(st, i->second.request, *resp, i->second.arrived);
        i->second.promise.deliver(std::move(*resp));
      }
      else {
        count_fetch_failure(st, i->second.request, resp.error());
        i->second.promise.deliver(std::move(resp.error()));
      }
      st.waiters.erase(i);
    },
    [self](tick_atom) {
      tick(self);
      auto& st = self->state;
      if (st.cfg.tick_interval.count() > 0)
        self->delayed_send(self, st.cfg.tick_interval, tick_atom_v);
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
    [self](stop_atom, bool delete_data) -> caf::result<bool> {
      auto& st = self->state;
      shut_down(self);
      if (delete_data) {
        std::error_code ec;
        std::filesystem::remove_all(st.cfg.dir, ec);
        if (ec)
          log::warn("partition {}: cannot delete {}: {}", name_of(st),
                    st.cfg.dir.string(), ec.message());
        if (st.cfg.store) {
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
