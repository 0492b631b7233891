// A job's plan as the coordinator keeps it from SubmitJob until its attempts end, and what an
// attempt needs from the files before its Programs go out: where it starts from, and whether each
// rank's planned peak fits the workers. The planner does the planning (planner/submit); tests and
// benchmarks substitute their own JobPlan.
//
// E.g.
//   ASSIGN_OR_RETURN(std::shared_ptr<const JobPlan> plan, PlanWithPlanner(spec, stop));
//   RETURN_IF_ERROR(CheckFits(*plan, "cuda", largest_bytes, "worker-3", stop));
//   ASSIGN_OR_RETURN(CheckpointLoad start, AttemptStartingState(job));   // off any lock
#ifndef WEFT_COORDINATOR_JOB_PLAN_H_
#define WEFT_COORDINATOR_JOB_PLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jobspec/starting_state.h"
#include "planner/planner.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::coordinator {

// Each rank's Program is emitted from the plan when an attempt starts.
class JobPlan {
 public:
  virtual ~JobPlan() = default;
  virtual int world_size() const = 0;
  // The mesh, outermost dim first, for placing ranks on hosts (PlaceRanks). Default: one dim.
  virtual std::vector<int64_t> mesh_shape() const { return {world_size()}; }
  // `stop` ends a long emission early with its status (planner/stop.h).
  virtual absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt,
                                              const planner::StopCheck& stop) const = 0;
  // One rank of each role, ascending, each its role's smallest: ranks of one role need the same
  // memory (planner::Plan::RoleRanks). Default: every rank its own role.
  virtual std::vector<int> RoleRanks() const;
  // Index metadata that every checkpoint of the job records besides the job's name, id, attempt
  // and optimizer (the planner's: the Hugging Face export, planner/arch/hf_export.h).
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
};

// The planner's plan of a prepared spec (planner::PlanPrepared: building the model validates it,
// and init_from or resume must hold its parameters), with its Hugging Face export metadata.
// `stop` is polled in the planner's long loops.
absl::StatusOr<std::shared_ptr<const JobPlan>> PlanWithPlanner(const v1::JobSpec& spec,
                                                               const planner::StopCheck& stop);

// RESOURCE_EXHAUSTED with the figures when a rank's planned peak (its Program's arena) exceeds
// `largest_bytes`, the memory of the largest registered worker of `kind` (`largest_id`): it
// could never run; the rank named is the smallest that cannot. OK when largest_bytes is 0 (no
// worker says). Emits one Program per role (RoleRanks), not one per rank, polling `stop`: call
// it off any lock.
absl::Status CheckFits(const JobPlan& plan, const std::string& kind, int64_t largest_bytes,
                       const std::string& largest_id, const planner::StopCheck& stop = {});

// Where an attempt starts from: a restarted one (attempt > 0; attempts count from 0) from the
// newest checkpoint this job committed in its checkpoint.dir, optimizer states and step counter
// included; otherwise (and when it committed none: a folder may hold an earlier job's) as the
// spec says. Reads folders and removes staging ones: call it off any lock.
absl::StatusOr<CheckpointLoad> AttemptStartingState(const v1::Job& job);

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_PLAN_H_
