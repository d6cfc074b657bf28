#include "actors/server/local_metadata.hpp"

#include "broker/big_endian.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/topic_config.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/system_messages.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <string_view>

namespace ferry {

namespace fmt_ = local_metadata_format;

namespace {

using self_ptr = metadata_actor::stateful_pointer<local_metadata_state>;

std::string encode_topic(const topic_metadata& md) {
  std::vector<char> buf;
  buf.push_back(static_cast<char>(fmt_::topic_value_version));
  caf::binary_serializer sink{nullptr, buf};
  auto copy = md; // inspect() takes a non-const reference
  if (auto err = sink(copy))
    return {}; // cannot happen for these plain types
  return std::string{buf.begin(), buf.end()};
}

caf::expected<topic_metadata> decode_topic(std::string_view value) {
  if (value.empty()
      || static_cast<uint8_t>(value[0]) != fmt_::topic_value_version)
    return make_error(ec::corrupt_segment,
                      "topic record has an unknown version");
  topic_metadata md;
  caf::binary_deserializer source{nullptr, value.data() + 1, value.size() - 1};
  if (auto err = source(md))
    return make_error(ec::corrupt_segment,
                      "topic record does not decode: " + describe(err));
  if (source.remaining() != 0)
    return make_error(ec::corrupt_segment, "topic record has trailing bytes");
  return md;
}

std::string encode_i64(int64_t x) {
  std::string out;
  be::append(out, x);
  return out;
}

caf::expected<int64_t> decode_i64(std::string_view s) {
  if (s.size() != 8)
    return make_error(ec::corrupt_segment, "counter is not 8 bytes");
  return be::load<int64_t>(s.data());
}

std::vector<topic_metadata> all_topics(const local_metadata_state& st) {
  std::vector<topic_metadata> out;
  out.reserve(st.topics.size());
  for (auto& [name, md] : st.topics)
    out.push_back(md);
  return out;
}

void notify(self_ptr self) {
  auto list = all_topics(self->state);
  for (auto& sub : self->state.subscribers)
    caf::unsafe_send_as(self, sub, update_atom_v, list);
}

partition_assignment make_assignment(int32_t node_id, int32_t p) {
  partition_assignment pa;
  pa.partition = partition_id{p};
  pa.leader = node_id;
  pa.epoch = leader_epoch{0};
  pa.replicas = {node_id};
  pa.isr = {node_id};
  return pa;
}

caf::error persist(self_ptr self, const topic_metadata& md) {
  return self->state.cfg.store->put(fmt_::topics_db, md.name,
                                    encode_topic(md));
}

caf::error load(self_ptr self) {
  auto& st = self->state;
  caf::error scan_err;
  auto err = st.cfg.store->scan_prefix(
    fmt_::topics_db, "", [&](std::string_view key, std::string_view value) {
      auto md = decode_topic(value);
      if (!md) {
        // Leave the record where it is for an operator to inspect.
        log::error("metadata: skipping topic record {}: {}", key, md.error());
        return true;
      }
      st.topics.emplace(md->name, std::move(*md));
      return true;
    });
  if (err)
    return err;
  auto limit = st.cfg.store->get(fmt_::counters_db,
                                 fmt_::producer_id_limit_key);
  if (limit) {
    auto v = decode_i64(*limit);
    if (!v)
      return std::move(v.error());
    st.next_producer_id = *v;
    st.producer_id_limit = *v;
  } else if (!is(limit.error(), ec::not_found)) {
    return std::move(limit.error());
  }
  return caf::none;
}

} // namespace

metadata_actor::behavior_type
local_metadata(metadata_actor::stateful_pointer<local_metadata_state> self,
               local_metadata_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.producer_id_block < 1)
    self->state.cfg.producer_id_block = 1;
  if (auto err = load(self)) {
    // The behavior below is still returned (a typed actor needs one), but
    // the actor terminates with this error before it handles anything.
    log::error("metadata: cannot load topics: {}", err);
    self->quit(std::move(err));
  } else {
    log::info("metadata: {} topics recovered", self->state.topics.size());
  }
  self->set_down_handler([self](const caf::down_msg& dm) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const caf::actor& a) {
                                return a.address() == dm.source;
                              }),
               subs.end());
  });
  return {
    [self](create_atom, topic_atom, const std::string& name,
           topic_config tc) -> caf::result<topic_metadata> {
      auto& st = self->state;
      if (auto err = validate_topic_name(name))
        return err;
      if (auto err = validate_topic_config(tc, st.cfg.max_replication_factor))
        return err;
      if (st.topics.count(name) > 0)
        return make_error(ec::topic_exists,
                          "topic " + name + " already exists");
      topic_metadata md;
      md.name = name;
      md.config = with_defaults(tc);
      for (int32_t p = 0; p < tc.partitions; ++p)
        md.partitions.push_back(make_assignment(st.cfg.node_id, p));
      if (auto err = persist(self, md))
        return err;
      st.topics.emplace(name, md);
      log::info("metadata: created topic {} with {} partitions", name,
                tc.partitions);
      notify(self);
      return md;
    },
    [self](delete_atom, topic_atom,
           const std::string& name) -> caf::result<topic_metadata> {
      auto& st = self->state;
      auto i = st.topics.find(name);
      if (i == st.topics.end())
        return make_error(ec::unknown_topic, "topic " + name
                                               + " does not exist");
      if (auto err = st.cfg.store->erase(fmt_::topics_db, name))
        return err;
      auto md = std::move(i->second);
      st.topics.erase(i);
      log::info("metadata: deleted topic {}", name);
      notify(self);
      return md;
    },
    [self](list_atom, topic_atom) -> caf::result<std::vector<topic_metadata>> {
      return all_topics(self->state);
    },
    [self](describe_atom, topic_atom,
           const std::string& name) -> caf::result<topic_metadata> {
      auto i = self->state.topics.find(name);
      if (i == self->state.topics.end())
        return make_error(ec::unknown_topic, "topic " + name
                                               + " does not exist");
      return i->second;
    },
    [self](alter_atom, topic_atom, const std::string& name,
           const std::map<std::string, std::string>& changes)
      -> caf::result<topic_metadata> {
      auto& st = self->state;
      auto i = st.topics.find(name);
      if (i == st.topics.end())
        return make_error(ec::unknown_topic, "topic " + name
                                               + " does not exist");
      auto tc = apply_topic_config(i->second.config, changes,
                                   st.cfg.max_replication_factor);
      if (!tc)
        return std::move(tc.error());
      auto md = i->second;
      md.config = *tc;
      if (auto err = persist(self, md))
        return err;
      i->second = md;
      log::info("metadata: altered topic {} ({} keys)", name, changes.size());
      notify(self);
      return md;
    },
    [self](add_parts_atom, const std::string& name,
           int32_t n) -> caf::result<topic_metadata> {
      auto& st = self->state;
      auto i = st.topics.find(name);
      if (i == st.topics.end())
        return make_error(ec::unknown_topic, "topic " + name
                                               + " does not exist");
      auto have = i->second.config.partitions;
      if (n <= have)
        return make_error(ec::invalid_request,
                          "topic " + name + " has " + std::to_string(have)
                            + " partitions; it can only grow, not to "
                            + std::to_string(n));
      if (auto err = validate_partition_count(n))
        return err;
      auto md = i->second;
      md.config.partitions = n;
      for (int32_t p = have; p < n; ++p)
        md.partitions.push_back(make_assignment(st.cfg.node_id, p));
      if (auto err = persist(self, md))
        return err;
      i->second = md;
      log::info("metadata: topic {} grew from {} to {} partitions", name,
                have, n);
      notify(self);
      return md;
    },
    [self](init_pid_atom) -> caf::result<producer_identity> {
      auto& st = self->state;
      if (st.next_producer_id >= st.producer_id_limit) {
        auto limit = st.producer_id_limit + st.cfg.producer_id_block;
        if (auto err = st.cfg.store->put(fmt_::counters_db,
                                         fmt_::producer_id_limit_key,
                                         encode_i64(limit)))
          return err;
        st.producer_id_limit = limit;
      }
      producer_identity out;
      out.id = producer_id{st.next_producer_id++};
      out.epoch = 0;
      return out;
    },
    // A cluster of one: the only broker is this node, never fenced (its
    // endpoints are the node's business: cluster describe), and an ISR of
    // one replica cannot change.
    [self](update_atom, broker_atom,
           broker_registration& reg) -> caf::result<broker_registration> {
      if (reg.id != self->state.cfg.node_id)
        return make_error(ec::invalid_request,
                          "broker " + std::to_string(reg.id)
                            + " is not part of this single-node cluster (node "
                            + std::to_string(self->state.cfg.node_id) + ")");
      reg.fenced = false;
      return reg;
    },
    [self](list_atom, broker_atom) -> std::vector<broker_registration> {
      broker_registration me;
      me.id = self->state.cfg.node_id;
      return {me};
    },
    [](alter_atom, isr_atom,
       const isr_change& ch) -> caf::result<partition_assignment> {
      return make_error(ec::invalid_request,
                        "the ISR of " + ch.topic + "/"
                          + std::to_string(ch.partition.value)
                          + " cannot change in a single-node cluster");
    },
    [](assign_atom, const isr_change& tp) -> caf::result<partition_assignment> {
      return make_error(ec::policy_violation,
                        "cannot move the replicas of " + tp.topic + "/"
                          + std::to_string(tp.partition.value)
                          + ": a single-node cluster has one broker");
    },
    [](delete_atom, broker_atom,
       int32_t id) -> caf::result<broker_registration> {
      return make_error(ec::policy_violation,
                        "cannot remove node " + std::to_string(id)
                          + ": a single-node cluster has one broker (start "
                            "ferryd with --voters to run a cluster)");
    },
    [self](subscribe_atom, const caf::actor& listener) {
      if (!listener)
        return;
      auto& subs = self->state.subscribers;
      if (std::find(subs.begin(), subs.end(), listener) == subs.end()) {
        subs.push_back(listener);
        self->monitor(listener);
      }
      caf::unsafe_send_as(self, listener, update_atom_v,
                          all_topics(self->state));
    },
  };
}

} // namespace ferry
