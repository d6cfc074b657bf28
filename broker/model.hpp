#pragma once
// Strong types for the identifiers and positions Ferry passes around, so an
// offset cannot be handed where a partition id or an epoch is expected.

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace ferry {

/// A value of type T that only converts explicitly. Tag makes each use distinct.
template <class Tag, class T>
struct strong {
  using value_type = T;
  T value{};

  constexpr strong() = default;
  constexpr explicit strong(T v) : value(v) {}

  constexpr auto operator<=>(const strong&) const = default;

  friend std::ostream& operator<<(std::ostream& os, const strong& x) {
    return os << x.value;
  }
};

/// Position of a record in a partition log. Offsets are dense and start at 0.
struct offset : strong<struct offset_tag, int64_t> {
  using strong::strong;
  constexpr offset operator+(int64_t n) const { return offset{value + n}; }
  constexpr offset operator-(int64_t n) const { return offset{value - n}; }
  constexpr int64_t operator-(offset o) const { return value - o.value; }
  constexpr offset& operator++() { ++value; return *this; }
};

/// Index of a partition within its topic.
struct partition_id : strong<struct partition_id_tag, int32_t> {
  using strong::strong;
};

/// Leader epoch of a partition: grows each time a new leader is elected.
struct leader_epoch : strong<struct leader_epoch_tag, int32_t> {
  using strong::strong;
};

/// Idempotent producer id; -1 means "not idempotent".
struct producer_id : strong<struct producer_id_tag, int64_t> {
  using strong::strong;
};

/// Milliseconds since the Unix epoch, as Kafka timestamps are.
using timestamp_ms = int64_t;

} // namespace ferry

template <>
struct std::hash<ferry::offset> {
  size_t operator()(ferry::offset o) const noexcept {
    return std::hash<int64_t>{}(o.value);
  }
};
