#pragma once
// cached_file_system: the real (POSIX) file system with a bound on the file
// descriptors its files hold: an LRU cache of open descriptors.
//
// A node with 10,000 busy partition replicas has at least 30,000 segment
// files (.log, .index, .timeindex of every active segment that has index
// entries, and every closed segment's .log), more than the usual
// open-file limit. Here a file_handle
// is a path plus a descriptor that may be closed: at most `max_open` files
// have a descriptor at once. Opening one more closes the least recently
// used idle one; a closed handle reopens itself (O_RDWR, never creating)
// on its next read, append, truncate or sync. A handle is "in use" (pinned)
// only for the duration of one call, so eviction never races a call: an
// fdatasync running on a sync_pool thread keeps its descriptor until it
// returns.
//
// Durability across eviction: closing a descriptor keeps the file's dirty
// pages in the page cache; an fdatasync through a reopened descriptor
// writes back every dirty page of the inode, whichever descriptor wrote
// it. A write-back error that happened while no descriptor was open is
// still reported to the next fdatasync (Linux reports an error nobody has
// seen yet to a new opener, since 4.16). A sync of a handle whose file was
// deleted meanwhile (a topic deleted while a sync was queued) succeeds:
// there is nothing left to make durable.
//
// When every cached descriptor is in use (max_open calls at once), or the
// process limit (RLIMIT_NOFILE) is hit by descriptors outside the cache
// (sockets), an open fails with ec::io_error "too many open files", naming
// both limits. Directory operations are posix_file_system's.
//
// Thread-safe: handles may be used from different threads (one call per
// handle at a time, as before); eviction takes the cache's mutex.

#include "broker/file_system.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ferry {

struct fd_cache_stats {
  /// Descriptors held now, and the bound.
  size_t open = 0;
  size_t max_open = 0;
  /// Handles alive (open or not).
  size_t handles = 0;
  /// open(2) calls: first opens and reopens.
  uint64_t opens = 0;
  uint64_t reopens = 0;
  /// Descriptors closed to make room.
  uint64_t evictions = 0;
};

class cached_file_system final : public file_system {
public:
  /// @param max_open at least 1.
  explicit cached_file_system(size_t max_open);
  ~cached_file_system() override;

  /// The bound for a process whose open-file limit is `rlimit`: what is
  /// left after `reserve` descriptors for sockets, LMDB and logs, and at
  /// most three quarters of the limit (at least 64).
  static size_t default_max_open(uint64_t rlimit, size_t reserve = 1024);

  fd_cache_stats stats() const;

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

  struct cache;

private:
  std::shared_ptr<cache> cache_;
  posix_file_system dirs_;
};

/// The soft RLIMIT_NOFILE of this process after raising it to the hard
/// limit (what a server should do at start); 0 if it cannot be read.
uint64_t raise_open_file_limit();

} // namespace ferry
