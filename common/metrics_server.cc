#include "common/metrics_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// libmicrohttpd's messages while MHD_start_daemon runs on this thread, for Start's error; null on
// every other thread, so that the server thread's messages at run time (each about one client:
// a timeout, a refused over-long request, the connection cap) are dropped rather than let a
// hostile client fill the log.
thread_local std::string* start_messages = nullptr;

void KeepStartMessage(void*, const char* format, va_list args) {
  if (start_messages == nullptr) return;
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  absl::StrAppend(start_messages, start_messages->empty() ? "" : "; ", line);
  while (!start_messages->empty() && start_messages->back() == '\n') start_messages->pop_back();
}

MHD_Result Queue(MHD_Connection* connection, unsigned status, const std::string& body,
                 const char* allow) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                      MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          status == MHD_HTTP_OK ? kContentType : "text/plain; charset=utf-8");
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);  // the connection holds its own reference until it is sent
  return queued;
}

// A listening socket on host:port, SO_REUSEADDR (a restarted daemon gets its port back at once)
// but not SO_REUSEPORT (with which a second daemon on the same port would share it silently);
// close-on-exec, so that child processes do not hold the port. The first of the host's addresses
// that binds; UNAVAILABLE naming `listen` and the reason when none does.
absl::StatusOr<int> Listen(const std::string& listen, const std::string& host, int port) {
  auto unavailable = [&](const std::string& reason) {
    return absl::UnavailableError(absl::StrCat("--metrics_listen ", listen,
                                               ": cannot listen there (in use, or not an address "
                                               "of this machine): ",
                                               reason));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  if (int error = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
      error != 0) {
    return unavailable(gai_strerror(error));
  }
  std::string reason = "no address";
  int socket_fd = -1;
  for (const addrinfo* a = addresses; a != nullptr && socket_fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) != 0 ||
        bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      reason = std::strerror(errno);
      close(fd);
      continue;
    }
    socket_fd = fd;
  }
  freeaddrinfo(addresses);
  if (socket_fd < 0) return unavailable(reason);
  return socket_fd;
}

// kMaxConnections, or half the open-file limit where that is lower.
unsigned ConnectionLimit() {
  rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) {
    return MetricsServer::kMaxConnections;
  }
  return static_cast<unsigned>(
      std::clamp<rlim_t>(files.rlim_cur / 2, 1, MetricsServer::kMaxConnections));
}

}  // namespace

// libmicrohttpd's callbacks; their `cls` is the server.
struct MetricsServer::Callbacks {
  // The access handler, called once the request line and headers are in. It answers at once: a
  // request body is not wanted, and libmicrohttpd discards one that follows an answer. HEAD is
  // answered as GET without the body (libmicrohttpd leaves it out).
  static MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* /*version*/,
                           const char* /*upload_data*/, size_t* /*upload_data_size*/,
                           void** /*request_state*/) {
    auto* server = static_cast<MetricsServer*>(cls);
    server->Answered(connection);
    if (std::strcmp(url, "/metrics") != 0) {
      return Queue(connection, MHD_HTTP_NOT_FOUND, "only /metrics is served here\n", nullptr);
    }
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
      return Queue(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                   absl::StrCat(method, " /metrics: only GET and HEAD are served\n"), "GET, HEAD");
    }
    return Queue(connection, MHD_HTTP_OK, server->render_(), nullptr);
  }

  // The connection notification: opened (with its socket) and closed.
  static void Notify(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                     MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<MetricsServer*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      server->Opened(connection, info != nullptr ? static_cast<int>(info->connect_fd) : -1);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      server->Closed(connection);
    }
  }
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, std::function<std::string()> render,
    absl::Duration request_deadline) {
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort("--metrics_listen", listen, &host, &port); !s.ok()) return s;
  absl::StatusOr<int> socket_fd = Listen(listen, host, port);
  if (!socket_fd.ok()) return socket_fd.status();
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  if (getsockname(*socket_fd, reinterpret_cast<sockaddr*>(&bound), &bound_size) != 0) {
    const std::string reason = std::strerror(errno);
    close(*socket_fd);
    return absl::InternalError(
        absl::StrCat("--metrics_listen ", listen, ": reading the port bound: ", reason));
  }
  const bool v6 = bound.ss_family == AF_INET6;
  port = ntohs(v6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                  : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);

  std::unique_ptr<MetricsServer> out(
      new MetricsServer(std::move(render), host, port, request_deadline));
  MetricsServer* server = out.get();
  std::string messages;
  start_messages = &messages;
  // One thread multiplexes every connection with epoll (no thread per connection, no
  // FD_SETSIZE cap). The daemon owns the socket from here: it closes it when it stops, and on
  // nearly every failure to start (not all, so it is not closed again here: a descriptor left
  // open beats closing one another thread may have been given since).
  out->daemon_ = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
      static_cast<uint16_t>(port), /*apc=*/nullptr, /*apc_cls=*/nullptr, &Callbacks::Answer,
      server, MHD_OPTION_EXTERNAL_LOGGER, &KeepStartMessage, nullptr,
      MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::Notify, server,
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(*socket_fd),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(kConnectionMemoryLimit),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(kInactivityTimeoutSeconds),
      MHD_OPTION_CONNECTION_LIMIT, ConnectionLimit(), MHD_OPTION_END);
  start_messages = nullptr;
  if (out->daemon_ == nullptr) {
    return absl::InternalError(absl::StrCat("--metrics_listen ", listen,
                                            ": starting the HTTP server (libmicrohttpd): ",
                                            messages.empty() ? "failed" : messages));
  }
  out->enforcer_ = std::thread([server] { server->EnforceDeadlines(); });
  return out;
}

MetricsServer::MetricsServer(std::function<std::string()> render, std::string host, int port,
                             absl::Duration request_deadline)
    : render_(std::move(render)),
      host_(std::move(host)),
      port_(port),
      request_deadline_(request_deadline) {}

MetricsServer::~MetricsServer() {
  stop_.Notify();
  if (enforcer_.joinable()) enforcer_.join();
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

void MetricsServer::Opened(MHD_Connection* connection, int fd) {
  absl::MutexLock lock(&mu_);
  connections_[connection] = Pending{fd, absl::Now()};
}

void MetricsServer::Closed(MHD_Connection* connection) {
  absl::MutexLock lock(&mu_);
  connections_.erase(connection);
}

void MetricsServer::Answered(MHD_Connection* connection) {
  absl::MutexLock lock(&mu_);
  if (auto it = connections_.find(connection); it != connections_.end()) {
    it->second.since = absl::Now();
  }
}

int64_t MetricsServer::deadline_closes() const {
  absl::MutexLock lock(&mu_);
  return deadline_closes_;
}

void MetricsServer::EnforceDeadlines() {
  const absl::Duration tick = std::min(absl::Seconds(1), request_deadline_ / 4);
  while (!stop_.WaitForNotificationWithTimeout(tick)) {
    const absl::Time late = absl::Now() - request_deadline_;
    absl::MutexLock lock(&mu_);
    // Under mu_: a connection still listed is not yet closed, so its descriptor is still its own.
    for (auto& [connection, pending] : connections_) {
      if (pending.fd < 0 || pending.since > late) continue;
      ::shutdown(pending.fd, SHUT_RDWR);
      pending.since = absl::InfiniteFuture();  // once
      ++deadline_closes_;
    }
  }
}

std::string MetricsServer::address() const { return JoinHostPort(host_, port_); }

std::string MetricsServer::url() const { return absl::StrCat("http://", address(), "/metrics"); }

}  // namespace weft
