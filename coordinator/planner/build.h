// Pass 1, build: JobSpec.model -> the logical Graph, single-device view, GLOBAL shapes.
// input [B, sample_shape...] and label [B, label_shape...] are loaded; each linear layer is
// matmul (weight [in, out]) then bias_add (bias [out]) unless bias is false; relu and gelu are
// elementwise; the loss mse is a mean over all elements. Parameters are "<layer>.weight" and
// "<layer>.bias". No placements yet.
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
//   g.tensors[g.params[0]].name;  // "fc0.weight"
#ifndef WEFT_COORDINATOR_PLANNER_BUILD_H_
#define WEFT_COORDINATOR_PLANNER_BUILD_H_

#include "absl/status/statusor.h"
#include "coordinator/planner/graph.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// spec.data.sample_shape and label_shape must be filled (PrepareJobSpec).
absl::StatusOr<Graph> BuildGraph(const v1::JobSpec& spec);

// Appends the ops of one spec layer (model.layers[index]) reading tensor x; returns the tensor
// holding its output. Shared with the pipeline pass, which builds one graph per chunk.
absl::StatusOr<int> AppendLayer(const v1::Layer& layer, int index, int x, Graph* g);

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_BUILD_H_
