#include "actors/server/dlq_manager.hpp"

#include "actors/server/queue_coordinator.hpp"
#include "broker/consumer_state.hpp"
#include "broker/error.hpp"
#include "broker/lease_table.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/partition_log.hpp"
#include "broker/partitioner.hpp"
#include "broker/producer_state.hpp"
#include "broker/queue_state_store.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <algorithm>
#include <charconv>
#include <utility>

namespace ferry {

// -- record helpers -------------------------------------------------------------

namespace {

template <class T>
T parse_num(const std::string& s, T fallback) {
  T x{};
  auto [ptr, err] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (err != std::errc{} || ptr != s.data() + s.size())
    return fallback;
  return x;
}

} // namespace

bool has_dlq_suffix(std::string_view name) {
  return name.size() > 4 && name.substr(name.size() - 4) == ".dlq";
}

dlq_record to_dlq_record(const std::string& topic, partition_id p, offset off,
                         const record& rec) {
  namespace h = dlq_header;
  dlq_record out;
  auto& m = out.message;
  m.topic = topic;
  m.partition = p;
  m.off = off;
  m.timestamp = rec.timestamp;
  m.has_key = rec.key.has_value();
  if (rec.key)
    m.key = *rec.key;
  m.has_value = rec.value.has_value();
  if (rec.value)
    m.value = *rec.value;
  for (auto& hd : rec.headers) {
    if (!hd.value)
      continue;
    m.headers.push_back(message_header{hd.key, *hd.value});
    const auto& v = *hd.value;
    if (hd.key == h::original_topic)
      out.original_topic = v;
    else if (hd.key == h::original_partition)
      out.original_partition = parse_num<int32_t>(v, -1);
    else if (hd.key == h::original_offset)
      out.original_offset = parse_num<int64_t>(v, -1);
    else if (hd.key == h::attempts)
      out.attempts = parse_num<int32_t>(v, 0);
    else if (hd.key == h::error)
      out.error = v;
    else if (hd.key == h::group)
      out.group = v;
    else if (hd.key == h::first_failure_ts)
      out.first_failure_ts = parse_num<int64_t>(v, 0);
    else if (hd.key == h::last_failure_ts)
      out.last_failure_ts = parse_num<int64_t>(v, 0);
    else if (hd.key == redrive_header::redrive_count)
      out.redrive_count = parse_num<int32_t>(v, 0);
  }
  return out;
}

record redriven_copy(const std::string& dlq, partition_id p, offset off,
                     const record& rec) {
  auto out = rec;
  out.offset_delta = 0;
  int32_t count = 0;
  for (auto& hd : rec.headers)
    if (hd.key == redrive_header::redrive_count && hd.value)
      count = parse_num<int32_t>(*hd.value, 0);
  std::erase_if(out.headers, [](const record_header& hd) {
    return hd.key == redrive_header::redriven_from
           || hd.key == redrive_header::redrive_count;
  });
  out.headers.push_back(record_header{
    std::string{redrive_header::redriven_from},
    dlq + "/" + std::to_string(p.value) + "/" + std::to_string(off.value)});
  out.headers.push_back(record_header{std::string{redrive_header::redrive_count},
                                      std::to_string(count + 1)});
  return out;
}

// -- the actor ----------------------------------------------------------------

namespace {

using self_ptr = dlq_manager_actor::stateful_pointer<dlq_manager_state>;

timestamp_ms now_ms(self_ptr self) {
  auto& c = self->state.cfg.clock;
  return c ? c() : system_now_ms();
}

/// Writes one redrive bookkeeping record (a dlq_* kind) to the local store.
caf::error store_locally(self_ptr self, const consumer_state_record& x) {
  auto& store = *self->state.store;
  using k = consumer_state_kind;
  switch (x.kind) {
    case k::dlq_mark:
      return store.mark(x.topic, x.partition, x.off, x.mark);
    case k::dlq_producer:
      return store.put_producer(x.topic, x.partition, x.target_topic,
                                x.target_partition, x.producer);
    case k::dlq_erase_below:
      if (auto n = store.erase_below(x.topic, x.partition, x.off); !n)
        return std::move(n.error());
      return caf::none;
    case k::dlq_topic_erase:
      return store.erase_topic(x.topic);
    default:
      return make_error(ec::invalid_argument,
                        "not a DLQ redrive bookkeeping record");
  }
}

/// Persists `x` (a dlq_* kind of x.topic), then calls k(error). Single
/// node: writes the store and calls k before returning. Cluster mode:
/// produces it to the topic's __consumer_state partition with acks=all
/// first and writes the store only after that succeeded (see the file
/// comment).
void persist(self_ptr self, consumer_state_record x,
             std::function<void(caf::error)> k) {
  auto& st = self->state;
  if (st.cfg.state_topic.empty()) {
    k(store_locally(self, x));
    return;
  }
  if (st.state_partitions <= 0) {
    k(make_error(ec::coordinator_not_available,
                 "the cluster has no " + st.cfg.state_topic + " topic yet"));
    return;
  }
  x.group = dlq_home_key(x.topic);
  auto batch = make_consumer_state_batch({x}, now_ms(self));
  if (!batch) {
    k(std::move(batch.error()));
    return;
  }
  produce_request pr;
  pr.topic = st.cfg.state_topic;
  pr.partition = partition_id{partition_for_key(x.group, st.state_partitions)};
  pr.acks = acks_mode::all;
  pr.batch = std::move(*batch);
  self
    ->request(st.cfg.broker, st.cfg.broker_timeout, produce_atom_v,
              std::move(pr))
    .then(
      [self, x, k](produce_response&) { k(store_locally(self, x)); },
      [k](caf::error& err) { k(std::move(err)); });
}

consumer_state_record mark_record(const std::string& topic, partition_id p,
                                  offset off, redrive_mark m) {
  consumer_state_record x;
  x.kind = consumer_state_kind::dlq_mark;
  x.topic = topic;
  x.partition = p;
  x.off = off;
  x.mark = std::move(m);
  return x;
}

consumer_state_record producer_record(const std::string& topic, partition_id p,
                                      const topic_partition& target,
                                      const redrive_producer& row) {
  consumer_state_record x;
  x.kind = consumer_state_kind::dlq_producer;
  x.topic = topic;
  x.partition = p;
  x.target_topic = target.topic;
  x.target_partition = target.partition;
  x.producer = row;
  return x;
}

/// What makes a topic a DLQ.
struct dlq_class {
  std::vector<std::string> groups;
  std::string source;
};

using topic_map = std::map<std::string, topic_metadata>;

/// Every DLQ among `topics` (see the header).
std::map<std::string, dlq_class> classify(self_ptr self,
                                          const topic_map& topics) {
  std::map<std::string, dlq_class> out;
  auto& store = *self->state.cfg.store;
  auto add = [&](const std::string& dlq, const std::string& group,
                 const std::string& source) {
    auto& c = out[dlq];
    if (!group.empty()
        && std::find(c.groups.begin(), c.groups.end(), group) == c.groups.end())
      c.groups.push_back(group);
    if (c.source.empty())
      c.source = source;
  };
  // group -> (config, topics it has state for)
  std::map<std::string, std::pair<queue_group_config, std::set<std::string>>> groups;
  if (auto& cg = self->state.cluster_groups) {
    for (auto& d : *cg) {
      auto& g = groups[d.group];
      g.first = d.config;
      for (auto& p : d.partitions)
        g.second.insert(p.topic);
    }
  } else if (auto stored = load_queue_groups(store)) {
    queue_state_store qs{store};
    for (auto& [group, qc] : *stored) {
      auto& g = groups[group];
      g.first = qc;
      if (auto parts = qs.partitions(group))
        for (auto& r : *parts)
          g.second.insert(r.topic);
    }
  } else {
    log::warn("dlq: cannot read the queue groups: {}", stored.error());
  }
  for (auto& [group, g] : groups) {
    auto& [qc, srcs] = g;
    for (auto& [name, md] : topics) {
      auto d = dlq_topic_of(qc, name, group);
      if (d != name && topics.count(d) > 0 && qc.dlq_topic.empty())
        add(d, group, name);
    }
    if (!qc.dlq_topic.empty() && topics.count(qc.dlq_topic) > 0)
      add(qc.dlq_topic, group, srcs.size() == 1 ? *srcs.begin() : std::string{});
  }
  for (auto& [name, md] : topics) {
    if (!has_dlq_suffix(name) || out.count(name) > 0)
      continue;
    // "<topic>.<group>.dlq" of an existing topic (a stream-mode group's DLQ
    // written by the consumer helper): the longest such topic is the source.
    auto& c = out[name];
    for (auto& [src, smd] : topics) {
      if (src.size() + 1 + 1 + 4 > name.size() || src.size() <= c.source.size()
          || name.compare(0, src.size() + 1, src + ".") != 0)
        continue;
      c.source = src;
      c.groups = {name.substr(src.size() + 1,
                              name.size() - src.size() - 1 - 4)};
    }
  }
  return out;
}

/// Lists topics and calls `k` with them (or the error). In cluster mode it
/// first refreshes state.cluster_groups (classify's queue groups).
void with_topics(self_ptr self,
                 std::function<void(caf::expected<topic_map>)> k) {
  auto& st = self->state;
  auto list = [self, k] {
    auto& st = self->state;
    self->request(st.cfg.broker, st.cfg.broker_timeout, list_atom_v, topic_atom_v)
      .then(
        [self, k](std::vector<topic_metadata>& list) {
          topic_map m;
          for (auto& t : list) {
            if (t.name == self->state.cfg.state_topic)
              self->state.state_partitions
                = static_cast<int32_t>(t.partitions.size());
            m.emplace(t.name, std::move(t));
          }
          k(std::move(m));
        },
        [k](caf::error& err) { k(std::move(err)); });
  };
  if (st.cfg.state_topic.empty()) {
    list();
    return;
  }
  self->request(st.cfg.broker, st.cfg.broker_timeout, list_atom_v, queue_atom_v)
    .then(
      [self, list](std::vector<queue_group_description>& groups) {
        self->state.cluster_groups = std::move(groups);
        list();
      },
      [self, list](caf::error& err) {
        log::warn("dlq: cannot list the cluster's queue groups ({}); using this "
                  "node's", err);
        self->state.cluster_groups.reset();
        list();
      });
}

/// The error for a topic that is missing or not a DLQ, or none.
caf::error check_dlq(const topic_map& topics,
                     const std::map<std::string, dlq_class>& dlqs,
                     const std::string& topic) {
  if (topic.empty())
    return make_error(ec::invalid_request, "the DLQ topic name is empty");
  if (topics.count(topic) == 0)
    return make_error(ec::unknown_topic, "topic " + topic + " does not exist");
  if (dlqs.count(topic) == 0)
    return make_error(ec::invalid_request,
                      "topic " + topic
                        + " is not a DLQ (no queue group dead-letters into it "
                          "and its name does not end in .dlq)");
  return caf::none;
}

/// Describes a DLQ after checking it is one.
void with_dlq(self_ptr self, const std::string& topic,
              std::function<void(caf::expected<topic_description>,
                                 const topic_map&)> k) {
  with_topics(self, [self, topic, k](caf::expected<topic_map> topics) {
    if (!topics) {
      k(topics.error(), topic_map{});
      return;
    }
    auto dlqs = classify(self, *topics);
    if (auto err = check_dlq(*topics, dlqs, topic)) {
      k(std::move(err), *topics);
      return;
    }
    auto tm = std::make_shared<topic_map>(std::move(*topics));
    auto& st = self->state;
    self
      ->request(st.cfg.broker, st.cfg.broker_timeout, describe_atom_v,
                topic_atom_v, topic)
      .then([k, tm](topic_description& td) { k(std::move(td), *tm); },
            [k, tm](caf::error& err) { k(std::move(err), *tm); });
  });
}

caf::error bad_partition(const std::string& topic, int32_t p, size_t n) {
  return make_error(ec::unknown_partition,
                    "topic " + topic + " has " + std::to_string(n)
                      + " partitions; partition " + std::to_string(p)
                      + " does not exist");
}

/// Fetches (topic, p) from `from` and decodes the records in [from, end).
void read_chunk(self_ptr self, const std::string& topic, partition_id p,
                offset from, offset end,
                std::function<void(caf::expected<std::vector<dlq_read_record>>,
                                   offset next)> k) {
  auto& st = self->state;
  fetch_request req;
  req.topic = topic;
  req.partition = p;
  req.from = from;
  req.max_bytes = st.cfg.fetch_max_bytes;
  req.min_bytes = 1;
  req.max_wait_ms = 0;
  req.replica_id = -2; // an internal reader, not consumer traffic
  self->request(st.cfg.broker, st.cfg.broker_timeout, fetch_atom_v, req)
    .then(
      [k, p, from, end](fetch_response& resp) {
        std::vector<dlq_read_record> out;
        std::string_view data{resp.data};
        auto lower = std::max(from, resp.log_start);
        offset next = lower;
        while (!data.empty()) {
          auto hdr = parse_batch_header(data);
          if (!hdr)
            break; // a partial batch at the end of the fetch
          auto one = data.substr(0, hdr->total_size());
          data.remove_prefix(hdr->total_size());
          if (hdr->control()) {
            next = std::max(next, hdr->next_offset());
            continue;
          }
          auto b = decode_batch(one);
          if (!b) {
            k(b.error(), from);
            return;
          }
          for (auto& r : b->records) {
            auto off = hdr->base_offset + r.offset_delta;
            if (off < lower || off >= end)
              continue;
            out.push_back(dlq_read_record{p, off, std::move(r)});
          }
          next = std::max(next, hdr->next_offset());
        }
        next = std::min(next, end);
        if (next <= from && out.empty() && from < end) {
          // Nothing readable at `from` (e.g. below a moved log start):
          // continue past it rather than loop forever.
          next = std::max(resp.log_start, offset{from.value + 1});
          next = std::min(next, end);
        }
        k(std::move(out), next);
      },
      [k, from](caf::error& err) { k(std::move(err), from); });
}

// -- list -------------------------------------------------------------------

void list_dlqs(self_ptr self,
               caf::typed_response_promise<std::vector<dlq_info>> rp) {
  with_topics(self, [self, rp](caf::expected<topic_map> topics) mutable {
    if (!topics) {
      rp.deliver(topics.error());
      return;
    }
    auto dlqs = classify(self, *topics);
    auto out = std::make_shared<std::vector<dlq_info>>();
    for (auto& [name, c] : dlqs) {
      dlq_info x;
      x.topic = name;
      x.groups = c.groups;
      x.source_topic = c.source;
      x.partitions = static_cast<int32_t>(topics->at(name).partitions.size());
      out->push_back(std::move(x));
    }
    if (out->empty()) {
      rp.deliver(std::vector<dlq_info>{});
      return;
    }
    auto pending = std::make_shared<size_t>(out->size());
    auto done = [rp, out, pending]() mutable {
      if (--*pending == 0)
        rp.deliver(std::move(*out));
    };
    auto& st = self->state;
    auto now = now_ms(self);
    for (size_t i = 0; i < out->size(); ++i) {
      auto name = (*out)[i].topic;
      self
        ->request(st.cfg.broker, st.cfg.broker_timeout, describe_atom_v,
                  topic_atom_v, name)
        .then(
          [self, out, i, done, name, now](topic_description& td) mutable {
            auto& st = self->state;
            // Per partition: marks (sync), then first record and rate.
            auto inner = std::make_shared<size_t>(1);
            auto step = [inner, done]() mutable {
              if (--*inner == 0)
                done();
            };
            for (auto& ps : td.partitions) {
              if (!ps.online)
                continue;
              auto& x = (*out)[i];
              auto present = std::max<int64_t>(
                0, ps.high_watermark.value - ps.log_start.value);
              x.total += present;
              if (present == 0)
                continue;
              if (auto m = st.store->marked(name, ps.partition, ps.log_start,
                                            ps.high_watermark))
                x.redriven += static_cast<int64_t>(m->size());
              else
                log::warn("dlq: cannot read the marks of {}-{}: {}", name,
                          ps.partition, m.error());
              *inner += 2;
              read_chunk(
                self, name, ps.partition, ps.log_start, ps.high_watermark,
                [out, i, step](caf::expected<std::vector<dlq_read_record>> rs,
                               offset) mutable {
                  if (rs && !rs->empty()) {
                    auto ts = rs->front().rec.timestamp;
                    auto& x = (*out)[i];
                    if (x.oldest_timestamp == 0 || ts < x.oldest_timestamp)
                      x.oldest_timestamp = ts;
                  }
                  step();
                });
              list_offsets_request lo;
              lo.topic = name;
              lo.partition = ps.partition;
              lo.timestamp = std::max<int64_t>(0, now - 60'000);
              auto hw = ps.high_watermark;
              self->request(st.cfg.broker, st.cfg.broker_timeout,
                            offsets_atom_v, lo)
                .then(
                  [out, i, step, hw](offset o) mutable {
                    (*out)[i].rate_per_second
                      += static_cast<double>(std::max<int64_t>(
                           0, hw.value - o.value))
                         / 60.0;
                    step();
                  },
                  [step](caf::error&) mutable { step(); });
            }
            auto& x = (*out)[i];
            x.depth = std::max<int64_t>(0, x.total - x.redriven);
            step();
          },
          [done](caf::error&) mutable { done(); });
    }
  });
}

// -- show -------------------------------------------------------------------

struct show_part {
  partition_id p{0};
  offset next{0};
  offset end{0};
  std::vector<dlq_record> matches;
};

struct show_job {
  dlq_show_request req;
  caf::typed_response_promise<dlq_show_response> rp;
  std::vector<show_part> parts;
  size_t cur = 0;
  int64_t scanned = 0;
};

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

bool matches(const dlq_show_request& req, const dlq_record& r) {
  if (!req.include_redriven && r.redriven)
    return false;
  if (!req.error_contains.empty() && !contains(r.error, req.error_contains))
    return false;
  if (req.grep.empty())
    return true;
  auto& m = r.message;
  if ((m.has_key && contains(m.key, req.grep))
      || (m.has_value && contains(m.value, req.grep)))
    return true;
  for (auto& h : m.headers)
    if (contains(h.value, req.grep))
      return true;
  return false;
}

void finish_show(self_ptr, std::shared_ptr<show_job> job) {
  dlq_show_response resp;
  resp.scanned = job->scanned;
  std::vector<dlq_record> all;
  for (auto& sp : job->parts)
    for (auto& r : sp.matches)
      all.push_back(r);
  std::sort(all.begin(), all.end(), [](const dlq_record& a,
                                       const dlq_record& b) {
    if (a.message.off != b.message.off)
      return a.message.off < b.message.off;
    return a.message.partition < b.message.partition;
  });
  auto limit = static_cast<size_t>(std::max(job->req.max_records, 0));
  std::map<int32_t, offset> first_dropped;
  for (size_t i = limit; i < all.size(); ++i) {
    auto p = all[i].message.partition.value;
    if (first_dropped.count(p) == 0)
      first_dropped[p] = all[i].message.off;
  }
  if (all.size() > limit)
    all.resize(limit);
  resp.end_reached = true;
  for (auto& sp : job->parts) {
    auto next = sp.next;
    if (auto d = first_dropped.find(sp.p.value); d != first_dropped.end())
      next = d->second;
    if (next < sp.end)
      resp.end_reached = false;
    resp.next_offsets.push_back(
      partition_offset{job->req.topic, sp.p, next, ""});
  }
  resp.records = std::move(all);
  job->rp.deliver(std::move(resp));
}

void show_step(self_ptr self, std::shared_ptr<show_job> job) {
  auto& req = job->req;
  auto limit = static_cast<size_t>(std::max(req.max_records, 0));
  while (job->cur < job->parts.size()) {
    auto& sp = job->parts[job->cur];
    if (sp.next >= sp.end || sp.matches.size() >= limit
        || job->scanned >= req.max_scan) {
      ++job->cur;
      continue;
    }
    read_chunk(
      self, req.topic, sp.p, sp.next, sp.end,
      [self, job](caf::expected<std::vector<dlq_read_record>> rs,
                  offset next) {
        if (!rs) {
          job->rp.deliver(std::move(rs.error()));
          return;
        }
        auto& req = job->req;
        auto limit = static_cast<size_t>(std::max(req.max_records, 0));
        auto& sp = job->parts[job->cur];
        std::set<int64_t> marks;
        if (!rs->empty()) {
          auto m = self->state.store->marked(req.topic, sp.p,
                                             rs->front().off,
                                             offset{rs->back().off.value + 1});
          if (!m) {
            job->rp.deliver(std::move(m.error()));
            return;
          }
          marks = std::move(*m);
        }
        bool stopped = false;
        for (auto& r : *rs) {
          if (sp.matches.size() >= limit || job->scanned >= req.max_scan) {
            sp.next = r.off;
            stopped = true;
            break;
          }
          ++job->scanned;
          auto d = to_dlq_record(req.topic, sp.p, r.off, r.rec);
          d.redriven = marks.count(r.off.value) > 0;
          if (matches(req, d))
            sp.matches.push_back(std::move(d));
          sp.next = offset{r.off.value + 1};
        }
        if (!stopped)
          sp.next = std::max(sp.next, next);
        show_step(self, job);
      });
    return;
  }
  finish_show(self, job);
}

void show(self_ptr self, dlq_show_request req,
          caf::typed_response_promise<dlq_show_response> rp) {
  if (req.max_records <= 0 || req.max_scan <= 0) {
    rp.deliver(make_error(ec::invalid_request,
                          "max_records and max_scan must be positive"));
    return;
  }
  auto topic = req.topic;
  with_dlq(self, topic,
           [self, req, rp](caf::expected<topic_description> td,
                           const topic_map&) mutable {
             if (!td) {
               rp.deliver(std::move(td.error()));
               return;
             }
             auto n = td->partitions.size();
             if (req.partition >= 0 && static_cast<size_t>(req.partition) >= n) {
               rp.deliver(bad_partition(req.topic, req.partition, n));
               return;
             }
             auto job = std::make_shared<show_job>();
             job->req = std::move(req);
             job->rp = rp;
             for (auto& ps : td->partitions) {
               if (job->req.partition >= 0
                   && ps.partition.value != job->req.partition)
                 continue;
               show_part sp;
               sp.p = ps.partition;
               sp.next = std::max(offset{job->req.from_offset}, ps.log_start);
               sp.end = ps.high_watermark;
               job->parts.push_back(std::move(sp));
             }
             show_step(self, job);
           });
}

// -- purge ------------------------------------------------------------------

void purge(self_ptr self, dlq_purge_request req,
           caf::typed_response_promise<dlq_purge_response> rp) {
  auto topic = req.topic;
  with_dlq(self, topic, [self, req, rp](caf::expected<topic_description> td,
                                        const topic_map&) mutable {
    if (!td) {
      rp.deliver(std::move(td.error()));
      return;
    }
    auto n = td->partitions.size();
    if (req.partition >= 0 && static_cast<size_t>(req.partition) >= n) {
      rp.deliver(bad_partition(req.topic, req.partition, n));
      return;
    }
    auto resp = std::make_shared<dlq_purge_response>();
    auto failure = std::make_shared<caf::error>();
    auto pending = std::make_shared<size_t>(1);
    auto done = [rp, resp, failure, pending]() mutable {
      if (--*pending > 0)
        return;
      if (*failure)
        rp.deliver(*failure);
      else
        rp.deliver(std::move(*resp));
    };
    auto& st = self->state;
    for (auto& ps : td->partitions) {
      if (req.partition >= 0 && ps.partition.value != req.partition)
        continue;
      auto target = req.before_offset < 0
                      ? ps.high_watermark
                      : std::min(offset{req.before_offset}, ps.high_watermark);
      auto old_start = ps.log_start;
      auto p = ps.partition;
      if (target <= old_start) {
        resp->log_starts.push_back(
          partition_offset{req.topic, p, old_start, ""});
        continue;
      }
      ++*pending;
      auto topic = req.topic;
      self
        ->request(st.cfg.broker, st.cfg.broker_timeout, purge_atom_v,
                  topic_partition{topic, p}, target)
        .then(
          [self, resp, done, topic, p, old_start](offset start) mutable {
            resp->purged += std::max<int64_t>(0, start.value - old_start.value);
            resp->log_starts.push_back(partition_offset{topic, p, start, ""});
            log::info("dlq: purged {}-{} below {}", topic, p, start);
            consumer_state_record x;
            x.kind = consumer_state_kind::dlq_erase_below;
            x.topic = topic;
            x.partition = p;
            x.off = start;
            persist(self, std::move(x),
                    [done, topic, p, start](caf::error err) mutable {
                      if (err)
                        log::warn("dlq: cannot drop the marks of {}-{} below "
                                  "{}: {}",
                                  topic, p, start, err);
                      done();
                    });
          },
          [failure, done](caf::error& err) mutable {
            if (!*failure)
              *failure = std::move(err);
            done();
          });
    }
    done();
  });
}

} // namespace

// -- redrive ----------------------------------------------------------------

struct dlq_redrive_part {
  partition_id p{0};
  offset next{0};
  offset end{0};
  bool only_selected = false;
  std::set<int64_t> selected;
};

struct dlq_redrive_job {
  uint64_t id = 0;
  dlq_redrive_request req;
  caf::typed_response_promise<dlq_redrive_response> rp;
  dlq_redrive_response resp;
  topic_map topics;
  std::vector<dlq_redrive_part> parts;
  size_t cur = 0;
  std::deque<dlq_read_record> buffer;
  int resets = 0;
  /// Pacing: when the first paced produce went out, and how many since.
  caf::actor_clock::time_point paced_since{};
  int64_t paced = 0;
  bool waiting = false; ///< an async step is in flight (fetch, produce, tick)
};

namespace {

void redrive_step(self_ptr self, std::shared_ptr<dlq_redrive_job> job);
void start_next_redrive(self_ptr self);

void finish_redrive(self_ptr self, std::shared_ptr<dlq_redrive_job> job,
                    caf::error err) {
  auto& q = self->state.redrives;
  if (!q.empty() && q.front() == job)
    q.pop_front();
  if (err) {
    log::warn("dlq: redrive of {} stopped after {} records: {}", job->req.topic,
              job->resp.redriven, err);
    job->rp.deliver(std::move(err));
  } else {
    auto& resp = job->resp;
    resp.end_reached = true;
    resp.next_offsets.clear();
    for (auto& part : job->parts) {
      auto next = part.next;
      if (next < part.end)
        resp.end_reached = false;
      resp.next_offsets.push_back(
        partition_offset{job->req.topic, part.p, next, ""});
    }
    log::info("dlq: redrove {} records of {} ({} skipped as redriven before)",
              resp.redriven, job->req.topic, resp.skipped);
    job->rp.deliver(std::move(resp));
  }
  start_next_redrive(self);
}

/// Where a redriven record goes: (topic, partition) or an error.
caf::expected<topic_partition> target_of(const dlq_redrive_job& job,
                                         const dlq_read_record& r) {
  auto d = to_dlq_record(job.req.topic, r.partition, r.off, r.rec);
  auto topic = job.req.to_topic.empty() ? d.original_topic : job.req.to_topic;
  if (topic.empty())
    return make_error(ec::invalid_request,
                      "record " + job.req.topic + "/"
                        + std::to_string(r.partition.value) + "/"
                        + std::to_string(r.off.value)
                        + " has no ferry-original-topic header: redrive it "
                          "with a target topic");
  auto t = job.topics.find(topic);
  if (t == job.topics.end() || t->second.partitions.empty())
    return make_error(ec::unknown_topic,
                      "redrive target topic " + topic + " does not exist");
  auto n = static_cast<int32_t>(t->second.partitions.size());
  int32_t p = 0;
  if (d.original_partition >= 0 && d.original_partition < n)
    p = d.original_partition;
  else if (r.rec.key)
    p = partition_for_key(*r.rec.key, n);
  return topic_partition{topic, partition_id{p}};
}

void produce_one(self_ptr self, std::shared_ptr<dlq_redrive_job> job);
void marked(self_ptr self, std::shared_ptr<dlq_redrive_job> job,
            const topic_partition& tgt, timestamp_ms ts,
            const produce_response& resp);

/// The producer of the front record failed with `err`.
void on_produce_error(self_ptr self, std::shared_ptr<dlq_redrive_job> job,
                      const topic_partition& target, caf::error err) {
  auto& st = self->state;
  auto c = code_of(err);
  if ((c == ec::out_of_order_sequence || c == ec::unknown_producer_id
       || c == ec::invalid_producer_epoch)
      && job->resets < st.cfg.max_producer_resets) {
    ++job->resets;
    auto& r = job->buffer.front();
    log::warn("dlq: redrive producer of {}-{} -> {}-{} refused ({}); taking a "
              "fresh producer id",
              job->req.topic, r.partition, target.topic, target.partition, err);
    job->waiting = true;
    persist(self,
            producer_record(job->req.topic, r.partition, target,
                            redrive_producer{}),
            [self, job](caf::error e) {
              job->waiting = false;
              if (e)
                return finish_redrive(self, job, std::move(e));
              produce_one(self, job);
            });
    return;
  }
  finish_redrive(self, job, std::move(err));
}

/// Redrives the front record of the buffer (not marked), then continues.
void produce_one(self_ptr self, std::shared_ptr<dlq_redrive_job> job) {
  auto& st = self->state;
  auto& r = job->buffer.front();
  auto target = target_of(*job, r);
  if (!target)
    return finish_redrive(self, job, std::move(target.error()));
  auto row = st.store->get_producer(job->req.topic, r.partition, target->topic,
                                    target->partition);
  if (!row)
    return finish_redrive(self, job, std::move(row.error()));
  if (!*row || (*row)->pid.value < 0) {
    job->waiting = true;
    auto tgt = *target;
    self->request(st.cfg.broker, st.cfg.broker_timeout, init_pid_atom_v)
      .then(
        [self, job, tgt](producer_identity& id) {
          job->waiting = false;
          auto& r = job->buffer.front();
          redrive_producer x;
          x.pid = id.id;
          x.epoch = id.epoch;
          job->waiting = true;
          persist(self, producer_record(job->req.topic, r.partition, tgt, x),
                  [self, job](caf::error err) {
                    job->waiting = false;
                    if (err)
                      return finish_redrive(self, job, std::move(err));
                    produce_one(self, job);
                  });
        },
        [self, job](caf::error& err) {
          job->waiting = false;
          finish_redrive(self, job, std::move(err));
        });
    return;
  }
  auto x = **row;
  if (x.last_offset != r.off) {
    // A new sequence, stored before the write: a retry after a crash finds
    // the same offset and sends the same sequence (a duplicate then).
    x.last_offset = r.off;
    x.last_seq = x.last_seq < 0 ? 0 : increment_sequence(x.last_seq, 1);
    job->waiting = true;
    persist(self, producer_record(job->req.topic, r.partition, *target, x),
            [self, job](caf::error err) {
              job->waiting = false;
              if (err)
                return finish_redrive(self, job, std::move(err));
              produce_one(self, job); // finds the stored row now
            });
    return;
  }
  batch_meta meta;
  meta.producer_id = x.pid.value;
  meta.producer_epoch = x.epoch;
  meta.base_sequence = x.last_seq;
  auto batch = encode_batch(meta, {redriven_copy(job->req.topic, r.partition,
                                                 r.off, r.rec)});
  if (!batch)
    return finish_redrive(self, job, std::move(batch.error()));
  produce_request req;
  req.topic = target->topic;
  req.partition = target->partition;
  req.acks = acks_mode::all;
  req.batch = std::move(*batch);
  job->waiting = true;
  auto tgt = *target;
  auto ts = r.rec.timestamp;
  self->request(st.cfg.broker, st.cfg.broker_timeout, produce_atom_v,
                std::move(req))
    .then(
      [self, job, tgt, ts](produce_response& resp) {
        job->waiting = false;
        auto& r = job->buffer.front();
        redrive_mark m;
        m.at = now_ms(self);
        m.target_topic = tgt.topic;
        m.target_partition = tgt.partition;
        m.target_offset = resp.base_offset;
        job->waiting = true;
        persist(self, mark_record(job->req.topic, r.partition, r.off, m),
                [self, job, tgt, ts, resp](caf::error err) {
                  job->waiting = false;
                  if (err)
                    return finish_redrive(self, job, std::move(err));
                  marked(self, job, tgt, ts, resp);
                });
      },
      [self, job, tgt](caf::error& err) {
        job->waiting = false;
        on_produce_error(self, job, tgt, std::move(err));
      });
}

/// The front record's copy is acknowledged and its mark stored.
void marked(self_ptr self, std::shared_ptr<dlq_redrive_job> job,
            const topic_partition& tgt, timestamp_ms ts,
            const produce_response& resp) {
  auto& r = job->buffer.front();
  log::debug("dlq: {}-{}@{} redriven to {}-{}@{}{}", job->req.topic,
             r.partition, r.off, tgt.topic, tgt.partition,
             resp.base_offset, resp.duplicate ? " (written before)" : "");
  ++job->resp.redriven;
  job->resp.reports.push_back(
    delivery_report{tgt.topic, tgt.partition, resp.base_offset, ts});
  job->resets = 0;
  ++job->paced;
  job->parts[job->cur].next = offset{r.off.value + 1};
  job->buffer.pop_front();
  redrive_step(self, job);
}

void redrive_step(self_ptr self, std::shared_ptr<dlq_redrive_job> job) {
  auto& st = self->state;
  auto& req = job->req;
  while (true) {
    if (req.max_records > 0 && job->resp.redriven >= req.max_records)
      return finish_redrive(self, job, caf::none);
    if (job->buffer.empty()) {
      while (job->cur < job->parts.size()
             && job->parts[job->cur].next >= job->parts[job->cur].end)
        ++job->cur;
      if (job->cur >= job->parts.size())
        return finish_redrive(self, job, caf::none);
      auto& part = job->parts[job->cur];
      job->waiting = true;
      read_chunk(self, req.topic, part.p, part.next, part.end,
                 [self, job](caf::expected<std::vector<dlq_read_record>> rs,
                             offset next) {
                   job->waiting = false;
                   if (!rs)
                     return finish_redrive(self, job, std::move(rs.error()));
                   auto& part = job->parts[job->cur];
                   for (auto& r : *rs)
                     job->buffer.push_back(std::move(r));
                   if (job->buffer.empty())
                     part.next = std::max(part.next, next);
                   // Records past the chunk start after the buffer is empty.
                   redrive_step(self, job);
                 });
      return;
    }
    auto& part = job->parts[job->cur];
    auto& r = job->buffer.front();
    if (part.only_selected && part.selected.count(r.off.value) == 0) {
      part.next = offset{r.off.value + 1};
      job->buffer.pop_front();
      continue;
    }
    auto mark = st.store->get_mark(req.topic, r.partition, r.off);
    if (!mark)
      return finish_redrive(self, job, std::move(mark.error()));
    if (*mark) {
      ++job->resp.skipped;
      part.next = offset{r.off.value + 1};
      job->buffer.pop_front();
      continue;
    }
    if (req.rate_per_second > 0) {
      auto t_now = self->clock().now();
      if (job->paced == 0)
        job->paced_since = t_now;
      auto due = job->paced_since
                 + std::chrono::duration_cast<caf::timespan>(
                   std::chrono::nanoseconds{1'000'000'000LL * job->paced
                                            / req.rate_per_second});
      if (due > t_now) {
        job->waiting = true;
        self->delayed_send(self, due - t_now, tick_atom_v, job->id);
        return;
      }
    }
    produce_one(self, job);
    return;
  }
}

void start_redrive(self_ptr self, std::shared_ptr<dlq_redrive_job> job) {
  auto topic = job->req.topic;
  with_dlq(self, topic, [self, job](caf::expected<topic_description> td,
                                    const topic_map& topics) {
    if (!td)
      return finish_redrive(self, job, std::move(td.error()));
    auto& req = job->req;
    job->topics = topics;
    auto n = td->partitions.size();
    if (!req.to_topic.empty() && topics.count(req.to_topic) == 0)
      return finish_redrive(self, job,
                            make_error(ec::unknown_topic,
                                       "redrive target topic " + req.to_topic
                                         + " does not exist"));
    if (req.partition >= 0 && static_cast<size_t>(req.partition) >= n)
      return finish_redrive(self, job,
                            bad_partition(req.topic, req.partition, n));
    std::map<int32_t, std::set<int64_t>> selected;
    for (auto& po : req.offsets) {
      if (po.partition.value < 0 || static_cast<size_t>(po.partition.value) >= n)
        return finish_redrive(self, job, bad_partition(req.topic,
                                                       po.partition.value, n));
      selected[po.partition.value].insert(po.committed.value);
    }
    for (auto& ps : td->partitions) {
      dlq_redrive_part part;
      part.p = ps.partition;
      part.end = ps.high_watermark;
      if (!selected.empty()) {
        auto s = selected.find(ps.partition.value);
        if (s == selected.end())
          continue;
        part.only_selected = true;
        part.selected = s->second;
        part.next = std::max(offset{*s->second.begin()}, ps.log_start);
        part.end = std::min(part.end, offset{*s->second.rbegin() + 1});
      } else {
        if (req.partition >= 0 && ps.partition.value != req.partition)
          continue;
        part.next = std::max(offset{req.from_offset}, ps.log_start);
        if (req.to_offset >= 0)
          part.end = std::min(part.end, offset{req.to_offset + 1});
      }
      part.end = std::max(part.end, part.next);
      job->parts.push_back(std::move(part));
    }
    redrive_step(self, job);
  });
}

void start_next_redrive(self_ptr self) {
  auto& q = self->state.redrives;
  if (q.empty())
    return;
  start_redrive(self, q.front());
}

void on_update(self_ptr self, const std::vector<topic_metadata>& topics) {
  auto& st = self->state;
  auto known = st.store->topics();
  if (!known) {
    log::warn("dlq: cannot list the redrive marks: {}", known.error());
    return;
  }
  std::set<std::string> names;
  for (auto& t : topics) {
    names.insert(t.name);
    if (t.name == st.cfg.state_topic)
      st.state_partitions = static_cast<int32_t>(t.partitions.size());
  }
  for (auto& t : *known) {
    if (names.count(t) > 0)
      continue;
    if (!st.cfg.state_topic.empty()) {
      // Replicated for the replicas' replay (a re-created topic must not
      // find these rows again); only the home's produce succeeds.
      consumer_state_record x;
      x.kind = consumer_state_kind::dlq_topic_erase;
      x.topic = t;
      persist(self, std::move(x), [t](caf::error err) {
        if (err)
          log::debug("dlq: erase of {}'s redrive marks not replicated from "
                     "here: {}",
                     t, err);
      });
    }
    if (auto err = st.store->erase_topic(t))
      log::warn("dlq: cannot erase the redrive marks of {}: {}", t, err);
    else
      log::info("dlq: topic {} is gone: erased its redrive marks", t);
  }
}

} // namespace

dlq_manager_actor::behavior_type
dlq_manager(dlq_manager_actor::stateful_pointer<dlq_manager_state> self,
            dlq_manager_config cfg) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.store = std::make_unique<dlq_store>(*st.cfg.store);
  return {
    [self](list_atom, dlq_atom) -> caf::result<std::vector<dlq_info>> {
      auto rp = self->make_response_promise<std::vector<dlq_info>>();
      list_dlqs(self, rp);
      return rp;
    },
    [self](show_atom, dlq_show_request& req) -> caf::result<dlq_show_response> {
      auto rp = self->make_response_promise<dlq_show_response>();
      show(self, std::move(req), rp);
      return rp;
    },
    [self](redrive_atom,
           dlq_redrive_request& req) -> caf::result<dlq_redrive_response> {
      auto rp = self->make_response_promise<dlq_redrive_response>();
      if (req.rate_per_second < 0 || req.max_records < 0) {
        rp.deliver(make_error(ec::invalid_request,
                              "rate_per_second and max_records must not be "
                              "negative"));
        return rp;
      }
      auto job = std::make_shared<dlq_redrive_job>();
      job->id = self->state.next_job++;
      job->req = std::move(req);
      job->rp = rp;
      auto& q = self->state.redrives;
      q.push_back(job);
      if (q.size() == 1)
        start_redrive(self, job);
      return rp;
    },
    [self](purge_atom, dlq_purge_request& req) -> caf::result<dlq_purge_response> {
      auto rp = self->make_response_promise<dlq_purge_response>();
      purge(self, std::move(req), rp);
      return rp;
    },
    [self](update_atom, const std::vector<topic_metadata>& topics) {
      on_update(self, topics);
    },
    [self](tick_atom, uint64_t id) {
      auto& q = self->state.redrives;
      if (q.empty() || q.front()->id != id)
        return;
      auto job = q.front();
      job->waiting = false;
      produce_one(self, job);
    },
  };
}

} // namespace ferry
