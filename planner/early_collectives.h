// Starts every collective as early as its data allows, so that a worker that runs collectives
// asynchronously (worker/executor/async_collectives.h) overlaps them with the compute that does
// not need their result: Megatron's backward all-reduce of an input gradient runs while the
// weight gradient is computed; a data-parallel gradient's all-reduce starts as soon as the
// gradient is complete instead of at the optimizer phase.
//
// Each ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL moves up to just after the last
// earlier instruction that writes one of its inputs, reads or writes one of its outputs or its
// scratch, or is a SEND, a RECV or a collective on another group, so every instruction sees the
// values it did before. Collectives of one group may pass each other (a data-parallel gradient's
// all-reduce starts when the backward completes it, not in parameter order): the members of a
// group run the same instructions for it (they replicate one stage along the group's mesh dim),
// so they reorder them alike and still agree on the order. Relative to other groups and to
// point-to-point transfers the order is kept. A collective that reads a parameter (a ZeRO-3
// gather, zero.h) reads nothing this step writes before it, so it would move to the top; it
// starts at most one gather ahead instead, after the first computation reading the previous
// gather's result (FSDP's prefetch: the next layer's parameters arrive while this one computes).
// Runs on a rank's emitted program before its memory plan, which then sees the new lifetimes.
//
// E.g. (backward of a column-parallel c_fc under Megatron TP)
//   before: MATMUL -> ln_2.out@grad, MATMUL -> c_fc.weight@grad, ALL_REDUCE ln_2.out@grad, ...
//   after:  MATMUL -> ln_2.out@grad, ALL_REDUCE ln_2.out@grad, MATMUL -> c_fc.weight@grad, ...
#ifndef WEFT_PLANNER_EARLY_COLLECTIVES_H_
#define WEFT_PLANNER_EARLY_COLLECTIVES_H_

#include "weft/v1/program.pb.h"

namespace weft::planner {

// Reorders program->instructions as above. Returns how many collectives moved.
int StartCollectivesEarly(v1::Program* program);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_EARLY_COLLECTIVES_H_
