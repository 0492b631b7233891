#include "planner/zero.h"

#include "absl/strings/str_cat.h"
#include "common/jobspec/starting_state.h"

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

namespace {

// A Partial parameter keeps its special update (optimizer.h): it is never sharded.
bool PartialAnywhere(const DistAttr& attr) {
  for (int d = 0; d < attr.mesh().ndim(); ++d) {
    if (attr.placement(d).is_partial()) return true;
  }
  return false;
}

}  // namespace

absl::Status ShardParameters(Graph* g) {
  if (g->sharding.level < 3) return absl::OkStatus();
  for (const Parameter& p : g->params) {
    Tensor& t = g->tensors[p.tensor];
    if (!t.dist) {
      return absl::InternalError(absl::StrCat("ZeRO-3: parameter ", t.name, " is not placed"));
    }
    if (PartialAnywhere(*t.dist)) continue;
    std::optional<DistAttr> shard = ZeroPlacement(*t.dist, t.shape, g->sharding.dim);
    if (!shard) continue;
    g->gathered.emplace(p.tensor, *t.dist);
    t.dist = *shard;
  }
  return absl::OkStatus();
}

DistAttr WholeOf(const Graph& g, int p) {
  auto gathered = g.gathered.find(p);
  DistAttr whole = gathered != g.gathered.end() ? gathered->second : *g.tensors[p].dist;
  for (int d = 0; d < whole.mesh().ndim(); ++d) {
    if (whole.placement(d).is_partial()) whole = whole.With(d, Placement::Replicate());
  }
  return whole;
}

std::optional<DistAttr> ZeroShardOf(const Graph& g, int p) {
  const Tensor& t = g.tensors[p];
  switch (g.sharding.level) {
    case 3:
      if (g.gathered.count(p) == 0) return std::nullopt;
      return *t.dist;
    case 2:
      break;
    case 1:
      // Level 1 shards the states: with none (sgd without a bf16 parameter's master weight) it
      // would only add the gather of the parameter.
      if (OptimizerStateNames(g.optimizer.type).empty() && g.storage == v1::F32) {
        return std::nullopt;
      }
      break;
    default:
      return std::nullopt;
  }
  if (PartialAnywhere(*t.dist)) return std::nullopt;
  return ZeroPlacement(*t.dist, t.shape, g.sharding.dim);
}

}  // namespace weft::planner
