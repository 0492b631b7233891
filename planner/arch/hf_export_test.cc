// HfExportMetadataOf on tiny gpt2, llama and qwen2 specs: the file shapes the architectures
// declare, and a config.json that Weft's own config reader (model.config_file) reads back to the
// spec's config, with the keys GPT2Config / LlamaConfig / Qwen2Config need.
#include "planner/arch/hf_export.h"

#include <string>

#include "common/jobspec/defaults.h"
#include "common/jobspec/transformer_config.h"
#include "planner/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::planner {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using testing::Gpt2Spec;
using testing::TokenSpec;

v1::JobSpec LlamaSpec() {
  v1::JobSpec spec = TokenSpec("llama");
  v1::TransformerConfig* c = spec.mutable_model()->mutable_config();
  c->set_vocab_size(16);
  c->set_hidden_size(8);
  c->set_intermediate_size(12);
  c->set_num_hidden_layers(1);
  c->set_num_attention_heads(4);
  c->set_num_key_value_heads(2);
  c->set_rms_norm_eps(1e-6);
  c->set_rope_theta(10000);
  c->set_max_position_embeddings(8);
  c->set_tie_word_embeddings(false);
  return spec;
}

// The config.json text read back as Weft reads a `model.config_file`.
void ExpectReadsBack(const v1::JobSpec& spec, const std::string& text) {
  absl::StatusOr<v1::TransformerConfig> back = TransformerConfigFromJson(
      spec.model().arch(), json::parse(text), ConfigSource::kFile, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, spec.model().config()))
      << back->DebugString() << " vs " << spec.model().config().DebugString();
}

TEST(HfExportTest, Gpt2) {
  const v1::JobSpec spec = Gpt2Spec();
  absl::StatusOr<HfExportMetadata> m = HfExportMetadataOf(spec);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at(kHfArchKey), "gpt2");
  // C = 8, H = 2, D = 4: c_attn.weight [C, 3, H, D] -> [C, 3C], its bias [3, H, D] -> [3C],
  // attn.c_proj.weight [H, D, C] -> [C, C]; the rest as computed.
  EXPECT_EQ(json::parse(m->at(kHfShapesKey)),
            json::parse(R"({"h.0.attn.c_attn.weight": [8, 24], "h.0.attn.c_attn.bias": [24],
                            "h.0.attn.c_proj.weight": [8, 8],
                            "h.1.attn.c_attn.weight": [8, 24], "h.1.attn.c_attn.bias": [24],
                            "h.1.attn.c_proj.weight": [8, 8]})"));
  const json config = json::parse(m->at(kHfConfigKey));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"], json({"GPT2LMHeadModel"}));
  EXPECT_EQ(config["activation_function"], "gelu_new");
  for (const char* key : {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
                          "layer_norm_epsilon", "embd_pdrop", "attn_pdrop", "resid_pdrop"}) {
    EXPECT_TRUE(config.contains(key)) << key;
  }
  ExpectReadsBack(spec, m->at(kHfConfigKey));
}

TEST(HfExportTest, Llama) {
  const v1::JobSpec spec = LlamaSpec();
  absl::StatusOr<HfExportMetadata> m = HfExportMetadataOf(spec);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at(kHfArchKey), "llama");
  // H = 4, KVH = 2, D = 2: q [H, D, C] -> [H*D, C], k/v [KVH, D, C] -> [KVH*D, C],
  // o [C, H, D] -> [C, H*D].
  EXPECT_EQ(json::parse(m->at(kHfShapesKey)),
            json::parse(R"({"model.layers.0.self_attn.q_proj.weight": [8, 8],
                            "model.layers.0.self_attn.k_proj.weight": [4, 8],
                            "model.layers.0.self_attn.v_proj.weight": [4, 8],
                            "model.layers.0.self_attn.o_proj.weight": [8, 8]})"));
  const json config = json::parse(m->at(kHfConfigKey));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(config["hidden_act"], "silu");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  ExpectReadsBack(spec, m->at(kHfConfigKey));
}

// qwen2: llama's layouts plus the q/k/v biases, [H, D] / [KVH, D] in the graph, [H*D] / [KVH*D]
// in Hugging Face's files; Qwen2Config's keys with the sliding window off.
TEST(HfExportTest, Qwen2) {
  v1::JobSpec spec = LlamaSpec();
  spec.mutable_model()->set_arch("qwen2");
  absl::StatusOr<HfExportMetadata> m = HfExportMetadataOf(spec);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at(kHfArchKey), "qwen2");
  EXPECT_EQ(json::parse(m->at(kHfShapesKey)),
            json::parse(R"({"model.layers.0.self_attn.q_proj.weight": [8, 8],
                            "model.layers.0.self_attn.k_proj.weight": [4, 8],
                            "model.layers.0.self_attn.v_proj.weight": [4, 8],
                            "model.layers.0.self_attn.q_proj.bias": [8],
                            "model.layers.0.self_attn.k_proj.bias": [4],
                            "model.layers.0.self_attn.v_proj.bias": [4],
                            "model.layers.0.self_attn.o_proj.weight": [8, 8]})"));
  const json config = json::parse(m->at(kHfConfigKey));
  EXPECT_EQ(config["model_type"], "qwen2");
  EXPECT_EQ(config["architectures"], json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(config["hidden_act"], "silu");
  EXPECT_EQ(config["use_sliding_window"], false);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_FALSE(config.contains("attention_bias"));
  ExpectReadsBack(spec, m->at(kHfConfigKey));
}

TEST(HfExportTest, LayersModelsRecordNothing) {
  v1::JobSpec spec = TokenSpec("");
  spec.mutable_model()->clear_arch();
  absl::StatusOr<HfExportMetadata> m = HfExportMetadataOf(spec);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->empty());
}

TEST(HfExportTest, ModelErrorsAreTheBuilders) {
  v1::JobSpec spec = Gpt2Spec();
  spec.mutable_data()->set_source("npy");
  EXPECT_THAT(HfExportMetadataOf(spec).status().message(), HasSubstr("data.source"));
}

}  // namespace
}  // namespace weft::planner
