// add: out = x_1 + ... + x_n (n >= 1, one shape): residual connections, the sum of a tensor's
// gradient terms in autodiff, and with one input a copy (a tied embedding crossing pipeline
// stages, arch/transformer.h). Linear in every input, so per mesh dim any placement that
// all inputs share carries over, for any axis i:
//   x_1[R], ..., x_n[R] -> out[R]
//   x_1[S(i)], ..., x_n[S(i)] -> out[S(i)]
//   x_1[P], ..., x_n[P] -> out[P]   (sum of sums; mean of means, P(sum) or P(avg) alike)
// A Partial input with a whole one must be reduced first: each rank would add the whole term.
// VJP: dx_k = dy for every input (no op).
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> AddStrategies(const OpSignature& sig) {
  if (sig.input_shapes.empty() || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError("add takes one or more inputs and 1 output");
  }
  for (const Shape& shape : sig.input_shapes) {
    if (shape != sig.input_shapes[0]) {
      return absl::InvalidArgumentError("add takes inputs of one shape");
    }
  }
  return SamePlacement(AnyPlacement(sig.input_shapes[0].size()), sig.input_shapes.size(), 1);
}

absl::Status AddVjp(GradBuilder& b) {
  for (size_t i = 0; i < b.op().inputs.size(); ++i) {
    if (b.needs_grad(static_cast<int>(i))) b.set_input_grad(static_cast<int>(i), b.out_grad(0));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterAddRule(RuleRegistry* registry) {
  return registry->Register("add", {AddStrategies, AddVjp});
}

}  // namespace weft::planner
