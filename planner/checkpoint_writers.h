// Which rank writes each checkpoint chunk. A box of a parameter or optimizer state that several
// ranks hold in identical copies (the ranks that differ only along the mesh dims where it is
// Replicate or Partial(avg), within its pipeline stage) is written by exactly one of them, so a
// checkpoint stores one copy; the writer is chosen to balance bytes over ranks, not always the
// first replica. The groups of copies are enumerated once per group (by its first rank), never
// per member, so the assignment is linear in the number of ranks.
//
// E.g.
//   ASSIGN_OR_RETURN(CheckpointWriters writers, CheckpointWriters::Assign(g, plan));
//   writers.Writes(tensor_id, rank);   // CheckpointItem.write of that rank's item
#ifndef WEFT_PLANNER_CHECKPOINT_WRITERS_H_
#define WEFT_PLANNER_CHECKPOINT_WRITERS_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/pipeline/pipeline.h"
#include "planner/stop.h"

namespace weft::planner {

// The stage (coordinate along the pipeline dim, 0 without one) that holds tensor t: its layer's.
int StageOfTensor(const Graph& g, const pipeline::PipelinePlan& plan, const Tensor& t);
// Whether rank holds the value of a tensor placed by attr: a Partial(sum) tensor lives on
// member 0 of each Partial(sum) dim (zeros elsewhere, so that the pieces sum to it).
bool HoldsValue(const DistAttr& attr, int rank);
// The name tensor `id`, a parameter or optimizer state, has in checkpoints: the parameter's
// (fc0.weight, also for its float32 master weight under bf16 storage), or CheckpointStateName
// for a state (fc0.weight/adamw.m).
std::string CheckpointName(const Graph& g, int id);

class CheckpointWriters {
 public:
  // Largest chunks are placed first, each on the copy holder with the fewest bytes so far (ties:
  // the lowest rank; equal sizes in the order of name, box and holders), so the result is the
  // same on every run. Linear in the ranks for each tensor; `stop` is polled per tensor.
  static absl::StatusOr<CheckpointWriters> Assign(const Graph& g,
                                                  const pipeline::PipelinePlan& plan,
                                                  const StopCheck& stop = {});
  bool Writes(int tensor, int rank) const { return writes_.count({tensor, rank}) > 0; }

 private:
  std::set<std::pair<int, int>> writes_;  // (tensor, rank)
};

}  // namespace weft::planner

#endif  // WEFT_PLANNER_CHECKPOINT_WRITERS_H_
