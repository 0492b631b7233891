// A residual MLP end to end through the real daemons: a layer names its inputs (`inputs:`) and an
// `add` layer sums them, so act0's output feeds both fc1 and the residual sum and its gradient is
// the sum of both. Run on 1 rank, data-parallel on dp = 2 and tensor-parallel on mp = 2 (fc1
// column-parallel, fc2 row-parallel inside the residual branch) and pipelined on pp = 2 with the
// skip connection crossing the stages: per-step losses agree within 1e-5 of each other and within
// 1e-4 of the independent float64 reference.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/mlp_reference.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

constexpr int kIn = 8, kHidden = 16, kOut = 4, kSamples = 20, kBatch = 8, kSteps = 5;

// fc0 -> act0 -> [fc1 -> act1 -> fc2] + act0 = res1 -> fc3.
struct ResidualJob {
  std::string dir;
  std::vector<double> inputs, labels;
  std::vector<NamedTensor> init;

  static ResidualJob Create() {
    ResidualJob job;
    job.dir = MakeTempDir("residual-job");
    job.inputs = TestValues(kSamples * kIn, 51, 1.0);
    job.labels = TestValues(kSamples * kOut, 52, 0.5);
    WriteNpyF32(job.dir + "/inputs.npy", {kSamples, kIn}, job.inputs);
    WriteNpyF32(job.dir + "/labels.npy", {kSamples, kOut}, job.labels);
    job.init = {
        {"fc0.weight", {kIn, kHidden}, TestValues(kIn * kHidden, 53, 0.35)},
        {"fc0.bias", {kHidden}, TestValues(kHidden, 54, 0.1)},
        {"fc1.weight", {kHidden, kHidden}, TestValues(kHidden * kHidden, 55, 0.25)},
        {"fc1.bias", {kHidden}, TestValues(kHidden, 56, 0.1)},
        {"fc2.weight", {kHidden, kHidden}, TestValues(kHidden * kHidden, 57, 0.25)},
        {"fc2.bias", {kHidden}, TestValues(kHidden, 58, 0.1)},
        {"fc3.weight", {kHidden, kOut}, TestValues(kHidden * kOut, 59, 0.25)},
        {"fc3.bias", {kOut}, TestValues(kOut, 60, 0.1)},
    };
    WriteSafetensorsF32(job.dir + "/init.safetensors", job.init);
    return job;
  }

  // The spec on `mesh`; `fc1`/`fc2` are added inside those layers' mappings (placements),
  // `extra` at the top level (a pipeline block).
  std::string WriteSpec(const std::string& file, const std::string& mesh,
                        const std::string& fc1 = "", const std::string& fc2 = "",
                        const std::string& extra = "") const {
    std::ostringstream s;
    s << "name: residual\n"
      << "mesh: " << mesh << "\n"
      << "model:\n"
      << "  layers:\n"
      << "    - {name: fc0, type: linear, in_features: 8, out_features: 16}\n"
      << "    - {name: act0, type: gelu}\n"
      << "    - {name: fc1, type: linear, in_features: 16, out_features: 16" << fc1 << "}\n"
      << "    - {name: act1, type: relu}\n"
      << "    - {name: fc2, type: linear, in_features: 16, out_features: 16" << fc2 << "}\n"
      << "    - {name: res1, type: add, inputs: [act0, fc2]}\n"
      << "    - {name: fc3, type: linear, in_features: 16, out_features: 4}\n"
      << "  loss: mse\n"
      << "data: {source: npy, input: inputs.npy, label: labels.npy, batch_size: 8}\n"
      << "optimizer: {type: adamw, lr: 0.01, betas: [0.9, 0.999], eps: 1.0e-8, "
         "weight_decay: 0.01}\n"
      << "train: {steps: 5, seed: 7}\n"
      << "init_from: init.safetensors\n"
      << extra;
    const std::string path = dir + "/" + file;
    std::ofstream(path) << s.str();
    return path;
  }

  // Per-step losses of the float64 reference; without the residual, res1 is left out (fc3 reads
  // fc2).
  std::vector<double> ReferenceLosses(bool residual = true) const {
    std::vector<RefLayer> layers = {{"fc0", "linear", kIn, kHidden, true},
                                    {"act0", "gelu"},
                                    {"fc1", "linear", kHidden, kHidden, true},
                                    {"act1", "relu"},
                                    {"fc2", "linear", kHidden, kHidden, true}};
    if (residual) layers.push_back({"res1", "add", 0, 0, false, {"act0", "fc2"}});
    layers.push_back({"fc3", "linear", kHidden, kOut, true});
    RefMlp mlp(std::move(layers));
    for (const auto& t : init) mlp.params[t.name] = t.values;
    RefOptimizer adamw;
    adamw.lr = 0.01;
    adamw.weight_decay = 0.01;
    return mlp.Train(inputs, labels, kSamples, kBatch, kSteps, adamw);
  }
};

class ResidualTest : public SharedClusterSuite<::testing::Test, 2> {
 protected:
  // One cluster, one job, its reference and its 1-rank run for every case.
  static void SetUpTestSuite() {
    SharedClusterSuite::SetUpTestSuite();
    if (cluster_ == nullptr) return;
    job_ = std::make_unique<ResidualJob>(ResidualJob::Create());
    reference_ = job_->ReferenceLosses();
    one_ = RunClusterLosses(*cluster_, job_->WriteSpec("one.yaml", "{shape: [1], dim_names: [dp]}"),
                            kSteps);
  }
  static void TearDownTestSuite() {
    SharedClusterSuite::TearDownTestSuite();
    job_.reset();
  }

  static void ExpectMatches(const std::vector<double>& losses, const std::string& what) {
    ExpectLossesMatch(losses, one_, reference_, kSteps, what);
  }

  static std::unique_ptr<ResidualJob> job_;
  static std::vector<double> reference_, one_;
};

std::unique_ptr<ResidualJob> ResidualTest::job_;
std::vector<double> ResidualTest::reference_, ResidualTest::one_;

TEST_F(ResidualTest, OneRankMatchesTheFloat64Reference) {
  ExpectMatches(one_, "1 rank");
  // The residual matters: without it (res1 passing fc2 through) the losses differ.
  const std::vector<double> without = job_->ReferenceLosses(/*residual=*/false);
  EXPECT_GT(RelDiff(without[0], one_[0]), 1e-3);
}

TEST_F(ResidualTest, DataParallelOnTwoRanks) {
  ExpectMatches(RunClusterLosses(*cluster_,
                                 job_->WriteSpec("dp.yaml", "{shape: [2], dim_names: [dp]}"),
                                 kSteps),
                "dp=2");
}

TEST_F(ResidualTest, TensorParallelResidualBranchOnTwoRanks) {
  // fc1 column-parallel, fc2 row-parallel: fc2's output is Partial until it meets act0 in res1.
  ExpectMatches(
      RunClusterLosses(
          *cluster_,
          job_->WriteSpec("mp.yaml", "{shape: [2], dim_names: [mp]}",
                          ", placements: {weight: [Shard(1)], bias: [Shard(0)]}",
                          ", placements: {weight: [Shard(0)]}"),
          kSteps),
      "mp=2");
}

TEST_F(ResidualTest, SkipConnectionAcrossPipelineStages) {
  // Two stages split after act1 (the balanced cut): act0's output crosses to stage 1 for res1
  // next to act1's, and res1's gradient comes back as a second term of act0's gradient.
  const std::string spec = job_->WriteSpec(
      "pp.yaml", "{shape: [2], dim_names: [pp]}", "", "",
      "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\n");
  const CommandResult plan = RunCommand({BinaryPath("client/weftctl"), "plan", spec}, 120);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("# act0.out to stage 1"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("# res1.out@grad from stage 1"), std::string::npos) << plan.out;
  ExpectMatches(RunClusterLosses(*cluster_, spec, kSteps), "pp=2");
}

}  // namespace
}  // namespace weft::testing
