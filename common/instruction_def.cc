#include "common/instruction_def.h"

#include <map>

namespace weft {
namespace {

using I = v1::Instruction;

std::vector<InstructionDef> MakeTable() {
  return {
      {.op = I::OP_UNSPECIFIED},
      {.op = I::MATMUL, .computes_in_f32 = true},
      {.op = I::ADD_BIAS, .computes_in_f32 = true},
      {.op = I::BIAS_GRAD, .computes_in_f32 = true},
      {.op = I::RELU, .computes_in_f32 = true},
      {.op = I::RELU_GRAD, .computes_in_f32 = true},
      {.op = I::GELU, .computes_in_f32 = true},
      {.op = I::GELU_GRAD, .computes_in_f32 = true},
      {.op = I::MSE_LOSS, .computes_in_f32 = true},
      {.op = I::MSE_GRAD, .computes_in_f32 = true},
      {.op = I::ALL_REDUCE, .collective = true},
      {.op = I::ALL_GATHER, .collective = true},
      {.op = I::REDUCE_SCATTER, .collective = true},
      {.op = I::SLICE},
      // The updates write their parameter (input 0) and ADAMW its states m and v (inputs 2, 3);
      // their clip coefficient, an optional last input, is only read.
      {.op = I::SGD, .computes_in_f32 = true, .writes_inputs = {0}},
      {.op = I::ADAMW, .computes_in_f32 = true, .writes_inputs = {0, 2, 3}},
      {.op = I::LOAD_INPUT},
      {.op = I::LOAD_LABEL},
      {.op = I::SCALE, .computes_in_f32 = true},
      {.op = I::ALL_TO_ALL, .collective = true},
      {.op = I::SEND},
      {.op = I::RECV},
      {.op = I::ACCUMULATE, .computes_in_f32 = true, .reads_outputs = true},
      {.op = I::FILL},
      {.op = I::ADD, .computes_in_f32 = true},
      {.op = I::CAST},
      {.op = I::EMBEDDING, .computes_in_f32 = true},
      {.op = I::EMBEDDING_GRAD, .computes_in_f32 = true},
      {.op = I::LAYER_NORM, .computes_in_f32 = true},
      {.op = I::LAYER_NORM_GRAD, .computes_in_f32 = true},
      {.op = I::RMS_NORM, .computes_in_f32 = true},
      {.op = I::RMS_NORM_GRAD, .computes_in_f32 = true},
      {.op = I::GELU_TANH, .computes_in_f32 = true},
      {.op = I::GELU_TANH_GRAD, .computes_in_f32 = true},
      {.op = I::SILU, .computes_in_f32 = true},
      {.op = I::SILU_GRAD, .computes_in_f32 = true},
      {.op = I::MUL, .computes_in_f32 = true},
      {.op = I::ROPE, .computes_in_f32 = true},
      {.op = I::ROPE_GRAD, .computes_in_f32 = true},
      {.op = I::ATTENTION, .computes_in_f32 = true},
      {.op = I::ATTENTION_GRAD, .computes_in_f32 = true},
      {.op = I::DROPOUT, .computes_in_f32 = true},
      {.op = I::ROW_MAX, .computes_in_f32 = true},
      {.op = I::CE_PARTS, .computes_in_f32 = true},
      {.op = I::CE_PARTS_GRAD, .computes_in_f32 = true},
      {.op = I::CE_LOSS, .computes_in_f32 = true},
      {.op = I::CE_LOSS_GRAD, .computes_in_f32 = true},
      {.op = I::POSITIONS, .computes_in_f32 = true},
      {.op = I::UNSTACK},
      {.op = I::STACK},
      {.op = I::SUM_SQUARES, .computes_in_f32 = true},
      {.op = I::CLIP_COEFFICIENT, .computes_in_f32 = true},
      // Writes its parameter in place, as its output (out = a).
      {.op = I::WEIGHT_DECAY, .computes_in_f32 = true},
  };
}

}  // namespace

const std::vector<InstructionDef>& InstructionTable() {
  static const std::vector<InstructionDef>* table = new std::vector<InstructionDef>(MakeTable());
  return *table;
}

const InstructionDef& FindInstructionDef(v1::Instruction::Op op) {
  static const auto* by_op = [] {
    auto* m = new std::map<v1::Instruction::Op, const InstructionDef*>();
    for (const InstructionDef& def : InstructionTable()) m->emplace(def.op, &def);
    return m;
  }();
  static const InstructionDef* none = new InstructionDef();
  auto it = by_op->find(op);
  return it != by_op->end() ? *it->second : *none;
}

}  // namespace weft
