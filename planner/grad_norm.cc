#include "planner/grad_norm.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "planner/op_table.h"

namespace weft::planner {

absl::StatusOr<std::optional<std::vector<int>>> GradientNormDims(const Graph& g) {
  std::set<int> dims;
  bool updates = false;
  for (const Op& op : g.ops) {
    if (!IsKind(op, OpKind::kUpdate)) continue;
    updates = true;
    const Tensor& grad = g.tensors[op.inputs[1]];
    if (!grad.dist) return absl::InternalError(absl::StrCat(grad.name, " has no placement"));
    for (int d = 0; d < g.mesh.ndim(); ++d) {
      const Placement& p = grad.dist->placement(d);
      if (p.is_partial()) {
        return absl::InternalError(absl::StrCat(OpLabel(op), " reads ", grad.name, ", ",
                                                p.ToString(), " on ", g.mesh.dim_name(d),
                                                ": the gradient norm needs it reduced"));
      }
      if (p.is_shard() && d != g.pipeline.dim && g.mesh.dim_size(d) > 1) dims.insert(d);
    }
  }
  if (!updates) return std::nullopt;
  return std::vector<int>(dims.begin(), dims.end());
}

bool CountsGradient(const DistAttr& dist, const std::vector<int>& dims, int rank) {
  const std::vector<int64_t> coord = dist.mesh().Coordinate(rank);
  for (int d : dims) {
    if (!dist.placement(d).is_shard() && coord[d] != 0) return false;
  }
  return true;
}

}  // namespace weft::planner
