// libFuzzer harness: opening a partition log whose files hold arbitrary
// bytes (broker/partition_log.hpp: recovery scans the active segment,
// truncates a torn or corrupt tail, rebuilds damaged indexes). A crash
// leaves such files behind; a disk can return anything. Opening must give a
// log or an error, never a crash. A log that opens must read back from its
// start to its end and take one more append.
//
// Input: the first byte says which files to write (bit 0: an offset index,
// bit 1: a time index, bit 2: a second segment starting at offset 100); the
// next two bytes give the length of the index part; the rest is split into
// the index bytes and the segment bytes.

#include "broker/partition_checkpoint.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"
#include "broker/segment.hpp"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / ("ferry-fuzz-segment-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(work_dir(), ec);
    });
    return d;
  }();
  return dir;
}

void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream out{p, std::ios::binary | std::ios::trunc};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3)
    return 0;
  auto mode = data[0];
  size_t index_len = (static_cast<size_t>(data[1]) << 8 | data[2]) % 4096;
  std::string_view rest{reinterpret_cast<const char*>(data + 3), size - 3};
  index_len = std::min(index_len, rest.size());
  auto index_bytes = rest.substr(0, index_len);
  auto log_bytes = rest.substr(index_len);

  auto dir = work_dir() / "p";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  using ferry::offset;
  write_file(dir / ferry::segment_file_name(offset{0}, ferry::log_file_suffix), log_bytes);
  if (mode & 1)
    write_file(dir / ferry::segment_file_name(offset{0}, ferry::index_file_suffix),
               index_bytes);
  if (mode & 2)
    write_file(dir / ferry::segment_file_name(offset{0}, ferry::time_index_file_suffix),
               index_bytes);
  if (mode & 4)
    write_file(dir / ferry::segment_file_name(offset{100}, ferry::log_file_suffix),
               log_bytes.substr(log_bytes.size() / 2));

  ferry::memory_checkpoint cp;
  auto log = ferry::partition_log::open(dir, ferry::log_config{}, &cp);
  if (!log)
    return 0;
  auto& l = **log;
  if (l.log_start() > l.log_end())
    std::abort();
  auto from = l.log_start();
  int reads = 0;
  while (from < l.log_end() && reads++ < 10000) {
    auto r = l.read(from, 1 << 20, l.log_end());
    if (!r || r->data.empty() || r->next_offset <= from)
      break;
    // What recovery kept of the only (active) segment must be whole, valid
    // batches. (Older segments are not rescanned at open, as in Kafka:
    // their damage shows as a read error.)
    std::string_view left{r->data};
    while (!(mode & 4) && !left.empty()) {
      auto h = ferry::parse_batch_header(left);
      if (!h)
        std::abort(); // recovery kept bytes that are not a batch
      if (!ferry::decode_batch(left.substr(0, h->total_size())))
        std::abort(); // recovery kept a batch that does not decode
      left.remove_prefix(h->total_size());
    }
    from = r->next_offset;
  }
  ferry::record rec;
  rec.value = "after recovery";
  auto batch = ferry::encode_batch(ferry::batch_meta{}, {rec});
  if (!batch)
    std::abort();
  auto end_before = l.log_end();
  auto appended = l.append(std::span<char>{batch->data(), batch->size()});
  if (appended && l.log_end() != end_before + 1)
    std::abort();
  (void) l.close();
  return 0;
}
