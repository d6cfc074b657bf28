// The Kafka group APIs (see kafka_internal.hpp): FindCoordinator, JoinGroup,
// SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups
// and DescribeGroups, served by the node's group coordinators, the same ones
// Ferry's consumer actors, HTTP and ferryctl use. Kafka consumers assign
// partitions themselves (the leader member runs the assignor), so their
// joins carry protocol_type "consumer" and their protocols' metadata, and
// the coordinator runs the group client-side (actors/server/
// group_coordinator.hpp).

#include "actors/kafka/kafka_internal.hpp"

#include "broker/error.hpp"
#include "broker/kafka_group_protocol.hpp"

#include <set>

namespace ferry::kafka_detail {

namespace {

using kafka::error_code;

/// Kafka's offset.metadata.max.bytes default.
constexpr size_t max_offset_metadata = 4096;

/// Join and sync wait for the other members: up to the rebalance timeout
/// (the coordinator's own timer answers them by then).
constexpr auto group_wait_margin = std::chrono::seconds{30};

caf::timespan request_timeout(const listener_core& core) {
  return caf::timespan{core.cfg.request_timeout};
}

std::optional<std::string> opt(const std::string& x) {
  if (x.empty())
    return std::nullopt;
  return x;
}

// -- FindCoordinator ------------------------------------------------------------

void find_coordinator(listener_core& core, conn_ptr conn, uint64_t seq,
                      const kafka::request_header& h,
                      const kafka::find_coordinator_request& req) {
  kafka::find_coordinator_response r;
  if (req.key_type != 0) {
    r.error = error_code::invalid_request;
    r.error_message = "Ferry has no transactions (key type "
                      + std::to_string(req.key_type) + ")";
  } else if (req.key.empty()) {
    r.error = error_code::invalid_group_id;
    r.error_message = "empty group id";
  } else if (!may(core, *conn, "group", req.key, "describe")) {
    r.error = error_code::group_authorization_failed;
    r.error_message = describe_denial(conn->user(), "group", req.key, "describe");
  } else {
    // This node: it relays the group's requests to the node coordinating
    // the group (in a cluster), so a client needs no other connection.
    r.node_id = core.cfg.node_id;
    r.host = core.cfg.advertised_host.empty() ? core.cfg.host
                                              : core.cfg.advertised_host;
    r.port = core.bound_port;
  }
  conn->complete(seq, respond(h, [&](kafka::writer& w) {
                   kafka::write_find_coordinator_response(w, h.api_version, r);
                 }));
}

// -- JoinGroup ------------------------------------------------------------------

void join_group(listener_core& core, conn_ptr conn, uint64_t seq,
                const kafka::request_header& h,
                kafka::join_group_request_v req) {
  auto v = h.api_version;
  auto fail = [h, v, member = req.member_id](error_code err) {
    return respond(h, [&](kafka::writer& w) {
      kafka::join_group_response_v r;
      r.error = err;
      r.member_id = member;
      kafka::write_join_group_response(w, v, r);
    });
  };
  if (req.group.empty()) {
    conn->complete(seq, fail(error_code::invalid_group_id));
    return;
  }
  if (!may(core, *conn, "group", req.group, "read")) {
    conn->complete(seq, fail(error_code::group_authorization_failed));
    return;
  }
  if (req.protocol_type.empty() || req.protocols.empty()) {
    // Kafka's rule; an empty type would also mean Ferry's own assignment.
    conn->complete(seq, fail(error_code::inconsistent_group_protocol));
    return;
  }
  join_group_request q;
  q.group = req.group;
  q.member_id = req.member_id;
  q.group_instance_id = req.group_instance_id.value_or("");
  q.client_id = h.client_id.value_or("");
  q.session_timeout_ms = req.session_timeout_ms;
  q.rebalance_timeout_ms = req.rebalance_timeout_ms;
  q.protocol_type = req.protocol_type;
  std::set<std::string> topics;
  for (auto& p : req.protocols) {
    q.assignors.push_back(p.name);
    q.protocol_metadata.push_back(p.metadata);
    if (req.protocol_type != "consumer")
      continue;
    // The subscription, so describe and the coordinator's partition-count
    // watch know the topics (an unreadable one is still passed on: the
    // assignor is the client's).
    if (auto sub = kafka::read_consumer_subscription(p.metadata)) {
      topics.insert(sub->topics.begin(), sub->topics.end());
      if (q.owned.empty())
        for (auto& tp : sub->owned)
          for (auto part : tp.partitions)
            q.owned.push_back(topic_partition{tp.topic, partition_id{part}});
    }
  }
  q.topics.assign(topics.begin(), topics.end());
  auto broker = core.broker;
  auto wait = std::max<caf::timespan>(
    request_timeout(core),
    std::chrono::milliseconds{std::max(req.rebalance_timeout_ms,
                                       req.session_timeout_ms)}
      + group_wait_margin);
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, wait, join_atom_v, q)
      .then(
        [=](const join_group_response& res) {
          kafka::join_group_response_v r;
          r.generation = res.generation;
          r.protocol_name = res.assignor;
          r.leader = res.leader_id;
          r.member_id = res.member_id;
          for (auto& m : res.members)
            r.members.push_back(kafka::join_member_v{
              m.member_id, opt(m.group_instance_id), m.metadata});
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_join_group_response(w, v, r);
                         }));
        },
        [=](caf::error& err) {
          auto code = kafka::to_kafka(err);
          if (is(err, ec::invalid_request)
              && describe(err).find("session timeout") != std::string::npos)
            code = error_code::invalid_session_timeout;
          conn->complete(seq, fail(code));
        });
  });
}

// -- SyncGroup ------------------------------------------------------------------

void sync_group(listener_core& core, conn_ptr conn, uint64_t seq,
                const kafka::request_header& h,
                kafka::sync_group_request_v req) {
  auto v = h.api_version;
  if (!may(core, *conn, "group", req.group, "read")) {
    conn->complete(seq, respond(h, [&](kafka::writer& w) {
                     kafka::write_sync_group_response(
                       w, v, error_code::group_authorization_failed, {});
                   }));
    return;
  }
  sync_group_request q;
  q.group = req.group;
  q.member_id = req.member_id;
  q.group_instance_id = req.group_instance_id.value_or("");
  q.generation = req.generation;
  for (auto& [id, bytes] : req.assignments)
    q.assignments.push_back(member_assignment{id, bytes});
  auto broker = core.broker;
  // A follower's sync waits for the leader's (bounded by the sessions).
  auto wait = std::max<caf::timespan>(request_timeout(core),
                                      std::chrono::minutes{5});
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, wait, sync_atom_v, q)
      .then(
        [=](const sync_group_response& res) {
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_sync_group_response(
                             w, v, error_code::none, res.assignment_bytes);
                         }));
        },
        [=](caf::error& err) {
          auto code = kafka::to_kafka(err);
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_sync_group_response(w, v, code, {});
                         }));
        });
  });
}

// -- Heartbeat ------------------------------------------------------------------

void heartbeat(listener_core& core, conn_ptr conn, uint64_t seq,
               const kafka::request_header& h, kafka::heartbeat_request_v req) {
  auto v = h.api_version;
  heartbeat_request q{req.group, req.member_id,
                      req.group_instance_id.value_or(""), req.generation};
  auto answer = [h, v](error_code err) {
    return respond(h, [&](kafka::writer& w) {
      kafka::write_heartbeat_response(w, v, err);
    });
  };
  if (!may(core, *conn, "group", req.group, "read")) {
    conn->complete(seq, answer(error_code::group_authorization_failed));
    return;
  }
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, timeout, heartbeat_atom_v, q)
      .then([=]() { conn->complete(seq, answer(error_code::none)); },
            [=](caf::error& err) {
              conn->complete(seq, answer(kafka::to_kafka(err)));
            });
  });
}

// -- LeaveGroup -----------------------------------------------------------------

void leave_group(listener_core& core, conn_ptr conn, uint64_t seq,
                 const kafka::request_header& h,
                 kafka::leave_group_request_v req) {
  auto v = h.api_version;
  auto members = std::make_shared<std::vector<kafka::leave_member_v>>(
    std::move(req.members));
  if (!may(core, *conn, "group", req.group, "read")) {
    for (auto& m : *members)
      m.error = error_code::group_authorization_failed;
    conn->complete(seq, respond(h, [&](kafka::writer& w) {
                     kafka::write_leave_group_response(
                       w, v, error_code::group_authorization_failed, *members);
                   }));
    return;
  }
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  auto group = req.group;
  fan_out(
    conn, seq, members->size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto& m = (*members)[i];
      leave_group_request q{group, m.member_id,
                            m.group_instance_id.value_or("")};
      self->request(broker, timeout, leave_atom_v, q)
        .then([=]() { done(); },
              [=](caf::error& err) {
                (*members)[i].error = kafka::to_kafka(err);
                done();
              });
    },
    [h, v, members] {
      return respond(h, [&](kafka::writer& w) {
        // v0-2 carry the one member's outcome at the top; v3+ per member.
        auto top = v < 3 && !members->empty() ? members->front().error
                                              : error_code::none;
        kafka::write_leave_group_response(w, v, top, *members);
      });
    });
}

// -- OffsetCommit ---------------------------------------------------------------

void offset_commit(listener_core& core, conn_ptr conn, uint64_t seq,
                   const kafka::request_header& h,
                   kafka::offset_commit_request_v req) {
  auto v = h.api_version;
  auto topics = std::make_shared<std::vector<kafka::offset_commit_topic_v>>(
    std::move(req.topics));
  auto answer = [h, v, topics] {
    return respond(h, [&](kafka::writer& w) {
      kafka::write_offset_commit_response(w, v, *topics);
    });
  };
  commit_offsets_request q;
  q.group = req.group;
  q.member_id = req.member_id;
  q.group_instance_id = req.group_instance_id.value_or("");
  q.generation = req.generation;
  auto set_all = [topics](error_code err) {
    for (auto& t : *topics)
      for (auto& p : t.partitions)
        if (p.error == error_code::none)
          p.error = err;
  };
  if (req.group.empty()) {
    set_all(error_code::invalid_group_id);
    conn->complete(seq, answer());
    return;
  }
  if (!may(core, *conn, "group", req.group, "read")) {
    set_all(error_code::group_authorization_failed);
    conn->complete(seq, answer());
    return;
  }
  for (auto& t : *topics) {
    bool readable = may(core, *conn, "topic", t.name, "read");
    for (auto& p : t.partitions) {
      if (!readable) {
        p.error = error_code::topic_authorization_failed;
        continue;
      }
      if (p.metadata && p.metadata->size() > max_offset_metadata) {
        p.error = error_code::offset_metadata_too_large;
        continue;
      }
      if (t.name.empty() || p.partition < 0 || p.offset < 0) {
        p.error = error_code::invalid_request;
        continue;
      }
      q.offsets.push_back(partition_offset{t.name, partition_id{p.partition},
                                           offset{p.offset},
                                           p.metadata.value_or("")});
    }
  }
  if (q.offsets.empty()) {
    conn->complete(seq, answer());
    return;
  }
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  conn->run([=](caf::event_based_actor* self) {
    self->request(broker, timeout, commit_atom_v, q)
      .then(
        [=]() { conn->complete(seq, answer()); },
        [=](caf::error& err) {
          set_all(kafka::to_kafka(err));
          conn->complete(seq, answer());
        });
  });
}

// -- OffsetFetch ----------------------------------------------------------------

void offset_fetch(listener_core& core, conn_ptr conn, uint64_t seq,
                  const kafka::request_header& h,
                  kafka::offset_fetch_request_v req) {
  auto v = h.api_version;
  fetch_offsets_request q;
  q.group = req.group;
  // Topics the caller may not describe: TOPIC_AUTHORIZATION_FAILED when
  // named, left out of an "all topics" answer.
  auto denied = std::make_shared<std::vector<kafka::offset_fetch_topic_v>>();
  // The asked partitions of `tp`, each with `err` and no offset.
  auto refused = [](const auto& tp, error_code err) {
    kafka::offset_fetch_topic_v t{tp.topic, {}};
    for (auto p : tp.partitions) {
      kafka::offset_commit_partition_v x;
      x.partition = p;
      x.offset = -1;
      x.error = err;
      t.partitions.push_back(std::move(x));
    }
    return t;
  };
  if (!may(core, *conn, "group", req.group, "describe")) {
    std::vector<kafka::offset_fetch_topic_v> topics;
    if (req.topics)
      for (auto& tp : *req.topics)
        topics.push_back(refused(tp, error_code::group_authorization_failed));
    conn->complete(seq, respond(h, [&](kafka::writer& w) {
                     kafka::write_offset_fetch_response(
                       w, v, topics, error_code::group_authorization_failed);
                   }));
    return;
  }
  if (req.topics) {
    for (auto& tp : *req.topics) {
      if (!may(core, *conn, "topic", tp.topic, "describe")) {
        denied->push_back(refused(tp, error_code::topic_authorization_failed));
        continue;
      }
      for (auto p : tp.partitions)
        q.partitions.push_back(topic_partition{tp.topic, partition_id{p}});
    }
    if (q.partitions.empty()) {
      // Named nothing (or only denied topics): nothing to ask (an empty
      // list is not "all").
      conn->complete(seq, respond(h, [&](kafka::writer& w) {
                       kafka::write_offset_fetch_response(w, v, *denied,
                                                          error_code::none);
                     }));
      return;
    }
  }
  // The answer in the request's topic order (or by topic for "all").
  auto build = [](const std::vector<partition_offset>& xs) {
    std::vector<kafka::offset_fetch_topic_v> out;
    for (auto& o : xs) {
      auto i = std::find_if(out.begin(), out.end(),
                            [&](auto& t) { return t.name == o.topic; });
      if (i == out.end()) {
        out.push_back(kafka::offset_fetch_topic_v{o.topic, {}});
        i = out.end() - 1;
      }
      kafka::offset_commit_partition_v p;
      p.partition = o.partition.value;
      p.offset = o.committed.value;
      p.metadata = o.metadata;
      i->partitions.push_back(std::move(p));
    }
    return out;
  };
  auto asked = q.partitions;
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  bool all_topics = !req.topics;
  conn->run([=, &core](caf::event_based_actor* self) {
    self->request(broker, timeout, offsets_atom_v, q)
      .then(
        [=, &core](const std::vector<partition_offset>& xs) {
          auto topics = build(xs);
          if (all_topics)
            topics.erase(std::remove_if(topics.begin(), topics.end(),
                                        [&](auto& t) {
                                          return !may(core, *conn, "topic", t.name,
                                                      "describe");
                                        }),
                         topics.end());
          topics.insert(topics.end(), denied->begin(), denied->end());
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_offset_fetch_response(
                             w, v, topics, error_code::none);
                         }));
        },
        [=](caf::error& err) {
          auto code = kafka::to_kafka(err);
          // v0-1 have no top-level error: each partition carries it.
          std::vector<partition_offset> xs;
          for (auto& tp : asked)
            xs.push_back(partition_offset{tp.topic, tp.partition, offset{-1}, {}});
          auto topics = build(xs);
          for (auto& t : topics)
            for (auto& p : t.partitions)
              p.error = code;
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_offset_fetch_response(w, v, topics, code);
                         }));
        });
  });
}

// -- ListGroups and DescribeGroups ------------------------------------------------

/// What Kafka clients see as a group's protocol type: a Kafka group's own;
/// "" for a group of Ferry's consumers (server-side assignment, so no
/// client-side protocol), as Kafka shows a group that has only offsets;
/// "queue" for a queue-mode group.
std::string kafka_protocol_type(const group_description& g) {
  if (g.mode == "queue")
    return "queue";
  return g.protocol_type;
}

void list_groups(listener_core& core, conn_ptr conn, uint64_t seq,
                 const kafka::request_header& h) {
  auto v = h.api_version;
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  conn->run([=, &core](caf::event_based_actor* self) {
    self->request(broker, timeout, list_atom_v, group_atom_v)
      .then(
        [=, &core](const std::vector<group_description>& gs) {
          // Only the groups the caller may describe (as Kafka without
          // describe on the cluster).
          std::vector<kafka::listed_group> out;
          for (auto& g : gs)
            if (!core.auth() || core.cfg.security->authorize(conn->user(), "group", g.group,
                                                              "describe"))
              out.push_back(kafka::listed_group{g.group, kafka_protocol_type(g)});
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_list_groups_response(
                             w, v, error_code::none, out);
                         }));
        },
        [=](caf::error& err) {
          auto code = kafka::to_kafka(err);
          conn->complete(seq, respond(h, [&](kafka::writer& w) {
                           kafka::write_list_groups_response(w, v, code, {});
                         }));
        });
  });
}

void describe_groups(listener_core& core, conn_ptr conn, uint64_t seq,
                     const kafka::request_header& h,
                     kafka::describe_groups_request_v req) {
  auto v = h.api_version;
  auto groups = std::make_shared<std::vector<kafka::described_group>>();
  // The groups the caller may describe are asked; the others answer
  // GROUP_AUTHORIZATION_FAILED.
  std::vector<size_t> asked;
  for (auto& g : req.groups) {
    kafka::described_group d;
    d.group = g;
    if (may(core, *conn, "group", g, "describe"))
      asked.push_back(groups->size());
    else
      d.error = error_code::group_authorization_failed;
    groups->push_back(std::move(d));
  }
  auto broker = core.broker;
  auto timeout = request_timeout(core);
  fan_out(
    conn, seq, asked.size(),
    [=](caf::event_based_actor* self, size_t k, auto done) {
      auto i = asked[k];
      self->request(broker, timeout, describe_atom_v, group_atom_v,
                    (*groups)[i].group)
        .then(
          [=](const group_description& g) {
            auto& d = (*groups)[i];
            d.state = g.state;
            d.protocol_type = kafka_protocol_type(g);
            d.protocol = g.assignor;
            for (auto& m : g.members) {
              kafka::described_member dm;
              dm.member_id = m.member_id;
              dm.group_instance_id = opt(m.group_instance_id);
              dm.client_id = m.client_id;
              dm.metadata = m.metadata;
              dm.assignment = m.assignment_bytes;
              if (g.protocol_type.empty() && g.mode != "queue") {
                // A Ferry consumer: its partitions as Kafka would encode them.
                kafka::consumer_assignment a;
                for (auto& tp : m.assignment) {
                  if (a.partitions.empty() || a.partitions.back().topic != tp.topic)
                    a.partitions.push_back(kafka::topic_partitions{tp.topic, {}});
                  a.partitions.back().partitions.push_back(tp.partition.value);
                }
                dm.assignment = kafka::write_consumer_assignment(a);
              }
              d.members.push_back(std::move(dm));
            }
            done();
          },
          [=](caf::error& err) {
            auto& d = (*groups)[i];
            if (is(err, ec::unknown_group)) {
              // Kafka's answer for a group it does not know.
              d.state = "Dead";
            } else {
              d.error = kafka::to_kafka(err);
            }
            done();
          });
    },
    [h, v, groups] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_describe_groups_response(w, v, *groups);
      });
    });
}

} // namespace

bool serve_group_api(listener_core& core, conn_ptr conn, uint64_t seq,
                     const kafka::request_header& h, kafka::reader& in) {
  auto v = h.api_version;
  switch (static_cast<kafka::api>(h.api_key)) {
    case kafka::api::find_coordinator: {
      auto req = kafka::read_find_coordinator_request(in, v);
      if (!in.ok())
        return false;
      find_coordinator(core, std::move(conn), seq, h, req);
      return true;
    }
    case kafka::api::join_group: {
      auto req = kafka::read_join_group_request(in, v);
      if (!in.ok())
        return false;
      join_group(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::sync_group: {
      auto req = kafka::read_sync_group_request(in, v);
      if (!in.ok())
        return false;
      sync_group(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::heartbeat: {
      auto req = kafka::read_heartbeat_request(in, v);
      if (!in.ok())
        return false;
      heartbeat(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::leave_group: {
      auto req = kafka::read_leave_group_request(in, v);
      if (!in.ok())
        return false;
      leave_group(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::offset_commit: {
      auto req = kafka::read_offset_commit_request(in, v);
      if (!in.ok())
        return false;
      offset_commit(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::offset_fetch: {
      auto req = kafka::read_offset_fetch_request(in, v);
      if (!in.ok())
        return false;
      offset_fetch(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::list_groups:
      kafka::read_list_groups_request(in, v);
      if (!in.ok())
        return false;
      list_groups(core, std::move(conn), seq, h);
      return true;
    case kafka::api::describe_groups: {
      auto req = kafka::read_describe_groups_request(in, v);
      if (!in.ok())
        return false;
      describe_groups(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    default:
      in.fail("not a group API");
      return false;
  }
}

} // namespace ferry::kafka_detail
