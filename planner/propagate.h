// Pass 2, propagate: gives every tensor a DistAttr (and, with micro-batches, its placement over
// them). Parameters and the batch come placed from build; any placement is allowed for both,
// Partial included: a Partial(sum) tensor's global value is the sum of the pieces (emit puts the
// value on member 0 of each Partial(sum) dim and zeros elsewhere), a Partial(avg) tensor's the
// mean (every member holds the value). Every other op runs through its SPMD rule, and where the
// rule needs an input placed otherwise a `reshard` op is inserted. Under ZeRO-3 the parameters are
// first placed as their shards (zero.h) and every layer that reads one reads it all-gathered to
// its placement before ZeRO, then placed by the rules as usual. Finally the loss is resharded
// to Replicate (its sum over ranks and micro-batches is the global mean).
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
//   ASSIGN_OR_RETURN(g, Propagate(BuiltinRules(), std::move(g)));
#ifndef WEFT_PLANNER_PROPAGATE_H_
#define WEFT_PLANNER_PROPAGATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/spmd.h"

namespace weft::planner {

absl::StatusOr<Graph> Propagate(const RuleRegistry& registry, Graph g);

// Appends op to g after placing it: runs its SPMD rule on the inputs' placements, inserts a
// reshard for each input whose required placement differs, sets the outputs' placements. Shared
// by propagate, autodiff and optimizer so every op is placed by the same rules.
absl::Status AppendPlacedOp(const RuleRegistry& registry, Graph* g, Op op);

// Re-adds every op of g through AppendPlacedOp, in order (data loads, already placed, pass
// through): the forward pass of a graph whose parameters and batch have their placements.
absl::Status PlaceOps(const RuleRegistry& registry, Graph* g);

// Appends `reshard` of tensor `id` to `target` over the mesh and `micro` over micro-batches
// (no-op when equal) and returns the id holding the result: a new tensor with the same name,
// shape, dtype and role. When an op of the same phase and layer already resharded `id` to the
// same placements, returns that op's result instead (Megatron's row-parallel weight gradient
// reads the output gradient its input gradient all-reduced, rather than all-gathering its input
// again); reuse stays within a layer and a phase, so it never keeps a value alive across the
// forward and backward passes or moves it between pipeline stages.
// `layer` is taken by value: callers often name a tensor's own layer, a reference into g->tensors,
// which adding the result's tensor may move.
absl::StatusOr<int> AppendReshard(Graph* g, int id, const DistAttr& target, const Placement& micro,
                                  Phase phase, std::string layer);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_PROPAGATE_H_
