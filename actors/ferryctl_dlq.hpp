#pragma once
// `ferryctl dlq list|show|redrive|purge` (actors/ferryctl_dlq.cpp): the DLQ
// operations of the broker (dlq_* requests of broker_actor). ferryctl_main.cpp
// registers it.

#include "actors/client_connection.hpp"

#include <chrono>
#include <functional>

namespace CLI {
class App;
} // namespace CLI

namespace ferry::ctl {

/// Adds the `dlq` subcommand tree to `app`; `on_selected` runs when the
/// command line chose one of its subcommands.
void add_dlq_command(CLI::App& app, std::function<void()> on_selected);

/// Runs the chosen `ferryctl dlq` subcommand: 0 on success, 1 on failure
/// (one line `ferryctl: <code>: <what>` on stderr). `json` prints JSON.
int run_dlq(caf::actor_system& sys, broker_actor broker, bool json,
            std::chrono::milliseconds timeout);

} // namespace ferry::ctl
