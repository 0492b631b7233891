// The op rules, one file each; a new op adds one file and one line in rules.cc.
// Each Register* adds the op's SPMD rule (strategies per mesh dim) and, for forward ops, its
// VJP rule.
#ifndef WEFT_PLANNER_RULES_RULES_H_
#define WEFT_PLANNER_RULES_RULES_H_

#include "absl/status/status.h"
#include "planner/spmd.h"

namespace weft::planner {

absl::Status RegisterMatmulRule(RuleRegistry* registry);       // matmul
absl::Status RegisterElementwiseRules(RuleRegistry* registry);  // relu, gelu(_tanh), silu, *_grad
absl::Status RegisterBiasAddRules(RuleRegistry* registry);      // bias_add, bias_grad
absl::Status RegisterMseRules(RuleRegistry* registry);          // mse, mse_grad
absl::Status RegisterOptimizerRules(RuleRegistry* registry);    // sgd, adamw
absl::Status RegisterAddRule(RuleRegistry* registry);           // add
absl::Status RegisterCastRule(RuleRegistry* registry);          // cast
absl::Status RegisterMulRule(RuleRegistry* registry);           // mul
absl::Status RegisterEmbeddingRules(RuleRegistry* registry);    // embedding(_grad)
absl::Status RegisterNormRules(RuleRegistry* registry);  // layer_norm, rms_norm, their grads
absl::Status RegisterRopeRules(RuleRegistry* registry);         // rope, rope_grad
absl::Status RegisterAttentionRules(RuleRegistry* registry);    // attention(_grad)
absl::Status RegisterDropoutRule(RuleRegistry* registry);       // dropout
// row_max, ce_parts(_grad), ce_loss(_grad)
absl::Status RegisterCrossEntropyRules(RuleRegistry* registry);
absl::Status RegisterStackRules(RuleRegistry* registry);        // unstack, stack

// Helpers shared by rule files.
// {Replicate(), Shard(0), ..., Shard(ndim-1)}.
std::vector<Placement> ReplicateOrShardAnyAxis(int ndim);
// {Partial(sum), Partial(avg)}: the Partials a linear op carries through (the sum of terms or
// their mean); Partial(max) is not linear.
std::vector<Placement> LinearPartials();
// ReplicateOrShardAnyAxis plus LinearPartials: where a linear op keeps any placement of its
// inputs.
std::vector<Placement> AnyPlacement(int ndim);
// One strategy per placement p: every one of `inputs` inputs and `outputs` outputs in p (ops
// whose tensors share one shape and split alike: elementwise ops, updates, copies).
std::vector<DimStrategy> SamePlacement(const std::vector<Placement>& placements, size_t inputs,
                                       size_t outputs);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_RULES_RULES_H_
