// Tensor parallelism end to end through the real daemons: fc0 column-parallel and fc1
// row-parallel (Megatron's MLP), on mp = 4 and on a dp x mp = 2 x 2 mesh, with and without a bias
// on the row-parallel layer, written as explicit placements and through `parallelize`. Per-step
// losses equal the 1-rank run (1e-5 relative) and the independent float64 reference (1e-4). The
// cases share one cluster, and the 1-rank run of each job (with and without the bias) is made
// once for all of them.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"

namespace weft::testing {
namespace {

struct TpCase {
  std::string name;
  std::string mesh;  // 4 ranks
  bool fc1_bias;
  bool via_parallelize;
};

std::string SpecFor(const MlpJob& job, const TpCase& c) {
  if (c.via_parallelize) {
    return job.SpecYaml(c.mesh,
                        "parallelize:\n"
                        "  mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}\n");
  }
  // The same placements by hand: one entry per mesh dim, mp last in both meshes.
  const std::string lead = c.mesh.find("dp") != std::string::npos ? "Replicate(), " : "";
  std::map<std::string, std::string> layers = {
      {"fc0", "placements: {weight: [" + lead + "Shard(1)], bias: [" + lead + "Shard(0)]}"},
      {"fc1", std::string("placements: {weight: [") + lead + "Shard(0)]" +
                  (c.fc1_bias ? ", bias: [" + lead + "Replicate()]" : "") + "}"},
  };
  return job.SpecYaml(c.mesh, "", layers);
}

void PrintTo(const TpCase& c, std::ostream* os) { *os << c.name; }

class TensorParallelTest : public SharedClusterSuite<::testing::TestWithParam<TpCase>, 4> {
 protected:
  // A job, its float64 reference and its 1-rank run.
  struct Baseline {
    MlpJob job;
    std::vector<double> reference, one;
  };

  static void TearDownTestSuite() {
    SharedClusterSuite::TearDownTestSuite();
    baselines_.clear();
  }

  // Made by the first case that needs it.
  static const Baseline& BaselineFor(bool fc1_bias) {
    auto it = baselines_.find(fc1_bias);
    if (it == baselines_.end()) {
      Baseline b{MlpJob::Create(fc1_bias), {}, {}};
      b.reference = b.job.ReferenceLosses();
      b.one = RunClusterLosses(
          *cluster_, b.job.WriteSpec("one.yaml", b.job.SpecYaml("{shape: [1], dim_names: [dp]}")));
      it = baselines_.emplace(fc1_bias, std::move(b)).first;
    }
    return it->second;
  }

  static std::map<bool, Baseline> baselines_;
};

std::map<bool, TensorParallelTest::Baseline> TensorParallelTest::baselines_;

TEST_P(TensorParallelTest, LossesMatchOneRankAndFloat64Reference) {
  const TpCase& c = GetParam();
  const Baseline& base = BaselineFor(c.fc1_bias);
  const MlpJob& job = base.job;
  const std::vector<double>& reference = base.reference;
  const std::vector<double>& one = base.one;
  std::vector<double> tp =
      RunClusterLosses(*cluster_, job.WriteSpec(c.name + ".yaml", SpecFor(job, c)));
  ExpectLossesMatch(tp, one, reference, MlpJob::kSteps, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    ColumnThenRow, TensorParallelTest,
    ::testing::Values(TpCase{"mp4", "{shape: [4], dim_names: [mp]}", false, false},
                      TpCase{"mp4_bias", "{shape: [4], dim_names: [mp]}", true, false},
                      TpCase{"mp4_parallelize", "{shape: [4], dim_names: [mp]}", true, true},
                      TpCase{"dp2mp2", "{shape: [2, 2], dim_names: [dp, mp]}", false, false},
                      TpCase{"dp2mp2_bias", "{shape: [2, 2], dim_names: [dp, mp]}", true, false},
                      TpCase{"dp2mp2_parallelize", "{shape: [2, 2], dim_names: [dp, mp]}", false, true}),
    [](const ::testing::TestParamInfo<TpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace weft::testing
