#include "actors/server/front_door.hpp"

#include "actors/server/node.hpp"
#include "broker/audit_log.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/security.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

namespace ferry {

namespace {

struct door_state {
  front_door_config cfg;
  uint64_t refused = 0;
  static inline const char* name = "ferry.front_door";
};


/// Why `msg` may not pass, or an empty string.
caf::error refusal(const door_state& st, caf::message& msg) {
  if (msg.match_elements<auth_atom, sasl_step>())
    return {};
  if (msg.match_elements<auth_atom, std::string, caf::message>()) {
    auto& cred = msg.get_as<std::string>(1);
    if (!st.cfg.cluster_credential.empty()
        && cred.compare(0, cluster_credential_prefix.size(), cluster_credential_prefix) == 0)
      return make_error(ec::authentication_failed,
                        "the cluster credential is not accepted on the client port "
                        "(nodes use the peer port)");
    if (is_node_to_node_request(msg.get_as<caf::message>(2)))
      return make_error(ec::authorization_failed,
                        "node-to-node requests are not served on the client port "
                        "(nodes use the peer port)");
    return {};
  }
  if (is_node_to_node_request(msg))
    return make_error(ec::authorization_failed,
                      "node-to-node requests are not served on the client port "
                      "(nodes use the peer port)");
  return {};
}

caf::behavior front_door(caf::stateful_actor<door_state>* self, front_door_config cfg) {
  self->state.cfg = std::move(cfg);
  self->monitor(self->state.cfg.node);
  self->set_down_handler([self](const caf::down_msg& msg) {
    if (msg.source == self->state.cfg.node.address())
      self->quit(msg.reason);
  });
  // The node's own handle never ends up in the clients' system: messages
  // to it are built here and enqueued with no execution unit.
  self->set_default_handler(
    [self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
      auto& st = self->state;
      auto* el = self->current_mailbox_element();
      if (el == nullptr || el->mid.is_response())
        return caf::delegated<caf::message>{}; // nothing to answer
      auto msg = x.move_content_to_message();
      if (auto err = refusal(st, msg)) {
        auto source = el->sender ? "caf:" + caf::to_string(el->sender->node())
                                 : std::string{"caf:anonymous"};
        if (++st.refused <= 10 || st.refused % 1000 == 0)
          log::warn("front door: refused a request from {} ({} so far): {}", source,
                    st.refused, describe(err));
        if (st.cfg.audit) {
          audit_event e;
          e.principal = "anonymous";
          e.source = std::move(source);
          e.via = "caf";
          e.action = "node-to-node request";
          e.resource = "cluster";
          e.outcome = "denied";
          e.detail = describe(err);
          st.cfg.audit->write(e);
        }
        return err;
      }
      auto sender = std::move(el->sender);
      auto stages = std::move(el->stages);
      auto mid = el->mid;
      auto node = caf::actor_cast<caf::strong_actor_ptr>(st.cfg.node);
      node->enqueue(caf::make_mailbox_element(std::move(sender), mid, std::move(stages),
                                              std::move(msg)),
                    nullptr);
      return caf::delegated<caf::message>{};
    });
  return {[](caf::unit_t) {}};
}

} // namespace

broker_actor spawn_front_door(caf::actor_system& sys, front_door_config cfg) {
  return caf::actor_cast<broker_actor>(sys.spawn(front_door, std::move(cfg)));
}

} // namespace ferry
