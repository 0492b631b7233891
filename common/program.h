// Facts about a v1::Program that the planner (which writes it) and the worker (which runs it)
// must agree on, defined once.
//
// E.g.
//   RETURN_IF_ERROR(ResolveGroupRanks(&program));  // the worker, before creating communicators
#ifndef WEFT_COMMON_PROGRAM_H_
#define WEFT_COMMON_PROGRAM_H_

#include "absl/status/status.h"
#include "weft/v1/program.pb.h"

namespace weft {

// Fills CommGroup.ranks of every group that gives mesh `dims` and no ranks: the ranks that differ
// from Program.rank only along those dims, in Mesh::GroupRanks order. A group giving ranks is
// left as it is. INVALID_ARGUMENT for a dim outside the mesh, a group with neither, or a mesh
// the rank is not in.
absl::Status ResolveGroupRanks(v1::Program* program);

}  // namespace weft

#endif  // WEFT_COMMON_PROGRAM_H_
