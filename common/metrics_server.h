// MetricsServer: serves a process's metrics over HTTP for Prometheus (`--metrics_listen` on the
// coordinator and the workers): GET /metrics answers the text exposition format (version 0.0.4),
// anything else 404. cpp-httplib's server, on threads of its own; a scrape calls `render` on one
// of them.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
//                    MetricsServer::Start("127.0.0.1:0", [&] { return registry.Render(); }));
//   spdlog::info("metrics on {}", server->url());   // http://127.0.0.1:40123/metrics
#ifndef WEFT_COMMON_METRICS_SERVER_H_
#define WEFT_COMMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/host_port.h"

namespace httplib {
class Server;
}

namespace weft {

class MetricsServer {
 public:
  // Listens on `listen` (HOST:PORT, the host a name or an address, IPv6 in brackets; port 0
  // picks a free one): INVALID_ARGUMENT naming a malformed address, UNAVAILABLE when it cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, std::function<std::string()> render);
  // Stops serving and waits for the server's threads.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "HOST:PORT" with the port it got; http://HOST:PORT/metrics.
  std::string address() const;
  std::string url() const;

 private:
  MetricsServer(std::unique_ptr<httplib::Server> server, std::string host, int port);

  const std::unique_ptr<httplib::Server> server_;
  const std::string host_;
  const int port_;
  std::thread thread_;
};

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_SERVER_H_
