// Qwen2 (Hugging Face's Qwen2ForCausalLM): Llama's decoder (llama.cc) with biases on the q, k
// and v projections, Hugging Face's names model.layers.N.self_attn.{q,k,v}_proj.bias ([H*D],
// [KVH*D], [KVH*D]), initialized to zero. Full causal attention in every layer: the config
// reader accepts use_sliding_window false only. Its config keys are Llama's (common/jobspec's
// ArchConfig "qwen2").
#include "nlohmann/json.hpp"
#include "planner/arch/arch.h"
#include "planner/arch/transformer.h"

namespace weft::planner {
namespace {

absl::Status BuildQwen2(TransformerBuilder& b) {
  return BuildLlamaDecoder(b, LlamaVariant{.qkv_bias = true});
}

// Llama's plan, the q/k/v biases column-parallel with their weights' output (head) axis.
constexpr MegatronRule kQwen2Megatron[] = {
    {"model.embed_tokens.weight", 0},  // [V, C]: vocabulary-parallel
    {"lm_head.weight", 0},             // [V, C]
    {"self_attn.q_proj.weight", 0},    // [H, D, C]: column-parallel
    {"self_attn.q_proj.bias", 0},      // [H, D]
    {"self_attn.k_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.k_proj.bias", 0},      // [KVH, D]
    {"self_attn.v_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.v_proj.bias", 0},      // [KVH, D]
    {"self_attn.o_proj.weight", 1},    // [C, H, D]: row-parallel
    {"mlp.gate_proj.weight", 0},       // [I, C]: column-parallel
    {"mlp.up_proj.weight", 0},         // [I, C]
    {"mlp.down_proj.weight", 1},       // [C, I]: row-parallel
};

// Qwen2Config's keys: Llama's, less the ones Qwen2Config does not have, and full attention in
// every layer (sliding_window only applies with use_sliding_window).
nlohmann::ordered_json Qwen2HfConfig(const v1::TransformerConfig& c) {
  nlohmann::ordered_json config = LlamaHfConfig(c);
  config["architectures"] = {"Qwen2ForCausalLM"};
  config["model_type"] = "qwen2";
  for (const char* key : {"head_dim", "attention_bias", "mlp_bias", "pretraining_tp"}) {
    config.erase(key);
  }
  config["use_sliding_window"] = false;
  config["sliding_window"] = nullptr;
  config["max_window_layers"] = c.num_hidden_layers();
  return config;
}

}  // namespace

const ArchDef& Qwen2Arch() {
  static constexpr ArchDef kQwen2{
      .name = "qwen2",
      .build = BuildQwen2,
      .megatron = kQwen2Megatron,
      .hf_config = Qwen2HfConfig,
  };
  return kQwen2;
}

}  // namespace weft::planner
