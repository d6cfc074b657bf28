#pragma once
// A small RAII layer over LMDB 0.9.24: env, txn, dbi, cursor.
//
// Lifecycle: env::open(dir) -> open_db(name) once per sub-database -> any
// number of write(fn) / read(fn) calls -> destroy the env after every txn and
// cursor has ended. One env per directory per process (open() refuses a second
// one: LMDB's locks break if a process opens the same environment twice).
//
// Concurrency:
// - write() serialises writers with a mutex, so any thread may call it. It is
//   the only way to write that grows the map on MDB_MAP_FULL (see below).
//   begin_write() exists for tests and special cases; it holds the same mutex
//   until the txn ends and never grows the map.
// - Read txns run in parallel with each other and with the writer. The env is
//   opened with MDB_NOTLS, so a read txn is not tied to its thread (it may live
//   in an actor that moves between threads) and holds one reader slot (126 by
//   default, env_options::max_readers) until it ends. Always end read txns:
//   a leaked one pins a slot, and blocks map growth (growth waits for every txn
//   of this env to end, because it remaps the file under them).
// - Never call write() (or open_db()) while the calling thread holds a txn of
//   the same env: a needed map growth would wait for that txn; write() gives up
//   after env_options::grow_wait with ec::lmdb_error instead of hanging.
//
// Map growth: MDB_MAP_FULL comes from mdb_put/mdb_del (then the txn is dead) or
// from mdb_txn_commit (then LMDB has already freed the txn). write() discards
// the txn either way, doubles the map with mdb_env_set_mapsize while no txn of
// the env is active, and runs fn again from scratch, until the map reaches
// env_options::max_map_size; beyond it write() returns ec::disk_full. fn must
// therefore be safe to run more than once (touch only the txn).

#include "broker/error.hpp"

#include <lmdb.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ferry::lmdb {

class env;
class txn;
class cursor;

/// How to open an environment.
struct env_options {
  /// Map size of a new environment. A reopened one uses the largest of this,
  /// the map size stored in the file (grown earlier) and the data file's size.
  /// The map is only address space, not disk space.
  size_t initial_map_size = size_t{64} << 20;
  /// write() doubles the map on MDB_MAP_FULL up to this size, then reports
  /// ec::disk_full.
  size_t max_map_size = size_t{64} << 30;
  /// Named sub-databases the environment can hold (mdb_env_set_maxdbs).
  unsigned max_dbs = 32;
  /// Reader slots (mdb_env_set_maxreaders): concurrent read txns.
  unsigned max_readers = 126;
  /// MDB_NOSYNC: commits are not durable. For tests only.
  bool no_sync = false;
  /// Further mdb_env_open flags, or-ed in. MDB_NOTLS is always set.
  unsigned extra_flags = 0;
  /// How long a map growth waits for open txns of the env to end.
  std::chrono::milliseconds grow_wait{10'000};
};

/// Counters for tests and metrics.
struct env_stats {
  /// Current map size in bytes.
  size_t map_size = 0;
  /// Times write() grew the map.
  uint64_t map_growths = 0;
  /// MDB_MAP_FULL seen inside a txn (put, del, ...), by write().
  uint64_t map_full_in_txn = 0;
  /// MDB_MAP_FULL seen from mdb_txn_commit, by write().
  uint64_t map_full_in_commit = 0;
};

/// A named sub-database handle. Valid for the lifetime of its env; cheap to
/// copy. Obtain one with env::open_db().
class dbi {
public:
  dbi() = default;
  MDB_dbi native() const { return handle_; }

private:
  friend class env;
  explicit dbi(MDB_dbi h) : handle_(h) {}
  MDB_dbi handle_ = 0;
};

/// A transaction. Movable, not copyable. Ends (aborts) on destruction unless
/// committed. Views returned by get() and cursors point into the map: they are
/// valid until the txn ends, and in a write txn only until the next change.
/// A write txn must end on the thread that began it; a read txn may move.
class txn {
public:
  txn() = default;
  txn(txn&&) noexcept;
  txn& operator=(txn&&) noexcept;
  txn(const txn&) = delete;
  txn& operator=(const txn&) = delete;
  ~txn();

  /// The value of `key`, or ec::not_found.
  caf::expected<std::string_view> get(dbi db, std::string_view key);
  /// Inserts or replaces. `flags` are mdb_put flags (e.g. MDB_NOOVERWRITE).
  caf::error put(dbi db, std::string_view key, std::string_view value,
                 unsigned flags = 0);
  /// Deletes `key`; ec::not_found if it is not there.
  caf::error del(dbi db, std::string_view key);
  /// A cursor over `db`, valid until it or this txn ends.
  caf::expected<cursor> open_cursor(dbi db);

  /// Commits. Afterwards the txn is ended whatever the result (a failed
  /// commit has already freed the LMDB txn). Not allowed inside write().
  caf::error commit();
  /// Ends the txn without committing. No-op if already ended, and inside
  /// write()/read() (return an error from fn to abort there).
  void abort();

  bool active() const { return st_ != nullptr && st_->handle != nullptr; }
  bool is_write() const { return st_ != nullptr && st_->write; }
  /// True once an operation of this txn failed with MDB_MAP_FULL.
  bool map_full() const { return st_ != nullptr && st_->map_full; }
  MDB_txn* native() const { return st_ ? st_->handle : nullptr; }

private:
  friend class env;
  friend class cursor;

  // Heap-allocated so cursors can point at it while the txn object moves.
  struct state {
    env* owner = nullptr;
    MDB_txn* handle = nullptr;
    bool write = false;
    bool map_full = false;
    // Set by write()/read(): fn may not commit or abort the txn itself.
    bool managed = false;
    // begin_write() txns hold env::writer_mutex_ until they end.
    bool holds_writer = false;
    // A nested txn of a write_group(): does not count as a live txn.
    bool child = false;
    std::vector<cursor*> cursors;
  };

  explicit txn(std::unique_ptr<state> st) : st_(std::move(st)) {}
  // Records MDB_MAP_FULL and turns rc into an error naming `what`.
  caf::error check(int rc, const char* what);
  void end(bool do_commit, int* rc_out);
  void close_cursors();

  std::unique_ptr<state> st_;
};

/// A cursor. Movable, not copyable; closed on destruction or when its txn
/// ends, whichever comes first (after that valid() is false).
class cursor {
public:
  cursor(cursor&&) noexcept;
  cursor& operator=(cursor&&) noexcept;
  cursor(const cursor&) = delete;
  cursor& operator=(const cursor&) = delete;
  ~cursor();

  /// Positions at the first entry; false if the database is empty.
  caf::expected<bool> first();
  /// Positions at the first key >= `key`; false if there is none.
  caf::expected<bool> seek(std::string_view key);
  /// Advances; false at the end.
  caf::expected<bool> next();
  /// Key and value of the current entry (after a call that returned true).
  std::string_view key() const { return key_; }
  std::string_view value() const { return value_; }
  /// Deletes the current entry (write txns only); next() then yields the
  /// entry that followed it.
  caf::error del();

  /// Calls fn(key, value) for each key starting with `prefix`, in key order,
  /// until fn returns false.
  caf::error for_each_prefix(
    std::string_view prefix,
    const std::function<bool(std::string_view, std::string_view)>& fn);

  bool valid() const { return handle_ != nullptr; }

private:
  friend class txn;
  cursor(txn::state* owner, MDB_cursor* h) : owner_(owner), handle_(h) {}
  caf::expected<bool> move(MDB_cursor_op op, std::string_view key = {});
  void release();

  txn::state* owner_ = nullptr;
  MDB_cursor* handle_ = nullptr;
  std::string_view key_;
  std::string_view value_;
};

/// An LMDB environment: one directory holding data.mdb and lock.mdb.
class env {
public:
  using txn_fn = std::function<caf::error(txn&)>;

  /// Opens (creating the directory and files if missing) the environment in
  /// `dir`. ec::invalid_argument if it is already open in this process.
  static caf::expected<std::unique_ptr<env>>
  open(const std::filesystem::path& dir, env_options opts = {});

  /// @pre every txn and cursor of this env has ended.
  ~env();
  env(const env&) = delete;
  env& operator=(const env&) = delete;

  /// Opens the named sub-database, creating it if `create` (else ec::not_found
  /// when missing). Handles are cached: later calls are a map lookup. Must not
  /// be called inside a write() or read() callback of this env.
  caf::expected<dbi> open_db(std::string_view name, bool create = true);

  /// Runs fn in a write txn and commits it if fn returns no error; otherwise
  /// aborts and returns fn's error. Grows the map and reruns fn on
  /// MDB_MAP_FULL (see the file comment). fn must not commit or abort.
  caf::error write(const txn_fn& fn);

  /// Runs fn in a read-only txn, which ends when fn returns.
  caf::error read(const txn_fn& fn);

  /// Runs fn with every write() and read() this thread makes inside it on
  /// one write txn, committed once (one fsync) when fn returns no error:
  /// each write() is a nested txn (mdb_txn_begin with a parent) that
  /// commits into the group or aborts alone, and each read() sees what the
  /// group wrote so far. On MDB_MAP_FULL anywhere in it the whole group is
  /// discarded, the map grows, and fn runs again from scratch (so fn must be
  /// safe to rerun). Holds the writer lock throughout: keep groups short.
  /// open_db() of a name not opened before fails inside a group: open the
  /// sub-databases first. ec::invalid_argument if this thread is already in
  /// a write txn or in a group of another env; inside a group of this env fn
  /// just runs (joins it).
  caf::error write_group(const std::function<caf::error()>& fn);

  /// The state of a write_group() (implementation detail).
  struct group_frame;

  /// A read txn the caller ends (destroy, abort or commit it).
  caf::expected<txn> begin_read();

  /// A write txn outside write(): holds the writer lock until it ends and
  /// never grows the map. Prefer write().
  caf::expected<txn> begin_write();

  /// Flushes to disk (useful with no_sync).
  caf::error sync();

  env_stats stats() const;
  const std::filesystem::path& path() const { return path_; }
  const env_options& options() const { return opts_; }
  MDB_env* native() const { return handle_; }

private:
  friend class txn;

  env(std::filesystem::path path, env_options opts, MDB_env* h);
  caf::expected<txn> begin(bool write);
  // write() with writer_mutex_ already held by this thread.
  caf::error write_locked(const txn_fn& fn);
  // write()/read() inside this thread's write_group().
  caf::error run_child(group_frame& g, const txn_fn& fn, bool keep);
  // Counts live txns (in any thread) so growth can wait for zero.
  caf::error enter_txn();
  void leave_txn();
  caf::error grow();

  std::filesystem::path path_;
  env_options opts_;
  MDB_env* handle_ = nullptr;

  // One writer at a time; held for all of write() or a begun write txn.
  std::mutex writer_mutex_;
  std::atomic<std::thread::id> writer_thread_{};

  // The growth gate: txns enter unless a growth is under way.
  mutable std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  size_t live_txns_ = 0;
  bool growing_ = false;

  mutable std::mutex dbi_mutex_;
  std::map<std::string, MDB_dbi, std::less<>> dbis_;

  std::atomic<uint64_t> map_growths_{0};
  std::atomic<uint64_t> map_full_in_txn_{0};
  std::atomic<uint64_t> map_full_in_commit_{0};
};

/// "mdb_put: MDB_MAP_FULL: ..." style error of category ec::lmdb_error,
/// or ec::not_found for MDB_NOTFOUND.
caf::error make_lmdb_error(int rc, std::string_view what);

} // namespace ferry::lmdb
