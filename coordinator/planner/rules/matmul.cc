// matmul: out = op(a) @ op(b), tensors of rank > 2 viewed as 2-D [prod(leading), last]
// (program.proto). Each axis of a and b is labelled m, k or n as in einsum `mk,kn->mn`; per
// mesh dim:
//   mk[S(m)], kn[R]    -> mn[S(m)]        rows split, weights whole
//   mk[R],    kn[S(n)] -> mn[S(n)]        column-parallel
//   mk[S(k)], kn[S(k)] -> mn[Partial(sum)]  the contraction is split: each rank has a term
//   mk[R],    kn[R]    -> mn[R]
//   mk[P],    kn[R]    -> mn[P]   and   mk[R], kn[P] -> mn[P]   (linear in each argument;
//                                    P(sum) or P(avg), kept)
// Several k axes (x^T @ dy over [B, T, n] tensors) pair up by position.
// VJP: dx = dy @ W^T, dW = x^T @ dy.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/planner/autodiff.h"
#include "coordinator/planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> MatmulStrategies(const OpSignature& sig) {
  const bool transpose_a = sig.op->attrs.Bool("transpose_a");
  const bool transpose_b = sig.op->attrs.Bool("transpose_b");
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("matmul takes 2 inputs and 1 output");
  }
  const int ra = static_cast<int>(sig.input_shapes[0].size());
  const int rb = static_cast<int>(sig.input_shapes[1].size());
  const int ro = static_cast<int>(sig.output_shapes[0].size());
  if (ra < 2 || rb < 2) return absl::InvalidArgumentError("matmul inputs must have rank >= 2");
  std::vector<int> a_m, a_k, b_k, b_n;
  for (int i = 0; i < ra - 1; ++i) (transpose_a ? a_k : a_m).push_back(i);
  (transpose_a ? a_m : a_k).push_back(ra - 1);
  for (int i = 0; i < rb - 1; ++i) (transpose_b ? b_n : b_k).push_back(i);
  (transpose_b ? b_k : b_n).push_back(rb - 1);

  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out;
  // mk[R], kn[R] -> mn[R]
  out.push_back({{R, R}, {R}});
  // mk[S(m)], kn[R] -> mn[S(m)]: a's leading axes keep their position in out; a transposed
  // a has one m axis, out axis 0.
  for (size_t i = 0; i < a_m.size(); ++i) {
    int out_axis = transpose_a ? 0 : a_m[i];
    if (out_axis >= ro - 1) continue;
    out.push_back({{Placement::Shard(a_m[i]), R}, {Placement::Shard(out_axis)}});
  }
  // mk[R], kn[S(n)] -> mn[S(n)]: only a single n axis maps to a contiguous out axis.
  if (b_n.size() == 1) {
    out.push_back({{R, Placement::Shard(b_n[0])}, {Placement::Shard(ro - 1)}});
  }
  // mk[S(k)], kn[S(k)] -> mn[Partial(sum)]: k axes pair by position when they match.
  if (a_k.size() == b_k.size()) {
    for (size_t i = 0; i < a_k.size(); ++i) {
      if (sig.input_shapes[0][a_k[i]] != sig.input_shapes[1][b_k[i]]) continue;
      out.push_back({{Placement::Shard(a_k[i]), Placement::Shard(b_k[i])},
                     {Placement::Partial()}});
    }
  }
  // Linear in each argument: a Partial operand times a whole one stays Partial, of the same
  // kind (the sum or the mean of the terms).
  for (Placement::Reduce r : {Placement::Reduce::kSum, Placement::Reduce::kAvg}) {
    out.push_back({{Placement::Partial(r), R}, {Placement::Partial(r)}});
    out.push_back({{R, Placement::Partial(r)}, {Placement::Partial(r)}});
  }
  return out;
}

absl::Status MatmulVjp(GradBuilder& b) {
  const Op& op = b.op();
  if (op.attrs.Bool("transpose_a") || op.attrs.Bool("transpose_b")) {
    return absl::UnimplementedError("VJP of a transposed matmul");
  }
  const int x = op.inputs[0], w = op.inputs[1], dy = b.out_grad(0);
  if (b.needs_grad(0)) {
    ASSIGN_OR_RETURN(int dx, b.Emit("matmul", {dy, w}, x, {{"transpose_b", true}}));
    b.set_input_grad(0, dx);
  }
  if (b.needs_grad(1)) {
    ASSIGN_OR_RETURN(int dw, b.Emit("matmul", {x, dy}, w, {{"transpose_a", true}}));
    b.set_input_grad(1, dw);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterMatmulRule(RuleRegistry* registry) {
  return registry->Register("matmul", {MatmulStrategies, MatmulVjp});
}

}  // namespace weft::planner
