// The transformer language models (model.arch, the table in arch.h): their single-device graphs
// with Hugging Face's parameter names and math (gpt2.cc, llama.cc, ...), kept apart from where
// the parameters live: each architecture's Megatron plan (ArchDef::megatron, `parallelize: {mp:
// {dim: mp, plan: megatron}}`) and the spec's per-pattern placements (model.placements). The
// graph builders place no parameter: the plan names parameters by their Hugging Face names, the
// builders mark the residual stream for sequence parallelism.
//
// The graph: tokens and targets [B, T] (I32, data.source tokens) are loaded; positions [B, T]
// (t plus the piece's offset) are generated where the embedding runs; the model's logits
// [B, T, V] go into the vocabulary-parallel cross-entropy pieces (rules/cross_entropy.cc), whose
// loss is the mean over the B x T tokens. Layers, for the pipeline: "embed" (chunk 0), one per
// block, "head" (the last chunk, with the loss); the blocks split evenly over the chunks.
//
// Parameters whose Hugging Face layout differs from the shape the graph computes with keep the
// same row-major elements in another shape (Parameter::file_shape): gpt2's c_attn weight
// [C, 3C] is [C, 3, H, D] here (so the q | k | v blocks split per head), its c_proj weight
// [C, C] is [H, D, C]; llama's q/k/v projections [H*D, C] are [H, D, C], o_proj [C, H*D] is
// [C, H, D].
//
// E.g.
//   ASSIGN_OR_RETURN(Graph g, BuildTransformerGraph(spec));   // spec.model().arch() == "gpt2"
#ifndef WEFT_PLANNER_ARCH_TRANSFORMER_H_
#define WEFT_PLANNER_ARCH_TRANSFORMER_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "planner/graph.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

struct ArchDef;

// The graph of spec.model().arch (an error naming the known ones if the table lacks it).
absl::StatusOr<Graph> BuildTransformerGraph(const v1::JobSpec& spec);

// What an architecture builds its graph with (gpt2.cc, llama.cc, ...).
class TransformerBuilder {
 public:
  // `arch` (its Megatron plan) and `spec` outlive the builder.
  TransformerBuilder(const v1::JobSpec& spec, const ArchDef& arch, Graph* g);

  // The mesh, optimizer, pipeline, token batch and the parallel plan; checks that hold for every
  // architecture (token data, the sequence against the model's positions, the plan's mesh dim).
  // `max_positions`: the config key and value bounding seq_len.
  absl::Status Prepare(const std::string& max_positions_key, int64_t max_positions);

  const v1::TransformerConfig& config() const { return spec_.model().config(); }
  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  int tokens() const { return tokens_; }
  // The mesh dim the Megatron plan splits (nullopt: none) and whether it is sequence-parallel.
  std::optional<int> mp_dim() const { return mp_dim_; }
  int64_t mp_size() const;

  // Every op and parameter added next belongs to this layer (a pipeline unit): "embed", a
  // block's name, "head". A block is recomputed as model.recompute says; the others never are.
  void BeginLayer(const std::string& name);
  void BeginBlock(const std::string& name);

  // The position ids [B, T] of the batch (t plus the piece's offset along T), in this layer.
  absl::StatusOr<int> Positions();
  // A parameter with Hugging Face's name `name`, computed with `shape` (stored in files as
  // file_shape when given), initialized as `init` (kUniform: U(-bound, bound)). Placed by the
  // Megatron plan on its mesh dim, then by model.placements.
  absl::StatusOr<int> Param(const std::string& name, const Shape& shape, Parameter::Init init,
                            float bound = 0.0f, const Shape& file_shape = {});
  // An op of `type` on `inputs` with one new output `name` [shape] (float32 unless dtype says).
  absl::StatusOr<int> Op1(const std::string& type, std::vector<int> inputs,
                          const std::string& name, const Shape& shape, Attrs attrs = {},
                          v1::DType dtype = v1::F32);
  // The same with several outputs.
  absl::StatusOr<std::vector<int>> OpN(const std::string& type, std::vector<int> inputs,
                                       const std::vector<std::pair<std::string, Shape>>& outputs,
                                       Attrs attrs = {});
  // x [.., in] @ w (contract 1) -> name [.., out dims of w]; transpose_b for w stored [out.., in]
  // (nn.Linear's layout), then + bias when bias >= 0.
  absl::StatusOr<int> Linear(int x, int w, const std::string& name, bool transpose_b,
                             int bias = -1, int64_t contract = 1);
  // Dropout at the site `site` (Hugging Face's module path) with probability p: x itself when
  // p is 0.
  absl::StatusOr<int> Dropout(int x, double p, const std::string& site);
  // The tied embedding `param` as the head reads it: the parameter itself unless pipelined; with
  // pipeline stages, a copy made in the "embed" layer (an add of one input), which reaches
  // the last stage as an activation every micro-batch and sends its gradient back the same way
  // (Megatron keeps a second copy in an embedding group instead: fewer bytes, not done yet).
  absl::StatusOr<int> TiedForHead(int param);
  // Marks an activation [B, T, ...] of the residual stream (a norm's output, a row-parallel
  // layer's output): under the Megatron plan it is whole on the mp dim, and so is its gradient
  // (Megatron's g and f: the row-parallel output all-reduced in the forward pass, the gradient
  // of a column-parallel layer's input in the backward pass); with sequence parallelism it is
  // split along T instead (all-gather / reduce-scatter). Without the plan, nothing.
  void ResidualStream(int tensor);
  // The output of a row-parallel layer (before its bias): ResidualStream, and under sequence
  // parallelism its gradient is all-gathered whole (the conjugate of the reduce-scatter).
  void RowOutput(int y);
  // The input of a column-parallel layer, from a residual-stream tensor x: x itself, except
  // under sequence parallelism, where it is a copy of x whole on the mp dim (an all-gather along
  // T) whose gradient is reduce-scattered back along T, as Megatron's.
  absl::StatusOr<int> ColumnInput(int x);
  // The mean token cross-entropy of logits [B, T, V] against the targets, in the "head" layer.
  absl::Status CrossEntropy(int logits);
  // Chunks the layers and checks that every model.placements pattern matched a parameter.
  absl::Status Finish();

 private:
  absl::Status ReadPlan();
  absl::StatusOr<DistAttr> PlacementOf(const std::string& name, const Shape& shape) const;
  // The batch's placements with `on_mp` on the mp dim (which must be set), for `tensor`.
  absl::StatusOr<DistAttr> BatchAttrWithMp(const Placement& on_mp, int tensor) const;
  // A copy of x named `name` in the current layer: an add of one input.
  absl::StatusOr<int> Copy(int x, const std::string& name);

  const v1::JobSpec& spec_;
  const ArchDef& arch_;
  Graph& g_;
  std::vector<Placement> batch_placements_;
  int64_t batch_ = 0, seq_ = 0;
  int tokens_ = -1;
  std::string layer_;
  std::optional<int> mp_dim_;
  std::string mp_entry_;  // the parallelize entry's name, for messages
  bool sequence_parallel_ = false;
  std::map<std::string, int> pattern_uses_;  // model.placements pattern -> parameters matched
};

// The bound b of U(-b, b) with standard deviation `std`: Hugging Face initializes with normals,
// Weft's parameters with uniforms (Parameter::Init).
float UniformBound(double std);

// What Llama's relatives change in its decoder (llama.cc), as Hugging Face's modular Qwen2
// derives from Llama.
struct LlamaVariant {
  bool qkv_bias = false;  // q_proj, k_proj and v_proj with biases (Qwen2)
};

// Llama's decoder (llama.cc) with `variant`'s changes, through `b`.
absl::Status BuildLlamaDecoder(TransformerBuilder& b, const LlamaVariant& variant);

// Llama's config.json for a Hugging Face export (llama.cc), which its relatives' start from.
nlohmann::ordered_json LlamaHfConfig(const v1::TransformerConfig& c);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_ARCH_TRANSFORMER_H_
