#include "broker/node_journal.hpp"

#include "broker/big_endian.hpp"
#include "broker/crc32c.hpp"
#include "broker/file_system.hpp"
#include "broker/logging.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>

namespace ferry {

namespace {



// File: magic (8 bytes) then records. Record: length (u32, of what follows
// the crc), crc32c (u32, of what follows it), then the body: type (u8),
// path length (u16), path (relative to the root), argument (u64: position,
// size or 0), data (write records only).
constexpr std::string_view file_magic = "FRYJNL01";
constexpr size_t record_header = 8;
constexpr size_t body_fixed = 1 + 2 + 8;
/// A record longer than this is damage, not data (a batch is at most 8 MiB
/// plus slack).
constexpr uint32_t max_record = 64u << 20;
constexpr std::string_view file_suffix = ".journal";

enum : uint8_t {
  op_create = 1,
  op_write = 2,
  op_truncate = 3,
  op_remove = 4,
};

std::string file_name(uint64_t index) {
  auto s = std::to_string(index);
  return std::string(20 - std::min<size_t>(20, s.size()), '0') + s
         + std::string{file_suffix};
}

std::optional<uint64_t> parse_file_name(std::string_view name) {
  if (name.size() != 20 + file_suffix.size() || !name.ends_with(file_suffix))
    return std::nullopt;
  uint64_t v = 0;
  auto [p, e] = std::from_chars(name.data(), name.data() + 20, v);
  if (e != std::errc{} || p != name.data() + 20)
    return std::nullopt;
  return v;
}

caf::error io_error(const std::string& what) {
  return posix_io::errno_error(errno, what);
}

caf::error write_all(int fd, uint64_t pos, std::string_view data,
                     const std::filesystem::path& p) {
  uint64_t at = pos;
  return posix_io::append(fd, at, data, p);
}

caf::error sync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return io_error("open of " + dir.string());
  auto err = posix_io::fdatasync(fd, dir);
  ::close(fd);
  return err;
}

/// Reads a journal file front to back in chunks (a journal file can be
/// larger than the memory it is worth holding at once).
class chunked_reader {
public:
  ~chunked_reader() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  caf::error open(const std::filesystem::path& p) {
    path_ = p;
    fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      return io_error("open of " + p.string());
    struct stat sb{};
    if (::fstat(fd_, &sb) != 0)
      return io_error("stat of " + p.string());
    size_ = static_cast<uint64_t>(sb.st_size);
    return caf::none;
  }

  uint64_t size() const { return size_; }
  uint64_t position() const { return base_ + at_; }

  /// The next `n` bytes (fewer at the end of the file); valid until the
  /// next call.
  caf::expected<std::string_view> take(size_t n) {
    if (buf_.size() - at_ < n) {
      buf_.erase(0, at_);
      base_ += at_;
      at_ = 0;
      while (buf_.size() < n && base_ + buf_.size() < size_) {
        auto want = std::max<size_t>(n - buf_.size(), chunk);
        want = static_cast<size_t>(
          std::min<uint64_t>(want, size_ - base_ - buf_.size()));
        auto old = buf_.size();
        buf_.resize(old + want);
        auto r = ::pread(fd_, buf_.data() + old, want,
                         static_cast<off_t>(base_ + old));
        if (r < 0 && errno == EINTR) {
          buf_.resize(old);
          continue;
        }
        if (r < 0)
          return io_error("read of " + path_.string());
        buf_.resize(old + static_cast<size_t>(r));
        if (r == 0)
          break;
      }
    }
    auto got = std::min(n, buf_.size() - at_);
    std::string_view out{buf_.data() + at_, got};
    at_ += got;
    return out;
  }

private:
  static constexpr size_t chunk = 8u << 20;
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t base_ = 0;
  size_t at_ = 0;
  std::string buf_;
};

/// Applies records to the files under a root, keeping files open between
/// records.
class applier {
public:
  applier(std::filesystem::path root, journal_replay_report& rep)
    : root_(std::move(root)), rep_(rep) {}
  ~applier() { close_all(); }

  caf::error apply(uint8_t type, std::string_view rel, uint64_t arg,
                   std::string_view data) {
    auto p = root_ / std::filesystem::path{std::string{rel}};
    switch (type) {
      case op_create: {
        close_one(p);
        std::error_code ec;
        std::filesystem::create_directories(p.parent_path(), ec);
        int fd = ::open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0)
          return io_error("journal replay: create of " + p.string());
        remember(p, fd);
        return caf::none;
      }
      case op_write: {
        int fd = get(p);
        if (fd < 0) {
          ++rep_.skipped;
          return caf::none;
        }
        rep_.bytes += data.size();
        return write_all(fd, arg, data, p);
      }
      case op_truncate: {
        int fd = get(p);
        if (fd < 0) {
          ++rep_.skipped;
          return caf::none;
        }
        if (::ftruncate(fd, static_cast<off_t>(arg)) != 0)
          return io_error("journal replay: truncate of " + p.string());
        return caf::none;
      }
      case op_remove: {
        // Everything open under it is closed first.
        auto prefix = p.string();
        for (auto i = open_.begin(); i != open_.end();) {
          if (i->first == prefix
              || (i->first.size() > prefix.size() && i->first.starts_with(prefix)
                  && i->first[prefix.size()] == '/')) {
            ::close(i->second);
            i = open_.erase(i);
          } else {
            ++i;
          }
        }
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
        if (ec)
          return make_error(ec::io_error, "journal replay: remove of " + p.string()
                                            + ": " + ec.message());
        return caf::none;
      }
      default:
        return make_error(ec::corrupt_segment, "journal replay: unknown record type "
                                                 + std::to_string(type));
    }
  }

private:
  int get(const std::filesystem::path& p) {
    if (auto i = open_.find(p.string()); i != open_.end())
      return i->second;
    int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return -1;
    remember(p, fd);
    return fd;
  }
  void remember(const std::filesystem::path& p, int fd) {
    if (open_.size() >= 512)
      close_all();
    open_[p.string()] = fd;
  }
  void close_one(const std::filesystem::path& p) {
    if (auto i = open_.find(p.string()); i != open_.end()) {
      ::close(i->second);
      open_.erase(i);
    }
  }
  void close_all() {
    for (auto& [_, fd] : open_)
      ::close(fd);
    open_.clear();
  }

  std::filesystem::path root_;
  journal_replay_report& rep_;
  std::unordered_map<std::string, int> open_;
};

} // namespace

std::filesystem::path node_journal::dir_of(const std::filesystem::path& root) {
  return root / "journal";
}

node_journal::node_journal(std::filesystem::path root, journal_options opts)
  : root_(std::move(root)), dir_(dir_of(root_)), opts_(opts) {
}

caf::expected<std::shared_ptr<node_journal>>
node_journal::open(const std::filesystem::path& root, journal_options opts,
                   journal_replay_report* report) {
  journal_replay_report local;
  auto& rep = report ? *report : local;
  rep = {};
  std::shared_ptr<node_journal> j{new node_journal(root, opts)};
  std::error_code ec;
  std::filesystem::create_directories(j->dir_, ec);
  if (ec)
    return make_error(ec::io_error, "cannot create " + j->dir_.string() + ": "
                                      + ec.message());
  j->root_fd_ = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (j->root_fd_ < 0)
    return io_error("open of " + root.string());
  // The journal files, oldest first.
  std::vector<uint64_t> files;
  for (auto& e : std::filesystem::directory_iterator{j->dir_, ec}) {
    auto name = e.path().filename().string();
    if (auto idx = parse_file_name(name))
      files.push_back(*idx);
  }
  if (ec)
    return make_error(ec::io_error, "cannot list " + j->dir_.string() + ": "
                                      + ec.message());
  std::sort(files.begin(), files.end());
  {
    applier apply{root, rep};
    for (size_t i = 0; i < files.size(); ++i) {
      bool last = i + 1 == files.size();
      auto path = j->dir_ / file_name(files[i]);
      chunked_reader in;
      if (auto err = in.open(path))
        return err;
      ++rep.files;
      auto damaged = [&](uint64_t pos, const std::string& why) -> caf::error {
        if (last) {
          rep.torn_bytes = in.size() - pos;
          rep.reason = why + " at position " + std::to_string(pos) + " of "
                       + path.filename().string();
          return caf::none;
        }
        return make_error(ec::corrupt_segment,
                          "journal file " + path.string() + ": " + why
                            + " at position " + std::to_string(pos)
                            + " (not the last file, so not a torn write)");
      };
      auto head = in.take(file_magic.size());
      if (!head)
        return std::move(head.error());
      if (*head != file_magic) {
        // A file started just before the crash, its header not durable yet.
        if (auto err = damaged(0, "no journal header"))
          return err;
        continue;
      }
      caf::error stop;
      bool torn = false;
      while (in.position() < in.size()) {
        auto pos = in.position();
        auto fail = [&](const std::string& why) {
          stop = damaged(pos, why);
          torn = true;
        };
        auto hdr = in.take(record_header);
        if (!hdr)
          return std::move(hdr.error());
        if (hdr->size() < record_header) {
          fail("short record header");
          break;
        }
        auto len = be::load<uint32_t>(hdr->data());
        auto crc = be::load<uint32_t>(hdr->data() + 4);
        if (len < body_fixed || len > max_record) {
          fail("impossible record length " + std::to_string(len));
          break;
        }
        auto body = in.take(len);
        if (!body)
          return std::move(body.error());
        if (body->size() < len) {
          fail("record cut short");
          break;
        }
        if (crc32c(body->data(), body->size()) != crc) {
          fail("crc mismatch");
          break;
        }
        auto type = static_cast<uint8_t>((*body)[0]);
        auto plen = be::load<uint16_t>(body->data() + 1);
        if (body_fixed + plen > body->size()) {
          fail("path longer than its record");
          break;
        }
        auto rel = body->substr(3, plen);
        auto arg = be::load<uint64_t>(body->data() + 3 + plen);
        auto data = body->substr(body_fixed + plen);
        if (auto err = apply.apply(type, rel, arg, data))
          return err;
        ++rep.records;
      }
      if (stop)
        return stop;
      if (torn)
        break; // the torn tail of the last file
    }
  }
  if (!files.empty()) {
    // What was replayed is durable before the journal forgets it.
    if (auto err = posix_io::syncfs(j->root_fd_, root))
      return err;
    for (auto idx : files)
      std::filesystem::remove(j->dir_ / file_name(idx), ec);
    if (auto err = sync_dir(j->dir_))
      return err;
    if (rep.records > 0 || rep.torn_bytes > 0)
      log::info("journal: replayed {} records ({} bytes) from {} file(s){}",
                rep.records, rep.bytes, rep.files,
                rep.torn_bytes > 0 ? ", cut a torn tail: " + rep.reason : "");
  }
  auto first = files.empty() ? 1 : files.back() + 1;
  j->oldest_file_ = first;
  j->current_file_ = first;
  if (auto err = j->start_file(first))
    return err;
  if (opts.threads) {
    j->writer_ = std::thread{[p = j.get()] { p->writer_loop(); }};
    j->checkpointer_ = std::thread{[p = j.get()] { p->checkpoint_loop(); }};
  }
  return j;
}

node_journal::~node_journal() {
  {
    std::lock_guard lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  ckpt_cv_.notify_all();
  if (writer_.joinable())
    writer_.join();
  if (checkpointer_.joinable())
    checkpointer_.join();
  if (!opts_.threads) {
    std::unique_lock lk{mtx_};
    while (!queue_.empty())
      round(lk);
  }
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  // A clean stop: everything recorded is written; once the segment files
  // hold it durably the journal is not needed, and the next start has
  // nothing to replay. (Owners close their logs before the journal goes.)
  if (!unapplied_.empty())
    log::error("journal: {} deferred segment writes were never applied; the "
               "journal files stay for the next start to replay",
               unapplied());
  else if (!failed_ && root_fd_ >= 0 && !posix_io::syncfs(root_fd_, root_)) {
    std::error_code ec;
    for (auto i = oldest_file_; i <= file_index_; ++i)
      std::filesystem::remove(dir_ / file_name(i), ec);
    (void) sync_dir(dir_);
  }
  if (root_fd_ >= 0)
    ::close(root_fd_);
}

caf::error node_journal::start_file(uint64_t index) {
  auto path = dir_ / file_name(index);
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error("create of " + path.string());
  if (auto err = write_all(fd, 0, file_magic, path)) {
    ::close(fd);
    return err;
  }
  // Header and directory entry durable before any record counts on them.
  if (auto err = posix_io::fdatasync(fd, path)) {
    ::close(fd);
    return err;
  }
  if (auto err = sync_dir(dir_)) {
    ::close(fd);
    return err;
  }
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = fd;
  file_index_ = index;
  file_pos_ = file_magic.size();
  file_started_ = std::chrono::steady_clock::now();
  return caf::none;
}

node_journal::seq_t node_journal::enqueue(uint8_t type,
                                          const std::filesystem::path& path,
                                          uint64_t arg, std::string_view data,
                                          uint64_t* deferred_gen) {
  // Relative to the root when under it (the usual case), else absolute.
  const auto& full = path.native();
  const auto& base = root_.native();
  std::string_view rel = full;
  if (full.size() > base.size() + 1 && full.starts_with(base)
      && full[base.size()] == '/')
    rel.remove_prefix(base.size() + 1);
  auto plen = static_cast<uint16_t>(std::min<size_t>(rel.size(), UINT16_MAX));
  uint32_t len = static_cast<uint32_t>(body_fixed + plen + data.size());
  // Header and the fixed part of the body, built and checksummed outside
  // the lock; the data is checksummed in place and copied once.
  std::string head(record_header + body_fixed + plen, '\0');
  char* body = head.data() + record_header;
  body[0] = static_cast<char>(type);
  be::store<uint16_t>(body + 1, plen);
  std::memcpy(body + 3, rel.data(), plen);
  be::store<uint64_t>(body + 3 + plen, arg);
  auto crc = crc32c(body, body_fixed + plen);
  if (!data.empty())
    crc = crc32c(data.data(), data.size(), crc);
  be::store<uint32_t>(head.data(), len);
  be::store<uint32_t>(head.data() + 4, crc);
  std::lock_guard lk{mtx_};
  if (deferred_gen) {
    *deferred_gen = current_file_;
    ++unapplied_[current_file_];
  }
  bool was_empty = queue_.empty();
  queue_.append(head);
  queue_.append(data);
  ++queued_records_;
  auto seq = next_seq_.fetch_add(1, std::memory_order_release);
  if (was_empty)
    cv_.notify_one();
  return seq;
}

node_journal::seq_t node_journal::record_create(const std::filesystem::path& file) {
  return enqueue(op_create, file, 0, {});
}

node_journal::seq_t node_journal::record_write(const std::filesystem::path& file,
                                               uint64_t position,
                                               std::string_view bytes) {
  return enqueue(op_write, file, position, bytes);
}

node_journal::deferred_write
node_journal::record_write_deferred(const std::filesystem::path& file,
                                    uint64_t position, std::string_view bytes) {
  deferred_write w;
  w.seq = enqueue(op_write, file, position, bytes, &w.gen);
  return w;
}

void node_journal::applied(uint64_t gen, uint64_t n) {
  if (n == 0)
    return;
  {
    std::lock_guard lk{mtx_};
    auto i = unapplied_.find(gen);
    if (i == unapplied_.end())
      return;
    i->second -= std::min(i->second, n);
    if (i->second > 0)
      return;
    unapplied_.erase(i);
    // The checkpoint thread waits only for a pending checkpoint's files to
    // hold no deferred write: wake it when that became true, not at every
    // write (at 10,000 busy partitions that was 10,000 wake-ups a second).
    if (checkpoint_below_ == 0 || holds_below(checkpoint_below_))
      return;
  }
  ckpt_cv_.notify_all();
}

uint64_t node_journal::unapplied() const {
  std::lock_guard lk{mtx_};
  uint64_t n = 0;
  for (auto& [gen, count] : unapplied_)
    n += count;
  return n;
}

bool node_journal::holds_below(uint64_t below) const {
  return !unapplied_.empty() && unapplied_.begin()->first < below;
}

node_journal::seq_t node_journal::record_truncate(const std::filesystem::path& file,
                                                  uint64_t size) {
  return enqueue(op_truncate, file, size, {});
}

node_journal::seq_t node_journal::record_remove(const std::filesystem::path& path) {
  adopt(path);
  return enqueue(op_remove, path, 0, {});
}

bool node_journal::adopted(const std::filesystem::path& dir) const {
  std::lock_guard lk{mtx_};
  return adopted_.count(dir.lexically_normal().string()) > 0;
}

void node_journal::adopt(const std::filesystem::path& dir) {
  auto key = dir.lexically_normal().string();
  std::lock_guard lk{mtx_};
  adopted_.insert(std::move(key));
}

node_journal::seq_t node_journal::last_seq() const {
  // The caller's own records are counted: it queued them on this thread.
  return next_seq_.load(std::memory_order_acquire) - 1;
}

node_journal::seq_t node_journal::checkpointed_seq() const {
  std::lock_guard lk{mtx_};
  return checkpointed_;
}

void node_journal::when_durable(seq_t seq, done_fn done) {
  caf::error err;
  {
    std::lock_guard lk{mtx_};
    if (!failed_ && seq > durable_) {
      waiters_.emplace(seq, std::move(done));
      return;
    }
    err = failed_;
  }
  done(std::move(err));
}

caf::error node_journal::wait_durable(seq_t seq) {
  std::unique_lock lk{mtx_};
  if (!opts_.threads) {
    while (!failed_ && seq > durable_ && !queue_.empty())
      round(lk);
    if (failed_ || seq <= durable_)
      return failed_;
    return make_error(ec::io_error, "journal: waited for a record never queued");
  }
  durable_cv_.wait(lk, [&] { return failed_ || seq <= durable_ || stopping_; });
  if (failed_)
    return failed_;
  if (seq > durable_)
    return make_error(ec::io_error, "journal: closed before the record was durable");
  return caf::none;
}

caf::error node_journal::write_round(const std::string& buf) {
  auto path = dir_ / file_name(file_index_);
  if (auto err = write_all(fd_, file_pos_, buf, path))
    return err;
  file_pos_ += buf.size();
  return posix_io::fdatasync(fd_, path);
}

size_t node_journal::round(std::unique_lock<std::mutex>& lk) {
  // Two buffers take turns, so neither is allocated (and faulted in) anew
  // for every round.
  std::string buf = std::move(spare_);
  buf.clear();
  buf.swap(queue_);
  auto records = queued_records_;
  queued_records_ = 0;
  auto upto = next_seq_ - 1;
  lk.unlock();
  caf::error err;
  if (!buf.empty())
    err = write_round(buf);
  uint64_t below = 0;
  if (!err)
    below = maybe_roll();
  lk.lock();
  ++stats_.rounds;
  stats_.records += records;
  stats_.bytes += buf.size();
  if (buf.capacity() <= (64u << 20))
    spare_ = std::move(buf);
  stats_.largest_round = std::max<uint64_t>(stats_.largest_round, records);
  if (err && !failed_) {
    log::error("journal: {}", err);
    failed_ = std::move(err);
  }
  if (!failed_)
    durable_ = upto;
  if (below > 0) {
    checkpoint_below_ = below;
    checkpoint_upto_ = upto;
    current_file_ = below;
    ckpt_cv_.notify_all();
  }
  std::vector<done_fn> ready;
  auto end = failed_ ? waiters_.end() : waiters_.upper_bound(durable_);
  for (auto i = waiters_.begin(); i != end; ++i)
    ready.push_back(std::move(i->second));
  waiters_.erase(waiters_.begin(), end);
  auto result = failed_;
  lk.unlock();
  durable_cv_.notify_all();
  for (auto& f : ready)
    f(result);
  lk.lock();
  if (!opts_.threads && checkpoint_below_ > 0 && !holds_below(checkpoint_below_)) {
    auto b = checkpoint_below_;
    auto u = checkpoint_upto_;
    checkpoint_below_ = 0;
    lk.unlock();
    (void) checkpoint(b, u);
    lk.lock();
  }
  return records;
}

uint64_t node_journal::maybe_roll() {
  bool full = file_pos_ >= opts_.file_bytes;
  bool old = file_pos_ > file_magic.size()
             && std::chrono::steady_clock::now() - file_started_
                  >= opts_.checkpoint_interval;
  if (!full && !old)
    return 0;
  auto next = file_index_ + 1;
  if (auto err = start_file(next)) {
    // Keep writing to the current file; try again after the next round.
    log::warn("journal: cannot start {}: {}", file_name(next), err);
    return 0;
  }
  return next;
}

caf::error node_journal::checkpoint(uint64_t below, seq_t upto) {
  // Every record in files below `below` was applied to the file system before
  // it was queued: after this syncfs the segment files hold all of it.
  if (auto err = posix_io::syncfs(root_fd_, root_)) {
    log::warn("journal: checkpoint: {}", err);
    return err;
  }
  uint64_t removed_to = 0;
  {
    std::lock_guard lk{mtx_};
    removed_to = oldest_file_;
  }
  std::error_code ec;
  for (auto i = removed_to; i < below; ++i)
    std::filesystem::remove(dir_ / file_name(i), ec);
  if (auto err = sync_dir(dir_))
    return err;
  std::lock_guard lk{mtx_};
  oldest_file_ = std::max(oldest_file_, below);
  checkpointed_ = std::max(checkpointed_, upto);
  ++stats_.checkpoints;
  return caf::none;
}

void node_journal::writer_loop() {
  std::unique_lock lk{mtx_};
  for (;;) {
    cv_.wait_for(lk, opts_.checkpoint_interval,
                 [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stopping_)
        break;
      // Quiet: roll an old file so a checkpoint can remove it.
      bool failed = static_cast<bool>(failed_);
      // The queue is empty: every record so far is in the current file.
      auto upto = next_seq_ - 1;
      lk.unlock();
      auto below = failed ? 0 : maybe_roll();
      lk.lock();
      if (below > 0) {
        checkpoint_below_ = below;
        checkpoint_upto_ = upto;
        current_file_ = below;
        ckpt_cv_.notify_all();
      }
      continue;
    }
    round(lk);
  }
  // Stopping: everything queued is written, so no waiter is left hanging.
  while (!queue_.empty())
    round(lk);
  durable_cv_.notify_all();
}

void node_journal::checkpoint_loop() {
  std::unique_lock lk{mtx_};
  for (;;) {
    // A file holding a deferred write that has not reached its segment file
    // yet stays until it has: its owner writes it within a tick (about a
    // second), or at the latest when it closes.
    ckpt_cv_.wait(lk, [&] {
      return stopping_ || (checkpoint_below_ > 0 && !holds_below(checkpoint_below_));
    });
    if (stopping_ && (checkpoint_below_ == 0 || holds_below(checkpoint_below_)))
      return;
    auto below = checkpoint_below_;
    auto upto = checkpoint_upto_;
    checkpoint_below_ = 0;
    lk.unlock();
    (void) checkpoint(below, upto);
    lk.lock();
  }
}

size_t node_journal::run_pending() {
  std::unique_lock lk{mtx_};
  size_t n = 0;
  while (!queue_.empty())
    n += round(lk);
  return n;
}

journal_stats node_journal::stats() const {
  std::lock_guard lk{mtx_};
  auto s = stats_;
  s.files = current_file_ + 1 - oldest_file_;
  return s;
}

} // namespace ferry
