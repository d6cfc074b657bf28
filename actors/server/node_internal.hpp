#pragma once
// node_internal: what the files of the node actor share. The node is one
// actor (node.hpp); its code is split by concern, each file in
// namespace ferry::node_detail:
//   node.cpp          node(): the start and the behavior (one line per
//                     message, naming the function that handles it),
//                     readiness, the topic list, shutdown, down messages
//   node_replicas.cpp partition replicas follow the topic list
//   node_routing.cpp  routing and forwarding of partition requests
//   node_admin.cpp    topic and broker admin relayed to the metadata actor
//   node_describe.cpp cluster and topic describe
//   node_groups.cpp   consumer and queue groups, their coordinators and homes
//   node_dlq.cpp      DLQ relays
//   node_peers.cpp    peer links, registration, controller, Raft member
//   node_disk.cpp     disk sampling
// Below: the helpers every file uses (inline), then each file's functions.

#include "actors/server/node.hpp"


#include "actors/client/session.hpp"
#include "actors/server/metadata_import.hpp"
#include "actors/server/raft_metadata.hpp"
#include "actors/server/raft_node.hpp"
#include "broker/consumer_state.hpp"
#include "broker/error.hpp"
#include "broker/partitioner.hpp"
#include "broker/logging.hpp"
#include "broker/metadata_store.hpp"
#include "broker/offset_store.hpp"
#include "broker/raft_storage.hpp"
#include "metrics/group_probe.hpp"
#include "metrics/node_probe.hpp"
#include "metrics/partition_probe.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/unit.hpp>

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>
#include <system_error>

namespace ferry::node_detail {


using self_ptr = broker_actor::stateful_pointer<node_state>;
using clock_type = caf::actor_clock;
using time_point = caf::actor_clock::time_point;

inline time_point now(self_ptr self) {
  return self->home_system().clock().now();
}

inline std::string tp_name(const std::string& topic, partition_id p) {
  return topic + "-" + std::to_string(p.value);
}

inline bool hosts(const node_state& st, const partition_assignment& pa) {
  return std::find(pa.replicas.begin(), pa.replicas.end(), st.cfg.node_id)
           != pa.replicas.end()
         || pa.leader == st.cfg.node_id;
}

inline std::vector<topic_metadata> topic_list(const node_state& st) {
  std::vector<topic_metadata> out;
  out.reserve(st.topics.size());
  for (auto& [name, md] : st.topics)
    out.push_back(md);
  return out;
}

/// Runs `f` now if the node has its first topic list, else once it has.
template <class F>
void when_ready(self_ptr self, F f) {
  if (self->state.ready)
    f();
  else
    self->state.deferred.emplace_back(std::move(f));
}

/// Counts `err` as a failed client request (ferry_request_errors_total) and
/// returns it: wrap every error the node answers to a client.
inline caf::error failed(self_ptr self, caf::error err) {
  if (err && self->state.probe)
    self->state.probe->request_failed(err);
  return err;
}

/// Forwards a request to `dest` and relays its answer to `rp`, counting an
/// error answer. Used instead of delegation for admin and group requests
/// only (see the header): the data path keeps delegating. Requests to
/// another node go through forward_for() instead.
template <class T, class Dest, class... Ts>
void relay(self_ptr self, caf::typed_response_promise<T> rp, const Dest& dest,
           Ts&&... xs) {
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

/// Registers a client request forwarded to node `peer`: `fail` answers it
/// if the link to that node goes down first (see node_state::forwards).
/// Returns the id for forward_answered().
inline uint64_t track_forward(self_ptr self, int32_t peer,
                              std::function<void(const caf::error&)> fail) {
  auto& st = self->state;
  auto id = ++st.forward_seq;
  st.forwards[peer].emplace(id, std::move(fail));
  return id;
}

/// The answer to forward `id` came: true unless a lost link answered the
/// request already (the late answer is dropped then).
inline bool forward_answered(self_ptr self, int32_t peer, uint64_t id) {
  auto& fw = self->state.forwards;
  auto i = fw.find(peer);
  if (i == fw.end() || i->second.erase(id) == 0)
    return false;
  if (i->second.empty())
    fw.erase(i);
  return true;
}

/// The error a forward gets when the link to its node goes down first.
inline caf::error link_lost_error(int32_t peer) {
  return make_error(ec::request_timed_out,
                    "the link to node " + std::to_string(peer)
                      + ", which serves the request, went down before it "
                        "answered (the request may have been applied)");
}

/// Sends a request to another node's broker (node id `peer`) and hands its
/// answer to `ok` or its error to `fail`, exactly once: if the link to that
/// node goes down first, `fail` gets link_lost_error() at once and a late
/// answer is dropped (see node_state::forwards).
template <class T, class Ok, class Fail, class... Ts>
void forward_to(self_ptr self, int32_t peer, const broker_actor& dest,
                caf::timespan timeout, Ok ok, Fail fail, Ts&&... xs) {
  auto fid = track_forward(self, peer, [fail](const caf::error& e) mutable {
    auto err = e;
    fail(err);
  });
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .then(
      [self, peer, fid, ok](T& x) mutable {
        if (forward_answered(self, peer, fid))
          ok(x);
      },
      [self, peer, fid, fail](caf::error& err) mutable {
        if (forward_answered(self, peer, fid))
          fail(err);
      });
}

/// A request to another node's broker whose answer goes to `rp` (forward_to).
template <class T, class... Ts>
void forward_for(self_ptr self, caf::typed_response_promise<T> rp, int32_t peer,
                 const broker_actor& dest, caf::timespan timeout, Ts&&... xs) {
  forward_to<T>(
    self, peer, dest, timeout, [rp](T& x) mutable { rp.deliver(std::move(x)); },
    [self, rp](caf::error& err) mutable { rp.deliver(failed(self, std::move(err))); },
    std::forward<Ts>(xs)...);
}

/// forward_for() for requests without a reply value.
template <class... Ts>
void forward_void_for(self_ptr self, caf::response_promise rp, int32_t peer,
                      const broker_actor& dest, caf::timespan timeout, Ts&&... xs) {
  auto fid = track_forward(self, peer, [self, rp](const caf::error& err) mutable {
    rp.deliver(failed(self, err));
  });
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .then(
      [self, rp, peer, fid]() mutable {
        if (forward_answered(self, peer, fid))
          rp.deliver(caf::unit);
      },
      [self, rp, peer, fid](caf::error& err) mutable {
        if (forward_answered(self, peer, fid))
          rp.deliver(failed(self, std::move(err)));
      });
}

/// relay() for requests without a reply value.
template <class Dest, class... Ts>
void relay_void(self_ptr self, caf::response_promise rp, const Dest& dest,
                Ts&&... xs) {
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp]() mutable { rp.deliver(caf::unit); },
          [self, rp](caf::error& err) mutable {
            rp.deliver(failed(self, std::move(err)));
          });
}

// -- cluster helpers ----------------------------------------------------------

/// Started with --voters: peers, links, group homes, __consumer_state.
/// Without, the node is a Raft quorum of one (its metadata goes through the
/// same Raft path) but has no peers.
inline bool cluster_mode(const node_state& st) {
  return !st.cfg.voters.empty();
}

void schedule_recheck(self_ptr self, caf::timespan delay);
void check_topic_waiters(self_ptr self);

/// Whether the node can serve requests naming `topic` without waiting for
/// its metadata: it knows the topic, or it is a node of its own (whose
/// metadata is never behind).
inline bool knows_topics(const node_state& st, const std::string& topic) {
  return !cluster_mode(st) || st.topics.count(topic) > 0;
}

/// Runs `f` now if this node knows every topic in `topics` (or is a node of
/// its own, or is shutting down). In a cluster it otherwise runs `f` once
/// the topic list names them all or cfg.topic_wait has passed, whichever is
/// first (`f` then answers unknown_topic as it would have). A follower's
/// metadata trails the Raft leader's by about a heartbeat: without the wait
/// a client that creates a topic through one node and uses it through
/// another at once is told that it does not exist. (check_topic_waiters
/// resumes them, after reconcile has started the new replicas.)
template <class F>
void when_topics_known(self_ptr self, std::vector<std::string> topics, F f) {
  auto& st = self->state;
  auto known = [&st](const std::string& t) { return knows_topics(st, t); };
  if (st.shutting_down || st.cfg.topic_wait.count() <= 0
      || std::all_of(topics.begin(), topics.end(), known)) {
    f();
    return;
  }
  auto wait = std::chrono::duration_cast<caf::timespan>(st.cfg.topic_wait);
  st.topic_waiters.push_back(
    topic_waiter{std::move(topics), now(self) + wait, std::function<void()>{std::move(f)}});
  schedule_recheck(self, wait);
}

/// True once the metadata can be trusted for reconciling replicas: with a
/// Raft member (every node unless a test injects a metadata actor), once its
/// applied state caught up with the commit index; else at once.
inline bool metadata_caught_up(const node_state& st) {
  return !st.raft || st.cluster_ready;
}

/// The broker of the node leading `pa`, when that is another, linked node.
inline caf::actor leader_handle(const node_state& st,
                                const partition_assignment& pa) {
  if (!cluster_mode(st) || pa.leader < 0 || pa.leader == st.cfg.node_id)
    return {};
  auto i = st.peers.find(pa.leader);
  if (i == st.peers.end())
    return {};
  return caf::actor_cast<caf::actor>(i->second);
}

/// The handle a follower replica of `pa` fetches through: with `session`,
/// this node's fetch session to the leader's node (spawned on first use,
/// pointed at that node's current broker), else the broker itself; null
/// while the leader's node is not linked.
caf::actor replica_leader(self_ptr self, const partition_assignment& pa,
                          bool session);

/// How many partition replicas this node holds or is about to: the larger
/// of what the metadata places here and what runs (a reconcile spawns the
/// placed ones one by one). The partition count the per-node thresholds
/// (journal, fetch sessions) compare against.
inline size_t replica_count(const node_state& st) {
  return std::max(st.assigned_replicas, st.replicas.size());
}

/// Whether a replica spawned now fetches through a fetch session
/// (node_config::fetch_sessions, fetch_sessions_min_replicas).
bool use_fetch_session(const node_state& st);

/// True when the current message came from a peer node (it was forwarded
/// there already, or it is a peer's replica or quorum member). Ask it
/// before make_response_promise, which takes the sender out of the
/// current message (CAF 0.17), and before deferring (when_ready): after
/// either it answers false for every message.
inline bool from_peer(self_ptr self) {
  // With sessions, peers hold session proxies (local handles): the
  // envelope's cluster credential tells a peer's request apart instead.
  if (self->state.cfg.auth)
    return self->state.peer_call;
  auto& sender = self->current_sender();
  if (!sender || sender->node() == self->node())
    return false;
  for (auto& [id, b] : self->state.peers)
    if (b && b.node() == sender->node())
      return true;
  return false;
}

/// The leader id named in a not_leader error ("leader=<id>"), else the Raft
/// leader this node knows of.
inline int32_t leader_hint(const node_state& st, const caf::error& err) {
  if (err.context().match_elements<std::string>()) {
    const auto& ctx = err.context().get_as<std::string>(0);
    auto pos = ctx.rfind("leader=");
    if (pos != std::string::npos) {
      try {
        return std::stoi(ctx.substr(pos + 7));
      } catch (...) {
        // fall through
      }
    }
  }
  return st.raft_st.leader;
}

/// Sends a metadata request to the local metadata actor; `ok` gets the
/// answer. In a cluster a not_leader answer is forwarded once to the Raft
/// leader's node, whose answer goes to `ok` as well (errors to `rp`).
template <class T, class Ok, class... Ts>
void meta_call(self_ptr self, caf::typed_response_promise<T> rp,
               caf::timespan timeout, Ok ok, Ts... xs) {
  bool forwarded = from_peer(self);
  self->request(self->state.cfg.metadata, timeout, xs...)
    .then(
      [rp, ok](T& x) mutable { ok(rp, x); },
      [self, rp, ok, forwarded, timeout, xs...](caf::error& err) mutable {
        auto& st = self->state;
        if (!forwarded && cluster_mode(st) && is(err, ec::not_leader)) {
          auto id = leader_hint(st, err);
          auto p = st.peers.find(id);
          if (id != st.cfg.node_id && p != st.peers.end()) {
            self->request(p->second, timeout, xs...)
              .then([rp, ok](T& x) mutable { ok(rp, x); },
                    [self, rp](caf::error& e2) mutable {
                      rp.deliver(failed(self, std::move(e2)));
                    });
            return;
          }
        }
        rp.deliver(failed(self, std::move(err)));
      });
}

/// meta_call that answers `rp` with the local answer as it is.
template <class T, class... Ts>
void meta_relay(self_ptr self, caf::typed_response_promise<T> rp,
                caf::timespan timeout, Ts... xs) {
  meta_call(
    self, rp, timeout,
    [](caf::typed_response_promise<T>& p, T& x) { p.deliver(std::move(x)); },
    xs...);
}

// -- shared types ------------------------------------------------------------

/// Where a client's partition request goes: the local replica, or (in a
/// cluster) the broker of the leader's node.
struct route_target {
  partition_actor local;
  broker_actor remote;
  int32_t leader = -1; ///< the remote's node id
};

/// Where a group is coordinated (see group_home below).
struct group_home_t {
  bool local = true;
  broker_actor remote;
  caf::error err;
  int32_t node = -1; ///< the remote's node id
};

// -- node_auth.cpp ---------------------------------------------------------

/// The node's behavior: the in-band login and the session envelope in front
/// of `core` (which also serves bare requests when auth is off).
broker_actor::behavior_type serve_sessions(self_ptr self,
                                           broker_core_actor::behavior_type core);

/// The handle the node's own actors get (node_state::internal).
inline broker_actor internal_handle(self_ptr self) {
  auto& st = self->state;
  return st.internal ? st.internal : caf::actor_cast<broker_actor>(self);
}

/// Sends `xs` to the node itself: in an envelope with the cluster
/// credential when auth is on (a bare message would be refused).
template <class... Ts>
void send_self(self_ptr self, Ts&&... xs) {
  auto& st = self->state;
  if (st.cfg.auth) // (anonymous: the envelope's answer type is not ours)
    caf::anon_send(caf::actor_cast<caf::actor>(self), auth_atom_v,
                   st.cfg.cluster_credential, caf::make_message(std::forward<Ts>(xs)...));
  else
    self->send(self, std::forward<Ts>(xs)...);
}

template <class... Ts>
void delayed_send_self(self_ptr self, caf::timespan delay, Ts&&... xs) {
  auto& st = self->state;
  if (st.cfg.auth)
    caf::delayed_anon_send(caf::actor_cast<caf::actor>(self), delay, auth_atom_v,
                           st.cfg.cluster_credential,
                           caf::make_message(std::forward<Ts>(xs)...));
  else
    self->delayed_send(self, delay, std::forward<Ts>(xs)...);
}

// -- node.cpp --------------------------------------------------------------

void mark_ready(self_ptr self);
void topics_changed(self_ptr self);
void finish_shutdown(self_ptr self);
void replica_closed(self_ptr self, const topic_partition& key);
void begin_shutdown(self_ptr self, caf::error reason);
void on_down(self_ptr self, const caf::down_msg& dm);
void apply_topic_list(self_ptr self, std::vector<topic_metadata>& topics);
bool start_node(self_ptr self);

// -- node_replicas.cpp -----------------------------------------------------

void schedule_recheck(self_ptr self, caf::timespan delay);
void delete_replica_data(self_ptr self, const topic_partition& key);
void stop_replica(self_ptr self, const topic_partition& key,
                  partition_actor handle, bool remove);
void spawn_replica(self_ptr self, const topic_partition& key,
                   const topic_metadata& md, const partition_assignment& pa,
                   hosted_replica& r);
void reconcile(self_ptr self);
void gather_status(self_ptr self, const topic_metadata& md,
                   std::function<void(topic_description)> done);
bool replicas_exist(const node_state& st, const topic_metadata& md);
void check_create_waiters(self_ptr self);
void await_replicas(self_ptr self, topic_metadata md,
                    caf::typed_response_promise<topic_metadata> rp);

// -- node_describe.cpp -----------------------------------------------------

std::vector<node_info> cluster_nodes(self_ptr self);
void describe_cluster(self_ptr self, std::vector<topic_metadata> topics,
                      caf::typed_response_promise<cluster_description> rp);
caf::result<topic_description> describe_topic(self_ptr self, std::string& name);
caf::result<cluster_description> describe_cluster_request(self_ptr self);

// -- node_routing.cpp ------------------------------------------------------

caf::expected<partition_actor> route(self_ptr self, const std::string& topic,
                                     partition_id p);
/// `forwarded`: the request came from a peer (from_peer, asked when it
/// arrived): not forwarded again.
caf::expected<route_target> route_client(self_ptr self,
                                         const std::string& topic,
                                         partition_id p, bool follower,
                                         bool forwarded);
caf::result<produce_response> serve_produce(self_ptr self,
                                            produce_request& req);

/// A multi-partition produce (broker_actor): every request served as
/// serve_produce would, the answers gathered in order.
caf::result<std::vector<produce_result>>
serve_produce_many(self_ptr self, std::vector<produce_request>& reqs);
/// The answers of a multi-partition produce are all in (produce_gather.hpp):
/// counts the replicas' errors and answers the client.
void produce_gathered_in(self_ptr self, produce_gathered& x);
caf::result<fetch_response> serve_fetch(self_ptr self, fetch_request& req);
caf::result<std::vector<fetch_result>>
serve_fetch_round(self_ptr self, fetch_round& rd);
caf::result<offset> serve_list_offsets(self_ptr self,
                                       list_offsets_request& req);
caf::result<epoch_end> serve_epoch_end(self_ptr self, epoch_end_request& req);
caf::result<offset> purge_partition(self_ptr self, topic_partition& tp,
                                    offset before);
caf::result<partition_status> serve_partition_status(self_ptr self,
                                                     const topic_partition& tp);

// -- node_groups.cpp -------------------------------------------------------

group_coordinator_actor spawn_coordinator(self_ptr self,
                                          const std::string& group);
caf::expected<group_coordinator_actor>
coordinator(self_ptr self, const std::string& group, bool create);
queue_coordinator_actor spawn_queue_coordinator(self_ptr self,
                                                const std::string& group);
bool known_queue_group(self_ptr self, const std::string& group);
caf::error check_new_queue_group(self_ptr self, const std::string& group,
                                 const queue_group_config& qc);
caf::expected<queue_coordinator_actor>
queue_coordinator_for(self_ptr self, const std::string& group,
                      const queue_group_config* create,
                      bool create_default = false);
std::optional<int32_t> state_leader(const node_state& st,
                                    const std::string& key);
group_home_t home_at(self_ptr self, std::optional<int32_t> leader,
                     const std::string& what, bool forwarded);
/// coordinator_not_available while this node must not act as the home of a
/// group or DLQ that its metadata says it leads because the process stalled
/// (a SIGSTOP, a frozen VM: stall_watch.hpp) longer than the controller
/// waits before it fences a broker, within the last stall_quarantine: its
/// leaderships may have moved meanwhile without its knowing (found by the
/// chaos suite: a node back from a SIGSTOP answered an offset fetch from
/// its store while the group had moved and committed on elsewhere). Else
/// none. Cluster mode only.
caf::error stalled_home_error(self_ptr self);

/// Whether this node's replica of the __consumer_state partition of `key`
/// (a group, or dlq_home_key of a DLQ) has replayed its log into the
/// node's stores (false without such a replica).
bool state_loaded(const node_state& st, const std::string& key);
/// `forwarded`: asked for a request a peer forwarded here (from_peer, asked
/// when it arrived), which is never forwarded again.
group_home_t group_home(self_ptr self, const std::string& group, bool forwarded = false);
void sync_group_homes(self_ptr self);
caf::result<join_group_response> join_group(self_ptr self,
                                            join_group_request& req);
caf::result<sync_group_response> sync_group(self_ptr self,
                                            sync_group_request& req);
caf::result<void> heartbeat_group(self_ptr self, heartbeat_request& req);
caf::result<void> leave_group(self_ptr self, leave_group_request& req);
caf::result<void> commit_offsets(self_ptr self, commit_offsets_request& req);
caf::result<std::vector<partition_offset>>
fetch_offsets(self_ptr self, fetch_offsets_request& req);
caf::result<std::vector<group_description>> list_groups(self_ptr self);
caf::result<std::vector<queue_group_description>> list_queue_groups(self_ptr self);
caf::result<group_description> describe_group(self_ptr self,
                                              std::string& group);
caf::result<std::vector<partition_offset>>
reset_offsets(self_ptr self, reset_offsets_request& req);
caf::result<void> delete_group(self_ptr self, std::string& group);
caf::result<queue_group_config> create_queue_group(self_ptr self,
                                                   std::string& group,
                                                   queue_group_config& qc);
caf::result<std::vector<leased_message>>
receive_queued(self_ptr self, queue_receive_request& req);
caf::result<queue_ack_response> ack_queued(self_ptr self,
                                           queue_ack_request& req);
caf::result<queue_group_description> describe_queue_group(self_ptr self,
                                                          std::string& group);
caf::result<queue_group_config> alter_queue_group(self_ptr self,
                                                  std::string& group,
                                                  queue_group_config& qc);
caf::result<int64_t> leave_queue_group(self_ptr self, std::string& group,
                                       std::string& member);

// -- node_dlq.cpp ----------------------------------------------------------

dlq_manager_actor dlq_manager_of(self_ptr self);
group_home_t dlq_home(self_ptr self, const std::string& topic);
caf::result<std::vector<dlq_info>> list_dlqs_at_homes(self_ptr self);
caf::result<dlq_show_response> show_dlq(self_ptr self, dlq_show_request& req);
caf::result<dlq_redrive_response> redrive_dlq(self_ptr self,
                                              dlq_redrive_request& req);
caf::result<dlq_purge_response> purge_dlq(self_ptr self,
                                          dlq_purge_request& req);

// -- node_admin.cpp --------------------------------------------------------

caf::result<producer_identity> init_producer_id(self_ptr self);
caf::result<topic_metadata> create_topic(self_ptr self, std::string& name,
                                         topic_config& tc);
caf::result<topic_metadata> delete_topic(self_ptr self, std::string& name);
caf::result<std::vector<topic_metadata>> list_topics(self_ptr self);
caf::result<topic_metadata> alter_topic(self_ptr self, std::string& name,
                                        std::map<std::string,
                                        std::string>& changes);
caf::result<topic_metadata> add_partitions(self_ptr self, std::string& name,
                                           int32_t n);
caf::result<broker_registration> register_broker(self_ptr self,
                                                 broker_registration& reg);
caf::result<partition_assignment> alter_isr(self_ptr self, isr_change& ch);
caf::result<partition_assignment> reassign_partition(self_ptr self,
                                                     isr_change& ch);
caf::result<broker_registration> remove_broker(self_ptr self, int32_t id);
caf::result<user_info> upsert_user(self_ptr self, scram_credential& c);
caf::result<user_info> delete_user(self_ptr self, std::string& name);
caf::result<std::vector<user_info>> list_users(self_ptr self);
caf::result<acl_entry> add_acl(self_ptr self, acl_entry& x);
caf::result<std::vector<acl_entry>> remove_acl(self_ptr self, acl_entry& x);
caf::result<std::vector<acl_entry>> list_acls(self_ptr self);

// -- node_peers.cpp --------------------------------------------------------

connection_listener::behavior_type
peer_listener(connection_listener::pointer self, int32_t id, caf::actor node);
bool is_controller(const node_state& st);
void register_self(self_ptr self);
void control(self_ptr self);
void probe_peer(self_ptr self, int32_t id);
bool dials_first(const node_state& st, int32_t id);
void stop_link_actors(self_ptr self, int32_t id);
void dial(self_ptr self, int32_t id, ferry::broker_actor adopt = {});
void park_link(self_ptr self, int32_t id);
void peer_probed(self_ptr self, int32_t id, const caf::strong_actor_ptr& sender);
void repair_route(self_ptr self, int32_t id);
void tend_parked_links(self_ptr self);
void cluster_tick(self_ptr self);
void close_link(self_ptr self, int32_t id);
void open_link(self_ptr self, int32_t id, const std::string& host,
               uint16_t port);
bool is_voter(const node_state& st, int32_t id);
void sync_broker_links(self_ptr self);
caf::error start_metadata_quorum(self_ptr self);
void deliver_raft_message(self_ptr self, raft_message& m);
caf::result<raft_log_chunk> fetch_raft_log(self_ptr self, uint64_t after);
void peer_link_changed(self_ptr self, int32_t id, const caf::actor& peer);
void raft_status_changed(self_ptr self, const raft_status& rs);

// -- node_disk.cpp ---------------------------------------------------------

caf::behavior disk_sampler(caf::event_based_actor* self,
                           std::shared_ptr<metrics::node_probe> probe,
                           std::filesystem::path dir, caf::timespan interval,
                           caf::actor_addr node,
                           std::shared_ptr<node_journal> journal,
                           std::shared_ptr<log_cleaner> cleaner);

} // namespace ferry::node_detail
