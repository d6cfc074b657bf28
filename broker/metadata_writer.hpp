#pragma once
// metadata_writer: the node's batched writes of per-partition metadata (HW
// checkpoints, producer snapshots, their erasure) into its metadata_store.
//
// Every replica used to checkpoint its high watermark with its own LMDB
// commit on every tick in which the HW moved, and an LMDB commit is two
// fdatasyncs: 1,000 busy partitions made ~1,000 commits a second, each
// blocking the replica's thread, all serialised by LMDB's writer lock.
// Those writes are periodic and only save restart work (a stale HW
// checkpoint is raised again by the followers; a stale producer snapshot is
// completed by replaying the log), so they need not be durable at once:
// here they queue, later writes of the same key replace earlier ones, and
// one thread writes everything queued in ONE transaction per round. The
// cost no longer grows with the partition count.
//
// Writes that must be durable before the caller goes on (a log's own
// checkpoints when its start offset, epochs or end change: retention,
// truncation, a new epoch) use put_now(): synchronous, it drops a queued
// write of the same key first and is serialised with the round in flight,
// so a stale queued value never lands after it.
//
// Thread-safe. The destructor writes what is still queued, then joins.

#include "broker/error.hpp"
#include "broker/partition_checkpoint.hpp"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace ferry {

class metadata_store;

struct metadata_writer_stats {
  /// Transactions written by the thread (or flush()).
  uint64_t rounds = 0;
  /// Puts and erases written by rounds.
  uint64_t ops_written = 0;
  /// Queued writes replaced by a later write of the same key.
  uint64_t coalesced = 0;
  /// put_now() calls.
  uint64_t immediate = 0;
  /// Rounds whose transaction failed (their writes are dropped and logged).
  uint64_t failed_rounds = 0;
};

class metadata_writer {
public:
  /// @param background false: no thread; queued writes wait for flush()
  ///        (deterministic tests).
  explicit metadata_writer(std::shared_ptr<metadata_store> store,
                           bool background = true);
  ~metadata_writer();
  metadata_writer(const metadata_writer&) = delete;
  metadata_writer& operator=(const metadata_writer&) = delete;

  /// Queues a put; replaces a queued write of the same key.
  void put_later(std::string_view db, std::string_view key, std::string value);
  /// Queues an erase (a missing key is fine); replaces a queued write.
  void erase_later(std::string_view db, std::string_view key);
  /// Writes now (one transaction, durable when it returns), after dropping
  /// a queued write of the same key.
  caf::error put_now(std::string_view db, std::string_view key,
                     std::string_view value);
  /// Writes everything queued now, on this thread.
  caf::error flush();

  /// The value a read after every queued write would see: a queued put's
  /// value, ec::not_found for a queued erase, else the store's.
  caf::expected<std::string> get(std::string_view db, std::string_view key);

  metadata_writer_stats stats() const;
  size_t queued() const;
  metadata_store& store() { return *store_; }

private:
  struct op {
    bool erase = false;
    std::string value;
  };
  using key_type = std::pair<std::string, std::string>; // db, key

  void run();
  /// Writes `ops` in one transaction. @pre round_mtx_ held.
  caf::error write_round(std::map<key_type, op>& ops);

  std::shared_ptr<metadata_store> store_;
  // Held while a round or a put_now writes: keeps their order.
  std::mutex round_mtx_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::map<key_type, op> queue_;
  bool stopping_ = false;
  metadata_writer_stats stats_;
  std::thread thread_;
};

/// A partition_checkpoint in the node's metadata_store whose saves go
/// through a metadata_writer (put_now; a close's save is queued), so they
/// are ordered with the replica's queued HW checkpoints of the same
/// partition.
class writer_partition_checkpoint final : public partition_checkpoint {
public:
  writer_partition_checkpoint(metadata_writer& writer, std::string topic,
                              partition_id p);
  caf::expected<std::optional<partition_metadata>> load() override;
  caf::error save(const partition_metadata& md) override;
  /// Queued (put_later): written with the other queued writes in one round.
  caf::error save_at_close(const partition_metadata& md) override;

private:
  metadata_writer& writer_;
  std::string topic_;
  partition_id partition_;
};

} // namespace ferry
