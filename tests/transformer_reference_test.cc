// The transformer reference is itself checked: its hand-written gradients equal central finite
// differences of its loss for every parameter (with and without dropout, the masks fixed by the
// step), its forward has the properties the Hugging Face models have (causal, GQA as repeated KV
// heads, near-uniform logits at a small init), and AdamW training lowers the loss. The training
// recipe's schedule is checked at hand-computed points, and its clipping, decay of matrices only,
// scheduled updates and evaluation against updates and losses rebuilt here from Gradients and
// Loss.
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

// qwen2: llama's config (its keys are Qwen2Config's too) with biases on q, k and v.
RefTransformerConfig Qwen2Config(int kv_heads, bool tied, double pdrop) {
  RefTransformerConfig c = LlamaConfig(kv_heads, tied, pdrop);
  c.arch = "qwen2";
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

TEST(TransformerReferenceTest, Qwen2GqaGradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(Qwen2Config(/*kv_heads=*/1, /*tied=*/false, 0.0), 1);
}

TEST(TransformerReferenceTest, Qwen2TiedGradientsMatchFiniteDifferencesWithDropout) {
  ExpectGradientsMatchFiniteDifferences(Qwen2Config(/*kv_heads=*/2, /*tied=*/true, 0.3), 2);
}

// Qwen2's biases are Qwen2Attention's q_proj/k_proj/v_proj biases ([H*D], [KVH*D], [KVH*D]);
// with them zero, qwen2 is llama with the same weights, and each bias changes the loss.
TEST(TransformerReferenceTest, Qwen2IsLlamaWithQkvBiases) {
  RefTransformer qwen2(Qwen2Config(/*kv_heads=*/1, /*tied=*/false, 0.0));
  qwen2.SetTestParams(/*seed=*/100, /*scale=*/0.4);
  RefTransformer llama(LlamaConfig(/*kv_heads=*/1, /*tied=*/false, 0.0));
  llama.SetTestParams(/*seed=*/100, /*scale=*/0.4);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const RefParamShape& s : qwen2.ParamShapes()) shapes[s.name] = s.shape;
  EXPECT_EQ(shapes.size(), llama.params.size() + 2 * 3);
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.q_proj.bias"), (std::vector<int64_t>{8}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.bias"), (std::vector<int64_t>{4}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.v_proj.bias"), (std::vector<int64_t>{4}));
  for (auto& [name, values] : qwen2.params) {
    if (llama.params.count(name) > 0) {
      values = llama.params.at(name);
    } else {
      std::fill(values.begin(), values.end(), 0.0);
    }
  }
  const double llama_loss = llama.Loss(TestBatch(), kSeed, /*step=*/0);
  EXPECT_NEAR(qwen2.Loss(TestBatch(), kSeed, /*step=*/0), llama_loss, 1e-14);
  for (const std::string proj : {"q_proj", "k_proj", "v_proj"}) {
    std::vector<double>& bias = qwen2.params.at("model.layers.0.self_attn." + proj + ".bias");
    bias[0] = 0.5;
    EXPECT_GT(std::fabs(qwen2.Loss(TestBatch(), kSeed, /*step=*/0) - llama_loss), 1e-6) << proj;
    bias[0] = 0.0;
  }
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

RefSchedule Schedule(const std::string& decay, int64_t warmup, int64_t decay_steps, double min_lr,
                     int64_t cooldown = 0) {
  RefSchedule s;
  s.enabled = true;
  s.decay = decay;
  s.warmup_steps = warmup;
  s.decay_steps = decay_steps;
  s.min_lr = min_lr;
  s.cooldown_steps = cooldown;
  return s;
}

// Peak 1, warmup 10, decay over steps 10 .. 110 to 0.1 (wsd: its cooldown the last 20 of them).
TEST(TransformerReferenceTest, LearningRateScheduleAtHandComputedPoints) {
  const double kTol = 1e-15;
  for (const std::string decay : {"constant", "linear", "cosine", "wsd"}) {
    const RefSchedule s = Schedule(decay, 10, 110, 0.1, 20);
    EXPECT_NEAR(RefLearningRate(s, 1.0, 1), 0.1, kTol) << decay;
    EXPECT_NEAR(RefLearningRate(s, 1.0, 5), 0.5, kTol) << decay;
    EXPECT_NEAR(RefLearningRate(s, 1.0, 10), 1.0, kTol) << decay;  // the warmup's end
    EXPECT_NEAR(RefLearningRate(s, 2.0, 5), 1.0, kTol) << decay;   // scales with the peak
  }
  const RefSchedule constant = Schedule("constant", 10, 110, 0.1);
  EXPECT_EQ(RefLearningRate(constant, 1.0, 11), 1.0);
  EXPECT_EQ(RefLearningRate(constant, 1.0, 500), 1.0);

  // p = (s - 10) / 100.
  const RefSchedule linear = Schedule("linear", 10, 110, 0.1);
  EXPECT_NEAR(RefLearningRate(linear, 1.0, 11), 1.0 - 0.9 * 0.01, kTol);
  EXPECT_NEAR(RefLearningRate(linear, 1.0, 35), 0.775, kTol);
  EXPECT_NEAR(RefLearningRate(linear, 1.0, 60), 0.55, kTol);
  EXPECT_NEAR(RefLearningRate(linear, 1.0, 110), 0.1, kTol);
  EXPECT_NEAR(RefLearningRate(linear, 1.0, 200), 0.1, kTol);

  const RefSchedule cosine = Schedule("cosine", 10, 110, 0.1);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 35), 0.1 + 0.45 * (1 + std::sqrt(0.5)), kTol);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 60), 0.55, kTol);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 85), 0.1 + 0.45 * (1 - std::sqrt(0.5)), kTol);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 110), 0.1, kTol);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 111), 0.1, kTol);
  EXPECT_NEAR(RefLearningRate(cosine, 1.0, 1000), 0.1, kTol);

  // Stable through step 90, then linear to 0.1 at 110.
  const RefSchedule wsd = Schedule("wsd", 10, 110, 0.1, 20);
  EXPECT_EQ(RefLearningRate(wsd, 1.0, 11), 1.0);
  EXPECT_EQ(RefLearningRate(wsd, 1.0, 60), 1.0);
  EXPECT_EQ(RefLearningRate(wsd, 1.0, 90), 1.0);
  EXPECT_NEAR(RefLearningRate(wsd, 1.0, 91), 1.0 - 0.9 / 20, kTol);
  EXPECT_NEAR(RefLearningRate(wsd, 1.0, 100), 0.55, kTol);
  EXPECT_NEAR(RefLearningRate(wsd, 1.0, 110), 0.1, kTol);
  EXPECT_NEAR(RefLearningRate(wsd, 1.0, 150), 0.1, kTol);

  // No warmup: step 1 is already into the decay (p = 1 / 4).
  EXPECT_NEAR(RefLearningRate(Schedule("linear", 0, 4, 0.0), 1.0, 1), 0.75, kTol);
  EXPECT_NEAR(RefLearningRate(Schedule("cosine", 0, 4, 0.0), 1.0, 2), 0.5, kTol);
  // A disabled schedule is the peak throughout.
  RefSchedule off = cosine;
  off.enabled = false;
  EXPECT_EQ(RefLearningRate(off, 0.3, 1), 0.3);
  EXPECT_EQ(RefLearningRate(off, 0.3, 1000), 0.3);
}

RefOptimizer AdamW(double lr, double weight_decay) {
  RefOptimizer opt;
  opt.lr = lr;
  opt.weight_decay = weight_decay;
  return opt;
}

RefOptimizer Sgd(double lr, double weight_decay) {
  RefOptimizer opt;
  opt.type = "sgd";
  opt.lr = lr;
  opt.weight_decay = weight_decay;
  return opt;
}

double NormOf(const std::map<std::string, std::vector<double>>& grads) {
  double sum_sq = 0;
  for (const auto& [name, g] : grads) {
    for (double v : g) sum_sq += v * v;
  }
  return std::sqrt(sum_sq);
}

TEST(TransformerReferenceTest, RecipeWithoutExtrasEqualsTrain) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 8);
  RefRecipe recipe;
  recipe.optimizer = AdamW(1e-2, 0.05);
  RefTransformer plain(Gpt2Config(0.2)), with_recipe(Gpt2Config(0.2));
  plain.SetTestParams(4, 0.3);
  with_recipe.params = plain.params;
  const std::vector<double> losses = plain.Train(tokens, kBatch, kSeq, 4, recipe.optimizer, kSeed);
  const std::vector<RefStepRecord> records =
      with_recipe.TrainRecipe(tokens, kBatch, kSeq, 4, recipe, kSeed);
  ASSERT_EQ(records.size(), 4u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].loss, losses[i]) << i;
    EXPECT_EQ(records[i].lr, 1e-2) << i;
    EXPECT_GT(records[i].grad_norm, 0.0) << i;
    EXPECT_FALSE(records[i].has_eval) << i;
  }
  EXPECT_EQ(with_recipe.params, plain.params);
  EXPECT_EQ(with_recipe.steps_done(), 4);
}

TEST(TransformerReferenceTest, ClippingAtAHugeNormChangesNothing) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 8);
  RefRecipe unclipped;
  unclipped.optimizer = AdamW(1e-2, 0.05);
  RefRecipe clipped = unclipped;
  clipped.clip_grad_norm = 1e9;
  RefTransformer a(LlamaConfig(1, false, 0.2)), b(LlamaConfig(1, false, 0.2));
  a.SetTestParams(4, 0.3);
  b.params = a.params;
  const std::vector<RefStepRecord> ra = a.TrainRecipe(tokens, kBatch, kSeq, 3, unclipped, kSeed);
  const std::vector<RefStepRecord> rb = b.TrainRecipe(tokens, kBatch, kSeq, 3, clipped, kSeed);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].loss, rb[i].loss) << i;
    EXPECT_EQ(ra[i].grad_norm, rb[i].grad_norm) << i;
  }
  EXPECT_EQ(a.params, b.params);
}

// With SGD and no weight decay each step moves p by lr * coef * g, coef = max / (norm + 1e-6) for
// the step's whole-model gradient norm; the recorded norm is that before clipping.
TEST(TransformerReferenceTest, ClippingScalesEveryGradientByTheGlobalNormsRatio) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 8);
  RefTransformer model(Gpt2Config(0.3)), expected(Gpt2Config(0.3));
  model.SetTestParams(6, 0.3);
  expected.params = model.params;
  std::map<std::string, std::vector<double>> grads;
  expected.Gradients(BatchOfStep(tokens, kBatch, kSeq, 1), kSeed, 1, &grads);
  RefRecipe recipe;
  recipe.optimizer = Sgd(0.5, 0.0);
  recipe.clip_grad_norm = 0.25 * NormOf(grads);  // well below every step's norm

  const std::vector<RefStepRecord> records =
      model.TrainRecipe(tokens, kBatch, kSeq, 2, recipe, kSeed);
  ASSERT_EQ(records.size(), 2u);
  for (int64_t step = 1; step <= 2; ++step) {
    const double loss =
        expected.Gradients(BatchOfStep(tokens, kBatch, kSeq, step), kSeed, step, &grads);
    const double norm = NormOf(grads);
    const RefStepRecord& r = records[step - 1];
    EXPECT_EQ(r.loss, loss) << step;
    EXPECT_NEAR(r.grad_norm, norm, 1e-13 * norm) << step;
    const double coef = recipe.clip_grad_norm / (norm + 1e-6);
    EXPECT_LT(coef, 0.5) << step;
    for (const auto& [name, g] : grads) {
      std::vector<double>& p = expected.params.at(name);
      for (size_t i = 0; i < g.size(); ++i) p[i] -= 0.5 * coef * g[i];
    }
  }
  for (const auto& [name, p] : expected.params) {
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_NEAR(model.params.at(name)[i], p[i], 1e-14) << name << "[" << i << "]";
    }
  }
}

// A tied embedding is one parameter: its one gradient (both uses summed) counts once in the norm.
TEST(TransformerReferenceTest, ClippingCountsATiedEmbeddingOnce) {
  const std::vector<int32_t> tokens = TestTokens(kBatch * kSeq + 1, 7);
  RefTransformer model(LlamaConfig(2, /*tied=*/true, 0.0));
  model.SetTestParams(12, 0.4);
  const auto before = model.params;
  std::map<std::string, std::vector<double>> grads;
  model.Gradients(TestBatch(), kSeed, 1, &grads);
  ASSERT_EQ(grads.count("lm_head.weight"), 0u);
  const double norm = NormOf(grads);
  double embedding_sq = 0;
  for (double v : grads.at("model.embed_tokens.weight")) embedding_sq += v * v;
  ASSERT_GT(embedding_sq, 1e-6 * norm * norm);  // counting it twice would show

  RefRecipe recipe;
  recipe.optimizer = Sgd(1.0, 0.0);
  recipe.clip_grad_norm = 0.5 * norm;
  const std::vector<RefStepRecord> records =
      model.TrainRecipe(tokens, kBatch, kSeq, 1, recipe, kSeed);
  EXPECT_NEAR(records.at(0).grad_norm, norm, 1e-13 * norm);
  const double coef = recipe.clip_grad_norm / (norm + 1e-6);
  const std::vector<double>& g = grads.at("model.embed_tokens.weight");
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(model.params.at("model.embed_tokens.weight")[i],
                before.at("model.embed_tokens.weight")[i] - coef * g[i], 1e-14)
        << i;
  }
}

// SGD with weight decay: p - lr * (coef * g + wd * p), wd 0 for 1-dim parameters when decaying
// matrices only. Step 1 of a warmup of 4 updates at lr / 4.
TEST(TransformerReferenceTest, DecayOfMatricesOnlySkipsVectors) {
  const std::vector<int32_t> tokens = TestTokens(kBatch * kSeq + 1, 7);
  for (bool matrices_only : {false, true}) {
    RefTransformer model(Gpt2Config(0.0));
    model.SetTestParams(13, 0.4);
    const auto before = model.params;
    std::map<std::string, std::vector<double>> grads;
    model.Gradients(TestBatch(), kSeed, 1, &grads);
    RefRecipe recipe;
    recipe.optimizer = Sgd(0.8, 0.3);
    recipe.schedule = Schedule("cosine", 4, 10, 0.0);
    recipe.decay_matrices_only = matrices_only;
    recipe.clip_grad_norm = 0.5 * NormOf(grads);
    const std::vector<RefStepRecord> records =
        model.TrainRecipe(tokens, kBatch, kSeq, 1, recipe, kSeed);
    EXPECT_NEAR(records.at(0).lr, 0.2, 1e-15);
    const double coef = recipe.clip_grad_norm / (NormOf(grads) + 1e-6);
    int vectors = 0, matrices = 0;
    for (const RefParamShape& s : model.ParamShapes()) {
      const bool decays = !matrices_only || s.shape.size() >= 2;
      (s.shape.size() >= 2 ? matrices : vectors)++;
      const double wd = decays ? 0.3 : 0.0;
      const std::vector<double>& g = grads.at(s.name);
      const std::vector<double>& p = before.at(s.name);
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(model.params.at(s.name)[i], p[i] - 0.2 * (coef * g[i] + wd * p[i]), 1e-15)
            << s.name << "[" << i << "] matrices_only " << matrices_only;
      }
    }
    EXPECT_GT(vectors, 0);
    EXPECT_GT(matrices, 0);
  }
}

// AdamW at the scheduled lr (decay_steps 0: total_steps) with decay of matrices only, split over
// two calls, against Gradients and ApplyRefOptimizer step by step at the global step.
TEST(TransformerReferenceTest, ScheduledAdamWUpdatesAtTheGlobalStep) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 9);
  RefRecipe recipe;
  recipe.optimizer = AdamW(2e-2, 0.1);
  recipe.schedule = Schedule("cosine", 2, /*decay_steps=*/0, 1e-3);
  recipe.decay_matrices_only = true;
  recipe.total_steps = 6;
  RefTransformer model(LlamaConfig(1, false, 0.2)), expected(LlamaConfig(1, false, 0.2));
  model.SetTestParams(14, 0.3);
  expected.params = model.params;
  std::vector<RefStepRecord> records = model.TrainRecipe(tokens, kBatch, kSeq, 4, recipe, kSeed);
  const std::vector<RefStepRecord> rest = model.TrainRecipe(tokens, kBatch, kSeq, 2, recipe, kSeed);
  records.insert(records.end(), rest.begin(), rest.end());
  ASSERT_EQ(records.size(), 6u);

  std::map<std::string, size_t> dims;
  for (const RefParamShape& s : expected.ParamShapes()) dims[s.name] = s.shape.size();
  std::map<std::string, std::vector<double>> grads, m, v;
  const RefSchedule resolved = Schedule("cosine", 2, 6, 1e-3);
  for (int64_t step = 1; step <= 6; ++step) {
    const double loss =
        expected.Gradients(BatchOfStep(tokens, kBatch, kSeq, step), kSeed, step, &grads);
    const double lr = RefLearningRate(resolved, 2e-2, step);
    EXPECT_EQ(records[step - 1].loss, loss) << step;
    EXPECT_EQ(records[step - 1].lr, lr) << step;
    for (const auto& [name, g] : grads) {
      RefOptimizer opt = AdamW(lr, dims.at(name) >= 2 ? 0.1 : 0.0);
      ApplyRefOptimizer(opt, step, g, &expected.params.at(name), &m[name], &v[name]);
    }
  }
  EXPECT_NEAR(records[1].lr, 2e-2, 1e-17);  // the warmup's end
  EXPECT_NEAR(records[5].lr, 1e-3, 1e-17);  // decayed by total_steps
  EXPECT_EQ(model.params, expected.params);
}

// Evaluation after steps 2, 4 (every 2) and 5 (the last) only, each the mean of its eval batches'
// no-dropout losses at the parameters after that step's update; training is unaffected.
TEST(TransformerReferenceTest, EvaluationEveryNStepsAndAfterTheLastWithoutDropout) {
  const std::vector<int32_t> tokens = TestTokens(6 * kSeq + 1, 8);
  const std::vector<int32_t> eval_tokens = TestTokens(7 * 4 + 1, 31);  // 7 samples of 4
  RefRecipe recipe;
  recipe.optimizer = AdamW(1e-2, 0.0);
  recipe.eval_tokens = eval_tokens;
  recipe.eval_batch = 3;
  recipe.eval_seq = 4;
  recipe.eval_every = 2;
  recipe.eval_batches = 2;
  recipe.total_steps = 5;
  RefTransformer model(Gpt2Config(0.3)), expected(Gpt2Config(0.3));
  model.SetTestParams(15, 0.3);
  const auto initial = model.params;
  expected.params = initial;
  const std::vector<RefStepRecord> records =
      model.TrainRecipe(tokens, kBatch, kSeq, 5, recipe, kSeed);
  ASSERT_EQ(records.size(), 5u);
  for (int64_t step = 1; step <= 5; ++step) {
    const RefStepRecord& r = records[step - 1];
    EXPECT_EQ(r.loss, expected.Train(tokens, kBatch, kSeq, 1, recipe.optimizer, kSeed).at(0));
    EXPECT_EQ(r.has_eval, step == 2 || step == 4 || step == 5) << step;
    if (!r.has_eval) continue;
    double sum = 0, with_dropout = 0;
    for (int j = 0; j < 2; ++j) {
      const RefTokenBatch eval = BatchOfStep(eval_tokens, 3, 4, j + 1);
      sum += expected.Loss(eval, kSeed, 0);
      with_dropout += expected.Loss(eval, kSeed, step);
    }
    EXPECT_DOUBLE_EQ(r.eval_loss, sum / 2) << step;
    EXPECT_GT(std::fabs(r.eval_loss - with_dropout / 2), 1e-6) << step;
  }
  EXPECT_EQ(model.params, expected.params);

  // Defaults: the training batch and seq, and evaluation only after the call's last step.
  RefRecipe at_end = recipe;
  at_end.eval_batch = at_end.eval_seq = at_end.eval_every = 0;
  at_end.eval_batches = 1;
  at_end.total_steps = 0;
  RefTransformer again(Gpt2Config(0.3)), expected_again(Gpt2Config(0.3));
  again.params = expected_again.params = initial;
  const std::vector<RefStepRecord> more = again.TrainRecipe(tokens, kBatch, kSeq, 3, at_end, kSeed);
  ASSERT_EQ(more.size(), 3u);
  EXPECT_FALSE(more[0].has_eval);
  EXPECT_FALSE(more[1].has_eval);
  ASSERT_TRUE(more[2].has_eval);
  expected_again.Train(tokens, kBatch, kSeq, 3, recipe.optimizer, kSeed);
  EXPECT_DOUBLE_EQ(more[2].eval_loss,
                   expected_again.Loss(BatchOfStep(eval_tokens, kBatch, kSeq, 1), kSeed, 0));
}

TEST(TransformerReferenceDeathTest, EvaluationNeverWrapsAround) {
  RefTransformer model(Gpt2Config(0.0));
  model.SetTestParams(16, 0.3);
  RefRecipe recipe;
  recipe.eval_tokens = TestTokens(5 * 4 + 1, 31);  // 5 samples of 4, 6 needed
  recipe.eval_batch = 3;
  recipe.eval_seq = 4;
  recipe.eval_batches = 2;
  EXPECT_DEATH(model.TrainRecipe(TestTokens(kBatch * kSeq + 1, 7), kBatch, kSeq, 1, recipe, kSeed),
               "the eval tokens hold 5 samples of eval_seq 4, fewer than eval_batches \\* "
               "eval_batch = 6");
}

}  // namespace
}  // namespace weft::testing
