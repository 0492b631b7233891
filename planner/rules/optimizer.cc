// sgd (param, grad) and adamw (param, grad, m, v): elementwise updates in place, no outputs.
// Per mesh dim every input has the parameter's placement:
//   p[R], g[R], m[R], v[R];  p[S(i)], g[S(i)], m[S(i)], v[S(i)];  p[P], g[R], m[R], v[R]
// The optimizer pass reshards the gradient to the parameter's DistAttr beforehand (Partial ->
// Replicate: the data-parallel all-reduce), so the search finds a zero-move strategy.
#include "common/status.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

StrategyFn UpdateStrategies(size_t arity) {
  return [arity](const OpSignature& sig) -> absl::StatusOr<std::vector<DimStrategy>> {
    if (sig.input_shapes.size() != arity || !sig.output_shapes.empty()) {
      return absl::InvalidArgumentError("wrong number of inputs for an update");
    }
    for (const auto& shape : sig.input_shapes) {
      if (shape != sig.input_shapes[0]) {
        return absl::InvalidArgumentError("update inputs differ in shape");
      }
    }
    std::vector<DimStrategy> out =
        SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), arity, 0);
    // A Partial parameter is updated from the whole gradient and whole states; emit gives the
    // update step to the member that holds the value (Partial(sum)) or to all (Partial(avg)).
    for (const Placement& P : LinearPartials()) {
      std::vector<Placement> in(arity, Placement::Replicate());
      in[0] = P;
      out.push_back({in, {}});
    }
    return out;
  };
}

}  // namespace

absl::Status RegisterOptimizerRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("sgd", {UpdateStrategies(2), nullptr}));
  return registry->Register("adamw", {UpdateStrategies(4), nullptr});
}

}  // namespace weft::planner
