// partition_log's implementation: a sorted run of segments (segment.hpp), the
// last one active. See partition_log.hpp for the contract and FORMAT.md
// "Segments and indexes" for the files.
//
// Invariants between calls:
// - segs_ is never empty; segment i+1 starts at segment i's end; only
//   segs_.back() has its index files open (is active).
// - log_start_ <= log_end(), log_start_ >= segs_.front()->base();
//   log_start_ <= hw_ <= log_end(); durable_end_ <= log_end().
// - Every segment but the last is sealed: its log and indexes are fsynced
//   and its time index ends with (max timestamp, last offset).
//
// Failure model: a failed write is cut back and reported, the log stays as it
// was. A failed fdatasync (or a partial write that cannot be cut back)
// fences the log: the kernel may have dropped the dirty pages, so only
// reopening (which rereads the disk) is safe. Fenced logs still serve reads;
// writes and flushes return log_closed.

#include "broker/partition_log.hpp"

#include "broker/node_journal.hpp"

#include "broker/file_system.hpp"
#include "broker/log_cleaner.hpp"
#include "broker/record_batch.hpp"
#include "broker/segment.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace ferry {

timestamp_ms system_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

caf::expected<flush_job> partition_log::begin_flush() {
  auto end = flush();
  if (!end)
    return std::move(end.error());
  flush_job job;
  job.end = *end;
  return job;
}

caf::expected<offset> partition_log::end_flush(const flush_job&,
                                               caf::error result) {
  if (result)
    return result;
  return durable_end();
}

caf::expected<std::optional<clean_job>> partition_log::begin_clean(timestamp_ms) {
  return std::optional<clean_job>{};
}

caf::expected<clean_stats> partition_log::end_clean(clean_job&, caf::error result) {
  if (result)
    return result;
  return make_error(ec::invalid_argument, "this log is not compacted");
}

cleaning_status partition_log::cleaning() const {
  return {};
}

namespace {

/// Pending index entries written without waiting for a flush, so a log that
/// is never flushed keeps its index files (and recovery scans) short.
constexpr size_t max_pending_index_entries = 1024;

/// A log on the node journal writes its index entries after a flush only
/// once this many are pending (offset and time entries together), not
/// after every flush: at 1,000 partitions a flush covers ~1 batch, and the
/// two index `pwrite`s per flush were 10% of ferryd's CPU. Such a log's
/// index files were never synced nor journaled anyway: after a crash
/// recovery scans the log from the last entry on disk (at most ~8 batches
/// more), and a roll, a close or a clean stop writes them all.
constexpr size_t journal_index_batch = 16;


class disk_partition_log final : public partition_log {
public:
  disk_partition_log(std::filesystem::path dir, log_config cfg,
                     partition_checkpoint* ckpt, file_system* fs, clock_fn clock,
                     node_journal* journal)
    : dir_(std::move(dir)),
      cfg_(cfg),
      ckpt_(ckpt),
      fs_(fs),
      clock_(std::move(clock)),
      journal_(journal) {
    opts_.index_interval_bytes = cfg_.index_interval_bytes;
    opts_.journal = journal;
    opts_.defer_bytes = journal ? cfg_.journal_defer_bytes : 0;
    opts_.max_batch_bytes = std::max<size_t>(cfg_.max_batch_bytes,
                                             default_max_batch_bytes);
  }

  ~disk_partition_log() override {
    if (!closed_ && !fenced_ && !segs_.empty())
      (void) segs_.back()->write_indexes();
  }

  caf::error recover();
  caf::error recover_epochs();
  void write_indexes_after_flush();

  caf::expected<append_info> append(std::span<char> batch) override;
  caf::expected<append_info> append_replicated(std::string_view batches) override;
  caf::expected<offset> flush() override;
  caf::expected<flush_job> begin_flush() override;
  caf::expected<offset> end_flush(const flush_job& job,
                                  caf::error result) override;
  bool flush_due() const override;
  offset durable_end() const override { return durable_end_; }
  offset log_start() const override { return log_start_; }
  offset log_end() const override {
    return segs_.empty() ? end_at_close_ : segs_.back()->end();
  }
  offset high_watermark() const override { return hw_; }
  void set_high_watermark(offset hw) override {
    hw_ = std::clamp(hw, log_start_, log_end());
  }
  caf::error add_epoch(leader_epoch epoch) override;
  const std::vector<epoch_entry>& epochs() const override { return epochs_; }
  caf::error checkpoint() override;
  caf::expected<read_result> read(offset from, size_t max_bytes,
                                  offset upto) const override;
  caf::expected<std::optional<offset>>
  offset_for_timestamp(timestamp_ms ts) const override;
  caf::expected<offset> truncate_to(offset end) override;
  caf::error truncate_fully_and_start_at(offset start) override;
  caf::expected<retention_report> enforce_retention() override;
  caf::error advance_log_start(offset start) override;
  caf::error roll() override;
  caf::error write_deferred() override {
    if (closed_ || segs_.empty())
      return caf::none;
    return segs_.back()->write_deferred();
  }
  void set_config(const log_config& cfg) override;
  caf::expected<std::optional<clean_job>> begin_clean(timestamp_ms now) override;
  caf::expected<clean_stats> end_clean(clean_job& job, caf::error result) override;
  cleaning_status cleaning() const override;
  uint64_t size_bytes() const override;
  size_t segment_count() const override { return segs_.size(); }
  const recovery_report& recovery() const override { return report_; }
  caf::error close() override;
  void discard() override;

private:
  caf::error writable() const;
  caf::error fence(caf::error err);
  /// Index of the segment holding offset o (the last with base <= o).
  size_t segment_index(offset o) const;
  /// Rolls first if the active segment cannot take `bytes` more bytes up to
  /// offset `last`, or is older than segment_ms.
  caf::error maybe_roll(timestamp_ms now, uint64_t bytes, offset last);
  caf::error roll_segment(timestamp_ms now);
  /// Writes batches (validated, numbered from log_end()) to the active
  /// segment with one write.
  caf::error write_batches(timestamp_ms now, std::string_view bytes,
                           std::span<batch_position> batches, uint64_t records);
  /// Deletes every segment and starts an empty one at `start`.
  caf::error reset_to(offset start);
  caf::error remove_front_segment();
  /// Completes or discards the files a clean left behind (open()).
  caf::error recover_clean_files();
  /// The closed segments a clean may read: [0, n) of segs_.
  size_t cleanable_segments(timestamp_ms now) const;
  /// Bytes of the first n segments, and of those at or above the clean point.
  void dirty_and_total(size_t n, uint64_t& dirty, uint64_t& total) const;

  std::filesystem::path dir_;
  log_config cfg_;
  segment_options opts_;
  partition_checkpoint* ckpt_;
  file_system* fs_;
  clock_fn clock_;
  node_journal* journal_;
  std::vector<std::unique_ptr<segment>> segs_;
  offset log_start_{0};
  offset hw_{0};
  offset durable_end_{0};
  offset end_at_close_{0};
  std::vector<epoch_entry> epochs_;
  recovery_report report_;
  uint64_t unflushed_records_ = 0;
  timestamp_ms first_unflushed_ms_ = 0;
  /// When the active segment got its first batch (or the log was opened).
  timestamp_ms active_since_ms_ = 0;
  bool closed_ = false;
  caf::error fenced_;
  /// Bumped by every truncation (see flush_job::generation).
  uint64_t generation_ = 0;
  // Compaction (begin_clean / end_clean).
  bool cleaning_ = false;
  offset clean_point_{0};
  std::optional<timestamp_ms> tombstone_expiry_;
  timestamp_ms last_clean_ms_ = 0;
  uint64_t cleans_ = 0;
  uint64_t bytes_reclaimed_ = 0;
};

// -- open and recovery ---------------------------------------------------------

caf::error disk_partition_log::recover() {
  if (auto err = fs_->create_dirs(dir_))
    return err;
  if (auto err = recover_clean_files())
    return err;
  auto names = fs_->list_dir(dir_);
  if (!names)
    return names.error();
  // base -> which of the three files exist (bit 0 log, 1 index, 2 timeindex)
  std::map<offset, int> found;
  for (auto& name : *names) {
    if (auto parsed = parse_segment_file_name(name)) {
      auto [base, suffix] = *parsed;
      found[base] |= suffix == log_file_suffix ? 1 : suffix == index_file_suffix ? 2 : 4;
    }
  }
  std::vector<offset> bases;
  for (auto [base, files] : found) {
    if (files & 1) {
      bases.push_back(base);
      continue;
    }
    // Index files without a log: left behind by a deletion cut short.
    (void) fs_->remove(dir_ / segment_file_name(base, index_file_suffix));
    (void) fs_->remove(dir_ / segment_file_name(base, time_index_file_suffix));
  }
  auto md = ckpt_->load();
  if (!md)
    return md.error();
  if (bases.empty()) {
    auto start = *md ? (*md)->log_start : offset{0};
    auto s = segment::create(*fs_, dir_, start, opts_);
    if (!s)
      return s.error();
    segs_.push_back(std::move(*s));
    // On the node journal the segment's create record makes the file (and
    // its directory) exist again at a replay, and no append is acked before
    // a journal round covering that record; a checkpoint's syncfs covers the
    // directory before the record's file goes. Without it, sync the entry.
    if (!journal_)
      if (auto err = fs_->sync_dir(dir_))
        return err;
  } else {
    for (size_t i = 0; i + 1 < bases.size(); ++i) {
      auto s = segment::open_closed(*fs_, dir_, bases[i], bases[i + 1], opts_, report_);
      if (!s)
        return s.error();
      if ((*s)->empty()) {
        // An empty closed segment holds nothing; it cannot stay in the middle.
        if (auto err = (*s)->remove_files())
          return err;
        continue;
      }
      segs_.push_back(std::move(*s));
    }
    auto s = segment::recover_active(*fs_, dir_, bases.back(), opts_, report_);
    if (!s)
      return s.error();
    segs_.push_back(std::move(*s));
  }
  // Log start: the checkpoint's, never below the first segment.
  log_start_ = segs_.front()->base();
  if (*md)
    log_start_ = std::max(log_start_, (*md)->log_start);
  if (log_start_ > log_end()) {
    // The checkpoint is ahead of the data (a tail lost after the log start
    // advanced past it): continue empty at the checkpointed start.
    if (auto err = reset_to(log_start_))
      return err;
  }
  while (segs_.size() > 1 && segs_.front()->end() <= log_start_)
    if (auto err = remove_front_segment())
      return err;
  if (*md) {
    hw_ = std::clamp((*md)->high_watermark, log_start_, log_end());
    for (auto& e : (*md)->epochs)
      if (e.start_offset <= log_end())
        epochs_.push_back(e);
  } else {
    hw_ = log_start_;
  }
  // What was on disk when we opened is what we call durable from now on;
  // a process crash may have left it in the page cache only, so sync it.
  // A segment created just now holds nothing: the directory fsync above made
  // its files exist, and its first append is synced (or journaled) like any
  // other. Syncing its three empty files cost a new 10,000-partition topic
  // 20,000-30,000 fdatasyncs on the scheduler's threads.
  if (!bases.empty())
    if (auto err = segs_.back()->sync_all())
      return err;
  durable_end_ = log_end();
  active_since_ms_ = clock_();
  clean_point_ = log_start_;
  report_.segments = static_cast<uint32_t>(segs_.size());
  return recover_epochs();
}

// The epoch history is checkpointed after the batches it describes (a node
// queues its checkpoints and writes them together), so a crash can leave
// batches of epochs the loaded history lacks. A leader missing the entry of
// a follower's epoch tells it to truncate everything it has, every time it
// fetches it again: the follower never catches up (the chaos suite's seed
// 1007). A saved history is what the history was at some moment, so what
// is missing comes after its last entry: the batches from there on name
// their epochs, read only when the last batch's epoch is not in it.
caf::error disk_partition_log::recover_epochs() {
  if (log_end() <= log_start_)
    return caf::none;
  int32_t known = epochs_.empty() ? -1 : epochs_.back().epoch.value;
  auto tail = read(log_end() - 1, 1, log_end());
  if (!tail)
    return tail.error();
  auto last = parse_batch_header(tail->data, std::numeric_limits<size_t>::max());
  if (!last || last->partition_leader_epoch <= known)
    return caf::none;
  auto at = epochs_.empty() ? log_start_ : std::max(epochs_.back().start_offset, log_start_);
  size_t added = 0;
  while (at < log_end()) {
    auto rd = read(at, size_t{1} << 20, log_end());
    if (!rd)
      return rd.error();
    if (rd->data.empty())
      break;
    std::string_view data = rd->data;
    while (!data.empty()) {
      auto h = parse_batch_header(data, std::numeric_limits<size_t>::max());
      if (!h || h->total_size() > data.size())
        break;
      if (h->partition_leader_epoch > known) {
        known = h->partition_leader_epoch;
        epochs_.push_back({leader_epoch{known}, std::max(h->base_offset, log_start_)});
        ++added;
      }
      data.remove_prefix(h->total_size());
    }
    if (rd->next_offset <= at)
      break;
    at = rd->next_offset;
  }
  if (added > 0)
    return checkpoint();
  return caf::none;
}

} // namespace

caf::expected<std::unique_ptr<partition_log>>
partition_log::open(const std::filesystem::path& dir, log_config cfg,
                    partition_checkpoint* checkpoint, file_system* fs,
                    clock_fn clock, node_journal* journal) {
  if (checkpoint == nullptr)
    return make_error(ec::invalid_argument, "partition_log::open needs a checkpoint");
  if (cfg.segment_bytes == 0)
    return make_error(ec::invalid_argument, "segment_bytes must be > 0");
  if (cfg.max_batch_bytes < batch_layout::header_size)
    return make_error(ec::invalid_argument,
                      "max_batch_bytes must be at least one batch header");
  if (fs == nullptr)
    fs = &default_file_system();
  if (!clock)
    clock = system_now_ms;
  if (journal)
    journal->adopt(dir);
  auto log = std::make_unique<disk_partition_log>(dir, cfg, checkpoint, fs,
                                                  std::move(clock), journal);
  if (auto err = log->recover())
    return err;
  return std::unique_ptr<partition_log>{std::move(log)};
}

namespace {

// -- state ----------------------------------------------------------------------

caf::error disk_partition_log::writable() const {
  if (closed_)
    return make_error(ec::log_closed, "partition log " + dir_.string() + " is closed");
  if (fenced_)
    return make_error(ec::log_closed, "partition log " + dir_.string()
                                        + " stopped writing after: " + describe(fenced_));
  return caf::none;
}

caf::error disk_partition_log::fence(caf::error err) {
  fenced_ = err;
  return err;
}

size_t disk_partition_log::segment_index(offset o) const {
  auto it = std::upper_bound(segs_.begin(), segs_.end(), o,
                             [](offset x, const std::unique_ptr<segment>& s) {
                               return x < s->base();
                             });
  return it == segs_.begin() ? 0 : static_cast<size_t>(it - segs_.begin()) - 1;
}

uint64_t disk_partition_log::size_bytes() const {
  uint64_t n = 0;
  for (auto& s : segs_)
    n += s->size();
  return n;
}

// -- appending --------------------------------------------------------------------

caf::error disk_partition_log::maybe_roll(timestamp_ms now, uint64_t bytes, offset last) {
  auto& a = *segs_.back();
  if (a.empty())
    return caf::none;
  // Positions and relative offsets in the indexes are 32-bit.
  auto limit = std::min<uint64_t>(cfg_.segment_bytes, UINT32_MAX);
  bool full = a.size() + bytes > limit;
  bool wide = last - a.base() > int64_t{UINT32_MAX};
  bool old = cfg_.segment_ms.count() > 0 && now - active_since_ms_ >= cfg_.segment_ms.count();
  if (full || wide || old)
    return roll_segment(now);
  return caf::none;
}

caf::error disk_partition_log::roll_segment(timestamp_ms now) {
  auto& a = *segs_.back();
  if (auto err = a.write_deferred())
    return err;
  // A closed segment must be complete on disk: recovery trusts it.
  if (auto err = a.finish_indexes())
    return err;
  if (auto err = a.sync_all())
    return fence(err);
  auto s = segment::create(*fs_, dir_, a.end(), opts_);
  if (!s)
    return s.error();
  if (auto err = fs_->sync_dir(dir_)) {
    (void) (*s)->remove_files();
    return fence(err);
  }
  a.close_indexes();
  segs_.push_back(std::move(*s));
  // Everything below the new segment was just synced.
  durable_end_ = log_end();
  unflushed_records_ = 0;
  active_since_ms_ = now;
  return caf::none;
}

caf::error disk_partition_log::write_batches(timestamp_ms now, std::string_view bytes,
                                             std::span<batch_position> batches,
                                             uint64_t records) {
  auto& a = *segs_.back();
  bool was_empty = a.empty();
  bool cut_back_failed = false;
  if (auto err = a.append(bytes, batches, cut_back_failed))
    return cut_back_failed ? fence(err) : err;
  if (was_empty)
    active_since_ms_ = now;
  if (unflushed_records_ == 0)
    first_unflushed_ms_ = now;
  unflushed_records_ += records;
  if (a.pending_index_entries() >= max_pending_index_entries)
    (void) a.write_indexes();
  return caf::none;
}

caf::expected<append_info> disk_partition_log::append(std::span<char> batch) {
  if (auto err = writable())
    return err;
  if (batch.size() > cfg_.max_batch_bytes)
    return make_error(ec::message_too_large,
                      "batch of " + std::to_string(batch.size())
                        + " bytes exceeds max_batch_bytes "
                        + std::to_string(cfg_.max_batch_bytes));
  std::string_view bytes{batch.data(), batch.size()};
  auto h = parse_batch_header(bytes, std::numeric_limits<size_t>::max());
  if (!h)
    return h.error();
  if (h->total_size() != batch.size())
    return make_error(ec::length_overflow,
                      "append takes exactly one batch: got " + std::to_string(batch.size())
                        + " bytes, the header says " + std::to_string(h->total_size()));
  if (h->last_offset_delta < 0)
    return make_error(ec::malformed_record, "last_offset_delta "
                                              + std::to_string(h->last_offset_delta));
  if (auto err = verify_batch_crc(bytes))
    return err;
  auto now = clock_();
  if (auto err = maybe_roll(now, batch.size(), log_end() + h->last_offset_delta))
    return err;
  auto base = log_end();
  set_base_offset(batch, base);
  batch_position b{0, static_cast<uint32_t>(batch.size()), base,
                   base + h->last_offset_delta, h->max_timestamp};
  auto records = static_cast<uint64_t>(std::max(h->records_count, 0));
  if (auto err = write_batches(now, bytes, std::span{&b, 1}, records)) {
    set_base_offset(batch, h->base_offset);
    return err;
  }
  return append_info{base, b.last, h->max_timestamp,
                     static_cast<uint32_t>(records), batch.size()};
}

caf::expected<append_info>
disk_partition_log::append_replicated(std::string_view batches) {
  if (auto err = writable())
    return err;
  // Validate everything first: a bad batch changes nothing.
  std::vector<batch_position> parsed;
  std::vector<uint64_t> records;
  append_info info{log_end(), log_end() - 1, 0, 0, 0};
  offset expected = log_end();
  size_t pos = 0;
  while (pos < batches.size()) {
    auto rest = batches.substr(pos);
    auto h = parse_batch_header(rest, std::numeric_limits<size_t>::max());
    if (!h)
      return h.error();
    if (h->total_size() > cfg_.max_batch_bytes)
      return make_error(ec::message_too_large,
                        "batch of " + std::to_string(h->total_size())
                          + " bytes exceeds max_batch_bytes "
                          + std::to_string(cfg_.max_batch_bytes));
    if (h->last_offset_delta < 0)
      return make_error(ec::malformed_record, "last_offset_delta "
                                                + std::to_string(h->last_offset_delta));
    if (auto err = verify_batch_crc(rest.substr(0, h->total_size())))
      return err;
    // Offsets may skip (the leader's log is compacted), never go back.
    if (h->base_offset < expected)
      return make_error(ec::offset_out_of_range,
                        "replicated batch at byte " + std::to_string(pos)
                          + " has base offset " + std::to_string(h->base_offset.value)
                          + ", the log expects " + std::to_string(expected.value)
                          + " or above");
    parsed.push_back({pos, static_cast<uint32_t>(h->total_size()), h->base_offset,
                      h->last_offset(), h->max_timestamp});
    records.push_back(static_cast<uint64_t>(std::max(h->records_count, 0)));
    info.last_offset = h->last_offset();
    info.max_timestamp = parsed.size() == 1 ? h->max_timestamp
                                            : std::max(info.max_timestamp, h->max_timestamp);
    info.records += static_cast<uint32_t>(records.back());
    info.bytes += h->total_size();
    expected = h->next_offset();
    pos += h->total_size();
  }
  if (!parsed.empty())
    info.base_offset = parsed.front().base;
  // Write runs of batches that fit the active segment, one write per run.
  auto start_end = log_end();
  auto now = clock_();
  auto limit = std::min<uint64_t>(cfg_.segment_bytes, UINT32_MAX);
  for (size_t i = 0; i < parsed.size();) {
    caf::error err = maybe_roll(now, parsed[i].size, parsed[i].last);
    size_t j = i + 1;
    uint64_t run_bytes = parsed[i].size;
    uint64_t run_records = records[i];
    if (!err) {
      auto& a = *segs_.back();
      while (j < parsed.size() && a.size() + run_bytes + parsed[j].size <= limit
             && parsed[j].last - a.base() <= int64_t{UINT32_MAX}) {
        run_bytes += parsed[j].size;
        run_records += records[j];
        ++j;
      }
      auto first = parsed[i].position;
      err = write_batches(now, batches.substr(first, run_bytes),
                          std::span{parsed.data() + i, j - i}, run_records);
    }
    if (err) {
      // Leave the log as it was before this call.
      if (!fenced_ && log_end() != start_end)
        (void) truncate_to(start_end);
      return err;
    }
    i = j;
  }
  return info;
}

// -- durability ---------------------------------------------------------------

void disk_partition_log::write_indexes_after_flush() {
  auto& a = *segs_.back();
  if (journal_ && a.pending_index_entries() < journal_index_batch)
    return;
  (void) a.write_indexes();
}

caf::expected<offset> disk_partition_log::flush() {
  if (auto err = writable())
    return err;
  auto& a = *segs_.back();
  if (auto err = a.sync_log())
    return fence(err);
  // After the data is durable, so an index entry on disk never points past
  // durable data. Not synced: the index is rebuildable.
  write_indexes_after_flush();
  durable_end_ = log_end();
  unflushed_records_ = 0;
  return durable_end_;
}

caf::expected<flush_job> disk_partition_log::begin_flush() {
  if (auto err = writable())
    return err;
  flush_job job;
  job.end = log_end();
  job.generation = generation_;
  if (journal_) {
    // Everything this log recorded is queued in the journal by now.
    if (segs_.back()->begin_journal_sync())
      job.journal_seq = journal_->last_seq();
  } else {
    job.file = segs_.back()->begin_sync_log();
  }
  unflushed_records_ = 0;
  return job;
}

caf::expected<offset> disk_partition_log::end_flush(const flush_job& job,
                                                    caf::error result) {
  if (auto err = writable())
    return err;
  if (result)
    return fence(std::move(result));
  if (job.generation != generation_)
    return durable_end_;
  // A roll in between synced everything up to its point already.
  if (job.journal_seq != 0)
    segs_.back()->confirm_journal_sync();
  else
    segs_.back()->confirm_sync(job.file.get());
  durable_end_ = std::max(durable_end_, std::min(job.end, log_end()));
  write_indexes_after_flush();
  return durable_end_;
}

bool disk_partition_log::flush_due() const {
  if (unflushed_records_ == 0 || closed_)
    return false;
  auto& p = cfg_.flush;
  if (p.messages > 0 && unflushed_records_ >= p.messages)
    return true;
  return p.interval.count() > 0 && clock_() - first_unflushed_ms_ >= p.interval.count();
}

caf::error disk_partition_log::add_epoch(leader_epoch epoch) {
  if (auto err = writable())
    return err;
  if (!epochs_.empty()) {
    auto& last = epochs_.back();
    if (epoch == last.epoch)
      return caf::none;
    if (epoch < last.epoch)
      return make_error(ec::invalid_argument,
                        "leader epoch " + std::to_string(epoch.value)
                          + " is older than the latest " + std::to_string(last.epoch.value));
    if (last.start_offset == log_end()) {
      // The previous epoch wrote nothing: the new one replaces it.
      last.epoch = epoch;
      return caf::none;
    }
  }
  epochs_.push_back({epoch, log_end()});
  return caf::none;
}

caf::error disk_partition_log::checkpoint() {
  if (closed_)
    return make_error(ec::log_closed, "partition log " + dir_.string() + " is closed");
  return ckpt_->save({log_start_, hw_, epochs_});
}

// -- reading ------------------------------------------------------------------

caf::expected<read_result> disk_partition_log::read(offset from, size_t max_bytes,
                                                    offset upto) const {
  if (closed_)
    return make_error(ec::log_closed, "partition log " + dir_.string() + " is closed");
  if (from < log_start_ || from > log_end())
    return make_error(ec::offset_out_of_range,
                      "offset " + std::to_string(from.value) + " outside ["
                        + std::to_string(log_start_.value) + ", "
                        + std::to_string(log_end().value) + "]");
  read_result result;
  result.next_offset = from;
  if (from == log_end() || from >= upto)
    return result;
  segment_read r;
  r.from = from;
  r.max_bytes = max_bytes;
  r.upto = upto;
  r.next = from;
  for (auto i = segment_index(from); i < segs_.size() && !r.done; ++i)
    if (auto err = segs_[i]->read(r))
      return err;
  result.data = std::move(r.data);
  result.next_offset = r.next;
  result.batches = r.batches;
  return result;
}

caf::expected<std::optional<offset>>
disk_partition_log::offset_for_timestamp(timestamp_ms ts) const {
  if (closed_)
    return make_error(ec::log_closed, "partition log " + dir_.string() + " is closed");
  for (auto i = segment_index(log_start_); i < segs_.size(); ++i) {
    auto& s = *segs_[i];
    auto m = s.max_timestamp();
    if (!m || *m < ts)
      continue;
    auto found = s.find_timestamp(ts, log_start_);
    if (!found || *found)
      return found;
  }
  return std::optional<offset>{};
}

// -- truncation and retention ----------------------------------------------------

caf::error disk_partition_log::remove_front_segment() {
  if (auto err = segs_.front()->remove_files())
    return err;
  segs_.erase(segs_.begin());
  return caf::none;
}

caf::error disk_partition_log::reset_to(offset start) {
  while (!segs_.empty()) {
    if (auto err = segs_.back()->remove_files())
      return err;
    segs_.pop_back();
  }
  auto s = segment::create(*fs_, dir_, start, opts_);
  if (!s)
    return s.error();
  segs_.push_back(std::move(*s));
  return fs_->sync_dir(dir_);
}

caf::error disk_partition_log::truncate_fully_and_start_at(offset start) {
  if (auto err = writable())
    return err;
  if (start.value < 0)
    return make_error(ec::invalid_argument,
                      "cannot start a log at " + std::to_string(start.value));
  if (auto err = reset_to(start))
    return fence(err);
  ++generation_;
  log_start_ = start;
  clean_point_ = start;
  hw_ = start;
  durable_end_ = start;
  unflushed_records_ = 0;
  epochs_.clear();
  active_since_ms_ = clock_();
  return checkpoint();
}

caf::expected<offset> disk_partition_log::truncate_to(offset end) {
  if (auto err = writable())
    return err;
  if (end >= log_end())
    return log_end();
  if (end < log_start_)
    return make_error(ec::offset_out_of_range,
                      "cannot truncate to " + std::to_string(end.value)
                        + ", below the log start " + std::to_string(log_start_.value));
  ++generation_;
  // Any failure past this point leaves files and memory out of step.
  auto i = segment_index(end);
  while (segs_.size() > i + 1) {
    if (auto err = segs_.back()->remove_files())
      return fence(err);
    segs_.pop_back();
  }
  auto& s = *segs_.back();
  if (auto err = s.activate())
    return fence(err);
  auto new_end = s.truncate_to(end);
  if (!new_end)
    return fence(new_end.error());
  if (s.empty() && segs_.size() > 1) {
    if (auto err = s.remove_files())
      return fence(err);
    segs_.pop_back();
    if (auto err = segs_.back()->activate())
      return fence(err);
  }
  if (log_end() < log_start_) {
    // The batch holding the log start went too: continue empty there.
    if (auto err = reset_to(log_start_))
      return fence(err);
  }
  if (auto err = segs_.back()->sync_all())
    return fence(err);
  if (auto err = fs_->sync_dir(dir_))
    return fence(err);
  std::erase_if(epochs_, [&](const epoch_entry& e) { return e.start_offset >= log_end(); });
  hw_ = std::min(hw_, log_end());
  clean_point_ = std::clamp(clean_point_, log_start_, log_end());
  durable_end_ = log_end();
  unflushed_records_ = 0;
  active_since_ms_ = clock_();
  if (auto err = checkpoint())
    return err;
  return log_end();
}

caf::expected<retention_report> disk_partition_log::enforce_retention() {
  if (auto err = writable())
    return err;
  retention_report rep;
  auto now = clock_();
  auto total = size_bytes();
  // Only whole segments below the high watermark: data followers or
  // consumers have not been offered yet is never dropped.
  while (segs_.size() > 1 && segs_.front()->end() <= hw_) {
    auto& s = *segs_.front();
    auto m = s.max_timestamp();
    bool by_time = cfg_.retention_ms.count() >= 0 && m
                   && *m < now - cfg_.retention_ms.count();
    bool by_size = cfg_.retention_bytes >= 0
                   && total > static_cast<uint64_t>(cfg_.retention_bytes);
    if (!by_time && !by_size)
      break;
    auto size = s.size();
    if (auto err = remove_front_segment())
      return err;
    total -= size;
    ++rep.segments_deleted;
    rep.bytes_deleted += size;
  }
  if (rep.segments_deleted > 0) {
    log_start_ = std::max(log_start_, segs_.front()->base());
    hw_ = std::max(hw_, log_start_);
    clean_point_ = std::max(clean_point_, log_start_);
    if (auto err = checkpoint())
      return err;
  }
  rep.new_log_start = log_start_;
  return rep;
}

caf::error disk_partition_log::advance_log_start(offset start) {
  if (auto err = writable())
    return err;
  if (start <= log_start_)
    return caf::none;
  if (start > log_end())
    return make_error(ec::offset_out_of_range,
                      "cannot move the log start to " + std::to_string(start.value)
                        + ", past the log end " + std::to_string(log_end().value));
  log_start_ = start;
  hw_ = std::max(hw_, log_start_);
  clean_point_ = std::max(clean_point_, log_start_);
  // Checkpoint first: if deleting fails or crashes, open() deletes the
  // segments wholly below the checkpointed start.
  if (auto err = checkpoint())
    return err;
  while (segs_.size() > 1 && segs_.front()->end() <= log_start_)
    if (auto err = remove_front_segment())
      return err;
  return caf::none;
}

// -- compaction -----------------------------------------------------------------

namespace {

constexpr std::string_view cleaned_suffix = ".cleaned";
constexpr std::string_view swap_suffix = ".swap";

/// "<20 digits>.log<suffix>" -> base.
std::optional<offset> parse_clean_file_name(std::string_view name,
                                            std::string_view suffix) {
  if (name.size() <= suffix.size() || !name.ends_with(suffix))
    return std::nullopt;
  auto parsed = parse_segment_file_name(name.substr(0, name.size() - suffix.size()));
  if (!parsed || parsed->second != log_file_suffix)
    return std::nullopt;
  return parsed->first;
}

std::filesystem::path swap_path_of(const std::filesystem::path& dir, offset base) {
  return dir / (segment_file_name(base, log_file_suffix) + std::string{swap_suffix});
}

} // namespace

// A crash during a clean leaves <base>.log.cleaned (not committed: removed)
// or <base>.log.swap (committed: the swap is completed here). See FORMAT.md,
// "Compaction".
caf::error disk_partition_log::recover_clean_files() {
  auto names = fs_->list_dir(dir_);
  if (!names)
    return names.error();
  std::vector<offset> swaps;
  bool changed = false;
  for (auto& name : *names) {
    if (parse_clean_file_name(name, cleaned_suffix)) {
      if (auto err = fs_->remove(dir_ / name))
        return err;
      changed = true;
    } else if (auto b = parse_clean_file_name(name, swap_suffix)) {
      swaps.push_back(*b);
    }
  }
  std::sort(swaps.begin(), swaps.end());
  for (auto base : swaps) {
    auto swap = swap_path_of(dir_, base);
    auto last = last_offset_in_file(*fs_, swap, opts_.max_batch_bytes);
    if (!last)
      return make_error(ec::corrupt_segment,
                        "cannot complete the clean of " + swap.string() + ": "
                          + describe(last.error()));
    // Every segment the cleaned file replaces starts in (base, last]; the
    // first one is replaced by the rename below.
    for (auto& name : *names) {
      auto parsed = parse_segment_file_name(name);
      if (!parsed)
        continue;
      auto [b, suffix] = *parsed;
      bool replaced = b == base ? suffix != log_file_suffix
                                : *last && b > base && b <= **last;
      if (replaced)
        if (auto err = fs_->remove(dir_ / name))
          return err;
    }
    if (auto err = fs_->rename(swap, dir_ / segment_file_name(base, log_file_suffix)))
      return err;
    changed = true;
  }
  if (changed)
    return fs_->sync_dir(dir_);
  return caf::none;
}

size_t disk_partition_log::cleanable_segments(timestamp_ms now) const {
  // Closed segments wholly below the high watermark, stopping at the first
  // one still within min.compaction.lag or with journal records a replay
  // could still apply.
  auto lag = cfg_.compaction.min_compaction_lag.count();
  auto checkpointed = journal_ ? journal_->checkpointed_seq() : 0;
  size_t n = 0;
  while (n + 1 < segs_.size()) {
    auto& seg = *segs_[n];
    auto end = segs_[n + 1]->base();
    if (end > hw_)
      break;
    if (lag > 0) {
      auto m = seg.max_timestamp();
      if (m && *m > now - lag)
        break;
    }
    if (journal_ && seg.journal_seq() > checkpointed)
      break;
    ++n;
  }
  return n;
}

void disk_partition_log::dirty_and_total(size_t n, uint64_t& dirty,
                                         uint64_t& total) const {
  dirty = total = 0;
  for (size_t i = 0; i < n; ++i) {
    auto size = segs_[i]->size();
    total += size;
    // A segment that holds the clean point counts as dirty.
    if (segs_[i + 1]->base() > clean_point_)
      dirty += size;
  }
}

cleaning_status disk_partition_log::cleaning() const {
  cleaning_status st;
  st.clean_point = clean_point_;
  st.last_clean_ms = last_clean_ms_;
  st.cleans = cleans_;
  st.bytes_reclaimed = bytes_reclaimed_;
  if (!cfg_.compaction.compact || closed_)
    return st;
  dirty_and_total(cleanable_segments(clock_()), st.dirty_bytes, st.cleanable_bytes);
  if (st.cleanable_bytes > 0)
    st.dirty_ratio = static_cast<double>(st.dirty_bytes)
                     / static_cast<double>(st.cleanable_bytes);
  return st;
}

caf::expected<std::optional<clean_job>>
disk_partition_log::begin_clean(timestamp_ms now) {
  std::optional<clean_job> none;
  if (!cfg_.compaction.compact || cleaning_ || closed_ || fenced_)
    return none;
  auto n = cleanable_segments(now);
  if (n == 0)
    return none;
  uint64_t total = 0;
  uint64_t dirty = 0;
  dirty_and_total(n, dirty, total);
  bool overdue = false;
  auto max_lag = cfg_.compaction.max_compaction_lag;
  for (size_t i = 0; i < n && max_lag != std::chrono::milliseconds::max(); ++i) {
    auto m = segs_[i]->max_timestamp();
    if (segs_[i + 1]->base() > clean_point_ && m && *m <= now - max_lag.count())
      overdue = true;
  }
  bool ratio = total > 0 && dirty > 0
               && static_cast<double>(dirty) / static_cast<double>(total)
                    >= cfg_.compaction.min_cleanable_dirty_ratio;
  bool tombstones = tombstone_expiry_ && *tombstone_expiry_ <= now;
  if (!ratio && !overdue && !tombstones)
    return none;
  clean_job job;
  job.dir = dir_;
  job.fs = fs_;
  job.first_dirty = std::max(clean_point_, log_start_);
  for (size_t i = 0; i < n; ++i) {
    auto& seg = *segs_[i];
    // Its own handle: the cleaner's thread reads while this one may too.
    auto f = fs_->open(seg.path_of(log_file_suffix), open_mode::existing);
    if (!f)
      return std::move(f.error());
    job.sources.push_back(clean_source{seg.base(), segs_[i + 1]->base(),
                                       seg.size(),
                                       std::shared_ptr<file_handle>{std::move(*f)}});
  }
  job.first_dirty = std::min(job.first_dirty, job.sources.back().end);
  job.now = now;
  job.delete_retention = cfg_.compaction.delete_retention;
  job.max_output_bytes = std::min<uint64_t>(cfg_.segment_bytes, UINT32_MAX);
  job.max_batch_bytes = opts_.max_batch_bytes;
  job.generation = generation_;
  cleaning_ = true;
  return std::optional<clean_job>{std::move(job)};
}

caf::expected<clean_stats> disk_partition_log::end_clean(clean_job& job,
                                                         caf::error result) {
  cleaning_ = false;
  auto discard = [&] {
    for (auto& o : job.outputs)
      (void) fs_->remove(o.file);
    job.outputs.clear();
  };
  if (result) {
    discard();
    return result;
  }
  if (closed_ || fenced_ || job.generation != generation_) {
    discard();
    return make_error(ec::log_closed, "the log changed during the clean of "
                                        + dir_.string());
  }
  clean_stats stats = job.stats;
  for (auto& out : job.outputs) {
    // The segments it replaces must still be exactly those the job read
    // (retention may have removed the first ones meanwhile).
    auto& head = job.sources[out.first];
    auto i = segment_index(head.base);
    bool same = i + out.count < segs_.size() && segs_[i]->base() == head.base;
    for (size_t k = 0; same && k < out.count; ++k) {
      auto& src = job.sources[out.first + k];
      same = segs_[i + k]->base() == src.base && segs_[i + k + 1]->base() == src.end
             && segs_[i + k]->size() == src.size;
    }
    if (!same) {
      (void) fs_->remove(out.file);
      continue;
    }
    // Commit point: the rename to .swap (made durable by the directory
    // fsync). From here a crash completes the swap at open().
    auto swap = swap_path_of(dir_, head.base);
    if (auto err = fs_->rename(out.file, swap))
      return fence(err);
    if (auto err = fs_->sync_dir(dir_))
      return fence(err);
    uint64_t replaced = 0;
    auto end = segs_[i + out.count]->base();
    for (size_t k = out.count; k-- > 0;) {
      auto& seg = *segs_[i + k];
      replaced += seg.size();
      caf::error err;
      if (k == 0) {
        // The first segment's .log is replaced by the rename: removing it
        // through the journal would let a replay remove the cleaned file.
        err = fs_->remove(seg.path_of(index_file_suffix));
        if (!err)
          err = fs_->remove(seg.path_of(time_index_file_suffix));
      } else {
        err = seg.remove_files();
      }
      if (err)
        return fence(err);
    }
    if (auto err = fs_->rename(swap, dir_ / segment_file_name(head.base, log_file_suffix)))
      return fence(err);
    if (auto err = fs_->sync_dir(dir_))
      return fence(err);
    recovery_report ignored;
    auto cleaned = segment::open_closed(*fs_, dir_, head.base, end, opts_, ignored);
    if (!cleaned)
      return fence(cleaned.error());
    segs_.erase(segs_.begin() + static_cast<ptrdiff_t>(i),
                segs_.begin() + static_cast<ptrdiff_t>(i + out.count));
    segs_.insert(segs_.begin() + static_cast<ptrdiff_t>(i), std::move(*cleaned));
    stats.bytes_reclaimed += replaced > out.bytes ? replaced - out.bytes : 0;
  }
  job.outputs.clear();
  clean_point_ = std::max(clean_point_, std::min(job.mapped_end, log_end()));
  tombstone_expiry_ = job.next_tombstone_expiry;
  last_clean_ms_ = clock_();
  ++cleans_;
  bytes_reclaimed_ += stats.bytes_reclaimed;
  return stats;
}

void disk_partition_log::set_config(const log_config& cfg) {
  cfg_ = cfg;
  // Existing segments keep their index interval; new ones get the new one.
  opts_.index_interval_bytes = cfg_.index_interval_bytes;
  opts_.max_batch_bytes = std::max<size_t>(cfg_.max_batch_bytes, default_max_batch_bytes);
  opts_.defer_bytes = journal_ ? cfg_.journal_defer_bytes : 0;
}

caf::error disk_partition_log::roll() {
  if (auto err = writable())
    return err;
  if (segs_.back()->empty())
    return caf::none;
  return roll_segment(clock_());
}

caf::error disk_partition_log::close() {
  if (closed_)
    return caf::none;
  caf::error result;
  if (!fenced_) {
    if (auto err = segs_.back()->write_deferred())
      result = err;
    auto flushed = flush();
    if (!flushed)
      result = flushed.error();
    else if (auto err = segs_.back()->write_indexes())
      result = err;
  }
  if (auto err = ckpt_->save_at_close({log_start_, hw_, epochs_}); err && !result)
    result = err;
  end_at_close_ = log_end();
  closed_ = true;
  segs_.clear();
  return result;
}

void disk_partition_log::discard() {
  if (closed_)
    return;
  for (auto& s : segs_)
    s->discard();
  end_at_close_ = log_end();
  closed_ = true;
  segs_.clear();
}

} // namespace

} // namespace ferry
