// The LLM training recipe through the real daemons: GPT-2, Llama and Qwen2 (tiny configs) with the
// learning rate warmed up and decayed along a cosine, the gradient clipped by its global norm
// (on some steps and not others), 4 micro-batches of gradient accumulation, AdamW's weight decay
// on matrices only, and a held-out evaluation every 2 steps, on 1 rank, dp = 2, mp = 2 with
// sequence parallelism, pp = 2 (1F1B) x dp = 2 with ZeRO-3 on dp, and dp = 2 x mp = 2. Every
// step's loss, learning rate and gradient norm and every eval loss agree within 1e-5 of the
// 1-rank run and 1e-4 of the independent float64 reference (tests/transformer_reference), which
// computes the whole batch's gradient at once and the norm over whole gradients: a replicated
// bias summed over mp, or gpt2's tied embedding counted on two pipeline stages, would be off
// by far more. 4 micro-batches give the whole batch's numbers; bf16 storage follows float32; a
// job resumed mid-warmup and mid-decay reports the uninterrupted run's numbers bit for bit; on
// examples/gpt2_recipe.yaml 4 micro-batches plan and hold less activation memory than 1, and the
// example itself, on the license texts every Debian system ships, learns its held-out text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"
#include "tests/transformer_job.h"
#include "tests/transformer_reference.h"

namespace weft::testing {
namespace {

constexpr int kBatch = 8, kSeq = 8, kSteps = 8, kMicroBatches = 4, kEvalBatches = 2;
constexpr int kWarmup = 2, kEvalEvery = 2;
constexpr double kLr = 0.005, kMinLr = 0.0005, kWeightDecay = 0.1;
// Between the smallest and largest gradient norms of each model's run (printed by the
// reference test below), so that clipping triggers on some steps and not on others.
double ClipOf(const std::string& arch) { return arch == "gpt2" ? 1.0 : 1.6; }

const TransformerJobShape kShape{.batch = kBatch, .seq = kSeq, .steps = kSteps};

// The recipe as the spec writes it; decay_steps is given so that a job of fewer steps (the
// interrupted runs below) keeps the schedule.
std::string RecipeOptimizer(const std::string& arch) {
  std::ostringstream o;
  o << "{type: adamw, lr: " << kLr << ", betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: "
    << kWeightDecay << ", weight_decay_params: matrices, clip_grad_norm: " << ClipOf(arch)
    << ", schedule: {warmup_steps: " << kWarmup << ", decay: cosine, decay_steps: " << kSteps
    << ", min_lr: " << kMinLr << "}}";
  return o.str();
}

std::string EvalBlock() {
  std::ostringstream e;
  e << "eval: {data: {source: tokens, path: val.bin}, every: " << kEvalEvery
    << ", batches: " << kEvalBatches << "}\n";
  return e.str();
}

// Held-out tokens of another pattern than train.bin's, exactly the eval batches' samples.
std::vector<int32_t> EvalTokens() {
  std::vector<int32_t> tokens(kEvalBatches * kBatch * kSeq + 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 5 + (i * i) % 11 + 3) % 32);
  }
  return tokens;
}

// A run's numbers by step, as the job's events report them or the reference computes them.
struct Series {
  std::vector<double> losses, lrs, grad_norms;
  std::map<int64_t, double> evals;
};

Series SeriesOf(const JobOutcome& run) {
  Series s;
  for (const auto& [step, loss] : run.losses) s.losses.push_back(loss);
  for (const auto& [step, lr] : run.lrs) s.lrs.push_back(lr);
  for (const auto& [step, norm] : run.grad_norms) s.grad_norms.push_back(norm);
  s.evals = run.eval_losses;
  return s;
}

std::vector<double> Values(const std::map<int64_t, double>& by_step) {
  std::vector<double> out;
  for (const auto& [step, v] : by_step) out.push_back(v);
  return out;
}

struct Recipe {
  std::unique_ptr<TransformerJob> job;
  Series reference, one;
};

class RecipeTest : public SharedClusterSuite<::testing::TestWithParam<std::string>, 4> {
 protected:
  // Each architecture's job, reference and 1-rank run, once for all its cases.
  static Recipe& RecipeOf(const std::string& arch) {
    static auto* recipes = new std::map<std::string, Recipe>();
    Recipe& r = (*recipes)[arch];
    if (r.job != nullptr) return r;
    r.job = std::make_unique<TransformerJob>(TransformerJob::Create(arch, 0.0, kShape));
    WriteLlmcTokens(r.job->dir + "/val.bin", EvalTokens());
    RefTransformer model(r.job->config);
    model.params = r.job->init;
    RefRecipe recipe;
    recipe.optimizer.lr = kLr;
    recipe.optimizer.weight_decay = kWeightDecay;
    recipe.schedule = {.enabled = true,
                       .warmup_steps = kWarmup,
                       .decay = "cosine",
                       .decay_steps = kSteps,
                       .min_lr = kMinLr};
    recipe.decay_matrices_only = true;
    recipe.clip_grad_norm = ClipOf(arch);
    recipe.eval_tokens = EvalTokens();
    recipe.eval_every = kEvalEvery;
    recipe.eval_batches = kEvalBatches;
    recipe.total_steps = kSteps;
    for (const RefStepRecord& step :
         model.TrainRecipe(r.job->tokens, kBatch, kSeq, kSteps, recipe, kShape.seed)) {
      r.reference.losses.push_back(step.loss);
      r.reference.lrs.push_back(step.lr);
      r.reference.grad_norms.push_back(step.grad_norm);
      if (step.has_eval) {
        r.reference.evals[static_cast<int64_t>(r.reference.losses.size())] = step.eval_loss;
      }
    }
    r.one = SeriesOf(Run(*r.job, "one", "{shape: [1], dim_names: [dp]}"));
    return r;
  }

  static JobOutcome Run(const TransformerJob& job, const std::string& name,
                        const std::string& mesh, const std::string& data_extra = "",
                        const std::string& extra = "", const std::string& model_extra = "",
                        const std::string& train_extra = "") {
    const std::string spec = job.WriteSpec(
        name, mesh, data_extra, EvalBlock() + extra, "init.safetensors", model_extra,
        RecipeOptimizer(job.arch),
        train_extra.empty() ? absl::StrCat(", micro_batches: ", kMicroBatches) : train_extra);
    return cluster_->RunSpecFile(spec);
  }
};

// The reference's own recipe: the schedule warms up and decays, clipping acts on some steps
// only, and the held-out loss is reported after steps 2, 4, 6 and 8; Weft's 1-rank run agrees.
TEST_P(RecipeTest, OneRankMatchesTheFloat64Reference) {
  const Recipe& r = RecipeOf(GetParam());
  const Series& want = r.reference;
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
  std::cout << GetParam() << " reference grad norms:";
  for (double n : want.grad_norms) std::cout << " " << n;
  std::cout << "\n";
  EXPECT_DOUBLE_EQ(want.lrs[0], kLr / kWarmup);
  EXPECT_DOUBLE_EQ(want.lrs[kWarmup - 1], kLr);
  EXPECT_DOUBLE_EQ(want.lrs[kSteps - 1], kMinLr);
  const double clip = ClipOf(GetParam());
  const int clipped = static_cast<int>(std::count_if(
      want.grad_norms.begin(), want.grad_norms.end(), [&](double n) { return n > clip; }));
  EXPECT_GT(clipped, 0) << "clipping never triggers at " << clip;
  EXPECT_LT(clipped, kSteps) << "clipping triggers on every step at " << clip;
  EXPECT_EQ(Values(want.evals).size(), static_cast<size_t>(kSteps / kEvalEvery));
  for (const auto& [step, loss] : want.evals) EXPECT_EQ(step % kEvalEvery, 0) << step;
  ExpectLossesNear(r.one.losses, want.losses, 1e-4, "1 rank: losses");
  ExpectLossesNear(r.one.lrs, want.lrs, 1e-12, "1 rank: learning rates");
  ExpectLossesNear(r.one.grad_norms, want.grad_norms, 1e-4, "1 rank: grad norms");
  ASSERT_EQ(r.one.evals.size(), want.evals.size());
  for (const auto& [step, loss] : want.evals) {
    ASSERT_EQ(r.one.evals.count(step), 1u) << "no eval after step " << step;
  }
  ExpectLossesNear(Values(r.one.evals), Values(want.evals), 1e-4, "1 rank: eval losses");
  // The loss falls, in training and held out.
  EXPECT_LT(want.losses.back(), want.losses.front());
}

// Gradient accumulation equals the whole batch at once: 1 micro-batch against 4 on 1 rank.
TEST_P(RecipeTest, MicroBatchesEqualTheWholeBatch) {
  const Recipe& r = RecipeOf(GetParam());
  const Series whole =
      SeriesOf(Run(*r.job, "one_k1", "{shape: [1], dim_names: [dp]}", "", "", "", ", micro_batches: 1"));
  ExpectLossesNear(whole.losses, r.one.losses, 1e-5, "1 micro-batch: losses");
  ExpectLossesNear(whole.grad_norms, r.one.grad_norms, 1e-5, "1 micro-batch: grad norms");
  ExpectLossesNear(Values(whole.evals), Values(r.one.evals), 1e-5, "1 micro-batch: evals");
}

struct Mesh {
  std::string name, mesh, data_extra, extra, model_extra;
};

TEST_P(RecipeTest, EveryMeshGivesTheOneRankNumbers) {
  const Recipe& r = RecipeOf(GetParam());
  const std::string sp = "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n";
  for (const Mesh& m : std::vector<Mesh>{
           {"dp2", "{shape: [2], dim_names: [dp]}", ", placements: {dp: Shard(0)}", ""},
           {"mp2_sp", "{shape: [2], dim_names: [mp]}", "", sp},
           {"pp2_dp2_zero3", "{shape: [2, 2], dim_names: [dp, pp]}",
            ", placements: {dp: Shard(0)}",
            "pipeline: {dim: pp, schedule: 1F1B}\nsharding: {dim: dp, level: 3}\n"},
           {"dp2_mp2", "{shape: [2, 2], dim_names: [dp, mp]}", ", placements: {dp: Shard(0)}",
            "parallelize: {mp: {dim: mp, plan: megatron}}\n"},
       }) {
    SCOPED_TRACE(GetParam() + " " + m.name);
    const Series got = SeriesOf(Run(*r.job, m.name, m.mesh, m.data_extra, m.extra, m.model_extra));
    auto worst = [](const std::vector<double>& a, const std::vector<double>& b) {
      double w = 0;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) w = std::max(w, RelDiff(a[i], b[i]));
      return w;
    };
    std::cout << GetParam() << " " << m.name << ": largest relative difference to 1 rank: loss "
              << worst(got.losses, r.one.losses) << ", grad norm "
              << worst(got.grad_norms, r.one.grad_norms) << ", eval loss "
              << worst(Values(got.evals), Values(r.one.evals)) << "\n";
    ExpectLossesMatch(got.losses, r.one.losses, r.reference.losses, kSteps, m.name + " losses");
    ExpectLossesMatch(got.lrs, r.one.lrs, r.reference.lrs, kSteps, m.name + " learning rates");
    ExpectLossesMatch(got.grad_norms, r.one.grad_norms, r.reference.grad_norms, kSteps,
                      m.name + " grad norms");
    ExpectLossesMatch(Values(got.evals), Values(r.one.evals), Values(r.reference.evals),
                      kSteps / kEvalEvery, m.name + " eval losses");
  }
}

// bf16 storage under the recipe: the norm sums bf16 gradients' float32 copies and the clip
// scales them in the float32 update of the master weights; the 1-rank run follows the float32
// one within about a bf16 ulp (2^-8), and so does the gradient norm.
TEST_P(RecipeTest, Bf16StorageFollowsTheFloat32Run) {
  const Recipe& r = RecipeOf(GetParam());
  const Series bf16 =
      SeriesOf(Run(*r.job, "one_bf16", "{shape: [1], dim_names: [dp]}", "", "storage: bf16\n"));
  ExpectLossesNear(bf16.losses, r.one.losses, 1e-2, "bf16 storage: losses");
  ExpectLossesNear(bf16.grad_norms, r.one.grad_norms, 3e-2, "bf16 storage: grad norms");
  ExpectLossesNear(Values(bf16.evals), Values(r.one.evals), 1e-2, "bf16 storage: eval losses");
  double differs = 0;
  for (size_t s = 0; s < bf16.losses.size() && s < r.one.losses.size(); ++s) {
    differs = std::max(differs, RelDiff(bf16.losses[s], r.one.losses[s]));
  }
  EXPECT_GT(differs, 1e-6) << "storage: bf16 ran as float32";
}

INSTANTIATE_TEST_SUITE_P(Arch, RecipeTest, ::testing::Values("gpt2", "llama", "qwen2"));

// A job stopped after step 1 (mid-warmup) or step 5 (mid-decay) and resumed from its checkpoint
// reports the losses, learning rates, gradient norms and eval losses of the uninterrupted run,
// bit for bit, on the same mesh (dp = 2, as the uninterrupted run's).
TEST_F(RecipeTest, ResumedMidWarmupAndMidDecayIsBitForBit) {
  const Recipe& r = RecipeOf("gpt2");
  const std::string mesh = "{shape: [2], dim_names: [dp]}";
  const Series whole = SeriesOf(Run(*r.job, "resume_whole", mesh));
  for (int stop : {1, 5}) {
    SCOPED_TRACE(stop);
    TransformerJob stopped = *r.job;
    stopped.shape.steps = stop;
    const std::string name = absl::StrCat("resume_at_", stop);
    ASSERT_EQ(Run(stopped, name, mesh).state, v1::SUCCEEDED);
    // Resume: the full job over the stopped one's checkpoint folder.
    const std::string resumed = name + "_resumed";
    std::filesystem::copy(r.job->dir + "/ckpt-" + name, r.job->dir + "/ckpt-" + resumed,
                          std::filesystem::copy_options::recursive);
    const Series after = SeriesOf(Run(*r.job, resumed, mesh, "", "", "",
                                      absl::StrCat(", micro_batches: ", kMicroBatches,
                                                   ", resume: true")));
    ASSERT_EQ(after.losses.size(), static_cast<size_t>(kSteps - stop));
    for (int s = stop; s < kSteps; ++s) {
      EXPECT_EQ(after.losses[s - stop], whole.losses[s]) << "step " << s + 1;
      EXPECT_EQ(after.lrs[s - stop], whole.lrs[s]) << "step " << s + 1;
      EXPECT_EQ(after.grad_norms[s - stop], whole.grad_norms[s]) << "step " << s + 1;
    }
    for (const auto& [step, loss] : whole.evals) {
      if (step <= stop) continue;
      ASSERT_EQ(after.evals.count(step), 1u) << "no eval after step " << step;
      EXPECT_EQ(after.evals.at(step), loss) << "eval after step " << step;
    }
  }
}

// examples/gpt2_recipe.yaml's model with 4 micro-batches against 1: less activation memory
// planned at the peak, and less held by the workers, each within 5% of its plan.
TEST_F(RecipeTest, MicroBatchesLowerTheActivationPeak) {
  const std::string dir = MakeTempDir("recipe-memory");
  std::vector<int32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 31) % 256);
  WriteLlmcTokens(dir + "/licenses.bin", tokens);
  WriteLlmcTokens(dir + "/licenses_val.bin", tokens);
  const std::string example = ReadFileOrEmpty(BinaryPath("examples/gpt2_recipe.yaml"));
  ASSERT_FALSE(example.empty());
  std::map<int, int64_t> planned_activations, measured;
  for (int k : {1, 4}) {
    SCOPED_TRACE(k);
    const std::string spec = absl::StrCat(dir, "/k", k, ".yaml");
    std::ofstream(spec) << absl::StrReplaceAll(
        example, {{"steps: 300", "steps: 2"},
                  {"warmup_steps: 30", "warmup_steps: 1"},
                  {"micro_batches: 4", absl::StrCat("micro_batches: ", k)}});
    const nlohmann::json memory = PlanJson(spec)["ranks"][0]["memory"];
    ASSERT_TRUE(memory.contains("peak_bytes")) << memory;
    planned_activations[k] = memory["peak_activation_bytes"].get<int64_t>();
    const JobOutcome run = cluster_->RunSpecFile(spec);
    ASSERT_EQ(run.state, v1::SUCCEEDED) << run.message;
    measured[k] = run.peak_bytes;
    const int64_t planned = memory["peak_bytes"].get<int64_t>();
    EXPECT_LE(std::abs(run.peak_bytes - planned), planned / 20)
        << "measured " << run.peak_bytes << ", planned " << planned;
  }
  std::cout << "gpt2_recipe activations planned: k=1 " << planned_activations[1] << ", k=4 "
            << planned_activations[4] << "; measured peaks: " << measured[1] << ", "
            << measured[4] << "\n";
  EXPECT_LT(planned_activations[4], planned_activations[1]);
  EXPECT_LT(measured[4], measured[1]);
}

// examples/gpt2_recipe.yaml as its header runs it: the license texts every Debian system ships,
// tokenized byte by byte with the last 10% held out, trained for its 300 steps with the full
// recipe on dp = 2; the held-out loss falls, and every step applies the schedule's rate.
TEST_F(RecipeTest, TheExampleLearnsTheLicensesHeldOutText) {
  const std::string dir = MakeTempDir("recipe-example");
  std::vector<std::string> tokenize = {BinaryPath("client/weftctl"), "data", "tokenize", "--bytes",
                                       "--holdout", "0.1", "--holdout_out",
                                       dir + "/licenses_val.bin"};
  for (const char* license : {"Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3",
                              "GPL-1", "GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3",
                              "MPL-1.1", "MPL-2.0"}) {
    tokenize.push_back(absl::StrCat("/usr/share/common-licenses/", license));
  }
  tokenize.push_back(dir + "/licenses.bin");
  const CommandResult tokens = RunCommand(tokenize, 60);
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  std::cout << tokens.out;
  const std::string spec = dir + "/gpt2_recipe.yaml";
  std::filesystem::copy_file(BinaryPath("examples/gpt2_recipe.yaml"), spec);
  const JobOutcome run = cluster_->RunSpecFile(spec);
  ASSERT_EQ(run.state, v1::SUCCEEDED) << run.message;
  ASSERT_EQ(run.losses.size(), 300u);
  const std::vector<double> evals = Values(run.eval_losses);
  ASSERT_EQ(evals.size(), 6u);  // after steps 50, 100, ..., 300
  std::cout << "gpt2_recipe eval losses:";
  for (double e : evals) std::cout << " " << e;
  std::cout << "\n";
  // From about 3.1 nats after 50 steps to about 2.65 (a byte-level model of English text).
  EXPECT_LT(evals.back(), evals.front() - 0.25);
  EXPECT_LT(evals.back(), 2.9);
  EXPECT_DOUBLE_EQ(run.lrs.at(30), 3.0e-3);   // the warmup's end
  EXPECT_DOUBLE_EQ(run.lrs.at(300), 3.0e-4);  // min_lr at the end of the cosine
}

}  // namespace
}  // namespace weft::testing
