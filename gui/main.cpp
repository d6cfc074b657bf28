// ferry-console: the Qt desktop console for a Ferry cluster.
//
//   ferry-console [--broker HOST:PORT] [--metrics URL] [--screenshot DIR]
//                 [--tls-cert F --tls-key F --tls-ca F]
//
// With the TLS files (or FERRY_TLS_CERT/KEY/CA) the console speaks mutual
// TLS to the CAF port and scrapes the metrics port over https with the
// same client certificate. They are checked before anything connects.
//
// --screenshot DIR connects, waits for data, writes one PNG per main view
// into DIR and exits (0 on success). Set QT_QPA_PLATFORM=offscreen to run
// it without a display.

#include "actors/client/session.hpp"
#include "actors/client/tls.hpp"
#include "broker/error.hpp"
#include "gui/console_client.hpp"
#include "gui/main_window.hpp"
#include "gui/metrics_sampler.hpp"

#include <QApplication>
#include <QCommandLineParser>
#include <QTextStream>
#include <QTimer>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("ferry"));
  QApplication::setApplicationName(QStringLiteral("ferry-console"));
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Desktop console for a Ferry cluster"));
  parser.addHelpOption();
  auto env = qEnvironmentVariable("FERRY_BROKER");
  QCommandLineOption broker(QStringLiteral("broker"),
                            QStringLiteral("any node's HOST:PORT (env FERRY_BROKER; default "
                                           "127.0.0.1:9092)"),
                            QStringLiteral("HOST:PORT"),
                            env.isEmpty() ? QStringLiteral("127.0.0.1:9092") : env);
  QCommandLineOption metrics(QStringLiteral("metrics"),
                             QStringLiteral("Prometheus URL of the node (default: "
                                            "http://HOST:M/metrics, M the metrics port the "
                                            "node reports)"),
                             QStringLiteral("URL"));
  QCommandLineOption wait(QStringLiteral("screenshot-wait"),
                          QStringLiteral("seconds of metrics to collect before the "
                                         "screenshots (default 5)"),
                          QStringLiteral("SECONDS"), QStringLiteral("5"));
  QCommandLineOption shots(QStringLiteral("screenshot"),
                           QStringLiteral("write a PNG of each main view into DIR, then exit"),
                           QStringLiteral("DIR"));
  QCommandLineOption tls_cert(QStringLiteral("tls-cert"),
                              QStringLiteral("client certificate (PEM) for a TLS cluster; "
                                             "env FERRY_TLS_CERT"),
                              QStringLiteral("FILE"));
  QCommandLineOption tls_key(QStringLiteral("tls-key"),
                             QStringLiteral("its private key (PEM); env FERRY_TLS_KEY"),
                             QStringLiteral("FILE"));
  QCommandLineOption tls_ca(QStringLiteral("tls-ca"),
                            QStringLiteral("CA certificates the nodes' certificates chain "
                                           "to; env FERRY_TLS_CA"),
                            QStringLiteral("FILE"));
  QCommandLineOption user(QStringLiteral("user"),
                          QStringLiteral("log in as this user (a cluster started with "
                                         "--auth scram); env FERRY_USER"),
                          QStringLiteral("NAME"));
  QCommandLineOption password_file(QStringLiteral("password-file"),
                                   QStringLiteral("file whose first line is the user's "
                                                  "password; env FERRY_PASSWORD_FILE or "
                                                  "FERRY_PASSWORD"),
                                   QStringLiteral("FILE"));
  QCommandLineOption secret_file(QStringLiteral("cluster-secret-file"),
                                 QStringLiteral("log in as the cluster's operator with the "
                                                "nodes' secret; env "
                                                "FERRY_CLUSTER_SECRET_FILE"),
                                 QStringLiteral("FILE"));
  parser.addOption(user);
  parser.addOption(password_file);
  parser.addOption(secret_file);
  parser.addOption(tls_cert);
  parser.addOption(tls_key);
  parser.addOption(tls_ca);
  parser.addOption(broker);
  parser.addOption(metrics);
  parser.addOption(shots);
  parser.addOption(wait);
  parser.process(app);

  ferry::tls_settings tls{parser.value(tls_cert).toStdString(),
                          parser.value(tls_key).toStdString(),
                          parser.value(tls_ca).toStdString()};
  ferry::tls_from_environment(tls);
  ferry::console::tls_files files;
  if (tls.requested()) {
    if (auto err = ferry::check_tls(tls, ferry::tls_role::client)) {
      std::fprintf(stderr, "ferry-console: %s\n", ferry::describe(err).c_str());
      return 2;
    }
    files = {QString::fromStdString(tls.certificate), QString::fromStdString(tls.key),
             QString::fromStdString(tls.ca)};
  }
  ferry::console::console_client client{files};
  auto creds = ferry::load_credentials(parser.value(user).toStdString(),
                                      parser.value(password_file).toStdString(),
                                      parser.value(secret_file).toStdString());
  if (!creds) {
    std::fprintf(stderr, "ferry-console: %s\n", ferry::describe(creds.error()).c_str());
    return 2;
  }
  if (!creds->token.empty())
    client.set_operator(QString::fromStdString(creds->token), true);
  else if (!creds->user.empty())
    client.set_login(QString::fromStdString(creds->user),
                     QString::fromStdString(creds->password));
  ferry::console::metrics_sampler sampler;
  if (files.enabled()) {
    if (auto why = sampler.set_tls(files.certificate, files.key, files.ca); !why.isEmpty()) {
      std::fprintf(stderr, "ferry-console: %s\n", qPrintable(why));
      return 2;
    }
  }
  auto address = parser.value(broker);
  QUrl metrics_url;
  if (parser.isSet(metrics)) {
    metrics_url = QUrl(parser.value(metrics));
    if (!metrics_url.isValid()) {
      std::fprintf(stderr, "ferry-console: bad --metrics URL '%s'\n",
                   qPrintable(parser.value(metrics)));
      return 2;
    }
  }
  ferry::console::main_window win(&client, &sampler, metrics_url);
  win.show();
  win.connect_to(address);
  if (parser.isSet(shots)) {
    win.set_refresh_interval_ms(1000);
    sampler.start(1000);
    QString last_metrics_error;
    QObject::connect(&sampler, &ferry::console::metrics_sampler::failed, &app,
                     [&last_metrics_error](const QString& why) { last_metrics_error = why; });
    win.take_screenshots(parser.value(shots), parser.value(wait).toInt() * 1000,
                         [&sampler, &last_metrics_error](QStringList files, QString error) {
      for (auto& f : files)
        std::printf("wrote %s\n", qPrintable(f));
      // What the charts had to draw from.
      std::printf("metrics: %zu scrapes from %s%s%s\n", sampler.history().size(),
                  qPrintable(sampler.url().toString()),
                  last_metrics_error.isEmpty() ? "" : "; last error: ",
                  qPrintable(last_metrics_error));
      if (!error.isEmpty())
        std::fprintf(stderr, "ferry-console: %s\n", qPrintable(error));
      std::fflush(stdout);
      QApplication::exit(error.isEmpty() ? 0 : 1);
    });
  }
  return app.exec();
}
