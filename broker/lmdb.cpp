#include "broker/lmdb.hpp"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <set>
#include <system_error>
#include <utility>

namespace ferry::lmdb {

namespace {

// Marks the calling thread as the env's writer for a scope, so nested calls
// that would deadlock on the writer mutex fail instead.
class writer_mark {
public:
  explicit writer_mark(std::atomic<std::thread::id>& slot) : slot_(slot) {
    slot_.store(std::this_thread::get_id());
  }
  ~writer_mark() {
    slot_.store(std::thread::id{});
  }
  writer_mark(const writer_mark&) = delete;
  writer_mark& operator=(const writer_mark&) = delete;

private:
  std::atomic<std::thread::id>& slot_;
};

MDB_val to_val(std::string_view s) {
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}

std::string_view to_view(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

size_t page_size() {
  static const size_t ps = [] {
    long n = ::sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<size_t>(n) : size_t{4096};
  }();
  return ps;
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Directories with an open env in this process: LMDB must never open one
// environment twice in a process (closing either drops the other's locks).
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::set<std::string>& registry() {
  static std::set<std::string> s;
  return s;
}

} // namespace

caf::error make_lmdb_error(int rc, std::string_view what) {
  std::string msg{what};
  msg += ": ";
  msg += mdb_strerror(rc);
  if (rc == MDB_NOTFOUND)
    return make_error(ec::not_found, std::move(msg));
  // The write of a commit found the device full. (A short write is reported
  // as EIO by LMDB and stays an lmdb_error: it cannot be told apart.)
  if (rc == ENOSPC || rc == EDQUOT)
    return make_error(ec::disk_full, std::move(msg));
  return make_error(ec::lmdb_error, std::move(msg));
}

// -- txn ----------------------------------------------------------------------

txn::txn(txn&& other) noexcept : st_(std::move(other.st_)) {
}

txn& txn::operator=(txn&& other) noexcept {
  if (this != &other) {
    end(false, nullptr);
    st_ = std::move(other.st_);
  }
  return *this;
}

txn::~txn() {
  end(false, nullptr);
}

caf::error txn::check(int rc, const char* what) {
  if (rc == MDB_SUCCESS)
    return caf::none;
  if (rc == MDB_MAP_FULL && st_)
    st_->map_full = true;
  return make_lmdb_error(rc, what);
}

caf::expected<std::string_view> txn::get(dbi db, std::string_view key) {
  if (!active())
    return make_error(ec::invalid_argument, "txn::get: txn has ended");
  MDB_val k = to_val(key);
  MDB_val v{0, nullptr};
  if (auto err = check(mdb_get(st_->handle, db.native(), &k, &v), "mdb_get"))
    return err;
  return to_view(v);
}

caf::error txn::put(dbi db, std::string_view key, std::string_view value,
                    unsigned flags) {
  if (!active())
    return make_error(ec::invalid_argument, "txn::put: txn has ended");
  MDB_val k = to_val(key);
  MDB_val v = to_val(value);
  return check(mdb_put(st_->handle, db.native(), &k, &v, flags), "mdb_put");
}

caf::error txn::del(dbi db, std::string_view key) {
  if (!active())
    return make_error(ec::invalid_argument, "txn::del: txn has ended");
  MDB_val k = to_val(key);
  return check(mdb_del(st_->handle, db.native(), &k, nullptr), "mdb_del");
}

caf::expected<cursor> txn::open_cursor(dbi db) {
  if (!active())
    return make_error(ec::invalid_argument, "txn::open_cursor: txn has ended");
  MDB_cursor* c = nullptr;
  if (auto err = check(mdb_cursor_open(st_->handle, db.native(), &c),
                       "mdb_cursor_open"))
    return err;
  cursor result{st_.get(), c};
  st_->cursors.push_back(&result);
  return caf::expected<cursor>{std::move(result)};
}

caf::error txn::commit() {
  if (!active())
    return make_error(ec::invalid_argument, "txn::commit: txn has ended");
  if (st_->managed)
    return make_error(ec::invalid_argument,
                      "txn::commit: write()/read() end their txn themselves");
  int rc = 0;
  end(true, &rc);
  if (rc != MDB_SUCCESS)
    return make_lmdb_error(rc, "mdb_txn_commit");
  return caf::none;
}

void txn::abort() {
  if (active() && !st_->managed)
    end(false, nullptr);
}

void txn::close_cursors() {
  for (auto* c : st_->cursors) {
    mdb_cursor_close(c->handle_);
    c->handle_ = nullptr;
    c->owner_ = nullptr;
  }
  st_->cursors.clear();
}

void txn::end(bool do_commit, int* rc_out) {
  if (!active())
    return;
  close_cursors();
  int rc = MDB_SUCCESS;
  if (do_commit)
    rc = mdb_txn_commit(st_->handle); // frees the txn even when it fails
  else
    mdb_txn_abort(st_->handle);
  st_->handle = nullptr;
  env* owner = st_->owner;
  if (st_->holds_writer) {
    st_->holds_writer = false;
    owner->writer_thread_.store(std::thread::id{});
    owner->writer_mutex_.unlock();
  }
  if (!st_->child)
    owner->leave_txn();
  if (rc_out != nullptr)
    *rc_out = rc;
}

// -- cursor -------------------------------------------------------------------

cursor::cursor(cursor&& other) noexcept
  : owner_(std::exchange(other.owner_, nullptr)),
    handle_(std::exchange(other.handle_, nullptr)),
    key_(other.key_),
    value_(other.value_) {
  if (owner_ != nullptr)
    std::replace(owner_->cursors.begin(), owner_->cursors.end(), &other, this);
}

cursor& cursor::operator=(cursor&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    handle_ = std::exchange(other.handle_, nullptr);
    key_ = other.key_;
    value_ = other.value_;
    if (owner_ != nullptr)
      std::replace(owner_->cursors.begin(), owner_->cursors.end(), &other,
                   this);
  }
  return *this;
}

cursor::~cursor() {
  release();
}

void cursor::release() {
  if (owner_ != nullptr) {
    auto& cs = owner_->cursors;
    cs.erase(std::remove(cs.begin(), cs.end(), this), cs.end());
    owner_ = nullptr;
  }
  if (handle_ != nullptr) {
    mdb_cursor_close(handle_);
    handle_ = nullptr;
  }
}

caf::expected<bool> cursor::move(MDB_cursor_op op, std::string_view key) {
  if (handle_ == nullptr)
    return make_error(ec::invalid_argument, "cursor: closed or txn ended");
  MDB_val k = to_val(key);
  MDB_val v{0, nullptr};
  int rc = mdb_cursor_get(handle_, &k, &v, op);
  if (rc == MDB_NOTFOUND) {
    key_ = {};
    value_ = {};
    return false;
  }
  if (rc != MDB_SUCCESS) {
    if (rc == MDB_MAP_FULL && owner_ != nullptr)
      owner_->map_full = true;
    return make_lmdb_error(rc, "mdb_cursor_get");
  }
  key_ = to_view(k);
  value_ = to_view(v);
  return true;
}

caf::expected<bool> cursor::first() {
  return move(MDB_FIRST);
}

caf::expected<bool> cursor::seek(std::string_view key) {
  if (key.empty()) // LMDB rejects empty keys; every key is >= ""
    return move(MDB_FIRST);
  return move(MDB_SET_RANGE, key);
}

caf::expected<bool> cursor::next() {
  return move(MDB_NEXT);
}

caf::error cursor::del() {
  if (handle_ == nullptr)
    return make_error(ec::invalid_argument, "cursor: closed or txn ended");
  int rc = mdb_cursor_del(handle_, 0);
  if (rc == MDB_MAP_FULL && owner_ != nullptr)
    owner_->map_full = true;
  if (rc != MDB_SUCCESS)
    return make_lmdb_error(rc, "mdb_cursor_del");
  key_ = {};
  value_ = {};
  return caf::none;
}

caf::error cursor::for_each_prefix(
  std::string_view prefix,
  const std::function<bool(std::string_view, std::string_view)>& fn) {
  auto more = seek(prefix);
  while (more && *more && key_.substr(0, prefix.size()) == prefix) {
    if (!fn(key_, value_))
      return caf::none;
    more = next();
  }
  if (!more)
    return std::move(more.error());
  return caf::none;
}

// -- env ----------------------------------------------------------------------

env::env(std::filesystem::path path, env_options opts, MDB_env* h)
  : path_(std::move(path)), opts_(opts), handle_(h) {
}

env::~env() {
  assert(live_txns_ == 0);
  mdb_env_close(handle_);
  std::lock_guard<std::mutex> guard{registry_mutex()};
  registry().erase(path_.string());
}

caf::expected<std::unique_ptr<env>>
env::open(const std::filesystem::path& dir, env_options opts) {
  namespace fs = std::filesystem;
  if (opts.initial_map_size == 0 || opts.max_map_size < opts.initial_map_size)
    return make_error(ec::invalid_argument,
                      "lmdb::env::open: need 0 < initial_map_size <= "
                      "max_map_size");
  std::error_code e;
  fs::create_directories(dir, e);
  if (e)
    return make_error(ec::io_error, "create_directories " + dir.string()
                                      + ": " + e.message());
  auto canon = fs::canonical(dir, e);
  if (e)
    return make_error(ec::io_error,
                      "canonical " + dir.string() + ": " + e.message());
  {
    std::lock_guard<std::mutex> guard{registry_mutex()};
    if (!registry().insert(canon.string()).second)
      return make_error(ec::invalid_argument,
                        "lmdb environment " + canon.string()
                          + " is already open in this process");
  }
  auto fail = [&](int rc, const char* what, MDB_env* h) -> caf::error {
    if (h != nullptr)
      mdb_env_close(h);
    std::lock_guard<std::mutex> guard{registry_mutex()};
    registry().erase(canon.string());
    return make_lmdb_error(rc, std::string{what} + " " + canon.string());
  };
  MDB_env* h = nullptr;
  if (int rc = mdb_env_create(&h))
    return fail(rc, "mdb_env_create", nullptr);
  if (int rc = mdb_env_set_maxdbs(h, opts.max_dbs))
    return fail(rc, "mdb_env_set_maxdbs", h);
  if (int rc = mdb_env_set_maxreaders(h, opts.max_readers))
    return fail(rc, "mdb_env_set_maxreaders", h);
  // A new environment starts at the configured size. On reopen, setting a
  // size before mdb_env_open would make LMDB shrink the map to the pages in
  // use, so the first write after a restart would hit MDB_MAP_FULL: open with
  // the size stored in the file instead and keep the largest of that, the
  // file's size and the configured size.
  size_t configured = round_up(opts.initial_map_size, page_size());
  auto file_size = fs::file_size(canon / "data.mdb", e);
  bool reopen = !e && file_size > 0;
  if (!reopen)
    if (int rc = mdb_env_set_mapsize(h, configured))
      return fail(rc, "mdb_env_set_mapsize", h);
  unsigned flags = opts.extra_flags | MDB_NOTLS;
  if (opts.no_sync)
    flags |= MDB_NOSYNC;
  if (int rc = mdb_env_open(h, canon.c_str(), flags, 0644))
    return fail(rc, "mdb_env_open", h);
  if (reopen) {
    MDB_envinfo info;
    mdb_env_info(h, &info);
    size_t want = std::max({configured, round_up(file_size, page_size()),
                            static_cast<size_t>(info.me_mapsize)});
    if (want != info.me_mapsize)
      if (int rc = mdb_env_set_mapsize(h, want)) // no txn exists yet
        return fail(rc, "mdb_env_set_mapsize", h);
  }
  return std::unique_ptr<env>{new env(canon, opts, h)};
}

caf::error env::enter_txn() {
  std::unique_lock<std::mutex> lk{gate_mutex_};
  gate_cv_.wait(lk, [this] { return !growing_; });
  ++live_txns_;
  return caf::none;
}

void env::leave_txn() {
  std::lock_guard<std::mutex> lk{gate_mutex_};
  if (--live_txns_ == 0)
    gate_cv_.notify_all();
}

caf::expected<txn> env::begin(bool write) {
  if (auto err = enter_txn())
    return err;
  MDB_txn* h = nullptr;
  int rc = mdb_txn_begin(handle_, nullptr, write ? 0 : MDB_RDONLY, &h);
  if (rc != MDB_SUCCESS) {
    leave_txn();
    return make_lmdb_error(rc, "mdb_txn_begin");
  }
  auto st = std::make_unique<txn::state>();
  st->owner = this;
  st->handle = h;
  st->write = write;
  return txn{std::move(st)};
}

caf::expected<txn> env::begin_read() {
  return begin(false);
}

caf::expected<txn> env::begin_write() {
  if (writer_thread_.load() == std::this_thread::get_id())
    return make_error(ec::invalid_argument,
                      "begin_write: this thread already holds the writer");
  writer_mutex_.lock();
  writer_thread_.store(std::this_thread::get_id());
  auto t = begin(true);
  if (!t) {
    writer_thread_.store(std::thread::id{});
    writer_mutex_.unlock();
    return t;
  }
  t->st_->holds_writer = true;
  return t;
}

struct env::group_frame {
  env* owner = nullptr;
  MDB_txn* outer = nullptr;
  bool map_full = false;
};

namespace {

// The write_group() the calling thread is in, if any.
thread_local env::group_frame* current_group = nullptr;

} // namespace

caf::error env::run_child(group_frame& g, const txn_fn& fn, bool keep) {
  MDB_txn* h = nullptr;
  int rc = mdb_txn_begin(handle_, g.outer, 0, &h);
  if (rc != MDB_SUCCESS) {
    if (rc == MDB_MAP_FULL)
      g.map_full = true;
    return make_lmdb_error(rc, "mdb_txn_begin (nested)");
  }
  auto st = std::make_unique<txn::state>();
  st->owner = this;
  st->handle = h;
  st->write = true;
  st->managed = true;
  st->child = true;
  txn t{std::move(st)};
  auto err = fn(t);
  if (t.map_full()) {
    g.map_full = true;
    t.end(false, nullptr);
    return err ? err : make_lmdb_error(MDB_MAP_FULL, "write group");
  }
  if (err || !keep) {
    t.end(false, nullptr);
    return err;
  }
  rc = MDB_SUCCESS;
  t.end(true, &rc);
  if (rc == MDB_MAP_FULL)
    g.map_full = true;
  if (rc != MDB_SUCCESS)
    return make_lmdb_error(rc, "mdb_txn_commit (nested)");
  return caf::none;
}

caf::error env::write_group(const std::function<caf::error()>& fn) {
  if (current_group != nullptr) {
    if (current_group->owner == this)
      return fn();
    return make_error(ec::invalid_argument,
                      "write_group: already in a group of another env");
  }
  if (writer_thread_.load() == std::this_thread::get_id())
    return make_error(ec::invalid_argument,
                      "write_group: nested in a write txn of the same env");
  std::lock_guard<std::mutex> guard{writer_mutex_};
  writer_mark mark{writer_thread_};
  // write_locked's txn is the group's outer one: a MDB_MAP_FULL in a nested
  // txn marks it, so the whole group is discarded and run again.
  return write_locked([&](txn& t) -> caf::error {
    group_frame frame{this, t.native(), false};
    current_group = &frame;
    auto err = fn();
    current_group = nullptr;
    if (frame.map_full)
      t.st_->map_full = true;
    return err;
  });
}

caf::error env::read(const txn_fn& fn) {
  if (auto* g = current_group; g != nullptr && g->owner == this)
    return run_child(*g, fn, false);
  auto t = begin(false);
  if (!t)
    return std::move(t.error());
  t->st_->managed = true;
  auto err = fn(*t);
  t->end(false, nullptr);
  return err;
}

caf::error env::write(const txn_fn& fn) {
  if (auto* g = current_group; g != nullptr && g->owner == this)
    return run_child(*g, fn, true);
  if (writer_thread_.load() == std::this_thread::get_id())
    return make_error(ec::invalid_argument,
                      "write: nested in a write txn of the same env");
  std::lock_guard<std::mutex> guard{writer_mutex_};
  writer_mark mark{writer_thread_};
  return write_locked(fn);
}

caf::error env::write_locked(const txn_fn& fn) {
  for (;;) {
    auto t = begin(true);
    if (!t)
      return std::move(t.error());
    t->st_->managed = true;
    auto err = fn(*t);
    if (t->map_full()) {
      // The txn is unusable after MDB_MAP_FULL whatever fn did with it.
      ++map_full_in_txn_;
      t->end(false, nullptr);
    } else if (err) {
      t->end(false, nullptr);
      return err;
    } else {
      int rc = MDB_SUCCESS;
      t->end(true, &rc);
      if (rc == MDB_SUCCESS)
        return caf::none;
      if (rc != MDB_MAP_FULL)
        return make_lmdb_error(rc, "mdb_txn_commit");
      ++map_full_in_commit_;
    }
    if (auto gerr = grow())
      return gerr;
  }
}

caf::error env::grow() {
  MDB_envinfo info;
  mdb_env_info(handle_, &info);
  size_t cur = info.me_mapsize;
  size_t cap = std::max(opts_.max_map_size / page_size() * page_size(),
                        round_up(opts_.initial_map_size, page_size()));
  if (cur >= cap)
    return make_error(ec::disk_full,
                      "lmdb map of " + path_.string() + " is full at "
                        + std::to_string(cur)
                        + " bytes, the configured max_map_size");
  size_t next = cur > cap / 2 ? cap : cur * 2;
  std::unique_lock<std::mutex> lk{gate_mutex_};
  growing_ = true;
  bool idle = gate_cv_.wait_for(lk, opts_.grow_wait,
                                [this] { return live_txns_ == 0; });
  int rc = idle ? mdb_env_set_mapsize(handle_, next) : MDB_SUCCESS;
  size_t open_txns = live_txns_;
  growing_ = false;
  gate_cv_.notify_all();
  lk.unlock();
  if (!idle)
    return make_error(ec::lmdb_error,
                      "lmdb map of " + path_.string()
                        + " is full and cannot grow: "
                        + std::to_string(open_txns)
                        + " txn(s) still open after grow_wait");
  if (rc != MDB_SUCCESS)
    return make_lmdb_error(rc, "mdb_env_set_mapsize");
  ++map_growths_;
  return caf::none;
}

caf::expected<dbi> env::open_db(std::string_view name, bool create) {
  if (name.empty())
    return make_error(ec::invalid_argument, "open_db: empty name");
  {
    std::lock_guard<std::mutex> guard{dbi_mutex_};
    if (auto i = dbis_.find(name); i != dbis_.end())
      return dbi{i->second};
  }
  if (writer_thread_.load() == std::this_thread::get_id())
    return make_error(ec::invalid_argument,
                      "open_db: called inside a write txn of the same env");
  // mdb_dbi_open must not run in two txns at once, and a handle becomes
  // usable by other txns only once its txn commits: open in a write txn of
  // its own, under the writer lock, and cache only after the commit.
  std::lock_guard<std::mutex> guard{writer_mutex_};
  {
    std::lock_guard<std::mutex> g{dbi_mutex_};
    if (auto i = dbis_.find(name); i != dbis_.end())
      return dbi{i->second};
  }
  writer_mark mark{writer_thread_};
  std::string key{name};
  MDB_dbi h = 0;
  auto err = write_locked([&](txn& t) -> caf::error {
    int rc = mdb_dbi_open(t.native(), key.c_str(), create ? MDB_CREATE : 0,
                          &h);
    return t.check(rc, "mdb_dbi_open");
  });
  if (err)
    return err;
  std::lock_guard<std::mutex> g{dbi_mutex_};
  dbis_.emplace(std::move(key), h);
  return dbi{h};
}

caf::error env::sync() {
  if (int rc = mdb_env_sync(handle_, 1))
    return make_lmdb_error(rc, "mdb_env_sync");
  return caf::none;
}

env_stats env::stats() const {
  MDB_envinfo info;
  mdb_env_info(handle_, &info);
  env_stats s;
  s.map_size = info.me_mapsize;
  s.map_growths = map_growths_.load();
  s.map_full_in_txn = map_full_in_txn_.load();
  s.map_full_in_commit = map_full_in_commit_.load();
  return s;
}

} // namespace ferry::lmdb
