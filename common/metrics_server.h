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

// Splits HOST:PORT ("[::1]:9100" -> "::1", 9100): INVALID_ARGUMENT naming `flag` unless the port
// is 0..65535 and the host is not empty (allow_empty_host: ":7070", which gRPC reads as every
// interface).
absl::Status ParseHostPort(const std::string& flag, const std::string& address, std::string* host,
                           int* port, bool allow_empty_host = false);

// HOST:PORT, the host in brackets when it is an IPv6 address ("[::1]:9100").
std::string JoinHostPort(const std::string& host, int port);

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_SERVER_H_
