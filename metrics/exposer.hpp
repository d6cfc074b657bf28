#pragma once
// exposer: serves a metrics::registry over HTTP at /metrics in the
// Prometheus text format (prometheus-cpp's Exposer on civetweb, with its own
// threads; scrapes never touch the actor system).
//
// Lifecycle: start() binds and starts serving, or returns the error (port
// taken, bad address) instead of throwing like prometheus::Exposer does.
// The exposer holds the registry alive (prometheus::Exposer itself only
// keeps a weak_ptr) and stops serving when destroyed. Destruction takes up
// to 2 s: civetweb's listener polls in 2 s quanta (compile-time constant).

#include <caf/expected.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Exposer;
} // namespace prometheus

namespace ferry::metrics {

class registry;

/// The Prometheus text format of everything in `reg` (what /metrics
/// serves); thread-safe. ferryd serves it over TLS with the HTTP gateway's
/// metrics mode, since civetweb's TLS does not work with OpenSSL 3.
std::string text_format(registry& reg);

class exposer {
public:
  /// Serves `reg` at http://<host_port>/metrics. `host_port` is
  /// "127.0.0.1:9464", "0.0.0.0:9464" or "[::1]:9464"; port 0 picks a free
  /// one (see port()). Errors: invalid_argument for a malformed address,
  /// io_error when it cannot listen (e.g. the port is in use), each naming
  /// the address.
  static caf::expected<std::unique_ptr<exposer>>
  start(const std::string& host_port, std::shared_ptr<registry> reg);

  ~exposer();
  exposer(const exposer&) = delete;
  exposer& operator=(const exposer&) = delete;

  /// The port it listens on (the chosen one if started with port 0).
  uint16_t port() const { return port_; }

  /// The address it was started with.
  const std::string& address() const { return address_; }

private:
  exposer() = default;

  // Declared first: the server stops before the registry may go away.
  std::shared_ptr<registry> reg_;
  std::unique_ptr<prometheus::Exposer> impl_;
  std::string address_;
  uint16_t port_ = 0;
};

} // namespace ferry::metrics
