#include "client/coordinator_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status.h"

namespace weft::client {
namespace {

// Generous: SubmitJob validates the spec, which reads npy and safetensors headers.
constexpr auto kUnaryDeadline = std::chrono::seconds(30);
// What each GetJob or ListJobs call asks for: the coordinator's largest pages (it gives fewer
// where its bound is lower).
constexpr int kStepsPerCall = 10000;
constexpr int kJobsPerCall = 1000;
constexpr int kLogLinesPerCall = 10000;

// What to check when gRPC's words say a connection failed the way TLS on one side only, or a
// certificate the client does not trust, makes it fail; empty otherwise.
std::string TlsHint(const std::string& message, bool tls) {
  const std::string lower = absl::AsciiStrToLower(message);
  if (tls && (absl::StrContains(lower, "ssl") || absl::StrContains(lower, "handshake") ||
              absl::StrContains(lower, "certificate"))) {
    return " (the TLS handshake failed: is the coordinator serving TLS (--tls_cert), and does its "
           "certificate chain to --tls_ca and name the host of --coordinator, or "
           "--tls_server_name?)";
  }
  if (!tls && (absl::StrContains(lower, "socket closed") ||
               absl::StrContains(lower, "connection reset") ||
               absl::StrContains(lower, "end of tcp stream"))) {
    return " (the coordinator closed the connection: if it serves TLS (--tls_cert), give weftctl "
           "its CA with --tls_ca or $WEFT_TLS_CA)";
  }
  return "";
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status, const std::string& address, bool tls) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat("cannot reach coordinator at ", address, ": ",
                                               status.error_message(),
                                               TlsHint(status.error_message(), tls)));
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat("coordinator at ", address,
                                                    " did not answer in time: ",
                                                    status.error_message()));
  }
  return absl::Status(code, status.error_message());
}

CoordinatorClient::CoordinatorClient(const std::string& address,
                                     const CoordinatorChannelOptions& connection)
    : address_(address), tls_(!connection.tls_ca_pem.empty()) {
  grpc::ChannelArguments args;
  // GetJob returns the job's spec whole (up to 1 MiB, more for a job stored before that bound)
  // with a page of up to 10,000 steps.
  args.SetMaxReceiveMessageSize(-1);
  stub_ = v1::JobService::NewStub(NewCoordinatorChannel(address, connection, args));
}

void CoordinatorClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
}

absl::StatusOr<std::string> CoordinatorClient::Submit(const v1::JobSpec& spec) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  return Submit(req);
}

absl::StatusOr<std::string> CoordinatorClient::SubmitYaml(const std::string& yaml,
                                                          const std::string& spec_dir) {
  v1::SubmitJobRequest req;
  req.set_spec_yaml(yaml);
  req.set_spec_dir(spec_dir);
  return Submit(req);
}

absl::StatusOr<std::string> CoordinatorClient::Submit(const v1::SubmitJobRequest& req) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::SubmitJobResponse resp;
  absl::Status s = FromGrpc(stub_->SubmitJob(&ctx, req, &resp), address_, tls_);
  if (!s.ok()) return s;
  return resp.job_id();
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJobPage(const v1::GetJobRequest& request) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::Job job;
  absl::Status s = FromGrpc(stub_->GetJob(&ctx, request, &job), address_, tls_);
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_steps_page_size(kStepsPerCall);
  ASSIGN_OR_RETURN(v1::Job job, GetJobPage(request));
  while (!job.next_steps_page_token().empty()) {
    request.set_steps_page_token(job.next_steps_page_token());
    ASSIGN_OR_RETURN(v1::Job page, GetJobPage(request));
    // The latest record, with the steps of every page so far.
    page.mutable_steps()->Swap(job.mutable_steps());
    for (v1::StepMetrics& step : *job.mutable_steps()) *page.add_steps() = std::move(step);
    job = std::move(page);
  }
  return job;
}

absl::StatusOr<v1::JobTrace> CoordinatorClient::GetJobTrace(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::JobTrace trace;
  absl::Status s = FromGrpc(stub_->GetJobTrace(&ctx, req, &trace), address_, tls_);
  if (!s.ok()) return s;
  return trace;
}

absl::Status CoordinatorClient::ReadJobLogs(
    v1::GetJobLogsRequest request, const std::function<void(const v1::JobLogLine&)>& on_line) {
  request.set_page_size(kLogLinesPerCall);
  while (true) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::GetJobLogsResponse page;
    RETURN_IF_ERROR(FromGrpc(stub_->GetJobLogs(&ctx, request, &page), address_, tls_));
    for (const v1::JobLogLine& line : page.lines()) on_line(line);
    // An empty page ends the reading whatever its token says: no call without progress.
    if (page.next_page_token().empty() || page.lines().empty()) return absl::OkStatus();
    request.set_page_token(page.next_page_token());
  }
}

absl::StatusOr<JobList> CoordinatorClient::ListJobs(v1::JobState state, int limit) {
  JobList list;
  v1::ListJobsRequest request;
  request.set_state(state);
  while (static_cast<int>(list.jobs.size()) < limit) {
    request.set_page_size(std::min(limit - static_cast<int>(list.jobs.size()), kJobsPerCall));
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ListJobsResponse page;
    absl::Status s = FromGrpc(stub_->ListJobs(&ctx, request, &page), address_, tls_);
    if (!s.ok()) return s;
    for (v1::JobSummary& job : *page.mutable_jobs()) {
      if (static_cast<int>(list.jobs.size()) == limit) break;
      list.jobs.push_back(std::move(job));
    }
    // An empty page ends the listing whatever its token says: no call without progress.
    if (page.next_page_token().empty() || page.jobs().empty()) return list;
    request.set_page_token(page.next_page_token());
  }
  list.more = true;
  return list;
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id,
                                                     const std::string& reason) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  v1::Job job;
  absl::Status s = FromGrpc(stub_->CancelJob(&ctx, req, &job), address_, tls_);
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::DeleteJob(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::DeleteJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  absl::Status s = FromGrpc(stub_->DeleteJob(&ctx, req, &job), address_, tls_);
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<std::vector<v1::WorkerInfo>> CoordinatorClient::ListWorkers() {
  ASSIGN_OR_RETURN(v1::ListWorkersResponse resp, ListWorkersAndProfiles());
  return std::vector<v1::WorkerInfo>(resp.workers().begin(), resp.workers().end());
}

absl::StatusOr<v1::ListWorkersResponse> CoordinatorClient::ListWorkersAndProfiles() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListWorkersResponse resp;
  absl::Status s =
      FromGrpc(stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp), address_, tls_);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::CostProfile> CoordinatorClient::PutCostProfile(const v1::CostProfile& profile) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::PutCostProfileRequest req;
  *req.mutable_profile() = profile;
  v1::CostProfile resp;
  absl::Status s = FromGrpc(stub_->PutCostProfile(&ctx, req, &resp), address_, tls_);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<WatchResult> CoordinatorClient::Watch(
    const std::string& job_id, grpc::ClientContext* ctx,
    const std::function<void(const v1::JobEvent&)>& on_event) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(ctx, req);
  WatchResult result;
  v1::JobEvent event;
  while (reader->Read(&event)) {
    on_event(event);
    if (event.event_case() == v1::JobEvent::kState) {
      result.state = event.state();
      result.message = event.message();
      if (IsFinalState(result.state)) {
        result.final = true;
        break;
      }
    }
  }
  // The coordinator closes the stream after the final state; do not rely on it.
  if (result.final) ctx->TryCancel();
  const grpc::Status status = reader->Finish();
  // A stream that delivered the final state has done its job, whatever status closes it.
  if (result.final) return result;
  absl::Status s = FromGrpc(status, address_, tls_);
  if (!s.ok()) return s;
  return result;
}

}  // namespace weft::client
