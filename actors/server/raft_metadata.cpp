#include "actors/server/raft_metadata.hpp"

#include "actors/server/raft_node.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/topic_config.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <utility>

namespace ferry {

namespace {

constexpr uint8_t command_version = 1;
/// Version 1: next producer id, topics. Version 2 adds the brokers, 3 the
/// moves in progress, 4 the brokers being removed, 5 the users and ACLs, 6
/// stores the brokers with their Kafka listener (broker_registration as it
/// is now; 2-5 hold broker_registration_v1), 7 stores topic_config as it is
/// now (1-6 hold topic_config_v1), 8 stores the brokers with their peer
/// port (6 and 7 hold broker_registration_v2).
constexpr uint8_t snapshot_version = 8;
constexpr uint8_t result_ok = 0;
constexpr uint8_t result_error = 1;

/// Serializes `xs...` after the bytes already in `prefix`.
template <class... Ts>
std::string serialize(std::vector<char> buf, Ts&... xs) {
  caf::binary_serializer sink{nullptr, buf};
  if (auto err = sink(xs...))
    return {}; // cannot happen for these plain types
  return std::string{buf.begin(), buf.end()};
}

/// broker_registration as command kind `broker` and snapshots 2-5 store
/// it: without the Kafka listener.
struct broker_registration_v1 {
  int32_t id = -1;
  std::string host;
  uint16_t port = 0;
  uint16_t http_port = 0;
  uint16_t metrics_port = 0;
  bool fenced = false;
  int64_t epoch = 0;

  broker_registration upgrade() const {
    broker_registration r;
    r.id = id;
    r.host = host;
    r.port = port;
    r.http_port = http_port;
    r.metrics_port = metrics_port;
    r.fenced = fenced;
    r.epoch = epoch;
    return r;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        broker_registration_v1& x) {
  return f(caf::meta::type_name("ferry::broker_registration"), x.id, x.host,
           x.port, x.http_port, x.metrics_port, x.fenced, x.epoch);
}

/// broker_registration as command kind `broker_v2` and snapshots 6-7 store
/// it: with the Kafka listener, without the peer port.
struct broker_registration_v2 {
  broker_registration_v1 base;
  std::string kafka_host;
  uint16_t kafka_port = 0;

  broker_registration upgrade() const {
    auto r = base.upgrade();
    r.kafka_host = kafka_host;
    r.kafka_port = kafka_port;
    return r;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        broker_registration_v2& x) {
  return f(caf::meta::type_name("ferry::broker_registration"), x.base.id,
           x.base.host, x.base.port, x.base.http_port, x.base.metrics_port,
           x.base.fenced, x.base.epoch, x.kafka_host, x.kafka_port);
}

std::string command_head(metadata_command k) {
  return {static_cast<char>(command_version), static_cast<char>(k)};
}

template <class... Ts>
std::string encode_command(metadata_command k, Ts... xs) {
  auto head = command_head(k);
  return serialize(std::vector<char>{head.begin(), head.end()}, xs...);
}

template <class T>
std::string encode_ok(T x) {
  return serialize(std::vector<char>{static_cast<char>(result_ok)}, x);
}

std::string encode_error(const caf::error& err) {
  auto code = static_cast<uint8_t>(code_of(err));
  std::string context;
  if (code == 0) {
    code = static_cast<uint8_t>(ec::invalid_request);
    context = describe(err);
  } else if (err.context().match_elements<std::string>()) {
    context = err.context().get_as<std::string>(0);
  }
  return serialize(std::vector<char>{static_cast<char>(result_error)}, code,
                   context);
}

template <class T>
caf::expected<T> decode_result(std::string_view s) {
  if (s.empty())
    return make_error(ec::corrupt_segment, "empty metadata result");
  caf::binary_deserializer source{nullptr, s.data() + 1, s.size() - 1};
  if (static_cast<uint8_t>(s[0]) == result_error) {
    uint8_t code = 0;
    std::string context;
    if (auto err = source(code, context))
      return make_error(ec::corrupt_segment, "metadata result does not decode");
    return make_error(static_cast<ec>(code), std::move(context));
  }
  T x;
  if (auto err = source(x))
    return make_error(ec::corrupt_segment, "metadata result does not decode");
  return x;
}

caf::error unknown_topic(const std::string& name) {
  return make_error(ec::unknown_topic, "topic " + name + " does not exist");
}

} // namespace

std::string encode_create_topic(const std::string& name,
                                const topic_config& tc) {
  return encode_command(metadata_command::create_v2, name, tc);
}

std::string encode_delete_topic(const std::string& name) {
  return encode_command(metadata_command::remove, name);
}

std::string encode_alter_topic(const std::string& name,
                               const std::map<std::string, std::string>& ch) {
  return encode_command(metadata_command::alter, name, ch);
}

std::string encode_add_partitions(const std::string& name, int32_t n) {
  return encode_command(metadata_command::add_parts, name, n);
}

std::string encode_init_pid() {
  return command_head(metadata_command::init_pid);
}

caf::expected<topic_metadata> decode_topic_result(std::string_view result) {
  return decode_result<topic_metadata>(result);
}

caf::expected<producer_identity> decode_pid_result(std::string_view result) {
  return decode_result<producer_identity>(result);
}

std::string encode_broker(const broker_registration& reg) {
  return encode_command(metadata_command::broker_v3, reg);
}

std::string encode_isr_change(const isr_change& ch) {
  return encode_command(metadata_command::isr, ch);
}

std::string encode_reassign(const isr_change& ch) {
  return encode_command(metadata_command::reassign, ch);
}

std::string encode_remove_broker(int32_t id) {
  return encode_command(metadata_command::remove_broker, id);
}

std::string encode_upsert_user(const scram_credential& c) {
  return encode_command(metadata_command::upsert_user, c);
}

std::string encode_delete_user(const std::string& name) {
  return encode_command(metadata_command::delete_user, name);
}

std::string encode_add_acl(const acl_entry& x) {
  return encode_command(metadata_command::add_acl, x);
}

std::string encode_remove_acl(const acl_entry& x) {
  return encode_command(metadata_command::remove_acl, x);
}

caf::expected<user_info> decode_user_result(std::string_view result) {
  return decode_result<user_info>(result);
}

caf::expected<acl_entry> decode_acl_result(std::string_view result) {
  return decode_result<acl_entry>(result);
}

caf::expected<std::vector<acl_entry>>
decode_acls_result(std::string_view result) {
  return decode_result<std::vector<acl_entry>>(result);
}

caf::expected<broker_registration>
decode_broker_result(std::string_view result) {
  return decode_result<broker_registration>(result);
}

caf::expected<partition_assignment>
decode_assignment_result(std::string_view result) {
  return decode_result<partition_assignment>(result);
}

// -- metadata_state_machine ---------------------------------------------------

namespace {

class machine_adapter : public raft_state_machine {
public:
  explicit machine_adapter(std::shared_ptr<metadata_state_machine> m)
    : m_(std::move(m)) {
  }
  std::string apply(uint64_t index, std::string_view command) override {
    return m_->apply(index, command);
  }
  std::string snapshot() override { return m_->snapshot(); }
  caf::error restore(uint64_t index, std::string_view s) override {
    return m_->restore(index, s);
  }

private:
  std::shared_ptr<metadata_state_machine> m_;
};

} // namespace

metadata_state_machine::metadata_state_machine(std::vector<int32_t> voters,
                                               int16_t max_replication_factor)
  : voters_(std::move(voters)), max_rf_(max_replication_factor) {
  std::sort(voters_.begin(), voters_.end());
  // Brokers that are not voters may join later: the number of brokers that
  // can hold replicas is checked per create (check_replication_factor).
  max_rf_ = std::max<int16_t>(1, max_rf_);
}

std::shared_ptr<raft_state_machine>
metadata_state_machine::adapter(std::shared_ptr<metadata_state_machine> m) {
  return std::make_shared<machine_adapter>(std::move(m));
}

int16_t metadata_state_machine::max_replication_factor() const {
  return max_rf_;
}

bool metadata_state_machine::voter_locked(int32_t id) const {
  return std::find(voters_.begin(), voters_.end(), id) != voters_.end();
}

bool metadata_state_machine::member_locked(int32_t id) const {
  return voter_locked(id) || brokers_.count(id) > 0;
}

std::vector<int32_t> metadata_state_machine::placement_locked() const {
  // Voters count before they registered (they are configured members; a
  // fresh cluster creates topics while its voters are still registering);
  // other brokers once registered. Fenced and departing brokers never.
  std::set<int32_t> ids{voters_.begin(), voters_.end()};
  for (auto& [id, b] : brokers_)
    ids.insert(id);
  std::vector<int32_t> out;
  for (auto id : ids)
    if (!fenced_locked(id) && removing_.count(id) == 0)
      out.push_back(id);
  return out;
}

caf::error metadata_state_machine::check_rf_locked(int16_t rf) const {
  auto n = placement_locked().size();
  if (rf >= 1 && static_cast<size_t>(rf) > n)
    return make_error(ec::policy_violation,
                      "replication factor " + std::to_string(rf)
                        + " exceeds the " + std::to_string(n)
                        + " brokers that can hold replicas now (registered, "
                          "not fenced, not being removed)");
  return caf::none;
}

caf::error metadata_state_machine::check_replication_factor(int16_t rf) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return check_rf_locked(rf);
}

std::vector<int32_t> metadata_state_machine::placement() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return placement_locked();
}

std::vector<int32_t> metadata_state_machine::removing() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return {removing_.begin(), removing_.end()};
}

int32_t metadata_state_machine::replacement_locked(
  const std::vector<int32_t>& replicas) const {
  // Like placement, but for one seat: the broker holding the fewest
  // replicas (ties: the lowest id) among those not in the partition yet.
  std::map<int32_t, size_t> load;
  for (auto id : placement_locked())
    load[id] = 0;
  for (auto& [name, md] : topics_)
    for (auto& pa : md.partitions)
      for (auto id : pa.replicas)
        if (auto i = load.find(id); i != load.end())
          ++i->second;
  int32_t best = -1;
  size_t best_load = 0;
  for (auto& [id, n] : load) {
    if (std::find(replicas.begin(), replicas.end(), id) != replicas.end())
      continue;
    if (best < 0 || n < best_load) {
      best = id;
      best_load = n;
    }
  }
  return best;
}

void metadata_state_machine::drive_removals_locked(bool& changed) {
  for (auto it = removing_.begin(); it != removing_.end();) {
    auto id = *it;
    bool left = false; // still named somewhere
    for (auto& [name, md] : topics_) {
      for (auto& pa : md.partitions) {
        auto key = std::make_pair(name, pa.partition.value);
        auto m = moving_.find(key);
        bool in_replicas = std::find(pa.replicas.begin(), pa.replicas.end(),
                                     id)
                           != pa.replicas.end();
        if (m != moving_.end()) {
          // A move in progress: wait for it (a target naming the broker is
          // moved again once it completed).
          if (in_replicas)
            left = true;
          continue;
        }
        if (!in_replicas)
          continue;
        left = true;
        auto seat = replacement_locked(pa.replicas);
        if (seat < 0)
          continue; // no broker to take the seat now: retried on changes
        std::vector<int32_t> target = pa.replicas;
        std::replace(target.begin(), target.end(), id, seat);
        pa.replicas.push_back(seat);
        moving_[key] = target;
        log::info("metadata: removing broker {}: {}/{} moves to broker {}",
                  id, name, pa.partition.value, seat);
        changed = true;
      }
    }
    if (left) {
      ++it;
      continue;
    }
    brokers_.erase(id);
    log::info("metadata: broker {} holds no replicas any more and left the "
              "cluster",
              id);
    it = removing_.erase(it);
    changed = true;
  }
}

caf::expected<partition_assignment*>
metadata_state_machine::partition_locked(const std::string& topic,
                                         partition_id p) {
  auto i = topics_.find(topic);
  if (i == topics_.end())
    return unknown_topic(topic);
  auto& parts = i->second.partitions;
  if (p.value < 0 || static_cast<size_t>(p.value) >= parts.size())
    return make_error(ec::unknown_partition, "topic " + topic
                                               + " has no partition "
                                               + std::to_string(p.value));
  return &parts[static_cast<size_t>(p.value)];
}

int32_t metadata_state_machine::first_live_locked(
  const std::vector<int32_t>& isr, int32_t except) const {
  for (auto id : isr)
    if (id != except && !fenced_locked(id))
      return id;
  return -1;
}

bool metadata_state_machine::fenced_locked(int32_t id) const {
  auto i = brokers_.find(id);
  return i != brokers_.end() && i->second.fenced;
}

partition_assignment metadata_state_machine::assignment(int32_t p,
                                                        int16_t rf) const {
  partition_assignment pa;
  pa.partition = partition_id{p};
  pa.epoch = leader_epoch{0};
  auto ids = placement_locked();
  auto n = ids.size();
  for (int16_t k = 0; k < rf && static_cast<size_t>(k) < n; ++k)
    pa.replicas.push_back(
      ids[(static_cast<size_t>(p) + static_cast<size_t>(k)) % n]);
  // Placement skips fenced brokers; this only guards the ISR.
  for (auto id : pa.replicas)
    if (!fenced_locked(id))
      pa.isr.push_back(id);
  if (pa.isr.empty()) {
    pa.leader = -1;
    pa.isr = pa.replicas; // nobody in sync yet: the first to return leads
  } else {
    pa.leader = pa.isr.front();
  }
  return pa;
}

void metadata_state_machine::fence_locked(int32_t id) {
  for (auto& [name, md] : topics_) {
    for (auto& pa : md.partitions) {
      auto in_isr = std::find(pa.isr.begin(), pa.isr.end(), id);
      if (in_isr != pa.isr.end() && pa.isr.size() > 1)
        pa.isr.erase(in_isr);
      if (pa.leader != id)
        continue;
      // Only an ISR member may lead (no unclean election): one that is not
      // fenced itself.
      auto next = first_live_locked(pa.isr, id);
      pa.leader = next;
      pa.epoch = leader_epoch{pa.epoch.value + 1};
      log::info("metadata: {}/{} leader {} fenced, new leader {} epoch {}",
                name, pa.partition.value, id, next, pa.epoch.value);
    }
  }
}

void metadata_state_machine::unfence_locked(int32_t id) {
  for (auto& [name, md] : topics_) {
    for (auto& pa : md.partitions) {
      if (pa.leader != -1
          || std::find(pa.isr.begin(), pa.isr.end(), id) == pa.isr.end())
        continue;
      pa.leader = id;
      pa.epoch = leader_epoch{pa.epoch.value + 1};
      log::info("metadata: {}/{} back online: leader {} epoch {}", name,
                pa.partition.value, id, pa.epoch.value);
    }
  }
}

std::string metadata_state_machine::apply(uint64_t, std::string_view command) {
  std::lock_guard<std::mutex> guard{mtx_};
  bool changed = false;
  auto res = apply_command(command, changed);
  // Any change may let a removal go on (a move completed, a broker that
  // can take a seat registered) or finish.
  if (res && !removing_.empty())
    drive_removals_locked(changed);
  if (changed)
    notify_locked();
  auto kind = command.size() >= 2 ? static_cast<metadata_command>(command[1])
                                  : metadata_command::create;
  if (res
      && (kind == metadata_command::upsert_user
          || kind == metadata_command::delete_user
          || kind == metadata_command::add_acl
          || kind == metadata_command::remove_acl))
    publish_security_locked();
  if (!res)
    return encode_error(res.error());
  return std::move(*res);
}

caf::expected<std::string>
metadata_state_machine::apply_command(std::string_view command,
                                      bool& changed) {
  auto topic_changed = [&](const topic_metadata& md) {
    changed = true;
    return encode_ok(md);
  };
  if (command.size() < 2 || static_cast<uint8_t>(command[0]) != command_version)
    return make_error(ec::invalid_request,
                      "metadata command has an unknown version");
  auto kind = static_cast<metadata_command>(command[1]);
  caf::binary_deserializer source{nullptr, command.data() + 2,
                                  command.size() - 2};
  auto bad = [] {
    return make_error(ec::invalid_request, "metadata command does not decode");
  };
  // isr and reassign: an isr_change naming an existing partition.
  auto read_change =
    [&](isr_change& ch) -> caf::expected<partition_assignment*> {
    if (source(ch) || source.remaining() != 0)
      return bad();
    return partition_locked(ch.topic, ch.partition);
  };
  std::string name;
  switch (kind) {
    case metadata_command::create:
    case metadata_command::create_v2: {
      topic_config tc;
      if (kind == metadata_command::create) {
        topic_config_v1 old;
        if (source(name, old) || source.remaining() != 0)
          return bad();
        tc = old.cfg;
      } else if (source(name, tc) || source.remaining() != 0) {
        return bad();
      }
      if (auto err = validate_topic_name(name))
        return err;
      if (auto err = validate_topic_config(tc, max_rf_))
        return err;
      if (auto err = check_rf_locked(tc.replication_factor))
        return err;
      if (topics_.count(name) > 0)
        return make_error(ec::topic_exists,
                          "topic " + name + " already exists");
      topic_metadata md;
      md.name = name;
      md.config = with_defaults(tc);
      for (int32_t p = 0; p < tc.partitions; ++p)
        md.partitions.push_back(assignment(p, tc.replication_factor));
      topics_.emplace(name, md);
      log::info("metadata: created topic {} with {} partitions", name,
                tc.partitions);
      return topic_changed(md);
    }
    case metadata_command::remove: {
      if (source(name) || source.remaining() != 0)
        return bad();
      auto i = topics_.find(name);
      if (i == topics_.end())
        return unknown_topic(name);
      auto md = std::move(i->second);
      topics_.erase(i);
      log::info("metadata: deleted topic {}", name);
      return topic_changed(md);
    }
    case metadata_command::alter: {
      std::map<std::string, std::string> changes;
      if (source(name, changes) || source.remaining() != 0)
        return bad();
      auto i = topics_.find(name);
      if (i == topics_.end())
        return unknown_topic(name);
      auto tc = apply_topic_config(i->second.config, changes, max_rf_);
      if (!tc)
        return std::move(tc.error());
      i->second.config = *tc;
      return topic_changed(i->second);
    }
    case metadata_command::add_parts: {
      int32_t n = 0;
      if (source(name, n) || source.remaining() != 0)
        return bad();
      auto i = topics_.find(name);
      if (i == topics_.end())
        return unknown_topic(name);
      auto have = i->second.config.partitions;
      if (n <= have)
        return make_error(ec::invalid_request,
                          "topic " + name + " has " + std::to_string(have)
                            + " partitions; it can only grow, not to "
                            + std::to_string(n));
      if (auto err = validate_partition_count(n))
        return err;
      if (auto err = check_rf_locked(i->second.config.replication_factor))
        return err;
      auto& md = i->second;
      md.config.partitions = n;
      for (int32_t p = have; p < n; ++p)
        md.partitions.push_back(assignment(p, md.config.replication_factor));
      return topic_changed(md);
    }
    case metadata_command::init_pid: {
      if (command.size() != 2)
        return bad();
      producer_identity pid;
      pid.id = producer_id{next_producer_id_++};
      pid.epoch = 0;
      return encode_ok(pid);
    }
    case metadata_command::broker:
    case metadata_command::broker_v2:
    case metadata_command::broker_v3: {
      broker_registration reg;
      if (kind == metadata_command::broker) {
        broker_registration_v1 old;
        if (source(old) || source.remaining() != 0)
          return bad();
        reg = old.upgrade();
      } else if (kind == metadata_command::broker_v2) {
        broker_registration_v2 old;
        if (source(old) || source.remaining() != 0)
          return bad();
        reg = old.upgrade();
      } else if (source(reg) || source.remaining() != 0) {
        return bad();
      }
      if (reg.id < 0)
        return make_error(ec::invalid_request,
                          "broker id " + std::to_string(reg.id)
                            + " is negative");
      // Voters are members from the start; any other node becomes one by
      // registering (a broker-only node). Fencing names members only.
      if (reg.fenced && !member_locked(reg.id))
        return make_error(ec::invalid_request,
                          "broker " + std::to_string(reg.id)
                            + " is not a member of this cluster");
      auto& b = brokers_[reg.id];
      if (reg.fenced) {
        if (b.id < 0)
          b.id = reg.id;
        if (!b.fenced) {
          b.fenced = true;
          log::info("metadata: broker {} fenced", reg.id);
          fence_locked(reg.id);
          changed = true;
        }
        return encode_ok(b);
      }
      auto epoch = b.epoch + 1;
      bool was_fenced = b.fenced;
      b = reg;
      b.epoch = epoch;
      log::info("metadata: broker {} registered at {}:{} (epoch {})", reg.id,
                reg.host, reg.port, epoch);
      if (was_fenced) {
        unfence_locked(reg.id);
        changed = true;
      }
      return encode_ok(b);
    }
    case metadata_command::isr: {
      isr_change ch;
      auto found = read_change(ch);
      if (!found)
        return std::move(found.error());
      auto& pa = **found;
      auto where = ch.topic + "/" + std::to_string(ch.partition.value);
      if (pa.leader != ch.leader)
        return make_error(ec::not_leader,
                          "broker " + std::to_string(ch.leader)
                            + " does not lead " + where + " (leader="
                            + std::to_string(pa.leader) + ")");
      if (pa.epoch != ch.epoch)
        return make_error(ec::fenced_leader_epoch,
                          "ISR change for " + where + " in leader epoch "
                            + std::to_string(ch.epoch.value)
                            + ", the current one is "
                            + std::to_string(pa.epoch.value));
      auto sorted = ch.isr;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()
          || std::find(ch.isr.begin(), ch.isr.end(), ch.leader) == ch.isr.end())
        return make_error(ec::invalid_request,
                          "an ISR of " + where
                            + " must name the leader once and no one twice");
      for (auto id : ch.isr) {
        if (std::find(pa.replicas.begin(), pa.replicas.end(), id)
            == pa.replicas.end())
          return make_error(ec::invalid_request,
                            "broker " + std::to_string(id)
                              + " is not a replica of " + where);
        if (id != ch.leader && fenced_locked(id)
            && std::find(pa.isr.begin(), pa.isr.end(), id) == pa.isr.end())
          return make_error(ec::invalid_request,
                            "broker " + std::to_string(id)
                              + " is fenced and cannot join the ISR of "
                              + where);
      }
      if (pa.isr != ch.isr) {
        log::info("metadata: ISR of {} is now {} members (was {})", where,
                  ch.isr.size(), pa.isr.size());
        pa.isr = ch.isr;
        changed = true;
      }
      return encode_ok(pa);
    }
    case metadata_command::reassign: {
      isr_change ch;
      auto found = read_change(ch);
      if (!found)
        return std::move(found.error());
      auto& pa = **found;
      auto where = ch.topic + "/" + std::to_string(ch.partition.value);
      auto key = std::make_pair(ch.topic, ch.partition.value);
      auto has = [](const std::vector<int32_t>& xs, int32_t x) {
        return std::find(xs.begin(), xs.end(), x) != xs.end();
      };
      if (ch.isr.empty()) {
        // Completion (the controller's call).
        auto m = moving_.find(key);
        if (m == moving_.end())
          return make_error(ec::invalid_request,
                            "no replica move of " + where + " in progress");
        const auto& target = m->second;
        for (auto id : target)
          if (!has(pa.isr, id))
            return make_error(ec::invalid_request,
                              "replica " + std::to_string(id) + " of " + where
                                + " has not caught up yet");
        std::vector<int32_t> isr;
        for (auto id : pa.isr)
          if (has(target, id))
            isr.push_back(id);
        pa.replicas = target;
        pa.isr = isr;
        if (!has(target, pa.leader)) {
          pa.leader = first_live_locked(isr, -1);
          pa.epoch = leader_epoch{pa.epoch.value + 1};
        }
        moving_.erase(m);
        log::info("metadata: replicas of {} moved; leader {} epoch {}", where,
                  pa.leader, pa.epoch.value);
        changed = true;
        return encode_ok(pa);
      }
      auto sorted = ch.isr;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        return make_error(ec::invalid_request,
                          "the new replicas of " + where
                            + " name a broker twice");
      for (auto id : ch.isr) {
        if (!member_locked(id))
          return make_error(ec::invalid_request,
                            "broker " + std::to_string(id)
                              + " is not a member of this cluster");
        if (removing_.count(id) > 0)
          return make_error(ec::invalid_request,
                            "broker " + std::to_string(id)
                              + " is being removed from the cluster");
      }
      if (moving_.count(key) > 0)
        return make_error(ec::invalid_request,
                          "a replica move of " + where + " is in progress");
      if (ch.isr == pa.replicas)
        return encode_ok(pa);
      for (auto id : ch.isr)
        if (!has(pa.replicas, id))
          pa.replicas.push_back(id);
      moving_[key] = ch.isr;
      log::info("metadata: moving the replicas of {} to {} brokers", where,
                ch.isr.size());
      changed = true;
      return encode_ok(pa);
    }
    case metadata_command::upsert_user: {
      scram_credential c;
      if (source(c) || source.remaining() != 0)
        return bad();
      if (auto err = validate_credential(c))
        return err;
      bool known = users_.count(c.user) > 0;
      user_info info{c.user, c.mechanism, c.iterations};
      log::info("metadata: {} user {}", known ? "new credential for" : "new",
                c.user);
      users_[c.user] = std::move(c);
      return encode_ok(info);
    }
    case metadata_command::delete_user: {
      std::string name;
      if (source(name) || source.remaining() != 0)
        return bad();
      auto i = users_.find(name);
      if (i == users_.end())
        return make_error(ec::unknown_user, "user " + name + " does not exist");
      user_info info{i->second.user, i->second.mechanism,
                     i->second.iterations};
      users_.erase(i);
      log::info("metadata: user {} deleted", name);
      return encode_ok(info);
    }
    case metadata_command::add_acl: {
      acl_entry x;
      if (source(x) || source.remaining() != 0)
        return bad();
      if (auto err = normalize_acl(x))
        return err;
      if (std::find(acls_.begin(), acls_.end(), x) == acls_.end())
        acls_.push_back(x);
      return encode_ok(x);
    }
    case metadata_command::remove_acl: {
      acl_entry x;
      if (source(x) || source.remaining() != 0)
        return bad();
      if (auto err = normalize_acl(x))
        return err;
      std::vector<acl_entry> removed;
      for (auto i = acls_.begin(); i != acls_.end();) {
        if (*i == x) {
          removed.push_back(*i);
          i = acls_.erase(i);
        } else {
          ++i;
        }
      }
      return encode_ok(removed);
    }
    case metadata_command::remove_broker: {
      int32_t id = -1;
      if (source(id) || source.remaining() != 0)
        return bad();
      auto who = "node " + std::to_string(id);
      if (voter_locked(id))
        return make_error(ec::invalid_request,
                          who + " is a Raft voter: the voters are fixed in "
                                "this version (--voters) and cannot be "
                                "removed; only broker-only nodes can");
      auto b = brokers_.find(id);
      if (b == brokers_.end())
        return make_error(ec::invalid_request,
                          who + " is not a registered broker of this cluster");
      if (removing_.count(id) > 0)
        return encode_ok(b->second); // already leaving
      // The brokers left must be able to hold every partition it has a
      // replica of.
      auto left = placement_locked();
      left.erase(std::remove(left.begin(), left.end(), id), left.end());
      for (auto& [name, md] : topics_)
        for (auto& pa : md.partitions) {
          bool named = std::find(pa.replicas.begin(), pa.replicas.end(), id)
                       != pa.replicas.end();
          auto m = moving_.find(std::make_pair(name, pa.partition.value));
          if (m != moving_.end())
            named = named
                    || std::find(m->second.begin(), m->second.end(), id)
                         != m->second.end();
          if (named
              && left.size()
                   < static_cast<size_t>(md.config.replication_factor))
            return make_error(
              ec::policy_violation,
              "removing " + who + " would leave "
                + std::to_string(left.size())
                + " brokers that can hold replicas, fewer than the "
                  "replication factor "
                + std::to_string(md.config.replication_factor) + " of "
                + name + "/" + std::to_string(pa.partition.value));
        }
      removing_.insert(id);
      auto reg = b->second;
      log::info("metadata: removing broker {} from the cluster", id);
      changed = true;
      // drive_removals_locked (after this command) starts its moves, or
      // unregisters it at once when it holds nothing.
      return encode_ok(reg);
    }
  }
  return make_error(ec::invalid_request, "unknown metadata command kind "
                                           + std::to_string(command[1]));
}

std::string encode_metadata_snapshot(int64_t next_producer_id,
                                     std::vector<topic_metadata> topics) {
  std::vector<broker_registration> brokers;
  std::vector<isr_change> moves;
  std::vector<int32_t> removing;
  std::vector<scram_credential> users;
  std::vector<acl_entry> acls;
  return serialize(std::vector<char>{static_cast<char>(snapshot_version)},
                   next_producer_id, topics, brokers, moves, removing, users,
                   acls);
}

std::string metadata_state_machine::snapshot() {
  std::lock_guard<std::mutex> guard{mtx_};
  auto list = topics_locked();
  auto next = next_producer_id_;
  std::vector<broker_registration> brokers;
  for (auto& [id, b] : brokers_)
    brokers.push_back(b);
  auto moves = reassignments_locked();
  std::vector<int32_t> removing{removing_.begin(), removing_.end()};
  std::vector<scram_credential> users;
  for (auto& [name, c] : users_)
    users.push_back(c);
  auto acls = acls_;
  return serialize(std::vector<char>{static_cast<char>(snapshot_version)},
                   next, list, brokers, moves, removing, users, acls);
}

caf::error metadata_state_machine::restore(uint64_t index,
                                           std::string_view s) {
  if (s.empty() || static_cast<uint8_t>(s[0]) < 1
      || static_cast<uint8_t>(s[0]) > snapshot_version)
    return make_error(ec::corrupt_segment,
                      "metadata snapshot has an unknown version");
  int64_t next = 0;
  std::vector<topic_metadata> list;
  std::vector<topic_metadata_v1> old_list;
  std::vector<broker_registration> brokers;
  std::vector<broker_registration_v1> old_brokers;
  std::vector<broker_registration_v2> v2_brokers;
  std::vector<isr_change> moves;
  std::vector<int32_t> removing;
  std::vector<scram_credential> users;
  std::vector<acl_entry> acls;
  caf::binary_deserializer source{nullptr, s.data() + 1, s.size() - 1};
  auto version = static_cast<uint8_t>(s[0]);
  bool bad = version == 1   ? bool{source(next, old_list)}
             : version == 2 ? bool{source(next, old_list, old_brokers)}
             : version == 3 ? bool{source(next, old_list, old_brokers, moves)}
             : version == 4
               ? bool{source(next, old_list, old_brokers, moves, removing)}
             : version == 5
               ? bool{source(next, old_list, old_brokers, moves, removing,
                             users, acls)}
             : version == 6
               ? bool{source(next, old_list, v2_brokers, moves, removing, users,
                             acls)}
             : version == 7
               ? bool{source(next, list, v2_brokers, moves, removing, users, acls)}
               : bool{source(next, list, brokers, moves, removing, users, acls)};
  for (auto& b : old_brokers)
    brokers.push_back(b.upgrade());
  for (auto& b : v2_brokers)
    brokers.push_back(b.upgrade());
  for (auto& md : old_list)
    list.push_back(std::move(md).upgrade());
  if (bad || source.remaining() != 0)
    return make_error(ec::corrupt_segment,
                      "metadata snapshot at " + std::to_string(index)
                        + " does not decode");
  std::lock_guard<std::mutex> guard{mtx_};
  topics_.clear();
  for (auto& md : list)
    topics_.emplace(md.name, std::move(md));
  brokers_.clear();
  for (auto& b : brokers)
    brokers_.emplace(b.id, b);
  moving_.clear();
  for (auto& m : moves)
    moving_[std::make_pair(m.topic, m.partition.value)] = m.isr;
  removing_ = {removing.begin(), removing.end()};
  users_.clear();
  for (auto& c : users)
    users_.emplace(c.user, std::move(c));
  acls_ = std::move(acls);
  publish_security_locked();
  next_producer_id_ = next;
  log::info("metadata: restored {} topics from the snapshot at {}",
            topics_.size(), index);
  notify_locked();
  return caf::none;
}

std::vector<topic_metadata> metadata_state_machine::topics_locked() const {
  std::vector<topic_metadata> out;
  out.reserve(topics_.size());
  for (auto& [name, md] : topics_)
    out.push_back(md);
  return out;
}

std::vector<isr_change> metadata_state_machine::reassignments_locked() const {
  std::vector<isr_change> out;
  for (auto& [key, target] : moving_) {
    isr_change ch;
    ch.topic = key.first;
    ch.partition = partition_id{key.second};
    ch.isr = target;
    out.push_back(std::move(ch));
  }
  return out;
}

std::vector<user_info> metadata_state_machine::users() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<user_info> out;
  for (auto& [name, c] : users_)
    out.push_back(user_info{c.user, c.mechanism, c.iterations});
  return out;
}

std::vector<acl_entry> metadata_state_machine::acls() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return acls_;
}

void metadata_state_machine::set_security_registry(
  std::shared_ptr<security_registry> r) {
  std::lock_guard<std::mutex> guard{mtx_};
  registry_ = std::move(r);
  publish_security_locked();
}

void metadata_state_machine::publish_security_locked() {
  if (registry_)
    registry_->set(users_, acls_);
}

std::vector<isr_change> metadata_state_machine::reassignments() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return reassignments_locked();
}

std::vector<broker_registration> metadata_state_machine::brokers() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<broker_registration> out;
  for (auto& [id, b] : brokers_)
    out.push_back(b);
  return out;
}

std::vector<topic_metadata> metadata_state_machine::topics() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return topics_locked();
}

caf::expected<topic_metadata>
metadata_state_machine::topic(const std::string& name) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = topics_.find(name);
  if (i == topics_.end())
    return unknown_topic(name);
  return i->second;
}

void metadata_state_machine::notify_locked() {
  if (subscribers_.empty())
    return;
  auto list = topics_locked();
  for (auto& sub : subscribers_)
    send_locked(sub, list);
}

void metadata_state_machine::send_locked(const caf::actor& to,
                                         std::vector<topic_metadata> list) {
  if (!to)
    return;
  auto from = caf::actor_cast<caf::strong_actor_ptr>(sender_);
  caf::actor_cast<caf::abstract_actor*>(to)->enqueue(
    std::move(from), caf::make_message_id(),
    caf::make_message(update_atom_v, std::move(list)), nullptr);
}

void metadata_state_machine::set_sender(caf::actor_addr sender) {
  std::lock_guard<std::mutex> guard{mtx_};
  sender_ = std::move(sender);
}

void metadata_state_machine::add_subscriber(caf::actor listener) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (std::find(subscribers_.begin(), subscribers_.end(), listener)
      == subscribers_.end())
    subscribers_.push_back(listener);
  send_locked(listener, topics_locked());
}

void metadata_state_machine::remove_subscriber(
  const caf::actor_addr& listener) {
  std::lock_guard<std::mutex> guard{mtx_};
  subscribers_.erase(std::remove_if(subscribers_.begin(), subscribers_.end(),
                                    [&](const caf::actor& a) {
                                      return a.address() == listener;
                                    }),
                     subscribers_.end());
}

// -- raft_metadata ------------------------------------------------------------

namespace {

using self_ptr = metadata_actor::stateful_pointer<raft_metadata_state>;

caf::error map_request_error(caf::error err) {
  if (err == caf::sec::request_timeout)
    return make_error(ec::request_timed_out,
                      "the metadata change did not commit in time (no quorum "
                      "reachable?); it may still commit later");
  return err;
}

/// Proposes `cmd`; the response decodes the result with `decode`.
template <class T, class Decode>
caf::result<T> propose(self_ptr self, std::string cmd, Decode decode) {
  auto rp = self->make_response_promise<T>();
  self
    ->request(self->state.cfg.raft, self->state.cfg.request_timeout,
              propose_atom_v, std::move(cmd))
    .then(
      [rp, decode](const raft_applied& r) mutable {
        auto x = decode(r.result);
        if (x)
          rp.deliver(std::move(*x));
        else
          rp.deliver(std::move(x.error()));
      },
      [rp](caf::error& err) mutable {
        rp.deliver(map_request_error(std::move(err)));
      });
  return rp;
}

caf::result<topic_metadata> propose_topic(self_ptr self, std::string cmd) {
  return propose<topic_metadata>(self, std::move(cmd), decode_topic_result);
}

} // namespace

metadata_actor::behavior_type
raft_metadata(metadata_actor::stateful_pointer<raft_metadata_state> self,
              raft_metadata_config cfg) {
  self->state.cfg = std::move(cfg);
  if (!self->state.cfg.raft || !self->state.cfg.machine) {
    log::error("raft metadata: raft node and state machine needed");
    self->quit(make_error(ec::invalid_argument,
                          "raft metadata: raft node and machine needed"));
  }
  if (self->state.cfg.machine)
    self->state.cfg.machine->set_sender(self->address());
  self->set_down_handler([self](const caf::down_msg& dm) {
    if (self->state.cfg.machine)
      self->state.cfg.machine->remove_subscriber(dm.source);
  });
  return {
    [self](create_atom, topic_atom, const std::string& name,
           const topic_config& tc) -> caf::result<topic_metadata> {
      // The same checks run again when the command applies; checking here
      // keeps bad input out of the log.
      if (auto err = validate_topic_name(name))
        return err;
      if (auto err = validate_topic_config(
            tc, self->state.cfg.machine->max_replication_factor()))
        return err;
      if (auto err = self->state.cfg.machine->check_replication_factor(
            tc.replication_factor))
        return err;
      return propose_topic(self, encode_create_topic(name, tc));
    },
    [self](delete_atom, topic_atom,
           const std::string& name) -> caf::result<topic_metadata> {
      return propose_topic(self, encode_delete_topic(name));
    },
    [self](list_atom, topic_atom) -> caf::result<std::vector<topic_metadata>> {
      return self->state.cfg.machine->topics();
    },
    [self](describe_atom, topic_atom,
           const std::string& name) -> caf::result<topic_metadata> {
      auto md = self->state.cfg.machine->topic(name);
      if (!md)
        return std::move(md.error());
      return std::move(*md);
    },
    [self](alter_atom, topic_atom, const std::string& name,
           const std::map<std::string, std::string>& changes)
      -> caf::result<topic_metadata> {
      return propose_topic(self, encode_alter_topic(name, changes));
    },
    [self](add_parts_atom, const std::string& name,
           int32_t n) -> caf::result<topic_metadata> {
      return propose_topic(self, encode_add_partitions(name, n));
    },
    [self](init_pid_atom) -> caf::result<producer_identity> {
      return propose<producer_identity>(self, encode_init_pid(),
                                        decode_pid_result);
    },
    [self](update_atom, broker_atom,
           const broker_registration& reg) -> caf::result<broker_registration> {
      return propose<broker_registration>(self, encode_broker(reg),
                                          decode_broker_result);
    },
    [self](list_atom,
           broker_atom) -> caf::result<std::vector<broker_registration>> {
      return self->state.cfg.machine->brokers();
    },
    [self](alter_atom, isr_atom,
           const isr_change& ch) -> caf::result<partition_assignment> {
      return propose<partition_assignment>(self, encode_isr_change(ch),
                                           decode_assignment_result);
    },
    [self](assign_atom,
           const isr_change& ch) -> caf::result<partition_assignment> {
      return propose<partition_assignment>(self, encode_reassign(ch),
                                           decode_assignment_result);
    },
    [self](delete_atom, broker_atom,
           int32_t id) -> caf::result<broker_registration> {
      return propose<broker_registration>(self, encode_remove_broker(id),
                                          decode_broker_result);
    },
    [self](update_atom, user_atom,
           const scram_credential& c) -> caf::result<user_info> {
      if (auto err = validate_credential(c))
        return err;
      return propose<user_info>(self, encode_upsert_user(c),
                                decode_user_result);
    },
    [self](delete_atom, user_atom,
           const std::string& name) -> caf::result<user_info> {
      return propose<user_info>(self, encode_delete_user(name),
                                decode_user_result);
    },
    [self](list_atom, user_atom) -> caf::result<std::vector<user_info>> {
      return self->state.cfg.machine->users();
    },
    [self](create_atom, acl_atom, acl_entry x) -> caf::result<acl_entry> {
      if (auto err = normalize_acl(x))
        return err;
      return propose<acl_entry>(self, encode_add_acl(x), decode_acl_result);
    },
    [self](delete_atom, acl_atom,
           acl_entry x) -> caf::result<std::vector<acl_entry>> {
      if (auto err = normalize_acl(x))
        return err;
      return propose<std::vector<acl_entry>>(self, encode_remove_acl(x),
                                             decode_acls_result);
    },
    [self](list_atom, acl_atom) -> caf::result<std::vector<acl_entry>> {
      return self->state.cfg.machine->acls();
    },
    [self](subscribe_atom, const caf::actor& listener) {
      if (!listener)
        return;
      self->monitor(listener);
      self->state.cfg.machine->add_subscriber(listener);
    },
  };
}

} // namespace ferry
