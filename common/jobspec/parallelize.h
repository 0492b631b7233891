// The `parallelize` shortcut (Paddle's parallelize_plan, configured outside the model): on a mesh
// dim, each named linear layer gets the placements of its style, written into the layers'
// placements so that the planner only ever reads plain placements. ColWiseParallel: weight
// Shard(1), bias Shard(0); RowWiseParallel: weight Shard(0), bias Replicate().
//
// E.g.
//   RETURN_IF_ERROR(ApplyParallelize(&spec));   // idempotent; spec.parallelize is kept
#ifndef WEFT_COMMON_JOBSPEC_PARALLELIZE_H_
#define WEFT_COMMON_JOBSPEC_PARALLELIZE_H_

#include <set>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Writes the shortcut into plain placements: on the entry's mesh dim, ColWiseParallel sets weight
// Shard(1) and bias Shard(0), RowWiseParallel weight Shard(0) and bias Replicate(); the other dims
// of a parameter without placements are Replicate(). A placement already on that dim must agree
// (an error names the layer and both placements). A missing layer, a non-linear layer, an unknown
// style or mesh dim: INVALID_ARGUMENT naming it. Idempotent; the parallelize field is kept.
// A named plan (preset megatron, with or without sequence_parallel) is left as it is: the planner
// applies it from the graph's parameter names. Checked here: its mesh dim, the name, a
// transformer model (model.arch), no per-layer styles beside it, one per model;
// sequence_parallel only with it; per-layer styles only on a layers model.
absl::Status ApplyParallelize(v1::JobSpec* spec);

// (layer name, parameter, mesh dim index) of placements the user left to the default
// Replicate(): a named placement map's unnamed dims. The shortcut may set those; anything the
// user wrote is a conflict when it differs. The YAML reader collects them.
using ImplicitDims = std::set<std::tuple<std::string, std::string, int>>;

// ApplyParallelize, knowing which placements the user left implicit.
absl::Status ExpandParallelize(v1::JobSpec* spec, const ImplicitDims& implicit);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_PARALLELIZE_H_
