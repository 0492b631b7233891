#include "planner/optimizer.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/jobspec/starting_state.h"
#include "common/status.h"
#include "planner/propagate.h"
#include "planner/zero.h"

namespace weft::planner {

namespace {

// optimizer.weight_decay_params matrices: a parameter of two or more dims as files hold it
// (Hugging Face's shapes: gpt2's c_attn bias is [3C] there, [3, H, D] here).
bool IsMatrix(const Graph& g, int param) {
  const Parameter* p = g.FindParam(param);
  const Shape& shape = p != nullptr && !p->file_shape.empty() ? p->file_shape
                                                               : g.tensors[param].shape;
  return shape.size() >= 2;
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
  // placed like its shard instead (zero.h).
  const std::vector<int> params = g.ParamIds();
  std::vector<int> grads;
  std::vector<DistAttr> whole;
  std::vector<std::optional<DistAttr>> zero;
  const Placement replicate = Placement::Replicate();
  const int level = g.sharding.level;
  for (int p : params) {
    const std::string layer = g.tensors[p].layer;  // a copy: reshards add tensors
    whole.push_back(WholeOf(g, p));
    zero.push_back(ZeroShardOf(g, p));
    // Whole (all-reduced), then (level 1) this rank's shard of it; or (levels 2 and 3)
    // reduce-scattered straight to the shard.
    int grad = g.grad_of.at(p);
    if (!zero.back() || level < 2) {
      ASSIGN_OR_RETURN(grad,
                       AppendReshard(&g, grad, whole.back(), replicate, Phase::kOptimizer, layer));
    }
    if (zero.back()) {
      ASSIGN_OR_RETURN(grad,
                       AppendReshard(&g, grad, *zero.back(), replicate, Phase::kOptimizer, layer));
    }
    grads.push_back(grad);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const int p = params[i];
    const std::string layer = g.tensors[p].layer;
    // A bf16 parameter's update runs on its float32 master weight, placed like the states; the
    // parameter is then rounded from it (below).
    const bool mastered = g.tensors[p].dtype != v1::F32;
    int target = p;
    if (mastered) {
      Tensor m = g.tensors[p];
      absl::StrAppend(&m.name, ".master");
      m.dtype = v1::F32;
      m.role = v1::Buffer::OPTIMIZER_STATE;
      m.dist = zero[i] ? *zero[i] : *g.tensors[p].dist;
      target = g.AddTensor(std::move(m));
      g.SetMaster(p, target);
    } else if (zero[i] && level < 3) {
      // Under ZeRO levels 1 and 2 the update runs on this rank's shard of the parameter, a
      // transient copy; at level 3 the parameter is that shard.
      ASSIGN_OR_RETURN(target, AppendReshard(&g, p, *zero[i], replicate, Phase::kOptimizer,
                                             g.tensors[p].layer));
    }
    Op op{config.type, {target, grads[i]}, {}, g.tensors[p].layer, Phase::kOptimizer, attrs};
    if (config.decay_matrices_only && !IsMatrix(g, p)) op.attrs.Set("weight_decay", 0.0);
    op.comment = absl::StrCat(config.type, " ", g.tensors[p].name);
    for (const std::string& state : OptimizerStateNames(config.type)) {
      Tensor t = g.tensors[p];
      absl::StrAppend(&t.name, ".", state);
      t.dtype = g.tensors[target].dtype;  // float32 beside a master weight
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
    int updated = target;  // what goes back into the parameter
    if (mastered) {
      // The master rounded to the parameter's dtype: into the parameter, or (ZeRO levels 1 and
      // 2) into a shard that the all-gather below writes back.
      Tensor rounded = g.tensors[target];
      rounded.name = absl::StrCat(g.tensors[p].name, ".rounded");
      rounded.dtype = g.tensors[p].dtype;
      rounded.role = v1::Buffer::ACTIVATION;
      updated = g.AddTensor(std::move(rounded));
      Op cast{"cast", {target}, {updated}, layer, Phase::kOptimizer};
      cast.comment = absl::StrCat(g.tensors[p].name, " = ", DTypeName(g.tensors[p].dtype), "(",
                                  g.tensors[target].name, ")");
      RETURN_IF_ERROR(AppendPlacedOp(registry, &g, std::move(cast)));
      if (!zero[i] || level == 3) g.writes_into[updated] = p;
    }
    if (zero[i] && level < 3) {
      // The updated shards, all-gathered back into the parameter.
      ASSIGN_OR_RETURN(const int gathered,
                       AppendReshard(&g, updated, whole[i], replicate, Phase::kOptimizer, layer));
      g.writes_into[gathered] = p;
    }
  }
  return g;
}

}  // namespace weft::planner
