// bias_add: out = x + b, b [n...] (x's trailing axes, usually one; gpt2's fused q | k | v bias
// is [3, H, D]) broadcast over x's leading axes; bias_grad: db = sum over the leading axes of
// dy. Per mesh dim, with i a leading axis and l = the j-th trailing axis:
//   x[R],    b[R]    -> out[R]
//   x[S(i)], b[R]    -> out[S(i)]
//   x[S(l)], b[S(j)] -> out[S(l)]       column-parallel bias
//   x[P],    b[P]    -> out[P]          a Partial bias (sum or avg) with a Partial x
//   dy[R] -> db[R];  dy[S(i)] -> db[Partial(sum)];  dy[S(l)] -> db[S(j)];  dy[P] -> db[P]
// A Partial x with a whole bias must be reduced first: each rank would add the whole bias to
// its term.
// VJP: dx = dy (no op), db = bias_grad(dy).
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

// Whether b's shape is x's trailing axes (at least one leading axis left).
bool TrailingOf(const Shape& x, const Shape& b) {
  return !b.empty() && x.size() > b.size() && Shape(x.end() - b.size(), x.end()) == b;
}

absl::StatusOr<std::vector<DimStrategy>> BiasAddStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      !TrailingOf(sig.input_shapes[0], sig.input_shapes[1])) {
    return absl::InvalidArgumentError("bias_add takes x [..., n...] and b [n...]");
  }
  const int lead = static_cast<int>(sig.input_shapes[0].size() - sig.input_shapes[1].size());
  const int rb = static_cast<int>(sig.input_shapes[1].size());
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = {{{R, R}, {R}}};
  for (int i = 0; i < lead; ++i) out.push_back({{Placement::Shard(i), R}, {Placement::Shard(i)}});
  for (int j = 0; j < rb; ++j) {
    const Placement l = Placement::Shard(lead + j);
    out.push_back({{l, Placement::Shard(j)}, {l}});
  }
  // Both terms Partial: sum_i (x_i + b_i) = x + b (and the same for the mean).
  for (const Placement& P : LinearPartials()) out.push_back({{P, P}, {P}});
  return out;
}

absl::StatusOr<std::vector<DimStrategy>> BiasGradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1 ||
      !TrailingOf(sig.input_shapes[0], sig.output_shapes[0])) {
    return absl::InvalidArgumentError("bias_grad takes dy [..., n...] to db [n...]");
  }
  const int lead = static_cast<int>(sig.input_shapes[0].size() - sig.output_shapes[0].size());
  const int rb = static_cast<int>(sig.output_shapes[0].size());
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = {{{R}, {R}}, {{Placement::Partial()}, {Placement::Partial()}}};
  for (int i = 0; i < lead; ++i) out.push_back({{Placement::Shard(i)}, {Placement::Partial()}});
  for (int j = 0; j < rb; ++j) out.push_back({{Placement::Shard(lead + j)}, {Placement::Shard(j)}});
  return out;
}

absl::Status BiasAddVjp(GradBuilder& b) {
  const int dy = b.out_grad(0);
  if (b.needs_grad(0)) b.set_input_grad(0, dy);
  if (b.needs_grad(1)) {
    ASSIGN_OR_RETURN(int db, b.Emit("bias_grad", {dy}, b.op().inputs[1]));
    b.set_input_grad(1, db);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterBiasAddRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("bias_add", {BiasAddStrategies, BiasAddVjp}));
  return registry->Register("bias_grad", {BiasGradStrategies, nullptr});
}

}  // namespace weft::planner
