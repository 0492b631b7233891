#include "coordinator/planner/planner.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/planner/autodiff.h"
#include "coordinator/planner/build.h"
#include "coordinator/planner/checkpoint_writers.h"
#include "coordinator/planner/emit.h"
#include "coordinator/planner/lower.h"
#include "coordinator/planner/optimizer.h"
#include "coordinator/planner/pipeline/deadlock.h"
#include "coordinator/planner/pipeline/pipeline.h"
#include "coordinator/planner/propagate.h"
#include "coordinator/planner/spmd.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<v1::Program>> Plan(const v1::JobSpec& spec, const std::string& job_id,
                                              int attempt) {
  if (!spec.pipeline().dim().empty()) return pipeline::PlanPipeline(spec, job_id, attempt);
  const RuleRegistry& rules = BuiltinRules();
  ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
  ASSIGN_OR_RETURN(g, Propagate(spec, rules, std::move(g)));
  ASSIGN_OR_RETURN(g, Autodiff(rules, std::move(g)));
  ASSIGN_OR_RETURN(g, AppendOptimizer(spec, rules, std::move(g)));
  ASSIGN_OR_RETURN(LoweredGraph lowered, Lower(g));
  std::vector<v1::Program> programs;
  for (int rank = 0; rank < g.mesh.size(); ++rank) {
    ASSIGN_OR_RETURN(v1::Program p, EmitProgram(spec, g, lowered, job_id, attempt, rank));
    programs.push_back(std::move(p));
  }
  RETURN_IF_ERROR(pipeline::CheckDeadlockFree(programs));
  return programs;
}

}  // namespace

absl::StatusOr<std::vector<v1::Program>> PlanJob(const v1::JobSpec& spec,
                                                 const std::string& job_id, int attempt) {
  absl::StatusOr<std::vector<v1::Program>> programs = Plan(spec, job_id, attempt);
  if (programs.ok()) {
    absl::Status writers = AssignCheckpointWriters(&*programs);
    if (!writers.ok()) programs = writers;
  }
  if (!programs.ok()) {
    return Annotate(programs.status(), absl::StrCat("planning job ", spec.name()));
  }
  return programs;
}

}  // namespace weft::planner
