// GPT-2 (Hugging Face's GPT2LMHeadModel): token and learned position embeddings, pre-LayerNorm
// blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) with mlp = c_proj(gelu_new(c_fc(.))), causal
// attention scaled by 1/sqrt(D), a final ln_f, logits = x @ wte^T (tied). Dropout at
// Hugging Face's sites: "drop" (embeddings), "h.N.attn.attn_dropout" (probabilities),
// "h.N.attn.resid_dropout" and "h.N.mlp.dropout". Init as Hugging Face's _init_weights with
// uniforms of the same standard deviation: weights 0.02 (c_proj weights 0.02 / sqrt(2 n_layer)),
// biases 0, LayerNorm gains 1.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/philox.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "planner/arch/arch.h"
#include "planner/arch/transformer.h"

namespace weft::planner {
namespace {

absl::Status BuildGpt2(TransformerBuilder& b) {
  const v1::TransformerConfig& c = b.config();
  RETURN_IF_ERROR(b.Prepare("n_positions", c.n_positions()));
  const int64_t V = c.vocab_size(), C = c.n_embd(), H = c.n_head(), D = C / H;
  const int64_t F = c.n_inner() > 0 ? c.n_inner() : 4 * C;
  const int64_t B = b.batch(), T = b.seq();
  if (b.mp_dim() && H % b.mp_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.config.n_head: ", H, " heads cannot be split evenly over mp = ", b.mp_size(),
        " (plan megatron gives each rank the same number of whole heads)"));
  }
  const double eps = c.layer_norm_epsilon();
  const float w_bound = UniformBound(0.02);
  const float proj_bound = UniformBound(0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer())));
  const Shape act = {B, T, C};
  using Init = Parameter::Init;

  b.BeginLayer("embed");
  ASSIGN_OR_RETURN(int wte, b.Param("wte.weight", {V, C}, Init::kUniform, w_bound));
  ASSIGN_OR_RETURN(int wpe, b.Param("wpe.weight", {c.n_positions(), C}, Init::kUniform, w_bound));
  ASSIGN_OR_RETURN(int positions, b.Positions());
  ASSIGN_OR_RETURN(int tok, b.Op1("embedding", {b.tokens(), wte}, "wte.out", act));
  b.RowOutput(tok);
  ASSIGN_OR_RETURN(int pos, b.Op1("embedding", {positions, wpe}, "wpe.out", act));
  ASSIGN_OR_RETURN(int x, b.Op1("add", {tok, pos}, "embed.out", act));
  ASSIGN_OR_RETURN(x, b.Dropout(x, c.embd_pdrop(), "drop"));

  for (int64_t i = 0; i < c.n_layer(); ++i) {
    const std::string h = absl::StrCat("h.", i);
    b.BeginBlock(h);
    auto name = [&](const std::string& part) { return absl::StrCat(h, ".", part); };
    ASSIGN_OR_RETURN(int ln1_w, b.Param(name("ln_1.weight"), {C}, Init::kOnes));
    ASSIGN_OR_RETURN(int ln1_b, b.Param(name("ln_1.bias"), {C}, Init::kZeros));
    ASSIGN_OR_RETURN(int attn_w, b.Param(name("attn.c_attn.weight"), {C, 3, H, D},
                                         Init::kUniform, w_bound, {C, 3 * C}));
    ASSIGN_OR_RETURN(int attn_b, b.Param(name("attn.c_attn.bias"), {3, H, D}, Init::kZeros, 0,
                                         {3 * C}));
    ASSIGN_OR_RETURN(int proj_w, b.Param(name("attn.c_proj.weight"), {H, D, C}, Init::kUniform,
                                         proj_bound, {C, C}));
    ASSIGN_OR_RETURN(int proj_b, b.Param(name("attn.c_proj.bias"), {C}, Init::kZeros));
    ASSIGN_OR_RETURN(int ln2_w, b.Param(name("ln_2.weight"), {C}, Init::kOnes));
    ASSIGN_OR_RETURN(int ln2_b, b.Param(name("ln_2.bias"), {C}, Init::kZeros));
    ASSIGN_OR_RETURN(int fc_w, b.Param(name("mlp.c_fc.weight"), {C, F}, Init::kUniform, w_bound));
    ASSIGN_OR_RETURN(int fc_b, b.Param(name("mlp.c_fc.bias"), {F}, Init::kZeros));
    ASSIGN_OR_RETURN(int fc2_w, b.Param(name("mlp.c_proj.weight"), {F, C}, Init::kUniform,
                                        proj_bound));
    ASSIGN_OR_RETURN(int fc2_b, b.Param(name("mlp.c_proj.bias"), {C}, Init::kZeros));

    // Attention.
    ASSIGN_OR_RETURN(int a, b.Op1("layer_norm", {x, ln1_w, ln1_b}, name("ln_1.out"), act,
                                  {{"eps", eps}}));
    b.ResidualStream(a);
    ASSIGN_OR_RETURN(a, b.ColumnInput(a));
    ASSIGN_OR_RETURN(int qkv, b.Linear(a, attn_w, name("attn.c_attn.out"), false, attn_b));
    ASSIGN_OR_RETURN(std::vector<int> q_k_v,
                     b.OpN("unstack", {qkv},
                           {{name("attn.q"), {B, T, H, D}},
                            {name("attn.k"), {B, T, H, D}},
                            {name("attn.v"), {B, T, H, D}}},
                           {{"axis", int64_t{2}}}));
    ASSIGN_OR_RETURN(
        int o, b.Op1("attention", q_k_v, name("attn.out"), {B, T, H, D},
                     {{"scale", 1.0 / std::sqrt(static_cast<double>(D))},
                      {"dropout_p", c.attn_pdrop()},
                      {"dropout_key",
                       static_cast<int64_t>(Fnv1a64(name("attn.attn_dropout")))}}));
    ASSIGN_OR_RETURN(int y, b.Linear(o, proj_w, name("attn.c_proj.xw"), false, -1, 2));
    b.RowOutput(y);
    ASSIGN_OR_RETURN(y, b.Op1("bias_add", {y, proj_b}, name("attn.c_proj.out"), act));
    ASSIGN_OR_RETURN(y, b.Dropout(y, c.resid_pdrop(), name("attn.resid_dropout")));
    ASSIGN_OR_RETURN(x, b.Op1("add", {x, y}, name("attn.residual"), act));

    // MLP.
    ASSIGN_OR_RETURN(int m, b.Op1("layer_norm", {x, ln2_w, ln2_b}, name("ln_2.out"), act,
                                  {{"eps", eps}}));
    b.ResidualStream(m);
    ASSIGN_OR_RETURN(m, b.ColumnInput(m));
    ASSIGN_OR_RETURN(int f, b.Linear(m, fc_w, name("mlp.c_fc.out"), false, fc_b));
    ASSIGN_OR_RETURN(f, b.Op1("gelu_tanh", {f}, name("mlp.act"), {B, T, F}));
    ASSIGN_OR_RETURN(y, b.Linear(f, fc2_w, name("mlp.c_proj.xw"), false));
    b.RowOutput(y);
    ASSIGN_OR_RETURN(y, b.Op1("bias_add", {y, fc2_b}, name("mlp.c_proj.out"), act));
    ASSIGN_OR_RETURN(y, b.Dropout(y, c.resid_pdrop(), name("mlp.dropout")));
    ASSIGN_OR_RETURN(x, b.Op1("add", {x, y}, name("mlp.residual"), act));
  }

  b.BeginLayer("head");
  ASSIGN_OR_RETURN(int lnf_w, b.Param("ln_f.weight", {C}, Init::kOnes));
  ASSIGN_OR_RETURN(int lnf_b, b.Param("ln_f.bias", {C}, Init::kZeros));
  ASSIGN_OR_RETURN(x, b.Op1("layer_norm", {x, lnf_w, lnf_b}, "ln_f.out", act, {{"eps", eps}}));
  b.ResidualStream(x);
  ASSIGN_OR_RETURN(const int head, b.TiedForHead(wte));
  ASSIGN_OR_RETURN(x, b.ColumnInput(x));
  ASSIGN_OR_RETURN(int logits, b.Linear(x, head, "logits", /*transpose_b=*/true));
  return b.CrossEntropy(logits);
}

// Megatron's plan on Conv1D layouts ([in, out]; the graph's shapes, transformer.h): c_attn
// splits its head axis, so each rank holds its heads of q, of k and of v.
constexpr MegatronRule kGpt2Megatron[] = {
    {"wte.weight", 0},          // [V, C]: vocabulary-parallel (and the tied head)
    {"attn.c_attn.weight", 2},  // [C, 3, H, D]: column-parallel by heads
    {"attn.c_attn.bias", 1},    // [3, H, D]
    {"attn.c_proj.weight", 0},  // [H, D, C]: row-parallel over heads
    {"mlp.c_fc.weight", 1},     // [C, 4C]: column-parallel
    {"mlp.c_fc.bias", 0},       // [4C]
    {"mlp.c_proj.weight", 0},   // [4C, C]: row-parallel
};

nlohmann::ordered_json Gpt2HfConfig(const v1::TransformerConfig& c) {
  using Json = nlohmann::ordered_json;
  return Json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", c.vocab_size()},
              {"n_positions", c.n_positions()},
              {"n_embd", c.n_embd()},
              {"n_layer", c.n_layer()},
              {"n_head", c.n_head()},
              // 0 in a spec from gRPC: Hugging Face's null, 4 * n_embd.
              {"n_inner", c.n_inner() > 0 ? Json(c.n_inner()) : Json(nullptr)},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", c.layer_norm_epsilon()},
              {"embd_pdrop", c.embd_pdrop()},
              {"attn_pdrop", c.attn_pdrop()},
              {"resid_pdrop", c.resid_pdrop()},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false},
              {"tie_word_embeddings", true}};
}

}  // namespace

const ArchDef& Gpt2Arch() {
  static constexpr ArchDef kGpt2{
      .name = "gpt2",
      .build = BuildGpt2,
      .megatron = kGpt2Megatron,
      .hf_config = Gpt2HfConfig,
  };
  return kGpt2;
}

}  // namespace weft::planner
