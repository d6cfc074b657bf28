#pragma once
// file_system: the file layer under the partition log. Every byte a log reads
// or writes goes through it, so tests can swap in fault_injecting_file_system
// and watch a full disk or a failing fdatasync without a real device.
//
// Three classes:
// - file_handle: one open file. Writes only ever append at its end (a log is
//   append-only; recovery and truncation cut it with truncate()); reads are
//   positional (pread), so reading never moves the append position.
// - posix_file_system: the real one. ENOSPC/EDQUOT become ec::disk_full,
//   ENOENT ec::not_found, everything else ec::io_error with the errno text.
//   Short writes and EINTR are retried.
// - fault_injecting_file_system: wraps another file_system and fails writes
//   (after N more bytes, writing the first part as a real disk does), syncs
//   and file creation on demand; counts writes and syncs.
//
// Concurrency: none. A file_system may be shared by several logs only if
// their owners do not call it concurrently (posix_file_system is stateless
// and may be shared freely).

#include "broker/error.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

/// How file_system::open treats a missing or existing file. Files are always
/// opened for reading and writing.
enum class open_mode : uint8_t {
  /// The file must exist (ec::not_found otherwise).
  existing,
  /// Create the file if missing; keep its contents if present.
  create,
  /// Create the file if missing and cut it to zero bytes.
  create_truncate,
};

/// One open file. Closed when destroyed. Not copyable.
class file_handle {
public:
  virtual ~file_handle() = default;

  /// Appends `data` at the end of the file with as many write calls as the
  /// kernel needs (one per posix_io::max_write_bytes, normally). On error
  /// some prefix of `data` may have reached the file: size() then tells the
  /// real end, and the caller decides whether to cut it back.
  virtual caf::error append(std::string_view data) = 0;

  /// Reads up to out.size() bytes at `pos`; fewer only at the end of file.
  /// Returns the number of bytes read.
  virtual caf::expected<size_t> read_at(uint64_t pos, std::span<char> out) const = 0;

  /// fdatasync: data and the size are durable when this returns none.
  virtual caf::error sync() = 0;

  /// Cuts (or extends with zeros) the file to `size` bytes.
  virtual caf::error truncate(uint64_t size) = 0;

  /// Current size: where the next append lands.
  virtual uint64_t size() const = 0;

  virtual const std::filesystem::path& path() const = 0;

  /// The file system this file lives on (st_dev), for sync_pool's syncfs
  /// rounds; nullopt (the default, and every test layer) means "sync this
  /// file with sync() only".
  virtual std::optional<uint64_t> device() const { return std::nullopt; }

  /// syncfs(2) of the file system holding this file: every dirty page of
  /// every file on it is written back and the journal committed once. Only
  /// called when device() has a value.
  virtual caf::error sync_file_system() { return sync(); }
};

/// Directory and file operations. Paths are used as given.
class file_system {
public:
  virtual ~file_system() = default;

  virtual caf::expected<std::unique_ptr<file_handle>>
  open(const std::filesystem::path& p, open_mode mode) = 0;

  virtual caf::error rename(const std::filesystem::path& from,
                            const std::filesystem::path& to) = 0;

  /// Removes a file. A missing file is not an error.
  virtual caf::error remove(const std::filesystem::path& p) = 0;

  /// Names (not paths) of the directory's entries, unsorted, without . and ..
  virtual caf::expected<std::vector<std::string>>
  list_dir(const std::filesystem::path& dir) = 0;

  /// Size of a file; ec::not_found if it does not exist.
  virtual caf::expected<uint64_t> file_size(const std::filesystem::path& p) = 0;

  /// Creates a directory and its parents (existing ones are fine).
  virtual caf::error create_dirs(const std::filesystem::path& dir) = 0;

  /// fsync of a directory: makes creations, renames and removals durable.
  virtual caf::error sync_dir(const std::filesystem::path& dir) = 0;
};

/// The POSIX calls under posix_file_system and cached_file_system: EINTR
/// and short writes retried, errno mapped (errno_error: ENOSPC/EDQUOT are
/// disk_full, ENOENT not_found, the rest io_error; EMFILE names the limit).
namespace posix_io {
caf::error errno_error(int err, const std::string& what);
/// The most bytes append() hands to one pwrite(2). Larger appends (a node
/// journal round carries several MiB under load) go in pieces of this size.
/// Measured on this project's 2-core VM (Linux 6.18, ext4): appends of new
/// file bytes in pwrites of 2 MiB or more ran at 120-390 MB/s, spent in the
/// kernel's copy into new page-cache pages (probably large folios backed by
/// memory the host had not mapped yet); the same bytes in 256 KiB pwrites
/// ran at 5.5-6 GB/s. The node journal's single writer thread was capped at
/// ~250 MB/s by it (tests/bench/README.md, "Figures: pwrite size").
inline constexpr size_t max_write_bytes = 256 * 1024;
/// pwrite at `size` until all of `data` is written (in pieces of at most
/// max_write_bytes); `size` grows with it.
caf::error append(int fd, uint64_t& size, std::string_view data,
                  const std::filesystem::path& p);
caf::expected<size_t> read_at(int fd, uint64_t pos, std::span<char> out,
                              const std::filesystem::path& p);
caf::error fdatasync(int fd, const std::filesystem::path& p);
caf::error syncfs(int fd, const std::filesystem::path& p);
caf::error truncate(int fd, uint64_t size, const std::filesystem::path& p);
} // namespace posix_io

/// The real file system (POSIX calls).
class posix_file_system final : public file_system {
public:
  caf::expected<std::unique_ptr<file_handle>>
  open(const std::filesystem::path& p, open_mode mode) override;
  caf::error rename(const std::filesystem::path& from,
                    const std::filesystem::path& to) override;
  caf::error remove(const std::filesystem::path& p) override;
  caf::expected<std::vector<std::string>>
  list_dir(const std::filesystem::path& dir) override;
  caf::expected<uint64_t> file_size(const std::filesystem::path& p) override;
  caf::error create_dirs(const std::filesystem::path& dir) override;
  caf::error sync_dir(const std::filesystem::path& dir) override;
};

/// A process-wide posix_file_system (stateless, so sharing is fine).
file_system& default_file_system();

/// Wraps a file_system and injects failures, for tests. Faults apply to every
/// file opened through this object, from the moment they are set.
class fault_injecting_file_system final : public file_system {
public:
  /// @param base the real layer; must outlive this object and its files.
  explicit fault_injecting_file_system(file_system* base);

  /// Writes fail with ec::disk_full once `bytes` more bytes have been
  /// written (across all files). The write that crosses the limit writes its
  /// first part and then fails, as a real full disk does. nullopt: no limit.
  void set_space_left(std::optional<uint64_t> bytes) { space_left_ = bytes; }
  std::optional<uint64_t> space_left() const { return space_left_; }

  /// While on, fdatasync and directory syncs fail with ec::io_error (EIO).
  void fail_syncs(bool on) { fail_syncs_ = on; }

  /// While on, opening a file that does not exist yet fails with
  /// ec::disk_full (as creating a file on a full disk can).
  void fail_creates(bool on) { fail_creates_ = on; }

  /// While on, truncate() fails with ec::io_error.
  void fail_truncates(bool on) { fail_truncates_ = on; }

  /// While on, rename() fails with ec::io_error.
  void fail_renames(bool on) { fail_renames_ = on; }

  /// Successful and failed fdatasync calls on files (not directories).
  uint64_t syncs() const { return syncs_; }
  /// fdatasync calls on files whose name ends with `suffix` (".log").
  uint64_t syncs_of(std::string_view suffix) const;
  uint64_t dir_syncs() const { return dir_syncs_; }
  /// Append calls and bytes that reached the base layer.
  uint64_t writes() const { return writes_; }
  uint64_t bytes_written() const { return bytes_written_; }
  void reset_counters();

  caf::expected<std::unique_ptr<file_handle>>
  open(const std::filesystem::path& p, open_mode mode) override;
  caf::error rename(const std::filesystem::path& from,
                    const std::filesystem::path& to) override;
  caf::error remove(const std::filesystem::path& p) override;
  caf::expected<std::vector<std::string>>
  list_dir(const std::filesystem::path& dir) override;
  caf::expected<uint64_t> file_size(const std::filesystem::path& p) override;
  caf::error create_dirs(const std::filesystem::path& dir) override;
  caf::error sync_dir(const std::filesystem::path& dir) override;

private:
  class handle;
  friend class handle;

  file_system* base_;
  std::optional<uint64_t> space_left_;
  bool fail_syncs_ = false;
  bool fail_creates_ = false;
  bool fail_truncates_ = false;
  bool fail_renames_ = false;
  uint64_t syncs_ = 0;
  uint64_t dir_syncs_ = 0;
  uint64_t writes_ = 0;
  uint64_t bytes_written_ = 0;
  std::map<std::string, uint64_t, std::less<>> syncs_by_name_;
};

} // namespace ferry
