#include "coordinator/planner/optimizer.h"

#include "absl/strings/str_cat.h"
#include "common/spec/spec.h"
#include "common/status.h"
#include "coordinator/planner/propagate.h"

namespace weft::planner {

absl::StatusOr<Graph> AppendOptimizer(const v1::JobSpec& spec, const RuleRegistry& registry,
                                      Graph g) {
  const std::string& type = spec.optimizer().type();
  if (type != "sgd" && type != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.type: unknown \"", type, "\""));
  }
  // The gradient and the states of a parameter are placed like it, except that they are whole
  // where it is Partial: the update needs the gradient of the global value.
  std::vector<int> grads;
  std::vector<DistAttr> whole;
  for (int p : g.params) {
    const Tensor& param = g.tensors[p];
    DistAttr attr = *param.dist;
    for (int d = 0; d < attr.mesh().ndim(); ++d) {
      if (attr.placement(d).is_partial()) attr = attr.With(d, Placement::Replicate());
    }
    whole.push_back(attr);
    int grad = AppendReshard(&g, g.grad_of.at(p), attr, Phase::kOptimizer, param.layer);
    grads.push_back(grad);
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    const int p = g.params[i];
    Op op;
    op.type = type;
    op.inputs = {p, grads[i]};
    op.layer = g.tensors[p].layer;
    op.phase = Phase::kOptimizer;
    op.comment = absl::StrCat(type, " ", g.tensors[p].name);
    for (const std::string& state : OptimizerStateNames(type)) {
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
