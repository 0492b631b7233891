// SPMD rules and the registry that holds them, keyed by op type (one file per rule under
// rules/). A rule lists the ways its op can run on ONE mesh dim (a DimStrategy: the placement
// each input must have and the placements the outputs get); the same list applies to every mesh
// dim. InferSpmd picks, per mesh dim, the strategy whose input reshards move the fewest bytes
// (ties: fewer reshards, then outputs that owe less communication: Replicate < Shard <
// Partial). Registration order never matters. The same registry holds each op's VJP rule.
//
// E.g. (rules/matmul.cc, einsum `mk,kn->mn`, one mesh dim)
//   mk[S(0)], kn[R]    -> mn[S(0)]
//   mk[S(1)], kn[S(0)] -> mn[Partial(sum)]
//
//   ASSIGN_OR_RETURN(SpmdDecision d, InferSpmd(BuiltinRules(), graph, op));
//   // d.inputs[i] != current attr of op.inputs[i]  =>  insert a reshard before op.
#ifndef WEFT_COORDINATOR_PLANNER_SPMD_H_
#define WEFT_COORDINATOR_PLANNER_SPMD_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dist_attr.h"
#include "coordinator/planner/graph.h"

namespace weft::planner {

struct DimStrategy {
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
};

// What a rule sees of an op: its type and attributes and the global shapes of its tensors.
struct OpSignature {
  const Op* op = nullptr;
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<std::vector<int64_t>> output_shapes;
};

class GradBuilder;  // autodiff.h

using StrategyFn = std::function<absl::StatusOr<std::vector<DimStrategy>>(const OpSignature&)>;
// Appends the backward ops of one forward op through `builder` (autodiff.h).
using VjpFn = std::function<absl::Status(GradBuilder& builder)>;

struct OpRule {
  StrategyFn strategies;
  VjpFn vjp;  // empty: the op is not differentiated (backward and update ops)
  // Inputs the op writes in place (an optimizer's parameter and states). The search never
  // reshards them, since the update would land in a copy; it moves the other inputs instead,
  // with any move lowering can make (Partial -> Shard too: nothing reads them afterwards). The
  // optimizer pass never needs that (it reshards gradients to the parameter's placement first),
  // but an update op planned on arbitrary inputs does (tests/spmd_validator_test).
  std::vector<int> updates_in_place = {};
};

class RuleRegistry {
 public:
  // A second rule for the same op type is an error (never last-one-wins).
  absl::Status Register(const std::string& op_type, OpRule rule);
  const OpRule* Find(absl::string_view op_type) const;
  // Every registered op type, sorted (validators enumerate the registry with it).
  std::vector<std::string> OpTypes() const;

 private:
  std::map<std::string, OpRule, std::less<>> rules_;
};

// Every rule under rules/, registered once.
const RuleRegistry& BuiltinRules();

struct SpmdDecision {
  std::vector<DistAttr> inputs;   // the attrs the op needs its inputs in
  std::vector<DistAttr> outputs;  // the attrs its outputs get
  double cost_bytes = 0;          // bytes per rank moved by the input reshards
};

// Every input of op must already have a DistAttr in g. Errors are INVALID_ARGUMENT naming the
// op, its layer and its input placements.
absl::StatusOr<SpmdDecision> InferSpmd(const RuleRegistry& registry, const Graph& g,
                                       const Op& op);

// "fc0.xw [Shard(0)], fc0.weight [Replicate()]": input names and placements, for messages.
std::string DescribeInputs(const Graph& g, const Op& op);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_SPMD_H_
