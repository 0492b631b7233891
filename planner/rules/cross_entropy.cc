// The token cross-entropy, in the pieces that let the logits stay split over the vocabulary
// (Megatron's vocab-parallel cross-entropy; logits [.., V], r = rank of the token axes):
//   m      = row_max(logits)                       the largest logit of each token
//   sumexp, tlogit = ce_parts(logits, m, targets)  sum of exp(logits - m); the target's logit
//   loss   = ce_loss(sumexp, m, tlogit)            scale * sum(log(sumexp) + m - tlogit)
// With the vocabulary split each rank's m is the max of its columns (Partial(max), reduced with
// an all-reduce max), and its sumexp and tlogit are its terms (Partial(sum)): three all-reduces of
// [tokens]-sized tensors, never the logits. Per mesh dim, for any token axis i < r:
//   row_max:  logits[R] -> m[R];  logits[S(i)] -> m[S(i)];  logits[S(r)] -> m[Partial(max)]
//   ce_parts: (logits, m, targets) [R, R, R] -> (R, R);  [S(i), S(i), S(i)] -> (S(i), S(i));
//             [S(r), R, R] -> (Partial(sum), Partial(sum))
//   ce_loss:  (sumexp, m, tlogit) [R, R, R] -> loss[R];  [S(i), S(i), S(i)] -> loss[Partial(sum)]
// The gradient: m is a shift the loss does not depend on (no gradient term), so
//   d_sumexp = scale / sumexp, d_tlogit = -scale          (ce_loss_grad: [R] -> (R, R),
//                                                          [S(i)] -> (S(i), S(i)))
//   dlogits  = d_sumexp * exp(logits - m) + d_tlogit at the target   (ce_parts_grad:
//              [R..] -> R; [S(i)..] -> S(i); logits[S(r)] with the rest [R] -> S(r);
//              d_sumexp and d_tlogit [P] with the rest [R] -> P: linear in them)
// which is scale * (softmax - onehot), computed where the logits are.
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

using Strategies = absl::StatusOr<std::vector<DimStrategy>>;

// Logits [tokens.., V] and a per-token tensor [tokens..].
absl::Status CheckTokens(const Shape& logits, const Shape& per_token) {
  if (logits.size() < 2 || Shape(logits.begin(), logits.end() - 1) != per_token) {
    return absl::InvalidArgumentError("takes logits [tokens.., V] and per-token [tokens..]");
  }
  return absl::OkStatus();
}

Strategies RowMaxStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("row_max takes logits and gives m");
  }
  RETURN_IF_ERROR(CheckTokens(sig.input_shapes[0], sig.output_shapes[0]));
  const int r = static_cast<int>(sig.output_shapes[0].size());
  std::vector<DimStrategy> out = SamePlacement(ReplicateOrShardAnyAxis(r), 1, 1);
  out.push_back({{Placement::Shard(r)}, {Placement::Partial(Placement::Reduce::kMax)}});
  return out;
}

Strategies CePartsStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 3 || sig.output_shapes.size() != 2) {
    return absl::InvalidArgumentError("ce_parts takes logits, m, targets and gives 2 outputs");
  }
  RETURN_IF_ERROR(CheckTokens(sig.input_shapes[0], sig.input_shapes[1]));
  RETURN_IF_ERROR(CheckTokens(sig.input_shapes[0], sig.input_shapes[2]));
  const int r = static_cast<int>(sig.input_shapes[1].size());
  const Placement R = Placement::Replicate(), P = Placement::Partial();
  std::vector<DimStrategy> out = SamePlacement(ReplicateOrShardAnyAxis(r), 3, 2);
  out.push_back({{Placement::Shard(r), R, R}, {P, P}});
  return out;
}

Strategies CePartsGradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 5 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError(
        "ce_parts_grad takes logits, m, targets, d_sumexp, d_tlogit and gives dlogits");
  }
  for (int k = 1; k < 5; ++k) {
    RETURN_IF_ERROR(CheckTokens(sig.input_shapes[0], sig.input_shapes[k]));
  }
  const int r = static_cast<int>(sig.input_shapes[1].size());
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = SamePlacement(ReplicateOrShardAnyAxis(r), 5, 1);
  const Placement v = Placement::Shard(r);
  out.push_back({{v, R, R, R, R}, {v}});
  for (const Placement& P : LinearPartials()) out.push_back({{R, R, R, P, P}, {P}});
  return out;
}

Strategies CeLossStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 3 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[1] != sig.input_shapes[0] || sig.input_shapes[2] != sig.input_shapes[0]) {
    return absl::InvalidArgumentError("ce_loss takes sumexp, m, tlogit of one shape");
  }
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = {{{R, R, R}, {R}}};
  for (size_t i = 0; i < sig.input_shapes[0].size(); ++i) {
    const Placement s = Placement::Shard(static_cast<int>(i));
    out.push_back({{s, s, s}, {Placement::Partial()}});
  }
  return out;
}

Strategies CeLossGradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 1 || sig.output_shapes.size() != 2) {
    return absl::InvalidArgumentError("ce_loss_grad takes sumexp and gives 2 outputs");
  }
  return SamePlacement(ReplicateOrShardAnyAxis(sig.input_shapes[0].size()), 1, 2);
}

absl::Status CePartsVjp(GradBuilder& b) {
  const Op& op = b.op();
  const int logits = op.inputs[0];
  if (b.needs_grad(1)) b.set_no_gradient(1);  // the shift cancels out of the loss
  if (b.needs_grad(2)) b.set_no_gradient(2);  // integer ids
  if (!b.needs_grad(0)) return absl::OkStatus();
  if (b.out_grad(0) < 0 || b.out_grad(1) < 0) {
    return absl::InternalError("ce_parts: both sumexp and tlogit need their gradients");
  }
  ASSIGN_OR_RETURN(const int x, b.input(0));
  ASSIGN_OR_RETURN(const int m, b.input(1));
  ASSIGN_OR_RETURN(const int targets, b.input(2));
  ASSIGN_OR_RETURN(int dlogits, b.Emit("ce_parts_grad",
                                       {x, m, targets, b.out_grad(0), b.out_grad(1)}, logits));
  b.set_input_grad(0, dlogits);
  return absl::OkStatus();
}

absl::Status CeLossVjp(GradBuilder& b) {
  const Op& op = b.op();
  const int sumexp = op.inputs[0], tlogit = op.inputs[2];
  if (b.needs_grad(1)) b.set_no_gradient(1);
  ASSIGN_OR_RETURN(const int read, b.input(0));
  ASSIGN_OR_RETURN(std::vector<int> grads,
                   b.EmitMulti("ce_loss_grad", {read}, {sumexp, tlogit},
                               {{"scale", op.attrs.Float("scale")}}));
  if (b.needs_grad(0)) b.set_input_grad(0, grads[0]);
  if (b.needs_grad(2)) b.set_input_grad(2, grads[1]);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterCrossEntropyRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("row_max", {RowMaxStrategies, nullptr}));
  RETURN_IF_ERROR(registry->Register("ce_parts", {CePartsStrategies, CePartsVjp}));
  RETURN_IF_ERROR(registry->Register("ce_parts_grad", {CePartsGradStrategies, nullptr}));
  RETURN_IF_ERROR(registry->Register("ce_loss", {CeLossStrategies, CeLossVjp}));
  return registry->Register("ce_loss_grad", {CeLossGradStrategies, nullptr});
}

}  // namespace weft::planner
