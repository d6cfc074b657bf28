#include "broker/offset_store.hpp"

#include "broker/metadata_store.hpp"
#include "broker/key_codec.hpp"

#include <utility>

namespace ferry {

namespace offset_format {

using namespace key_codec;

caf::expected<std::string> encode_offset_key(std::string_view group,
                                             std::string_view topic,
                                             partition_id p) {
  if (!valid_name(group))
    return make_error(ec::invalid_argument,
                      "offset key: group must be non-empty without NUL");
  if (!valid_name(topic))
    return make_error(ec::invalid_argument,
                      "offset key: topic must be non-empty without NUL");
  if (p.value < 0)
    return make_error(ec::invalid_argument,
                      "offset key: negative partition "
                        + std::to_string(p.value));
  auto key = group_key_prefix(group);
  key.append(topic);
  key.push_back('\0');
  put_be(key, static_cast<uint32_t>(p.value), 4);
  return key;
}

std::string group_key_prefix(std::string_view group) {
  std::string out{group};
  out.push_back('\0');
  return out;
}

caf::expected<offset_key> decode_offset_key(std::string_view key) {
  // group 0x00 topic 0x00 partition(4): at least 1 + 1 + 1 + 1 + 4 bytes.
  if (key.size() < 8)
    return corrupt("offset key: " + std::to_string(key.size())
                   + " bytes is too short");
  auto body = key.substr(0, key.size() - 4);
  if (body.back() != '\0')
    return corrupt("offset key: no NUL before the partition");
  body.remove_suffix(1);
  auto sep = body.find('\0');
  if (sep == std::string_view::npos || sep == 0 || sep + 1 >= body.size()
      || body.find('\0', sep + 1) != std::string_view::npos)
    return corrupt("offset key: malformed group/topic");
  auto p = static_cast<int32_t>(get_be(key, key.size() - 4, 4));
  if (p < 0)
    return corrupt("offset key: negative partition");
  return offset_key{std::string{body.substr(0, sep)},
                    std::string{body.substr(sep + 1)}, partition_id{p}};
}

std::string encode_offset_value(const committed_offset& x) {
  std::string out;
  out.reserve(offset_value_header_bytes + x.metadata.size());
  out.push_back(static_cast<char>(offset_value_version));
  put_be(out, static_cast<uint64_t>(x.committed.value), 8);
  put_be(out, static_cast<uint64_t>(x.commit_timestamp), 8);
  put_be(out, static_cast<uint32_t>(x.metadata.size()), 4);
  out.append(x.metadata);
  return out;
}

caf::error decode_offset_value(std::string_view value, committed_offset& out) {
  if (value.size() < offset_value_header_bytes)
    return corrupt("offset value: " + std::to_string(value.size())
                   + " bytes is shorter than the header");
  if (static_cast<uint8_t>(value[0]) != offset_value_version)
    return corrupt("offset value: unknown version "
                   + std::to_string(static_cast<uint8_t>(value[0])));
  auto len = get_be(value, 17, 4);
  if (value.size() != offset_value_header_bytes + len)
    return corrupt("offset value: metadata length " + std::to_string(len)
                   + " does not match " + std::to_string(value.size())
                   + " bytes");
  out.committed = offset{static_cast<int64_t>(get_be(value, 1, 8))};
  out.commit_timestamp = static_cast<int64_t>(get_be(value, 9, 8));
  out.metadata.assign(value.substr(offset_value_header_bytes));
  return caf::none;
}

std::string encode_group_value(const group_record& x) {
  std::string out;
  out.push_back(static_cast<char>(group_value_version));
  put_be(out, static_cast<uint32_t>(x.generation), 4);
  auto mode = std::string_view{x.mode}.substr(0, 255);
  auto assignor = std::string_view{x.assignor}.substr(0, 255);
  out.push_back(static_cast<char>(mode.size()));
  out.append(mode);
  out.push_back(static_cast<char>(assignor.size()));
  out.append(assignor);
  return out;
}

caf::error decode_group_value(std::string_view value, group_record& out) {
  if (value.size() < 1 + 4 + 1)
    return corrupt("group value: " + std::to_string(value.size())
                   + " bytes is too short");
  if (static_cast<uint8_t>(value[0]) != group_value_version)
    return corrupt("group value: unknown version "
                   + std::to_string(static_cast<uint8_t>(value[0])));
  size_t pos = 5;
  size_t mode_len = static_cast<uint8_t>(value[pos++]);
  if (pos + mode_len + 1 > value.size())
    return corrupt("group value: mode runs past the end");
  auto mode = value.substr(pos, mode_len);
  pos += mode_len;
  size_t assignor_len = static_cast<uint8_t>(value[pos++]);
  if (pos + assignor_len != value.size())
    return corrupt("group value: assignor length does not match");
  out.generation = static_cast<int32_t>(get_be(value, 1, 4));
  out.mode.assign(mode);
  out.assignor.assign(value.substr(pos, assignor_len));
  return caf::none;
}

} // namespace offset_format

namespace of = offset_format;

offset_store::offset_store(metadata_store& store) : store_(store) {
}

caf::error offset_store::commit(std::string_view group,
                                const std::vector<committed_offset>& offsets,
                                const std::optional<group_record>& record) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "group must be non-empty without NUL");
  metadata_batch batch;
  for (const auto& o : offsets) {
    auto key = of::encode_offset_key(group, o.topic, o.partition);
    if (!key)
      return std::move(key.error());
    if (o.metadata.size() > of::max_metadata_bytes)
      return make_error(ec::invalid_argument,
                        "offset metadata of " + o.topic + "/"
                          + std::to_string(o.partition.value) + " exceeds "
                          + std::to_string(of::max_metadata_bytes) + " bytes");
    batch.put(of::offsets_db, *key, of::encode_offset_value(o));
  }
  if (record) {
    if (record->group != group)
      return make_error(ec::invalid_argument,
                        "group record does not match the committing group");
    batch.put(of::groups_db, group, of::encode_group_value(*record));
  }
  return store_.write_batch(batch);
}

caf::expected<std::vector<committed_offset>>
offset_store::fetch(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "group must be non-empty without NUL");
  std::vector<committed_offset> out;
  caf::error decode_err;
  auto err = store_.scan_prefix(
    of::offsets_db, of::group_key_prefix(group),
    [&](std::string_view k, std::string_view v) {
      auto key = of::decode_offset_key(k);
      if (!key) {
        decode_err = std::move(key.error());
        return false;
      }
      committed_offset o;
      o.topic = std::move(key->topic);
      o.partition = key->partition;
      if (auto e = of::decode_offset_value(v, o)) {
        decode_err = make_error(ec::corrupt_segment,
                                std::string{group} + "/" + o.topic + "/"
                                  + std::to_string(o.partition.value) + ": "
                                  + describe(e));
        return false;
      }
      out.push_back(std::move(o));
      return true;
    });
  if (err)
    return err;
  if (decode_err)
    return decode_err;
  return out;
}

caf::expected<std::optional<committed_offset>>
offset_store::fetch(std::string_view group, std::string_view topic,
                    partition_id p) {
  auto key = of::encode_offset_key(group, topic, p);
  if (!key)
    return std::move(key.error());
  auto v = store_.get(of::offsets_db, *key);
  if (!v) {
    if (is(v.error(), ec::not_found))
      return std::optional<committed_offset>{};
    return std::move(v.error());
  }
  committed_offset o;
  o.topic = std::string{topic};
  o.partition = p;
  if (auto e = of::decode_offset_value(*v, o))
    return e;
  return std::optional<committed_offset>{std::move(o)};
}

caf::error offset_store::put_group(const group_record& record) {
  return commit(record.group, {}, record);
}

caf::expected<std::optional<group_record>>
offset_store::get_group(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "group must be non-empty without NUL");
  auto v = store_.get(of::groups_db, group);
  if (!v) {
    if (is(v.error(), ec::not_found))
      return std::optional<group_record>{};
    return std::move(v.error());
  }
  group_record r;
  r.group = std::string{group};
  if (auto e = of::decode_group_value(*v, r))
    return e;
  return std::optional<group_record>{std::move(r)};
}

caf::expected<std::vector<group_record>> offset_store::list_groups() {
  std::vector<group_record> out;
  caf::error decode_err;
  auto err = store_.scan_prefix(
    of::groups_db, {}, [&](std::string_view k, std::string_view v) {
      group_record r;
      r.group = std::string{k};
      if (auto e = of::decode_group_value(v, r)) {
        decode_err = make_error(ec::corrupt_segment,
                                "group " + r.group + ": " + describe(e));
        return false;
      }
      out.push_back(std::move(r));
      return true;
    });
  if (err)
    return err;
  if (decode_err)
    return decode_err;
  return out;
}

caf::error offset_store::erase(std::string_view group, std::string_view topic,
                               partition_id p) {
  auto key = of::encode_offset_key(group, topic, p);
  if (!key)
    return std::move(key.error());
  return store_.erase(of::offsets_db, *key);
}

caf::error offset_store::delete_group(std::string_view group) {
  if (group.empty() || group.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "group must be non-empty without NUL");
  std::vector<std::string> keys;
  auto err = store_.scan_prefix(of::offsets_db, of::group_key_prefix(group),
                                [&](std::string_view k, std::string_view) {
                                  keys.emplace_back(k);
                                  return true;
                                });
  if (err)
    return err;
  metadata_batch batch;
  for (const auto& k : keys)
    batch.erase(of::offsets_db, k);
  batch.erase(of::groups_db, group);
  return store_.write_batch(batch);
}

} // namespace ferry
