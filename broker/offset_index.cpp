#include "broker/offset_index.hpp"

#include "broker/big_endian.hpp"
#include "broker/file_system.hpp"

#include <algorithm>
#include <string>

namespace ferry {

offset_index::offset_index(offset base) : base_(base) {
}

offset_index::~offset_index() = default;
offset_index::offset_index(offset_index&&) noexcept = default;
offset_index& offset_index::operator=(offset_index&&) noexcept = default;

std::vector<offset_index_entry> offset_index::decode(std::string_view bytes) {
  std::vector<offset_index_entry> result;
  result.reserve(bytes.size() / entry_size);
  for (size_t i = 0; i + entry_size <= bytes.size(); i += entry_size)
    result.push_back({be::load<uint32_t>(bytes.data() + i), be::load<uint32_t>(bytes.data() + i + 4)});
  return result;
}

size_t offset_index::first_invalid(const std::vector<offset_index_entry>& entries,
                                   uint64_t log_size, uint64_t offset_span) {
  for (size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    if (e.position == 0 || e.position >= log_size || e.relative_offset >= offset_span)
      return i;
    if (i > 0
        && (e.relative_offset <= entries[i - 1].relative_offset
            || e.position <= entries[i - 1].position))
      return i;
  }
  return entries.size();
}

void offset_index::assign(std::vector<offset_index_entry> entries, size_t persisted) {
  entries_ = std::move(entries);
  persisted_ = std::min(persisted, entries_.size());
}

void offset_index::attach(std::unique_ptr<file_handle> file) {
  file_ = std::move(file);
}

std::unique_ptr<file_handle> offset_index::detach() {
  return std::move(file_);
}

void offset_index::append(offset_index_entry e) {
  entries_.push_back(e);
}

std::optional<offset_index_entry> offset_index::lookup(offset target) const {
  if (target < base_)
    return std::nullopt;
  auto rel = target - base_;
  if (rel > int64_t{UINT32_MAX})
    rel = UINT32_MAX;
  auto it = std::upper_bound(entries_.begin(), entries_.end(),
                             static_cast<uint32_t>(rel),
                             [](uint32_t r, const offset_index_entry& e) {
                               return r < e.relative_offset;
                             });
  if (it == entries_.begin())
    return std::nullopt;
  return *std::prev(it);
}

caf::error offset_index::truncate(size_t n) {
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

caf::error offset_index::write_pending() {
  if (!file_ || persisted_ >= entries_.size())
    return caf::none;
  std::string buf((entries_.size() - persisted_) * entry_size, '\0');
  char* p = buf.data();
  for (size_t i = persisted_; i < entries_.size(); ++i, p += entry_size) {
    be::store<uint32_t>(p, entries_[i].relative_offset);
    be::store<uint32_t>(p + 4, entries_[i].position);
  }
  if (auto err = file_->append(buf)) {
    // Best effort: a partial entry would only cost a rebuild at recovery.
    (void) file_->truncate(persisted_ * entry_size);
    return err;
  }
  persisted_ = entries_.size();
  return caf::none;
}

caf::error offset_index::sync() {
  return file_ ? file_->sync() : caf::none;
}

caf::error offset_index::rewrite() {
  if (!file_)
    return caf::none;
  if (auto err = file_->truncate(0))
    return err;
  persisted_ = 0;
  return write_pending();
}

} // namespace ferry
