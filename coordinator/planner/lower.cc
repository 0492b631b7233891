#include "coordinator/planner/lower.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft::planner {

absl::StatusOr<std::vector<ReshardStep>> LowerReshard(const DistAttr& from, const DistAttr& to,
                                                      const std::string& tensor) {
  const Mesh& mesh = from.mesh();
  if (mesh != to.mesh()) {
    return absl::UnimplementedError(absl::StrCat("reshard of ", tensor, " across meshes ",
                                                 mesh.ToString(), " -> ", to.mesh().ToString(),
                                                 " (send/recv) is not lowered yet"));
  }
  const int n = mesh.ndim();
  std::vector<bool> unshard(n, false);
  for (int d = 0; d < n; ++d) {
    const Placement& f = from.placement(d);
    if (!f.is_shard()) continue;
    unshard[d] = f != to.placement(d);
    // A kept shard nested inside an outer dim that changes the same axis must be redone.
    for (int d0 = 0; d0 < d && !unshard[d]; ++d0) {
      const Placement& f0 = from.placement(d0);
      const Placement& t0 = to.placement(d0);
      bool touches = (f0.is_shard() && f0.axis == f.axis) || (t0.is_shard() && t0.axis == f.axis);
      unshard[d] = f0 != t0 && touches;
    }
  }
  std::vector<ReshardStep> steps;
  DistAttr cur = from;
  auto add = [&](v1::Instruction::Op kind, int d, int axis, Placement::Reduce reduce,
                 const Placement& next) {
    DistAttr after = cur.With(d, next);
    if (mesh.dim_size(d) > 1) steps.push_back({kind, d, axis, reduce, cur, after});
    cur = after;
  };
  for (int d = n - 1; d >= 0; --d) {
    if (unshard[d]) {
      add(v1::Instruction::ALL_GATHER, d, from.placement(d).axis, Placement::Reduce::kSum,
          Placement::Replicate());
    }
  }
  for (int d = 0; d < n; ++d) {
    const Placement c = cur.placement(d);
    const Placement& t = to.placement(d);
    if (c == t) continue;
    if (c.is_replicate() && t.is_shard()) {
      add(v1::Instruction::SLICE, d, t.axis, Placement::Reduce::kSum, t);
    } else if (c.is_partial() && t.is_replicate()) {
      add(v1::Instruction::ALL_REDUCE, d, 0, c.reduce, t);
    } else if (c.is_partial() && t.is_shard() && c.reduce == Placement::Reduce::kSum) {
      add(v1::Instruction::REDUCE_SCATTER, d, t.axis, c.reduce, t);
    } else {
      return absl::UnimplementedError(absl::StrCat(
          "reshard of ", tensor, " from ", from.ToString(), " to ", to.ToString(), ": ",
          c.ToString(), "->", t.ToString(), " on mesh dim ", mesh.dim_name(d),
          " has no lowering"));
    }
  }
  return steps;
}

absl::StatusOr<LoweredGraph> Lower(const Graph& g) {
  LoweredGraph lowered;
  lowered.steps.resize(g.ops.size());
  int next_group = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.type != "reshard") continue;
    const Tensor& in = g.tensors[op.inputs[0]];
    const Tensor& out = g.tensors[op.outputs[0]];
    ASSIGN_OR_RETURN(lowered.steps[i], LowerReshard(*in.dist, *out.dist, in.name));
    for (const ReshardStep& step : lowered.steps[i]) {
      if (step.kind == v1::Instruction::SLICE) continue;
      if (lowered.group_base.count(step.mesh_dim) > 0) continue;
      lowered.group_base[step.mesh_dim] = next_group;
      lowered.group_dims.push_back(step.mesh_dim);
      next_group += static_cast<int>(g.mesh.AllGroups({step.mesh_dim}).size());
    }
  }
  return lowered;
}

}  // namespace weft::planner
