#include "actors/client/session.hpp"

#include "broker/error.hpp"
#include "broker/security.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/settings.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

namespace ferry {

namespace {

constexpr std::string_view key_user = "ferry.session-user";
constexpr std::string_view key_password = "ferry.session-password";
constexpr std::string_view key_token = "ferry.session-token";

struct proxy_state {
  caf::actor target;
  std::string token;
  static inline const char* name = "ferry.session_proxy";
};

caf::behavior session_proxy(caf::stateful_actor<proxy_state>* self, caf::actor target,
                            std::string token) {
  self->state.target = target;
  self->state.token = std::move(token);
  self->monitor(target);
  self->set_down_handler([self](const caf::down_msg& msg) {
    if (msg.source == self->state.target.address())
      self->quit(msg.reason);
  });
  // Everything else goes to the node in an envelope. Delegation keeps the
  // sender and the request id: the node answers the caller directly.
  self->set_default_handler(
    [self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
      auto& st = self->state;
      self->delegate(st.target, auth_atom_v, st.token, x.move_content_to_message());
      return caf::delegated<caf::message>{};
    });
  return {
    [self](session_atom, std::string& token) { self->state.token = std::move(token); },
  };
}

} // namespace

void configure_credentials(caf::actor_system_config& cfg, const client_credentials& c) {
  caf::put(cfg.content, key_user, c.user);
  caf::put(cfg.content, key_password, c.password);
  caf::put(cfg.content, key_token, c.token);
}

namespace {

std::mutex overrides_mtx;
std::map<const caf::actor_system*, client_credentials> overrides;

} // namespace

void set_credentials(const caf::actor_system& sys, client_credentials c) {
  std::lock_guard<std::mutex> guard{overrides_mtx};
  if (c.empty())
    overrides.erase(&sys);
  else
    overrides[&sys] = std::move(c);
}

client_credentials credentials_of(const caf::actor_system& sys) {
  {
    std::lock_guard<std::mutex> guard{overrides_mtx};
    if (auto i = overrides.find(&sys); i != overrides.end())
      return i->second;
  }
  client_credentials c;
  c.user = caf::get_or(sys.config(), key_user, "");
  c.password = caf::get_or(sys.config(), key_password, "");
  c.token = caf::get_or(sys.config(), key_token, "");
  return c;
}

namespace {

std::string env_or(const char* name, std::string value) {
  if (!value.empty())
    return value;
  auto* v = std::getenv(name);
  return v ? std::string{v} : std::string{};
}

caf::expected<std::string> first_line(const std::string& path, const char* what) {
  std::ifstream in{path};
  if (!in)
    return make_error(ec::invalid_config, std::string{"cannot read the "} + what + " file "
                                            + path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
    line.pop_back();
  if (line.empty())
    return make_error(ec::invalid_config,
                      std::string{"the "} + what + " file " + path + " is empty");
  return line;
}

} // namespace

caf::expected<client_credentials> load_credentials(std::string user,
                                                   std::string password_file,
                                                   std::string cluster_secret_file) {
  client_credentials c;
  user = env_or("FERRY_USER", std::move(user));
  password_file = env_or("FERRY_PASSWORD_FILE", std::move(password_file));
  cluster_secret_file = env_or("FERRY_CLUSTER_SECRET_FILE", std::move(cluster_secret_file));
  if (!user.empty() && !cluster_secret_file.empty())
    return make_error(ec::invalid_config,
                      "give a user or the cluster secret, not both");
  if (!cluster_secret_file.empty()) {
    auto secret = read_cluster_secret(cluster_secret_file);
    if (!secret)
      return secret.error();
    auto cred = operator_credential(*secret);
    if (!cred)
      return cred.error();
    c.token = std::move(*cred);
    return c;
  }
  if (user.empty()) {
    if (!password_file.empty())
      return make_error(ec::invalid_config, "a password file needs a user (--user)");
    return c;
  }
  if (!password_file.empty()) {
    auto pw = first_line(password_file, "password");
    if (!pw)
      return pw.error();
    c.password = std::move(*pw);
  } else if (auto* pw = std::getenv("FERRY_PASSWORD"); pw && *pw) {
    c.password = pw;
  } else {
    return make_error(ec::invalid_config, "user " + user
                                            + " needs a password: --password-file F "
                                              "or $FERRY_PASSWORD");
  }
  c.user = std::move(user);
  return c;
}

bool credentials_from_local_cluster(client_credentials& c) {
  if (!c.empty())
    return false;
  std::string dir = "ferry-cluster";
  if (auto env = std::getenv("FERRY_CLUSTER_DIR"); env != nullptr && *env != '\0')
    dir = env;
  if (!std::ifstream{dir + "/brokers"} || !std::ifstream{dir + "/cluster.secret"})
    return false;
  auto secret = read_cluster_secret(dir + "/cluster.secret");
  if (!secret)
    return false;
  auto cred = operator_credential(*secret);
  if (!cred)
    return false;
  c.token = std::move(*cred);
  return true;
}

broker_actor spawn_session_proxy(caf::actor_system& sys, broker_actor target,
                                 std::string token) {
  auto hdl = sys.spawn(session_proxy, caf::actor_cast<caf::actor>(target), std::move(token));
  return caf::actor_cast<broker_actor>(hdl);
}

} // namespace ferry
