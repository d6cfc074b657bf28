#include "broker/consumer_state.hpp"

#include "broker/error.hpp"
#include "broker/record_batch.hpp"

#include <cstring>
#include <limits>

namespace ferry {

namespace {

constexpr uint8_t value_version = 1;

template <class T>
void put_be(std::string& out, T x) {
  using U = std::make_unsigned_t<T>;
  auto u = static_cast<U>(x);
  for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

template <class T>
bool get_be(std::string_view& in, T& x) {
  if (in.size() < sizeof(T))
    return false;
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    u = static_cast<U>((u << 8) | static_cast<uint8_t>(in[i]));
  x = static_cast<T>(u);
  in.remove_prefix(sizeof(T));
  return true;
}

bool get_bytes(std::string_view& in, size_t n, std::string& out) {
  if (in.size() < n)
    return false;
  out.assign(in.data(), n);
  in.remove_prefix(n);
  return true;
}

} // namespace

std::string encode_offsets_value(const std::vector<committed_offset>& offsets) {
  std::string out;
  out.push_back(static_cast<char>(value_version));
  put_be(out, static_cast<uint32_t>(offsets.size()));
  for (auto& o : offsets) {
    put_be(out, static_cast<uint16_t>(o.topic.size()));
    out += o.topic;
    put_be(out, o.partition.value);
    put_be(out, o.committed.value);
    put_be(out, o.commit_timestamp);
    put_be(out, static_cast<uint32_t>(o.metadata.size()));
    out += o.metadata;
  }
  return out;
}

caf::expected<std::vector<committed_offset>>
decode_offsets_value(std::string_view in) {
  auto bad = [](const char* what) {
    return make_error(ec::corrupt_segment,
                      std::string{"consumer state record: "} + what);
  };
  if (in.empty() || static_cast<uint8_t>(in[0]) != value_version)
    return bad("unknown version");
  in.remove_prefix(1);
  uint32_t n = 0;
  if (!get_be(in, n))
    return bad("truncated count");
  std::vector<committed_offset> out;
  for (uint32_t i = 0; i < n; ++i) {
    committed_offset o;
    uint16_t topic_len = 0;
    uint32_t meta_len = 0;
    int32_t partition = 0;
    int64_t committed = 0;
    if (!get_be(in, topic_len) || !get_bytes(in, topic_len, o.topic)
        || !get_be(in, partition) || !get_be(in, committed)
        || !get_be(in, o.commit_timestamp) || !get_be(in, meta_len)
        || !get_bytes(in, meta_len, o.metadata))
      return bad("truncated offset");
    o.partition = partition_id{partition};
    o.committed = offset{committed};
    out.push_back(std::move(o));
  }
  if (!in.empty())
    return bad("trailing bytes");
  return out;
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

caf::expected<size_t> apply_consumer_state(offset_store& store,
                                           std::string_view batches) {
  size_t applied = 0;
  while (!batches.empty()) {
    auto h = parse_batch_header(batches, std::numeric_limits<int32_t>::max());
    if (!h)
      return std::move(h.error());
    auto one = batches.substr(0, h->total_size());
    batches.remove_prefix(h->total_size());
    auto b = decode_batch(one, std::numeric_limits<int32_t>::max());
    if (!b)
      return std::move(b.error());
    for (auto& r : b->records) {
      if (!r.key || !r.value)
        continue;
      auto offs = decode_offsets_value(*r.value);
      if (!offs)
        return std::move(offs.error());
      std::optional<group_record> rec;
      auto known = store.get_group(*r.key);
      if (known && !*known)
        rec = group_record{*r.key, 0, "stream", ""};
      if (auto err = store.commit(*r.key, *offs, rec))
        return err;
      ++applied;
    }
  }
  return applied;
}

} // namespace ferry
