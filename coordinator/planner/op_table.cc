#include "coordinator/planner/op_table.h"

namespace weft::planner {
namespace {

using I = v1::Instruction;

std::vector<OpDef> MakeTable() {
  const std::vector<v1::DType> f32 = {v1::F32};
  const std::vector<AttrDef> update = {{"lr", 0.0}, {"weight_decay", 0.0}};
  std::vector<AttrDef> adamw = update;
  adamw.insert(adamw.end(), {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}});
  return {
      // Data: this rank's box of the step's batch, in the data's dtype.
      {"load_input", 0, 0, 1, {}, {}, false, OpKind::kLoad, {}, I::LOAD_INPUT},
      {"load_label", 0, 0, 1, {}, {}, false, OpKind::kLoad, {}, I::LOAD_LABEL},
      {"cast", 1, 1, 1, {}, {}, true, OpKind::kCompute, {}, I::CAST},
      // Layers and their gradients.
      {"matmul", 2, 2, 1, {{"transpose_a", false}, {"transpose_b", false}}, f32, false,
       OpKind::kCompute, {}, I::MATMUL},
      {"bias_add", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::ADD_BIAS},
      {"bias_grad", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::BIAS_GRAD},
      {"relu", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::RELU},
      {"relu_grad", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::RELU_GRAD},
      {"gelu", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::GELU},
      {"gelu_grad", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::GELU_GRAD},
      {"add", 2, -1, 1, {}, f32, false, OpKind::kCompute, {}, I::ADD},
      // The loss: scale = 1 / elements of the whole batch, so micro-batches' terms sum to the mean.
      {"mse", 2, 2, 1, {{"scale", 1.0}}, f32, false, OpKind::kLoss, {}, I::MSE_LOSS},
      {"mse_grad", 2, 2, 1, {{"scale", 1.0}}, f32, false, OpKind::kCompute, {}, I::MSE_GRAD},
      // Optimizer updates: (param, grad) and (param, grad, m, v), written in place.
      {"sgd", 2, 2, 0, update, f32, false, OpKind::kUpdate, {0}, I::SGD},
      {"adamw", 4, 4, 0, adamw, f32, false, OpKind::kUpdate, {0, 2, 3}, I::ADAMW},
      {"reshard", 1, 1, 1, {}, {}, false, OpKind::kReshard, {}, I::OP_UNSPECIFIED},
  };
}

}  // namespace

const std::vector<OpDef>& OpTable() {
  static const std::vector<OpDef>* table = new std::vector<OpDef>(MakeTable());
  return *table;
}

const OpDef* FindOpDef(absl::string_view type) {
  for (const OpDef& def : OpTable()) {
    if (def.type == type) return &def;
  }
  return nullptr;
}

void FillDefaultAttrs(Op* op) {
  const OpDef* def = FindOpDef(op->type);
  if (def == nullptr) return;
  for (const AttrDef& a : def->attrs) {
    if (!op->attrs.Has(a.name)) op->attrs.Set(a.name, a.default_value);
  }
}

}  // namespace weft::planner
