// JobService's reads, page by page, from the job store: GetJob (a job with a page of its steps),
// ListJobs (job summaries) and GetJobLogs (the lines its workers logged). They take no
// coordinator lock; the Coordinator syncs its store writer first, so a caller reads its own
// writes.
//
// E.g.
//   JobQueries queries(store.get(), PageLimits(), WorldSize);
//   ASSIGN_OR_RETURN(v1::Job job, queries.GetJob(request));
#ifndef WEFT_COORDINATOR_JOB_QUERIES_H_
#define WEFT_COORDINATOR_JOB_QUERIES_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

// The pages of ListJobs (jobs) and GetJob (a job's steps): how many a request that names no size
// gets, and the most a page holds (a request for more gets this many).
struct PageLimits {
  int jobs_default = 100;
  int jobs_max = 1000;
  int steps_default = 1000;
  int steps_max = 10000;
  // GetJobLogs' lines; a page also ends after logs_max_bytes of text (lines are up to 4 KiB).
  int logs_default = 1000;
  int logs_max = 10000;
  size_t logs_max_bytes = 2 << 20;
};

class JobQueries {
 public:
  // `store` outlives this; `world_size` is the mesh size of a spec.
  JobQueries(JobStore* store, PageLimits limits,
             std::function<int64_t(const v1::JobSpec&)> world_size)
      : store_(store), limits_(limits), world_size_(std::move(world_size)) {}

  // The job with one page of its steps in step order, each as its latest attempt ran it;
  // next_steps_page_token names the next page, empty after the last. INVALID_ARGUMENT names a
  // negative steps_page_size or a token GetJob did not give.
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request) const;
  // One page of job summaries in submit order, of every job or those in request.state;
  // next_page_token (the page's last job id) is empty after the last. INVALID_ARGUMENT names a
  // negative page_size, an unknown state or a page_token that names no job.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request) const;
  // One page of the lines the job's workers logged while they ran its ranks, ordered by attempt,
  // time, rank and seq. NOT_FOUND for an unknown job; INVALID_ARGUMENT names a rank or attempt
  // the job does not have, a negative page_size or since_ms, or a page_token GetJobLogs did not
  // give.
  absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(const v1::GetJobLogsRequest& request) const;

 private:
  JobStore* const store_;
  const PageLimits limits_;
  const std::function<int64_t(const v1::JobSpec&)> world_size_;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_QUERIES_H_
