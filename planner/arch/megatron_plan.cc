// The Megatron tensor-parallel plan of each architecture, by Hugging Face parameter name: the
// vocabulary-parallel embedding (and the tied or separate LM head), attention's q/k/v
// column-parallel by whole heads and its output projection row-parallel, the MLP's up (and gate)
// projections column-parallel and its down projection row-parallel; norms and the remaining
// biases whole. The shapes are the graph's (transformer.h): gpt2 c_attn.weight [C, 3, H, D]
// splits its head axis, so each rank holds its heads of q, of k and of v.
#include "absl/strings/match.h"
#include "planner/arch/transformer.h"

namespace weft::planner {
namespace {

struct Rule {
  const char* suffix;
  int axis;
};

// gpt2 (Conv1D layouts, [in, out]).
constexpr Rule kGpt2[] = {
    {"wte.weight", 0},           // [V, C]: vocabulary-parallel
    {"attn.c_attn.weight", 2},   // [C, 3, H, D]: heads
    {"attn.c_attn.bias", 1},     // [3, H, D]
    {"attn.c_proj.weight", 0},   // [H, D, C]: row-parallel over heads
    {"mlp.c_fc.weight", 1},      // [C, 4C]: column-parallel
    {"mlp.c_fc.bias", 0},        // [4C]
    {"mlp.c_proj.weight", 0},    // [4C, C]: row-parallel
};

// llama (nn.Linear layouts, [out, in]).
constexpr Rule kLlama[] = {
    {"model.embed_tokens.weight", 0},  // [V, C]
    {"lm_head.weight", 0},             // [V, C]
    {"self_attn.q_proj.weight", 0},    // [H, D, C]
    {"self_attn.k_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.v_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.o_proj.weight", 1},    // [C, H, D]
    {"mlp.gate_proj.weight", 0},       // [I, C]
    {"mlp.up_proj.weight", 0},         // [I, C]
    {"mlp.down_proj.weight", 1},       // [C, I]
};

template <size_t N>
Placement Find(const Rule (&rules)[N], const std::string& name) {
  for (const Rule& r : rules) {
    if (absl::EndsWith(name, r.suffix)) return Placement::Shard(r.axis);
  }
  return Placement::Replicate();
}

}  // namespace

Placement MegatronPlacement(const std::string& arch, const std::string& name) {
  if (arch == "gpt2") return Find(kGpt2, name);
  if (arch == "llama") return Find(kLlama, name);
  return Placement::Replicate();
}

}  // namespace weft::planner
