// Graph: the planner's plain-data intermediate form. Build makes the single-device view (global
// shapes, no placements); propagate gives every tensor a DistAttr and inserts `reshard` ops;
// autodiff and optimizer append backward and update ops in the same form; lower and emit turn it
// into per-rank Programs. Tensors keep their GLOBAL shape throughout; local shapes are derived.
//
// E.g.
//   Graph g;
//   int x = g.AddTensor({"input", {32, 8}, v1::Buffer::DATA});
//   int w = g.AddTensor({"fc0.weight", {8, 16}, v1::Buffer::PARAM, "fc0"});
//   int y = g.AddTensor({"fc0.out", {32, 16}, v1::Buffer::ACTIVATION, "fc0"});
//   g.ops.push_back(Op{"matmul", {x, w}, {y}, "fc0"});
#ifndef WEFT_COORDINATOR_PLANNER_GRAPH_H_
#define WEFT_COORDINATOR_PLANNER_GRAPH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/dist_attr.h"
#include "common/mesh.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

struct Tensor {
  std::string name;             // global name, e.g. fc0.weight, fc0.out@grad
  std::vector<int64_t> shape;   // global shape; the loss is [1]
  v1::Buffer::Role role = v1::Buffer::ACTIVATION;
  std::string layer;            // the spec layer it belongs to, "" for data and loss
  std::optional<DistAttr> dist;  // set by propagate (and for params/data before it)
};

enum class Phase { kForward, kBackward, kOptimizer };

// Op types are registry keys (rules/): load_input, load_label, matmul, bias_add, relu, gelu,
// mse, reshard, and the backward/update ops relu_grad, gelu_grad, bias_grad, mse_grad, sgd,
// adamw. Update ops write their inputs in place and have no outputs.
struct Op {
  std::string type;
  std::vector<int> inputs;   // tensor ids
  std::vector<int> outputs;  // tensor ids
  std::string layer;
  Phase phase = Phase::kForward;
  bool transpose_a = false;  // matmul
  bool transpose_b = false;  // matmul
  float scale = 1.0f;        // mse, mse_grad
  std::string comment;       // carried into Instruction.comment
};

struct Graph {
  Mesh mesh;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;  // in execution order
  int input = -1;
  int label = -1;
  int loss = -1;  // after propagate: the replicated loss
  std::vector<int> params;        // tensor ids, in layer order
  std::map<int, int> grad_of;     // param (or requested) id -> gradient id (after autodiff)

  int AddTensor(Tensor t) {
    tensors.push_back(std::move(t));
    return static_cast<int>(tensors.size()) - 1;
  }
  // Number of elements of a tensor's global shape.
  int64_t NumElements(int id) const {
    int64_t n = 1;
    for (int64_t d : tensors[id].shape) n *= d;
    return n;
  }
};

// "op matmul (layer fc0)": for error messages.
inline std::string OpLabel(const Op& op) {
  return op.layer.empty() ? "op " + op.type : "op " + op.type + " (layer " + op.layer + ")";
}

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_GRAPH_H_
