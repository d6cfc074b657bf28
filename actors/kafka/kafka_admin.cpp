// The Kafka admin APIs (see kafka_internal.hpp): CreateTopics, DeleteTopics,
// CreatePartitions, DescribeConfigs, AlterConfigs and DeleteRecords, served
// by the node's front door as ferryctl's topic commands are (through the
// metadata quorum; the config keys and bounds of broker/topic_config.hpp).

#include "actors/kafka/kafka_internal.hpp"

#include "broker/error.hpp"
#include "broker/kafka_admin_protocol.hpp"
#include "broker/topic_config.hpp"

#include <limits>
#include <map>

namespace ferry::kafka_detail {

namespace {

using kafka::error_code;

caf::timespan admin_timeout(const listener_core& core, int32_t timeout_ms) {
  // The client's timeout when it gave one, else the listener's.
  if (timeout_ms > 0)
    return std::max<caf::timespan>(std::chrono::milliseconds{timeout_ms},
                                   std::chrono::seconds{1});
  return caf::timespan{core.cfg.request_timeout};
}

kafka::named_result failed(std::string name, const caf::error& err,
                           error_code code) {
  return kafka::named_result{std::move(name), code, describe(err)};
}

// -- CreateTopics ---------------------------------------------------------------

void create_topics(listener_core& core, conn_ptr conn, uint64_t seq,
                   const kafka::request_header& h,
                   kafka::create_topics_request_v req) {
  auto v = h.api_version;
  auto results = std::make_shared<std::vector<kafka::named_result>>();
  std::vector<std::pair<size_t, topic_config>> to_create;
  std::map<std::string, int> seen;
  for (auto& t : req.topics)
    ++seen[t.name];
  for (auto& t : req.topics) {
    kafka::named_result r{t.name, error_code::none, std::nullopt};
    topic_config cfg;
    if (t.partitions >= 0)
      cfg.partitions = t.partitions;
    if (t.replication_factor >= 0)
      cfg.replication_factor = t.replication_factor;
    std::map<std::string, std::string> changes;
    for (auto& [k, val] : t.configs)
      if (val)
        changes[k] = *val;
    if (!may(core, *conn, "topic", t.name, "create")) {
      r.error = error_code::topic_authorization_failed;
      r.message = describe_denial(conn->user(), "topic", t.name, "create");
    } else if (seen[t.name] > 1) {
      r.error = error_code::invalid_request;
      r.message = "topic " + t.name + " is named more than once";
    } else if (!t.assignments.empty()) {
      r.error = error_code::invalid_replica_assignment;
      r.message = "Ferry places replicas itself: give a replication factor";
    } else if (auto err = validate_topic_name(t.name)) {
      r.error = error_code::invalid_topic_exception;
      r.message = describe(err);
    } else if (auto err = validate_partition_count(cfg.partitions)) {
      r.error = error_code::invalid_partitions;
      r.message = describe(err);
    } else if (cfg.replication_factor < 1) {
      r.error = error_code::invalid_replication_factor;
      r.message = "replication factor "
                  + std::to_string(cfg.replication_factor) + " is below 1";
    } else if (auto applied = apply_topic_config(
                 cfg, changes, std::numeric_limits<int16_t>::max());
               !applied) {
      r.error = kafka::to_kafka(applied.error());
      r.message = describe(applied.error());
    } else if (!req.validate_only) {
      to_create.emplace_back(results->size(), *applied);
    }
    results->push_back(std::move(r));
  }
  auto broker = core.broker;
  auto timeout = admin_timeout(core, req.timeout_ms);
  fan_out(
    conn, seq, to_create.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto slot = to_create[i].first;
      auto name = (*results)[slot].name;
      self->request(broker, timeout, create_atom_v, topic_atom_v, name,
                    to_create[i].second)
        .then([=](const topic_metadata&) { done(); },
              [=](caf::error& err) {
                auto code = kafka::to_kafka(err);
                if (is(err, ec::policy_violation))
                  code = error_code::invalid_replication_factor;
                (*results)[slot] = failed(name, err, code);
                done();
              });
    },
    [h, v, results] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_create_topics_response(w, v, *results);
      });
    });
}

// -- DeleteTopics ---------------------------------------------------------------

void delete_topics(listener_core& core, conn_ptr conn, uint64_t seq,
                   const kafka::request_header& h,
                   kafka::delete_topics_request_v req) {
  auto v = h.api_version;
  auto results = std::make_shared<std::vector<kafka::named_result>>();
  std::vector<size_t> allowed;
  for (auto& name : req.names) {
    kafka::named_result r{name, error_code::none, std::nullopt};
    if (may(core, *conn, "topic", name, "delete")) {
      allowed.push_back(results->size());
    } else {
      r.error = error_code::topic_authorization_failed;
      r.message = describe_denial(conn->user(), "topic", name, "delete");
    }
    results->push_back(std::move(r));
  }
  auto broker = core.broker;
  auto timeout = admin_timeout(core, req.timeout_ms);
  fan_out(
    conn, seq, allowed.size(),
    [=](caf::event_based_actor* self, size_t k, auto done) {
      auto i = allowed[k];
      auto name = (*results)[i].name;
      self->request(broker, timeout, delete_atom_v, topic_atom_v, name)
        .then([=](const topic_metadata&) { done(); },
              [=](caf::error& err) {
                (*results)[i] = failed(name, err, kafka::to_kafka(err));
                done();
              });
    },
    [h, v, results] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_delete_topics_response(w, v, *results);
      });
    });
}

// -- CreatePartitions -----------------------------------------------------------

void create_partitions(listener_core& core, conn_ptr conn, uint64_t seq,
                       const kafka::request_header& h,
                       kafka::create_partitions_request_v req) {
  auto v = h.api_version;
  auto results = std::make_shared<std::vector<kafka::named_result>>();
  std::vector<std::pair<size_t, int32_t>> grow;
  for (auto& t : req.topics) {
    kafka::named_result r{t.name, error_code::none, std::nullopt};
    if (!may(core, *conn, "topic", t.name, "alter")) {
      r.error = error_code::topic_authorization_failed;
      r.message = describe_denial(conn->user(), "topic", t.name, "alter");
    } else if (t.has_assignments) {
      r.error = error_code::invalid_replica_assignment;
      r.message = "Ferry places replicas itself";
    } else if (auto err = validate_partition_count(t.count)) {
      r.error = error_code::invalid_partitions;
      r.message = describe(err);
    } else {
      grow.emplace_back(results->size(), t.count);
    }
    results->push_back(std::move(r));
  }
  auto broker = core.broker;
  auto timeout = admin_timeout(core, req.timeout_ms);
  bool validate_only = req.validate_only;
  fan_out(
    conn, seq, grow.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto slot = grow[i].first;
      auto name = (*results)[slot].name;
      auto count = grow[i].second;
      auto on_error = [=](const caf::error& err) {
        auto code = kafka::to_kafka(err);
        if (is(err, ec::invalid_request) || is(err, ec::invalid_config))
          code = error_code::invalid_partitions;
        (*results)[slot] = failed(name, err, code);
        done();
      };
      // Kafka refuses a count that does not grow the topic.
      self->request(broker, timeout, describe_atom_v, topic_atom_v, name)
        .then(
          [=](const topic_description& d) {
            auto now = static_cast<int32_t>(d.partitions.size());
            if (count <= now) {
              (*results)[slot].error = error_code::invalid_partitions;
              (*results)[slot].message = "topic " + name + " has "
                                         + std::to_string(now)
                                         + " partitions already";
              done();
              return;
            }
            if (validate_only) {
              done();
              return;
            }
            self->request(broker, timeout, add_parts_atom_v, name, count)
              .then([=](const topic_metadata&) { done(); },
                    [=](caf::error& err) { on_error(err); });
          },
          [=](caf::error& err) { on_error(err); });
    },
    [h, v, results] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_create_partitions_response(w, v, *results);
      });
    });
}

// -- DescribeConfigs and AlterConfigs ---------------------------------------------

/// Defaults with the largest replication factor: what a change is checked
/// against before the quorum checks it against the topic itself.
topic_config any_topic() {
  topic_config c;
  c.replication_factor = std::numeric_limits<int16_t>::max();
  return c;
}

constexpr int8_t topic_resource = static_cast<int8_t>(kafka::resource_type::topic);
constexpr int8_t broker_resource = static_cast<int8_t>(kafka::resource_type::broker);

void describe_configs(listener_core& core, conn_ptr conn, uint64_t seq,
                      const kafka::request_header& h,
                      kafka::describe_configs_request_v req) {
  auto v = h.api_version;
  auto results = std::make_shared<std::vector<kafka::describe_configs_result_v>>();
  std::vector<size_t> topics;
  for (auto& r : req.resources) {
    kafka::describe_configs_result_v x;
    x.type = r.type;
    x.name = r.name;
    if (r.type == topic_resource) {
      if (may(core, *conn, "topic", r.name, "describe")) {
        topics.push_back(results->size());
      } else {
        x.error = error_code::topic_authorization_failed;
        x.message = describe_denial(conn->user(), "topic", r.name, "describe");
      }
    } else if (r.type == broker_resource) {
      if (!may(core, *conn, "cluster", "cluster", "describe")) {
        x.error = error_code::cluster_authorization_failed;
        x.message = describe_denial(conn->user(), "cluster", "cluster", "describe");
      }
    } else {
      // Brokers have no configs Ferry exposes here: an empty list.
      x.error = error_code::invalid_request;
      x.message = "resource type " + std::to_string(r.type)
                  + " is not a topic or a broker";
    }
    results->push_back(std::move(x));
  }
  auto resources = req.resources;
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  fan_out(
    conn, seq, topics.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto slot = topics[i];
      auto name = (*results)[slot].name;
      auto keys = resources[slot].keys;
      self->request(broker, timeout, describe_atom_v, topic_atom_v, name)
        .then(
          [=](const topic_description& d) {
            auto defaults = render_topic_config(topic_config{});
            for (auto& [k, val] : render_topic_config(d.config)) {
              if (keys && !keys->empty()
                  && std::find(keys->begin(), keys->end(), k) == keys->end())
                continue;
              kafka::config_entry_v e;
              e.name = k;
              e.value = val;
              e.is_default = defaults[k] == val;
              (*results)[slot].configs.push_back(std::move(e));
            }
            done();
          },
          [=](caf::error& err) {
            (*results)[slot].error = kafka::to_kafka(err);
            (*results)[slot].message = describe(err);
            done();
          });
    },
    [h, v, results] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_describe_configs_response(w, v, *results);
      });
    });
}

void alter_configs(listener_core& core, conn_ptr conn, uint64_t seq,
                   const kafka::request_header& h,
                   kafka::alter_configs_request_v req) {
  auto v = h.api_version;
  auto results = std::make_shared<std::vector<kafka::alter_configs_result_v>>();
  std::vector<std::pair<size_t, std::map<std::string, std::string>>> alters;
  for (auto& r : req.resources) {
    kafka::alter_configs_result_v x;
    x.type = r.type;
    x.name = r.name;
    std::map<std::string, std::string> changes;
    bool null_value = false;
    for (auto& [k, val] : r.configs) {
      if (!val)
        null_value = true;
      else
        changes[k] = *val;
    }
    if (r.type != topic_resource) {
      x.error = error_code::invalid_request;
      x.message = "only topic configs can be altered";
    } else if (!may(core, *conn, "topic", r.name, "alter")) {
      x.error = error_code::topic_authorization_failed;
      x.message = describe_denial(conn->user(), "topic", r.name, "alter");
    } else if (null_value) {
      x.error = error_code::invalid_config;
      x.message = "a null value (Ferry keeps every key set)";
    } else if (auto applied = apply_topic_config(
                 any_topic(), changes, std::numeric_limits<int16_t>::max());
               !applied) {
      // Checked against the defaults first: a bad key or value is refused
      // without asking the quorum (which checks against the topic again).
      x.error = kafka::to_kafka(applied.error());
      x.message = describe(applied.error());
    } else if (!req.validate_only) {
      alters.emplace_back(results->size(), std::move(changes));
    }
    results->push_back(std::move(x));
  }
  auto broker = core.broker;
  auto timeout = caf::timespan{core.cfg.request_timeout};
  fan_out(
    conn, seq, alters.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto slot = alters[i].first;
      auto name = (*results)[slot].name;
      self->request(broker, timeout, alter_atom_v, topic_atom_v, name,
                    alters[i].second)
        .then([=](const topic_metadata&) { done(); },
              [=](caf::error& err) {
                (*results)[slot].error = kafka::to_kafka(err);
                (*results)[slot].message = describe(err);
                done();
              });
    },
    [h, v, results] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_alter_configs_response(w, v, *results);
      });
    });
}

// -- DeleteRecords --------------------------------------------------------------

void delete_records(listener_core& core, conn_ptr conn, uint64_t seq,
                    const kafka::request_header& h,
                    kafka::delete_records_request_v req) {
  auto v = h.api_version;
  auto topics = std::make_shared<std::vector<kafka::delete_records_topic_v>>(
    std::move(req.topics));
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t t = 0; t < topics->size(); ++t) {
    auto& topic = (*topics)[t];
    bool deletable = may(core, *conn, "topic", topic.name, "delete");
    for (size_t p = 0; p < topic.partitions.size(); ++p) {
      if (deletable)
        where.emplace_back(t, p);
      else
        topic.partitions[p].error = error_code::topic_authorization_failed;
    }
  }
  auto broker = core.broker;
  auto timeout = admin_timeout(core, req.timeout_ms);
  fan_out(
    conn, seq, where.size(),
    [=](caf::event_based_actor* self, size_t i, auto done) {
      auto& t = (*topics)[where[i].first];
      auto& p = t.partitions[where[i].second];
      topic_partition tp{t.name, partition_id{p.partition}};
      // -1: up to the high watermark (Ferry's purge caps at it anyway).
      auto to = p.offset < 0 ? std::numeric_limits<int64_t>::max() : p.offset;
      if (p.offset < -1) {
        p.error = error_code::offset_out_of_range;
        done();
        return;
      }
      self->request(broker, timeout, purge_atom_v, tp, offset{to})
        .then(
          [=](offset low) {
            (*topics)[where[i].first].partitions[where[i].second].low_watermark
              = low.value;
            done();
          },
          [=](caf::error& err) {
            (*topics)[where[i].first].partitions[where[i].second].error
              = kafka::to_kafka(err);
            done();
          });
    },
    [h, v, topics] {
      return respond(h, [&](kafka::writer& w) {
        kafka::write_delete_records_response(w, v, *topics);
      });
    });
}

} // namespace

bool serve_admin_api(listener_core& core, conn_ptr conn, uint64_t seq,
                     const kafka::request_header& h, kafka::reader& in) {
  auto v = h.api_version;
  switch (static_cast<kafka::api>(h.api_key)) {
    case kafka::api::create_topics: {
      auto req = kafka::read_create_topics_request(in, v);
      if (!in.ok())
        return false;
      create_topics(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::delete_topics: {
      auto req = kafka::read_delete_topics_request(in, v);
      if (!in.ok())
        return false;
      delete_topics(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::create_partitions: {
      auto req = kafka::read_create_partitions_request(in, v);
      if (!in.ok())
        return false;
      create_partitions(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::describe_configs: {
      auto req = kafka::read_describe_configs_request(in, v);
      if (!in.ok())
        return false;
      describe_configs(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::alter_configs: {
      auto req = kafka::read_alter_configs_request(in, v);
      if (!in.ok())
        return false;
      alter_configs(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    case kafka::api::delete_records: {
      auto req = kafka::read_delete_records_request(in, v);
      if (!in.ok())
        return false;
      delete_records(core, std::move(conn), seq, h, std::move(req));
      return true;
    }
    default:
      in.fail("not an admin API");
      return false;
  }
}

} // namespace ferry::kafka_detail
