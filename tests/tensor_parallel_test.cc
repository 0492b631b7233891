// Tensor parallelism end to end through the real daemons: fc0 column-parallel and fc1
// row-parallel (Megatron's MLP), on mp = 4 and on a dp x mp = 2 x 2 mesh, with and without a bias
// on the row-parallel layer, written as explicit placements and through `parallelize`. Per-step
// losses equal the 1-rank run (1e-5 relative) and the independent float64 reference (1e-4).
#include <gtest/gtest.h>

#include "tests/cluster_fixture.h"

namespace weft::testing {
namespace {

struct TpCase {
  std::string name;
  std::string mesh;
  int ranks;
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

class TensorParallelTest : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelTest, LossesMatchOneRankAndFloat64Reference) {
  const TpCase& c = GetParam();
  MlpJob job = MlpJob::Create(c.fc1_bias);
  std::vector<double> reference = job.ReferenceLosses();
  std::vector<double> one =
      RunLocalLosses(job.WriteSpec("one.yaml", job.SpecYaml("{shape: [1], dim_names: [dp]}")), 1);
  std::vector<double> tp = RunLocalLosses(job.WriteSpec(c.name + ".yaml", SpecFor(job, c)), c.ranks);
  ASSERT_EQ(one.size(), reference.size());
  ASSERT_EQ(tp.size(), reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_LE(RelDiff(tp[s], one[s]), 1e-5)
        << c.name << " step " << s + 1 << ": " << tp[s] << " vs 1 rank " << one[s];
    EXPECT_LE(RelDiff(tp[s], reference[s]), 1e-4)
        << c.name << " step " << s + 1 << ": " << tp[s] << " vs float64 " << reference[s];
  }
}

INSTANTIATE_TEST_SUITE_P(
    ColumnThenRow, TensorParallelTest,
    ::testing::Values(TpCase{"mp4", "{shape: [4], dim_names: [mp]}", 4, false, false},
                      TpCase{"mp4_bias", "{shape: [4], dim_names: [mp]}", 4, true, false},
                      TpCase{"mp4_parallelize", "{shape: [4], dim_names: [mp]}", 4, true, true},
                      TpCase{"dp2mp2", "{shape: [2, 2], dim_names: [dp, mp]}", 4, false, false},
                      TpCase{"dp2mp2_bias", "{shape: [2, 2], dim_names: [dp, mp]}", 4, true, false},
                      TpCase{"dp2mp2_parallelize", "{shape: [2, 2], dim_names: [dp, mp]}", 4, false,
                             true}),
    [](const ::testing::TestParamInfo<TpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace weft::testing
