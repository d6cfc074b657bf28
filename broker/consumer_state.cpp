#include "broker/consumer_state.hpp"

#include "broker/big_endian.hpp"

#include "broker/dlq_store.hpp"
#include "broker/error.hpp"
#include "broker/metadata_store.hpp"
#include "broker/queue_state_store.hpp"
#include "broker/record_batch.hpp"

#include <cstring>
#include <limits>

namespace ferry {

namespace {

constexpr uint8_t value_version = 1; // the commit kind

caf::error bad(const std::string& what) {
  return make_error(ec::corrupt_segment, "consumer state record: " + what);
}

bool get_bytes(std::string_view& in, size_t n, std::string& out) {
  if (in.size() < n)
    return false;
  out.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

} // namespace

std::string dlq_home_key(std::string_view dlq_topic) {
  std::string out{"\0dlq:", 5};
  out += dlq_topic;
  return out;
}

std::string encode_offsets_value(const std::vector<committed_offset>& offsets) {
  std::string out;
  out.push_back(static_cast<char>(value_version));
  be::append(out, static_cast<uint32_t>(offsets.size()));
  for (auto& o : offsets) {
    be::append(out, static_cast<uint16_t>(o.topic.size()));
    out += o.topic;
    be::append(out, o.partition.value);
    be::append(out, o.committed.value);
    be::append(out, o.commit_timestamp);
    be::append(out, static_cast<uint32_t>(o.metadata.size()));
    out += o.metadata;
  }
  return out;
}

namespace {

caf::error decode_offsets_body(std::string_view& in,
                               std::vector<committed_offset>& out) {
  uint32_t n = 0;
  if (!be::read(in, n))
    return bad("truncated count");
  for (uint32_t i = 0; i < n; ++i) {
    committed_offset o;
    uint16_t topic_len = 0;
    uint32_t meta_len = 0;
    int32_t partition = 0;
    int64_t committed = 0;
    if (!be::read(in, topic_len) || !get_bytes(in, topic_len, o.topic)
        || !be::read(in, partition) || !be::read(in, committed)
        || !be::read(in, o.commit_timestamp) || !be::read(in, meta_len)
        || !get_bytes(in, meta_len, o.metadata))
      return bad("truncated offset");
    o.partition = partition_id{partition};
    o.committed = offset{committed};
    out.push_back(std::move(o));
  }
  return caf::none;
}

void put_partition(std::string& out, const consumer_state_record& x) {
  be::append(out, static_cast<uint16_t>(x.topic.size()));
  out += x.topic;
  be::append(out, x.partition.value);
}

void put_string16(std::string& out, const std::string& s) {
  be::append(out, static_cast<uint16_t>(s.size()));
  out += s;
}

bool get_string16(std::string_view& in, std::string& out) {
  uint16_t len = 0;
  return be::read(in, len) && get_bytes(in, len, out);
}

bool get_partition(std::string_view& in, consumer_state_record& x) {
  uint16_t len = 0;
  int32_t p = 0;
  if (!be::read(in, len) || !get_bytes(in, len, x.topic) || !be::read(in, p))
    return false;
  x.partition = partition_id{p};
  return true;
}

} // namespace

caf::expected<std::vector<committed_offset>>
decode_offsets_value(std::string_view in) {
  if (in.empty() || static_cast<uint8_t>(in[0]) != value_version)
    return bad("unknown version");
  in.remove_prefix(1);
  std::vector<committed_offset> out;
  if (auto err = decode_offsets_body(in, out))
    return err;
  if (!in.empty())
    return bad("trailing bytes");
  return out;
}

std::string encode_consumer_state_value(const consumer_state_record& x) {
  using k = consumer_state_kind;
  if (x.kind == k::commit)
    return encode_offsets_value(x.offsets);
  std::string out;
  out.push_back(static_cast<char>(x.kind));
  switch (x.kind) {
    case k::queue_group:
      out += x.row;
      break;
    case k::queue_group_delete:
    case k::stream_group_delete:
      break;
    case k::queue_partition: {
      put_partition(out, x);
      be::append(out, x.changes.committed.value);
      out.push_back(static_cast<char>(x.changes.full ? 1 : 0));
      be::append(out, static_cast<uint32_t>(x.changes.upserts.size()));
      for (const auto& r : x.changes.upserts) {
        auto v = queue_state_format::encode_record_value(r);
        be::append(out, r.off.value);
        be::append(out, static_cast<uint32_t>(v.size()));
        out += v;
      }
      be::append(out, static_cast<uint32_t>(x.changes.erased.size()));
      for (auto off : x.changes.erased)
        be::append(out, off.value);
      break;
    }
    case k::queue_dlq_producer:
      put_partition(out, x);
      out += x.row;
      break;
    case k::queue_partition_erase:
      put_partition(out, x);
      break;
    case k::dlq_mark:
      put_partition(out, x);
      be::append(out, x.off.value);
      be::append(out, x.mark.at);
      be::append(out, x.mark.target_partition.value);
      be::append(out, x.mark.target_offset.value);
      out += x.mark.target_topic;
      break;
    case k::dlq_producer:
      put_partition(out, x);
      put_string16(out, x.target_topic);
      be::append(out, x.target_partition.value);
      be::append(out, x.producer.pid.value);
      be::append(out, x.producer.epoch);
      be::append(out, x.producer.last_offset.value);
      be::append(out, x.producer.last_seq);
      break;
    case k::dlq_erase_below:
      put_partition(out, x);
      be::append(out, x.off.value);
      break;
    case k::dlq_topic_erase:
      put_string16(out, x.topic);
      break;
    default:
      break;
  }
  return out;
}

caf::expected<consumer_state_record>
decode_consumer_state_value(std::string_view in) {
  using k = consumer_state_kind;
  if (in.empty())
    return bad("empty value");
  auto kind = static_cast<uint8_t>(in[0]);
  in.remove_prefix(1);
  consumer_state_record x;
  x.kind = static_cast<k>(kind);
  switch (x.kind) {
    case k::commit:
      if (auto err = decode_offsets_body(in, x.offsets))
        return err;
      break;
    case k::queue_group:
      if (in.empty())
        return bad("queue group config without a value");
      x.row.assign(in);
      in = {};
      break;
    case k::queue_group_delete:
    case k::stream_group_delete:
      break;
    case k::queue_row:
      return bad("a queue row outside its format-2 key");
    case k::queue_partition: {
      int64_t committed = 0;
      uint8_t flags = 0;
      uint32_t n = 0;
      if (!get_partition(in, x) || !be::read(in, committed)
          || !be::read(in, flags) || !be::read(in, n))
        return bad("truncated queue change set");
      if (flags > 1)
        return bad("queue change set flags " + std::to_string(flags));
      x.changes.committed = offset{committed};
      x.changes.full = flags == 1;
      for (uint32_t i = 0; i < n; ++i) {
        int64_t off = 0;
        uint32_t len = 0;
        std::string v;
        if (!be::read(in, off) || !be::read(in, len) || !get_bytes(in, len, v))
          return bad("truncated queue row");
        queue_record r;
        r.off = offset{off};
        if (auto err = queue_state_format::decode_record_value(v, r))
          return bad("queue row " + std::to_string(off) + ": "
                     + describe(err));
        x.changes.upserts.push_back(std::move(r));
      }
      if (!be::read(in, n))
        return bad("truncated erased count");
      for (uint32_t i = 0; i < n; ++i) {
        int64_t off = 0;
        if (!be::read(in, off))
          return bad("truncated erased offset");
        x.changes.erased.push_back(offset{off});
      }
      break;
    }
    case k::queue_dlq_producer:
      if (!get_partition(in, x) || in.empty())
        return bad("truncated DLQ producer row");
      x.row.assign(in);
      in = {};
      break;
    case k::queue_partition_erase:
      if (!get_partition(in, x))
        return bad("truncated queue partition erase");
      break;
    case k::dlq_mark: {
      int64_t off = 0, target_off = 0;
      int32_t tp = 0;
      if (!get_partition(in, x) || !be::read(in, off) || !be::read(in, x.mark.at)
          || !be::read(in, tp) || !be::read(in, target_off) || in.empty())
        return bad("truncated DLQ redrive mark");
      x.off = offset{off};
      x.mark.target_partition = partition_id{tp};
      x.mark.target_offset = offset{target_off};
      x.mark.target_topic.assign(in);
      in = {};
      break;
    }
    case k::dlq_producer: {
      int32_t tp = 0;
      int64_t pid = 0, last = 0;
      if (!get_partition(in, x) || !get_string16(in, x.target_topic)
          || !be::read(in, tp) || !be::read(in, pid)
          || !be::read(in, x.producer.epoch) || !be::read(in, last)
          || !be::read(in, x.producer.last_seq))
        return bad("truncated DLQ redrive producer row");
      x.target_partition = partition_id{tp};
      x.producer.pid = producer_id{pid};
      x.producer.last_offset = offset{last};
      break;
    }
    case k::dlq_erase_below: {
      int64_t before = 0;
      if (!get_partition(in, x) || !be::read(in, before))
        return bad("truncated DLQ marks erase");
      x.off = offset{before};
      break;
    }
    case k::dlq_topic_erase:
      if (!get_string16(in, x.topic))
        return bad("truncated DLQ topic erase");
      break;
    default:
      return make_error(ec::unknown_record_kind,
                        "consumer state record of kind "
                          + std::to_string(kind)
                          + " (written by a newer version?)");
  }
  if (!in.empty())
    return bad("trailing bytes");
  return x;
}

bool consumer_state_legacy_key(std::string_view key) {
  static constexpr std::string_view dlq_prefix{"\0dlq:", 5};
  if (key.substr(0, dlq_prefix.size()) == dlq_prefix)
    return key.find('\0', dlq_prefix.size()) == std::string_view::npos;
  return key.find('\0') == std::string_view::npos;
}

namespace {

using k = consumer_state_kind;

/// One log record of format 2: its key and value (nullopt: a tombstone).
struct log_entry {
  std::string key;
  std::optional<std::string> value;
};

caf::error bad_name(const std::string& what) {
  return make_error(ec::invalid_argument, "consumer state record: " + what);
}

bool bad_text(std::string_view s) {
  return s.empty() || s.find('\0') != std::string_view::npos
         || s.size() > std::numeric_limits<uint16_t>::max();
}

caf::expected<std::string> group_key(const consumer_state_record& x,
                                     char tag) {
  if (bad_text(x.group))
    return bad_name("bad group name");
  std::string out = x.group;
  out.push_back('\0');
  out.push_back(tag);
  return out;
}

caf::expected<std::string> dlq_key(const consumer_state_record& x, char tag) {
  if (bad_text(x.topic))
    return bad_name("bad DLQ topic name");
  auto out = dlq_home_key(x.topic);
  out.push_back('\0');
  out.push_back(tag);
  return out;
}

caf::error put_tp(std::string& out, std::string_view topic, partition_id p) {
  if (bad_text(topic))
    return bad_name("bad topic name");
  put_string16(out, std::string{topic});
  be::append(out, p.value);
  return caf::none;
}

/// The format-2 log records of `x` (see the file comment).
caf::error entries_of(const consumer_state_record& x,
                      std::vector<log_entry>& out) {
  auto with_tp = [&](char tag, std::string_view topic, partition_id p,
                     std::optional<std::string> value) -> caf::error {
    auto key = group_key(x, tag);
    if (!key)
      return std::move(key.error());
    if (auto err = put_tp(*key, topic, p))
      return err;
    out.push_back({std::move(*key), std::move(value)});
    return caf::none;
  };
  auto plain = [&](caf::expected<std::string> key,
                   std::optional<std::string> value) -> caf::error {
    if (!key)
      return std::move(key.error());
    out.push_back({std::move(*key), std::move(value)});
    return caf::none;
  };
  switch (x.kind) {
    case k::commit:
      for (const auto& o : x.offsets) {
        std::optional<std::string> v;
        if (!x.erase)
          v = encode_offsets_value({o});
        if (auto err = with_tp('c', o.topic, o.partition, std::move(v)))
          return err;
      }
      return caf::none;
    case k::stream_group_delete:
      return plain(group_key(x, 'S'), std::nullopt);
    case k::queue_group:
      if (x.erase)
        return plain(group_key(x, 'g'), std::nullopt);
      return plain(group_key(x, 'g'), encode_consumer_state_value(x));
    case k::queue_group_delete:
      if (auto err = plain(group_key(x, 'G'), encode_consumer_state_value(x)))
        return err;
      return plain(group_key(x, 'g'), std::nullopt);
    case k::queue_partition: {
      const auto& ch = x.changes;
      if (x.has_position) {
        consumer_state_record head;
        head.kind = k::queue_partition;
        head.topic = x.topic;
        head.partition = x.partition;
        head.changes.committed = ch.committed;
        head.changes.full = ch.full;
        if (auto err = with_tp(ch.full ? 'F' : 'p', x.topic, x.partition,
                               encode_consumer_state_value(head)))
          return err;
      }
      auto row = [&](offset off, std::optional<std::string> v) -> caf::error {
        if (off.value < 0)
          return bad_name("negative queue row offset");
        auto key = group_key(x, 'r');
        if (!key)
          return std::move(key.error());
        if (auto err = put_tp(*key, x.topic, x.partition))
          return err;
        be::append(*key, off.value);
        out.push_back({std::move(*key), std::move(v)});
        return caf::none;
      };
      for (auto off : ch.erased)
        if (auto err = row(off, std::nullopt))
          return err;
      for (const auto& r : ch.upserts) {
        std::optional<std::string> v;
        if (!x.has_position || r.off >= ch.committed) {
          v.emplace(1, static_cast<char>(k::queue_row));
          *v += queue_state_format::encode_record_value(r);
        }
        if (auto err = row(r.off, std::move(v)))
          return err;
      }
      return caf::none;
    }
    case k::queue_dlq_producer:
      if (x.erase)
        return with_tp('d', x.topic, x.partition, std::nullopt);
      return with_tp('d', x.topic, x.partition,
                     encode_consumer_state_value(x));
    case k::queue_partition_erase:
      if (auto err = with_tp('E', x.topic, x.partition,
                             encode_consumer_state_value(x)))
        return err;
      for (char tag : {'p', 'F', 'd'})
        if (auto err = with_tp(tag, x.topic, x.partition, std::nullopt))
          return err;
      return caf::none;
    case k::dlq_mark: {
      auto key = dlq_key(x, 'm');
      if (key) {
        be::append(*key, x.partition.value);
        be::append(*key, x.off.value);
      }
      return plain(std::move(key), encode_consumer_state_value(x));
    }
    case k::dlq_producer: {
      auto key = dlq_key(x, 'P');
      if (key) {
        be::append(*key, x.partition.value);
        if (auto err = put_tp(*key, x.target_topic, x.target_partition))
          return err;
      }
      return plain(std::move(key), encode_consumer_state_value(x));
    }
    case k::dlq_erase_below: {
      auto key = dlq_key(x, 'B');
      if (key)
        be::append(*key, x.partition.value);
      return plain(std::move(key), encode_consumer_state_value(x));
    }
    case k::dlq_topic_erase:
      return plain(dlq_key(x, 'T'), encode_consumer_state_value(x));
    case k::queue_row:
      break;
  }
  return bad_name("cannot write a record of kind "
                  + std::to_string(static_cast<int>(x.kind)));
}

/// A format-2 key, parsed.
struct parsed_key {
  bool dlq = false;
  std::string name; ///< the group, or the DLQ topic
  char tag = 0;
  std::string topic;
  partition_id partition{0};
  offset off{0};
  std::string target_topic;
  partition_id target_partition{0};
};

caf::expected<parsed_key> parse_key(std::string_view key) {
  static constexpr std::string_view dlq_prefix{"\0dlq:", 5};
  parsed_key out;
  out.dlq = key.substr(0, dlq_prefix.size()) == dlq_prefix;
  if (out.dlq)
    key.remove_prefix(dlq_prefix.size());
  auto nul = key.find('\0');
  if (nul == std::string_view::npos || nul + 1 >= key.size())
    return bad("key without a tag");
  out.name.assign(key.substr(0, nul));
  out.tag = key[nul + 1];
  key.remove_prefix(nul + 2);
  auto need_part = [&] {
    int32_t p = 0;
    if (!be::read(key, p))
      return false;
    out.partition = partition_id{p};
    return true;
  };
  auto need_tp = [&] { return get_string16(key, out.topic) && need_part(); };
  auto need_off = [&] {
    int64_t off = 0;
    if (!be::read(key, off))
      return false;
    out.off = offset{off};
    return true;
  };
  bool ok = true;
  if (!out.dlq) {
    switch (out.tag) {
      case 'c': case 'p': case 'F': case 'd': case 'E':
        ok = need_tp();
        break;
      case 'r':
        ok = need_tp() && need_off();
        break;
      case 'S': case 'g': case 'G':
        break;
      default:
        return make_error(ec::unknown_record_kind,
                          "consumer state key tag "
                            + std::to_string(static_cast<uint8_t>(out.tag))
                            + " (written by a newer version?)");
    }
  } else {
    switch (out.tag) {
      case 'm':
        ok = need_part() && need_off();
        break;
      case 'P': {
        int32_t tp = 0;
        ok = need_part() && get_string16(key, out.target_topic)
             && be::read(key, tp);
        out.target_partition = partition_id{tp};
        break;
      }
      case 'B':
        ok = need_part();
        break;
      case 'T':
        break;
      default:
        return make_error(ec::unknown_record_kind,
                          "consumer state key tag "
                            + std::to_string(static_cast<uint8_t>(out.tag))
                            + " (written by a newer version?)");
    }
  }
  if (!ok)
    return bad("truncated key");
  if (!key.empty())
    return bad("trailing key bytes");
  return out;
}

/// One log record, decoded; nullopt for a record with nothing to apply (a
/// format-1 record without a value, a tombstone of a kept record's key).
caf::expected<std::optional<consumer_state_record>>
decode_entry(std::string_view key, const std::optional<std::string>& value,
             bool& format2) {
  format2 = !consumer_state_legacy_key(key);
  if (!format2) {
    if (!value)
      return std::nullopt;
    auto x = decode_consumer_state_value(*value);
    if (!x)
      return std::move(x.error());
    x->group.assign(key);
    return std::optional<consumer_state_record>{std::move(*x)};
  }
  auto pk = parse_key(key);
  if (!pk)
    return std::move(pk.error());
  consumer_state_record x;
  x.group = pk->dlq ? dlq_home_key(pk->name) : pk->name;
  if (!value) {
    switch (pk->tag) {
      case 'c': {
        x.kind = k::commit;
        x.erase = true;
        committed_offset o;
        o.topic = pk->topic;
        o.partition = pk->partition;
        x.offsets.push_back(std::move(o));
        return std::optional<consumer_state_record>{std::move(x)};
      }
      case 'S':
        if (pk->dlq)
          break;
        x.kind = k::stream_group_delete;
        return std::optional<consumer_state_record>{std::move(x)};
      case 'g':
        if (pk->dlq)
          break;
        x.kind = k::queue_group;
        x.erase = true;
        return std::optional<consumer_state_record>{std::move(x)};
      case 'r':
        x.kind = k::queue_partition;
        x.topic = pk->topic;
        x.partition = pk->partition;
        x.has_position = false;
        x.changes.erased.push_back(pk->off);
        return std::optional<consumer_state_record>{std::move(x)};
      case 'd':
        if (pk->dlq)
          break;
        x.kind = k::queue_dlq_producer;
        x.erase = true;
        x.topic = pk->topic;
        x.partition = pk->partition;
        return std::optional<consumer_state_record>{std::move(x)};
      default:
        break;
    }
    return std::nullopt;
  }
  if (!pk->dlq && pk->tag == 'r') {
    if (value->empty() || static_cast<uint8_t>((*value)[0])
                            != static_cast<uint8_t>(k::queue_row))
      return bad("queue row record of another kind");
    queue_record r;
    r.off = pk->off;
    if (auto err = queue_state_format::decode_record_value(
          std::string_view{*value}.substr(1), r))
      return bad("queue row " + std::to_string(pk->off.value) + ": "
                 + describe(err));
    x.kind = k::queue_partition;
    x.topic = pk->topic;
    x.partition = pk->partition;
    x.has_position = false;
    x.changes.upserts.push_back(std::move(r));
    return std::optional<consumer_state_record>{std::move(x)};
  }
  auto d = decode_consumer_state_value(*value);
  if (!d)
    return std::move(d.error());
  d->group = std::move(x.group);
  if (d->kind == k::commit && d->offsets.size() != 1)
    return bad("format-2 commit record with " + std::to_string(d->offsets.size())
               + " offsets");
  // The key names what the value sets: they must agree.
  bool agrees = true;
  switch (pk->tag) {
    case 'c':
      agrees = d->kind == k::commit && d->offsets[0].topic == pk->topic
               && d->offsets[0].partition == pk->partition;
      break;
    case 'g':
      agrees = d->kind == k::queue_group;
      break;
    case 'G':
      agrees = d->kind == k::queue_group_delete;
      break;
    case 'S':
      agrees = d->kind == k::stream_group_delete;
      break;
    case 'p': case 'F':
      agrees = d->kind == k::queue_partition;
      break;
    case 'd':
      agrees = d->kind == k::queue_dlq_producer;
      break;
    case 'E':
      agrees = d->kind == k::queue_partition_erase;
      break;
    case 'm':
      agrees = d->kind == k::dlq_mark && d->off == pk->off;
      break;
    case 'P':
      agrees = d->kind == k::dlq_producer && d->target_topic == pk->target_topic
               && d->target_partition == pk->target_partition;
      break;
    case 'B':
      agrees = d->kind == k::dlq_erase_below;
      break;
    case 'T':
      agrees = d->kind == k::dlq_topic_erase;
      break;
    default:
      break;
  }
  if (agrees && !pk->dlq && pk->tag != 'c' && !pk->topic.empty())
    agrees = d->topic == pk->topic && d->partition == pk->partition;
  if (agrees && pk->dlq)
    agrees = d->topic == pk->name && (pk->tag == 'T' || d->partition == pk->partition);
  if (!agrees)
    return bad("a record whose value does not match its key");
  if (d->kind == k::queue_partition) {
    if (!d->changes.upserts.empty() || !d->changes.erased.empty())
      return bad("format-2 queue position record with rows");
    if (d->changes.full != (pk->tag == 'F'))
      return bad("queue position record whose full flag does not match its key");
  }
  return std::optional<consumer_state_record>{std::move(*d)};
}

/// Joins `e` (decoded from a format-2 record) into `last` (the previous
/// logical record of the same batch) when one write produced both.
bool join(consumer_state_record& last, consumer_state_record& e) {
  if (last.group != e.group)
    return false;
  if (last.kind == k::commit && e.kind == k::commit && last.erase == e.erase) {
    for (auto& o : e.offsets)
      last.offsets.push_back(std::move(o));
    return true;
  }
  if (last.kind == k::queue_group_delete && e.kind == k::queue_group
      && e.erase)
    return true;
  if (last.kind == k::queue_partition_erase && e.kind == k::queue_dlq_producer
      && e.erase && e.topic == last.topic && e.partition == last.partition)
    return true;
  if (last.kind == k::queue_partition && e.kind == k::queue_partition
      && !e.has_position && e.topic == last.topic
      && e.partition == last.partition) {
    auto& ch = last.changes;
    for (auto off : e.changes.erased) {
      std::erase_if(ch.upserts, [&](const queue_record& r) { return r.off == off; });
      if (std::find(ch.erased.begin(), ch.erased.end(), off) == ch.erased.end())
        ch.erased.push_back(off);
    }
    for (auto& r : e.changes.upserts) {
      std::erase(ch.erased, r.off);
      std::erase_if(ch.upserts, [&](const queue_record& u) { return u.off == r.off; });
      ch.upserts.push_back(std::move(r));
    }
    return true;
  }
  return false;
}

/// Decodes the records of one batch into `out`; counts them in `read`.
caf::error decode_batch_records(std::string_view one,
                                std::vector<consumer_state_record>& out,
                                size_t& read) {
  auto b = decode_batch(one, std::numeric_limits<int32_t>::max());
  if (!b)
    return std::move(b.error());
  size_t first = out.size();
  bool last_format2 = false;
  for (auto& r : b->records) {
    ++read;
    if (!r.key)
      continue;
    bool format2 = false;
    auto e = decode_entry(*r.key, r.value, format2);
    if (!e)
      return std::move(e.error());
    if (!*e)
      continue;
    if (format2 && last_format2 && out.size() > first
        && join(out.back(), **e))
      continue;
    out.push_back(std::move(**e));
    last_format2 = format2;
  }
  return caf::none;
}

/// Calls f(batch bytes, header) for every non-control batch of `batches`.
template <class F>
caf::error for_each_batch(std::string_view batches, F f) {
  while (!batches.empty()) {
    auto h = parse_batch_header(batches, std::numeric_limits<int32_t>::max());
    if (!h)
      return std::move(h.error());
    auto one = batches.substr(0, h->total_size());
    batches.remove_prefix(h->total_size());
    if (h->control())
      continue;
    if (auto err = f(one))
      return err;
  }
  return caf::none;
}

} // namespace

caf::expected<std::string>
make_commit_batch(const std::string& group,
                  const std::vector<committed_offset>& offsets,
                  int64_t now_ms) {
  consumer_state_record x;
  x.kind = k::commit;
  x.group = group;
  x.offsets = offsets;
  return make_consumer_state_batch({x}, now_ms);
}

caf::expected<std::string>
make_consumer_state_batch(const std::vector<consumer_state_record>& records,
                          int64_t now_ms) {
  if (records.empty())
    return make_error(ec::invalid_argument,
                      "consumer state batch without records");
  std::vector<log_entry> entries;
  for (const auto& x : records)
    if (auto err = entries_of(x, entries))
      return err;
  if (entries.empty())
    return make_error(ec::invalid_argument,
                      "consumer state batch without records");
  std::vector<record> rs;
  rs.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    record r;
    r.offset_delta = static_cast<int32_t>(i);
    r.timestamp = now_ms;
    r.key = std::move(entries[i].key);
    r.value = std::move(entries[i].value);
    rs.push_back(std::move(r));
  }
  return encode_batch(batch_meta{}, rs);
}

caf::expected<std::vector<consumer_state_record>>
decode_consumer_state_batches(std::string_view batches) {
  std::vector<consumer_state_record> out;
  size_t read = 0;
  if (auto err = for_each_batch(batches, [&](std::string_view one) {
        return decode_batch_records(one, out, read);
      }))
    return err;
  return out;
}

caf::error apply_consumer_state_record(offset_store& offsets,
                                       metadata_store& store,
                                       const consumer_state_record& x) {
  using k = consumer_state_kind;
  namespace qf = queue_state_format;
  queue_state_store queues{store};
  switch (x.kind) {
    case k::commit: {
      if (x.erase) {
        for (const auto& o : x.offsets)
          if (auto err = offsets.erase(x.group, o.topic, o.partition))
            return err;
        return caf::none;
      }
      std::optional<group_record> rec;
      auto known = offsets.get_group(x.group);
      if (known && !*known)
        rec = group_record{x.group, 0, "stream", ""};
      return offsets.commit(x.group, x.offsets, rec);
    }
    case k::queue_group:
      if (x.group.empty() || x.group.find('\0') != std::string::npos)
        return bad("queue group config with a bad group name");
      if (x.erase)
        return store.erase(qf::groups_db, x.group);
      return store.put(qf::groups_db, x.group, x.row);
    case k::stream_group_delete:
      return offsets.delete_group(x.group);
    case k::queue_row:
      break;
    case k::queue_group_delete:
      return queues.erase_group_all(x.group);
    case k::queue_partition:
      return queues.save(x.group, x.topic, x.partition, x.changes,
                         x.has_position);
    case k::queue_dlq_producer: {
      // Checks the names like the state rows do.
      if (auto p = qf::encode_partition_prefix(x.group, x.topic, x.partition);
          !p)
        return std::move(p.error());
      if (x.erase)
        return store.erase(qf::producers_db,
                           qf::producer_key(x.group, x.topic, x.partition));
      return store.put(qf::producers_db,
                       qf::producer_key(x.group, x.topic, x.partition), x.row);
    }
    case k::queue_partition_erase:
      return queues.erase_partition_all(x.group, x.topic, x.partition);
    case k::dlq_mark: {
      // dlq_store checks the names, partitions and offsets.
      dlq_store dlqs{store};
      return dlqs.mark(x.topic, x.partition, x.off, x.mark);
    }
    case k::dlq_producer: {
      dlq_store dlqs{store};
      return dlqs.put_producer(x.topic, x.partition, x.target_topic,
                               x.target_partition, x.producer);
    }
    case k::dlq_erase_below: {
      dlq_store dlqs{store};
      if (auto n = dlqs.erase_below(x.topic, x.partition, x.off); !n)
        return std::move(n.error());
      return caf::none;
    }
    case k::dlq_topic_erase: {
      dlq_store dlqs{store};
      return dlqs.erase_topic(x.topic);
    }
  }
  return make_error(ec::unknown_record_kind,
                    "consumer state record of kind "
                      + std::to_string(static_cast<int>(x.kind)));
}

caf::expected<size_t> apply_consumer_state(offset_store& offsets,
                                           metadata_store& store,
                                           std::string_view batches) {
  // All of it in one LMDB write group: one fsync instead of one per record
  // (a replica's replay at start applies its log in 1 MiB reads). The
  // group opens no sub-database, so every one an apply may write is opened
  // first.
  auto& env = store.environment();
  for (auto db : {offset_format::offsets_db, offset_format::groups_db,
                  queue_state_format::queue_db, queue_state_format::groups_db,
                  queue_state_format::producers_db, dlq_store_format::marks_db,
                  dlq_store_format::producers_db})
    if (auto d = env.open_db(db, true); !d)
      return std::move(d.error());
  size_t read = 0;
  caf::error failed;
  auto err = env.write_group([&]() -> caf::error {
    read = 0;
    failed = caf::none;
    std::vector<consumer_state_record> recs;
    // What came before a failure stays applied: the group commits it.
    failed = for_each_batch(batches, [&](std::string_view one) {
      recs.clear();
      if (auto err = decode_batch_records(one, recs, read))
        return err;
      for (const auto& x : recs)
        if (auto err = apply_consumer_state_record(offsets, store, x))
          return err;
      return caf::error{};
    });
    return caf::none;
  });
  if (err)
    return err;
  if (failed)
    return failed;
  return read;
}

} // namespace ferry
