// The coordinator's durable record of jobs: an embedded SQLite database (WAL mode) holding every
// job (its spec as a serialized proto, state, message, times, attempt, assigned workers) and every
// JobEvent it emitted. Each state change is written, together with its event, in one transaction
// before the coordinator publishes it, so a coordinator restart loses no job record.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(data_dir + "/weft.db"));
//   ASSIGN_OR_RETURN(v1::Job job, store->CreateJob(spec, now_ms, "submitted"));
//   job.set_state(v1::RUNNING);
//   RETURN_IF_ERROR(store->UpdateJob(job, &running_event));
//   ASSIGN_OR_RETURN(JobStepsPage page, store->GetJobSteps(job.id(), 0, 1000));  // 1000 steps
//   ASSIGN_OR_RETURN(JobSummaryPage jobs, store->ListJobSummaries(v1::RUNNING, "", 100));
#ifndef WEFT_COORDINATOR_JOB_STORE_H_
#define WEFT_COORDINATOR_JOB_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "weft/v1/job.pb.h"

struct sqlite3;

namespace weft::coordinator {

// A summary cuts a job's name and message to these (names are bounded at submit, but a store
// may hold a job submitted before they were).
inline constexpr size_t kSummaryNameBytes = 256;
inline constexpr size_t kSummaryMessageBytes = 1024;

// One page of ListJobSummaries.
struct JobSummaryPage {
  std::vector<v1::JobSummary> jobs;  // in submit order
  bool more = false;                 // jobs match after the last of these
};

// One page of GetJobSteps: the job with some of its steps' metrics.
struct JobStepsPage {
  v1::Job job;
  // The step after which the next page starts (GetJobSteps' after_step); 0 when these steps are
  // the last stored.
  int64_t next_after_step = 0;
};

class JobStore {
 public:
  // Opens (creating if needed) the database at `path`; its folder must exist.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Stores a new PENDING job with the next id ("job-000001", sortable) and its first event.
  absl::StatusOr<v1::Job> CreateJob(const v1::JobSpec& spec, int64_t now_ms,
                                    const std::string& message);

  // Writes job's mutable fields (state, message, times, attempt, workers; not spec or steps)
  // and, when `event` is set, appends it: one transaction. NOT_FOUND for an unknown id.
  absl::Status UpdateJob(const v1::Job& job, const v1::JobEvent* event);

  // Appends one event (e.g. a step) of the job's given attempt.
  absl::Status AppendEvent(const std::string& job_id, int attempt, const v1::JobEvent& event);

  // The job without its step metrics. NOT_FOUND for an unknown id.
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // The job with at most `limit` (> 0) of its steps numbered above `after_step` (0: from the
  // first), in step order, each as its latest attempt ran it. NOT_FOUND for an unknown id.
  absl::StatusOr<JobStepsPage> GetJobSteps(const std::string& job_id, int64_t after_step,
                                           int limit);
  // At most `limit` (> 0) jobs as summaries, in submit order: those submitted after the job
  // `after_id` (empty: from the first) in `state` (JOB_STATE_UNSPECIFIED: any). Read a page at a
  // time on the submit-order key, never every job. NOT_FOUND when after_id names no job.
  absl::StatusOr<JobSummaryPage> ListJobSummaries(v1::JobState state, const std::string& after_id,
                                                  int limit);
  // Jobs in `state`, in submit order, without step metrics.
  absl::StatusOr<std::vector<v1::Job>> ListJobsInState(v1::JobState state);
  // Every event of the job in the order it was stored.
  absl::StatusOr<std::vector<v1::JobEvent>> ListEvents(const std::string& job_id);

  // After a coordinator restart: every job that was PLANNING or RUNNING becomes RESTARTING as
  // its next attempt, with `message` and an event; one that was RESTARTING stays so. Returns
  // those jobs, in submit order.
  absl::StatusOr<std::vector<v1::Job>> RestartInterruptedJobs(int64_t now_ms,
                                                              const std::string& message);

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::Job> GetJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteJobRow(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertEvent(const std::string& job_id, int attempt, const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on error.
  template <typename Body>
  absl::Status InTransaction(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);  // owned
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_STORE_H_
