#include "planner/submit/submit.h"

#include "common/jobspec/starting_state.h"
#include "common/jobspec/validate.h"
#include "common/status.h"

namespace weft::planner {

absl::StatusOr<std::shared_ptr<const Plan>> PlanPrepared(const v1::JobSpec& spec,
                                                         const std::string& job_id, int attempt,
                                                         const StopCheck& stop) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanJob(spec, job_id, attempt, stop));
  RETURN_IF_ERROR(CheckStartingState(spec, plan->Parameters()));
  return plan;
}

absl::StatusOr<std::shared_ptr<const Plan>> PrepareAndPlan(v1::JobSpec* spec,
                                                           const std::string& job_id, int attempt) {
  RETURN_IF_ERROR(PrepareJobSpec(spec));
  return PlanPrepared(*spec, job_id, attempt);
}

}  // namespace weft::planner
