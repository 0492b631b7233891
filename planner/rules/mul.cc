// mul: out = a * b, one shape (SwiGLU's gate). Bilinear, so per mesh dim, for any axis i:
//   a[R], b[R] -> out[R];  a[S(i)], b[S(i)] -> out[S(i)]
//   a[P], b[R] -> out[P];  a[R], b[P] -> out[P]   (linear in each argument; P(sum) or P(avg))
// VJP: da = dy * b, db = dy * a.
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> MulStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[0] != sig.input_shapes[1]) {
    return absl::InvalidArgumentError("mul takes 2 inputs of one shape and 1 output");
  }
  std::vector<DimStrategy> out =
      SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 2, 1);
  const Placement R = Placement::Replicate();
  for (const Placement& P : LinearPartials()) {
    out.push_back({{P, R}, {P}});
    out.push_back({{R, P}, {P}});
  }
  return out;
}

absl::Status MulVjp(GradBuilder& b) {
  const int a = b.op().inputs[0], c = b.op().inputs[1], dy = b.out_grad(0);
  if (b.needs_grad(0)) {
    ASSIGN_OR_RETURN(const int read_c, b.input(1));
    ASSIGN_OR_RETURN(int da, b.Emit("mul", {dy, read_c}, a));
    b.set_input_grad(0, da);
  }
  if (b.needs_grad(1)) {
    ASSIGN_OR_RETURN(const int read_a, b.input(0));
    ASSIGN_OR_RETURN(int dc, b.Emit("mul", {dy, read_a}, c));
    b.set_input_grad(1, dc);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterMulRule(RuleRegistry* registry) {
  return registry->Register("mul", {MulStrategies, MulVjp});
}

}  // namespace weft::planner
