// Step: one Instruction decoded and checked once at Create (shapes, element types, groups,
// scratch), so that RunStep only calls the op's run function on it. DecodeInstruction finds the
// op's handler in the registry (op_registry.h), checks the element types the handler declares
// and runs its decode; errors name the buffers and what is wrong with them, and the executor adds
// the instruction.
//
// E.g.
//   const DecodeContext ctx{program, buffers, group_index, group_member, inputs, labels};
//   Step s;
//   s.index = i;
//   RETURN_IF_ERROR(DecodeInstruction(ctx, &s));
//   RETURN_IF_ERROR(s.run(s, run_context));  // every step
#ifndef WEFT_WORKER_EXECUTOR_STEP_H_
#define WEFT_WORKER_EXECUTOR_STEP_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "common/program.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"
#include "worker/comm/communicator.h"
#include "worker/data/batch_source.h"
#include "worker/executor/buffers.h"
#include "worker/kernels/kernels.h"

namespace weft {

struct Step;
struct RunContext;  // op_registry.h

// Runs a decoded step on the kernels (and communicators).
using RunFn = absl::Status (*)(const Step& s, const RunContext& ctx);

struct Step {
  v1::Instruction::Op op = v1::Instruction::OP_UNSPECIFIED;
  int index = 0;        // position in Program.instructions, for messages
  RunFn run = nullptr;  // the run function of the op's handler (op_registry.h)
  std::vector<int> in;  // buffer ids, in the instruction's order
  std::vector<int> outs;
  int out = -1;  // outs[0] (-1: none)
  // What the op moves or writes (collectives, SEND/RECV, SLICE, STACK, UNSTACK, FILL, LOAD,
  // POSITIONS; CAST: the output's), and CAST's input type.
  v1::DType dtype = v1::F32;
  v1::DType from = v1::F32;
  int64_t element_bytes = 4;  // DTypeSize(dtype)
  // The ids of EMBEDDING(_GRAD) and the targets of CE_PARTS(_GRAD): I32 or I64.
  v1::DType ids_dtype = v1::I32;
  // MATMUL.
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  // Elementwise count, or rows x cols for the bias and row-wise ops (norms, ROW_MAX, the
  // cross-entropy ops, EMBEDDING: ids x dim).
  int64_t numel = 0, rows = 0, cols = 0;
  // SLICE, STACK, UNSTACK and the collectives along an axis: a tensor viewed as [outer,
  // axis_len, inner]. offset: SLICE's start, or where this rank's piece starts in the global
  // tensor (EMBEDDING(_GRAD) rows, ROPE and POSITIONS positions, the cross-entropy's columns).
  int64_t outer = 1, axis_len = 0, inner = 1, offset = 0, length = 0;
  int comm = -1;  // index into the executor's communicators (= index in Program.groups)
  ReduceOp reduce = ReduceOp::kSum;
  std::vector<int64_t> counts;          // elements per member (all-gather, reduce-scatter)
  std::vector<int64_t> member_offsets;  // offset of each member's split along the axis
  std::vector<int64_t> member_lengths;  // each member's split along the axis
  int64_t member = 0;                   // this rank's index in the group
  // ALL_TO_ALL: received pieces, and the output viewed along concat_axis.
  std::vector<int64_t> recv_counts, concat_offsets, concat_lengths;
  int64_t c_outer = 1, c_len = 0, c_inner = 1;
  // Packing of ALL_GATHER / REDUCE_SCATTER along an inner axis and of ALL_TO_ALL ([send |
  // receive]), and the float32 copies of an op's bf16 operands (widened): in the planned scratch
  // buffer `scratch` (Instruction.scratch), or, when the program gives none (scratch -1), at the
  // start of the executor's own scratch. No op does both: only ops that ComputesInF32 widen.
  int scratch = -1;
  // The bf16 operands of an op that computes in float32 (common/program.h WidenedOperands): the
  // executor converts the read ones to their float32 copies before the op's run function, which
  // sees the copies (RunContext::f32), and rounds the written ones back after it.
  std::vector<WidenedOperand> widened;
  // REDUCE_SCATTER avg of a bf16 tensor: the float32 copy of this member's piece that is divided
  // by the group's size, at this offset of the executor's own scratch (-1: none).
  int64_t avg_f32_offset = -1;
  // Bytes of the executor's own scratch the step needs (its packing and float32 copy, or its
  // widened operands).
  int64_t own_scratch_bytes = 0;
  // LOAD_INPUT / LOAD_LABEL: the output's bytes, staged on the host when the kernels' memory is
  // not host-accessible (the executor sizes its staging once, for the largest load).
  int64_t staging_bytes = 0;
  float scale = 1.0f, lr = 0.0f, weight_decay = 0.0f;
  AdamWHyper adamw;
  int clip = -1;  // SGD / ADAMW: the clip coefficient's buffer (their optional last input), or -1
  float eps = 0.0f;    // the norms
  float theta = 0.0f;  // ROPE
  // ROPE: x [batch, seq, heads, head_dim].
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  // ATTENTION(_GRAD) and DROPOUT; their dropout's step is the one being run, set when run.
  AttentionShape attention;
  DropoutSpec dropout;
  GlobalBox global_box;  // DROPOUT: where its input lies in the global tensor
  BatchSource* source = nullptr;       // LOAD_INPUT / LOAD_LABEL
  const v1::TensorBox* box = nullptr;  // points into the executor's program
  // SEND / RECV: member index in the group, and the message tag.
  int peer = -1;
  uint32_t tag = 0;
  // Trace: index into the executor's span templates; a new span starts where it changes.
  int span = -1;
};

// What decoding an instruction needs besides it. The program must outlive the steps (they point
// at its boxes).
struct DecodeContext {
  const v1::Program& program;
  const Buffers& buffers;
  const std::map<int, int>& group_index;  // CommGroup id -> index in program.groups
  const std::vector<int>& group_member;   // this rank's position in each group
  BatchSource* inputs;                    // null unless the program loads inputs
  BatchSource* labels;                    // null unless the program loads labels
};

// Decodes program.instructions(step->index) into *step with the op's registered handler.
// INVALID_ARGUMENT for an op no handler is registered for, a wrong count of inputs or outputs, an
// id out of range, shapes or element types that do not fit the op, a group this rank is not in,
// an average of integers, or a scratch buffer too small for the packing or the widened operands.
absl::Status DecodeInstruction(const DecodeContext& ctx, Step* step);

// SEND, RECV and the collectives: instructions that wait for other ranks.
bool IsCommunication(v1::Instruction::Op op);

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_STEP_H_
