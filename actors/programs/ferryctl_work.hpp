#pragma once
// `ferryctl work` (actors/programs/ferryctl_work.cpp): runs a command once per record
// of a topic, as a queue-mode group member (default) or a stream-mode group
// member with the retry-then-DLQ helper. ferryctl_main.cpp registers it.

#include "actors/client/client_connection.hpp"

#include <functional>

namespace CLI {
class App;
} // namespace CLI

namespace ferry::ctl {

/// Adds the `work` subcommand to `app`; `on_selected` runs when the
/// command line chose it.
void add_work_command(CLI::App& app, std::function<void()> on_selected);

/// Runs `ferryctl work` with the options parsed by add_work_command:
/// 0 after --max-idle or a signal, 1 on failure (one line on stderr).
int run_work(caf::actor_system& sys, connection_actor conn,
             broker_actor broker);

} // namespace ferry::ctl
