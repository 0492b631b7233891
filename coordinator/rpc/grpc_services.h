// The gRPC faces of the coordinator: JobService, WorkerService and RendezvousService, each a thin
// translation into Coordinator calls (the logic and its tests live in coordinator.h). Blocking
// calls (WatchJob, Connect, Rendezvous Wait) end when the client goes away.
//
// E.g.
//   GrpcJobService jobs(coordinator);
//   GrpcWorkerService workers(coordinator);
//   GrpcRendezvousService rendezvous(coordinator->rendezvous());
//   builder.RegisterService(&jobs);  // and the others
#ifndef WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_
#define WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_

#include "coordinator/coordinator.h"
#include "coordinator/rendezvous.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::coordinator::rpc {

class GrpcJobService final : public v1::JobService::Service {
 public:
  explicit GrpcJobService(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status GetJobTrace(grpc::ServerContext* context, const v1::GetJobRequest* request,
                           v1::JobTrace* response) override;

 private:
  Coordinator* const coordinator_;  // not owned
};

// One Connect call per worker: this handler's thread writes what the coordinator queues for the
// worker, a second thread reads the worker's messages.
class GrpcWorkerService final : public v1::WorkerService::Service {
 public:
  explicit GrpcWorkerService(Coordinator* coordinator) : coordinator_(coordinator) {}

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  Coordinator* const coordinator_;  // not owned
};

class GrpcRendezvousService final : public v1::RendezvousService::Service {
 public:
  explicit GrpcRendezvousService(Rendezvous* rendezvous) : rendezvous_(rendezvous) {}

  grpc::Status Set(grpc::ServerContext* context, const v1::RendezvousSetRequest* request,
                   v1::RendezvousSetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::RendezvousGetRequest* request,
                   v1::RendezvousGetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context, const v1::RendezvousWaitRequest* request,
                    v1::RendezvousWaitResponse* response) override;

 private:
  Rendezvous* const rendezvous_;  // not owned
};

}  // namespace weft::coordinator::rpc

#endif  // WEFT_COORDINATOR_RPC_GRPC_SERVICES_H_
