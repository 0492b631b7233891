// Automatic restart through the real daemons (train.max_restarts): a worker killed with SIGKILL
// mid-job, a replacement worker started, the job SUCCEEDS with the losses of an uninterrupted run
// bit for bit (the restart resumes from the newest committed checkpoint); a worker stopped with
// SIGSTOP is lost, its peer is free within 5 s though it waits in a collective with it, and the
// job restarts on a replacement.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "common/test_seed.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

constexpr char kDp2[] = "{shape: [2], dim_names: [dp]}";

// Workers are lost 2 s after their last heartbeat (every 200 ms).
DaemonClusterOptions FastLossDetection(int workers) {
  DaemonClusterOptions options;
  options.cpu_workers = workers;
  options.coordinator_flags = {"--heartbeat_ms", "200", "--worker_timeout_ms", "2000"};
  return options;
}

v1::JobSpec Spec(const MlpJob& job, int steps, const std::string& checkpoint, int max_restarts) {
  std::string yaml = MlpSpec(job, kDp2, steps, checkpoint, false);
  const std::string train = "train: {";
  yaml.replace(yaml.find(train), train.size(),
               absl::StrCat("train: {max_restarts: ", max_restarts, ", "));
  auto spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// Workers idle or busy (in `state` when given): neither lost nor drained.
int Alive(const DaemonCluster& cluster, const std::string& state = "") {
  int n = 0;
  for (const v1::WorkerInfo& w : cluster.ListWorkers()) {
    n += (w.state() == "idle" || w.state() == "busy") && (state.empty() || w.state() == state);
  }
  return n;
}

TEST(RestartTest, AKilledWorkerIsReplacedAndTheLossesAreThoseOfAnUninterruptedRun) {
  const MlpJob job = MlpJob::Create();
  constexpr int kSteps = 8;
  auto cluster = DaemonCluster::Start(FastLossDetection(2));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;

  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: straight, every: 1}", 0), &id).ok());
  const JobOutcome straight = JobOutcome::Of(c.Watch(id, 120));
  ASSERT_EQ(straight.state, v1::SUCCEEDED) << straight.message << c.Logs();
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  // Worker 1 leaves; worker 2 kills itself (SIGKILL) right after writing its shard of step 3,
  // before reporting it: checkpoint 3 is never committed, step 2 is the newest.
  c.worker(1).Signal(SIGTERM);
  ASSERT_TRUE(PollUntil([&] { return Alive(c) == 1; }, absl::Seconds(30)).ok());
  // It said Goodbye on its way out: drained, not lost.
  int drained = 0, lost = 0;
  for (const v1::WorkerInfo& w : c.ListWorkers()) {
    drained += w.state() == "drained";
    lost += w.state() == "lost";
  }
  EXPECT_EQ(drained, 1) << c.Logs();
  EXPECT_EQ(lost, 0);
  ASSERT_TRUE(c.StartWorker({{"WEFT_DEBUG_CRASH_AT", "worker_after_shard@3"}}).ok());
  std::string restarted;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: restarted, every: 1}", 2), &restarted).ok());
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(restarted).state() == v1::RESTARTING; },
                        absl::Seconds(60))
                  .ok())
      << c.GetJob(restarted).DebugString() << c.Logs();
  ASSERT_TRUE(c.StartWorker().ok());  // the replacement
  const std::vector<v1::JobEvent> events = c.Watch(restarted, 120);
  const JobOutcome outcome = JobOutcome::Of(events);
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();

  // Every step's loss, the re-run ones included, equals the uninterrupted run's exactly.
  EXPECT_EQ(outcome.losses, straight.losses);
  const v1::Job record = c.GetJob(restarted);
  EXPECT_EQ(record.attempt(), 1);  // attempts count from 0
  EXPECT_EQ(record.steps_size(), kSteps);
  // One restart event, naming the lost rank's worker, host and cause; then RESTARTING.
  int restarts = 0;
  bool restarting = false;
  for (const v1::JobEvent& e : events) {
    if (e.has_restart()) {
      ++restarts;
      EXPECT_EQ(e.restart().attempt(), 0);
      EXPECT_EQ(e.restart().restarts_left(), 1);
      EXPECT_GE(e.restart().rank(), 0);
      EXPECT_FALSE(e.restart().worker().empty());
      EXPECT_EQ(e.restart().host(), "127.0.0.1");
      EXPECT_FALSE(e.restart().cause().empty());
    }
    restarting |= e.has_state() && e.state() == v1::RESTARTING;
  }
  EXPECT_EQ(restarts, 1);
  EXPECT_TRUE(restarting);
  // The second attempt resumed from the newest checkpoint the first committed: step 1's or 2's
  // (step 3's was never complete; the killed worker's report of step 2 may not have left it).
  std::string resumed;
  for (const v1::JobEvent& e : events) {
    if (e.has_state() && e.state() == v1::RUNNING &&
        e.message().find("restart 1 of 2, resuming from ") != std::string::npos) {
      resumed = e.message();
    }
  }
  EXPECT_TRUE(resumed.find("restarted/step-1") != std::string::npos ||
              resumed.find("restarted/step-2") != std::string::npos)
      << "resumed: " << resumed;
}

TEST(RestartTest, AStoppedWorkersPeerIsFreeWithinFiveSecondsAndTheJobRestarts) {
  const MlpJob job = MlpJob::Create();
  constexpr int kSteps = 4000;
  auto cluster = DaemonCluster::Start(FastLossDetection(2));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: stopped, every: 500}", 1), &id).ok());
  ASSERT_TRUE(
      PollUntil([&] { return c.GetJob(id).steps_size() >= 3; }, absl::Seconds(60)).ok())
      << c.GetJob(id).DebugString() << c.Logs();

  // Rank 1's worker stops answering: rank 0 waits in a collective with it.
  c.worker(1).Signal(SIGSTOP);
  ASSERT_TRUE(
      PollUntil([&] { return c.GetJob(id).state() == v1::RESTARTING; }, absl::Seconds(30)).ok())
      << c.GetJob(id).DebugString() << c.Logs();
  // Its peer is told to stop and is free again within 5 s, though the collective it waits in
  // would hold it until --collective_timeout_s (300 s).
  EXPECT_TRUE(PollUntil([&] { return Alive(c, "idle") == 1; }, absl::Seconds(5)).ok())
      << c.Logs();

  ASSERT_TRUE(c.StartWorker().ok());  // the replacement
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 240));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(outcome.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(c.GetJob(id).attempt(), 1);
  c.worker(1).Signal(SIGKILL);
}

// A rank that stops stepping while its worker's heartbeats go on (WEFT_DEBUG_STALL_AT: as a rank
// blocked in a collective whose peer a silent partition hides) is found by the coordinator's
// progress watchdog within max(--progress_floor_ms, 10 x the median step time), not the 300 s
// collective timeout: the attempt restarts from its newest checkpoint and the job SUCCEEDS with
// the losses of the float64 reference.
TEST(RestartTest, ARankThatStopsSteppingIsRestartedByTheProgressWatchdog) {
  const MlpJob job = MlpJob::Create();
  constexpr int kSteps = MlpJob::kSteps;  // 5: the watchdog arms after 3
  DaemonClusterOptions options = FastLossDetection(1);
  options.coordinator_flags.insert(options.coordinator_flags.end(),
                                   {"--progress_floor_ms", "1500"});
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", "50"}};
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  ASSERT_TRUE(c.StartWorker({{"WEFT_DEBUG_STALL_AT", "4"}}).ok()) << c.Logs();
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: stalled, every: 2}", 1), &id).ok());
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  const v1::Job record = c.GetJob(id);
  EXPECT_EQ(record.attempt(), 1);
  // The cause is the watchdog's, not the collective timeout's (300 s) nor a lost worker's.
  EXPECT_NE(ReadFileOrEmpty(c.coordinator_log())
                .find("restart 1 of 1: no step completed for "),
            std::string::npos)
      << c.Logs();
  const std::vector<double> reference = job.ReferenceLosses();
  ASSERT_EQ(outcome.losses.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, loss] : outcome.losses) {
    EXPECT_LE(RelDiff(loss, reference[step - 1]), 1e-4) << "step " << step;
  }
}

// kill -9 of the coordinator mid-job, then a new one on the same job store: the job is
// RESTARTING, resumes from its newest checkpoint once the workers reconnect, and SUCCEEDS, its
// steps all recorded.
TEST(RestartTest, AJobRunningWhenTheCoordinatorIsKilledResumesWhenItComesBack) {
  const MlpJob job = MlpJob::Create();
  constexpr int kSteps = 3000;
  auto cluster = DaemonCluster::Start(FastLossDetection(2));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: recovered, every: 100}", 0), &id).ok());
  ASSERT_TRUE(
      PollUntil([&] { return c.GetJob(id).steps_size() >= 150; }, absl::Seconds(120)).ok())
      << c.Logs();

  ASSERT_TRUE(c.RestartCoordinator().ok()) << c.Logs();
  // The workers reconnect to the new coordinator by themselves.
  ASSERT_TRUE(PollUntil([&] { return Alive(c) == 2; }, absl::Seconds(60)).ok()) << c.Logs();
  const std::vector<v1::JobEvent> events = c.Watch(id, 240);
  const JobOutcome outcome = JobOutcome::Of(events);
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(c.GetJob(id).attempt(), 1);
  EXPECT_EQ(outcome.losses.size(), static_cast<size_t>(kSteps));  // every step, once each
  bool restarting = false, resumed = false;
  for (const v1::JobEvent& e : events) {
    restarting |= e.has_state() && e.state() == v1::RESTARTING &&
                  e.message().find("the coordinator restarted") != std::string::npos;
    resumed |= e.has_state() && e.state() == v1::RUNNING &&
               e.message().find("resuming from ") != std::string::npos &&
               e.message().find("recovered/step-") != std::string::npos;
  }
  EXPECT_TRUE(restarting);
  EXPECT_TRUE(resumed) << "the second attempt did not resume from a checkpoint";
}

TEST(RestartTest, WithoutRestartsLeftTheJobFailsNamingTheCause) {
  const MlpJob job = MlpJob::Create();
  auto cluster = DaemonCluster::Start(FastLossDetection(1));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  // Each attempt's rank 1 kills itself after its first shard; one restart is allowed.
  ASSERT_TRUE(c.StartWorker({{"WEFT_DEBUG_CRASH_AT", "worker_after_shard@1"}}).ok());
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, 4, "{dir: doomed, every: 1}", 1), &id).ok());
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(id).state() == v1::RESTARTING; },
                        absl::Seconds(60))
                  .ok())
      << c.Logs();
  ASSERT_TRUE(c.StartWorker({{"WEFT_DEBUG_CRASH_AT", "worker_after_shard@1"}}).ok());
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.message.find("(attempt 2; all 1 restarts (train.max_restarts) used)"),
            std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("lost"), std::string::npos) << outcome.message;
}

// Chaos: a job with checkpoints while one to three workers, chosen at random among those running
// it, are killed with SIGKILL at random points of its progress, each replaced by a new worker
// (the seed is printed; WEFT_TEST_SEED reproduces the choices). It SUCCEEDS, and its final
// parameters and optimizer states equal an uninterrupted run's bit for bit.
TEST(ChaosTest, WorkersKilledAtRandomAndReplacedLeaveTheFinalStateUnchanged) {
  const MlpJob job = MlpJob::Create();
  constexpr int kSteps = 400;
  auto cluster = DaemonCluster::Start(FastLossDetection(2));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::string calm;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: calm, every: 25}", 0), &calm).ok());
  ASSERT_EQ(JobOutcome::Of(c.Watch(calm, 240)).state, v1::SUCCEEDED) << c.Logs();

  std::mt19937_64 rng(TestSeed());
  const int kills = 1 + static_cast<int>(rng() % 3);
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, kSteps, "{dir: chaos, every: 25}", kills), &id).ok());
  int killed = 0;
  for (int k = 0; k < kills; ++k) {
    // A point of the run's progress after the previous kill's.
    const int at = static_cast<int>((k + 0.2 + 0.6 * (rng() % 1000) / 1000.0) * kSteps /
                                    (kills + 1));
    pid_t victim = 0;
    const absl::Status found = PollUntil(
        [&]() -> absl::StatusOr<bool> {
          const v1::Job now = c.GetJob(id);
          if (now.state() == v1::SUCCEEDED || now.state() == v1::FAILED) return true;
          if (now.state() != v1::RUNNING || now.steps_size() < at) return false;
          std::vector<pid_t> running;
          for (const v1::WorkerInfo& w : c.ListWorkers()) {
            if (w.state() == "busy" && w.job_id() == id) running.push_back(w.pid());
          }
          if (running.empty()) return false;
          victim = running[rng() % running.size()];
          return true;
        },
        absl::Seconds(120));
    ASSERT_TRUE(found.ok()) << found << c.Logs();
    if (victim == 0) break;  // the job ended first
    for (int i = 0; i < c.worker_count(); ++i) {
      if (c.worker(i).pid() == victim) c.worker(i).Signal(SIGKILL);
    }
    ++killed;
    std::printf("[chaos] kill %d of %d: worker pid %d at step >= %d\n", k + 1, kills,
                static_cast<int>(victim), at);
    ASSERT_TRUE(c.StartWorker().ok()) << c.Logs();  // its replacement
  }
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 240));
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_GT(killed, 0) << "the job ended before any worker was killed";
  EXPECT_EQ(c.GetJob(id).attempt(), killed);
  ExpectSameTensors(job.dir + "/calm/step-" + std::to_string(kSteps),
                    job.dir + "/chaos/step-" + std::to_string(kSteps));
}

}  // namespace
}  // namespace weft::testing
