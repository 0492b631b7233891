#include "common/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weft {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, std::function<std::string()> render) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort("--metrics_listen", listen, &host, &port); !s.ok()) return s;
  auto server = std::make_unique<httplib::Server>();
  server->Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                       httplib::Response& response) {
    response.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // SO_REUSEADDR alone (a restarted daemon gets its port back at once), not httplib's default
  // SO_REUSEPORT as well, with which a second daemon on the same port would share it silently.
  server->set_socket_options([](int socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // A scraper is a short request: a slow or silent client is dropped rather than hold a thread.
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  server->set_payload_max_length(64 << 10);
  const int bound = port == 0 ? server->bind_to_any_port(host) : server->bind_to_port(host, port)
                                                                     ? port
                                                                     : -1;
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_listen ", listen, ": cannot listen there (in use, or not an "
                     "address of this machine)"));
  }
  std::unique_ptr<MetricsServer> out(new MetricsServer(std::move(server), host, bound));
  httplib::Server* raw = out->server_.get();
  auto ended = std::make_shared<std::atomic<bool>>(false);
  out->thread_ = std::thread([raw, ended] {
    raw->listen_after_bind();
    ended->store(true);
  });
  // stop() does nothing to a server that is not running yet: wait until it runs (or ended at
  // once), so that the destructor always ends it.
  while (!raw->is_running() && !ended->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

MetricsServer::MetricsServer(std::unique_ptr<httplib::Server> server, std::string host, int port)
    : server_(std::move(server)), host_(std::move(host)), port_(port) {}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::address() const { return JoinHostPort(host_, port_); }

std::string MetricsServer::url() const { return absl::StrCat("http://", address(), "/metrics"); }

}  // namespace weft
