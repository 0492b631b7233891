// SPMD rules and the registry that holds them, keyed by op type (one file per rule under
// rules/). A rule lists the ways its op can run on ONE mesh dim (a DimStrategy: the placement
// each input must have and the placements the outputs get); the same list applies to every mesh
// dim. InferSpmd picks, per mesh dim, the strategy whose input reshards move the fewest bytes
// (ties: fewer reshards, then outputs that owe less communication: Replicate < Shard <
// Partial). Registration order never matters. The same registry holds each op's VJP rule.
//
// With micro-batches (Graph::micro_batches > 1) the same list also places the op over them, as if
// on one more dim that runs in time: there only moves without traffic between micro-batches are
// made (Partial -> Replicate: accumulating the terms once all micro-batches ran; Partial(sum) <->
// Partial(avg)), so an op reads the batch piece by piece or waits for a whole step's sum.
//
// E.g. (rules/matmul.cc, einsum `mk,kn->mn`, one mesh dim)
//   mk[S(0)], kn[R]    -> mn[S(0)]
//   mk[S(1)], kn[S(0)] -> mn[Partial(sum)]
//
//   ASSIGN_OR_RETURN(SpmdDecision d, InferSpmd(BuiltinRules(), graph, op));
//   // d.inputs[i] != current attr of op.inputs[i]  =>  insert a reshard before op.
#ifndef WEFT_PLANNER_SPMD_H_
#define WEFT_PLANNER_SPMD_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dist_attr.h"
#include "planner/graph.h"

namespace weft::planner {

struct DimStrategy {
  std::vector<Placement> inputs;
  std::vector<Placement> outputs;
};

// What a rule sees of an op: its type and attributes, the global shapes of its tensors, and the
// size of the mesh dim the strategies are for (or the number of micro-batches) and how the dims
// before it split the inputs, for the few ops whose shards must fall on whole units (attention's
// heads: each rank's query heads must read its own kv heads).
struct OpSignature {
  const Op* op = nullptr;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
  int64_t dim_size = 1;
  // Per input and axis: into how many pieces the mesh dims before this one already split it (1:
  // whole; empty: not known). For rules whose splits must nest evenly (grouped-query heads).
  std::vector<Shape> input_splits;
};

class GradBuilder;  // autodiff.h

using StrategyFn = std::function<absl::StatusOr<std::vector<DimStrategy>>(const OpSignature&)>;
// Appends the backward ops of one forward op through `builder` (autodiff.h).
using VjpFn = std::function<absl::Status(GradBuilder& builder)>;

struct OpRule {
  StrategyFn strategies;
  VjpFn vjp;  // empty: the op is not differentiated (backward and update ops)
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
  std::vector<Placement> inputs_micro;   // over micro-batches (Replicate with one per step)
  std::vector<Placement> outputs_micro;
  double cost_bytes = 0;  // bytes per rank moved by the input reshards
};

// Every input of op must already have a DistAttr in g. An op's inputs it updates in place (the
// op table's updates_in_place(): an optimizer's parameter and states) are never resharded, since
// the update would land in a copy; the other inputs move instead, with any move lowering can
// make (Partial -> Shard too: nothing reads them afterwards). Byte costs count each tensor's
// dtype and, with micro-batches, one micro-batch's piece. Errors are INVALID_ARGUMENT naming the
// op, its layer and its input placements.
absl::StatusOr<SpmdDecision> InferSpmd(const RuleRegistry& registry, const Graph& g,
                                       const Op& op);

// "fc0.xw [Shard(0)], fc0.weight [Replicate()]": input names and placements, for messages.
std::string DescribeInputs(const Graph& g, const Op& op);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_SPMD_H_
