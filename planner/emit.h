// Pass 7, emit: one rank's v1::Program from the planned graph, the one path every plan takes.
// It walks the items of the rank's pipeline stage (pipeline.h) in order and instantiates them for
// the rank: buffers with LOCAL shapes and the tensors' dtypes, one per micro-batch for what runs
// per micro-batch (a reshard without steps on the mesh reuses its input's buffer); instructions
// with their attributes (op table), reshards expanded into their collectives and local steps,
// with planned scratch where a collective packs along an inner axis; accumulators for what sums
// micro-batches; sends and receives on the pipeline dim's group. Groups are described by their
// mesh dims (the worker fills in the ranks), with ids shared by all ranks. Init covers the
// stage's parameters (UNIFORM with the build's bound and tensor_key FNV-1a 64 of the global
// name, or FROM_FILE when init_from is set) and optimizer states (ZEROS); each parameter and
// state the rank holds the value of gets a checkpoint item (write: CheckpointWriters).
// Partial(sum) parameters and batches hold their value on member 0 of each Partial(sum) dim and
// zeros elsewhere (ZEROS init, SCALE 0 instead of a load); their updates give the step to member
// 0 and only the weight decay to the others. A compute instruction with bf16 operands (bf16
// storage) gets a planned scratch buffer for their float32 copies (common/program.h
// WidenedOperands). A graph with updates gets the global gradient norm (grad_norm.h) before its
// first update: into Program.grad_norm_buffer, summed over the pipeline dim in the loss's
// collective, and with optimizer.clip_grad_norm the clip coefficient, which every update reads
// as its last input; the updates' lr is the peak, which the worker scales by the schedule.
// Last, the memory plan lays the buffers out in one arena by liveness (memory_plan.h).
//
// E.g.
//   MemoryPlanner memory;
//   ASSIGN_OR_RETURN(v1::Program p, EmitProgram(planned, header, /*rank=*/3, &memory));
#ifndef WEFT_PLANNER_EMIT_H_
#define WEFT_PLANNER_EMIT_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/checkpoint_writers.h"
#include "planner/graph.h"
#include "planner/lower.h"
#include "planner/memory_plan.h"
#include "planner/pipeline/pipeline.h"
#include "planner/stop.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

// Everything the passes made; emitting a rank reads it only.
struct PlannedGraph {
  Graph graph;
  LoweredGraph lowered;
  pipeline::PipelinePlan pipeline;
  CheckpointWriters writers;
  // A graph with updates: the mesh dims its gradient norm sums over besides the pipeline's
  // (grad_norm.h). nullopt: no updates (an evaluation's forward pass), no norm.
  std::optional<std::vector<int>> grad_norm_dims;
};

// `header` holds the job-level fields (job id, attempt, mesh, data, steps, seed, init_from,
// device, precision, trace, checkpointing, starting state, the evaluation's data and when it
// runs); the rest is the rank's. With `eval` (the evaluation's forward graph, lowered with
// `planned`'s group numbering: Lower) its instructions go into Program.eval, over the
// training's parameters; the memory plan lays out both lists. `stop` is polled every few dozen
// instructions and buffers (stop.h).
absl::StatusOr<v1::Program> EmitProgram(const PlannedGraph& planned, const v1::Program& header,
                                        int rank, MemoryPlanner* memory,
                                        const PlannedGraph* eval = nullptr,
                                        const StopCheck& stop = {});

}  // namespace weft::planner

#endif  // WEFT_PLANNER_EMIT_H_
