#pragma once
// Data dirs that can fill up (the chaos suite's disk fault): each node's
// data dir is a small tmpfs of its own, mounted in a private mount
// namespace of the test process (unshare(CLONE_NEWNS), so nothing is seen
// outside it and the mounts go away with the process and its ferryd
// children). fill() takes every free block of one node's file system with
// a ballast file, so the node's next writes fail with ENOSPC; release()
// deletes it again.
//
// Needs CAP_SYS_ADMIN (root, as the README's install step runs). Without
// it, available() is false and says why; the nemesis then draws no disk
// faults and the summary line says so (disk_faults=unavailable).

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry::test {

class small_disks {
public:
  /// Enters a private mount namespace; call before any thread starts (a
  /// static initializer), since unshare() changes the calling thread only.
  static small_disks& instance() {
    static small_disks d;
    return d;
  }

  bool available() const {
    return why_.empty();
  }

  const std::string& why_not() const {
    return why_;
  }

  /// Mounts a tmpfs of `bytes` at `dir` (created). "" or why not.
  std::string mount_at(const std::filesystem::path& dir, size_t bytes) {
    if (!available())
      return why_;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return "create " + dir.string() + ": " + ec.message();
    auto opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("ferry-chaos", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
      return "mount tmpfs at " + dir.string() + ": " + std::strerror(errno);
    return "";
  }

  /// Fills the file system mounted at `dir` with a ballast file there
  /// (`chaos-ballast`; ferryd looks only at the entries it made at the top
  /// of its data dir). Returns the bytes taken, -1 and `why` on failure.
  int64_t fill(const std::filesystem::path& dir, std::string& why) {
    auto path = dir / "chaos-ballast";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      why = "open " + path.string() + ": " + std::strerror(errno);
      return -1;
    }
    int64_t taken = 0;
    struct statvfs sv{};
    if (::fstatvfs(fd, &sv) == 0) {
      auto free_bytes = static_cast<int64_t>(sv.f_bavail) * static_cast<int64_t>(sv.f_frsize);
      if (free_bytes > 0 && ::fallocate(fd, 0, 0, free_bytes) == 0)
        taken = free_bytes;
    }
    // What fallocate left (or everything, where it failed): write until
    // the file system says it is full.
    std::vector<char> zeros(1 << 16, 0);
    for (;;) {
      auto n = ::pwrite(fd, zeros.data(), zeros.size(), taken);
      if (n <= 0)
        break;
      taken += n;
    }
    ::close(fd);
    return taken;
  }

  /// Deletes the ballast of `dir`.
  void release(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::remove(dir / "chaos-ballast", ec);
  }

private:
  small_disks() {
    if (::geteuid() != 0) {
      why_ = "not root";
      return;
    }
    if (::unshare(CLONE_NEWNS) != 0) {
      why_ = std::string{"unshare(CLONE_NEWNS): "} + std::strerror(errno);
      return;
    }
    // Mounts made here must not propagate back to the host's namespace.
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      why_ = std::string{"make / private: "} + std::strerror(errno);
  }

  std::string why_;
};

} // namespace ferry::test
