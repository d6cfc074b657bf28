#include "metrics/node_probe.hpp"

#include "broker/error.hpp"
#include "metrics/family.hpp"
#include "metrics/metrics.hpp"

#include <caf/error.hpp>
#include <caf/sec.hpp>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry::metrics {

node_probe::node_probe(std::shared_ptr<registry> reg) : reg_(std::move(reg)) {
  auto& r = *reg_;
  disk_used_ = &r.acquire(r.disk_used_bytes(), {});
  disk_free_ = &r.acquire(r.disk_free_bytes(), {});
  raft_term_ = &r.acquire(r.raft_term(), {});
  raft_is_leader_ = &r.acquire(r.raft_is_leader(), {});
  raft_commit_index_ = &r.acquire(r.raft_commit_index(), {});
}

node_probe::~node_probe() {
  auto& r = *reg_;
  r.release(r.disk_used_bytes(), {});
  r.release(r.disk_free_bytes(), {});
  r.release(r.raft_term(), {});
  r.release(r.raft_is_leader(), {});
  r.release(r.raft_commit_index(), {});
  for (const auto& [code, counter] : errors_)
    r.release(r.request_errors_total(), labels{{"code", code}});
  for (const auto& [kind, counter] : forwarded_)
    r.release(r.forwarded_requests_total(), labels{{"kind", kind}});
  if (cleaner_last_run_) {
    r.release(r.cleaner_runs_total(), {});
    r.release(r.cleaner_failures_total(), {});
    r.release(r.cleaner_bytes_read_total(), {});
    r.release(r.cleaner_bytes_written_total(), {});
    r.release(r.cleaner_bytes_reclaimed_total(), {});
    r.release(r.cleaner_records_removed_total(), {});
    r.release(r.cleaner_last_run_seconds(), {});
  }
  if (journal_rounds_) {
    r.release(r.journal_rounds_total(), {});
    r.release(r.journal_bytes_total(), {});
    r.release(r.journal_checkpoints_total(), {});
    r.release(r.journal_files(), {});
  }
}

void node_probe::journal(uint64_t rounds, uint64_t bytes, uint64_t checkpoints,
                         uint64_t files) {
  std::lock_guard lk{journal_mtx_};
  auto& r = *reg_;
  if (!journal_rounds_) {
    journal_rounds_ = &r.acquire(r.journal_rounds_total(), {});
    journal_bytes_ = &r.acquire(r.journal_bytes_total(), {});
    journal_checkpoints_ = &r.acquire(r.journal_checkpoints_total(), {});
    journal_files_ = &r.acquire(r.journal_files(), {});
  }
  uint64_t now[3] = {rounds, bytes, checkpoints};
  prometheus::Counter* c[3] = {journal_rounds_, journal_bytes_, journal_checkpoints_};
  for (int i = 0; i < 3; ++i) {
    if (now[i] > journal_seen_[i])
      c[i]->Increment(static_cast<double>(now[i] - journal_seen_[i]));
    journal_seen_[i] = std::max(journal_seen_[i], now[i]);
  }
  journal_files_->Set(static_cast<double>(files));
}

void node_probe::cleaner(uint64_t runs, uint64_t failures, uint64_t bytes_read,
                         uint64_t bytes_written, uint64_t bytes_reclaimed,
                         uint64_t records_removed, double last_run_seconds) {
  std::lock_guard lk{journal_mtx_};
  auto& r = *reg_;
  if (!cleaner_last_run_) {
    cleaner_[0] = &r.acquire(r.cleaner_runs_total(), {});
    cleaner_[1] = &r.acquire(r.cleaner_failures_total(), {});
    cleaner_[2] = &r.acquire(r.cleaner_bytes_read_total(), {});
    cleaner_[3] = &r.acquire(r.cleaner_bytes_written_total(), {});
    cleaner_[4] = &r.acquire(r.cleaner_bytes_reclaimed_total(), {});
    cleaner_[5] = &r.acquire(r.cleaner_records_removed_total(), {});
    cleaner_last_run_ = &r.acquire(r.cleaner_last_run_seconds(), {});
  }
  uint64_t now[6] = {runs, failures, bytes_read, bytes_written, bytes_reclaimed,
                     records_removed};
  for (int i = 0; i < 6; ++i) {
    if (now[i] > cleaner_seen_[i])
      cleaner_[i]->Increment(static_cast<double>(now[i] - cleaner_seen_[i]));
    cleaner_seen_[i] = std::max(cleaner_seen_[i], now[i]);
  }
  cleaner_last_run_->Set(last_run_seconds);
}

void node_probe::disk(uint64_t used_bytes, uint64_t free_bytes) {
  disk_used_->Set(static_cast<double>(used_bytes));
  disk_free_->Set(static_cast<double>(free_bytes));
}

caf::error node_probe::sample_disk(const std::filesystem::path& data_dir) {
  struct statvfs sv;
  if (::statvfs(data_dir.c_str(), &sv) != 0) {
    auto err = errno;
    return make_error(ec::io_error, "statvfs " + data_dir.string() + ": "
                                      + std::strerror(err));
  }
  auto frag = static_cast<uint64_t>(sv.f_frsize);
  auto used = (static_cast<uint64_t>(sv.f_blocks)
               - static_cast<uint64_t>(sv.f_bfree))
              * frag;
  disk(used, static_cast<uint64_t>(sv.f_bavail) * frag);
  return caf::none;
}

void node_probe::raft(int64_t term, bool is_leader, int64_t commit_index) {
  raft_term_->Set(static_cast<double>(term));
  raft_is_leader_->Set(is_leader ? 1.0 : 0.0);
  raft_commit_index_->Set(static_cast<double>(commit_index));
}

void node_probe::increment(counters& series,
                           family<prometheus::Counter>& family,
                           const char* label, std::string_view value) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = series.find(value);
  if (i == series.end()) {
    std::string name{value};
    auto& c = reg_->acquire(family, labels{{label, name}});
    i = series.emplace(std::move(name), &c).first;
  }
  i->second->Increment();
}

void node_probe::request_failed(std::string_view code) {
  increment(errors_, reg_->request_errors_total(), "code", code);
}

void node_probe::forwarded(std::string_view kind) {
  increment(forwarded_, reg_->forwarded_requests_total(), "kind", kind);
}

void node_probe::request_failed(const caf::error& err) {
  if (auto code = code_of(err); code != ec::none)
    request_failed(std::string_view{to_string(code)});
  else if (err.category() == caf::atom("system"))
    request_failed(caf::to_string(static_cast<caf::sec>(err.code())));
  else
    request_failed(std::string_view{"other"});
}

} // namespace ferry::metrics
