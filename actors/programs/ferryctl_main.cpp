// ferryctl: the command-line client. Topics, produce, consume, groups,
// offsets and the cluster, against one broker's CAF endpoint (--broker: one
// HOST:PORT or a list of them, tried in order; default_broker_address() in
// client_connection.hpp says where the default comes from).
//
// Output is a human-readable table by default and JSON with --json. Any
// failure prints one line `ferryctl: <code>: <what>` to stderr and exits 1
// (usage errors exit 2 via CLI11).

#include "actors/client/client_connection.hpp"
#include "actors/client/consumer.hpp"
#include "actors/programs/ferryctl_common.hpp"
#include "actors/programs/ferryctl_dlq.hpp"
#include "actors/programs/ferryctl_security.hpp"
#include "actors/programs/ferryctl_table.hpp"
#include "actors/programs/ferryctl_work.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/client/producer.hpp"
#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "broker/error.hpp"
#include "broker/start_position.hpp"
#include "broker/topic_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using json = nlohmann::json;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

namespace {

// -- options ---------------------------------------------------------------------

struct options {
  std::string broker = default_broker_address();
  bool json = false;
  int64_t connect_timeout_ms = 5000;
  int64_t request_timeout_ms = 30000;
  ferry::tls_settings tls;

  // topic
  std::string name;
  int32_t partitions = 1;
  int16_t replication_factor = 1;
  bool partitions_set = false;
  std::vector<std::string> configs;
  std::vector<int32_t> replicas; // partition reassign
  bool no_wait = false;
  int32_t node = -1; // cluster remove-node

  // produce / consume
  std::string topic;
  std::optional<std::string> key;
  std::string key_separator;
  std::vector<std::string> headers;
  std::string acks = "all";
  std::string compression = "none";
  int32_t partition = -1;
  std::string file;
  int64_t linger_ms = 5;
  std::string group;
  bool from_beginning = false;
  std::optional<int64_t> offset;
  int64_t max = -1;
  int64_t timeout_ms = 0;
  std::string format = "value";
  bool no_commit = false;
  int64_t session_timeout_ms = 10000;

  // group
  std::string reset_topic;
  bool to_earliest = false;
  bool to_latest = false;
  std::string to_datetime;
  std::optional<int64_t> to_offset;
  bool dry_run = false;
};

/// Everything a command needs: the actor system and a live broker handle.
struct context {
  caf::actor_system& sys;
  const options& opt;
  connection_actor conn;
  broker_actor broker;
  caf::scoped_actor self;
  milliseconds timeout;
  /// Broker requests, with the admin retries (set once connected).
  std::optional<admin_client> admin;
  /// Client actors to end on the way out, whatever happened.
  std::vector<caf::actor> owned;

  context(caf::actor_system& s, const options& o)
    : sys(s), opt(o), self(s), timeout(o.request_timeout_ms) {
  }
};

using ctl::fail;
using ctl::failure;

template <class Result, class... Ts>
Result call(context& ctx, const Ts&... xs) {
  return ctl::call<Result>(*ctx.admin, xs...);
}

template <class... Ts>
void call_void(context& ctx, const Ts&... xs) {
  ctl::call_void(*ctx.admin, xs...);
}

void connect(context& ctx) {
  auto addr = parse_broker_address(ctx.opt.broker);
  if (!addr)
    fail(addr.error());
  addr->connect_wait = milliseconds{ctx.opt.connect_timeout_ms};
  addr->backoff_min = milliseconds{50};
  addr->backoff_max = milliseconds{1000};
  ctx.conn = spawn_connection(ctx.sys, *addr);
  caf::error err;
  ctx.self->request(ctx.conn, milliseconds{ctx.opt.connect_timeout_ms + 2000}, connect_atom_v)
    .receive([&](broker_actor& b) { ctx.broker = std::move(b); },
             [&](caf::error& e) { err = std::move(e); });
  if (err || !ctx.broker)
    throw failure{"cannot connect to broker " + ctx.opt.broker + ": " + error_text(err),
                  };
  ctx.admin.emplace(ctx.sys, ctx.broker, ctx.timeout);
}

// -- small helpers -------------------------------------------------------------------

using ferry::ctl::print_table;

std::string join_ints(const std::vector<int32_t>& xs) {
  std::string out;
  for (auto x : xs) {
    if (!out.empty())
      out += ",";
    out += std::to_string(x);
  }
  return out;
}

std::pair<std::string, std::string> split_kv(const std::string& kv, const char* what) {
  auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    fail(make_error(ec::invalid_config, std::string{what} + " '" + kv + "': expected k=v"));
  return {kv.substr(0, eq), kv.substr(eq + 1)};
}

std::map<std::string, std::string> config_map(const std::vector<std::string>& kvs) {
  std::map<std::string, std::string> out;
  for (auto& kv : kvs) {
    auto [k, v] = split_kv(kv, "config");
    out[k] = v;
  }
  return out;
}

void apply_config(topic_config& cfg, const std::map<std::string, std::string>& kvs) {
  // The broker's own parser (broker/topic_config.hpp): the same keys,
  // values and errors as the server's.
  for (auto& [k, v] : kvs)
    if (auto err = ferry::set_topic_config_value(cfg, k, v))
      fail(err);
}

json to_json(const topic_config& c) {
  return json{{"partitions", c.partitions},
              {"replication.factor", c.replication_factor},
              {"retention.ms", c.retention_ms},
              {"retention.bytes", c.retention_bytes},
              {"segment.bytes", c.segment_bytes},
              {"segment.ms", c.segment_ms},
              {"max.message.bytes", c.max_message_bytes},
              {"min.insync.replicas", c.min_insync_replicas},
              {"cleanup.policy", ferry::cleanup_policy_name(c.cleanup_policy)},
              {"min.cleanable.dirty.ratio", c.min_cleanable_dirty_ratio},
              {"min.compaction.lag.ms", c.min_compaction_lag_ms},
              {"max.compaction.lag.ms", c.max_compaction_lag_ms},
              {"delete.retention.ms", c.delete_retention_ms}};
}

std::string config_text(const topic_config& c) {
  auto text = "cleanup.policy=" + ferry::cleanup_policy_name(c.cleanup_policy)
              + " retention.ms=" + std::to_string(c.retention_ms)
              + " retention.bytes=" + std::to_string(c.retention_bytes)
              + " segment.bytes=" + std::to_string(c.segment_bytes)
              + " segment.ms=" + std::to_string(c.segment_ms)
              + " max.message.bytes=" + std::to_string(c.max_message_bytes)
              + " min.insync.replicas=" + std::to_string(c.min_insync_replicas);
  if (c.cleanup_policy & ferry::cleanup_compact) {
    auto rendered = ferry::render_topic_config(c);
    for (auto key : {"min.cleanable.dirty.ratio", "min.compaction.lag.ms",
                     "max.compaction.lag.ms", "delete.retention.ms"})
      text += std::string{" "} + key + "=" + rendered[key];
  }
  return text;
}

json to_json(const topic_metadata& t) {
  json parts = json::array();
  for (auto& p : t.partitions)
    parts.push_back(json{{"partition", p.partition.value},
                         {"leader", p.leader},
                         {"leader_epoch", p.epoch.value},
                         {"replicas", p.replicas},
                         {"isr", p.isr}});
  return json{{"name", t.name},
              {"partitions", t.partitions.empty() ? t.config.partitions
                                                  : static_cast<int32_t>(t.partitions.size())},
              {"replication_factor", t.config.replication_factor},
              {"config", to_json(t.config)},
              {"assignments", parts}};
}

json to_json(const topic_description& t) {
  json parts = json::array();
  for (auto& p : t.partitions)
    parts.push_back(json{{"partition", p.partition.value},
                         {"leader", p.leader},
                         {"leader_epoch", p.epoch.value},
                         {"replicas", p.replicas},
                         {"isr", p.isr},
                         {"log_start_offset", p.log_start.value},
                         {"log_end_offset", p.log_end.value},
                         {"high_watermark", p.high_watermark.value},
                         {"size_bytes", p.size_bytes},
                         {"online", p.online},
                         {"dirty_ratio", p.dirty_ratio >= 0 ? json(p.dirty_ratio) : json()},
                         {"last_clean_ms", p.dirty_ratio >= 0 ? json(p.last_clean_ms) : json()}});
  return json{{"name", t.name},
              {"partitions", static_cast<int32_t>(t.partitions.size())},
              {"replication_factor", t.config.replication_factor},
              {"config", to_json(t.config)},
              {"partition_status", parts}};
}

json to_json(const group_description& g) {
  json members = json::array();
  for (auto& m : g.members) {
    json assigned = json::array();
    for (auto& tp : m.assignment)
      assigned.push_back(json{{"topic", tp.topic}, {"partition", tp.partition.value}});
    members.push_back(json{{"member_id", m.member_id},
                           {"group_instance_id", m.group_instance_id},
                           {"client_id", m.client_id},
                           {"assignment", assigned}});
  }
  json parts = json::array();
  for (auto& p : g.partitions)
    parts.push_back(json{{"topic", p.topic},
                         {"partition", p.partition.value},
                         {"committed_offset", p.committed.value},
                         {"log_start_offset", p.log_start.value},
                         {"log_end_offset", p.log_end.value},
                         {"lag", p.lag},
                         {"member_id", p.member_id}});
  return json{{"group", g.group},         {"mode", g.mode},
              {"state", g.state},         {"assignor", g.assignor},
              {"generation", g.generation}, {"members", members},
              {"partitions", parts}, {"protocol_type", g.protocol_type}};
}

json to_json(const std::vector<partition_offset>& offsets) {
  json out = json::array();
  for (auto& po : offsets)
    out.push_back(json{{"topic", po.topic},
                       {"partition", po.partition.value},
                       {"offset", po.committed.value}});
  return out;
}

std::string offset_text(offset o) {
  return o.value < 0 ? std::string{"-"} : std::to_string(o.value);
}

/// --to-datetime: ISO 8601 (broker/start_position.hpp), UTC if no zone.
int64_t datetime_option_ms(const std::string& s) {
  auto t = ferry::parse_datetime_ms(s);
  if (!t)
    fail(make_error(ec::invalid_config, "--to-datetime '" + s
                                          + "': expected YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+HH:MM]"));
  return *t;
}

// -- topic commands -----------------------------------------------------------------

int topic_create(context& ctx) {
  topic_config cfg;
  cfg.partitions = ctx.opt.partitions;
  cfg.replication_factor = ctx.opt.replication_factor;
  apply_config(cfg, config_map(ctx.opt.configs));
  auto t = call<topic_metadata>(ctx, create_atom_v, topic_atom_v, ctx.opt.name, cfg);
  if (ctx.opt.json)
    std::cout << to_json(t).dump() << '\n';
  else
    std::cout << "created topic " << t.name << " with " << t.config.partitions
              << " partition(s), replication factor " << t.config.replication_factor
              << '\n';
  return 0;
}

int topic_delete(context& ctx) {
  auto t = call<topic_metadata>(ctx, delete_atom_v, topic_atom_v, ctx.opt.name);
  if (ctx.opt.json)
    std::cout << to_json(t).dump() << '\n';
  else
    std::cout << "deleted topic " << t.name << '\n';
  return 0;
}

int topic_list(context& ctx) {
  auto topics = call<std::vector<topic_metadata>>(ctx, list_atom_v, topic_atom_v);
  std::sort(topics.begin(), topics.end(),
            [](auto& a, auto& b) { return a.name < b.name; });
  if (ctx.opt.json) {
    json out = json::array();
    for (auto& t : topics)
      out.push_back(to_json(t));
    std::cout << out.dump() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& t : topics)
    rows.push_back({t.name,
                    std::to_string(t.partitions.empty() ? t.config.partitions
                                                        : static_cast<int32_t>(t.partitions.size())),
                    std::to_string(t.config.replication_factor),
                    std::to_string(t.config.retention_ms)});
  print_table({"TOPIC", "PARTITIONS", "RF", "RETENTION_MS"}, rows);
  return 0;
}

int topic_describe(context& ctx) {
  auto t = call<topic_description>(ctx, describe_atom_v, topic_atom_v, ctx.opt.name);
  if (ctx.opt.json) {
    std::cout << to_json(t).dump() << '\n';
    return 0;
  }
  std::cout << "Topic: " << t.name << "  Partitions: " << t.partitions.size()
            << "  ReplicationFactor: " << t.config.replication_factor << '\n'
            << "Config: " << config_text(t.config) << '\n';
  std::vector<std::vector<std::string>> rows;
  bool compacted = t.config.cleanup_policy & ferry::cleanup_compact;
  for (auto& p : t.partitions) {
    rows.push_back({std::to_string(p.partition.value), std::to_string(p.leader),
                    std::to_string(p.epoch.value), join_ints(p.replicas), join_ints(p.isr),
                    std::to_string(p.log_start.value), std::to_string(p.log_end.value),
                    std::to_string(p.high_watermark.value), std::to_string(p.size_bytes),
                    p.online ? "yes" : "no"});
    if (compacted) {
      char ratio[16];
      std::snprintf(ratio, sizeof ratio, "%.2f", std::max(p.dirty_ratio, 0.0));
      rows.back().push_back(p.dirty_ratio >= 0 ? ratio : "-");
    }
  }
  std::vector<std::string> head{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR",
                                "LOG_START", "LOG_END", "HIGH_WATERMARK", "SIZE_BYTES",
                                "ONLINE"};
  if (compacted)
    head.push_back("DIRTY_RATIO");
  print_table(head, rows);
  return 0;
}

int topic_alter(context& ctx) {
  auto kvs = config_map(ctx.opt.configs);
  if (kvs.empty() && !ctx.opt.partitions_set)
    fail(make_error(ec::invalid_request, "topic alter: nothing to change (--config or --partitions)"));
  std::optional<topic_metadata> t;
  if (!kvs.empty())
    t = call<topic_metadata>(ctx, alter_atom_v, topic_atom_v, ctx.opt.name, kvs);
  if (ctx.opt.partitions_set)
    t = call<topic_metadata>(ctx, add_parts_atom_v, ctx.opt.name, ctx.opt.partitions);
  if (ctx.opt.json)
    std::cout << to_json(*t).dump() << '\n';
  else
    std::cout << "altered topic " << t->name << ": " << t->partitions.size()
              << " partition(s), " << config_text(t->config) << '\n';
  return 0;
}

// -- produce ------------------------------------------------------------------------------

int produce(context& ctx) {
  auto& opt = ctx.opt;
  producer_config cfg;
  auto acks = parse_acks(opt.acks);
  if (!acks)
    fail(acks.error());
  auto codec = parse_compression(opt.compression);
  if (!codec)
    fail(codec.error());
  cfg.acks = *acks;
  cfg.codec = *codec;
  cfg.linger = milliseconds{opt.linger_ms};
  cfg.client_id = "ferryctl";
  cfg.delivery_timeout = std::max(milliseconds{opt.request_timeout_ms}, milliseconds{1000});
  cfg.request_timeout = cfg.delivery_timeout;
  auto prod = spawn_producer(ctx.sys, cfg, ctx.conn);
  if (!prod)
    fail(prod.error());
  ctx.owned.push_back(caf::actor_cast<caf::actor>(*prod));
  std::vector<message_header> headers;
  for (auto& h : opt.headers) {
    auto [k, v] = split_kv(h, "header");
    headers.push_back(message_header{k, v});
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  if (!opt.file.empty()) {
    file.open(opt.file);
    if (!file)
      fail(make_error(ec::io_error, "cannot open " + opt.file));
    in = &file;
  }
  // Keep many requests in flight: the producer batches them.
  constexpr size_t window = 4096;
  using handle_t = decltype(ctx.self->request(*prod, caf::infinite, produce_atom_v,
                                              client_message{}));
  std::deque<handle_t> pending;
  size_t ok = 0;
  size_t failed = 0;
  caf::error first_error;
  auto wait_one = [&] {
    pending.front().receive([&](delivery_report&) { ++ok; },
                            [&](caf::error& e) {
                              if (!first_error)
                                first_error = e;
                              ++failed;
                            });
    pending.pop_front();
  };
  std::string line;
  while (std::getline(*in, line)) {
    client_message m;
    m.topic = opt.topic;
    m.partition = opt.partition;
    if (!opt.key_separator.empty()) {
      auto sep = line.find(opt.key_separator);
      if (sep != std::string::npos) {
        m.has_key = true;
        m.key = line.substr(0, sep);
        line.erase(0, sep + opt.key_separator.size());
      }
    }
    if (!m.has_key && opt.key) {
      m.has_key = true;
      m.key = *opt.key;
    }
    m.value = std::move(line);
    m.headers = headers;
    pending.push_back(ctx.self->request(*prod, cfg.delivery_timeout + milliseconds{5000},
                                        produce_atom_v, std::move(m)));
    if (pending.size() >= window)
      wait_one();
    // Stop early on a definite error (e.g. unknown topic) instead of
    // reading everything first.
    if (first_error && !is_retriable(first_error))
      break;
  }
  while (!pending.empty())
    wait_one();
  if (opt.json)
    std::cout << json{{"produced", ok}, {"failed", failed}}.dump() << '\n';
  else
    std::cout << "produced " << ok << " messages" << (failed > 0 ? ", " + std::to_string(failed) + " failed" : "")
              << '\n';
  if (first_error)
    fail(first_error);
  return 0;
}

// -- consume ------------------------------------------------------------------------------

/// Set by SIGINT/SIGTERM: consume stops cleanly (commits, leaves the group).
volatile std::sig_atomic_t interrupted = 0;

void on_signal(int) {
  interrupted = 1;
}

std::string render(const consumed_message& m, const std::vector<std::string>& fields,
                   bool as_json) {
  if (as_json) {
    json h = json::object();
    for (auto& x : m.headers)
      h[x.key] = x.value;
    json out{{"topic", m.topic},         {"partition", m.partition.value},
             {"offset", m.off.value},    {"timestamp", m.timestamp},
             {"key", m.has_key ? json(m.key) : json(nullptr)},
             {"value", m.has_value ? json(m.value) : json(nullptr)},
             {"headers", h}};
    return out.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0)
      out += '\t';
    auto& f = fields[i];
    if (f == "value")
      out += m.has_value ? m.value : "null";
    else if (f == "key")
      out += m.has_key ? m.key : "null";
    else if (f == "topic")
      out += m.topic;
    else if (f == "partition")
      out += std::to_string(m.partition.value);
    else if (f == "offset")
      out += std::to_string(m.off.value);
    else if (f == "timestamp")
      out += std::to_string(m.timestamp);
    else if (f == "headers") {
      std::string hs;
      for (auto& x : m.headers)
        hs += (hs.empty() ? "" : ",") + x.key + "=" + x.value;
      out += hs;
    }
  }
  return out;
}

int consume(context& ctx) {
  auto& opt = ctx.opt;
  // Checks the topic exists (a clear unknown_topic) and learns its size.
  auto desc = call<topic_description>(ctx, describe_atom_v, topic_atom_v, opt.topic);
  auto count = static_cast<int32_t>(desc.partitions.size());
  if (count == 0)
    count = desc.config.partitions;
  if (opt.partition >= count)
    fail(make_error(ec::unknown_partition, "partition " + std::to_string(opt.partition)
                                             + " of topic '" + opt.topic + "' (it has "
                                             + std::to_string(count) + ")"));
  bool as_json = opt.json || opt.format == "json";
  std::vector<std::string> fields;
  if (!as_json) {
    std::stringstream ss{opt.format};
    std::string f;
    while (std::getline(ss, f, ',')) {
      static const std::vector<std::string> known{"topic", "partition", "offset",
                                                  "timestamp", "key", "value", "headers"};
      if (std::find(known.begin(), known.end(), f) == known.end())
        fail(make_error(ec::invalid_config,
                        "--format field '" + f
                          + "': expected json or a list of topic,partition,offset,timestamp,key,value,headers"));
      fields.push_back(f);
    }
  }
  consumer_config cfg;
  cfg.client_id = "ferryctl";
  cfg.group_id = opt.group;
  cfg.auto_offset_reset = opt.from_beginning ? "earliest" : "latest";
  cfg.enable_auto_commit = !opt.group.empty() && !opt.no_commit;
  cfg.heartbeat_interval = milliseconds{1000};
  cfg.session_timeout = milliseconds{opt.session_timeout_ms};
  cfg.heartbeat_interval = std::min(cfg.heartbeat_interval, cfg.session_timeout / 3);
  cfg.fetch_max_wait = milliseconds{200};
  std::vector<topic_partition> all;
  for (int32_t p = 0; p < count; ++p)
    all.push_back(topic_partition{opt.topic, partition_id{p}});
  if (opt.partition >= 0)
    cfg.partitions = {topic_partition{opt.topic, partition_id{opt.partition}}};
  else if (opt.group.empty())
    cfg.partitions = all;
  else
    cfg.topics = {opt.topic};
  auto cons = spawn_consumer(ctx.sys, cfg, ctx.conn);
  if (!cons)
    fail(cons.error());
  ctx.owned.push_back(caf::actor_cast<caf::actor>(*cons));
  if (opt.offset)
    for (auto& tp : (opt.partition >= 0 ? cfg.partitions : all))
      ctx.self->send(*cons, seek_atom_v, tp, offset{*opt.offset});
  auto stop = [&] {
    ctx.self->request(*cons, milliseconds{10000}, stop_atom_v)
      .receive([](bool) {}, [](caf::error&) {});
  };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int64_t printed = 0;
  auto start = clock_type::now();
  auto last_activity = start;
  bool assigned = !cfg.partitions.empty();
  caf::error err;
  while ((opt.max < 0 || printed < opt.max) && interrupted == 0) {
    auto wait = milliseconds{500};
    if (opt.timeout_ms > 0) {
      auto idle = std::chrono::duration_cast<milliseconds>(clock_type::now() - last_activity);
      auto left = milliseconds{opt.timeout_ms} - idle;
      if (left.count() <= 0)
        break;
      wait = std::min(wait, left);
    }
    std::vector<consumed_message> msgs;
    ctx.self->request(*cons, wait + ctx.timeout, poll_atom_v, static_cast<int32_t>(wait.count()))
      .receive([&](std::vector<consumed_message>& xs) { msgs = std::move(xs); },
               [&](caf::error& e) { err = std::move(e); });
    if (err)
      break;
    if (msgs.empty()) {
      if (!assigned) {
        // The idle clock starts once the group gave us partitions.
        ctx.self->request(*cons, ctx.timeout, assign_atom_v)
          .receive(
            [&](std::vector<topic_partition>& tps) {
              if (!tps.empty()) {
                assigned = true;
                last_activity = clock_type::now();
              }
            },
            [](caf::error&) {});
        if (!assigned && clock_type::now() - start > milliseconds{opt.timeout_ms + 30000}
            && opt.timeout_ms > 0)
          break;
        if (!assigned)
          last_activity = clock_type::now();
      }
      continue;
    }
    last_activity = clock_type::now();
    size_t i = 0;
    for (; i < msgs.size() && (opt.max < 0 || printed < opt.max); ++i) {
      std::cout << render(msgs[i], fields, as_json) << '\n';
      ++printed;
    }
    std::cout.flush();
    // Hand back what --max left unprinted, so the commit covers only
    // printed messages.
    std::map<topic_partition, offset> rewind;
    for (; i < msgs.size(); ++i) {
      topic_partition tp{msgs[i].topic, msgs[i].partition};
      if (rewind.count(tp) == 0)
        rewind[tp] = msgs[i].off;
    }
    for (auto& [tp, off] : rewind)
      ctx.self->send(*cons, seek_atom_v, tp, off);
  }
  stop();
  if (err)
    fail(err);
  if (!opt.json && printed == 0 && opt.max > 0)
    std::cerr << "ferryctl: no messages within " << opt.timeout_ms << " ms\n";
  return 0;
}

// -- group commands ---------------------------------------------------------------------

int group_list(context& ctx) {
  auto groups = call<std::vector<group_description>>(ctx, list_atom_v, group_atom_v);
  std::sort(groups.begin(), groups.end(),
            [](auto& a, auto& b) { return a.group < b.group; });
  if (ctx.opt.json) {
    json out = json::array();
    for (auto& g : groups)
      out.push_back(to_json(g));
    std::cout << out.dump() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& g : groups) {
    int64_t lag = 0;
    for (auto& p : g.partitions)
      lag += p.lag;
    rows.push_back({g.group, g.mode, g.state, std::to_string(g.members.size()),
                    g.assignor.empty() ? "-" : g.assignor, std::to_string(g.generation),
                    std::to_string(lag)});
  }
  print_table({"GROUP", "MODE", "STATE", "MEMBERS", "ASSIGNOR", "GENERATION", "LAG"}, rows);
  return 0;
}

int group_describe(context& ctx) {
  auto g = call<group_description>(ctx, describe_atom_v, group_atom_v, ctx.opt.name);
  if (ctx.opt.json) {
    std::cout << to_json(g).dump() << '\n';
    return 0;
  }
  std::cout << "Group: " << g.group << "  Mode: " << g.mode << "  State: " << g.state
            << "  Assignor: " << (g.assignor.empty() ? "-" : g.assignor)
            << "  Generation: " << g.generation << "  Members: " << g.members.size();
  if (!g.protocol_type.empty())
    std::cout << "  Protocol: " << g.protocol_type << " (client-side assignment)";
  std::cout << '\n';
  if (g.mode == "queue") {
    // The queue group's settings and record counts (leases, retries, DLQ).
    auto q = call<queue_group_description>(ctx, describe_atom_v, queue_atom_v,
                                           ctx.opt.name);
    auto& c = q.config;
    std::cout << "Queue: max_attempts=" << c.max_attempts
              << " backoff_ms=" << c.initial_backoff_ms << ".." << c.max_backoff_ms
              << " (x" << c.backoff_multiplier << ", jitter " << c.jitter << ")"
              << " visibility_ms=" << c.visibility_timeout_ms
              << " ordering=" << c.ordering << " dlq="
              << (c.dlq_topic.empty() ? "<topic>." + q.group + ".dlq" : c.dlq_topic)
              << " start=" << start_position_text(c.start);
    if (c.delay_ms > 0)
      std::cout << " delay_ms=" << c.delay_ms;
    std::cout << '\n';
    std::vector<std::vector<std::string>> qrows;
    for (auto& p : q.partitions)
      qrows.push_back({p.topic, std::to_string(p.partition.value),
                       std::to_string(p.available), std::to_string(p.leased),
                       std::to_string(p.delayed), std::to_string(p.scheduled),
                       std::to_string(p.dead_letter_pending),
                       p.dlq_topic, std::to_string(p.dead_lettered)});
    if (!qrows.empty())
      print_table({"TOPIC", "PARTITION", "AVAILABLE", "LEASED", "RETRYING", "SCHEDULED",
                   "TO_DLQ", "DLQ", "DEAD_LETTERED"},
                  qrows);
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& p : g.partitions)
    rows.push_back({p.topic, std::to_string(p.partition.value), offset_text(p.committed),
                    std::to_string(p.log_start.value), std::to_string(p.log_end.value),
                    std::to_string(p.lag), p.member_id.empty() ? "-" : p.member_id});
  print_table({"TOPIC", "PARTITION", "COMMITTED", "LOG_START", "LOG_END", "LAG", "MEMBER"},
              rows);
  if (!g.members.empty()) {
    std::cout << '\n';
    std::vector<std::vector<std::string>> mrows;
    for (auto& m : g.members) {
      std::string assigned;
      for (auto& tp : m.assignment)
        assigned += (assigned.empty() ? "" : ",") + tp.topic + "-"
                    + std::to_string(tp.partition.value);
      mrows.push_back({m.member_id, m.group_instance_id.empty() ? "-" : m.group_instance_id,
                       m.client_id, assigned.empty() ? "-" : assigned});
    }
    print_table({"MEMBER", "INSTANCE", "CLIENT", "PARTITIONS"}, mrows);
  }
  return 0;
}

int group_reset_offsets(context& ctx) {
  auto& opt = ctx.opt;
  reset_offsets_request req;
  req.group = opt.name;
  req.topics = {opt.reset_topic};
  req.dry_run = opt.dry_run;
  int chosen = int{opt.to_earliest} + int{opt.to_latest} + int{!opt.to_datetime.empty()}
               + int{opt.to_offset.has_value()};
  if (chosen != 1)
    fail(make_error(ec::invalid_request, "reset-offsets needs exactly one of --to-earliest, "
                                         "--to-latest, --to-datetime, --to-offset"));
  if (opt.to_earliest) {
    req.to = "earliest";
  } else if (opt.to_latest) {
    req.to = "latest";
  } else if (!opt.to_datetime.empty()) {
    req.to = "timestamp";
    req.value = datetime_option_ms(opt.to_datetime);
  } else {
    req.to = "offset";
    req.value = *opt.to_offset;
  }
  auto offsets = call<std::vector<partition_offset>>(ctx, reset_atom_v, req);
  if (opt.json) {
    std::cout << json{{"group", opt.name}, {"dry_run", opt.dry_run}, {"offsets", to_json(offsets)}}
                   .dump()
              << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& po : offsets)
    rows.push_back({po.topic, std::to_string(po.partition.value), offset_text(po.committed)});
  print_table({"TOPIC", "PARTITION", "NEW_OFFSET"}, rows);
  if (opt.dry_run)
    std::cout << "(dry run: nothing changed)\n";
  return 0;
}

int group_delete(context& ctx) {
  call_void(ctx, delete_atom_v, group_atom_v, ctx.opt.name);
  if (ctx.opt.json)
    std::cout << json{{"deleted", ctx.opt.name}}.dump() << '\n';
  else
    std::cout << "deleted group " << ctx.opt.name << '\n';
  return 0;
}

// -- cluster ----------------------------------------------------------------------------

/// ferryctl cluster remove-node N: the controller moves every replica off
/// broker-only node N, then unregisters it. Waits (up to --request-timeout)
/// until N is gone from cluster describe unless --no-wait.
int cluster_remove_node(context& ctx) {
  auto id = ctx.opt.node;
  auto reg = call<broker_registration>(ctx, delete_atom_v, broker_atom_v, id);
  std::cout << "node " << id << " (" << reg.host << ":" << reg.port
            << ") is being removed: its replicas move to other brokers\n";
  if (ctx.opt.no_wait)
    return 0;
  auto deadline = std::chrono::steady_clock::now() + ctx.timeout;
  size_t last_left = SIZE_MAX;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = call<cluster_description>(ctx, cluster_atom_v);
    // Partitions that still name it (as a replica or a move's source).
    size_t left = 0;
    for (auto& t : c.topics)
      for (auto& p : t.partitions)
        left += std::count(p.replicas.begin(), p.replicas.end(), id) > 0;
    bool removing = std::any_of(c.nodes.begin(), c.nodes.end(), [&](auto& n) {
      return n.id == id && n.removing;
    });
    if (!removing && left == 0) {
      std::cout << "node " << id
                << " holds no replicas any more and left the cluster; stop "
                   "its ferryd now\n";
      return 0;
    }
    if (left != last_left) {
      std::cout << "node " << id << ": " << left
                << " partition(s) still have a replica there\n";
      last_left = left;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
  }
  fail(make_error(ec::request_timed_out,
                  "node " + std::to_string(id)
                    + " still holds replicas (the moves go on; see cluster "
                      "describe)"));
  return 1;
}

// -- partition reassign ------------------------------------------------------------

int partition_reassign(context& ctx) {
  isr_change ch;
  ch.topic = ctx.opt.name;
  ch.partition = partition_id{ctx.opt.partition};
  ch.isr = ctx.opt.replicas;
  auto pa = call<partition_assignment>(ctx, assign_atom_v, ch);
  auto list = [](const std::vector<int32_t>& xs) {
    std::string out;
    for (auto x : xs)
      out += (out.empty() ? "" : ",") + std::to_string(x);
    return out;
  };
  auto target = list(ctx.opt.replicas);
  if (list(pa.replicas) == target || ctx.opt.no_wait) {
    std::cout << ch.topic << "/" << ch.partition.value << ": replicas "
              << list(pa.replicas)
              << (list(pa.replicas) == target ? "" : " (moving to " + target + ")")
              << ", leader " << pa.leader << '\n';
    return 0;
  }
  std::cout << ch.topic << "/" << ch.partition.value << ": replicas "
            << list(pa.replicas) << " while the new ones catch up; target "
            << target << '\n';
  // The controller completes the move once the target is in the ISR.
  auto deadline = std::chrono::steady_clock::now() + ctx.timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
    auto td = call<topic_description>(ctx, describe_atom_v, topic_atom_v,
                                      ch.topic);
    for (auto& ps : td.partitions)
      if (ps.partition == ch.partition && list(ps.replicas) == target) {
        std::cout << ch.topic << "/" << ch.partition.value << ": replicas "
                  << target << ", leader " << ps.leader << ", ISR "
                  << list(ps.isr) << '\n';
        return 0;
      }
  }
  fail(make_error(ec::request_timed_out,
                  "the move of " + ch.topic + "/"
                    + std::to_string(ch.partition.value)
                    + " has not completed yet (it goes on; see topic "
                      "describe)"));
  return 1;
}

int cluster_describe(context& ctx) {
  auto c = call<cluster_description>(ctx, cluster_atom_v);
  if (ctx.opt.json) {
    json nodes = json::array();
    for (auto& n : c.nodes)
      nodes.push_back(json{{"id", n.id},
                           {"host", n.host},
                           {"port", n.port},
                           {"http_port", n.http_port},
                           {"metrics_port", n.metrics_port},
                           {"kafka_port", n.kafka_port},
                           {"kafka_host", n.kafka_host},
                           {"alive", n.alive},
                           {"controller", n.controller},
                           {"role", n.voter ? "voter" : "broker"},
                           {"removing", n.removing}});
    json topics = json::array();
    for (auto& t : c.topics)
      topics.push_back(to_json(t));
    std::cout << json{{"cluster_id", c.cluster_id},
                      {"controller", c.controller},
                      {"raft_term", c.raft_term},
                      {"nodes", nodes},
                      {"topics", topics}}
                   .dump()
              << '\n';
    return 0;
  }
  // Summary line, then the nodes and every partition (as `topic describe`
  // shows them, for all topics at once).
  size_t alive = 0;
  for (auto& n : c.nodes)
    alive += n.alive ? 1 : 0;
  size_t partitions = 0;
  size_t offline = 0;
  size_t under_replicated = 0;
  for (auto& t : c.topics)
    for (auto& p : t.partitions) {
      ++partitions;
      offline += p.online && p.leader >= 0 ? 0 : 1;
      under_replicated += p.isr.size() < p.replicas.size() ? 1 : 0;
    }
  std::cout << "Cluster: " << c.cluster_id
            << "  Controller: " << (c.controller >= 0 ? std::to_string(c.controller) : "none")
            << "  RaftTerm: " << c.raft_term << "  Nodes: " << c.nodes.size() << " (" << alive
            << " alive)  Topics: " << c.topics.size() << "  Partitions: " << partitions << " ("
            << offline << " offline, " << under_replicated << " under-replicated)\n\n";
  auto port_text = [](uint16_t port) { return port ? std::to_string(port) : std::string{"-"}; };
  std::vector<std::vector<std::string>> rows;
  for (auto& n : c.nodes) {
    // Port 0: not known yet (a voter whose --voters entry names its peer
    // port shows its client port once its registration is applied).
    auto endpoint = n.port == 0 ? std::string{"-"}
                    : n.host.find(':') != std::string::npos
                      ? "[" + n.host + "]:" + std::to_string(n.port)
                      : n.host + ":" + std::to_string(n.port);
    rows.push_back({std::to_string(n.id),
                    std::string{n.voter ? "voter" : "broker"}
                      + (n.removing ? " (removing)" : ""),
                    endpoint, port_text(n.http_port), port_text(n.metrics_port),
                    port_text(n.kafka_port), n.alive ? "yes" : "no",
                    n.controller ? "*" : ""});
  }
  print_table({"NODE", "ROLE", "ENDPOINT", "HTTP", "METRICS", "KAFKA", "ALIVE", "CONTROLLER"},
              rows);
  std::cout << '\n';
  rows.clear();
  auto ints_text = [](const std::vector<int32_t>& xs) {
    return xs.empty() ? std::string{"-"} : join_ints(xs);
  };
  for (auto& t : c.topics)
    for (auto& p : t.partitions)
      rows.push_back({t.name, std::to_string(p.partition.value),
                      p.leader >= 0 ? std::to_string(p.leader) : "none",
                      std::to_string(p.epoch.value), ints_text(p.replicas), ints_text(p.isr),
                      std::to_string(p.high_watermark.value), std::to_string(p.log_end.value),
                      p.online ? "yes" : "no"});
  print_table({"TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "HIGH_WATERMARK",
               "LOG_END", "ONLINE"},
              rows);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  CLI::App app{"ferryctl: command-line client for Ferry"};
  app.require_subcommand(1);
  // Global options (--broker, --json, ...) may also follow the subcommand.
  app.fallthrough();
  app.add_option("--broker", opt.broker,
                 "broker HOST:PORT, or a comma-separated list of them (any nodes of "
                 "one cluster; tried in order, the next one when a connect fails or "
                 "the connection is lost). Default: $FERRY_BROKER; else, when "
                 "$FERRY_CLUSTER_DIR/brokers (./ferry-cluster/brokers when "
                 "FERRY_CLUSTER_DIR is unset) exists, the nodes it lists, node 1 "
                 "first (a local cluster of deploy/local-cluster.sh started from "
                 "here; with its client certificate when started with --tls); else "
                 "127.0.0.1:9092")
    ->capture_default_str();
  app.add_flag("--json", opt.json, "print JSON instead of tables");
  app.add_option("--connect-timeout", opt.connect_timeout_ms, "ms to wait for the broker")
    ->capture_default_str();
  app.add_option("--request-timeout", opt.request_timeout_ms, "ms per request; admin requests answered not_leader or coordinator_not_available (an election, a restarting node) are sent again until it runs out")
    ->capture_default_str();

  app.add_option("--tls-cert", opt.tls.certificate,
                 "PEM client certificate for a node started with TLS (with --tls-key "
                 "and --tls-ca; the node asks every client for one); also $FERRY_TLS_CERT");
  app.add_option("--tls-key", opt.tls.key, "PEM private key of --tls-cert; also $FERRY_TLS_KEY");
  app.add_option("--tls-ca", opt.tls.ca,
                 "PEM CA certificates the node's certificate must chain to; also $FERRY_TLS_CA");

  std::string login_user;
  std::string password_file;
  std::string cluster_secret_file;
  app.add_option("--user", login_user,
                 "log in as this user (nodes started with --auth scram); also $FERRY_USER");
  app.add_option("--password-file", password_file,
                 "file whose first line is --user's password; also $FERRY_PASSWORD_FILE, "
                 "or the password itself in $FERRY_PASSWORD");
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "act as the cluster's operator with the nodes' shared secret (ferryd "
                 "--cluster-secret-file; how the first user is made); also "
                 "$FERRY_CLUSTER_SECRET_FILE");

  std::function<int(context&)> run;

  // topic
  auto topic = app.add_subcommand("topic", "create, delete, list, describe, alter topics");
  topic->require_subcommand(1);
  auto t_create = topic->add_subcommand("create", "create a topic");
  t_create->add_option("name", opt.name)->required();
  t_create->add_option("--partitions", opt.partitions)->capture_default_str();
  t_create->add_option("--replication-factor", opt.replication_factor)->capture_default_str();
  t_create->add_option("--config", opt.configs, "k=v (repeatable)");
  t_create->callback([&] { run = topic_create; });
  auto t_delete = topic->add_subcommand("delete", "delete a topic");
  t_delete->add_option("name", opt.name)->required();
  t_delete->callback([&] { run = topic_delete; });
  auto t_list = topic->add_subcommand("list", "list topics");
  t_list->callback([&] { run = topic_list; });
  auto t_describe = topic->add_subcommand("describe", "partitions, offsets and config");
  t_describe->add_option("name", opt.name)->required();
  t_describe->callback([&] { run = topic_describe; });
  auto t_alter = topic->add_subcommand("alter", "change config or grow partitions");
  t_alter->add_option("name", opt.name)->required();
  t_alter->add_option("--config", opt.configs, "k=v (repeatable)");
  auto alter_parts = t_alter->add_option("--partitions", opt.partitions, "new partition count");
  t_alter->callback([&] {
    opt.partitions_set = alter_parts->count() > 0;
    run = topic_alter;
  });

  // produce
  auto prod = app.add_subcommand("produce", "one message per line of stdin or --file");
  prod->add_option("topic", opt.topic)->required();
  prod->add_option("--key", opt.key, "key of every message");
  prod->add_option("--key-separator", opt.key_separator,
                   "split each line into key and value at this string");
  prod->add_option("--header", opt.headers, "k=v (repeatable)");
  prod->add_option("--acks", opt.acks, "0, 1 or all")->capture_default_str();
  prod->add_option("--partition", opt.partition, "explicit partition");
  prod->add_option("--file", opt.file, "read lines from this file");
  prod->add_option("--compression", opt.compression, "none, gzip, lz4, zstd")
    ->capture_default_str();
  prod->add_option("--linger-ms", opt.linger_ms)->capture_default_str();
  prod->callback([&] { run = produce; });

  // consume
  auto cons = app.add_subcommand("consume", "print messages, one per line");
  cons->add_option("topic", opt.topic)->required();
  cons->add_option("--group", opt.group, "consumer group (commits offsets)");
  auto from_beginning = cons->add_flag("--from-beginning", opt.from_beginning,
                                       "start at the earliest offset without a committed one");
  cons->add_option("--offset", opt.offset, "start at this offset")->excludes(from_beginning);
  cons->add_option("--partition", opt.partition, "read only this partition");
  cons->add_option("--max", opt.max, "exit after this many messages");
  cons->add_option("--timeout", opt.timeout_ms, "exit after this many ms without messages");
  cons->add_option("--format", opt.format,
                   "json, or fields joined by ',' from topic,partition,offset,timestamp,key,"
                   "value,headers (tab-separated)")
    ->capture_default_str();
  cons->add_flag("--no-commit", opt.no_commit, "do not commit offsets (with --group)");
  cons->add_option("--session-timeout", opt.session_timeout_ms,
                   "group session timeout in ms (a killed member's partitions move after it)")
    ->capture_default_str();
  cons->callback([&] { run = consume; });

  // group
  auto group = app.add_subcommand("group", "consumer groups");
  group->require_subcommand(1);
  auto g_list = group->add_subcommand("list", "list groups");
  g_list->callback([&] { run = group_list; });
  auto g_describe = group->add_subcommand("describe", "members, committed offsets and lag");
  g_describe->add_option("group", opt.name)->required();
  g_describe->callback([&] { run = group_describe; });
  auto g_reset = group->add_subcommand("reset-offsets", "move committed offsets (group must be empty)");
  g_reset->add_option("group", opt.name)->required();
  g_reset->add_option("--topic", opt.reset_topic)->required();
  auto e1 = g_reset->add_flag("--to-earliest", opt.to_earliest);
  auto e2 = g_reset->add_flag("--to-latest", opt.to_latest);
  auto e3 = g_reset->add_option("--to-datetime", opt.to_datetime, "ISO 8601, UTC unless a zone is given");
  auto e4 = g_reset->add_option("--to-offset", opt.to_offset);
  e1->excludes(e2)->excludes(e3)->excludes(e4);
  e2->excludes(e3)->excludes(e4);
  e3->excludes(e4);
  g_reset->add_flag("--dry-run", opt.dry_run, "show the new offsets, change nothing");
  g_reset->callback([&] { run = group_reset_offsets; });
  auto g_delete = group->add_subcommand("delete", "delete a group's offsets (group must be empty)");
  g_delete->add_option("group", opt.name)->required();
  g_delete->callback([&] { run = group_delete; });

  // cluster
  auto cluster = app.add_subcommand("cluster", "the cluster");
  cluster->require_subcommand(1);
  auto c_describe = cluster->add_subcommand(
    "describe", "cluster id, controller, Raft term, the nodes and every partition's "
                "leader, epoch, replicas, ISR and offsets");
  c_describe->callback([&] { run = cluster_describe; });
  auto c_remove = cluster->add_subcommand(
    "remove-node", "remove a broker-only node: the controller moves every "
                   "replica it holds to the other brokers (new replicas catch "
                   "up while the partitions serve traffic, leaders move within "
                   "the ISR), then unregisters it; stop its ferryd afterwards. "
                   "Raft voters (--voters) are fixed and cannot be removed");
  c_remove->add_option("node", opt.node, "the node id")->required()
    ->check(CLI::NonNegativeNumber);
  c_remove->add_flag("--no-wait", opt.no_wait,
                     "return once the removal started (default: wait up to "
                     "--request-timeout until the node left)");
  c_remove->callback([&] { run = cluster_remove_node; });

  auto partition = app.add_subcommand("partition", "partition replicas");
  partition->require_subcommand(1);
  auto p_reassign = partition->add_subcommand(
    "reassign", "move a partition's replicas to other brokers while it serves "
                "traffic: the new ones catch up as followers, then the old "
                "ones leave (the leader moves if it is not kept)");
  p_reassign->add_option("topic", opt.name)->required();
  p_reassign->add_option("partition", opt.partition)->required()
    ->check(CLI::NonNegativeNumber);
  p_reassign->add_option("--replicas", opt.replicas,
                         "the new replica list, e.g. 2,3 (node ids)")
    ->required()->delimiter(',');
  p_reassign->add_flag("--no-wait", opt.no_wait,
                       "return once the move started (default: wait up to "
                       "--request-timeout for it to complete)");
  p_reassign->callback([&] { run = partition_reassign; });

  // work (actors/programs/ferryctl_work.cpp)
  ferry::ctl::add_work_command(app, [&] {
    run = [](context& ctx) { return ferry::ctl::run_work(ctx.sys, ctx.conn, ctx.broker); };
  });

  // user and acl (actors/programs/ferryctl_security.cpp)
  ferry::ctl::add_security_commands(app, [&] {
    run = [](context& ctx) {
      return ferry::ctl::run_security(*ctx.admin, ctx.opt.json);
    };
  });

  // dlq (actors/programs/ferryctl_dlq.cpp)
  ferry::ctl::add_dlq_command(app, [&] {
    run = [](context& ctx) {
      return ferry::ctl::run_dlq(*ctx.admin, ctx.opt.json);
    };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  caf::actor_system_config cfg;
  configure_client(cfg);
  tls_from_environment(opt.tls);
  // The default broker list of a local TLS cluster comes with its client
  // certificate (deploy/local-cluster.sh start --tls).
  if (auto* env = std::getenv("FERRY_BROKER");
      app.count("--broker") == 0 && (env == nullptr || *env == '\0'))
    tls_from_local_cluster(opt.tls);
  if (opt.tls.requested()) {
    if (auto err = check_tls(opt.tls, tls_role::client)) {
      std::fprintf(stderr, "ferryctl: --tls-cert/--tls-key/--tls-ca: %s\n",
                   describe(err).c_str());
      return 2;
    }
    configure_tls(cfg, opt.tls);
  }
  auto creds = load_credentials(login_user, password_file, cluster_secret_file);
  if (!creds) {
    std::fprintf(stderr, "ferryctl: %s\n", describe(creds.error()).c_str());
    return 2;
  }
  // The operator of a local auth cluster needs no flags.
  if (auto* env = std::getenv("FERRY_BROKER");
      app.count("--broker") == 0 && (env == nullptr || *env == '\0'))
    credentials_from_local_cluster(*creds);
  if (!creds->empty())
    configure_credentials(cfg, *creds);
  cfg.set("scheduler.max-threads", 2);
  cfg.set("logger.console", caf::atom("none"));
  int rc = 0;
  {
    caf::actor_system sys{cfg};
    context ctx{sys, opt};
    try {
      connect(ctx);
      rc = run(ctx);
    } catch (const failure& f) {
      rc = ctl::report(f);
      if (!ctx.broker) {
        // A connect attempt may still be blocked in the OS (unreachable
        // host); do not wait for it on the way out.
        std::fflush(nullptr);
        std::_Exit(rc);
      }
    }
    for (auto& a : ctx.owned)
      ctx.self->send_exit(a, caf::exit_reason::user_shutdown);
    if (ctx.conn)
      ctx.self->send_exit(ctx.conn, caf::exit_reason::user_shutdown);
  }
  return rc;
}
