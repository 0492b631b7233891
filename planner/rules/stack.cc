// unstack: x viewed along `axis` of length n -> n tensors without that axis (gpt2's fused
// q | k | v); stack: the inverse. Moving data, linear: per mesh dim, for any axis i != axis of
// x (j = i, or i - 1 after the removed axis):
//   x[R] -> outs[R];  x[S(i)] -> outs[S(j)];  x[P] -> outs[P]
//   stack: ins[R] -> out[R];  ins[S(j)] -> out[S(i)];  ins[P] -> out[P]
// VJP: unstack -> stack of the outputs' gradients along the same axis.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

// The placements of the stacked tensor (rank `rank`) and of each piece, removing `axis`.
std::vector<std::pair<Placement, Placement>> StackedAndPieces(int rank, int axis) {
  std::vector<std::pair<Placement, Placement>> out;
  for (const Placement& p : AnyPlacement(rank)) {
    if (p.is_shard() && p.axis == axis) continue;
    Placement piece = p;
    if (p.is_shard() && p.axis > axis) piece.axis = p.axis - 1;
    out.push_back({p, piece});
  }
  return out;
}

absl::StatusOr<int> StackAxis(const OpSignature& sig, const Shape& stacked, size_t pieces) {
  const int rank = static_cast<int>(stacked.size());
  const int64_t axis = sig.op->attrs.Int("axis");
  if (axis < 0 || axis >= rank || stacked[axis] != static_cast<int64_t>(pieces)) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " of ", rank,
                                                   "-d tensor must have length ", pieces));
  }
  return static_cast<int>(axis);
}

absl::StatusOr<std::vector<DimStrategy>> UnstackStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1) return absl::InvalidArgumentError("unstack takes 1 input");
  const Shape& x = sig.input_shapes[0];
  ASSIGN_OR_RETURN(int axis, StackAxis(sig, x, sig.output_shapes.size()));
  std::vector<DimStrategy> out;
  for (const auto& [whole, piece] : StackedAndPieces(static_cast<int>(x.size()), axis)) {
    out.push_back({{whole}, std::vector<Placement>(sig.output_shapes.size(), piece)});
  }
  return out;
}

absl::StatusOr<std::vector<DimStrategy>> StackStrategies(const OpSignature& sig) {
  if (sig.output_shapes.size() != 1) return absl::InvalidArgumentError("stack gives 1 output");
  const Shape& x = sig.output_shapes[0];
  ASSIGN_OR_RETURN(int axis, StackAxis(sig, x, sig.input_shapes.size()));
  std::vector<DimStrategy> out;
  for (const auto& [whole, piece] : StackedAndPieces(static_cast<int>(x.size()), axis)) {
    out.push_back({std::vector<Placement>(sig.input_shapes.size(), piece), {whole}});
  }
  return out;
}

absl::Status UnstackVjp(GradBuilder& b) {
  const Op& op = b.op();
  std::vector<int> grads;
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    if (b.out_grad(static_cast<int>(i)) < 0) {
      return absl::UnimplementedError("unstack: every piece needs a gradient");
    }
    grads.push_back(b.out_grad(static_cast<int>(i)));
  }
  ASSIGN_OR_RETURN(int dx, b.Emit("stack", grads, op.inputs[0],
                                  {{"axis", op.attrs.Int("axis")}}));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterStackRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("unstack", {UnstackStrategies, UnstackVjp}));
  return registry->Register("stack", {StackStrategies, nullptr});
}

}  // namespace weft::planner
