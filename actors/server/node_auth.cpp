// The node actor's sessions on the CAF port (issue 16): the in-band SCRAM
// login, the session envelope and the ACL check of every request that
// comes in one (see broker_actor in actors/protocol/interfaces.hpp).
//
// The envelope (auth_atom, credential, request) is checked here, then the
// request runs through the node's ordinary handlers (node_state::core) in
// the same step, so its answer goes to the original requester as usual.
// Lists (topics, groups, DLQs) and group descriptions are asked again of
// the node itself with the cluster credential and filtered to what the
// caller may describe before they are answered; admin changes are relayed
// the same way so the audit log records their outcome.

#include "actors/server/node_internal.hpp"

#include "actors/client/session.hpp"
#include "broker/audit_log.hpp"
#include "broker/scram_exchange.hpp"

#include <caf/detail/invoke_result_visitor.hpp>

#include <openssl/rand.h>

namespace ferry::node_detail {

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// Where a request came from, for logs and the audit log: CAF shows actors
/// the sender's node id, not an address.
std::string source_of(self_ptr self) {
  auto& s = self->current_sender();
  if (!s)
    return "caf:anonymous";
  return "caf:" + caf::to_string(s->node());
}

void audit(self_ptr self, const std::string& user, std::string action,
           std::string resource, std::string outcome, std::string detail = {}) {
  auto& a = self->state.cfg.audit;
  if (!a)
    return;
  audit_event e;
  e.principal = user.empty() ? "anonymous" : "User:" + user;
  e.source = source_of(self);
  e.via = "caf";
  e.action = std::move(action);
  e.resource = std::move(resource);
  e.outcome = std::move(outcome);
  e.detail = std::move(detail);
  a->write(e);
}

std::string resource_text(std::string_view type, std::string_view name) {
  if (type == "cluster")
    return "cluster";
  return std::string{type} + " " + std::string{name};
}

// -- the login ----------------------------------------------------------------------

constexpr size_t max_pending_logins = 1024;
constexpr auto login_step_timeout = std::chrono::seconds{30};

caf::error login_refused() {
  return make_error(ec::authentication_failed, "authentication failed");
}

/// Counts a failed login of `user`; past login_failures_allowed each one
/// locks the name out for a doubling time.
void login_failed(self_ptr self, const std::string& user, const std::string& why) {
  auto& st = self->state;
  if (st.failures.size() >= 65536)
    st.failures.clear();
  auto& f = st.failures[user];
  ++f.count;
  auto over = f.count - st.cfg.login_failures_allowed;
  if (over >= 0) {
    auto wait = st.cfg.login_lockout_base * (int64_t{1} << std::min(over, 20));
    f.locked_until = now(self) + std::min(wait, st.cfg.login_lockout_max);
  }
  log::warn("node: login failed for user '{}' from {} ({} failed since the last "
            "success): {}",
            user, source_of(self), f.count, why);
  audit(self, user, "login", "cluster", "denied", why);
}

/// login_throttled while `user` is locked out.
caf::error locked_out(self_ptr self, const std::string& user) {
  auto& st = self->state;
  auto i = st.failures.find(user);
  if (i == st.failures.end() || now(self) >= i->second.locked_until)
    return caf::error{};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              i->second.locked_until - now(self))
              .count();
  return make_error(ec::login_throttled, "too many failed logins of user '" + user
                                           + "': try again in "
                                           + std::to_string((ms + 999) / 1000) + " s");
}

/// The user name of a client-first message ("n,,n=alice,r=..."), or "".
std::string claimed_user(std::string_view first) {
  auto i = first.find("n=", 3);
  if (i == std::string_view::npos)
    return {};
  auto rest = first.substr(i + 2);
  auto end = rest.find(',');
  auto name = std::string{rest.substr(0, end)};
  if (validate_user_name(name))
    return {};
  return name;
}

caf::result<sasl_step> sasl_login(self_ptr self, sasl_step& in) {
  auto& st = self->state;
  if (!st.cfg.auth || !st.cfg.security)
    return make_error(ec::invalid_request,
                      "this node does not take logins (ferryd runs without --auth)");
  if (!st.cfg.security->loaded())
    return make_error(ec::security_loading,
                      "the node is still loading users and ACLs: try again");
  if (in.mechanism != scram_sha256)
    return make_error(ec::invalid_request, "unsupported SASL mechanism '" + in.mechanism
                                             + "': this node offers SCRAM-SHA-256");
  // Drop the logins that never finished.
  auto t = now(self);
  for (auto i = st.logins.begin(); i != st.logins.end();)
    i = i->second.deadline <= t ? st.logins.erase(i) : std::next(i);
  if (in.conversation == 0) {
    auto user = claimed_user(in.data);
    if (auto err = locked_out(self, user))
      return err;
    if (st.logins.size() >= max_pending_logins)
      return make_error(ec::throttled, "too many logins in progress: try again");
    auto server = std::make_shared<scram_server>();
    auto sec = st.cfg.security;
    auto first = server->first(in.data, [sec](const std::string& name) {
      return sec->user(name);
    });
    if (!first) {
      if (is(first.error(), ec::authentication_failed)) {
        login_failed(self, user, "unknown user");
        return login_refused();
      }
      return first.error();
    }
    uint64_t id = 0;
    while (id == 0 || st.logins.count(id) > 0)
      if (RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof id) != 1)
        return make_error(ec::io_error, "no random bytes for a login");
    st.logins.emplace(id, node_state::pending_login{server, t + login_step_timeout, user});
    sasl_step out;
    out.mechanism = in.mechanism;
    out.conversation = id;
    out.data = std::move(*first);
    return out;
  }
  auto i = st.logins.find(in.conversation);
  if (i == st.logins.end())
    return make_error(ec::authentication_failed,
                      "authentication failed (no login in progress with that id)");
  auto server = std::move(i->second.server);
  auto claimed = std::move(i->second.user);
  st.logins.erase(i); // one attempt per conversation: no replays
  if (auto err = locked_out(self, claimed))
    return err;
  auto fin = server->final(in.data);
  auto user = server->user();
  if (!fin) {
    if (is(fin.error(), ec::authentication_failed)) {
      // (An unknown user fails here too, after a made-up first step.)
      login_failed(self, claimed, st.cfg.security->user(claimed) ? "wrong password"
                                                                 : "unknown user");
      return login_refused();
    }
    return fin.error();
  }
  auto cred = st.cfg.security->user(user);
  if (!cred) // deleted between the two steps
    return login_refused();
  auto ttl_ms = std::chrono::duration_cast<std::chrono::milliseconds>(st.cfg.session_ttl);
  auto now_ms = unix_ms();
  auto token = issue_bearer_token(*cred, now_ms, ttl_ms.count());
  if (!token)
    return token.error();
  st.failures.erase(user);
  log::info("node: user '{}' logged in from {}", user, source_of(self));
  sasl_step out;
  out.mechanism = in.mechanism;
  out.conversation = in.conversation;
  out.data = std::move(*fin);
  out.done = true;
  out.token = std::move(*token);
  out.expires_ms = now_ms + ttl_ms.count();
  out.user = user;
  return out;
}

// -- credentials --------------------------------------------------------------------

/// Who a credential stands for.
struct principal {
  std::string user;     ///< "" for the cluster
  bool cluster = false; ///< the nodes' or the operator's: no ACL applies
  bool peer = false;    ///< the nodes' own
};

caf::expected<principal> check_credential(self_ptr self, const std::string& cred) {
  auto& st = self->state;
  if (cred.empty())
    return make_error(ec::authentication_failed,
                      "this node requires a login (ferryctl --user/--password-file)");
  if (cred.compare(0, cluster_credential_prefix.size(), cluster_credential_prefix) == 0) {
    if (!st.cfg.cluster_credential.empty() && same_secret(cred, st.cfg.cluster_credential))
      return principal{{}, true, true};
    log::warn("node: a request with a wrong cluster credential from {}", source_of(self));
    audit(self, "", "login", "cluster", "denied", "wrong cluster credential");
    return make_error(ec::authentication_failed,
                      "wrong cluster credential (not this cluster's secret)");
  }
  if (cred.compare(0, operator_credential_prefix.size(), operator_credential_prefix) == 0) {
    if (!st.cfg.operator_credential.empty()
        && same_secret(cred, st.cfg.operator_credential))
      return principal{{}, true, false};
    log::warn("node: a request with a wrong operator credential from {}", source_of(self));
    audit(self, "", "login", "cluster", "denied", "wrong operator credential");
    return make_error(ec::authentication_failed,
                      "wrong operator credential (not this cluster's secret)");
  }
  auto& sec = *st.cfg.security;
  auto version = sec.version();
  auto now_ms = unix_ms();
  if (auto i = st.sessions.find(cred); i != st.sessions.end()) {
    if (i->second.version == version && now_ms < i->second.expires_ms)
      return principal{i->second.user, false};
    st.sessions.erase(i);
  }
  auto user = bearer_token_user(cred);
  if (!user)
    return user.error();
  auto c = sec.user(*user);
  if (!c)
    return make_error(ec::authentication_failed, "invalid session token");
  auto claims = verify_bearer_token(*c, cred, now_ms);
  if (!claims) {
    if (describe(claims.error()).find("expired") == std::string::npos) {
      log::warn("node: a forged or stale session token of '{}' from {}", *user,
                source_of(self));
      audit(self, *user, "login", "cluster", "denied", describe(claims.error()));
    }
    auto why = describe(claims.error());
    constexpr std::string_view code = "authentication_failed: ";
    if (why.compare(0, code.size(), code) == 0)
      why.erase(0, code.size());
    return make_error(ec::authentication_failed, "session refused: " + why + " (log in again)");
  }
  if (st.sessions.size() >= 16384)
    st.sessions.clear();
  st.sessions.emplace(cred, node_state::checked_token{claims->user, claims->expires_ms,
                                                      version});
  return principal{claims->user, false};
}

// -- authorization ------------------------------------------------------------------

/// One thing a request needs.
struct need {
  std::string type;
  std::string name;
  std::string op;
};

/// What a user's request needs: the ACL checks, whether it is for nodes
/// only, how its answer is filtered and whether it is an admin change.
struct access {
  std::vector<need> all;      ///< every one must be allowed
  std::vector<need> any;      ///< one of these must be allowed (when set)
  bool nodes_only = false;    ///< peers' and the node's own requests
  bool anyone = false;        ///< any logged-in user
  enum class filter {
    none, topics, groups, group, dlqs, dlq_records, cluster
  } answer = filter::none;
  bool admin = false;         ///< audited with its outcome
};

access access_of(caf::message& m) {
  access a;
  auto one = [&](std::string type, std::string name, std::string op) {
    a.all.push_back(need{std::move(type), std::move(name), std::move(op)});
  };
  auto admin = [&](std::string type, std::string name, std::string op) {
    one(std::move(type), std::move(name), std::move(op));
    a.admin = true;
  };
  // -- data path
  if (m.match_elements<produce_atom, produce_request>()) {
    one("topic", m.get_as<produce_request>(1).topic, "write");
  } else if (m.match_elements<produce_atom, std::vector<produce_request>>()) {
    for (auto& r : m.get_as<std::vector<produce_request>>(1))
      one("topic", r.topic, "write");
  } else if (m.match_elements<fetch_atom, fetch_request>()) {
    auto& r = m.get_as<fetch_request>(1);
    if (r.replica_id >= 0)
      a.nodes_only = true; // a follower's fetch
    else
      one("topic", r.topic, "read");
  } else if (m.match_elements<offsets_atom, list_offsets_request>()) {
    one("topic", m.get_as<list_offsets_request>(1).topic, "describe");
  } else if (m.match_elements<offsets_atom, epoch_end_request>()) {
    one("topic", m.get_as<epoch_end_request>(1).topic, "describe");
  } else if (m.match_elements<init_pid_atom>() || m.match_elements<list_atom, broker_atom>()) {
    a.anyone = true;
    // -- topics
  } else if (m.match_elements<create_atom, topic_atom, std::string, topic_config>()) {
    auto& name = m.get_as<std::string>(2);
    a.any = {need{"cluster", "cluster", "create"}, need{"topic", name, "create"}};
    a.admin = true;
  } else if (m.match_elements<delete_atom, topic_atom, std::string>()) {
    admin("topic", m.get_as<std::string>(2), "delete");
  } else if (m.match_elements<list_atom, topic_atom>()) {
    a.anyone = true;
    a.answer = access::filter::topics;
  } else if (m.match_elements<describe_atom, topic_atom, std::string>()) {
    one("topic", m.get_as<std::string>(2), "describe");
  } else if (m.match_elements<alter_atom, topic_atom, std::string,
                              std::map<std::string, std::string>>()) {
    admin("topic", m.get_as<std::string>(2), "alter");
  } else if (m.match_elements<add_parts_atom, std::string, int32_t>()) {
    admin("topic", m.get_as<std::string>(1), "alter");
  } else if (m.match_elements<cluster_atom>()) {
    // Anyone: without describe on the cluster, the answer holds only the
    // topics the caller may describe (the console's view of its topics).
    a.anyone = true;
    a.answer = access::filter::cluster;
  } else if (m.match_elements<status_atom, topic_partition>()) {
    one("topic", m.get_as<topic_partition>(1).topic, "describe");
  } else if (m.match_elements<purge_atom, topic_partition, offset>()) {
    admin("topic", m.get_as<topic_partition>(1).topic, "delete");
    // -- consumer groups
  } else if (m.match_elements<join_atom, join_group_request>()) {
    auto& r = m.get_as<join_group_request>(1);
    one("group", r.group, "read");
    for (auto& t : r.topics)
      one("topic", t, "describe");
  } else if (m.match_elements<sync_atom, sync_group_request>()) {
    one("group", m.get_as<sync_group_request>(1).group, "read");
  } else if (m.match_elements<heartbeat_atom, heartbeat_request>()) {
    one("group", m.get_as<heartbeat_request>(1).group, "read");
  } else if (m.match_elements<leave_atom, leave_group_request>()) {
    one("group", m.get_as<leave_group_request>(1).group, "read");
  } else if (m.match_elements<commit_atom, commit_offsets_request>()) {
    auto& r = m.get_as<commit_offsets_request>(1);
    one("group", r.group, "read");
    for (auto& o : r.offsets)
      one("topic", o.topic, "read");
  } else if (m.match_elements<offsets_atom, fetch_offsets_request>()) {
    one("group", m.get_as<fetch_offsets_request>(1).group, "describe");
  } else if (m.match_elements<list_atom, group_atom>()) {
    a.anyone = true;
    a.answer = access::filter::groups;
  } else if (m.match_elements<describe_atom, group_atom, std::string>()) {
    one("group", m.get_as<std::string>(2), "describe");
    a.answer = access::filter::group;
  } else if (m.match_elements<reset_atom, reset_offsets_request>()) {
    auto& r = m.get_as<reset_offsets_request>(1);
    admin("group", r.group, "alter");
    for (auto& t : r.topics)
      one("topic", t, "read");
  } else if (m.match_elements<delete_atom, group_atom, std::string>()) {
    one("group", m.get_as<std::string>(2), "delete");
    // -- queue groups
  } else if (m.match_elements<create_atom, group_atom, std::string, queue_group_config>()) {
    admin("group", m.get_as<std::string>(2), "create");
  } else if (m.match_elements<receive_atom, queue_receive_request>()) {
    auto& r = m.get_as<queue_receive_request>(1);
    one("group", r.group, "read");
    for (auto& t : receive_topics(r))
      one("topic", t, "read");
  } else if (m.match_elements<ack_atom, queue_ack_request>()) {
    one("group", m.get_as<queue_ack_request>(1).group, "read");
  } else if (m.match_elements<describe_atom, queue_atom, std::string>()) {
    one("group", m.get_as<std::string>(2), "describe");
  } else if (m.match_elements<alter_atom, group_atom, std::string, queue_group_config>()) {
    admin("group", m.get_as<std::string>(2), "alter");
  } else if (m.match_elements<leave_atom, queue_atom, std::string, std::string>()) {
    one("group", m.get_as<std::string>(2), "read");
    // -- DLQs
  } else if (m.match_elements<list_atom, dlq_atom>()) {
    a.anyone = true;
    a.answer = access::filter::dlqs;
  } else if (m.match_elements<show_atom, dlq_show_request>()) {
    one("dlq", m.get_as<dlq_show_request>(1).topic, "read");
    a.answer = access::filter::dlq_records;
  } else if (m.match_elements<redrive_atom, dlq_redrive_request>()) {
    auto& r = m.get_as<dlq_redrive_request>(1);
    admin("dlq", r.topic, "redrive");
    if (!r.to_topic.empty())
      one("topic", r.to_topic, "write");
  } else if (m.match_elements<purge_atom, dlq_purge_request>()) {
    admin("dlq", m.get_as<dlq_purge_request>(1).topic, "delete");
    // -- cluster administration
  } else if (m.match_elements<update_atom, user_atom, scram_credential>()) {
    admin("cluster", "cluster", "alter");
  } else if (m.match_elements<delete_atom, user_atom, std::string>()) {
    admin("cluster", "cluster", "alter");
  } else if (m.match_elements<list_atom, user_atom>() || m.match_elements<list_atom, acl_atom>()) {
    one("cluster", "cluster", "describe");
  } else if (m.match_elements<create_atom, acl_atom, acl_entry>()
             || m.match_elements<delete_atom, acl_atom, acl_entry>()) {
    admin("cluster", "cluster", "alter");
  } else if (m.match_elements<delete_atom, broker_atom, int32_t>()
             || m.match_elements<assign_atom, isr_change>()) {
    admin("cluster", "cluster", "alter");
  } else {
    // Raft, registrations, ISR changes, follower fetch sessions, link
    // probes and the node's own messages.
    a.nodes_only = true;
  }
  return a;
}

/// The first need the user is not allowed, or none.
std::optional<need> denied_need(const security_registry& sec, const std::string& user,
                                const access& a) {
  for (auto& n : a.all)
    if (!sec.authorize(user, n.type, n.name, n.op))
      return n;
  if (!a.any.empty()) {
    for (auto& n : a.any)
      if (sec.authorize(user, n.type, n.name, n.op))
        return std::nullopt;
    return a.any.back();
  }
  return std::nullopt;
}

/// The action words of the audit log for a request ("create topic").
std::string action_of(const access& a) {
  auto& n = a.all.empty() ? a.any.back() : a.all.front();
  return n.op;
}

std::string resource_of(const access& a) {
  auto& n = a.all.empty() ? a.any.back() : a.all.front();
  return resource_text(n.type, n.name);
}

// -- running a request ---------------------------------------------------------------

/// Captures what a handler answered at once (a value or an error); nothing
/// for a handler that answers later through a promise.
class capture_visitor : public caf::detail::invoke_result_visitor {
public:
  std::optional<caf::message> value;

  void operator()() override {
    value = caf::message{};
  }

  void operator()(caf::error& x) override {
    value = caf::make_message(std::move(x));
  }

  void operator()(caf::message& x) override {
    value = std::move(x);
  }

  void operator()(const caf::none_t&) override {
    value = caf::message{};
  }
};

/// Runs `req` through the node's handlers now, in this message's context.
caf::result<caf::message> run_core(self_ptr self, caf::message& req) {
  capture_visitor v;
  auto impl = self->state.core.as_behavior_impl();
  if (!impl)
    return make_error(ec::invalid_request, "the node is not serving");
  switch (impl->invoke(v, req)) {
    case caf::match_case::no_match:
      return caf::sec::unexpected_message;
    case caf::match_case::skip:
      return caf::skip;
    default:
      break;
  }
  if (v.value) {
    auto& x = *v.value;
    if (x.match_elements<caf::error>())
      return x.get_as<caf::error>(0);
    return std::move(x);
  }
  return caf::delegated<caf::message>{};
}

/// Asks the node itself (with the cluster credential) and answers the
/// caller with the answer after `f` (filter, audit).
template <class T, class F, class Done>
caf::result<caf::message> ask_self(self_ptr self, caf::message req, F f, Done done) {
  auto rp = self->make_response_promise();
  self
    ->request(caf::actor_cast<caf::actor>(self), caf::infinite, auth_atom_v,
              self->state.cfg.cluster_credential, std::move(req))
    .then(
      [rp, f, done](T& x) mutable {
        f(x);
        done(nullptr);
        rp.deliver(std::move(x));
      },
      [rp, done](caf::error& err) mutable {
        done(&err);
        rp.deliver(std::move(err));
      });
  return rp;
}

void hide_topics(group_description& g, const std::function<bool(const std::string&)>& see) {
  auto& ps = g.partitions;
  ps.erase(std::remove_if(ps.begin(), ps.end(), [&](auto& p) { return !see(p.topic); }),
           ps.end());
  for (auto& m : g.members) {
    auto& as = m.assignment;
    as.erase(std::remove_if(as.begin(), as.end(), [&](auto& tp) { return !see(tp.topic); }),
             as.end());
  }
}

caf::result<caf::message> serve_in_session(self_ptr self, std::string& cred,
                                           caf::message& req) {
  auto& st = self->state;
  if (!st.cfg.auth) // no sessions: the envelope is only a wrapper
    return run_core(self, req);
  // The cluster's credential needs no users: the node's own actors and its
  // peers are served while the users are still loading.
  bool cluster = cred.compare(0, cluster_credential_prefix.size(),
                              cluster_credential_prefix) == 0
                 || cred.compare(0, operator_credential_prefix.size(),
                                 operator_credential_prefix) == 0;
  if (!cluster && !st.cfg.security->loaded())
    return make_error(ec::security_loading,
                      "the node is still loading users and ACLs: try again");
  auto who = check_credential(self, cred);
  if (!who)
    return failed(self, who.error());
  if (who->cluster) {
    // A peer, or the node's own actors (local senders).
    auto& s = self->current_sender();
    st.peer_call = who->peer && s && s->node() != self->node();
    auto res = run_core(self, req);
    st.peer_call = false;
    return res;
  }
  auto& sec = *st.cfg.security;
  auto& user = who->user;
  auto a = access_of(req);
  bool super = sec.is_superuser(user);
  if (!super) {
    if (a.nodes_only) {
      auto what = "User:" + user + " may not send node-to-node requests";
      audit(self, user, "cluster action", "cluster", "denied", what);
      return failed(self, make_error(ec::authorization_failed, what));
    }
    if (!a.anyone) {
      if (auto n = denied_need(sec, user, a)) {
        auto what = describe_denial(user, n->type, n->name, n->op);
        audit(self, user, n->op, resource_text(n->type, n->name), "denied", what);
        return failed(self, make_error(ec::authorization_failed, what));
      }
    }
  }
  using filter = access::filter;
  auto registry = st.cfg.security;
  auto see = [registry, user, super](std::string type) {
    return [registry, user, super, type](const std::string& name) {
      return super || registry->authorize(user, type, name, "describe");
    };
  };
  auto no_audit = [](const caf::error*) {};
  switch (a.answer) {
    case filter::topics:
      return ask_self<std::vector<topic_metadata>>(
        self, req,
        [see_topic = see("topic")](std::vector<topic_metadata>& ts) {
          ts.erase(std::remove_if(ts.begin(), ts.end(),
                                  [&](auto& t) { return !see_topic(t.name); }),
                   ts.end());
        },
        no_audit);
    case filter::groups:
      return ask_self<std::vector<group_description>>(
        self, req,
        [see_group = see("group"), see_topic = see("topic")](
          std::vector<group_description>& gs) {
          gs.erase(std::remove_if(gs.begin(), gs.end(),
                                  [&](auto& g) { return !see_group(g.group); }),
                   gs.end());
          for (auto& g : gs)
            hide_topics(g, see_topic);
        },
        no_audit);
    case filter::group:
      return ask_self<group_description>(
        self, req,
        [see_topic = see("topic")](group_description& g) { hide_topics(g, see_topic); },
        no_audit);
    case filter::dlqs:
      return ask_self<std::vector<dlq_info>>(
        self, req,
        [see_dlq = see("dlq")](std::vector<dlq_info>& xs) {
          xs.erase(std::remove_if(xs.begin(), xs.end(),
                                  [&](auto& x) { return !see_dlq(x.topic); }),
                   xs.end());
        },
        no_audit);
    case filter::dlq_records:
      // A record of a topic the caller may not read is left out: its DLQ
      // must not be a way around the topic's ACLs (as on HTTP).
      return ask_self<dlq_show_response>(
        self, req,
        [registry, user, super](dlq_show_response& r) {
          if (super)
            return;
          auto& rs = r.records;
          rs.erase(std::remove_if(rs.begin(), rs.end(),
                                  [&](const dlq_record& x) {
                                    return !registry->authorize(user, "topic",
                                                                x.original_topic, "read");
                                  }),
                   rs.end());
        },
        no_audit);
    case filter::cluster:
      if (super || sec.authorize(user, "cluster", "cluster", "describe"))
        break;
      return ask_self<cluster_description>(
        self, req,
        [see_topic = see("topic")](cluster_description& c) {
          auto& ts = c.topics;
          ts.erase(std::remove_if(ts.begin(), ts.end(),
                                  [&](auto& t) { return !see_topic(t.name); }),
                   ts.end());
        },
        no_audit);
    case filter::none:
      break;
  }
  if (a.admin && st.cfg.audit) {
    // Admin changes: the outcome goes to the audit log.
    auto action = action_of(a);
    auto resource = resource_of(a);
    auto source = source_of(self);
    auto log = st.cfg.audit;
    auto note = [log, user, action, resource, source](const caf::error* err) {
      audit_event e;
      e.principal = "User:" + user;
      e.source = source;
      e.via = "caf";
      e.action = action;
      e.resource = resource;
      e.outcome = err ? std::string{to_string(code_of(*err))} : "ok";
      e.detail = err ? describe(*err) : std::string{};
      log->write(e);
    };
    auto pass = [](auto&) {};
#define FERRY_AUDITED(T)                                                       \
  return ask_self<T>(self, req, pass, note)
    if (req.match_elements<create_atom, topic_atom, std::string, topic_config>()
        || req.match_elements<delete_atom, topic_atom, std::string>()
        || req.match_elements<alter_atom, topic_atom, std::string,
                              std::map<std::string, std::string>>()
        || req.match_elements<add_parts_atom, std::string, int32_t>())
      FERRY_AUDITED(topic_metadata);
    if (req.match_elements<update_atom, user_atom, scram_credential>()
        || req.match_elements<delete_atom, user_atom, std::string>())
      FERRY_AUDITED(user_info);
    if (req.match_elements<create_atom, acl_atom, acl_entry>())
      FERRY_AUDITED(acl_entry);
    if (req.match_elements<delete_atom, acl_atom, acl_entry>())
      FERRY_AUDITED(std::vector<acl_entry>);
    if (req.match_elements<create_atom, group_atom, std::string, queue_group_config>()
        || req.match_elements<alter_atom, group_atom, std::string, queue_group_config>())
      FERRY_AUDITED(queue_group_config);
    if (req.match_elements<reset_atom, reset_offsets_request>())
      FERRY_AUDITED(std::vector<partition_offset>);
    if (req.match_elements<redrive_atom, dlq_redrive_request>())
      FERRY_AUDITED(dlq_redrive_response);
    if (req.match_elements<purge_atom, dlq_purge_request>())
      FERRY_AUDITED(dlq_purge_response);
    if (req.match_elements<purge_atom, topic_partition, offset>())
      FERRY_AUDITED(offset);
    if (req.match_elements<delete_atom, broker_atom, int32_t>())
      FERRY_AUDITED(broker_registration);
    if (req.match_elements<assign_atom, isr_change>())
      FERRY_AUDITED(partition_assignment);
#undef FERRY_AUDITED
  }
  return run_core(self, req);
}

} // namespace

bool nodes_only_request(caf::message m) {
  return access_of(m).nodes_only;
}

broker_actor::behavior_type serve_sessions(self_ptr self,
                                           broker_core_actor::behavior_type core) {
  auto& st = self->state;
  st.core = std::move(core.unbox());
  caf::behavior front{
    [self](auth_atom, sasl_step& s) -> caf::result<sasl_step> {
      return sasl_login(self, s);
    },
    [self](auth_atom, std::string& cred, caf::message& req) -> caf::result<caf::message> {
      return serve_in_session(self, cred, req);
    },
    // Made in this process only (its type is never deserialized): the
    // answers of a produce the node took in a session or without one.
    [self](produce_atom, produce_gathered& x) { produce_gathered_in(self, x); },
  };
  if (st.cfg.auth) {
    // A bare request: refused, whatever its sender claims to be.
    self->set_default_handler(
      [self](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        return failed(self, make_error(ec::authentication_failed,
                                       "this node requires a login: requests must "
                                       "come in a session (ferryctl --user, "
                                       "--password-file)"));
      });
  } else {
    front = caf::behavior{front.as_behavior_impl()->or_else(st.core.as_behavior_impl())};
  }
  return broker_actor::behavior_type{broker_actor::behavior_type::unsafe_init{},
                                     std::move(front)};
}

} // namespace ferry::node_detail

namespace ferry {

bool is_node_to_node_request(caf::message m) {
  return node_detail::nodes_only_request(std::move(m));
}

} // namespace ferry
