#include "broker/dlq_store.hpp"

#include "broker/key_codec.hpp"
#include "broker/metadata_store.hpp"

#include <utility>
#include <vector>

namespace ferry {

using namespace key_codec;

namespace dlq_store_format {

caf::expected<std::string> partition_prefix(std::string_view topic,
                                            partition_id p) {
  if (!valid_name(topic))
    return make_error(ec::invalid_argument,
                      "DLQ key: topic must be non-empty without NUL");
  if (p.value < 0)
    return make_error(ec::invalid_argument,
                      "DLQ key: negative partition " + std::to_string(p.value));
  std::string key{topic};
  key.push_back('\0');
  put_be(key, static_cast<uint32_t>(p.value), 4);
  return key;
}

} // namespace dlq_store_format

namespace {

namespace fmt_ = dlq_store_format;

std::string encode_mark(const redrive_mark& m) {
  std::string out;
  out.push_back(static_cast<char>(fmt_::mark_value_version));
  put_be(out, static_cast<uint64_t>(m.at), 8);
  put_be(out, static_cast<uint32_t>(m.target_partition.value), 4);
  put_be(out, static_cast<uint64_t>(m.target_offset.value), 8);
  out.append(m.target_topic);
  return out;
}

caf::expected<redrive_mark> decode_mark(std::string_view v) {
  if (v.size() < fmt_::mark_value_header_bytes
      || static_cast<uint8_t>(v[0]) != fmt_::mark_value_version)
    return corrupt("DLQ redriven mark: bad value of "
                   + std::to_string(v.size()) + " bytes");
  redrive_mark m;
  m.at = static_cast<timestamp_ms>(get_be(v, 1, 8));
  m.target_partition = partition_id{static_cast<int32_t>(get_be(v, 9, 4))};
  m.target_offset = offset{static_cast<int64_t>(get_be(v, 13, 8))};
  m.target_topic.assign(v.substr(fmt_::mark_value_header_bytes));
  return m;
}

std::string encode_producer(const redrive_producer& x) {
  std::string out;
  out.push_back(static_cast<char>(fmt_::producer_value_version));
  put_be(out, static_cast<uint64_t>(x.pid.value), 8);
  put_be(out, static_cast<uint16_t>(x.epoch), 2);
  put_be(out, static_cast<uint64_t>(x.last_offset.value), 8);
  put_be(out, static_cast<uint32_t>(x.last_seq), 4);
  return out;
}

caf::expected<redrive_producer> decode_producer(std::string_view v) {
  if (v.size() != fmt_::producer_value_bytes
      || static_cast<uint8_t>(v[0]) != fmt_::producer_value_version)
    return corrupt("DLQ redrive producer: bad value of "
                   + std::to_string(v.size()) + " bytes");
  redrive_producer x;
  x.pid = producer_id{static_cast<int64_t>(get_be(v, 1, 8))};
  x.epoch = static_cast<int16_t>(get_be(v, 9, 2));
  x.last_offset = offset{static_cast<int64_t>(get_be(v, 11, 8))};
  x.last_seq = static_cast<int32_t>(get_be(v, 19, 4));
  return x;
}

caf::expected<std::string> mark_key(std::string_view topic, partition_id p,
                                    offset off) {
  if (off.value < 0)
    return make_error(ec::invalid_argument,
                      "DLQ key: negative offset " + std::to_string(off.value));
  auto key = fmt_::partition_prefix(topic, p);
  if (!key)
    return key;
  put_be(*key, static_cast<uint64_t>(off.value), 8);
  return key;
}

caf::expected<std::string> producer_key(std::string_view dlq, partition_id p,
                                        std::string_view target,
                                        partition_id tp) {
  auto key = fmt_::partition_prefix(dlq, p);
  if (!key)
    return key;
  auto rest = fmt_::partition_prefix(target, tp);
  if (!rest)
    return rest;
  key->append(*rest);
  return key;
}

} // namespace

dlq_store::dlq_store(metadata_store& store) : store_(store) {
  // nop
}

caf::error dlq_store::mark(std::string_view topic, partition_id p, offset off,
                           const redrive_mark& m) {
  auto key = mark_key(topic, p, off);
  if (!key)
    return key.error();
  return store_.put(fmt_::marks_db, *key, encode_mark(m));
}

caf::expected<std::optional<redrive_mark>>
dlq_store::get_mark(std::string_view topic, partition_id p, offset off) {
  auto key = mark_key(topic, p, off);
  if (!key)
    return key.error();
  auto v = store_.get(fmt_::marks_db, *key);
  if (!v) {
    if (is(v.error(), ec::not_found))
      return std::optional<redrive_mark>{};
    return v.error();
  }
  auto m = decode_mark(*v);
  if (!m)
    return m.error();
  return std::optional<redrive_mark>{std::move(*m)};
}

caf::expected<std::set<int64_t>> dlq_store::marked(std::string_view topic,
                                                   partition_id p, offset from,
                                                   offset to) {
  auto prefix = fmt_::partition_prefix(topic, p);
  if (!prefix)
    return prefix.error();
  std::set<int64_t> out;
  auto plen = prefix->size();
  caf::error bad;
  auto err = store_.scan_prefix(
    fmt_::marks_db, *prefix, [&](std::string_view k, std::string_view) {
      if (k.size() != plen + 8) {
        bad = corrupt("DLQ redriven mark: malformed key");
        return false;
      }
      auto off = static_cast<int64_t>(get_be(k, plen, 8));
      if (off >= to.value)
        return false; // keys sort by offset
      if (off >= from.value)
        out.insert(off);
      return true;
    });
  if (err)
    return err;
  if (bad)
    return bad;
  return out;
}

caf::expected<size_t> dlq_store::erase_below(std::string_view topic,
                                             partition_id p, offset before) {
  auto below = marked(topic, p, offset{0}, before);
  if (!below)
    return below.error();
  if (below->empty())
    return size_t{0};
  metadata_batch batch;
  for (auto off : *below)
    if (auto key = mark_key(topic, p, offset{off}))
      batch.erase(fmt_::marks_db, *key);
  if (auto err = store_.write_batch(batch))
    return err;
  return below->size();
}

caf::error dlq_store::erase_topic(std::string_view topic) {
  if (!valid_name(topic))
    return make_error(ec::invalid_argument,
                      "DLQ key: topic must be non-empty without NUL");
  std::string prefix{topic};
  prefix.push_back('\0');
  metadata_batch batch;
  for (auto db : {fmt_::marks_db, fmt_::producers_db}) {
    std::vector<std::string> keys;
    auto err = store_.scan_prefix(db, prefix,
                                  [&](std::string_view k, std::string_view) {
                                    keys.emplace_back(k);
                                    return true;
                                  });
    if (err)
      return err;
    for (auto& k : keys)
      batch.erase(db, k);
  }
  if (batch.empty())
    return caf::none;
  return store_.write_batch(batch);
}

caf::expected<std::set<std::string>> dlq_store::topics() {
  std::set<std::string> out;
  for (auto db : {fmt_::marks_db, fmt_::producers_db}) {
    auto err = store_.scan_prefix(db, "",
                                  [&](std::string_view k, std::string_view) {
                                    auto end = k.find('\0');
                                    if (end != std::string_view::npos)
                                      out.emplace(k.substr(0, end));
                                    return true;
                                  });
    if (err)
      return err;
  }
  return out;
}

caf::expected<std::optional<redrive_producer>>
dlq_store::get_producer(std::string_view dlq, partition_id p,
                        std::string_view target, partition_id tp) {
  auto key = producer_key(dlq, p, target, tp);
  if (!key)
    return key.error();
  auto v = store_.get(fmt_::producers_db, *key);
  if (!v) {
    if (is(v.error(), ec::not_found))
      return std::optional<redrive_producer>{};
    return v.error();
  }
  auto x = decode_producer(*v);
  if (!x)
    return x.error();
  return std::optional<redrive_producer>{*x};
}

caf::error dlq_store::put_producer(std::string_view dlq, partition_id p,
                                   std::string_view target, partition_id tp,
                                   const redrive_producer& x) {
  auto key = producer_key(dlq, p, target, tp);
  if (!key)
    return key.error();
  return store_.put(fmt_::producers_db, *key, encode_producer(x));
}

} // namespace ferry
