#include "planner/rules/rules.h"

#include <cstdio>
#include <cstdlib>

#include <string>

namespace weft::planner {

std::vector<Placement> ReplicateOrShardAnyAxis(int ndim) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int a = 0; a < ndim; ++a) out.push_back(Placement::Shard(a));
  return out;
}

std::vector<Placement> LinearPartials() {
  return {Placement::Partial(Placement::Reduce::kSum), Placement::Partial(Placement::Reduce::kAvg)};
}

std::vector<Placement> AnyPlacement(int ndim) {
  std::vector<Placement> out = ReplicateOrShardAnyAxis(ndim);
  for (const Placement& p : LinearPartials()) out.push_back(p);
  return out;
}

std::vector<DimStrategy> SamePlacement(const std::vector<Placement>& placements, size_t inputs,
                                       size_t outputs) {
  std::vector<DimStrategy> out;
  for (const Placement& p : placements) {
    out.push_back({std::vector<Placement>(inputs, p), std::vector<Placement>(outputs, p)});
  }
  return out;
}

const RuleRegistry& BuiltinRules() {
  static const RuleRegistry* registry = [] {
    auto* r = new RuleRegistry();
    for (absl::Status s : {RegisterMatmulRule(r), RegisterElementwiseRules(r),
                           RegisterBiasAddRules(r), RegisterMseRules(r),
                           RegisterOptimizerRules(r), RegisterAddRule(r), RegisterCastRule(r),
                           RegisterMulRule(r), RegisterEmbeddingRules(r), RegisterNormRules(r),
                           RegisterRopeRules(r), RegisterAttentionRules(r),
                           RegisterDropoutRule(r), RegisterCrossEntropyRules(r),
                           RegisterStackRules(r)}) {
      if (!s.ok()) {  // a programming error in rules/, caught by every test
        std::fprintf(stderr, "registering planner rules: %s\n", std::string(s.message()).c_str());
        std::abort();
      }
    }
    return r;
  }();
  return *registry;
}

}  // namespace weft::planner
