// A full disk and failing syncs, through fault_injecting_file_system: the log
// refuses the write with a clear error and never corrupts itself.

#include "tests/temp_dir.hpp"
#include "broker/file_system.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

std::string make_batch(int n, size_t value_size = 50) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = 1000 + i;
    r.value = std::string(value_size, 'v');
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

caf::expected<append_info> append(partition_log& log, std::string batch) {
  return log.append(std::span<char>{batch.data(), batch.size()});
}

std::string read_all(partition_log& log) {
  std::string all;
  auto from = log.log_start();
  while (from < log.log_end()) {
    auto r = log.read(from, 1 << 20, log.log_end());
    EXPECT_TRUE(r) << describe(r.error());
    if (!r || r->batches == 0)
      break;
    all += r->data;
    from = r->next_offset;
  }
  return all;
}

uint64_t log_files_size(const fs::path& dir) {
  uint64_t n = 0;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".log")
      n += fs::file_size(e.path());
  return n;
}

class disk_full_test : public ::testing::Test {
protected:
  temp_dir dir;
  memory_checkpoint ckpt;
  log_config cfg;
  fault_injecting_file_system ffs{&default_file_system()};

  std::unique_ptr<partition_log> open_log(file_system* fsys) {
    auto log = partition_log::open(dir.path(), cfg, &ckpt, fsys);
    EXPECT_TRUE(log) << describe(log.error());
    return log ? std::move(*log) : nullptr;
  }
};

} // namespace

TEST_F(disk_full_test, fault_layer_writes_what_fits_then_fails) {
  auto f = ffs.open(dir.path() / "f", open_mode::create);
  ASSERT_TRUE(f);
  auto& file = **f;
  ffs.set_space_left(10);
  auto err = file.append(std::string(25, 'x'));
  ASSERT_TRUE(err);
  EXPECT_TRUE(is(err, ec::disk_full)) << describe(err);
  EXPECT_NE(describe(err).find("No space left on device"), std::string::npos);
  EXPECT_EQ(file.size(), 10u);
  EXPECT_EQ(fs::file_size(dir.path() / "f"), 10u);
  EXPECT_TRUE(is(file.append("y"), ec::disk_full));
  EXPECT_EQ(fs::file_size(dir.path() / "f"), 10u);
  ffs.set_space_left(std::nullopt);
  EXPECT_FALSE(file.append("abc"));
  EXPECT_EQ(file.size(), 13u);
  ffs.fail_syncs(true);
  EXPECT_TRUE(is(file.sync(), ec::io_error));
  ffs.fail_syncs(false);
  EXPECT_FALSE(file.sync());
  EXPECT_EQ(ffs.syncs(), 2u);
  ffs.fail_creates(true);
  auto g = ffs.open(dir.path() / "g", open_mode::create);
  ASSERT_FALSE(g);
  EXPECT_TRUE(is(g.error(), ec::disk_full));
  EXPECT_TRUE(ffs.open(dir.path() / "f", open_mode::create)); // exists: fine
  char buf[13];
  auto got = file.read_at(0, std::span<char>{buf, sizeof(buf)});
  ASSERT_TRUE(got);
  EXPECT_EQ(std::string(buf, *got), std::string(10, 'x') + "abc");
}

TEST_F(disk_full_test, posix_layer_maps_errors) {
  posix_file_system pfs;
  auto missing = pfs.open(dir.path() / "nope", open_mode::existing);
  ASSERT_FALSE(missing);
  EXPECT_TRUE(is(missing.error(), ec::not_found));
  auto bad = pfs.open(dir.path() / "no-dir" / "f", open_mode::create);
  ASSERT_FALSE(bad);
  EXPECT_FALSE(pfs.remove(dir.path() / "nope"));
  auto names = pfs.list_dir(dir.path());
  ASSERT_TRUE(names);
  EXPECT_TRUE(names->empty());
}

TEST_F(disk_full_test, posix_layer_appends_large_data_in_pieces) {
  // One append larger than a pwrite is given (posix_io::max_write_bytes):
  // every piece lands after the one before, at the file's end.
  posix_file_system pfs;
  auto f = pfs.open(dir.path() / "big", open_mode::create_truncate);
  ASSERT_TRUE(f) << describe(f.error());
  ASSERT_FALSE((*f)->append("head"));
  std::string data(3 * posix_io::max_write_bytes + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>('a' + (i * 7919) % 26);
  ASSERT_FALSE((*f)->append(data));
  EXPECT_EQ((*f)->size(), 4 + data.size());
  std::string back(4 + data.size() + 10, '\0');
  auto n = (*f)->read_at(0, std::span<char>{back.data(), back.size()});
  ASSERT_TRUE(n) << describe(n.error());
  ASSERT_EQ(*n, 4 + data.size());
  back.resize(*n);
  EXPECT_TRUE(back == "head" + data);
  EXPECT_EQ(fs::file_size(dir.path() / "big"), 4 + data.size());
}

TEST_F(disk_full_test, enospc_mid_append_leaves_the_log_unchanged) {
  cfg.index_interval_bytes = 64;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(append(*log, make_batch(3)));
  ASSERT_TRUE(log->flush());
  auto before = read_all(*log);
  auto size = log_files_size(dir.path());
  auto end = log->log_end();
  ffs.set_space_left(37); // the next batch gets 37 bytes in, then ENOSPC
  auto r = append(*log, make_batch(4, 200));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full)) << describe(r.error());
  EXPECT_NE(describe(r.error()).find("00000000000000000000.log"), std::string::npos)
    << describe(r.error());
  EXPECT_EQ(log->log_end(), end);
  EXPECT_EQ(log->size_bytes(), size);
  EXPECT_EQ(log_files_size(dir.path()), size); // no partial bytes left
  EXPECT_EQ(read_all(*log), before);
  // Still full: refused again, same state.
  EXPECT_FALSE(append(*log, make_batch(1)));
  EXPECT_EQ(log_files_size(dir.path()), size);
  // Flushing what is there still works.
  EXPECT_TRUE(log->flush());
  // Space returns: appends continue at the same offset.
  ffs.set_space_left(std::nullopt);
  auto next = make_batch(2);
  auto info = append(*log, next);
  ASSERT_TRUE(info) << describe(info.error());
  EXPECT_EQ(info->base_offset, end);
  auto after = read_all(*log);
  ASSERT_EQ(after.size(), before.size() + next.size());
  EXPECT_EQ(after.substr(0, before.size()), before);
  ASSERT_FALSE(log->close());
  log = open_log(nullptr);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(read_all(*log), after);
}

TEST_F(disk_full_test, enospc_creating_the_next_segment_leaves_the_log_unchanged) {
  cfg.segment_bytes = 1; // every append after the first rolls
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(2)));
  auto before = read_all(*log);
  ffs.fail_creates(true);
  auto r = append(*log, make_batch(3));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full)) << describe(r.error());
  EXPECT_EQ(log->log_end(), offset{2});
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_FALSE(fs::exists(dir.path() / "00000000000000000002.log"));
  EXPECT_EQ(read_all(*log), before);
  ffs.fail_creates(false);
  auto info = append(*log, make_batch(3));
  ASSERT_TRUE(info) << describe(info.error());
  EXPECT_EQ(info->base_offset, offset{2});
  EXPECT_EQ(log->segment_count(), 2u);
  ASSERT_FALSE(log->close());
  log = open_log(nullptr);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(log->log_end(), offset{5});
}

TEST_F(disk_full_test, enospc_writing_the_closing_index_entry_on_roll) {
  cfg.segment_bytes = 1;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(2)));
  ffs.set_space_left(5); // not even the 12-byte closing time-index entry
  auto r = append(*log, make_batch(3));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full)) << describe(r.error());
  EXPECT_EQ(log->log_end(), offset{2});
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_EQ(fs::file_size(dir.path() / "00000000000000000000.timeindex") % 12, 0u);
  ffs.set_space_left(std::nullopt);
  ASSERT_TRUE(append(*log, make_batch(3)));
  EXPECT_EQ(log->segment_count(), 2u);
  ASSERT_FALSE(log->close());
  log = open_log(nullptr);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().indexes_rebuilt, 0u);
  EXPECT_EQ(log->log_end(), offset{5});
}

TEST_F(disk_full_test, enospc_in_the_first_write_to_a_new_segment) {
  cfg.segment_bytes = 1;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(2)));
  auto before = read_all(*log);
  ffs.set_space_left(12 + 20); // the roll succeeds, the batch gets 20 bytes
  auto r = append(*log, make_batch(3));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full));
  EXPECT_EQ(log->log_end(), offset{2});
  EXPECT_EQ(fs::file_size(dir.path() / "00000000000000000002.log"), 0u);
  EXPECT_EQ(read_all(*log), before);
  ffs.set_space_left(std::nullopt);
  auto info = append(*log, make_batch(3));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->base_offset, offset{2});
}

TEST_F(disk_full_test, fdatasync_failure_is_reported_and_durable_end_stays) {
  cfg.flush.messages = 0;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(3)));
  auto d = log->flush();
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, offset{3});
  ASSERT_TRUE(append(*log, make_batch(3)));
  ffs.fail_syncs(true);
  auto failed = log->flush();
  ASSERT_FALSE(failed);
  EXPECT_TRUE(is(failed.error(), ec::io_error)) << describe(failed.error());
  EXPECT_EQ(log->durable_end(), offset{3});
  // The kernel may have dropped the pages: the log stops writing...
  auto r = append(*log, make_batch(1));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::log_closed)) << describe(r.error());
  EXPECT_FALSE(log->flush());
  EXPECT_EQ(log->durable_end(), offset{3});
  // ...but still serves reads.
  auto data = read_all(*log);
  EXPECT_FALSE(data.empty());
  // Reopening rereads the disk and carries on.
  ffs.fail_syncs(false);
  log.reset();
  log = open_log(&ffs);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->log_end(), offset{6});
  EXPECT_EQ(log->durable_end(), offset{6});
  EXPECT_TRUE(append(*log, make_batch(1)));
}

TEST_F(disk_full_test, index_write_failure_does_not_fail_flush) {
  cfg.index_interval_bytes = 64;
  cfg.flush.messages = 0;
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(append(*log, make_batch(2)));
  ffs.set_space_left(0);
  auto d = log->flush();
  ASSERT_TRUE(d) << describe(d.error());
  EXPECT_EQ(*d, offset{20});
  EXPECT_EQ(fs::file_size(dir.path() / "00000000000000000000.index"), 0u);
  auto before = read_all(*log);
  log.reset();
  ffs.set_space_left(std::nullopt);
  log = open_log(nullptr);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().batches_scanned, 10u); // no index: whole segment
  EXPECT_EQ(log->recovery().bytes_truncated, 0u);
  EXPECT_EQ(read_all(*log), before);
}

TEST_F(disk_full_test, failed_cut_back_stops_writes_and_recovery_repairs_it) {
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(append(*log, make_batch(2)));
  auto before = read_all(*log);
  ffs.set_space_left(30);
  ffs.fail_truncates(true);
  auto r = append(*log, make_batch(2));
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full));
  auto again = append(*log, make_batch(2));
  ASSERT_FALSE(again);
  EXPECT_TRUE(is(again.error(), ec::log_closed));
  EXPECT_EQ(read_all(*log), before); // the torn bytes are not served
  log.reset();
  ffs.set_space_left(std::nullopt);
  ffs.fail_truncates(false);
  log = open_log(&ffs);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->recovery().bytes_truncated, 30u);
  EXPECT_EQ(read_all(*log), before);
  EXPECT_TRUE(append(*log, make_batch(2)));
}

TEST_F(disk_full_test, enospc_in_append_replicated_leaves_the_log_unchanged) {
  cfg.segment_bytes = 400;
  // The leader: an ordinary log elsewhere.
  temp_dir ldir;
  memory_checkpoint lckpt;
  auto leader = partition_log::open(ldir.path(), cfg, &lckpt);
  ASSERT_TRUE(leader);
  for (int i = 0; i < 12; ++i)
    ASSERT_TRUE(append(**leader, make_batch(2)));
  auto first = (*leader)->read(offset{0}, 300, offset{100});
  ASSERT_TRUE(first);
  auto rest = (*leader)->read(first->next_offset, 1 << 20, offset{100});
  ASSERT_TRUE(rest);
  auto log = open_log(&ffs);
  ASSERT_TRUE(log);
  ASSERT_TRUE(log->append_replicated(first->data));
  auto segments = log->segment_count();
  auto size = log_files_size(dir.path());
  auto before = read_all(*log);
  // Room for a bit more than one segment of the chunk: a roll happens, then
  // the disk fills.
  ffs.set_space_left(500);
  auto r = log->append_replicated(rest->data);
  ASSERT_FALSE(r);
  EXPECT_TRUE(is(r.error(), ec::disk_full)) << describe(r.error());
  EXPECT_EQ(log->log_end(), first->next_offset);
  EXPECT_EQ(log->segment_count(), segments);
  EXPECT_EQ(log_files_size(dir.path()), size);
  EXPECT_EQ(read_all(*log), before);
  ffs.set_space_left(std::nullopt);
  auto info = log->append_replicated(rest->data);
  ASSERT_TRUE(info) << describe(info.error());
  EXPECT_EQ(log->log_end(), (*leader)->log_end());
  EXPECT_EQ(read_all(*log), read_all(**leader));
}
