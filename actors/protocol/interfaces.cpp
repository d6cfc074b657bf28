#include "actors/protocol/interfaces.hpp"

#include "broker/error.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace ferry {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::ferry>();
  cfg.add_message_types<caf::id_block::ferry_actors>();
  cfg.add_error_category(ferry_category(), [](uint8_t code, caf::atom_value,
                                              const caf::message& ctx) {
    return describe(caf::error{code, ferry_category(), ctx});
  });
}

} // namespace ferry
