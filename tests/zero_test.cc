// ZeRO as placements (`sharding: {dim: dp, level: 1|2}`) on real daemons, with the shared MLP job
// (fc0 8->16 with bias, gelu, fc1 16->16, relu, fc2 16->4 with bias; AdamW with weight decay):
//  - on dp = 4 every level gives the plain data-parallel losses (within 1e-5 of the 1-rank run
//    and 1e-4 of the float64 reference); the optimizer states per rank are a quarter of plain DP's,
//    the workers hold what the plan says (within 5%), and level 2 plans less than level 1;
//  - a checkpoint saved at level 1 on dp = 4 resumes at level 2 on dp = 2 and without sharding on
//    one rank, continuing the uninterrupted run's losses.
// The transformer models under ZeRO (dp x mp, dp x pp) are in transformer_test's cases.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"

namespace weft::testing {
namespace {

const char kDp4[] = "{shape: [4], dim_names: [dp]}";

class ZeroTest : public SharedClusterSuite<::testing::Test, 4> {
 protected:
  static JobOutcome RunJob(const std::string& spec_path) { return cluster_->RunSpecFile(spec_path); }
};

// The MLP job with `steps` steps, a sharding level (0: none) and an optional checkpoint block.
std::string Spec(const MlpJob& job, const std::string& mesh, int level, int steps = 5,
                 const std::string& checkpoint = "", bool resume = false) {
  std::string extra;
  if (level > 0) extra += "sharding: {dim: dp, level: " + std::to_string(level) + "}\n";
  if (!checkpoint.empty()) extra += "checkpoint: " + checkpoint + "\n";
  std::string yaml = job.SpecYaml(mesh, extra);
  const std::string train = "train: {steps: 5, seed: 7}";
  yaml.replace(yaml.find(train), train.size(),
               "train: {steps: " + std::to_string(steps) + ", seed: 7" +
                   (resume ? ", resume: true" : "") + "}");
  return yaml;
}

TEST_F(ZeroTest, EveryLevelOnFourRanksGivesThePlainDataParallelLosses) {
  const MlpJob job = MlpJob::Create();
  const std::vector<double> reference = job.ReferenceLosses();
  const std::vector<double> one =
      RunClusterLosses(*cluster_, job.WriteSpec("one.yaml", Spec(job, "{shape: [1]}", 0)));
  const std::vector<double> plain =
      RunClusterLosses(*cluster_, job.WriteSpec("plain.yaml", Spec(job, kDp4, 0)));
  ExpectLossesMatch(plain, one, reference, MlpJob::kSteps, "dp4");
  for (int level : {1, 2}) {
    const std::string name = "level" + std::to_string(level);
    const std::vector<double> losses =
        RunClusterLosses(*cluster_, job.WriteSpec(name + ".yaml", Spec(job, kDp4, level)));
    ExpectLossesMatch(losses, one, reference, MlpJob::kSteps, "dp4 " + name);
    ASSERT_EQ(losses.size(), plain.size());
    for (size_t s = 0; s < plain.size(); ++s) {
      EXPECT_LE(RelDiff(losses[s], plain[s]), 1e-5) << name << " step " << s + 1;
    }
  }
}

TEST_F(ZeroTest, StatesAreAQuarterPerRankPlannedAndMeasured) {
  const MlpJob job = MlpJob::Create();
  std::map<int, nlohmann::json> planned;
  std::map<int, int64_t> measured;
  for (int level : {0, 1, 2}) {
    const std::string spec =
        job.WriteSpec("mem" + std::to_string(level) + ".yaml", Spec(job, kDp4, level, 2));
    planned[level] = PlanJson(spec)["ranks"][0]["memory"];
    measured[level] = RunJob(spec).peak_bytes;
    // The workers hold what the plan says (the arena is the plan's peak; scratch aside).
    const int64_t peak = planned[level]["peak_bytes"].get<int64_t>();
    EXPECT_LE(std::abs(measured[level] - peak), peak / 20)
        << "level " << level << ": measured " << measured[level] << ", planned " << peak;
  }
  // Every parameter of this MLP has an axis at least 4 long: the states split evenly.
  const int64_t states = planned[0]["optimizer_state_bytes"].get<int64_t>();
  EXPECT_EQ(planned[1]["optimizer_state_bytes"].get<int64_t>() * 4, states);
  EXPECT_EQ(planned[2]["optimizer_state_bytes"].get<int64_t>() * 4, states);
  EXPECT_EQ(planned[1]["param_bytes"], planned[0]["param_bytes"]);  // parameters stay whole
  // Level 2 keeps a quarter of each reduced gradient, level 1 the whole and a quarter.
  EXPECT_LT(planned[2]["grad_bytes"].get<int64_t>(), planned[1]["grad_bytes"].get<int64_t>());
  EXPECT_LT(planned[1]["peak_bytes"].get<int64_t>(), planned[0]["peak_bytes"].get<int64_t>());
  EXPECT_LE(planned[2]["peak_bytes"].get<int64_t>(), planned[1]["peak_bytes"].get<int64_t>());
  EXPECT_LT(measured[1], measured[0]);
}

TEST_F(ZeroTest, ACheckpointResumesAtAnotherLevelOnAnotherMesh) {
  const MlpJob job = MlpJob::Create();
  const std::vector<double> straight =
      RunClusterLosses(*cluster_, job.WriteSpec("straight.yaml", Spec(job, kDp4, 0, 4)), 4);
  ASSERT_EQ(straight.size(), 4u);
  JobOutcome first = RunJob(
      job.WriteSpec("first.yaml", Spec(job, kDp4, 1, 2, "{dir: saved, every: 2}")));
  ASSERT_EQ(first.saves.size(), 1u) << first.message;
  std::filesystem::copy(job.dir + "/saved", job.dir + "/for_dp2",
                        std::filesystem::copy_options::recursive);
  std::filesystem::copy(job.dir + "/saved", job.dir + "/for_one",
                        std::filesystem::copy_options::recursive);
  JobOutcome dp2 = RunJob(job.WriteSpec(
      "dp2.yaml", Spec(job, "{shape: [2], dim_names: [dp]}", 2, 4, "{dir: for_dp2}", true)));
  JobOutcome one =
      RunJob(job.WriteSpec("resume_one.yaml", Spec(job, "{shape: [1]}", 0, 4, "{dir: for_one}", true)));
  for (const auto& [what, r] : {std::pair<const char*, JobOutcome*>{"level 2 on dp2", &dp2},
                                {"no sharding on 1 rank", &one}}) {
    ASSERT_EQ(r->losses.size(), 2u) << what << ": " << r->message;
    for (int64_t s : {3, 4}) {
      EXPECT_LE(RelDiff(r->losses.at(s), straight[s - 1]), 1e-5)
          << what << ", step " << s << ": " << r->losses.at(s) << " vs " << straight[s - 1];
    }
  }
}

}  // namespace
}  // namespace weft::testing
