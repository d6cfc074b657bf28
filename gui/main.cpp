// ferry-console: the Qt desktop console for a Ferry cluster.
//
//   ferry-console [--broker HOST:PORT] [--metrics URL] [--screenshot DIR]
//
// --screenshot DIR connects, waits for data, writes one PNG per main view
// into DIR and exits (0 on success). Set QT_QPA_PLATFORM=offscreen to run
// it without a display.

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
  parser.addOption(broker);
  parser.addOption(metrics);
  parser.addOption(shots);
  parser.addOption(wait);
  parser.process(app);

  ferry::console::console_client client;
  ferry::console::metrics_sampler sampler;
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
    win.take_screenshots(parser.value(shots), parser.value(wait).toInt() * 1000, [](QStringList files, QString error) {
      for (auto& f : files)
        std::printf("wrote %s\n", qPrintable(f));
      if (!error.isEmpty())
        std::fprintf(stderr, "ferry-console: %s\n", qPrintable(error));
      std::fflush(stdout);
      QApplication::exit(error.isEmpty() ? 0 : 1);
    });
  }
  return app.exec();
}
