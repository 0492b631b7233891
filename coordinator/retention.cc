#include "coordinator/retention.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {

void Retention::Apply() {
  if (limits_.retention_ms <= 0 && limits_.max_ended_jobs <= 0) return;
  const int64_t now = now_ms_();
  if (!due_.exchange(false) && now < next_ms_) return;
  next_ms_ = now + limits_.interval_ms;
  constexpr int kBatch = 64;  // a batch a tick: deleting many jobs' events takes a while
  const int64_t ended_before = limits_.retention_ms > 0 ? now - limits_.retention_ms : 0;
  absl::StatusOr<std::vector<std::string>> expired =
      store_->ListExpiredJobs(ended_before, limits_.max_ended_jobs, kBatch);
  if (!expired.ok()) {
    spdlog::error("retention: {}", expired.status().ToString());
    return;
  }
  // A batch ends after a second too: the ticker's next Tick waits for it (and the watchdog for
  // that Tick).
  const absl::Time stop_at = absl::Now() + absl::Seconds(1);
  size_t done = 0;
  for (const std::string& job_id : *expired) {
    if (absl::Now() >= stop_at) break;
    ++done;
    absl::StatusOr<v1::Job> job = delete_job_(job_id);
    if (!job.ok()) {
      spdlog::error("retention: deleting job {}: {}", job_id, job.status().ToString());
      continue;
    }
    const bool by_age = ended_before > 0 && job->end_time_ms() < ended_before;
    spdlog::info("job {}: deleted by retention ({}, ended {} s ago): {}", job_id,
                 v1::JobState_Name(job->state()), (now - job->end_time_ms()) / 1000,
                 by_age ? absl::StrCat("older than --job_retention (",
                                       limits_.retention_ms / 1000, " s)")
                        : absl::StrCat("beyond the ", limits_.max_ended_jobs,
                                       " jobs that ended last (--max_ended_jobs)"));
  }
  if (static_cast<int>(expired->size()) == kBatch || done < expired->size()) due_ = true;
}

}  // namespace weft::coordinator
