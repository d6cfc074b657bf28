#include "actors/server/metadata_import.hpp"

#include "actors/server/raft_metadata.hpp"
#include "broker/big_endian.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/raft_storage.hpp"

#include <caf/binary_deserializer.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

namespace fmt_ = legacy_metadata_format;

namespace {

caf::expected<topic_metadata> decode_topic(std::string_view key,
                                           std::string_view value) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::corrupt_segment,
                      std::string{fmt_::topics_db} + " record '"
                        + std::string{key} + "': " + why);
  };
  if (value.empty()
      || static_cast<uint8_t>(value[0]) != fmt_::topic_value_version)
    return bad("unknown version");
  // Written before cleanup.policy existed: topic_config's first eight
  // fields.
  topic_metadata_v1 old;
  caf::binary_deserializer source{nullptr, value.data() + 1, value.size() - 1};
  if (auto err = source(old))
    return bad("does not decode: " + describe(err));
  if (source.remaining() != 0)
    return bad("trailing bytes");
  auto md = std::move(old).upgrade();
  return md;
}

} // namespace

caf::expected<size_t> import_legacy_metadata(metadata_store& store,
                                             raft_log_store& raft,
                                             int32_t node_id) {
  std::vector<topic_metadata> topics;
  std::vector<std::string> keys;
  caf::error decode_err;
  auto err = store.scan_prefix(
    fmt_::topics_db, "", [&](std::string_view key, std::string_view value) {
      keys.emplace_back(key);
      auto md = decode_topic(key, value);
      if (!md) {
        decode_err = std::move(md.error());
        return false;
      }
      topics.push_back(std::move(*md));
      return true;
    });
  if (err)
    return err;
  if (decode_err)
    return decode_err;
  int64_t next_pid = 0;
  bool has_counter = false;
  if (auto limit = store.get(fmt_::counters_db, fmt_::producer_id_limit_key)) {
    if (limit->size() != 8)
      return make_error(ec::corrupt_segment,
                        std::string{fmt_::counters_db} + " record '"
                          + fmt_::producer_id_limit_key + "' is not 8 bytes");
    next_pid = be::load<int64_t>(limit->data());
    has_counter = true;
  } else if (!is(limit.error(), ec::not_found)) {
    return std::move(limit.error());
  }
  if (keys.empty() && !has_counter)
    return size_t{0};
  auto persisted = raft.load();
  if (!persisted)
    return std::move(persisted.error());
  size_t imported = 0;
  if (persisted->snapshot.index == 0 && persisted->entries.empty()) {
    for (auto& md : topics)
      for (auto& pa : md.partitions) {
        pa.leader = node_id;
        pa.replicas = {node_id};
        pa.isr = {node_id};
      }
    imported = topics.size();
    auto hard = persisted->hard;
    hard.term = std::max<uint64_t>(hard.term, 1);
    if (auto e = raft.save_hard_state(hard))
      return e;
    raft_snapshot snap;
    snap.index = 1;
    snap.term = 1;
    snap.data = encode_metadata_snapshot(next_pid, std::move(topics));
    if (auto e = raft.save_snapshot(snap, false))
      return e;
    log::info("metadata: imported {} topics and producer id {} from the "
              "single-node metadata of an older ferryd into the Raft log",
              imported, next_pid);
  } else {
    log::info("metadata: erasing {} leftover single-node metadata rows (the "
              "Raft log has them already)",
              keys.size() + (has_counter ? 1 : 0));
  }
  metadata_batch batch;
  for (auto& k : keys)
    batch.erase(fmt_::topics_db, k);
  if (has_counter)
    batch.erase(fmt_::counters_db, fmt_::producer_id_limit_key);
  if (auto e = store.write_batch(batch))
    return e;
  return imported;
}

} // namespace ferry
