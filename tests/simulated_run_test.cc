// The central property on many configurations, without sockets: the planner's per-rank Programs,
// run by the real executor with every rank a thread (in-process communicators), give the same
// per-step losses and final parameters as the 1-rank run and as the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "common/spec/spec.h"
#include "coordinator/planner/planner.h"
#include "tests/cluster_fixture.h"
#include "worker/comm/local/local_communicator.h"
#include "worker/executor/executor.h"

namespace weft::testing {
namespace {

struct RunOutput {
  std::vector<double> losses;                               // rank 0's
  std::map<std::string, std::vector<float>> rank0_params;   // local pieces held by rank 0
};

// Plans `yaml` and runs every rank in its own thread; fails the test on any error or on ranks
// disagreeing about a loss.
RunOutput Simulate(const MlpJob& job, const std::string& yaml) {
  RunOutput out;
  auto spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return out;
  EXPECT_TRUE(ResolveDataShapes(&*spec).ok());
  absl::Status valid = ValidateJobSpec(*spec);
  EXPECT_TRUE(valid.ok()) << valid;
  auto programs = planner::PlanJob(*spec, "sim", 0);
  EXPECT_TRUE(programs.ok()) << programs.status();
  if (!programs.ok()) return out;
  const int world = static_cast<int>(programs->size());
  auto local_world = std::make_shared<LocalWorld>(world, absl::Seconds(30));
  std::vector<std::vector<double>> losses(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicatorFactory factory(local_world, r);
      auto exec = Executor::Create((*programs)[r], &factory);
      if (!exec.ok()) {
        status[r] = exec.status();
        return;
      }
      status[r] = (*exec)->Initialize();
      for (int64_t s = 1; status[r].ok() && s <= (*programs)[r].steps(); ++s) {
        auto loss = (*exec)->RunStep(s);
        if (!loss.ok()) {
          status[r] = loss.status();
          break;
        }
        losses[r].push_back(*loss);
      }
      if (r == 0 && status[r].ok()) {
        for (const char* name : {"fc0.weight", "fc0.bias", "fc1.weight", "fc2.weight", "fc2.bias"}) {
          auto values = (*exec)->ReadBuffer(name);
          EXPECT_TRUE(values.ok()) << name << ": " << values.status();
          if (values.ok()) out.rank0_params[name] = *values;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(losses[r], losses[0]) << "rank " << r << " reports a different loss than rank 0";
  }
  out.losses = losses[0];
  return out;
}

double RelDiff(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

class SimulatedRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SimulatedRunTest, MatchesOneRankAndFloat64Reference) {
  MlpJob job = MlpJob::Create();
  RefMlp ref({{"fc0", "linear", MlpJob::kIn, MlpJob::kHidden, true},
              {"act0", "gelu"},
              {"fc1", "linear", MlpJob::kHidden, MlpJob::kHidden, false},
              {"act1", "relu"},
              {"fc2", "linear", MlpJob::kHidden, MlpJob::kOut, true}});
  for (const auto& t : job.init) ref.params[t.name] = t.values;
  std::vector<double> reference = ref.Train(job.inputs, job.labels, MlpJob::kSamples,
                                            MlpJob::kBatch, MlpJob::kSteps, job.optimizer);

  RunOutput single = Simulate(job, job.SpecYaml("{shape: [1], dim_names: [dp]}"));
  RunOutput dist = Simulate(job, job.SpecYaml(GetParam()));
  ASSERT_EQ(single.losses.size(), reference.size());
  ASSERT_EQ(dist.losses.size(), reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_LE(RelDiff(single.losses[s], reference[s]), 1e-4) << "step " << s + 1;
    EXPECT_LE(RelDiff(dist.losses[s], single.losses[s]), 1e-5) << "step " << s + 1;
  }
  // Parameters are replicated in these configurations: rank 0 holds each one whole.
  for (const auto& [name, values] : dist.rank0_params) {
    const auto& want = ref.params.at(name);
    ASSERT_EQ(values.size(), want.size()) << name;
    const auto& one = single.rank0_params.at(name);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(values[i], want[i], 1e-4) << name << "[" << i << "] vs float64";
      EXPECT_NEAR(values[i], one[i], 1e-5 * std::max(1.0, std::abs(static_cast<double>(one[i])))) << name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, SimulatedRunTest,
    ::testing::Values("{shape: [2], dim_names: [dp]}", "{shape: [4], dim_names: [dp]}",
                      "{shape: [8], dim_names: [dp]}",
                      // dp x mp with replicated parameters: the mp groups compute the same thing.
                      "{shape: [2, 2], dim_names: [dp, mp]}",
                      "{shape: [2, 2], dim_names: [mp, dp]}"));

}  // namespace
}  // namespace weft::testing
