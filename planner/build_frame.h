// What every model's builder reads before its layers (build.cc for `layers` models, arch/ for
// transformers): the mesh, the batch's placements, the optimizer and the pipeline, and the batch
// tensors as data loads. Errors are INVALID_ARGUMENT naming the spec field.
//
// E.g.
//   std::vector<Placement> batch;
//   RETURN_IF_ERROR(PrepareGraph(spec, &g, &batch));
//   ASSIGN_OR_RETURN(int tokens, AddLoadedBatch(&g, "input", {B, T}, v1::I32, batch,
//                                               "load_input"));
#ifndef WEFT_PLANNER_BUILD_FRAME_H_
#define WEFT_PLANNER_BUILD_FRAME_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// Sets g's mesh, optimizer, sharding, gradient buckets and pipeline (its dim, schedule,
// micro-batches; not the layers' chunks) from spec, and *batch_placements to the batch's placement on each mesh dim.
absl::Status PrepareGraph(const v1::JobSpec& spec, Graph* g,
                          std::vector<Placement>* batch_placements);

// The recompute mode of model.recompute ("", full, selective; ValidateJobSpec checked it), and of
// a layers model's layer with its own `recompute` (true: the model's mode, full when none).
Recompute ModelRecompute(const v1::Model& model);
Recompute LayerRecompute(const v1::Model& model, const v1::Layer& layer);

// A batch tensor of the step, [B, ...], loaded by `load_op` in `dtype` and placed by
// batch_placements (split into the micro-batches along axis 0 when there are several).
absl::StatusOr<int> AddLoadedBatch(Graph* g, const std::string& name, const Shape& shape,
                                   v1::DType dtype,
                                   const std::vector<Placement>& batch_placements,
                                   const std::string& load_op, const std::string& layer = "");

}  // namespace weft::planner

#endif  // WEFT_PLANNER_BUILD_FRAME_H_
