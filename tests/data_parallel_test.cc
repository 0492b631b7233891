// The first promise, end to end through the real binaries: the same job on 1, 2 and 4 ranks
// (weftctl local: a coordinator and N workers on 127.0.0.1) gives the same per-step losses, and
// they equal an independent float64 reference of the math.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/cluster_fixture.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

std::vector<double> RunLocal(const MlpJob& job, int ranks) {
  return RunLocalLosses(
      job.WriteSpec("dp" + std::to_string(ranks) + ".yaml",
                    job.SpecYaml("{shape: [" + std::to_string(ranks) + "], dim_names: [dp]}")),
      ranks);
}

TEST(DataParallelTest, LossesMatchAcrossRankCountsAndTheFloat64Reference) {
  MlpJob job = MlpJob::Create();
  std::vector<double> reference = job.ReferenceLosses();
  // The reference itself must be training, or agreement would prove little.
  ASSERT_LT(reference.back(), reference.front());

  std::vector<double> one = RunLocal(job, 1);
  ASSERT_EQ(one.size(), reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_LE(RelDiff(one[s], reference[s]), 1e-4)
        << "step " << s + 1 << ": 1 rank " << one[s] << " vs float64 " << reference[s];
  }
  for (int ranks : {2, 4}) {
    std::vector<double> many = RunLocal(job, ranks);
    ASSERT_EQ(many.size(), one.size());
    for (size_t s = 0; s < one.size(); ++s) {
      EXPECT_LE(RelDiff(many[s], one[s]), 1e-5)
          << "step " << s + 1 << ": " << ranks << " ranks " << many[s] << " vs 1 rank " << one[s];
      EXPECT_LE(RelDiff(many[s], reference[s]), 1e-4) << "step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace weft::testing
