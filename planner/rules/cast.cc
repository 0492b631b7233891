// cast: out = x converted to out's dtype (the batch loaded as integers, bf16 storage). Per mesh
// dim, for any axis i:
//   x[R] -> out[R];  x[S(i)] -> out[S(i)]
// Rounding is not linear, so a Partial input is reduced first: the cast of a sum is not the sum
// of the casts.
// VJP (floating point to floating point): dx = cast of dy back to x's dtype.
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> CastStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[0] != sig.output_shapes[0]) {
    return absl::InvalidArgumentError("cast takes 1 input and 1 output of its shape");
  }
  return SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 1, 1);
}

absl::Status CastVjp(GradBuilder& b) {
  // Only a float input has a gradient; the graph knows the dtypes.
  const int x = b.op().inputs[0];
  ASSIGN_OR_RETURN(int dx, b.Emit("cast", {b.out_grad(0)}, x));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterCastRule(RuleRegistry* registry) {
  return registry->Register("cast", {CastStrategies, CastVjp});
}

}  // namespace weft::planner
