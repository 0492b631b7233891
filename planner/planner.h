// The planner: a job spec -> a Plan that emits any rank's Program. A pure library: no I/O, no
// threads. Passes (DESIGN.md): build (the spec's only reader) -> propagate (SPMD rules, reshard
// insertion) -> autodiff (VJP rules) -> optimizer -> pipeline (stages, micro-batches, schedule;
// every job, one stage without a pipeline block) -> lower (reshards to collectives on mesh
// groups) -> emit (one rank's Program, with its memory plan). A job with an eval block also gets
// its evaluation planned: the same passes but autodiff and optimizer, over eval.data with
// dropout off, emitted into each Program beside the training list.
//
// Planning is linear in the number of ranks: the passes up to lower work on the graph alone, the
// checkpoint writers once per group of copies, the transfer order on one rank per stage, and a
// rank's Program is emitted when it is asked for (groups are described by mesh dims, not rank
// lists), so a coordinator holds the Plan and emits each Program as it sends it.
//
// E.g.
//   ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanJob(spec, "job-1", /*attempt=*/0));
//   ASSIGN_OR_RETURN(v1::Program p, plan->Program(/*rank=*/3));   // goes to global rank 3
#ifndef WEFT_PLANNER_PLANNER_H_
#define WEFT_PLANNER_PLANNER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/jobspec/starting_state.h"
#include "planner/emit.h"
#include "planner/memory_plan.h"
#include "planner/stop.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

// What differs between the attempts of one job: the fields of Program an attempt sets.
struct Attempt {
  std::string job_id;
  int attempt = 0;
  int64_t start_step = 0;          // resume: the checkpoint's step
  std::string load_checkpoint;     // a committed step folder to start from; empty: none
  bool load_optimizer_states = false;
};

class Plan {
 public:
  Plan(PlannedGraph planned, v1::Program header, std::optional<PlannedGraph> eval = std::nullopt)
      : planned_(std::move(planned)), header_(std::move(header)), eval_(std::move(eval)) {}

  int world_size() const { return planned_.graph.mesh.size(); }
  // The mesh, outermost dim first (ranks are row-major over it).
  const std::vector<int64_t>& mesh_shape() const { return planned_.graph.mesh.shape(); }
  // Rank r's Program, for the job id and attempt the plan was made with or for `attempt`;
  // `stop` ends a long emission early (stop.h). Thread-safe.
  absl::StatusOr<v1::Program> Program(int rank) const;
  absl::StatusOr<v1::Program> Program(int rank, const Attempt& attempt,
                                      const StopCheck& stop = {}) const;
  // One rank of each role, ascending, each the smallest rank of its role. A rank's Program
  // depends on where it sits only through its pipeline stage and, along every other mesh dim,
  // whether it is the dim's first member (who holds a Partial(sum) value, counts a replicated
  // gradient in the norm), its last (who holds an uneven split's remainder) or neither: ranks
  // that agree on these get the same buffers, sizes, instructions and arena, their groups and
  // boxes aside. So checking what every rank needs checks these: at most 3 per mesh dim (the
  // pipeline dim's stages each), whatever the mesh's size.
  std::vector<int> RoleRanks() const;
  // Every rank's Program, for tests and tools that want them all at once (a coordinator, and
  // `weftctl plan`, emit one rank at a time). PlanJob has checked them for deadlock by stage;
  // pipeline/deadlock.h checks a whole set (CheckTransfersMatch, CheckDeadlockFree).
  absl::StatusOr<std::vector<v1::Program>> AllPrograms() const;
  // The parameters, as files and checkpoints name and hold them (init_from and resume are
  // checked against them: CheckStartingState); under bf16 storage their dtype is the float32 of
  // the master weights that checkpoints hold.
  std::vector<ParameterShape> Parameters() const;
  const v1::Program& header() const { return header_; }
  const PlannedGraph& planned() const { return planned_; }
  // The evaluation's forward graph (JobSpec.eval), planned with the training one; null without.
  const PlannedGraph* eval() const { return eval_ ? &*eval_ : nullptr; }

 private:
  const PlannedGraph planned_;
  const v1::Program header_;
  const std::optional<PlannedGraph> eval_;
  mutable absl::Mutex mu_;
  mutable MemoryPlanner memory_ ABSL_GUARDED_BY(mu_);
};

// The job-level fields of every rank's Program: job id, attempt, mesh, data, steps, seed,
// init_from, device, precision, trace, checkpointing, the learning rate and its schedule, and
// the evaluation's data, every and batches.
v1::Program ProgramHeader(const v1::JobSpec& spec, const std::string& job_id, int attempt);

// The passes after autodiff and the optimizer, on a graph whose ops are placed: pipeline, lower,
// checkpoint writers. PlanJob runs them after the others; the SPMD validator on graphs of one op.
// With `numbering`, group ids continue another graph's (Lower).
absl::StatusOr<PlannedGraph> PlanPlacedGraph(Graph g, const LoweredGraph* numbering = nullptr,
                                             const StopCheck& stop = {});

// spec must have passed PrepareJobSpec (common/jobspec/validate.h). Model errors are
// INVALID_ARGUMENT naming the field (validation is building); planning errors name the layer,
// the tensor and the placements (e.g. a missing SPMD rule); every message starts with
// "planning job <name>". Before any Program is emitted, the ranks of one representative per
// pipeline stage are checked for deadlock. `stop` is polled between the passes and in their
// long loops (stop.h); its status is returned as it says, code and all.
absl::StatusOr<std::shared_ptr<const Plan>> PlanJob(const v1::JobSpec& spec,
                                                    const std::string& job_id, int attempt,
                                                    const StopCheck& stop = {});

}  // namespace weft::planner

#endif  // WEFT_PLANNER_PLANNER_H_
