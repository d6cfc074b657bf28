#pragma once
// Certificates for the TLS tests, made with Debian's `openssl` command in a
// temp dir: a cluster CA, another CA, and certificates signed by them
// (ECDSA P-256: quick to make). Every file is PEM.

#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "process.hpp"
#include "tests/temp_dir.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ferry::test {

class test_certs {
public:
  test_certs() : dir_("ferry-certs") {
    ok_ = make_ca("ca") && make_ca("otherca");
  }

  /// False if openssl failed; why() says how.
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  /// A certificate `name` (CN=name) signed by CA `ca`, valid for `days`
  /// (negative: expired that many days ago, as openssl -days counts).
  bool make_cert(const std::string& name, const std::string& ca = "ca", int days = 30) {
    if (!run({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
              "-keyout", path(name + ".key"), "-out", path(name + ".csr"), "-subj",
              "/CN=" + name}))
      return false;
    // Names of 127.0.0.1, so https clients that check the host (curl,
    // Prometheus) accept a node's certificate; harmless on a client's.
    auto ext = path("san.ext");
    if (!std::filesystem::exists(ext)) {
      std::ofstream out{ext};
      out << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    }
    return run({"x509", "-req", "-in", path(name + ".csr"), "-CA", path(ca + ".pem"), "-CAkey",
                path(ca + ".key"), "-CAcreateserial", "-out", path(name + ".pem"), "-days",
                std::to_string(days), "-extfile", ext});
  }

  /// certificate name.pem, key name.key, CA ca.pem.
  ferry::tls_settings settings(const std::string& name, const std::string& ca = "ca") const {
    return {path(name + ".pem"), path(name + ".key"), path(ca + ".pem")};
  }

  /// --tls-cert/--tls-key/--tls-ca arguments for settings(name, ca).
  std::vector<std::string> args(const std::string& name, const std::string& ca = "ca") const {
    auto s = settings(name, ca);
    return {"--tls-cert", s.certificate, "--tls-key", s.key, "--tls-ca", s.ca};
  }

  /// A cluster secret file (ferryd --cluster-secret-file), made on first
  /// use with `openssl rand -hex 32`.
  std::string secret_file() {
    auto f = path("cluster.secret");
    if (!std::filesystem::exists(f))
      run({"rand", "-hex", "-out", f, "32"});
    return f;
  }

  /// The credential of secret_file() (what the nodes and ferryctl
  /// --cluster-secret-file send).
  ferry::client_credentials operator_credentials() {
    ferry::client_credentials c;
    auto loaded = ferry::load_credentials("", "", secret_file());
    if (loaded)
      c = *loaded;
    return c;
  }

  /// Runs `openssl args...`; false (why() set) unless it exits 0.
  bool run(const std::vector<std::string>& args) {
    auto r = run_command("/usr/bin/openssl", args, std::chrono::seconds{30});
    if (r.exit_code == 0)
      return true;
    why_ = "openssl";
    for (auto& a : args)
      why_ += " " + a;
    why_ += ": exit " + std::to_string(r.exit_code) + ": " + r.err;
    return false;
  }
  /// A self-signed CA `name` (name.pem, name.key); "ca" and "otherca"
  /// exist from the start.
  bool make_ca(const std::string& name) {
    return run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", path(name + ".key"), "-out", path(name + ".pem"), "-days",
                "30", "-subj", "/CN=" + name});
  }

private:
  temp_dir dir_;
  bool ok_ = false;
  std::string why_;
};

} // namespace ferry::test
