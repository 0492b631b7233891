// Train.elastic's part of the Coordinator: a restarting job shrinks when no replacement comes, a
// running one grows at a checkpoint when idle workers do, and a resized job is planned again
// before it starts. The decisions are elastic.h's; the attempt's end at a grow is JobRun's.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/jobspec/elastic.h"
#include "coordinator/coordinator.h"
#include "coordinator/elastic.h"
#include "coordinator/scheduler.h"
#include "coordinator/submission.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {

void Coordinator::ResizeWaitingLocked() {
  for (v1::Job& job : pending_) {
    if (ElasticSize(job) == 0 || replanning_.count(job.id()) > 0) continue;
    // The size the job's plan is for.
    const int planned =
        static_cast<int>(plans_.at(job.id())->world_size() / ElasticRanksPerUnit(job.spec()));
    auto since = waiting_since_.find(job.id());
    if (since != waiting_since_.end()) {
      const int64_t free = workers_.CountFree(DeviceKind(job.spec().device()), true);
      if (std::optional<int> to = ShrinkTo(job, free, since->second, Now())) {
        v1::JobEvent resize = ResizeEvent(job, *to, 0, Now());
        metrics_.Resize(job, resize.resize());
        spdlog::info("job {}: {}", job.id(), resize.message());
        ApplyResize(resize, &job);
        StoreLocked(job, std::move(resize));
      }
    }
    if (ElasticSize(job) != planned) {
      replanning_.insert(job.id());
      dispatches_.push_back(Replan{job, planned});
    }
  }
}

void Coordinator::PlanResized(const Replan& replan) {
  const v1::Job& job = replan.job;
  const planner::StopCheck stop = PlanningStop();
  // Off mu_.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanAttempt(job, options_, stop);
  absl::Status fits = plan.status();
  if (fits.ok()) fits = CheckFitsTheWorkers(*AttemptSpec(job), **plan, stop);
  ObservedMutexLock lock(&mu_);
  if (shutting_down_) return;  // stopped by Shutdown, or too late: the job stays as stored
  replanning_.erase(job.id());
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const v1::Job& j) { return j.id() == job.id(); });
  if (it == pending_.end()) return;  // cancelled meanwhile
  if (fits.ok()) {
    plans_[job.id()] = *std::move(plan);
  } else {
    // It waits at the size it is planned for; after another wait_s it may shrink again.
    it->set_elastic_size(replan.planned_size);
    it->set_message(absl::StrCat("cannot run at ", job.spec().train().elastic().dim(), " ",
                                 job.elastic_size(), ": ", fits.message(), "; waiting at ",
                                 replan.planned_size));
    spdlog::warn("job {}: {}", job.id(), it->message());
    waiting_since_[job.id()] = Now();
    StoreLocked(*it, StateEventOf(*it, Now()));
  }
  ScheduleLocked();
}

int Coordinator::GrowToLocked(const v1::Job& job) {
  if (ElasticSize(job) == 0) return 0;
  const int64_t idle = workers_.CountFree(DeviceKind(job.spec().device()), false);
  return GrowTo(job, idle).value_or(0);
}

}  // namespace weft::coordinator
