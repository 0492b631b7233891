// The deadlock check of pipeline (and any) plans, run before anything executes: the ranks'
// instruction lists are simulated together with blocking semantics, as the transports behave: a SEND
// completes only together with its peer's RECV of the same tag (Gloo's send waits for the
// receiver), a collective only when every member of its group reaches it, everything else on
// its own. A plan whose ranks cannot all finish is rejected naming each stuck rank and the
// instruction it waits at.
//
// The same simulation orders the transfers when programs are built: a rank's instructions come
// as batches, and the SENDs and RECVs of one batch may complete in any order (Megatron's
// batched isend/irecv); OrderTransfers returns the order in which the simulation completed
// them, which is then deadlock-free by construction.
//
// E.g.
//   RETURN_IF_ERROR(CheckDeadlockFree(programs));
#ifndef WEFT_PLANNER_PIPELINE_DEADLOCK_H_
#define WEFT_PLANNER_PIPELINE_DEADLOCK_H_

#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::pipeline {

// Instructions of one rank that may complete in any order (SEND and RECV only when > 1).
using TransferBatch = std::vector<v1::Instruction>;

// ranks[r]: rank r's batches in order; groups: CommGroup id -> its global ranks in member
// order. Returns each rank's instructions in a completing order, or FAILED_PRECONDITION naming
// the stuck ranks.
absl::StatusOr<std::vector<std::vector<v1::Instruction>>> OrderTransfers(
    const std::vector<std::vector<TransferBatch>>& ranks,
    const std::map<int, std::vector<int>>& groups);

// programs[r] is rank r's. OK when every rank's instruction list completes; else FAILED_PRECONDITION
// naming each stuck rank, the instruction index it waits at and what it waits for.
absl::Status CheckDeadlockFree(const std::vector<v1::Program>& programs);

// Every SEND has exactly one RECV on its peer with the same group and tag and the same number
// of elements, and every RECV one SEND; else FAILED_PRECONDITION naming the ranks and the tag.
absl::Status CheckTransfersMatch(const std::vector<v1::Program>& programs);

// CheckTransfersMatch and CheckDeadlockFree for one program per pipeline stage (stages[s]: a rank
// whose coordinate along mesh dim `pipeline_dim` is s; -1: no pipeline, one program): the ranks
// of a stage run the same instruction list, so their collectives along other mesh dims are
// reached together and complete; only the pipeline dim's traffic can block. Linear in the
// number of stages, whatever the size of the mesh.
absl::Status CheckStages(const std::vector<v1::Program>& stages, int pipeline_dim);

}  // namespace weft::planner::pipeline

#endif  // WEFT_PLANNER_PIPELINE_DEADLOCK_H_
