#pragma once
// time_index: the sparse time index of one segment (<base>.timeindex).
//
// File format (FORMAT.md, "Segments and indexes"): a flat array of 12-byte
// entries, big-endian, no header:
//
//   timestamp        int64   largest batch max_timestamp seen so far
//   relative_offset  uint32  an offset minus the segment's base
//
// Meaning of an entry (T, r): every batch of the segment whose base offset is
// <= base + r has max_timestamp <= T. Timestamps are strictly increasing,
// relative offsets non-decreasing. The segment adds (running max, batch base)
// together with an offset-index entry when the running max grew, and when it
// is rolled (sealed) one last entry (segment max timestamp, last offset), so
// a closed segment's max timestamp is its time index's last entry.
//
// Finding the first record with timestamp >= ts: take the last entry with
// T < ts; no batch up to base + r can hold it, so scan batch headers from the
// batch containing base + r (segment start if there is no such entry) for
// the first batch with max_timestamp >= ts and decode it.
//
// Lifecycle: as offset_index: entries in a vector, lazy file appends with
// write_pending(), rebuildable from the log.

#include "broker/error.hpp"
#include "broker/model.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace ferry {

class file_handle;

/// One entry of a time index.
struct time_index_entry {
  timestamp_ms timestamp = 0;
  uint32_t relative_offset = 0;
  bool operator==(const time_index_entry&) const = default;
};

class time_index {
public:
  /// Bytes per entry in the file.
  static constexpr size_t entry_size = 12;

  explicit time_index(offset base = offset{0});
  ~time_index();
  time_index(time_index&&) noexcept;
  time_index& operator=(time_index&&) noexcept;

  /// Decodes file contents; a trailing partial entry is ignored.
  static std::vector<time_index_entry> decode(std::string_view bytes);

  /// Decodes one entry from entry_size bytes.
  static time_index_entry decode_one(const char* p);

  /// Index of the first entry that breaks the invariants (timestamps not
  /// strictly increasing, relative offsets decreasing or >= offset_span), or
  /// entries.size() if all are fine.
  static size_t first_invalid(const std::vector<time_index_entry>& entries,
                              uint64_t offset_span);

  offset base() const { return base_; }

  /// Replaces the entries; the first `persisted` of them are in the file.
  void assign(std::vector<time_index_entry> entries, size_t persisted);

  /// The file that write_pending() appends to, or nullptr for none.
  void attach(std::unique_ptr<file_handle> file);
  std::unique_ptr<file_handle> detach();
  bool attached() const { return file_ != nullptr; }

  /// Records (ts, rel) if ts is larger than the last entry's timestamp.
  /// @pre rel >= back().relative_offset
  void maybe_append(timestamp_ms ts, uint32_t rel);

  /// The last entry with timestamp < ts, or nullopt.
  std::optional<time_index_entry> lookup_before(timestamp_ms ts) const;

  offset offset_of(const time_index_entry& e) const {
    return base_ + static_cast<int64_t>(e.relative_offset);
  }

  const std::vector<time_index_entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const time_index_entry& back() const { return entries_.back(); }

  /// Keeps the first `n` entries; cuts the file too if it holds more.
  caf::error truncate(size_t n);

  /// Drops the entries with relative offset >= `rel_end`.
  caf::error truncate_from_offset(uint32_t rel_end);

  /// Appends the entries not yet in the file, with one write. On error the
  /// file is cut back to whole entries and the entries stay pending.
  caf::error write_pending();

  bool has_pending() const { return persisted_ < entries_.size(); }
  size_t pending() const { return entries_.size() - persisted_; }

  caf::error sync();

  /// Cuts the file to zero and writes every entry (after a rebuild).
  caf::error rewrite();

private:
  offset base_;
  std::vector<time_index_entry> entries_;
  size_t persisted_ = 0;
  std::unique_ptr<file_handle> file_;
};

} // namespace ferry
