// Everything SubmitJob does to a spec before it stores it, in one place for the coordinator,
// weftctl (submit and plan), benchmarks and tests: PrepareJobSpec (defaults, parallelize, data
// shapes, the checks that need no model), PlanJob (building the model is validating it), then
// CheckStartingState (init_from and resume hold the built model's parameters). Unlike the planner
// itself, this reads files: the data's headers, init_from, the checkpoint to resume.
//
// E.g.
//   ASSIGN_OR_RETURN(std::shared_ptr<const planner::Plan> plan,
//                    planner::PrepareAndPlan(&spec, "job-1", /*attempt=*/0));
#ifndef WEFT_PLANNER_SUBMIT_SUBMIT_H_
#define WEFT_PLANNER_SUBMIT_SUBMIT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// `spec` is prepared in place (what the planner saw is what a job record should keep). Errors are
// INVALID_ARGUMENT naming the field, as SubmitJob returns them.
absl::StatusOr<std::shared_ptr<const Plan>> PrepareAndPlan(v1::JobSpec* spec,
                                                           const std::string& job_id, int attempt);

// The last two steps, for a spec that passed PrepareJobSpec; PlanJob polls `stop` (stop.h).
absl::StatusOr<std::shared_ptr<const Plan>> PlanPrepared(const v1::JobSpec& spec,
                                                         const std::string& job_id, int attempt,
                                                         const StopCheck& stop = {});

}  // namespace weft::planner

#endif  // WEFT_PLANNER_SUBMIT_SUBMIT_H_
