// `ferryctl dlq`: list, show, redrive and purge dead-letter topics through
// the broker's DLQ requests (see actors/server/dlq_manager.hpp for what they do).
//
//   ferryctl dlq list
//   ferryctl dlq show DLQ [--offset N] [--max N] [--grep TEXT] [--error TEXT]
//                         [--partition P] [--exclude-redriven]
//   ferryctl dlq redrive DLQ (--all | --offsets A-B | --offset-list P:O,...)
//                         [--to TOPIC] [--partition P] [--rate N/s] [--max N]
//   ferryctl dlq purge DLQ [--before OFFSET] [--partition P]
//
// Tables by default, JSON (the HTTP API's shapes) with --json.

#include "actors/programs/ferryctl_dlq.hpp"
#include "actors/programs/ferryctl_common.hpp"
#include "actors/programs/ferryctl_table.hpp"

#include "actors/http/http_json.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::ctl {

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

struct dlq_options {
  std::string command; ///< list, show, redrive, purge
  std::string topic;
  int32_t partition = -1;
  // show
  int64_t offset = 0;
  int32_t max = 100;
  std::string grep;
  std::string error;
  bool exclude_redriven = false;
  // redrive
  std::string to;
  std::string offsets;
  std::string offset_list;
  bool all = false;
  std::string rate;
  int32_t max_records = 0;
  // purge
  int64_t before = -1;
};

dlq_options& opts() {
  static dlq_options x;
  return x;
}

timestamp_ms wall_now_ms() {
  return std::chrono::duration_cast<milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// "42s", "5m", "3h", "2d"; "-" for none.
std::string age_text(timestamp_ms ts) {
  if (ts <= 0)
    return "-";
  auto s = std::max<int64_t>(0, (wall_now_ms() - ts) / 1000);
  if (s < 120)
    return std::to_string(s) + "s";
  if (s < 2 * 3600)
    return std::to_string(s / 60) + "m";
  if (s < 2 * 86400)
    return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string rate_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", r);
  return buf;
}

/// Cuts a cell for the table (the JSON output has everything).
std::string cell(const std::string& s, size_t max = 40) {
  std::string out;
  for (char c : s)
    out += (c == '\n' || c == '\t' || c == '\r') ? ' ' : c;
  if (out.size() > max)
    out = out.substr(0, max - 3) + "...";
  return out.empty() ? "-" : out;
}

/// "100/s", "100" -> 100; 0 for "".
int32_t parse_rate(const std::string& text) {
  if (text.empty())
    return 0;
  auto t = text;
  if (t.size() > 2 && t.substr(t.size() - 2) == "/s")
    t.resize(t.size() - 2);
  if (t.empty() || t.size() > 9
      || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw failure{"invalid_request: --rate must be N or N/s, not '" + text + "'"};
  auto n = std::stoi(t);
  if (n <= 0)
    throw failure{"invalid_request: --rate must be positive"};
  return n;
}

int64_t parse_offset(const std::string& text, const char* what) {
  if (text.empty() || text.size() > 18
      || !std::all_of(text.begin(), text.end(),
                      [](char c) { return c >= '0' && c <= '9'; }))
    throw failure{std::string{"invalid_request: "} + what
                  + " must be a non-negative offset, not '" + text + "'"};
  return std::stoll(text);
}

// -- commands -------------------------------------------------------------------

int dlq_list(admin_client& admin, bool as_json) {
  auto infos = call<std::vector<dlq_info>>(admin, list_atom_v,
                                           dlq_atom_v);
  if (as_json) {
    json out = json::array();
    for (auto& x : infos)
      out.push_back(http_api::to_json(x));
    std::cout << out.dump() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& x : infos) {
    std::string groups;
    for (auto& g : x.groups)
      groups += (groups.empty() ? "" : ",") + g;
    rows.push_back({x.topic, groups.empty() ? "-" : groups,
                    x.source_topic.empty() ? "-" : x.source_topic,
                    std::to_string(x.partitions), std::to_string(x.depth),
                    std::to_string(x.redriven), std::to_string(x.total),
                    age_text(x.oldest_timestamp), rate_text(x.rate_per_second)});
  }
  print_table({"DLQ", "GROUPS", "SOURCE", "PARTITIONS", "DEPTH", "REDRIVEN",
               "TOTAL", "OLDEST_AGE", "RATE_PER_S"},
              rows);
  return 0;
}

int dlq_show(admin_client& admin, bool as_json) {
  auto& o = opts();
  dlq_show_request req;
  req.topic = o.topic;
  req.partition = o.partition;
  req.from_offset = o.offset;
  req.max_records = o.max;
  req.grep = o.grep;
  req.error_contains = o.error;
  req.include_redriven = !o.exclude_redriven;
  auto resp = call<dlq_show_response>(admin, show_atom_v, req);
  if (as_json) {
    std::cout << http_api::to_json(resp, http_api::value_encoding::automatic)
                   .dump()
              << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& r : resp.records) {
    std::string headers;
    for (auto& h : r.message.headers) {
      if (h.key.rfind("ferry-", 0) == 0)
        continue; // decoded into the other columns
      headers += (headers.empty() ? "" : ";") + h.key + "=" + h.value;
    }
    auto origin = r.original_topic.empty()
                    ? std::string{"-"}
                    : r.original_topic + "/"
                        + std::to_string(r.original_partition) + "/"
                        + std::to_string(r.original_offset);
    rows.push_back({std::to_string(r.message.partition.value),
                    std::to_string(r.message.off.value), origin,
                    r.group.empty() ? "-" : r.group,
                    std::to_string(r.attempts), cell(r.error),
                    std::to_string(r.redrive_count),
                    r.redriven ? "yes" : "no",
                    age_text(r.last_failure_ts ? r.last_failure_ts
                                               : r.message.timestamp),
                    r.message.has_key ? cell(r.message.key, 24) : "(null)",
                    r.message.has_value ? cell(r.message.value, 60) : "(null)",
                    cell(headers, 60)});
  }
  print_table({"PARTITION", "OFFSET", "ORIGIN", "GROUP", "ATTEMPTS", "ERROR",
               "REDRIVES", "REDRIVEN", "AGE", "KEY", "VALUE", "HEADERS"},
              rows);
  std::cout << resp.records.size() << " records (" << resp.scanned
            << " scanned)";
  if (!resp.end_reached) {
    std::cout << "; more: continue with --partition P --offset N, next "
                 "offsets (P:N)";
    for (auto& n : resp.next_offsets)
      std::cout << ' ' << n.partition.value << ':' << n.committed.value;
  }
  std::cout << '\n';
  return 0;
}

int dlq_redrive(admin_client& admin, bool as_json) {
  auto& o = opts();
  dlq_redrive_request req;
  req.topic = o.topic;
  req.to_topic = o.to;
  req.partition = o.partition;
  req.rate_per_second = parse_rate(o.rate);
  req.max_records = o.max_records;
  if (!o.offsets.empty()) {
    auto dash = o.offsets.find('-');
    if (dash == std::string::npos) {
      req.from_offset = parse_offset(o.offsets, "--offsets");
      req.to_offset = req.from_offset;
    } else {
      req.from_offset = parse_offset(o.offsets.substr(0, dash), "--offsets A");
      req.to_offset = parse_offset(o.offsets.substr(dash + 1), "--offsets B");
      if (req.to_offset < req.from_offset)
        throw failure{"invalid_request: --offsets A-B needs A <= B"};
    }
  }
  if (!o.offset_list.empty()) {
    std::string item;
    std::stringstream in{o.offset_list};
    while (std::getline(in, item, ',')) {
      auto colon = item.find(':');
      if (colon == std::string::npos)
        throw failure{"invalid_request: --offset-list items are P:OFFSET, not '"
                      + item + "'"};
      auto p = parse_offset(item.substr(0, colon), "--offset-list partition");
      auto off = parse_offset(item.substr(colon + 1), "--offset-list offset");
      req.offsets.push_back(partition_offset{
        o.topic, partition_id{static_cast<int32_t>(p)}, offset{off}, ""});
    }
  }
  // A redrive answers when done (paced by --rate): no request timeout.
  auto answer = admin.request_within<dlq_redrive_response>(caf::infinite,
                                                          redrive_atom_v, req);
  if (!answer)
    fail(answer.error());
  auto& resp = *answer;
  if (as_json) {
    std::cout << http_api::to_json(resp).dump() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& r : resp.reports)
    rows.push_back({r.topic, std::to_string(r.partition.value),
                    std::to_string(r.off.value)});
  if (!rows.empty())
    print_table({"TOPIC", "PARTITION", "OFFSET"}, rows);
  std::cout << "redriven " << resp.redriven << " records, skipped "
            << resp.skipped << " already redriven";
  if (!resp.end_reached) {
    std::cout << "; not finished, continue from";
    for (auto& n : resp.next_offsets)
      std::cout << " partition " << n.partition.value << " offset "
                << n.committed.value;
  }
  std::cout << '\n';
  return 0;
}

int dlq_purge(admin_client& admin, bool as_json) {
  auto& o = opts();
  dlq_purge_request req;
  req.topic = o.topic;
  req.partition = o.partition;
  req.before_offset = o.before;
  auto resp = call<dlq_purge_response>(admin, purge_atom_v, req);
  if (as_json) {
    std::cout << http_api::to_json(resp).dump() << '\n';
    return 0;
  }
  auto starts = resp.log_starts;
  std::sort(starts.begin(), starts.end(), [](auto& a, auto& b) {
    return a.partition < b.partition;
  });
  std::vector<std::vector<std::string>> rows;
  for (auto& s : starts)
    rows.push_back({std::to_string(s.partition.value),
                    std::to_string(s.committed.value)});
  print_table({"PARTITION", "LOG_START"}, rows);
  std::cout << "purged " << resp.purged << " records\n";
  return 0;
}

} // namespace

void add_dlq_command(CLI::App& app, std::function<void()> on_selected) {
  auto& o = opts();
  auto dlq = app.add_subcommand("dlq", "dead-letter topics: list, show, "
                                       "redrive, purge");
  dlq->require_subcommand(1);
  auto selected = [on_selected](const char* name) {
    return [on_selected, name] {
      opts().command = name;
      on_selected();
    };
  };
  auto list = dlq->add_subcommand("list", "DLQs with depth, oldest record "
                                          "age and rate");
  list->callback(selected("list"));

  auto show = dlq->add_subcommand("show", "records with their headers, key "
                                          "and payload");
  show->add_option("dlq", o.topic)->required();
  show->add_option("--offset", o.offset, "start at this offset (per partition)")
    ->check(CLI::NonNegativeNumber);
  show->add_option("--max", o.max, "most records shown")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  show->add_option("--grep", o.grep, "substring of key, value or a header");
  show->add_option("--error", o.error, "substring of the ferry-error header");
  show->add_option("--partition", o.partition, "only this partition")
    ->check(CLI::NonNegativeNumber);
  show->add_flag("--exclude-redriven", o.exclude_redriven,
                 "hide records redriven already");
  show->callback(selected("show"));

  auto redrive = dlq->add_subcommand(
    "redrive", "re-produce records to their original topic (or --to), "
               "idempotently; redriven records are marked and skipped later");
  redrive->add_option("dlq", o.topic)->required();
  redrive->add_option("--to", o.to, "target topic instead of each record's "
                                    "ferry-original-topic");
  auto all = redrive->add_flag("--all", o.all, "every record not redriven yet");
  auto range = redrive->add_option("--offsets", o.offsets,
                                   "offsets A-B (inclusive) or one offset A");
  auto list_opt = redrive->add_option("--offset-list", o.offset_list,
                                      "PARTITION:OFFSET,... (the console's "
                                      "selection)");
  all->excludes(range)->excludes(list_opt);
  range->excludes(list_opt);
  redrive->add_option("--partition", o.partition,
                      "only this partition (with --all or --offsets)")
    ->check(CLI::NonNegativeNumber);
  redrive->add_option("--rate", o.rate, "at most N records per second: N or "
                                        "N/s");
  redrive->add_option("--max", o.max_records, "stop after this many records")
    ->check(CLI::NonNegativeNumber);
  redrive->callback([on_selected, all, range, list_opt] {
    if (all->count() == 0 && range->count() == 0 && list_opt->count() == 0)
      throw CLI::RequiredError("one of --all, --offsets or --offset-list");
    opts().command = "redrive";
    on_selected();
  });

  auto purge = dlq->add_subcommand("purge", "delete records (moves the log "
                                            "start)");
  purge->add_option("dlq", o.topic)->required();
  purge->add_option("--before", o.before,
                    "delete records below this offset (default: all)")
    ->check(CLI::NonNegativeNumber);
  purge->add_option("--partition", o.partition, "only this partition")
    ->check(CLI::NonNegativeNumber);
  purge->callback(selected("purge"));
}

int run_dlq(admin_client& admin, bool json) {
  auto& cmd = opts().command;
  if (cmd == "list")
    return dlq_list(admin, json);
  if (cmd == "show")
    return dlq_show(admin, json);
  if (cmd == "redrive")
    return dlq_redrive(admin, json);
  return dlq_purge(admin, json);
}

} // namespace ferry::ctl
