#pragma once
// `ferryctl user create|delete|list` and `ferryctl acl add|remove|list`
// (actors/programs/ferryctl_security.cpp): the users and ACLs of the metadata
// quorum (issue 16). ferryctl_main.cpp registers them.

#include "actors/client/admin.hpp"

#include <functional>

namespace CLI {
class App;
} // namespace CLI

namespace ferry::ctl {

/// Adds the `user` and `acl` subcommand trees to `app`; `on_selected` runs
/// when the command line chose one of their subcommands.
void add_security_commands(CLI::App& app, std::function<void()> on_selected);

/// Runs the chosen subcommand: 0 on success; throws ctl::failure
/// (ferryctl_common.hpp) otherwise. `json` prints JSON.
int run_security(admin_client& admin, bool json);

} // namespace ferry::ctl
