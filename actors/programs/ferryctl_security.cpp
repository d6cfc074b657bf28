// `ferryctl user` and `ferryctl acl`: users with SCRAM-SHA-256 credentials and
// Kafka-style ACLs, kept in the metadata quorum (broker/security.hpp).
//
//   ferryctl user create NAME (--password-file F | --password-stdin)
//                             [--iterations N]
//   ferryctl user delete NAME
//   ferryctl user list
//   ferryctl acl add|remove --principal User:NAME|User:* --operation OP
//                           (--topic N | --group N | --dlq N | --cluster)
//                           [--prefixed] [--deny]
//   ferryctl acl list [--principal P]
//
// The credential is derived here (a random salt, PBKDF2): the password
// itself never leaves ferryctl. A password file's first line is the
// password (a trailing newline is dropped). Tables by default, JSON (the
// HTTP API's shapes) with --json.

#include "actors/programs/ferryctl_security.hpp"
#include "actors/programs/ferryctl_common.hpp"
#include "actors/programs/ferryctl_table.hpp"

#include "actors/http/http_json.hpp"
#include "actors/protocol/interfaces.hpp"
#include "broker/error.hpp"
#include "broker/security.hpp"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace ferry::ctl {

namespace {

using json = nlohmann::json;

struct security_options {
  std::string command; ///< user-create, user-delete, user-list, acl-add, ...
  std::string name;
  std::string password_file;
  bool password_stdin = false;
  int32_t iterations = default_scram_iterations;
  std::string principal;
  std::string operation;
  std::string topic;
  std::string group;
  std::string dlq;
  bool cluster = false;
  bool prefixed = false;
  bool deny = false;
};

security_options& opts() {
  static security_options x;
  return x;
}

std::string read_password() {
  auto& o = opts();
  std::string pw;
  if (o.password_stdin) {
    std::getline(std::cin, pw);
  } else {
    std::ifstream in{o.password_file, std::ios::binary};
    if (!in)
      throw failure{"invalid_request: cannot read the password file "
                    + o.password_file};
    std::getline(in, pw);
  }
  if (!pw.empty() && pw.back() == '\r')
    pw.pop_back();
  if (pw.empty())
    throw failure{"invalid_request: the password is empty"};
  return pw;
}

acl_entry acl_of_options() {
  auto& o = opts();
  acl_entry x;
  x.principal = o.principal;
  x.operation = o.operation;
  x.permission = o.deny ? "deny" : "allow";
  x.pattern_type = o.prefixed ? "prefixed" : "literal";
  if (o.cluster) {
    x.resource_type = "cluster";
  } else if (!o.topic.empty()) {
    x.resource_type = "topic";
    x.resource_name = o.topic;
  } else if (!o.group.empty()) {
    x.resource_type = "group";
    x.resource_name = o.group;
  } else {
    x.resource_type = "dlq";
    x.resource_name = o.dlq;
  }
  if (auto err = normalize_acl(x))
    fail(err);
  return x;
}

void print_acls(const std::vector<acl_entry>& xs, bool as_json) {
  if (as_json) {
    json out = json::array();
    for (auto& x : xs)
      out.push_back(http_api::to_json(x));
    std::cout << out.dump() << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& x : xs)
    rows.push_back({x.principal, x.permission, x.operation, x.resource_type,
                    x.pattern_type, x.resource_name});
  print_table({"PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "PATTERN",
               "NAME"},
              rows);
}

int user_create(admin_client& admin, bool as_json) {
  auto& o = opts();
  auto pw = read_password();
  auto cred = make_scram_credential(o.name, pw, o.iterations);
  std::fill(pw.begin(), pw.end(), '\0');
  if (!cred)
    fail(cred.error());
  auto u = call<user_info>(admin, update_atom_v, user_atom_v, *cred);
  if (as_json)
    std::cout << http_api::to_json(u).dump() << '\n';
  else
    std::cout << "user " << u.name << ": " << u.mechanism << " credential set ("
              << u.iterations << " iterations)\n";
  return 0;
}

int user_delete(admin_client& admin, bool as_json) {
  auto u = call<user_info>(admin, delete_atom_v, user_atom_v, opts().name);
  if (as_json)
    std::cout << json{{"deleted", u.name}}.dump() << '\n';
  else
    std::cout << "user " << u.name << " deleted\n";
  return 0;
}

int user_list(admin_client& admin, bool as_json) {
  auto us = call<std::vector<user_info>>(admin, list_atom_v, user_atom_v);
  if (as_json) {
    json out = json::array();
    for (auto& u : us)
      out.push_back(http_api::to_json(u));
    std::cout << out.dump() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (auto& u : us)
    rows.push_back({u.name, u.mechanism, std::to_string(u.iterations)});
  print_table({"USER", "MECHANISM", "ITERATIONS"}, rows);
  return 0;
}

int acl_add(admin_client& admin, bool as_json) {
  auto x = call<acl_entry>(admin, create_atom_v, acl_atom_v, acl_of_options());
  if (as_json)
    std::cout << http_api::to_json(x).dump() << '\n';
  else
    print_acls({x}, false);
  return 0;
}

int acl_remove(admin_client& admin, bool as_json) {
  auto xs = call<std::vector<acl_entry>>(admin, delete_atom_v, acl_atom_v,
                                         acl_of_options());
  if (xs.empty() && !as_json)
    throw failure{"not_found: no such ACL (ferryctl acl list shows them)"};
  print_acls(xs, as_json);
  return 0;
}

int acl_list(admin_client& admin, bool as_json) {
  auto xs = call<std::vector<acl_entry>>(admin, list_atom_v, acl_atom_v);
  if (!opts().principal.empty()) {
    auto p = opts().principal;
    if (p.rfind("User:", 0) != 0)
      p = "User:" + p;
    std::vector<acl_entry> mine;
    for (auto& x : xs)
      if (x.principal == p)
        mine.push_back(x);
    xs = std::move(mine);
  }
  print_acls(xs, as_json);
  return 0;
}

} // namespace

void add_security_commands(CLI::App& app, std::function<void()> on_selected) {
  auto& o = opts();
  auto selected = [on_selected](const char* name) {
    return [on_selected, name] {
      opts().command = name;
      on_selected();
    };
  };
  auto user = app.add_subcommand(
    "user", "users with SCRAM-SHA-256 credentials (ferryd --auth scram)");
  user->require_subcommand(1);
  auto create = user->add_subcommand(
    "create", "create a user, or set a new password for one");
  create->add_option("name", o.name)->required();
  auto file = create->add_option("--password-file", o.password_file,
                                 "file whose first line is the password");
  auto in = create->add_flag("--password-stdin", o.password_stdin,
                             "read the password from the first line of stdin");
  file->excludes(in);
  create->add_option("--iterations", o.iterations,
                     "PBKDF2 iterations of the credential")
    ->check(CLI::Range(default_scram_iterations, max_scram_iterations))
    ->capture_default_str();
  create->callback([on_selected, file, in] {
    if (file->count() == 0 && in->count() == 0)
      throw CLI::RequiredError("--password-file or --password-stdin");
    opts().command = "user-create";
    on_selected();
  });
  auto del = user->add_subcommand("delete", "delete a user");
  del->add_option("name", o.name)->required();
  del->callback(selected("user-delete"));
  user->add_subcommand("list", "list users (never their keys)")
    ->callback(selected("user-list"));

  auto acl = app.add_subcommand(
    "acl", "access control lists: who may do what to which resource");
  acl->require_subcommand(1);
  auto define = [&](CLI::App* c) {
    c->add_option("--principal", o.principal, "User:NAME, or User:* for every user")
      ->required();
    c->add_option("--operation", o.operation,
                  "all, describe, read, write, create, delete, alter, redrive")
      ->required();
    auto t = c->add_option("--topic", o.topic, "a topic (or * for all)");
    auto g = c->add_option("--group", o.group, "a consumer or queue group");
    auto d = c->add_option("--dlq", o.dlq, "a DLQ topic");
    auto k = c->add_flag("--cluster", o.cluster,
                         "the cluster (describe, create topics, alter: users, "
                         "ACLs, nodes)");
    t->excludes(g)->excludes(d)->excludes(k);
    g->excludes(d)->excludes(k);
    d->excludes(k);
    c->add_flag("--prefixed", o.prefixed,
                "the name is a prefix: every resource whose name starts with it");
    c->add_flag("--deny", o.deny, "deny instead of allow (deny wins)");
    return std::vector<CLI::Option*>{t, g, d, k};
  };
  auto add = acl->add_subcommand("add", "add an ACL");
  auto add_res = define(add);
  auto remove = acl->add_subcommand("remove", "remove an ACL (the same fields)");
  auto remove_res = define(remove);
  auto need_resource = [on_selected](std::vector<CLI::Option*> res,
                                     const char* name) {
    return [on_selected, res, name] {
      size_t n = 0;
      for (auto* r : res)
        n += r->count();
      if (n == 0)
        throw CLI::RequiredError("one of --topic, --group, --dlq or --cluster");
      opts().command = name;
      on_selected();
    };
  };
  add->callback(need_resource(add_res, "acl-add"));
  remove->callback(need_resource(remove_res, "acl-remove"));
  auto list = acl->add_subcommand("list", "list ACLs");
  list->add_option("--principal", o.principal, "only this principal's");
  list->callback(selected("acl-list"));
}

int run_security(admin_client& admin, bool json) {
  auto& cmd = opts().command;
  if (cmd == "user-create")
    return user_create(admin, json);
  if (cmd == "user-delete")
    return user_delete(admin, json);
  if (cmd == "user-list")
    return user_list(admin, json);
  if (cmd == "acl-add")
    return acl_add(admin, json);
  if (cmd == "acl-remove")
    return acl_remove(admin, json);
  return acl_list(admin, json);
}

} // namespace ferry::ctl
