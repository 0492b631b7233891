// Checkpoint save, commit and resume through the real daemons on 127.0.0.1 (a weft-coordinator
// and weft-worker processes, jobs sent over gRPC as weftctl sends them):
//  - resume: 4 steps straight equal 2 steps then 2 resumed, bit for bit (losses of steps 3-4 and
//    every saved tensor, optimizer states included); resumed on another mesh within 1e-5;
//  - init_from a checkpoint folder, onto another mesh;
//  - dedup: on dp=4 the shards hold one copy of every replicated tensor, spread over ranks;
//  - crashes: workers killed during a save (after writing their shards, before reporting them),
//    and the coordinator killed after every shard was written and reported but before the
//    commit, leave the previous checkpoint loadable and the partial one ignored, and a resume then
//    works. The daemons kill themselves at exactly those points (common/crash_point,
//    WEFT_DEBUG_CRASH_AT), so nothing races.
// Jobs that need no crash run one after another on one cluster shared by the suite.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/checkpoint.h"
#include "common/crash_point.h"
#include "common/jobspec/starting_state.h"
#include "common/jobspec/yaml.h"
#include "common/subprocess.h"
#include "common/testing_files.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;

// Loads the spec file as weftctl does and submits it; "" on error (the test fails).
std::string SubmitFile(const DaemonCluster& cluster, const std::string& spec_path) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(spec_path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return "";
  std::string id;
  grpc::Status s = cluster.Submit(*spec, &id);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return id;
}

// Four workers: enough for every mesh below; a job takes the ones it needs.
class CheckpointTest : public SharedClusterSuite<::testing::Test, 4> {
 protected:
  // Runs a spec to its end on the shared cluster.
  static JobOutcome RunJob(const std::string& spec_path) { return cluster_->RunSpecFile(spec_path); }
};

void CopyDir(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive);
}

TEST_F(CheckpointTest, ResumeOnTheSameMeshIsBitExact) {
  MlpJob job = MlpJob::Create();
  const std::string dp2 = "{shape: [2], dim_names: [dp]}";
  // 4 steps straight, saving the last.
  JobOutcome straight = RunJob(
      job.WriteSpec("straight.yaml", MlpSpec(job, dp2, 4, "{dir: straight, every: 4}", false)));
  ASSERT_EQ(straight.losses.size(), 4u);
  ASSERT_EQ(straight.saves.size(), 1u);
  EXPECT_EQ(straight.saves[0].step(), 4);
  EXPECT_GT(straight.saves[0].bytes(), 0);
  EXPECT_EQ(straight.saves[0].path(), job.dir + "/straight/step-4");

  // 2 steps, then the same job resumed for 2 more.
  JobOutcome first = RunJob(
      job.WriteSpec("first.yaml", MlpSpec(job, dp2, 2, "{dir: split, every: 1}", false)));
  ASSERT_EQ(first.saves.size(), 2u);
  EXPECT_EQ(first.losses, (std::map<int64_t, double>{{1, straight.losses[1]},
                                                      {2, straight.losses[2]}}));
  JobOutcome resumed = RunJob(
      job.WriteSpec("resumed.yaml", MlpSpec(job, dp2, 4, "{dir: split, every: 1}", true)));
  ASSERT_EQ(resumed.losses.size(), 2u) << "only steps 3 and 4 run";
  EXPECT_EQ(resumed.losses[3], straight.losses[3]);  // bit for bit
  EXPECT_EQ(resumed.losses[4], straight.losses[4]);
  ExpectSameTensors(job.dir + "/straight/step-4", job.dir + "/split/step-4");
}

// Issue 30: job B named job A's folder and repointed A's `latest`, and B's `keep` deleted A's
// steps. A folder holding another job's checkpoints is refused at submit, naming the job, unless
// the new job goes on from them (train.resume); A's steps stay as they were.
TEST_F(CheckpointTest, AnotherJobsCheckpointFolderIsRefusedUnlessResumed) {
  MlpJob job = MlpJob::Create();
  const std::string dp2 = "{shape: [2], dim_names: [dp]}";
  JobOutcome a = RunJob(
      job.WriteSpec("a.yaml", MlpSpec(job, dp2, 2, "{dir: shared, every: 1, keep: 1}", false)));
  ASSERT_EQ(a.saves.size(), 2u);
  const std::string index_a = ReadAll(job.dir + "/shared/step-2/index.json");
  absl::StatusOr<std::string> owner = checkpoint::CheckpointOwner(job.dir + "/shared/step-2");
  ASSERT_TRUE(owner.ok() && !owner->empty()) << owner.status();

  absl::StatusOr<v1::JobSpec> b = LoadJobSpecFile(
      job.WriteSpec("b.yaml", MlpSpec(job, dp2, 3, "{dir: shared, every: 1, keep: 1}", false)));
  ASSERT_TRUE(b.ok()) << b.status();
  std::string id;
  grpc::Status s = cluster_->Submit(*b, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                absl::StrCat("checkpoint.dir: ", job.dir, "/shared holds the "
                                             "checkpoints of job ", *owner, " (newest: step-2)")))
      << s.error_message();
  EXPECT_EQ(ReadAll(job.dir + "/shared/step-2/index.json"), index_a);
  EXPECT_EQ(ReadAll(job.dir + "/shared/latest"), "step-2\n");

  JobOutcome resumed = RunJob(
      job.WriteSpec("b_resumed.yaml", MlpSpec(job, dp2, 3, "{dir: shared, every: 1, keep: 1}", true)));
  EXPECT_EQ(resumed.losses.size(), 1u);
  EXPECT_EQ(resumed.saves.size(), 1u);
}

TEST_F(CheckpointTest, ResumeOnAnotherMeshMatchesWithinTolerance) {
  MlpJob job = MlpJob::Create();
  const std::string dp2 = "{shape: [2], dim_names: [dp]}";
  JobOutcome straight = RunJob(job.WriteSpec("straight.yaml", MlpSpec(job, dp2, 4, "", false)));
  ASSERT_EQ(straight.losses.size(), 4u);
  JobOutcome first = RunJob(
      job.WriteSpec("first.yaml", MlpSpec(job, dp2, 2, "{dir: saved, every: 2}", false)));
  ASSERT_EQ(first.saves.size(), 1u);
  CopyDir(job.dir + "/saved", job.dir + "/for_mp");
  CopyDir(job.dir + "/saved", job.dir + "/for_one");

  JobOutcome on_mp = RunJob(job.WriteSpec(
      "mp.yaml",
      MlpSpec(job, "{shape: [2], dim_names: [mp]}", 4, "{dir: for_mp}", true, ColRowOverMp())));
  JobOutcome on_one = RunJob(
      job.WriteSpec("one.yaml", MlpSpec(job, "{shape: [1]}", 4, "{dir: for_one}", true)));
  for (const JobOutcome* r : {&on_mp, &on_one}) {
    ASSERT_EQ(r->losses.size(), 2u);
    for (int64_t s : {3, 4}) {
      EXPECT_LE(RelDiff(r->losses.at(s), straight.losses[s]), 1e-5)
          << "step " << s << ": " << r->losses.at(s) << " vs " << straight.losses[s];
    }
  }
  ExpectSameTensors(job.dir + "/for_mp/step-2", job.dir + "/saved/step-2");
}

TEST_F(CheckpointTest, InitFromACheckpointLoadsParametersOntoAnyMesh) {
  MlpJob job = MlpJob::Create();
  JobOutcome saved = RunJob(job.WriteSpec(
      "save.yaml", MlpSpec(job, "{shape: [2], dim_names: [dp]}", 3, "{dir: trained}", false)));
  ASSERT_EQ(saved.saves.size(), 1u);
  JobOutcome fresh =
      RunJob(job.WriteSpec("fresh.yaml", MlpSpec(job, "{shape: [1]}", 2, "", false)));
  // The checkpoint dir (its newest step) and the step folder itself.
  JobOutcome on_one = RunJob(
      job.WriteSpec("one.yaml", MlpSpec(job, "{shape: [1]}", 2, "", false, {}, "trained")));
  JobOutcome on_mp = RunJob(
      job.WriteSpec("mp.yaml", MlpSpec(job, "{shape: [2], dim_names: [mp]}", 2, "", false,
                                       ColRowOverMp(), "trained/step-3")));
  ASSERT_EQ(on_one.losses.size(), 2u);
  ASSERT_EQ(on_mp.losses.size(), 2u);
  ASSERT_EQ(fresh.losses.size(), 2u);
  EXPECT_NE(on_one.losses[1], fresh.losses[1]) << "the trained parameters were not loaded";
  for (int64_t s : {1, 2}) EXPECT_LE(RelDiff(on_mp.losses[s], on_one.losses[s]), 1e-5);
}

TEST_F(CheckpointTest, DataParallelWritesOneCopyOfReplicatedTensors) {
  MlpJob job = MlpJob::Create();
  JobOutcome r = RunJob(job.WriteSpec(
      "dp4.yaml", MlpSpec(job, "{shape: [4], dim_names: [dp]}", 1, "{dir: dp4}", false)));
  ASSERT_EQ(r.saves.size(), 1u);
  auto reader = checkpoint::CheckpointReader::Open(job.dir + "/dp4/step-1");
  ASSERT_TRUE(reader.ok()) << reader.status();
  int64_t one_copy = 0, written = 0;
  std::set<std::string> files;
  for (const auto& [name, t] : reader->index().tensors) {
    int64_t n = 4;
    for (int64_t d : t.global_shape) n *= d;
    one_copy += n;
    for (const checkpoint::Chunk& c : t.chunks) {
      written += c.end - c.begin;
      files.insert(c.file);
    }
  }
  // 5 parameters and their AdamW m and v.
  EXPECT_EQ(reader->index().tensors.size(), 15u);
  EXPECT_EQ(written, one_copy);
  EXPECT_EQ(r.saves[0].bytes(), one_copy);
  EXPECT_GT(files.size(), 1u) << "the writes should be spread over ranks";
  for (const std::string& f : files) EXPECT_TRUE(fs::exists(job.dir + "/dp4/step-1/" + f)) << f;
  EXPECT_TRUE(reader->VerifyAll().ok());
}

// The cause, not the echo: a checkpoint chunk only rank 1 reads is corrupt, so rank 1 fails with
// a checksum error while rank 0, waiting for it in a collective, fails with the peer gone. The
// job's failure message names rank 1's checksum error first, whichever report arrived first;
// the job record (and `weftctl get`) lists every rank's error, rank 1's first; `weftctl logs
// --rank 1` shows the line rank 1's worker logged about it, `--rank 0` only rank 0's lines.
TEST_F(CheckpointTest, AChecksumErrorOnRank1IsTheJobsFailure) {
  MlpJob job = MlpJob::Create();
  const std::string mp2 = "{shape: [2], dim_names: [mp]}";
  JobOutcome saved = RunJob(job.WriteSpec(
      "save.yaml", MlpSpec(job, mp2, 1, "{dir: corrupt}", false, ColRowOverMp())));
  ASSERT_EQ(saved.saves.size(), 1u);
  const std::string step_dir = job.dir + "/corrupt/step-1";
  auto reader = checkpoint::CheckpointReader::Open(step_dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  // fc0.weight is Shard(1) over mp: rank 1 alone reads the columns from 8 on.
  const checkpoint::TensorEntry& weight = reader->index().tensors.at("fc0.weight");
  const checkpoint::Chunk* theirs = nullptr;
  for (const checkpoint::Chunk& c : weight.chunks) {
    if (c.offsets.size() == 2 && c.offsets[1] == MlpJob::kHidden / 2) theirs = &c;
  }
  ASSERT_NE(theirs, nullptr);
  {
    std::fstream f(step_dir + "/" + theirs->file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(theirs->begin + 4);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    f.seekp(theirs->begin + 4);
    f.write(&byte, 1);
  }
  auto spec = LoadJobSpecFile(job.WriteSpec(
      "load.yaml", MlpSpec(job, mp2, 2, "", false, ColRowOverMp(), "corrupt/step-1")));
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  const grpc::Status submitted = cluster_->Submit(*spec, &id);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  const JobOutcome loaded = JobOutcome::Of(cluster_->Watch(id, 120));
  EXPECT_EQ(loaded.state, v1::FAILED);
  EXPECT_EQ(loaded.message.rfind("rank 1 (", 0), 0u) << loaded.message;
  EXPECT_NE(loaded.message.find("checksum"), std::string::npos) << loaded.message;
  EXPECT_NE(loaded.message.find("fc0.weight"), std::string::npos) << loaded.message;

  // Every rank's error, the cause first.
  const v1::Job failed = cluster_->GetJob(id);
  ASSERT_GE(failed.rank_errors_size(), 1) << failed.DebugString();
  const v1::RankError& cause = failed.rank_errors(0);
  EXPECT_EQ(cause.rank(), 1);
  EXPECT_EQ(cause.attempt(), 0);
  EXPECT_FALSE(cause.worker().empty());
  EXPECT_EQ(cause.host(), "127.0.0.1");
  EXPECT_NE(cause.message().find("checksum"), std::string::npos) << cause.message();
  // Rank 0 fails on the peer gone within the settle window (its echo came 1 ms after rank 1's
  // failure when it was measured); it is listed after.
  ASSERT_EQ(failed.rank_errors_size(), 2) << failed.DebugString() << cluster_->Logs();
  EXPECT_EQ(failed.rank_errors(1).rank(), 0);
  EXPECT_GE(failed.rank_errors(1).failed_at_ms(), cause.failed_at_ms());
  const CommandResult got = cluster_->Weftctl({"get", id});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const size_t errors = got.out.find("errors:   2 ranks failed in attempt 0, earliest first\n");
  ASSERT_NE(errors, std::string::npos) << got.out;
  const size_t rank1 = got.out.find("\n  rank 1 (worker " + cause.worker() + " on host 127.0.0.1, "
                                    "attempt 0, +0 ms): ", errors);
  const size_t rank0 = got.out.find("\n  rank 0 (worker ", errors);
  EXPECT_NE(rank1, std::string::npos) << got.out;
  EXPECT_NE(rank0, std::string::npos) << got.out;
  EXPECT_LT(rank1, rank0) << got.out;

  // Rank 1's worker logged its error (and sent it before its TaskDone); rank 0's lines are its
  // own.
  const CommandResult rank1_logs = cluster_->Weftctl({"logs", id, "--rank", "1"});
  ASSERT_EQ(rank1_logs.exit_code, 0) << rank1_logs.err;
  bool error_line = false;
  for (absl::string_view line : absl::StrSplit(rank1_logs.out, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(line.rfind("attempt 0 rank 1  ", 0), 0u) << line;
    error_line |= absl::StrContains(line, "rank 1: ") && absl::StrContains(line, "checksum") &&
                  absl::StrContains(line, "fc0.weight");
  }
  EXPECT_TRUE(error_line) << rank1_logs.out;
  const CommandResult rank0_logs = cluster_->Weftctl({"logs", id, "--rank", "0", "--follow"});
  ASSERT_EQ(rank0_logs.exit_code, 0) << rank0_logs.err;
  EXPECT_NE(rank0_logs.out.find("attempt 0 rank 0  "), std::string::npos) << rank0_logs.out;
  for (absl::string_view line : absl::StrSplit(rank0_logs.out, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(line.rfind("attempt 0 rank 0  ", 0), 0u) << line;
    EXPECT_FALSE(absl::StrContains(line, "checksum")) << line;
  }
}

void ExpectLoadable(const std::string& dir, int64_t step) {
  absl::StatusOr<std::string> latest = checkpoint::FindLatestReadOnly(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, checkpoint::StepDir(dir, step));
  auto reader = checkpoint::CheckpointReader::Open(*latest);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->index().step, step);
  EXPECT_TRUE(reader->VerifyAll().ok());
}

// WEFT_DEBUG_CRASH_AT=<point>@<step>.
std::map<std::string, std::string> CrashAt(const char* point, int64_t step) {
  return {{kCrashAtEnv, absl::StrCat(point, "@", step)}};
}

TEST_F(CheckpointTest, WorkersKilledDuringASaveLeaveThePreviousCheckpoint) {
  MlpJob job = MlpJob::Create();
  const std::string dp2 = "{shape: [2], dim_names: [dp]}";
  const std::string dir = job.dir + "/ckpt";
  const std::string checkpoint = "{dir: ckpt, every: 1, keep: 5}";
  // The crash comes at the last step's save, four saves after step 1's: a killed process's last
  // messages may not leave it, but step 1's report has long been sent.
  constexpr int kSteps = 5;
  const std::string spec =
      job.WriteSpec("job.yaml", MlpSpec(job, dp2, kSteps, checkpoint, false));
  {
    // Both workers kill themselves once their shard of the last step is written, before
    // reporting it.
    DaemonClusterOptions options;
    options.cpu_workers = 2;
    options.worker_env = CrashAt(kWorkerAfterShard, kSteps);
    absl::StatusOr<std::unique_ptr<DaemonCluster>> started = DaemonCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    DaemonCluster* cluster = started->get();
    const std::string id = SubmitFile(*cluster, spec);
    ASSERT_FALSE(id.empty());
    for (int w : {0, 1}) {
      const std::optional<ExitStatus> exit = cluster->worker(w).WaitFor(absl::Seconds(120));
      ASSERT_TRUE(exit.has_value()) << "worker " << w << " did not crash\n" << cluster->Logs();
      EXPECT_EQ(exit->signal, SIGKILL) << exit->Describe() << "\n" << cluster->Logs();
    }
    EXPECT_TRUE(fs::exists(checkpoint::StagingDir(dir, kSteps)))
        << "the shards of the last step were written";
    ASSERT_TRUE(
        PollUntil([&] { return cluster->GetJob(id).state() == v1::FAILED; }, absl::Seconds(60))
            .ok())
        << cluster->Logs();
    // The save of step 1 was reported four steps and saves before the kill: it is committed (the
    // commit may still be running). The later ones went out closer to the kill, and a killed
    // process's last messages may not reach the coordinator, so they may or may not be
    // committed; no rank reported the last step, so nothing can commit it.
    ASSERT_TRUE(PollUntil(
                    [&] {
                      return ReadFileOrEmpty(cluster->coordinator_log())
                                 .find("checkpoint of step 1 committed") != std::string::npos;
                    },
                    absl::Seconds(30))
                    .ok())
        << cluster->Logs();
    ASSERT_TRUE(fs::exists(checkpoint::StepDir(dir, 1)));
    EXPECT_FALSE(fs::exists(checkpoint::StepDir(dir, kSteps))) << "a partial save was committed";
  }
  int64_t last = kSteps - 1;
  while (last > 1 && !fs::exists(checkpoint::StepDir(dir, last))) --last;
  ExpectLoadable(dir, last);  // the newest committed step, whole

  // The resumed job goes on from the newest committed step.
  JobOutcome resumed =
      RunJob(job.WriteSpec("job.yaml", MlpSpec(job, dp2, kSteps, checkpoint, true)));
  EXPECT_EQ(resumed.losses.size(), static_cast<size_t>(kSteps - last));
  EXPECT_EQ(resumed.losses.count(last + 1), 1u);
  ExpectLoadable(dir, kSteps);
  EXPECT_FALSE(fs::exists(checkpoint::StagingDir(dir, kSteps))) << "leftover staging not removed";
}

TEST_F(CheckpointTest, CoordinatorKilledBeforeTheCommitLeavesThePreviousCheckpoint) {
  MlpJob job = MlpJob::Create();
  const std::string dp2 = "{shape: [2], dim_names: [dp]}";
  JobOutcome first =
      RunJob(job.WriteSpec("first.yaml", MlpSpec(job, dp2, 1, "{dir: ckpt, every: 1}", false)));
  ASSERT_EQ(first.saves.size(), 1u);
  const std::string dir = job.dir + "/ckpt";
  const std::string resume = job.WriteSpec("resume.yaml", MlpSpec(job, dp2, 2, "{dir: ckpt}", true));
  {
    // The coordinator kills itself once every shard of step 2 is written and reported, before
    // it commits them.
    DaemonClusterOptions options;
    options.cpu_workers = 2;
    options.coordinator_env = CrashAt(kCoordinatorBeforeCommit, 2);
    absl::StatusOr<std::unique_ptr<DaemonCluster>> started = DaemonCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    DaemonCluster* cluster = started->get();
    const std::string id = SubmitFile(*cluster, resume);
    ASSERT_FALSE(id.empty());
    const std::optional<ExitStatus> exit = cluster->coordinator().WaitFor(absl::Seconds(120));
    ASSERT_TRUE(exit.has_value()) << "the coordinator did not crash\n" << cluster->Logs();
    EXPECT_EQ(exit->signal, SIGKILL) << exit->Describe() << "\n" << cluster->Logs();
  }
  EXPECT_TRUE(fs::exists(checkpoint::StagingDir(dir, 2)));
  EXPECT_FALSE(fs::exists(checkpoint::StepDir(dir, 2)));
  ExpectLoadable(dir, 1);

  JobOutcome resumed = RunJob(resume);
  EXPECT_EQ(resumed.losses.size(), 1u);
  EXPECT_EQ(resumed.losses.count(2), 1u);
  ExpectLoadable(dir, 2);
}

// The coordinator killed after it committed the last step's checkpoint and before it stored
// SUCCEEDED: once restarted, the job resumes as its next attempt, finds its own checkpoint of the
// last step and is SUCCEEDED (it was FAILED: "train.steps: 5 leaves nothing to resume"), its
// steps' losses those of the float64 reference.
TEST_F(CheckpointTest, CoordinatorKilledAfterTheLastCommitLeavesTheJobSucceeded) {
  MlpJob job = MlpJob::Create();
  const std::string spec = job.WriteSpec(
      "last.yaml", MlpSpec(job, "{shape: [2], dim_names: [dp]}", MlpJob::kSteps,
                           "{dir: last, every: 1}", false));
  DaemonClusterOptions options;
  options.cpu_workers = 2;
  options.coordinator_env = CrashAt(kCoordinatorAfterCommit, MlpJob::kSteps);
  absl::StatusOr<std::unique_ptr<DaemonCluster>> started = DaemonCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonCluster& cluster = **started;
  const std::string id = SubmitFile(cluster, spec);
  ASSERT_FALSE(id.empty());
  const std::optional<ExitStatus> exit = cluster.coordinator().WaitFor(absl::Seconds(120));
  ASSERT_TRUE(exit.has_value()) << "the coordinator did not crash\n" << cluster.Logs();
  EXPECT_EQ(exit->signal, SIGKILL) << exit->Describe() << "\n" << cluster.Logs();
  ExpectLoadable(job.dir + "/last", MlpJob::kSteps);

  ASSERT_TRUE(cluster.RestartCoordinator().ok()) << cluster.Logs();
  // The workers reconnect to the new coordinator by themselves.
  ASSERT_TRUE(PollUntil([&] { return cluster.ListWorkers().size() == 2; }, absl::Seconds(60)).ok())
      << cluster.Logs();
  const JobOutcome outcome = JobOutcome::Of(cluster.Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << "\n" << cluster.Logs();
  EXPECT_NE(outcome.message.find("every step ran: "), std::string::npos) << outcome.message;
  const std::vector<double> reference = job.ReferenceLosses();
  ASSERT_FALSE(outcome.losses.empty());
  for (const auto& [step, loss] : outcome.losses) {
    EXPECT_LE(RelDiff(loss, reference[step - 1]), 1e-4) << "step " << step;
  }
}

// The crash-point sweep: the coordinator SIGKILLed at every point of the checkpoint commit (before
// it, after the index, after the rename, after `latest`, after the old steps are removed and
// before the step's event and the job's end are stored), at a middle step and at the last, and
// restarted without the crash armed: every run ends SUCCEEDED, with every step's loss that of
// the uninterrupted run bit for bit, and its last step's checkpoint whole.
TEST(CheckpointCrashSweepTest, TheCoordinatorKilledAtEveryCommitPointRestartsToTheSameLosses) {
  MlpJob job = MlpJob::Create();
  DaemonClusterOptions options;
  options.cpu_workers = 2;
  absl::StatusOr<std::unique_ptr<DaemonCluster>> started = DaemonCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonCluster& cluster = **started;
  auto spec = [&](const std::string& name) {
    return job.WriteSpec(name + ".yaml",
                         MlpSpec(job, "{shape: [2], dim_names: [dp]}", MlpJob::kSteps,
                                 absl::StrCat("{dir: ", name, ", every: 1, keep: 2}"), false));
  };
  const JobOutcome straight = cluster.RunSpecFile(spec("straight"));
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(MlpJob::kSteps));

  for (const char* point : {kCoordinatorBeforeCommit, kCoordinatorAfterIndex,
                            kCoordinatorAfterRename, kCoordinatorAfterLatest,
                            kCoordinatorAfterCommit}) {
    for (const int64_t step : {int64_t{2}, int64_t{MlpJob::kSteps}}) {
      const std::string name = absl::StrCat(point, "_", step);
      SCOPED_TRACE(name);
      ASSERT_TRUE(cluster.RestartCoordinator(CrashAt(point, step)).ok()) << cluster.Logs();
      ASSERT_TRUE(
          PollUntil([&] { return cluster.ListWorkers().size() == 2; }, absl::Seconds(60)).ok())
          << cluster.Logs();
      const std::string id = SubmitFile(cluster, spec(name));
      ASSERT_FALSE(id.empty());
      const std::optional<ExitStatus> exit = cluster.coordinator().WaitFor(absl::Seconds(120));
      ASSERT_TRUE(exit.has_value()) << "the coordinator did not crash\n" << cluster.Logs();
      EXPECT_EQ(exit->signal, SIGKILL) << exit->Describe() << "\n" << cluster.Logs();

      ASSERT_TRUE(cluster.RestartCoordinator({}).ok()) << cluster.Logs();
      // The workers reconnect to the new coordinator by themselves.
      ASSERT_TRUE(
          PollUntil([&] { return cluster.ListWorkers().size() == 2; }, absl::Seconds(60)).ok())
          << cluster.Logs();
      const JobOutcome outcome = JobOutcome::Of(cluster.Watch(id, 120));
      EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << "\n" << cluster.Logs();
      ASSERT_EQ(outcome.losses.size(), static_cast<size_t>(MlpJob::kSteps)) << cluster.Logs();
      for (const auto& [s, loss] : straight.losses) {
        EXPECT_EQ(outcome.losses.at(s), loss) << "step " << s;
      }
      ExpectLoadable(job.dir + "/" + name, MlpJob::kSteps);
    }
  }
}

}  // namespace
}  // namespace weft::testing
