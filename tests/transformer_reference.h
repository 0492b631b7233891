// An independent float64 reference of the transformer language models Weft trains (arch gpt2, llama
// and qwen2, Hugging Face math and parameter names): forward, mean token cross-entropy,
// hand-written backward op by op, Weft's SPMD-consistent dropout masks, SGD or decoupled AdamW, and
// the data order of a Weft token job. Deliberately plain loops: it shares no code with Weft's
// kernels, planner or executor (only common/philox.h, which defines the masks).
//
// E.g.
//   RefTransformerConfig config;
//   config.arch = "llama";
//   config.vocab_size = 11;
//   config.hidden_size = 8;
//   ...
//   RefTransformer model(config);
//   model.params["model.embed_tokens.weight"] = ...;  // [V, C], row-major, HF layout
//   std::vector<double> losses = model.Train(tokens, /*batch=*/2, /*seq=*/5, /*steps=*/10, opt,
//                                            /*seed=*/1234);
//
// TrainRecipe adds what a real LLM run does around the update: a learning-rate schedule, weight
// decay on matrices only, global-norm gradient clipping and held-out evaluation.
#ifndef WEFT_TESTS_TRANSFORMER_REFERENCE_H_
#define WEFT_TESTS_TRANSFORMER_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/mlp_reference.h"

namespace weft::testing {

// A model's hyper-parameters under Hugging Face's config.json key names (GPT2Config,
// LlamaConfig; Qwen2Config has llama's keys). An architecture reads only its own keys.
struct RefTransformerConfig {
  std::string arch;  // gpt2 | llama | qwen2 (llama with biases on q_proj, k_proj and v_proj)
  int64_t vocab_size = 0;
  // gpt2
  int64_t n_positions = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double embd_pdrop = 0.0;
  double attn_pdrop = 0.0;
  double resid_pdrop = 0.0;
  // llama, qwen2
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  double attention_dropout = 0.0;
};

// A parameter's Hugging Face name and shape (row-major; Conv1D weights [in, out], nn.Linear
// weights [out, in]).
struct RefParamShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t Elements() const;
};

// One step's batch: token ids, [batch, seq] row-major each.
struct RefTokenBatch {
  int batch = 0;
  int seq = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

// Weft's data order for a token file: sample i is tokens[i*seq, i*seq + seq) as input and
// tokens[i*seq + 1, i*seq + seq + 1) as target; step s (from 1) uses samples (s-1)*batch ..
// s*batch - 1, modulo num_samples = (tokens.size() - 1) / seq.
RefTokenBatch BatchOfStep(const std::vector<int32_t>& tokens, int batch, int seq, int64_t step);

// Weft's dropout mask (worker/kernels/kernels.h DropoutSpec) for site `site` (e.g.
// "h.0.attn.resid_dropout") at training step `step` over the n elements of the step's global
// tensor: element e (its row-major index) is kept iff PhiloxUnit(seed, Fnv1a64(site) + step *
// 0x9E3779B97F4A7C15, e) >= p, with p and the factor 1 / (1 - p) in float32 as Weft holds them.
// Returns each element's factor: 0 or that factor. Step 0 or p = 0: all ones (no dropout).
std::vector<double> RefDropoutFactors(const std::string& site, size_t n, double p, uint64_t seed,
                                      int64_t step);

// A learning-rate schedule over steps s = 1, 2, ... (the step whose update is applied). With
// W = warmup_steps, D = decay_steps and C = cooldown_steps:
//   s <= W (W > 0): peak * s / W;
//   otherwise, with p = min(1, (s - W) / (D - W)) (p = 1 when D <= W):
//     constant: peak;
//     linear:   peak - (peak - min_lr) * p;
//     cosine:   min_lr + (peak - min_lr) * 0.5 * (1 + cos(pi * p));
//     wsd:      peak while s <= D - C, then peak - (peak - min_lr) * min(1, (s - (D - C)) / C)
//               (warmup-stable-decay: a linear cooldown over the last C steps before D).
// Not enabled: the peak at every step.
struct RefSchedule {
  bool enabled = false;
  int64_t warmup_steps = 0;
  std::string decay = "constant";  // constant | linear | cosine | wsd
  int64_t decay_steps = 0;         // TrainRecipe: 0 means RefRecipe::total_steps
  double min_lr = 0;
  int64_t cooldown_steps = 0;  // wsd only
};

// The learning rate of step `step` (from 1) under `schedule` with peak `peak_lr`. Reads
// decay_steps as given (a linear, cosine or wsd schedule needs it positive). Aborts with a message
// on an unknown decay or a negative count.
double RefLearningRate(const RefSchedule& schedule, double peak_lr, int64_t step);

// A training recipe: the optimizer at the schedule's learning rate, optional decay of matrices
// only, clipping and evaluation.
struct RefRecipe {
  RefOptimizer optimizer;  // lr: the schedule's peak
  RefSchedule schedule;
  // Weight decay only on parameters of 2 or more dims (RefParamShape.shape); biases, norm gains
  // and other vectors get none. False: every parameter decays.
  bool decay_matrices_only = false;
  // PyTorch's clip_grad_norm_: every gradient times min(1, max / (total + 1e-6)), total the L2
  // norm over all gradients together. 0: no clipping.
  double clip_grad_norm = 0;
  // Held-out evaluation after the update of step S when S % eval_every == 0 (eval_every > 0) or S
  // == total_steps: the mean over eval batches j = 0 .. eval_batches - 1 of the no-dropout loss of
  // BatchOfStep(eval_tokens, eval_batch, eval_seq, j + 1), which must not wrap. Empty: none.
  std::vector<int32_t> eval_tokens;
  int eval_batch = 0;  // 0: the training batch
  int eval_seq = 0;    // 0: the training seq
  int eval_every = 0;  // 0: only after total_steps
  int eval_batches = 0;
  // The job's train.steps: the last evaluation and the schedule's decay_steps when that is 0.
  // 0: the last step of the TrainRecipe call (set it when a run is split over calls).
  int64_t total_steps = 0;
};

// One TrainRecipe step: its loss (before the update, with the step's dropout), its learning rate,
// the gradients' global L2 norm before clipping, and the evaluation after its update if any.
struct RefStepRecord {
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  bool has_eval = false;
  double eval_loss = 0;
};

class RefTransformer {
 public:
  // Aborts with a message naming the key when `config` is invalid (a missing size, heads that do
  // not divide the width, ...).
  explicit RefTransformer(RefTransformerConfig config);

  const RefTransformerConfig& config() const { return config_; }

  // Every parameter, in Hugging Face's order: gpt2 wte, wpe, h.N.*, ln_f; llama (and qwen2)
  // model.embed_tokens, model.layers.N.*, model.norm, lm_head (absent when tied).
  std::vector<RefParamShape> ParamShapes() const;

  // Parameters by Hugging Face name, row-major. Every name of ParamShapes() must be present with
  // its size before a forward pass.
  std::map<std::string, std::vector<double>> params;

  // Fills `params` with TestValues(n, seed + i, scale) for the i-th parameter; norm gains get 1 +
  // that, so every weight, bias and gain is non-trivial and the model starts near uniform logits
  // for a small scale.
  void SetTestParams(uint64_t seed, double scale);

  // A forward pass over one batch with dropout drawn for training step `step` under `seed`
  // (step 0: evaluation, no dropout). Logits: [batch, seq, vocab].
  std::vector<double> Logits(const RefTokenBatch& batch, uint64_t seed, int64_t step) const;
  // The mean token cross-entropy over all batch * seq positions.
  double Loss(const RefTokenBatch& batch, uint64_t seed, int64_t step) const;
  // The loss, and in `grads` its exact gradient w.r.t. every parameter (names as `params`; a
  // tied embedding gets the sum of both uses).
  double Gradients(const RefTokenBatch& batch, uint64_t seed, int64_t step,
                   std::map<std::string, std::vector<double>>* grads) const;

  // Trains for `steps` steps on `tokens` in Weft's data order (BatchOfStep) and returns each
  // step's loss, computed before its update. The step count carries over between calls (data
  // order, dropout masks, AdamW's bias correction and moments), so Train(a) then Train(b) equals
  // Train(a + b).
  std::vector<double> Train(const std::vector<int32_t>& tokens, int batch, int seq, int steps,
                            const RefOptimizer& opt, uint64_t seed);
  // Trains like Train under `recipe` and returns one record per step. Continues steps_done()
  // like Train (and shares its AdamW moments), so a schedule and AdamW's bias correction read the
  // global step. With no schedule, clipping or evaluation it updates exactly as Train. Aborts with
  // a message on an invalid recipe, e.g. eval tokens holding fewer than eval_batches * eval_batch
  // samples.
  std::vector<RefStepRecord> TrainRecipe(const std::vector<int32_t>& tokens, int batch, int seq,
                                         int steps, const RefRecipe& recipe, uint64_t seed);
  int64_t steps_done() const { return steps_done_; }

 private:
  RefTransformerConfig config_;
  int64_t steps_done_ = 0;
  // AdamW's moments by parameter name.
  std::map<std::string, std::vector<double>> m_, v_;
};

}  // namespace weft::testing

#endif  // WEFT_TESTS_TRANSFORMER_REFERENCE_H_
