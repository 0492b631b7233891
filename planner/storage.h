// Storage (JobSpec.storage, Graph::storage): which tensors live in bfloat16 between instructions.
// Under bf16 storage the parameters and every activation a compute op makes are BF16, except
// the statistics the loss is computed from (row_max, ce_parts) and the loss itself: float32, as
// Megatron computes the cross-entropy in float32; data-movement ops (stack, unstack) follow
// their input. The batch keeps its loaded dtype. Gradients get their forward tensor's dtype in
// autodiff, the optimizer pass gives each parameter a float32 master weight (optimizer.h). The
// ops compute in float32 on widened copies (common/program.h WidenedOperands): this pass decides
// only where values live. Runs after build, before propagate; nothing under f32 storage.
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildGraph(spec));
//   RETURN_IF_ERROR(ApplyStorage(&g));
#ifndef WEFT_PLANNER_STORAGE_H_
#define WEFT_PLANNER_STORAGE_H_

#include "absl/status/status.h"
#include "planner/graph.h"

namespace weft::planner {

absl::Status ApplyStorage(Graph* g);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_STORAGE_H_
