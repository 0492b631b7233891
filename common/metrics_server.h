// MetricsServer: serves a process's metrics over HTTP for Prometheus (`--metrics_listen` on the
// coordinator and the workers): GET (or HEAD) /metrics answers the text exposition format
// (version 0.0.4), another method on /metrics 405, any other path 404. GNU libmicrohttpd, every
// connection on one epoll thread of its own, bounded against hostile clients: a request line and
// headers must fit in kConnectionMemoryLimit (a longer one is answered 414 or 431 and closed,
// never buffered), a connection silent for kInactivityTimeoutSeconds is closed, one that has not
// completed a request within kRequestDeadline of connecting (or of its last answer) is closed
// however slowly it keeps sending, and at most kMaxConnections are open at once. A scrape calls
// `render` on that thread.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
//                    MetricsServer::Start("127.0.0.1:0", [&] { return registry.Render(); }));
//   spdlog::info("metrics on {}", server->url());   // http://127.0.0.1:40123/metrics
#ifndef WEFT_COMMON_METRICS_SERVER_H_
#define WEFT_COMMON_METRICS_SERVER_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/host_port.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace weft {

class MetricsServer {
 public:
  // The most memory one connection may hold for its request (libmicrohttpd's per-connection pool:
  // request line, headers and the answer's headers). A scraper's request is a few hundred bytes,
  // a few KiB with a bearer token; 32 KiB is libmicrohttpd's own default.
  static constexpr size_t kConnectionMemoryLimit = 32 << 10;
  // A connection that sends nothing (or reads nothing of its answer) for this long is closed. A
  // scraper sends its request as soon as it connects; 5 s is what the cpp-httplib server allowed
  // before. A client that sends a byte every few seconds is still bounded: by the memory limit
  // above and the connection cap below.
  static constexpr unsigned kInactivityTimeoutSeconds = 5;
  // Connections open at once; further ones wait in the kernel's accept queue until one closes.
  // Twice the 2,000 stalled connections of the security review (issue 30), so that a scraper
  // still gets in beside them, and at most 4096 x 32 KiB = 128 MiB of request memory. Capped
  // further at half the process's open-file limit, so that gRPC, Gloo and the job store keep
  // descriptors of their own.
  static constexpr unsigned kMaxConnections = 4096;
  // A request's line and headers must be in this long after the connection opened (or after its
  // previous answer). The inactivity timeout alone let a client that sends a byte every few
  // seconds hold a connection for ever: 4,200 of them held every slot (bench/hostile_load.sh).
  // A scraper's request arrives in one packet.
  static constexpr absl::Duration kRequestDeadline = absl::Seconds(10);

  // Listens on `listen` (HOST:PORT, the host a name or an address, IPv6 in brackets; port 0
  // picks a free one): INVALID_ARGUMENT naming a malformed address, UNAVAILABLE when it cannot
  // be bound.
  // `request_deadline`: kRequestDeadline but in tests.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, std::function<std::string()> render,
      absl::Duration request_deadline = kRequestDeadline);
  // Stops serving: closes every connection and waits for the server's threads.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "HOST:PORT" with the port it got; http://HOST:PORT/metrics.
  std::string address() const;
  std::string url() const;

  // Connections closed for missing kRequestDeadline so far.
  int64_t deadline_closes() const;

 private:
  MetricsServer(std::function<std::string()> render, std::string host, int port,
                absl::Duration request_deadline);
  struct Callbacks;  // libmicrohttpd's, in the .cc; their `cls` is this
  // libmicrohttpd's connection notifications and the access handler (its thread).
  void Opened(MHD_Connection* connection, int fd);
  void Closed(MHD_Connection* connection);
  void Answered(MHD_Connection* connection);
  // Once a second until stopped: shuts down connections past their request deadline (the
  // socket's shutdown, not its close: libmicrohttpd sees the end and closes it itself).
  void EnforceDeadlines();

  // Called by libmicrohttpd's thread for each scrape; outlives daemon_ (stopped first).
  const std::function<std::string()> render_;
  const std::string host_;
  const int port_;
  const absl::Duration request_deadline_;
  // Owned: MHD_stop_daemon in the destructor.
  MHD_Daemon* daemon_ = nullptr;

  struct Pending {
    int fd = -1;
    absl::Time since;  // opened, or last answered
  };
  mutable absl::Mutex mu_;
  std::map<MHD_Connection*, Pending> connections_ ABSL_GUARDED_BY(mu_);
  int64_t deadline_closes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::thread enforcer_;
};

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_SERVER_H_
