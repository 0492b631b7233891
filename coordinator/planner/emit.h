// Pass 7, emit: one v1::Program per rank from the placed, lowered graph. Buffers hold LOCAL
// shapes (a reshard with no steps reuses its input's buffer); groups are those of the rank,
// with ids shared by all ranks; init covers parameters (UNIFORM with bound 1/sqrt(in_features)
// and tensor_key FNV-1a 64 of the global name, or FROM_FILE when spec.init_from is set) and
// optimizer states (ZEROS); the step list follows the graph's op order, reshards expanded into
// their collectives. Partial(sum) parameters and batches hold their value on member 0 of each
// Partial(sum) dim and zeros elsewhere (ZEROS init, SCALE 0 instead of a load); their updates
// give the step to member 0 and only the weight decay to the others.
//
// E.g.
//   ASSIGN_OR_RETURN(v1::Program p, EmitProgram(spec, g, lowered, "job-1", 0, /*rank=*/3));
#ifndef WEFT_COORDINATOR_PLANNER_EMIT_H_
#define WEFT_COORDINATOR_PLANNER_EMIT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/graph.h"
#include "coordinator/planner/lower.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

absl::StatusOr<v1::Program> EmitProgram(const v1::JobSpec& spec, const Graph& g,
                                        const LoweredGraph& lowered, const std::string& job_id,
                                        int attempt, int rank);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_EMIT_H_
