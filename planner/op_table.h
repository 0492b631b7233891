// The op table: every op the planner knows, with what the graph checks of it (arity, attributes
// and their defaults, dtypes), what kind of op it is, and the instruction it runs as. Adding an op
// is one entry here, one rule file under rules/ (SPMD strategies and VJP), one kernel per backend
// and one validator case (tests/spmd_validator_test). An op's attributes go into its instruction
// by name (an attribute `scale` sets Instruction.scale), so emit needs nothing per op.
//
// E.g.
//   const OpDef* def = FindOpDef("matmul");   // 2 inputs, 1 output, F32, MATMUL
//   def->instruction;                         // v1::Instruction::MATMUL
#ifndef WEFT_PLANNER_OP_TABLE_H_
#define WEFT_PLANNER_OP_TABLE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/instruction_def.h"
#include "planner/graph.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

enum class OpKind {
  kCompute,  // a forward or backward computation
  kLoad,     // loads this rank's box of the step's batch (input or label)
  kLoss,     // a compute op whose output is the loss that autodiff starts from
  kUpdate,   // an optimizer update: writes its updates_in_place() inputs, no outputs
  kReshard,  // changes a tensor's placement; lowered to collectives (lower.h)
};

struct AttrDef {
  std::string name;
  Attrs::Value default_value;  // its alternative is the attribute's type
};

// The table's entries name their fields (designated initializers, in declaration order: C++20's,
// which GCC and Clang take in C++17 too) and leave the defaults out.
struct OpDef {
  std::string type;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: any number from min_inputs
  int outputs = 1;  // -1: one or more
  std::vector<AttrDef> attrs;
  // Every input and output has one dtype from this list (except id_operands); empty: any dtypes,
  // the same for inputs and outputs unless `converts`.
  std::vector<v1::DType> dtypes;
  bool converts = false;  // cast: the output's dtype may differ from the input's
  OpKind kind = OpKind::kCompute;
  v1::Instruction::Op instruction = v1::Instruction::OP_UNSPECIFIED;  // none for kReshard
  // The operand (numbered as id_operands) whose region on this rank emit writes into
  // Instruction.box, with its global shape into Instruction.global_shape: where an op needs to
  // know its piece's place in the global tensor (a vocabulary offset, positions, dropout's global
  // element index). -1: none.
  int box_of = -1;
  // Operands (inputs by index, then outputs after the inputs) that hold token or target ids
  // instead: I32 or I64.
  std::vector<int> id_operands = {};

  // kUpdate: the inputs written in place (param, states), as its instruction's row of the
  // instruction table says (common/instruction_def.h); empty for other ops.
  const std::vector<int>& updates_in_place() const {
    return FindInstructionDef(instruction).writes_inputs;
  }
};

// The entry for `type`, or null.
const OpDef* FindOpDef(absl::string_view type);
// Whether op's entry is of `kind` (false for an op the table lacks).
bool IsKind(const Op& op, OpKind kind);
// Every entry, in table order.
const std::vector<OpDef>& OpTable();

// Sets each attribute op's entry declares and op lacks to its default (no-op for an op the table
// does not know).
void FillDefaultAttrs(Op* op);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_OP_TABLE_H_
