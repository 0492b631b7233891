// Pass 6, lower: each `reshard` op becomes a sequence of steps, one mesh dim at a time:
//   Partial->Replicate: ALL_REDUCE       Partial->Shard: REDUCE_SCATTER
//   Shard->Replicate:   ALL_GATHER       Replicate->Shard: SLICE (local, no traffic)
//   Shard(i)->Shard(j): ALL_TO_ALL       Replicate->Partial, Partial(sum)<->Partial(avg): SCALE
//                                         (local: for Partial(sum) only group member 0 keeps the
//                                         value; Replicate->Partial(avg) changes nothing)
// A multi-dim reshard is a sequence of such one-dim moves. Which sequence is a small search
// (Dijkstra over the placements each dim may pass through: its source, its target, Replicate),
// priced by the bytes a rank sends (reshard_cost.h, the SPMD pass's prices too), ties by fewer
// steps. A move on dim d that changes how axis a is split is only legal when no later mesh dim
// splits a (dist_attr.h nests the splits in mesh-dim order), which is what forces e.g. inner
// gathers before outer ones. Mesh dims of size 1 need no step. The result is the same for every
// rank; emit instantiates it per rank.
// Communicator groups get ids here: for each mesh dim in order of first use, its groups in
// Mesh::AllGroups order (counted, never listed, so that planning stays linear in the ranks).
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<ReshardStep> steps,
//                    LowerReshard(/*from=*/[Partial(sum)], /*to=*/[Replicate()], {8, 16},
//                                 "fc0.weight@grad"));
//   // steps[0].kind == v1::Instruction::ALL_REDUCE, steps[0].mesh_dim == 0
#ifndef WEFT_PLANNER_LOWER_H_
#define WEFT_PLANNER_LOWER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dist_attr.h"
#include "planner/graph.h"
#include "planner/reshard_cost.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

struct ReshardStep {
  v1::Instruction::Op kind = v1::Instruction::OP_UNSPECIFIED;  // ALL_REDUCE ... SCALE
  int mesh_dim = 0;
  int axis = 0;         // ALL_GATHER, REDUCE_SCATTER, SLICE; ALL_TO_ALL: the axis split
  int concat_axis = 0;  // ALL_TO_ALL: the axis concatenated (the old shard axis)
  Placement::Reduce reduce = Placement::Reduce::kSum;  // ALL_REDUCE, REDUCE_SCATTER
  // SCALE: out = scale * a; when first_member_only, members other than index 0 of the mesh
  // dim's group use 0 instead (Replicate -> Partial(sum)).
  float scale = 1.0f;
  bool first_member_only = false;
  DistAttr before;  // the tensor's attr before and after the step
  DistAttr after;
};

struct LoweredGraph {
  std::vector<std::vector<ReshardStep>> steps;  // by op index; empty for other ops
  std::vector<int> group_dims;                  // mesh dims with communicator groups
  std::map<int, int> group_base;                // mesh dim -> id of its first group
  int next_group_id = 0;                        // one past the last group's id
  // This rank's group along mesh dim d: group_base[d] + its index among the dim's groups.
  int GroupId(const Mesh& mesh, int rank, int d) const {
    return group_base.at(d) + mesh.GroupIndex(rank, {d});
  }
};

// `tensor` names the tensor in errors; `shape` is its global shape and `element_bytes` the size
// of its elements (for the costs).
absl::StatusOr<std::vector<ReshardStep>> LowerReshard(const DistAttr& from, const DistAttr& to,
                                                      const std::vector<int64_t>& shape,
                                                      int64_t element_bytes,
                                                      const std::string& tensor);

// The mesh part of every reshard (over micro-batches a reshard only accumulates: emit's job), and
// groups for every mesh dim a step runs on, plus `extra_dims` (the pipeline dim's send, recv and
// loss sum) after them. With `numbering` (another graph's, lowered over the same mesh: the
// training graph's, for an evaluation's that shares its program), a dim it has groups for keeps
// their ids, and a dim it lacks gets ids after all of its ones, so that one program can hold
// both graphs' groups.
absl::StatusOr<LoweredGraph> Lower(const Graph& g, const std::vector<int>& extra_dims = {},
                                   const LoweredGraph* numbering = nullptr);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_LOWER_H_
