#pragma once
// offset_index: the sparse offset index of one segment (<base>.index).
//
// File format (FORMAT.md, "Segments and indexes"): a flat array of 8-byte
// entries, big-endian, no header:
//
//   relative_offset  uint32  a batch's base offset minus the segment's base
//   position         uint32  byte position of that batch in the .log file
//
// Entries are strictly increasing in both fields. The segment adds an entry
// for a batch when it starts at least index_interval_bytes after the batch of
// the previous entry (after position 0 for the first entry); position 0 is
// never indexed. To find offset o, take the last entry with
// base + relative_offset <= o (else position 0) and walk batch headers
// forward from there: at most about index_interval_bytes plus one batch.
//
// Lifecycle: the entries live in a vector; the file is written lazily.
// append() only records an entry, write_pending() appends the unwritten ones
// with one write call, sync() makes them durable. The file therefore lags the
// vector (never leads it). The index is a hint: recovery re-validates it
// against the log and rebuilds it from the log when it is damaged.
//
// Example, segment base 100, index_interval_bytes 4096, batches of 3000
// bytes holding 10 records each: batches start at positions 0, 3000, 6000,
// 9000, 12000 with base offsets 100, 110, 120, 130, 140. Entries:
// (20, 6000) [6000 - 0 >= 4096] and (40, 12000) [12000 - 6000 >= 4096].
// lookup(135) gives (20, 6000): scan 6000 (120..129), 9000 (130..139): found.

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

/// One entry of an offset index.
struct offset_index_entry {
  uint32_t relative_offset = 0;
  uint32_t position = 0;
  bool operator==(const offset_index_entry&) const = default;
};

class offset_index {
public:
  /// Bytes per entry in the file.
  static constexpr size_t entry_size = 8;

  explicit offset_index(offset base = offset{0});
  ~offset_index();
  offset_index(offset_index&&) noexcept;
  offset_index& operator=(offset_index&&) noexcept;

  /// Decodes file contents; a trailing partial entry is ignored.
  static std::vector<offset_index_entry> decode(std::string_view bytes);

  /// Index of the first entry that breaks the invariants (not strictly
  /// increasing, position >= log_size, relative offset >= offset_span), or
  /// entries.size() if all are fine.
  static size_t first_invalid(const std::vector<offset_index_entry>& entries,
                              uint64_t log_size, uint64_t offset_span);

  offset base() const { return base_; }

  /// Replaces the entries; the first `persisted` of them are in the file.
  void assign(std::vector<offset_index_entry> entries, size_t persisted);

  /// The file that write_pending() appends to, or nullptr for none. The
  /// file's size must equal persisted entries * entry_size.
  void attach(std::unique_ptr<file_handle> file);
  std::unique_ptr<file_handle> detach();
  bool attached() const { return file_ != nullptr; }

  /// Records an entry (kept in memory until write_pending()).
  /// @pre strictly greater than back() in both fields.
  void append(offset_index_entry e);

  /// The last entry at or below `target`, or nullopt.
  std::optional<offset_index_entry> lookup(offset target) const;

  /// Absolute offset of an entry.
  offset offset_of(const offset_index_entry& e) const {
    return base_ + static_cast<int64_t>(e.relative_offset);
  }

  const std::vector<offset_index_entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  const offset_index_entry& back() const { return entries_.back(); }

  /// Keeps the first `n` entries; cuts the file too if it holds more.
  caf::error truncate(size_t n);

  /// Appends the entries not yet in the file, with one write. On error the
  /// file is cut back to whole entries and the entries stay pending.
  caf::error write_pending();

  /// True if some entries are not in the file yet.
  bool has_pending() const { return persisted_ < entries_.size(); }
  size_t pending() const { return entries_.size() - persisted_; }

  /// fdatasync of the file (no-op when detached).
  caf::error sync();

  /// Cuts the file to zero and writes every entry (after a rebuild).
  caf::error rewrite();

private:
  offset base_;
  std::vector<offset_index_entry> entries_;
  size_t persisted_ = 0;
  std::unique_ptr<file_handle> file_;
};

} // namespace ferry
