// ferry-storage-bench: durable append, read and recovery throughput of one
// partition_log, optionally next to fio's fdatasync bandwidth on the same
// disk. Prints a table (or --json). Figures go in notes, never in tests.

#include "broker/file_system.hpp"
#include "broker/partition_log.hpp"
#include "broker/sync_pool.hpp"
#include "broker/record_batch.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace ferry;
using clk = std::chrono::steady_clock;

namespace {

struct options {
  fs::path dir = "/tmp/ferry-storage-bench";
  uint64_t total_bytes = 1ull << 30;  // 1 GiB of payload
  size_t record_bytes = 1024;
  size_t batch_bytes = 64 * 1024;
  size_t group_bytes = 1 << 20;  // bytes appended per fdatasync
  bool fio = false;
  bool json = false;
  bool keep = false;
  bool sync_rounds = false;
};

[[noreturn]] void usage(int rc) {
  std::cout <<
    "usage: ferry-storage-bench [options]\n"
    "  --dir DIR           where to write (default /tmp/ferry-storage-bench; wiped)\n"
    "  --total-mb N        payload to append (default 1024)\n"
    "  --record-bytes N    record value size (default 1024)\n"
    "  --batch-kb N        record batch size (default 64)\n"
    "  --group-kb N        bytes appended per fdatasync: group commit (default 1024)\n"
    "  --fio               also run fio --rw=write --bs=1M --size=1G --fdatasync=1\n"
    "  --json              print JSON instead of a table\n"
    "  --keep              keep the data directory\n"
    "  --sync-rounds       only: the cost of making N files durable per round\n"
    "                      (1 KB appended to each): fdatasync each on 1 or 8\n"
    "                      threads vs. broker/sync_pool (one syncfs for >= 8)\n";
  std::exit(rc);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        usage(2);
      return argv[++i];
    };
    if (a == "--dir") o.dir = next();
    else if (a == "--total-mb") o.total_bytes = std::stoull(next()) << 20;
    else if (a == "--record-bytes") o.record_bytes = std::stoull(next());
    else if (a == "--batch-kb") o.batch_bytes = std::stoull(next()) << 10;
    else if (a == "--group-kb") o.group_bytes = std::stoull(next()) << 10;
    else if (a == "--fio") o.fio = true;
    else if (a == "--json") o.json = true;
    else if (a == "--keep") o.keep = true;
    else if (a == "--sync-rounds") o.sync_rounds = true;
    else if (a == "-h" || a == "--help") usage(0);
    else usage(2);
  }
  return o;
}

double seconds_since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

[[noreturn]] void die(const std::string& what, const caf::error& err) {
  std::cerr << "ferry-storage-bench: " << what << ": " << describe(err) << "\n";
  std::exit(1);
}

// Runs fio in `dir` and returns its write bandwidth in MB/s (0 if fio fails).
double run_fio(const fs::path& dir) {
  auto cmd = "cd '" + dir.string()
             + "' && fio --name=w --rw=write --bs=1M --size=1G --fdatasync=1 "
               "--output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p)
    return 0;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  pclose(p);
  fs::remove(dir / "w.0.0");
  try {
    auto j = nlohmann::json::parse(out);
    // bw_bytes is bytes per second.
    return j["jobs"][0]["write"]["bw_bytes"].get<double>() / 1e6;
  } catch (...) {
    return 0;
  }
}

} // namespace


namespace {

// --sync-rounds: ms per round of making `n` files durable after 1 KB was
// appended to each, for each way of syncing them.
void run_sync_rounds(const options& opt) {
  auto& posix = default_file_system();
  std::string kb(1024, 'x');
  std::printf("| files per round | 1 thread, fdatasync each | 8 threads, fdatasync each | sync_pool (8 threads, syncfs >= 8) |\n");
  std::printf("|---|---|---|---|\n");
  for (size_t n : {1u, 10u, 50u, 200u, 1000u}) {
    auto dir = opt.dir / ("rounds-" + std::to_string(n));
    fs::create_directories(dir);
    std::vector<std::shared_ptr<file_handle>> files;
    for (size_t i = 0; i < n; ++i) {
      auto f = posix.open(dir / ("f" + std::to_string(i)), open_mode::create_truncate);
      if (!f)
        die("open", f.error());
      files.emplace_back(std::move(*f));
    }
    int rounds = n >= 1000 ? 5 : n >= 200 ? 20 : 100;
    auto append_all = [&] {
      for (auto& f : files)
        if (auto err = f->append(kb))
          die("append", err);
    };
    auto threads_ms = [&](size_t threads) {
      auto t0 = clk::now();
      for (int r = 0; r < rounds; ++r) {
        append_all();
        std::atomic<size_t> next{0};
        std::vector<std::thread> ts;
        for (size_t t = 0; t < threads; ++t)
          ts.emplace_back([&] {
            for (size_t i; (i = next++) < files.size();)
              if (auto err = files[i]->sync())
                die("fdatasync", err);
          });
        for (auto& t : ts)
          t.join();
      }
      return seconds_since(t0) * 1000 / rounds;
    };
    auto pool_ms = [&] {
      sync_pool pool{{.threads = 8, .syncfs_threshold = 8}};
      auto t0 = clk::now();
      for (int r = 0; r < rounds; ++r) {
        append_all();
        std::mutex mtx;
        std::condition_variable cv;
        size_t done = 0;
        for (auto& f : files)
          pool.submit(f, [&](caf::error err) {
            if (err)
              die("sync_pool", err);
            std::lock_guard<std::mutex> guard{mtx};
            ++done;
            cv.notify_all();
          });
        std::unique_lock<std::mutex> lock{mtx};
        cv.wait(lock, [&] { return done == files.size(); });
      }
      return seconds_since(t0) * 1000 / rounds;
    };
    double one = threads_ms(1);
    double eight = threads_ms(8);
    double pooled = pool_ms();
    std::printf("| %zu | %.2f ms | %.2f ms | %.2f ms |\n", n, one, eight, pooled);
  }
}

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
  fs::remove_all(opt.dir);
  fs::create_directories(opt.dir);
  if (opt.sync_rounds) {
    run_sync_rounds(opt);
    if (!opt.keep)
      fs::remove_all(opt.dir);
    return 0;
  }
  nlohmann::json result;
  result["record_bytes"] = opt.record_bytes;
  result["batch_bytes"] = opt.batch_bytes;
  result["group_commit_bytes"] = opt.group_bytes;

  // One template batch; append() rewrites its base offset in place.
  std::mt19937_64 rng{42};
  size_t per_batch = std::max<size_t>(1, opt.batch_bytes / opt.record_bytes);
  std::vector<record> recs(per_batch);
  for (size_t i = 0; i < per_batch; ++i) {
    recs[i].offset_delta = static_cast<int32_t>(i);
    recs[i].timestamp = system_now_ms();
    recs[i].key = "key-" + std::to_string(i);
    std::string v(opt.record_bytes, '\0');
    for (auto& c : v)
      c = static_cast<char>(rng());
    recs[i].value = std::move(v);
  }
  auto encoded = encode_batch(batch_meta{}, recs);
  if (!encoded)
    die("encode", encoded.error());
  std::string batch = std::move(*encoded);
  size_t batches = std::max<uint64_t>(1, opt.total_bytes / (per_batch * opt.record_bytes));
  size_t batches_per_flush = std::max<size_t>(1, opt.group_bytes / batch.size());

  double fio_mbs = 0;
  if (opt.fio)
    fio_mbs = run_fio(opt.dir);

  memory_checkpoint ckpt;
  log_config cfg;
  cfg.flush.messages = 0; // the loop below decides when to flush
  auto log_dir = opt.dir / "bench-0";
  {
    auto log = partition_log::open(log_dir, cfg, &ckpt);
    if (!log)
      die("open", log.error());
    auto t0 = clk::now();
    for (size_t i = 0; i < batches; ++i) {
      auto r = (*log)->append(std::span<char>{batch.data(), batch.size()});
      if (!r)
        die("append", r.error());
      if ((i + 1) % batches_per_flush == 0 || i + 1 == batches)
        if (auto f = (*log)->flush(); !f)
          die("flush", f.error());
    }
    double secs = seconds_since(t0);
    double recs_total = double(batches) * per_batch;
    double bytes_total = double(batches) * batch.size();
    result["append"] = {{"records_per_s", recs_total / secs},
                        {"mb_per_s", bytes_total / secs / 1e6},
                        {"seconds", secs},
                        {"fdatasyncs", (batches + batches_per_flush - 1) / batches_per_flush}};
    (*log)->set_high_watermark((*log)->log_end());

    // Sequential read of the whole log in 1 MiB fetches.
    t0 = clk::now();
    offset pos = (*log)->log_start();
    uint64_t read_bytes = 0;
    while (pos < (*log)->log_end()) {
      auto r = (*log)->read(pos, 1 << 20, (*log)->log_end());
      if (!r)
        die("read", r.error());
      read_bytes += r->data.size();
      pos = r->next_offset;
    }
    secs = seconds_since(t0);
    result["read"] = {{"records_per_s", recs_total / secs},
                      {"mb_per_s", read_bytes / secs / 1e6},
                      {"seconds", secs}};
    if (auto err = (*log)->close())
      die("close", err);
  }

  // Recovery: reopen the closed log (scans only the active segment's tail).
  {
    auto t0 = clk::now();
    auto log = partition_log::open(log_dir, cfg, &ckpt);
    if (!log)
      die("reopen", log.error());
    double secs = seconds_since(t0);
    result["recovery"] = {{"seconds", secs},
                          {"log_bytes", (*log)->size_bytes()},
                          {"segments", (*log)->segment_count()},
                          {"batches_scanned", (*log)->recovery().batches_scanned}};
    (*log)->close();
  }
  if (opt.fio) {
    result["fio_fdatasync_mb_per_s"] = fio_mbs;
    result["append_vs_fio"] = result["append"]["mb_per_s"].get<double>() / fio_mbs;
  }
  if (!opt.keep)
    fs::remove_all(opt.dir);

  if (opt.json) {
    std::cout << result.dump(2) << "\n";
    return 0;
  }
  auto f = [](const nlohmann::json& j) { return j.get<double>(); };
  std::printf("ferry-storage-bench: %zu B records, %zu B batches, %zu B per fdatasync\n",
              opt.record_bytes, batch.size(), batches_per_flush * batch.size());
  std::printf("  durable append : %10.0f records/s  %8.1f MB/s  (%.2f s)\n",
              f(result["append"]["records_per_s"]), f(result["append"]["mb_per_s"]),
              f(result["append"]["seconds"]));
  std::printf("  read           : %10.0f records/s  %8.1f MB/s  (%.2f s)\n",
              f(result["read"]["records_per_s"]), f(result["read"]["mb_per_s"]),
              f(result["read"]["seconds"]));
  std::printf("  recovery       : %10.3f s for %.0f MB in %d segments (%d batches scanned)\n",
              f(result["recovery"]["seconds"]),
              f(result["recovery"]["log_bytes"]) / 1e6,
              result["recovery"]["segments"].get<int>(),
              result["recovery"]["batches_scanned"].get<int>());
  if (opt.fio)
    std::printf("  fio fdatasync  : %10.1f MB/s  -> ferry append is %.2fx of fio\n",
                fio_mbs, f(result["append_vs_fio"]));
  return 0;
}
