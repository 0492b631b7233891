// The simulator: replays ranks' Programs, as the planner emitted them, over a CostProfile and
// predicts one training step's time. Each rank has an executor clock that runs its instructions
// in order, each costing the profile's instruction_overhead_s besides its work (compute priced
// by profile.h's kernel fits, slowed by overlap_slowdown while one of its collectives is in
// flight), and, as a CPU worker runs them (worker/executor/
// async_collectives.h), one queue per communicator that runs its collectives in program order
// from where the executor started them; the executor waits for a collective only where an
// instruction touches its bytes, where a SEND or RECV needs its communicator, and at the end of
// the step. A GPU worker (device cuda) or `blocking_collectives` runs each collective in place. A
// collective starts when every member has started it and its communicator is free; a SEND and its
// RECV meet (each waits for the other) and take the link's time; a group's scope is INTER_HOST
// when its members span hosts, and then its bytes share each host's link with the other copies
// of the group that cross it at the same time (a host of H ranks holding m of the group's
// members carries H / m of them), as calibration measures one flow.
//
// Ranks run what their role says (planner.h RoleRanks), so simulating one rank per pipeline stage
// (SimulatedRanks) stands for all: a group member outside the simulated set is taken to reach
// every collective when the simulated member does. The prediction splits the slowest rank's step
// into compute, the optimizer's compute, exposed communication (waiting on a link) and bubble
// (waiting on another rank to reach a transfer or a collective), which sum to its step time.
//
// E.g.
//   std::vector<v1::Program> programs;   // plan->Program(r) for r in SimulatedRanks(*plan)
//   ASSIGN_OR_RETURN(StepPrediction p, SimulateStep(programs, host_of_rank, profile));
//   // p.step_s, p.split.bubble_s, p.tail_step_s
#ifndef WEFT_PLANNER_COST_SIMULATE_H_
#define WEFT_PLANNER_COST_SIMULATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/planner.h"
#include "weft/v1/profile.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::cost {

struct StepSplit {
  double compute_s = 0;       // forward and backward compute
  double optimizer_s = 0;     // the OPTIMIZER phase's compute (gradient norm, updates)
  double exposed_comm_s = 0;  // the executor waiting on a link: collectives, sends, receives
  double bubble_s = 0;        // the executor waiting on another rank to reach a transfer
};

struct RankPrediction {
  int rank = 0;
  double step_s = 0;
  StepSplit split;
  double link_s = 0;  // time its collectives and transfers take on the links, hidden or not
};

struct StepPrediction {
  double step_s = 0;       // the slowest simulated rank's step, every cost at its fit's median
  double tail_step_s = 0;  // the same with every cost at its 90th percentile
  int critical_rank = 0;   // the slowest rank
  StepSplit split;         // the critical rank's
  std::vector<RankPrediction> ranks;  // by simulated rank, in the order given
};

// `programs`: the simulated ranks' Programs (any set of ranks of one plan, each once);
// `host_of_rank`: the host of every global rank of the mesh. Errors: INVALID_ARGUMENT for a
// program whose group or buffer ids are out of range or hosts that do not cover the mesh;
// NOT_FOUND for a cost the profile lacks (profile.h names it).
absl::StatusOr<StepPrediction> SimulateStep(absl::Span<const v1::Program> programs,
                                            absl::Span<const std::string> host_of_rank,
                                            const v1::CostProfile& profile);

// The ranks whose coordinate is 0 along every mesh dim but the pipeline's: one per stage.
std::vector<int> SimulatedRanks(const Plan& plan);

// Emits SimulatedRanks' Programs and simulates them.
absl::StatusOr<StepPrediction> SimulatePlan(const Plan& plan,
                                            absl::Span<const std::string> host_of_rank,
                                            const v1::CostProfile& profile);

}  // namespace weft::planner::cost

#endif  // WEFT_PLANNER_COST_SIMULATE_H_
