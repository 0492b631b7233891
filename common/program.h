// Facts about a v1::Program that the planner (which writes it) and the worker (which runs it)
// must agree on, defined once. What they depend on per op is its row of the instruction table
// (common/instruction_def.h).
//
// E.g.
//   RETURN_IF_ERROR(ResolveGroupRanks(&program));  // the worker, before creating communicators
#ifndef WEFT_COMMON_PROGRAM_H_
#define WEFT_COMMON_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "weft/v1/program.pb.h"

namespace weft {

// Fills CommGroup.ranks of every group that gives mesh `dims` and no ranks: the ranks that differ
// from Program.rank only along those dims, in Mesh::GroupRanks order. A group giving ranks is
// left as it is. INVALID_ARGUMENT for a dim outside the mesh, a group with neither, or a mesh
// the rank is not in.
absl::Status ResolveGroupRanks(v1::Program* program);

// The global ranks of `group` of `program`, in member order: its ranks, or (none given) those of
// its mesh dims. Empty for a group ResolveGroupRanks would reject.
std::vector<int> GroupMembers(const v1::Program& program, const v1::CommGroup& group);

// The collectives over a group: ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL (SEND and
// RECV are point-to-point). InstructionDef::collective.
bool IsCollective(v1::Instruction::Op op);

// The buffers an instruction reads and the ones it writes (a buffer may be in both): its inputs
// are read, its outputs and scratch written; an op that reads its outputs (ACCUMULATE) reads them
// too; an update writes the inputs its InstructionDef::writes_inputs names in place (SGD its
// parameter, ADAMW its parameter and states; their clip coefficient, an optional last input, is
// read). Ids as the instruction gives them, unchecked.
struct BufferAccess {
  std::vector<int> reads;
  std::vector<int> writes;
};
BufferAccess InstructionAccess(const v1::Instruction& ins);

// The ops that compute in float32 (the worker's ElementTypes::kF32 handlers: MATMUL, the
// elementwise ops and activations, norms, attention, the cross-entropy pieces, MSE, the updates,
// EMBEDDING(_GRAD), ROPE, DROPOUT, ...): every operand but their ids is float32 or bf16 storage.
// InstructionDef::computes_in_f32.
bool ComputesInF32(v1::Instruction::Op op);

// A bf16 operand of an op that computes in float32: the worker runs the op on a float32 copy of
// it, `offset` bytes into the instruction's widening area (its planned scratch buffer,
// Instruction.scratch, or the executor's own scratch), converted from the buffer first when the
// op reads it and rounded back (to nearest even) after it when the op writes it.
struct WidenedOperand {
  int buffer = -1;
  int64_t offset = 0;    // bytes into the widening area, a multiple of kArenaAlignment
  int64_t elements = 0;  // BufferElements of the buffer
  bool read = false;     // by InstructionAccess
  bool written = false;
};

// The widened operands of `ins` over the program's `buffers` (indexed by id): for an op that
// ComputesInF32, every distinct BF16 buffer among its inputs then its outputs, in order of first
// appearance, each laid after the one before at the next ArenaAligned offset (the first at 0).
// Empty for other ops and when no operand is BF16 (ids are I32 or I64, never widened). Ids out
// of range are skipped. The planner sizes an instruction's scratch by it, the worker lays the
// copies out by it.
std::vector<WidenedOperand> WidenedOperands(
    const google::protobuf::RepeatedPtrField<v1::Buffer>& buffers, const v1::Instruction& ins);
std::vector<WidenedOperand> WidenedOperands(const v1::Program& program,
                                            const v1::Instruction& ins);
// Bytes the widening area needs: the end of the last copy (offset + 4 * elements); 0 for none.
int64_t WidenedBytes(const std::vector<WidenedOperand>& widened);

// Elements of a buffer (the product of its local shape; 1 for a scalar) and its bytes (times its
// dtype's size).
int64_t BufferElements(const v1::Buffer& buffer);
int64_t BufferBytes(const v1::Buffer& buffer);
// BufferBytes, or INVALID_ARGUMENT naming the buffer when its elements or bytes overflow int64:
// what the memory planner and the worker's arena check first, so that the unchecked two above
// never wrap on a Program that passed.
absl::StatusOr<int64_t> CheckedBufferBytes(const v1::Buffer& buffer);

// When a buffer of a program holds a value, by the instruction list: the rule by which the
// planner lets buffers share arena bytes (planner/memory_plan.h) and the executor
// checks that they may. The evaluation's instructions (Program.eval) count as following the
// step's, numbered on from them. A buffer lives from the first instruction touching it (an
// input, an output or an instruction's scratch) to the last, both included; the loss and the
// gradient norm at least to the step's last instruction, the eval loss to the evaluation's (the
// worker reads them after). It is carried, alive for the whole job, when
// its value outlives a step: a parameter or optimizer state, a buffer a checkpoint item names,
// or one read before the instruction list first writes it (ACCUMULATE reads its output).
struct BufferLife {
  int first = -1;  // -1: no instruction touches it
  int last = -1;
  bool carried = false;
};
std::vector<BufferLife> BufferLives(const v1::Program& program);

// Whether two buffers hold values at the same time, so that they may not share bytes: either is
// carried or touched by no instruction (it keeps the value it starts with), or their
// [first, last] ranges intersect.
bool AliveTogether(const BufferLife& a, const BufferLife& b);

}  // namespace weft

#endif  // WEFT_COMMON_PROGRAM_H_
