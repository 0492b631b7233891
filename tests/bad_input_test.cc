// Bad input gets a clear error that names what is wrong, and the coordinator keeps serving:
// each bad spec is sent straight to a real coordinator's SubmitJob over gRPC (INVALID_ARGUMENT
// naming the field), a job whose mesh needs more workers than exist waits with a reason, and a
// good job then still runs to SUCCEEDED on the same daemons. `weftctl list` on a cluster without
// workers shows bounded, filtered summaries.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "common/version.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::testing {
namespace {

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    job_ = new MlpJob(MlpJob::Create());
    auto cluster = DaemonCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    delete job_;
  }

  static grpc::Status SubmitSpec(const v1::JobSpec& spec, std::string* job_id = nullptr) {
    return cluster_->Submit(spec, job_id);
  }

  // Parses (without validating) a spec written next to the job's files and submits it.
  static grpc::Status Submit(const std::string& yaml, std::string* job_id = nullptr) {
    auto spec = ParseJobSpecYaml(yaml, job_->dir);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "unparsable test spec");
    return SubmitSpec(*spec, job_id);
  }

  static void ExpectRejected(const grpc::Status& s, const std::vector<std::string>& words) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    for (const auto& w : words) {
      EXPECT_NE(s.error_message().find(w), std::string::npos)
          << "error should name '" << w << "': " << s.error_message();
    }
  }

  static void ExpectRejected(const std::string& yaml, const std::vector<std::string>& words) {
    ExpectRejected(Submit(yaml), words);
  }

  static v1::Job GetJob(const std::string& id) { return cluster_->GetJob(id); }

  static std::string Replace(std::string text, const std::string& from, const std::string& to) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
  }

  static std::string Dp2() { return job_->SpecYaml("{shape: [2], dim_names: [dp]}"); }

  static MlpJob* job_;
  static DaemonCluster* cluster_;
};

MlpJob* BadInputTest::job_ = nullptr;
DaemonCluster* BadInputTest::cluster_ = nullptr;

TEST_F(BadInputTest, UnknownLayerType) {
  ExpectRejected(Replace(Dp2(), "{name: act0, type: gelu}", "{name: act0, type: conv}"),
                 {"model.layers[1]", "conv"});
}

TEST_F(BadInputTest, MismatchedFeatures) {
  ExpectRejected(Replace(Dp2(), "in_features: 16, out_features: 16", "in_features: 12, out_features: 16"),
                 {"model.layers[2]", "in_features"});
}

TEST_F(BadInputTest, BatchSmallerThanItsShards) {
  // Uneven batch shards are fine (8 over dp = 3 is 2, 2, 4); 2 samples over dp = 3 would leave a
  // rank without one.
  ExpectRejected(Replace(job_->SpecYaml("{shape: [3], dim_names: [dp]}"), "batch_size: 8",
                         "batch_size: 2"),
                 {"data.batch_size", "2 is smaller than the 3 shards", "dp"});
}

TEST_F(BadInputTest, MissingDataFile) {
  ExpectRejected(Replace(Dp2(), "input: inputs.npy", "input: nowhere.npy"),
                 {"data.input", "nowhere.npy"});
}

TEST_F(BadInputTest, MalformedSafetensors) {
  std::ofstream(job_->dir + "/garbage.safetensors") << "\x10\x00\x00\x00\x00\x00\x00\x00{\"fc0.weight\":";
  ExpectRejected(Replace(Dp2(), "init_from: init.safetensors", "init_from: garbage.safetensors"),
                 {"init_from", "garbage.safetensors"});
}

TEST_F(BadInputTest, WeightShapeMismatch) {
  std::vector<NamedTensor> wrong = job_->init;
  wrong[2].shape = {8, 32};  // fc1.weight should be [16, 16]; same element count
  WriteSafetensorsF32(job_->dir + "/wrong.safetensors", wrong);
  ExpectRejected(Replace(Dp2(), "init_from: init.safetensors", "init_from: wrong.safetensors"),
                 {"fc1.weight", "[8,32]", "[16,16]"});
}

TEST_F(BadInputTest, ShardAxisOutOfRange) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [dp]}", "",
                                {{"fc1", "placements: {weight: [Shard(2)]}"}}),
                 {"fc1", "weight", "Shard(2)"});
}

TEST_F(BadInputTest, PlacementsLongerThanTheMesh) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [dp]}", "",
                                {{"fc0", "placements: {bias: [Replicate(), Shard(0)]}"}}),
                 {"fc0", "bias"});
}

// A name a terminal would act on (ESC rewrites `weftctl list`, CR/LF forge a coordinator log
// line) is refused at submit, and nothing of it is stored or logged.
TEST_F(BadInputTest, AJobNameWithControlCharactersIsRefused) {
  auto spec = ParseJobSpecYaml(Dp2(), job_->dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const int64_t before = cluster_->Weftctl({"list", "--json"}).out.size();
  for (const std::string& name : {"\x1b[2Jowned", "ok\ninfo job-000009: SUCCEEDED", "bell\a"}) {
    spec->set_name(name);
    ExpectRejected(SubmitSpec(*spec), {"name: holds a control character"});
  }
  EXPECT_EQ(cluster_->Weftctl({"list", "--json"}).out.size(), before) << "nothing stored";
  EXPECT_EQ(ReadFileOrEmpty(cluster_->coordinator_log()).find("owned"), std::string::npos);
}

// A spec that is not UTF-8: weftctl names its line and column before it sends anything, and a
// gRPC client sending such spec_yaml gets the same from the coordinator (not an INTERNAL with no
// message), which goes on serving.
TEST_F(BadInputTest, ASpecThatIsNotUtf8IsNamedByItsLineAndColumn) {
  const std::string yaml = Replace(Dp2(), "mesh:", "# caf\xe9 au lait\nmesh:");
  const std::string path = job_->WriteSpec("latin1.yaml", yaml);
  CommandResult r = cluster_->Weftctl({"submit", path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, ::testing::HasSubstr(path + ": job spec is not valid UTF-8 at line "));
  EXPECT_THAT(r.err, ::testing::HasSubstr(", column 6 (byte 0xe9); save it as UTF-8"));
  EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("INTERNAL")));

  auto stub = v1::JobService::NewStub(
      grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  v1::SubmitJobResponse response;
  const grpc::Status s = stub->SubmitJob(&ctx, request, &response);
  ExpectRejected(s, {"job spec is not valid UTF-8 at line ", "column 6 (byte 0xe9)"});
  EXPECT_EQ(cluster_->Weftctl({"list"}).exit_code, 0) << "the coordinator serves on";
}

// num_samples = batch_size = 2^61 was accepted (the planner's memory estimate overflowed to
// 21 KiB) and crashed every worker that read the batch; it is refused at submit.
TEST_F(BadInputTest, ABatchOfTwoToTheSixtyFirstSamplesIsRefused) {
  auto spec = ParseJobSpecYaml(Dp2(), job_->dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_source("synthetic");
  spec->mutable_data()->clear_input();
  spec->mutable_data()->clear_label();
  spec->mutable_data()->add_sample_shape(MlpJob::kIn);
  spec->mutable_data()->add_label_shape(MlpJob::kOut);
  spec->mutable_data()->set_num_samples(int64_t{1} << 61);
  spec->mutable_data()->set_batch_size(int64_t{1} << 61);
  ExpectRejected(SubmitSpec(*spec), {"data.batch_size: 2305843009213693952 samples",
                                     "more than 2^40 elements a batch"});
  std::string good;
  ASSERT_TRUE(Submit(Dp2(), &good).ok());
  EXPECT_EQ(JobOutcome::Of(cluster_->Watch(good, 120)).state, v1::SUCCEEDED);
}

TEST_F(BadInputTest, ParallelizeNamesAMissingLayer) {
  // The YAML parser would already refuse it; a gRPC client can still send it.
  auto spec = ParseJobSpecYaml(job_->SpecYaml("{shape: [2], dim_names: [mp]}"), job_->dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::ParallelizeConfig& entry = (*spec->mutable_parallelize())["mp"];
  entry.set_dim("mp");
  (*entry.mutable_plan())["fc9"] = "ColWiseParallel";
  ExpectRejected(SubmitSpec(*spec), {"parallelize", "fc9"});
}

TEST_F(BadInputTest, ShardOnAMeshDimThatDoesNotExistIsRejectedByTheCli) {
  std::string spec = job_->WriteSpec(
      "no_such_dim.yaml", job_->SpecYaml("{shape: [2], dim_names: [dp]}", "",
                                         {{"fc0", "placements: {weight: {mp: Shard(1)}}"}}));
  CommandResult r = RunCommand(
      {BinaryPath("client/weftctl"), "--coordinator", cluster_->address(), "submit", spec}, 30);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  for (const char* word : {"fc0", "weight", "mp", "Shard(1)"}) {
    EXPECT_NE(r.err.find(word), std::string::npos) << "error should name " << word << ": " << r.err;
  }
}

TEST_F(BadInputTest, PipelineDimMissingFromTheMesh) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [dp]}",
                                "pipeline: {dim: pp, schedule: FThenB, micro_batches: 2}\n"),
                 {"pipeline.dim", "pp"});
}

TEST_F(BadInputTest, VppWithOneVirtualStage) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [pp]}",
                                "pipeline: {dim: pp, schedule: VPP, micro_batches: 2, "
                                "virtual_stages: 1}\n"),
                 {"virtual_stages", "VPP"});
}

TEST_F(BadInputTest, DecreasingStages) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [pp]}",
                                "pipeline: {dim: pp, schedule: FThenB, micro_batches: 2}\n",
                                {{"fc0", "stage: 1"}, {"fc1", "stage: 0"}}),
                 {"fc1", "stage", "must not decrease"});
}

TEST_F(BadInputTest, StageOutOfRange) {
  ExpectRejected(job_->SpecYaml("{shape: [2], dim_names: [pp]}",
                                "pipeline: {dim: pp, schedule: FThenB, micro_batches: 2}\n",
                                {{"fc0", "stage: 0"}, {"fc1", "stage: 1"}, {"fc2", "stage: 2"}}),
                 {"stage", "fc2"});
}

// A job whose planned peak exceeds the memory of every registered worker could never run: it is
// refused at submit with the figures (a 262144 x 262144 float32 weight with AdamW is 1 TiB).
TEST_F(BadInputTest, AJobLargerThanItsWorkersMemoryIsRefusedAtSubmit) {
  const std::string huge = R"(name: huge
mesh: {shape: [2], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 262144, out_features: 262144, bias: false}
  loss: mse
data: {source: synthetic, sample_shape: [262144], label_shape: [262144], num_samples: 8,
       batch_size: 4}
optimizer: {type: adamw, lr: 1.0e-3, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 1, seed: 1}
)";
  const grpc::Status s = Submit(huge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  for (const std::string word : {"rank 0 needs ", " GiB at its planned peak",
                                 " GiB of the largest registered cpu worker (worker-"}) {
    EXPECT_NE(s.error_message().find(word), std::string::npos) << s.error_message();
  }
}

// A job larger than the cluster waits with its reason and does not hold back a smaller job
// submitted after it, which runs to the end meanwhile; the large one can still be cancelled.
TEST_F(BadInputTest, MeshLargerThanTheClusterWaitsWithAReasonWhileASmallerJobRuns) {
  std::string big_id;
  grpc::Status s = Submit(job_->SpecYaml("{shape: [4], dim_names: [dp]}"), &big_id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // SubmitJob schedules before it returns: the job is already waiting, with its reason.
  v1::Job big = GetJob(big_id);
  EXPECT_EQ(big.state(), v1::PENDING);
  EXPECT_NE(big.message().find("waiting for 4 idle cpu workers, 2 registered"), std::string::npos)
      << big.message();

  std::string spec = job_->WriteSpec("good.yaml", Dp2());
  // The client sees the cluster's files at the same paths.
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "--coordinator",
                                cluster_->address(), "submit", "--check-local-files", spec,
                                "--watch", "--json"},
                               180);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string state;
  std::vector<double> losses = ParseStepLosses(r.out, &state);
  EXPECT_EQ(state, "SUCCEEDED") << r.out << r.err;
  EXPECT_EQ(losses.size(), static_cast<size_t>(MlpJob::kSteps));
  EXPECT_EQ(GetJob(big_id).state(), v1::PENDING);

  // The coordinator is still serving, and the large job can be cancelled.
  CommandResult cancel = RunCommand(
      {BinaryPath("client/weftctl"), "--coordinator", cluster_->address(), "cancel", big_id}, 30);
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(GetJob(big_id).state(), v1::CANCELLED);
}

// A job whose loss stops being a number (a learning rate of 1e38 overflows the parameters in its
// first update) fails at that step, saying so, instead of SUCCEEDING on garbage; a checkpoint of
// non-finite parameters is refused; the cluster serves the next job.
TEST_F(BadInputTest, ANonFiniteLossFailsTheJobNamingTheStep) {
  std::string id;
  grpc::Status s = Submit(Replace(Dp2(), "lr: 0.01,", "lr: 1.0e+38,"), &id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome outcome = JobOutcome::Of(cluster_->Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::FAILED) << outcome.message;
  EXPECT_NE(outcome.message.find("step 2: the loss is "), std::string::npos) << outcome.message;
  EXPECT_EQ(outcome.losses.size(), 1u) << "only the finite step is reported";

  // A learning rate of 1e39 is infinite in float32: step 1's loss (computed before the update)
  // is finite, its update is not, and its checkpoint refuses to save it.
  std::string diverged;
  s = Submit(Replace(Replace(Dp2(), "lr: 0.01,", "lr: 1.0e+39,"), "train: {",
                     "checkpoint: {dir: diverged, every: 1}\ntrain: {"),
             &diverged);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome saved = JobOutcome::Of(cluster_->Watch(diverged, 120));
  EXPECT_EQ(saved.state, v1::FAILED) << saved.message;
  EXPECT_NE(saved.message.find("checkpoint of step 1: "), std::string::npos) << saved.message;
  EXPECT_NE(saved.message.find("holds a non-finite value"), std::string::npos) << saved.message;
  EXPECT_TRUE(saved.saves.empty()) << "a non-finite checkpoint was committed";

  std::string good;
  ASSERT_TRUE(Submit(Dp2(), &good).ok());
  EXPECT_EQ(JobOutcome::Of(cluster_->Watch(good, 120)).state, v1::SUCCEEDED);
}

// A NaN in the input data fails the step that reads it, naming the file, the sample and the
// element; it was absorbed (the ReLU maps NaN to 0) and the job SUCCEEDED with other losses.
TEST_F(BadInputTest, ANonFiniteInputFailsTheJobNamingTheFileAndSample) {
  std::vector<double> inputs = job_->inputs;
  inputs[9 * MlpJob::kIn + 3] = std::numeric_limits<double>::quiet_NaN();
  const std::string path = job_->dir + "/nan_inputs.npy";
  WriteNpyF32(path, {MlpJob::kSamples, MlpJob::kIn}, inputs);
  std::string id;
  grpc::Status s = Submit(Replace(Dp2(), "input: inputs.npy", "input: nan_inputs.npy"), &id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome outcome = JobOutcome::Of(cluster_->Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::FAILED) << outcome.message;
  EXPECT_NE(outcome.message.find(path + ": sample 9 element 3 is NaN; non-finite inputs are "
                                        "refused"),
            std::string::npos)
      << outcome.message;
  // Batches of 8: samples 0..7 are step 1's, sample 9 is step 2's.
  EXPECT_EQ(outcome.losses.size(), 1u) << "only the step before it is reported";
}

// The daemons refuse a --listen they could not honour, and --help lists their flags.
TEST(DaemonFlagsTest, BadListenIsRefusedAndHelpListsTheFlags) {
  const std::string dir = MakeTempDir("flags");
  CommandResult bad = RunCommand({BinaryPath("coordinator/weft-coordinator"), "--listen",
                                  "127.0.0.1:99999", "--data_dir", dir + "/data"},
                                 30);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--listen 127.0.0.1:99999: expected HOST:PORT with a port from 0"),
            std::string::npos)
      << bad.err;
  CommandResult bad_metrics = RunCommand(
      {BinaryPath("coordinator/weft-coordinator"), "--listen", "127.0.0.1:0", "--metrics_listen",
       "127.0.0.1:99999", "--data_dir", dir + "/data"},
      30);
  EXPECT_EQ(bad_metrics.exit_code, 2);
  EXPECT_NE(bad_metrics.err.find("--metrics_listen 127.0.0.1:99999: expected HOST:PORT"),
            std::string::npos)
      << bad_metrics.err;
  for (const auto& [binary, flags] :
       {std::pair<std::string, std::vector<std::string>>{
            "coordinator/weft-coordinator",
            {"--listen", "--data_dir", "--max_ranks", "--client_token_file", "--worker_token_file",
             "--tls_cert", "--tls_key", "--metrics_listen", "--metrics_port_file"}},
        {"worker/weft-worker",
         {"--coordinator", "--device", "--host", "--token_file", "--tls_ca",
          "--tls_server_name", "--metrics_listen"}}}) {
    CommandResult help = RunCommand({BinaryPath(binary), "--help"}, 30);
    const std::string text = help.out + help.err;
    for (const std::string& flag : flags) {
      EXPECT_NE(text.find(flag + " ("), std::string::npos) << binary << " --help: " << text;
    }
    EXPECT_EQ(text.find("No flags matched"), std::string::npos) << binary;
  }
}

// Without --data_dir the coordinator keeps its job store in the user's XDG state folder (no root
// needed): $XDG_STATE_HOME/weft here.
TEST(DaemonFlagsTest, TheJobStoreDefaultsToTheUsersStateFolder) {
  const std::string dir = MakeTempDir("state");
  auto coordinator = StartDaemon(
      {BinaryPath("coordinator/weft-coordinator"), "--listen", "127.0.0.1:0", "--port_file",
       dir + "/port"},
      dir + "/coordinator.log", {{"XDG_STATE_HOME", dir + "/xdg"}, {"STATE_DIRECTORY", ""}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE(PollUntil([&] { return !ReadFileOrEmpty(dir + "/port").empty(); },
                        absl::Seconds(30))
                  .ok())
      << ReadFileOrEmpty(dir + "/coordinator.log");
  EXPECT_TRUE(std::filesystem::exists(dir + "/xdg/weft/weft.db"))
      << ReadFileOrEmpty(dir + "/coordinator.log");
}

// Every binary prints its name and Weft's version for --version, and exits 0.
TEST(DaemonFlagsTest, EveryBinaryPrintsItsVersion) {
  for (const auto& [binary, program] : std::vector<std::pair<std::string, std::string>>{
           {"coordinator/weft-coordinator", "weft-coordinator"},
           {"worker/weft-worker", "weft-worker"},
           {"client/weftctl", "weftctl"}}) {
    CommandResult version = RunCommand({BinaryPath(binary), "--version"}, 30);
    EXPECT_EQ(version.exit_code, 0) << binary << ": " << version.err;
    EXPECT_EQ(version.out, absl::StrCat(program, " ", kWeftVersion, "\n")) << binary;
  }
  CommandResult command = RunCommand({BinaryPath("client/weftctl"), "version"}, 30);
  EXPECT_EQ(command.out, absl::StrCat("weftctl ", kWeftVersion, "\n"));
}

// The job ids of `weftctl list`'s table, in its order.
std::vector<std::string> ListedIds(const std::string& table) {
  std::vector<std::string> ids;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    if (absl::StartsWith(line, "job-")) ids.emplace_back(line.substr(0, line.find(' ')));
  }
  return ids;
}

// `list` through the real daemons. With no worker every job stays where it is (PENDING, or
// CANCELLED), so the listing holds still: --limit cuts it and says more follow, --state filters
// it, --json holds summaries (no spec, no steps), a bad state is refused naming the states.
TEST(JobListTest, ListIsBoundedFilteredAndSummarized) {
  auto cluster = DaemonCluster::Start(0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const DaemonCluster& c = **cluster;
  MlpJob job = MlpJob::Create();
  auto spec = ParseJobSpecYaml(job.SpecYaml("{shape: [2], dim_names: [dp]}"), job.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::string> ids(3);
  for (std::string& id : ids) {
    grpc::Status s = c.Submit(*spec, &id);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(c.Weftctl({"cancel", ids[1]}).exit_code, 0);

  CommandResult all = c.Weftctl({"list"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(ListedIds(all.out), ids);
  EXPECT_EQ(all.err, "");
  CommandResult limited = c.Weftctl({"list", "--limit", "2"});
  EXPECT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_EQ(ListedIds(limited.out), (std::vector<std::string>{ids[0], ids[1]}));
  EXPECT_NE(limited.err.find("more follow"), std::string::npos) << limited.err;
  CommandResult pending = c.Weftctl({"list", "--state", "PENDING"});
  EXPECT_EQ(pending.exit_code, 0) << pending.err;
  EXPECT_EQ(ListedIds(pending.out), (std::vector<std::string>{ids[0], ids[2]}));

  CommandResult cancelled = c.Weftctl({"list", "--state", "cancelled", "--json"});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  const nlohmann::json listed = nlohmann::json::parse(cancelled.out);
  ASSERT_EQ(listed["jobs"].size(), 1u) << cancelled.out;
  const nlohmann::json& summary = listed["jobs"][0];
  EXPECT_EQ(summary["id"], ids[1]);
  EXPECT_EQ(summary["name"], spec->name());
  EXPECT_EQ(summary["state"], "CANCELLED");
  EXPECT_FALSE(summary.contains("spec")) << cancelled.out;
  EXPECT_FALSE(summary.contains("steps")) << cancelled.out;

  CommandResult bad = c.Weftctl({"list", "--state", "done"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--state: unknown job state \"done\"; known: PENDING, PLANNING, "
                         "RUNNING, SUCCEEDED, FAILED, CANCELLED, RESTARTING"),
            std::string::npos)
      << bad.err;
  CommandResult got = c.Weftctl({"get", ids[0]});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_NE(got.out.find("state:    PENDING"), std::string::npos) << got.out;
}

TEST(LocalClusterTest, MeshNotMatchingRanksIsAClearError) {
  MlpJob job = MlpJob::Create();
  std::string spec = job.WriteSpec("dp4.yaml", job.SpecYaml("{shape: [4], dim_names: [dp]}"));
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "local", "--ranks", "2",
                                "--coordinator_bin", BinaryPath("coordinator/weft-coordinator"),
                                "--worker_bin", BinaryPath("worker/weft-worker"), spec},
                               60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("mesh"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft::testing
