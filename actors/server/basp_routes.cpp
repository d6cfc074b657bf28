#include "actors/server/basp_routes.hpp"

#include "broker/logging.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>

#include <algorithm>
#include <vector>

namespace ferry {

void reset_basp_connections(caf::actor_system& sys, const caf::node_id& peer) {
  if (!peer || !sys.has_middleman())
    return;
  auto& mm = sys.middleman();
  auto hdl = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto* broker = dynamic_cast<caf::io::basp_broker*>(
    caf::actor_cast<caf::abstract_actor*>(hdl));
  if (broker == nullptr)
    return;
  // `hdl` keeps the broker alive until the function ran.
  mm.backend().dispatch([broker, hdl, peer] {
    auto& tbl = broker->instance.tbl();
    std::vector<caf::io::connection_handle> doomed;
    for (auto& [conn, ec] : broker->ctx)
      if (ec.id == peer)
        doomed.push_back(conn);
    if (auto conn = tbl.lookup_direct(peer);
        conn && std::find(doomed.begin(), doomed.end(), *conn) == doomed.end())
      doomed.push_back(*conn);
    for (auto conn : doomed) {
      // A connection the table maps to no node (the broken case): map it to
      // the peer, so that the cleanup below drops the peer's route through
      // it and its proxies, as for any lost connection.
      if (!tbl.lookup_direct(conn)) {
        tbl.erase_direct(conn);
        tbl.add_alternative(conn, peer);
      }
      broker->connection_cleanup(conn, caf::sec::connection_timeout);
      broker->close(conn);
    }
    if (!doomed.empty())
      log::warn("node: closed {} connection(s) to CAF node {} to rebuild its "
                "routes",
                doomed.size(), caf::to_string(peer));
  });
}

} // namespace ferry
