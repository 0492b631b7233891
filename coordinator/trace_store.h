// TraceStore: the timelines of traced jobs (JobSpec.trace), in memory. Each job keeps the spans
// its ranks sent with their StepReports for its latest attempt; GetJobTrace serves them while
// the job runs and after it ended. Memory is bounded twice: a job keeps at most
// max_spans_per_job spans (the first ones; later ones are counted as dropped), and when all
// jobs together hold more than max_spans_total (or more than max_finished_jobs have finished),
// the traces of finished jobs are forgotten, oldest finished first. Traces do not survive a coordinator restart.
//
// Thread-safe, with its own lock, so that a large trace is copied out without holding the
// coordinator's.
//
// E.g.
//   TraceStore traces(TraceLimits{});
//   traces.Begin("job-1", /*attempt=*/1, {"worker-1", "worker-2"});
//   traces.Add("job-1", 1, /*rank=*/0, report.spans());
//   traces.Finish("job-1");
//   std::optional<v1::JobTrace> trace = traces.Get("job-1");
#ifndef WEFT_COORDINATOR_TRACE_STORE_H_
#define WEFT_COORDINATOR_TRACE_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/repeated_field.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

struct TraceLimits {
  // A span takes about 100 bytes here: 500k is about 50 MB, and well under the 256 MB gRPC
  // message bound of GetJobTrace.
  int64_t max_spans_per_job = 500000;
  int64_t max_spans_total = 2000000;
  // Finished jobs' traces held, however small.
  int64_t max_finished_jobs = 256;
};

class TraceStore {
 public:
  explicit TraceStore(TraceLimits limits) : limits_(limits) {}

  // Starts the trace of an attempt, replacing any earlier attempt's. workers: by rank.
  void Begin(const std::string& job_id, int attempt, const std::vector<std::string>& workers)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Appends one step's spans of `rank`; ignored unless the attempt is the one begun.
  void Add(const std::string& job_id, int attempt, int rank,
           const google::protobuf::RepeatedPtrField<v1::TraceSpan>& spans)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The attempt ended: its trace may be forgotten to make room for others.
  void Finish(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The job was deleted: its trace goes now, finished or not.
  void Forget(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of the job's trace; nullopt if none is held.
  std::optional<v1::JobTrace> Get(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // GetJobTrace: the trace of the stored job, empty while it is pending. FAILED_PRECONDITION when
  // it was not submitted with trace, NOT_FOUND for a trace no longer held.
  absl::StatusOr<v1::JobTrace> TraceOf(const v1::Job& job) const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t total_spans() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    v1::JobTrace trace;
    int64_t spans = 0;
    bool finished = false;
  };
  // Forgets finished traces, oldest first, until the limits hold (or none is left to forget).
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TraceLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> finished_ ABSL_GUARDED_BY(mu_);  // finish order, oldest first
  int64_t total_spans_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_TRACE_STORE_H_
