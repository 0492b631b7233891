#include "planner/op_table.h"

namespace weft::planner {
namespace {

using I = v1::Instruction;

std::vector<OpDef> MakeTable() {
  // The compute ops' floats: each float32 or bfloat16 (bf16 storage; the worker widens them).
  const std::vector<v1::DType> f32 = {v1::F32, v1::BF16};
  const std::vector<AttrDef> update = {{"lr", 0.0}, {"weight_decay", 0.0}};
  std::vector<AttrDef> adamw = update;
  adamw.insert(adamw.end(), {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}});
  const std::vector<AttrDef> eps = {{"eps", 1e-5}};
  const std::vector<AttrDef> theta = {{"theta", 10000.0}};
  // Dropout: the probability and the site's key (Fnv1a64 of its name; Kernels::DropoutSpec).
  const std::vector<AttrDef> dropout = {{"dropout_p", 0.0}, {"dropout_key", int64_t{0}}};
  std::vector<AttrDef> attention = dropout;
  attention.push_back({"scale", 1.0});
  const auto C = OpKind::kCompute;
  return {
      // Data: this rank's box of the step's batch, in the data's dtype.
      {"load_input", 0, 0, 1, {}, {}, false, OpKind::kLoad, {}, I::LOAD_INPUT},
      {"load_label", 0, 0, 1, {}, {}, false, OpKind::kLoad, {}, I::LOAD_LABEL},
      {"cast", 1, 1, 1, {}, {}, true, OpKind::kCompute, {}, I::CAST},
      // Layers and their gradients.
      {"matmul", 2, 2, 1, {{"transpose_a", false}, {"transpose_b", false}, {"contract", int64_t{1}}},
       f32, false, OpKind::kCompute, {}, I::MATMUL},
      {"bias_add", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::ADD_BIAS},
      {"bias_grad", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::BIAS_GRAD},
      {"relu", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::RELU},
      {"relu_grad", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::RELU_GRAD},
      {"gelu", 1, 1, 1, {}, f32, false, OpKind::kCompute, {}, I::GELU},
      {"gelu_grad", 2, 2, 1, {}, f32, false, OpKind::kCompute, {}, I::GELU_GRAD},
      {"add", 1, -1, 1, {}, f32, false, OpKind::kCompute, {}, I::ADD},
      // The loss: scale = 1 / elements of the whole batch, so micro-batches' terms sum to the mean.
      {"mse", 2, 2, 1, {{"scale", 1.0}}, f32, false, OpKind::kLoss, {}, I::MSE_LOSS},
      {"mse_grad", 2, 2, 1, {{"scale", 1.0}}, f32, false, OpKind::kCompute, {}, I::MSE_GRAD},
      // Optimizer updates: (param, grad) and (param, grad, m, v), written in place.
      {"sgd", 2, 2, 0, update, f32, false, OpKind::kUpdate, {0}, I::SGD},
      {"adamw", 4, 4, 0, adamw, f32, false, OpKind::kUpdate, {0, 2, 3}, I::ADAMW},
      {"reshard", 1, 1, 1, {}, {}, false, OpKind::kReshard, {}, I::OP_UNSPECIFIED},
      // Transformers (operands numbered inputs first, then outputs; see OpDef).
      // Position ids of the batch [B, T]: this rank's box's offset along T plus t.
      {"positions", 0, 0, 1, {}, {}, false, OpKind::kLoad, {}, I::POSITIONS, 0, {0}},
      // (ids, table [V, C]) -> [.., C]; its gradient (ids, dy) -> the table's [V, C].
      {"embedding", 2, 2, 1, {}, f32, false, C, {}, I::EMBEDDING, 1, {0}},
      {"embedding_grad", 2, 2, 1, {}, f32, false, C, {}, I::EMBEDDING_GRAD, 2, {0}},
      // (x, gamma, beta) -> y; (x, gamma, dy) -> (dx, dgamma, dbeta).
      {"layer_norm", 3, 3, 1, eps, f32, false, C, {}, I::LAYER_NORM},
      {"layer_norm_grad", 3, 3, 3, eps, f32, false, C, {}, I::LAYER_NORM_GRAD},
      // (x, gamma) -> y; (x, gamma, dy) -> (dx, dgamma).
      {"rms_norm", 2, 2, 1, eps, f32, false, C, {}, I::RMS_NORM},
      {"rms_norm_grad", 3, 3, 2, eps, f32, false, C, {}, I::RMS_NORM_GRAD},
      {"gelu_tanh", 1, 1, 1, {}, f32, false, C, {}, I::GELU_TANH},
      {"gelu_tanh_grad", 2, 2, 1, {}, f32, false, C, {}, I::GELU_TANH_GRAD},
      {"silu", 1, 1, 1, {}, f32, false, C, {}, I::SILU},
      {"silu_grad", 2, 2, 1, {}, f32, false, C, {}, I::SILU_GRAD},
      {"mul", 2, 2, 1, {}, f32, false, C, {}, I::MUL},
      // x [B, T, H, D] at its positions (the box's offset along T).
      {"rope", 1, 1, 1, theta, f32, false, C, {}, I::ROPE, 0},
      {"rope_grad", 1, 1, 1, theta, f32, false, C, {}, I::ROPE_GRAD, 0},
      // (q, k, v) -> out; (q, k, v, dout) -> (dq, dk, dv). The box: q's (dropout's batch and
      // head offsets).
      {"attention", 3, 3, 1, attention, f32, false, C, {}, I::ATTENTION, 0},
      {"attention_grad", 4, 4, 3, attention, f32, false, C, {}, I::ATTENTION_GRAD, 0},
      // Also its own VJP: the same mask on the gradient.
      {"dropout", 1, 1, 1, dropout, f32, false, C, {}, I::DROPOUT, 0},
      // The cross-entropy of logits [.., V] against target ids, vocabulary-parallel when the
      // logits are sharded on V: m = row_max(logits) (Partial(max) over a vocabulary split);
      // (logits, m, targets) -> (sumexp, tlogit); loss = scale * sum(log(sumexp) + m - tlogit).
      {"row_max", 1, 1, 1, {}, f32, false, C, {}, I::ROW_MAX},
      {"ce_parts", 3, 3, 2, {}, f32, false, C, {}, I::CE_PARTS, 0, {2}},
      {"ce_parts_grad", 5, 5, 1, {}, f32, false, C, {}, I::CE_PARTS_GRAD, 0, {2}},
      {"ce_loss", 3, 3, 1, {{"scale", 1.0}}, f32, false, OpKind::kLoss, {}, I::CE_LOSS},
      {"ce_loss_grad", 1, 1, 2, {{"scale", 1.0}}, f32, false, C, {}, I::CE_LOSS_GRAD},
      // x viewed [outer, n, inner] along `axis` <-> n tensors [outer, inner] (gpt2's q | k | v).
      {"unstack", 1, 1, -1, {{"axis", int64_t{0}}}, {}, false, C, {}, I::UNSTACK},
      {"stack", 1, -1, 1, {{"axis", int64_t{0}}}, {}, false, C, {}, I::STACK},
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

bool IsKind(const Op& op, OpKind kind) {
  const OpDef* def = FindOpDef(op.type);
  return def != nullptr && def->kind == kind;
}

void FillDefaultAttrs(Op* op) {
  const OpDef* def = FindOpDef(op->type);
  if (def == nullptr) return;
  for (const AttrDef& a : def->attrs) {
    if (!op->attrs.Has(a.name)) op->attrs.Set(a.name, a.default_value);
  }
}

}  // namespace weft::planner
