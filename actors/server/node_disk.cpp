// The node actor's disk sampling: a helper actor that samples the data dir's
// disk into the node probe. (See node_internal.hpp for how the node's files
// divide the work.)

#include "actors/server/node_internal.hpp"

#include "broker/log_cleaner.hpp"
#include "broker/node_journal.hpp"

namespace ferry::node_detail {

/// Samples the data dir's disk into `probe` now and every `interval` until
/// `node` is gone or it gets an exit message.
caf::behavior disk_sampler(caf::event_based_actor* self,
                           std::shared_ptr<metrics::node_probe> probe,
                           std::filesystem::path dir, caf::timespan interval,
                           caf::actor_addr node,
                           std::shared_ptr<node_journal> journal,
                           std::shared_ptr<log_cleaner> cleaner) {
  auto failing = std::make_shared<bool>(false);
  auto sample = [probe, dir, failing, journal, cleaner] {
    if (journal) {
      auto js = journal->stats();
      probe->journal(js.rounds, js.bytes, js.checkpoints, js.files);
    }
    if (cleaner) {
      auto cs = cleaner->stats();
      probe->cleaner(cs.runs, cs.failures, cs.bytes_read, cs.bytes_written,
                     cs.bytes_reclaimed, cs.records_removed, cs.last_run_seconds);
    }
    auto err = probe->sample_disk(dir);
    if (err && !*failing)
      log::warn("node: cannot sample the disk of {}: {}", dir.string(), err);
    else if (!err && *failing)
      log::info("node: sampling the disk of {} works again", dir.string());
    *failing = static_cast<bool>(err);
  };
  sample();
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  self->monitor(node);
  self->delayed_send(self, interval, tick_atom_v);
  return {
    [self, sample, interval](tick_atom) {
      sample();
      self->delayed_send(self, interval, tick_atom_v);
    },
  };
}


} // namespace ferry::node_detail
