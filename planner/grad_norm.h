// The global gradient norm: sqrt of the sum of squares of every parameter's whole gradient, as on
// one device (PyTorch's clip_grad_norm_), which every step reports (grad_norm) and
// optimizer.clip_grad_norm clips by. Each rank holds pieces of the gradients its updates read:
// shards of some, copies of others, on its pipeline stage only. Counting every element exactly
// once: the squares are summed over the pipeline dim (each stage holds its own parameters) and
// over every mesh dim along which some gradient is sharded (GradientNormDims); along such a dim a
// gradient that is not sharded there is a copy, counted by the dim's first member only
// (CountsGradient). Along every other dim all gradients are copies and each member computes the
// same total. Emit (emit.h) lowers it: a SUM_SQUARES per gradient (scale 1 where it counts, 0
// elsewhere, so that the members of every group run the same instructions), their ADD, an
// ALL_REDUCE per summed dim (the pipeline dim's together with the loss's), then CLIP_COEFFICIENT.
//
// E.g. (mp = 2, Megatron's plan: column weights sharded, row-parallel biases replicated)
//   GradientNormDims(g);                    // {mp}
//   CountsGradient(g, c_proj_bias_grad, {mp}, /*rank=*/1);  // false: rank 0 counts the copy
#ifndef WEFT_PLANNER_GRAD_NORM_H_
#define WEFT_PLANNER_GRAD_NORM_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dist_attr.h"
#include "planner/graph.h"

namespace weft::planner {

// The mesh dims, other than the pipeline's and in mesh order, along which the gradient an update
// reads is sharded for some parameter (dims of one rank excluded); nullopt for a graph with no
// update (an evaluation's forward pass: no norm). INTERNAL when an update reads a Partial
// gradient (the optimizer pass reduces every gradient first).
absl::StatusOr<std::optional<std::vector<int>>> GradientNormDims(const Graph& g);

// Whether `rank` adds its piece of a gradient placed `dist` to the norm: on each of `dims`, the
// gradient is sharded there or the rank is the dim's first member.
bool CountsGradient(const DistAttr& dist, const std::vector<int>& dims, int rank);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_GRAD_NORM_H_
