#include "coordinator/planner/autodiff.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/planner/propagate.h"

namespace weft::planner {

absl::StatusOr<int> GradBuilder::Emit(const std::string& type, std::vector<int> inputs, int of,
                                      bool transpose_a, bool transpose_b, float scale) {
  const Tensor& src = g_->tensors[of];
  Tensor t;
  t.name = absl::StrCat(src.name, "@grad");
  t.shape = src.shape;
  t.role = v1::Buffer::GRAD;
  t.layer = op_.layer;
  int out = g_->AddTensor(std::move(t));
  Op op;
  op.type = type;
  op.inputs = std::move(inputs);
  op.outputs = {out};
  op.layer = op_.layer;
  op.phase = Phase::kBackward;
  op.transpose_a = transpose_a;
  op.transpose_b = transpose_b;
  op.scale = scale;
  RETURN_IF_ERROR(AppendPlacedOp(registry_, g_, std::move(op)));
  return out;
}

absl::StatusOr<Graph> Autodiff(const RuleRegistry& registry, Graph g) {
  return AutodiffFrom(registry, std::move(g), {}, {});
}

absl::StatusOr<Graph> AutodiffFrom(const RuleRegistry& registry, Graph g,
                                   const std::map<int, int>& seeds, const std::vector<int>& wrt) {
  const size_t num_forward = g.ops.size();
  std::vector<bool> needs(g.tensors.size(), false);
  for (int p : g.params) needs[p] = true;
  for (int t : wrt) needs[t] = true;
  for (size_t i = 0; i < num_forward; ++i) {
    const Op& op = g.ops[i];
    bool any = false;
    for (int in : op.inputs) any = any || needs[in];
    for (int out : op.outputs) needs[out] = needs[out] || any;
  }

  std::map<int, int> grads = seeds;  // forward tensor -> its gradient tensor
  int loss_op = -1;
  for (size_t i = 0; i < num_forward; ++i) {
    if (g.ops[i].type == "mse") loss_op = static_cast<int>(i);
  }
  if (loss_op < 0 && seeds.empty()) {
    return absl::InvalidArgumentError("autodiff: the graph has no loss op");
  }
  const int last = loss_op >= 0 ? loss_op : static_cast<int>(num_forward) - 1;

  for (int i = last; i >= 0; --i) {
    const Op op = g.ops[i];  // copy: emitting appends to g.ops
    if (op.type == "load_input" || op.type == "load_label") continue;
    std::vector<int> out_grads;
    bool any_out = i == loss_op;
    for (int out : op.outputs) {
      auto it = grads.find(out);
      out_grads.push_back(it == grads.end() ? -1 : it->second);
      any_out = any_out || it != grads.end();
    }
    std::vector<bool> in_needs;
    bool any_in = false;
    for (int in : op.inputs) {
      in_needs.push_back(needs[in]);
      any_in = any_in || needs[in];
    }
    if (!any_out || !any_in) continue;

    std::vector<int> in_grads(op.inputs.size(), -1);
    if (op.type == "reshard") {
      // The value is unchanged, so is its gradient; the consumer's rule places it.
      in_grads[0] = out_grads[0];
    } else {
      const OpRule* rule = registry.Find(op.type);
      if (rule == nullptr || !rule->vjp) {
        return absl::InvalidArgumentError(absl::StrCat("autodiff: no VJP rule for ", OpLabel(op),
                                                       " with inputs ", DescribeInputs(g, op)));
      }
      GradBuilder builder(registry, &g, op, out_grads, in_needs);
      RETURN_IF_ERROR(Annotate(rule->vjp(builder), absl::StrCat("autodiff of ", OpLabel(op))));
      in_grads = builder.input_grads();
    }
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (!in_needs[k]) continue;
      if (in_grads[k] < 0) {
        return absl::InternalError(absl::StrCat("autodiff of ", OpLabel(op), ": no gradient for ",
                                                g.tensors[op.inputs[k]].name));
      }
      if (!grads.emplace(op.inputs[k], in_grads[k]).second) {
        // Accumulating the gradients of a tensor read twice needs an ADD instruction.
        return absl::UnimplementedError(absl::StrCat(
            "autodiff: ", g.tensors[op.inputs[k]].name, " feeds more than one op"));
      }
    }
  }
  for (int p : g.params) {
    auto it = grads.find(p);
    if (it == grads.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("autodiff: parameter ", g.tensors[p].name, " does not affect the loss"));
    }
    g.grad_of[p] = it->second;
  }
  for (int t : wrt) {
    auto it = grads.find(t);
    if (it == grads.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("autodiff: ", g.tensors[t].name, " does not affect the outputs"));
    }
    g.grad_of[t] = it->second;
  }
  return g;
}

}  // namespace weft::planner
