// The Kafka listener (see kafka_listener.hpp): sockets and framing on Asio
// io threads, one strand per connection; each request served through a
// throw-away CAF actor asking the node's front door; answers written in
// request order.

#include "actors/kafka/kafka_listener.hpp"

#include "actors/kafka/kafka_internal.hpp"

#include "broker/error.hpp"
#include "broker/kafka_protocol.hpp"
#include "broker/logging.hpp"

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace ferry {

namespace kafka_detail {


// -- Metadata -----------------------------------------------------------------

/// `describable(name)`: may the caller see the topic (all topics: those it
/// may not are left out; named ones get TOPIC_AUTHORIZATION_FAILED).
kafka::metadata_response
make_metadata(const std::vector<node_info>& nodes,
              const std::vector<topic_metadata>& topics,
              const kafka::metadata_request& req,
              const std::function<bool(const std::string&)>& describable) {
  kafka::metadata_response r;
  for (auto& n : nodes) {
    if (n.controller)
      r.controller_id = n.id;
    if (n.kafka_port == 0)
      continue;
    r.brokers.push_back(kafka::metadata_broker{
      n.id, n.kafka_host.empty() ? n.host : n.kafka_host, n.kafka_port});
  }
  auto describe = [](const topic_metadata& md) {
    kafka::metadata_topic t;
    t.name = md.name;
    t.internal = md.name.rfind("__", 0) == 0;
    for (auto& a : md.partitions) {
      kafka::metadata_partition p;
      p.partition = a.partition.value;
      p.leader = a.leader;
      p.leader_epoch = a.epoch.value;
      p.replicas = a.replicas;
      p.isr = a.isr;
      if (a.leader < 0)
        p.error = kafka::error_code::leader_not_available;
      t.partitions.push_back(std::move(p));
    }
    return t;
  };
  if (!req.topics) {
    for (auto& md : topics)
      if (describable(md.name))
        r.topics.push_back(describe(md));
    return r;
  }
  for (auto& name : *req.topics) {
    auto i = std::find_if(topics.begin(), topics.end(),
                          [&](auto& md) { return md.name == name; });
    if (!describable(name)) {
      kafka::metadata_topic t;
      t.name = name;
      t.error = kafka::error_code::topic_authorization_failed;
      r.topics.push_back(std::move(t));
    } else if (i != topics.end()) {
      r.topics.push_back(describe(*i));
    } else {
      kafka::metadata_topic t;
      t.name = name;
      t.error = kafka::error_code::unknown_topic_or_partition;
      r.topics.push_back(std::move(t));
    }
  }
  return r;
}

void serve_metadata(listener_core& core, conn_ptr conn, uint64_t seq,
                    kafka::request_header h, kafka::metadata_request req) {
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  auto* cp = &core; // outlives the connection's requests
  conn->run([=](caf::event_based_actor* self) {
    auto fail = [=](const caf::error& err) {
      // No top-level error in Metadata: every asked topic gets a retriable
      // error, and the client asks again.
      kafka::metadata_response r;
      auto code = kafka::to_kafka(err) == kafka::error_code::request_timed_out
                    ? kafka::error_code::request_timed_out
                    : kafka::error_code::leader_not_available;
      if (req.topics)
        for (auto& name : *req.topics) {
          kafka::metadata_topic t;
          t.name = name;
          t.error = code;
          r.topics.push_back(std::move(t));
        }
      conn->complete(seq, respond(h, [&](kafka::writer& w) {
                       kafka::write_metadata_response(w, h.api_version, r);
                     }));
    };
    self->request(broker, timeout, list_atom_v, broker_atom_v)
      .then(
        [=](std::vector<node_info>& nodes) {
          self->request(broker, timeout, list_atom_v, topic_atom_v)
            .then(
              [=](std::vector<topic_metadata>& topics) {
                auto r = make_metadata(nodes, topics, req, [&](const std::string& name) {
                  return may(*cp, *conn, "topic", name, "describe");
                });
                conn->complete(seq, respond(h, [&](kafka::writer& w) {
                                 kafka::write_metadata_response(w, h.api_version, r);
                               }));
              },
              fail);
        },
        fail);
  });
}

// -- Produce ------------------------------------------------------------------

void serve_produce(listener_core& core, conn_ptr conn, uint64_t seq,
                   kafka::request_header h, std::shared_ptr<std::string> frame,
                   kafka::produce_request_v req) {
  auto resp = std::make_shared<std::vector<kafka::produce_topic_response>>();
  // Where each forwarded request's answer goes: (topic index, partition index).
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<produce_request> reqs;
  std::optional<acks_mode> acks;
  switch (req.acks) {
    case 0:
      acks = acks_mode::none;
      break;
    case 1:
      acks = acks_mode::leader;
      break;
    case -1:
      acks = acks_mode::all;
      break;
    default:
      break;
  }
  for (auto& t : req.topics) {
    kafka::produce_topic_response tr;
    tr.name = t.name;
    bool writable = may(core, *conn, "topic", t.name, "write");
    for (auto& p : t.partitions) {
      kafka::produce_partition_response pr;
      pr.partition = p.partition;
      if (!writable) {
        pr.error = kafka::error_code::topic_authorization_failed;
        pr.error_message = describe_denial(conn->user(), "topic", t.name, "write");
      } else if (!acks) {
        pr.error = kafka::error_code::invalid_required_acks;
        pr.error_message = "acks must be 0, 1 or -1, not " + std::to_string(req.acks);
      } else if (req.transactional_id) {
        pr.error = kafka::error_code::invalid_request;
        pr.error_message = "Ferry does not support transactions";
      } else if (!p.records || p.records->empty()) {
        pr.error = kafka::error_code::invalid_request;
        pr.error_message = "no records for the partition";
      } else {
        produce_request r;
        r.topic = t.name;
        r.partition = partition_id{p.partition};
        r.acks = *acks;
        r.batch = std::string{*p.records};
        where.emplace_back(resp->size(), tr.partitions.size());
        reqs.push_back(std::move(r));
      }
      tr.partitions.push_back(std::move(pr));
    }
    resp->push_back(std::move(tr));
  }
  frame.reset(); // the batches are copied out
  auto answer = [h, resp] {
    return respond(h, [&](kafka::writer& w) {
      kafka::write_produce_response(w, h.api_version, *resp);
    });
  };
  bool silent = req.acks == 0;
  if (reqs.empty()) {
    conn->complete(seq, silent ? std::nullopt : std::optional{answer()});
    return;
  }
  if (silent) // acks=0: no answer, the next request is read at once
    conn->complete(seq, std::nullopt);
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, timeout, produce_atom_v, reqs)
      .then(
        [=](std::vector<produce_result>& rs) {
          for (size_t i = 0; i < rs.size() && i < where.size(); ++i) {
            auto& pr = (*resp)[where[i].first].partitions[where[i].second];
            if (rs[i].error) {
              pr.error = kafka::to_kafka(rs[i].error);
              pr.error_message = describe(rs[i].error);
            } else {
              pr.base_offset = rs[i].response.base_offset.value;
              pr.log_start_offset = rs[i].response.log_start.value;
            }
          }
          if (!silent)
            conn->complete(seq, answer());
        },
        [=](caf::error& err) {
          for (auto& [ti, pi] : where) {
            auto& pr = (*resp)[ti].partitions[pi];
            pr.error = kafka::to_kafka(err);
            pr.error_message = describe(err);
          }
          if (!silent)
            conn->complete(seq, answer());
        });
  });
}

// -- Fetch --------------------------------------------------------------------

struct fetch_job {
  kafka::request_header h;
  kafka::fetch_request_v req;
  kafka::fetch_response_v resp;
  /// (topic index, partition index) of each asked partition, and its
  /// request to the front door.
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<fetch_request> asks;
  std::vector<bool> failed;
  size_t pending = 0;
  bool answered = false;

  kafka::fetch_partition_resp& slot(size_t i) {
    return resp.topics[where[i].first].partitions[where[i].second];
  }

  void store(size_t i, fetch_response& r) {
    auto& p = slot(i);
    p.error = kafka::error_code::none;
    p.high_watermark = r.high_watermark.value;
    p.last_stable_offset = r.high_watermark.value;
    p.log_start_offset = r.log_start.value;
    p.records = std::move(r.data);
  }

  void store(size_t i, const caf::error& err) {
    auto& p = slot(i);
    p.error = kafka::to_kafka(err);
    p.records.clear();
    failed[i] = true;
  }

  size_t bytes() const {
    size_t n = 0;
    for (auto& t : resp.topics)
      for (auto& p : t.partitions)
        n += p.records.size();
    return n;
  }

  /// The answer in parts: each partition's stored batches are sent as
  /// they came from the replica, not copied into the frame.
  std::vector<std::string> finish() {
    answered = true;
    // The request's max_bytes over all partitions: the first non-empty
    // partition always goes whole (KIP-74), later ones while they fit.
    size_t total = 0;
    auto limit = static_cast<size_t>(std::max(req.max_bytes, 0));
    for (auto& t : resp.topics)
      for (auto& p : t.partitions) {
        if (p.records.empty())
          continue;
        if (total > 0 && total + p.records.size() > limit)
          p.records.clear();
        else
          total += p.records.size();
      }
    kafka::writer w;
    kafka::begin_response(w, h.correlation_id, false);
    kafka::write_fetch_response(w, h.api_version, std::move(resp));
    kafka::finish_response(w);
    return w.take_chunks();
  }
};

void serve_fetch(listener_core& core, conn_ptr conn, uint64_t seq,
                 kafka::request_header h, kafka::fetch_request_v req) {
  auto job = std::make_shared<fetch_job>();
  job->h = h;
  for (auto& t : req.topics) {
    kafka::fetch_topic_resp tr;
    tr.name = t.name;
    bool readable = may(core, *conn, "topic", t.name, "read");
    for (auto& p : t.partitions) {
      kafka::fetch_partition_resp pr;
      pr.partition = p.partition;
      if (!readable) {
        pr.error = kafka::error_code::topic_authorization_failed;
      } else if (req.replica_id >= 0) {
        // Ferry's followers replicate over the CAF port, never through here.
        pr.error = kafka::error_code::not_leader_or_follower;
      } else {
        fetch_request f;
        f.topic = t.name;
        f.partition = partition_id{p.partition};
        f.from = offset{p.fetch_offset};
        f.leader_epoch = p.current_leader_epoch;
        f.max_bytes = std::max(p.partition_max_bytes, 1);
        f.min_bytes = 1;
        f.max_wait_ms = 0;
        job->where.emplace_back(job->resp.topics.size(), tr.partitions.size());
        job->asks.push_back(std::move(f));
      }
      tr.partitions.push_back(std::move(pr));
    }
    job->resp.topics.push_back(std::move(tr));
  }
  job->failed.assign(job->asks.size(), false);
  job->req = std::move(req);
  if (job->asks.empty()) {
    conn->complete(seq, job->finish());
    return;
  }
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  auto wait = std::min<int64_t>(std::max(job->req.max_wait_ms, 0),
                                core.cfg.max_wait.count());
  auto poll_timeout = caf::timespan{std::chrono::milliseconds{wait}
                                    + core.cfg.long_poll_margin};
  conn->run([=](caf::event_based_actor* self) {
    // Round 2: every partition long-polled; the first with data (or an
    // error) answers the request.
    auto long_poll = [=] {
      job->pending = 0;
      for (size_t i = 0; i < job->asks.size(); ++i) {
        if (job->failed[i])
          continue;
        auto f = job->asks[i]; // from unchanged: round 1 found nothing
        f.max_wait_ms = static_cast<int32_t>(wait);
        ++job->pending;
        self->request(broker, poll_timeout, fetch_atom_v, std::move(f))
          .then(
            [=](fetch_response& r) {
              if (job->answered)
                return;
              bool data = !r.data.empty();
              job->store(i, r);
              if (data || --job->pending == 0) {
                conn->complete(seq, job->finish());
              }
            },
            [=](caf::error& err) {
              if (job->answered)
                return;
              job->store(i, err);
              conn->complete(seq, job->finish());
            });
      }
      if (job->pending == 0) {
        conn->complete(seq, job->finish());
      }
    };
    // Round 1: every partition at once, without waiting.
    job->pending = job->asks.size();
    for (size_t i = 0; i < job->asks.size(); ++i) {
      auto one_done = [=] {
        if (--job->pending > 0)
          return;
        bool any_error = std::find(job->failed.begin(), job->failed.end(), true)
                         != job->failed.end();
        auto enough = job->bytes() >= static_cast<size_t>(std::max(job->req.min_bytes, 1));
        if (wait <= 0 || enough || any_error) {
          conn->complete(seq, job->finish());
          return;
        }
        long_poll();
      };
      self->request(broker, timeout, fetch_atom_v, job->asks[i])
        .then(
          [=](fetch_response& r) {
            job->store(i, r);
            one_done();
          },
          [=](caf::error& err) {
            job->store(i, err);
            one_done();
          });
    }
  });
}

// -- ListOffsets --------------------------------------------------------------

void serve_list_offsets(listener_core& core, conn_ptr conn, uint64_t seq,
                        kafka::request_header h,
                        kafka::list_offsets_request_v req) {
  struct job_t {
    std::vector<kafka::list_offsets_topic_resp> topics;
    size_t pending = 0;
  };
  auto job = std::make_shared<job_t>();
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<list_offsets_request> asks;
  for (auto& t : req.topics) {
    kafka::list_offsets_topic_resp tr;
    tr.name = t.name;
    bool describable = may(core, *conn, "topic", t.name, "describe");
    for (auto& p : t.partitions) {
      kafka::list_offsets_partition_resp pr;
      pr.partition = p.partition;
      if (!describable) {
        pr.error = kafka::error_code::topic_authorization_failed;
        tr.partitions.push_back(pr);
        continue;
      }
      list_offsets_request q;
      q.topic = t.name;
      q.partition = partition_id{p.partition};
      q.timestamp = p.timestamp;
      q.leader_epoch = p.current_leader_epoch;
      where.emplace_back(job->topics.size(), tr.partitions.size());
      asks.push_back(std::move(q));
      tr.partitions.push_back(pr);
    }
    job->topics.push_back(std::move(tr));
  }
  auto answer = [h, job] {
    return respond(h, [&](kafka::writer& w) {
      kafka::write_list_offsets_response(w, h.api_version, job->topics);
    });
  };
  if (asks.empty()) {
    conn->complete(seq, answer());
    return;
  }
  job->pending = asks.size();
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  conn->run([=](caf::event_based_actor* self) {
    for (size_t i = 0; i < asks.size(); ++i) {
      auto slot = [=]() -> kafka::list_offsets_partition_resp& {
        return job->topics[where[i].first].partitions[where[i].second];
      };
      auto done = [=] {
        if (--job->pending == 0)
          conn->complete(seq, answer());
      };
      auto fail = [=](caf::error& err) {
        slot().error = kafka::to_kafka(err);
        done();
      };
      if (asks[i].timestamp < 0) {
        self->request(broker, timeout, offsets_atom_v, asks[i])
          .then(
            [=](offset o) {
              slot().offset = o.value;
              done();
            },
            fail);
        continue;
      }
      // By timestamp: Ferry answers the high watermark when no record is
      // that late; Kafka answers -1, so ask for the high watermark too.
      auto latest = asks[i];
      latest.timestamp = -1;
      self->request(broker, timeout, offsets_atom_v, latest)
        .then(
          [=](offset hw) {
            self->request(broker, timeout, offsets_atom_v, asks[i])
              .then(
                [=](offset o) {
                  slot().offset = o < hw ? o.value : -1;
                  done();
                },
                fail);
          },
          fail);
    }
  });
}

// -- OffsetForLeaderEpoch ------------------------------------------------------------

void serve_offset_for_leader_epoch(listener_core& core, conn_ptr conn, uint64_t seq,
                                   kafka::request_header h,
                                   kafka::offset_for_leader_epoch_request_v req) {
  auto topics = std::make_shared<std::vector<kafka::epoch_topic_resp>>();
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<epoch_end_request> asks;
  for (auto& t : req.topics) {
    kafka::epoch_topic_resp tr;
    tr.name = t.name;
    bool describable = may(core, *conn, "topic", t.name, "describe");
    for (auto& p : t.partitions) {
      kafka::epoch_partition_resp pr;
      pr.partition = p.partition;
      if (!describable) {
        pr.error = kafka::error_code::topic_authorization_failed;
      } else if (req.replica_id >= 0) {
        // Ferry's followers replicate over the CAF port, never through here.
        pr.error = kafka::error_code::not_leader_or_follower;
      } else {
        where.emplace_back(topics->size(), tr.partitions.size());
        asks.push_back(epoch_end_request{t.name, partition_id{p.partition},
                                         p.current_leader_epoch, p.leader_epoch});
      }
      tr.partitions.push_back(pr);
    }
    topics->push_back(std::move(tr));
  }
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  fan_out(
    conn, seq, asks.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto slot = [=]() -> kafka::epoch_partition_resp& {
        return (*topics)[where[i].first].partitions[where[i].second];
      };
      self->request(broker, timeout, offsets_atom_v, asks[i])
        .then(
          [=](const epoch_end& e) {
            slot().leader_epoch = e.leader_epoch;
            slot().end_offset = e.end_offset.value;
            done();
          },
          [=](caf::error& err) {
            slot().error = kafka::to_kafka(err);
            done();
          });
    },
    [h, topics] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_offset_for_leader_epoch_response(w, h.api_version, *topics);
      });
    });
}

// -- InitProducerId ---------------------------------------------------------------

void serve_init_producer_id(listener_core& core, conn_ptr conn, uint64_t seq,
                            kafka::request_header h,
                            kafka::init_producer_id_request req) {
  auto answer = [h](kafka::error_code err, int64_t id, int16_t epoch) {
    return respond(h, [&](kafka::writer& w) {
      kafka::write_init_producer_id_response(w, h.api_version, err, id, epoch);
    });
  };
  if (req.transactional_id) {
    // Ferry has no transactions (and refuses transactional batches).
    conn->complete(seq, answer(kafka::error_code::invalid_request, -1, -1));
    return;
  }
  // Kafka (3.0+) gives an idempotent producer its id when it may write to
  // some topic; each batch is then checked against its topic.
  if (core.auth() && !core.cfg.security->allows_somewhere(conn->user(), "topic", "write")) {
    core.audit(conn->user(), conn->peer(), "write", "cluster", "denied",
               "User:" + conn->user() + " may write to no topic (InitProducerId)");
    conn->complete(seq, answer(kafka::error_code::cluster_authorization_failed, -1, -1));
    return;
  }
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, timeout, init_pid_atom_v)
      .then(
        [=](const producer_identity& pid) {
          conn->complete(seq, answer(kafka::error_code::none, pid.id.value, pid.epoch));
        },
        [=](caf::error& err) {
          auto code = kafka::to_kafka(err);
          // Retriable for the client, as Kafka's COORDINATOR_NOT_AVAILABLE
          // while no controller answers.
          if (code == kafka::error_code::unknown_server_error
              || code == kafka::error_code::not_leader_or_follower)
            code = kafka::error_code::coordinator_not_available;
          conn->complete(seq, answer(code, -1, -1));
        });
  });
}

void connection::start() {
  if (!tls_) {
    read_size();
    return;
  }
  tls_->async_handshake(ssl::stream_base::server,
                        [self = shared_from_this()](boost::system::error_code ec) {
                          if (ec) {
                            // A plaintext client, no or a bad certificate.
                            self->close("TLS handshake failed: " + ec.message());
                            return;
                          }
                          self->read_size();
                        });
}

void connection::handle(std::shared_ptr<std::string> frame, uint64_t seq) {
  kafka::reader in{*frame};
  auto h = kafka::read_request_header(in);
  if (!in.ok()) {
    close("request header: " + in.error());
    return;
  }
  auto range = kafka::supported(h.api_key);
  if (!range || h.api_version < range->min_version
      || h.api_version > range->max_version) {
    log::debug("kafka: {} asked api {} v{}, which Ferry does not answer",
               peer_, h.api_key, h.api_version);
    std::string out;
    if (h.api_key == static_cast<int16_t>(kafka::api::api_versions)) {
      out = respond(h, [](kafka::writer& w) {
        kafka::write_api_versions_response(w, 0,
                                           kafka::error_code::unsupported_version);
      });
    } else {
      kafka::writer w;
      kafka::write_unsupported_response(w, h.correlation_id);
      out = std::move(w.buffer());
    }
    on_complete(seq, std::move(out));
    return;
  }
  auto self = shared_from_this();
  auto v = h.api_version;
  auto malformed = [&](const char* api) {
    close(std::string{api} + " v" + std::to_string(v) + ": " + in.error());
  };
  auto key = static_cast<kafka::api>(h.api_key);
  if (key == kafka::api::sasl_handshake || key == kafka::api::sasl_authenticate) {
    serve_sasl(h, in, seq);
    return;
  }
  if (needs_login() && key != kafka::api::api_versions) {
    core_.audit("", peer_, "request", "cluster", "denied",
                "api " + std::to_string(h.api_key) + " before a SASL login");
    close("api " + std::to_string(h.api_key) + " before a SASL login (this port needs "
          "SASL PLAIN or SCRAM-SHA-256)");
    return;
  }
  if (!still_valid())
    return;
  switch (key) {
    case kafka::api::sasl_handshake:
    case kafka::api::sasl_authenticate:
      return; // served above
    case kafka::api::api_versions: {
      if (v >= 3) {
        in.compact_string("api_versions client_software_name");
        in.compact_string("api_versions client_software_version");
        in.tagged_fields("api_versions tagged fields");
      }
      in.expect_end("api_versions request");
      auto err = in.ok() ? kafka::error_code::none
                         : kafka::error_code::invalid_request;
      on_complete(seq, respond(h, [&](kafka::writer& w) {
                    kafka::write_api_versions_response(w, v, err);
                  }));
      return;
    }
    case kafka::api::metadata: {
      auto req = kafka::read_metadata_request(in, v);
      if (!in.ok())
        return malformed("Metadata");
      serve_metadata(core_, self, seq, h, std::move(req));
      return;
    }
    case kafka::api::produce: {
      auto req = kafka::read_produce_request(in, v);
      if (!in.ok())
        return malformed("Produce");
      serve_produce(core_, self, seq, h, std::move(frame), std::move(req));
      return;
    }
    case kafka::api::fetch: {
      auto req = kafka::read_fetch_request(in, v);
      if (!in.ok())
        return malformed("Fetch");
      serve_fetch(core_, self, seq, h, std::move(req));
      return;
    }
    case kafka::api::init_producer_id: {
      auto req = kafka::read_init_producer_id_request(in, v);
      if (!in.ok())
        return malformed("InitProducerId");
      serve_init_producer_id(core_, self, seq, h, std::move(req));
      return;
    }
    case kafka::api::offset_for_leader_epoch: {
      auto req = kafka::read_offset_for_leader_epoch_request(in, v);
      if (!in.ok())
        return malformed("OffsetForLeaderEpoch");
      serve_offset_for_leader_epoch(core_, self, seq, h, std::move(req));
      return;
    }
    case kafka::api::list_offsets: {
      auto req = kafka::read_list_offsets_request(in, v);
      if (!in.ok())
        return malformed("ListOffsets");
      serve_list_offsets(core_, self, seq, h, std::move(req));
      return;
    }
    case kafka::api::offset_commit:
    case kafka::api::offset_fetch:
    case kafka::api::find_coordinator:
    case kafka::api::join_group:
    case kafka::api::heartbeat:
    case kafka::api::leave_group:
    case kafka::api::sync_group:
    case kafka::api::describe_groups:
    case kafka::api::list_groups:
      if (!serve_group_api(core_, self, seq, h, in))
        close("api " + std::to_string(h.api_key) + " v" + std::to_string(v)
              + ": " + in.error());
      return;
    case kafka::api::create_topics:
    case kafka::api::delete_topics:
    case kafka::api::create_partitions:
    case kafka::api::describe_configs:
    case kafka::api::alter_configs:
    case kafka::api::delete_records:
      if (!serve_admin_api(core_, self, seq, h, in))
        close("api " + std::to_string(h.api_key) + " v" + std::to_string(v)
              + ": " + in.error());
      return;
  }
}

} // namespace kafka_detail

using kafka_detail::connection;
using kafka_detail::listener_core;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using steady = std::chrono::steady_clock;

// -- the listener -------------------------------------------------------------

struct kafka_listener::impl {
  explicit impl(kafka_listener_config cfg)
    : core(std::make_unique<listener_core>(std::move(cfg))),
      acceptor(core->ioc),
      retry(core->ioc),
      work(net::make_work_guard(core->ioc)) {
  }

  ~impl() {
    stop();
  }

  void accept() {
    acceptor.async_accept(
      net::make_strand(core->ioc),
      [this](boost::system::error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !acceptor.is_open())
          return;
        if (ec) {
          // Out of descriptors (or similar): back off instead of spinning.
          auto now = steady::now();
          if (now - last_warning > std::chrono::seconds{10}) {
            last_warning = now;
            log::warn("kafka: accept failed: {}", ec.message());
          }
          retry.expires_after(std::chrono::milliseconds{50});
          retry.async_wait([this](boost::system::error_code ec) {
            if (!ec)
              accept();
          });
          return;
        }
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay{true}, ignored);
        auto c = std::make_shared<connection>(std::move(socket), *core,
                                              core->tls_context());
        core->track(c);
        c->start();
        accept();
      });
  }

  void stop() {
    if (done)
      return;
    done = true;
    {
      std::lock_guard<std::mutex> guard{core->stop_mtx};
      core->stopped = true;
    }
    work.reset();
    core->ioc.stop();
    for (auto& t : threads)
      t.join();
    threads.clear();
    // No thread runs the io_context now: closing from here is safe.
    boost::system::error_code ec;
    acceptor.close(ec);
    retry.cancel();
    std::vector<std::shared_ptr<connection>> live;
    {
      std::lock_guard<std::mutex> guard{core->conns_mtx};
      for (auto& w : core->conns)
        if (auto c = w.lock())
          live.push_back(std::move(c));
      core->conns.clear();
    }
    for (auto& c : live)
      c->close_now();
  }

  std::unique_ptr<listener_core> core;
  tcp::acceptor acceptor;
  net::steady_timer retry;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::vector<std::thread> threads;
  steady::time_point last_warning{};
  uint16_t port = 0;
  bool done = false;
};

caf::expected<std::unique_ptr<kafka_listener>>
kafka_listener::listen(kafka_listener_config cfg) {
  auto host = cfg.host;
  auto wanted = cfg.port;
  auto p = std::make_shared<impl>(std::move(cfg));
  if (p->core->cfg.tls.enabled()) {
    auto ctx = make_server_tls_context(p->core->cfg.tls, "kafka");
    if (!ctx)
      return std::move(ctx.error());
    p->core->tls = std::make_shared<net::ssl::context>(ctx->release());
  }
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec)
    return make_error(ec::io_error, "kafka: bad listen address '" + host
                                      + "': " + ec.message());
  tcp::endpoint ep{addr, wanted};
  auto where = host + ":" + std::to_string(wanted);
  p->acceptor.open(ep.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(ep, ec);
  if (!ec)
    p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ec::io_error,
                      "kafka: cannot listen on " + where + ": " + ec.message());
  p->port = p->acceptor.local_endpoint(ec).port();
  p->core->bound_port = p->port;
  if (ec)
    return make_error(ec::io_error, "kafka: cannot read the bound port: "
                                      + ec.message());
  return std::unique_ptr<kafka_listener>{new kafka_listener(std::move(p))};
}

kafka_listener::kafka_listener(std::shared_ptr<impl> p) : impl_(std::move(p)) {
}

kafka_listener::~kafka_listener() {
  stop();
}

void kafka_listener::serve(caf::actor_system& sys, broker_actor broker) {
  auto& p = *impl_;
  if (!p.threads.empty() || p.done)
    return;
  p.core->sys = &sys;
  p.core->broker = std::move(broker);
  p.accept();
  auto n = std::max(1, p.core->cfg.threads);
  for (int i = 0; i < n; ++i)
    p.threads.emplace_back([core = p.core.get()] {
      for (;;) {
        try {
          core->ioc.run();
          return;
        } catch (const std::exception& e) {
          log::error("kafka: an io handler failed: {}", e.what());
        }
      }
    });
}

uint16_t kafka_listener::port() const {
  return impl_->port;
}

caf::error kafka_listener::reload_tls() {
  auto& core = *impl_->core;
  if (!core.cfg.tls.enabled())
    return make_error(ec::invalid_config, "kafka: TLS is off on this port");
  auto ctx = make_server_tls_context(core.cfg.tls, "kafka");
  if (!ctx)
    return std::move(ctx.error());
  auto wrapped = std::make_shared<net::ssl::context>(ctx->release());
  std::lock_guard<std::mutex> guard{core.tls_mtx};
  core.tls = std::move(wrapped);
  return {};
}

void kafka_listener::stop() {
  if (impl_)
    impl_->stop();
}

} // namespace ferry
