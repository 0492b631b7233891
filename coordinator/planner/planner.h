// The planner: JobSpec -> one Program per rank. A pure library: no I/O, no threads.
// Passes (DESIGN.md): build -> propagate (SPMD rules, reshard insertion) -> autodiff (VJP rules)
// -> optimizer -> lower (reshards to collectives on mesh groups) -> emit (per-rank Programs).
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::Program> programs, PlanJob(spec, "job-1", /*attempt=*/0));
//   // programs[r] goes to the worker assigned global rank r.
#ifndef WEFT_COORDINATOR_PLANNER_PLANNER_H_
#define WEFT_COORDINATOR_PLANNER_PLANNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

// spec must have passed ValidateJobSpec. Errors are INVALID_ARGUMENT naming the layer, the
// tensor and the placements (e.g. a missing SPMD rule).
absl::StatusOr<std::vector<v1::Program>> PlanJob(const v1::JobSpec& spec, const std::string& job_id,
                                                 int attempt);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_PLANNER_H_
