#include "metrics/exposer.hpp"

#include "broker/error.hpp"
#include "metrics/metrics.hpp"

#include <prometheus/exposer.h>
#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <exception>

namespace ferry::metrics {

namespace {

// The port of "host:port"; nullopt-like -1 when malformed.
int parse_port(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size())
    return -1;
  int port = -1;
  auto first = host_port.data() + colon + 1;
  auto last = host_port.data() + host_port.size();
  auto [ptr, err] = std::from_chars(first, last, port);
  if (err != std::errc{} || ptr != last || port < 0 || port > 65535)
    return -1;
  return port;
}

} // namespace

caf::expected<std::unique_ptr<exposer>>
exposer::start(const std::string& host_port, std::shared_ptr<registry> reg) {
  if (!reg)
    return make_error(ec::invalid_argument, "metrics exposer needs a registry");
  auto port = parse_port(host_port);
  // civetweb reads ',' as a list of addresses and a trailing 's'/'r' as
  // TLS/redirect flags: only plain "host:port" is accepted here.
  if (port < 0 || host_port.find(',') != std::string::npos)
    return make_error(ec::invalid_argument,
                      "metrics address '" + host_port
                        + "' is not host:port (e.g. 127.0.0.1:9464)");
  std::unique_ptr<exposer> out{new exposer};
  out->reg_ = std::move(reg);
  out->address_ = host_port;
  try {
    // One thread serves scrapes; Prometheus scrapes one at a time.
    out->impl_ = std::make_unique<prometheus::Exposer>(host_port, 1);
  } catch (const std::exception& e) {
    return make_error(ec::io_error, "cannot serve metrics on " + host_port
                                      + " (port in use or address not "
                                        "local?): "
                                      + e.what());
  }
  out->impl_->RegisterCollectable(out->reg_->collectable());
  auto ports = out->impl_->GetListeningPorts();
  out->port_ = ports.empty() ? static_cast<uint16_t>(port)
                             : static_cast<uint16_t>(ports.front());
  return out;
}

exposer::~exposer() = default;

std::string text_format(registry& reg) {
  auto families = reg.collectable()->Collect();
  return prometheus::TextSerializer{}.Serialize(families);
}

} // namespace ferry::metrics
