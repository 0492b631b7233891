// Pass 5, pipeline (DESIGN.md): orders the placed graph's work per pipeline stage and micro-batch.
// Every job goes through it; a job without a `pipeline` block is one stage with one micro-batch.
//
// Each op is in a chunk (its layer's; the batch input's ops in chunk 0, the label's and the
// loss's in the last) and runs either per micro-batch (forward and backward ops: once for each
// micro-batch, on that micro-batch's piece of the batch) or per step (the optimizer, and the
// reshards that accumulate micro-batch terms: a parameter gradient or the loss, Partial over
// micro-batches, becomes its step value). Chunk c runs on the stage (the coordinate along the
// pipeline mesh dim) c mod stages. A per-micro-batch tensor made in one chunk and read in a chunk
// on another stage is sent after the producing item and received before the first item that
// reads it (activations forward, their gradients backward); a parameter read outside its chunk is
// an error.
//
// A stage's order: the prologue (accumulators set to 0), then the schedule's steps (schedule.h):
// for each step, the receives of its items, its items' computations (each micro-batch's
// accumulation right after the item that made its term), the sends of what they made; last the
// epilogue (per-step ops in graph order and, with several stages, the loss summed over the
// pipeline dim, before the first update: the last stage holds it, the others 0). The transfers between two steps may
// complete in any order; the order that cannot deadlock is found by simulating one rank per
// stage (the ranks of a stage run the same list, so their collectives along other mesh dims are
// reached together and cannot block one another).
//
// E.g.
//   ASSIGN_OR_RETURN(PipelinePlan plan, PlanPipeline(g));
//   for (const StageItem& item : plan.order[stage]) ...   // emit.h turns items into instructions
#ifndef WEFT_PLANNER_PIPELINE_PIPELINE_H_
#define WEFT_PLANNER_PIPELINE_PIPELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"

namespace weft::planner::pipeline {

struct StageItem {
  enum Kind {
    kCompute,     // graph op `op` for `micro_batch` (-1: once per step)
    kSend,        // `tensor`'s piece for micro_batch to `peer_stage`, with `tag`
    kRecv,        // the same from `peer_stage`
    kFill,        // set the accumulator of reshard `op` (its input summed over micro-batches) to 0
    kAccumulate,  // add micro_batch's piece of reshard `op`'s input to its accumulator
    kLossSum,     // sum the loss over the pipeline dim (held by the last stage, 0 elsewhere)
    kLossFill,    // a stage without the loss: its loss buffer = 0
  };
  Kind kind = kCompute;
  int op = -1;
  int micro_batch = -1;
  int chunk = -1;
  int tensor = -1;
  int peer_stage = -1;
  uint32_t tag = 0;
  Phase phase = Phase::kForward;
};

struct PipelinePlan {
  int stages = 1;                             // size of the pipeline dim (1: no pipeline)
  int chunks = 1;                             // stages x virtual stages
  std::vector<int> op_chunk;                  // by graph op
  std::vector<bool> per_step;                 // by graph op: runs once per step
  std::vector<bool> accumulates;              // by graph op: a reshard that sums micro-batches
  std::vector<int> producer;  // by tensor: the op that makes it, -1 for parameters and states
  std::vector<std::vector<StageItem>> order;  // by stage
};

// g must be placed, differentiated and have its optimizer (propagate, autodiff, optimizer).
// Unschedulable graphs are INVALID_ARGUMENT with the reason; a plan whose transfers cannot be
// ordered without deadlock is FAILED_PRECONDITION naming the stuck stages.
absl::StatusOr<PipelinePlan> PlanPipeline(const Graph& g);

}  // namespace weft::planner::pipeline

#endif  // WEFT_PLANNER_PIPELINE_PIPELINE_H_
