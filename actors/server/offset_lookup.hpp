#pragma once
// offset_lookup: list-offsets fan-out for the group coordinators (stream
// groups: describe, reset, lag; queue groups: reset). One request per
// partition to the broker, all in flight at once; the callback gets the
// results in the partitions' order once every one is back.
//
// reset targets: earliest, latest and timestamp are one lookup each; an
// explicit offset is clamped into [log start, high watermark] as Kafka's
// kafka-consumer-groups --reset-offsets --to-offset does (two lookups).

#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/messages.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

using offsets_done = std::function<void(std::vector<caf::expected<offset>>&)>;

/// Asks `broker` for list_offsets(timestamp) of each partition (anything
/// with .topic and .partition); calls done with one result per partition.
template <class Self, class Part>
void list_offsets_of(Self self, const broker_actor& broker,
                     caf::timespan timeout, const std::vector<Part>& parts,
                     int64_t timestamp, offsets_done done) {
  struct job {
    std::vector<caf::expected<offset>> results;
    size_t pending = 0;
    offsets_done done;
  };
  auto j = std::make_shared<job>();
  j->results.assign(parts.size(), caf::expected<offset>{offset{-1}});
  j->pending = parts.size();
  j->done = std::move(done);
  if (parts.empty()) {
    j->done(j->results);
    return;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    list_offsets_request req{parts[i].topic, parts[i].partition, timestamp};
    self->request(broker, timeout, offsets_atom_v, std::move(req))
      .then(
        [j, i](offset o) {
          j->results[i] = o;
          if (--j->pending == 0)
            j->done(j->results);
        },
        [j, i](caf::error& err) {
          j->results[i] = std::move(err);
          if (--j->pending == 0)
            j->done(j->results);
        });
  }
}

/// The list_offsets timestamp of a reset target ("earliest", "latest",
/// "timestamp", "offset": the value), or ec::invalid_request.
inline caf::expected<int64_t> reset_lookup(const reset_offsets_request& req) {
  if (req.to == "earliest")
    return int64_t{-2};
  if (req.to == "latest")
    return int64_t{-1};
  if (req.to == "timestamp" || req.to == "offset") {
    if (req.value < 0)
      return make_error(ec::invalid_request,
                        "reset to " + req.to + " needs a value >= 0");
    return req.value;
  }
  return make_error(ec::invalid_request,
                    "reset target '" + req.to
                      + "' is not earliest, latest, timestamp or offset");
}

/// The new position of each partition for `req` (see the file comment);
/// done gets the first lookup error instead if one failed.
/// @pre reset_lookup(req) is a value
template <class Self, class Part>
void resolve_reset_targets(
  Self self, const broker_actor& broker, caf::timespan timeout,
  const std::vector<Part>& parts, const reset_offsets_request& req,
  std::function<void(caf::expected<std::vector<offset>>)> done) {
  auto first_error = [](auto& results) -> caf::error {
    for (auto& r : results)
      if (!r)
        return r.error();
    return caf::none;
  };
  auto ts = *reset_lookup(req);
  if (req.to != "offset") {
    list_offsets_of(self, broker, timeout, parts, ts,
                    [done, first_error](auto& results) {
                      if (auto err = first_error(results)) {
                        done(std::move(err));
                        return;
                      }
                      std::vector<offset> targets;
                      for (auto& r : results)
                        targets.push_back(*r);
                      done(std::move(targets));
                    });
    return;
  }
  list_offsets_of(
    self, broker, timeout, parts, -2,
    [self, broker, timeout, parts, ts, done, first_error](auto& starts) {
      if (auto err = first_error(starts)) {
        done(std::move(err));
        return;
      }
      list_offsets_of(self, broker, timeout, parts, -1,
                      [starts, ts, done, first_error](auto& ends) {
                        if (auto err = first_error(ends)) {
                          done(std::move(err));
                          return;
                        }
                        std::vector<offset> targets;
                        for (size_t i = 0; i < ends.size(); ++i) {
                          auto lo = *starts[i];
                          auto hi = std::max(lo, *ends[i]);
                          targets.push_back(std::clamp(offset{ts}, lo, hi));
                        }
                        done(std::move(targets));
                      });
    });
}

} // namespace ferry
