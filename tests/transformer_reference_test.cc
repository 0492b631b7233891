// The transformer reference is itself checked: its hand-written gradients equal central finite
// differences of its loss for every parameter (with and without dropout, the masks fixed by the
// step), its forward has the properties the Hugging Face models have (causal, GQA as repeated KV
// heads, near-uniform logits at a small init), and AdamW training lowers the loss.
#include "tests/transformer_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/philox.h"
#include "tests/mlp_reference.h"

namespace weft::testing {
namespace {

constexpr int kBatch = 2;
constexpr int kSeq = 5;
constexpr int kVocab = 11;
constexpr uint64_t kSeed = 1234;

RefTransformerConfig Gpt2Config(double pdrop) {
  RefTransformerConfig c;
  c.arch = "gpt2";
  c.vocab_size = kVocab;
  c.n_positions = 8;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = pdrop;
  return c;
}

RefTransformerConfig LlamaConfig(int kv_heads, bool tied, double pdrop) {
  RefTransformerConfig c;
  c.arch = "llama";
  c.vocab_size = kVocab;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = kv_heads;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  c.attention_dropout = pdrop;
  return c;
}

// Token ids in [0, kVocab) from the test LCG.
std::vector<int32_t> TestTokens(size_t n, uint64_t seed) {
  std::vector<int32_t> tokens;
  for (double v : TestValues(n, seed, 1.0)) {
    tokens.push_back(std::min(kVocab - 1, static_cast<int>((v + 1.0) / 2.0 * kVocab)));
  }
  return tokens;
}

RefTokenBatch TestBatch() { return BatchOfStep(TestTokens(kBatch * kSeq + 1, 7), kBatch, kSeq, 1); }

// Every parameter's analytic gradient against (L(p + h) - L(p - h)) / 2h, the loss evaluated at
// the same step (so with the same dropout masks).
void ExpectGradientsMatchFiniteDifferences(const RefTransformerConfig& config, int64_t step) {
  RefTransformer model(config);
  model.SetTestParams(/*seed=*/100, /*scale=*/0.4);
  const RefTokenBatch batch = TestBatch();
  std::map<std::string, std::vector<double>> grads;
  model.Gradients(batch, kSeed, step, &grads);
  ASSERT_EQ(grads.size(), model.params.size());
  const double h = 1e-5;
  double worst = 0;
  for (auto& [name, values] : model.params) {
    ASSERT_EQ(grads.at(name).size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      const double saved = values[i];
      values[i] = saved + h;
      const double plus = model.Loss(batch, kSeed, step);
      values[i] = saved - h;
      const double minus = model.Loss(batch, kSeed, step);
      values[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = grads.at(name)[i];
      worst = std::max(worst, std::fabs(analytic - numeric) / (std::fabs(numeric) + 1e-4));
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::fabs(numeric) + 1e-9) << name << "[" << i << "]";
    }
  }
  char worst_text[32];
  std::snprintf(worst_text, sizeof(worst_text), "%.3g", worst);
  ::testing::Test::RecordProperty("worst_relative_error", worst_text);
}

TEST(TransformerReferenceTest, Gpt2GradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(Gpt2Config(0.0), /*step=*/1);
}

TEST(TransformerReferenceTest, Gpt2GradientsMatchFiniteDifferencesWithDropout) {
  ExpectGradientsMatchFiniteDifferences(Gpt2Config(0.3), /*step=*/3);
}

TEST(TransformerReferenceTest, LlamaGqaGradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LlamaConfig(/*kv_heads=*/1, /*tied=*/false, 0.0), 1);
}

TEST(TransformerReferenceTest, LlamaGqaGradientsMatchFiniteDifferencesWithDropout) {
  ExpectGradientsMatchFiniteDifferences(LlamaConfig(/*kv_heads=*/1, /*tied=*/false, 0.3), 2);
}

TEST(TransformerReferenceTest, LlamaTiedGradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(LlamaConfig(/*kv_heads=*/2, /*tied=*/true, 0.0), 1);
}

TEST(TransformerReferenceTest, LlamaTiedGradientsMatchFiniteDifferencesWithDropout) {
  ExpectGradientsMatchFiniteDifferences(LlamaConfig(/*kv_heads=*/2, /*tied=*/true, 0.3), 4);
}

TEST(TransformerReferenceTest, ParameterNamesAndShapesAreHuggingFaces) {
  std::map<std::string, std::vector<int64_t>> gpt2, llama, tied;
  for (const auto& s : RefTransformer(Gpt2Config(0)).ParamShapes()) gpt2[s.name] = s.shape;
  for (const auto& s : RefTransformer(LlamaConfig(1, false, 0)).ParamShapes()) {
    llama[s.name] = s.shape;
  }
  for (const auto& s : RefTransformer(LlamaConfig(1, true, 0)).ParamShapes()) {
    tied[s.name] = s.shape;
  }
  EXPECT_EQ(gpt2.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(gpt2.at("wpe.weight"), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(gpt2.at("h.1.attn.c_attn.weight"), (std::vector<int64_t>{8, 24}));
  EXPECT_EQ(gpt2.at("h.1.mlp.c_fc.weight"), (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(gpt2.at("h.1.mlp.c_proj.weight"), (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(llama.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(llama.at("model.layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(llama.at("model.layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(llama.at("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(llama.at("lm_head.weight"), (std::vector<int64_t>{kVocab, 8}));
  EXPECT_EQ(tied.count("lm_head.weight"), 0u);
  EXPECT_EQ(tied.size(), llama.size() - 1);
}

TEST(TransformerReferenceTest, LossAtASmallInitIsNearLogVocab) {
  for (const RefTransformerConfig& config :
       {Gpt2Config(0.1), LlamaConfig(1, false, 0.1), LlamaConfig(2, true, 0.1)}) {
    RefTransformer model(config);
    model.SetTestParams(/*seed=*/5, /*scale=*/0.02);
    EXPECT_NEAR(model.Loss(TestBatch(), kSeed, /*step=*/1), std::log(kVocab), 0.05) << config.arch;
  }
}

// The loss of the gradient tests' models (no dropout) as computed by a pure-Python
// transliteration of Hugging Face's GPT2LMHeadModel / LlamaForCausalLM forward (Conv1D, split,
// view/transpose, rotate_half, repeat_kv), written apart from this reference: it pins the layouts
// and the rotary convention, which finite differences cannot see.
TEST(TransformerReferenceTest, LossMatchesATransliterationOfHuggingFacesForward) {
  const std::vector<std::pair<RefTransformerConfig, double>> cases = {
      {Gpt2Config(0.0), 2.7458195461734225},
      {LlamaConfig(/*kv_heads=*/1, /*tied=*/false, 0.0), 2.6275098622696142},
      {LlamaConfig(/*kv_heads=*/2, /*tied=*/true, 0.0), 2.5082868713309412}};
  for (const auto& [config, expected] : cases) {
    RefTransformer model(config);
    model.SetTestParams(/*seed=*/100, /*scale=*/0.4);
    EXPECT_NEAR(model.Loss(TestBatch(), kSeed, /*step=*/0), expected, 1e-12) << config.arch;
  }
}

// A later token never changes an earlier position's logits; it changes its own position's.
TEST(TransformerReferenceTest, AttentionIsCausal) {
  for (const RefTransformerConfig& config : {Gpt2Config(0.0), LlamaConfig(1, false, 0.0)}) {
    RefTransformer model(config);
    model.SetTestParams(9, 0.4);
    const RefTokenBatch batch = TestBatch();
    RefTokenBatch changed = batch;
    changed.inputs[kSeq - 1] = (changed.inputs[kSeq - 1] + 1) % kVocab;  // sample 0, last token
    const std::vector<double> a = model.Logits(batch, kSeed, 0),
                              b = model.Logits(changed, kSeed, 0);
    for (int t = 0; t < kSeq - 1; ++t) {
      for (int v = 0; v < kVocab; ++v) EXPECT_EQ(a[t * kVocab + v], b[t * kVocab + v]) << t;
    }
    EXPECT_NE(a[(kSeq - 1) * kVocab], b[(kSeq - 1) * kVocab]) << config.arch;
  }
}

// GQA with one KV head equals two KV heads that both hold that head's weights.
TEST(TransformerReferenceTest, GroupedQueryAttentionRepeatsKvHeads) {
  RefTransformer gqa(LlamaConfig(/*kv_heads=*/1, false, 0.0));
  gqa.SetTestParams(21, 0.4);
  RefTransformer mha(LlamaConfig(/*kv_heads=*/2, false, 0.0));
  mha.params = gqa.params;
  for (int l = 0; l < 2; ++l) {
    for (const char* proj : {"k_proj", "v_proj"}) {
      const std::string name =
          "model.layers." + std::to_string(l) + ".self_attn." + proj + ".weight";
      std::vector<double>& w = mha.params[name];
      const std::vector<double> head = w;  // [D, C]: repeat it as the second head's rows
      w.insert(w.end(), head.begin(), head.end());
    }
  }
  const std::vector<double> a = gqa.Logits(TestBatch(), kSeed, 0);
  const std::vector<double> b = mha.Logits(TestBatch(), kSeed, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
}

TEST(TransformerReferenceTest, DropoutMasksFollowWeftsStream) {
  const double p = 0.25;
  const std::vector<double> mask = RefDropoutFactors("h.0.attn.resid_dropout", 4000, p, kSeed, 3);
  const double kept_factor = static_cast<double>(1.0f / (1.0f - 0.25f));
  int kept = 0;
  for (double f : mask) {
    EXPECT_TRUE(f == 0.0 || f == kept_factor) << f;
    kept += f != 0.0;
  }
  EXPECT_NEAR(kept / 4000.0, 1 - p, 0.03);
  // Element e of site S at step s: PhiloxUnit(seed, Fnv1a64(S) + s * golden, e) >= p.
  const uint64_t key = Fnv1a64("h.0.attn.resid_dropout") + 3 * 0x9E3779B97F4A7C15ull;
  for (size_t e : {0, 1, 17, 3999}) {
    EXPECT_EQ(mask[e] != 0.0, PhiloxUnit(kSeed, key, e) >= 0.25f) << e;
  }
  EXPECT_NE(mask, RefDropoutFactors("h.0.attn.resid_dropout", 4000, p, kSeed, 4));
  EXPECT_NE(mask, RefDropoutFactors("h.0.mlp.dropout", 4000, p, kSeed, 3));
  EXPECT_EQ(RefDropoutFactors("drop", 10, p, kSeed, 0), std::vector<double>(10, 1.0));
  EXPECT_EQ(RefDropoutFactors("drop", 10, 0.0, kSeed, 5), std::vector<double>(10, 1.0));

  // Step 0 is evaluation; a training step's masks change the loss, and differ by step.
  RefTransformer model(Gpt2Config(0.3));
  model.SetTestParams(3, 0.4);
  const double eval = model.Loss(TestBatch(), kSeed, 0);
  EXPECT_NE(eval, model.Loss(TestBatch(), kSeed, 1));
  EXPECT_NE(model.Loss(TestBatch(), kSeed, 1), model.Loss(TestBatch(), kSeed, 2));
  EXPECT_NE(model.Loss(TestBatch(), kSeed, 1), model.Loss(TestBatch(), kSeed + 1, 1));
  RefTransformer no_dropout(Gpt2Config(0.0));
  no_dropout.params = model.params;
  EXPECT_EQ(eval, no_dropout.Loss(TestBatch(), kSeed, 1));
}

TEST(TransformerReferenceTest, BatchesFollowWeftsDataOrder) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 3 * kSeq + 1; ++i) tokens.push_back(i % kVocab);  // 3 samples
  // Step 2 of batch 2: samples 2 and 0 (wrapped).
  const RefTokenBatch b = BatchOfStep(tokens, 2, kSeq, 2);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{10, 0, 1, 2, 3, 0, 1, 2, 3, 4}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{0, 1, 2, 3, 4, 1, 2, 3, 4, 5}));
}

TEST(TransformerReferenceTest, AdamWLowersTheLossOnARepetitiveSequence) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 8 * kSeq + 1; ++i) tokens.push_back((3 * i) % 7);
  RefOptimizer adamw;
  adamw.lr = 1e-2;
  adamw.weight_decay = 0.01;
  for (const RefTransformerConfig& config :
       {Gpt2Config(0.1), LlamaConfig(1, false, 0.1), LlamaConfig(2, true, 0.1)}) {
    RefTransformer model(config);
    model.SetTestParams(11, 0.1);
    const std::vector<double> losses = model.Train(tokens, kBatch, kSeq, 30, adamw, kSeed);
    ASSERT_EQ(losses.size(), 30u);
    EXPECT_NEAR(losses.front(), std::log(kVocab), 0.3) << config.arch;
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << config.arch;
    EXPECT_EQ(model.steps_done(), 30);
  }
}

// Two calls continue one run: data order, masks and AdamW's bias correction use the global step.
TEST(TransformerReferenceTest, TrainingResumesAtTheGlobalStep) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 8);
  RefOptimizer adamw;
  adamw.lr = 1e-2;
  RefTransformer whole(LlamaConfig(1, false, 0.2)), split(LlamaConfig(1, false, 0.2));
  whole.SetTestParams(4, 0.3);
  split.params = whole.params;
  std::vector<double> losses = split.Train(tokens, kBatch, kSeq, 3, adamw, kSeed);
  const std::vector<double> rest = split.Train(tokens, kBatch, kSeq, 2, adamw, kSeed);
  losses.insert(losses.end(), rest.begin(), rest.end());
  EXPECT_EQ(losses, whole.Train(tokens, kBatch, kSeq, 5, adamw, kSeed));
  EXPECT_EQ(split.params, whole.params);
}

// One SGD step with lr = 1 moves every parameter by its gradient.
TEST(TransformerReferenceTest, SgdStepAppliesTheGradients) {
  const std::vector<int32_t> tokens = TestTokens(kBatch * kSeq + 1, 7);
  RefOptimizer sgd;
  sgd.type = "sgd";
  sgd.lr = 1.0;
  RefTransformer model(Gpt2Config(0.3));
  model.SetTestParams(6, 0.3);
  const auto before = model.params;
  std::map<std::string, std::vector<double>> grads;
  const double loss = model.Gradients(TestBatch(), kSeed, 1, &grads);
  EXPECT_EQ(model.Train(tokens, kBatch, kSeq, 1, sgd, kSeed), std::vector<double>{loss});
  for (const auto& [name, g] : grads) {
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_DOUBLE_EQ(model.params[name][i], before.at(name)[i] - g[i]) << name;
    }
  }
}

}  // namespace
}  // namespace weft::testing
