#pragma once
// node_probe: the node-wide metrics: disk of the data dir, the metadata
// quorum (Raft) as this node sees it, failed client requests by code, and
// client requests relayed to another node.
// One per node; ferryd (or the node actor) creates it next to the registry.
//
// Traffic totals (ferry_bytes_in_total, ferry_messages_out_total, ...) are
// counted per topic by the partition probes, where records are appended and
// read; the node must not count them again.
//
// Every node runs Raft (a node without --voters is a quorum of one, its
// own leader): raft() reports what its quorum member says.
//
// Lifecycle: shared_ptr or plain member; thread-safe (every call only sets
// or adds to a series).

#include <caf/fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace prometheus {
class Counter;
class Gauge;
} // namespace prometheus

namespace ferry::metrics {

class registry;
template <class T>
class family;

class node_probe {
public:
  /// Adds the node-wide series (disk and Raft gauges at 0).
  explicit node_probe(std::shared_ptr<registry> reg);
  /// Removes the node-wide series.
  ~node_probe();
  node_probe(const node_probe&) = delete;
  node_probe& operator=(const node_probe&) = delete;

  /// Used and available bytes of the data dir's file system.
  void disk(uint64_t used_bytes, uint64_t free_bytes);

  /// Samples the file system holding `data_dir` (statvfs): used = (blocks -
  /// free blocks) * fragment size; free = blocks available to unprivileged
  /// users * fragment size. Returns io_error if statvfs fails (the gauges
  /// keep their last values).
  caf::error sample_disk(const std::filesystem::path& data_dir);

  /// The node journal's totals so far (counters move by the difference to
  /// the last call; the series appear on the first call).
  void journal(uint64_t rounds, uint64_t bytes, uint64_t checkpoints,
               uint64_t files);

  /// The log cleaner's totals so far (counters move by the difference to
  /// the last call; the series appear on the first call).
  void cleaner(uint64_t runs, uint64_t failures, uint64_t bytes_read,
               uint64_t bytes_written, uint64_t bytes_reclaimed,
               uint64_t records_removed, double last_run_seconds);

  /// The metadata quorum as this node knows it.
  void raft(int64_t term, bool is_leader, int64_t commit_index);

  /// A client request failed with the error code named `code`.
  void request_failed(std::string_view code);

  /// A client request failed with `err`: ferry errors count under their
  /// code's name (ferry::to_string(ec)), others under "other".
  void request_failed(const caf::error& err);
  /// The node relayed a client's partition request of `kind` ("produce",
  /// "fetch", "offsets") to the node leading the partition.
  void forwarded(std::string_view kind);

private:
  // Declared first: destroyed last, after the series are released.
  std::shared_ptr<registry> reg_;
  prometheus::Gauge* disk_used_;
  prometheus::Gauge* disk_free_;
  prometheus::Gauge* raft_term_;
  prometheus::Gauge* raft_is_leader_;
  prometheus::Gauge* raft_commit_index_;
  std::mutex journal_mtx_;
  prometheus::Counter* journal_rounds_ = nullptr;
  prometheus::Counter* journal_bytes_ = nullptr;
  prometheus::Counter* journal_checkpoints_ = nullptr;
  prometheus::Gauge* journal_files_ = nullptr;
  uint64_t journal_seen_[3] = {0, 0, 0};
  prometheus::Counter* cleaner_[6] = {};
  prometheus::Gauge* cleaner_last_run_ = nullptr;
  uint64_t cleaner_seen_[6] = {};
  /// Counters by one label's value, added on first use.
  using counters = std::map<std::string, prometheus::Counter*, std::less<>>;

  /// Adds 1 to the series of `family` with label=value in `series`.
  void increment(counters& series, family<prometheus::Counter>& family,
                 const char* label, std::string_view value);

  /// request_failed and forwarded may be called from several actors.
  std::mutex mtx_;
  counters errors_;
  counters forwarded_;
};

} // namespace ferry::metrics
