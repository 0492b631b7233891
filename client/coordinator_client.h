// weftctl's view of a coordinator: JobService calls with deadlines, gRPC status turned into
// absl::Status, and an unreachable coordinator reported as such ("cannot reach coordinator at
// 127.0.0.1:7070: ...") instead of a bare UNAVAILABLE.
//
// E.g.
//   CoordinatorClient client("127.0.0.1:7070");
//   ASSIGN_OR_RETURN(std::string id, client.Submit(spec));
//   grpc::ClientContext ctx;
//   ASSIGN_OR_RETURN(WatchResult r, client.Watch(id, &ctx, [](const v1::JobEvent& e) { ... }));
#ifndef WEFT_CLIENT_COORDINATOR_CLIENT_H_
#define WEFT_CLIENT_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/coordinator_channel.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::client {

// absl::Status with the same code and message; UNAVAILABLE also names the address, and where
// gRPC's words point at TLS, what to check on which side (`tls`: the channel uses TLS).
absl::Status FromGrpc(const grpc::Status& status, const std::string& address, bool tls = false);

// What `weftctl list` shows: the first jobs of a listing.
struct JobList {
  std::vector<v1::JobSummary> jobs;  // in submit order
  bool more = false;                 // further jobs follow the last of these
};

struct WatchResult {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // last state seen
  std::string message;                             // with it
  bool final = false;                              // the stream reached a final state
};

class CoordinatorClient {
 public:
  // connection: the coordinator's client token (weftctl --token_file), sent with every call, and
  // its CA for TLS (weftctl --tls_ca); each empty: none.
  explicit CoordinatorClient(const std::string& address,
                             const CoordinatorChannelOptions& connection = {});

  const std::string& address() const { return address_; }

  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  // A spec's YAML text, parsed by the coordinator; its relative paths resolved against spec_dir
  // (absolute) or, empty, under the cluster's --data_root and --checkpoint_root.
  absl::StatusOr<std::string> SubmitYaml(const std::string& yaml, const std::string& spec_dir);
  // The job with every step of its current attempt, read a page (GetJob call) at a time.
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // One GetJob call: the job with one page of its steps.
  absl::StatusOr<v1::Job> GetJobPage(const v1::GetJobRequest& request);
  // At most `limit` jobs in submit order, in `state` (JOB_STATE_UNSPECIFIED: any), read a page
  // (ListJobs call) at a time.
  absl::StatusOr<JobList> ListJobs(v1::JobState state, int limit);
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason);
  // The job as it was before it was deleted.
  absl::StatusOr<v1::Job> DeleteJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();
  // The workers and the cost profiles the coordinator holds.
  absl::StatusOr<v1::ListWorkersResponse> ListWorkersAndProfiles();
  absl::StatusOr<v1::CostProfile> PutCostProfile(const v1::CostProfile& profile);
  absl::StatusOr<v1::JobTrace> GetJobTrace(const std::string& job_id);
  // Every log line the request matches from its page_token on, read a page (GetJobLogs call)
  // at a time, each handed to on_line in the coordinator's order.
  absl::Status ReadJobLogs(v1::GetJobLogsRequest request,
                           const std::function<void(const v1::JobLogLine&)>& on_line);

  // Streams the job's events (the replay, then new ones) to on_event until the job is final,
  // the stream breaks, or ctx is cancelled (TryCancel from another thread). The caller owns ctx
  // so that it can cancel it.
  absl::StatusOr<WatchResult> Watch(const std::string& job_id, grpc::ClientContext* ctx,
                                    const std::function<void(const v1::JobEvent&)>& on_event);

 private:
  void SetDeadline(grpc::ClientContext* ctx) const;
  absl::StatusOr<std::string> Submit(const v1::SubmitJobRequest& request);

  std::string address_;
  bool tls_ = false;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace weft::client

#endif  // WEFT_CLIENT_COORDINATOR_CLIENT_H_
