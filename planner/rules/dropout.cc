// dropout: out = x * mask / (1 - p), the mask drawn per GLOBAL element (Kernels::DropoutSpec), so
// every placement computes exactly the slice of the single-device result. Linear in x, so per
// mesh dim any placement carries over:
//   x[R] -> out[R];  x[S(i)] -> out[S(i)];  x[P] -> out[P]
// VJP: dx = dropout(dy) with the same site key: the same mask.
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> DropoutStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("dropout takes 1 input and 1 output");
  }
  return SamePlacement(AnyPlacement(sig.input_shapes[0].size()), 1, 1);
}

absl::Status DropoutVjp(GradBuilder& b) {
  const Op& op = b.op();
  ASSIGN_OR_RETURN(int dx, b.Emit("dropout", {b.out_grad(0)}, op.inputs[0], op.attrs));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterDropoutRule(RuleRegistry* registry) {
  return registry->Register("dropout", {DropoutStrategies, DropoutVjp});
}

}  // namespace weft::planner
