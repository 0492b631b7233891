// Confined paths through the real daemons (`--data_root`, `--checkpoint_root`): each spec is sent
// straight to the coordinator's SubmitJob over gRPC, as a hostile client would, and refused
// before any file is read: /etc/shadow, a `..` and a symlink out of the root, a checkpoint.dir
// elsewhere or holding a user's files. A FIFO is refused without blocking, and no error quotes a
// file's bytes. The workers check every program too. The daemons keep serving: a good job then
// SUCCEEDS, its checkpoint under the root.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "common/jobspec/yaml.h"
#include "common/testing_files.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A file shaped like /etc/shadow: what the daemons must never echo.
constexpr char kSecret[] = "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n";

class ConfinedPathsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    job_ = new MlpJob(MlpJob::Create());
    root_ = fs::canonical(job_->dir).string();
    checkpoint_root_ = root_ + "/checkpoints";
    fs::create_directories(checkpoint_root_);
    outside_ = fs::canonical(MakeTempDir("outside")).string();
    fs::copy_file(root_ + "/inputs.npy", outside_ + "/inputs.npy");
    DaemonClusterOptions options;
    options.cpu_workers = 2;
    const std::vector<std::string> roots = {"--data_root", root_, "--checkpoint_root",
                                            checkpoint_root_};
    options.coordinator_flags = roots;
    options.worker_flags = roots;
    // Paced, so that a folder can be swapped while a job runs (a 5-step job takes 0.25 s more).
    options.worker_env = {{"WEFT_DEBUG_STEP_MS", "50"}};
    auto cluster = DaemonCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    delete job_;
  }

  // The dp2 MLP job's spec, its relative paths resolved against the job's folder.
  static v1::JobSpec Spec() {
    auto spec = ParseJobSpecYaml(job_->SpecYaml("{shape: [2], dim_names: [dp]}"), job_->dir);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : v1::JobSpec();
  }

  static void ExpectRefused(const v1::JobSpec& spec, grpc::StatusCode code,
                            const std::vector<std::string>& words) {
    const grpc::Status s = cluster_->Submit(spec);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    for (const std::string& w : words) {
      EXPECT_NE(s.error_message().find(w), std::string::npos)
          << "error should name '" << w << "': " << s.error_message();
    }
  }

  static MlpJob* job_;
  static DaemonCluster* cluster_;
  static std::string root_, checkpoint_root_, outside_;
};

MlpJob* ConfinedPathsTest::job_ = nullptr;
DaemonCluster* ConfinedPathsTest::cluster_ = nullptr;
std::string ConfinedPathsTest::root_;
std::string ConfinedPathsTest::checkpoint_root_;
std::string ConfinedPathsTest::outside_;

TEST_F(ConfinedPathsTest, PathsOutTheirRootAreRefusedBeforeAnyRead) {
  v1::JobSpec spec = Spec();
  spec.mutable_data()->set_input("/etc/shadow");
  ExpectRefused(spec, grpc::StatusCode::PERMISSION_DENIED,
                {"data.input: /etc/shadow is outside --data_root " + root_});

  spec = Spec();
  spec.mutable_data()->set_label(root_ + "/../" + fs::path(outside_).filename().string() +
                                 "/inputs.npy");
  ExpectRefused(spec, grpc::StatusCode::PERMISSION_DENIED,
                {"data.label: ", "/../", "is outside --data_root " + root_});

  // A link inside the root to a readable, valid file outside it.
  fs::create_symlink(outside_ + "/inputs.npy", root_ + "/escape.npy");
  spec = Spec();
  spec.mutable_data()->set_input(root_ + "/escape.npy");
  ExpectRefused(spec, grpc::StatusCode::PERMISSION_DENIED,
                {"data.input: " + root_ + "/escape.npy (it resolves to " + outside_ +
                 "/inputs.npy) is outside --data_root"});

  spec = Spec();
  spec.set_init_from("/etc/passwd");
  ExpectRefused(spec, grpc::StatusCode::PERMISSION_DENIED,
                {"init_from: /etc/passwd is outside --data_root " + root_ +
                 " or --checkpoint_root " + checkpoint_root_});

  spec = Spec();
  spec.mutable_checkpoint()->set_dir(root_ + "/ckpt");  // the data root is not for writing
  spec.mutable_checkpoint()->set_every(1);
  ExpectRefused(spec, grpc::StatusCode::PERMISSION_DENIED,
                {"checkpoint.dir: " + root_ + "/ckpt is outside --checkpoint_root " +
                 checkpoint_root_});
  EXPECT_FALSE(fs::exists(root_ + "/ckpt"));
}

TEST_F(ConfinedPathsTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = root_ + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // Opened for reading without a writer, a FIFO would block the coordinator's thread forever;
  // Submit's 30 s deadline would then end the call with DEADLINE_EXCEEDED instead.
  v1::JobSpec spec = Spec();
  spec.set_init_from(fifo);
  ExpectRefused(spec, grpc::StatusCode::INVALID_ARGUMENT, {"init_from: ", fifo, "not a regular file"});
  spec = Spec();
  spec.mutable_data()->set_input(fifo);
  ExpectRefused(spec, grpc::StatusCode::INVALID_ARGUMENT, {"data.input", fifo, "not a regular file"});
}

TEST_F(ConfinedPathsTest, NoErrorQuotesTheBytesOfAFile) {
  const std::string secret = root_ + "/shadow.safetensors";
  WriteAll(secret, kSecret);
  // The first 8 bytes, read as a safetensors header length, are a number that spells them.
  uint64_t as_length = 0;
  std::memcpy(&as_length, kSecret, 8);
  const std::vector<std::string> secrets = {"root", "19000", "daemon", absl::StrCat(as_length)};
  auto expect_no_secret = [&](const grpc::Status& s) {
    EXPECT_FALSE(s.ok());
    std::string message = s.error_message();  // less the paths, which may hold "root" too
    for (size_t at; (at = message.find(root_)) != std::string::npos;) message.erase(at, root_.size());
    for (const std::string& bytes : secrets) {
      EXPECT_EQ(message.find(bytes), std::string::npos)
          << "'" << bytes << "' leaked: " << s.error_message();
    }
  };
  v1::JobSpec spec = Spec();
  spec.set_init_from(secret);
  grpc::Status s = cluster_->Submit(spec);
  EXPECT_NE(s.error_message().find("not a safetensors file"), std::string::npos)
      << s.error_message();
  expect_no_secret(s);
  for (const char* format : {"llmc", "raw_u16", "megatron"}) {
    const std::string tokens = root_ + "/shadow.bin";
    WriteAll(tokens, std::string(kSecret) + std::string(2000, ':'));  // past llm.c's header
    WriteAll(root_ + "/shadow.idx", kSecret);
    v1::JobSpec t = Spec();
    t.mutable_data()->Clear();
    t.mutable_data()->set_source("tokens");
    t.mutable_data()->set_path(std::string(format) == "megatron" ? root_ + "/shadow" : tokens);
    t.mutable_data()->set_format(format);
    t.mutable_data()->set_seq_len(4);
    t.mutable_data()->set_batch_size(2);
    expect_no_secret(cluster_->Submit(t));
  }
  spec = Spec();
  spec.mutable_data()->set_input(secret);
  expect_no_secret(cluster_->Submit(spec));
}

TEST_F(ConfinedPathsTest, ACheckpointFolderHoldingOthersFilesIsRefusedNotOverwritten) {
  const std::string mine = checkpoint_root_ + "/mine";
  fs::create_directories(mine);
  WriteAll(mine + "/latest", kSecret);
  v1::JobSpec spec = Spec();
  spec.mutable_checkpoint()->set_dir(mine);
  spec.mutable_checkpoint()->set_every(1);
  ExpectRefused(spec, grpc::StatusCode::INVALID_ARGUMENT,
                {"checkpoint.dir: " + mine + ": holds 1 entry Weft did not write (latest)"});
  EXPECT_EQ(ReadFileOrEmpty(mine + "/latest"), kSecret);

  // The daemons keep serving: a good job saves under the root.
  spec.mutable_checkpoint()->set_dir(checkpoint_root_ + "/run");
  std::string id;
  const grpc::Status s = cluster_->Submit(spec, &id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome outcome = JobOutcome::Of(cluster_->Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << cluster_->Logs();
  EXPECT_EQ(outcome.saves.size(), static_cast<size_t>(MlpJob::kSteps));
  EXPECT_TRUE(fs::exists(checkpoint_root_ + "/run/latest"));
}

// Issue 30, item 10: the checkpoint folder was checked only when the job started. Swapped for a
// link out of --checkpoint_root while the job ran, it took the checkpoints outside; a shard
// swapped for a link to a secret was opened, its size quoted. Now every open under the root is
// resolved beneath it, at every save and load: the save fails naming the path, nothing lands
// outside, and the resume is refused without a byte of the secret.
TEST_F(ConfinedPathsTest, AFolderOrShardSwappedForALinkMidRunLeadsNowhereOutside) {
  const std::string dir = checkpoint_root_ + "/swapped";
  const std::string kept = checkpoint_root_ + "/swapped.before";
  const std::string target = outside_ + "/target";
  fs::create_directories(target);
  v1::JobSpec spec = Spec();
  spec.mutable_train()->set_steps(200);
  spec.mutable_train()->set_max_restarts(0);
  spec.mutable_checkpoint()->set_dir(dir);
  spec.mutable_checkpoint()->set_every(1);
  spec.mutable_checkpoint()->set_keep(100);
  std::string id;
  grpc::Status s = cluster_->Submit(spec, &id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Once step 2 is committed, the folder goes and a link to one outside takes its name.
  for (int i = 0; i < 3000 && !fs::exists(dir + "/step-2/index.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(dir + "/step-2/index.json")) << cluster_->Logs();
  fs::rename(dir, kept);
  fs::create_symlink(target, dir);
  const JobOutcome outcome = JobOutcome::Of(cluster_->Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::FAILED) << outcome.message;
  // The next save is refused at the link; so is its commit when the swap came while step 3's
  // shards were being written (they went with the folder renamed away): the commit looks its
  // staging folder up beneath the root too.
  EXPECT_THAT(outcome.message, HasSubstr(": leads outside " + checkpoint_root_ +
                                         " (through a link or `..`): refused"));
  EXPECT_TRUE(fs::is_empty(target)) << "a checkpoint landed outside the root";

  // A shard of the kept folder swapped for a link to a secret outside: a resume from it is
  // refused naming the shard, and nothing of the secret (its size neither) is quoted.
  fs::remove(dir);
  fs::rename(kept, dir);
  const std::string secret = outside_ + "/shadow";
  WriteAll(secret, kSecret);
  // In every step folder (`latest` may lag the newest: the swap can come between a step's rename
  // and its `latest`).
  for (const fs::directory_entry& step : fs::directory_iterator(dir)) {
    const std::string shard = step.path().string() + "/rank-0.safetensors";
    if (!fs::exists(shard)) continue;
    fs::remove(shard);
    fs::create_symlink(secret, shard);
  }
  spec.mutable_train()->set_resume(true);
  s = cluster_->Submit(spec, &id);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(),
              HasSubstr("/rank-0.safetensors: leads outside " + checkpoint_root_));
  // Before, the load went on to say "truncated: the file holds <its size> bytes".
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("bytes")));
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("daemon")));
}

// The job's losses from `weftctl submit --watch --json`'s step lines.
std::vector<double> StepLosses(const std::string& out) {
  std::vector<double> losses;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_object() && event.value("type", "") == "step") {
      losses.push_back(event.at("loss").get<double>());
    }
  }
  return losses;
}

// A client on another machine: its copy of the spec lies in a folder of its own that holds none
// of the data, and it runs from yet another folder. weftctl checks the YAML only and sends it;
// the cluster resolves the relative paths under its roots (data, init_from under --data_root,
// checkpoint.dir under --checkpoint_root), and the job trains on the cluster's files to the
// float64 reference's losses. --check-local-files looks for the files on the client instead.
TEST_F(ConfinedPathsTest, WeftctlSubmitFromAnotherFolderNamesTheClustersFiles) {
  const std::string client = fs::canonical(MakeTempDir("client")).string();
  const std::string elsewhere = fs::canonical(MakeTempDir("cwd")).string();
  const std::string spec = client + "/remote.yaml";
  WriteAll(spec, job_->SpecYaml("{shape: [2], dim_names: [dp]}",
                                "checkpoint: {dir: remote, every: 5}\n"));
  ASSERT_FALSE(fs::exists(client + "/inputs.npy"));
  const std::string weftctl = BinaryPath("client/weftctl");
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/env", "-C", elsewhere, weftctl, "--coordinator",
                               cluster_->address()});
    return RunCommand(args, 120);
  };

  CommandResult r = run({"submit", "--watch", "--json", spec});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << cluster_->Logs();
  ExpectLossesNear(StepLosses(r.out), job_->ReferenceLosses(), 1e-4, "submitted from afar");
  EXPECT_TRUE(fs::exists(checkpoint_root_ + "/remote/latest"));
  const std::string id = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["job_id"];
  const v1::Job job = cluster_->GetJob(id);
  EXPECT_EQ(job.spec().data().input(), root_ + "/inputs.npy");
  EXPECT_EQ(job.spec().init_from(), root_ + "/init.safetensors");
  EXPECT_EQ(job.spec().checkpoint().dir(), checkpoint_root_ + "/remote");

  // The cluster's errors name the spec and the cluster's path.
  WriteAll(client + "/missing.yaml",
           absl::StrReplaceAll(job_->SpecYaml("{shape: [2], dim_names: [dp]}"),
                               {{"input: inputs.npy", "input: sets/gone.npy"}}));
  r = run({"submit", client + "/missing.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(client + "/missing.yaml: data.input"));
  EXPECT_THAT(r.err, HasSubstr(root_ + "/sets/gone.npy"));

  // --check-local-files: the files are looked for beside the client's spec, where they are not;
  // nothing reaches the cluster.
  auto job_count = [&] {
    const CommandResult list = run({"list", "--json", "--limit", "1000"});
    EXPECT_EQ(list.exit_code, 0) << list.err;
    const nlohmann::json jobs = nlohmann::json::parse(list.out, nullptr, false);
    return jobs.is_object() && jobs.contains("jobs") ? jobs["jobs"].size() : size_t{0};
  };
  const size_t jobs_before = job_count();
  r = run({"submit", "--check-local-files", spec});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(client + "/inputs.npy"));
  // The YAML is checked on the client before any call: a typo is named with its line even with
  // no coordinator to reach.
  const std::string typo = absl::StrReplaceAll(job_->SpecYaml("{shape: [2], dim_names: [dp]}"),
                                               {{"batch_size: 8", "batch_sise: 8"}});
  WriteAll(client + "/typo.yaml", typo);
  const int typo_line = 1 + std::count(typo.begin(), typo.begin() + typo.find("batch_sise"), '\n');
  r = RunCommand({weftctl, "--coordinator", "127.0.0.1:1", "submit", client + "/typo.yaml"}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(client + "/typo.yaml: data: unknown key \"batch_sise\""));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("(line ", typo_line, ", column 3)")));
  EXPECT_EQ(job_count(), jobs_before);
}

// Workers check every program against their own roots: a coordinator that admits a path (it has
// no roots here) cannot make them read it.
TEST(WorkerRootsTest, AWorkerRefusesAProgramReadingOutsideItsRoot) {
  const MlpJob job = MlpJob::Create();
  const std::string elsewhere = fs::canonical(MakeTempDir("worker_root")).string();
  DaemonClusterOptions options;
  options.cpu_workers = 2;
  options.worker_flags = {"--data_root", elsewhere, "--checkpoint_root", elsewhere};
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto spec = ParseJobSpecYaml(job.SpecYaml("{shape: [2], dim_names: [dp]}"), job.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  const grpc::Status s = (*cluster)->Submit(*spec, &id);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const JobOutcome outcome = JobOutcome::Of((*cluster)->Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::FAILED);
  EXPECT_NE(outcome.message.find(": data.input: " + fs::canonical(job.dir).string()),
            std::string::npos)
      << outcome.message;
  EXPECT_NE(outcome.message.find("is outside --data_root " + elsewhere), std::string::npos)
      << outcome.message;
  EXPECT_TRUE(outcome.losses.empty());
}

// The flags themselves: a root that is not an absolute, existing folder stops the daemon.
TEST(RootFlagsTest, ABadRootStopsTheDaemonsAtStart) {
  const std::string dir = MakeTempDir("root_flags");
  CommandResult c = RunCommand({BinaryPath("coordinator/weft-coordinator"), "--listen",
                                "127.0.0.1:0", "--data_dir", dir + "/data", "--data_root",
                                dir + "/missing"},
                               30);
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("--data_root: " + dir + "/missing is not an existing folder"),
            std::string::npos)
      << c.err;
  CommandResult w = RunCommand({BinaryPath("worker/weft-worker"), "--coordinator",
                                "127.0.0.1:1", "--checkpoint_root", "relative"},
                               30);
  EXPECT_EQ(w.exit_code, 2);
  EXPECT_NE(w.err.find("--checkpoint_root: \"relative\" must be an absolute path"),
            std::string::npos)
      << w.err;
}

}  // namespace
}  // namespace weft::testing
