// rope / rope_grad: the rotary embedding of x [B, T, H, D] at its positions, and the rotation
// back (its VJP). Each (b, t, h) row rotates on its own, at position t (the kernel adds the
// piece's offset along T, Instruction.box), and the rotation is linear. Per mesh dim:
//   x[R] -> out[R];  x[S(i)] -> out[S(i)] for i in {0, 1, 2} (not the head dim D);
//   x[P] -> out[P]
// VJP: rope -> rope_grad(dy) (the same theta).
#include <algorithm>

#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> RopeStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[0].size() != 4) {
    return absl::InvalidArgumentError("rope takes x [B, T, H, D]");
  }
  std::vector<Placement> placements = AnyPlacement(4);
  placements.erase(std::remove(placements.begin(), placements.end(), Placement::Shard(3)),
                   placements.end());
  return SamePlacement(placements, 1, 1);
}

absl::Status RopeVjp(GradBuilder& b) {
  const int x = b.op().inputs[0];
  ASSIGN_OR_RETURN(int dx, b.Emit("rope_grad", {b.out_grad(0)}, x,
                                  {{"theta", b.op().attrs.Float("theta")}}));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterRopeRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("rope", {RopeStrategies, RopeVjp}));
  return registry->Register("rope_grad", {RopeStrategies, nullptr});
}

}  // namespace weft::planner
