// The coordinator's gRPC server: JobService, WorkerService and RendezvousService over one
// Coordinator, plus the standard health service (grpc.health.v1.Health) and server reflection.
// Each worker's Connect stream holds a server thread for its whole life, so the thread quota is
// sized for many workers and watchers at once.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorServer> server,
//                    CoordinatorServer::Start(coordinator.get(), "127.0.0.1:0"));
//   WritePortFile(server->port());
//   ...
//   server->Shutdown();  // ends streams, then stops serving
#ifndef WEFT_COORDINATOR_RPC_GRPC_SERVER_H_
#define WEFT_COORDINATOR_RPC_GRPC_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/coordinator.h"
#include "coordinator/rpc/grpc_services.h"
#include "coordinator/rpc/open_call_guard.h"

namespace weft::coordinator::rpc {

// The bearer tokens the services ask for (common/bearer_token.h); empty: open.
struct ServiceTokens {
  std::string client;  // JobService
  std::string worker;  // WorkerService, RendezvousService
};

// The coordinator's certificate and its key, PEM (common/tls.h); both empty: plaintext.
struct ServerTls {
  std::string cert_pem;  // the chain, the coordinator's own certificate first
  std::string key_pem;
};

class CoordinatorServer {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks a free one) and serves `coordinator`, which
  // must outlive the server. JobService asks for `tokens.client`, WorkerService and
  // RendezvousService for `tokens.worker` (empty: open); the health service is always open.
  // With `tls` every service, health included, is served over TLS only.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      Coordinator* coordinator, const std::string& listen, const ServiceTokens& tokens = {},
      const ServerTls& tls = {});
  ~CoordinatorServer();

  // The bound port.
  int port() const { return port_; }
  // OK while the server accepts connections; UNAVAILABLE saying why once connections have waited
  // in the listening socket's accept queue for 10 s (then health says NOT_SERVING too, until the
  // queue drains). gRPC stops accepting for good after an accept fails with EMFILE, so the
  // systemd watchdog asks this and a supervisor restarts the coordinator. Health also says
  // NOT_SERVING while job records cannot be stored (Coordinator::StoreHealth).
  absl::Status Accepting() const;
  // The bound on reflection and health Watch streams (open_call_guard.h).
  const OpenCallGuard& guard() const { return *guard_; }
  // Reports NOT_SERVING, shuts the coordinator down (ending worker streams, watches and
  // rendezvous waits), then stops the server. Idempotent.
  void Shutdown();

 private:
  CoordinatorServer(Coordinator* coordinator, const ServiceTokens& tokens);
  // Health's status, overall and per service.
  void SetServing(bool serving);
  // Once a second until Shutdown: the accept queue (Accepting(), when `watch_accepts`) and the job
  // store's writes (Coordinator::StoreHealth) set health's status.
  void Monitor(bool watch_accepts);

  Coordinator* const coordinator_;  // not owned
  GrpcJobService job_service_;
  GrpcWorkerService worker_service_;
  GrpcRendezvousService rendezvous_service_;
  std::shared_ptr<OpenCallGuard> guard_;  // shared with the server's interceptors
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
  mutable absl::Mutex accept_mu_;
  absl::Status accepting_ ABSL_GUARDED_BY(accept_mu_);
  absl::Notification stop_monitor_;
  std::thread monitor_;
};

}  // namespace weft::coordinator::rpc

#endif  // WEFT_COORDINATOR_RPC_GRPC_SERVER_H_
