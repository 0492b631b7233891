// Pass 5, pipeline (DESIGN.md): plans a job whose spec has a `pipeline` block. The model's
// layers are split into pp x virtual_stages chunks (common/spec's PipelineLayerChunks); chunk c runs on the sub-mesh
// whose coordinate along the pipeline dim is c mod pp. Each chunk is its own graph on the full
// mesh, Replicate along the pipeline dim (the same on every stage; only its own stage runs it),
// so propagate, autodiff, optimizer and lower work per chunk unchanged on the other dims (DP
// and MP inside a stage). A chunk's input arrives with RECV placed as the previous chunk made
// it (the rules reshard it like any input) and its output leaves with SEND on the pipeline
// dim's group; gradients go back the same way.
//
// The global batch is split into micro_batches contiguous micro-batches (the last takes the
// remainder); one graph per chunk and distinct micro-batch size is instantiated per
// micro-batch with its own activation buffers, which are then shared between micro-batches
// whose lifetimes do not overlap (so 1F1B needs fewer than FThenB, as plan_report shows).
// Parameter gradients are accumulated (FILL 0 at the step's start, ACCUMULATE per
// micro-batch), the optimizer, with its reshards (the DP all-reduce), runs once per step. The
// loss of each micro-batch is scaled by 1/N of the whole batch and accumulated on the last
// chunk's ranks; an ALL_REDUCE(sum) over the pipeline dim replicates it to every rank.
//
// Instructions follow the schedule (schedule.h) with micro_batch, chunk and phase set; the
// transfers between steps are ordered by simulation (deadlock.h) and the finished programs are
// checked for deadlock and matching sends and receives before they are returned.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::Program> programs, PlanPipeline(spec, "job-1", 0));
#ifndef WEFT_COORDINATOR_PLANNER_PIPELINE_PIPELINE_H_
#define WEFT_COORDINATOR_PLANNER_PIPELINE_PIPELINE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::pipeline {

// spec.pipeline().dim() must be set. Unschedulable specs are INVALID_ARGUMENT with the reason.
absl::StatusOr<std::vector<v1::Program>> PlanPipeline(const v1::JobSpec& spec,
                                                      const std::string& job_id, int attempt);

}  // namespace weft::planner::pipeline

#endif  // WEFT_COORDINATOR_PLANNER_PIPELINE_PIPELINE_H_
