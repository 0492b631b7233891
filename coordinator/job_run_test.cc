// JobRun's table, row by row (job_run.h): each test drives one attempt through events and checks
// the commands it gives and the record it keeps. No daemons, no store, no clock.
#include "coordinator/job_run.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Commands = std::vector<JobRun::Command>;

constexpr int64_t kT0 = 1000000;

v1::Job QueuedJob(int ranks_unused = 2, int max_restarts = 0, const std::string& ckpt_dir = "") {
  (void)ranks_unused;
  v1::Job job;
  job.set_id("job-000001");
  job.set_state(v1::PENDING);
  job.mutable_spec()->set_name("tiny");
  job.mutable_spec()->mutable_data()->set_batch_size(8);
  job.mutable_spec()->mutable_train()->set_steps(10);
  job.mutable_spec()->mutable_train()->set_max_restarts(max_restarts);
  job.mutable_spec()->mutable_optimizer()->set_type("adamw");
  job.mutable_spec()->mutable_checkpoint()->set_dir(ckpt_dir);
  job.mutable_spec()->mutable_checkpoint()->set_keep(2);
  return job;
}

std::vector<JobRun::Slot> TwoSlots() { return {{"worker-1", "10.0.0.1"}, {"worker-2", "10.0.0.2"}}; }

// The kinds of the commands, in order: "store", "append", "send", "cancel", "commit", "ended".
std::vector<std::string> Kinds(const Commands& commands) {
  std::vector<std::string> out;
  for (const JobRun::Command& c : commands) {
    static const char* const kNames[] = {"store", "append", "send", "cancel", "commit", "ended"};
    out.push_back(kNames[c.index()]);
  }
  return out;
}

template <typename T>
const T& Nth(const Commands& commands, size_t i) {
  return std::get<T>(commands.at(i));
}

// A run planned and RUNNING.
JobRun Running(const v1::Job& job, JobRunConfig config = {}) {
  JobRun run(job, TwoSlots(), config);
  run.Start(kT0);
  run.Apply(JobRun::Planned{{}, {}}, kT0);
  return run;
}

v1::StepReport StepOf(int rank, int64_t step, double loss) {
  v1::StepReport r;
  r.set_job_id("job-000001");
  r.set_rank(rank);
  r.set_step(step);
  r.set_loss(loss);
  r.set_step_seconds(0.5);
  return r;
}

v1::CheckpointReport ShardOf(int rank, int64_t step) {
  v1::CheckpointReport r;
  r.set_job_id("job-000001");
  r.set_rank(rank);
  r.set_step(step);
  return r;
}

TEST(JobRunTest, StartStoresPlanning) {
  JobRun run(QueuedJob(), TwoSlots(), {});
  Commands c = run.Start(kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store"));
  const auto& store = Nth<JobRun::StoreJob>(c, 0);
  EXPECT_EQ(store.job.state(), v1::PLANNING);
  EXPECT_EQ(store.job.message(), "planning 2 ranks");
  ASSERT_TRUE(store.event.has_value());
  EXPECT_EQ(store.event->state(), v1::PLANNING);
  EXPECT_EQ(store.event->time_ms(), kT0);
}

TEST(JobRunTest, PlannedStoresRunningThenSendsPrograms) {
  JobRun run(QueuedJob(), TwoSlots(), {});
  run.Start(kT0);
  CheckpointLoad start{"/ckpt/step-4", 4, true};
  Commands c = run.Apply(JobRun::Planned{start, {{"hf_model_type", "gpt2"}}}, kT0 + 5);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "send"));
  const auto& store = Nth<JobRun::StoreJob>(c, 0);
  EXPECT_EQ(store.job.state(), v1::RUNNING);
  EXPECT_EQ(store.job.start_time_ms(), kT0 + 5);
  EXPECT_EQ(store.job.message(), "running on 2 workers, resuming from /ckpt/step-4");
  EXPECT_THAT(store.job.workers(), ElementsAre("worker-1", "worker-2"));
  EXPECT_EQ(Nth<JobRun::SendPrograms>(c, 1).start.step, 4);
  EXPECT_EQ(run.job().state(), v1::RUNNING);
}

TEST(JobRunTest, PlannedFromACheckpointAtTheLastStepFails) {
  JobRun run(QueuedJob(), TwoSlots(), {});
  run.Start(kT0);
  Commands c = run.Apply(JobRun::Planned{{"/ckpt/step-10", 10, true}, {}}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::FAILED);
  EXPECT_THAT(Nth<JobRun::StoreJob>(c, 0).job.message(),
              HasSubstr("train.steps: 10 leaves nothing to resume"));
  EXPECT_THAT(Nth<JobRun::Ended>(c, 1).done_ranks, ElementsAre(0, 1));
  EXPECT_TRUE(run.ended());
}

// A later attempt that starts from its own checkpoint of the last step (the coordinator died
// between that commit and storing SUCCEEDED) has nothing left to run: SUCCEEDED.
TEST(JobRunTest, ARestartFromItsOwnCheckpointOfTheLastStepSucceeds) {
  v1::Job job = QueuedJob(2, /*max_restarts=*/1);
  job.set_attempt(1);
  JobRun run(job, TwoSlots(), {});
  run.Start(kT0);
  Commands c = run.Apply(JobRun::Planned{{"/ckpt/step-10", 10, true}, {}}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::SUCCEEDED);
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(),
            "every step ran: /ckpt/step-10, the checkpoint of the last step, was committed "
            "before the attempt ended");
  EXPECT_EQ(Nth<JobRun::Ended>(c, 1).state, v1::SUCCEEDED);
  EXPECT_TRUE(run.ended());
}

TEST(JobRunTest, PlanFailedEndsFailedWithNothingToCancel) {
  JobRun run(QueuedJob(), TwoSlots(), {});
  run.Start(kT0);
  Commands c = run.Apply(JobRun::PlanFailed{"no checkpoint"}, kT0 + 1);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "planning failed: no checkpoint");
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.end_time_ms(), kT0 + 1);
  const auto& ended = Nth<JobRun::Ended>(c, 1);
  EXPECT_EQ(ended.state, v1::FAILED);
  EXPECT_TRUE(ended.draining_ranks.empty());
  EXPECT_FALSE(ended.next.has_value());
  // An ended run answers nothing more.
  EXPECT_TRUE(run.Apply(JobRun::RankDone{0, true}, kT0 + 2).empty());
}

TEST(JobRunTest, LastRankDoneSucceeds) {
  JobRun run = Running(QueuedJob());
  EXPECT_TRUE(run.Apply(JobRun::RankDone{1, true}, kT0 + 10).empty());
  EXPECT_TRUE(run.Apply(JobRun::RankDone{1, true}, kT0 + 10).empty()) << "a duplicate is ignored";
  Commands c = run.Apply(JobRun::RankDone{0, true}, kT0 + 20);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::SUCCEEDED);
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "all 2 ranks finished");
  EXPECT_THAT(Nth<JobRun::Ended>(c, 1).done_ranks, ElementsAre(0, 1));
}

TEST(JobRunTest, StepIsAppendedOnceEveryRankReportedIt) {
  JobRun run = Running(QueuedJob());
  EXPECT_TRUE(run.Apply(JobRun::Step{StepOf(0, 1, 2.5)}, kT0).empty());
  Commands c = run.Apply(JobRun::Step{StepOf(1, 1, 2.5)}, kT0 + 3);
  ASSERT_THAT(Kinds(c), ElementsAre("append"));
  const v1::JobEvent& e = Nth<JobRun::AppendEvent>(c, 0).event;
  EXPECT_EQ(e.step().step(), 1);
  EXPECT_DOUBLE_EQ(e.step().loss(), 2.5);
  EXPECT_EQ(e.time_ms(), kT0 + 3);
  // A duplicate report is refused by the aggregator: nothing.
  EXPECT_TRUE(run.Apply(JobRun::Step{StepOf(1, 1, 2.5)}, kT0 + 4).empty());
}

TEST(JobRunTest, StepThatEvaluatedAppendsAnEvalEventToo) {
  JobRun run = Running(QueuedJob());
  v1::StepReport r0 = StepOf(0, 2, 2.0), r1 = StepOf(1, 2, 2.0);
  r0.set_eval_loss(3.25);
  r1.set_eval_loss(3.25);
  run.Apply(JobRun::Step{r0}, kT0);
  Commands c = run.Apply(JobRun::Step{r1}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "append"));
  EXPECT_DOUBLE_EQ(Nth<JobRun::AppendEvent>(c, 1).event.eval().loss(), 3.25);
}

TEST(JobRunTest, CompleteSaveIsCommittedAndTheJobSucceedsAfterIt) {
  JobRun run = Running(QueuedJob(2, 0, "/ckpt"));
  EXPECT_TRUE(run.Apply(JobRun::Shard{ShardOf(0, 5)}, kT0).empty());
  Commands c = run.Apply(JobRun::Shard{ShardOf(1, 5)}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("commit"));
  const auto& commit = Nth<JobRun::CommitCheckpoint>(c, 0);
  EXPECT_EQ(commit.save.step, 5);
  EXPECT_EQ(commit.metadata.at("job_id"), "job-000001");
  EXPECT_EQ(commit.metadata.at("attempt"), "0");
  EXPECT_EQ(commit.metadata.at("optimizer"), "adamw");
  // Every rank finishes while the commit is in flight: SUCCEEDED waits for it.
  run.Apply(JobRun::RankDone{0, true}, kT0);
  EXPECT_TRUE(run.Apply(JobRun::RankDone{1, true}, kT0).empty());
  JobRun::Committed committed{5, absl::OkStatus(), {}};
  committed.saved.set_step(5);
  c = run.Apply(committed, kT0 + 7);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "store", "ended"));
  EXPECT_EQ(Nth<JobRun::AppendEvent>(c, 0).event.saved().step(), 5);
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 1).job.state(), v1::SUCCEEDED);
}

TEST(JobRunTest, ShardOfAJobWithoutCheckpointDirIsIgnored) {
  JobRun run = Running(QueuedJob());
  run.Apply(JobRun::Shard{ShardOf(0, 5)}, kT0);
  EXPECT_TRUE(run.Apply(JobRun::Shard{ShardOf(1, 5)}, kT0).empty());
}

TEST(JobRunTest, FailedCommitFailsTheJob) {
  JobRun run = Running(QueuedJob(2, 3, "/ckpt"));
  run.Apply(JobRun::Shard{ShardOf(0, 5)}, kT0);
  run.Apply(JobRun::Shard{ShardOf(1, 5)}, kT0);
  Commands c = run.Apply(JobRun::Committed{5, absl::InternalError("disk full"), {}}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::FAILED);
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(),
            "committing the checkpoint of step 5: disk full");
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 1).ranks, ElementsAre(0, 1));
  EXPECT_THAT(Nth<JobRun::Ended>(c, 2).draining_ranks, ElementsAre(0, 1));
}

TEST(JobRunTest, FailureWaitsForTheSettleWindowThenTheEarliestIsTheCause) {
  JobRun run = Running(QueuedJob(), JobRunConfig{/*failure_settle_ms=*/1000, 5000});
  // Rank 1 reports first, but rank 0 failed earlier.
  EXPECT_TRUE(
      run.Apply(JobRun::RankDone{1, false, "rank 1: connection closed", (kT0 + 50) * 1000}, kT0 + 60)
          .empty());
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 500).empty()) << "still settling";
  Commands c = run.Apply(JobRun::WorkerLost{0, "killed", false}, kT0 + 70);
  // Every rank answered: decided at once.
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  const v1::Job& job = Nth<JobRun::StoreJob>(c, 0).job;
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.message(), HasSubstr("rank 1 (worker-2): rank 1: connection closed; then worker "
                                       "worker-1 (rank 0, host 10.0.0.1) lost: killed (+20 ms)"));
  ASSERT_EQ(job.rank_errors_size(), 2);
  EXPECT_EQ(job.rank_errors(0).rank(), 1);
  EXPECT_EQ(job.rank_errors(0).message(), "connection closed");  // "rank 1: " dropped
  EXPECT_EQ(job.rank_errors(0).worker(), "worker-2");
  EXPECT_EQ(job.rank_errors(0).host(), "10.0.0.2");
  EXPECT_EQ(job.rank_errors(1).message(), "worker lost: killed");
}

TEST(JobRunTest, SettleWindowClosedByTick) {
  JobRun run = Running(QueuedJob(), JobRunConfig{1000, 5000});
  run.Apply(JobRun::RankDone{0, false, "oom"}, kT0);
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 999).empty());
  Commands c = run.Apply(JobRun::Tick{}, kT0 + 1000);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "rank 0 (worker-1): oom");
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 1).ranks, ElementsAre(1));
  EXPECT_THAT(Nth<JobRun::Ended>(c, 2).done_ranks, ElementsAre(0));
  EXPECT_THAT(Nth<JobRun::Ended>(c, 2).draining_ranks, ElementsAre(1));
  EXPECT_EQ(Nth<JobRun::Ended>(c, 2).drain_deadline_ms, kT0 + 1000 + 5000);
}

TEST(JobRunTest, FailureWithRestartsLeftRestarts) {
  JobRun run = Running(QueuedJob(2, /*max_restarts=*/2), JobRunConfig{0, 5000});
  Commands c = run.Apply(JobRun::WorkerLost{1, "no heartbeat", false}, kT0 + 9);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "cancel", "store", "ended"));
  const v1::Restart& restart = Nth<JobRun::AppendEvent>(c, 0).event.restart();
  EXPECT_EQ(restart.attempt(), 0);
  EXPECT_EQ(restart.restarts_left(), 1);
  EXPECT_EQ(restart.rank(), 1);
  EXPECT_EQ(restart.worker(), "worker-2");
  EXPECT_EQ(restart.host(), "10.0.0.2");
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 1).reason, HasSubstr("restarting: worker worker-2"));
  const v1::Job& next = Nth<JobRun::StoreJob>(c, 2).job;
  EXPECT_EQ(next.state(), v1::RESTARTING);
  EXPECT_EQ(next.attempt(), 1);
  EXPECT_EQ(next.workers_size(), 0);
  EXPECT_THAT(next.message(), HasSubstr("restart 1 of 2 after: worker worker-2"));
  const auto& ended = Nth<JobRun::Ended>(c, 3);
  EXPECT_EQ(ended.state, v1::RESTARTING);
  ASSERT_TRUE(ended.next.has_value());
  EXPECT_EQ(ended.next->attempt(), 1);
}

// The progress watchdog: after 3 steps 100 ms apart, no step for max(floor 1 s, 10 x 100 ms)
// fails the attempt (restarting it), naming the wait and the median; a shard report is progress
// too, and before the third step nothing is watched.
TEST(JobRunTest, NoStepForTenMedianStepTimesRestartsTheAttempt) {
  JobRunConfig config{0, 5000};
  config.progress_floor_ms = 1000;
  JobRun run = Running(QueuedJob(2, /*max_restarts=*/1, "ckpt"), config);
  auto step = [&](int64_t s, int64_t at) {
    run.Apply(JobRun::Step{StepOf(0, s, 1.0)}, at);
    return run.Apply(JobRun::Step{StepOf(1, s, 1.0)}, at);
  };
  step(1, kT0 + 100);
  step(2, kT0 + 200);
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 100'000).empty()) << "two steps arm nothing";
  step(3, kT0 + 100'100);
  step(4, kT0 + 100'200);
  step(5, kT0 + 100'300);
  // Gaps 99,800, 100, 100, 100 ms: the median is 100 ms, the limit the 1 s floor.
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 101'300).empty());
  run.Apply(JobRun::Shard{ShardOf(0, 5)}, kT0 + 101'200);  // saving: progress
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 102'100).empty());
  Commands c = run.Apply(JobRun::Tick{}, kT0 + 102'201);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "cancel", "store", "ended"));
  const v1::Restart& restart = Nth<JobRun::AppendEvent>(c, 0).event.restart();
  EXPECT_EQ(restart.rank(), -1);
  EXPECT_EQ(restart.cause(),
            "no step completed for 1.0 s (10 x the median step time 0.1 s, at least 1.0 s): a "
            "rank is stuck, or its workers cannot reach each other");
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 2).job.state(), v1::RESTARTING);
}

TEST(JobRunTest, LastRestartUsedFails) {
  v1::Job job = QueuedJob(2, /*max_restarts=*/1);
  job.set_attempt(1);
  JobRun run = Running(job, JobRunConfig{0, 5000});
  Commands c = run.Apply(JobRun::RankDone{0, false, "nan loss"}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(),
            "rank 0 (worker-1): nan loss (attempt 2; all 1 restarts (train.max_restarts) used)");
}

// An elastic job (train.elastic over dp, a mesh of dp 4) running at dp 2 on two workers.
v1::Job ShrunkElasticJob() {
  v1::Job job = QueuedJob(2, /*max_restarts=*/1, "/ckpt");
  v1::JobSpec* spec = job.mutable_spec();
  spec->mutable_mesh()->add_shape(4);
  spec->mutable_mesh()->add_dim_names("dp");
  spec->mutable_train()->mutable_elastic()->set_dim("dp");
  spec->mutable_train()->mutable_elastic()->set_min(1);
  spec->mutable_train()->mutable_elastic()->set_wait_s(30);
  job.set_elastic_size(2);
  return job;
}

// Both ranks' shards of `step`, committed; grow_to as the coordinator found idle workers.
Commands CommitStep(JobRun* run, int64_t step, int grow_to) {
  run->Apply(JobRun::Shard{ShardOf(0, step)}, kT0);
  run->Apply(JobRun::Shard{ShardOf(1, step)}, kT0);
  JobRun::Committed committed{step, absl::OkStatus(), {}, grow_to};
  committed.saved.set_step(step);
  return run->Apply(committed, kT0 + 5);
}

TEST(JobRunTest, ACommitWithIdleWorkersGrowsTheJobAsItsNextAttempt) {
  JobRun run = Running(ShrunkElasticJob());
  Commands c = CommitStep(&run, 4, /*grow_to=*/4);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "append", "cancel", "store", "ended"));
  EXPECT_EQ(Nth<JobRun::AppendEvent>(c, 0).event.saved().step(), 4);
  const v1::JobEvent& resize = Nth<JobRun::AppendEvent>(c, 1).event;
  EXPECT_EQ(resize.resize().from_size(), 2);
  EXPECT_EQ(resize.resize().to_size(), 4);
  EXPECT_EQ(resize.resize().step(), 4);
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 2).ranks, ElementsAre(0, 1));
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 2).reason, HasSubstr("resizing: growing dp 2 -> 4"));
  const v1::Job& next = Nth<JobRun::StoreJob>(c, 3).job;
  EXPECT_EQ(next.state(), v1::RESTARTING);
  EXPECT_EQ(next.attempt(), 1);
  EXPECT_EQ(next.grows(), 1);
  EXPECT_EQ(next.elastic_size(), 4);
  ASSERT_EQ(next.resizes_size(), 1);
  EXPECT_EQ(next.resizes(0).to_size(), 4);
  EXPECT_EQ(next.resizes(0).time_ms(), kT0 + 5);
  EXPECT_THAT(next.message(), HasSubstr("growing dp 2 -> 4"));
  const auto& ended = Nth<JobRun::Ended>(c, 4);
  EXPECT_EQ(ended.state, v1::RESTARTING);
  ASSERT_TRUE(ended.next.has_value());
  EXPECT_EQ(ended.next->elastic_size(), 4);
  EXPECT_THAT(ended.draining_ranks, ElementsAre(0, 1));
}

TEST(JobRunTest, NoGrowAtTheLastStepNorWithoutIdleWorkersNorWhileCancelling) {
  {
    JobRun run = Running(ShrunkElasticJob());
    EXPECT_THAT(Kinds(CommitStep(&run, 4, /*grow_to=*/0)), ElementsAre("append"));
    EXPECT_THAT(Kinds(CommitStep(&run, 10, /*grow_to=*/4)), ElementsAre("append"))
        << "step 10 is train.steps: nothing is left to run bigger";
  }
  {
    JobRun run = Running(ShrunkElasticJob());
    run.Apply(JobRun::Cancel{"by the user"}, kT0);
    EXPECT_THAT(Kinds(CommitStep(&run, 4, /*grow_to=*/4)), ElementsAre("append"));
  }
}

TEST(JobRunTest, GrowsAreNotRestarts) {
  v1::Job job = ShrunkElasticJob();  // max_restarts 1
  job.set_attempt(1);
  job.set_grows(1);  // attempt 1 began with a grow
  JobRun run = Running(job, JobRunConfig{0, 5000});
  Commands c = run.Apply(JobRun::WorkerLost{1, "no heartbeat", false}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "cancel", "store", "ended"));
  EXPECT_EQ(Nth<JobRun::AppendEvent>(c, 0).event.restart().restarts_left(), 0);
  const v1::Job& next = Nth<JobRun::StoreJob>(c, 2).job;
  EXPECT_EQ(next.attempt(), 2);
  EXPECT_EQ(next.grows(), 1);
  EXPECT_EQ(next.elastic_size(), 2) << "a restart keeps the size; the coordinator shrinks it";
  EXPECT_THAT(next.message(), HasSubstr("restart 1 of 1 after:"));
}

TEST(JobRunTest, CancelStoresTheReasonAndCancelsTheRanks) {
  JobRun run = Running(QueuedJob(), JobRunConfig{1000, 5000});
  run.Apply(JobRun::RankDone{0, true}, kT0);
  Commands c = run.Apply(JobRun::Cancel{"by the user"}, kT0 + 1);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "cancelling: by the user");
  EXPECT_FALSE(Nth<JobRun::StoreJob>(c, 0).event.has_value());
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 1).ranks, ElementsAre(1));
  EXPECT_TRUE(run.Apply(JobRun::Cancel{"again"}, kT0 + 2).empty());
  // A failure while cancelling is the cancel's confirmation.
  c = run.Apply(JobRun::RankDone{1, false, "cancelled"}, kT0 + 3);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::CANCELLED);
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "cancelled: by the user");
}

TEST(JobRunTest, CancelGraceOverEndsCancelled) {
  JobRun run = Running(QueuedJob(), JobRunConfig{1000, 5000});
  run.Apply(JobRun::Cancel{"by the user"}, kT0);
  EXPECT_TRUE(run.Apply(JobRun::Tick{}, kT0 + 4999).empty());
  Commands c = run.Apply(JobRun::Tick{}, kT0 + 5000);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(),
            "cancelled: by the user (2 ranks did not confirm within 5000 ms)");
  EXPECT_THAT(Nth<JobRun::Ended>(c, 2).draining_ranks, ElementsAre(0, 1));
}

TEST(JobRunTest, CancelWhilePlanningEndsWhenPlanned) {
  JobRun run(QueuedJob(), TwoSlots(), {});
  run.Start(kT0);
  run.Apply(JobRun::Cancel{"by the user"}, kT0);
  Commands c = run.Apply(JobRun::Planned{{}, {}}, kT0 + 1);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::CANCELLED);
}

TEST(JobRunTest, UnsentRanksOfACancelledAttemptAreDone) {
  JobRun run = Running(QueuedJob());
  run.Apply(JobRun::Cancel{"stop"}, kT0);
  run.Apply(JobRun::RankDone{0, true}, kT0);
  Commands c = run.Apply(JobRun::Unsent{1}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.state(), v1::CANCELLED);
}

TEST(JobRunTest, ProgramFailedEndsFailedAndCancelsTheRanksSent) {
  JobRun run = Running(QueuedJob(2, /*max_restarts=*/3));
  Commands c = run.Apply(JobRun::ProgramFailed{1, "arena too large"}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("store", "cancel", "ended"));
  EXPECT_EQ(Nth<JobRun::StoreJob>(c, 0).job.message(), "planning failed: arena too large");
  EXPECT_THAT(Nth<JobRun::CancelRanks>(c, 1).ranks, ElementsAre(0));
}

TEST(JobRunTest, SendFailedIsThatRanksFailureDecidedAtOnce) {
  JobRun run = Running(QueuedJob(2, /*max_restarts=*/1), JobRunConfig{1000, 5000});
  Commands c = run.Apply(JobRun::SendFailed{1}, kT0);
  ASSERT_THAT(Kinds(c), ElementsAre("append", "cancel", "store", "ended"));
  EXPECT_EQ(Nth<JobRun::AppendEvent>(c, 0).event.restart().cause(),
            "sending the program of rank 1 to worker worker-2: the worker's stream is closed");
  const v1::Job& next = Nth<JobRun::StoreJob>(c, 2).job;
  ASSERT_EQ(next.rank_errors_size(), 1);
  EXPECT_EQ(next.rank_errors(0).rank(), 1);
}

TEST(JobRunTest, RankErrorsAreBounded) {
  std::vector<JobRun::Slot> slots;
  const int kRanks = kMaxRankErrors + 3;
  for (int r = 0; r < kRanks; ++r) slots.push_back({"worker-" + std::to_string(r + 1), "h"});
  JobRun run(QueuedJob(), slots, JobRunConfig{1000, 5000});
  run.Start(kT0);
  run.Apply(JobRun::Planned{{}, {}}, kT0);
  Commands c;
  for (int r = 0; r < kRanks; ++r) {
    c = run.Apply(JobRun::RankDone{r, false, std::string(kRankErrorMessageBytes + 10, 'x'),
                                   (kT0 + r) * 1000},
                  kT0 + 100);
  }
  const v1::Job& job = Nth<JobRun::StoreJob>(c, 0).job;
  EXPECT_EQ(job.rank_errors_size(), kMaxRankErrors);
  EXPECT_EQ(job.rank_errors_omitted(), 3);
  EXPECT_EQ(job.rank_errors(0).message().size(), kRankErrorMessageBytes);
  EXPECT_THAT(job.message(), HasSubstr("and " + std::to_string(kRanks - 8) + " more"));
}

}  // namespace
}  // namespace weft::coordinator
