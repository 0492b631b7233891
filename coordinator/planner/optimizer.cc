#include "coordinator/planner/optimizer.h"

#include "absl/strings/str_cat.h"
#include "common/jobspec/starting_state.h"
#include "common/status.h"
#include "coordinator/planner/propagate.h"

namespace weft::planner {

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
  // where it is Partial: the update needs the gradient of the global value.
  const std::vector<int> params = g.ParamIds();
  std::vector<int> grads;
  std::vector<DistAttr> whole;
  for (int p : params) {
    DistAttr attr = *g.tensors[p].dist;
    for (int d = 0; d < attr.mesh().ndim(); ++d) {
      if (attr.placement(d).is_partial()) attr = attr.With(d, Placement::Replicate());
    }
    whole.push_back(attr);
    ASSIGN_OR_RETURN(int grad, AppendReshard(&g, g.grad_of.at(p), attr, Placement::Replicate(),
                                             Phase::kOptimizer, g.tensors[p].layer));
    grads.push_back(grad);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const int p = params[i];
    Op op{config.type, {p, grads[i]}, {}, g.tensors[p].layer, Phase::kOptimizer, attrs};
    op.comment = absl::StrCat(config.type, " ", g.tensors[p].name);
    for (const std::string& state : OptimizerStateNames(config.type)) {
      Tensor t = g.tensors[p];
      absl::StrAppend(&t.name, ".", state);
      t.role = v1::Buffer::OPTIMIZER_STATE;
      t.dist = whole[i];
      op.inputs.push_back(g.AddTensor(std::move(t)));
    }
    const size_t before = g.ops.size();
    RETURN_IF_ERROR(AppendPlacedOp(registry, &g, op));
    if (g.ops.size() != before + 1) {
      // The update is in place: it must read the parameter and states where they live.
      return absl::InternalError(absl::StrCat("optimizer for ", g.tensors[p].name,
                                              ": the update would need a reshard of its inputs"));
    }
  }
  return g;
}

}  // namespace weft::planner
