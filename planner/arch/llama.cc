// Llama (Hugging Face's LlamaForCausalLM): token embedding, pre-RMSNorm blocks
// x + o_proj(attn(rope(q), rope(k), v)) with grouped-query attention (kv heads repeated) and
// x + down(silu(gate(m)) * up(m)), a final norm, logits = x @ lm_head^T (embed_tokens^T when
// tie_word_embeddings). No biases (LlamaVariant::qkv_bias adds Qwen2's to q, k and v). Rotary
// embeddings use Hugging Face's rotate-half convention at rope_theta. Attention dropout
// (attention_dropout) at the site "model.layers.N.self_attn.attention_dropout".
// Init: weights U with standard deviation 0.02 (Hugging Face's initializer_range), norm gains 1.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/philox.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "planner/arch/arch.h"
#include "planner/arch/transformer.h"

namespace weft::planner {

absl::Status BuildLlamaDecoder(TransformerBuilder& b, const LlamaVariant& variant) {
  const v1::TransformerConfig& c = b.config();
  RETURN_IF_ERROR(b.Prepare("max_position_embeddings", c.max_position_embeddings()));
  const int64_t V = c.vocab_size(), C = c.hidden_size(), I = c.intermediate_size();
  const int64_t H = c.num_attention_heads();
  const int64_t KVH = c.num_key_value_heads() > 0 ? c.num_key_value_heads() : H;
  const int64_t D = C / H;
  const int64_t B = b.batch(), T = b.seq();
  if (b.mp_dim() && (H % b.mp_size() != 0 || KVH % b.mp_size() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.config.num_key_value_heads: ", H, " attention heads and ", KVH,
        " kv heads cannot be split over mp = ", b.mp_size(),
        " so that each rank's query heads read its own kv heads (plan megatron needs both "
        "counts divisible by mp)"));
  }
  const double eps = c.rms_norm_eps(), theta = c.rope_theta();
  const float bound = UniformBound(0.02);
  using Init = Parameter::Init;
  const Shape act = {B, T, C};

  b.BeginLayer("embed");
  ASSIGN_OR_RETURN(int embed, b.Param("model.embed_tokens.weight", {V, C}, Init::kUniform, bound));
  ASSIGN_OR_RETURN(int x, b.Op1("embedding", {b.tokens(), embed}, "model.embed_tokens.out", act));
  b.RowOutput(x);

  for (int64_t i = 0; i < c.num_hidden_layers(); ++i) {
    const std::string l = absl::StrCat("model.layers.", i);
    b.BeginBlock(l);
    auto name = [&](const std::string& part) { return absl::StrCat(l, ".", part); };
    ASSIGN_OR_RETURN(int in_norm, b.Param(name("input_layernorm.weight"), {C}, Init::kOnes));
    ASSIGN_OR_RETURN(int wq, b.Param(name("self_attn.q_proj.weight"), {H, D, C}, Init::kUniform,
                                     bound, {H * D, C}));
    ASSIGN_OR_RETURN(int wk, b.Param(name("self_attn.k_proj.weight"), {KVH, D, C},
                                     Init::kUniform, bound, {KVH * D, C}));
    ASSIGN_OR_RETURN(int wv, b.Param(name("self_attn.v_proj.weight"), {KVH, D, C},
                                     Init::kUniform, bound, {KVH * D, C}));
    // Biases [H*D] / [KVH*D] in files, [H, D] / [KVH, D] here (split per head with the weights);
    // Hugging Face initializes them to zero.
    int bq = -1, bk = -1, bv = -1;
    if (variant.qkv_bias) {
      ASSIGN_OR_RETURN(bq, b.Param(name("self_attn.q_proj.bias"), {H, D}, Init::kZeros, 0,
                                   {H * D}));
      ASSIGN_OR_RETURN(bk, b.Param(name("self_attn.k_proj.bias"), {KVH, D}, Init::kZeros, 0,
                                   {KVH * D}));
      ASSIGN_OR_RETURN(bv, b.Param(name("self_attn.v_proj.bias"), {KVH, D}, Init::kZeros, 0,
                                   {KVH * D}));
    }
    ASSIGN_OR_RETURN(int wo, b.Param(name("self_attn.o_proj.weight"), {C, H, D}, Init::kUniform,
                                     bound, {C, H * D}));
    ASSIGN_OR_RETURN(int post_norm,
                     b.Param(name("post_attention_layernorm.weight"), {C}, Init::kOnes));
    ASSIGN_OR_RETURN(int gate, b.Param(name("mlp.gate_proj.weight"), {I, C}, Init::kUniform,
                                       bound));
    ASSIGN_OR_RETURN(int up, b.Param(name("mlp.up_proj.weight"), {I, C}, Init::kUniform, bound));
    ASSIGN_OR_RETURN(int down, b.Param(name("mlp.down_proj.weight"), {C, I}, Init::kUniform,
                                       bound));

    // Attention.
    ASSIGN_OR_RETURN(int a, b.Op1("rms_norm", {x, in_norm}, name("input_layernorm.out"), act,
                                  {{"eps", eps}}));
    b.ResidualStream(a);
    ASSIGN_OR_RETURN(a, b.ColumnInput(a));
    ASSIGN_OR_RETURN(int q, b.Linear(a, wq, name("self_attn.q_proj.out"), true, bq));
    ASSIGN_OR_RETURN(int k, b.Linear(a, wk, name("self_attn.k_proj.out"), true, bk));
    ASSIGN_OR_RETURN(int v, b.Linear(a, wv, name("self_attn.v_proj.out"), true, bv));
    ASSIGN_OR_RETURN(q, b.Op1("rope", {q}, name("self_attn.q_rope"), {B, T, H, D},
                              {{"theta", theta}}));
    ASSIGN_OR_RETURN(k, b.Op1("rope", {k}, name("self_attn.k_rope"), {B, T, KVH, D},
                              {{"theta", theta}}));
    const std::string site = name("self_attn.attention_dropout");
    ASSIGN_OR_RETURN(int o, b.Op1("attention", {q, k, v}, name("self_attn.out"), {B, T, H, D},
                                  {{"scale", 1.0 / std::sqrt(static_cast<double>(D))},
                                   {"dropout_p", c.attention_dropout()},
                                   {"dropout_key", static_cast<int64_t>(Fnv1a64(site))}}));
    ASSIGN_OR_RETURN(int y, b.Linear(o, wo, name("self_attn.o_proj.out"), true, -1, 2));
    b.RowOutput(y);
    ASSIGN_OR_RETURN(x, b.Op1("add", {x, y}, name("attn.residual"), act));

    // MLP.
    ASSIGN_OR_RETURN(int m, b.Op1("rms_norm", {x, post_norm},
                                  name("post_attention_layernorm.out"), act, {{"eps", eps}}));
    b.ResidualStream(m);
    ASSIGN_OR_RETURN(m, b.ColumnInput(m));
    ASSIGN_OR_RETURN(int g, b.Linear(m, gate, name("mlp.gate_proj.out"), true));
    ASSIGN_OR_RETURN(int u, b.Linear(m, up, name("mlp.up_proj.out"), true));
    ASSIGN_OR_RETURN(g, b.Op1("silu", {g}, name("mlp.act"), {B, T, I}));
    ASSIGN_OR_RETURN(int gu, b.Op1("mul", {g, u}, name("mlp.gated"), {B, T, I}));
    ASSIGN_OR_RETURN(y, b.Linear(gu, down, name("mlp.down_proj.out"), true));
    b.RowOutput(y);
    ASSIGN_OR_RETURN(x, b.Op1("add", {x, y}, name("mlp.residual"), act));
  }

  b.BeginLayer("head");
  ASSIGN_OR_RETURN(int norm, b.Param("model.norm.weight", {C}, Init::kOnes));
  ASSIGN_OR_RETURN(x, b.Op1("rms_norm", {x, norm}, "model.norm.out", act, {{"eps", eps}}));
  b.ResidualStream(x);
  int head;
  if (c.tie_word_embeddings()) {
    ASSIGN_OR_RETURN(head, b.TiedForHead(embed));
  } else {
    ASSIGN_OR_RETURN(head, b.Param("lm_head.weight", {V, C}, Init::kUniform, bound));
  }
  ASSIGN_OR_RETURN(x, b.ColumnInput(x));
  ASSIGN_OR_RETURN(int logits, b.Linear(x, head, "logits", /*transpose_b=*/true));
  return b.CrossEntropy(logits);
}

namespace {

absl::Status BuildLlama(TransformerBuilder& b) { return BuildLlamaDecoder(b, LlamaVariant{}); }

// Megatron's plan on nn.Linear layouts ([out, in]; the graph's shapes, transformer.h): q/k/v
// column-parallel by whole (kv) heads, o_proj row-parallel over heads.
constexpr MegatronRule kLlamaMegatron[] = {
    {"model.embed_tokens.weight", 0},  // [V, C]: vocabulary-parallel
    {"lm_head.weight", 0},             // [V, C]
    {"self_attn.q_proj.weight", 0},    // [H, D, C]: column-parallel
    {"self_attn.k_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.v_proj.weight", 0},    // [KVH, D, C]
    {"self_attn.o_proj.weight", 1},    // [C, H, D]: row-parallel
    {"mlp.gate_proj.weight", 0},       // [I, C]: column-parallel
    {"mlp.up_proj.weight", 0},         // [I, C]
    {"mlp.down_proj.weight", 1},       // [C, I]: row-parallel
};


}  // namespace

nlohmann::ordered_json LlamaHfConfig(const v1::TransformerConfig& c) {
  const int64_t kv_heads =
      c.num_key_value_heads() > 0 ? c.num_key_value_heads() : c.num_attention_heads();
  return nlohmann::ordered_json{{"architectures", {"LlamaForCausalLM"}},
                                {"model_type", "llama"},
                                {"vocab_size", c.vocab_size()},
                                {"hidden_size", c.hidden_size()},
                                {"intermediate_size", c.intermediate_size()},
                                {"num_hidden_layers", c.num_hidden_layers()},
                                {"num_attention_heads", c.num_attention_heads()},
                                {"num_key_value_heads", kv_heads},
                                {"head_dim", c.hidden_size() / c.num_attention_heads()},
                                {"hidden_act", "silu"},
                                {"max_position_embeddings", c.max_position_embeddings()},
                                {"rms_norm_eps", c.rms_norm_eps()},
                                {"rope_theta", c.rope_theta()},
                                {"rope_scaling", nullptr},
                                {"attention_bias", false},
                                {"attention_dropout", c.attention_dropout()},
                                {"mlp_bias", false},
                                {"pretraining_tp", 1},
                                {"tie_word_embeddings", c.tie_word_embeddings()}};
}

const ArchDef& LlamaArch() {
  static constexpr ArchDef kLlama{
      .name = "llama",
      .build = BuildLlama,
      .megatron = kLlamaMegatron,
      .hf_config = LlamaHfConfig,
  };
  return kLlama;
}

}  // namespace weft::planner
