#include "broker/time_index.hpp"

#include "broker/big_endian.hpp"
#include "broker/file_system.hpp"

#include <algorithm>
#include <string>

namespace ferry {

time_index::time_index(offset base) : base_(base) {
}

time_index::~time_index() = default;
time_index::time_index(time_index&&) noexcept = default;
time_index& time_index::operator=(time_index&&) noexcept = default;

time_index_entry time_index::decode_one(const char* p) {
  return {static_cast<timestamp_ms>(be::load<uint64_t>(p)), be::load<uint32_t>(p + 8)};
}

std::vector<time_index_entry> time_index::decode(std::string_view bytes) {
  std::vector<time_index_entry> result;
  result.reserve(bytes.size() / entry_size);
  for (size_t i = 0; i + entry_size <= bytes.size(); i += entry_size)
    result.push_back(decode_one(bytes.data() + i));
  return result;
}

size_t time_index::first_invalid(const std::vector<time_index_entry>& entries,
                                 uint64_t offset_span) {
  for (size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    if (e.relative_offset >= offset_span)
      return i;
    if (i > 0
        && (e.timestamp <= entries[i - 1].timestamp
            || e.relative_offset < entries[i - 1].relative_offset))
      return i;
  }
  return entries.size();
}

void time_index::assign(std::vector<time_index_entry> entries, size_t persisted) {
  entries_ = std::move(entries);
  persisted_ = std::min(persisted, entries_.size());
}

void time_index::attach(std::unique_ptr<file_handle> file) {
  file_ = std::move(file);
}

std::unique_ptr<file_handle> time_index::detach() {
  return std::move(file_);
}

void time_index::maybe_append(timestamp_ms ts, uint32_t rel) {
  if (entries_.empty() || ts > entries_.back().timestamp)
    entries_.push_back({ts, rel});
}

std::optional<time_index_entry> time_index::lookup_before(timestamp_ms ts) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), ts,
                             [](const time_index_entry& e, timestamp_ms t) {
                               return e.timestamp < t;
                             });
  if (it == entries_.begin())
    return std::nullopt;
  return *std::prev(it);
}

caf::error time_index::truncate(size_t n) {
  if (n >= entries_.size())
    return caf::none;
  entries_.resize(n);
  if (persisted_ > n) {
    persisted_ = n;
    if (file_)
      return file_->truncate(n * entry_size);
  }
  return caf::none;
}

caf::error time_index::truncate_from_offset(uint32_t rel_end) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const time_index_entry& e) {
                           return e.relative_offset >= rel_end;
                         });
  return truncate(static_cast<size_t>(it - entries_.begin()));
}

caf::error time_index::write_pending() {
  if (!file_ || persisted_ >= entries_.size())
    return caf::none;
  std::string buf((entries_.size() - persisted_) * entry_size, '\0');
  char* p = buf.data();
  for (size_t i = persisted_; i < entries_.size(); ++i, p += entry_size) {
    be::store<uint64_t>(p, static_cast<uint64_t>(entries_[i].timestamp));
    be::store<uint32_t>(p + 8, entries_[i].relative_offset);
  }
  if (auto err = file_->append(buf)) {
    (void) file_->truncate(persisted_ * entry_size);
    return err;
  }
  persisted_ = entries_.size();
  return caf::none;
}

caf::error time_index::sync() {
  return file_ ? file_->sync() : caf::none;
}

caf::error time_index::rewrite() {
  if (!file_)
    return caf::none;
  if (auto err = file_->truncate(0))
    return err;
  persisted_ = 0;
  return write_pending();
}

} // namespace ferry
