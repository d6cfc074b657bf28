#include "broker/producer_state.hpp"

#include "broker/crc32c.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/varint.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

namespace ferry {

namespace {

constexpr char snapshot_magic[4] = {'F', 'P', 'S', 'T'};
constexpr uint8_t snapshot_version = 1;
constexpr size_t snapshot_header_bytes = 4 + 1 + 8 + 4;
constexpr size_t snapshot_crc_bytes = 4;
constexpr size_t producer_fixed_bytes = 8 + 2 + 8 + 1;
constexpr size_t batch_bytes = 4 + 4 + 8 + 8;

// Kafka: the next batch must start right after the last sequence.
bool in_sequence(int32_t last_seq, int32_t next_seq) {
  return static_cast<int64_t>(next_seq) == static_cast<int64_t>(last_seq) + 1
         || (next_seq == 0 && last_seq == INT32_MAX);
}

template <class T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  be::store<T>(buf, v);
  out.append(buf, sizeof(T));
}

caf::error corrupt(const std::string& what) {
  return make_error(ec::corrupt_segment, "producer snapshot: " + what);
}

// Bounds-checked big-endian reader over a snapshot.
struct reader {
  const char* p;
  const char* end;
  size_t left() const { return static_cast<size_t>(end - p); }
  template <class T>
  bool get(T& out) {
    if (left() < sizeof(T))
      return false;
    out = be::load<T>(p);
    p += sizeof(T);
    return true;
  }
};

} // namespace

int32_t increment_sequence(int32_t seq, int32_t n) {
  if (seq > INT32_MAX - n)
    return n - (INT32_MAX - seq) - 1;
  return seq + n;
}

caf::expected<sequence_check>
producer_state::check(producer_id pid, int16_t epoch, int32_t base_seq,
                      int32_t count) const {
  if (pid.value < 0)
    return sequence_check{sequence_check::not_idempotent, offset{0}, offset{0}};
  if (epoch < 0 || base_seq < 0 || count < 1)
    return make_error(ec::invalid_request,
                      "idempotent batch of producer " + std::to_string(pid.value)
                        + " has epoch " + std::to_string(epoch) + ", base sequence "
                        + std::to_string(base_seq) + ", record count "
                        + std::to_string(count));
  auto i = producers_.find(pid.value);
  if (i == producers_.end())
    return sequence_check{};
  const auto& e = i->second;
  if (epoch < e.epoch)
    return make_error(ec::invalid_producer_epoch,
                      "producer " + std::to_string(pid.value) + " epoch "
                        + std::to_string(epoch) + " is older than current epoch "
                        + std::to_string(e.epoch));
  if (epoch > e.epoch) {
    if (base_seq != 0)
      return make_error(ec::out_of_order_sequence,
                        "producer " + std::to_string(pid.value) + " new epoch "
                          + std::to_string(epoch) + " must start at sequence 0, got "
                          + std::to_string(base_seq));
    return sequence_check{};
  }
  auto last_seq = increment_sequence(base_seq, count - 1);
  for (const auto& b : e.batches)
    if (b.first_seq == base_seq && b.last_seq == last_seq)
      return sequence_check{sequence_check::duplicate, b.first_offset,
                            b.last_offset};
  if (!in_sequence(e.last_seq(), base_seq))
    return make_error(ec::out_of_order_sequence,
                      "producer " + std::to_string(pid.value) + " epoch "
                        + std::to_string(epoch) + ": expected sequence "
                        + std::to_string(increment_sequence(e.last_seq(), 1))
                        + ", got " + std::to_string(base_seq));
  return sequence_check{};
}

caf::expected<sequence_check> producer_state::check(const batch_header& h) const {
  if (h.last_offset_delta < 0)
    return make_error(ec::invalid_request, "negative last offset delta");
  return check(producer_id{h.producer_id}, h.producer_epoch, h.base_sequence,
               h.last_offset_delta + 1);
}

void producer_state::record(producer_id pid, int16_t epoch, int32_t base_seq,
                            int32_t count, offset first, offset last,
                            timestamp_ms max_ts) {
  end_ = std::max(end_, last + 1);
  if (pid.value < 0 || base_seq < 0 || count < 1)
    return;
  auto& e = producers_[pid.value];
  if (!e.batches.empty() && epoch < e.epoch)
    return;
  if (e.batches.empty() || epoch > e.epoch) {
    e.batches.clear();
    e.epoch = epoch;
  }
  e.batches.push_back(producer_batch{base_seq,
                                     increment_sequence(base_seq, count - 1),
                                     first, last});
  while (e.batches.size() > producer_batches_kept)
    e.batches.pop_front();
  e.last_timestamp = std::max(e.last_timestamp, max_ts);
}

void producer_state::record(const batch_header& h, timestamp_ms seen) {
  if (h.last_offset_delta < 0)
    return;
  record(producer_id{h.producer_id}, h.producer_epoch, h.base_sequence,
         h.last_offset_delta + 1, h.base_offset, h.last_offset(),
         std::max(h.max_timestamp, seen));
}

void producer_state::truncate_to(offset end) {
  for (auto i = producers_.begin(); i != producers_.end();) {
    auto& bs = i->second.batches;
    while (!bs.empty() && bs.back().last_offset >= end)
      bs.pop_back();
    if (bs.empty())
      i = producers_.erase(i);
    else
      ++i;
  }
  end_ = std::min(end_, end);
}

size_t producer_state::expire(timestamp_ms now, int64_t max_age_ms) {
  return std::erase_if(producers_, [&](const auto& kv) {
    return kv.second.last_timestamp < now - max_age_ms;
  });
}

caf::error producer_state::rebuild(const partition_log& log,
                                   size_t chunk_bytes) {
  auto start = log.log_start();
  auto stop = log.log_end();
  if (end_ > stop)
    clear();
  auto from = std::max(end_, start);
  while (from < stop) {
    auto rd = log.read(from, chunk_bytes, stop);
    if (!rd)
      return std::move(rd.error());
    std::string_view buf = rd->data;
    if (buf.empty())
      break;
    while (!buf.empty()) {
      auto h = parse_batch_header(buf);
      if (!h)
        return make_error(ec::corrupt_segment,
                          "producer state rebuild at offset "
                            + std::to_string(from.value) + ": "
                            + describe(h.error()));
      // The first batch of a read may start before `from`.
      if (h->last_offset() >= from)
        record(*h);
      buf.remove_prefix(h->total_size());
    }
    if (rd->next_offset <= from)
      break; // no progress: never loop forever on a confused log
    from = rd->next_offset;
  }
  end_ = std::max(end_, stop);
  return caf::none;
}

std::string producer_state::encode_snapshot(offset end) const {
  // Sorted by producer id so equal tables give equal bytes.
  std::vector<std::pair<int64_t, const producer_entry*>> sorted;
  sorted.reserve(producers_.size());
  for (const auto& [pid, e] : producers_)
    sorted.emplace_back(pid, &e);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  out.append(snapshot_magic, sizeof snapshot_magic);
  put<uint8_t>(out, snapshot_version);
  put<int64_t>(out, end.value);
  auto count_pos = out.size();
  put<uint32_t>(out, 0);
  uint32_t count = 0;
  for (const auto& [pid, e] : sorted) {
    uint8_t n = 0;
    for (const auto& b : e->batches)
      if (b.last_offset < end)
        ++n;
    if (n == 0)
      continue;
    ++count;
    put<int64_t>(out, pid);
    put<int16_t>(out, e->epoch);
    put<int64_t>(out, e->last_timestamp);
    put<uint8_t>(out, n);
    for (const auto& b : e->batches) {
      if (b.last_offset >= end)
        continue;
      put<int32_t>(out, b.first_seq);
      put<int32_t>(out, b.last_seq);
      put<int64_t>(out, b.first_offset.value);
      put<int64_t>(out, b.last_offset.value);
    }
  }
  be::store<uint32_t>(out.data() + count_pos, count);
  put<uint32_t>(out, crc32c(out.data(), out.size()));
  return out;
}

caf::expected<producer_state>
producer_state::decode_snapshot(std::string_view bytes) {
  if (bytes.size() < snapshot_header_bytes + snapshot_crc_bytes)
    return corrupt("truncated: " + std::to_string(bytes.size())
                   + " bytes, need at least "
                   + std::to_string(snapshot_header_bytes + snapshot_crc_bytes));
  if (std::memcmp(bytes.data(), snapshot_magic, sizeof snapshot_magic) != 0)
    return corrupt("bad magic");
  auto version = static_cast<uint8_t>(bytes[4]);
  if (version != snapshot_version)
    return corrupt("unknown version " + std::to_string(version));
  auto body = bytes.size() - snapshot_crc_bytes;
  auto stored = be::load<uint32_t>(bytes.data() + body);
  auto computed = crc32c(bytes.data(), body);
  if (stored != computed)
    return make_error(ec::crc_mismatch, "producer snapshot: stored crc "
                                          + std::to_string(stored) + ", computed "
                                          + std::to_string(computed));
  reader r{bytes.data() + 5, bytes.data() + body};
  int64_t end = 0;
  uint32_t count = 0;
  r.get(end);
  r.get(count);
  if (end < 0)
    return corrupt("negative end offset " + std::to_string(end));
  // Each producer takes at least one fixed part and one batch: a count that
  // cannot fit is rejected before any allocation.
  if (count > r.left() / (producer_fixed_bytes + batch_bytes))
    return corrupt("producer count " + std::to_string(count) + " exceeds "
                   + std::to_string(r.left()) + " bytes of data");
  producer_state st;
  st.end_ = offset{end};
  st.producers_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    int64_t pid = 0;
    producer_entry e;
    uint8_t n = 0;
    if (!r.get(pid) || !r.get(e.epoch) || !r.get(e.last_timestamp) || !r.get(n))
      return corrupt("truncated in producer " + std::to_string(i));
    if (pid < 0 || e.epoch < 0)
      return corrupt("producer " + std::to_string(i) + " has id "
                     + std::to_string(pid) + ", epoch " + std::to_string(e.epoch));
    if (n == 0 || n > producer_batches_kept)
      return corrupt("producer " + std::to_string(pid) + " has "
                     + std::to_string(n) + " batches");
    for (uint8_t j = 0; j < n; ++j) {
      producer_batch b;
      int64_t first = 0;
      int64_t last = 0;
      if (!r.get(b.first_seq) || !r.get(b.last_seq) || !r.get(first)
          || !r.get(last))
        return corrupt("truncated in batch " + std::to_string(j)
                       + " of producer " + std::to_string(pid));
      b.first_offset = offset{first};
      b.last_offset = offset{last};
      bool ordered = e.batches.empty()
                     || e.batches.back().last_offset < b.first_offset;
      if (b.first_seq < 0 || b.last_seq < 0 || first < 0 || last < first
          || last >= end || !ordered)
        return corrupt("batch " + std::to_string(j) + " of producer "
                       + std::to_string(pid) + " is inconsistent (seq "
                       + std::to_string(b.first_seq) + ".."
                       + std::to_string(b.last_seq) + ", offsets "
                       + std::to_string(first) + ".." + std::to_string(last)
                       + ", end " + std::to_string(end) + ")");
      e.batches.push_back(b);
    }
    if (!st.producers_.emplace(pid, std::move(e)).second)
      return corrupt("producer " + std::to_string(pid) + " appears twice");
  }
  if (r.left() != 0)
    return corrupt(std::to_string(r.left()) + " trailing bytes");
  return st;
}

const producer_entry* producer_state::find(producer_id pid) const {
  auto i = producers_.find(pid.value);
  return i == producers_.end() ? nullptr : &i->second;
}

void producer_state::clear() {
  producers_.clear();
  end_ = offset{0};
}

std::unordered_map<int64_t, int64_t> producer_state::last_offsets() const {
  std::unordered_map<int64_t, int64_t> out;
  out.reserve(producers_.size());
  for (auto& [pid, e] : producers_)
    if (!e.batches.empty())
      out.emplace(pid, e.batches.back().last_offset.value);
  return out;
}

} // namespace ferry
