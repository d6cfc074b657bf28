#pragma once
// `ferryctl dlq list|show|redrive|purge` (actors/programs/ferryctl_dlq.cpp): the DLQ
// operations of the broker (dlq_* requests of broker_actor). ferryctl_main.cpp
// registers it.

#include "actors/client/admin.hpp"

#include <chrono>
#include <functional>

namespace CLI {
class App;
} // namespace CLI

namespace ferry::ctl {

/// Adds the `dlq` subcommand tree to `app`; `on_selected` runs when the
/// command line chose one of its subcommands.
void add_dlq_command(CLI::App& app, std::function<void()> on_selected);

/// Runs the chosen `ferryctl dlq` subcommand: 0 on success; throws
/// ctl::failure (ferryctl_common.hpp) otherwise. `json` prints JSON.
int run_dlq(admin_client& admin, bool json);

} // namespace ferry::ctl
