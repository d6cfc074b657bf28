// One real ferryd process, driven by a plain CAF client over its port:
// create, produce, fetch; clean shutdown and restart; SIGKILL while
// producing; error codes; --help; a taken port.

#include "tests/integration/process.hpp"

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/record_batch.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using namespace std::chrono_literals;
using ferry::test::ferryd_process;
using ferry::test::run_command;

namespace {

/// A client actor system connected to one ferryd. Each connection gets its
/// own system, so a restarted ferryd is reached through a fresh proxy.
class client {
public:
  explicit client(uint16_t port) {
    register_types(cfg_);
    cfg_.load<caf::io::middleman>();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    auto b = sys_->middleman().remote_actor<broker_actor>("127.0.0.1", port);
    if (b)
      broker_ = *b;
    else
      error_ = sys_->render(b.error());
  }

  ~client() {
    broker_ = nullptr;
  }

  bool connected() const { return static_cast<bool>(broker_); }

  /// Per-request timeout. Requests to a SIGKILLed ferryd are not failed
  /// early by CAF 0.17: they run into this.
  caf::timespan timeout = std::chrono::seconds{20};
  const std::string& error() const { return error_; }

  template <class T, class... Ts>
  caf::expected<T> ask(Ts&&... xs) {
    caf::scoped_actor self{*sys_};
    std::optional<caf::expected<T>> out;
    self->request(broker_, timeout, std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    if (!out)
      return caf::make_error(caf::sec::request_timeout);
    return std::move(*out);
  }

  caf::expected<topic_metadata> create(const std::string& name,
                                       topic_config tc = {}) {
    return ask<topic_metadata>(create_atom_v, topic_atom_v, name, tc);
  }

  caf::expected<produce_response>
  produce(const std::string& topic, int32_t partition, std::string batch) {
    produce_request req;
    req.topic = topic;
    req.partition = partition_id{partition};
    req.acks = acks_mode::all;
    req.batch = std::move(batch);
    return ask<produce_response>(produce_atom_v, std::move(req));
  }

  caf::expected<fetch_response> fetch(const std::string& topic,
                                      int32_t partition, int64_t from) {
    fetch_request req;
    req.topic = topic;
    req.partition = partition_id{partition};
    req.from = offset{from};
    req.max_wait_ms = 0;
    return ask<fetch_response>(fetch_atom_v, std::move(req));
  }

  /// One record as read_records returns it.
  struct read_record {
    int64_t offset = 0;
    std::optional<std::string> key;
    std::optional<std::string> value;
  };

  /// Every record of the partition from offset 0 to the high watermark, in
  /// offset order (a compacted partition has gaps).
  std::vector<read_record> read_records(const std::string& topic, int32_t partition) {
    std::vector<read_record> out;
    int64_t next = 0;
    for (int round = 0; round < 100000; ++round) {
      auto r = fetch(topic, partition, next);
      EXPECT_TRUE(r) << describe(r.error());
      if (!r || r->data.empty())
        break;
      std::string_view rest = r->data;
      while (!rest.empty()) {
        auto h = parse_batch_header(rest);
        EXPECT_TRUE(h) << describe(h.error());
        if (!h)
          return out;
        auto b = decode_batch(rest.substr(0, h->total_size()));
        EXPECT_TRUE(b) << describe(b.error());
        if (!b)
          return out;
        for (auto& rec : b->records) {
          auto off = h->base_offset.value + rec.offset_delta;
          if (off >= next)
            out.push_back({off, std::move(rec.key), std::move(rec.value)});
        }
        next = h->next_offset().value;
        rest.remove_prefix(h->total_size());
      }
      if (next >= r->high_watermark.value)
        break;
    }
    return out;
  }

  /// Every record value of the partition from offset 0 to the high
  /// watermark, in offset order, with its offset.
  std::vector<std::pair<int64_t, std::string>>
  read_all(const std::string& topic, int32_t partition) {
    std::vector<std::pair<int64_t, std::string>> out;
    for (auto& r : read_records(topic, partition))
      out.emplace_back(r.offset, r.value.value_or(""));
    return out;
  }

private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  broker_actor broker_;
  std::string error_;
};

/// One batch whose records carry the values prefix-0, prefix-1, ...
std::string make_batch(const std::string& prefix, int records,
                       size_t value_bytes = 0) {
  std::vector<record> recs;
  auto ts = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count();
  for (int i = 0; i < records; ++i) {
    record r;
    r.offset_delta = i;
    r.timestamp = ts;
    r.key = "k" + std::to_string(i);
    auto v = prefix + "-" + std::to_string(i);
    if (v.size() < value_bytes)
      v.resize(value_bytes, 'x');
    r.value = v;
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b) << describe(b.error());
  return b ? *b : std::string{};
}

#define ASSERT_STARTED(d)                                                      \
  ASSERT_TRUE((d).start()) << "ferryd did not start:\n" << (d).output()

/// Waits (at most ~10 s) until <data_dir>/trash is empty or absent, which
/// is what a node's remover thread leaves once every deleted partition
/// directory is gone; true when it got there.
bool trash_emptied(const std::filesystem::path& data_dir) {
  auto trash = data_dir / "trash";
  auto empty = [&] {
    std::error_code ec;
    return !std::filesystem::exists(trash, ec) || std::filesystem::is_empty(trash, ec);
  };
  for (int i = 0; i < 500 && !empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  return empty();
}

} // namespace

TEST(Ferryd, HelpListsEveryOptionWithDefaults) {
  auto r = run_command(FERRYD_PATH, {"--help"}, 20s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (auto s : {"--data-dir", "--port", "--host", "--node-id", "--config",
                 "--log-level", "--log-file", "./data", "9092", "127.0.0.1"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing in\n"
                                                << r.out;
}

TEST(Ferryd, BadOptionFailsWithMessage) {
  auto r = run_command(FERRYD_PATH, {"--port", "70000"}, 20s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("--port"), std::string::npos);
}

TEST(Ferryd, ConfigFileSetsOptionsAndFlagsWin) {
  ferry::test::temp_dir dir{"ferryd-cfg"};
  auto cfg = dir.path() / "ferryd.toml";
  {
    std::FILE* f = std::fopen(cfg.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "data-dir = \"%s\"\nlog-level = \"debug\"\nnode-id = 3\n",
                 (dir.path() / "from-file").c_str());
    std::fclose(f);
  }
  ferryd_process d{{"--config", cfg.string(), "--node-id", "4"}};
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto cd = c.ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(cd) << describe(cd.error());
  ASSERT_EQ(cd->nodes.size(), 1u);
  EXPECT_EQ(cd->nodes[0].id, 4); // the flag wins over the file
  EXPECT_EQ(d.stop(), 0) << d.output();
  // --data-dir on the command line (from the harness) wins over the file.
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "from-file"));
  EXPECT_NE(d.output().find("debug"), std::string::npos);
}

TEST(SingleNode, CreateProduceFetch) {
  ferryd_process d;
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  topic_config tc;
  tc.partitions = 2;
  auto md = c.create("orders", tc);
  ASSERT_TRUE(md) << describe(md.error());
  EXPECT_EQ(md->partitions.size(), 2u);
  for (int i = 0; i < 10; ++i) {
    auto r = c.produce("orders", 1, make_batch("b" + std::to_string(i), 3));
    ASSERT_TRUE(r) << describe(r.error());
    EXPECT_EQ(r->base_offset, offset{i * 3});
    EXPECT_EQ(r->last_offset, offset{i * 3 + 2});
  }
  auto all = c.read_all("orders", 1);
  ASSERT_EQ(all.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(all[static_cast<size_t>(i)].first, i);
    EXPECT_EQ(all[static_cast<size_t>(i)].second,
              "b" + std::to_string(i / 3) + "-" + std::to_string(i % 3));
  }
  // A fetch from the middle of a batch returns that whole batch.
  auto mid = c.fetch("orders", 1, 4);
  ASSERT_TRUE(mid);
  auto h = parse_batch_header(mid->data);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->base_offset, offset{3});
  EXPECT_EQ(mid->high_watermark, offset{30});
  // Partition 0 is empty.
  auto empty = c.fetch("orders", 0, 0);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->data.empty());
  list_offsets_request lo;
  lo.topic = "orders";
  lo.partition = partition_id{1};
  lo.timestamp = -2;
  auto earliest = c.ask<offset>(offsets_atom_v, lo);
  ASSERT_TRUE(earliest);
  EXPECT_EQ(*earliest, offset{0});
  lo.timestamp = -1;
  auto latest = c.ask<offset>(offsets_atom_v, lo);
  ASSERT_TRUE(latest);
  EXPECT_EQ(*latest, offset{30});
  auto td = c.ask<topic_description>(describe_atom_v, topic_atom_v,
                                     std::string{"orders"});
  ASSERT_TRUE(td) << describe(td.error());
  ASSERT_EQ(td->partitions.size(), 2u);
  EXPECT_TRUE(td->partitions[0].online);
  EXPECT_TRUE(td->partitions[1].online);
  EXPECT_EQ(td->partitions[1].log_end, offset{30});
  EXPECT_EQ(td->partitions[1].high_watermark, offset{30});
  auto topics = c.ask<std::vector<topic_metadata>>(list_atom_v, topic_atom_v);
  ASSERT_TRUE(topics);
  ASSERT_EQ(topics->size(), 1u);
  EXPECT_EQ(d.stop(), 0) << d.output();
}

// One request carrying batches for many partitions (what the producer sends
// when batches of several partitions of one node are ready): each is
// appended as a single produce would be, answered in order; a bad entry
// fails alone; two batches of one partition land in their order.
TEST(SingleNode, OneRequestCarriesBatchesForManyPartitions) {
  ferryd_process d;
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  topic_config tc;
  tc.partitions = 8;
  ASSERT_TRUE(c.create("many", tc));
  std::vector<produce_request> reqs;
  for (int p = 0; p < 8; ++p)
    reqs.push_back({"many", partition_id{p}, acks_mode::all,
                    make_batch("p" + std::to_string(p), 2)});
  reqs.push_back({"many", partition_id{3}, acks_mode::all, make_batch("again", 1)});
  reqs.push_back({"many", partition_id{99}, acks_mode::all, make_batch("bad", 1)});
  reqs.push_back({"nosuch", partition_id{0}, acks_mode::all, make_batch("bad", 1)});
  auto rs = c.ask<std::vector<produce_result>>(produce_atom_v, reqs);
  ASSERT_TRUE(rs) << describe(rs.error());
  ASSERT_EQ(rs->size(), reqs.size());
  for (int p = 0; p < 8; ++p) {
    auto& r = (*rs)[static_cast<size_t>(p)];
    EXPECT_FALSE(r.error) << p << ": " << describe(r.error);
    EXPECT_EQ(r.response.base_offset, offset{0}) << p;
    EXPECT_EQ(r.response.last_offset, offset{1}) << p;
  }
  EXPECT_FALSE((*rs)[8].error) << describe((*rs)[8].error);
  EXPECT_EQ((*rs)[8].response.base_offset, offset{2})
    << "the second batch of partition 3 did not follow the first";
  EXPECT_TRUE(is((*rs)[9].error, ec::unknown_partition)) << describe((*rs)[9].error);
  EXPECT_TRUE(is((*rs)[10].error, ec::unknown_topic)) << describe((*rs)[10].error);
  auto p3 = c.read_all("many", 3);
  ASSERT_EQ(p3.size(), 3u);
  EXPECT_EQ(p3[0].second, "p3-0");
  EXPECT_EQ(p3[2].second, "again-0");
  // An empty request is answered with no results.
  auto none = c.ask<std::vector<produce_result>>(produce_atom_v,
                                                 std::vector<produce_request>{});
  ASSERT_TRUE(none) << describe(none.error());
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, ClusterDescribeShowsThisNodeAsController) {
  ferryd_process d{{"--node-id", "5"}};
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  ASSERT_TRUE(c.create("t"));
  auto cd = c.ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(cd) << describe(cd.error());
  EXPECT_FALSE(cd->cluster_id.empty());
  EXPECT_EQ(cd->controller, 5);
  EXPECT_GE(cd->raft_term, 1); // a Raft quorum of one
  ASSERT_EQ(cd->nodes.size(), 1u);
  EXPECT_EQ(cd->nodes[0].id, 5);
  EXPECT_EQ(cd->nodes[0].port, d.port());
  EXPECT_TRUE(cd->nodes[0].controller);
  ASSERT_EQ(cd->topics.size(), 1u);
  EXPECT_EQ(cd->topics[0].partitions[0].leader, 5);
  EXPECT_TRUE(cd->topics[0].partitions[0].online);
  auto id = cd->cluster_id;
  EXPECT_EQ(d.stop(), 0);
  ASSERT_TRUE(d.restart(false)) << d.output();
  client c2{d.port()};
  ASSERT_TRUE(c2.connected());
  auto again = c2.ask<cluster_description>(cluster_atom_v);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->cluster_id, id); // the id belongs to the data dir
}

TEST(SingleNode, ErrorsComeBackWithTheirCodes) {
  ferryd_process d;
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  topic_config small;
  small.max_message_bytes = 1024;
  ASSERT_TRUE(c.create("small", small));
  // Unknown topic and partition.
  auto r1 = c.produce("nope", 0, make_batch("x", 1));
  ASSERT_FALSE(r1);
  EXPECT_TRUE(is(r1.error(), ec::unknown_topic)) << describe(r1.error());
  auto r2 = c.produce("small", 3, make_batch("x", 1));
  ASSERT_FALSE(r2);
  EXPECT_TRUE(is(r2.error(), ec::unknown_partition)) << describe(r2.error());
  auto r3 = c.fetch("nope", 0, 0);
  EXPECT_TRUE(is(r3.error(), ec::unknown_topic));
  list_offsets_request lo;
  lo.topic = "small";
  lo.partition = partition_id{-1};
  auto r4 = c.ask<offset>(offsets_atom_v, lo);
  EXPECT_TRUE(is(r4.error(), ec::unknown_partition));
  // Oversize.
  auto big = c.produce("small", 0, make_batch("big", 1, 4000));
  ASSERT_FALSE(big);
  EXPECT_TRUE(is(big.error(), ec::message_too_large)) << describe(big.error());
  // Bad offset.
  ASSERT_TRUE(c.produce("small", 0, make_batch("ok", 2)));
  auto far = c.fetch("small", 0, 1000);
  ASSERT_FALSE(far);
  EXPECT_TRUE(is(far.error(), ec::offset_out_of_range))
    << describe(far.error());
  // Admin errors.
  auto dup = c.create("small");
  EXPECT_TRUE(is(dup.error(), ec::topic_exists));
  auto bad = c.create("bad name");
  EXPECT_TRUE(is(bad.error(), ec::invalid_topic_name));
  topic_config rf3;
  rf3.replication_factor = 3;
  auto rf = c.create("rf3", rf3);
  ASSERT_FALSE(rf);
  EXPECT_TRUE(is(rf.error(), ec::policy_violation));
  EXPECT_NE(describe(rf.error()).find("replication factor 3"),
            std::string::npos);
  auto alter = c.ask<topic_metadata>(alter_atom_v, topic_atom_v,
                                     std::string{"small"},
                                     std::map<std::string, std::string>{
                                       {"segment.bytes", "12"}});
  ASSERT_FALSE(alter);
  EXPECT_TRUE(is(alter.error(), ec::invalid_config));
  EXPECT_NE(describe(alter.error()).find("segment.bytes"), std::string::npos);
  auto grp = c.ask<group_description>(describe_atom_v, group_atom_v,
                                      std::string{"no-such-group"});
  EXPECT_TRUE(is(grp.error(), ec::unknown_group));
  // The node is still fine.
  auto ok = c.produce("small", 0, make_batch("after", 1));
  ASSERT_TRUE(ok) << describe(ok.error());
  EXPECT_EQ(ok->base_offset, offset{2});
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, AlterAddPartitionsAndDelete) {
  ferryd_process d;
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  ASSERT_TRUE(c.create("t"));
  ASSERT_TRUE(c.produce("t", 0, make_batch("old", 3)));
  auto grown = c.ask<topic_metadata>(add_parts_atom_v, std::string{"t"},
                                     int32_t{3});
  ASSERT_TRUE(grown) << describe(grown.error());
  // add partitions answers once the new replicas serve.
  auto p2 = c.produce("t", 2, make_batch("p2", 1));
  ASSERT_TRUE(p2) << describe(p2.error());
  auto altered = c.ask<topic_metadata>(
    alter_atom_v, topic_atom_v, std::string{"t"},
    std::map<std::string, std::string>{{"max.message.bytes", "2048"}});
  ASSERT_TRUE(altered) << describe(altered.error());
  // The replicas got the new config: an oversize batch is refused now.
  bool refused = false;
  for (int i = 0; i < 50 && !refused; ++i) {
    auto r = c.produce("t", 0, make_batch("big", 1, 4000));
    refused = !r && is(r.error(), ec::message_too_large);
    if (!refused)
      std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(refused);
  auto dir0 = d.data_dir() / "topics" / "t-0";
  EXPECT_TRUE(std::filesystem::exists(dir0));
  auto del = c.ask<topic_metadata>(delete_atom_v, topic_atom_v,
                                   std::string{"t"});
  ASSERT_TRUE(del) << describe(del.error());
  auto gone = c.produce("t", 0, make_batch("x", 1));
  EXPECT_TRUE(is(gone.error(), ec::unknown_topic));
  // The partition dirs were moved into the trash when the delete was
  // answered and are removed from there off the scheduler (bounded wait).
  EXPECT_FALSE(std::filesystem::exists(dir0));
  EXPECT_TRUE(trash_emptied(d.data_dir())) << "the deleted topic's files were not removed";
  // Re-created under the same name, the topic starts empty.
  ASSERT_TRUE(c.create("t"));
  auto fresh = c.produce("t", 0, make_batch("new", 1));
  ASSERT_TRUE(fresh) << describe(fresh.error());
  EXPECT_EQ(fresh->base_offset, offset{0});
  auto all = c.read_all("t", 0);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].second, "new-0");
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, PartitionDirsLeftInTheTrashByAKilledNodeAreRemovedAtStart) {
  // A node killed after a topic delete answered, before its remover thread
  // got to the renamed directories: they are in <data-dir>/trash. The next
  // start removes them, and what is hosted stays.
  ferryd_process d;
  ASSERT_STARTED(d);
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    ASSERT_TRUE(c.create("kept"));
    ASSERT_TRUE(c.produce("kept", 0, make_batch("k", 2)));
  }
  d.kill9();
  auto trash = d.data_dir() / "trash";
  for (auto name : {"gone-0.1765000000000000000", "gone-1.1765000000000000001"}) {
    auto dir = trash / name;
    std::filesystem::create_directories(dir);
    for (auto ext : {".log", ".index", ".timeindex"})
      std::ofstream{dir / (std::string(20, '0') + ext)} << "old data";
  }
  ASSERT_TRUE(d.restart()) << d.output();
  EXPECT_TRUE(trash_emptied(d.data_dir())) << d.output();
  EXPECT_NE(d.output().find("removing 2 directories left in"), std::string::npos)
    << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto all = c.read_all("kept", 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].second, "k-0");
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, SigtermShutdownExitsZeroAndDataSurvives) {
  ferryd_process d;
  ASSERT_STARTED(d);
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    topic_config tc;
    tc.partitions = 3;
    ASSERT_TRUE(c.create("kept", tc));
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(c.produce("kept", i % 3, make_batch("m" + std::to_string(i),
                                                      2)));
  }
  EXPECT_EQ(d.stop(), 0) << d.output();
  EXPECT_NE(d.output().find("shutdown complete"), std::string::npos)
    << d.output();
  ASSERT_TRUE(d.restart()) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto td = c.ask<topic_description>(describe_atom_v, topic_atom_v,
                                     std::string{"kept"});
  ASSERT_TRUE(td) << describe(td.error());
  ASSERT_EQ(td->partitions.size(), 3u);
  size_t total = 0;
  for (int p = 0; p < 3; ++p) {
    auto all = c.read_all("kept", p);
    total += all.size();
    // Batch i went to partition i % 3, in order.
    int expect = p;
    for (size_t k = 0; k < all.size(); k += 2) {
      EXPECT_EQ(all[k].second, "m" + std::to_string(expect) + "-0");
      expect += 3;
    }
  }
  EXPECT_EQ(total, 40u);
  // The restarted node keeps accepting writes after the recovered data.
  auto r = c.produce("kept", 0, make_batch("after", 1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->base_offset, offset{14});
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, SigkillWhileProducingKeepsEveryAckedBatchOnceInOrder) {
  ferryd_process d;
  ASSERT_STARTED(d);
  std::map<int, int64_t> acked; // batch number -> base offset
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    ASSERT_TRUE(c.create("crash"));
    std::atomic<bool> killed{false};
    std::thread killer{[&] {
      std::this_thread::sleep_for(400ms);
      killed = true;
      ::kill(d.pid(), SIGKILL);
    }};
    c.timeout = std::chrono::seconds{3};
    for (int i = 0; i < 200000; ++i) {
      auto r = c.produce("crash", 0, make_batch("c" + std::to_string(i), 4,
                                                200));
      if (!r) {
        EXPECT_TRUE(killed.load()) << "failed before the kill: "
                                   << describe(r.error());
        break;
      }
      acked[i] = r->base_offset.value;
    }
    killer.join();
  }
  d.kill9(); // reap
  ASSERT_GT(acked.size(), 10u) << "too few acks before the kill";
  ASSERT_TRUE(d.restart(false)) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto all = c.read_all("crash", 0);
  // Group the records back into batches: value "c<i>-<j>".
  std::vector<std::pair<int, int64_t>> batches; // batch number, first offset
  for (auto& [off, value] : all) {
    auto dash = value.find('-');
    ASSERT_NE(dash, std::string::npos) << value;
    int i = std::stoi(value.substr(1, dash - 1));
    int j = std::stoi(value.substr(dash + 1, value.find('x') - dash - 1));
    if (j == 0)
      batches.emplace_back(i, off);
  }
  // Every acknowledged batch is there, at the offset it was acked with.
  std::map<int, int64_t> found;
  for (auto& [i, off] : batches) {
    EXPECT_TRUE(found.emplace(i, off).second) << "batch " << i << " twice";
  }
  for (auto& [i, off] : acked) {
    auto f = found.find(i);
    ASSERT_NE(f, found.end()) << "acked batch " << i << " lost";
    EXPECT_EQ(f->second, off) << "batch " << i;
  }
  // In order: batch numbers grow with the offsets.
  for (size_t k = 1; k < batches.size(); ++k)
    EXPECT_LT(batches[k - 1].first, batches[k].first);
  EXPECT_EQ(all.size(), batches.size() * 4);
  EXPECT_EQ(d.stop(), 0) << d.output();
}

// The issue-15 write path across a real crash: 64 partitions on a node
// allowed 32 open segment files and 2 I/O threads, every round one
// multi-partition request, SIGKILL in the middle. After the restart every
// acknowledged batch is in its partition exactly once, at its offset, in
// order, and the node never held more descriptors than its bound allows.
void sigkill_across_many_partitions(std::vector<std::string> extra_args) {
  constexpr int partitions = 64;
  std::vector<std::string> args{"--max-open-files", "32", "--io-threads", "2"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  ferryd_process d{args};
  ASSERT_STARTED(d);
  auto open_fds = [](pid_t pid) {
    size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(
           "/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++n;
    return n;
  };
  // acked[p]: round -> base offset of that round's batch in partition p.
  std::vector<std::map<int, int64_t>> acked(partitions);
  size_t most_fds = 0;
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    topic_config tc;
    tc.partitions = partitions;
    ASSERT_TRUE(c.create("wide", tc));
    std::atomic<bool> killed{false};
    std::thread killer{[&] {
      std::this_thread::sleep_for(1500ms);
      killed = true;
      ::kill(d.pid(), SIGKILL);
    }};
    c.timeout = std::chrono::seconds{3};
    for (int round = 0; round < 100000; ++round) {
      std::vector<produce_request> reqs;
      for (int p = 0; p < partitions; ++p)
        reqs.push_back({"wide", partition_id{p}, acks_mode::all,
                        make_batch("r" + std::to_string(round), 2, 100)});
      auto rs = c.ask<std::vector<produce_result>>(produce_atom_v, reqs);
      if (!rs) {
        EXPECT_TRUE(killed.load()) << "failed before the kill: "
                                   << describe(rs.error());
        break;
      }
      ASSERT_EQ(rs->size(), static_cast<size_t>(partitions));
      for (int p = 0; p < partitions; ++p) {
        auto& r = (*rs)[static_cast<size_t>(p)];
        if (!r.error)
          acked[static_cast<size_t>(p)][round] = r.response.base_offset.value;
        else
          EXPECT_TRUE(killed.load()) << describe(r.error);
      }
      if (!killed.load())
        most_fds = std::max(most_fds, open_fds(d.pid()));
    }
    killer.join();
  }
  d.kill9();
  // 64 partitions x 3 segment files would be 192 descriptors; the bound is
  // 32 (plus sockets, LMDB, logs, pipes).
  EXPECT_LT(most_fds, 120u) << "the descriptor bound was not kept";
  ASSERT_GT(acked[0].size(), 3u) << "too few acks before the kill";
  ASSERT_TRUE(d.restart(false)) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  for (int p = 0; p < partitions; ++p) {
    auto all = c.read_all("wide", p);
    std::map<int, int64_t> found; // round -> offset of its first record
    int last_round = -1;
    for (auto& [off, value] : all) {
      auto dash = value.find('-');
      ASSERT_NE(dash, std::string::npos) << value;
      int round = std::stoi(value.substr(1, dash - 1));
      if (value.compare(dash + 1, 1, "0") != 0)
        continue;
      EXPECT_TRUE(found.emplace(round, off).second)
        << "partition " << p << ": round " << round << " twice";
      EXPECT_GT(round, last_round) << "partition " << p << " out of order";
      last_round = round;
    }
    for (auto& [round, off] : acked[static_cast<size_t>(p)]) {
      auto f = found.find(round);
      ASSERT_NE(f, found.end())
        << "partition " << p << ": acked round " << round << " lost";
      EXPECT_EQ(f->second, off) << "partition " << p << " round " << round;
    }
  }
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, SigkillAcrossManyPartitionsOnFewDescriptorsKeepsAckedBatches) {
  sigkill_across_many_partitions({});
}

// The same with every partition on the node journal (ferryd --journal on:
// acks after the journal's write + fdatasync, segment files unsynced, the
// journal replayed into them at the restart).
TEST(SingleNode, SigkillWithTheNodeJournalKeepsAckedBatches) {
  sigkill_across_many_partitions({"--journal", "on"});
}

// The same on CAF's work-stealing scheduler (ferryd --scheduler stealing;
// the default is one shared queue, see broker/README.md "Scheduling many
// partitions").
TEST(SingleNode, SigkillOnTheWorkStealingSchedulerKeepsAckedBatches) {
  sigkill_across_many_partitions({"--scheduler", "stealing"});
}

// --journal auto counts the partition replicas the metadata places on the
// node: a topic of 12 partitions created next to one of 4 (16 >= the
// threshold of 10) is journaled whole, the 4 stay on their own fdatasyncs.
// The journal names every file it records, so its bytes show which.
TEST(SingleNode, JournalAutoFollowsThePartitionCountTheMetadataGivesTheNode) {
  ferryd_process d{{"--journal-min-partitions", "10"}};
  ASSERT_STARTED(d);
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto journal_bytes = [&] {
    std::string all;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(d.data_dir() / "journal", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      std::ifstream in{it->path(), std::ios::binary};
      all.append(std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{});
    }
    return all;
  };
  auto produce_all = [&](const std::string& topic, int partitions) {
    std::vector<produce_request> reqs;
    for (int p = 0; p < partitions; ++p)
      reqs.push_back({topic, partition_id{p}, acks_mode::all,
                      make_batch(topic + "-r", 2, 100)});
    auto rs = c.ask<std::vector<produce_result>>(produce_atom_v, reqs);
    ASSERT_TRUE(rs) << describe(rs.error());
    for (auto& r : *rs)
      EXPECT_FALSE(r.error) << describe(r.error);
  };
  topic_config few;
  few.partitions = 4;
  ASSERT_TRUE(c.create("few", few));
  produce_all("few", 4);
  EXPECT_EQ(journal_bytes().find("few-"), std::string::npos)
    << "4 partitions on the node, under the threshold: no journal";
  topic_config many;
  many.partitions = 12;
  ASSERT_TRUE(c.create("many", many));
  produce_all("many", 12);
  produce_all("few", 4);
  auto j = journal_bytes();
  for (int p = 0; p < 12; ++p)
    EXPECT_NE(j.find("many-" + std::to_string(p) + "/"), std::string::npos)
      << "partition many-" << p << " is not journaled";
  EXPECT_EQ(j.find("few-"), std::string::npos)
    << "a replica keeps its choice until it restarts";
  // Everything acked is readable.
  for (int p = 0; p < 12; ++p)
    EXPECT_EQ(c.read_all("many", p).size(), 2u) << "many-" << p;
  for (int p = 0; p < 4; ++p)
    EXPECT_EQ(c.read_all("few", p).size(), 4u) << "few-" << p;
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(SingleNode, SecondFerrydOnTheSamePortFailsClearly) {
  ferryd_process first;
  ASSERT_STARTED(first);
  ferryd_process second;
  EXPECT_FALSE(second.start(first.port(), 30s));
  ASSERT_NE(second.child(), nullptr);
  auto status = second.child()->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  auto out = second.output();
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:"
                     + std::to_string(first.port())),
            std::string::npos)
    << out;
  // The first one is unaffected.
  client c{first.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  EXPECT_TRUE(c.create("still-fine"));
  EXPECT_EQ(first.stop(), 0);
}

TEST(SingleNode, SecondFerrydOnTheSameDataDirFailsClearly) {
  ferryd_process first;
  ASSERT_STARTED(first);
  ferryd_process second{first.data_dir(), {}};
  EXPECT_FALSE(second.start(0, 30s));
  auto status = second.child()->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  EXPECT_NE(second.output().find("in use by another ferryd"),
            std::string::npos)
    << second.output();
  EXPECT_EQ(first.stop(), 0);
}

// -- log compaction (issue 19) -------------------------------------------------

namespace {

std::string keyed_batch(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::vector<record> recs;
  for (size_t i = 0; i < kvs.size(); ++i) {
    record r;
    r.offset_delta = static_cast<int32_t>(i);
    r.timestamp = 1000;
    r.key = kvs[i].first;
    r.value = kvs[i].second;
    recs.push_back(std::move(r));
  }
  auto b = encode_batch(batch_meta{}, recs);
  EXPECT_TRUE(b);
  return b ? *b : std::string{};
}

topic_config compacted_config() {
  topic_config tc;
  tc.cleanup_policy = 2; // compact
  tc.segment_ms = 100;   // every produce after a pause starts a segment
  tc.min_cleanable_dirty_ratio = 0.01;
  return tc;
}

/// Latest value per key, and whether any offset came twice or went back.
std::map<std::string, std::string>
latest_values(const std::vector<client::read_record>& recs, bool& ordered) {
  std::map<std::string, std::string> out;
  ordered = true;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i > 0 && recs[i].offset <= recs[i - 1].offset)
      ordered = false;
    if (recs[i].key)
      out[*recs[i].key] = recs[i].value.value_or("<tombstone>");
  }
  return out;
}

} // namespace

TEST(Compaction, FerrydKeepsTheLatestValuePerKeyAndRefusesKeylessRecords) {
  ferryd_process d{{"--journal", "off"}};
  ASSERT_STARTED(d);
  std::map<std::string, std::string> want;
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    ASSERT_TRUE(c.create("table", compacted_config()));
    // Ten rounds of updates of 20 keys, each round in its own segment.
    for (int round = 0; round < 10; ++round) {
      std::vector<std::pair<std::string, std::string>> kvs;
      for (int k = 0; k < 20; ++k) {
        auto key = "k" + std::to_string(k);
        auto value = "v" + std::to_string(round) + "-" + key;
        kvs.emplace_back(key, value);
        want[key] = value;
      }
      ASSERT_TRUE(c.produce("table", 0, keyed_batch(kvs)));
      std::this_thread::sleep_for(150ms);
    }
    // This one starts the active segment: everything before is cleanable.
    ASSERT_TRUE(c.produce("table", 0, keyed_batch({{"last", "x"}})));
    want["last"] = "x";
    // A record without a key has no place in a compacted topic.
    record nokey;
    nokey.value = "no key";
    auto keyless = c.produce("table", 0, *encode_batch(batch_meta{}, {nokey}));
    ASSERT_FALSE(keyless);
    EXPECT_TRUE(is(keyless.error(), ec::malformed_record)) << describe(keyless.error());
    EXPECT_NE(describe(keyless.error()).find("no key"), std::string::npos)
      << describe(keyless.error());
    // The tick (every second) hands the log to the cleaner.
    std::vector<client::read_record> recs;
    for (int i = 0; i < 150; ++i) {
      recs = c.read_records("table", 0);
      if (recs.size() == 21)
        break;
      std::this_thread::sleep_for(200ms);
    }
    ASSERT_EQ(recs.size(), 21u) << d.output();
    bool ordered = false;
    EXPECT_EQ(latest_values(recs, ordered), want);
    EXPECT_TRUE(ordered);
    // Offsets never change: k0's last value is at round 9's first offset.
    EXPECT_EQ(recs.front().offset, 9 * 20);
    auto td = c.ask<topic_description>(describe_atom_v, topic_atom_v,
                                       std::string{"table"});
    ASSERT_TRUE(td) << describe(td.error());
    EXPECT_EQ(td->config.cleanup_policy, 2);
    ASSERT_EQ(td->partitions.size(), 1u);
    EXPECT_GE(td->partitions[0].dirty_ratio, 0.0);
    EXPECT_GT(td->partitions[0].last_clean_ms, 0);
    EXPECT_EQ(td->partitions[0].log_end, offset{201});
  }
  // A restart reads the cleaned segments as they are.
  EXPECT_EQ(d.stop(), 0) << d.output();
  ASSERT_TRUE(d.restart()) << d.output();
  client c{d.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto recs = c.read_records("table", 0);
  bool ordered = false;
  EXPECT_EQ(recs.size(), 21u);
  EXPECT_EQ(latest_values(recs, ordered), want);
  EXPECT_TRUE(ordered);
}

TEST(Compaction, SigkillInTheMiddleOfACleanLosesNoLatestValue) {
  // Throttled to 1 MiB/s, the clean of ~3 MiB takes seconds: long enough
  // to find its .cleaned file and kill ferryd then.
  ferryd_process d{{"--journal", "off", "--cleaner-io-max-bytes-per-second", "1048576"}};
  ASSERT_STARTED(d);
  std::map<std::string, std::string> want;
  {
    client c{d.port()};
    ASSERT_TRUE(c.connected()) << c.error();
    auto tc = compacted_config();
    tc.segment_ms = 7LL * 24 * 3600 * 1000; // roll by size (1 MiB) only
    tc.segment_bytes = 1 << 20;
    ASSERT_TRUE(c.create("big", tc));
    std::string pad(1000, 'p');
    for (int b = 0; b < 70; ++b) {
      std::vector<std::pair<std::string, std::string>> kvs;
      for (int i = 0; i < 50; ++i) {
        auto key = "key-" + std::to_string((b * 50 + i) % 100);
        auto value = std::to_string(b) + "/" + std::to_string(i) + pad;
        kvs.emplace_back(key, value);
        want[key] = value;
      }
      ASSERT_TRUE(c.produce("big", 0, keyed_batch(kvs)));
    }
  }
  auto dir = d.data_dir() / "topics" / "big-0";
  bool seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      if (it->path().filename().string().ends_with(".cleaned"))
        seen = true;
    if (!seen)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(seen) << "no clean started: " << d.output();
  d.kill9();
  // The same data dir, now without the throttle.
  ferryd_process again{d.data_dir(), {"--journal", "off"}};
  ASSERT_STARTED(again);
  client c{again.port()};
  ASSERT_TRUE(c.connected()) << c.error();
  auto recs = c.read_records("big", 0);
  bool ordered = false;
  EXPECT_EQ(latest_values(recs, ordered), want);
  EXPECT_TRUE(ordered);
  // The restarted node cleans again, and this time finishes.
  int64_t last_clean = 0;
  for (int i = 0; i < 600 && last_clean == 0; ++i) {
    auto td = c.ask<topic_description>(describe_atom_v, topic_atom_v,
                                       std::string{"big"});
    ASSERT_TRUE(td) << describe(td.error());
    last_clean = td->partitions.at(0).last_clean_ms;
    if (last_clean == 0)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_GT(last_clean, 0) << again.output();
  auto after = c.read_records("big", 0);
  // (The first read may already have come after that clean: compare with
  // what was produced, not with it.)
  EXPECT_LT(after.size(), 3500u);
  EXPECT_EQ(latest_values(after, ordered), want);
  EXPECT_TRUE(ordered);
}
