// Pass 2, propagate: gives every tensor a DistAttr. Parameters take their layer's placements
// (absent: Replicate on every dim), input and label the batch placements (data.placements;
// empty: Shard(0) on a mesh dim named "dp", Replicate elsewhere). Any placement is allowed for
// both, Partial included: a Partial(sum) tensor's global value is the sum of the pieces (emit
// puts the value on the member 0 of each Partial(sum) dim and zeros elsewhere), a Partial(avg)
// tensor's the mean (every member holds the value). Every other op runs through
// its SPMD rule, and where the rule needs an input placed otherwise a `reshard` op is inserted.
// Finally the loss is resharded to Replicate (its sum over ranks is the global mean).
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
//   ASSIGN_OR_RETURN(g, Propagate(spec, BuiltinRules(), std::move(g)));
#ifndef WEFT_COORDINATOR_PLANNER_PROPAGATE_H_
#define WEFT_COORDINATOR_PLANNER_PROPAGATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/planner/graph.h"
#include "coordinator/planner/spmd.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

absl::StatusOr<Graph> Propagate(const v1::JobSpec& spec, const RuleRegistry& registry, Graph g);

// Gives every parameter of g its layer's placements (absent: Replicate on every dim).
absl::Status PlaceParameters(const v1::JobSpec& spec, Graph* g);

// The DistAttr of a batch tensor (input or label) of `ndim` dims: data.placements, or Shard(0)
// on a mesh dim named "dp" and Replicate elsewhere.
absl::StatusOr<DistAttr> BatchAttr(const v1::JobSpec& spec, const Mesh& mesh, int ndim);

// Appends op to g after placing it: runs its SPMD rule on the inputs' DistAttrs, inserts a
// reshard for each input whose required attr differs, sets the outputs' DistAttrs. Shared by
// propagate, autodiff and optimizer so every op is placed by the same rules.
absl::Status AppendPlacedOp(const RuleRegistry& registry, Graph* g, Op op);

// Re-adds every op of g through AppendPlacedOp, in order (data loads, already placed, pass
// through): the forward pass of a graph whose parameters and batch have their placements.
absl::Status PlaceOps(const RuleRegistry& registry, Graph* g);

// Appends `reshard` of tensor `id` to `target` (no-op when equal) and returns the id holding
// the result: a new tensor with the same name, shape and role.
int AppendReshard(Graph* g, int id, const DistAttr& target, Phase phase, const std::string& layer);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_PROPAGATE_H_
