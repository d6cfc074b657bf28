#include "actors/server/front_door.hpp"

#include "actors/server/node.hpp"
#include "broker/audit_log.hpp"
#include "broker/error.hpp"
#include "broker/logging.hpp"
#include "broker/security.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_config.hpp>
#include <caf/actor_system.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/make_actor.hpp>
#include <caf/monitorable_actor.hpp>

#include <atomic>

namespace ferry {

namespace {

/// Why `msg` may not pass, or no error.
caf::error refusal(const front_door_config& cfg, caf::message& msg) {
  if (msg.match_elements<auth_atom, sasl_step>())
    return caf::error{};
  if (msg.match_elements<auth_atom, std::string, caf::message>()) {
    auto& cred = msg.get_as<std::string>(1);
    if (!cfg.cluster_credential.empty()
        && cred.compare(0, cluster_credential_prefix.size(), cluster_credential_prefix) == 0)
      return make_error(ec::authentication_failed,
                        "the cluster credential is not accepted on the client port "
                        "(nodes use the peer port)");
    if (is_node_to_node_request(msg.get_as<caf::message>(2)))
      return make_error(ec::authorization_failed,
                        "node-to-node requests are not served on the client port "
                        "(nodes use the peer port)");
    return caf::error{};
  }
  // Everything the ACLs do not name, system messages (exit, down, link)
  // included: for the front door they are just messages from a client.
  if (is_node_to_node_request(msg))
    return make_error(ec::authorization_failed,
                      "node-to-node requests are not served on the client port "
                      "(nodes use the peer port)");
  return caf::error{};
}

/// An actor without a mailbox (like CAF's decorators): enqueue() checks each
/// message and passes it to the node at once, on the caller's thread (the
/// clients' system's multiplexer). It has no behavior and no system message
/// handling, so no message a client sends (an exit_msg with reason kill, a
/// forged down_msg) can end it; it lives as long as it is referenced (the
/// published port holds it).
class front_door_actor : public caf::monitorable_actor {
public:
  explicit front_door_actor(front_door_config door)
    : caf::monitorable_actor(caf::actor_config{}.add_flag(is_actor_dot_decorator_flag)),
      cfg_(std::move(door)) {
    // nop
  }

  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit* ctx) override {
    if (!what || what->mid.is_response())
      return; // the front door asks nothing: a response is forged
    auto msg = what->move_content_to_message();
    if (auto err = refusal(cfg_, msg)) {
      refuse(*what, std::move(err), ctx);
      return;
    }
    // Enqueued with no execution unit: CAF would otherwise schedule the
    // node on the caller's thread, which belongs to the clients' system.
    auto node = caf::actor_cast<caf::strong_actor_ptr>(cfg_.node);
    node->enqueue(caf::make_mailbox_element(std::move(what->sender), what->mid,
                                            std::move(what->stages), std::move(msg)),
                  nullptr);
  }

  const char* name() const override {
    return "ferry.front_door";
  }

private:
  void refuse(caf::mailbox_element& what, caf::error err, caf::execution_unit* ctx) {
    auto source = what.sender ? "caf:" + caf::to_string(what.sender->node())
                              : std::string{"caf:anonymous"};
    auto n = ++refused_;
    if (n <= 10 || n % 1000 == 0)
      log::warn("front door: refused a request from {} ({} so far): {}", source, n,
                describe(err));
    if (cfg_.audit) {
      audit_event e;
      e.principal = "anonymous";
      e.source = std::move(source);
      e.via = "caf";
      e.action = "node-to-node request";
      e.resource = "cluster";
      e.outcome = "denied";
      e.detail = describe(err);
      cfg_.audit->write(e);
    }
    if (what.sender && what.mid.is_request())
      what.sender->enqueue(caf::make_mailbox_element(caf::strong_actor_ptr{ctrl()},
                                                     what.mid.response_id(), {},
                                                     std::move(err)),
                           ctx);
  }

  const front_door_config cfg_;
  std::atomic<uint64_t> refused_{0};
};

} // namespace

broker_actor spawn_front_door(caf::actor_system& sys, front_door_config cfg) {
  auto door = caf::make_actor<front_door_actor, caf::actor>(sys.next_actor_id(), sys.node(),
                                                            &sys, std::move(cfg));
  return caf::actor_cast<broker_actor>(door);
}

} // namespace ferry
