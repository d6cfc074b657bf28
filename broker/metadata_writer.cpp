#include "broker/metadata_writer.hpp"

#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"

namespace ferry {

metadata_writer::metadata_writer(std::shared_ptr<metadata_store> store,
                                 bool background)
  : store_(std::move(store)) {
  if (background)
    thread_ = std::thread{[this] { run(); }};
}

metadata_writer::~metadata_writer() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  if (auto err = flush())
    log::warn("metadata writer: last round failed: {}", err);
}

void metadata_writer::put_later(std::string_view db, std::string_view key,
                                std::string value) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto [it, fresh] = queue_.try_emplace(key_type{db, key});
    if (!fresh)
      ++stats_.coalesced;
    it->second = op{false, std::move(value)};
  }
  cv_.notify_one();
}

void metadata_writer::erase_later(std::string_view db, std::string_view key) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto [it, fresh] = queue_.try_emplace(key_type{db, key});
    if (!fresh)
      ++stats_.coalesced;
    it->second = op{true, {}};
  }
  cv_.notify_one();
}

caf::error metadata_writer::put_now(std::string_view db, std::string_view key,
                                    std::string_view value) {
  std::lock_guard<std::mutex> round{round_mtx_};
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (queue_.erase(key_type{db, key}) > 0)
      ++stats_.coalesced;
    ++stats_.immediate;
  }
  return store_->put(db, key, value);
}

caf::error metadata_writer::flush() {
  std::lock_guard<std::mutex> round{round_mtx_};
  std::map<key_type, op> ops;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ops.swap(queue_);
  }
  return write_round(ops);
}

caf::expected<std::string> metadata_writer::get(std::string_view db,
                                                std::string_view key) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (auto i = queue_.find(key_type{db, key}); i != queue_.end()) {
      if (i->second.erase)
        return make_error(ec::not_found, "erased (queued)");
      return i->second.value;
    }
  }
  return store_->get(db, key);
}

metadata_writer_stats metadata_writer::stats() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return stats_;
}

size_t metadata_writer::queued() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return queue_.size();
}

void metadata_writer::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock{mtx_};
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_)
        return; // the destructor flushes
    }
    if (auto err = flush())
      log::warn("metadata writer: a round of checkpoints failed: {}", err);
  }
}

caf::error metadata_writer::write_round(std::map<key_type, op>& ops) {
  if (ops.empty())
    return caf::none;
  metadata_batch batch;
  for (auto& [k, o] : ops) {
    if (o.erase)
      batch.erase(k.first, k.second);
    else
      batch.put(k.first, k.second, o.value);
  }
  auto err = store_->write_batch(batch);
  std::lock_guard<std::mutex> guard{mtx_};
  ++stats_.rounds;
  if (err)
    ++stats_.failed_rounds;
  else
    stats_.ops_written += ops.size();
  return err;
}

// -- writer_partition_checkpoint ------------------------------------------------

writer_partition_checkpoint::writer_partition_checkpoint(metadata_writer& writer,
                                                         std::string topic,
                                                         partition_id p)
  : writer_(writer), topic_(std::move(topic)), partition_(p) {
}

caf::expected<std::optional<partition_metadata>>
writer_partition_checkpoint::load() {
  auto key = metadata_format::encode_partition_key(topic_, partition_);
  if (!key)
    return std::move(key.error());
  auto bytes = writer_.get(metadata_format::partitions_db, *key);
  if (!bytes) {
    if (is(bytes.error(), ec::not_found))
      return std::optional<partition_metadata>{};
    return std::move(bytes.error());
  }
  auto md = metadata_format::decode_partition_metadata(*bytes);
  if (!md)
    return std::move(md.error());
  return std::optional<partition_metadata>{std::move(*md)};
}

caf::error writer_partition_checkpoint::save(const partition_metadata& md) {
  auto key = metadata_format::encode_partition_key(topic_, partition_);
  if (!key)
    return std::move(key.error());
  return writer_.put_now(metadata_format::partitions_db, *key,
                         metadata_format::encode_partition_metadata(md));
}

caf::error writer_partition_checkpoint::save_at_close(const partition_metadata& md) {
  auto key = metadata_format::encode_partition_key(topic_, partition_);
  if (!key)
    return std::move(key.error());
  writer_.put_later(metadata_format::partitions_db, *key,
                    metadata_format::encode_partition_metadata(md));
  return caf::none;
}

} // namespace ferry
