// GPT-2, Llama and Qwen2 end to end through the real daemons: a token file (llm.c format, written
// here), parameters from a Hugging Face-named safetensors file in Hugging Face's layouts (gpt2's
// with the "transformer." prefix its files carry), trained on 1 rank, dp = 2, mp = 2 with the
// Megatron plan, the same with sequence parallelism, pp = 2 (1F1B, FThenB, and VPP with 2 virtual
// stages of the 4 blocks), dp = 2 x mp = 2 and pp = 2 x mp = 2 with sequence parallelism. Per-step
// losses agree within 1e-5 of the 1-rank run and 1e-4 of the independent float64 reference
// (tests/transformer_reference), and so do the final parameters, read from each run's last
// checkpoint. ZeRO at every level (3: on dp x mp, and on dp x pp under full recompute) and
// selective recompute under sequence parallelism agree the same way. With gpt2's dropout on, 1
// rank, dp = 2 and mp = 2 agree too: the masks depend on the global element, not on who computes
// it; and recompute (full, selective) gives the same losses bit for bit in less memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/checkpoint/directory.h"
#include "common/checkpoint/reader.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/mlp_reference.h"
#include "tests/process.h"
#include "tests/transformer_job.h"
#include "tests/transformer_reference.h"
#include "nlohmann/json.hpp"

namespace weft::testing {
namespace {

// TransformerJob's default shape.
constexpr int kSteps = 4, kVocab = 32, kLayers = 4;

struct Case {
  std::string name;
  std::string mesh;
  int ranks;
  std::string data_extra;
  std::string extra;
  std::string model_extra = "";
};

const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {"dp2", "{shape: [2], dim_names: [dp]}", 2, ", placements: {dp: Shard(0)}", ""},
      {"mp2", "{shape: [2], dim_names: [mp]}", 2, "",
       "parallelize: {mp: {dim: mp, plan: megatron}}\n"},
      {"mp2_sp", "{shape: [2], dim_names: [mp]}", 2, "",
       "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n"},
      {"pp2", "{shape: [2], dim_names: [pp]}", 2, "",
       "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\n"},
      {"dp2_mp2", "{shape: [2, 2], dim_names: [dp, mp]}", 4, ", placements: {dp: Shard(0)}",
       "parallelize: {mp: {dim: mp, plan: megatron}}\n"},
      {"pp2_fthenb", "{shape: [2], dim_names: [pp]}", 2, "",
       "pipeline: {dim: pp, schedule: FThenB, micro_batches: 4}\n"},
      {"pp2_vpp", "{shape: [2], dim_names: [pp]}", 2, "",
       "pipeline: {dim: pp, schedule: VPP, micro_batches: 2, virtual_stages: 2}\n"},
      {"pp2_mp2_sp", "{shape: [2, 2], dim_names: [pp, mp]}", 4, "",
       "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\n"
       "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n"},
      // ZeRO: states (level 1) and gradients (level 2) sharded along dp.
      {"dp2_mp2_zero1", "{shape: [2, 2], dim_names: [dp, mp]}", 4, ", placements: {dp: Shard(0)}",
       "parallelize: {mp: {dim: mp, plan: megatron}}\nsharding: {dim: dp, level: 1}\n"},
      {"dp2_pp2_zero2", "{shape: [2, 2], dim_names: [dp, pp]}", 4, ", placements: {dp: Shard(0)}",
       "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\nsharding: {dim: dp, level: 2}\n"},
      // ZeRO-3 (parameters sharded too, gathered per layer and pass) with Megatron's TP; with a
      // pipeline and micro-batches, under full recompute of every block.
      {"dp2_mp2_zero3", "{shape: [2, 2], dim_names: [dp, mp]}", 4, ", placements: {dp: Shard(0)}",
       "parallelize: {mp: {dim: mp, plan: megatron}}\nsharding: {dim: dp, level: 3}\n"},
      {"dp2_pp2_zero3_recompute", "{shape: [2, 2], dim_names: [dp, pp]}", 4,
       ", placements: {dp: Shard(0)}",
       "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\nsharding: {dim: dp, level: 3}\n",
       ", recompute: full"},
      // Selective recompute under sequence parallelism.
      {"mp2_sp_selective", "{shape: [2], dim_names: [mp]}", 2, "",
       "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n",
       ", recompute: selective"},
  };
  return *cases;
}

// Elements whose gradient is exactly zero in exact arithmetic: gpt2's key bias (c_attn.bias
// [3, H, D], block 1) adds q . b_k to every score of a row, which the softmax cancels. Their
// computed gradient is round-off, which AdamW normalizes into steps of up to lr in either
// direction, in float32 and float64 alike; they are only checked to have moved at most that.
bool ZeroGradient(const std::string& name, size_t i, size_t n) {
  const std::string suffix = "attn.c_attn.bias";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 && i >= n / 3 &&
         i < 2 * n / 3;
}

// Per element: |got - want| <= 1e-4 * max(1, |want|). AdamW's first steps move each parameter
// by about lr; float32 against float64 stays far inside this.
void ExpectParamsNear(const std::map<std::string, std::vector<double>>& got,
                      const std::map<std::string, std::vector<double>>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": " << name;
    ASSERT_EQ(it->second.size(), w.size()) << what << ": " << name;
    int bad = 0;
    for (size_t i = 0; i < w.size() && bad < 3; ++i) {
      const double tolerance = ZeroGradient(name, i, w.size())
                                   ? 2.0 * kSteps * 0.01  // both moved by at most lr per step
                                   : 1e-4 * std::max(1.0, std::abs(w[i]));
      if (std::abs(it->second[i] - w[i]) > tolerance) {
        ADD_FAILURE() << what << ": " << name << "[" << i << "] " << it->second[i] << " vs "
                      << w[i];
        ++bad;
      }
    }
  }
}

class TransformerTest : public SharedClusterSuite<::testing::TestWithParam<std::string>, 4> {
 protected:
  struct Baseline {
    std::unique_ptr<TransformerJob> job;
    std::vector<double> reference, one;
    std::map<std::string, std::vector<double>> reference_params, one_params;
  };

  // Each architecture's job, reference and 1-rank run, once for all its cases.
  static Baseline& BaselineOf(const std::string& arch) {
    static auto* baselines = new std::map<std::string, Baseline>();
    Baseline& b = (*baselines)[arch];
    if (b.job == nullptr) {
      b.job = std::make_unique<TransformerJob>(TransformerJob::Create(arch));
      b.reference = b.job->Reference(&b.reference_params);
      b.one = RunClusterLosses(*cluster_,
                               b.job->WriteSpec("one", "{shape: [1], dim_names: [dp]}"), kSteps);
      b.one_params = b.job->FinalParams("one");
    }
    return b;
  }
};

TEST_P(TransformerTest, OneRankMatchesTheFloat64Reference) {
  Baseline& b = BaselineOf(GetParam());
  ASSERT_EQ(b.one.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(RelDiff(b.one[s], b.reference[s]), 1e-4)
        << "step " << s + 1 << ": " << b.one[s] << " vs float64 " << b.reference[s];
  }
  // The loss starts near log(V) and falls.
  EXPECT_NEAR(b.reference[0], std::log(static_cast<double>(kVocab)), 0.5);
  EXPECT_LT(b.one.back(), b.one.front());
  ExpectParamsNear(b.one_params, b.reference_params, "1 rank");
}

TEST_P(TransformerTest, EveryParallelismMatchesOneRank) {
  Baseline& b = BaselineOf(GetParam());
  for (const Case& c : Cases()) {
    SCOPED_TRACE(GetParam() + " " + c.name);
    const std::vector<double> losses = RunClusterLosses(
        *cluster_,
        b.job->WriteSpec(c.name, c.mesh, c.data_extra, c.extra, "init.safetensors", c.model_extra),
        kSteps);
    ExpectLossesMatch(losses, b.one, b.reference, kSteps, c.name);
    ExpectParamsNear(b.job->FinalParams(c.name), b.reference_params, c.name);
  }
}

// bf16 storage (parameters, gradients and activations in bf16, float32 master weights) on the
// transformer models: the 1-rank run stays near the float32 one, and Megatron's TP with sequence
// parallelism, the 1F1B pipeline and ZeRO-3 under TP follow the 1-rank bf16 run within 5e-3,
// about one bf16 ulp (2^-8 = 3.9e-3; 0.3e-3 to 2.1e-3 when written): their partial sums are
// stored, reduced and sent in bf16, rounded where one rank rounds the whole sum once
// (tests/storage_test has the MLP against a reference that rounds the same way).
TEST_P(TransformerTest, Bf16StorageOnTensorPipelineAndZeroFollowsOneRank) {
  Baseline& b = BaselineOf(GetParam());
  const std::string bf16 = "storage: bf16\n";
  const std::vector<double> one = RunClusterLosses(
      *cluster_, b.job->WriteSpec("bf16_one", "{shape: [1], dim_names: [dp]}", "", bf16), kSteps);
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  double from_f32 = 0;
  for (int s = 0; s < kSteps; ++s) from_f32 = std::max(from_f32, RelDiff(one[s], b.one[s]));
  std::cout << GetParam() << " bf16 storage, 1 rank: max relative difference " << from_f32
            << " to float32\n";
  EXPECT_LE(from_f32, 5e-3);  // 0.86e-3 when written
  EXPECT_GT(from_f32, 1e-6) << "storage: bf16 ran as float32";
  for (const Case& c : Cases()) {
    if (c.name != "mp2_sp" && c.name != "pp2" && c.name != "dp2_mp2_zero3") continue;
    const std::vector<double> losses = RunClusterLosses(
        *cluster_,
        b.job->WriteSpec("bf16_" + c.name, c.mesh, c.data_extra, c.extra + bf16,
                         "init.safetensors", c.model_extra),
        kSteps);
    double worst = 0;
    for (size_t s = 0; s < losses.size() && s < one.size(); ++s) {
      worst = std::max(worst, RelDiff(losses[s], one[s]));
    }
    std::cout << GetParam() << " bf16 storage, " << c.name << ": max relative difference "
              << worst << " to 1 rank\n";
    ExpectLossesNear(losses, one, 5e-3, GetParam() + " bf16 " + c.name);
  }
}

// `weftctl ckpt export --format hf` of the 1-rank run's last checkpoint writes Hugging Face's
// names, layouts and config.json; a job starting from that file starts where one starting from the
// checkpoint does: the same first-step loss, bit for bit.
TEST_P(TransformerTest, HuggingFaceExportRoundTrips) {
  Baseline& b = BaselineOf(GetParam());
  std::filesystem::create_directories(b.job->dir + "/hf");
  const std::string out = b.job->dir + "/hf/model.safetensors";
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "ckpt", "export", "--format", "hf",
                                b.job->dir + "/ckpt-one", out},
                               60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(ReadFileOrEmpty(b.job->dir + "/hf/config.json").empty());
  const std::string one = "{shape: [1], dim_names: [dp]}";
  const std::vector<double> from_checkpoint = RunClusterLosses(
      *cluster_, b.job->WriteSpec("from_ckpt", one, "", "", "ckpt-one"), kSteps);
  const std::vector<double> from_export = RunClusterLosses(
      *cluster_, b.job->WriteSpec("from_hf", one, "", "", "hf/model.safetensors"), kSteps);
  ASSERT_EQ(from_checkpoint.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(from_export.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(from_export[0], from_checkpoint[0]);
  // Trained parameters: the loss is lower than the 1-rank run's first.
  EXPECT_LT(from_export[0], b.one[0]);
}

INSTANTIATE_TEST_SUITE_P(Arch, TransformerTest, ::testing::Values("gpt2", "llama", "qwen2"));

// gpt2 with its three dropouts at p = 0.1: the same losses on 1 rank, dp = 2 and mp = 2 (and as
// the float64 reference, which draws the masks by the same rule).
class TransformerDropoutTest : public SharedClusterSuite<::testing::Test, 2> {};

TEST_F(TransformerDropoutTest, MasksDoNotDependOnTheMesh) {
  const TransformerJob job = TransformerJob::Create("gpt2", /*dropout=*/0.1);
  std::map<std::string, std::vector<double>> reference_params;
  const std::vector<double> reference = job.Reference(&reference_params);
  TransformerJob no_dropout = TransformerJob::Create("gpt2");
  std::map<std::string, std::vector<double>> unused;
  const std::vector<double> without = no_dropout.Reference(&unused);
  const std::vector<double> one =
      RunClusterLosses(*cluster_, job.WriteSpec("one", "{shape: [1], dim_names: [dp]}"), kSteps);
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  // Dropout changes the numbers (else this test shows nothing).
  EXPECT_GT(RelDiff(reference[0], without[0]), 1e-3);
  for (const Case& c : Cases()) {
    if (c.name != "dp2" && c.name != "mp2") continue;
    SCOPED_TRACE(c.name);
    const std::vector<double> losses = RunClusterLosses(
        *cluster_, job.WriteSpec(c.name, c.mesh, c.data_extra, c.extra), kSteps);
    ExpectLossesMatch(losses, one, reference, kSteps, c.name);
  }
}

// Activation recompute with gpt2's dropouts on (p = 0.1), on 1 rank and on mp = 2 with Megatron's
// sequence parallelism: full and selective recompute give the losses of the same mesh without
// recompute bit for bit (a recomputed dropout draws the same mask), and plan less activation
// memory at the peak, which the workers hold (within 5%).
TEST_F(TransformerDropoutTest, RecomputeKeepsTheLossesBitForBitInLessMemory) {
  const TransformerJob job = TransformerJob::Create("gpt2", /*dropout=*/0.1);
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> meshes = {
      {"one", {"{shape: [1], dim_names: [dp]}", ""}},
      {"mp2_sp", {"{shape: [2], dim_names: [mp]}",
                  "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n"}}};
  for (const auto& [mesh_name, mesh] : meshes) {
    std::map<std::string, JobOutcome> runs;
    std::map<std::string, nlohmann::json> planned;
    for (const std::string mode : {"", "full", "selective"}) {
      const std::string name = "rc_" + mesh_name + (mode.empty() ? "" : "_" + mode);
      const std::string spec =
          job.WriteSpec(name, mesh.first, "", mesh.second, "init.safetensors",
                        mode.empty() ? "" : ", recompute: " + mode);
      planned[mode] = PlanJson(spec)["ranks"][0]["memory"];
      runs[mode] = cluster_->RunSpecFile(spec);
      ASSERT_EQ(runs[mode].state, v1::SUCCEEDED) << name << ": " << runs[mode].message;
      ASSERT_EQ(runs[mode].losses.size(), static_cast<size_t>(kSteps)) << name;
      const int64_t peak = planned[mode]["peak_bytes"].get<int64_t>();
      EXPECT_LE(std::abs(runs[mode].peak_bytes - peak), peak / 20)
          << name << ": measured " << runs[mode].peak_bytes << ", planned " << peak;
    }
    for (const std::string mode : {"full", "selective"}) {
      SCOPED_TRACE(mesh_name + " " + mode);
      EXPECT_EQ(runs[mode].LossList(), runs[""].LossList());  // bit for bit
      EXPECT_LT(planned[mode]["peak_activation_bytes"].get<int64_t>(),
                planned[""]["peak_activation_bytes"].get<int64_t>());
      EXPECT_LT(runs[mode].peak_bytes, runs[""].peak_bytes);
    }
    // Full recompute keeps less than selective, which keeps the matmul outputs.
    EXPECT_LT(planned["full"]["peak_activation_bytes"].get<int64_t>(),
              planned["selective"]["peak_activation_bytes"].get<int64_t>());
  }
}

// The examples, as the README runs them: this repository's README tokenized byte by byte, then
// examples/gpt2_tiny.yaml (dp x mp, Megatron) and examples/llama_tiny.yaml (dp x pp) with
// `weftctl local`; the loss falls by more than a nat over their 60 steps; examples/gpt2_zero3.yaml
// (gpt2_tiny's job under ZeRO-3 and selective recompute) gives gpt2_tiny's first 20 losses.
TEST(TransformerExamplesTest, TrainOnTheReadme) {
  const std::string dir = MakeTempDir("transformer-examples");
  ASSERT_TRUE(WriteReadmeTokens(dir));
  std::map<std::string, std::vector<double>> losses;
  for (const std::string example : {"gpt2_tiny", "llama_tiny", "gpt2_zero3"}) {
    SCOPED_TRACE(example);
    const std::string spec = dir + "/" + example + ".yaml";
    std::filesystem::copy_file(BinaryPath("examples/" + example + ".yaml"), spec);
    const int steps = example == "gpt2_zero3" ? 20 : 60;
    losses[example] = RunLocalLosses(spec, 4, steps);
    ASSERT_EQ(losses[example].size(), static_cast<size_t>(steps));
    if (steps == 60) {
      EXPECT_LT(losses[example].back(), losses[example].front() - 1.0)
          << "first " << losses[example].front() << ", last " << losses[example].back();
    }
  }
  // gpt2_zero3.yaml (ZeRO-3, selective recompute) trains gpt2_tiny.yaml's model the same way.
  const std::vector<double>& tiny = losses["gpt2_tiny"];
  ExpectLossesNear(losses["gpt2_zero3"], std::vector<double>(tiny.begin(), tiny.begin() + 20),
                   1e-5, "gpt2_zero3 against gpt2_tiny");
}

// What cannot be split is refused by `weftctl plan` (as by SubmitJob) with the key that says it.
TEST(TransformerPlanTest, ImpossibleSplitsNameTheKey) {
  const TransformerJob job = TransformerJob::Create("gpt2");
  struct Bad {
    std::string config, seq, parallelize, expected;
  };
  const std::string megatron = "parallelize: {mp: {dim: mp, plan: megatron}}\n";
  const std::string sp = "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n";
  for (const Bad& bad : std::vector<Bad>{
           {"vocab_size: 31, n_head: 4", "8", megatron, "model.config.vocab_size: 31"},
           {"vocab_size: 32, n_head: 2", "8", "parallelize: {mp: {dim: mp, plan: megatron}}\n",
            ""},
           {"vocab_size: 32, n_head: 4", "7", sp, "data.seq_len: 7"},
           {"vocab_size: 32, n_head: 4", "20", megatron, "n_positions"},
       }) {
    std::ostringstream s;
    s << "name: bad\nmesh: {shape: [2], dim_names: [mp]}\n"
      << "model: {arch: gpt2, config: {" << bad.config
      << ", n_positions: 16, n_embd: 16, n_layer: 1, layer_norm_epsilon: 1.0e-5, "
         "embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}}\n"
      << "data: {source: tokens, path: train.bin, seq_len: " << bad.seq << ", batch_size: 2}\n"
      << "optimizer: {type: sgd, lr: 0.1}\ntrain: {steps: 1}\n"
      << bad.parallelize;
    const std::string path = job.dir + "/bad.yaml";
    std::ofstream(path) << s.str();
    CommandResult r = RunCommand({BinaryPath("client/weftctl"), "plan", path}, 60);
    if (bad.expected.empty()) {
      EXPECT_EQ(r.exit_code, 0) << s.str() << r.err;
      continue;
    }
    EXPECT_EQ(r.exit_code, 1) << s.str();
    EXPECT_NE(r.err.find(bad.expected), std::string::npos) << s.str() << r.err;
  }
  // 3 heads over mp = 2.
  std::ostringstream s;
  s << "name: bad\nmesh: {shape: [2], dim_names: [mp]}\n"
    << "model: {arch: gpt2, config: {vocab_size: 32, n_head: 3, n_positions: 16, n_embd: 24, "
       "n_layer: 1, layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, "
       "resid_pdrop: 0.0}}\n"
    << "data: {source: tokens, path: train.bin, seq_len: 8, batch_size: 2}\n"
    << "optimizer: {type: sgd, lr: 0.1}\ntrain: {steps: 1}\n" << megatron;
  const std::string path = job.dir + "/heads.yaml";
  std::ofstream(path) << s.str();
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "plan", path}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.config.n_head: 3"), std::string::npos) << r.err;
}

// `weftctl plan` of gpt2 with `plan: megatron` (mp = 2, 4 blocks): rank 0's collectives, in
// program order, are Megatron's and nothing else. Without sequence parallelism: the vocab-
// parallel embedding's all-reduce; per block, the all-reduce after each row-parallel layer
// (attention c_proj, MLP c_proj: Megatron's g) forward, and of each column-parallel layer's input
// gradient (ln_2's and ln_1's outputs: Megatron's f) backward; the vocab-parallel cross-entropy's
// max, sum of exponentials and target logit; the head's f. No weight is ever gathered. With
// sequence parallelism each all-reduce becomes its all-gather / reduce-scatter pair, and the
// parameters of the sequence-split regions (norms, row-parallel biases, the positions'
// embedding) all-reduce their gradients.
std::vector<std::string> PlannedCollectives(const std::string& spec) {
  std::vector<std::string> out;
  const nlohmann::json doc = PlanJson(spec);
  if (!doc.contains("ranks")) return out;
  for (const nlohmann::json& c : doc["ranks"][0]["collectives"]) {
    out.push_back(c["op"].get<std::string>() + " " + c["tensor"].get<std::string>());
  }
  return out;
}

// The collectives as the plan orders them with `overlap: false` (where each stands in the graph,
// the gradients' at the optimizer phase, last the gradient norm's sum over mp, along which the
// Megatron plan shards weights) must be `want`; the default plan, which starts each as
// early as its data allows (planner/early_collectives.h), must have the same ones, reordered.
void ExpectCollectives(const std::string& spec, const std::string& blocking_spec,
                       const std::vector<std::string>& want) {
  EXPECT_EQ(PlannedCollectives(blocking_spec), want);
  std::vector<std::string> overlapped = PlannedCollectives(spec), sorted_want = want;
  std::sort(overlapped.begin(), overlapped.end());
  std::sort(sorted_want.begin(), sorted_want.end());
  EXPECT_EQ(overlapped, sorted_want) << "starting collectives early reorders them, no more";
}

TEST(MegatronPlanTest, TensorParallelCollectivesAreMegatrons) {
  const TransformerJob job = TransformerJob::Create("gpt2");
  const std::string spec = job.WriteSpec("plan_mp", "{shape: [2], dim_names: [mp]}", "",
                                         "parallelize: {mp: {dim: mp, plan: megatron}}\n");
  const std::string blocking =
      job.WriteSpec("plan_mp_blocking", "{shape: [2], dim_names: [mp]}", "",
                    "parallelize: {mp: {dim: mp, plan: megatron}}\noverlap: false\n");
  std::vector<std::string> want = {"ALL_REDUCE wte.out"};
  for (int i = 0; i < kLayers; ++i) {
    const std::string h = "h." + std::to_string(i);
    want.push_back("ALL_REDUCE " + h + ".attn.c_proj.xw");
    want.push_back("ALL_REDUCE " + h + ".mlp.c_proj.xw");
  }
  for (const char* t : {"logits.max", "logits.sumexp", "logits.target", "ln_f.out@grad"}) {
    want.push_back(std::string("ALL_REDUCE ") + t);
  }
  for (int i = kLayers - 1; i >= 0; --i) {
    const std::string h = "h." + std::to_string(i);
    want.push_back("ALL_REDUCE " + h + ".ln_2.out@grad");
    want.push_back("ALL_REDUCE " + h + ".ln_1.out@grad");
  }
  want.push_back("ALL_REDUCE grad_norm_sq");
  ExpectCollectives(spec, blocking, want);
}

// Llama with grouped-query attention (4 heads, 2 kv heads) on mp = 2: each rank holds whole
// groups (2 query heads and their kv head), so the collectives are the same set as gpt2's.
TEST(MegatronPlanTest, GroupedQueryTensorParallelCollectivesAreMegatrons) {
  const TransformerJob job = TransformerJob::Create("llama");
  const std::string spec = job.WriteSpec("plan_mp", "{shape: [2], dim_names: [mp]}", "",
                                         "parallelize: {mp: {dim: mp, plan: megatron}}\n");
  const std::string blocking =
      job.WriteSpec("plan_mp_blocking", "{shape: [2], dim_names: [mp]}", "",
                    "parallelize: {mp: {dim: mp, plan: megatron}}\noverlap: false\n");
  std::vector<std::string> want = {"ALL_REDUCE model.embed_tokens.out"};
  for (int i = 0; i < kLayers; ++i) {
    const std::string l = "model.layers." + std::to_string(i);
    want.push_back("ALL_REDUCE " + l + ".self_attn.o_proj.out");
    want.push_back("ALL_REDUCE " + l + ".mlp.down_proj.out");
  }
  for (const char* t : {"logits.max", "logits.sumexp", "logits.target", "model.norm.out@grad"}) {
    want.push_back(std::string("ALL_REDUCE ") + t);
  }
  for (int i = kLayers - 1; i >= 0; --i) {
    const std::string l = "model.layers." + std::to_string(i);
    want.push_back("ALL_REDUCE " + l + ".post_attention_layernorm.out@grad");
    want.push_back("ALL_REDUCE " + l + ".input_layernorm.out@grad");
  }
  want.push_back("ALL_REDUCE grad_norm_sq");
  ExpectCollectives(spec, blocking, want);
}

TEST(MegatronPlanTest, SequenceParallelCollectivesAreMegatrons) {
  const TransformerJob job = TransformerJob::Create("gpt2");
  // One all-reduce per parameter gradient (bucket_mb: 0), as the rules derive them.
  const std::string sp = "parallelize: {mp: {dim: mp, plan: megatron, sequence_parallel: true}}\n";
  const std::string spec =
      job.WriteSpec("plan_sp", "{shape: [2], dim_names: [mp]}", "", sp + "bucket_mb: 0\n");
  const std::string blocking = job.WriteSpec("plan_sp_blocking", "{shape: [2], dim_names: [mp]}",
                                             "", sp + "bucket_mb: 0\noverlap: false\n");
  std::vector<std::string> want = {"REDUCE_SCATTER wte.out"};
  for (int i = 0; i < kLayers; ++i) {
    const std::string h = "h." + std::to_string(i);
    want.push_back("ALL_GATHER " + h + ".ln_1.out.gathered");
    want.push_back("REDUCE_SCATTER " + h + ".attn.c_proj.xw");
    want.push_back("ALL_GATHER " + h + ".ln_2.out.gathered");
    want.push_back("REDUCE_SCATTER " + h + ".mlp.c_proj.xw");
  }
  want.push_back("ALL_GATHER ln_f.out.gathered");
  for (const char* t : {"logits.max", "logits.sumexp", "logits.target"}) {
    want.push_back(std::string("ALL_REDUCE ") + t);
  }
  want.push_back("REDUCE_SCATTER ln_f.out.gathered@grad");
  for (int i = kLayers - 1; i >= 0; --i) {
    const std::string h = "h." + std::to_string(i);
    want.push_back("ALL_GATHER " + h + ".mlp.residual@grad");
    want.push_back("REDUCE_SCATTER " + h + ".ln_2.out.gathered@grad");
    want.push_back("ALL_GATHER " + h + ".attn.residual@grad");
    want.push_back("REDUCE_SCATTER " + h + ".ln_1.out.gathered@grad");
  }
  want.push_back("ALL_GATHER embed.out@grad");
  want.push_back("ALL_REDUCE wpe.weight@grad");
  for (int i = 0; i < kLayers; ++i) {
    const std::string h = "h." + std::to_string(i);
    for (const char* p : {".ln_1.weight", ".ln_1.bias", ".attn.c_proj.bias", ".ln_2.weight",
                          ".ln_2.bias", ".mlp.c_proj.bias"}) {
      want.push_back("ALL_REDUCE " + h + p + "@grad");
    }
  }
  want.push_back("ALL_REDUCE ln_f.weight@grad");
  want.push_back("ALL_REDUCE ln_f.bias@grad");
  want.push_back("ALL_REDUCE grad_norm_sq");
  ExpectCollectives(spec, blocking, want);

  // With the default buckets (25 MiB) these 27 small gradients are one all-reduce, before the
  // norm's; the activations' collectives stay as they are.
  const std::string bucketed = job.WriteSpec("plan_sp_bucketed", "{shape: [2], dim_names: [mp]}",
                                             "", sp + "overlap: false\n");
  std::vector<std::string> activations;
  for (const std::string& c : want) {
    const bool gradient = c.find(".weight@grad") != std::string::npos ||
                          c.find(".bias@grad") != std::string::npos;
    if (c.rfind("ALL_REDUCE ", 0) != 0 || !gradient) {
      activations.push_back(c);
    }
  }
  ASSERT_EQ(activations.size() + 27, want.size());
  ASSERT_EQ(activations.back(), "ALL_REDUCE grad_norm_sq");
  activations.pop_back();
  const std::vector<std::string> got = PlannedCollectives(bucketed);
  ASSERT_EQ(got.size(), activations.size() + 2);
  EXPECT_EQ(std::vector<std::string>(got.begin(), got.end() - 2), activations);
  EXPECT_EQ(got[got.size() - 2].rfind("ALL_REDUCE ", 0), 0u) << got[got.size() - 2];
  EXPECT_EQ(got.back(), "ALL_REDUCE grad_norm_sq");
}

}  // namespace
}  // namespace weft::testing
