#include "broker/partitioner.hpp"

namespace ferry {

int32_t murmur2(std::string_view data) {
  // Kafka's Java code works on signed ints with >>> (logical shift); the same
  // arithmetic on uint32_t gives the same bits without signed overflow.
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const auto length = static_cast<uint32_t>(data.size());
  constexpr uint32_t seed = 0x9747b28c;
  constexpr uint32_t m = 0x5bd1e995;
  constexpr int r = 24;
  uint32_t h = seed ^ length;
  const uint32_t length4 = length / 4;
  for (uint32_t i = 0; i < length4; ++i) {
    const uint32_t i4 = i * 4;
    uint32_t k = static_cast<uint32_t>(p[i4]) | (static_cast<uint32_t>(p[i4 + 1]) << 8)
                 | (static_cast<uint32_t>(p[i4 + 2]) << 16)
                 | (static_cast<uint32_t>(p[i4 + 3]) << 24);
    k *= m;
    k ^= k >> r;
    k *= m;
    h *= m;
    h ^= k;
  }
  const uint32_t tail = length & ~3u;
  switch (length % 4) {
    case 3:
      h ^= static_cast<uint32_t>(p[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<uint32_t>(p[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= static_cast<uint32_t>(p[tail]);
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int32_t>(h);
}

int32_t partition_for_key(std::string_view key, int32_t partitions) {
  return to_positive(murmur2(key)) % partitions;
}

partitioner::partitioner(uint64_t seed) : rng_(seed) {
  // nop
}

int32_t partitioner::choose(const std::string& topic, int32_t partitions,
                            int32_t explicit_partition, const std::string* key) {
  if (explicit_partition >= 0)
    return explicit_partition;
  if (key != nullptr)
    return partition_for_key(*key, partitions);
  return sticky(topic, partitions);
}

int32_t partitioner::sticky(const std::string& topic, int32_t partitions) {
  auto i = sticky_.find(topic);
  if (i != sticky_.end() && i->second < partitions)
    return i->second;
  std::uniform_int_distribution<int32_t> pick{0, partitions - 1};
  auto p = pick(rng_);
  sticky_[topic] = p;
  return p;
}

void partitioner::batch_closed(const std::string& topic, int32_t partition,
                               int32_t partitions) {
  auto i = sticky_.find(topic);
  if (i == sticky_.end() || i->second != partition)
    return;
  if (partitions <= 1) {
    i->second = 0;
    return;
  }
  // Any partition but the current one, uniformly.
  std::uniform_int_distribution<int32_t> pick{0, partitions - 2};
  auto p = pick(rng_);
  i->second = p >= partition ? p + 1 : p;
}

void partitioner::reset(const std::string& topic) {
  sticky_.erase(topic);
}

} // namespace ferry
