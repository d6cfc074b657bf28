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
      break;
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

caf::expected<std::string>
make_commit_batch(const std::string& group,
                  const std::vector<committed_offset>& offsets,
                  int64_t now_ms) {
  record r;
  r.timestamp = now_ms;
  r.key = group;
  r.value = encode_offsets_value(offsets);
  return encode_batch(batch_meta{}, {r});
}

caf::expected<std::string>
make_consumer_state_batch(const std::vector<consumer_state_record>& records,
                          int64_t now_ms) {
  if (records.empty())
    return make_error(ec::invalid_argument,
                      "consumer state batch without records");
  std::vector<record> rs;
  rs.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    record r;
    r.offset_delta = static_cast<int32_t>(i);
    r.timestamp = now_ms;
    r.key = records[i].group;
    r.value = encode_consumer_state_value(records[i]);
    rs.push_back(std::move(r));
  }
  return encode_batch(batch_meta{}, rs);
}

caf::error apply_consumer_state_record(offset_store& offsets,
                                       metadata_store& store,
                                       const consumer_state_record& x) {
  using k = consumer_state_kind;
  namespace qf = queue_state_format;
  queue_state_store queues{store};
  switch (x.kind) {
    case k::commit: {
      std::optional<group_record> rec;
      auto known = offsets.get_group(x.group);
      if (known && !*known)
        rec = group_record{x.group, 0, "stream", ""};
      return offsets.commit(x.group, x.offsets, rec);
    }
    case k::queue_group:
      if (x.group.empty() || x.group.find('\0') != std::string::npos)
        return bad("queue group config with a bad group name");
      return store.put(qf::groups_db, x.group, x.row);
    case k::queue_group_delete:
      return queues.erase_group_all(x.group);
    case k::queue_partition:
      return queues.save(x.group, x.topic, x.partition, x.changes);
    case k::queue_dlq_producer: {
      // Checks the names like the state rows do.
      if (auto p = qf::encode_partition_prefix(x.group, x.topic, x.partition);
          !p)
        return std::move(p.error());
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
  size_t applied = 0;
  while (!batches.empty()) {
    auto h = parse_batch_header(batches, std::numeric_limits<int32_t>::max());
    if (!h)
      return std::move(h.error());
    auto one = batches.substr(0, h->total_size());
    batches.remove_prefix(h->total_size());
    if (h->control())
      continue;
    auto b = decode_batch(one, std::numeric_limits<int32_t>::max());
    if (!b)
      return std::move(b.error());
    for (auto& r : b->records) {
      if (!r.key || !r.value)
        continue;
      auto x = decode_consumer_state_value(*r.value);
      if (!x)
        return std::move(x.error());
      x->group = *r.key;
      if (auto err = apply_consumer_state_record(offsets, store, *x))
        return err;
      ++applied;
    }
  }
  return applied;
}

} // namespace ferry
