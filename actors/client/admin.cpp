#include "actors/client/admin.hpp"

#include "broker/error.hpp"

#include <thread>

namespace ferry {

bool is_retriable_admin_error(const caf::error& err) {
  auto code = code_of(err);
  return code == ec::not_leader || code == ec::coordinator_not_available;
}

admin_client::admin_client(caf::actor_system& sys, broker_actor broker,
                           std::chrono::milliseconds timeout)
  : broker_(std::move(broker)), timeout_(timeout), self_(sys) {
}

void admin_client::pause() {
  std::this_thread::sleep_for(admin_retry_backoff);
}

caf::expected<topic_metadata>
admin_client::create_topic(const std::string& name, const topic_config& cfg) {
  return request<topic_metadata>(create_atom_v, topic_atom_v, name, cfg);
}

caf::expected<topic_metadata> admin_client::delete_topic(const std::string& name) {
  return request<topic_metadata>(delete_atom_v, topic_atom_v, name);
}

caf::expected<std::vector<topic_metadata>> admin_client::list_topics() {
  return request<std::vector<topic_metadata>>(list_atom_v, topic_atom_v);
}

caf::expected<topic_description>
admin_client::describe_topic(const std::string& name) {
  return request<topic_description>(describe_atom_v, topic_atom_v, name);
}

caf::expected<cluster_description> admin_client::describe_cluster() {
  return request<cluster_description>(cluster_atom_v);
}

caf::expected<std::vector<group_description>> admin_client::list_groups() {
  return request<std::vector<group_description>>(list_atom_v, group_atom_v);
}

caf::expected<group_description>
admin_client::describe_group(const std::string& group) {
  return request<group_description>(describe_atom_v, group_atom_v, group);
}

caf::expected<std::vector<dlq_info>> admin_client::list_dlqs() {
  return request<std::vector<dlq_info>>(list_atom_v, dlq_atom_v);
}

} // namespace ferry
