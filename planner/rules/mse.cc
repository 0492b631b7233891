// mse: loss[1] = scale * sum((pred - label)^2), scale = 1/N_global; mse_grad: dpred =
// scale * (pred - label), scale = 2/N_global (twice the loss's scale). Per mesh dim, for any axis i:
//   pred[R],    label[R]    -> loss[R]            dpred[R]
//   pred[S(i)], label[S(i)] -> loss[Partial(sum)]  dpred[S(i)]
// A sharded prediction gives each rank its term of the global mean; resharding the loss to
// Replicate is the loss all-reduce.
// VJP: dpred = mse_grad(pred, label) (the loss's own gradient is 1).
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::Status CheckPair(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[0] != sig.input_shapes[1]) {
    return absl::InvalidArgumentError("takes pred and label of one shape");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DimStrategy>> MseStrategies(const OpSignature& sig) {
  RETURN_IF_ERROR(CheckPair(sig));
  std::vector<DimStrategy> out;
  for (const Placement& p : ReplicateOrShardAnyAxis(sig.input_shapes[0].size())) {
    out.push_back({{p, p}, {p.is_shard() ? Placement::Partial() : p}});
  }
  return out;
}

absl::StatusOr<std::vector<DimStrategy>> MseGradStrategies(const OpSignature& sig) {
  RETURN_IF_ERROR(CheckPair(sig));
  return SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 2, 1);
}

absl::Status MseVjp(GradBuilder& b) {
  const int pred = b.op().inputs[0];
  if (b.needs_grad(1)) return absl::UnimplementedError("gradient of the label");
  // d/dpred of scale * sum((pred - label)^2); scale is 1/N of the whole batch, which a
  // pipeline micro-batch's prediction is only a part of.
  ASSIGN_OR_RETURN(const int p, b.input(0));
  ASSIGN_OR_RETURN(const int l, b.input(1));
  ASSIGN_OR_RETURN(int dpred, b.Emit("mse_grad", {p, l}, pred,
                                      {{"scale", 2.0 * b.op().attrs.Float("scale")}}));
  b.set_input_grad(0, dpred);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterMseRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("mse", {MseStrategies, MseVjp}));
  return registry->Register("mse_grad", {MseGradStrategies, nullptr});
}

}  // namespace weft::planner
