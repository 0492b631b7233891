// Pass 4, optimizer: per parameter, reshard its gradient to the parameter's DistAttr (a
// Partial(sum) gradient becomes an all-reduce; with micro-batches, the terms of the micro-batches
// are accumulated first), then one update op with the graph's optimizer settings as attributes:
// sgd(param, grad) or adamw(param, grad, m, v) with m and v optimizer-state tensors placed like the
// parameter. Over a mesh dim where the parameter is Partial, its gradient and states are
// Replicate (the gradient of the global value); with optimizer.weight_decay_params matrices, a
// parameter of fewer than two dims (in its files' shape) gets weight_decay 0. Emit gives the whole
// update step to the member
// holding the value: for Partial(sum) p_i = p_i * (1 - lr*wd) - (member 0 ? step : 0), for
// Partial(avg) every member takes the step. All gradient reshards come before all updates.
//
// ZeRO (Graph::sharding, level 1, 2 or 3 along a mesh dim): a parameter's states are placed like its
// shard, the parameter with Shard(a) on that dim for its first axis the dim can split (see
// ZeroPlacement; a parameter with none stays whole). Level 1 all-reduces the gradient and keeps
// this rank's shard of it (a slice), level 2 reduce-scatters it to the shard; the update runs on a
// transient slice of the parameter, which an all-gather then writes back into the parameter
// (Graph::writes_into). Level 1 with sgd, which has no states, shards nothing under float32
// storage (bf16 storage, below, gives it a master weight). Level 3: the parameter is already its
// shard (zero.h, Graph::gathered), its gradient is reduce-scattered to it and the update runs on
// it in place; nothing is gathered back.
//
// bf16 storage (storage.h): the update runs on the parameter's float32 master weight
// (<param>.master, an optimizer state placed like the states, so ZeRO shards it at every level,
// sgd's at level 1 too), and a cast rounds it into the parameter: in place, or at levels 1 and 2
// into a bf16 shard that the all-gather writes back (half the bytes of a float32 gather).
//
// E.g.
//   ASSIGN_OR_RETURN(g, AppendOptimizer(BuiltinRules(), std::move(g)));
#ifndef WEFT_PLANNER_OPTIMIZER_H_
#define WEFT_PLANNER_OPTIMIZER_H_

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/spmd.h"

namespace weft::planner {

absl::StatusOr<Graph> AppendOptimizer(const RuleRegistry& registry, Graph g);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_OPTIMIZER_H_
