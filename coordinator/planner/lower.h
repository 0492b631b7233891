// Pass 6, lower: each `reshard` op becomes a sequence of collectives, one mesh dim at a time:
//   Partial->Replicate: ALL_REDUCE     Partial->Shard: REDUCE_SCATTER
//   Shard->Replicate:   ALL_GATHER     Replicate->Shard: SLICE (local, no traffic)
//   Shard(i)->Shard(j): ALL_GATHER then SLICE (ALL_TO_ALL is a later optimization)
// Shards are first gathered from the last mesh dim to the first, then new placements applied
// from the first to the last, so that an axis split by several mesh dims keeps its nesting
// (dist_attr.h). Mesh dims of size 1 need no step. The result is the same for every rank; emit
// instantiates it per rank. Communicator groups get ids here: for each mesh dim in order of
// first use, its groups in Mesh::AllGroups order.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<ReshardStep> steps,
//                    LowerReshard(/*from=*/[Partial(sum)], /*to=*/[Replicate()], "fc0.weight@grad"));
//   // steps[0].kind == v1::Instruction::ALL_REDUCE, steps[0].mesh_dim == 0
#ifndef WEFT_COORDINATOR_PLANNER_LOWER_H_
#define WEFT_COORDINATOR_PLANNER_LOWER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dist_attr.h"
#include "coordinator/planner/graph.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

struct ReshardStep {
  v1::Instruction::Op kind = v1::Instruction::OP_UNSPECIFIED;  // ALL_REDUCE ... SLICE
  int mesh_dim = 0;
  int axis = 0;                                  // ALL_GATHER, REDUCE_SCATTER, SLICE
  Placement::Reduce reduce = Placement::Reduce::kSum;  // ALL_REDUCE, REDUCE_SCATTER
  DistAttr before;                               // the tensor's attr before and after the step
  DistAttr after;
};

struct LoweredGraph {
  std::vector<std::vector<ReshardStep>> steps;  // by op index; empty for other ops
  std::vector<int> group_dims;                  // mesh dims with communicator groups
  std::map<int, int> group_base;                // mesh dim -> id of its first group
};

// `tensor` names the tensor in errors.
absl::StatusOr<std::vector<ReshardStep>> LowerReshard(const DistAttr& from, const DistAttr& to,
                                                      const std::string& tensor);

absl::StatusOr<LoweredGraph> Lower(const Graph& g);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_LOWER_H_
