// The gRPC faces of the coordinator: JobService, WorkerService and RendezvousService, each a thin
// translation into Coordinator calls (the logic and its tests live in coordinator.h). Blocking
// calls (WatchJob, Connect, Rendezvous Wait) end when the client goes away. Each service asks
// every call for its role's bearer token (common/bearer_token.h): JobService the clients',
// WorkerService and RendezvousService the workers'; an empty token leaves the service open.
//
// E.g.
//   GrpcJobService jobs(coordinator, client_token);
//   GrpcWorkerService workers(coordinator, worker_token);
//   GrpcRendezvousService rendezvous(coordinator->rendezvous(), worker_token);
//   builder.RegisterService(&jobs);  // and the others
#ifndef WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_
#define WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_

#include <string>
#include <utility>

#include "coordinator/coordinator.h"
#include "coordinator/rendezvous.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::coordinator::rpc {

// OK when `token` is empty or the call carries `authorization: Bearer <token>`; else
// UNAUTHENTICATED naming `service` (and never the token).
grpc::Status Authenticate(const grpc::ServerContext& context, const std::string& token,
                          const char* service);

class GrpcJobService final : public v1::JobService::Service {
 public:
  GrpcJobService(Coordinator* coordinator, std::string client_token)
      : coordinator_(coordinator), client_token_(std::move(client_token)) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context, const v1::DeleteJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status PutCostProfile(grpc::ServerContext* context,
                              const v1::PutCostProfileRequest* request,
                              v1::CostProfile* response) override;
  grpc::Status GetJobTrace(grpc::ServerContext* context, const v1::GetJobRequest* request,
                           v1::JobTrace* response) override;
  grpc::Status GetJobLogs(grpc::ServerContext* context, const v1::GetJobLogsRequest* request,
                          v1::GetJobLogsResponse* response) override;

 private:
  grpc::Status Denied(const grpc::ServerContext& c) const {
    return Authenticate(c, client_token_, "weft.v1.JobService");
  }

  Coordinator* const coordinator_;  // not owned
  const std::string client_token_;
};

// One Connect call per worker: this handler's thread writes what the coordinator queues for the
// worker, a second thread reads the worker's messages.
class GrpcWorkerService final : public v1::WorkerService::Service {
 public:
  GrpcWorkerService(Coordinator* coordinator, std::string worker_token)
      : coordinator_(coordinator), worker_token_(std::move(worker_token)) {}

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  grpc::Status Denied(const grpc::ServerContext& c) const {
    return Authenticate(c, worker_token_, "weft.v1.WorkerService");
  }

  Coordinator* const coordinator_;  // not owned
  const std::string worker_token_;
};

class GrpcRendezvousService final : public v1::RendezvousService::Service {
 public:
  GrpcRendezvousService(Rendezvous* rendezvous, std::string worker_token)
      : rendezvous_(rendezvous), worker_token_(std::move(worker_token)) {}

  grpc::Status Set(grpc::ServerContext* context, const v1::RendezvousSetRequest* request,
                   v1::RendezvousSetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::RendezvousGetRequest* request,
                   v1::RendezvousGetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context, const v1::RendezvousWaitRequest* request,
                    v1::RendezvousWaitResponse* response) override;

 private:
  grpc::Status Denied(const grpc::ServerContext& c) const {
    return Authenticate(c, worker_token_, "weft.v1.RendezvousService");
  }

  Rendezvous* const rendezvous_;  // not owned
  const std::string worker_token_;
};

}  // namespace weft::coordinator::rpc

#endif  // WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_
