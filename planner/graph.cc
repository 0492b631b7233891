#include "planner/graph.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "planner/op_table.h"

namespace weft::planner {
namespace {

const char* TypeName(const Attrs::Value& v) {
  switch (v.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "float";
    default:
      return "string";
  }
}

}  // namespace

absl::Status Graph::AddOp(Op op) {
  const OpDef* def = FindOpDef(op.type);
  if (def == nullptr) {
    return absl::InternalError(absl::StrCat("op type \"", op.type, "\" is not in the op table"));
  }
  const int n_in = static_cast<int>(op.inputs.size());
  const int n_out = static_cast<int>(op.outputs.size());
  if (n_in < def->min_inputs || (def->max_inputs >= 0 && n_in > def->max_inputs) ||
      (def->outputs >= 0 ? n_out != def->outputs : n_out < 1)) {
    return absl::InternalError(absl::StrCat(OpLabel(op), " has ", n_in, " inputs and ",
                                            op.outputs.size(), " outputs"));
  }
  for (const auto& [name, value] : op.attrs.values()) {
    auto it = std::find_if(def->attrs.begin(), def->attrs.end(),
                           [&](const AttrDef& a) { return a.name == name; });
    if (it == def->attrs.end()) {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": unknown attribute ", name));
    }
    if (it->default_value.index() != value.index()) {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": attribute ", name, " is a ",
                                              TypeName(value), ", expected a ",
                                              TypeName(it->default_value)));
    }
  }
  FillDefaultAttrs(&op);
  std::vector<int> all = op.inputs;
  all.insert(all.end(), op.outputs.begin(), op.outputs.end());
  for (int id : all) {
    if (id < 0 || id >= static_cast<int>(tensors.size())) {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": tensor id ", id, " out of range"));
    }
  }
  for (int operand : def->id_operands) {
    if (operand >= static_cast<int>(all.size())) continue;
    const v1::DType dtype = tensors[all[operand]].dtype;
    if (dtype != v1::I32 && dtype != v1::I64) {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": ", tensors[all[operand]].name,
                                              " is ", DTypeName(dtype), ", expected ids (i32 or "
                                              "i64)"));
    }
  }
  auto is_id = [&](int operand) {
    return std::find(def->id_operands.begin(), def->id_operands.end(), operand) !=
           def->id_operands.end();
  };
  if (!def->dtypes.empty()) {
    for (size_t operand = 0; operand < all.size(); ++operand) {
      if (is_id(static_cast<int>(operand))) continue;
      const int id = all[operand];
      if (std::find(def->dtypes.begin(), def->dtypes.end(), tensors[id].dtype) ==
          def->dtypes.end()) {
        return absl::InternalError(absl::StrCat(OpLabel(op), ": ", tensors[id].name, " is ",
                                                DTypeName(tensors[id].dtype)));
      }
    }
  } else if (!def->converts && !all.empty()) {
    for (int id : all) {
      if (tensors[id].dtype != tensors[all.front()].dtype) {
        return absl::InternalError(absl::StrCat(OpLabel(op), ": ", tensors[id].name, " is ",
                                                DTypeName(tensors[id].dtype), ", ",
                                                tensors[all.front()].name, " is ",
                                                DTypeName(tensors[all.front()].dtype)));
      }
    }
  }
  ops.push_back(std::move(op));
  return absl::OkStatus();
}

int64_t Graph::NumElements(int id) const {
  int64_t n = 1;
  for (int64_t d : tensors[id].shape) n *= d;
  return n;
}

std::vector<int> Graph::ParamIds() const {
  std::vector<int> ids;
  for (const Parameter& p : params) ids.push_back(p.tensor);
  return ids;
}

const Parameter* Graph::FindParam(int id) const {
  auto it = std::find_if(params.begin(), params.end(),
                         [&](const Parameter& p) { return p.tensor == id; });
  return it == params.end() ? nullptr : &*it;
}

const Parameter* Graph::FindParamOfMaster(int id) const {
  auto it = master_of.find(id);
  return it == master_of.end() ? nullptr : &params[it->second];
}

void Graph::SetMaster(int param, int master) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].tensor != param) continue;
    params[i].master = master;
    master_of[master] = i;
  }
}

int Graph::ChunkOf(const std::string& layer) const {
  const Layer* l = FindLayer(layer);
  return l != nullptr ? l->chunk : -1;
}

const Layer* Graph::FindLayer(const std::string& name) const {
  for (const Layer& l : layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

std::string OpLabel(const Op& op) {
  return op.layer.empty() ? "op " + op.type : "op " + op.type + " (layer " + op.layer + ")";
}

Shape MicroShape(const Graph& g, const Tensor& t, int mb) {
  Shape shape = t.shape;
  if (g.micro_batches() > 1 && t.micro.is_shard()) {
    shape[t.micro.axis] = ShardRange(t.shape[t.micro.axis], g.micro_batches(), mb).second;
  }
  return shape;
}

int64_t MicroOffset(const Graph& g, const Tensor& t, int mb) {
  if (g.micro_batches() <= 1 || !t.micro.is_shard()) return 0;
  return ShardRange(t.shape[t.micro.axis], g.micro_batches(), mb).first;
}

}  // namespace weft::planner
