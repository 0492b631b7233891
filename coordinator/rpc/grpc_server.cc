#include "coordinator/rpc/grpc_server.h"

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/listen_queue.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator::rpc {
namespace {

// Each Connect and WatchJob call holds a thread while it lasts.
constexpr int kMaxServerThreads = 1024;
// Programs for large models and specs with many layers exceed gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 256 << 20;
// A connection must finish its handshake (TLS, then HTTP/2's settings) within this, or it is
// closed: idle TCP connections that never speak do not pile up (gRPC's default is 120 s).
constexpr int kHandshakeTimeoutMs = 10'000;
// A connection with no call for this long is closed (GOAWAY; a client's channel reconnects when it
// next calls): an idle HTTP/2 connection, which needs no token, does not hold a descriptor for
// ever. Workers' Connect streams and watches are calls, so their connections are never idle.
constexpr int kMaxConnectionIdleMs = 5 * 60'000;
// The accept queue is sampled this often; non-empty at kStalledSamples samples in a row, the
// server has stopped accepting (a healthy one empties it within milliseconds).
constexpr absl::Duration kAcceptSampleEvery = absl::Seconds(1);
constexpr int kStalledSamples = 10;
// After the coordinator ended its own streams, other in-flight calls (a unary call, a worker's
// reconnect racing the shutdown) get this long before they are cancelled.
constexpr auto kShutdownGrace = std::chrono::seconds(1);

}  // namespace

CoordinatorServer::CoordinatorServer(Coordinator* coordinator, const ServiceTokens& tokens)
    : coordinator_(coordinator),
      job_service_(coordinator, tokens.client),
      worker_service_(coordinator, tokens.worker),
      rendezvous_service_(coordinator->rendezvous(), tokens.worker) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Coordinator* coordinator, const std::string& listen, const ServiceTokens& tokens,
    const ServerTls& tls) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer(coordinator, tokens));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!tls.cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second coordinator on the same address must fail to bind, not share the
  // port and split the clients with this one.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kMaxConnectionIdleMs);
  // Reflection and health's Watch ask for no token of their own: bounded (open_call_guard.h).
  s->guard_ = std::make_shared<OpenCallGuard>(tokens.client, OpenCallGuard::Limits{});
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
  guards.push_back(s->guard_->Factory());
  builder.experimental().SetInterceptorCreators(std::move(guards));
  builder.AddListeningPort(listen, credentials, &s->port_);
  builder.RegisterService(&s->job_service_);
  builder.RegisterService(&s->worker_service_);
  builder.RegisterService(&s->rendezvous_service_);
  grpc::ResourceQuota quota("weft-coordinator");
  quota.SetMaxThreads(kMaxServerThreads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (is another process serving on that port?)"));
  }
  s->SetServing(true);
  s->monitor_ = std::thread([raw = s.get(), unix = absl::StartsWith(listen, "unix:")] {
    raw->Monitor(/*watch_accepts=*/!unix);  // a unix socket has no queue in /proc/net/tcp
  });
  return s;
}

void CoordinatorServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  for (const char* service :
       {"weft.v1.JobService", "weft.v1.WorkerService", "weft.v1.RendezvousService"}) {
    health->SetServingStatus(service, serving);
  }
}

absl::Status CoordinatorServer::Accepting() const {
  absl::MutexLock lock(&accept_mu_);
  return accepting_;
}

void CoordinatorServer::Monitor(bool watch_accepts) {
  // Opened now, while descriptors are to be had: each sample needs none.
  std::unique_ptr<ListenQueueProbe> probe;
  if (watch_accepts) {
    absl::StatusOr<std::unique_ptr<ListenQueueProbe>> opened = ListenQueueProbe::Open(port_);
    if (opened.ok()) {
      probe = *std::move(opened);
    } else {
      spdlog::warn("cannot watch the gRPC port's accept queue: {}", opened.status().ToString());
    }
  }
  int waiting_samples = 0;
  bool serving = true;
  while (!stop_monitor_.WaitForNotificationWithTimeout(kAcceptSampleEvery)) {
    if (probe != nullptr) {
      absl::StatusOr<int64_t> waiting = probe->Sample();
      if (!waiting.ok()) {
        spdlog::warn("cannot watch the gRPC port's accept queue: {}", waiting.status().ToString());
        probe.reset();
        continue;
      }
      waiting_samples = *waiting > 0 ? waiting_samples + 1 : 0;
      absl::MutexLock lock(&accept_mu_);
      if (waiting_samples >= kStalledSamples && accepting_.ok()) {
        accepting_ = absl::UnavailableError(absl::StrCat(
            "the gRPC server has stopped accepting connections: ", *waiting,
            " have waited in port ", port_, "'s accept queue for ",
            absl::FormatDuration(kAcceptSampleEvery * kStalledSamples),
            " (out of file descriptors? see the open-file limit logged at start)"));
        spdlog::error("{}; health says NOT_SERVING and the systemd watchdog is no longer pinged",
                      std::string(accepting_.message()));
      } else if (waiting_samples == 0 && !accepting_.ok()) {
        accepting_ = absl::OkStatus();
        spdlog::info("the gRPC server accepts connections again");
      }
    }
    // Health says SERVING while connections are accepted and job records can be stored.
    const bool now = Accepting().ok() && coordinator_->StoreHealth().ok();
    if (now != serving) {
      serving = now;
      SetServing(serving);
      spdlog::info("health says {}", serving ? "SERVING" : "NOT_SERVING");
    }
  }
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  // A server that never started (its port was taken) has nothing to stop.
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  stop_monitor_.Notify();
  if (monitor_.joinable()) monitor_.join();
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  coordinator_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->Wait();
}

}  // namespace weft::coordinator::rpc
