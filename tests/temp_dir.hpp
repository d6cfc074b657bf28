#pragma once
// The one temporary directory every test uses: a fresh directory under the
// system temp dir, named after the test's prefix and pid, removed with its
// contents at the end (unless keep() was called to look at a failure).
// Header-only, no CAF: the storage tests use it as well as the actor and
// multi-process ones.

#include <unistd.h>

#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ferry::test {

/// A fresh directory under the system temp dir, removed with its contents on
/// destruction (unless keep() was called, e.g. to look at a failure).
class temp_dir {
public:
  explicit temp_dir(const std::string& prefix = "ferry-test") {
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto candidate = std::filesystem::temp_directory_path()
                       / (prefix + "-" + std::to_string(::getpid()) + "-"
                          + std::to_string(rd()));
      std::error_code ec;
      if (std::filesystem::create_directory(candidate, ec)) {
        path_ = candidate;
        return;
      }
    }
    throw std::runtime_error("cannot create a temp dir");
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    if (!keep_ && !path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  void keep() { keep_ = true; }

private:
  std::filesystem::path path_;
  bool keep_ = false;
};

} // namespace ferry::test
