#include "broker/metadata_store.hpp"

#include "broker/key_codec.hpp"

#include <set>

namespace ferry {

namespace metadata_format {

using key_codec::get_be;
using key_codec::put_be;

caf::expected<std::string> encode_partition_key(std::string_view topic,
                                                partition_id p) {
  if (topic.empty() || topic.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "partition key: topic must be non-empty without NUL");
  if (p.value < 0)
    return make_error(ec::invalid_argument,
                      "partition key: negative partition "
                        + std::to_string(p.value));
  auto key = topic_key_prefix(topic);
  put_be(key, static_cast<uint32_t>(p.value), 4);
  return key;
}

std::string topic_key_prefix(std::string_view topic) {
  std::string prefix{topic};
  prefix.push_back('\0');
  return prefix;
}

caf::expected<std::pair<std::string, partition_id>>
decode_partition_key(std::string_view key) {
  if (key.size() < 1 + partition_key_suffix_bytes
      || key[key.size() - partition_key_suffix_bytes] != '\0')
    return make_error(ec::corrupt_segment,
                      "partition key: malformed (" + std::to_string(key.size())
                        + " bytes)");
  auto topic = key.substr(0, key.size() - partition_key_suffix_bytes);
  if (topic.find('\0') != std::string_view::npos)
    return make_error(ec::corrupt_segment, "partition key: NUL in topic");
  auto p = static_cast<int32_t>(get_be(key, key.size() - 4, 4));
  if (p < 0)
    return make_error(ec::corrupt_segment, "partition key: negative id");
  return std::pair{std::string{topic}, partition_id{p}};
}

std::string encode_partition_metadata(const partition_metadata& md) {
  std::string out;
  out.reserve(partition_value_header_bytes
              + md.epochs.size() * epoch_entry_bytes);
  out.push_back(static_cast<char>(partition_value_version));
  put_be(out, static_cast<uint64_t>(md.log_start.value), 8);
  put_be(out, static_cast<uint64_t>(md.high_watermark.value), 8);
  put_be(out, static_cast<uint32_t>(md.epochs.size()), 4);
  for (const auto& e : md.epochs) {
    put_be(out, static_cast<uint32_t>(e.epoch.value), 4);
    put_be(out, static_cast<uint64_t>(e.start_offset.value), 8);
  }
  return out;
}

caf::expected<partition_metadata> decode_partition_metadata(
  std::string_view value) {
  if (value.empty())
    return make_error(ec::corrupt_segment, "partition metadata: empty value");
  auto version = static_cast<uint8_t>(value[0]);
  if (version != partition_value_version)
    return make_error(ec::corrupt_segment,
                      "partition metadata: unknown version "
                        + std::to_string(version) + " (this build reads "
                        + std::to_string(partition_value_version) + ")");
  if (value.size() < partition_value_header_bytes)
    return make_error(ec::corrupt_segment,
                      "partition metadata: truncated: "
                        + std::to_string(value.size()) + " bytes, header needs "
                        + std::to_string(partition_value_header_bytes));
  partition_metadata md;
  md.log_start = offset{static_cast<int64_t>(get_be(value, 1, 8))};
  md.high_watermark = offset{static_cast<int64_t>(get_be(value, 9, 8))};
  uint64_t count = get_be(value, 17, 4);
  // Compare without multiplying the untrusted count.
  size_t body = value.size() - partition_value_header_bytes;
  if (body % epoch_entry_bytes != 0 || body / epoch_entry_bytes != count)
    return make_error(ec::corrupt_segment,
                      "partition metadata: " + std::to_string(count)
                        + " epochs need "
                        + std::to_string(count * epoch_entry_bytes)
                        + " bytes after the header, found "
                        + std::to_string(body));
  md.epochs.reserve(count);
  size_t pos = partition_value_header_bytes;
  for (uint64_t i = 0; i < count; ++i, pos += epoch_entry_bytes) {
    epoch_entry e;
    e.epoch = leader_epoch{static_cast<int32_t>(get_be(value, pos, 4))};
    e.start_offset = offset{static_cast<int64_t>(get_be(value, pos + 4, 8))};
    md.epochs.push_back(e);
  }
  return md;
}

} // namespace metadata_format

namespace mf = metadata_format;

// -- metadata_batch -----------------------------------------------------------

void metadata_batch::put(std::string_view db, std::string_view key,
                         std::string_view value) {
  ops_.push_back(op{false, std::string{db}, std::string{key},
                    std::string{value}});
}

void metadata_batch::erase(std::string_view db, std::string_view key) {
  ops_.push_back(op{true, std::string{db}, std::string{key}, {}});
}

void metadata_batch::put_partition(std::string_view topic, partition_id p,
                                   const partition_metadata& md) {
  auto key = mf::encode_partition_key(topic, p);
  if (!key) {
    if (!error_)
      error_ = std::move(key.error());
    return;
  }
  put(mf::partitions_db, *key, mf::encode_partition_metadata(md));
}

void metadata_batch::erase_partition(std::string_view topic, partition_id p) {
  auto key = mf::encode_partition_key(topic, p);
  if (!key) {
    if (!error_)
      error_ = std::move(key.error());
    return;
  }
  erase(mf::partitions_db, *key);
}

// -- metadata_store -----------------------------------------------------------

metadata_store::metadata_store(std::unique_ptr<lmdb::env> e,
                               lmdb::dbi partitions)
  : env_(std::move(e)), partitions_(partitions) {
}

caf::expected<std::unique_ptr<metadata_store>>
metadata_store::open(const std::filesystem::path& dir,
                     lmdb::env_options opts) {
  auto e = lmdb::env::open(dir, opts);
  if (!e)
    return std::move(e.error());
  auto db = (*e)->open_db(mf::partitions_db, true);
  if (!db)
    return std::move(db.error());
  return std::unique_ptr<metadata_store>{
    new metadata_store(std::move(*e), *db)};
}

caf::expected<partition_metadata>
metadata_store::get_partition(std::string_view topic, partition_id p) {
  auto key = mf::encode_partition_key(topic, p);
  if (!key)
    return std::move(key.error());
  partition_metadata md;
  auto err = env_->read([&](lmdb::txn& t) -> caf::error {
    auto v = t.get(partitions_, *key);
    if (!v)
      return std::move(v.error());
    auto decoded = mf::decode_partition_metadata(*v);
    if (!decoded)
      return make_error(ec::corrupt_segment,
                        std::string{topic} + "/" + std::to_string(p.value)
                          + ": " + describe(decoded.error()));
    md = std::move(*decoded);
    return caf::none;
  });
  if (err)
    return err;
  return md;
}

caf::error metadata_store::put_partition(std::string_view topic,
                                         partition_id p,
                                         const partition_metadata& md) {
  auto key = mf::encode_partition_key(topic, p);
  if (!key)
    return std::move(key.error());
  auto value = mf::encode_partition_metadata(md);
  return env_->write([&](lmdb::txn& t) { return t.put(partitions_, *key, value); });
}

caf::error metadata_store::erase_partition(std::string_view topic,
                                           partition_id p) {
  auto key = mf::encode_partition_key(topic, p);
  if (!key)
    return std::move(key.error());
  return erase(mf::partitions_db, *key);
}

caf::expected<std::vector<partition_record>>
metadata_store::list_with_prefix(std::string_view prefix) {
  std::vector<partition_record> out;
  auto err = env_->read([&](lmdb::txn& t) -> caf::error {
    auto c = t.open_cursor(partitions_);
    if (!c)
      return std::move(c.error());
    caf::error decode_err;
    auto err = c->for_each_prefix(
      prefix, [&](std::string_view k, std::string_view v) {
        auto key = mf::decode_partition_key(k);
        if (!key) {
          decode_err = std::move(key.error());
          return false;
        }
        auto md = mf::decode_partition_metadata(v);
        if (!md) {
          decode_err = make_error(ec::corrupt_segment,
                                  key->first + "/"
                                    + std::to_string(key->second.value) + ": "
                                    + describe(md.error()));
          return false;
        }
        out.push_back(
          partition_record{std::move(key->first), key->second, std::move(*md)});
        return true;
      });
    return err ? err : decode_err;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<partition_record>> metadata_store::list_partitions() {
  return list_with_prefix({});
}

caf::expected<std::vector<partition_record>>
metadata_store::list_partitions(std::string_view topic) {
  if (topic.empty() || topic.find('\0') != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "list_partitions: topic must be non-empty without NUL");
  return list_with_prefix(mf::topic_key_prefix(topic));
}

caf::error metadata_store::put(std::string_view db, std::string_view key,
                               std::string_view value) {
  auto d = env_->open_db(db, true);
  if (!d)
    return std::move(d.error());
  return env_->write([&](lmdb::txn& t) { return t.put(*d, key, value); });
}

caf::expected<std::string> metadata_store::get(std::string_view db,
                                               std::string_view key) {
  auto d = env_->open_db(db, false);
  if (!d)
    return std::move(d.error());
  std::string out;
  auto err = env_->read([&](lmdb::txn& t) -> caf::error {
    auto v = t.get(*d, key);
    if (!v)
      return std::move(v.error());
    out.assign(v->data(), v->size());
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::error metadata_store::erase(std::string_view db, std::string_view key) {
  auto d = env_->open_db(db, false);
  if (!d)
    return is(d.error(), ec::not_found) ? caf::none : std::move(d.error());
  return env_->write([&](lmdb::txn& t) -> caf::error {
    auto err = t.del(*d, key);
    return is(err, ec::not_found) ? caf::none : err;
  });
}

caf::error metadata_store::scan_prefix(std::string_view db,
                                       std::string_view prefix,
                                       const scan_fn& fn) {
  auto d = env_->open_db(db, false);
  if (!d)
    return is(d.error(), ec::not_found) ? caf::none : std::move(d.error());
  return env_->read([&](lmdb::txn& t) -> caf::error {
    auto c = t.open_cursor(*d);
    if (!c)
      return std::move(c.error());
    return c->for_each_prefix(prefix, fn);
  });
}

caf::error metadata_store::write_batch(const metadata_batch& batch) {
  if (batch.error_)
    return batch.error_;
  if (batch.empty())
    return caf::none;
  // Resolve handles first: open_db may not run inside write().
  std::vector<lmdb::dbi> handles;
  handles.reserve(batch.ops_.size());
  for (const auto& o : batch.ops_) {
    auto d = env_->open_db(o.db, true);
    if (!d)
      return std::move(d.error());
    handles.push_back(*d);
  }
  return env_->write([&](lmdb::txn& t) -> caf::error {
    for (size_t i = 0; i < batch.ops_.size(); ++i) {
      const auto& o = batch.ops_[i];
      if (o.erase) {
        auto err = t.del(handles[i], o.key);
        if (err && !is(err, ec::not_found))
          return err;
      } else if (auto err = t.put(handles[i], o.key, o.value)) {
        return err;
      }
    }
    return caf::none;
  });
}

// -- lmdb_partition_checkpoint ------------------------------------------------

lmdb_partition_checkpoint::lmdb_partition_checkpoint(metadata_store& store,
                                                     std::string topic,
                                                     partition_id p)
  : store_(store), topic_(std::move(topic)), partition_(p) {
}

caf::expected<std::optional<partition_metadata>>
lmdb_partition_checkpoint::load() {
  auto md = store_.get_partition(topic_, partition_);
  if (md)
    return std::optional<partition_metadata>{std::move(*md)};
  if (is(md.error(), ec::not_found))
    return std::optional<partition_metadata>{};
  return std::move(md.error());
}

caf::error lmdb_partition_checkpoint::save(const partition_metadata& md) {
  return store_.put_partition(topic_, partition_, md);
}

} // namespace ferry
