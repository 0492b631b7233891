// Pass 1, build: the job spec -> the logical Graph, single-device view, GLOBAL shapes and dtypes.
// The one reader of JobSpec.model, so validating the model IS building it: every error is
// INVALID_ARGUMENT naming the field ("model.layers[2] (fc1).in_features: 4096 does not match the
// previous linear's out_features 1024 (model.layers[0] (fc0))").
//
// The graph: input [B, sample_shape...] and label [B, label_shape...] are loaded (and cast to
// float32 when the data is not); each layer reads the outputs of the layers its `inputs` name
// (default: the previous layer; `input`: the batch) and appends its ops: linear is matmul (weight
// [in, out]) then bias_add (bias [out]) unless bias is false; relu and gelu are elementwise; add
// sums its inputs (two or more, one shape). The loss mse is a mean over all elements of the label.
// Parameters are "<layer>.weight" and "<layer>.bias", placed as the spec says (Replicate where
// it says nothing); the batch is placed by data.placements and, with micro-batches, split into
// them along axis 0. Also read here: the optimizer (its hyper-parameters become the update ops'
// attributes) and the pipeline (its mesh dim and the chunk of every layer).
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
//   g.tensors[g.params[0].tensor].name;  // "fc0.weight"
#ifndef WEFT_PLANNER_BUILD_H_
#define WEFT_PLANNER_BUILD_H_

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// spec must have passed PrepareJobSpec (common/jobspec/validate.h): defaults applied, data shapes
// and dtypes filled, everything but the model checked.
absl::StatusOr<Graph> BuildGraph(const v1::JobSpec& spec);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_BUILD_H_
