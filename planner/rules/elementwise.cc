// Elementwise ops: relu, gelu, gelu_tanh, silu (out = f(x)) and their gradients relu_grad,
// gelu_grad, gelu_tanh_grad, silu_grad (out = dy * f'(x), inputs x and dy). Per mesh dim, for any
// axis i:
//   x[R] -> out[R];  x[S(i)] -> out[S(i)]
//   x[R], dy[R] -> dx[R];  x[S(i)], dy[S(i)] -> dx[S(i)]
// f is not linear, so a Partial input must be reduced first (the search picks Partial->R).
// VJP: f -> f_grad(x, dy).
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> UnaryStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("takes 1 input and 1 output");
  }
  return SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 1, 1);
}

absl::StatusOr<std::vector<DimStrategy>> GradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[0] != sig.input_shapes[1]) {
    return absl::InvalidArgumentError("takes 2 inputs of one shape and 1 output");
  }
  return SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 2, 1);
}

VjpFn ActivationVjp(std::string grad_op) {
  return [grad_op](GradBuilder& b) -> absl::Status {
    ASSIGN_OR_RETURN(const int x, b.input(0));
    ASSIGN_OR_RETURN(int dx, b.Emit(grad_op, {x, b.out_grad(0)}, b.op().inputs[0]));
    b.set_input_grad(0, dx);
    return absl::OkStatus();
  };
}

}  // namespace

absl::Status RegisterElementwiseRules(RuleRegistry* registry) {
  for (const char* f : {"relu", "gelu", "gelu_tanh", "silu"}) {
    const std::string grad = std::string(f) + "_grad";
    RETURN_IF_ERROR(registry->Register(f, {UnaryStrategies, ActivationVjp(grad)}));
    RETURN_IF_ERROR(registry->Register(grad, {GradStrategies, nullptr}));
  }
  return absl::OkStatus();
}

}  // namespace weft::planner
