#pragma once
// An actor system for the client actors of a multi-process test. Actors
// handed to track() are killed before the system shuts down (it waits for
// all actors), so a failed assertion cannot leave a test hanging on a live
// producer or consumer.

#include "actors/client/client_connection.hpp"
#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <memory>
#include <vector>

namespace ferry::test {

struct client_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<caf::actor> tracked;

  client_system() {
    ferry::configure_client(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  /// Every connection of this system uses TLS with these files.
  explicit client_system(const ferry::tls_settings& tls) {
    ferry::configure_client(cfg);
    ferry::configure_tls(cfg, tls);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  /// The same, logging in with `creds` (actors/client/session.hpp).
  client_system(const ferry::tls_settings& tls, const ferry::client_credentials& creds) {
    ferry::configure_client(cfg);
    ferry::configure_tls(cfg, tls);
    ferry::configure_credentials(cfg, creds);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  client_system(const client_system&) = delete;
  client_system& operator=(const client_system&) = delete;

  ~client_system() {
    for (auto& a : tracked)
      caf::anon_send_exit(a, caf::exit_reason::kill);
    tracked.clear();
    sys.reset();
  }

  template <class Handle>
  Handle track(Handle h) {
    tracked.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
};

} // namespace ferry::test
