// node_journal: partition logs whose durability comes from one node journal.
// A crash is simulated by copying the data directory while the journal and
// the logs are open (what a round wrote and synced is what the copy has),
// then damaging the copy's segment files as a lost page cache would, then
// replaying the copy's journal and opening its logs.

#include "tests/temp_dir.hpp"
#include "broker/dir_remover.hpp"
#include "broker/file_system.hpp"
#include "broker/node_journal.hpp"
#include "broker/partition_checkpoint.hpp"
#include "broker/partition_log.hpp"
#include "broker/record_batch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
namespace fs = std::filesystem;

namespace {

using test::temp_dir;

std::string make_batch(int n, char fill, size_t value_size = 30) {
  std::vector<record> recs;
  for (int i = 0; i < n; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = 1000 + i;
    r.key = "k" + std::to_string(i);
    r.value = std::string(value_size, fill);
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
}

void write_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream out{p, std::ios::binary | std::ios::trunc};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The values' first characters of every record in the log, in order: a
/// compact picture of its content ("aab" = two records of batch 'a', one 'b').
std::string content(partition_log& log) {
  std::string out;
  auto from = log.log_start();
  while (from < log.log_end()) {
    auto r = log.read(from, 1 << 20, log.log_end());
    EXPECT_TRUE(r) << describe(r.error());
    if (!r || r->batches == 0)
      break;
    std::string_view in = r->data;
    while (!in.empty()) {
      auto h = parse_batch_header(in);
      EXPECT_TRUE(h) << describe(h.error());
      if (!h)
        return out;
      auto b = decode_batch(in.substr(0, h->total_size()));
      EXPECT_TRUE(b) << describe(b.error());
      if (!b)
        return out;
      for (auto& rec : b->records)
        out += (!rec.value || rec.value->empty()) ? '?' : (*rec.value)[0];
      in.remove_prefix(h->total_size());
    }
    from = r->next_offset;
  }
  return out;
}

caf::expected<append_info> append(partition_log& log, std::string batch) {
  return log.append(std::span<char>{batch.data(), batch.size()});
}

/// A log and its checkpoint under `root`/topics/t-0, journaled.
struct journaled_log {
  memory_checkpoint ckpt;
  std::unique_ptr<partition_log> log;

  static fs::path dir(const fs::path& root) { return root / "topics" / "t-0"; }

  caf::error open(const fs::path& root, node_journal* j, log_config cfg = {},
                  file_system* files = nullptr) {
    auto l = partition_log::open(dir(root), cfg, &ckpt, files, {}, j);
    if (!l)
      return l.error();
    log = std::move(*l);
    return caf::none;
  }
};

/// Group commit as a replica does it: begin_flush, wait for the journal
/// (threads off: run its round here), end_flush.
void commit(partition_log& log, node_journal& j) {
  auto job = log.begin_flush();
  ASSERT_TRUE(job) << describe(job.error());
  ASSERT_EQ(job->file, nullptr) << "a journaled log never syncs its own file";
  caf::error result;
  bool called = false;
  if (job->journal_seq != 0) {
    j.when_durable(job->journal_seq, [&](caf::error e) {
      result = std::move(e);
      called = true;
    });
    j.run_pending();
    ASSERT_TRUE(called);
  }
  auto r = log.end_flush(*job, std::move(result));
  ASSERT_TRUE(r) << describe(r.error());
}

journal_options no_threads() {
  journal_options o;
  o.threads = false;
  return o;
}

fs::path copy_of(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

std::vector<fs::path> journal_files(const fs::path& root) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator{node_journal::dir_of(root)})
    out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

fs::path only_segment(const fs::path& root) {
  for (auto& e : fs::directory_iterator{journaled_log::dir(root)})
    if (e.path().extension() == ".log")
      return e.path();
  return {};
}

} // namespace

TEST(node_journal, acked_appends_survive_losing_every_unsynced_segment_write) {
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get()));
  for (char c : std::string{"abcde"}) {
    ASSERT_TRUE(append(*l.log, make_batch(3, c)));
    commit(*l.log, **j);
  }
  EXPECT_EQ(l.log->durable_end(), offset{15});
  EXPECT_EQ(content(*l.log), "aaabbbcccdddeee");
  // An append not committed yet: in the segment file, not in the journal.
  ASSERT_TRUE(append(*l.log, make_batch(2, 'f')));

  // The crash: the page cache of the segment file is lost entirely.
  auto crashed = copy_of(root, tmp.path() / "crashed");
  auto seg = only_segment(crashed);
  ASSERT_FALSE(seg.empty());
  write_bytes(seg, "");
  fs::remove(seg.parent_path() / (seg.stem().string() + ".index"));

  journal_replay_report rep;
  auto j2 = node_journal::open(crashed, no_threads(), &rep);
  ASSERT_TRUE(j2) << describe(j2.error());
  EXPECT_EQ(rep.files, 1u);
  EXPECT_EQ(rep.records, 6u); // create + 5 writes
  EXPECT_EQ(rep.torn_bytes, 0u);
  journaled_log back;
  ASSERT_FALSE(back.open(crashed, j2->get()));
  EXPECT_EQ(content(*back.log), "aaabbbcccdddeee");
  EXPECT_EQ(back.log->log_end(), offset{15});
  // Replayed and made durable: the journal starts empty.
  EXPECT_EQ(journal_files(crashed).size(), 1u);
  EXPECT_EQ(fs::file_size(journal_files(crashed)[0]), 8u);
}

TEST(node_journal, a_torn_journal_gives_a_prefix_of_the_recorded_history_at_every_byte) {
  // History: a, b, truncate to after a, c, then a roll and d in a new
  // segment. At every cut of the journal file the replayed log must hold
  // exactly what the history had after the last whole record.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get()));
  std::vector<std::pair<uint64_t, std::string>> states; // journal size -> content
  auto jfile = journal_files(root).at(0);
  auto note = [&] {
    (*j)->run_pending();
    states.emplace_back(fs::file_size(jfile), content(*l.log));
  };
  note();
  ASSERT_TRUE(append(*l.log, make_batch(2, 'a')));
  note();
  ASSERT_TRUE(append(*l.log, make_batch(3, 'b')));
  note();
  ASSERT_TRUE(l.log->truncate_to(offset{2}));
  note();
  ASSERT_TRUE(append(*l.log, make_batch(2, 'c')));
  note();
  ASSERT_FALSE(l.log->roll());
  note();
  ASSERT_TRUE(append(*l.log, make_batch(1, 'd')));
  note();
  auto journal = file_bytes(jfile);
  ASSERT_EQ(journal.size(), states.back().first);
  // What the segment files held at the crash: either nothing was written
  // back, or everything was (the journal replays over both).
  for (int disk = 0; disk < 2; ++disk) {
    for (size_t cut = 0; cut <= journal.size(); ++cut) {
      SCOPED_TRACE("segments " + std::string{disk == 0 ? "empty" : "full"}
                   + ", journal cut at " + std::to_string(cut));
      auto crashed = copy_of(root, tmp.path() / "crashed");
      if (disk == 0)
        fs::remove_all(journaled_log::dir(crashed));
      else if (cut < states[5].first)
        // The roll waited for the journal before it created the next
        // segment: that file cannot exist unless the journal up to the
        // roll is durable.
        for (auto& e : fs::directory_iterator{journaled_log::dir(crashed)})
          if (e.path().stem() != "00000000000000000000")
            fs::remove(e.path());
      write_bytes(journal_files(crashed).at(0), std::string_view{journal}.substr(0, cut));
      std::string expect;
      for (auto& [size, c] : states)
        if (size <= cut)
          expect = c;
      journal_replay_report rep;
      auto j2 = node_journal::open(crashed, no_threads(), &rep);
      ASSERT_TRUE(j2) << describe(j2.error());
      journaled_log back;
      ASSERT_FALSE(back.open(crashed, j2->get()));
      auto got = content(*back.log);
      // With nothing replayed the segment keeps what was written back (data
      // never acknowledged, which the log may keep); else exactly the state
      // after the last whole record.
      if (disk == 0 || cut >= states[0].first) {
        EXPECT_EQ(got, expect);
      }
      if (cut > 8 && cut < journal.size()
          && std::none_of(states.begin(), states.end(),
                          [&](auto& s) { return s.first == cut; })) {
        EXPECT_GT(rep.torn_bytes, 0u);
      }
      // Appending after the recovery works and survives another replay.
      ASSERT_TRUE(append(*back.log, make_batch(1, 'z')));
      commit(*back.log, **j2);
      EXPECT_EQ(content(*back.log), got + "z");
    }
  }
}

TEST(node_journal, checkpoints_delete_old_journal_files_and_keep_the_data) {
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto opts = no_threads();
  opts.file_bytes = 1024; // a new file (and a checkpoint) every ~1 KB
  auto j = node_journal::open(root, opts);
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get()));
  std::string expect;
  for (int i = 0; i < 40; ++i) {
    char c = static_cast<char>('a' + i % 26);
    ASSERT_TRUE(append(*l.log, make_batch(2, c, 100)));
    commit(*l.log, **j);
    expect += std::string(2, c);
  }
  auto st = (*j)->stats();
  EXPECT_GT(st.checkpoints, 5u);
  EXPECT_LE(journal_files(root).size(), 2u) << "old journal files are deleted";
  EXPECT_EQ(st.files, journal_files(root).size());
  // A crash now: the segment holds what the checkpoints synced, the
  // journal the rest; the page cache of the segment since the last
  // checkpoint is not lost here (syncfs wrote it), so cut it to what the
  // journal's first remaining record does not cover to be sure the replay
  // restores it.
  auto crashed = copy_of(root, tmp.path() / "crashed");
  journal_replay_report rep;
  auto j2 = node_journal::open(crashed, no_threads(), &rep);
  ASSERT_TRUE(j2) << describe(j2.error());
  EXPECT_LT(rep.records, 40u);
  journaled_log back;
  ASSERT_FALSE(back.open(crashed, j2->get()));
  EXPECT_EQ(content(*back.log), expect);
}

TEST(node_journal, a_removed_and_recreated_partition_gets_only_its_new_data) {
  // The topic is deleted and created again under the same name; the node
  // dies. Both ways a node deletes: in place, and (ferryd) renamed into the
  // trash with its removal still queued when the node dies.
  for (bool with_trash : {false, true}) {
    SCOPED_TRACE(with_trash ? "moved to the trash" : "removed in place");
    temp_dir tmp;
    auto root = tmp.path() / "node";
    auto j = node_journal::open(root, no_threads());
    ASSERT_TRUE(j) << describe(j.error());
    dir_remover trash{root, dir_remover_options{.threads = 0}};
    {
      journaled_log old;
      ASSERT_FALSE(old.open(root, j->get()));
      ASSERT_TRUE(append(*old.log, make_batch(4, 'o')));
      commit(*old.log, **j);
      ASSERT_FALSE(old.log->close());
    }
    // Its directory goes, and the removal is recorded.
    ASSERT_FALSE(delete_partition_dir(journaled_log::dir(root),
                                      with_trash ? &trash : nullptr, j->get()));
    EXPECT_FALSE(fs::exists(journaled_log::dir(root)));
    EXPECT_EQ(trash.stats().pending, with_trash ? 1u : 0u);
    EXPECT_TRUE((*j)->adopted(journaled_log::dir(root)))
      << "the removal is recorded: a log created there again stays journaled";
    journaled_log fresh;
    ASSERT_FALSE(fresh.open(root, j->get()));
    ASSERT_TRUE(append(*fresh.log, make_batch(1, 'n')));
    commit(*fresh.log, **j);
    for (int lost = 0; lost < 2; ++lost) {
      SCOPED_TRACE(lost ? "segment page cache lost" : "segment written back");
      auto crashed = copy_of(root, tmp.path() / "crashed");
      if (lost)
        write_bytes(only_segment(crashed), "");
      auto j2 = node_journal::open(crashed, no_threads());
      ASSERT_TRUE(j2) << describe(j2.error());
      journaled_log back;
      ASSERT_FALSE(back.open(crashed, j2->get()));
      EXPECT_EQ(content(*back.log), "n");
      // The old directory is still in the crashed copy's trash; the next
      // start's sweep removes it and nothing else.
      dir_remover next{crashed, dir_remover_options{.threads = 0}};
      EXPECT_EQ(next.sweep(), with_trash ? 1u : 0u);
      next.run_pending();
      if (with_trash) {
        EXPECT_TRUE(fs::is_empty(dir_remover::trash_dir(crashed)));
      }
      EXPECT_EQ(content(*back.log), "n");
    }
  }
}

TEST(node_journal, damage_before_the_last_file_is_an_error_not_a_torn_tail) {
  temp_dir tmp;
  auto root = tmp.path() / "node";
  {
    auto j = node_journal::open(root, no_threads());
    ASSERT_TRUE(j) << describe(j.error());
    journaled_log l;
    ASSERT_FALSE(l.open(root, j->get()));
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(append(*l.log, make_batch(2, 'x', 300)));
      commit(*l.log, **j);
    }
    copy_of(root, tmp.path() / "crashed");
  }
  auto crashed = tmp.path() / "crashed";
  auto files = journal_files(crashed);
  ASSERT_EQ(files.size(), 1u);
  auto bytes = file_bytes(files[0]);
  ASSERT_GT(bytes.size(), 100u);
  // A later file exists, so damage in this one cannot be a torn write.
  write_bytes(files[0].parent_path() / "00000000000000099999.journal", "FRYJNL01");
  bytes[bytes.size() - 50] ^= 0x5a;
  write_bytes(files[0], bytes);
  auto j2 = node_journal::open(crashed, no_threads());
  ASSERT_FALSE(j2);
  EXPECT_EQ(code_of(j2.error()), ec::corrupt_segment) << describe(j2.error());
  EXPECT_NE(describe(j2.error()).find("not the last file"), std::string::npos)
    << describe(j2.error());
  // The same damage in the last file is a torn tail: cut, and the rest
  // replayed.
  fs::remove(files[0].parent_path() / "00000000000000099999.journal");
  journal_replay_report rep;
  auto j3 = node_journal::open(crashed, no_threads(), &rep);
  ASSERT_TRUE(j3) << describe(j3.error());
  EXPECT_GT(rep.torn_bytes, 0u);
  EXPECT_NE(rep.reason.find("crc mismatch"), std::string::npos) << rep.reason;
}

TEST(node_journal, writer_thread_completes_waiters_in_rounds) {
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root);
  ASSERT_TRUE(j) << describe(j.error());
  std::atomic<int> done{0};
  std::vector<std::string> payloads;
  for (int i = 0; i < 200; ++i) {
    auto seq = (*j)->record_write(root / "topics" / "x.log", static_cast<uint64_t>(i) * 10,
                                  std::string(10, 'p'));
    (*j)->when_durable(seq, [&](caf::error e) {
      EXPECT_FALSE(e);
      ++done;
    });
  }
  EXPECT_FALSE((*j)->wait_durable((*j)->last_seq()));
  for (int i = 0; i < 500 && done < 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  EXPECT_EQ(done, 200);
  auto st = (*j)->stats();
  EXPECT_EQ(st.records, 200u);
  EXPECT_GE(st.rounds, 1u);
  EXPECT_LE(st.rounds, 200u);
}

TEST(node_journal, a_journal_larger_than_the_replay_buffer_replays_every_record) {
  // Records of 300 KB, 40 of them: 12 MB, so records straddle the 8 MB
  // chunks the replay reads in.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  auto file = root / "topics" / "big-0" / "00000000000000000000.log";
  fs::create_directories(file.parent_path());
  write_bytes(file, "");
  (*j)->record_create(file);
  std::string expect;
  for (int i = 0; i < 40; ++i) {
    std::string chunk(300 * 1024 + static_cast<size_t>(i), static_cast<char>('A' + i % 26));
    (*j)->record_write(file, expect.size(), chunk);
    expect += chunk;
  }
  EXPECT_EQ((*j)->run_pending(), 41u);
  auto crashed = copy_of(root, tmp.path() / "crashed");
  write_bytes(crashed / "topics" / "big-0" / "00000000000000000000.log", "");
  journal_replay_report rep;
  auto j2 = node_journal::open(crashed, no_threads(), &rep);
  ASSERT_TRUE(j2) << describe(j2.error());
  EXPECT_EQ(rep.records, 41u);
  EXPECT_EQ(rep.torn_bytes, 0u) << rep.reason;
  EXPECT_TRUE(file_bytes(crashed / "topics" / "big-0" / "00000000000000000000.log") == expect);
}

TEST(node_journal, a_clean_close_leaves_nothing_to_replay) {
  temp_dir tmp;
  auto root = tmp.path() / "node";
  {
    auto j = node_journal::open(root);
    ASSERT_TRUE(j) << describe(j.error());
    journaled_log l;
    ASSERT_FALSE(l.open(root, j->get()));
    ASSERT_TRUE(append(*l.log, make_batch(3, 'q')));
    ASSERT_TRUE(l.log->flush());
    ASSERT_FALSE(l.log->close());
  }
  EXPECT_TRUE(journal_files(root).empty());
  journal_replay_report rep;
  auto j = node_journal::open(root, no_threads(), &rep);
  ASSERT_TRUE(j) << describe(j.error());
  EXPECT_EQ(rep.records, 0u);
  journaled_log back;
  ASSERT_FALSE(back.open(root, j->get()));
  EXPECT_EQ(content(*back.log), "qqq");
}

TEST(node_journal, index_entries_are_written_in_batches_and_a_crash_before_them_loses_nothing) {
  // Every batch gets an offset and a time index entry (interval 1 byte).
  // A journaled log writes them after a flush only once 16 are pending, so
  // after 5 commits the index file does not exist yet (a segment makes its
  // index files with their first write); a crash then (the copy) leaves no
  // index, and the reopened log reads every offset; after 15 more
  // commits most entries are on disk, and the close writes the rest.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  log_config cfg;
  cfg.index_interval_bytes = 1;
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), cfg));
  auto index_file = [&](const fs::path& r) {
    auto seg = only_segment(r);
    return seg.parent_path() / (seg.stem().string() + ".index");
  };
  std::string want;
  for (char c : std::string{"abcde"}) {
    ASSERT_TRUE(append(*l.log, make_batch(2, c)));
    commit(*l.log, **j);
    want += std::string(2, c);
  }
  EXPECT_FALSE(fs::exists(index_file(root)))
    << "index entries written at every flush, or the file made before them";
  auto crashed = copy_of(root, tmp.path() / "crashed");
  {
    auto j2 = node_journal::open(crashed, no_threads());
    ASSERT_TRUE(j2) << describe(j2.error());
    journaled_log back;
    ASSERT_FALSE(back.open(crashed, j2->get(), cfg));
    EXPECT_EQ(content(*back.log), want);
    for (int64_t o = 0; o < 10; ++o) {
      auto r = back.log->read(offset{o}, 1 << 20, back.log->log_end());
      ASSERT_TRUE(r) << describe(r.error());
      EXPECT_GT(r->batches, 0u) << "offset " << o;
    }
  }
  for (char c : std::string{"fghijklmnopqrst"}) {
    ASSERT_TRUE(append(*l.log, make_batch(2, c)));
    commit(*l.log, **j);
    want += std::string(2, c);
  }
  // 20 batches: the first has no entry (position 0), so 19 offset entries
  // (and one time entry: the batches' timestamps do not grow); 16 pending
  // were reached at the 16th offset entry, so at least 15 are on disk.
  EXPECT_GE(fs::file_size(index_file(root)), 15u * 8u);
  EXPECT_LT(fs::file_size(index_file(root)), 19u * 8u);
  EXPECT_EQ(content(*l.log), want);
  ASSERT_FALSE(l.log->close());
  // A close writes the rest: one entry per batch after the first.
  EXPECT_EQ(fs::file_size(index_file(root)), 19u * 8u);
}

// -- deferred segment writes (log_config::journal_defer_bytes) ----------------

namespace {

log_config deferring(size_t bytes = 64u << 10) {
  log_config cfg;
  cfg.journal_defer_bytes = bytes;
  return cfg;
}

} // namespace

TEST(node_journal, deferred_segment_writes_are_read_from_memory_and_survive_a_crash) {
  // Committed appends the segment kept in memory: the journal made them
  // durable, the segment file does not have them yet, reads see them, and
  // a crash before the segment writes them loses nothing.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), deferring()));
  for (char c : std::string{"abc"}) {
    ASSERT_TRUE(append(*l.log, make_batch(3, c)));
    commit(*l.log, **j);
  }
  EXPECT_EQ(l.log->durable_end(), offset{9});
  EXPECT_EQ(fs::file_size(only_segment(root)), 0u) << "written at every append";
  EXPECT_EQ((*j)->unapplied(), 3u);
  EXPECT_EQ(content(*l.log), "aaabbbccc");
  // A read from the middle of the kept bytes.
  auto r = l.log->read(offset{4}, 1 << 20, l.log->log_end());
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r->batches, 2u);
  EXPECT_EQ(r->next_offset, offset{9});

  auto crashed = copy_of(root, tmp.path() / "crashed");
  {
    journal_replay_report rep;
    auto j2 = node_journal::open(crashed, no_threads(), &rep);
    ASSERT_TRUE(j2) << describe(j2.error());
    EXPECT_EQ(rep.records, 4u); // create + 3 writes
    journaled_log back;
    ASSERT_FALSE(back.open(crashed, j2->get(), deferring()));
    EXPECT_EQ(content(*back.log), "aaabbbccc");
  }

  // The tick's write: one write of everything kept, and the journal is told.
  ASSERT_FALSE(l.log->write_deferred());
  EXPECT_EQ((*j)->unapplied(), 0u);
  auto on_disk = fs::file_size(only_segment(root));
  EXPECT_GT(on_disk, 0u);
  // Appends after it continue at the right place, written or kept.
  ASSERT_TRUE(append(*l.log, make_batch(2, 'd')));
  commit(*l.log, **j);
  EXPECT_EQ(fs::file_size(only_segment(root)), on_disk);
  EXPECT_EQ(content(*l.log), "aaabbbcccdd");
  ASSERT_FALSE(l.log->close());
  EXPECT_EQ((*j)->unapplied(), 0u) << "a close writes what is kept";
  EXPECT_GT(fs::file_size(only_segment(root)), on_disk);
}

TEST(node_journal, a_discarded_log_writes_syncs_and_checkpoints_nothing_and_releases_what_it_kept) {
  // A deleted topic's log: discard() instead of close(). Its kept appends
  // are not written (the directory goes next), the journal is told it need
  // not keep them, and no checkpoint is saved (close() committed one to
  // LMDB per partition, on the scheduler).
  struct counting_checkpoint final : partition_checkpoint {
    caf::expected<std::optional<partition_metadata>> load() override { return saved; }
    caf::error save(const partition_metadata& md) override {
      saved = md;
      ++saves;
      return caf::none;
    }
    std::optional<partition_metadata> saved;
    int saves = 0;
  };
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  counting_checkpoint ckpt;
  fault_injecting_file_system files{&default_file_system()};
  auto l = partition_log::open(journaled_log::dir(root), deferring(), &ckpt, &files, {},
                               j->get());
  ASSERT_TRUE(l) << describe(l.error());
  auto& log = **l;
  for (char c : std::string{"abc"}) {
    ASSERT_TRUE(append(log, make_batch(3, c)));
    commit(log, **j);
  }
  ASSERT_EQ((*j)->unapplied(), 3u);
  auto segment_file = only_segment(root);
  ASSERT_EQ(fs::file_size(segment_file), 0u);
  auto saves = ckpt.saves;
  auto syncs = files.syncs() + files.dir_syncs();
  log.discard();
  EXPECT_EQ((*j)->unapplied(), 0u) << "the journal still holds the kept appends";
  EXPECT_EQ(fs::file_size(segment_file), 0u) << "the kept appends were written";
  EXPECT_EQ(ckpt.saves, saves) << "a checkpoint was saved";
  EXPECT_EQ(files.syncs() + files.dir_syncs(), syncs) << "a file was synced";
  auto more = append(log, make_batch(1, 'd'));
  ASSERT_FALSE(more);
  EXPECT_TRUE(is(more.error(), ec::log_closed)) << describe(more.error());
  log.discard(); // twice: nothing happens
  EXPECT_FALSE(log.close()) << "a close after a discard does nothing";
  EXPECT_EQ(ckpt.saves, saves);
}

TEST(node_journal, an_append_beyond_the_deferred_limit_writes_what_was_kept_and_is_kept) {
  // The kept bytes go out in one write and the new append takes their
  // place in memory (one write per limit's worth, not two); an append
  // larger than the limit is written at once.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  // Room for two of these batches (~250 bytes each), not three.
  ASSERT_FALSE(l.open(root, j->get(), deferring(600)));
  std::string want;
  uint64_t batch_bytes = 0;
  int n = 0;
  for (char c : std::string{"abcdefg"}) {
    auto before = l.log->size_bytes();
    ASSERT_TRUE(append(*l.log, make_batch(2, c, 100)));
    commit(*l.log, **j);
    batch_bytes = l.log->size_bytes() - before;
    ++n;
    want += std::string(2, c);
    // a, b kept; c writes a+b and is kept; d kept; e writes c+d; ...
    EXPECT_EQ((*j)->unapplied(), n % 2 == 1 ? 1u : 2u) << "after batch " << c;
    EXPECT_EQ(fs::file_size(only_segment(root)), static_cast<uint64_t>((n - 1) / 2 * 2) * batch_bytes)
      << "after batch " << c;
    EXPECT_EQ(content(*l.log), want);
  }
  // Larger than the limit: written at once, after what was kept.
  ASSERT_TRUE(append(*l.log, make_batch(2, 'h', 400)));
  commit(*l.log, **j);
  want += "hh";
  EXPECT_EQ((*j)->unapplied(), 0u);
  EXPECT_EQ(fs::file_size(only_segment(root)), l.log->size_bytes());
  EXPECT_EQ(content(*l.log), want);
  // A crash now, with the last batches only in memory and the journal.
  auto crashed = copy_of(root, tmp.path() / "crashed");
  auto j2 = node_journal::open(crashed, no_threads());
  ASSERT_TRUE(j2) << describe(j2.error());
  journaled_log back;
  ASSERT_FALSE(back.open(crashed, j2->get(), deferring(600)));
  EXPECT_EQ(content(*back.log), want);
}

TEST(node_journal, a_checkpoint_keeps_journal_files_until_their_deferred_writes_are_written) {
  // A checkpoint syncs the file system and deletes older journal files: it
  // must not delete the only copy of an append the segment still keeps in
  // memory. Journal files of ~1 KB: a checkpoint is due after every round.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto opts = no_threads();
  opts.file_bytes = 1024;
  auto j = node_journal::open(root, opts);
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), deferring()));
  std::string want;
  for (int i = 0; i < 12; ++i) {
    char c = static_cast<char>('a' + i);
    ASSERT_TRUE(append(*l.log, make_batch(2, c, 100)));
    commit(*l.log, **j);
    want += std::string(2, c);
  }
  EXPECT_EQ((*j)->stats().checkpoints, 0u);
  EXPECT_GE(journal_files(root).size(), 3u) << "journal files deleted under kept appends";
  // A crash now replays all of it.
  {
    auto crashed = copy_of(root, tmp.path() / "crashed");
    auto j2 = node_journal::open(crashed, no_threads());
    ASSERT_TRUE(j2) << describe(j2.error());
    journaled_log back;
    ASSERT_FALSE(back.open(crashed, j2->get(), deferring()));
    EXPECT_EQ(content(*back.log), want);
  }
  // Written: the next round's checkpoint deletes the old files.
  ASSERT_FALSE(l.log->write_deferred());
  ASSERT_TRUE(append(*l.log, make_batch(2, 'x', 100)));
  commit(*l.log, **j);
  want += "xx";
  EXPECT_GE((*j)->stats().checkpoints, 1u);
  EXPECT_LE(journal_files(root).size(), 2u);
  // And a crash after that checkpoint still has everything: the segment
  // file (synced by the checkpoint) plus what the journal kept.
  auto crashed = copy_of(root, tmp.path() / "crashed2");
  auto j3 = node_journal::open(crashed, no_threads());
  ASSERT_TRUE(j3) << describe(j3.error());
  journaled_log back;
  ASSERT_FALSE(back.open(crashed, j3->get(), deferring()));
  EXPECT_EQ(content(*back.log), want);
}

TEST(node_journal, the_checkpoint_thread_runs_once_the_last_deferred_write_is_written) {
  // With threads: a checkpoint due while segments keep deferred writes waits
  // for them, and the write of the last one wakes the checkpoint thread
  // (node_journal::applied; nothing else happens after it here).
  temp_dir tmp;
  auto root = tmp.path() / "node";
  journal_options opts;
  opts.file_bytes = 1024;
  auto j = node_journal::open(root, opts);
  ASSERT_TRUE(j) << describe(j.error());
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), deferring()));
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(append(*l.log, make_batch(2, static_cast<char>('a' + i), 100)));
    auto durable = l.log->flush(); // waits for the journal's writer thread
    ASSERT_TRUE(durable) << describe(durable.error());
  }
  EXPECT_EQ((*j)->stats().checkpoints, 0u);
  EXPECT_GE(journal_files(root).size(), 3u) << "journal files deleted under kept appends";
  ASSERT_FALSE(l.log->write_deferred());
  bool done = false;
  for (int i = 0; i < 1000 && !done; ++i) {
    done = (*j)->stats().checkpoints >= 1 && journal_files(root).size() <= 2;
    if (!done)
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  EXPECT_TRUE(done) << "no checkpoint within 10 s after the deferred writes were written ("
                    << (*j)->stats().checkpoints << " checkpoints, "
                    << journal_files(root).size() << " journal files)";
  EXPECT_EQ(content(*l.log), "aabbccddeeffgghhiijjkkll");
  ASSERT_FALSE(l.log->close());
}

TEST(node_journal, a_full_disk_keeps_deferred_writes_in_memory_and_fails_new_appends) {
  // The segment cannot write what it kept: the acknowledged appends stay
  // readable (memory) and durable (journal), an append that does not fit
  // beside them fails with disk_full, and once there is room again all of
  // it reaches the file.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  fault_injecting_file_system ffs{&default_file_system()};
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), deferring(600), &ffs));
  auto& log = *l.log;
  ASSERT_TRUE(append(log, make_batch(2, 'a', 100)));
  ASSERT_TRUE(append(log, make_batch(2, 'b', 100)));
  commit(log, **j);
  ffs.set_space_left(100); // the write of both batches is cut short
  auto err = log.write_deferred();
  ASSERT_TRUE(err);
  EXPECT_TRUE(is(err, ec::disk_full)) << describe(err);
  EXPECT_EQ(fs::file_size(only_segment(root)), 0u) << "the torn write was cut back";
  EXPECT_EQ(content(log), "aabb");
  EXPECT_EQ((*j)->unapplied(), 2u);
  auto big = append(log, make_batch(2, 'c', 100));
  ASSERT_FALSE(big);
  EXPECT_TRUE(is(big.error(), ec::disk_full)) << describe(big.error());
  EXPECT_EQ(log.log_end(), offset{4});
  EXPECT_EQ(content(log), "aabb");
  ffs.set_space_left(std::nullopt);
  ASSERT_TRUE(append(log, make_batch(2, 'c', 100)));
  commit(log, **j);
  ASSERT_FALSE(log.write_deferred());
  EXPECT_EQ((*j)->unapplied(), 0u);
  EXPECT_EQ(content(log), "aabbcc");
  ASSERT_FALSE(log.close());
}

TEST(node_journal, a_new_log_syncs_nothing_and_its_acked_appends_survive_losing_its_directory) {
  // A new partition on the journal: its segment's create record is what
  // makes it exist after a crash, so opening it syncs no file and no
  // directory (a 10,000-partition topic used to make 30,000 syncs). A crash
  // that loses the whole partition directory (never synced) still gives
  // back every acked append.
  temp_dir tmp;
  auto root = tmp.path() / "node";
  auto j = node_journal::open(root, no_threads());
  ASSERT_TRUE(j) << describe(j.error());
  fault_injecting_file_system ffs{&default_file_system()};
  journaled_log l;
  ASSERT_FALSE(l.open(root, j->get(), {}, &ffs));
  auto& log = *l.log;
  EXPECT_EQ(ffs.syncs(), 0u);
  EXPECT_EQ(ffs.dir_syncs(), 0u);
  ASSERT_TRUE(append(log, make_batch(3, 'a')));
  commit(log, **j);
  ASSERT_TRUE(append(log, make_batch(2, 'b')));
  commit(log, **j);
  EXPECT_EQ(log.durable_end(), offset{5});
  EXPECT_EQ(ffs.syncs(), 0u) << "the journal, not the segment, made them durable";

  auto crashed = copy_of(root, tmp.path() / "crashed");
  fs::remove_all(journaled_log::dir(crashed));
  ASSERT_FALSE(fs::exists(journaled_log::dir(crashed)));
  journal_replay_report rep;
  auto j2 = node_journal::open(crashed, no_threads(), &rep);
  ASSERT_TRUE(j2) << describe(j2.error());
  EXPECT_EQ(rep.records, 3u); // create + 2 writes
  EXPECT_EQ(rep.skipped, 0u);
  journaled_log back;
  ASSERT_FALSE(back.open(crashed, j2->get()));
  EXPECT_EQ(content(*back.log), "aaabb");
  EXPECT_EQ(back.log->log_end(), offset{5});
  ASSERT_FALSE(log.close());
}

TEST(node_journal, a_new_log_without_the_journal_syncs_its_directory_and_no_file) {
  // Without a journal nothing else records that the segment exists: the
  // directory is synced once; its three empty files need no fdatasync (the
  // first flush syncs the log file with its data).
  temp_dir tmp;
  fault_injecting_file_system ffs{&default_file_system()};
  memory_checkpoint ckpt;
  auto opened = partition_log::open(tmp.path() / "t-0", {}, &ckpt, &ffs, {}, nullptr);
  ASSERT_TRUE(opened) << describe(opened.error());
  EXPECT_EQ(ffs.syncs(), 0u);
  EXPECT_EQ(ffs.dir_syncs(), 1u);
  ASSERT_TRUE(append(**opened, make_batch(2, 'a')));
  ASSERT_TRUE((*opened)->flush());
  EXPECT_EQ(ffs.syncs_of(".log"), 1u);
  ASSERT_FALSE((*opened)->close());
}
