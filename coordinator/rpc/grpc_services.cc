#include "coordinator/rpc/grpc_services.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/bearer_token.h"
#include "coordinator/rpc/grpc_status.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator::rpc {
namespace {

// What a unary call's long work polls (planner/stop.h): its deadline, then whether the client
// cancelled it (or the server, shutting down, did), so that its thread is not held past either.
planner::StopCheck CallStop(const grpc::ServerContext& context) {
  return [&context]() -> absl::Status {
    const auto deadline = context.deadline();
    if (deadline != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() >= deadline) {
      return absl::DeadlineExceededError("the call's deadline passed");
    }
    if (context.IsCancelled()) return absl::CancelledError("the call was cancelled");
    return absl::OkStatus();
  };
}

// The WorkerConnection of one Connect call: Send queues, the handler thread drains the queue
// into the stream (the sync API allows one writer and one reader at a time).
class GrpcWorkerConnection final : public WorkerConnection {
 public:
  bool Send(const v1::CoordinatorMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    queue_.push_back(msg);
    return true;
  }

  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    close_status_ = status;
  }

  // The next message to write; std::nullopt once closed.
  std::optional<v1::CoordinatorMessage> Next() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &GrpcWorkerConnection::ReadyLocked));
    if (closed_) return std::nullopt;
    v1::CoordinatorMessage msg = std::move(queue_.front());
    queue_.pop_front();
    return msg;
  }

  absl::Status close_status() {
    absl::MutexLock lock(&mu_);
    return close_status_;
  }

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !queue_.empty();
  }

  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::Status Authenticate(const grpc::ServerContext& context, const std::string& token,
                          const char* service) {
  if (token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(service, " needs an authorization: Bearer <token> header"));
  }
  if (!BearerMatches(absl::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat(service, ": the bearer token is not this service's"));
  }
  return grpc::Status::OK;
}

// ---- JobService ----

grpc::Status GrpcJobService::SubmitJob(
    grpc::ServerContext* context, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<std::string> id = coordinator_->SubmitJob(*request, CallStop(*context));
  if (!id.ok()) {
    spdlog::info("SubmitJob rejected: {}", id.status().ToString());
    return ToGrpcStatus(id.status());
  }
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                    v1::Job* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::Job> job = coordinator_->GetJob(*request);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::ListJobsResponse> jobs = coordinator_->ListJobs(*request);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  *response = std::move(*jobs);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::CancelJob(
    grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::Job> job = coordinator_->CancelJob(request->job_id(), request->reason());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::DeleteJob(
    grpc::ServerContext* context, const v1::DeleteJobRequest* request, v1::Job* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::Job> job = coordinator_->DeleteJob(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::WatchJob(grpc::ServerContext* context,
                                      const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::JobEvent>* writer) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  return ToGrpcStatus(coordinator_->WatchJob(
      request->job_id(), [writer](const v1::JobEvent& event) { return writer->Write(event); },
      [context] { return context->IsCancelled(); }));
}

grpc::Status GrpcJobService::ListWorkers(
    grpc::ServerContext* context, const v1::ListWorkersRequest*,
    v1::ListWorkersResponse* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  for (v1::WorkerInfo& info : coordinator_->ListWorkers()) *response->add_workers() = std::move(info);
  for (v1::CostProfile& p : coordinator_->ListCostProfiles()) *response->add_profiles() = std::move(p);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::PutCostProfile(grpc::ServerContext* context,
                                            const v1::PutCostProfileRequest* request,
                                            v1::CostProfile* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  if (absl::Status s = coordinator_->PutCostProfile(request->profile()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  *response = request->profile();
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::GetJobTrace(
    grpc::ServerContext* context, const v1::GetJobRequest* request, v1::JobTrace* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::JobTrace> trace = coordinator_->GetJobTrace(request->job_id());
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  *response = std::move(*trace);
  return grpc::Status::OK;
}

grpc::Status GrpcJobService::GetJobLogs(grpc::ServerContext* context,
                                        const v1::GetJobLogsRequest* request,
                                        v1::GetJobLogsResponse* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<v1::GetJobLogsResponse> logs = coordinator_->GetJobLogs(*request);
  if (!logs.ok()) return ToGrpcStatus(logs.status());
  *response = std::move(*logs);
  return grpc::Status::OK;
}

// ---- WorkerService ----

grpc::Status GrpcWorkerService::Connect(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  v1::WorkerMessage first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the stream ended before Hello");
  }
  if (!first.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on WorkerService.Connect must be Hello");
  }
  auto connection = std::make_shared<GrpcWorkerConnection>();
  absl::StatusOr<std::string> worker_id =
      coordinator_->ConnectWorker(first.hello(), context->peer(), connection);
  if (!worker_id.ok()) return ToGrpcStatus(worker_id.status());

  std::atomic<bool> reader_done{false};
  std::string reader_end;  // written by the reader before reader_done
  std::thread reader([&] {
    v1::WorkerMessage msg;
    while (stream->Read(&msg)) coordinator_->HandleWorkerMessage(*worker_id, msg);
    reader_end = context->IsCancelled() ? "its stream broke" : "it closed its stream";
    reader_done = true;
    connection->Close(absl::OkStatus());
  });

  bool write_failed = false;
  while (std::optional<v1::CoordinatorMessage> msg = connection->Next()) {
    if (!stream->Write(*msg)) {
      write_failed = true;
      break;
    }
  }
  // Closed by the coordinator (lost, shutdown) or a failed write: unblock the reader.
  if (!reader_done) context->TryCancel();
  reader.join();

  std::string why = write_failed ? "writing to its stream failed" : reader_end;
  coordinator_->DisconnectWorker(*worker_id, why);  // no-op when the coordinator closed it
  return ToGrpcStatus(connection->close_status());
}

// ---- RendezvousService ----

grpc::Status GrpcRendezvousService::Set(grpc::ServerContext* context,
                                        const v1::RendezvousSetRequest* request,
                                        v1::RendezvousSetResponse*) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  return ToGrpcStatus(
      rendezvous_->Set(request->scope(), request->ticket(), request->key(), request->value()));
}

grpc::Status GrpcRendezvousService::Get(grpc::ServerContext* context,
                                        const v1::RendezvousGetRequest* request,
                                        v1::RendezvousGetResponse* response) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  absl::StatusOr<std::string> value =
      rendezvous_->Get(request->scope(), request->ticket(), request->key());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(std::move(*value));
  return grpc::Status::OK;
}

grpc::Status GrpcRendezvousService::Wait(grpc::ServerContext* context,
                                         const v1::RendezvousWaitRequest* request,
                                         v1::RendezvousWaitResponse*) {
  if (grpc::Status denied = Denied(*context); !denied.ok()) return denied;
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  return ToGrpcStatus(rendezvous_->Wait(request->scope(), request->ticket(), keys,
                                        absl::Milliseconds(request->timeout_ms()),
                                        [context] { return context->IsCancelled(); }));
}

}  // namespace weft::coordinator::rpc
