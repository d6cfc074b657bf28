// ferry-micro-bench (Google Benchmark): the codec's hot paths.

#include "broker/crc32c.hpp"
#include "broker/record_batch.hpp"

#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

using namespace ferry;

namespace {

std::vector<record> make_records(size_t n, size_t value_bytes) {
  std::mt19937_64 rng{7};
  std::vector<record> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].offset_delta = static_cast<int32_t>(i);
    out[i].timestamp = 1'700'000'000'000 + static_cast<int64_t>(i);
    out[i].key = "key-" + std::to_string(i);
    std::string v(value_bytes, '\0');
    for (auto& c : v)
      c = static_cast<char>('a' + rng() % 16); // compressible-ish text
    out[i].value = std::move(v);
    out[i].headers.push_back({"trace", std::string("abc")});
  }
  return out;
}

void BM_crc32c(benchmark::State& st) {
  std::string buf(static_cast<size_t>(st.range(0)), 'x');
  for (auto _ : st)
    benchmark::DoNotOptimize(crc32c(buf.data(), buf.size()));
  st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32c)->Arg(1024)->Arg(64 * 1024);

void BM_crc32c_portable(benchmark::State& st) {
  std::string buf(static_cast<size_t>(st.range(0)), 'x');
  for (auto _ : st)
    benchmark::DoNotOptimize(crc32c_portable(buf.data(), buf.size()));
  st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32c_portable)->Arg(64 * 1024);

void BM_encode(benchmark::State& st) {
  auto recs = make_records(64, 1024);
  batch_meta meta;
  meta.codec = static_cast<compression>(st.range(0));
  size_t bytes = 0;
  for (auto _ : st) {
    auto b = encode_batch(meta, recs);
    bytes = b->size();
    benchmark::DoNotOptimize(b);
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * 64);
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * 1024);
  st.counters["batch_bytes"] = double(bytes);
}
BENCHMARK(BM_encode)->Arg(0)->Arg(3)->Arg(4);

void BM_decode(benchmark::State& st) {
  auto recs = make_records(64, 1024);
  batch_meta meta;
  meta.codec = static_cast<compression>(st.range(0));
  auto b = encode_batch(meta, recs);
  for (auto _ : st)
    benchmark::DoNotOptimize(decode_batch(*b));
  st.SetItemsProcessed(int64_t(st.iterations()) * 64);
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * 1024);
}
BENCHMARK(BM_decode)->Arg(0)->Arg(3)->Arg(4);

void BM_parse_header_and_crc(benchmark::State& st) {
  auto b = encode_batch(batch_meta{}, make_records(64, 1024));
  for (auto _ : st) {
    auto h = parse_batch_header(*b);
    benchmark::DoNotOptimize(h);
    benchmark::DoNotOptimize(verify_batch_crc(*b));
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(b->size()));
}
BENCHMARK(BM_parse_header_and_crc);

} // namespace
