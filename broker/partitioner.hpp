#pragma once
// Which partition a produced message goes to, exactly as Kafka's Java client
// decides: murmur2 of the key bytes for keyed messages (so a Kafka client and
// a Ferry client put the same key on the same partition), sticky partitioning
// for null keys, and an explicit partition when the caller names one.
// No actor code: the producer actor owns one `partitioner`.

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ferry {

/// Kafka's `Utils.murmur2`: MurmurHash2, seed 0x9747b28c, over the bytes of
/// `data`, returned as Java's signed int.
int32_t murmur2(std::string_view data);

/// Kafka's `Utils.toPositive`: clears the sign bit (not abs()).
constexpr int32_t to_positive(int32_t x) {
  return x & 0x7fffffff;
}

/// The partition Kafka's default partitioner picks for a non-null key:
/// `toPositive(murmur2(key)) % partitions`. @pre partitions > 0
int32_t partition_for_key(std::string_view key, int32_t partitions);

/// Chooses partitions for one producer. Keyed messages hash; null-key
/// messages stick to one partition per topic until the producer reports that
/// the batch it was filling there closed (full or linger expired), then move
/// to a different random partition (KIP-480). Not thread-safe: one owner.
class partitioner {
public:
  /// `seed` makes the sticky choices reproducible in tests.
  explicit partitioner(uint64_t seed = std::random_device{}());

  /// The partition for a message. `explicit_partition` >= 0 wins (the caller
  /// checks it against the partition count); else a key hashes; else the
  /// topic's sticky partition. @pre partitions > 0
  int32_t choose(const std::string& topic, int32_t partitions,
                 int32_t explicit_partition, const std::string* key);

  /// The sticky partition of a topic for null keys (picks one if none).
  int32_t sticky(const std::string& topic, int32_t partitions);

  /// The batch being filled on `partition` closed: if it was the topic's
  /// sticky partition, move to another one (different when partitions > 1).
  void batch_closed(const std::string& topic, int32_t partition,
                    int32_t partitions);

  /// Forgets the sticky choice of a topic (e.g. its partition count changed).
  void reset(const std::string& topic);

private:
  std::unordered_map<std::string, int32_t> sticky_;
  std::mt19937_64 rng_;
};

} // namespace ferry
