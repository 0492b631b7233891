// ZeRO's placements (JobSpec.sharding, Graph::sharding): which shard of a parameter a rank keeps
// along the sharding dim, and (level 3) the parameters stored as those shards.
//
// Levels 1 and 2 shard the optimizer states and gradients (optimizer.h). Level 3 shards the
// parameters too, as FSDP: ShardParameters places each parameter as its shard and records in
// Graph::gathered the placement it had, where propagate all-gathers it for every layer that reads
// it (once per layer and pass); autodiff gathers it again in the backward pass rather than keeping
// the forward pass's copy; the gradient is reduce-scattered to the shard and the update runs on it
// in place. The gathered copies are activations, freed after their last reader, and the planner
// starts each gather at most one gather ahead of its use (early_collectives.h).
//
// E.g.
//   ZeroPlacement(Replicate on [dp=4], {1024, 4096}, /*dim=*/0);  // Shard(0): 256 rows a rank
//   RETURN_IF_ERROR(ShardParameters(&g));  // level 3: fc0.weight [1024, 4096] Shard(0) on dp
#ifndef WEFT_PLANNER_ZERO_H_
#define WEFT_PLANNER_ZERO_H_

#include <optional>

#include "absl/status/status.h"
#include "common/dist_attr.h"
#include "planner/graph.h"

namespace weft::planner {

// The placement of a ZeRO shard of a tensor placed `whole`: `whole` with Shard(a) on mesh dim
// `dim`, for the first axis a the dim may split: `whole` is Replicate on `dim`, no later mesh dim
// splits a (the gather back is then one step), and every piece of a is at least one element long.
// nullopt: the tensor stays whole on every rank (a bias shorter than the dim is wide, a dim of one
// rank, a tensor not Replicate on `dim`).
std::optional<DistAttr> ZeroPlacement(const DistAttr& whole, const Shape& shape, int dim);

// Level 3: every parameter ZeroPlacement can shard (and that is not Partial anywhere) is placed as
// its shard, its placement before in g->gathered. Runs before propagate. Nothing below level 3.
absl::Status ShardParameters(Graph* g);

// What the optimizer needs of parameter p (optimizer.h). Whole: the placement of the value its
// update reads, its placement before ZeRO-3 with Partial dims Replicate (the gradient of the
// global value). Shard: where its states and its reduced gradient live under ZeRO (levels 1 and
// 2: the slice its update runs on; level 3: the stored shard); nullopt when they are whole (no
// sharding, level 1 with an optimizer without states and no master weights, a Partial parameter,
// one the dim cannot split).
DistAttr WholeOf(const Graph& g, int p);
std::optional<DistAttr> ZeroShardOf(const Graph& g, int p);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_ZERO_H_
