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
  return {
      // Data: this rank's box of the step's batch, in the data's dtype.
      {.type = "load_input", .min_inputs = 0, .max_inputs = 0, .outputs = 1, .kind = OpKind::kLoad,
       .instruction = I::LOAD_INPUT},
      {.type = "load_label", .min_inputs = 0, .max_inputs = 0, .outputs = 1, .kind = OpKind::kLoad,
       .instruction = I::LOAD_LABEL},
      {.type = "cast", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .converts = true,
       .instruction = I::CAST},
      // Layers and their gradients.
      {.type = "matmul", .min_inputs = 2, .max_inputs = 2, .outputs = 1,
       .attrs = {{"transpose_a", false}, {"transpose_b", false}, {"contract", int64_t{1}}},
       .dtypes = f32, .instruction = I::MATMUL},
      {.type = "bias_add", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::ADD_BIAS},
      {.type = "bias_grad", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::BIAS_GRAD},
      {.type = "relu", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::RELU},
      {.type = "relu_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::RELU_GRAD},
      {.type = "gelu", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::GELU},
      {.type = "gelu_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::GELU_GRAD},
      {.type = "add", .min_inputs = 1, .max_inputs = -1, .outputs = 1, .dtypes = f32,
       .instruction = I::ADD},
      // The loss: scale = 1 / elements of the whole batch, so micro-batches' terms sum to the mean.
      {.type = "mse", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .attrs = {{"scale", 1.0}},
       .dtypes = f32, .kind = OpKind::kLoss, .instruction = I::MSE_LOSS},
      {.type = "mse_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1,
       .attrs = {{"scale", 1.0}}, .dtypes = f32, .instruction = I::MSE_GRAD},
      // Optimizer updates: (param, grad) and (param, grad, m, v), written in place.
      {.type = "sgd", .min_inputs = 2, .max_inputs = 2, .outputs = 0, .attrs = update,
       .dtypes = f32, .kind = OpKind::kUpdate, .instruction = I::SGD},
      {.type = "adamw", .min_inputs = 4, .max_inputs = 4, .outputs = 0, .attrs = adamw,
       .dtypes = f32, .kind = OpKind::kUpdate, .instruction = I::ADAMW},
      {.type = "reshard", .min_inputs = 1, .max_inputs = 1, .outputs = 1,
       .kind = OpKind::kReshard},
      // Transformers (operands numbered inputs first, then outputs; see OpDef).
      // Position ids of the batch [B, T]: this rank's box's offset along T plus t.
      {.type = "positions", .min_inputs = 0, .max_inputs = 0, .outputs = 1, .kind = OpKind::kLoad,
       .instruction = I::POSITIONS, .box_of = 0, .id_operands = {0}},
      // (ids, table [V, C]) -> [.., C]; its gradient (ids, dy) -> the table's [V, C].
      {.type = "embedding", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::EMBEDDING, .box_of = 1, .id_operands = {0}},
      {.type = "embedding_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::EMBEDDING_GRAD, .box_of = 2, .id_operands = {0}},
      // (x, gamma, beta) -> y; (x, gamma, dy) -> (dx, dgamma, dbeta).
      {.type = "layer_norm", .min_inputs = 3, .max_inputs = 3, .outputs = 1, .attrs = eps,
       .dtypes = f32, .instruction = I::LAYER_NORM},
      {.type = "layer_norm_grad", .min_inputs = 3, .max_inputs = 3, .outputs = 3, .attrs = eps,
       .dtypes = f32, .instruction = I::LAYER_NORM_GRAD},
      // (x, gamma) -> y; (x, gamma, dy) -> (dx, dgamma).
      {.type = "rms_norm", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .attrs = eps,
       .dtypes = f32, .instruction = I::RMS_NORM},
      {.type = "rms_norm_grad", .min_inputs = 3, .max_inputs = 3, .outputs = 2, .attrs = eps,
       .dtypes = f32, .instruction = I::RMS_NORM_GRAD},
      {.type = "gelu_tanh", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::GELU_TANH},
      {.type = "gelu_tanh_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::GELU_TANH_GRAD},
      {.type = "silu", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::SILU},
      {.type = "silu_grad", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::SILU_GRAD},
      {.type = "mul", .min_inputs = 2, .max_inputs = 2, .outputs = 1, .dtypes = f32,
       .instruction = I::MUL},
      // x [B, T, H, D] at its positions (the box's offset along T).
      {.type = "rope", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .attrs = theta,
       .dtypes = f32, .instruction = I::ROPE, .box_of = 0},
      {.type = "rope_grad", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .attrs = theta,
       .dtypes = f32, .instruction = I::ROPE_GRAD, .box_of = 0},
      // (q, k, v) -> out; (q, k, v, dout) -> (dq, dk, dv). The box: q's (dropout's batch and
      // head offsets).
      {.type = "attention", .min_inputs = 3, .max_inputs = 3, .outputs = 1, .attrs = attention,
       .dtypes = f32, .instruction = I::ATTENTION, .box_of = 0},
      {.type = "attention_grad", .min_inputs = 4, .max_inputs = 4, .outputs = 3, .attrs = attention,
       .dtypes = f32, .instruction = I::ATTENTION_GRAD, .box_of = 0},
      // Also its own VJP: the same mask on the gradient.
      {.type = "dropout", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .attrs = dropout,
       .dtypes = f32, .instruction = I::DROPOUT, .box_of = 0},
      // The cross-entropy of logits [.., V] against target ids, vocabulary-parallel when the
      // logits are sharded on V: m = row_max(logits) (Partial(max) over a vocabulary split);
      // (logits, m, targets) -> (sumexp, tlogit); loss = scale * sum(log(sumexp) + m - tlogit).
      {.type = "row_max", .min_inputs = 1, .max_inputs = 1, .outputs = 1, .dtypes = f32,
       .instruction = I::ROW_MAX},
      {.type = "ce_parts", .min_inputs = 3, .max_inputs = 3, .outputs = 2, .dtypes = f32,
       .instruction = I::CE_PARTS, .box_of = 0, .id_operands = {2}},
      {.type = "ce_parts_grad", .min_inputs = 5, .max_inputs = 5, .outputs = 1, .dtypes = f32,
       .instruction = I::CE_PARTS_GRAD, .box_of = 0, .id_operands = {2}},
      {.type = "ce_loss", .min_inputs = 3, .max_inputs = 3, .outputs = 1, .attrs = {{"scale", 1.0}},
       .dtypes = f32, .kind = OpKind::kLoss, .instruction = I::CE_LOSS},
      {.type = "ce_loss_grad", .min_inputs = 1, .max_inputs = 1, .outputs = 2,
       .attrs = {{"scale", 1.0}}, .dtypes = f32, .instruction = I::CE_LOSS_GRAD},
      // x viewed [outer, n, inner] along `axis` <-> n tensors [outer, inner] (gpt2's q | k | v).
      {.type = "unstack", .min_inputs = 1, .max_inputs = 1, .outputs = -1,
       .attrs = {{"axis", int64_t{0}}}, .instruction = I::UNSTACK},
      {.type = "stack", .min_inputs = 1, .max_inputs = -1, .outputs = 1,
       .attrs = {{"axis", int64_t{0}}}, .instruction = I::STACK},
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
