#include "planner/storage.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "planner/op_table.h"

namespace weft::planner {
namespace {

// The statistics the loss is computed from stay float32 (the loss ops themselves, mse and
// ce_loss, make the LOSS tensor, which storage never touches).
bool KeepsF32Outputs(const std::string& type) {
  static const std::set<std::string> kLossStatistics = {"row_max", "ce_parts"};
  return kLossStatistics.count(type) > 0;
}

}  // namespace

absl::Status ApplyStorage(Graph* g) {
  if (g->storage == v1::F32) return absl::OkStatus();
  if (g->storage != v1::BF16) {
    return absl::InternalError(absl::StrCat("storage: unexpected dtype ", g->storage));
  }
  for (const Parameter& p : g->params) {
    Tensor& t = g->tensors[p.tensor];
    if (t.dtype == v1::F32) t.dtype = v1::BF16;
  }
  for (const Op& op : g->ops) {
    const OpDef* def = FindOpDef(op.type);
    if (def == nullptr) {
      return absl::InternalError(absl::StrCat("storage: ", OpLabel(op), " is not in the op table"));
    }
    if (def->kind != OpKind::kCompute || KeepsF32Outputs(op.type)) continue;
    // A compute op (its floats may be f32 or bf16) stores its float outputs in bf16; an op that
    // moves one dtype (stack, unstack) stores what it reads.
    const bool computes = !def->dtypes.empty();
    if (!computes && (def->converts || op.inputs.empty())) continue;
    const v1::DType to = computes ? v1::BF16 : g->tensors[op.inputs[0]].dtype;
    for (int out : op.outputs) {
      Tensor& t = g->tensors[out];
      if (t.role == v1::Buffer::ACTIVATION && (t.dtype == v1::F32 || t.dtype == v1::BF16)) {
        t.dtype = to;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace weft::planner
