#include "broker/raft_storage.hpp"

#include "broker/key_codec.hpp"
#include "broker/lmdb.hpp"

#include <string>
#include <utility>

namespace ferry {

using namespace key_codec;

// -- encodings ------------------------------------------------------------------

namespace raft_format {

std::string encode_hard_state(const raft_hard_state& hs) {
  std::string out;
  out.push_back(static_cast<char>(version));
  put_be(out, hs.term, 8);
  put_be(out, static_cast<uint32_t>(hs.voted_for), 4);
  return out;
}

caf::expected<raft_hard_state> decode_hard_state(std::string_view v) {
  if (v.size() != 1 + 8 + 4)
    return corrupt("raft.state hard: " + std::to_string(v.size())
                   + " bytes, expected 13");
  if (static_cast<uint8_t>(v[0]) != version)
    return corrupt("raft.state hard: unknown version "
                   + std::to_string(static_cast<uint8_t>(v[0])));
  raft_hard_state hs;
  hs.term = get_be(v, 1, 8);
  hs.voted_for = static_cast<int32_t>(static_cast<uint32_t>(get_be(v, 9, 4)));
  return hs;
}

std::string encode_index(uint64_t index) {
  std::string out;
  put_be(out, index, 8);
  return out;
}

std::string encode_entry(const raft_entry& e) {
  std::string out;
  out.reserve(1 + 8 + 1 + e.data.size());
  out.push_back(static_cast<char>(version));
  put_be(out, e.term, 8);
  out.push_back(static_cast<char>(e.kind));
  out.append(e.data);
  return out;
}

caf::expected<raft_entry> decode_entry(std::string_view v) {
  if (v.size() < 1 + 8 + 1)
    return corrupt("raft.log entry: " + std::to_string(v.size())
                   + " bytes, shorter than its 10-byte header");
  if (static_cast<uint8_t>(v[0]) != version)
    return corrupt("raft.log entry: unknown version "
                   + std::to_string(static_cast<uint8_t>(v[0])));
  auto kind = static_cast<uint8_t>(v[9]);
  if (kind > static_cast<uint8_t>(raft_entry_kind::noop))
    return corrupt("raft.log entry: unknown kind " + std::to_string(kind));
  raft_entry e;
  e.term = get_be(v, 1, 8);
  e.kind = static_cast<raft_entry_kind>(kind);
  e.data.assign(v.substr(10));
  return e;
}

namespace {

std::string encode_snapshot_meta(const raft_snapshot& s) {
  std::string out;
  out.push_back(static_cast<char>(version));
  put_be(out, s.index, 8);
  put_be(out, s.term, 8);
  return out;
}

caf::error decode_snapshot_meta(std::string_view v, raft_snapshot& s) {
  if (v.size() != 1 + 8 + 8)
    return corrupt("raft.snapshot meta: " + std::to_string(v.size())
                   + " bytes, expected 17");
  if (static_cast<uint8_t>(v[0]) != version)
    return corrupt("raft.snapshot meta: unknown version "
                   + std::to_string(static_cast<uint8_t>(v[0])));
  s.index = get_be(v, 1, 8);
  s.term = get_be(v, 9, 8);
  return caf::none;
}

} // namespace

} // namespace raft_format

// -- raft_storage ---------------------------------------------------------------

struct raft_storage::dbis {
  lmdb::dbi state;
  lmdb::dbi log;
  lmdb::dbi snapshot;
};

raft_storage::raft_storage(lmdb::env& env, std::unique_ptr<dbis> d)
  : env_(env), dbis_(std::move(d)) {
}

raft_storage::~raft_storage() = default;

caf::expected<std::unique_ptr<raft_storage>> raft_storage::open(lmdb::env& env) {
  auto d = std::make_unique<dbis>();
  auto st = env.open_db(raft_format::state_db);
  if (!st)
    return std::move(st.error());
  auto lg = env.open_db(raft_format::log_db);
  if (!lg)
    return std::move(lg.error());
  auto sn = env.open_db(raft_format::snapshot_db);
  if (!sn)
    return std::move(sn.error());
  d->state = *st;
  d->log = *lg;
  d->snapshot = *sn;
  return std::unique_ptr<raft_storage>{new raft_storage(env, std::move(d))};
}

caf::expected<raft_persistent_state> raft_storage::load() {
  raft_persistent_state out;
  auto err = env_.read([&](lmdb::txn& t) -> caf::error {
    out = raft_persistent_state{};
    if (auto v = t.get(dbis_->state, raft_format::hard_key)) {
      auto hs = raft_format::decode_hard_state(*v);
      if (!hs)
        return std::move(hs.error());
      out.hard = *hs;
    } else if (!is(v.error(), ec::not_found)) {
      return std::move(v.error());
    }
    if (auto v = t.get(dbis_->snapshot, raft_format::meta_key)) {
      if (auto e = raft_format::decode_snapshot_meta(*v, out.snapshot))
        return e;
      auto data = t.get(dbis_->snapshot, raft_format::data_key);
      if (!data)
        return make_error(ec::corrupt_segment,
                          "raft.snapshot: meta without data");
      out.snapshot.data.assign(*data);
    } else if (!is(v.error(), ec::not_found)) {
      return std::move(v.error());
    }
    auto cur = t.open_cursor(dbis_->log);
    if (!cur)
      return std::move(cur.error());
    auto expect = out.snapshot.index + 1;
    auto more = cur->first();
    for (; more && *more; more = cur->next()) {
      if (cur->key().size() != 8)
        return corrupt("raft.log: key of " + std::to_string(cur->key().size())
                       + " bytes");
      auto index = get_be(cur->key(), 0, 8);
      if (index != expect)
        return corrupt("raft.log: entry " + std::to_string(index)
                       + " where " + std::to_string(expect)
                       + " was expected (snapshot index "
                       + std::to_string(out.snapshot.index) + ")");
      auto e = raft_format::decode_entry(cur->value());
      if (!e)
        return make_error(ec::corrupt_segment,
                          describe(e.error()) + " at index "
                            + std::to_string(index));
      out.entries.push_back(std::move(*e));
      ++expect;
    }
    if (!more)
      return std::move(more.error());
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::error raft_storage::save_hard_state(const raft_hard_state& hs) {
  auto value = raft_format::encode_hard_state(hs);
  return env_.write([&](lmdb::txn& t) {
    return t.put(dbis_->state, raft_format::hard_key, value);
  });
}

namespace {

// Deletes the log keys in [from, to) (to = 0: no upper bound).
caf::error erase_range(lmdb::txn& t, lmdb::dbi log, uint64_t from,
                       uint64_t to) {
  std::vector<std::string> keys;
  auto cur = t.open_cursor(log);
  if (!cur)
    return std::move(cur.error());
  auto more = cur->seek(raft_format::encode_index(from));
  for (; more && *more; more = cur->next()) {
    if (to != 0 && get_be(cur->key(), 0, 8) >= to)
      break;
    keys.emplace_back(cur->key());
  }
  if (!more)
    return std::move(more.error());
  for (auto& k : keys)
    if (auto err = t.del(log, k))
      return err;
  return caf::none;
}

} // namespace

caf::error raft_storage::append(uint64_t first,
                                const std::vector<raft_entry>& entries) {
  if (first == 0)
    return make_error(ec::invalid_argument, "raft log: index 0 is not an entry");
  return env_.write([&](lmdb::txn& t) -> caf::error {
    if (auto err = erase_range(t, dbis_->log, first, 0))
      return err;
    for (size_t i = 0; i < entries.size(); ++i)
      if (auto err = t.put(dbis_->log, raft_format::encode_index(first + i),
                           raft_format::encode_entry(entries[i])))
        return err;
    return caf::none;
  });
}

caf::error raft_storage::save_snapshot(const raft_snapshot& snap,
                                       bool keep_suffix) {
  auto meta = raft_format::encode_snapshot_meta(snap);
  return env_.write([&](lmdb::txn& t) -> caf::error {
    if (auto err = t.put(dbis_->snapshot, raft_format::meta_key, meta))
      return err;
    if (auto err = t.put(dbis_->snapshot, raft_format::data_key, snap.data))
      return err;
    return erase_range(t, dbis_->log, 1, keep_suffix ? snap.index + 1 : 0);
  });
}

// -- raft_memory_store ------------------------------------------------------------

caf::expected<raft_persistent_state> raft_memory_store::load() {
  raft_persistent_state out;
  out.hard = hard_;
  out.snapshot = snapshot_;
  for (auto& [index, e] : log_)
    out.entries.push_back(e);
  return out;
}

caf::error raft_memory_store::save_hard_state(const raft_hard_state& hs) {
  if (fail_writes)
    return fail_writes;
  hard_ = hs;
  ++writes;
  return caf::none;
}

caf::error raft_memory_store::append(uint64_t first,
                                     const std::vector<raft_entry>& entries) {
  if (first == 0)
    return make_error(ec::invalid_argument, "raft log: index 0 is not an entry");
  if (fail_writes)
    return fail_writes;
  log_.erase(log_.lower_bound(first), log_.end());
  for (size_t i = 0; i < entries.size(); ++i)
    log_[first + i] = entries[i];
  ++writes;
  return caf::none;
}

caf::error raft_memory_store::save_snapshot(const raft_snapshot& snap,
                                            bool keep_suffix) {
  if (fail_writes)
    return fail_writes;
  snapshot_ = snap;
  log_.erase(log_.begin(), keep_suffix ? log_.upper_bound(snap.index)
                                       : log_.end());
  ++writes;
  return caf::none;
}

} // namespace ferry
