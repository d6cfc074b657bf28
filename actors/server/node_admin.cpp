// The node actor's admin relays: topic admin, producer ids, broker
// registration, ISR and replica changes, all answered by the metadata actor
// (meta_call). (See node_internal.hpp for how the node's files divide the
// work.)

#include "actors/server/node_internal.hpp"

namespace ferry::node_detail {


caf::result<producer_identity> init_producer_id(self_ptr self) {
  auto rp = self->make_response_promise<producer_identity>();
  meta_relay(self, rp, std::chrono::seconds{10}, init_pid_atom_v);
  return rp;
}

caf::result<topic_metadata> create_topic(self_ptr self, std::string& name,
                                         topic_config& tc) {
  auto rp = self->make_response_promise<topic_metadata>();
  auto& st = self->state;
  meta_call(
    self, rp, st.cfg.create_timeout,
    [self](caf::typed_response_promise<topic_metadata>& p,
           topic_metadata& md) {
      await_replicas(self, std::move(md), p);
    },
    create_atom_v, topic_atom_v, std::move(name), std::move(tc));
  return rp;
}

caf::result<topic_metadata> delete_topic(self_ptr self, std::string& name) {
  auto rp = self->make_response_promise<topic_metadata>();
  meta_relay(self, rp, self->state.cfg.create_timeout, delete_atom_v,
             topic_atom_v, std::move(name));
  return rp;
}

caf::result<std::vector<topic_metadata>> list_topics(self_ptr self) {
  auto rp = self->make_response_promise<std::vector<topic_metadata>>();
  // Asked once the node is ready: before, the metadata may not have caught
  // up (a restarted Raft member), and a client told that its topic does
  // not exist gives up (the producer takes unknown_topic as final).
  when_ready(self, [self, rp]() mutable {
    relay(self, rp, self->state.cfg.metadata, list_atom_v, topic_atom_v);
  });
  return rp;
}

caf::result<topic_metadata> alter_topic(self_ptr self, std::string& name,
                                        std::map<std::string,
                                        std::string>& changes) {
  auto rp = self->make_response_promise<topic_metadata>();
  meta_relay(self, rp, self->state.cfg.create_timeout, alter_atom_v,
             topic_atom_v, std::move(name), std::move(changes));
  return rp;
}

caf::result<topic_metadata> add_partitions(self_ptr self, std::string& name,
                                           int32_t n) {
  auto rp = self->make_response_promise<topic_metadata>();
  auto& st = self->state;
  meta_call(
    self, rp, st.cfg.create_timeout,
    [self](caf::typed_response_promise<topic_metadata>& p,
           topic_metadata& md) {
      await_replicas(self, std::move(md), p);
    },
    add_parts_atom_v, std::move(name), n);
  return rp;
}

caf::result<broker_registration> register_broker(self_ptr self,
                                                 broker_registration& reg) {
  auto rp = self->make_response_promise<broker_registration>();
  meta_relay(self, rp, std::chrono::seconds{5}, update_atom_v,
             broker_atom_v, std::move(reg));
  return rp;
}

caf::result<partition_assignment> alter_isr(self_ptr self, isr_change& ch) {
  auto rp = self->make_response_promise<partition_assignment>();
  meta_relay(self, rp, std::chrono::seconds{5}, alter_atom_v, isr_atom_v,
             std::move(ch));
  return rp;
}

caf::result<partition_assignment> reassign_partition(self_ptr self,
                                                     isr_change& ch) {
  // A node without --voters is a quorum of one broker: nothing can move.
  if (!cluster_mode(self->state))
    return failed(self, make_error(ec::policy_violation,
                                   "cannot move the replicas of " + ch.topic
                                     + "/" + std::to_string(ch.partition.value)
                                     + ": a single-node cluster has one "
                                       "broker"));
  auto rp = self->make_response_promise<partition_assignment>();
  meta_relay(self, rp, self->state.cfg.create_timeout, assign_atom_v,
             std::move(ch));
  return rp;
}

caf::result<broker_registration> remove_broker(self_ptr self, int32_t id) {
  if (!cluster_mode(self->state))
    return failed(self, make_error(ec::policy_violation,
                                   "cannot remove node " + std::to_string(id)
                                     + ": a single-node cluster has one broker "
                                       "(start ferryd with --voters to run a "
                                       "cluster)"));
  auto rp = self->make_response_promise<broker_registration>();
  meta_relay(self, rp, std::chrono::seconds{5}, delete_atom_v,
             broker_atom_v, id);
  return rp;
}

caf::result<user_info> upsert_user(self_ptr self, scram_credential& c) {
  auto rp = self->make_response_promise<user_info>();
  meta_relay(self, rp, self->state.cfg.create_timeout, update_atom_v,
             user_atom_v, std::move(c));
  return rp;
}

caf::result<user_info> delete_user(self_ptr self, std::string& name) {
  auto rp = self->make_response_promise<user_info>();
  meta_relay(self, rp, self->state.cfg.create_timeout, delete_atom_v,
             user_atom_v, std::move(name));
  return rp;
}

caf::result<std::vector<user_info>> list_users(self_ptr self) {
  auto rp = self->make_response_promise<std::vector<user_info>>();
  relay(self, rp, self->state.cfg.metadata, list_atom_v, user_atom_v);
  return rp;
}

caf::result<acl_entry> add_acl(self_ptr self, acl_entry& x) {
  auto rp = self->make_response_promise<acl_entry>();
  meta_relay(self, rp, self->state.cfg.create_timeout, create_atom_v,
             acl_atom_v, std::move(x));
  return rp;
}

caf::result<std::vector<acl_entry>> remove_acl(self_ptr self, acl_entry& x) {
  auto rp = self->make_response_promise<std::vector<acl_entry>>();
  meta_relay(self, rp, self->state.cfg.create_timeout, delete_atom_v,
             acl_atom_v, std::move(x));
  return rp;
}

caf::result<std::vector<acl_entry>> list_acls(self_ptr self) {
  auto rp = self->make_response_promise<std::vector<acl_entry>>();
  relay(self, rp, self->state.cfg.metadata, list_atom_v, acl_atom_v);
  return rp;
}

} // namespace ferry::node_detail
