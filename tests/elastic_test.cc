// Elastic data parallelism (train.elastic) through the real daemons: a dp=4 job loses a worker to
// SIGKILL and none returns within wait_s, so it shrinks to dp=2 with twice the micro-batches and
// resumes from its newest checkpoint; a worker registers and the job grows back to dp=4 at its
// next checkpoint. Every step's loss equals an uninterrupted dp=4 run's (1e-5) and the float64
// reference's (1e-4); the events, `weftctl get` and `weftctl watch` show both resizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 100;

// Four workers whose steps take at least 40 ms each (so the job still runs when the test acts),
// lost 2 s after their last heartbeat.
DaemonClusterOptions PacedWorkers() {
  DaemonClusterOptions options;
  options.cpu_workers = 4;
  options.coordinator_flags = {"--heartbeat_ms", "200", "--worker_timeout_ms", "2000"};
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", "40"}};
  return options;
}

// The MLP job on dp 4, checkpointed every 4 steps into `dir`; with `elastic`, resizable over dp.
v1::JobSpec Spec(const MlpJob& job, const std::string& dir, bool elastic) {
  std::string yaml = MlpSpec(job, "{shape: [4], dim_names: [dp]}", kSteps,
                             absl::StrCat("{dir: ", dir, ", every: 4}"), false);
  const std::string train = "train: {";
  yaml.replace(yaml.find(train), train.size(),
               elastic ? "train: {max_restarts: 2, elastic: {dim: dp, min: 1, wait_s: 1}, "
                       : "train: {");
  auto spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

TEST(ElasticTest, ALostWorkerShrinksTheJobAndANewOneGrowsItBackWithTheSameLosses) {
  const MlpJob job = MlpJob::Create();
  auto cluster = DaemonCluster::Start(PacedWorkers());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;

  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, "straight", false), &id).ok());
  const JobOutcome straight = JobOutcome::Of(c.Watch(id, 120));
  ASSERT_EQ(straight.state, v1::SUCCEEDED) << straight.message << c.Logs();
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  std::string elastic;
  ASSERT_TRUE(c.Submit(Spec(job, "elastic", true), &elastic).ok());
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(elastic).steps_size() >= 10; }, absl::Seconds(60))
                  .ok())
      << c.GetJob(elastic).DebugString() << c.Logs();
  // A worker dies; none replaces it within wait_s (1 s): the job runs on dp 2.
  c.worker(3).Signal(SIGKILL);
  ASSERT_TRUE(PollUntil(
                  [&] {
                    const v1::Job j = c.GetJob(elastic);
                    return j.elastic_size() == 2 && j.state() == v1::RUNNING;
                  },
                  absl::Seconds(60))
                  .ok())
      << c.GetJob(elastic).DebugString() << c.Logs();
  EXPECT_EQ(c.GetJob(elastic).workers_size(), 2);
  // A worker registers: the job grows back at its next checkpoint.
  ASSERT_TRUE(c.StartWorker().ok());
  const std::vector<v1::JobEvent> events = c.Watch(elastic, 120);
  const JobOutcome outcome = JobOutcome::Of(events);
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();

  // Every step's loss, as its latest attempt ran it, is the uninterrupted run's and the float64
  // reference's.
  ASSERT_EQ(outcome.losses.size(), static_cast<size_t>(kSteps));
  ExpectLossesNear(outcome.LossList(), straight.LossList(), 1e-5, "elastic vs uninterrupted dp 4");
  const std::vector<double> reference = job.Reference().Train(
      job.inputs, job.labels, MlpJob::kSamples, MlpJob::kBatch, kSteps, job.optimizer);
  ExpectLossesNear(outcome.LossList(), reference, 1e-4, "elastic vs float64");

  // Two resizes: dp 4 -> 2 with 2 micro-batches, then 2 -> 4 from a checkpoint.
  std::vector<v1::Resize> resizes;
  for (const v1::JobEvent& e : events) {
    if (e.has_resize()) resizes.push_back(e.resize());
  }
  ASSERT_EQ(resizes.size(), 2u) << c.Logs();
  EXPECT_EQ(resizes[0].from_size(), 4);
  EXPECT_EQ(resizes[0].to_size(), 2);
  EXPECT_EQ(resizes[0].micro_batches(), 2);
  EXPECT_EQ(resizes[1].from_size(), 2);
  EXPECT_EQ(resizes[1].to_size(), 4);
  EXPECT_EQ(resizes[1].micro_batches(), 1);
  EXPECT_GT(resizes[1].step(), 0);
  EXPECT_EQ(resizes[1].step() % 4, 0) << "a grow resumes from a checkpoint";

  // The record: back at dp 4; one restart (the loss) and one grow; the resizes listed.
  const v1::Job record = c.GetJob(elastic);
  EXPECT_EQ(record.elastic_size(), 4);
  EXPECT_EQ(record.grows(), 1);
  EXPECT_EQ(record.attempt(), 2);
  ASSERT_EQ(record.resizes_size(), 2);
  EXPECT_EQ(record.workers_size(), 4);
  const CommandResult get = c.Weftctl({"get", elastic});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, HasSubstr("elastic:  dp 4 of 4 (min 1, wait 1 s); 2 resizes"));
  EXPECT_THAT(get.out, HasSubstr("resize: shrink dp 4 -> 2 (2 ranks, 2 micro-batches)"));
  EXPECT_THAT(get.out, HasSubstr("resize: grow dp 2 -> 4 (4 ranks, 1 micro-batch) from the "
                                 "checkpoint of step"));
  const CommandResult watch = c.Weftctl({"watch", elastic});
  EXPECT_THAT(watch.out, HasSubstr("resize: shrink dp 4 -> 2")) << watch.err;
  EXPECT_THAT(watch.out, HasSubstr("resize: grow dp 2 -> 4")) << watch.err;
}

}  // namespace
}  // namespace weft::testing
