// Bearer tokens through the real daemons on 127.0.0.1: a coordinator started with
// --client_token_file and --worker_token_file refuses weftctl without a token or with the
// workers' token, and a worker with the clients' token (which exits at once naming the refusal
// instead of retrying); weftctl with --token_file or $WEFT_TOKEN_FILE and a worker with
// --token_file work, and a job runs to its float64 reference's losses. Token files that cannot
// serve (empty, the same token for both roles) stop the coordinator at start naming the flag.
// `weftctl local` makes tokens of its own, so every test that runs it runs with tokens too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "tests/cluster_fixture.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("auth");
    client_token_ = dir_ + "/client.token";
    worker_token_ = dir_ + "/worker.token";
    WriteFile(client_token_, "client-7f3a9c\n");
    WriteFile(worker_token_, "worker-51be02\n");
    auto coordinator = CoordinatorProcess::Start(
        BinaryPath("coordinator/weft-coordinator"), dir_,
        {"--client_token_file", client_token_, "--worker_token_file", worker_token_});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  static void WriteFile(const std::string& path, const std::string& bytes) {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    fputs(bytes.c_str(), f);
    fclose(f);
  }

  std::unique_ptr<Subprocess> StartWorker(const std::string& token_file, const std::string& log) {
    auto worker = StartDaemon({BinaryPath("worker/weft-worker"), "--coordinator",
                               coordinator_->address(), "--token_file", token_file},
                              dir_ + "/" + log, {{"OMP_WAIT_POLICY", "passive"}});
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  CommandResult Weftctl(std::vector<std::string> args,
                        const std::map<std::string, std::string>& env = {}) const {
    args.insert(args.begin(), {BinaryPath("client/weftctl"), "--coordinator",
                               coordinator_->address()});
    return RunCommand(args, 120, env);
  }

  std::string dir_, client_token_, worker_token_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
};

TEST_F(AuthTest, EachRoleNeedsItsOwnToken) {
  // A worker with the clients' token is refused and exits at once, saying so.
  std::unique_ptr<Subprocess> intruder = StartWorker(client_token_, "intruder.log");
  ASSERT_NE(intruder, nullptr);
  std::optional<ExitStatus> ended = intruder->WaitFor(absl::Seconds(30));
  ASSERT_TRUE(ended.has_value()) << "a refused worker kept retrying";
  EXPECT_NE(ended->CodeOrMinusSignal(), 0);
  const std::string log = ReadFileOrEmpty(dir_ + "/intruder.log");
  EXPECT_TRUE(absl::StrContains(log, "refused this worker")) << log;
  EXPECT_FALSE(absl::StrContains(log, "client-7f3a9c")) << "the log quotes a token";

  // weftctl without a token, or with the workers', is refused naming the service.
  for (const auto& [args, what] :
       {std::pair<std::vector<std::string>, std::string>{{"list"}, "no token"},
        {{"--token_file", worker_token_, "list"}, "the worker token"},
        {{"--token_file", worker_token_, "workers"}, "the worker token (workers)"}}) {
    CommandResult r = Weftctl(args);
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_TRUE(absl::StrContains(r.err, "weft.v1.JobService")) << what << ": " << r.err;
    EXPECT_FALSE(absl::StrContains(r.err + r.out, "worker-51be02")) << what << " quotes a token";
  }

  // A worker with its token registers; weftctl sees it with the client token, from the flag or
  // from $WEFT_TOKEN_FILE.
  std::unique_ptr<Subprocess> worker = StartWorker(worker_token_, "worker.log");
  ASSERT_NE(worker, nullptr);
  bool registered = false;
  for (int i = 0; i < 300 && !registered; ++i) {
    CommandResult r = Weftctl({"--token_file", client_token_, "workers"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    registered = absl::StrContains(r.out, "cpu");
    if (!registered) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(registered) << ReadFileOrEmpty(dir_ + "/worker.log");
  CommandResult from_env = Weftctl({"workers"}, {{"WEFT_TOKEN_FILE", client_token_}});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.err;

  // A job runs through the authenticated daemons to the float64 reference's losses.
  MlpJob job = MlpJob::Create();
  const std::string spec = job.WriteSpec("one.yaml", MlpSpec(job, "{shape: [1]}", MlpJob::kSteps,
                                                             "", false));
  CommandResult submitted =
      Weftctl({"--token_file", client_token_, "submit", "--watch", "--json", spec});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err << "\n" << ReadFileOrEmpty(dir_ + "/worker.log");
  std::string final_state;
  const std::vector<double> losses = ParseStepLosses(submitted.out, &final_state);
  EXPECT_EQ(final_state, "SUCCEEDED");
  const std::vector<double> reference = job.ReferenceLosses();
  ASSERT_EQ(losses.size(), reference.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_LE(RelDiff(losses[s], reference[s]), 1e-4) << "step " << s + 1;
  }
}

TEST_F(AuthTest, TokenFilesThatCannotServeStopTheCoordinatorAtStart) {
  const std::string empty = dir_ + "/empty.token";
  WriteFile(empty, "\n");
  for (const auto& [flags, says] :
       {std::pair<std::vector<std::string>, std::string>{
            {"--client_token_file", empty}, "--client_token_file: token file " + empty + ": empty"},
        {{"--client_token_file", client_token_, "--worker_token_file", client_token_},
         "hold the same token"}}) {
    std::vector<std::string> argv = {BinaryPath("coordinator/weft-coordinator"), "--listen",
                                     "127.0.0.1:0", "--data_dir", dir_ + "/other"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    CommandResult r = RunCommand(argv, 30);
    EXPECT_EQ(r.exit_code, 2) << says;
    EXPECT_TRUE(absl::StrContains(r.err, says)) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "client-7f3a9c")) << "quotes a token";
  }
}

}  // namespace
}  // namespace weft::testing
