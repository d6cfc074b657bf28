#include "actors/client/producer.hpp"

#include "actors/client/leader_links.hpp"

#include "broker/crc32c.hpp"
#include "broker/error.hpp"
#include "broker/partitioner.hpp"
#include "broker/varint.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry {

caf::expected<compression> parse_compression(std::string_view name) {
  if (name == "none")
    return compression::none;
  if (name == "gzip")
    return compression::gzip;
  if (name == "lz4")
    return compression::lz4;
  if (name == "zstd")
    return compression::zstd;
  return make_error(ec::invalid_config, "compression '" + std::string{name}
                                          + "': expected none, gzip, lz4 or zstd");
}

caf::expected<acks_mode> parse_acks(std::string_view name) {
  if (name == "0")
    return acks_mode::none;
  if (name == "1")
    return acks_mode::leader;
  if (name == "all" || name == "-1")
    return acks_mode::all;
  return make_error(ec::invalid_config,
                    "acks '" + std::string{name} + "': expected 0, 1 or all");
}

caf::error validate(const producer_config& cfg) {
  auto bad = [](std::string what) { return make_error(ec::invalid_config, std::move(what)); };
  if (cfg.batch_size == 0)
    return bad("batch.size must be > 0");
  if (cfg.max_in_flight < 1)
    return bad("max.in.flight must be >= 1");
  if (cfg.idempotence && cfg.acks == acks_mode::all && cfg.max_in_flight > 5)
    return bad("max.in.flight must be <= 5 with idempotence");
  if (cfg.retries < 0)
    return bad("retries must be >= 0");
  if (cfg.linger.count() < 0 || cfg.retry_backoff.count() < 0
      || cfg.max_block.count() < 0)
    return bad("linger.ms, retry.backoff.ms and max.block.ms must be >= 0");
  if (cfg.delivery_timeout.count() <= 0 || cfg.request_timeout.count() <= 0)
    return bad("delivery.timeout.ms and request.timeout.ms must be > 0");
  if (cfg.buffer_memory == 0 || cfg.max_request_size == 0)
    return bad("buffer.memory and max.request.size must be > 0");
  if (cfg.codec == compression::snappy)
    return bad("compression snappy is not supported");
  return {};
}

namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// The producer's full interface: the public one plus connection updates.
/// connect_atom: a new bootstrap connection. produce_atom (alone): send the
/// outbox (see producer_state::outbox).
using producer_impl = producer_actor::extend<caf::reacts_to<connect_atom, broker_actor>,
                                             caf::reacts_to<produce_atom>>;

constexpr uint64_t housekeeping_tick = 0;
/// The one linger timer (batch ids start at 1).
constexpr uint64_t linger_tick = std::numeric_limits<uint64_t>::max();

timestamp_ms wall_clock_ms() {
  return std::chrono::duration_cast<milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// Kafka's DefaultRecordBatch.incrementSequence: sequences wrap to 0.
int32_t increment_sequence(int32_t seq, int32_t n) {
  if (seq > std::numeric_limits<int32_t>::max() - n)
    return n - (std::numeric_limits<int32_t>::max() - seq) - 1;
  return seq + n;
}

/// One (produce_atom, std::vector<client_message>) request: a single
/// promise, answered once every message is acknowledged (reports[i] for
/// messages[i]) or at the first failure (with that error).
struct multi_request {
  caf::typed_response_promise<std::vector<delivery_report>> rp;
  std::vector<delivery_report> reports;
  size_t remaining = 0;
  bool answered = false;
};

/// Where one message's answer goes: its own promise (single produce) or its
/// slot in a batch request.
struct reply_to {
  caf::typed_response_promise<delivery_report> rp;
  std::shared_ptr<multi_request> multi;
  uint32_t index = 0;

  void deliver(delivery_report&& r) {
    if (!multi) {
      rp.deliver(std::move(r));
      return;
    }
    auto& m = *multi;
    m.reports[index] = std::move(r);
    if (--m.remaining == 0 && !m.answered) {
      m.answered = true;
      m.rp.deliver(std::move(m.reports));
    }
    multi.reset();
  }

  void fail(const caf::error& err) {
    if (!multi) {
      rp.deliver(err);
      return;
    }
    auto& m = *multi;
    --m.remaining;
    if (!m.answered) {
      m.answered = true;
      m.rp.deliver(err);
    }
    multi.reset();
  }
};

/// Where one message's answer goes.
struct sink {
  reply_to to;
  timestamp_ms timestamp = 0;
  uint64_t epoch = 0; ///< flush epoch
};

/// One partition's batch, from the first record until the broker's answer.
struct batch {
  uint64_t id = 0;
  /// Kept until the batch is answered: a resend encodes them again, so the
  /// encoded bytes can move into the request instead of being copied.
  std::vector<record> records;
  std::vector<sink> sinks;
  std::string data; ///< the encoded RecordBatch v2, until sent
  size_t bytes = 0; ///< counted against buffer.memory
  int32_t base_sequence = -1; ///< -1: not sequenced (yet, or again)
  /// The producer id and epoch base_sequence belongs to.
  producer_identity pid;
  /// A send of it may have been written: it went out, and no answer to it
  /// said it was refused before any write. Such a batch keeps its producer
  /// id and sequence whatever happens to the producer's (a new id, a gap
  /// closed behind it): sent again, it is recognized as the duplicate it
  /// may be. Numbering it afresh would write it twice if the first send
  /// landed.
  bool maybe_written = false;
  int32_t attempts = 0;
  uint64_t send_no = 0; ///< 0: not in flight; replies to older sends are ignored
  /// When the request in flight went out: housekeeping fails it after
  /// request.timeout.ms (see send_ready).
  clock::time_point sent_at{};
  clock::time_point created;
  /// While open: when linger.ms runs out for it.
  clock::time_point linger_due{};
  caf::error last_error;
  /// acks=0: reported (without an offset) when it went out, never sent
  /// again. It stays in flight until the node answers (or the request
  /// fails or times out) to hold its request slot, its buffer.memory and
  /// its records' flush epochs (`sent_epochs`): see send_ready.
  bool fire_and_forget = false;
  std::vector<uint64_t> sent_epochs;
};

using batch_ptr = std::unique_ptr<batch>;

/// Batches of one partition. `ready` holds sequenced batches (ascending)
/// before unsequenced ones; `in_flight` holds sequences below all of them.
struct partition_queue {
  topic_partition tp;
  batch_ptr open;
  /// The open batch's linger expired while the partition could not send
  /// (max_in_flight reached): it stays open, taking more records up to
  /// batch.size, and closes as soon as a request slot frees (Kafka's
  /// sender drains a ready batch only then, too). Under load batches grow
  /// towards batch.size whatever linger.ms is; at low rates linger decides.
  bool open_due = false;
  std::deque<batch_ptr> ready;
  std::deque<batch_ptr> in_flight;
  /// Ids of batches answered while an older batch of this partition was
  /// still unanswered. They keep their request slot until every older batch
  /// is answered (see slots_used): a broker remembers a producer's last five
  /// batches per partition, and an unanswered batch that is retried must
  /// still be among them to be recognized as the duplicate it is. With the
  /// slots freed out of order, a batch whose answer was lost (a relaying
  /// node died) fell out of that window while later batches went on; its
  /// retry was refused as out of order, the producer took a new producer
  /// id, and the batch was written twice.
  std::vector<uint64_t> answered_ahead;
  int32_t next_sequence = 0;
  clock::time_point resume_at{};
  int32_t failures = 0; ///< consecutive retriable failures (backoff)
  /// The node whose leader link carries the batches in flight; -1: the
  /// bootstrap connection. A partition changes routes only with nothing in
  /// flight, so its requests never overtake each other on two paths.
  int32_t via = -1;
};

/// A message accepted but not yet in a batch.
struct pending {
  client_message msg;
  reply_to to;
  clock::time_point accepted;
  uint64_t epoch = 0;
  size_t bytes = 0;
  bool refreshed = false; ///< metadata was refreshed for it already
};

struct flush_waiter {
  caf::typed_response_promise<bool> rp;
  uint64_t epoch = 0;
  bool failed = false;
};

struct producer_state {
  producer_config cfg;
  bool idempotent = false;
  int32_t max_in_flight = 1;
  connection_actor conn;
  broker_actor broker;
  uint64_t conn_gen = 0;
  uint64_t send_counter = 0;

  producer_identity pid;
  bool pid_ready = false;
  bool pid_requested = false;
  clock::time_point pid_retry_at{};

  std::unordered_map<std::string, int32_t> partitions;
  clock::time_point metadata_at{};
  clock::time_point metadata_retry_at{};
  bool metadata_requested = false;
  bool metadata_wanted = false;
  caf::error metadata_error;
  std::map<std::string, std::deque<pending>> waiting_metadata;
  /// Topics of waiting_metadata asked for by name (confirm_topic).
  std::set<std::string> confirming;

  /// Connections to partition leaders (producer_config::route_to_leaders);
  /// leaders from the metadata, updated by relayed answers in between.
  leader_links links;
  bool nodes_requested = false;

  std::deque<pending> blocked; ///< waiting for buffer space, FIFO
  std::map<topic_partition, partition_queue> queues;
  /// The entries of `queues` by hash: a record's partition and every answer
  /// look their queue up, and a std::map of 10,000 partitions made that
  /// lookup a tenth of the producer's CPU. Entries are never erased, so the
  /// pointers stay valid; `queues` keeps its order for the walks.
  std::unordered_map<topic_partition, partition_queue*, topic_partition_hash> queue_index;
  std::unordered_map<uint64_t, topic_partition> open_batches; ///< linger ids
  /// When the pending linger timer fires (nullopt: none pending). One timer
  /// serves every open batch, re-armed for the next one due: a timer per
  /// batch woke CAF's clock thread per batch.
  std::optional<clock::time_point> linger_timer;
  /// Open batches by linger deadline (batch id), oldest first: linger.ms
  /// is one value, so deadlines come in the order batches open. The timer
  /// pops the due ones instead of walking every partition (10,000
  /// partitions with linger.ms 1 made that walk most of the producer's
  /// CPU). Entries of batches closed since are skipped when popped.
  std::deque<std::pair<clock::time_point, uint64_t>> linger_order;
  uint64_t next_batch_id = 1;
  partitioner part;
  size_t buffered = 0;

  uint64_t epoch = 0;
  std::map<uint64_t, size_t> outstanding; ///< flush epoch -> unanswered
  std::vector<flush_waiter> flush_waiters;

  bool housekeeping_scheduled = false;
  /// Partitions backing off after a retriable failure (resume_at ahead):
  /// housekeeping resumes them without walking every partition.
  std::set<topic_partition> backing_off;
  /// When housekeeping next walks every partition (delivery and request
  /// timeouts, and anything ready that no event sent): at most every
  /// scan_period, not at every housekeeping tick (with 10,000 partitions
  /// the walk every 50 ms was most of the producer's CPU).
  clock::time_point next_scan{};
  bool stopping = false;

  /// Batches ready to go, by the node they go to: sent when the producer
  /// has handled what is in its mailbox (a produce_atom to itself), so the
  /// batches of many partitions of one node travel in ONE request (Kafka's
  /// Produce request carries many partitions). A node with fewer than
  /// multi_partition_min batches gets plain single-partition produces.
  struct outgoing {
    topic_partition tp;
    uint64_t id = 0;
    uint64_t send_no = 0;
    produce_request req;
  };
  std::vector<std::pair<broker_actor, std::vector<outgoing>>> outbox;
  bool outbox_scheduled = false;

  static inline const char* name = "ferry.producer";
};

using producer_pointer = producer_impl::stateful_pointer<producer_state>;

size_t record_bytes(const client_message& m) {
  size_t n = 24 + m.key.size() + m.value.size();
  for (auto& h : m.headers)
    n += 8 + h.key.size() + h.value.size();
  return n;
}

milliseconds backoff_for(const producer_config& cfg, int32_t failures) {
  auto d = cfg.retry_backoff;
  for (int32_t i = 1; i < failures && d < cfg.retry_backoff_max; ++i)
    d *= 2;
  return std::min(d, cfg.retry_backoff_max);
}

/// The queue of `tp`, or nullptr if no record went to it yet.
partition_queue* find_queue(producer_state& st, const topic_partition& tp) {
  auto i = st.queue_index.find(tp);
  return i == st.queue_index.end() ? nullptr : i->second;
}

bool expired(const producer_state& st, const batch& b, clock::time_point now) {
  return now - b.created >= st.cfg.delivery_timeout;
}

/// Request slots taken in `q`: the batches in flight and those answered
/// ahead of the oldest of them (see partition_queue::answered_ahead).
int32_t slots_used(partition_queue& q) {
  if (q.in_flight.empty()) {
    q.answered_ahead.clear();
  } else if (!q.answered_ahead.empty()) {
    uint64_t oldest = q.in_flight.front()->id;
    for (auto& b : q.in_flight)
      oldest = std::min(oldest, b->id);
    std::erase_if(q.answered_ahead, [oldest](uint64_t id) { return id < oldest; });
  }
  return static_cast<int32_t>(q.in_flight.size() + q.answered_ahead.size());
}

size_t in_flight_total(const producer_state& st) {
  size_t n = 0;
  for (auto& [tp, q] : st.queues)
    n += q.in_flight.size();
  return n;
}

// -- answering ----------------------------------------------------------------

void check_flush(producer_pointer self) {
  auto& st = self->state;
  auto lowest = st.outstanding.empty() ? std::numeric_limits<uint64_t>::max()
                                       : st.outstanding.begin()->first;
  auto i = std::partition(st.flush_waiters.begin(), st.flush_waiters.end(),
                          [&](const flush_waiter& w) { return w.epoch >= lowest; });
  for (auto j = i; j != st.flush_waiters.end(); ++j)
    j->rp.deliver(!j->failed);
  st.flush_waiters.erase(i, st.flush_waiters.end());
  if (st.stopping && st.outstanding.empty())
    self->quit();
}

void done(producer_state& st, uint64_t epoch, bool failed) {
  auto i = st.outstanding.find(epoch);
  if (i != st.outstanding.end() && --i->second == 0)
    st.outstanding.erase(i);
  if (failed)
    for (auto& w : st.flush_waiters)
      if (w.epoch >= epoch)
        w.failed = true;
}

void fail_pending(producer_state& st, pending& p, const caf::error& err) {
  p.to.fail(err);
  done(st, p.epoch, true);
}

/// An acks=0 batch's send is over (answered, failed or given up): its
/// records count as done for flush() and its memory is free. They were
/// reported when it went out (report_sent).
void settle_sent(producer_state& st, batch& b) {
  for (auto epoch : b.sent_epochs)
    done(st, epoch, false);
  b.sent_epochs.clear();
  st.buffered -= b.bytes;
  b.bytes = 0;
}

void fail_batch(producer_state& st, batch& b, const caf::error& err) {
  for (auto& s : b.sinks) {
    s.to.fail(err);
    done(st, s.epoch, true);
  }
  b.sinks.clear();
  settle_sent(st, b);
}

void complete_batch(producer_state& st, const partition_queue& q, batch& b,
                    offset base) {
  for (size_t k = 0; k < b.sinks.size(); ++k) {
    auto& s = b.sinks[k];
    auto off = base.value < 0 ? offset{-1} : base + static_cast<int64_t>(k);
    s.to.deliver(delivery_report{q.tp.topic, q.tp.partition, off, s.timestamp});
    done(st, s.epoch, false);
  }
  b.sinks.clear();
  settle_sent(st, b);
}

/// acks=0: reports b's records as sent (no offset, as Kafka's acks=0 does)
/// when b goes out. flush() and the buffer still count them until the
/// node took b (settle_sent): data in this process's send buffer is lost
/// with the process, unlike a kernel socket buffer's.
void report_sent(const partition_queue& q, batch& b) {
  for (auto& s : b.sinks) {
    s.to.deliver(delivery_report{q.tp.topic, q.tp.partition, offset{-1}, s.timestamp});
    b.sent_epochs.push_back(s.epoch);
  }
  b.sinks.clear();
  b.records.clear();
  b.records.shrink_to_fit();
  b.fire_and_forget = true;
}

// -- sending --------------------------------------------------------------------

void ensure_housekeeping(producer_pointer self) {
  auto& st = self->state;
  if (st.housekeeping_scheduled)
    return;
  st.housekeeping_scheduled = true;
  auto period = std::clamp(st.cfg.retry_backoff / 2, milliseconds{5}, milliseconds{50});
  self->delayed_send(self, period, tick_atom_v, housekeeping_tick);
}

/// Writes producer id, epoch and base sequence into an encoded batch and
/// recomputes its CRC (the fields are inside the CRC-covered range).
void patch_producer_fields(std::string& data, const producer_identity& pid,
                           int32_t base_sequence) {
  namespace L = batch_layout;
  be::store<int64_t>(data.data() + L::producer_id, pid.id.value);
  be::store<int16_t>(data.data() + L::producer_epoch, pid.epoch);
  be::store<int32_t>(data.data() + L::base_sequence, base_sequence);
  auto crc = crc32c(data.data() + L::attributes, data.size() - L::attributes);
  be::store<uint32_t>(data.data() + L::crc, crc);
}

/// Gives a batch its sequence (first send, or after a producer id reset) and
/// its bytes.
caf::error prepare(producer_state& st, partition_queue& q, batch& b) {
  bool assigned = false;
  if (st.idempotent && b.base_sequence < 0) {
    b.base_sequence = q.next_sequence;
    b.pid = st.pid;
    assigned = true;
    if (!b.data.empty())
      patch_producer_fields(b.data, b.pid, b.base_sequence);
  }
  if (b.data.empty()) {
    batch_meta meta;
    meta.codec = st.cfg.codec;
    if (st.idempotent) {
      meta.producer_id = b.pid.id.value;
      meta.producer_epoch = b.pid.epoch;
      meta.base_sequence = b.base_sequence;
    }
    auto enc = encode_batch(meta, b.records);
    if (!enc) {
      if (assigned)
        b.base_sequence = -1;
      return std::move(enc.error());
    }
    b.data = std::move(*enc);
  }
  if (assigned)
    q.next_sequence = increment_sequence(q.next_sequence,
                                         static_cast<int32_t>(b.sinks.size()));
  return {};
}

void on_produced(producer_pointer self, const topic_partition& tp, uint64_t id,
                 uint64_t send_no, const produce_response& r);
void on_failed(producer_pointer self, const topic_partition& tp, uint64_t id,
               uint64_t send_no, caf::error err);
void admit_blocked(producer_pointer self);
void close_open(producer_pointer self, partition_queue& q);
bool earlier_identity_in_flight(const producer_state& st, const partition_queue& q);
std::pair<broker_actor, int32_t> route_of(producer_pointer self,
                                          const partition_queue& q);

void queue_outgoing(producer_pointer self, const broker_actor& hdl,
                    const topic_partition& tp, uint64_t id, uint64_t sn,
                    produce_request req) {
  auto& st = self->state;
  auto i = std::find_if(st.outbox.begin(), st.outbox.end(),
                        [&](const auto& e) { return e.first == hdl; });
  if (i == st.outbox.end()) {
    st.outbox.emplace_back(hdl, std::vector<producer_state::outgoing>{});
    i = std::prev(st.outbox.end());
  }
  i->second.push_back({tp, id, sn, std::move(req)});
  if (!st.outbox_scheduled) {
    st.outbox_scheduled = true;
    self->send(self, produce_atom_v);
  }
}

std::deque<batch_ptr>::iterator find_sent(partition_queue& q, uint64_t id,
                                          uint64_t send_no);

// Fewer batches for one node than this go as single-partition produces:
// the replica answers those itself (the node only delegates) instead of
// the node gathering the answers. 1 node, 3 partitions, 2026-12-01: every
// ready batch in one request 355k/435k msgs/s, with this threshold
// 476k/422k (within run-to-run noise; the build before issue 15 gave
// 505k/521k in the same session).
constexpr size_t multi_partition_min = 8;

/// Sends `batch` (ready batches for the node `hdl`) as one multi-partition
/// request, or as single-partition produces when there are few.
void send_request(producer_pointer self, const broker_actor& hdl,
                  std::vector<producer_state::outgoing>& batch) {
  if (batch.size() < multi_partition_min) {
    for (auto& o : batch)
      self->request(hdl, caf::infinite, produce_atom_v, std::move(o.req))
        .then(
          [self, tp = o.tp, id = o.id, sn = o.send_no](produce_response& r) {
            on_produced(self, tp, id, sn, r);
          },
          [self, tp = o.tp, id = o.id, sn = o.send_no](caf::error& err) {
            on_failed(self, tp, id, sn, std::move(err));
          });
    return;
  }
  struct sent {
    topic_partition tp;
    uint64_t id;
    uint64_t send_no;
  };
  std::vector<sent> keys;
  std::vector<produce_request> reqs;
  keys.reserve(batch.size());
  reqs.reserve(batch.size());
  for (auto& o : batch) {
    keys.push_back({o.tp, o.id, o.send_no});
    reqs.push_back(std::move(o.req));
  }
  self->request(hdl, caf::infinite, produce_atom_v, std::move(reqs))
    .then(
      [self, keys](std::vector<produce_result>& rs) {
        for (size_t i = 0; i < keys.size(); ++i) {
          auto& k = keys[i];
          if (i >= rs.size())
            on_failed(self, k.tp, k.id, k.send_no,
                      make_error(ec::invalid_request,
                                 "the node answered "
                                   + std::to_string(rs.size())
                                   + " of " + std::to_string(keys.size())
                                   + " partitions"));
          else if (rs[i].error)
            on_failed(self, k.tp, k.id, k.send_no, std::move(rs[i].error));
          else
            on_produced(self, k.tp, k.id, k.send_no, rs[i].response);
        }
      },
      [self, keys](caf::error& err) {
        for (auto& k : keys)
          on_failed(self, k.tp, k.id, k.send_no, err);
      });
}

/// What an outgoing batch counts against max.request.size.
size_t request_bytes(const producer_state::outgoing& o) {
  return o.req.batch.size() + o.req.topic.size();
}

// Sends the outbox: one request per node (see producer_state::outbox), or
// several when its batches together pass max.request.size (as Kafka's
// sender fills a node's request up to it; a batch larger than that still
// goes, alone).
void send_outbox(producer_pointer self) {
  auto& st = self->state;
  st.outbox_scheduled = false;
  auto outbox = std::move(st.outbox);
  st.outbox.clear();
  for (auto& [hdl, queued] : outbox) {
    // A batch put back in its queue meanwhile (a reconnect, a new route)
    // goes again later with a new send number: not this one.
    std::vector<producer_state::outgoing> batch;
    size_t bytes = 0;
    for (auto& o : queued) {
      auto q = find_queue(st, o.tp);
      if (!q || find_sent(*q, o.id, o.send_no) == q->in_flight.end())
        continue;
      auto n = request_bytes(o);
      if (!batch.empty() && bytes + n > st.cfg.max_request_size) {
        send_request(self, hdl, batch);
        batch.clear();
        bytes = 0;
      }
      bytes += n;
      batch.push_back(std::move(o));
    }
    if (!batch.empty())
      send_request(self, hdl, batch);
  }
}

void send_ready(producer_pointer self, partition_queue& q) {
  auto& st = self->state;
  if ((st.idempotent && !st.pid_ready) || clock::now() < q.resume_at)
    return;
  auto [hdl, via] = route_of(self, q);
  if (!hdl)
    return;
  if (via != q.via) {
    // A new route (a leader link came up or went away, the leader moved):
    // taken once the requests on the old one are answered, so a later
    // batch never reaches the leader before an earlier one.
    if (!q.in_flight.empty())
      return;
    q.via = via;
  }
  while (!q.ready.empty() && slots_used(q) < st.max_in_flight) {
    // A batch kept under an earlier producer id (see batch::maybe_written)
    // goes first; the current id's batches wait for its answer.
    if (st.idempotent && earlier_identity_in_flight(st, q)) {
      auto& next = *q.ready.front();
      if (next.base_sequence < 0
          || (next.pid.id == st.pid.id && next.pid.epoch == st.pid.epoch))
        break;
    }
    auto b = std::move(q.ready.front());
    q.ready.pop_front();
    if (auto err = prepare(st, q, *b)) {
      fail_batch(st, *b, err);
      continue;
    }
    // The bytes move into the request (no copy of up to batch.size per
    // send); a retry encodes the kept records again, identically.
    produce_request req{q.tp.topic, q.tp.partition, st.cfg.acks, std::move(b->data)};
    b->data.clear();
    if (st.cfg.acks == acks_mode::none) {
      // Fire and forget (Kafka's acks=0): reported now, without an offset,
      // and never retried. It still goes in the node's request (one for
      // many partitions) and holds its request slot until the node, which
      // answers acks=0 at the append, has taken it: that is the producer's
      // backpressure. Sent as a message nobody answered, a producer faster
      // than its link queued all it was given in the connection's send
      // buffer (perf of a 1M-message run of 1 KB: most of the client's CPU
      // in page faults and copies growing buffers), sent one message per
      // partition batch, and lost what the buffer held when the process
      // ended after flush(): of ferry-bench's 1M, 228 to 12,837 records
      // reached the log in five runs.
      report_sent(q, *b);
    }
    b->send_no = ++st.send_counter;
    b->sent_at = clock::now();
    b->maybe_written = true;
    auto id = b->id;
    auto sn = b->send_no;
    q.in_flight.push_back(std::move(b));
    // No CAF request timeout: setting and cancelling one per request woke
    // CAF's clock thread twice per request (~6k wake-ups/s at full speed);
    // housekeeping fails requests older than request.timeout.ms instead.
    ensure_housekeeping(self);
    queue_outgoing(self, hdl, q.tp, id, sn, std::move(req));
  }
  // A lingered batch that waited for a slot goes now (close_open sends it).
  if (q.open && q.open_due && q.ready.empty() && slots_used(q) < st.max_in_flight)
    close_open(self, q);
}

void send_all(producer_pointer self) {
  for (auto& [tp, q] : self->state.queues)
    send_ready(self, q);
}

/// Lets b be numbered afresh at its next send (a new producer id, or a gap
/// closed), unless a send of it may have been written: that one keeps its
/// producer id and sequence (see batch::maybe_written).
void renumber(batch& b) {
  if (!b.maybe_written)
    b.base_sequence = -1;
}

/// Whether the broker's answer `err` says the batch was refused before
/// anything of it was written. Any other failure (a flush or disk error
/// after the append, a leader that stepped down or a replica that stopped
/// with it appended, the ISR shrinking after the append, no answer at all)
/// leaves open that it was written.
bool refused_unwritten(const caf::error& err) {
  if (err.category() != ferry_category())
    return false;
  switch (code_of(err)) {
    case ec::truncated_batch:
    case ec::crc_mismatch:
    case ec::bad_magic:
    case ec::bad_varint:
    case ec::length_overflow:
    case ec::malformed_record:
    case ec::unsupported_compression:
    case ec::decompression_failed:
    case ec::unknown_topic:
    case ec::unknown_partition:
    case ec::invalid_topic_name:
    case ec::message_too_large:
    case ec::invalid_config:
    case ec::policy_violation:
    case ec::throttled:
    case ec::fenced_leader_epoch:
    case ec::out_of_order_sequence:
    case ec::invalid_producer_epoch:
    case ec::unknown_producer_id:
    case ec::authentication_failed:
    case ec::authorization_failed:
    case ec::login_throttled:
    case ec::security_loading:
      return true;
    default:
      return false;
  }
}

/// Whether an in-flight batch of q belongs to an earlier producer id than
/// the current one: batches of the current id wait until those are
/// answered, so the partition's log keeps the order they were produced in.
bool earlier_identity_in_flight(const producer_state& st, const partition_queue& q) {
  return std::any_of(q.in_flight.begin(), q.in_flight.end(), [&](const batch_ptr& b) {
    return b->base_sequence >= 0
           && (b->pid.id != st.pid.id || b->pid.epoch != st.pid.epoch);
  });
}

/// Puts a partition's in-flight batches back at the head of its queue, in
/// order; replies to their earlier sends are ignored from now on.
void requeue_in_flight(producer_state& st, partition_queue& q) {
  // Resent in order on one route, the older batches reach the broker before
  // any newer one: they are within its window again.
  q.answered_ahead.clear();
  while (!q.in_flight.empty()) {
    auto b = std::move(q.in_flight.back());
    q.in_flight.pop_back();
    if (b->fire_and_forget) {
      settle_sent(st, *b); // acks=0 sends once; reported when it went out
      continue;
    }
    b->send_no = 0;
    if (!st.pid_ready)
      renumber(*b); // a new producer id numbers it afresh, if it can
    q.ready.push_front(std::move(b));
  }
}

// -- routing to partition leaders ----------------------------------------------

/// The handle partition q's requests go through now, and whose it is: its
/// leader's link when that is connected (node id), else the bootstrap
/// connection (-1), whose node relays to the leader.
std::pair<broker_actor, int32_t> route_of(producer_pointer self,
                                          const partition_queue& q) {
  auto& st = self->state;
  auto r = st.links.route(q.tp, self->system(),
                          caf::actor_cast<connection_listener>(self));
  if (r.first)
    return r;
  return {st.broker, -1};
}

/// Closes links no partition of ours is led through any more, once nothing
/// is in flight on them.
void prune_links(producer_pointer self) {
  auto& st = self->state;
  std::set<topic_partition> parts;
  std::set<int32_t> busy;
  for (auto& [tp, q] : st.queues) {
    parts.insert(tp);
    if (q.via >= 0 && !q.in_flight.empty())
      busy.insert(q.via);
  }
  st.links.prune(parts, busy);
}

/// Asks the bootstrap node where every node is reached (for the links).
void request_nodes(producer_pointer self) {
  auto& st = self->state;
  if (!st.links.enabled() || !st.broker || st.nodes_requested)
    return;
  st.nodes_requested = true;
  auto gen = st.conn_gen;
  self->request(st.broker, st.cfg.request_timeout, list_atom_v, broker_atom_v)
    .then(
      [self, gen](std::vector<node_info>& nodes) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.nodes_requested = false;
        st.links.set_nodes(nodes);
        prune_links(self);
        send_all(self);
      },
      [self, gen](caf::error&) {
        auto& st = self->state;
        if (gen == st.conn_gen)
          st.nodes_requested = false; // again with the next metadata
      });
}

void request_pid(producer_pointer self);

/// The broker's view of our sequences is unknown (or lost): get a new
/// producer id once nothing is in flight, then renumber everything unsent.
void reset_pid(producer_pointer self) {
  auto& st = self->state;
  st.pid_ready = false;
  for (auto& [tp, q] : st.queues) {
    q.next_sequence = 0;
    for (auto& b : q.ready)
      renumber(*b);
  }
  request_pid(self);
}

void request_pid(producer_pointer self) {
  auto& st = self->state;
  if (!st.idempotent || st.pid_ready || st.pid_requested || !st.broker
      || clock::now() < st.pid_retry_at || in_flight_total(st) > 0)
    return;
  st.pid_requested = true;
  auto gen = st.conn_gen;
  self->request(st.broker, st.cfg.request_timeout, init_pid_atom_v)
    .then(
      [self, gen](producer_identity& id) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.pid_requested = false;
        st.pid = id;
        st.pid_ready = true;
        for (auto& [tp, q] : st.queues) {
          q.next_sequence = 0;
          for (auto& b : q.ready)
            renumber(*b);
        }
        send_all(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.pid_requested = false;
        st.pid_retry_at = clock::now() + st.cfg.retry_backoff;
        if (!is_retriable(err)) {
          // Without a producer id nothing can be sent: fail what waits.
          for (auto& [tp, q] : st.queues)
            for (auto& b : q.ready)
              fail_batch(st, *b, err);
          for (auto& [tp, q] : st.queues)
            q.ready.clear();
        }
        ensure_housekeeping(self);
      });
}

// -- batching -------------------------------------------------------------------

partition_queue& queue_for(producer_state& st, const std::string& topic,
                           int32_t partition) {
  topic_partition tp{topic, partition_id{partition}};
  if (auto q = find_queue(st, tp))
    return *q;
  auto i = st.queues.emplace(tp, partition_queue{}).first;
  i->second.tp = tp;
  st.queue_index.emplace(std::move(tp), &i->second);
  return i->second;
}

void close_open(producer_pointer self, partition_queue& q) {
  auto& st = self->state;
  if (!q.open)
    return;
  auto b = std::move(q.open);
  q.open_due = false;
  st.open_batches.erase(b->id);
  if (auto n = st.partitions.find(q.tp.topic); n != st.partitions.end())
    st.part.batch_closed(q.tp.topic, q.tp.partition.value, n->second);
  q.ready.push_back(std::move(b));
  send_ready(self, q);
}

void arm_linger(producer_pointer self, clock::time_point due) {
  auto& st = self->state;
  if (st.linger_timer && *st.linger_timer <= due)
    return;
  st.linger_timer = due;
  auto now = clock::now();
  self->delayed_send(self, due > now ? due - now : clock::duration{0},
                     tick_atom_v, linger_tick);
}

/// The open batch of `q` lingered long enough.
void linger_expired(producer_pointer self, partition_queue& q) {
  auto& st = self->state;
  // Only waiting for a request slot: keep filling it (see open_due).
  // Anything else (no connection, no producer id, backoff) closes it as
  // before, so the delivery timeout covers it.
  bool slots_full = slots_used(q) >= st.max_in_flight || !q.ready.empty();
  if (slots_full && route_of(self, q).first && (!st.idempotent || st.pid_ready)
      && clock::now() >= q.resume_at) {
    q.open_due = true;
    return;
  }
  close_open(self, q);
}

/// The linger timer fired: every open batch due goes (or waits for a slot,
/// see linger_expired); the timer is re-armed for the next one.
void linger_timer_fired(producer_pointer self) {
  auto& st = self->state;
  auto now = clock::now();
  if (st.linger_timer && *st.linger_timer <= now)
    st.linger_timer.reset(); // this is the timer that fired (or a later one)
  // The open batch `id`, if it is still open and still lingering.
  auto lingering = [&](uint64_t id) -> partition_queue* {
    auto i = st.open_batches.find(id);
    if (i == st.open_batches.end())
      return nullptr;
    auto q = find_queue(st, i->second);
    if (!q || !q->open || q->open->id != id || q->open_due)
      return nullptr;
    return q;
  };
  while (!st.linger_order.empty()) {
    auto [due, id] = st.linger_order.front();
    auto* q = lingering(id);
    if (q && due > now)
      break;
    st.linger_order.pop_front();
    if (q)
      linger_expired(self, *q);
  }
  if (!st.linger_order.empty())
    arm_linger(self, st.linger_order.front().first);
}

void close_all(producer_pointer self) {
  for (auto& [tp, q] : self->state.queues)
    close_open(self, q);
}

void append(producer_pointer self, pending& p, int32_t partitions) {
  auto& st = self->state;
  auto& m = p.msg;
  const std::string* key = m.has_key ? &m.key : nullptr;
  auto part = st.part.choose(m.topic, partitions, m.partition, key);
  auto& q = queue_for(st, m.topic, part);
  if (q.open && q.open->bytes + p.bytes > st.cfg.batch_size)
    close_open(self, q);
  if (!q.open) {
    q.open = std::make_unique<batch>();
    q.open->id = st.next_batch_id++;
    q.open->created = p.accepted;
    // Room for a few records; the vectors grow geometrically from there.
    // Reserving a full batch.size of records (~950 for 1 KB records) cost
    // a fresh ~120 KB heap block per batch, and at 1,000 partitions (~5
    // records a batch) page faults in malloc were a fifth of the
    // producer's CPU (perf, 2026-12-03).
    auto expect = std::min<size_t>(st.cfg.batch_size / std::max<size_t>(p.bytes, 1) + 1, 16);
    q.open->records.reserve(expect);
    q.open->sinks.reserve(expect);
    st.open_batches.emplace(q.open->id, q.tp);
    if (st.cfg.linger.count() == 0) {
      self->send(self, tick_atom_v, q.open->id); // after this burst
    } else {
      q.open->linger_due = clock::now() + st.cfg.linger;
      st.linger_order.emplace_back(q.open->linger_due, q.open->id);
      arm_linger(self, q.open->linger_due);
    }
  }
  auto& b = *q.open;
  record r;
  r.offset_delta = static_cast<int32_t>(b.records.size());
  r.timestamp = m.timestamp != 0 ? m.timestamp : wall_clock_ms();
  if (m.has_key)
    r.key = std::move(m.key);
  if (m.has_value)
    r.value = std::move(m.value);
  r.headers.reserve(m.headers.size());
  for (auto& h : m.headers)
    r.headers.push_back(record_header{std::move(h.key), std::move(h.value)});
  b.sinks.push_back(sink{std::move(p.to), r.timestamp, p.epoch});
  b.records.push_back(std::move(r));
  b.bytes += p.bytes;
  st.buffered += p.bytes;
  if (b.bytes >= st.cfg.batch_size)
    close_open(self, q);
}

void request_metadata(producer_pointer self);

/// Places a message whose topic's metadata is known.
void route(producer_pointer self, pending&& p) {
  auto& st = self->state;
  auto n = st.partitions.at(p.msg.topic);
  if (p.msg.partition >= n || p.msg.partition < -1) {
    if (!p.refreshed && p.msg.partition >= n) {
      // Maybe the topic grew since the last metadata: look again once.
      p.refreshed = true;
      auto& w = st.waiting_metadata[p.msg.topic];
      w.push_back(std::move(p));
      st.metadata_wanted = true;
      request_metadata(self);
      return;
    }
    fail_pending(st, p,
                 make_error(ec::unknown_partition,
                            "partition " + std::to_string(p.msg.partition)
                              + " of topic '" + p.msg.topic + "' (it has "
                              + std::to_string(n) + ")"));
    return;
  }
  if (!st.blocked.empty() || st.buffered + p.bytes > st.cfg.buffer_memory) {
    if (st.cfg.max_block.count() == 0 && st.buffered > 0) {
      fail_pending(st, p, make_error(ec::throttled, "producer buffer.memory of "
                                                      + std::to_string(st.cfg.buffer_memory)
                                                      + " bytes is full"));
      return;
    }
    st.blocked.push_back(std::move(p));
    ensure_housekeeping(self);
    return;
  }
  append(self, p, n);
}

void admit_blocked(producer_pointer self) {
  auto& st = self->state;
  while (!st.blocked.empty()) {
    auto& p = st.blocked.front();
    // A record larger than the whole buffer still goes once it is empty.
    if (st.buffered > 0 && st.buffered + p.bytes > st.cfg.buffer_memory)
      return;
    auto moved = std::move(p);
    st.blocked.pop_front();
    auto n = st.partitions.find(moved.msg.topic);
    if (n == st.partitions.end()) {
      st.waiting_metadata[moved.msg.topic].push_back(std::move(moved));
      request_metadata(self);
      continue;
    }
    append(self, moved, n->second);
  }
}

/// A topic the node's list did not name, asked for by name: a node of a
/// cluster learns of a topic created through another node a moment after
/// the create was answered, and asked by name it waits for it a short
/// while (ferryd's topic_wait). Once it answers, the list is asked again;
/// if it does not know the topic either, the messages for it fail with its
/// answer (unknown_topic).
void confirm_topic(producer_pointer self, const std::string& topic) {
  auto& st = self->state;
  if (!st.broker || !st.confirming.insert(topic).second)
    return;
  auto gen = st.conn_gen;
  self->request(st.broker, st.cfg.request_timeout, describe_atom_v, topic_atom_v, topic)
    .then(
      [self, gen, topic](topic_description&) {
        auto& st = self->state;
        st.confirming.erase(topic);
        if (gen != st.conn_gen)
          return;
        st.metadata_wanted = true;
        request_metadata(self);
      },
      [self, gen, topic](caf::error& err) {
        auto& st = self->state;
        st.confirming.erase(topic);
        if (gen != st.conn_gen)
          return;
        auto w = st.waiting_metadata.find(topic);
        if (w == st.waiting_metadata.end())
          return;
        auto msgs = std::move(w->second);
        st.waiting_metadata.erase(w);
        if (code_of(err) == ec::unknown_topic)
          err = make_error(ec::unknown_topic, "topic '" + topic + "' does not exist");
        for (auto& p : msgs)
          fail_pending(st, p, err);
        check_flush(self);
      });
}

void request_metadata(producer_pointer self) {
  auto& st = self->state;
  st.metadata_wanted = true;
  if (!st.broker || st.metadata_requested || clock::now() < st.metadata_retry_at) {
    ensure_housekeeping(self);
    return;
  }
  st.metadata_requested = true;
  st.metadata_wanted = false;
  auto gen = st.conn_gen;
  self->request(st.broker, st.cfg.request_timeout, list_atom_v, topic_atom_v)
    .then(
      [self, gen](std::vector<topic_metadata>& topics) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.metadata_requested = false;
        st.metadata_at = clock::now();
        st.metadata_error = caf::error{};
        std::unordered_map<std::string, int32_t> fresh;
        st.links.set_leaders(topics);
        for (auto& t : topics) {
          auto n = t.partitions.empty() ? t.config.partitions
                                        : static_cast<int32_t>(t.partitions.size());
          if (n <= 0)
            continue;
          auto old = st.partitions.find(t.name);
          if (old != st.partitions.end() && old->second != n)
            st.part.reset(t.name);
          fresh.emplace(t.name, n);
        }
        st.partitions = std::move(fresh);
        request_nodes(self); // the leaders' endpoints (links: send_all)
        prune_links(self);
        send_all(self);
        auto waiting = std::move(st.waiting_metadata);
        st.waiting_metadata.clear();
        for (auto& [topic, msgs] : waiting) {
          if (st.partitions.count(topic) > 0) {
            for (auto& p : msgs)
              route(self, std::move(p));
            continue;
          }
          auto& w = st.waiting_metadata[topic];
          for (auto& p : msgs)
            w.push_back(std::move(p));
          confirm_topic(self, topic);
        }
        check_flush(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.conn_gen)
          return;
        st.metadata_requested = false;
        st.metadata_wanted = true;
        st.metadata_retry_at = clock::now() + st.cfg.retry_backoff;
        st.metadata_error = err;
        if (!is_retriable(err)) {
          st.metadata_wanted = false;
          auto waiting = std::move(st.waiting_metadata);
          st.waiting_metadata.clear();
          for (auto& [topic, msgs] : waiting)
            for (auto& p : msgs)
              fail_pending(st, p, err);
          check_flush(self);
        }
        ensure_housekeeping(self);
      });
}

void submit(producer_pointer self, pending&& p) {
  auto& st = self->state;
  if (p.bytes > st.cfg.max_request_size) {
    fail_pending(st, p, make_error(ec::message_too_large,
                                   "record of " + std::to_string(p.bytes)
                                     + " bytes exceeds max.request.size "
                                     + std::to_string(st.cfg.max_request_size)));
    return;
  }
  auto w = st.waiting_metadata.find(p.msg.topic);
  if ((w != st.waiting_metadata.end() && !w->second.empty())
      || st.partitions.count(p.msg.topic) == 0) {
    st.waiting_metadata[p.msg.topic].push_back(std::move(p));
    request_metadata(self);
    return;
  }
  route(self, std::move(p));
}

// -- replies ----------------------------------------------------------------------

std::deque<batch_ptr>::iterator find_sent(partition_queue& q, uint64_t id,
                                          uint64_t send_no) {
  return std::find_if(q.in_flight.begin(), q.in_flight.end(), [&](const batch_ptr& b) {
    return b->id == id && b->send_no == send_no;
  });
}

void after_progress(producer_pointer self, partition_queue& q) {
  auto& st = self->state;
  if (st.idempotent && !st.pid_ready)
    request_pid(self); // a pending reset waits for in-flight batches
  send_ready(self, q);
  admit_blocked(self);
  check_flush(self);
}

void on_produced(producer_pointer self, const topic_partition& tp, uint64_t id,
                 uint64_t send_no, const produce_response& r) {
  auto& st = self->state;
  auto qp = find_queue(st, tp);
  if (!qp)
    return;
  auto& q = *qp;
  auto i = find_sent(q, id, send_no);
  if (i == q.in_flight.end())
    return;
  auto b = std::move(*i);
  q.in_flight.erase(i);
  q.answered_ahead.push_back(b->id); // dropped at once unless older ones wait
  q.failures = 0;
  // Relayed by the node we sent to: the leader is elsewhere (send_ready
  // moves there once this partition's requests are answered).
  if (st.links.hint(tp, r.leader) && !st.links.knows_node(r.leader))
    st.metadata_wanted = true;
  complete_batch(st, q, *b, r.base_offset);
  after_progress(self, q);
}

void on_failed(producer_pointer self, const topic_partition& tp, uint64_t id,
               uint64_t send_no, caf::error err) {
  auto& st = self->state;
  auto qp = find_queue(st, tp);
  if (!qp)
    return;
  auto& q = *qp;
  auto i = find_sent(q, id, send_no);
  if (i == q.in_flight.end())
    return;
  auto code = code_of(err);
  if ((*i)->fire_and_forget) {
    // acks=0: reported when it went out and not retried (Kafka's retries do
    // not apply to it either); its slot frees for the next batch.
    if (code == ec::unknown_topic || code == ec::unknown_partition
        || code == ec::not_leader)
      st.metadata_wanted = true;
    settle_sent(st, **i);
    q.in_flight.erase(i);
    after_progress(self, q);
    return;
  }
  auto& b = **i;
  auto now = clock::now();
  bool first = i == q.in_flight.begin();
  auto pos = i - q.in_flight.begin();
  b.last_error = err;
  if (refused_unwritten(err))
    b.maybe_written = false;
  if (code == ec::unknown_topic || code == ec::unknown_partition
      || code == ec::not_leader)
    st.metadata_wanted = true;
  bool id_refused = code == ec::unknown_producer_id || code == ec::invalid_producer_epoch
                    || code == ec::out_of_order_sequence;
  if (st.idempotent && st.pid_ready && b.base_sequence >= 0 && id_refused
      && (b.pid.id != st.pid.id || b.pid.epoch != st.pid.epoch)) {
    // Kept under an earlier producer id, and refused for it: not written,
    // so it goes again numbered under the current id (no new id needed).
    b.base_sequence = -1;
    requeue_in_flight(st, q);
    after_progress(self, q);
    return;
  }
  bool can_retry = b.attempts < st.cfg.retries && !expired(st, b, now);
  // The broker lost (or never had) our producer state, or fenced our epoch.
  bool pid_lost = st.idempotent
                  && (code == ec::unknown_producer_id
                      || code == ec::invalid_producer_epoch
                      || (code == ec::out_of_order_sequence && first));
  // A later batch of a partition whose earlier batch failed is rejected for
  // the gap; it goes again after the earlier one.
  bool retriable = is_retriable(err) || code == ec::out_of_order_sequence || pid_lost;
  if (retriable && can_retry) {
    ++b.attempts;
    ++q.failures;
    if (pid_lost)
      st.pid_ready = false;
    requeue_in_flight(st, q);
    q.resume_at = now + backoff_for(st.cfg, q.failures);
    st.backing_off.insert(q.tp);
    if (pid_lost)
      reset_pid(self);
    ensure_housekeeping(self);
    return;
  }
  auto failed = std::move(*i);
  q.in_flight.erase(i);
  bool sequenced = st.idempotent && failed->base_sequence >= 0;
  bool unwritten = refused_unwritten(err);
  auto reported = err;
  if (retriable && !can_retry)
    reported = make_error(code == ec::none ? ec::request_timed_out : code,
                          "gave up after " + std::to_string(failed->attempts + 1)
                            + " attempts: " + error_text(err));
  fail_batch(st, *failed, reported);
  if (sequenced) {
    if (retriable || !unwritten) {
      // Unknown whether the broker appended it: only a new producer id
      // makes the following sequences valid again (Kafka's epoch bump).
      st.pid_ready = false;
      reset_pid(self);
    } else {
      // Refused before anything of it was written, so the broker's
      // sequence did not move past it. The batches sent before it keep
      // their sequences and their place in flight: their answers are still
      // to come (acks=all answers an appended batch only once replicated,
      // while a refusal comes at once). Renumbering those wrote them twice
      // (the chaos suite's seed 803, while a leader's disk was full). The
      // batches sent after it were numbered past the gap and are refused
      // for it: they go again, numbered from its sequence (Kafka adjusts
      // the sequences of the in-flight batches behind a failed one too).
      std::deque<batch_ptr> later;
      for (auto j = q.in_flight.begin() + pos; j != q.in_flight.end(); ++j)
        later.push_back(std::move(*j));
      q.in_flight.erase(q.in_flight.begin() + pos, q.in_flight.end());
      for (auto j = later.rbegin(); j != later.rend(); ++j) {
        (*j)->send_no = 0;
        q.ready.push_front(std::move(*j));
      }
      q.next_sequence = failed->base_sequence;
      for (auto& r : q.ready) {
        if (r->base_sequence < 0)
          break;
        if (r->pid.id != failed->pid.id || r->pid.epoch != failed->pid.epoch)
          continue;
        // Sequenced after the refused batch under its producer id: nothing
        // after a refused sequence is written, so it is numbered afresh.
        r->maybe_written = false;
        r->base_sequence = -1; // prepare() assigns from next_sequence
      }
    }
  }
  after_progress(self, q);
}

// -- housekeeping -------------------------------------------------------------------

clock::duration scan_period(const producer_config& cfg);
void scan_partitions(producer_pointer self, clock::time_point now);

void housekeeping(producer_pointer self) {
  auto& st = self->state;
  st.housekeeping_scheduled = false;
  auto now = clock::now();
  // Buffer waits past max.block.ms.
  while (!st.blocked.empty() && now - st.blocked.front().accepted >= st.cfg.max_block) {
    fail_pending(st, st.blocked.front(),
                 make_error(ec::throttled, "producer buffer.memory full for "
                                             + std::to_string(st.cfg.max_block.count())
                                             + " ms"));
    st.blocked.pop_front();
  }
  // Metadata waits past delivery.timeout.ms.
  for (auto& [topic, msgs] : st.waiting_metadata) {
    while (!msgs.empty() && now - msgs.front().accepted >= st.cfg.delivery_timeout) {
      std::string text = "no metadata for topic '" + topic + "' within "
                         + std::to_string(st.cfg.delivery_timeout.count()) + " ms";
      if (st.metadata_error)
        text += ": " + error_text(st.metadata_error);
      else if (!st.broker)
        text += ": not connected";
      fail_pending(st, msgs.front(), make_error(ec::request_timed_out, text));
      msgs.pop_front();
    }
  }
  std::erase_if(st.waiting_metadata, [](auto& kv) { return kv.second.empty(); });
  // Partitions whose backoff ran out send again.
  for (auto i = st.backing_off.begin(); i != st.backing_off.end();) {
    auto q = find_queue(st, *i);
    if (!q) {
      i = st.backing_off.erase(i);
    } else if (now >= q->resume_at) {
      i = st.backing_off.erase(i);
      send_ready(self, *q);
    } else {
      ++i;
    }
  }
  if (now >= st.next_scan) {
    st.next_scan = now + scan_period(st.cfg);
    scan_partitions(self, now);
  }
  if (st.idempotent && !st.pid_ready)
    request_pid(self);
  if (st.metadata_wanted || !st.waiting_metadata.empty()
      || (!st.partitions.empty() && now - st.metadata_at >= st.cfg.metadata_max_age))
    if (!st.metadata_requested)
      request_metadata(self);
  admit_blocked(self);
  check_flush(self);
  if (!st.outstanding.empty() || !st.flush_waiters.empty())
    ensure_housekeeping(self);
}

/// How often housekeeping walks every partition: a tenth of the shorter
/// timeout it enforces there (so they fire at most 10% late), between the
/// housekeeping tick and one second.
clock::duration scan_period(const producer_config& cfg) {
  auto tick = std::clamp(cfg.retry_backoff / 2, milliseconds{5}, milliseconds{50});
  auto t = std::min(cfg.request_timeout, cfg.delivery_timeout) / 10;
  return std::clamp<clock::duration>(t, tick, std::chrono::seconds{1});
}

void scan_partitions(producer_pointer self, clock::time_point now) {
  auto& st = self->state;
  // Batches waiting (not in flight) past delivery.timeout.ms.
  bool reset = false;
  for (auto& [tp, q] : st.queues) {
    for (auto i = q.ready.begin(); i != q.ready.end();) {
      auto& b = **i;
      if (!expired(st, b, now)) {
        ++i;
        continue;
      }
      std::string text = "delivery timeout of "
                         + std::to_string(st.cfg.delivery_timeout.count())
                         + " ms expired";
      if (b.last_error)
        text += ": " + error_text(b.last_error);
      else if (!st.broker)
        text += ": not connected";
      if (st.idempotent && b.base_sequence >= 0)
        reset = true;
      fail_batch(st, b, make_error(ec::request_timed_out, text));
      i = q.ready.erase(i);
    }
  }
  if (reset)
    reset_pid(self);
  // Requests unanswered for request.timeout.ms fail as CAF's request timeout
  // would (retried while attempts and the delivery timeout allow).
  std::vector<std::tuple<topic_partition, uint64_t, uint64_t>> timed_out;
  for (auto& [tp, q] : st.queues)
    for (auto& b : q.in_flight)
      if (now - b->sent_at >= st.cfg.request_timeout)
        timed_out.emplace_back(tp, b->id, b->send_no);
  for (auto& [tp, id, sn] : timed_out)
    on_failed(self, tp, id, sn,
              caf::make_error(caf::sec::request_timeout,
                              "no answer within request.timeout.ms ("
                                + std::to_string(st.cfg.request_timeout.count())
                                + " ms)"));
  for (auto& [tp, q] : st.queues)
    if (!q.ready.empty() && now >= q.resume_at)
      send_ready(self, q);
}

// -- the actor --------------------------------------------------------------------

producer_impl::behavior_type producer(producer_pointer self, producer_config cfg,
                                      connection_actor conn, bool owns_conn) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.idempotent = st.cfg.idempotence && st.cfg.acks == acks_mode::all;
  st.max_in_flight = st.cfg.max_in_flight;
  // A retry must not overtake a later batch (acks=0 does not retry).
  if (!st.idempotent && st.cfg.retries > 0 && st.cfg.acks != acks_mode::none)
    st.max_in_flight = 1;
  st.conn = conn;
  st.links = leader_links{st.cfg.route_to_leaders};
  self->attach_functor(st.links.stopper());
  if (owns_conn)
    self->attach_functor([conn](const caf::error&) { caf::anon_send(conn, stop_atom_v); });
  self->send(conn, subscribe_atom_v, caf::actor_cast<connection_listener>(self));
  return {
    [self](produce_atom, client_message& msg) -> caf::result<delivery_report> {
      auto& st = self->state;
      if (st.stopping)
        return make_error(ec::invalid_request, "producer is stopping");
      if (msg.topic.empty())
        return make_error(ec::invalid_topic_name, "empty topic name");
      auto rp = self->make_response_promise<delivery_report>();
      pending p;
      p.bytes = record_bytes(msg);
      p.msg = std::move(msg);
      p.to.rp = rp;
      p.accepted = clock::now();
      p.epoch = st.epoch;
      ++st.outstanding[st.epoch];
      submit(self, std::move(p));
      ensure_housekeeping(self);
      return rp;
    },
    [self](produce_atom, std::vector<client_message>& msgs)
      -> caf::result<std::vector<delivery_report>> {
      // No actor message or promise per message: each one goes straight
      // into its partition's open batch (as a single produce does), and the
      // request's one promise is answered when its last report is in.
      auto& st = self->state;
      if (st.stopping)
        return make_error(ec::invalid_request, "producer is stopping");
      for (auto& m : msgs)
        if (m.topic.empty())
          return make_error(ec::invalid_topic_name, "empty topic name");
      if (msgs.empty())
        return std::vector<delivery_report>{};
      auto rp = self->make_response_promise<std::vector<delivery_report>>();
      auto multi = std::make_shared<multi_request>();
      multi->rp = rp;
      multi->reports.resize(msgs.size());
      multi->remaining = msgs.size();
      auto now = clock::now();
      auto wall = wall_clock_ms(); // "the producer's clock at send time"
      st.outstanding[st.epoch] += msgs.size();
      for (size_t i = 0; i < msgs.size(); ++i) {
        if (msgs[i].timestamp == 0)
          msgs[i].timestamp = wall;
        pending p;
        p.bytes = record_bytes(msgs[i]);
        p.msg = std::move(msgs[i]);
        p.to.multi = multi;
        p.to.index = static_cast<uint32_t>(i);
        p.accepted = now;
        p.epoch = st.epoch;
        submit(self, std::move(p));
      }
      ensure_housekeeping(self);
      return rp;
    },
    [self](flush_atom) -> caf::result<bool> {
      auto& st = self->state;
      close_all(self);
      if (st.outstanding.empty())
        return true;
      auto rp = self->make_response_promise<bool>();
      st.flush_waiters.push_back(flush_waiter{rp, st.epoch, false});
      ++st.epoch;
      ensure_housekeeping(self);
      return rp;
    },
    [self](tick_atom, uint64_t id) {
      auto& st = self->state;
      if (id == housekeeping_tick) {
        housekeeping(self);
        return;
      }
      if (id == linger_tick) {
        linger_timer_fired(self);
        return;
      }
      // linger.ms 0: the batch `id` goes after the burst that opened it.
      auto i = st.open_batches.find(id);
      if (i == st.open_batches.end())
        return;
      auto q = find_queue(st, i->second);
      if (!q || !q->open || q->open->id != id)
        return;
      linger_expired(self, *q);
    },
    [self](stop_atom) {
      auto& st = self->state;
      st.stopping = true;
      close_all(self);
      check_flush(self);
      if (!st.outstanding.empty())
        ensure_housekeeping(self);
    },
    [self](produce_atom) { send_outbox(self); },
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
          // Resent through the current route (deduplicated by sequence if
          // the lost node appended them after all).
          for (auto& [tp, q] : st.queues)
            if (q.via == *node)
              requeue_in_flight(st, q);
          st.metadata_wanted = true; // the leaders may have moved
          ensure_housekeeping(self);
        }
        send_all(self);
        return;
      }
      ++st.conn_gen;
      st.metadata_requested = false;
      st.nodes_requested = false;
      st.pid_requested = false;
      if (!hdl) {
        st.broker = nullptr;
        for (auto& [tp, q] : st.queues)
          if (q.via < 0)
            requeue_in_flight(st, q);
        return;
      }
      st.broker = std::move(hdl);
      if (st.idempotent && !st.pid_ready)
        request_pid(self);
      if (st.metadata_wanted || !st.waiting_metadata.empty())
        request_metadata(self);
      send_all(self);
      ensure_housekeeping(self);
    },
  };
}

} // namespace

caf::expected<producer_actor> spawn_producer(caf::actor_system& sys,
                                             producer_config cfg,
                                             connection_actor conn) {
  if (auto err = validate(cfg))
    return err;
  if (!conn)
    return make_error(ec::invalid_argument, "spawn_producer: no connection");
  producer_actor hdl = sys.spawn(producer, std::move(cfg), std::move(conn), false);
  return hdl;
}

caf::expected<producer_actor> spawn_producer(caf::actor_system& sys,
                                             producer_config cfg) {
  if (auto err = validate(cfg))
    return err;
  auto addr = parse_broker_address(cfg.bootstrap);
  if (!addr)
    return std::move(addr.error());
  auto conn = spawn_connection(sys, std::move(*addr));
  producer_actor hdl = sys.spawn(producer, std::move(cfg), std::move(conn), true);
  return hdl;
}

} // namespace ferry
