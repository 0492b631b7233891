#include "planner/autodiff.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/op_table.h"
#include "planner/propagate.h"

namespace weft::planner {
namespace {

// The name of the gradient of `of`, or of one term of it when several ops read it.
std::string GradName(const Graph& g, int of, const std::map<int, int>& readers,
                     const std::string& term) {
  auto it = readers.find(of);
  if (it != readers.end() && it->second > 1 && !term.empty()) {
    return absl::StrCat(g.tensors[of].name, "@grad.", term);
  }
  return absl::StrCat(g.tensors[of].name, "@grad");
}

// The forward values a backward op reads, kept or recomputed (autodiff.h). One per autodiff run:
// a value recomputed for one backward op is read by the later ones too.
class Rematerializer {
 public:
  Rematerializer(Graph* g, size_t num_forward) : g_(*g) {
    for (size_t i = 0; i < num_forward; ++i) {
      for (int out : g_.ops[i].outputs) producer_[out] = static_cast<int>(i);
    }
    // A value another layer's forward op reads is the making layer's output: kept.
    for (size_t i = 0; i < num_forward; ++i) {
      const Op& op = g_.ops[i];
      for (int in : op.inputs) {
        auto p = producer_.find(in);
        if (p != producer_.end() && g_.ops[p->second].layer != op.layer) output_.insert(in);
      }
    }
    // Without a pipeline the last layer to gather a ZeRO-3 parameter is the first to run
    // backward, right after the loss: its gathered copies are kept, not gathered again (FSDP's
    // root). With one, a stage's forward and backward of a micro-batch lie far apart.
    if (g_.pipeline.dim < 0 && g_.micro_batches() == 1) {
      for (size_t i = 0; i < num_forward; ++i) {
        if (IsGather(g_.ops[i])) kept_gathers_ = g_.ops[i].layer;
      }
    }
  }

  // Forward tensor t as a backward op reads it.
  absl::StatusOr<int> Read(int t) {
    auto done = copies_.find(t);
    if (done != copies_.end()) return done->second;
    auto p = producer_.find(t);
    if (p == producer_.end()) return t;  // a parameter or anything not made by a forward op
    const Op made = g_.ops[p->second];  // a copy: recomputing appends to g_.ops
    // A ZeRO-3 parameter's gathered value (and any reshard of it) is gathered again rather than
    // kept, except in the layer whose gathers are kept.
    const bool regather = FromGather(made) && made.layer != kept_gathers_;
    if (!regather && Kept(t, made)) return t;
    // Run the op again on what it read (kept or recomputed in turn), into copies of its outputs.
    Op again = made;
    again.phase = Phase::kBackward;
    again.comment = absl::StrCat("recompute ", made.comment.empty()
                                                   ? absl::StrCat(made.layer, " ", made.type, " -> ",
                                                                  g_.tensors[made.outputs[0]].name)
                                                   : made.comment);
    for (int& in : again.inputs) {
      ASSIGN_OR_RETURN(in, Read(in));
    }
    for (int& out : again.outputs) {
      Tensor copy = g_.tensors[out];
      copy.recomputes = out;
      copy.target.reset();
      copy.grad_target.reset();
      const int id = g_.AddTensor(std::move(copy));
      copies_[out] = id;
      out = id;
    }
    RETURN_IF_ERROR(g_.AddOp(std::move(again)));
    return copies_.at(t);
  }

 private:
  // A ZeRO-3 parameter's gather (propagate.cc): a reshard of a parameter in Graph::gathered.
  bool IsGather(const Op& op) const {
    return op.type == "reshard" && g_.gathered.count(op.inputs[0]) > 0;
  }

  // A reshard of a gathered parameter's value (a placement a rule needs after the gather): never
  // kept either, or the whole parameter would live from the forward pass to the backward one.
  bool FromGather(const Op& op) const {
    if (op.type != "reshard") return false;
    if (IsGather(op)) return true;
    auto p = producer_.find(op.inputs[0]);
    return p != producer_.end() && FromGather(g_.ops[p->second]);
  }

  bool Kept(int t, const Op& made) const {
    const Layer* layer = g_.FindLayer(made.layer);
    const Recompute mode = layer != nullptr ? layer->recompute : Recompute::kNone;
    if (mode == Recompute::kNone || output_.count(t) > 0) return true;
    if (IsKind(made, OpKind::kLoad)) return true;  // the step's batch
    if (mode == Recompute::kSelective) {
      return made.type == "matmul" || made.type == "attention" || made.type == "reshard";
    }
    return false;
  }

  Graph& g_;
  std::map<int, int> producer_;  // forward tensor -> the forward op that made it
  std::set<int> output_;         // forward tensors read by another layer's forward op
  std::map<int, int> copies_;    // forward tensor -> its copy in the backward pass
  std::string kept_gathers_;     // the layer whose ZeRO-3 gathers are kept ("": none)
};

}  // namespace

absl::StatusOr<int> GradBuilder::Emit(const std::string& type, std::vector<int> inputs, int of,
                                      Attrs attrs) {
  ASSIGN_OR_RETURN(std::vector<int> out, EmitMulti(type, std::move(inputs), {of},
                                                   std::move(attrs)));
  return out[0];
}

absl::StatusOr<std::vector<int>> GradBuilder::EmitMulti(const std::string& type,
                                                        std::vector<int> inputs,
                                                        const std::vector<int>& of, Attrs attrs) {
  std::vector<int> outs;
  for (int id : of) {
    const Tensor& src = g_->tensors[id];
    Tensor t;
    // The gradient of a recomputed copy is the gradient of the forward tensor.
    const int named = src.recomputes >= 0 ? src.recomputes : id;
    t.name = GradName(*g_, named, *readers_, op_.layer.empty() ? op_.type : op_.layer);
    t.shape = src.shape;
    t.dtype = src.dtype;
    t.role = v1::Buffer::GRAD;
    t.layer = op_.layer;
    outs.push_back(g_->AddTensor(std::move(t)));
  }
  Op op{type, std::move(inputs), outs, op_.layer, Phase::kBackward, std::move(attrs)};
  RETURN_IF_ERROR(AppendPlacedOp(registry_, g_, std::move(op)));
  return outs;
}

absl::StatusOr<Graph> Autodiff(const RuleRegistry& registry, Graph g) {
  const size_t num_forward = g.ops.size();
  std::vector<bool> needs(g.tensors.size(), false);
  for (int p : g.ParamIds()) needs[p] = true;
  std::map<int, int> readers;        // forward tensor -> op inputs reading it
  std::map<int, std::string> maker;  // forward tensor -> the layer of the op that made it
  int loss_op = -1;
  for (size_t i = 0; i < num_forward; ++i) {
    const Op& op = g.ops[i];
    bool any = false;
    for (int in : op.inputs) {
      any = any || needs[in];
      ++readers[in];
    }
    for (int out : op.outputs) {
      needs[out] = needs[out] || any;
      maker[out] = op.layer;
    }
    if (IsKind(op, OpKind::kLoss)) {
      if (loss_op >= 0) return absl::InternalError("autodiff: the graph has two loss ops");
      loss_op = static_cast<int>(i);
    }
  }
  if (loss_op < 0) return absl::InvalidArgumentError("autodiff: the graph has no loss op");

  Rematerializer remat(&g, num_forward);
  std::map<int, int> grads;  // forward tensor -> its gradient tensor (so far)
  // Adds a term to the gradient of x: the first term is the gradient, later ones are summed.
  auto accumulate = [&](int x, int term) -> absl::Status {
    auto it = grads.find(x);
    if (it == grads.end()) {
      grads.emplace(x, term);
      return absl::OkStatus();
    }
    Tensor sum = g.tensors[term];
    sum.name = absl::StrCat(g.tensors[x].name, "@grad");
    sum.layer = maker.count(x) > 0 ? maker[x] : g.tensors[x].layer;
    const int out = g.AddTensor(std::move(sum));
    Op add{"add", {it->second, term}, {out}, g.tensors[out].layer, Phase::kBackward};
    add.comment = absl::StrCat(g.tensors[x].name, "@grad: the sum of its readers' terms");
    RETURN_IF_ERROR(AppendPlacedOp(registry, &g, std::move(add)));
    it->second = out;
    return absl::OkStatus();
  };

  for (int i = loss_op; i >= 0; --i) {
    const Op op = g.ops[i];  // copy: emitting appends to g.ops
    if (IsKind(op, OpKind::kLoad)) continue;
    std::vector<int> out_grads;
    bool any_out = i == loss_op;
    for (int out : op.outputs) {
      auto it = grads.find(out);
      // A tensor the plan placed (Tensor::target) has its gradient placed the same, or at its
      // grad_target.
      if (it != grads.end() && (g.tensors[out].target || g.tensors[out].grad_target)) {
        const DistAttr target = g.tensors[out].grad_target ? *g.tensors[out].grad_target
                                                           : *g.tensors[out].target;
        const Placement micro = g.tensors[it->second].micro;
        ASSIGN_OR_RETURN(it->second, AppendReshard(&g, it->second, target, micro,
                                                   Phase::kBackward, op.layer));
      }
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
      GradBuilder builder(registry, &g, op, out_grads, in_needs, &readers,
                          [&remat](int t) { return remat.Read(t); });
      RETURN_IF_ERROR(Annotate(rule->vjp(builder), absl::StrCat("autodiff of ", OpLabel(op))));
      in_grads = builder.input_grads();
    }
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (!in_needs[k] || in_grads[k] == GradBuilder::kNoGradient) continue;
      if (in_grads[k] < 0) {
        return absl::InternalError(absl::StrCat("autodiff of ", OpLabel(op), ": no gradient for ",
                                                g.tensors[op.inputs[k]].name));
      }
      RETURN_IF_ERROR(accumulate(op.inputs[k], in_grads[k]));
    }
  }
  for (int p : g.ParamIds()) {
    auto it = grads.find(p);
    if (it == grads.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("autodiff: parameter ", g.tensors[p].name, " does not affect the loss"));
    }
    g.grad_of[p] = it->second;
  }
  return g;
}

}  // namespace weft::planner
