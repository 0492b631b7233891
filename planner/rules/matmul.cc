// matmul: out = op(a) @ op(b) contracting `contract` = c axes (program.proto): a's last c axes
// (transposed: its first c) with b's first c axes (transposed: its last c). Every other axis of a
// is an m axis, every other axis of b an n axis, and out is [m axes..., n axes...]: einsum
// `mk,kn->mn` with several axes per letter. A linear layer is c = 1 (x[B, T, in] @ W[in, out]);
// weights may carry more axes, e.g. gpt2's fused attention input W[C, 3, H, D] gives
// qkv[B, T, 3, H, D] whose head axis shards like any n axis. Per mesh dim:
//   mk[S(m)], kn[R]    -> mn[S(m)]        rows split, weights whole
//   mk[R],    kn[S(n)] -> mn[S(n)]        column-parallel
//   mk[S(k)], kn[S(k)] -> mn[Partial(sum)]  the contraction is split: each rank has a term
//   mk[R],    kn[R]    -> mn[R]
//   mk[P],    kn[R]    -> mn[P]   and   mk[R], kn[P] -> mn[P]   (linear in each argument;
//                                    P(sum) or P(avg), kept)
// k axes pair up by position.
// VJP, for out = a @ b:   da = dy @ b^T (contracting b's n axes), db = a^T @ dy (contracting
//                         a's m axes);
//      for out = a @ b^T: da = dy @ b,                              db = dy^T @ a.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

// The m, k and n axes of a matmul's operands.
struct MatmulAxes {
  std::vector<int> a_m, a_k, b_k, b_n;
};

absl::StatusOr<MatmulAxes> AxesOf(const Op& op, int ra, int rb) {
  const bool transpose_a = op.attrs.Bool("transpose_a");
  const bool transpose_b = op.attrs.Bool("transpose_b");
  const int64_t c = op.attrs.Int("contract");
  if (c < 1 || c >= ra || c >= rb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul contracts ", c, " axes of operands of rank ", ra, " and ", rb,
        "; each needs at least one axis left"));
  }
  MatmulAxes x;
  for (int i = 0; i < ra; ++i) {
    const bool k = transpose_a ? i < c : i >= ra - c;
    (k ? x.a_k : x.a_m).push_back(i);
  }
  for (int i = 0; i < rb; ++i) {
    const bool k = transpose_b ? i >= rb - c : i < c;
    (k ? x.b_k : x.b_n).push_back(i);
  }
  return x;
}

absl::StatusOr<std::vector<DimStrategy>> MatmulStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("matmul takes 2 inputs and 1 output");
  }
  const Shape& a = sig.input_shapes[0];
  const Shape& b = sig.input_shapes[1];
  const int ra = static_cast<int>(a.size()), rb = static_cast<int>(b.size());
  if (ra < 2 || rb < 2) return absl::InvalidArgumentError("matmul inputs must have rank >= 2");
  ASSIGN_OR_RETURN(MatmulAxes x, AxesOf(*sig.op, ra, rb));
  const int ro = static_cast<int>(sig.output_shapes[0].size());
  if (ro != static_cast<int>(x.a_m.size() + x.b_n.size())) {
    return absl::InvalidArgumentError(absl::StrCat("matmul output has rank ", ro, ", expected ",
                                                   x.a_m.size() + x.b_n.size()));
  }

  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out;
  // mk[R], kn[R] -> mn[R]
  out.push_back({{R, R}, {R}});
  // mk[S(m)], kn[R] -> mn[S(m)]: the i-th m axis is out axis i.
  for (size_t i = 0; i < x.a_m.size(); ++i) {
    out.push_back({{Placement::Shard(x.a_m[i]), R}, {Placement::Shard(static_cast<int>(i))}});
  }
  // mk[R], kn[S(n)] -> mn[S(n)]: the j-th n axis follows the m axes in out.
  for (size_t j = 0; j < x.b_n.size(); ++j) {
    out.push_back({{R, Placement::Shard(x.b_n[j])},
                   {Placement::Shard(static_cast<int>(x.a_m.size() + j))}});
  }
  // mk[S(k)], kn[S(k)] -> mn[Partial(sum)]: k axes pair by position.
  for (size_t i = 0; i < x.a_k.size(); ++i) {
    if (a[x.a_k[i]] != b[x.b_k[i]]) continue;
    out.push_back(
        {{Placement::Shard(x.a_k[i]), Placement::Shard(x.b_k[i])}, {Placement::Partial()}});
  }
  // Linear in each argument: a Partial operand times a whole one stays Partial, of the same
  // kind (the sum or the mean of the terms).
  for (const Placement& P : LinearPartials()) {
    out.push_back({{P, R}, {P}});
    out.push_back({{R, P}, {P}});
  }
  return out;
}

absl::Status MatmulVjp(GradBuilder& b) {
  const Op& op = b.op();
  if (op.attrs.Bool("transpose_a")) {
    return absl::UnimplementedError("VJP of a matmul with a transposed first operand");
  }
  const bool transpose_b = op.attrs.Bool("transpose_b");
  const int x = op.inputs[0], w = op.inputs[1], dy = b.out_grad(0);
  const Graph& g = b.graph();
  const int rx = static_cast<int>(g.tensors[x].shape.size());
  const int rw = static_cast<int>(g.tensors[w].shape.size());
  const int64_t c = op.attrs.Int("contract");
  const int64_t m_axes = rx - c, n_axes = rw - c;
  if (b.needs_grad(0)) {
    // dx [m, k] = dy [m, n] contracted over n with w.
    Attrs attrs{{"contract", n_axes}};
    if (!transpose_b) attrs.Set("transpose_b", true);
    ASSIGN_OR_RETURN(const int read_w, b.input(1));
    ASSIGN_OR_RETURN(int dx, b.Emit("matmul", {dy, read_w}, x, std::move(attrs)));
    b.set_input_grad(0, dx);
  }
  if (b.needs_grad(1)) {
    // dw = x^T @ dy ([k, n]) or, for w stored [n, k], dy^T @ x; contracted over the m axes.
    ASSIGN_OR_RETURN(const int read_x, b.input(0));
    std::vector<int> operands =
        transpose_b ? std::vector<int>{dy, read_x} : std::vector<int>{read_x, dy};
    ASSIGN_OR_RETURN(int dw, b.Emit("matmul", std::move(operands), w,
                                    {{"transpose_a", true}, {"contract", m_axes}}));
    b.set_input_grad(1, dw);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterMatmulRule(RuleRegistry* registry) {
  return registry->Register("matmul", {MatmulStrategies, MatmulVjp});
}

}  // namespace weft::planner
