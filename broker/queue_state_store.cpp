#include "broker/queue_state_store.hpp"

#include "broker/metadata_store.hpp"
#include "broker/key_codec.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace ferry {

namespace queue_state_format {

using namespace key_codec;

caf::expected<std::string> encode_partition_prefix(std::string_view group,
                                                   std::string_view topic,
                                                   partition_id p) {
  if (!valid_name(group))
    return make_error(ec::invalid_argument,
                      "queue state key: group must be non-empty without NUL");
  if (!valid_name(topic))
    return make_error(ec::invalid_argument,
                      "queue state key: topic must be non-empty without NUL");
  if (p.value < 0)
    return make_error(ec::invalid_argument,
                      "queue state key: negative partition "
                        + std::to_string(p.value));
  auto key = group_prefix(group);
  key.append(topic);
  key.push_back('\0');
  put_be(key, static_cast<uint32_t>(p.value), 4);
  return key;
}

std::string group_prefix(std::string_view group) {
  std::string out{group};
  out.push_back('\0');
  return out;
}

std::string position_key(std::string_view partition_prefix) {
  std::string out{partition_prefix};
  out.push_back(static_cast<char>(position_kind));
  return out;
}

std::string record_key(std::string_view partition_prefix, offset off) {
  std::string out{partition_prefix};
  out.push_back(static_cast<char>(record_kind));
  put_be(out, static_cast<uint64_t>(off.value), 8);
  return out;
}

std::string producer_key(std::string_view group, std::string_view topic,
                         partition_id p) {
  auto out = group_prefix(group);
  out.append(topic);
  out.push_back('\0');
  put_be(out, static_cast<uint32_t>(p.value), 4);
  return out;
}

caf::expected<decoded_key> decode_key(std::string_view key) {
  auto g_end = key.find('\0');
  if (g_end == std::string_view::npos || g_end == 0)
    return corrupt("queue state key: malformed group");
  auto t_end = key.find('\0', g_end + 1);
  if (t_end == std::string_view::npos || t_end == g_end + 1)
    return corrupt("queue state key: malformed topic");
  auto rest = key.size() - t_end - 1;
  if (rest != 4 + 1 && rest != 4 + 1 + 8)
    return corrupt("queue state key: " + std::to_string(rest)
                   + " bytes after the topic, expected 5 or 13");
  decoded_key out;
  out.group.assign(key.substr(0, g_end));
  out.topic.assign(key.substr(g_end + 1, t_end - g_end - 1));
  auto p = static_cast<int32_t>(get_be(key, t_end + 1, 4));
  if (p < 0)
    return corrupt("queue state key: negative partition");
  out.partition = partition_id{p};
  auto kind = static_cast<uint8_t>(key[t_end + 5]);
  if (kind == position_kind && rest == 5) {
    out.position = true;
    return out;
  }
  if (kind == record_kind && rest == 13) {
    auto off = static_cast<int64_t>(get_be(key, t_end + 6, 8));
    if (off < 0)
      return corrupt("queue state key: negative offset");
    out.off = offset{off};
    return out;
  }
  return corrupt("queue state key: kind " + std::to_string(kind)
                 + " with " + std::to_string(rest) + " trailing bytes");
}

std::string encode_position_value(offset committed) {
  std::string out;
  out.reserve(position_value_bytes);
  out.push_back(static_cast<char>(position_value_version));
  put_be(out, static_cast<uint64_t>(committed.value), 8);
  return out;
}

caf::expected<offset> decode_position_value(std::string_view value) {
  if (value.empty())
    return corrupt("queue position: empty value");
  if (static_cast<uint8_t>(value[0]) != position_value_version)
    return corrupt("queue position: unknown version "
                   + std::to_string(static_cast<uint8_t>(value[0])));
  if (value.size() != position_value_bytes)
    return corrupt("queue position: " + std::to_string(value.size())
                   + " bytes, expected "
                   + std::to_string(position_value_bytes));
  auto off = static_cast<int64_t>(get_be(value, 1, 8));
  if (off < 0)
    return corrupt("queue position: negative offset " + std::to_string(off));
  return offset{off};
}

std::string encode_record_value(const queue_record& r) {
  auto error = std::string_view{r.last_error}.substr(0, max_error_bytes);
  bool leased = r.phase == queue_record_phase::leased;
  std::string out;
  out.reserve(record_value_header_bytes + error.size()
              + (leased ? lease_tail_bytes + r.member.size() : 0));
  out.push_back(static_cast<char>(leased ? lease_value_version
                                         : record_value_version));
  out.push_back(static_cast<char>(r.phase));
  put_be(out, static_cast<uint32_t>(r.attempts), 4);
  put_be(out, static_cast<uint64_t>(r.first_failure), 8);
  put_be(out, static_cast<uint64_t>(r.last_failure), 8);
  put_be(out, static_cast<uint64_t>(r.available_at), 8);
  put_be(out, static_cast<uint16_t>(error.size()), 2);
  out.append(error);
  if (leased) {
    auto member = std::string_view{r.member}.substr(0, 0xffff);
    put_be(out, static_cast<uint16_t>(member.size()), 2);
    out.append(member);
    put_be(out, r.lease_id, 8);
    put_be(out, static_cast<uint64_t>(r.deadline), 8);
  }
  return out;
}

caf::error decode_record_value(std::string_view value, queue_record& out) {
  if (value.empty())
    return corrupt("queue record: empty value");
  auto version = static_cast<uint8_t>(value[0]);
  if (version != record_value_version && version != lease_value_version)
    return corrupt("queue record: unknown version "
                   + std::to_string(version));
  if (value.size() < record_value_header_bytes)
    return corrupt("queue record: " + std::to_string(value.size())
                   + " bytes is shorter than the header ("
                   + std::to_string(record_value_header_bytes) + ")");
  auto phase = static_cast<uint8_t>(value[1]);
  if (phase < static_cast<uint8_t>(queue_record_phase::retry)
      || phase > static_cast<uint8_t>(queue_record_phase::leased))
    return corrupt("queue record: unknown phase " + std::to_string(phase));
  bool leased = phase == static_cast<uint8_t>(queue_record_phase::leased);
  if (leased != (version == lease_value_version))
    return corrupt("queue record: phase " + std::to_string(phase)
                   + " in a version " + std::to_string(version) + " value");
  auto attempts = static_cast<int32_t>(get_be(value, 2, 4));
  if (attempts < 0)
    return corrupt("queue record: negative attempts");
  if (phase == static_cast<uint8_t>(queue_record_phase::retry) && attempts < 1)
    return corrupt("queue record: retry row without attempts");
  auto len = get_be(value, record_value_header_bytes - 2, 2);
  auto end = record_value_header_bytes + len;
  if (leased ? value.size() < end + lease_tail_bytes : value.size() != end)
    return corrupt("queue record: error length " + std::to_string(len)
                   + " does not match " + std::to_string(value.size())
                   + " bytes");
  if (leased) {
    auto mlen = get_be(value, end, 2);
    if (value.size() != end + lease_tail_bytes + mlen || mlen == 0)
      return corrupt("queue record: member length " + std::to_string(mlen)
                     + " does not match " + std::to_string(value.size())
                     + " bytes");
    out.member.assign(value.substr(end + 2, mlen));
    out.lease_id = get_be(value, end + 2 + mlen, 8);
    out.deadline = static_cast<int64_t>(get_be(value, end + 10 + mlen, 8));
    if (out.lease_id == 0)
      return corrupt("queue record: lease id 0");
  } else {
    out.member.clear();
    out.lease_id = 0;
    out.deadline = 0;
  }
  out.phase = static_cast<queue_record_phase>(phase);
  out.attempts = attempts;
  out.first_failure = static_cast<int64_t>(get_be(value, 6, 8));
  out.last_failure = static_cast<int64_t>(get_be(value, 14, 8));
  out.available_at = static_cast<int64_t>(get_be(value, 22, 8));
  out.last_error.assign(value.substr(record_value_header_bytes, len));
  return caf::none;
}

} // namespace queue_state_format

namespace qf = queue_state_format;

namespace {

std::string where(std::string_view group, std::string_view topic,
                  partition_id p) {
  return "queue state " + std::string{group} + "/" + std::string{topic} + "/"
         + std::to_string(p.value);
}

} // namespace

queue_state_store::queue_state_store(metadata_store& store) : store_(store) {
}

caf::error queue_state_store::scan_keys(std::string_view prefix,
                                        std::vector<std::string>& out) {
  return store_.scan_prefix(qf::queue_db, prefix,
                            [&](std::string_view k, std::string_view) {
                              out.emplace_back(k);
                              return true;
                            });
}

caf::error queue_state_store::save(std::string_view group,
                                   std::string_view topic, partition_id p,
                                   const queue_changes& changes,
                                   bool position) {
  const auto& ch = changes;
  auto committed = position ? ch.committed : offset{0};
  bool full = position && ch.full;
  auto prefix = qf::encode_partition_prefix(group, topic, p);
  if (!prefix)
    return std::move(prefix.error());
  if (committed.value < 0)
    return make_error(ec::invalid_argument,
                      where(group, topic, p) + ": negative position");
  for (const auto& r : ch.upserts)
    if (r.off.value < 0)
      return make_error(ec::invalid_argument,
                        where(group, topic, p) + ": negative offset");
  metadata_batch batch;
  std::set<std::string> kept;
  for (const auto& r : ch.upserts)
    if (r.off >= committed)
      kept.insert(qf::record_key(*prefix, r.off));
  if (full) {
    std::vector<std::string> keys;
    if (auto err = scan_keys(*prefix, keys))
      return err;
    auto pos = qf::position_key(*prefix);
    for (const auto& k : keys)
      if (k != pos && kept.count(k) == 0)
        batch.erase(qf::queue_db, k);
  }
  for (auto off : ch.erased)
    if (off.value >= 0)
      batch.erase(qf::queue_db, qf::record_key(*prefix, off));
  for (const auto& r : ch.upserts) {
    auto key = qf::record_key(*prefix, r.off);
    if (r.off < committed)
      batch.erase(qf::queue_db, key);
    else
      batch.put(qf::queue_db, key, qf::encode_record_value(r));
  }
  if (position)
    batch.put(qf::queue_db, qf::position_key(*prefix),
              qf::encode_position_value(committed));
  return store_.write_batch(batch);
}

caf::error queue_state_store::replace(std::string_view group,
                                      std::string_view topic, partition_id p,
                                      const queue_snapshot& snap) {
  queue_changes ch;
  ch.committed = snap.committed;
  ch.full = true;
  ch.upserts = snap.records;
  return save(group, topic, p, ch);
}

caf::expected<std::optional<queue_snapshot>>
queue_state_store::load(std::string_view group, std::string_view topic,
                        partition_id p) {
  auto prefix = qf::encode_partition_prefix(group, topic, p);
  if (!prefix)
    return std::move(prefix.error());
  std::optional<offset> committed;
  std::vector<queue_record> records;
  caf::error decode_err;
  auto ctx = where(group, topic, p);
  auto err = store_.scan_prefix(
    qf::queue_db, *prefix, [&](std::string_view k, std::string_view v) {
      auto key = qf::decode_key(k);
      if (!key) {
        decode_err = make_error(ec::corrupt_segment,
                                ctx + ": " + describe(key.error()));
        return false;
      }
      if (key->group != group || key->topic != topic || key->partition != p) {
        decode_err = make_error(ec::corrupt_segment,
                                ctx + ": key of another partition under its "
                                      "prefix");
        return false;
      }
      if (key->position) {
        auto c = qf::decode_position_value(v);
        if (!c) {
          decode_err = make_error(ec::corrupt_segment,
                                  ctx + ": " + describe(c.error()));
          return false;
        }
        committed = *c;
        return true;
      }
      queue_record r;
      r.off = key->off;
      if (auto e = qf::decode_record_value(v, r)) {
        decode_err = make_error(ec::corrupt_segment,
                                ctx + ": record " + std::to_string(r.off.value)
                                  + ": " + describe(e));
        return false;
      }
      records.push_back(std::move(r));
      return true;
    });
  if (err)
    return err;
  if (decode_err)
    return decode_err;
  if (!committed) {
    if (records.empty())
      return std::optional<queue_snapshot>{};
    return make_error(ec::corrupt_segment,
                      ctx + ": " + std::to_string(records.size())
                        + " record rows without a position row");
  }
  queue_snapshot snap;
  snap.committed = *committed;
  for (auto& r : records)
    if (r.off >= snap.committed)
      snap.records.push_back(std::move(r));
  return std::optional<queue_snapshot>{std::move(snap)};
}

caf::expected<lease_table>
queue_state_store::open_table(std::string_view group, std::string_view topic,
                              partition_id p, const lease_table_config& cfg,
                              offset initial) {
  auto snap = load(group, topic, p);
  if (!snap)
    return std::move(snap.error());
  if (!*snap)
    return lease_table::make(cfg, initial);
  return lease_table::restore(cfg, **snap);
}

caf::expected<std::vector<queue_partition_ref>>
queue_state_store::partitions(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "queue state: group must be non-empty without NUL");
  std::vector<queue_partition_ref> out;
  caf::error decode_err;
  auto err = store_.scan_prefix(
    qf::queue_db, qf::group_prefix(group),
    [&](std::string_view k, std::string_view) {
      auto key = qf::decode_key(k);
      if (!key) {
        decode_err = make_error(ec::corrupt_segment,
                                "queue state of " + std::string{group} + ": "
                                  + describe(key.error()));
        return false;
      }
      if (key->position)
        out.push_back(queue_partition_ref{std::move(key->topic),
                                          key->partition});
      return true;
    });
  if (err)
    return err;
  if (decode_err)
    return decode_err;
  return out;
}

caf::error queue_state_store::erase(std::string_view group,
                                    std::string_view topic, partition_id p) {
  auto prefix = qf::encode_partition_prefix(group, topic, p);
  if (!prefix)
    return std::move(prefix.error());
  std::vector<std::string> keys;
  if (auto err = scan_keys(*prefix, keys))
    return err;
  if (keys.empty())
    return caf::none;
  metadata_batch batch;
  for (const auto& k : keys)
    batch.erase(qf::queue_db, k);
  return store_.write_batch(batch);
}

caf::error queue_state_store::erase_group(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "queue state: group must be non-empty without NUL");
  std::vector<std::string> keys;
  if (auto err = scan_keys(qf::group_prefix(group), keys))
    return err;
  if (keys.empty())
    return caf::none;
  metadata_batch batch;
  for (const auto& k : keys)
    batch.erase(qf::queue_db, k);
  return store_.write_batch(batch);
}

caf::error queue_state_store::erase_partition_all(std::string_view group,
                                                std::string_view topic,
                                                partition_id p) {
  auto prefix = qf::encode_partition_prefix(group, topic, p);
  if (!prefix)
    return std::move(prefix.error());
  std::vector<std::string> keys;
  if (auto err = scan_keys(*prefix, keys))
    return err;
  metadata_batch batch;
  for (const auto& k : keys)
    batch.erase(qf::queue_db, k);
  batch.erase(qf::producers_db, qf::producer_key(group, topic, p));
  return store_.write_batch(batch);
}

caf::error queue_state_store::erase_group_all(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "queue state: group must be non-empty without NUL");
  auto prefix = qf::group_prefix(group);
  std::vector<std::string> state_keys;
  if (auto err = scan_keys(prefix, state_keys))
    return err;
  std::vector<std::string> producer_keys;
  if (auto err = store_.scan_prefix(qf::producers_db, prefix,
                                    [&](std::string_view k, std::string_view) {
                                      producer_keys.emplace_back(k);
                                      return true;
                                    }))
    return err;
  metadata_batch batch;
  for (const auto& k : state_keys)
    batch.erase(qf::queue_db, k);
  for (const auto& k : producer_keys)
    batch.erase(qf::producers_db, k);
  batch.erase(qf::groups_db, group);
  return store_.write_batch(batch);
}

} // namespace ferry
