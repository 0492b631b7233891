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

bool HeadsAlign(int64_t heads, int64_t kv_heads, int64_t n) {
  if (kv_heads <= 0 || heads % kv_heads != 0) return false;
  const int64_t group = heads / kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    const auto [q_off, q_len] = ShardRange(heads, n, i);
    const auto [k_off, k_len] = ShardRange(kv_heads, n, i);
    if (q_off != k_off * group || q_len != k_len * group) return false;
  }
  return true;
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
