// log_cleaner: see log_cleaner.hpp for the contract and FORMAT.md,
// "Compaction", for the files and the order of steps.

#include "broker/log_cleaner.hpp"

#include "broker/file_system.hpp"
#include "broker/logging.hpp"
#include "broker/record_batch.hpp"
#include "broker/segment.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>

namespace ferry {

// -- io_throttle ----------------------------------------------------------------

io_throttle::io_throttle(uint64_t bytes_per_second)
  : rate_(bytes_per_second), window_start_(std::chrono::steady_clock::now()) {
}

void io_throttle::consume(uint64_t bytes) {
  using namespace std::chrono;
  auto rate = rate_.load();
  if (rate == 0)
    return;
  std::unique_lock lk{mtx_};
  auto now = steady_clock::now();
  // A window of a few seconds: a pause longer than that does not earn a
  // burst afterwards.
  if (now - window_start_ > seconds{3}) {
    window_start_ = now;
    window_bytes_ = 0;
  }
  window_bytes_ += bytes;
  auto due = window_start_
             + duration_cast<steady_clock::duration>(
               duration<double>{static_cast<double>(window_bytes_)
                                / static_cast<double>(rate)});
  if (due > now) {
    auto wait = due - now;
    lk.unlock();
    std::this_thread::sleep_for(wait);
  }
}

namespace {

namespace L = batch_layout;

/// Reads the batches of one segment file front to back in large chunks.
class batch_stream {
public:
  batch_stream(file_handle& f, uint64_t size, size_t max_batch_bytes,
               io_throttle* throttle)
    : f_(f), size_(size), max_batch_(max_batch_bytes), throttle_(throttle) {
  }

  /// The next complete batch (a view valid until the next call), or an
  /// empty view at the end. A torn or impossible batch is an error: closed
  /// segments are trusted, so this is damage.
  caf::expected<std::string_view> next() {
    if (pos_ >= size_)
      return std::string_view{};
    if (auto err = fill(L::header_size))
      return err;
    auto h = parse_batch_header(std::string_view{buf_}.substr(at_, L::header_size),
                                max_batch_);
    size_t total = 0;
    if (h) {
      total = h->total_size();
    } else if (is(h.error(), ec::truncated_batch)) {
      // Only the header was asked for; take the length from it.
      auto len = be_length();
      if (len < static_cast<int64_t>(L::header_size - L::log_overhead)
          || static_cast<uint64_t>(len) + L::log_overhead > max_batch_)
        return make_error(ec::corrupt_segment,
                          f_.path().string() + ": impossible batch length "
                            + std::to_string(len) + " at position "
                            + std::to_string(pos_));
      total = static_cast<size_t>(len) + L::log_overhead;
    } else {
      return make_error(ec::corrupt_segment,
                        f_.path().string() + " at position "
                          + std::to_string(pos_) + ": " + describe(h.error()));
    }
    if (pos_ + total > size_)
      return make_error(ec::corrupt_segment,
                        f_.path().string() + ": batch at position "
                          + std::to_string(pos_) + " runs past the end");
    if (auto err = fill(total))
      return err;
    std::string_view out{buf_.data() + at_, total};
    at_ += total;
    pos_ += total;
    return out;
  }

  uint64_t position() const { return pos_; }

private:
  int64_t be_length() const {
    int64_t v = 0;
    for (size_t i = 0; i < 4; ++i)
      v = (v << 8) | static_cast<uint8_t>(buf_[at_ + L::batch_length + i]);
    return static_cast<int32_t>(static_cast<uint32_t>(v));
  }

  /// Makes `n` bytes from pos_ available at buf_[at_].
  caf::error fill(size_t n) {
    if (buf_.size() - at_ >= n)
      return caf::none;
    buf_.erase(0, at_);
    at_ = 0;
    auto want = static_cast<size_t>(
      std::min<uint64_t>(std::max<size_t>(n, chunk), size_ - pos_));
    if (want < n)
      return make_error(ec::corrupt_segment,
                        f_.path().string() + ": short file at position "
                          + std::to_string(pos_));
    auto have = buf_.size();
    if (have >= want)
      return caf::none;
    buf_.resize(want);
    auto got = f_.read_at(pos_ + have, std::span<char>{buf_.data() + have, want - have});
    if (!got)
      return got.error();
    if (throttle_)
      throttle_->consume(*got);
    buf_.resize(have + *got);
    if (buf_.size() < n)
      return make_error(ec::corrupt_segment,
                        f_.path().string() + ": short read at position "
                          + std::to_string(pos_));
    return caf::none;
  }

  static constexpr size_t chunk = size_t{1} << 20;
  file_handle& f_;
  uint64_t size_;
  size_t max_batch_;
  io_throttle* throttle_;
  std::string buf_;
  size_t at_ = 0;
  uint64_t pos_ = 0;
};

/// Key -> latest offset, with its memory counted against a budget.
class offset_map {
public:
  explicit offset_map(uint64_t budget) : budget_(budget) {
  }

  /// Per key: the key's bytes plus the node and bucket overhead.
  static constexpr uint64_t overhead = 48;

  void put(const std::string& key, int64_t off) {
    auto [it, fresh] = map_.try_emplace(key, off);
    if (fresh)
      used_ += key.size() + overhead;
    else
      it->second = std::max(it->second, off);
  }

  /// Latest offset of `key`, or -1.
  int64_t get(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? -1 : it->second;
  }

  bool full() const { return used_ >= budget_; }
  size_t size() const { return map_.size(); }

private:
  uint64_t budget_;
  uint64_t used_ = 0;
  std::unordered_map<std::string, int64_t> map_;
};

caf::error check_cancel(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load())
    return make_error(ec::log_closed, "log cleaner stopping");
  return caf::none;
}

/// Maps the dirty section into `map`, setting job.mapped_end to where the
/// mapping ended (before the first batch that did not fit the budget).
caf::error build_map(clean_job& job, offset_map& map, io_throttle* throttle,
                     const std::atomic<bool>* cancel) {
  job.mapped_end = job.first_dirty;
  for (auto& src : job.sources) {
    if (src.end <= job.first_dirty)
      continue;
    batch_stream in{*src.log, src.size, job.max_batch_bytes, throttle};
    for (;;) {
      if (auto err = check_cancel(cancel))
        return err;
      // Stop between batches once the map is full: what was mapped is a
      // complete prefix of the dirty section.
      if (map.full())
        return caf::none;
      auto b = in.next();
      if (!b)
        return std::move(b.error());
      if (b->empty())
        break;
      auto h = parse_batch_header(*b, job.max_batch_bytes);
      if (!h)
        return std::move(h.error());
      job.stats.bytes_read += b->size();
      if (h->last_offset() >= job.first_dirty && !h->control()) {
        auto d = decode_batch(*b, job.max_batch_bytes);
        if (!d)
          return make_error(ec::corrupt_segment,
                            src.log->path().string() + ": batch at offset "
                              + std::to_string(h->base_offset.value) + ": "
                              + describe(d.error()));
        for (auto& r : d->records) {
          auto off = h->base_offset + r.offset_delta;
          if (off >= job.first_dirty && r.key)
            map.put(*r.key, off.value);
        }
      }
      job.mapped_end = std::max(job.mapped_end, h->next_offset());
    }
    job.mapped_end = std::max(job.mapped_end, src.end);
  }
  return caf::none;
}

/// Writes `data` to the output, buffered.
struct output_file {
  std::unique_ptr<file_handle> file;
  std::string buf;
  uint64_t written = 0;
  io_throttle* throttle = nullptr;

  caf::error write(std::string_view data) {
    buf.append(data);
    if (buf.size() >= (size_t{1} << 20))
      return drain();
    return caf::none;
  }

  caf::error drain() {
    if (buf.empty())
      return caf::none;
    if (throttle)
      throttle->consume(buf.size());
    if (auto err = file->append(buf))
      return err;
    written += buf.size();
    buf.clear();
    return caf::none;
  }
};

} // namespace

caf::expected<std::optional<offset>>
last_offset_in_file(file_system& fs, const std::filesystem::path& file,
                    size_t max_batch_bytes) {
  auto f = fs.open(file, open_mode::existing);
  if (!f)
    return std::move(f.error());
  batch_stream in{**f, (*f)->size(), max_batch_bytes, nullptr};
  std::optional<offset> last;
  for (;;) {
    auto b = in.next();
    if (!b) {
      // A cleaned file is fdatasynced before it is renamed, so damage here
      // is not a torn write; keep what was read (the caller decides).
      if (last)
        return last;
      return std::move(b.error());
    }
    if (b->empty())
      return last;
    auto h = parse_batch_header(*b, max_batch_bytes);
    if (!h)
      return std::move(h.error());
    last = h->last_offset();
  }
}

caf::error run_clean(clean_job& job, const producer_last_offsets& producers,
                     io_throttle* throttle, const std::atomic<bool>* cancel) {
  job.outputs.clear();
  job.stats = {};
  job.next_tombstone_expiry.reset();
  job.mapped_end = job.first_dirty;
  if (job.sources.empty() || job.fs == nullptr)
    return make_error(ec::invalid_argument, "run_clean: no segments");
  // 1. The key map over the dirty section, stopping where the budget ends.
  offset_map map{std::max<uint64_t>(job.map_budget_bytes, 1)};
  if (auto err = build_map(job, map, throttle, cancel))
    return err;
  job.stats.keys_mapped = map.size();
  auto remove_outputs = [&] {
    for (auto& o : job.outputs)
      (void) job.fs->remove(o.file);
    job.outputs.clear();
  };
  // 2. Groups of sources up to max_output_bytes (and a 32-bit offset span),
  //    over the sources that start below the mapped end.
  size_t first = 0;
  auto limit = std::max<uint64_t>(job.max_output_bytes, 1);
  while (first < job.sources.size() && job.sources[first].base < job.mapped_end) {
    size_t count = 1;
    uint64_t bytes = job.sources[first].size;
    while (first + count < job.sources.size()
           && job.sources[first + count].base < job.mapped_end
           && bytes + job.sources[first + count].size <= limit
           && job.sources[first + count].end - job.sources[first].base
                <= int64_t{UINT32_MAX}) {
      bytes += job.sources[first + count].size;
      ++count;
    }
    auto& head = job.sources[first];
    clean_output out;
    out.first = first;
    out.count = count;
    out.file = job.dir / (segment_file_name(head.base, log_file_suffix) + ".cleaned");
    (void) job.fs->remove(out.file);
    auto file = job.fs->open(out.file, open_mode::create);
    if (!file) {
      remove_outputs();
      return std::move(file.error());
    }
    output_file w{std::move(*file), {}, 0, throttle};
    bool changed = false;
    auto fail = [&](caf::error err) {
      w.file.reset();
      (void) job.fs->remove(out.file);
      remove_outputs();
      return err;
    };
    for (size_t i = first; i < first + count; ++i) {
      auto& src = job.sources[i];
      batch_stream in{*src.log, src.size, job.max_batch_bytes, throttle};
      for (;;) {
        if (auto err = check_cancel(cancel))
          return fail(std::move(err));
        auto b = in.next();
        if (!b)
          return fail(std::move(b.error()));
        if (b->empty())
          break;
        auto h = parse_batch_header(*b, job.max_batch_bytes);
        if (!h)
          return fail(std::move(h.error()));
        job.stats.bytes_read += b->size();
        if (h->base_offset >= job.mapped_end || h->control()) {
          // Past the mapped section (or a control batch): as it is.
          job.stats.records_read += static_cast<uint64_t>(std::max(h->records_count, 0));
          job.stats.records_kept += static_cast<uint64_t>(std::max(h->records_count, 0));
          if (auto err = w.write(*b))
            return fail(std::move(err));
          continue;
        }
        auto d = decode_batch(*b, job.max_batch_bytes);
        if (!d)
          return fail(make_error(ec::corrupt_segment,
                                 src.log->path().string() + ": batch at offset "
                                   + std::to_string(h->base_offset.value) + ": "
                                   + describe(d.error())));
        std::vector<record> kept;
        kept.reserve(d->records.size());
        for (auto& r : d->records) {
          ++job.stats.records_read;
          auto off = h->base_offset + r.offset_delta;
          if (off >= job.mapped_end) {
            kept.push_back(std::move(r));
            continue;
          }
          if (!r.key) {
            ++job.stats.keyless_removed;
            continue;
          }
          if (job.keep_key && job.keep_key(*r.key)) {
            kept.push_back(std::move(r));
            continue;
          }
          if (map.get(*r.key) > off.value)
            continue; // a newer value of the key exists
          if (!r.value) {
            auto expiry = r.timestamp + job.delete_retention.count();
            if (job.delete_retention.count() >= 0 && expiry <= job.now) {
              ++job.stats.tombstones_removed;
              continue;
            }
            if (!job.next_tombstone_expiry || expiry < *job.next_tombstone_expiry)
              job.next_tombstone_expiry = expiry;
          }
          kept.push_back(std::move(r));
        }
        job.stats.records_kept += kept.size();
        if (kept.size() == d->records.size()) {
          if (auto err = w.write(*b))
            return fail(std::move(err));
          continue;
        }
        changed = true;
        bool producer_last = false;
        if (h->producer_id >= 0) {
          auto it = producers.find(h->producer_id);
          producer_last = it != producers.end()
                          && it->second == h->last_offset().value;
        }
        // The last batch of the file stays (bare if need be): a closed
        // segment always ends with its last offset, so no reader or
        // follower ever waits in a gap before the next segment.
        bool last_of_file = i + 1 == first + count && in.position() >= src.size;
        if (kept.empty() && !producer_last && !last_of_file)
          continue;
        auto rebuilt = rebuild_batch(*b, kept);
        if (!rebuilt)
          return fail(std::move(rebuilt.error()));
        if (kept.empty())
          ++job.stats.empty_batches_kept;
        if (auto err = w.write(*rebuilt))
          return fail(std::move(err));
      }
    }
    if (auto err = w.drain())
      return fail(std::move(err));
    if (!changed) {
      // Nothing went: the sources stay as they are.
      w.file.reset();
      (void) job.fs->remove(out.file);
    } else {
      if (auto err = w.file->sync())
        return fail(std::move(err));
      out.bytes = w.written;
      job.stats.bytes_written += w.written;
      w.file.reset();
      job.outputs.push_back(std::move(out));
    }
    first += count;
  }
  return caf::none;
}

// -- log_cleaner ----------------------------------------------------------------

log_cleaner::log_cleaner(log_cleaner_options opts)
  : opts_(opts), throttle_(opts.io_max_bytes_per_second) {
  if (opts_.threads > 0)
    worker_ = std::thread{[this] { run(); }};
}

log_cleaner::~log_cleaner() {
  {
    std::lock_guard lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable())
    worker_.join();
  std::deque<entry> rest;
  {
    std::lock_guard lk{mtx_};
    rest.swap(queue_);
  }
  for (auto& e : rest)
    e.done(make_error(ec::log_closed, "log cleaner stopped"));
}

void log_cleaner::submit(std::shared_ptr<clean_job> job,
                         producer_last_offsets producers, done_fn done) {
  {
    std::lock_guard lk{mtx_};
    if (!stopping_) {
      queue_.push_back(entry{std::move(job), std::move(producers), std::move(done)});
      ++stats_.queued;
      cv_.notify_one();
      return;
    }
  }
  done(make_error(ec::log_closed, "log cleaner stopped"));
}

void log_cleaner::run_one(entry& e) {
  auto started = std::chrono::steady_clock::now();
  auto err = run_clean(*e.job, e.producers, &throttle_, &stopping_);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - started)
                .count();
  {
    std::lock_guard lk{mtx_};
    ++stats_.runs;
    if (err)
      ++stats_.failures;
    stats_.bytes_read += e.job->stats.bytes_read;
    stats_.bytes_written += e.job->stats.bytes_written;
    stats_.last_run_seconds = secs;
  }
  if (err && !is(err, ec::log_closed))
    log::warn("log cleaner: {}: {}", e.job->dir.string(), err);
  e.done(std::move(err));
}

void log_cleaner::run() {
  std::unique_lock lk{mtx_};
  for (;;) {
    cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_)
      return;
    auto e = std::move(queue_.front());
    queue_.pop_front();
    --stats_.queued;
    lk.unlock();
    run_one(e);
    lk.lock();
  }
}

size_t log_cleaner::run_pending() {
  size_t n = 0;
  for (;;) {
    entry e;
    {
      std::lock_guard lk{mtx_};
      if (queue_.empty())
        return n;
      e = std::move(queue_.front());
      queue_.pop_front();
      --stats_.queued;
    }
    run_one(e);
    ++n;
  }
}

void log_cleaner::count_swapped(const clean_stats& s) {
  std::lock_guard lk{mtx_};
  stats_.records_removed += s.records_read - s.records_kept;
  stats_.bytes_reclaimed += s.bytes_reclaimed;
}

log_cleaner_stats log_cleaner::stats() const {
  std::lock_guard lk{mtx_};
  return stats_;
}

} // namespace ferry
