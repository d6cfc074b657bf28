#include "broker/file_system.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace ferry {

namespace posix_io {

caf::error errno_error(int err, const std::string& what) {
  auto code = ec::io_error;
  if (err == ENOSPC || err == EDQUOT)
    code = ec::disk_full;
  else if (err == ENOENT)
    code = ec::not_found;
  if (err == EMFILE || err == ENFILE)
    return make_error(code, what + ": " + std::strerror(err)
                              + " (the process's open-file limit: raise "
                                "`ulimit -n`)");
  return make_error(code, what + ": " + std::strerror(err));
}

namespace {

std::string name_of(const std::filesystem::path& p) {
  return p.filename().string();
}

} // namespace

caf::error append(int fd, uint64_t& size, std::string_view data,
                  const std::filesystem::path& p) {
  const char* ptr = data.data();
  size_t left = data.size();
  while (left > 0) {
    auto n = ::pwrite(fd, ptr, std::min(left, max_write_bytes),
                      static_cast<off_t>(size));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno_error(errno, "append of " + std::to_string(data.size())
                                  + " bytes to " + name_of(p));
    }
    if (n == 0)
      return errno_error(ENOSPC, "append of " + std::to_string(data.size())
                                   + " bytes to " + name_of(p));
    ptr += n;
    left -= static_cast<size_t>(n);
    size += static_cast<uint64_t>(n);
  }
  return caf::none;
}

caf::expected<size_t> read_at(int fd, uint64_t pos, std::span<char> out,
                              const std::filesystem::path& p) {
  size_t done = 0;
  while (done < out.size()) {
    auto n = ::pread(fd, out.data() + done, out.size() - done,
                     static_cast<off_t>(pos + done));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno_error(errno, "read of " + std::to_string(out.size())
                                  + " bytes at " + std::to_string(pos)
                                  + " from " + name_of(p));
    }
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  return done;
}

caf::error fdatasync(int fd, const std::filesystem::path& p) {
  while (::fdatasync(fd) != 0)
    if (errno != EINTR)
      return errno_error(errno, "fdatasync of " + name_of(p));
  return caf::none;
}

caf::error syncfs(int fd, const std::filesystem::path& p) {
  while (::syncfs(fd) != 0)
    if (errno != EINTR)
      return errno_error(errno, "syncfs of the file system of " + name_of(p));
  return caf::none;
}

caf::error truncate(int fd, uint64_t size, const std::filesystem::path& p) {
  while (::ftruncate(fd, static_cast<off_t>(size)) != 0)
    if (errno != EINTR)
      return errno_error(errno, "truncate of " + name_of(p) + " to "
                                  + std::to_string(size) + " bytes");
  return caf::none;
}

} // namespace posix_io

namespace {

using posix_io::errno_error;

std::string name_of(const std::filesystem::path& p) {
  return p.filename().string();
}

class posix_handle final : public file_handle {
public:
  posix_handle(int fd, std::filesystem::path p, uint64_t size, uint64_t dev)
    : fd_(fd), path_(std::move(p)), size_(size), dev_(dev) {
  }

  ~posix_handle() override {
    ::close(fd_);
  }

  caf::error append(std::string_view data) override {
    return posix_io::append(fd_, size_, data, path_);
  }

  caf::expected<size_t> read_at(uint64_t pos, std::span<char> out) const override {
    return posix_io::read_at(fd_, pos, out, path_);
  }

  caf::error sync() override {
    return posix_io::fdatasync(fd_, path_);
  }

  caf::error truncate(uint64_t size) override {
    if (auto err = posix_io::truncate(fd_, size, path_))
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

  caf::error sync_file_system() override {
    return posix_io::syncfs(fd_, path_);
  }

private:
  int fd_;
  std::filesystem::path path_;
  uint64_t size_;
  uint64_t dev_;
};

} // namespace

// -- posix_file_system --------------------------------------------------------

caf::expected<std::unique_ptr<file_handle>>
posix_file_system::open(const std::filesystem::path& p, open_mode mode) {
  int flags = O_RDWR | O_CLOEXEC;
  if (mode != open_mode::existing)
    flags |= O_CREAT;
  if (mode == open_mode::create_truncate)
    flags |= O_TRUNC;
  int fd;
  do {
    fd = ::open(p.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return errno_error(errno, "open of " + p.string());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    auto err = errno_error(errno, "stat of " + p.string());
    ::close(fd);
    return err;
  }
  return std::unique_ptr<file_handle>{
    new posix_handle(fd, p, static_cast<uint64_t>(st.st_size),
                     static_cast<uint64_t>(st.st_dev))};
}

caf::error posix_file_system::rename(const std::filesystem::path& from,
                                     const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    return errno_error(errno, "rename of " + from.string() + " to " + to.string());
  return caf::none;
}

caf::error posix_file_system::remove(const std::filesystem::path& p) {
  if (::unlink(p.c_str()) != 0 && errno != ENOENT)
    return errno_error(errno, "remove of " + p.string());
  return caf::none;
}

caf::expected<std::vector<std::string>>
posix_file_system::list_dir(const std::filesystem::path& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return errno_error(errno, "list of " + dir.string());
  std::vector<std::string> names;
  errno = 0;
  while (auto* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..")
      names.emplace_back(n);
  }
  auto err = errno;
  ::closedir(d);
  if (err != 0)
    return errno_error(err, "list of " + dir.string());
  return names;
}

caf::expected<uint64_t> posix_file_system::file_size(const std::filesystem::path& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0)
    return errno_error(errno, "stat of " + p.string());
  return static_cast<uint64_t>(st.st_size);
}

caf::error posix_file_system::create_dirs(const std::filesystem::path& dir) {
  std::error_code err;
  std::filesystem::create_directories(dir, err);
  if (err)
    return errno_error(err.value(), "mkdir of " + dir.string());
  return caf::none;
}

caf::error posix_file_system::sync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno_error(errno, "open of directory " + dir.string());
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  auto err = errno;
  ::close(fd);
  if (rc != 0)
    return errno_error(err, "fsync of directory " + dir.string());
  return caf::none;
}

file_system& default_file_system() {
  static posix_file_system instance;
  return instance;
}

// -- fault_injecting_file_system ---------------------------------------------

class fault_injecting_file_system::handle final : public file_handle {
public:
  handle(fault_injecting_file_system* owner, std::unique_ptr<file_handle> base)
    : owner_(owner), base_(std::move(base)) {
  }

  caf::error append(std::string_view data) override {
    auto& left = owner_->space_left_;
    if (left && *left < data.size()) {
      // A full disk accepts what fits, then refuses the rest.
      auto part = data.substr(0, static_cast<size_t>(*left));
      if (!part.empty()) {
        if (auto err = forward(part))
          return err;
      }
      *left = 0;
      return make_error(ec::disk_full,
                        "append of " + std::to_string(data.size()) + " bytes to "
                          + name_of(base_->path())
                          + ": No space left on device (injected)");
    }
    if (auto err = forward(data))
      return err;
    if (left)
      *left -= data.size();
    return caf::none;
  }

  caf::expected<size_t> read_at(uint64_t pos, std::span<char> out) const override {
    return base_->read_at(pos, out);
  }

  caf::error sync() override {
    ++owner_->syncs_;
    ++owner_->syncs_by_name_[name_of(base_->path())];
    if (owner_->fail_syncs_)
      return make_error(ec::io_error, "fdatasync of " + name_of(base_->path())
                                        + ": Input/output error (injected)");
    return base_->sync();
  }

  caf::error truncate(uint64_t size) override {
    if (owner_->fail_truncates_)
      return make_error(ec::io_error, "truncate of " + name_of(base_->path())
                                        + ": Input/output error (injected)");
    return base_->truncate(size);
  }

  uint64_t size() const override {
    return base_->size();
  }

  const std::filesystem::path& path() const override {
    return base_->path();
  }

private:
  caf::error forward(std::string_view data) {
    ++owner_->writes_;
    auto before = base_->size();
    auto err = base_->append(data);
    owner_->bytes_written_ += base_->size() - before;
    return err;
  }

  fault_injecting_file_system* owner_;
  std::unique_ptr<file_handle> base_;
};

fault_injecting_file_system::fault_injecting_file_system(file_system* base)
  : base_(base) {
}

uint64_t fault_injecting_file_system::syncs_of(std::string_view suffix) const {
  uint64_t n = 0;
  for (auto& [name, count] : syncs_by_name_)
    if (name.size() >= suffix.size()
        && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      n += count;
  return n;
}

void fault_injecting_file_system::reset_counters() {
  syncs_ = dir_syncs_ = writes_ = bytes_written_ = 0;
  syncs_by_name_.clear();
}

caf::expected<std::unique_ptr<file_handle>>
fault_injecting_file_system::open(const std::filesystem::path& p, open_mode mode) {
  if (fail_creates_ && mode != open_mode::existing) {
    auto size = base_->file_size(p);
    if (!size && is(size.error(), ec::not_found))
      return make_error(ec::disk_full, "open of " + p.string()
                                         + ": No space left on device (injected)");
  }
  auto f = base_->open(p, mode);
  if (!f)
    return f.error();
  return std::unique_ptr<file_handle>{new handle(this, std::move(*f))};
}

caf::error fault_injecting_file_system::rename(const std::filesystem::path& from,
                                               const std::filesystem::path& to) {
  if (fail_renames_)
    return make_error(ec::io_error, "injected rename failure: " + from.string());
  return base_->rename(from, to);
}

caf::error fault_injecting_file_system::remove(const std::filesystem::path& p) {
  return base_->remove(p);
}

caf::expected<std::vector<std::string>>
fault_injecting_file_system::list_dir(const std::filesystem::path& dir) {
  return base_->list_dir(dir);
}

caf::expected<uint64_t>
fault_injecting_file_system::file_size(const std::filesystem::path& p) {
  return base_->file_size(p);
}

caf::error fault_injecting_file_system::create_dirs(const std::filesystem::path& dir) {
  return base_->create_dirs(dir);
}

caf::error fault_injecting_file_system::sync_dir(const std::filesystem::path& dir) {
  ++dir_syncs_;
  if (fail_syncs_)
    return make_error(ec::io_error, "fsync of directory " + dir.string()
                                      + ": Input/output error (injected)");
  return base_->sync_dir(dir);
}

} // namespace ferry
