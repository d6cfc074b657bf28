#include "broker/segment.hpp"

#include "broker/node_journal.hpp"

#include "broker/big_endian.hpp"
#include "broker/file_system.hpp"
#include "broker/logging.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

namespace ferry {

namespace {

namespace L = batch_layout;

constexpr size_t read_chunk = 64u << 10;
constexpr size_t scan_chunk = 1u << 20;
/// Upper bound of one read-ahead, so a huge max_bytes does not allocate
/// beyond reason before the batches are known.
constexpr size_t max_read_ahead = 16u << 20;
/// Relative offsets and positions are 32-bit.
constexpr uint64_t offset_span_limit = uint64_t{UINT32_MAX} + 1;

/// Decodes and checks the header fields a scan needs (base offset, length,
/// magic, last offset delta, max timestamp) from the header_size bytes at
/// `h`, the batch starting at `pos` of a file of `limit` bytes. No CRC.
caf::expected<batch_position> peek_header(const char* h, uint64_t pos, uint64_t limit,
                                          size_t max_batch) {
  batch_position b;
  b.position = pos;
  auto magic = static_cast<int8_t>(h[L::magic]);
  if (magic != L::current_magic)
    return make_error(ec::bad_magic, "magic " + std::to_string(magic));
  auto len = static_cast<int32_t>(be::load<uint32_t>(h + L::batch_length));
  constexpr auto min_len = static_cast<int32_t>(L::header_size - L::log_overhead);
  if (len < min_len || static_cast<uint64_t>(len) + L::log_overhead > max_batch)
    return make_error(ec::length_overflow, "batch_length " + std::to_string(len));
  b.size = static_cast<uint32_t>(len) + L::log_overhead;
  if (pos + b.size > limit)
    return make_error(ec::truncated_batch,
                      "batch of " + std::to_string(b.size) + " bytes, file has "
                        + std::to_string(limit - pos));
  auto lod = static_cast<int32_t>(be::load<uint32_t>(h + L::last_offset_delta));
  if (lod < 0)
    return make_error(ec::malformed_record, "last_offset_delta " + std::to_string(lod));
  b.base = offset{static_cast<int64_t>(be::load<uint64_t>(h + L::base_offset))};
  b.last = b.base + lod;
  b.max_timestamp = static_cast<timestamp_ms>(be::load<uint64_t>(h + L::max_timestamp));
  return b;
}

/// Reads a segment file through one reusable buffer: fetch() makes a byte
/// range available, refilling from the file (at least `want` bytes) only when
/// the range is not buffered. peek() decodes a batch header with
/// peek_header(): cheap enough to walk thousands of batches.
class batch_reader {
public:
  batch_reader(const file_handle& f, uint64_t limit, size_t max_batch)
    : file_(f), limit_(limit), max_batch_(max_batch) {
  }

  bool contains(uint64_t pos, size_t n) const {
    return pos >= buf_pos_ && pos + n <= buf_pos_ + buf_len_;
  }

  const char* at(uint64_t pos) const {
    return buf_.get() + (pos - buf_pos_);
  }

  caf::expected<const char*> fetch(uint64_t pos, size_t n, size_t want) {
    if (contains(pos, n))
      return at(pos);
    if (pos + n > limit_)
      return make_error(ec::truncated_batch,
                        "need " + std::to_string(n) + " bytes at position "
                          + std::to_string(pos) + ", file ends at "
                          + std::to_string(limit_));
    size_t len = std::max(n, std::min(want, max_read_ahead));
    len = static_cast<size_t>(std::min<uint64_t>(len, limit_ - pos));
    if (cap_ < len) {
      buf_.reset(new char[len]);
      cap_ = len;
    }
    buf_len_ = 0;
    auto got = file_.read_at(pos, std::span<char>{buf_.get(), len});
    if (!got)
      return got.error();
    buf_pos_ = pos;
    buf_len_ = *got;
    if (*got < n)
      return make_error(ec::truncated_batch,
                        "file " + file_.path().filename().string()
                          + " ends before position " + std::to_string(pos + n));
    return at(pos);
  }

  caf::expected<batch_position> peek(uint64_t pos, size_t want) {
    auto p = fetch(pos, L::header_size, want);
    if (!p)
      return p.error();
    return peek_header(*p, pos, limit_, max_batch_);
  }

private:
  const file_handle& file_;
  uint64_t limit_;
  size_t max_batch_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  uint64_t buf_pos_ = 0;
  size_t buf_len_ = 0;
};

/// The whole content of a file, or not_found.
caf::expected<std::string> read_whole(file_system& fs, const std::filesystem::path& p) {
  auto f = fs.open(p, open_mode::existing);
  if (!f)
    return f.error();
  std::string bytes(static_cast<size_t>((*f)->size()), '\0');
  auto got = (*f)->read_at(0, std::span<char>{bytes.data(), bytes.size()});
  if (!got)
    return got.error();
  bytes.resize(*got);
  return bytes;
}

/// Reads the last `n` bytes of a file of known size.
caf::expected<std::string> read_tail(file_system& fs, const std::filesystem::path& p,
                                     uint64_t size, size_t n) {
  auto f = fs.open(p, open_mode::existing);
  if (!f)
    return f.error();
  std::string bytes(n, '\0');
  auto got = (*f)->read_at(size - n, std::span<char>{bytes.data(), n});
  if (!got)
    return got.error();
  if (*got != n)
    return make_error(ec::io_error, p.filename().string() + " shrank while read");
  return bytes;
}

caf::error corrupt(const std::filesystem::path& p, uint64_t pos, const caf::error& why) {
  return make_error(ec::corrupt_segment, p.filename().string() + " at position "
                                           + std::to_string(pos) + ": "
                                           + describe(why));
}

} // namespace

// -- names --------------------------------------------------------------------

std::string segment_file_name(offset base, std::string_view suffix) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%020lld", static_cast<long long>(base.value));
  std::string name = digits;
  name += suffix;
  return name;
}

std::optional<std::pair<offset, std::string_view>>
parse_segment_file_name(std::string_view name) {
  constexpr size_t digits = 20;
  if (name.size() <= digits)
    return std::nullopt;
  auto suffix = name.substr(digits);
  if (suffix != log_file_suffix && suffix != index_file_suffix
      && suffix != time_index_file_suffix)
    return std::nullopt;
  int64_t value = 0;
  auto num = name.substr(0, digits);
  if (!std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  auto [ptr, err] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (err != std::errc{} || ptr != num.data() + num.size())
    return std::nullopt;
  if (suffix == log_file_suffix)
    return std::pair{offset{value}, log_file_suffix};
  if (suffix == index_file_suffix)
    return std::pair{offset{value}, index_file_suffix};
  return std::pair{offset{value}, time_index_file_suffix};
}

// -- construction ---------------------------------------------------------------

// -- deferred writes ------------------------------------------------------------

/// An active journaled segment's .log file that keeps appends in memory up to
/// a limit (segment_options::defer_bytes) and writes them in one go. Reads
/// see the file followed by the kept bytes; size() is their sum. Anything
/// else that touches the file (sync, truncate) writes them first. Each kept
/// append was recorded with node_journal::record_write_deferred; writing
/// them (or discarding them with a removed file) tells the journal.
class deferred_log final : public file_handle {
public:
  deferred_log(std::shared_ptr<file_handle> inner, node_journal* journal, size_t limit)
    : inner_(std::move(inner)), journal_(journal), limit_(limit) {
  }

  ~deferred_log() override {
    if (auto err = write_out())
      log::error("{}: {} appended bytes could not be written at close: {}; the "
                 "node journal keeps them for the next start",
                 inner_->path().string(), buf_.size(), describe(err));
  }

  /// Keeps `data` (the caller then records it as deferred: kept_last() is
  /// true). When it does not fit beside what is kept, that is written first
  /// and the buffer's memory kept for the partition that filled it; `data`
  /// larger than the limit is written at once.
  caf::error append(std::string_view data) override {
    kept_last_ = false;
    if (buf_.size() + data.size() > limit_) {
      if (auto err = write_out(true))
        return err;
      if (data.size() > limit_)
        return inner_->append(data);
    }
    buf_.append(data);
    kept_last_ = true;
    return caf::none;
  }

  bool kept_last() const { return kept_last_; }

  /// The append just kept was recorded in the journal under `gen`.
  void hold(uint64_t gen) {
    if (!holds_.empty() && holds_.back().first == gen)
      ++holds_.back().second;
    else
      holds_.emplace_back(gen, 1);
  }

  caf::expected<size_t> read_at(uint64_t pos, std::span<char> out) const override {
    auto file_size = inner_->size();
    size_t got = 0;
    if (pos < file_size) {
      auto n = static_cast<size_t>(std::min<uint64_t>(out.size(), file_size - pos));
      auto r = inner_->read_at(pos, out.subspan(0, n));
      if (!r)
        return r;
      got = *r;
      if (got < n)
        return got;
    }
    if (got < out.size() && pos + got >= file_size) {
      auto from = pos + got - file_size;
      if (from < buf_.size()) {
        auto n = std::min(out.size() - got, buf_.size() - static_cast<size_t>(from));
        std::memcpy(out.data() + got, buf_.data() + from, n);
        got += n;
      }
    }
    return got;
  }

  caf::error sync() override {
    if (auto err = write_out())
      return err;
    return inner_->sync();
  }

  caf::error truncate(uint64_t size) override {
    if (auto err = write_out())
      return err;
    return inner_->truncate(size);
  }

  uint64_t size() const override { return inner_->size() + buf_.size(); }

  const std::filesystem::path& path() const override { return inner_->path(); }

  std::optional<uint64_t> device() const override { return inner_->device(); }

  caf::error sync_file_system() override {
    if (auto err = write_out())
      return err;
    return inner_->sync_file_system();
  }

  /// Writes the kept bytes with one append. On error the file is cut back
  /// to where it was and the bytes stay kept. The buffer's memory is freed
  /// (an idle segment holds none) unless `keep_memory`: a partition that
  /// filled it keeps it until its next tick instead of growing it anew.
  caf::error write_out(bool keep_memory = false) {
    if (buf_.empty()) {
      if (!keep_memory)
        std::string{}.swap(buf_);
      return caf::none;
    }
    auto before = inner_->size();
    if (auto err = inner_->append(buf_)) {
      if (inner_->size() != before)
        (void) inner_->truncate(before);
      return err;
    }
    release(keep_memory);
    return caf::none;
  }

  /// The file is being removed: what is kept is not needed any more.
  void discard() { release(false); }

private:
  void release(bool keep_memory) {
    if (keep_memory)
      buf_.clear();
    else
      std::string{}.swap(buf_);
    for (auto& [gen, n] : holds_)
      journal_->applied(gen, n);
    holds_.clear();
  }

  std::shared_ptr<file_handle> inner_;
  node_journal* journal_;
  size_t limit_;
  std::string buf_;
  bool kept_last_ = false;
  /// The journal generations of the kept appends, and how many each.
  std::vector<std::pair<uint64_t, uint64_t>> holds_;
};

// -- segment --------------------------------------------------------------------

segment::segment(file_system& fs, std::filesystem::path dir, offset base,
                 segment_options opts)
  : fs_(&fs),
    dir_(std::move(dir)),
    base_(base),
    end_(base),
    opts_(opts),
    index_(base),
    time_index_(base) {
  log_path_ = path_of(log_file_suffix);
}

segment::~segment() = default;

std::filesystem::path segment::path_of(std::string_view suffix) const {
  return dir_ / segment_file_name(base_, suffix);
}

size_t segment::pending_index_entries() const {
  return index_.pending() + time_index_.pending();
}

caf::expected<std::unique_ptr<segment>>
segment::create(file_system& fs, const std::filesystem::path& dir, offset base,
                segment_options opts) {
  std::unique_ptr<segment> s{new segment(fs, dir, base, opts)};
  // Only the .log file: the index files are made by the first
  // write_indexes() that has entries to write (an idle partition has one
  // file, not three).
  auto log = fs.open(s->path_of(log_file_suffix), open_mode::create_truncate);
  if (!log)
    return log.error();
  s->set_log(std::move(*log));
  s->index_files_pending_ = true;
  s->indexes_loaded_ = true;
  if (opts.journal)
    s->journal_seq_ = opts.journal->record_create(s->path_of(log_file_suffix));
  return s;
}

caf::error segment::create_index_files() {
  auto idx = fs_->open(path_of(index_file_suffix), open_mode::create_truncate);
  if (!idx)
    return idx.error();
  auto tidx = fs_->open(path_of(time_index_file_suffix), open_mode::create_truncate);
  if (!tidx) {
    idx->reset();
    (void) fs_->remove(path_of(index_file_suffix));
    return tidx.error();
  }
  // Nothing of either index is in a file yet.
  index_.assign(std::vector<offset_index_entry>{index_.entries()}, 0);
  time_index_.assign(std::vector<time_index_entry>{time_index_.entries()}, 0);
  index_.attach(std::move(*idx));
  time_index_.attach(std::move(*tidx));
  index_files_pending_ = false;
  return caf::none;
}

caf::expected<std::unique_ptr<segment>>
segment::open_closed(file_system& fs, const std::filesystem::path& dir, offset base,
                     offset end, segment_options opts, recovery_report& report) {
  std::unique_ptr<segment> s{new segment(fs, dir, base, opts)};
  auto log = fs.open(s->path_of(log_file_suffix), open_mode::existing);
  if (!log)
    return log.error();
  s->log_ = std::move(*log);
  s->size_ = s->log_->size();
  s->end_ = end;
  if (s->size_ == 0) {
    // Nothing to index; the caller drops empty closed segments.
    s->end_ = base;
    s->indexes_loaded_ = true;
    return s;
  }
  // Trusted: only cheap checks here (two stats, two small reads). Full
  // validation happens when the indexes are first loaded.
  auto span = static_cast<uint64_t>(end - base);
  bool ok = true;
  auto isize = fs.file_size(s->path_of(index_file_suffix));
  auto tsize = fs.file_size(s->path_of(time_index_file_suffix));
  if (!isize || !tsize || *isize % offset_index::entry_size != 0
      || *tsize % time_index::entry_size != 0 || *tsize == 0)
    ok = false;
  if (ok && *isize > 0) {
    auto tail = read_tail(fs, s->path_of(index_file_suffix), *isize,
                          offset_index::entry_size);
    if (!tail)
      return tail.error();
    auto e = offset_index::decode(*tail).front();
    ok = e.position > 0 && e.position < s->size_ && e.relative_offset < span;
  }
  if (ok) {
    auto tail = read_tail(fs, s->path_of(time_index_file_suffix), *tsize,
                          time_index::entry_size);
    if (!tail)
      return tail.error();
    auto e = time_index::decode_one(tail->data());
    ok = e.relative_offset < span;
    s->max_ts_ = e.timestamp;
  }
  if (!ok) {
    if (auto err = s->rebuild_indexes())
      return err;
    ++report.indexes_rebuilt;
  }
  return s;
}

caf::expected<std::unique_ptr<segment>>
segment::recover_active(file_system& fs, const std::filesystem::path& dir,
                        offset base, segment_options opts,
                        recovery_report& report) {
  std::unique_ptr<segment> s{new segment(fs, dir, base, opts)};
  auto log = fs.open(s->path_of(log_file_suffix), open_mode::existing);
  if (!log)
    return log.error();
  s->set_log(std::move(*log));
  uint64_t file_size = s->log_->size();
  batch_reader reader{*s->log_, file_size, opts.max_batch_bytes};

  // 1. Load both indexes as they are on disk. Both files missing: the
  //    segment never wrote an index entry (create() makes them with the
  //    first one); the scan from position 0 below indexes the whole file,
  //    and the files are made when there are entries to write. One missing
  //    means a rebuild.
  bool has_idx = static_cast<bool>(fs.file_size(s->path_of(index_file_suffix)));
  bool has_tidx = static_cast<bool>(fs.file_size(s->path_of(time_index_file_suffix)));
  bool lazy = !has_idx && !has_tidx;
  bool missing = !has_idx || !has_tidx;
  std::unique_ptr<file_handle> idx_file;
  std::unique_ptr<file_handle> tidx_file;
  if (!lazy) {
    auto i = fs.open(s->path_of(index_file_suffix), open_mode::create);
    if (!i)
      return i.error();
    idx_file = std::move(*i);
    auto t = fs.open(s->path_of(time_index_file_suffix), open_mode::create);
    if (!t)
      return t.error();
    tidx_file = std::move(*t);
  }
  auto load = [](file_handle& f) -> caf::expected<std::string> {
    std::string bytes(static_cast<size_t>(f.size()), '\0');
    auto got = f.read_at(0, std::span<char>{bytes.data(), bytes.size()});
    if (!got)
      return got.error();
    bytes.resize(*got);
    return bytes;
  };
  std::vector<offset_index_entry> entries;
  std::vector<time_index_entry> tentries;
  if (!lazy) {
    auto idx_bytes = load(*idx_file);
    if (!idx_bytes)
      return idx_bytes.error();
    auto tidx_bytes = load(*tidx_file);
    if (!tidx_bytes)
      return tidx_bytes.error();
    entries = offset_index::decode(*idx_bytes);
    tentries = time_index::decode(*tidx_bytes);
  }

  // 2. Validate. Entries whose batch header lies past the end of the file
  //    point into a lost tail: drop them. Otherwise the entries must be
  //    sorted and in range, and the last one must name a batch that starts
  //    with the expected offset; any other damage means a rebuild.
  while (!entries.empty() && entries.back().position + L::header_size > file_size)
    entries.pop_back();
  bool rebuild = offset_index::first_invalid(entries, file_size, offset_span_limit)
                   != entries.size()
                 || time_index::first_invalid(tentries, offset_span_limit)
                      != tentries.size()
                 || (!entries.empty() && tentries.empty())
                 || (missing && !lazy && file_size > 0);
  if (!rebuild && !entries.empty()) {
    auto& e = entries.back();
    auto b = reader.peek(e.position, 0);
    // A torn batch at the entry is fine (the scan below cuts it); a header
    // that names another offset is not.
    auto p = reader.fetch(e.position, L::header_size, 0);
    if (!p)
      return p.error();
    auto stored = offset{static_cast<int64_t>(be::load<uint64_t>(*p + L::base_offset))};
    if (stored != s->index_.offset_of(e)
        || static_cast<int8_t>((*p)[L::magic]) != L::current_magic
        || (!b && !is(b.error(), ec::truncated_batch)))
      rebuild = true;
  }
  if (rebuild) {
    entries.clear();
    tentries.clear();
    ++report.indexes_rebuilt;
  }

  // 3. Start the scan at the last offset-index entry (position 0 without
  //    one). The running max timestamp there is the last time-index entry's:
  //    time entries are added at offset-entry batches whenever the max grew.
  //    (Only an OS crash that kept offset-index pages but lost time-index
  //    ones can make it low; later appends correct it.)
  size_t keep = entries.size();
  uint64_t pos = 0;
  offset expected = base;
  if (!entries.empty()) {
    pos = entries.back().position;
    expected = s->index_.offset_of(entries.back());
  }
  size_t tkeep = rebuild ? 0 : tentries.size();
  if (lazy) {
    s->index_files_pending_ = true;
  } else {
    // The kept entries are a prefix of the file's; cut the file to match.
    if (idx_file->size() != keep * offset_index::entry_size)
      if (auto err = idx_file->truncate(keep * offset_index::entry_size))
        return err;
    if (tidx_file->size() != tkeep * time_index::entry_size)
      if (auto err = tidx_file->truncate(tkeep * time_index::entry_size))
        return err;
  }
  s->index_.assign(std::move(entries), keep);
  if (!tentries.empty())
    s->max_ts_ = tentries.back().timestamp;
  s->time_index_.assign(std::move(tentries), tkeep);
  if (!lazy) {
    s->index_.attach(std::move(idx_file));
    s->time_index_.attach(std::move(tidx_file));
  }
  s->indexes_loaded_ = true;

  // 4. Scan forward verifying header and CRC; cut at the first bad batch.
  while (pos < file_size) {
    caf::error bad;
    std::string why;
    auto b = reader.peek(pos, scan_chunk);
    if (!b) {
      bad = b.error();
    } else if (b->base < expected) {
      // A gap is fine (a follower copied a compacted leader); going back
      // is damage.
      why = "offset_not_increasing";
      bad = make_error(ec::malformed_record,
                       "expected offset " + std::to_string(expected.value)
                         + " or above, found " + std::to_string(b->base.value));
    } else if (b->last - base >= static_cast<int64_t>(offset_span_limit)) {
      bad = make_error(ec::length_overflow, "offset beyond the segment's 32-bit range");
    } else {
      auto p = reader.fetch(pos, b->size, scan_chunk);
      if (!p)
        return p.error();
      std::string_view bytes{*p, b->size};
      auto h = parse_batch_header(bytes, opts.max_batch_bytes);
      if (!h)
        bad = h.error();
      else
        bad = verify_batch_crc(bytes);
    }
    if (bad) {
      if (why.empty())
        why = to_string(code_of(bad));
      report.reason = why + " at position " + std::to_string(pos) + " of "
                      + s->path_of(log_file_suffix).filename().string() + " ("
                      + describe(bad) + ")";
      break;
    }
    s->index_batch(*b);
    expected = b->last + 1;
    pos += b->size;
    ++report.batches_scanned;
  }
  if (pos < file_size) {
    report.bytes_truncated += file_size - pos;
    if (auto err = s->log_->truncate(pos))
      return err;
    if (auto err = s->log_->sync())
      return err;
  }
  s->size_ = pos;
  s->end_ = expected;
  // A crashed process may have left the tail in the page cache only.
  s->dirty_ = true;

  // 5. Drop index entries into the cut tail.
  auto& es = s->index_.entries();
  auto first_out = std::find_if(es.begin(), es.end(), [&](const offset_index_entry& e) {
    return e.position >= pos;
  });
  if (auto err = s->index_.truncate(static_cast<size_t>(first_out - es.begin())))
    return err;
  auto tcount = s->time_index_.size();
  if (auto err = s->time_index_.truncate_from_offset(s->rel_of(expected)))
    return err;
  if (s->time_index_.size() != tcount || s->empty())
    if (auto err = s->recompute_max_timestamp())
      return err;
  // Entries the log needed were in no file (written after the crash).
  if (lazy && !s->index_.empty())
    ++report.indexes_rebuilt;
  return s;
}

// -- indexes ------------------------------------------------------------------

uint64_t segment::position_for(offset o) const {
  auto e = index_.lookup(o);
  return e ? e->position : 0;
}

void segment::index_batch(const batch_position& b) {
  auto running = max_ts_ ? std::max(*max_ts_, b.max_timestamp) : b.max_timestamp;
  uint64_t last = index_.empty() ? 0 : index_.back().position;
  if (b.position > last && b.position - last >= opts_.index_interval_bytes) {
    auto rel = rel_of(b.base);
    index_.append({rel, static_cast<uint32_t>(b.position)});
    time_index_.maybe_append(running, rel);
  }
  max_ts_ = running;
}

caf::error segment::rebuild_indexes() {
  index_.assign({}, 0);
  time_index_.assign({}, 0);
  max_ts_.reset();
  batch_reader reader{*log_, size_, std::numeric_limits<int32_t>::max()};
  uint64_t pos = 0;
  while (pos < size_) {
    auto b = reader.peek(pos, scan_chunk);
    if (!b)
      return corrupt(path_of(log_file_suffix), pos, b.error());
    index_batch(*b);
    pos += b->size;
  }
  if (!active()) {
    // A closed segment: complete the time index and persist both now.
    if (max_ts_)
      time_index_.maybe_append(*max_ts_, rel_of(end_ - 1));
    auto idx = fs_->open(path_of(index_file_suffix), open_mode::create_truncate);
    if (!idx)
      return idx.error();
    auto tidx = fs_->open(path_of(time_index_file_suffix), open_mode::create_truncate);
    if (!tidx)
      return tidx.error();
    index_.attach(std::move(*idx));
    time_index_.attach(std::move(*tidx));
    auto err = index_.write_pending();
    if (!err)
      err = time_index_.write_pending();
    if (!err)
      err = index_.sync();
    if (!err)
      err = time_index_.sync();
    index_.detach();
    time_index_.detach();
    // A failed write only costs another rebuild at the next open; the
    // entries in memory are complete.
    (void) err;
  }
  indexes_loaded_ = true;
  return caf::none;
}

caf::error segment::load_indexes() {
  if (indexes_loaded_)
    return caf::none;
  auto span = static_cast<uint64_t>(end_ - base_);
  auto idx = read_whole(*fs_, path_of(index_file_suffix));
  auto tidx = read_whole(*fs_, path_of(time_index_file_suffix));
  if (idx && tidx && idx->size() % offset_index::entry_size == 0
      && tidx->size() % time_index::entry_size == 0) {
    auto entries = offset_index::decode(*idx);
    auto tentries = time_index::decode(*tidx);
    if (offset_index::first_invalid(entries, size_, span) == entries.size()
        && time_index::first_invalid(tentries, span) == tentries.size()
        && !tentries.empty()) {
      auto n = entries.size();
      auto tn = tentries.size();
      index_.assign(std::move(entries), n);
      time_index_.assign(std::move(tentries), tn);
      max_ts_ = time_index_.back().timestamp;
      indexes_loaded_ = true;
      return caf::none;
    }
  }
  return rebuild_indexes();
}

caf::error segment::recompute_max_timestamp() {
  max_ts_.reset();
  offset from = base_;
  if (!time_index_.empty()) {
    max_ts_ = time_index_.back().timestamp;
    from = time_index_.offset_of(time_index_.back());
  }
  batch_reader reader{*log_, size_, std::numeric_limits<int32_t>::max()};
  for (uint64_t pos = position_for(from); pos < size_;) {
    auto b = reader.peek(pos, read_chunk);
    if (!b)
      return corrupt(path_of(log_file_suffix), pos, b.error());
    max_ts_ = max_ts_ ? std::max(*max_ts_, b->max_timestamp) : b->max_timestamp;
    pos += b->size;
  }
  return caf::none;
}

// -- writing ------------------------------------------------------------------

caf::error segment::append(std::string_view bytes, std::span<batch_position> batches,
                           bool& cut_back_failed) {
  cut_back_failed = false;
  if (auto err = log_->append(bytes)) {
    if (log_->size() != size_) {
      if (auto cut = log_->truncate(size_)) {
        cut_back_failed = true;
        return make_error(code_of(err), describe(err) + "; cutting the partial write "
                                          "back failed: " + describe(cut));
      }
    }
    return err;
  }
  if (opts_.journal) {
    if (deferred_ && deferred_->kept_last()) {
      auto w = opts_.journal->record_write_deferred(log_path_, size_, bytes);
      deferred_->hold(w.gen);
      journal_seq_ = w.seq;
    } else {
      journal_seq_ = opts_.journal->record_write(log_path_, size_, bytes);
    }
  }
  auto pos = size_;
  for (auto& b : batches) {
    b.position = pos;
    index_batch(b);
    pos += b.size;
  }
  size_ = pos;
  end_ = batches.back().last + 1;
  dirty_ = true;
  return caf::none;
}

void segment::set_log(std::shared_ptr<file_handle> f) {
  deferred_ = nullptr;
  if (opts_.journal && opts_.defer_bytes > 0) {
    auto d = std::make_shared<deferred_log>(std::move(f), opts_.journal, opts_.defer_bytes);
    deferred_ = d.get();
    log_ = std::move(d);
  } else {
    log_ = std::move(f);
  }
}

caf::error segment::write_deferred() {
  return deferred_ ? deferred_->write_out() : caf::none;
}

caf::error segment::sync_log() {
  if (!dirty_ && !unconfirmed_)
    return caf::none;
  if (opts_.journal) {
    if (auto err = opts_.journal->wait_durable(journal_seq_))
      return err;
  } else if (auto err = log_->sync()) {
    return err;
  }
  dirty_ = false;
  unconfirmed_ = false;
  return caf::none;
}

std::shared_ptr<file_handle> segment::begin_sync_log() {
  if (!dirty_)
    return nullptr;
  dirty_ = false;
  unconfirmed_ = true;
  return log_;
}

bool segment::begin_journal_sync() {
  if (!dirty_)
    return false;
  dirty_ = false;
  unconfirmed_ = true;
  return true;
}

void segment::confirm_sync(const file_handle* file) {
  if (file == log_.get())
    unconfirmed_ = false;
}

caf::error segment::write_indexes() {
  if (index_files_pending_) {
    if (pending_index_entries() == 0)
      return caf::none;
    if (auto err = create_index_files())
      return err;
  }
  if (auto err = index_.write_pending())
    return err;
  return time_index_.write_pending();
}

caf::error segment::finish_indexes() {
  if (max_ts_ && !empty())
    time_index_.maybe_append(*max_ts_, rel_of(end_ - 1));
  return write_indexes();
}

caf::error segment::sync_all() {
  if (auto err = sync_log())
    return err;
  if (auto err = index_.sync())
    return err;
  return time_index_.sync();
}

void segment::close_indexes() {
  index_.detach();
  time_index_.detach();
  index_files_pending_ = false;
}

caf::error segment::activate() {
  if (active())
    return caf::none;
  if (auto err = load_indexes())
    return err;
  auto idx = fs_->open(path_of(index_file_suffix), open_mode::create);
  if (!idx)
    return idx.error();
  auto tidx = fs_->open(path_of(time_index_file_suffix), open_mode::create);
  if (!tidx)
    return tidx.error();
  bool idx_same = (*idx)->size() == index_.size() * offset_index::entry_size;
  bool tidx_same = (*tidx)->size() == time_index_.size() * time_index::entry_size;
  index_.assign(std::vector<offset_index_entry>{index_.entries()},
                idx_same ? index_.size() : 0);
  time_index_.assign(std::vector<time_index_entry>{time_index_.entries()},
                     tidx_same ? time_index_.size() : 0);
  index_.attach(std::move(*idx));
  time_index_.attach(std::move(*tidx));
  if (!idx_same)
    if (auto err = index_.rewrite())
      return err;
  if (!tidx_same)
    if (auto err = time_index_.rewrite())
      return err;
  return caf::none;
}

caf::expected<offset> segment::truncate_to(offset end) {
  if (end >= end_)
    return end_;
  if (auto err = load_indexes())
    return err;
  uint64_t pos = 0;
  offset new_end = base_;
  if (end > base_) {
    batch_reader reader{*log_, size_, std::numeric_limits<int32_t>::max()};
    pos = position_for(end);
    for (;;) {
      auto b = reader.peek(pos, read_chunk);
      if (!b)
        return corrupt(path_of(log_file_suffix), pos, b.error());
      if (b->last >= end) {
        new_end = b->base;
        break;
      }
      pos += b->size;
    }
  }
  // Indexes first: a crash in between leaves a log longer than its index,
  // which recovery handles by scanning, never an index past the log.
  auto& es = index_.entries();
  auto first_out = std::find_if(es.begin(), es.end(), [&](const offset_index_entry& e) {
    return e.position >= pos;
  });
  if (auto err = index_.truncate(static_cast<size_t>(first_out - es.begin())))
    return err;
  if (auto err = time_index_.truncate_from_offset(rel_of(new_end)))
    return err;
  if (auto err = log_->truncate(pos))
    return err;
  if (opts_.journal)
    journal_seq_ = opts_.journal->record_truncate(log_path_, pos);
  size_ = pos;
  end_ = new_end;
  dirty_ = true;
  if (auto err = recompute_max_timestamp())
    return err;
  return new_end;
}

void segment::discard() {
  close_indexes();
  if (deferred_)
    deferred_->discard();
}

caf::error segment::remove_files() {
  close_indexes();
  if (deferred_)
    deferred_->discard();
  deferred_ = nullptr;
  log_.reset();
  if (auto err = fs_->remove(path_of(log_file_suffix)))
    return err;
  if (opts_.journal)
    journal_seq_ = opts_.journal->record_remove(path_of(log_file_suffix));
  if (auto err = fs_->remove(path_of(index_file_suffix)))
    return err;
  return fs_->remove(path_of(time_index_file_suffix));
}

// -- reading ------------------------------------------------------------------

caf::error segment::read(segment_read& r) {
  constexpr auto no_limit = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  // 1. Find the batch holding r.from: walk headers from the index entry
  //    (about index_interval_bytes, one small read).
  uint64_t pos = 0;
  if (r.from > base_) {
    if (auto err = load_indexes())
      return err;
    pos = position_for(r.from);
    batch_reader reader{*log_, size_, no_limit};
    while (pos < size_) {
      auto b = reader.peek(pos, opts_.index_interval_bytes + L::header_size);
      if (!b)
        return corrupt(path_of(log_file_suffix), pos, b.error());
      if (b->last >= r.from)
        break;
      pos += b->size;
    }
  }
  if (pos >= size_)
    return caf::none;
  // 2. Read ahead straight into the reply, then keep the whole batches that
  //    fit; read more only if the first batch is larger than the budget.
  auto base = r.data.size();
  auto budget = r.max_bytes > base ? r.max_bytes - base : 0;
  auto avail = size_ - pos;
  auto fill = [&](size_t have, size_t want) -> caf::expected<size_t> {
    want = static_cast<size_t>(std::min<uint64_t>(want, avail));
    if (want <= have)
      return have;
    r.data.resize(base + want);
    auto got = log_->read_at(pos + have,
                             std::span<char>{r.data.data() + base + have, want - have});
    if (!got)
      return got.error();
    return have + *got;
  };
  auto have = fill(0, std::max(std::min(budget, max_read_ahead), size_t{L::header_size}));
  if (!have)
    return have.error();
  size_t used = 0;
  while (pos + used < size_) {
    if (used + L::header_size > *have) {
      if (r.batches > 0 && base + used + L::header_size > r.max_bytes) {
        r.done = true; // no batch fits in what is left
        break;
      }
      have = fill(*have, used + std::max(std::min(budget - std::min(budget, used),
                                                   max_read_ahead),
                                          size_t{L::header_size}));
      if (!have)
        return have.error();
      if (used + L::header_size > *have) {
        r.data.resize(base + used);
        return corrupt(path_of(log_file_suffix), pos + used,
                       make_error(ec::truncated_batch, "short read"));
      }
    }
    auto b = peek_header(r.data.data() + base + used, pos + used, size_, no_limit);
    if (!b) {
      r.data.resize(base + used);
      return corrupt(path_of(log_file_suffix), pos + used, b.error());
    }
    if (b->last >= r.upto || (r.batches > 0 && base + used + b->size > r.max_bytes)) {
      r.done = true;
      break;
    }
    if (used + b->size > *have) {
      have = fill(*have, used + b->size);
      if (!have)
        return have.error();
      if (used + b->size > *have) {
        r.data.resize(base + used);
        return corrupt(path_of(log_file_suffix), pos + used,
                       make_error(ec::truncated_batch, "short read"));
      }
    }
    used += b->size;
    ++r.batches;
    r.next = b->last + 1;
  }
  r.data.resize(base + used);
  return caf::none;
}

caf::expected<std::optional<offset>> segment::find_timestamp(timestamp_ms ts,
                                                             offset min_offset) {
  if (auto err = load_indexes())
    return err;
  offset from = base_;
  if (auto e = time_index_.lookup_before(ts))
    from = time_index_.offset_of(*e);
  from = std::max(from, min_offset);
  batch_reader reader{*log_, size_, std::numeric_limits<int32_t>::max()};
  for (uint64_t pos = position_for(from); pos < size_;) {
    auto b = reader.peek(pos, read_chunk);
    if (!b)
      return corrupt(path_of(log_file_suffix), pos, b.error());
    pos += b->size;
    if (b->last < min_offset || b->max_timestamp < ts)
      continue;
    auto p = reader.fetch(b->position, b->size, read_chunk);
    if (!p)
      return p.error();
    auto decoded = decode_batch(std::string_view{*p, b->size},
                                std::numeric_limits<int32_t>::max());
    if (!decoded)
      return corrupt(path_of(log_file_suffix), b->position, decoded.error());
    if (decoded->header.ts_type() == timestamp_type::log_append_time)
      return std::optional<offset>{std::max(b->base, min_offset)};
    for (auto& rec : decoded->records) {
      auto o = b->base + rec.offset_delta;
      if (o >= min_offset && rec.timestamp >= ts)
        return std::optional<offset>{o};
    }
  }
  return std::optional<offset>{};
}

} // namespace ferry
