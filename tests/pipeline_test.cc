// Pipeline parallelism end to end through the real daemons: an 8-layer MLP on pp = 4 with each
// schedule (FThenB, 1F1B with 4 and 8 micro-batches, VPP with 2 virtual stages), and on [2,2]
// meshes pp x dp and pp x mp. Per-step losses equal the 1-rank run (1e-5 relative) and an
// independent float64 reference (1e-4); a traced run's timeline has every micro-batch's forward
// and backward on every stage. The schedule cases share one cluster and one 1-rank run.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"

namespace weft::testing {
namespace {

constexpr int kWidth = 8, kLayers = 8, kSamples = 24, kBatch = 16, kSteps = 4;

struct DeepJob {
  std::string dir;
  std::vector<double> inputs, labels;
  std::vector<NamedTensor> init;
  std::vector<RefLayer> layers;

  static DeepJob Create() {
    DeepJob job;
    job.dir = MakeTempDir("pipeline-job");
    job.inputs = TestValues(kSamples * kWidth, 101, 1.0);
    job.labels = TestValues(kSamples * kWidth, 102, 0.5);
    WriteNpyF32(job.dir + "/inputs.npy", {kSamples, kWidth}, job.inputs);
    WriteNpyF32(job.dir + "/labels.npy", {kSamples, kWidth}, job.labels);
    for (int l = 0; l < kLayers; ++l) {
      const std::string name = "fc" + std::to_string(l);
      job.init.push_back({name + ".weight", {kWidth, kWidth}, TestValues(kWidth * kWidth, 200 + l, 0.6)});
      job.init.push_back({name + ".bias", {kWidth}, TestValues(kWidth, 300 + l, 0.1)});
      job.layers.push_back({name, "linear", kWidth, kWidth, true});
      if (l + 1 < kLayers) job.layers.push_back({"act" + std::to_string(l), "relu"});
    }
    WriteSafetensorsF32(job.dir + "/init.safetensors", job.init);
    return job;
  }

  // mesh: YAML flow mapping; extra: appended top-level YAML (pipeline, parallelize).
  std::string Spec(const std::string& file, const std::string& mesh, const std::string& extra) const {
    std::ostringstream s;
    s << "name: pipeline-test\nmesh: " << mesh << "\nmodel:\n  layers:\n";
    for (const RefLayer& l : layers) {
      if (l.type == "linear") {
        s << "    - {name: " << l.name << ", type: linear, in_features: " << kWidth
          << ", out_features: " << kWidth << "}\n";
      } else {
        s << "    - {name: " << l.name << ", type: relu}\n";
      }
    }
    s << "  loss: mse\ndata: {source: npy, input: inputs.npy, label: labels.npy, batch_size: "
      << kBatch << "}\n"
      << "optimizer: {type: adamw, lr: 0.01, weight_decay: 0.01}\n"
      << "train: {steps: " << kSteps << ", seed: 3}\n"
      << "init_from: init.safetensors\n"
      << extra;
    std::string path = dir + "/" + file;
    std::ofstream(path) << s.str();
    return path;
  }

  std::vector<double> Reference() const {
    RefMlp mlp(layers);
    for (const NamedTensor& t : init) mlp.params[t.name] = t.values;
    RefOptimizer opt;
    opt.lr = 0.01;
    opt.weight_decay = 0.01;
    return mlp.Train(inputs, labels, kSamples, kBatch, kSteps, opt);
  }
};

struct PpCase {
  std::string name;
  std::string mesh;  // 4 ranks
  std::string extra;
};

void PrintTo(const PpCase& c, std::ostream* os) { *os << c.name; }

class PipelineTest : public SharedClusterSuite<::testing::TestWithParam<PpCase>, 4> {
 protected:
  // The job, its float64 reference and its 1-rank run.
  struct Baseline {
    DeepJob job;
    std::vector<double> reference, one;
  };

  static void TearDownTestSuite() {
    SharedClusterSuite::TearDownTestSuite();
    baseline_.reset();
  }

  // Made by the first case.
  static const Baseline& GetBaseline() {
    if (!baseline_.has_value()) {
      Baseline b{DeepJob::Create(), {}, {}};
      b.reference = b.job.Reference();
      b.one = RunClusterLosses(
          *cluster_, b.job.Spec("one.yaml", "{shape: [1], dim_names: [dp]}", ""), kSteps);
      baseline_ = std::move(b);
    }
    return *baseline_;
  }

  static std::optional<Baseline> baseline_;
};

std::optional<PipelineTest::Baseline> PipelineTest::baseline_;

TEST_P(PipelineTest, LossesMatchOneRankAndFloat64Reference) {
  const PpCase& c = GetParam();
  const Baseline& base = GetBaseline();
  const DeepJob& job = base.job;
  const std::vector<double>& reference = base.reference;
  const std::vector<double>& one = base.one;
  std::vector<double> pp =
      RunClusterLosses(*cluster_, job.Spec(c.name + ".yaml", c.mesh, c.extra), kSteps);
  ExpectLossesMatch(pp, one, reference, kSteps, c.name);
}

const char kMp[] =
    "parallelize:\n  mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel, "
    "fc2: ColWiseParallel, fc3: RowWiseParallel, fc4: ColWiseParallel, fc5: RowWiseParallel, "
    "fc6: ColWiseParallel, fc7: RowWiseParallel}}\n";

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineTest,
    ::testing::Values(
        PpCase{"fthenb", "{shape: [4], dim_names: [pp]}",
               "pipeline: {dim: pp, schedule: FThenB, micro_batches: 4}\n"},
        PpCase{"one_f_one_b_m4", "{shape: [4], dim_names: [pp]}",
               "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4}\n"},
        PpCase{"one_f_one_b_m8", "{shape: [4], dim_names: [pp]}",
               "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 8}\n"},
        PpCase{"vpp", "{shape: [4], dim_names: [pp]}",
               "pipeline: {dim: pp, schedule: VPP, micro_batches: 4, virtual_stages: 2}\n"},
        PpCase{"pp_dp", "{shape: [2, 2], dim_names: [pp, dp]}",
               "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4}\n"},
        PpCase{"pp_mp", "{shape: [2, 2], dim_names: [pp, mp]}",
               std::string("pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4}\n") + kMp}),
    [](const ::testing::TestParamInfo<PpCase>& info) { return info.param.name; });

TEST(PipelineTraceTest, TimelineHasEveryMicroBatchOnEveryStage) {
  DeepJob job = DeepJob::Create();
  std::string spec = job.Spec("traced.yaml", "{shape: [4], dim_names: [pp]}",
                              "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4}\n");
  std::string trace = job.dir + "/trace.json";
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "local", "--ranks", "4", "--json",
                                "--trace", trace, "--coordinator_bin",
                                BinaryPath("coordinator/weft-coordinator"), "--worker_bin",
                                BinaryPath("worker/weft-worker"), spec},
                               240);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json doc = nlohmann::json::parse(ReadFileOrEmpty(trace), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "trace is not JSON";
  // (rank, phase, micro-batch) seen, and point-to-point spans per rank.
  std::set<std::tuple<int, std::string, int>> seen;
  std::map<int, int> transfers;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GT(e["dur"].get<double>(), 0.0);
    const int rank = e["pid"].get<int>();
    const std::string cat = e["cat"].get<std::string>();
    if (cat == "forward" || cat == "backward") {
      seen.insert({rank, cat, e["args"]["micro_batch"].get<int>()});
    }
    if (cat == "send" || cat == "recv") ++transfers[rank];
  }
  for (int rank = 0; rank < 4; ++rank) {
    for (const char* phase : {"forward", "backward"}) {
      for (int mb = 0; mb < 4; ++mb) {
        EXPECT_TRUE(seen.count({rank, phase, mb})) << "rank " << rank << " " << phase << " mb " << mb;
      }
    }
    EXPECT_GT(transfers[rank], 0) << "rank " << rank << " has no send/recv span";
  }
}

}  // namespace
}  // namespace weft::testing
