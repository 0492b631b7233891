#include "coordinator/planner/rules/rules.h"

#include <cstdio>
#include <cstdlib>

#include <string>

namespace weft::planner {

std::vector<Placement> ReplicateOrShardAnyAxis(int ndim) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int a = 0; a < ndim; ++a) out.push_back(Placement::Shard(a));
  return out;
}

std::vector<Placement> AnyPlacement(int ndim) {
  std::vector<Placement> out = ReplicateOrShardAnyAxis(ndim);
  out.push_back(Placement::Partial(Placement::Reduce::kSum));
  out.push_back(Placement::Partial(Placement::Reduce::kAvg));
  return out;
}

const RuleRegistry& BuiltinRules() {
  static const RuleRegistry* registry = [] {
    auto* r = new RuleRegistry();
    for (absl::Status s : {RegisterMatmulRule(r), RegisterElementwiseRules(r),
                           RegisterBiasAddRules(r), RegisterMseRules(r),
                           RegisterOptimizerRules(r), RegisterAddRule(r), RegisterCastRule(r)}) {
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
