// Deleting jobs through the real daemons: `weftctl delete` refuses a job that runs and deletes one
// that ended, with its events and log lines (get, logs and list no longer know it, and say it was
// deleted); the coordinator's retention (--max_ended_jobs) deletes the ended jobs beyond the
// newest ones on its own, as soon as another ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing_files.h"
#include "nlohmann/json.hpp"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The coordinator keeps this many ended jobs.
constexpr int kKeptJobs = 3;

// A small synthetic MLP job of `steps` steps (no files).
std::string SpecYaml(const std::string& name, int steps) {
  return absl::StrCat("name: ", name, R"(
mesh: {shape: [1], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 8}
  loss: mse
data: {source: synthetic, sample_shape: [8], label_shape: [8], num_samples: 32, batch_size: 8}
optimizer: {type: sgd, lr: 0.01}
train: {steps: )",
                      steps, "}\n");
}

class DeleteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir("delete"));
    DaemonClusterOptions options;
    options.cpu_workers = 1;
    options.coordinator_flags = {"--max_ended_jobs", std::to_string(kKeptJobs)};
    auto cluster = DaemonCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    delete dir_;
  }

  static CommandResult Weftctl(std::vector<std::string> args, int timeout_s = 120) {
    args.insert(args.begin(),
                {BinaryPath("client/weftctl"), "--coordinator", cluster_->address()});
    return RunCommand(args, timeout_s);
  }

  // Submits the spec and returns its job id (empty, and a failed test, when refused).
  static std::string Submit(const std::string& name, int steps, bool watch) {
    const std::string path = absl::StrCat(*dir_, "/", name, ".yaml");
    WriteAll(path, SpecYaml(name, steps));
    std::vector<std::string> args = {"submit", path};
    if (watch) args.push_back("--watch");
    const CommandResult r = Weftctl(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err << cluster_->Logs();
    return std::string(absl::StripAsciiWhitespace(r.out.substr(0, r.out.find('\n'))));
  }

  // The ids `weftctl list` shows.
  static std::set<std::string> Listed() {
    const CommandResult r = Weftctl({"list", "--json", "--limit", "1000"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> ids;
    const nlohmann::json list = nlohmann::json::parse(r.out, nullptr, false);
    if (list.is_object() && list.contains("jobs")) {
      for (const nlohmann::json& job : list["jobs"]) ids.insert(job["id"].get<std::string>());
    }
    return ids;
  }

  static std::string* dir_;
  static DaemonCluster* cluster_;
};

std::string* DeleteTest::dir_ = nullptr;
DaemonCluster* DeleteTest::cluster_ = nullptr;

TEST_F(DeleteTest, ARunningJobIsRefusedAndAnEndedOneGoesWithItsEventsAndLogs) {
  const std::string id = Submit("long", 1000000, /*watch=*/false);
  ASSERT_FALSE(id.empty());
  // Should the test stop early, the job must not hold the suite's one worker.
  absl::Cleanup cancel = [&] { Weftctl({"cancel", id}, 30); };
  // Running, with a step done (its worker has logged by then).
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (cluster_->GetJob(id).steps_size() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(cluster_->GetJob(id).steps_size(), 0) << cluster_->Logs();

  CommandResult r = Weftctl({"delete", id});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("FAILED_PRECONDITION: job ", id,
                                            " is RUNNING: only a job that ended is deleted; "
                                            "cancel it first (weftctl cancel ",
                                            id, ")")));
  EXPECT_EQ(cluster_->GetJob(id).state(), v1::RUNNING);

  r = Weftctl({"cancel", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<v1::JobEvent> events = cluster_->Watch(id, 60);
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().state(), v1::CANCELLED);
  r = Weftctl({"logs", id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rank 0")) << "the worker logged nothing while it ran";

  // One delete of two jobs: the unknown one is named, the other deleted all the same.
  r = Weftctl({"delete", "job-999999", id, "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND: no job job-999999"));
  const nlohmann::json deleted = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(deleted.is_object()) << r.out;
  EXPECT_EQ(deleted["type"], "deleted");
  EXPECT_EQ(deleted["job_id"], id);
  EXPECT_EQ(deleted["state"], "CANCELLED");

  for (const char* command : {"get", "logs", "watch", "delete"}) {
    r = Weftctl({command, id});
    EXPECT_EQ(r.exit_code, 1) << command;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("NOT_FOUND: job ", id, " was deleted"))) << command;
  }
  EXPECT_EQ(Listed().count(id), 0u);

  // The coordinator serves on: a job after it runs, with an id of its own.
  const std::string next = Submit("after-delete", 2, /*watch=*/true);
  EXPECT_GT(next, id);
  r = Weftctl({"delete", next});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(next, " deleted (SUCCEEDED)\n"));
}

TEST_F(DeleteTest, RetentionKeepsTheNewestEndedJobs) {
  std::vector<std::string> ids;
  for (int i = 0; i < kKeptJobs + 2; ++i) {
    ids.push_back(Submit(absl::StrCat("short-", i), 2, /*watch=*/true));
  }
  // The two that ended first go once the last has ended (the coordinator checks on its next
  // tick, every 250 ms).
  const std::set<std::string> newest(ids.end() - kKeptJobs, ids.end());
  std::set<std::string> listed;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((listed = Listed()) != newest && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string log = ReadFileOrEmpty(cluster_->coordinator_log());
  EXPECT_EQ(listed, newest) << log;
  for (int i = 0; i < 2; ++i) {
    const CommandResult r = Weftctl({"get", ids[i]});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("job ", ids[i], " was deleted")));
  }
  EXPECT_THAT(log, HasSubstr(absl::StrCat("job ", ids[0], ": deleted by retention (SUCCEEDED, ended ")));
  EXPECT_THAT(log, HasSubstr("beyond the 3 jobs that ended last (--max_ended_jobs)"));
  EXPECT_THAT(log, Not(HasSubstr("error retention")));
}

}  // namespace
}  // namespace weft::testing
