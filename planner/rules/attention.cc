// attention: causal softmax attention, q [B, T, H, D], k and v [B, T, KVH, D] -> out [B, T, H, D];
// q head h reads kv head h / (H / KVH). A query needs every key of its (batch, head) up to its
// own position, so T and D are never split. Per mesh dim:
//   q[R],    k[R],    v[R]    -> out[R]
//   q[S(0)], k[S(0)], v[S(0)] -> out[S(0)]     the batch split
//   q[S(2)], k[S(2)], v[S(2)] -> out[S(2)]     heads split (Megatron), only where every rank's
//                                              query heads read exactly its own kv heads at any
//                                              nesting: H == KVH, or grouped heads that the
//                                              dims before and this one split evenly (see
//                                              SplitsHeads)
//   q[R],    k[R],    v[P]    -> out[P]        linear in v
// attention_grad: (q, k, v, dout) -> (dq, dk, dv), the same splits; dout[P] with the rest R gives
// (P, P, P): the gradients are linear in dout.
// VJP: (dq, dk, dv) = attention_grad(q, k, v, dout), the same scale and dropout.
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::Status CheckShapes(const Shape& q, const Shape& k, const Shape& v) {
  if (q.size() != 4 || k.size() != 4 || k != v || q[0] != k[0] || q[1] != k[1] || q[3] != k[3] ||
      k[2] <= 0 || q[2] % k[2] != 0) {
    return absl::InvalidArgumentError(
        "attention takes q [B, T, H, D] and k, v [B, T, KVH, D] with H a multiple of KVH");
  }
  return absl::OkStatus();
}

// Whether a mesh dim of n members may split the heads. A dim's strategies cannot see the other
// dims' placements, only how far they already split each input (sig.input_splits). Equal head
// counts split alike at any depth, evenly or not. Grouped heads (H > KVH) split only into whole
// groups, evenly at every nesting: the dims before this one split q's and k's heads into q_split
// and kv_split pieces; with both even, each rank's H / q_split query heads read exactly its
// KVH / kv_split kv heads, and this dim must split those evenly again (H 4 over KVH 2 on [2, 2]
// would otherwise leave a rank one q head and no kv head).
bool SplitsHeads(const OpSignature& sig) {
  const int64_t heads = sig.input_shapes[0][2], kv_heads = sig.input_shapes[1][2];
  if (heads == kv_heads) return true;
  const int64_t q_split = sig.input_splits.empty() ? 1 : sig.input_splits[0][2];
  const int64_t kv_split = sig.input_splits.empty() ? 1 : sig.input_splits[1][2];
  if (q_split != kv_split || heads % q_split != 0 || kv_heads % kv_split != 0) return false;
  return (kv_heads / kv_split) % sig.dim_size == 0;
}

// attention (q, k, v) -> out and attention_grad (q, k, v, dout) -> (dq, dk, dv) split alike:
// every tensor by the batch or (SplitsHeads) by the heads; and both are linear in their last
// input (v; dout), whose Partial with the rest whole makes every output Partial.
absl::StatusOr<std::vector<DimStrategy>> Strategies(const OpSignature& sig, size_t inputs,
                                                    size_t outputs) {
  RETURN_IF_ERROR(CheckShapes(sig.input_shapes[0], sig.input_shapes[1], sig.input_shapes[2]));
  std::vector<Placement> placements = {Placement::Replicate(), Placement::Shard(0)};
  if (SplitsHeads(sig)) placements.push_back(Placement::Shard(2));
  std::vector<DimStrategy> out = SamePlacement(placements, inputs, outputs);
  for (const Placement& P : LinearPartials()) {
    std::vector<Placement> in(inputs, Placement::Replicate());
    in.back() = P;
    out.push_back({std::move(in), std::vector<Placement>(outputs, P)});
  }
  return out;
}

absl::StatusOr<std::vector<DimStrategy>> AttentionStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 3 || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("attention takes q, k, v and gives 1 output");
  }
  return Strategies(sig, 3, 1);
}

absl::StatusOr<std::vector<DimStrategy>> AttentionGradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 4 || sig.output_shapes.size() != 3 ||
      sig.input_shapes[3] != sig.input_shapes[0]) {
    return absl::InvalidArgumentError("attention_grad takes q, k, v, dout and gives dq, dk, dv");
  }
  return Strategies(sig, 4, 3);
}

absl::Status AttentionVjp(GradBuilder& b) {
  const Op& op = b.op();
  std::vector<int> read;  // q, k, v
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(read.emplace_back(), b.input(i));
  }
  ASSIGN_OR_RETURN(std::vector<int> grads,
                   b.EmitMulti("attention_grad", {read[0], read[1], read[2], b.out_grad(0)},
                               op.inputs, op.attrs));
  for (int i = 0; i < 3; ++i) {
    if (b.needs_grad(i)) b.set_input_grad(i, grads[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterAttentionRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("attention", {AttentionStrategies, AttentionVjp}));
  return registry->Register("attention_grad", {AttentionGradStrategies, nullptr});
}

}  // namespace weft::planner
