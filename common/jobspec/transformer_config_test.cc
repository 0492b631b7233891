#include "common/jobspec/transformer_config.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/jobspec_testing.h"
#include "common/jobspec/parallelize.h"
#include "common/jobspec/param_pattern.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "nlohmann/json.hpp"

// The job spec side of transformer models: model.arch with a Hugging Face config (written in the
// spec or a config.json read as is), placements by parameter name pattern, and the megatron plan.
namespace weft {
namespace {

using namespace jobspec_testing;  // NOLINT: the shared specs and fixtures
using Replace = std::vector<std::pair<std::string, std::string>>;

// The issue's example: a tiny GPT-2 on a dp x mp mesh.
constexpr char kGpt2Spec[] = R"(
name: gpt
mesh: {shape: [2, 2], dim_names: [dp, mp]}
model:
  arch: gpt2
  config: {vocab_size: 256, n_positions: 64, n_embd: 64, n_layer: 2, n_head: 4,
           layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}
  placements: {"h.*.mlp.c_fc.weight": {mp: Shard(1)}}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [8]
  num_samples: 32
  batch_size: 4
optimizer: {type: adamw, lr: 0.001}
train: {steps: 3}
parallelize:
  mp: {dim: mp, plan: megatron, sequence_parallel: true}
)";

constexpr char kGpt2Config[] =
    "{vocab_size: 256, n_positions: 64, n_embd: 64, n_layer: 2, n_head: 4,\n"
    "           layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}";

constexpr char kLlamaConfig[] = R"({vocab_size: 512, hidden_size: 64, intermediate_size: 172,
           num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
           rms_norm_eps: 1.0e-6, rope_theta: 500000.0, max_position_embeddings: 128,
           tie_word_embeddings: true, attention_dropout: 0.0})";

// openai-community/gpt2's config.json, as published.
constexpr char kHfGpt2Json[] = R"({
  "activation_function": "gelu_new",
  "architectures": [
    "GPT2LMHeadModel"
  ],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {
    "text-generation": {
      "do_sample": true,
      "max_length": 50
    }
  },
  "vocab_size": 50257
}
)";

// A GPT-2 config as save_pretrained writes it today (every GPT2Config attribute).
constexpr char kSavedGpt2Json[] = R"({
  "_name_or_path": "gpt2",
  "activation_function": "gelu_new",
  "add_cross_attention": false,
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.0,
  "bos_token_id": 50256,
  "embd_pdrop": 0.0,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 64,
  "n_embd": 64,
  "n_head": 4,
  "n_inner": null,
  "n_layer": 2,
  "n_positions": 64,
  "reorder_and_upcast_attn": false,
  "resid_pdrop": 0.0,
  "scale_attn_by_inverse_layer_idx": false,
  "scale_attn_weights": true,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.44.2",
  "use_cache": true,
  "vocab_size": 256
}
)";

// meta-llama/Llama-2-7b-hf: no rope_theta (HF's 10000), no attention_dropout.
constexpr char kLlama2Json[] = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": [
    "LlamaForCausalLM"
  ],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}
)";

// TinyLlama/TinyLlama-1.1B-Chat-v1.0: grouped-query attention.
constexpr char kTinyLlamaJson[] = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
}
)";

// meta-llama/Meta-Llama-3-8B, with the keys newer transformers add (head_dim, mlp_bias) and a
// list of eos ids.
constexpr char kLlama3Json[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128009],
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}
)";

class TransformerSpecTest : public SpecTest {
 protected:
  absl::StatusOr<v1::JobSpec> Gpt2(const Replace& replace = {}) {
    return ParseJobSpecYaml(absl::StrReplaceAll(kGpt2Spec, replace), dir_);
  }
  absl::StatusOr<v1::JobSpec> Llama(const Replace& replace = {}) {
    return ParseJobSpecYaml(absl::StrReplaceAll(LlamaSpec(), replace), dir_);
  }
  // The GPT-2 spec reading config_file `name`, written with `json`, for `arch`.
  absl::StatusOr<v1::JobSpec> WithFile(const std::string& arch, const std::string& name,
                                       const std::string& json, const Replace& replace = {}) {
    WriteText(name, json);
    const std::string text = absl::StrReplaceAll(
        kGpt2Spec, {{"arch: gpt2", "arch: " + arch},
                    {absl::StrCat("config: ", kGpt2Config), "config_file: " + name}});
    return ParseJobSpecYaml(absl::StrReplaceAll(text, replace), dir_);
  }
  static std::string LlamaSpec() {
    return absl::StrReplaceAll(kGpt2Spec,
                               {{"arch: gpt2", "arch: llama"}, {kGpt2Config, kLlamaConfig}});
  }
};

// The message of a failed parse, or "" (with a test failure) when it parsed.
std::string Error(const absl::StatusOr<v1::JobSpec>& spec) {
  EXPECT_FALSE(spec.ok());
  EXPECT_TRUE(spec.ok() || absl::IsInvalidArgument(spec.status())) << spec.status();
  return spec.ok() ? "" : std::string(spec.status().message());
}

TEST_F(TransformerSpecTest, ReadsGpt2FromTheSpec) {
  absl::StatusOr<v1::JobSpec> spec = Gpt2();
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::Model& model = spec->model();
  EXPECT_EQ(model.arch(), "gpt2");
  EXPECT_EQ(model.layers_size(), 0);
  EXPECT_EQ(model.config_file(), "");
  const v1::TransformerConfig& c = model.config();
  EXPECT_EQ(c.vocab_size(), 256);
  EXPECT_EQ(c.n_positions(), 64);
  EXPECT_EQ(c.n_embd(), 64);
  EXPECT_EQ(c.n_layer(), 2);
  EXPECT_EQ(c.n_head(), 4);
  EXPECT_EQ(c.n_inner(), 256);  // 4 * n_embd
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon(), 1e-5);
  EXPECT_DOUBLE_EQ(c.embd_pdrop(), 0.0);
  EXPECT_DOUBLE_EQ(c.attn_pdrop(), 0.0);
  EXPECT_DOUBLE_EQ(c.resid_pdrop(), 0.0);
  EXPECT_EQ(c.hidden_size(), 0);  // llama's keys stay unset
  EXPECT_EQ(model.loss(), "cross_entropy");
  ASSERT_EQ(model.placements().size(), 1u);
  EXPECT_EQ(FormatPlacements(model.placements().at("h.*.mlp.c_fc.weight").placements()),
            "[Replicate(), Shard(1)]");
  ASSERT_EQ(spec->parallelize().size(), 1u);
  const v1::ParallelizeConfig& mp = spec->parallelize().at("mp");
  EXPECT_EQ(mp.dim(), "mp");
  EXPECT_EQ(mp.preset(), "megatron");
  EXPECT_TRUE(mp.plan().empty());
  EXPECT_TRUE(mp.sequence_parallel());
  EXPECT_TRUE(ValidateTransformerModel(model).ok()) << ValidateTransformerModel(model);

  // n_inner given; sequence_parallel off by default; placements positional.
  absl::StatusOr<v1::JobSpec> other =
      Gpt2({{"resid_pdrop: 0.0}", "resid_pdrop: 0.1, n_inner: 128}"},
            {", sequence_parallel: true", ""},
            {"{mp: Shard(1)}", "[Replicate(), Shard(1)], \"wte.weight\": {mp: Shard(0)}"}});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->model().config().n_inner(), 128);
  EXPECT_DOUBLE_EQ(other->model().config().resid_pdrop(), 0.1);
  EXPECT_FALSE(other->parallelize().at("mp").sequence_parallel());
  EXPECT_EQ(FormatPlacements(other->model().placements().at("h.*.mlp.c_fc.weight").placements()),
            "[Replicate(), Shard(1)]");
  EXPECT_EQ(FormatPlacements(other->model().placements().at("wte.weight").placements()),
            "[Replicate(), Shard(0)]");

  // Pasted Hugging Face metadata is ignored; n_inner null is 4 * n_embd; the written loss is
  // kept.
  absl::StatusOr<v1::JobSpec> pasted = Gpt2(
      {{"resid_pdrop: 0.0}",
        "resid_pdrop: 0.0, n_inner: null, model_type: gpt2, architectures: [GPT2LMHeadModel],\n"
        "           activation_function: gelu_pytorch_tanh, n_ctx: 64, bos_token_id: 50256,\n"
        "           task_specific_params: {text-generation: {do_sample: true}}}"},
       {"train: {steps: 3}", "train: {steps: 3}\n"},
       {"placements: {", "loss: cross_entropy\n  placements: {"}});
  ASSERT_TRUE(pasted.ok()) << pasted.status();
  EXPECT_EQ(pasted->model().config().n_inner(), 256);
  EXPECT_EQ(pasted->model().loss(), "cross_entropy");
}

TEST_F(TransformerSpecTest, ReadsLlamaFromTheSpec) {
  absl::StatusOr<v1::JobSpec> spec = Llama();
  ASSERT_TRUE(spec.ok()) << spec.status();
  const v1::TransformerConfig& c = spec->model().config();
  EXPECT_EQ(spec->model().arch(), "llama");
  EXPECT_EQ(c.vocab_size(), 512);
  EXPECT_EQ(c.hidden_size(), 64);
  EXPECT_EQ(c.intermediate_size(), 172);
  EXPECT_EQ(c.num_hidden_layers(), 2);
  EXPECT_EQ(c.num_attention_heads(), 4);
  EXPECT_EQ(c.num_key_value_heads(), 2);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps(), 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta(), 500000.0);
  EXPECT_EQ(c.max_position_embeddings(), 128);
  EXPECT_TRUE(c.tie_word_embeddings());
  EXPECT_DOUBLE_EQ(c.attention_dropout(), 0.0);
  EXPECT_EQ(c.n_embd(), 0);  // gpt2's keys stay unset
  EXPECT_EQ(spec->model().loss(), "cross_entropy");
  EXPECT_EQ(spec->parallelize().at("mp").preset(), "megatron");

  // Newer transformers' rope_parameters carries rope_theta.
  absl::StatusOr<v1::JobSpec> params = Llama(
      {{"rope_theta: 500000.0,", "rope_parameters: {rope_type: default, rope_theta: 1000.0},"}});
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_DOUBLE_EQ(params->model().config().rope_theta(), 1000.0);
}

TEST_F(TransformerSpecTest, ReadsHuggingFaceGpt2ConfigFilesAsIs) {
  absl::StatusOr<v1::JobSpec> spec = WithFile("gpt2", "gpt2.json", kHfGpt2Json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().config_file(), Path("gpt2.json"));  // resolved against the spec
  const v1::TransformerConfig& c = spec->model().config();
  EXPECT_EQ(c.vocab_size(), 50257);
  EXPECT_EQ(c.n_positions(), 1024);
  EXPECT_EQ(c.n_embd(), 768);
  EXPECT_EQ(c.n_layer(), 12);
  EXPECT_EQ(c.n_head(), 12);
  EXPECT_EQ(c.n_inner(), 3072);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon(), 1e-5);
  EXPECT_DOUBLE_EQ(c.embd_pdrop(), 0.1);
  EXPECT_DOUBLE_EQ(c.attn_pdrop(), 0.1);
  EXPECT_DOUBLE_EQ(c.resid_pdrop(), 0.1);

  absl::StatusOr<v1::JobSpec> saved = WithFile("gpt2", "saved.json", kSavedGpt2Json);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->model().config().vocab_size(), 256);
  EXPECT_EQ(saved->model().config().n_inner(), 256);
  EXPECT_DOUBLE_EQ(saved->model().config().attn_pdrop(), 0.0);

  // A file may leave out what Hugging Face defaults: the dropouts (0.1) and epsilon (1e-5).
  absl::StatusOr<v1::JobSpec> minimal = WithFile(
      "gpt2", "min.json",
      R"({"vocab_size": 256, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4})");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  EXPECT_DOUBLE_EQ(minimal->model().config().layer_norm_epsilon(), 1e-5);
  EXPECT_DOUBLE_EQ(minimal->model().config().embd_pdrop(), 0.1);
  EXPECT_DOUBLE_EQ(minimal->model().config().attn_pdrop(), 0.1);
  EXPECT_DOUBLE_EQ(minimal->model().config().resid_pdrop(), 0.1);

  // Read directly, and from an absolute path.
  absl::StatusOr<v1::TransformerConfig> direct =
      LoadTransformerConfigFile("gpt2", Path("gpt2.json"));
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->n_embd(), 768);
  absl::StatusOr<v1::JobSpec> absolute =
      WithFile("gpt2", "gpt2.json", kHfGpt2Json,
               {{"config_file: gpt2.json", "config_file: " + Path("gpt2.json")}});
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(absolute->model().config_file(), Path("gpt2.json"));
}

TEST_F(TransformerSpecTest, ReadsHuggingFaceLlamaConfigFilesAsIs) {
  absl::StatusOr<v1::JobSpec> llama2 = WithFile("llama", "llama2.json", kLlama2Json);
  ASSERT_TRUE(llama2.ok()) << llama2.status();
  const v1::TransformerConfig& c = llama2->model().config();
  EXPECT_EQ(c.vocab_size(), 32000);
  EXPECT_EQ(c.hidden_size(), 4096);
  EXPECT_EQ(c.intermediate_size(), 11008);
  EXPECT_EQ(c.num_hidden_layers(), 32);
  EXPECT_EQ(c.num_attention_heads(), 32);
  EXPECT_EQ(c.num_key_value_heads(), 32);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta(), 10000.0);  // absent: HF's default
  EXPECT_EQ(c.max_position_embeddings(), 4096);
  EXPECT_FALSE(c.tie_word_embeddings());
  EXPECT_DOUBLE_EQ(c.attention_dropout(), 0.0);  // absent: HF's default

  absl::StatusOr<v1::JobSpec> tiny = WithFile("llama", "tiny.json", kTinyLlamaJson);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->model().config().num_key_value_heads(), 4);
  EXPECT_EQ(tiny->model().config().num_hidden_layers(), 22);
  EXPECT_DOUBLE_EQ(tiny->model().config().rope_theta(), 10000.0);

  absl::StatusOr<v1::JobSpec> llama3 = WithFile("llama", "llama3.json", kLlama3Json);
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->model().config().num_key_value_heads(), 8);
  EXPECT_EQ(llama3->model().config().vocab_size(), 128256);
  EXPECT_DOUBLE_EQ(llama3->model().config().rope_theta(), 500000.0);

  // num_key_value_heads absent (or null): num_attention_heads, as Hugging Face defaults it.
  absl::StatusOr<v1::JobSpec> mha = WithFile(
      "llama", "mha.json",
      absl::StrReplaceAll(kTinyLlamaJson,
                          {{"\"num_key_value_heads\": 4", "\"num_key_value_heads\": null"}}));
  ASSERT_TRUE(mha.ok()) << mha.status();
  EXPECT_EQ(mha->model().config().num_key_value_heads(), 32);
}

// Qwen/Qwen2.5-0.5B's config.json, as published (sliding window off, its window keys present).
constexpr char kQwen2Json[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

TEST_F(TransformerSpecTest, ReadsQwen2FromTheSpecAndItsConfigFilesAsIs) {
  absl::StatusOr<v1::JobSpec> spec = Llama({{"arch: llama", "arch: qwen2"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().arch(), "qwen2");
  EXPECT_EQ(spec->model().config().num_key_value_heads(), 2);

  absl::StatusOr<v1::JobSpec> qwen = WithFile("qwen2", "qwen2.json", kQwen2Json);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  const v1::TransformerConfig& c = qwen->model().config();
  EXPECT_EQ(c.vocab_size(), 151936);
  EXPECT_EQ(c.hidden_size(), 896);
  EXPECT_EQ(c.num_hidden_layers(), 24);
  EXPECT_EQ(c.num_attention_heads(), 14);
  EXPECT_EQ(c.num_key_value_heads(), 2);
  EXPECT_DOUBLE_EQ(c.rope_theta(), 1000000.0);
  EXPECT_TRUE(c.tie_word_embeddings());
  // The window keys are ignored only while the window is off.
  const std::string on = Error(WithFile(
      "qwen2", "on.json",
      absl::StrReplaceAll(kQwen2Json, {{"\"use_sliding_window\": false",
                                        "\"use_sliding_window\": true"}})));
  EXPECT_THAT(on, HasSubstr(absl::StrCat("model.config_file: ", Path("on.json"),
                                         ": use_sliding_window: true is not supported; Weft "
                                         "implements false (full causal attention in every "
                                         "layer)")));
  EXPECT_THAT(Error(Llama({{"arch: llama", "arch: qwen2"},
                           {"attention_dropout: 0.0",
                            "attention_dropout: 0.0, use_sliding_window: true"}})),
              HasSubstr("model.config.use_sliding_window: true is not supported"));
  // transformers 4.53 on write layer_types, one per layer (seen from transformers 5.17's
  // save_pretrained on a GPU node): all "full_attention" is what Weft implements.
  std::string types = "[";
  for (int i = 0; i < 24; ++i) types += i == 0 ? "\"full_attention\"" : ", \"full_attention\"";
  types += "]";
  auto with_types = [&](const std::string& list) {
    return absl::StrReplaceAll(kQwen2Json, {{"\"use_sliding_window\": false",
                                             "\"use_sliding_window\": false, \"layer_types\": " +
                                                 list}});
  };
  EXPECT_TRUE(WithFile("qwen2", "types.json", with_types(types)).ok());
  EXPECT_TRUE(WithFile("qwen2", "null_types.json", with_types("null")).ok());
  std::string sliding = types;
  sliding.replace(sliding.rfind("full_attention"), 14, "sliding_attention");
  EXPECT_THAT(Error(WithFile("qwen2", "sliding.json", with_types(sliding))),
              HasSubstr("layer_types[23]: a string (not shown) is not supported; Weft implements "
                        "\"full_attention\" (sliding-window attention is not implemented)"));
  EXPECT_THAT(Error(WithFile("qwen2", "short.json", with_types("[\"full_attention\"]"))),
              HasSubstr("layer_types: has 1 entries for 24 layers (num_hidden_layers)"));
  EXPECT_THAT(Error(WithFile("qwen2", "scalar.json", with_types("3"))),
              HasSubstr("layer_types: expected a list of \"full_attention\", one per layer, got "
                        "a scalar"));
  // Qwen2Config's num_key_value_heads defaults to 32, not to the heads: a file must give it.
  EXPECT_THAT(Error(WithFile("qwen2", "kv.json",
                             absl::StrReplaceAll(kQwen2Json,
                                                 {{"\"num_key_value_heads\": 2,", ""}}))),
              HasSubstr("num_key_value_heads: missing (a qwen2 config.json needs "));
  // Llama's bias switches are not Qwen2's keys: its q/k/v biases are always there.
  EXPECT_THAT(Error(Llama({{"arch: llama", "arch: qwen2"},
                           {"attention_dropout: 0.0",
                            "attention_dropout: 0.0, attention_bias: false"}})),
              HasSubstr("model.config: unknown key \"attention_bias\" for qwen2; known: "));
  // A config.json of another architecture.
  EXPECT_THAT(Error(WithFile("qwen2", "l.json",
                             absl::StrReplaceAll(kQwen2Json, {{"\"model_type\": \"qwen2\"",
                                                               "\"model_type\": \"llama\""}}))),
              HasSubstr("model_type: \"llama\" does not match model.arch qwen2"));
}

TEST_F(TransformerSpecTest, MissingKeysAreErrorsNamingThem) {
  const std::string gpt2_needs =
      "missing (gpt2 needs vocab_size, n_positions, n_embd, n_layer, n_head, layer_norm_epsilon, "
      "embd_pdrop, attn_pdrop, resid_pdrop)";
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"vocab_size: 256, ", "vocab_size"},
           {"n_positions: 64, ", "n_positions"},
           {"n_embd: 64, ", "n_embd"},
           {"n_layer: 2, ", "n_layer"},
           {"n_head: 4,", "n_head"},
           {"layer_norm_epsilon: 1.0e-5, ", "layer_norm_epsilon"},
           {"embd_pdrop: 0.0, ", "embd_pdrop"},
           {"attn_pdrop: 0.0, ", "attn_pdrop"},
           {", resid_pdrop: 0.0", "resid_pdrop"},
       }) {
    // Named with the line of the config mapping.
    EXPECT_EQ(Error(Gpt2({{text, ""}})),
              absl::StrCat("model.config.", key, ": ", gpt2_needs, " (line 6, column 11)"));
  }
  // In the spec, the keys a config file may leave to Hugging Face's defaults are required too.
  const std::string llama_needs =
      "missing (llama needs vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
      "num_attention_heads, num_key_value_heads, rms_norm_eps, rope_theta, "
      "max_position_embeddings, tie_word_embeddings, attention_dropout)";
  EXPECT_THAT(Error(Llama({{"num_key_value_heads: 2,", ""}})),
              HasSubstr("model.config.num_key_value_heads: " + llama_needs));
  EXPECT_THAT(Error(Llama({{"rope_theta: 500000.0,", ""}})),
              HasSubstr("model.config.rope_theta: " + llama_needs));
  EXPECT_THAT(Error(Llama({{"tie_word_embeddings: true,", ""}})),
              HasSubstr("model.config.tie_word_embeddings: " + llama_needs));
  EXPECT_THAT(Error(Llama({{", attention_dropout: 0.0", ""}})),
              HasSubstr("model.config.attention_dropout: " + llama_needs));
  // null is absent.
  EXPECT_THAT(Error(Gpt2({{"n_head: 4", "n_head: null"}})),
              HasSubstr("model.config.n_head: " + gpt2_needs));

  // In a file, only what Hugging Face does not default.
  EXPECT_EQ(Error(WithFile(
                "llama", "l.json",
                absl::StrReplaceAll(kTinyLlamaJson, {{"\"max_position_embeddings\": 2048,", ""}}))),
            absl::StrCat("model.config_file: ", Path("l.json"),
                         ": max_position_embeddings: missing (a llama config.json needs "
                         "vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
                         "num_attention_heads, rms_norm_eps, max_position_embeddings; Hugging "
                         "Face's defaults fill num_key_value_heads, rope_theta, "
                         "tie_word_embeddings, attention_dropout)"));
  EXPECT_EQ(Error(WithFile("gpt2", "g.json",
                           absl::StrReplaceAll(kHfGpt2Json, {{"\"n_head\": 12,", ""}}))),
            absl::StrCat("model.config_file: ", Path("g.json"),
                         ": n_head: missing (a gpt2 config.json needs vocab_size, n_positions, "
                         "n_embd, n_layer, n_head; Hugging Face's defaults fill "
                         "layer_norm_epsilon, embd_pdrop, attn_pdrop, resid_pdrop)"));
}

TEST_F(TransformerSpecTest, UnknownKeysAreErrorsListingTheKnownOnes) {
  const std::string message = Error(Gpt2({{"n_embd: 64", "n_embed: 64"}}));
  EXPECT_THAT(message,
              HasSubstr("model.config: unknown key \"n_embed\" for gpt2; known: vocab_size, "
                        "n_positions, n_embd, n_layer, n_head, layer_norm_epsilon, embd_pdrop, "
                        "attn_pdrop, resid_pdrop, n_inner; Hugging Face's, accepted at the value "
                        "Weft implements: model_type, activation_function, scale_attn_weights, "
                        "scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, "
                        "add_cross_attention, tie_word_embeddings, n_ctx; Hugging Face "
                        "metadata, ignored: architectures, torch_dtype, dtype, "
                        "transformers_version, _name_or_path, bos_token_id, eos_token_id, "
                        "pad_token_id, initializer_range, use_cache, gradient_checkpointing, "
                        "output_attentions, output_hidden_states, return_dict, summary_type, "
                        "summary_use_proj, summary_activation, summary_proj_to_labels, "
                        "summary_first_dropout, task_specific_params (line 6, column 46)"));
  // A llama key is not a gpt2 key.
  EXPECT_THAT(Error(Gpt2({{"n_embd: 64", "n_embd: 64, hidden_size: 64"}})),
              HasSubstr("model.config: unknown key \"hidden_size\" for gpt2; known: vocab_size"));
  EXPECT_THAT(
      Error(Llama({{"rope_theta:", "rope_thetta:"}})),
      HasSubstr("model.config: unknown key \"rope_thetta\" for llama; known: vocab_size, "
                "hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                "num_key_value_heads, rms_norm_eps, rope_theta, max_position_embeddings, "
                "tie_word_embeddings, attention_dropout; Hugging Face's, accepted at the "
                "value Weft implements: model_type, hidden_act, rope_scaling, attention_bias, "
                "mlp_bias, pretraining_tp, head_dim, rope_parameters; Hugging Face "
                "metadata, ignored: architectures,"));
  EXPECT_THAT(Error(WithFile(
                  "llama", "l.json",
                  absl::StrReplaceAll(kTinyLlamaJson, {{"\"use_cache\"", "\"sliding_window\""}}))),
              HasSubstr(absl::StrCat("model.config_file: ", Path("l.json"),
                                     ": unknown key \"sliding_window\" for llama; known: ")));
}

TEST_F(TransformerSpecTest, WrongTypesAndValuesAreErrorsNamingTheKey) {
  struct Case {
    Replace replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"n_head: 4", "n_head: \"4\""}},
            "model.config.n_head: expected an integer, got \"4\""},
           {{{"n_head: 4", "n_head: four"}},
            "model.config.n_head: expected an integer, got \"four\""},
           {{{"n_head: 4", "n_head: 1.5"}}, "model.config.n_head: expected an integer, got 1.5"},
           {{{"n_head: 4", "n_head: true"}}, "model.config.n_head: expected an integer, got true"},
           {{{"n_head: 4", "n_head: [4]"}}, "model.config.n_head: expected an integer, got [4]"},
           {{{"n_embd: 64", "n_embd: 0"}}, "model.config.n_embd: must be > 0, got 0"},
           {{{"n_layer: 2", "n_layer: -1"}}, "model.config.n_layer: must be > 0, got -1"},
           {{{"n_layer: 2", "n_layer: 257"}}, "model.config.n_layer: 257 blocks; at most 256"},
           {{{"vocab_size: 256", "vocab_size: 0"}}, "model.config.vocab_size: must be > 0, got 0"},
           {{{"n_positions: 64", "n_positions: -64"}},
            "model.config.n_positions: must be > 0, got -64"},
           {{{"n_head: 4", "n_head: 5"}},
            "model.config.n_head: 5 does not divide n_embd 64 (every head takes n_embd / n_head "
            "features)"},
           {{{"attn_pdrop: 0.0", "attn_pdrop: 1.0"}},
            "model.config.attn_pdrop: must be in [0, 1), got 1"},
           {{{"embd_pdrop: 0.0", "embd_pdrop: -0.1"}},
            "model.config.embd_pdrop: must be in [0, 1), got -0.1"},
           {{{"resid_pdrop: 0.0", "resid_pdrop: high"}},
            "model.config.resid_pdrop: expected a number, got \"high\""},
           {{{"layer_norm_epsilon: 1.0e-5", "layer_norm_epsilon: 0"}},
            "model.config.layer_norm_epsilon: must be a finite number > 0, got 0"},
           {{{"layer_norm_epsilon: 1.0e-5", "layer_norm_epsilon: -1e-5"}},
            "model.config.layer_norm_epsilon: must be a finite number > 0, got -1e-05"},
           {{{"resid_pdrop: 0.0", "resid_pdrop: 0.0, n_inner: 0"}},
            "model.config.n_inner: must be > 0 (or null: 4 * n_embd), got 0"},
           {{{"n_head: 4", "n_head: 99999999999999999999"}},
            "model.config.n_head: expected an integer, got 1e+20"},
       }) {
    const std::string message = Error(Gpt2(c.replace));
    EXPECT_THAT(message, HasSubstr(c.message + " (line ")) << c.replace[0].second;
  }
  for (const Case& c : std::vector<Case>{
           {{{"num_key_value_heads: 2", "num_key_value_heads: 3"}},
            "model.config.num_key_value_heads: 3 does not divide num_attention_heads 4 (each "
            "key/value head serves num_attention_heads / num_key_value_heads query heads)"},
           {{{"num_attention_heads: 4", "num_attention_heads: 3"},
             {"num_key_value_heads: 2", "num_key_value_heads: 1"}},
            "model.config.num_attention_heads: 3 does not divide hidden_size 64 (every head "
            "takes hidden_size / num_attention_heads features)"},
           {{{"hidden_size: 64", "hidden_size: 12"}},
            "model.config.hidden_size: head_dim = hidden_size / num_attention_heads = 12 / 4 = 3 "
            "is odd; rotary embeddings rotate pairs of features"},
           {{{"rms_norm_eps: 1.0e-6", "rms_norm_eps: 0.0"}},
            "model.config.rms_norm_eps: must be a finite number > 0, got 0"},
           {{{"rope_theta: 500000.0", "rope_theta: -1"}},
            "model.config.rope_theta: must be a finite number > 0, got -1"},
           {{{"tie_word_embeddings: true", "tie_word_embeddings: 1"}},
            "model.config.tie_word_embeddings: expected true or false, got 1"},
           {{{"attention_dropout: 0.0", "attention_dropout: 1.5"}},
            "model.config.attention_dropout: must be in [0, 1), got 1.5"},
           {{{"max_position_embeddings: 128", "max_position_embeddings: 0"}},
            "model.config.max_position_embeddings: must be > 0, got 0"},
           {{{"intermediate_size: 172", "intermediate_size: 17.2"}},
            "model.config.intermediate_size: expected an integer, got 17.2"},
       }) {
    const std::string message = Error(Llama(c.replace));
    EXPECT_THAT(message, HasSubstr(c.message + " (line ")) << c.replace[0].second;
  }
  // The same in a file, named by the file.
  EXPECT_EQ(
      Error(WithFile("gpt2", "g.json",
                     absl::StrReplaceAll(kHfGpt2Json, {{"\"n_head\": 12", "\"n_head\": \"12\""}}))),
      absl::StrCat("model.config_file: ", Path("g.json"),
                   ": n_head: expected an integer, got a string (not shown)"));
  EXPECT_EQ(
      Error(WithFile("gpt2", "g.json",
                     absl::StrReplaceAll(kHfGpt2Json, {{"\"n_head\": 12", "\"n_head\": 12.0"}}))),
      absl::StrCat("model.config_file: ", Path("g.json"),
                   ": n_head: expected an integer, got 12.0"));
  EXPECT_EQ(
      Error(WithFile("gpt2", "g.json",
                     absl::StrReplaceAll(kHfGpt2Json, {{"\"n_head\": 12", "\"n_head\": 7"}}))),
      absl::StrCat("model.config_file: ", Path("g.json"),
                   ": n_head: 7 does not divide n_embd 768 (every head takes n_embd / n_head "
                   "features)"));
  EXPECT_EQ(Error(WithFile("llama", "l.json",
                           absl::StrReplaceAll(kTinyLlamaJson, {{"\"rms_norm_eps\": 1e-05",
                                                                 "\"rms_norm_eps\": 0"}}))),
            absl::StrCat("model.config_file: ", Path("l.json"),
                         ": rms_norm_eps: must be a finite number > 0, got 0"));
}

// model.config_file may name any JSON file the cluster can read: its string values are never
// quoted in an error, nor its keys unless they read as config keys (a credentials file's secret
// does not come back to the client).
TEST_F(TransformerSpecTest, AConfigFilesValuesAreNeverQuoted) {
  const std::string secret = "AKIA-SECRET-KEY-123";
  const std::string message = Error(WithFile(
      "gpt2", "secrets.json",
      absl::StrCat(R"({"aws secret access key": ")", secret, R"(", "token": ")", secret, R"("})")));
  EXPECT_THAT(message, Not(HasSubstr(secret))) << message;
  EXPECT_THAT(message, HasSubstr("unknown key (a key that is not an identifier) for gpt2"));
  const std::string typed = Error(WithFile(
      "gpt2", "g.json", absl::StrReplaceAll(kHfGpt2Json, {{"\"n_head\": 12",
                                                           "\"n_head\": \"" + secret + "\""}})));
  EXPECT_THAT(typed, Not(HasSubstr(secret))) << typed;
  EXPECT_THAT(typed, HasSubstr("n_head: expected an integer, got a string (not shown)"));
  // A spec's own config: its values are the user's own, and shown.
  EXPECT_THAT(Error(Gpt2({{"resid_pdrop: 0.0", "resid_pdrop: high"}})),
              HasSubstr("expected a number, got \"high\""));
}

TEST_F(TransformerSpecTest, KeysThatChangeTheMathAreAcceptedOnlyAtWeftsValue) {
  struct Case {
    std::string from, to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"\"activation_function\": \"gelu_new\"", "\"activation_function\": \"relu\"",
            "activation_function: a string (not shown) is not supported; Weft implements "
            "\"gelu_new\" or \"gelu_pytorch_tanh\" (GELU's tanh approximation)"},
           {"\"activation_function\": \"gelu_new\"", "\"activation_function\": true",
            "activation_function: expected a string, got true"},
           {"\"scale_attn_weights\": true", "\"scale_attn_weights\": false",
            "scale_attn_weights: false is not supported; Weft implements true (scores divided by "
            "sqrt(head_dim))"},
           {"\"scale_attn_by_inverse_layer_idx\": false",
            "\"scale_attn_by_inverse_layer_idx\": true",
            "scale_attn_by_inverse_layer_idx: true is not supported; Weft implements false"},
           {"\"reorder_and_upcast_attn\": false", "\"reorder_and_upcast_attn\": true",
            "reorder_and_upcast_attn: true is not supported; Weft implements false"},
           {"\"add_cross_attention\": false", "\"add_cross_attention\": true",
            "add_cross_attention: true is not supported; Weft implements false (a decoder-only "
            "model)"},
           {"\"add_cross_attention\": false", "\"add_cross_attention\": \"no\"",
            "add_cross_attention: expected true or false, got a string (not shown)"},
           {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false",
            "tie_word_embeddings: false is not supported; Weft implements true (the LM head is "
            "wte)"},
           {"\"n_ctx\": 64", "\"n_ctx\": 128",
            "n_ctx: 128 is not supported; Weft implements n_ctx = n_positions = 64 (n_positions "
            "sizes the position table and the causal mask)"},
           {"\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"",
            "model_type: \"llama\" does not match model.arch gpt2: this config is for another "
            "architecture"},
       }) {
    EXPECT_EQ(
        Error(WithFile("gpt2", "g.json", absl::StrReplaceAll(kSavedGpt2Json, {{c.from, c.to}}))),
        absl::StrCat("model.config_file: ", Path("g.json"), ": ", c.message));
  }
  for (const Case& c : std::vector<Case>{
           {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
            "hidden_act: a string (not shown) is not supported; Weft implements \"silu\" (the "
            "SwiGLU MLP)"},
           {"\"rope_scaling\": null",
            "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\"}",
            "rope_scaling: a mapping is not supported; Weft implements null (no rope scaling)"},
           {"\"attention_bias\": false", "\"attention_bias\": true",
            "attention_bias: true is not supported; Weft implements false"},
           {"\"mlp_bias\": false", "\"mlp_bias\": true",
            "mlp_bias: true is not supported; Weft implements false"},
           {"\"pretraining_tp\": 1", "\"pretraining_tp\": 2",
            "pretraining_tp: 2 is not supported; Weft implements 1"},
           {"\"head_dim\": 128", "\"head_dim\": 64",
            "head_dim: 64 is not supported; Weft implements hidden_size / num_attention_heads = "
            "4096 / 32 = 128 (or null)"},
           {"\"model_type\": \"llama\"", "\"model_type\": \"mistral\"",
            "model_type: \"mistral\" does not match model.arch llama: this config is for another "
            "architecture"},
       }) {
    EXPECT_EQ(
        Error(WithFile("llama", "l.json", absl::StrReplaceAll(kLlama3Json, {{c.from, c.to}}))),
        absl::StrCat("model.config_file: ", Path("l.json"), ": ", c.message));
  }
  // The accepted values load; head_dim null is hidden_size / num_attention_heads.
  EXPECT_TRUE(
      WithFile("gpt2", "g.json",
               absl::StrReplaceAll(kSavedGpt2Json, {{"\"gelu_new\"", "\"gelu_pytorch_tanh\""}}))
          .ok());
  EXPECT_TRUE(
      WithFile("llama", "l.json",
               absl::StrReplaceAll(kLlama3Json, {{"\"head_dim\": 128", "\"head_dim\": null"}}))
          .ok());

  // In the spec too, with the line.
  EXPECT_THAT(Error(Gpt2({{"n_head: 4,", "n_head: 4, activation_function: gelu,"}})),
              HasSubstr("model.config.activation_function: \"gelu\" is not supported; Weft "
                        "implements \"gelu_new\" or \"gelu_pytorch_tanh\" (GELU's tanh "
                        "approximation) (line 6, column "));
  EXPECT_THAT(Error(Llama({{"rope_theta: 500000.0,",
                            "rope_parameters: {rope_type: yarn, rope_theta: 1000.0},"}})),
              HasSubstr("model.config.rope_parameters.rope_type: \"yarn\" is not supported; Weft "
                        "implements \"default\" (no rope scaling)"));
  EXPECT_THAT(
      Error(Llama({{"rope_theta: 500000.0,",
                    "rope_parameters: {rope_type: default, factor: 2.0, rope_theta: 1.0},"}})),
      HasSubstr("model.config.rope_parameters: unknown key \"factor\"; Weft implements "
                "rope_type default (no rope scaling), read with rope_theta"));
  EXPECT_THAT(Error(Llama({{"rope_theta: 500000.0,",
                            "rope_theta: 500000.0, rope_parameters: {rope_theta: 1000.0},"}})),
              HasSubstr("model.config.rope_parameters.rope_theta: 1000 differs from rope_theta "
                        "500000"));
}

TEST_F(TransformerSpecTest, ConfigFileErrorsNameTheFile) {
  EXPECT_EQ(Error(Gpt2({{absl::StrCat("config: ", kGpt2Config), "config_file: nope.json"}})),
            absl::StrCat("model.config_file: ", Path("nope.json"), ": no such file"));
  EXPECT_THAT(Error(WithFile("gpt2", "bad.json", "{\"vocab_size\": 256,")),
              HasSubstr(absl::StrCat("model.config_file: ", Path("bad.json"),
                                     ": not valid JSON (a syntax error at byte ")));
  EXPECT_EQ(Error(WithFile("gpt2", "list.json", "[1, 2]")),
            absl::StrCat("model.config_file: ", Path("list.json"),
                         ": expected a mapping of gpt2 config keys, got a list"));
  std::filesystem::create_directories(Path("folder"));
  EXPECT_EQ(Error(Gpt2({{absl::StrCat("config: ", kGpt2Config), "config_file: folder"}})),
            absl::StrCat("model.config_file: ", Path("folder"),
                         ": is a directory, not a Hugging Face config.json"));
  // LoadJobSpecFile adds the spec's own path.
  WriteText("job.yaml", absl::StrReplaceAll(kGpt2Spec, {{absl::StrCat("config: ", kGpt2Config),
                                                         "config_file: nope.json"}}));
  absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(Path("job.yaml"));
  EXPECT_EQ(
      loaded.status().message(),
      absl::StrCat(Path("job.yaml"), ": model.config_file: ", Path("nope.json"), ": no such file"));
}

TEST_F(TransformerSpecTest, ModelStructureErrors) {
  const std::string config = absl::StrCat("config: ", kGpt2Config);
  struct Case {
    Replace replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"arch: gpt2", "arch: bert"}},
            "model.arch: unknown arch \"bert\"; known: gpt2, llama, qwen2 (line 5, column 9)"},
           {{{"arch: gpt2", "arch: gpt2\n  layers: [{name: fc0, type: relu}]"}},
            "model.layers: not allowed with model.arch (a transformer's layers come from its "
            "config) (line 6"},
           {{{config, config + "\n  config_file: config.json"}},
            "model.config_file: not allowed with model.config: give the config or a Hugging Face "
            "config.json, not both (line 8"},
           {{{config, ""}},
            "model.config: is required with model.arch (gpt2's Hugging Face config keys), or "
            "model.config_file: a config.json (line 5, column 3)"},
           {{{config, "config: [1, 2]"}},
            "model.config: expected a mapping of gpt2 config keys, got a list (line 6"},
           {{{config, "config_file: \"\""}}, "model.config_file: must not be empty"},
           {{{"arch: gpt2", "layers: [{name: fc0, type: relu}]"}},
            "model.config: only with model.arch (a transformer: gpt2, llama, qwen2) (line 6"},
           {{{"arch: gpt2", "layers: [{name: fc0, type: relu}]"}, {config, ""}},
            "model.placements: only with model.arch (a transformer: gpt2, llama, qwen2); a layers model "
            "places its parameters per layer (model.layers[i].placements) (line 7"},
           {{{"arch: gpt2", "loss: mse"},
             {config, ""},
             {"placements: {\"h.*.mlp.c_fc.weight\": {mp: Shard(1)}}", ""}},
            "model.layers: is required (or model.arch: a transformer, gpt2, llama, qwen2) (line 5"},
           {{{"arch: gpt2", "arch: gpt2\n  loss: mse"}},
            "model.loss: unknown loss \"mse\" for a transformer (model.arch); known: "
            "cross_entropy"},
           {{{"n_head: 4,", "n_head: 4, n_head: 4,"}}, "model.config: duplicate key \"n_head\""},
       }) {
    EXPECT_THAT(Error(Gpt2(c.replace)), HasSubstr(c.message)) << c.replace[0].second;
  }
}

TEST_F(TransformerSpecTest, PlacementPatterns) {
  EXPECT_TRUE(ValidateParamPattern("h.*.mlp.c_fc.weight").ok());
  EXPECT_TRUE(ValidateParamPattern("wte.weight").ok());
  EXPECT_TRUE(ValidateParamPattern("model.layers.*.self_attn.q_proj.weight").ok());
  EXPECT_TRUE(ValidateParamPattern("*").ok());
  EXPECT_TRUE(MatchesParamPattern("h.*.mlp.c_fc.weight", "h.0.mlp.c_fc.weight"));
  EXPECT_TRUE(MatchesParamPattern("h.*.mlp.c_fc.weight", "h.11.mlp.c_fc.weight"));
  EXPECT_TRUE(MatchesParamPattern("*.*", "wte.weight"));
  EXPECT_FALSE(MatchesParamPattern("h.*.mlp.c_fc.weight", "h.0.1.mlp.c_fc.weight"));
  EXPECT_FALSE(MatchesParamPattern("h.*.mlp.c_fc.weight", "h.0.mlp.c_fc.bias"));
  EXPECT_FALSE(MatchesParamPattern("h.*.mlp.c_fc.weight", "h.mlp.c_fc.weight"));
  EXPECT_FALSE(MatchesParamPattern("wte.weight", "wte.weight.x"));
  EXPECT_FALSE(MatchesParamPattern("h.*", "h."));

  const std::string pattern = "\"h.*.mlp.c_fc.weight\": {mp: Shard(1)}";
  struct Case {
    std::string to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"\"h..mlp\": [Replicate(), Shard(1)]",
            "model.placements[\"h..mlp\"]: malformed pattern: an empty name part (a leading, "
            "trailing or doubled dot); parts are separated by single dots (e.g. "
            "h.*.mlp.c_fc.weight) (line 8"},
           {"\".h\": [Replicate(), Shard(1)]",
            "model.placements[\".h\"]: malformed pattern: an empty name part"},
           {"\"h.\": [Replicate(), Shard(1)]",
            "model.placements[\"h.\"]: malformed pattern: an empty name part"},
           {"\"\": [Replicate(), Shard(1)]",
            "model.placements[\"\"]: malformed pattern: empty; a pattern is a parameter name, "
            "dot-separated, where * stands for one whole name part (e.g. h.*.mlp.c_fc.weight)"},
           {"\"h.1*.mlp\": [Replicate(), Shard(1)]",
            "model.placements[\"h.1*.mlp\"]: malformed pattern: \"1*\" mixes * with other "
            "characters; * stands for one whole name part (e.g. h.*.mlp.c_fc.weight)"},
           {"\"h.**.mlp\": [Replicate(), Shard(1)]",
            "model.placements[\"h.**.mlp\"]: malformed pattern: \"**\" mixes * with other "
            "characters"},
           {"\"h.0.attn weight\": [Replicate(), Shard(1)]",
            "model.placements[\"h.0.attn weight\"]: malformed pattern: \"attn weight\" has ' '; "
            "name parts are letters, digits and _ (e.g. h.*.mlp.c_fc.weight)"},
           {"\"h.*.mlp.c_fc.weight\": {tp: Shard(1)}",
            "model.placements[\"h.*.mlp.c_fc.weight\"].tp: Shard(1) on mesh dim \"tp\": the mesh "
            "has no dim named tp (dims: dp, mp)"},
           {"\"h.*.mlp.c_fc.weight\": {mp: Shard(x)}",
            "model.placements[\"h.*.mlp.c_fc.weight\"].mp: invalid placement"},
           {"\"h.*.mlp.c_fc.weight\": [Replicate(), Shard(x)]",
            "model.placements[\"h.*.mlp.c_fc.weight\"][1]: invalid placement"},
           {pattern + ", " + pattern,
            "model.placements: duplicate pattern \"h.*.mlp.c_fc.weight\""},
       }) {
    EXPECT_THAT(Error(Gpt2({{pattern, c.to}})), HasSubstr(c.message)) << c.to;
  }
  EXPECT_THAT(Error(Gpt2({{"{" + pattern + "}", "[Shard(1)]"}})),
              HasSubstr("model.placements: expected a mapping {parameter name pattern: "
                        "placements}, got a list"));
}

TEST_F(TransformerSpecTest, MegatronPlanParsingAndErrors) {
  // sequence_parallel: false is written as given; either way the entry is left to the planner.
  absl::StatusOr<v1::JobSpec> off = Gpt2({{"sequence_parallel: true", "sequence_parallel: false"}});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->parallelize().at("mp").sequence_parallel());
  EXPECT_EQ(off->parallelize().at("mp").preset(), "megatron");
  v1::JobSpec again = *off;
  ASSERT_TRUE(ApplyParallelize(&again).ok());
  EXPECT_EQ(again.SerializeAsString(), off->SerializeAsString());

  struct Case {
    Replace replace;
    std::string message;
  };
  const std::string entry = "mp: {dim: mp, plan: megatron, sequence_parallel: true}";
  for (const Case& c : std::vector<Case>{
           {{{"plan: megatron", "plan: magatron"}},
            "parallelize.mp.plan: unknown plan \"magatron\"; known: megatron, or a mapping "
            "{layer: ColWiseParallel | RowWiseParallel}"},
           {{{"plan: megatron", "plan: [megatron]"}},
            "parallelize.mp.plan: expected megatron (a transformer's plan) or a mapping {layer: "
            "ColWiseParallel | RowWiseParallel}, got a list (line 18"},
           {{{"sequence_parallel: true", "sequence_parallel: maybe"}},
            "parallelize.mp.sequence_parallel: expected true or false, got \"maybe\" (line 18"},
           {{{"dim: mp, plan: megatron", "dim: tp, plan: megatron"}},
            "parallelize.mp.dim: the mesh has no dim named \"tp\" (dims: dp, mp)"},
           {{{"plan: megatron", "plan: {fc0: ColWiseParallel}"}},
            "parallelize.mp.sequence_parallel: only with plan: megatron (per-layer styles have no "
            "sequence-parallel regions) (line 18"},
           {{{"plan: megatron, sequence_parallel: true", "plan: {c_fc: ColWiseParallel}"}},
            "parallelize.mp.plan: per-layer styles name layers of model.layers; a transformer "
            "(model.arch gpt2) takes plan: megatron, or model.placements by parameter name "
            "pattern"},
           {{{entry, entry + "\n  tp: {dim: dp, plan: megatron}"}},
            "parallelize.tp.plan: megatron again; parallelize.mp already applies it (on mesh dim "
            "mp): a model takes one tensor-parallel plan"},
       }) {
    EXPECT_THAT(Error(Gpt2(c.replace)), HasSubstr(c.message)) << c.replace[0].second;
  }

  // megatron on a layers model.
  absl::StatusOr<v1::JobSpec> layers = ParseJobSpecYaml(
      absl::StrReplaceAll(kDpMpParallelize, {{"plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}",
                                              "plan: megatron"}}),
      dir_);
  EXPECT_EQ(Error(layers),
            "parallelize.mp.plan: megatron needs a transformer (model.arch: gpt2, llama, qwen2); a "
            "layers model names its layers: {layer: ColWiseParallel | RowWiseParallel}");

  // The same checks for a spec that arrives over gRPC.
  absl::StatusOr<v1::JobSpec> spec = Gpt2();
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec both = *spec;
  (*(*both.mutable_parallelize())["mp"].mutable_plan())["c_fc"] = "ColWiseParallel";
  EXPECT_EQ(ApplyParallelize(&both).message(),
            "parallelize.mp.plan: megatron and per-layer styles together; give one or the other");
  v1::JobSpec sp_only = *spec;
  (*sp_only.mutable_parallelize())["mp"].clear_preset();
  EXPECT_EQ(ApplyParallelize(&sp_only).message(),
            "parallelize.mp.sequence_parallel: only with plan: megatron (per-layer styles have no "
            "sequence-parallel regions)");
}

TEST_F(TransformerSpecTest, SpecsFromGrpcGetTheSameModelChecks) {
  absl::StatusOr<v1::JobSpec> spec = Gpt2();
  ASSERT_TRUE(spec.ok()) << spec.status();

  // Defaults: the transformer's loss, and n_inner 0 as 4 * n_embd.
  v1::JobSpec grpc = *spec;
  grpc.mutable_model()->clear_loss();
  grpc.mutable_model()->mutable_config()->clear_n_inner();
  ApplyJobSpecDefaults(&grpc);
  EXPECT_EQ(grpc.model().loss(), "cross_entropy");
  EXPECT_EQ(grpc.model().config().n_inner(), 256);
  v1::JobSpec layers_default;
  ApplyJobSpecDefaults(&layers_default);
  EXPECT_EQ(layers_default.model().loss(), "mse");

  struct Case {
    std::function<void(v1::Model*)> edit;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {[](v1::Model* m) { m->set_arch("bert"); },
            "model.arch: unknown arch \"bert\"; known: gpt2, llama, qwen2"},
           {[](v1::Model* m) { m->add_layers()->set_name("fc0"); },
            "model.layers: not allowed with model.arch"},
           {[](v1::Model* m) { m->clear_config(); },
            "model.config: is required with model.arch (gpt2's Hugging Face config keys, or "
            "model.config_file: a config.json)"},
           {[](v1::Model* m) { m->mutable_config()->set_n_head(0); },
            "model.config.n_head: must be > 0, got 0"},
           {[](v1::Model* m) { m->mutable_config()->set_n_head(3); },
            "model.config.n_head: 3 does not divide n_embd 64"},
           {[](v1::Model* m) { m->mutable_config()->set_n_inner(-1); },
            "model.config.n_inner: must be > 0 (or null: 4 * n_embd), got -1"},
           {[](v1::Model* m) { m->mutable_config()->set_hidden_size(64); },
            "model.config.hidden_size: is not a gpt2 key; gpt2 reads vocab_size, n_positions, "
            "n_embd, n_layer, n_head, layer_norm_epsilon, embd_pdrop, attn_pdrop, resid_pdrop, "
            "n_inner"},
           {[](v1::Model* m) { m->set_loss("mse"); },
            "model.loss: unknown loss \"mse\" for a transformer (model.arch); known: "
            "cross_entropy"},
           {[](v1::Model* m) { (*m->mutable_placements())["h..x"]; },
            "model.placements[\"h..x\"]: malformed pattern: an empty name part"},
           {[](v1::Model* m) { m->clear_arch(); },
            "model.config: only with model.arch (a transformer: gpt2, llama, qwen2)"},
           {[](v1::Model* m) {
              m->clear_arch();
              m->clear_config();
            },
            "model.placements: only with model.arch (a transformer: gpt2, llama, qwen2); a layers "
            "model places its parameters per layer (model.layers[i].placements)"},
       }) {
    v1::Model model = spec->model();
    c.edit(&model);
    absl::Status s = ValidateTransformerModel(model);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
  v1::TransformerConfig llama;
  llama.set_vocab_size(8);
  EXPECT_EQ(ValidateTransformerConfig("llama", llama).message(),
            "model.config.hidden_size: must be > 0, got 0");

  // A layers model without transformer fields passes.
  absl::StatusOr<v1::JobSpec> layers = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(layers.ok()) << layers.status();
  EXPECT_TRUE(ValidateTransformerModel(layers->model()).ok());
}

// Token data takes the model's vocabulary, so a worker reading an id past it names the file and
// the position (worker/data/batch_source.h) instead of indexing past the embedding table.
TEST_F(TransformerSpecTest, TokenDataTakesTheModelsVocabulary) {
  std::string llmc(1024 + 2 * 41, '\0');
  const int32_t header[3] = {20240520, 1, 41};
  std::memcpy(llmc.data(), header, sizeof(header));
  WriteText("train.bin", llmc);
  const Replace tokens = {
      {"source: synthetic\n  sample_shape: [8]\n  label_shape: [8]\n  num_samples: 32\n",
       "source: tokens\n  path: train.bin\n  seq_len: 8\n"}};
  for (auto [spec, vocab] : std::vector<std::pair<absl::StatusOr<v1::JobSpec>, int64_t>>{
           {Gpt2(tokens), 256}, {Llama(tokens), 512}}) {
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->data().vocab_size(), 0);  // never written in a spec
    ASSERT_TRUE(PrepareJobSpec(&*spec).ok()) << PrepareJobSpec(&*spec);
    EXPECT_EQ(spec->data().vocab_size(), vocab);
    EXPECT_EQ(spec->data().num_samples(), 5);
    // A spec from gRPC that disagrees with its model.
    spec->mutable_data()->set_vocab_size(vocab - 1);
    EXPECT_EQ(ValidateJobSpec(*spec).message(),
              absl::StrCat("data.vocab_size: ", vocab - 1,
                           " does not match model.config.vocab_size ", vocab));
    spec->mutable_data()->set_vocab_size(0);  // unchecked: a spec before ResolveDataShapes
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  }
}

TEST_F(TransformerSpecTest, ReadsJsonObjectsDirectly) {
  // Hugging Face's gpt2 config.json has every key a spec needs.
  absl::StatusOr<v1::TransformerConfig> c = TransformerConfigFromJson(
      "gpt2", nlohmann::json::parse(kHfGpt2Json), ConfigSource::kSpec, "model.config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_embd(), 768);
  const nlohmann::json minimal = nlohmann::json::parse(
      R"({"vocab_size": 256, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4})");
  EXPECT_EQ(TransformerConfigFromJson("gpt2", minimal, ConfigSource::kSpec, "model.config")
                .status()
                .message(),
            "model.config.layer_norm_epsilon: missing (gpt2 needs vocab_size, n_positions, "
            "n_embd, n_layer, n_head, layer_norm_epsilon, embd_pdrop, attn_pdrop, resid_pdrop)");
  EXPECT_TRUE(
      TransformerConfigFromJson("gpt2", minimal, ConfigSource::kFile, "model.config_file: x.json")
          .ok());
  EXPECT_EQ(TransformerConfigFromJson("gpt3", nlohmann::json::object(), ConfigSource::kSpec,
                                      "model.config")
                .status()
                .message(),
            "model.arch: unknown arch \"gpt3\"; known: gpt2, llama, qwen2");
}

TEST_F(TransformerSpecTest, NeverCrashesOnGarbledSpecsOrConfigFiles) {
  std::mt19937 rng(7);
  const std::string punct = "{}[]:,-'\"&*!|>#%@` \n\t\x01\xff.0";
  for (int iter = 0; iter < 2000; ++iter) {
    (void)ParseJobSpecYaml(Garble(kGpt2Spec, punct, &rng), dir_);
    WriteText("g.json", Garble(kLlama3Json, punct, &rng));
    (void)LoadTransformerConfigFile("llama", Path("g.json"));
  }
  // Values nested too deeply to show are named by their kind.
  WriteText("deep.json", absl::StrCat("{\"vocab_size\": ", std::string(100000, '['),
                                      std::string(100000, ']'), "}"));
  EXPECT_EQ(LoadTransformerConfigFile("gpt2", Path("deep.json")).status().message(),
            absl::StrCat("model.config_file: ", Path("deep.json"),
                         ": vocab_size: expected an integer, got a list"));
  // A config that refers back to itself.
  EXPECT_FALSE(Gpt2({{absl::StrCat("config: ", kGpt2Config), "config: &x {vocab_size: *x}"}}).ok());
}

}  // namespace
}  // namespace weft
