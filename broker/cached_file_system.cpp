#include "broker/cached_file_system.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <string>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ferry {

namespace {

class cached_handle;

uint64_t soft_nofile_limit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX
                                      : static_cast<uint64_t>(rl.rlim_cur);
}

} // namespace

struct cached_file_system::cache {
  std::mutex mtx;
  size_t max_open = 1;
  // Handles holding a descriptor, most recently used first.
  std::list<cached_handle*> lru;
  size_t open = 0;
  size_t handles = 0;
  uint64_t opens = 0;
  uint64_t reopens = 0;
  uint64_t evictions = 0;

  /// Closes the least recently used idle descriptor. False: none is idle.
  /// @pre mtx held.
  bool evict_one();

  /// Closes idle descriptors until one more fits. @pre mtx held.
  bool make_room() {
    while (open >= max_open)
      if (!evict_one())
        return false;
    return true;
  }

  caf::error too_many(const std::filesystem::path& p, bool process_limit) const {
    auto limit = soft_nofile_limit();
    return make_error(
      ec::io_error,
      "open of " + p.string() + ": too many open files ("
        + (process_limit ? std::string{"the process limit RLIMIT_NOFILE"}
                         : std::string{"every one of the node's"})
        + (process_limit ? " of " + std::to_string(limit)
                         : " " + std::to_string(max_open)
                             + " cached segment files")
        + " is in use): raise `ulimit -n` (now "
        + std::to_string(limit) + ") or lower ferryd --max-open-files");
  }

  /// open(2) with room made first; on EMFILE/ENFILE one more idle
  /// descriptor is closed and the open retried once. @pre mtx held.
  caf::expected<int> open_fd(const std::filesystem::path& p, int flags);
};

namespace {

using posix_io::errno_error;

class cached_handle final : public file_handle {
public:
  using cache = cached_file_system::cache;

  cached_handle(std::shared_ptr<cache> c, std::filesystem::path p, int fd,
                uint64_t size, uint64_t dev)
    : cache_(std::move(c)), path_(std::move(p)), size_(size), dev_(dev),
      fd_(fd) {
    // The caller holds the mutex and counted the descriptor.
    cache_->lru.push_front(this);
    pos_ = cache_->lru.begin();
    ++cache_->handles;
  }

  ~cached_handle() override {
    std::lock_guard<std::mutex> guard{cache_->mtx};
    if (fd_ >= 0) {
      ::close(fd_);
      cache_->lru.erase(pos_);
      --cache_->open;
    }
    --cache_->handles;
  }

  caf::error append(std::string_view data) override {
    pin p{*this};
    if (!p.fd)
      return std::move(p.fd.error());
    return posix_io::append(*p.fd, size_, data, path_);
  }

  caf::expected<size_t> read_at(uint64_t pos, std::span<char> out) const override {
    pin p{*this};
    if (!p.fd)
      return std::move(p.fd.error());
    return posix_io::read_at(*p.fd, pos, out, path_);
  }

  caf::error sync() override {
    pin p{*this};
    if (!p.fd)
      // Deleted meanwhile: nothing left to make durable.
      return is(p.fd.error(), ec::not_found) ? caf::none
                                             : std::move(p.fd.error());
    return posix_io::fdatasync(*p.fd, path_);
  }

  caf::error sync_file_system() override {
    pin p{*this};
    if (!p.fd)
      return std::move(p.fd.error()); // not_found: sync_pool tries another
    return posix_io::syncfs(*p.fd, path_);
  }

  caf::error truncate(uint64_t size) override {
    pin p{*this};
    if (!p.fd)
      return std::move(p.fd.error());
    if (auto err = posix_io::truncate(*p.fd, size, path_))
      return err;
    size_ = size;
    return caf::none;
  }

  uint64_t size() const override {
    return size_;
  }

  const std::filesystem::path& path() const override {
    return path_;
  }

  std::optional<uint64_t> device() const override {
    return dev_;
  }

  // -- for the cache (mutex held) ----------------------------------------------

  bool idle() const {
    return pins_ == 0;
  }

  void close_fd() {
    ::close(fd_);
    fd_ = -1;
    cache_->lru.erase(pos_);
    --cache_->open;
  }

private:
  // Holds the descriptor open for one call.
  struct pin {
    explicit pin(const cached_handle& h) : h(h), fd(h.acquire()) {
    }
    ~pin() {
      if (fd)
        h.release();
    }
    const cached_handle& h;
    caf::expected<int> fd;
  };

  caf::expected<int> acquire() const {
    std::lock_guard<std::mutex> guard{cache_->mtx};
    if (fd_ < 0) {
      auto fd = cache_->open_fd(path_, O_RDWR | O_CLOEXEC);
      if (!fd)
        return fd;
      fd_ = *fd;
      ++cache_->reopens;
      cache_->lru.push_front(const_cast<cached_handle*>(this));
      pos_ = cache_->lru.begin();
    } else {
      cache_->lru.splice(cache_->lru.begin(), cache_->lru, pos_);
    }
    ++pins_;
    return fd_;
  }

  void release() const {
    std::lock_guard<std::mutex> guard{cache_->mtx};
    --pins_;
  }

  std::shared_ptr<cache> cache_;
  std::filesystem::path path_;
  uint64_t size_;
  uint64_t dev_;
  // Guarded by cache_->mtx.
  mutable int fd_;
  mutable int pins_ = 0;
  mutable std::list<cached_handle*>::iterator pos_;
};

} // namespace

bool cached_file_system::cache::evict_one() {
  for (auto i = lru.rbegin(); i != lru.rend(); ++i) {
    auto* h = *i;
    if (h->idle()) {
      h->close_fd();
      ++evictions;
      return true;
    }
  }
  return false;
}

caf::expected<int> cached_file_system::cache::open_fd(const std::filesystem::path& p,
                                                      int flags) {
  if (!make_room())
    return too_many(p, false);
  for (int attempt = 0;; ++attempt) {
    int fd;
    do {
      fd = ::open(p.c_str(), flags, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      ++open;
      ++opens;
      return fd;
    }
    if ((errno == EMFILE || errno == ENFILE)) {
      if (attempt == 0 && evict_one())
        continue;
      return too_many(p, true);
    }
    return errno_error(errno, "open of " + p.string());
  }
}

cached_file_system::cached_file_system(size_t max_open)
  : cache_(std::make_shared<cache>()) {
  cache_->max_open = std::max<size_t>(max_open, 1);
}

cached_file_system::~cached_file_system() = default;

size_t cached_file_system::default_max_open(uint64_t rlimit, size_t reserve) {
  if (rlimit <= reserve + 64)
    return 64;
  // Three quarters at most: a node stays well clear of the limit.
  auto bound = std::min(rlimit - reserve, rlimit / 4 * 3);
  return static_cast<size_t>(std::min<uint64_t>(bound, 1u << 30));
}

fd_cache_stats cached_file_system::stats() const {
  std::lock_guard<std::mutex> guard{cache_->mtx};
  fd_cache_stats s;
  s.open = cache_->open;
  s.max_open = cache_->max_open;
  s.handles = cache_->handles;
  s.opens = cache_->opens;
  s.reopens = cache_->reopens;
  s.evictions = cache_->evictions;
  return s;
}

caf::expected<std::unique_ptr<file_handle>>
cached_file_system::open(const std::filesystem::path& p, open_mode mode) {
  int flags = O_RDWR | O_CLOEXEC;
  if (mode != open_mode::existing)
    flags |= O_CREAT;
  if (mode == open_mode::create_truncate)
    flags |= O_TRUNC;
  std::lock_guard<std::mutex> guard{cache_->mtx};
  auto fd = cache_->open_fd(p, flags);
  if (!fd)
    return std::move(fd.error());
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    auto err = errno_error(errno, "stat of " + p.string());
    ::close(*fd);
    --cache_->open;
    return err;
  }
  return std::unique_ptr<file_handle>{
    new cached_handle(cache_, p, *fd, static_cast<uint64_t>(st.st_size),
                      static_cast<uint64_t>(st.st_dev))};
}

caf::error cached_file_system::rename(const std::filesystem::path& from,
                                      const std::filesystem::path& to) {
  return dirs_.rename(from, to);
}

caf::error cached_file_system::remove(const std::filesystem::path& p) {
  return dirs_.remove(p);
}

caf::expected<std::vector<std::string>>
cached_file_system::list_dir(const std::filesystem::path& dir) {
  return dirs_.list_dir(dir);
}

caf::expected<uint64_t>
cached_file_system::file_size(const std::filesystem::path& p) {
  return dirs_.file_size(p);
}

caf::error cached_file_system::create_dirs(const std::filesystem::path& dir) {
  return dirs_.create_dirs(dir);
}

caf::error cached_file_system::sync_dir(const std::filesystem::path& dir) {
  return dirs_.sync_dir(dir);
}

uint64_t raise_open_file_limit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  if (rl.rlim_cur != rl.rlim_max) {
    auto raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0)
      rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX
                                      : static_cast<uint64_t>(rl.rlim_cur);
}

} // namespace ferry
