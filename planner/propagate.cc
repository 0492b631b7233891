#include "planner/propagate.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/op_table.h"
#include "planner/zero.h"

namespace weft::planner {

absl::StatusOr<int> AppendReshard(Graph* g, int id, const DistAttr& target, const Placement& micro,
                                  Phase phase, std::string layer) {
  const Tensor& in = g->tensors[id];
  if (in.dist && *in.dist == target && in.micro == micro) return id;
  auto made = g->resharded.find(id);
  if (made != g->resharded.end()) {
    for (const Graph::Resharded& r : made->second) {
      const Tensor& t = g->tensors[r.tensor];
      if (r.phase == phase && r.layer == layer && *t.dist == target && t.micro == micro) {
        return r.tensor;
      }
    }
  }
  Tensor t = in;
  std::string from = t.dist ? t.dist->ToString() : "[unplaced]";
  std::string to = target.ToString();
  if (t.micro != micro) {
    absl::StrAppend(&from, " ", t.micro.ToString(), " over micro-batches");
    absl::StrAppend(&to, " ", micro.ToString(), " over micro-batches");
  }
  t.dist = target;
  t.micro = micro;
  // A parameter's or state's resharded copy is remade from it whenever it is read: a transient
  // value, not a second parameter to initialize, carry across steps or checkpoint.
  if (t.role == v1::Buffer::PARAM || t.role == v1::Buffer::OPTIMIZER_STATE) {
    t.role = v1::Buffer::ACTIVATION;
  }
  const int out = g->AddTensor(std::move(t));
  g->resharded[id].push_back({out, phase, layer});
  Op op{"reshard", {id}, {out}, std::move(layer), phase};
  op.comment = absl::StrCat(g->tensors[id].name, ": ", from, "->", to);
  RETURN_IF_ERROR(g->AddOp(std::move(op)));
  return out;
}

absl::Status AppendPlacedOp(const RuleRegistry& registry, Graph* g, Op op) {
  ASSIGN_OR_RETURN(SpmdDecision decision, InferSpmd(registry, *g, op));
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(op.inputs[i], AppendReshard(g, op.inputs[i], decision.inputs[i],
                                                 decision.inputs_micro[i], op.phase, op.layer));
  }
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    g->tensors[op.outputs[i]].dist = decision.outputs[i];
    g->tensors[op.outputs[i]].micro = decision.outputs_micro[i];
  }
  return g->AddOp(std::move(op));
}

absl::Status PlaceOps(const RuleRegistry& registry, Graph* g) {
  std::vector<Op> ops = std::move(g->ops);
  g->ops.clear();
  std::map<int, int> at_target;  // a tensor with a target -> its version resharded to it
  for (Op& op : ops) {
    for (int& in : op.inputs) {
      auto it = at_target.find(in);
      if (it != at_target.end()) in = it->second;
      // A ZeRO-3 parameter is read whole: gathered for this layer (once for all its readers).
      auto gathered = g->gathered.find(in);
      if (gathered != g->gathered.end()) {
        const DistAttr whole = gathered->second;
        ASSIGN_OR_RETURN(in, AppendReshard(g, in, whole, Placement::Replicate(), op.phase,
                                           op.layer));
      }
    }
    const std::vector<int> outputs = op.outputs;
    const Phase phase = op.phase;
    const std::string layer = op.layer;
    if (IsKind(op, OpKind::kLoad)) {
      RETURN_IF_ERROR(g->AddOp(std::move(op)));
    } else {
      RETURN_IF_ERROR(AppendPlacedOp(registry, g, std::move(op)));
    }
    for (int out : outputs) {
      const Tensor& t = g->tensors[out];
      if (!t.target || *t.target == *t.dist) continue;
      const DistAttr target = *t.target;
      const Placement micro = t.micro;
      ASSIGN_OR_RETURN(at_target[out], AppendReshard(g, out, target, micro, phase, layer));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Graph> Propagate(const RuleRegistry& registry, Graph g) {
  RETURN_IF_ERROR(ShardParameters(&g));
  RETURN_IF_ERROR(PlaceOps(registry, &g));
  ASSIGN_OR_RETURN(g.loss, AppendReshard(&g, g.loss, DistAttr::Replicated(g.mesh),
                                         Placement::Replicate(), Phase::kForward, ""));
  return g;
}

}  // namespace weft::planner
