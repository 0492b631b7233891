#include "coordinator/planner/zero.h"

#include "absl/strings/str_cat.h"

namespace weft::planner {

std::optional<DistAttr> ZeroPlacement(const DistAttr& whole, const Shape& shape, int dim) {
  const Mesh& mesh = whole.mesh();
  // Over one rank there is nothing to shard.
  if (mesh.dim_size(dim) == 1 || !whole.placement(dim).is_replicate()) return std::nullopt;
  for (int a = 0; a < static_cast<int>(shape.size()); ++a) {
    int64_t length = shape[a];  // the shortest piece of axis a before the sharding dim splits it
    bool split_later = false;
    for (int d = 0; d < mesh.ndim(); ++d) {
      const Placement& p = whole.placement(d);
      if (!p.is_shard() || p.axis != a) continue;
      if (d < dim) length /= mesh.dim_size(d);
      if (d > dim) split_later = true;
    }
    if (!split_later && length >= mesh.dim_size(dim)) return whole.With(dim, Placement::Shard(a));
  }
  return std::nullopt;
}

absl::Status ShardParameters(Graph* g) {
  if (g->sharding.level < 3) return absl::OkStatus();
  for (const Parameter& p : g->params) {
    Tensor& t = g->tensors[p.tensor];
    if (!t.dist) {
      return absl::InternalError(absl::StrCat("ZeRO-3: parameter ", t.name, " is not placed"));
    }
    bool partial = false;
    for (int d = 0; d < t.dist->mesh().ndim(); ++d) partial |= t.dist->placement(d).is_partial();
    // A Partial parameter keeps its special update (optimizer.h): it stays whole.
    if (partial) continue;
    std::optional<DistAttr> shard = ZeroPlacement(*t.dist, t.shape, g->sharding.dim);
    if (!shard) continue;
    g->gathered.emplace(p.tensor, *t.dist);
    t.dist = *shard;
  }
  return absl::OkStatus();
}

}  // namespace weft::planner
