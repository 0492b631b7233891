#include "coordinator/rpc/grpc_server.h"

#include <chrono>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator::rpc {
namespace {

// Each Connect and WatchJob call holds a thread while it lasts.
constexpr int kMaxServerThreads = 1024;
// Programs for large models and specs with many layers exceed gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 256 << 20;
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
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    for (const char* service :
         {"weft.v1.JobService", "weft.v1.WorkerService", "weft.v1.RendezvousService"}) {
      health->SetServingStatus(service, true);
    }
  }
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  // A server that never started (its port was taken) has nothing to stop.
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  coordinator_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->Wait();
}

}  // namespace weft::coordinator::rpc
