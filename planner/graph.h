// Graph: the planner's plain-data intermediate form, built once from the spec (build.h) and then
// only ever transformed by passes that take the graph, never the spec. Build makes the
// single-device view (global shapes and dtypes, parameters with their roles and the placements
// the user gave them); propagate gives every tensor a DistAttr and inserts `reshard` ops;
// autodiff and optimizer append backward and update ops in the same form; the pipeline pass
// orders the ops per stage and micro-batch; lower and emit turn it into per-rank Programs.
// Tensors keep their GLOBAL shape throughout; local shapes are derived.
//
// A tensor may feed any number of ops (its gradient is the sum of theirs), an op may have several
// outputs, and an op's attributes are named values checked against the op table (op_table.h).
//
// E.g.
//   Graph g;
//   int x = g.AddTensor({"input", {32, 8}, v1::F32, v1::Buffer::DATA});
//   int w = g.AddTensor({"fc0.weight", {8, 16}, v1::F32, v1::Buffer::PARAM, "fc0"});
//   int y = g.AddTensor({"fc0.out", {32, 16}, v1::F32, v1::Buffer::ACTIVATION, "fc0"});
//   RETURN_IF_ERROR(g.AddOp(Op{"matmul", {x, w}, {y}, "fc0"}));
#ifndef WEFT_PLANNER_GRAPH_H_
#define WEFT_PLANNER_GRAPH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/dist_attr.h"
#include "common/mesh.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

using Shape = std::vector<int64_t>;

struct Tensor {
  std::string name;  // global name, e.g. fc0.weight, fc0.out@grad
  Shape shape;       // global shape; the loss is [1]
  v1::DType dtype = v1::F32;
  v1::Buffer::Role role = v1::Buffer::ACTIVATION;
  std::string layer;             // the spec layer it belongs to, "" for data and loss
  std::optional<DistAttr> dist;  // over the mesh: set by build (parameters, batch) or propagate
  // Over the step's micro-batches, when the job has more than one (Graph::micro_batches): like a
  // placement on a mesh dim that runs in time instead of space. Shard(axis): each micro-batch
  // holds a slice along axis (the batch and activations); Partial(sum): each holds a term of the
  // step's value (parameter gradients, the loss), summed by accumulation; Replicate: one value
  // per step (parameters, optimizer states, accumulated gradients).
  Placement micro = Placement::Replicate();
  // Where the model's parallel plan wants the tensor (e.g. the residual stream sequence-sharded
  // under Megatron's sequence parallelism): propagate reshards it to this right after the op that
  // makes it, and autodiff reshards its gradient to the same before the gradient is used, as
  // Megatron's conjugate regions do. Unset: wherever the rules put it.
  std::optional<DistAttr> target;
  // Where its gradient goes instead, when that differs from target: the input of a column-
  // parallel layer under sequence parallelism is whole in the forward pass, its gradient
  // reduce-scattered along the sequence (Megatron's all-gather and its conjugate).
  std::optional<DistAttr> grad_target;
  // A copy made in the backward pass of a forward tensor freed after the forward pass (activation
  // recompute, ZeRO-3's parameter gathered again): the forward tensor it recomputes, whose name it
  // has and whose gradient its gradient is. -1: none.
  int recomputes = -1;
};

// Named op attributes. The op table declares each op's attributes with their type and default.
class Attrs {
 public:
  using Value = std::variant<bool, int64_t, double, std::string>;

  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, Value>> values) : values_(values) {}

  Attrs& Set(const std::string& name, Value value) {
    values_[name] = std::move(value);
    return *this;
  }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The op table has filled every declared attribute (Graph::AddOp), so reading a declared one
  // never fails; an undeclared or mistyped one is a programming error caught by every test.
  bool Bool(const std::string& name) const { return std::get<bool>(values_.at(name)); }
  int64_t Int(const std::string& name) const { return std::get<int64_t>(values_.at(name)); }
  double Float(const std::string& name) const { return std::get<double>(values_.at(name)); }
  const std::string& Str(const std::string& name) const {
    return std::get<std::string>(values_.at(name));
  }
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  std::map<std::string, Value> values_;
};

enum class Phase { kForward, kBackward, kOptimizer };

struct Op {
  std::string type;          // an entry of the op table (op_table.h)
  std::vector<int> inputs;   // tensor ids
  std::vector<int> outputs;  // tensor ids
  std::string layer;         // the spec layer it computes or differentiates; "" for data, loss
  Phase phase = Phase::kForward;
  Attrs attrs;
  std::string comment;  // carried into Instruction.comment
};

// How a parameter gets its first value when no file or checkpoint gives one: U(-bound, bound)
// from Philox keyed by the seed and the parameter's name (bound 1/sqrt(fan_in), PyTorch's Linear;
// 0.02 * sqrt(3), the standard deviation 0.02 of Hugging Face's normal init, for transformers),
// zeros (biases) or ones (norm gains).
struct Parameter {
  enum class Init { kUniform, kZeros, kOnes };
  int tensor = -1;
  float init_bound = 0;
  Init init = Init::kUniform;
  // Its shape in files when that is not its shape here: Hugging Face's layout of the same
  // row-major elements (gpt2's c_attn weight [C, 3C], here [C, 3, H, D]). Empty: the same.
  Shape file_shape;
  // Under bf16 storage (Graph::storage): the float32 master weight the optimizer updates (an
  // optimizer state), which the parameter is rounded from after each update; -1: none. Set with
  // Graph::SetMaster.
  int master = -1;
};

// Activation recompute of a layer (JobSpec model.recompute, Layer.recompute; autodiff.h).
enum class Recompute { kNone, kFull, kSelective };

// A spec layer as the pipeline pass sees it: which chunk it is in; as autodiff sees it: whether
// what it makes inside is kept for the backward pass or recomputed there (what another layer
// reads, its output, is always kept).
struct Layer {
  std::string name;
  int chunk = 0;
  Recompute recompute = Recompute::kNone;
};

struct OptimizerConfig {
  std::string type;  // sgd | adamw
  double lr = 0;     // the peak: the worker scales it by the schedule (Program.lr_schedule)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;
  // optimizer.weight_decay_params matrices: no decay for parameters of fewer than two dims in
  // their files' shapes (Parameter::file_shape, else the shape).
  bool decay_matrices_only = false;
  // > 0: gradients clipped by their global norm (emit.h); 0: the norm is still computed.
  double clip_grad_norm = 0;
};

// The pipeline: stages laid along mesh dim `dim` (-1: none, one stage), `chunks` = stages x
// virtual stages, micro-batches per step (train.micro_batches, with or without stages), and the
// schedule that orders them (without stages, 1F1B: each micro-batch's backward right after its
// forward, so one micro-batch's activations are held at a time).
struct PipelineConfig {
  int dim = -1;
  std::string schedule;
  int micro_batches = 1;
  int virtual_stages = 1;
};

// ZeRO (JobSpec.sharding): optimizer states (level 1), gradients (level 2) and parameters (level
// 3) sharded along mesh dim `dim` (-1: none).
struct ShardingConfig {
  int dim = -1;
  int level = 0;
};

struct Graph {
  Mesh mesh;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;  // in execution order (topological)
  int input = -1;       // the batch input and label, loaded every step
  int label = -1;
  int loss = -1;  // the loss op's output; after propagate, the replicated loss
  std::vector<Parameter> params;  // in layer order
  std::map<int, int> grad_of;     // param (or requested) tensor id -> gradient id (autodiff)
  // An op output written into another tensor's buffer: ZeRO's all-gathered update of a
  // parameter written back into the parameter, a bf16 parameter rounded from its master weight.
  // Output tensor id -> the tensor it writes.
  std::map<int, int> writes_into;
  // ZeRO-3 (zero.h): a parameter stored as its shard, by tensor id -> the placement its readers
  // get it in, all-gathered before each use (its placement without ZeRO).
  std::map<int, DistAttr> gathered;
  // Master weight tensor id -> index in params (SetMaster).
  std::map<int, size_t> master_of;
  std::vector<Layer> layers;      // spec order
  OptimizerConfig optimizer;
  PipelineConfig pipeline;
  ShardingConfig sharding;
  // Where parameters, gradients and activations live (JobSpec.storage, storage.h): F32, or BF16
  // with float32 master weights.
  v1::DType storage = v1::F32;
  // Parameter gradients are all-reduced in buckets of up to this many bytes (buckets.h); 0: one
  // all-reduce each.
  int64_t bucket_bytes = 0;
  // The reshards in the graph, by the tensor they read: the tensor each one makes, with the
  // phase and layer of its op. A reshard of the same tensor to the same placements for another
  // op of that phase and layer reads it rather than moving the bytes again (propagate.h).
  struct Resharded {
    int tensor = -1;
    Phase phase = Phase::kForward;
    std::string layer;
  };
  std::map<int, std::vector<Resharded>> resharded;

  int AddTensor(Tensor t) {
    tensors.push_back(std::move(t));
    return static_cast<int>(tensors.size()) - 1;
  }
  // Appends op after checking it against the op table: its type, arity, attributes (undeclared
  // ones are errors, missing ones get their defaults) and the dtypes of its tensors. Errors are
  // INTERNAL: the builder checks what users write before it adds ops.
  absl::Status AddOp(Op op);
  // Number of elements of a tensor's global shape.
  int64_t NumElements(int id) const;
  int micro_batches() const { return pipeline.micro_batches; }
  // The tensor ids of the parameters, in order.
  std::vector<int> ParamIds() const;
  // The parameter whose tensor is id, or null.
  const Parameter* FindParam(int id) const;
  // Whether tensor id is one of the parameters.
  bool IsParam(int id) const { return FindParam(id) != nullptr; }
  // The parameter whose master weight is tensor id, or null.
  const Parameter* FindParamOfMaster(int id) const;
  // Makes tensor `master` parameter `param`'s master weight.
  void SetMaster(int param, int master);
  // The chunk of a spec layer by name; -1 when no layer has that name.
  int ChunkOf(const std::string& layer) const;
  // The spec layer by name; null for "" and unknown names.
  const Layer* FindLayer(const std::string& name) const;
};

// "op matmul (layer fc0)": for error messages.
std::string OpLabel(const Op& op);

// The global shape of micro-batch `mb`'s piece of tensor t: the slice along its micro Shard axis
// (SplitSizes: the last micro-batch takes the remainder), or the whole shape.
Shape MicroShape(const Graph& g, const Tensor& t, int mb);
// Where micro-batch mb's piece starts along the micro Shard axis (0 for other tensors).
int64_t MicroOffset(const Graph& g, const Tensor& t, int mb);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_GRAPH_H_
