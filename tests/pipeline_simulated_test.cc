// Pipeline parallelism, end to end without sockets: an 8-linear-layer MLP planned with each
// schedule (FThenB, 1F1B, VPP) on pp=4, pp x dp and pp x mp meshes, every rank a thread running
// the real executor (SEND/RECV on in-process communicators), against the 1-rank run (1e-5
// relative per step) and the float64 reference (1e-4), losses and final parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/mlp_reference.h"
#include "tests/process.h"
#include "tests/rank_simulation.h"

namespace weft::testing {
namespace {

// fc0 6->12, then fc1..fc6 12->12, fc7 12->4, all with bias; gelu and relu alternate between
// them. 40 samples, batch 16 (step 3 wraps), 4 steps of AdamW with weight decay.
struct DeepMlp {
  static constexpr int kIn = 6, kHidden = 12, kOut = 4, kSamples = 40, kBatch = 16, kSteps = 4;
  std::string dir;
  std::vector<double> inputs, labels;
  std::vector<NamedTensor> init;
  std::vector<RefLayer> layers;

  static DeepMlp Create() {
    DeepMlp job;
    job.dir = MakeTempDir("pipeline-mlp");
    job.inputs = TestValues(kSamples * kIn, 11, 1.0);
    job.labels = TestValues(kSamples * kOut, 12, 0.5);
    WriteNpyF32(job.dir + "/inputs.npy", {kSamples, kIn}, job.inputs);
    WriteNpyF32(job.dir + "/labels.npy", {kSamples, kOut}, job.labels);
    for (int i = 0; i < 8; ++i) {
      const int in = i == 0 ? kIn : kHidden, out = i == 7 ? kOut : kHidden;
      const std::string name = "fc" + std::to_string(i);
      job.layers.push_back({name, "linear", in, out, true});
      if (i < 7) job.layers.push_back({"act" + std::to_string(i), i % 2 == 0 ? "gelu" : "relu"});
      job.init.push_back({name + ".weight", {in, out},
                          TestValues(in * out, 20 + i, 1.0 / std::sqrt(static_cast<double>(in)))});
      job.init.push_back({name + ".bias", {out}, TestValues(out, 40 + i, 0.1)});
    }
    WriteSafetensorsF32(job.dir + "/init.safetensors", job.init);
    return job;
  }

  // `places` adds "placements: {...}" to the named layers.
  std::string Yaml(const std::string& mesh,
                   const std::map<std::string, std::string>& places = {}) const {
    std::ostringstream s;
    s << "name: pipeline-mlp\nmesh: " << mesh << "\nmodel:\n  layers:\n";
    for (const RefLayer& l : layers) {
      s << "    - {name: " << l.name << ", type: " << l.type;
      if (l.type == "linear") {
        s << ", in_features: " << l.in << ", out_features: " << l.out << ", bias: true";
      }
      auto it = places.find(l.name);
      if (it != places.end()) s << ", placements: {" << it->second << "}";
      s << "}\n";
    }
    s << "  loss: mse\n"
      << "data: {source: npy, input: inputs.npy, label: labels.npy, batch_size: " << kBatch << "}\n"
      << "optimizer: {type: adamw, lr: 0.01, betas: [0.9, 0.999], eps: 1.0e-8, "
         "weight_decay: 0.01}\n"
      << "train: {steps: " << kSteps << ", seed: 7}\n"
      << "init_from: init.safetensors\n";
    return s.str();
  }

  RefOptimizer Optimizer() const {
    RefOptimizer opt;
    opt.type = "adamw";
    opt.lr = 0.01;
    opt.weight_decay = 0.01;
    return opt;
  }
};

struct PipelineConfig {
  std::string name;
  std::string mesh;
  std::string schedule;  // "" for no pipeline
  int micro_batches = 1;
  int virtual_stages = 1;
  std::map<std::string, std::string> places;
};

std::ostream& operator<<(std::ostream& os, const PipelineConfig& c) { return os << c.name; }

JobSimulation Simulate(const DeepMlp& job, const PipelineConfig& c) {
  auto spec = ParseJobSpecYaml(job.Yaml(c.mesh, c.places), job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  if (!c.schedule.empty()) {
    spec->mutable_pipeline()->set_dim("pp");
    spec->mutable_pipeline()->set_schedule(c.schedule);
    spec->mutable_pipeline()->set_micro_batches(c.micro_batches);
    spec->mutable_pipeline()->set_virtual_stages(c.virtual_stages);
  }
  return PlanAndSimulate(*std::move(spec));
}

class PipelineSimulatedTest : public ::testing::TestWithParam<PipelineConfig> {};

TEST_P(PipelineSimulatedTest, MatchesOneRankAndFloat64Reference) {
  const PipelineConfig& c = GetParam();
  DeepMlp job = DeepMlp::Create();
  RefMlp ref(job.layers);
  for (const auto& t : job.init) ref.params[t.name] = t.values;
  std::vector<double> reference = ref.Train(job.inputs, job.labels, DeepMlp::kSamples,
                                            DeepMlp::kBatch, DeepMlp::kSteps, job.Optimizer());

  JobSimulation single = Simulate(job, {"single", "{shape: [1], dim_names: [dp]}"});
  JobSimulation dist = Simulate(job, c);
  ASSERT_EQ(single.losses.size(), reference.size());
  ASSERT_EQ(dist.losses.size(), reference.size());
  ASSERT_EQ(dist.grad_norms.size(), reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_LE(RelDiff(single.losses[s], reference[s]), 1e-4) << "step " << s + 1;
    EXPECT_LE(RelDiff(dist.losses[s], single.losses[s]), 1e-5)
        << "step " << s + 1 << ": " << dist.losses[s] << " vs " << single.losses[s];
    EXPECT_LE(RelDiff(dist.losses[s], reference[s]), 1e-4) << "step " << s + 1;
    // Each stage's parameters counted once, summed over the stages with the loss.
    EXPECT_LE(RelDiff(dist.grad_norms[s], single.grad_norms[s]), 1e-5)
        << "step " << s + 1 << ": grad norm " << dist.grad_norms[s] << " vs 1 rank "
        << single.grad_norms[s];
  }
  EXPECT_GT(dist.ops[v1::Instruction::SEND], 0);
  EXPECT_EQ(dist.ops[v1::Instruction::SEND], dist.ops[v1::Instruction::RECV]);
  EXPECT_GT(dist.ops[v1::Instruction::ACCUMULATE], 0);
  // Every parameter is held by some rank; each piece equals the slice of the reference and of
  // the 1-rank run.
  std::map<std::string, int> holders;
  for (size_t r = 0; r < dist.pieces.size(); ++r) {
    for (const auto& [name, piece] : dist.pieces[r]) {
      ++holders[name];
      std::vector<double> want = SliceBox(ref.params.at(name), piece);
      std::vector<double> one = SliceBox(single.pieces[0].at(name).values, piece);
      ASSERT_EQ(piece.values.size(), want.size()) << name;
      for (size_t i = 0; i < want.size(); ++i) {
        const std::string where = name + "[" + std::to_string(i) + "] rank " + std::to_string(r);
        EXPECT_NEAR(piece.values[i], want[i], 1e-4) << where << " vs float64";
        EXPECT_NEAR(piece.values[i], one[i], 1e-5 * std::max(1.0, std::abs(one[i]))) << where;
      }
    }
  }
  for (const NamedTensor& t : job.init) EXPECT_GT(holders[t.name], 0) << t.name;
}

// Megatron column -> row pairs inside each stage on the mp dim (the second of [pp, mp]).
const std::map<std::string, std::string> kColRowOnMp = {
    {"fc0", "weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]"},
    {"fc1", "weight: [Replicate(), Shard(0)]"},
    {"fc2", "weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]"},
    {"fc3", "weight: [Replicate(), Shard(0)]"},
    {"fc4", "weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]"},
    {"fc5", "weight: [Replicate(), Shard(0)]"},
    {"fc6", "weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]"},
    {"fc7", "weight: [Replicate(), Shard(0)]"},
};

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineSimulatedTest,
    ::testing::Values(
        PipelineConfig{"pp4_fthenb_m4", "{shape: [4], dim_names: [pp]}", "FThenB", 4},
        PipelineConfig{"pp4_1f1b_m4", "{shape: [4], dim_names: [pp]}", "1F1B", 4},
        PipelineConfig{"pp4_1f1b_m8", "{shape: [4], dim_names: [pp]}", "1F1B", 8},
        PipelineConfig{"pp4_vpp2_m4", "{shape: [4], dim_names: [pp]}", "VPP", 4, 2},
        PipelineConfig{"pp4_vpp2_m8", "{shape: [4], dim_names: [pp]}", "VPP", 8, 2},
        // Batch 16 in 3 micro-batches: 5, 5 and 6 rows.
        PipelineConfig{"pp2_fthenb_uneven_m3", "{shape: [2], dim_names: [pp]}", "FThenB", 3},
        PipelineConfig{"pp2xdp2_1f1b_m4", "{shape: [2, 2], dim_names: [pp, dp]}", "1F1B", 4},
        PipelineConfig{"dp2xpp2_vpp2_m2", "{shape: [2, 2], dim_names: [dp, pp]}", "VPP", 2, 2},
        PipelineConfig{"pp2xmp2_col_row_1f1b_m4", "{shape: [2, 2], dim_names: [pp, mp]}", "1F1B",
                       4, 1, kColRowOnMp},
        PipelineConfig{"pp2xmp2_col_row_fthenb_m2", "{shape: [2, 2], dim_names: [pp, mp]}",
                       "FThenB", 2, 1, kColRowOnMp}),
    [](const ::testing::TestParamInfo<PipelineConfig>& info) { return info.param.name; });

}  // namespace
}  // namespace weft::testing
