// Retention of ended jobs (--job_retention, --max_ended_jobs): a job that ended more than
// retention_ms ago, or that is not among the max_ended_jobs that ended last, is deleted with its
// events and log lines (0: no such bound). Checked every interval_ms and after each job ends
// (MarkDue), at most a batch of 64 jobs or a second a call: the caller's next call goes on.
//
// E.g.
//   Retention retention(store.get(), {.retention_ms = 86400000}, now_ms, delete_job);
//   retention.MarkDue();   // a job ended
//   retention.Apply();     // from the coordinator's ticker, off its lock
#ifndef WEFT_COORDINATOR_RETENTION_H_
#define WEFT_COORDINATOR_RETENTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "weft/v1/job.pb.h"

namespace weft::coordinator {

struct RetentionLimits {
  int64_t retention_ms = 0;
  int64_t max_ended_jobs = 0;
  int64_t interval_ms = 60000;
};

class Retention {
 public:
  // `delete_job` deletes an ended job (the store's DeleteJob and whatever else the job held) and
  // returns it as it was.
  Retention(JobStore* store, RetentionLimits limits, std::function<int64_t()> now_ms,
            std::function<absl::StatusOr<v1::Job>(const std::string&)> delete_job)
      : store_(store),
        limits_(limits),
        now_ms_(std::move(now_ms)),
        delete_job_(std::move(delete_job)) {}

  void MarkDue() { due_ = true; }
  // Deletes what retention no longer keeps, when due or when the interval passed.
  void Apply();

 private:
  JobStore* const store_;
  const RetentionLimits limits_;
  const std::function<int64_t()> now_ms_;
  const std::function<absl::StatusOr<v1::Job>(const std::string&)> delete_job_;
  std::atomic<bool> due_{true};        // a job ended, or the last batch was full
  std::atomic<int64_t> next_ms_{0};    // the next check by the interval
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_RETENTION_H_
