#include "coordinator/planner/optimizer.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/jobspec/starting_state.h"
#include "common/status.h"
#include "coordinator/planner/propagate.h"

namespace weft::planner {

namespace {

// The placement of a parameter's ZeRO shard: `whole` with Shard(a) on the sharding dim, for the
// first axis a the dim may split: `whole` is Replicate there, no later mesh dim splits a (the
// gather back is then one step), and every piece of a is at least one element long. nullopt: the
// parameter stays whole on every rank (e.g. a bias shorter than the dim is wide).
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

}  // namespace

absl::StatusOr<Graph> AppendOptimizer(const RuleRegistry& registry, Graph g) {
  const OptimizerConfig& config = g.optimizer;
  if (config.type != "sgd" && config.type != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.type: unknown \"", config.type, "\""));
  }
  Attrs attrs{{"lr", config.lr}, {"weight_decay", config.weight_decay}};
  if (config.type == "adamw") {
    attrs.Set("beta1", config.beta1).Set("beta2", config.beta2).Set("eps", config.eps);
  }
  // The gradient and the states of a parameter are placed like it, except that they are whole
  // where it is Partial: the update needs the gradient of the global value. Under ZeRO they are
  // placed like its shard instead.
  const std::vector<int> params = g.ParamIds();
  std::vector<int> grads;
  std::vector<DistAttr> whole;
  std::vector<std::optional<DistAttr>> zero;
  const Placement replicate = Placement::Replicate();
  // Level 1 shards the states: with none (sgd) it would only add the gather of the parameters.
  const bool shard = g.sharding.level >= 2 ||
                     (g.sharding.level == 1 && !OptimizerStateNames(config.type).empty());
  for (int p : params) {
    const Tensor& param = g.tensors[p];
    const std::string layer = param.layer;  // `param` dangles once reshards add tensors
    DistAttr attr = *param.dist;
    for (int d = 0; d < attr.mesh().ndim(); ++d) {
      if (attr.placement(d).is_partial()) attr = attr.With(d, replicate);
    }
    whole.push_back(attr);
    // A parameter that is Partial somewhere keeps its special update (emit): not sharded.
    zero.push_back(shard && attr == *param.dist ? ZeroPlacement(attr, param.shape, g.sharding.dim)
                                                 : std::nullopt);
    // Whole (all-reduced), then (level 1) this rank's shard of it; or (level 2) reduce-scattered
    // straight to the shard.
    int grad = g.grad_of.at(p);
    if (!zero.back() || g.sharding.level < 2) {
      ASSIGN_OR_RETURN(grad, AppendReshard(&g, grad, attr, replicate, Phase::kOptimizer, layer));
    }
    if (zero.back()) {
      ASSIGN_OR_RETURN(grad,
                       AppendReshard(&g, grad, *zero.back(), replicate, Phase::kOptimizer, layer));
    }
    grads.push_back(grad);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const int p = params[i];
    // Under ZeRO the update runs on this rank's shard of the parameter, a transient copy.
    int target = p;
    if (zero[i]) {
      ASSIGN_OR_RETURN(target, AppendReshard(&g, p, *zero[i], replicate, Phase::kOptimizer,
                                             g.tensors[p].layer));
    }
    Op op{config.type, {target, grads[i]}, {}, g.tensors[p].layer, Phase::kOptimizer, attrs};
    op.comment = absl::StrCat(config.type, " ", g.tensors[p].name);
    for (const std::string& state : OptimizerStateNames(config.type)) {
      Tensor t = g.tensors[p];
      absl::StrAppend(&t.name, ".", state);
      t.role = v1::Buffer::OPTIMIZER_STATE;
      t.dist = zero[i] ? *zero[i] : whole[i];
      op.inputs.push_back(g.AddTensor(std::move(t)));
    }
    const size_t before = g.ops.size();
    RETURN_IF_ERROR(AppendPlacedOp(registry, &g, op));
    if (g.ops.size() != before + 1) {
      // The update is in place: it must read the parameter and states where they live.
      return absl::InternalError(absl::StrCat("optimizer for ", g.tensors[p].name,
                                              ": the update would need a reshard of its inputs"));
    }
    if (zero[i]) {
      // The updated shards, all-gathered back into the parameter.
      ASSIGN_OR_RETURN(const int gathered,
                       AppendReshard(&g, target, whole[i], replicate, Phase::kOptimizer,
                                     g.tensors[p].layer));
      g.reshard_into[gathered] = p;
    }
  }
  return g;
}

}  // namespace weft::planner
