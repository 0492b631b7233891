#include "planner/planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/jobspec/validate.h"
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/build.h"
#include "planner/grad_norm.h"
#include "planner/lower.h"
#include "planner/op_table.h"
#include "planner/optimizer.h"
#include "planner/pipeline/deadlock.h"
#include "planner/pipeline/pipeline.h"
#include "planner/propagate.h"
#include "planner/spmd.h"
#include "planner/storage.h"

namespace weft::planner {

v1::Program ProgramHeader(const v1::JobSpec& spec, const std::string& job_id, int attempt) {
  v1::Program p;
  p.set_job_id(job_id);
  p.set_attempt(attempt);
  *p.mutable_mesh() = spec.mesh();
  *p.mutable_data() = spec.data();
  p.set_steps(spec.train().steps());
  p.set_seed(spec.train().seed());
  p.set_init_from(spec.init_from());
  p.set_device(spec.device());
  p.set_precision(spec.precision());
  p.set_allow_tf32(spec.allow_tf32());
  p.set_trace(spec.trace());
  p.set_blocking_collectives(spec.blocking_collectives());
  p.set_checkpoint_dir(spec.checkpoint().dir());
  p.set_checkpoint_every(spec.checkpoint().every());
  p.set_lr(spec.optimizer().lr());
  if (spec.optimizer().has_schedule()) *p.mutable_lr_schedule() = spec.optimizer().schedule();
  if (spec.has_eval()) {
    *p.mutable_eval()->mutable_data() = spec.eval().data();
    p.mutable_eval()->set_every(spec.eval().every());
    p.mutable_eval()->set_batches(spec.eval().batches());
  }
  return p;
}

absl::StatusOr<PlannedGraph> PlanPlacedGraph(Graph g, const LoweredGraph* numbering,
                                             const StopCheck& stop) {
  PlannedGraph planned;
  RETURN_IF_ERROR(CheckStop(stop, "placing the model"));
  ASSIGN_OR_RETURN(planned.pipeline, pipeline::PlanPipeline(g));
  RETURN_IF_ERROR(CheckStop(stop, "ordering the pipeline"));
  std::vector<int> extra;
  if (g.pipeline.dim >= 0) extra.push_back(g.pipeline.dim);
  ASSIGN_OR_RETURN(planned.grad_norm_dims, GradientNormDims(g));
  if (planned.grad_norm_dims) {
    extra.insert(extra.end(), planned.grad_norm_dims->begin(), planned.grad_norm_dims->end());
  }
  ASSIGN_OR_RETURN(planned.lowered, Lower(g, extra, numbering));
  RETURN_IF_ERROR(CheckStop(stop, "lowering the reshards"));
  ASSIGN_OR_RETURN(planned.writers, CheckpointWriters::Assign(g, planned.pipeline, stop));
  planned.graph = std::move(g);
  return planned;
}

namespace {

absl::StatusOr<PlannedGraph> RunPasses(const v1::JobSpec& spec, const StopCheck& stop) {
  const RuleRegistry& rules = BuiltinRules();
  ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
  RETURN_IF_ERROR(ApplyStorage(&g));
  RETURN_IF_ERROR(CheckStop(stop, "building the model"));
  ASSIGN_OR_RETURN(g, Propagate(rules, std::move(g)));
  RETURN_IF_ERROR(CheckStop(stop, "propagating the placements"));
  ASSIGN_OR_RETURN(g, Autodiff(rules, std::move(g)));
  RETURN_IF_ERROR(CheckStop(stop, "appending the backward pass"));
  ASSIGN_OR_RETURN(g, AppendOptimizer(rules, std::move(g)));
  return PlanPlacedGraph(std::move(g), nullptr, stop);
}

// The evaluation's forward pass: the model built over eval.data with every dropout off, placed
// as the training graph is, with no backward pass or update; its group ids are training's.
absl::StatusOr<PlannedGraph> PlanEval(const v1::JobSpec& spec, const PlannedGraph& training,
                                      const StopCheck& stop) {
  ASSIGN_OR_RETURN(Graph g, BuildGraph(EvalJobSpec(spec)));
  RETURN_IF_ERROR(ApplyStorage(&g));
  ASSIGN_OR_RETURN(g, Propagate(BuiltinRules(), std::move(g)));
  return PlanPlacedGraph(std::move(g), &training.lowered, stop);
}

}  // namespace

absl::StatusOr<v1::Program> Plan::Program(int rank) const {
  return Program(rank, Attempt{header_.job_id(), header_.attempt()});
}

absl::StatusOr<v1::Program> Plan::Program(int rank, const Attempt& attempt,
                                          const StopCheck& stop) const {
  if (rank < 0 || rank >= world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in the plan's ", world_size(), " ranks"));
  }
  v1::Program header = header_;
  header.set_job_id(attempt.job_id);
  header.set_attempt(attempt.attempt);
  header.set_start_step(attempt.start_step);
  header.set_load_checkpoint(attempt.load_checkpoint);
  header.set_load_optimizer_states(attempt.load_optimizer_states);
  absl::MutexLock lock(&mu_);
  return EmitProgram(planned_, header, rank, &memory_, eval_ ? &*eval_ : nullptr, stop);
}

absl::StatusOr<std::vector<v1::Program>> Plan::AllPrograms() const {
  std::vector<v1::Program> programs;
  programs.reserve(world_size());
  for (int r = 0; r < world_size(); ++r) {
    ASSIGN_OR_RETURN(v1::Program p, Program(r));
    programs.push_back(std::move(p));
  }
  return programs;
}

std::vector<int> Plan::RoleRanks() const {
  const Mesh& mesh = planned_.graph.mesh;
  // Per dim, the coordinates that stand for its roles: every stage of the pipeline dim; first,
  // second (every member between first and last alike) and last of the others.
  std::vector<std::vector<int64_t>> roles(mesh.ndim());
  for (int d = 0; d < mesh.ndim(); ++d) {
    const int64_t n = mesh.dim_size(d);
    if (d == planned_.graph.pipeline.dim) {
      for (int64_t c = 0; c < n; ++c) roles[d].push_back(c);
    } else {
      for (int64_t c : {int64_t{0}, int64_t{1}, n - 1}) {
        if (c < n && (roles[d].empty() || c > roles[d].back())) roles[d].push_back(c);
      }
    }
  }
  // Their product, row-major (odometer, last dim fastest): ascending ranks.
  std::vector<int> ranks;
  std::vector<size_t> at(mesh.ndim(), 0);
  std::vector<int64_t> coord(mesh.ndim());
  while (true) {
    for (int d = 0; d < mesh.ndim(); ++d) coord[d] = roles[d][at[d]];
    ranks.push_back(mesh.RankAt(coord));
    int d = mesh.ndim() - 1;
    for (; d >= 0; --d) {
      if (++at[d] < roles[d].size()) break;
      at[d] = 0;
    }
    if (d < 0) return ranks;
  }
}

std::vector<ParameterShape> Plan::Parameters() const {
  std::vector<ParameterShape> out;
  for (const Parameter& p : planned_.graph.params) {
    const Tensor& t = planned_.graph.tensors[p.tensor];
    // Checkpoints hold a bf16 parameter's float32 master weight under its name.
    const v1::DType stored = p.master >= 0 ? planned_.graph.tensors[p.master].dtype : t.dtype;
    out.push_back({t.name, t.shape, stored, p.file_shape});
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Plan>> PlanJob(const v1::JobSpec& spec,
                                                    const std::string& job_id, int attempt,
                                                    const StopCheck& stop) {
  absl::StatusOr<PlannedGraph> planned = RunPasses(spec, stop);
  if (!planned.ok()) {
    return Annotate(planned.status(), absl::StrCat("planning job ", spec.name()));
  }
  std::optional<PlannedGraph> eval;
  if (spec.has_eval()) {
    absl::StatusOr<PlannedGraph> planned_eval = PlanEval(spec, *planned, stop);
    if (!planned_eval.ok()) {
      return Annotate(planned_eval.status(),
                      absl::StrCat("planning job ", spec.name(),
                                   ": its evaluation, the model over eval.data (named data here)"));
    }
    eval = *std::move(planned_eval);
  }
  auto plan = std::make_shared<const Plan>(*std::move(planned),
                                           ProgramHeader(spec, job_id, attempt), std::move(eval));
  // The ranks of one pipeline stage run the same list, so checking one of each covers them all.
  const Graph& g = plan->planned().graph;
  std::vector<v1::Program> representatives;
  std::vector<int> ranks;
  for (int s = 0; s < plan->planned().pipeline.stages; ++s) {
    std::vector<int64_t> coord(g.mesh.ndim(), 0);
    if (g.pipeline.dim >= 0) coord[g.pipeline.dim] = s;
    ranks.push_back(g.mesh.RankAt(coord));
  }
  for (int r : ranks) {
    absl::StatusOr<v1::Program> p =
        plan->Program(r, Attempt{job_id, attempt}, stop);
    if (!p.ok()) return Annotate(p.status(), absl::StrCat("planning job ", spec.name()));
    representatives.push_back(*std::move(p));
  }
  absl::Status checked = CheckStop(stop, "checking the stages for deadlock");
  if (checked.ok()) checked = pipeline::CheckStages(representatives, g.pipeline.dim);
  if (!checked.ok()) return Annotate(checked, absl::StrCat("planning job ", spec.name()));
  return plan;
}

}  // namespace weft::planner
