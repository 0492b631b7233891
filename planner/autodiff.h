// Pass 3, autodiff: appends the backward graph. Forward ops are visited in reverse from the loss
// op (the op table's kLoss op, whose output's gradient is 1); each op's VJP rule (from the same
// registry as its SPMD rule) emits backward ops through a GradBuilder, which places them with the
// SPMD rules like any other op. A tensor read by several ops gets the sum of their gradients (an
// `add` in the layer that produced it). Nothing here knows about data parallelism: with x Shard(0)
// and dy Shard(0), dW = x^T @ dy contracts the sharded axis and comes out Partial(sum), and the
// optimizer's reshard of it to the parameter's placement is the all-reduce.
//
// Activation recompute (Layer::recompute): a VJP reads the forward values it needs through
// GradBuilder::input/output. In a layer with recompute, a value the layer made inside (not read
// by another layer's forward op) is not kept: the forward ops that made it run again at that
// point of the backward pass, on the kept values, with the same attributes (dropout's mask is the
// same bits) and the same placements, into copies of the tensors (Tensor::recomputes). `full`
// recomputes every such value; `selective` keeps the outputs of matmuls, attention and reshards
// (collectives) and recomputes the rest. A ZeRO-3 parameter's gathered copy (and any reshard of
// it) is not kept: the backward pass gathers it again (zero.h), except in the last layer to gather
// one when there is no pipeline, whose backward follows its forward at once (FSDP's root).
//
// E.g.
//   ASSIGN_OR_RETURN(g, Autodiff(BuiltinRules(), std::move(g)));
//   int dw = g.grad_of.at(weight_id);  // "fc0.weight@grad", placed
#ifndef WEFT_PLANNER_AUTODIFF_H_
#define WEFT_PLANNER_AUTODIFF_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/spmd.h"

namespace weft::planner {

// The gradients of every parameter go into g.grad_of. A parameter that does not affect the loss
// is INVALID_ARGUMENT naming it.
absl::StatusOr<Graph> Autodiff(const RuleRegistry& registry, Graph g);

// What a VJP rule sees: the forward op, the gradients of its outputs and which inputs need
// gradients; it emits backward ops and records the gradient of each input that needs one.
class GradBuilder {
 public:
  // How a backward op reads a forward tensor: the tensor's id, or its recomputed copy's.
  using Reader = std::function<absl::StatusOr<int>(int forward_tensor)>;

  GradBuilder(const RuleRegistry& registry, Graph* g, const Op& op, std::vector<int> out_grads,
              std::vector<bool> needs_grad, const std::map<int, int>* readers, Reader read)
      : registry_(registry), g_(g), op_(op), out_grads_(std::move(out_grads)),
        needs_grad_(std::move(needs_grad)), in_grads_(op.inputs.size(), -1), readers_(readers),
        read_(std::move(read)) {}

  // Marks an input the op's outputs depend on, but whose gradient term is zero by construction
  // (the cross-entropy's row maximum cancels out of the loss): no term is added for it.
  static constexpr int kNoGradient = -2;

  // The forward op as the forward pass ran it: its tensors name the gradients (Emit's `of`).
  const Op& op() const { return op_; }
  // The value of the forward op's input i (output i) for a backward op to read: the forward
  // tensor, or, when its layer frees it after the forward pass (recompute, a ZeRO-3 parameter's
  // gathered copy), its copy recomputed here, in the backward pass. Recomputes on first use only,
  // so a VJP that does not read a value costs nothing.
  absl::StatusOr<int> input(int i) { return read_(op_.inputs[i]); }
  absl::StatusOr<int> output(int i) { return read_(op_.outputs[i]); }
  const Graph& graph() const { return *g_; }
  // Gradient tensor id of op().outputs[i]; -1 for the loss (whose gradient is 1), or when no
  // consumer of that output needed a gradient.
  int out_grad(int i) const { return out_grads_[i]; }
  bool needs_grad(int input) const { return needs_grad_[input]; }
  void set_input_grad(int input, int grad_id) { in_grads_[input] = grad_id; }
  void set_no_gradient(int input) { in_grads_[input] = kNoGradient; }
  const std::vector<int>& input_grads() const { return in_grads_; }

  // Appends a backward op of `type` on `inputs` producing a new gradient tensor with the global
  // shape and dtype of tensor `of`, named "<of>@grad" ("<of>@grad.<layer>" when `of` is read by
  // several ops, each contributing a term); placed by the SPMD rules.
  absl::StatusOr<int> Emit(const std::string& type, std::vector<int> inputs, int of,
                           Attrs attrs = {});
  // The same for an op with several outputs, output i the gradient of tensor of[i].
  absl::StatusOr<std::vector<int>> EmitMulti(const std::string& type, std::vector<int> inputs,
                                             const std::vector<int>& of, Attrs attrs = {});

 private:
  const RuleRegistry& registry_;
  Graph* g_;
  const Op& op_;
  std::vector<int> out_grads_;
  std::vector<bool> needs_grad_;
  std::vector<int> in_grads_;
  const std::map<int, int>* readers_;  // forward tensor -> how many op inputs read it
  Reader read_;
};

}  // namespace weft::planner

#endif  // WEFT_PLANNER_AUTODIFF_H_
