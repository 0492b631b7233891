// Which rank writes each checkpoint chunk. A box of a parameter or optimizer state that several
// ranks hold in identical copies (CheckpointItem.replicas: the ranks that differ only along the
// dims where it is Replicate or Partial(avg)) is written by exactly one of them, so a checkpoint
// stores one copy; the writer is chosen to balance bytes over ranks, not always the first
// replica. Copies are identified by placement, never merely because names and boxes match: a
// replica counts only if its own program holds the same name and box (a pipeline stage's
// parameters are Replicate on the pipeline dim but held by one stage only).
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::Program> programs, ...);  // emitted, write unset
//   RETURN_IF_ERROR(AssignCheckpointWriters(&programs));
#ifndef WEFT_COORDINATOR_PLANNER_CHECKPOINT_WRITERS_H_
#define WEFT_COORDINATOR_PLANNER_CHECKPOINT_WRITERS_H_

#include <vector>

#include "absl/status/status.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

// programs[r] is rank r's. Sets CheckpointItem.write on every item: true on exactly one rank per
// group of identical copies. Largest chunks are placed first, each on the replica with the
// fewest bytes so far (ties: the lowest rank), so the result is the same on every run.
absl::Status AssignCheckpointWriters(std::vector<v1::Program>* programs);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_CHECKPOINT_WRITERS_H_
