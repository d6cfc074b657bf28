#include "broker/dir_remover.hpp"

#include "broker/logging.hpp"
#include "broker/node_journal.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ferry {

namespace fs = std::filesystem;

dir_remover::dir_remover(fs::path root, dir_remover_options opts)
  : trash_(trash_dir(root)) {
  // Names in the trash are "<dir>.<start time in ns>.<n>": unique across
  // this process's discards and distinct from whatever an earlier process
  // left there.
  next_name_ = static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch())
      .count());
  if (opts.threads > 0)
    worker_ = std::thread([this] { run(); });
}

dir_remover::~dir_remover() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

fs::path dir_remover::trash_dir(const fs::path& root) {
  return root / "trash";
}

caf::error dir_remover::discard(const fs::path& dir) {
  // One rename(2) in the common case: no stat of the source or the target
  // first (10,000 partitions of a deleted topic each come through here, on
  // the scheduler's threads).
  std::error_code ec;
  bool made_trash = false;
  for (int attempt = 0; attempt < 6; ++attempt) {
    fs::path to;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      to = trash_ / (dir.filename().string() + "." + std::to_string(next_name_++));
    }
    fs::rename(dir, to, ec);
    if (!ec) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        queue_.push_back(std::move(to));
        ++stats_.discarded;
      }
      cv_.notify_one();
      return caf::none;
    }
    if (ec == std::errc::no_such_file_or_directory) {
      // The directory is gone (nothing to do), or the trash is not there
      // yet: made once, then tried again.
      std::error_code sec;
      if (!fs::exists(fs::symlink_status(dir, sec)))
        return caf::none;
      if (made_trash)
        break;
      made_trash = true;
      fs::create_directories(trash_, ec);
      if (ec)
        break;
      continue;
    }
    // A leftover of an earlier process under this name: the next name.
    if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists)
      continue;
    break;
  }
  log::warn("cannot move {} into {} ({}): removing it in place", dir.string(),
            trash_.string(), ec ? ec.message() : std::string{"no free name"});
  std::error_code rec;
  fs::remove_all(dir, rec);
  if (rec)
    return make_error(ec::io_error,
                      "cannot delete " + dir.string() + ": " + rec.message());
  std::lock_guard<std::mutex> guard{mtx_};
  ++stats_.removed_in_place;
  return caf::none;
}

size_t dir_remover::sweep() {
  std::vector<fs::path> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(trash_, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    found.push_back(it->path());
  if (ec && ec != std::errc::no_such_file_or_directory)
    log::warn("cannot list {}: {}", trash_.string(), ec.message());
  size_t n = 0;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& p : found) {
      if (std::find(queue_.begin(), queue_.end(), p) != queue_.end())
        continue;
      queue_.push_back(std::move(p));
      ++stats_.swept;
      ++n;
    }
  }
  if (n > 0) {
    log::info("removing {} directories left in {} by an earlier run", n,
              trash_.string());
    cv_.notify_one();
  }
  return n;
}

size_t dir_remover::run_pending() {
  size_t n = 0;
  for (;;) {
    fs::path p;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (queue_.empty())
        return n;
      p = queue_.front();
    }
    remove_one(p);
    ++n;
  }
}

void dir_remover::remove_one(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec)
    log::warn("cannot delete {}: {} (left for the next start)", p.string(),
              ec.message());
  std::lock_guard<std::mutex> guard{mtx_};
  // The front is `p`: only remove_one's caller pops, after the removal, so
  // `pending` counts the directory in progress.
  queue_.pop_front();
  if (ec)
    ++stats_.failures;
  else
    ++stats_.removed;
}

dir_remover_stats dir_remover::stats() const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto s = stats_;
  s.pending = queue_.size();
  return s;
}

void dir_remover::run() {
  for (;;) {
    fs::path p;
    {
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_)
        return;
      p = queue_.front();
    }
    remove_one(p);
  }
}

caf::error delete_partition_dir(const fs::path& dir, dir_remover* trash,
                                node_journal* journal) {
  caf::error err;
  if (trash) {
    err = trash->discard(dir);
  } else {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec)
      err = make_error(ec::io_error,
                       "cannot delete " + dir.string() + ": " + ec.message());
  }
  if (!err && journal)
    journal->record_remove(dir);
  return err;
}

} // namespace ferry
