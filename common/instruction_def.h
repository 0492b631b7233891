// The instruction table: what the planner (which writes programs) and the worker (which runs
// them) must agree on about each Instruction::Op, one row per op with its properties named.
// Adding an op to program.proto is one row here; common/program.h (buffer accesses, widening)
// and the planner's op table (planner/op_table.h: the inputs an update writes) read them, so no
// list of ops is kept anywhere else. instruction_def_test checks that every op has its row.
//
// E.g.
//   const InstructionDef& def = FindInstructionDef(v1::Instruction::ADAMW);
//   def.computes_in_f32;  // true
//   def.writes_inputs;    // {0, 2, 3}: the parameter and its two states
#ifndef WEFT_COMMON_INSTRUCTION_DEF_H_
#define WEFT_COMMON_INSTRUCTION_DEF_H_

#include <vector>

#include "weft/v1/program.pb.h"

namespace weft {

struct InstructionDef {
  v1::Instruction::Op op = v1::Instruction::OP_UNSPECIFIED;
  // A collective over a group's communicator (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER,
  // ALL_TO_ALL); SEND and RECV are point-to-point, not collectives.
  bool collective = false;
  // Computes in float32 (the worker's ElementTypes::kF32 handlers): every operand but its ids is
  // float32 or bf16 storage, which the worker widens. Not the data movement (collectives, SEND,
  // RECV, SLICE, STACK, UNSTACK, CAST, FILL, the loads). POSITIONS is one (its rule is kF32 with
  // an ids output) but has no float operand to widen.
  bool computes_in_f32 = false;
  // Reads its outputs as well as writing them (ACCUMULATE: out += a).
  bool reads_outputs = false;
  // The inputs it writes in place (the updates: a parameter and its optimizer states), by index;
  // an index past the instruction's inputs is none.
  std::vector<int> writes_inputs = {};
};

// The row of `op`; for a value the table lacks (none of program.proto's), a row with every
// property off.
const InstructionDef& FindInstructionDef(v1::Instruction::Op op);
// Every row, in the order of program.proto's numbers.
const std::vector<InstructionDef>& InstructionTable();

}  // namespace weft

#endif  // WEFT_COMMON_INSTRUCTION_DEF_H_
