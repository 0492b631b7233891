// A coordinator whose job store's disk fills up while a job trains (issue 30, item 7), through the
// real daemons: the store is on a 4 MiB tmpfs of the test's own mount namespace (the tests run as
// root), filled with a file until it refuses another byte. While full, the coordinator says so:
// health NOT_SERVING and `weftctl get` failing with RESOURCE_EXHAUSTED naming the store; the job trains
// on. Once the file is removed every record the store refused is stored: the job is SUCCEEDED
// with every step's event, and health says SERVING again. Before, the record stayed RUNNING for
// ever, even after space was freed, while health said SERVING.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

constexpr int kSteps = 300;

// Mounts a tmpfs of `bytes` at `dir` in a mount namespace of this process's own (its children,
// the daemons, share it). Empty on success, else why not.
std::string MountTmpfs(const std::string& dir, int64_t bytes) {
  if (unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", strerror(errno));
  if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making / private: ", strerror(errno));
  }
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, absl::StrCat("size=", bytes).c_str()) != 0) {
    return absl::StrCat("mount tmpfs: ", strerror(errno));
  }
  return "";
}

// Writes zeros to `path` until the file system refuses more; the bytes written.
int64_t FillUp(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  const std::vector<char> block(64 << 10, 0);
  int64_t total = 0;
  while (true) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n <= 0) break;
    total += n;
  }
  fsync(fd);
  close(fd);
  return total;
}

TEST(FullDiskTest, AFullJobStoreIsReportedAndNothingIsLost) {
  const std::string dir = MakeTempDir("full");
  const std::string store = dir + "/store";
  std::filesystem::create_directories(store);
  if (const std::string why = MountTmpfs(store, 4 << 20); !why.empty()) {
    GTEST_SKIP() << "no tmpfs of the test's own here: " << why;
  }
  DaemonClusterOptions options;
  options.coordinator_flags = {"--data_dir", store + "/data"};
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", "20"}};  // about 6 s of steps
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;

  const MlpJob job = MlpJob::Create();
  auto spec = ParseJobSpecYaml(MlpSpec(job, "{shape: [1], dim_names: [dp]}", kSteps, "", false),
                               job.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  ASSERT_TRUE(c.Submit(*spec, &id).ok());
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(id).steps_size() >= 5; }, absl::Seconds(60)).ok())
      << c.Logs();

  const std::string filler = store + "/filler";
  ASSERT_GT(FillUp(filler), 0);
  std::string health;
  ASSERT_TRUE(PollUntil([&] { return (health = HealthStatus(FreshChannel(c.address()))) ==
                                     "NOT_SERVING"; },
                        absl::Seconds(60), absl::Milliseconds(200))
                  .ok())
      << health << "\n" << c.Logs();
  CommandResult get = c.Weftctl({"get", id}, 30);
  EXPECT_NE(get.exit_code, 0) << get.out;
  EXPECT_NE(get.err.find("RESOURCE_EXHAUSTED: the job store cannot be written ("), std::string::npos)
      << get.err;
  EXPECT_NE(ReadFileOrEmpty(c.coordinator_log()).find("the job store cannot be written"),
            std::string::npos);
  // The job trains on; the worker is done with it once it has reported its last step.
  ASSERT_TRUE(PollUntil(
                  [&] {
                    return ReadFileOrEmpty(c.coordinator_log())
                               .find(absl::StrCat("job ", id, ": SUCCEEDED")) != std::string::npos;
                  },
                  absl::Seconds(120), absl::Milliseconds(200))
                  .ok())
      << c.Logs();

  std::filesystem::remove(filler);
  ASSERT_TRUE(PollUntil([&] { return (health = HealthStatus(FreshChannel(c.address()))) ==
                                     "SERVING"; },
                        absl::Seconds(30), absl::Milliseconds(200))
                  .ok())
      << health << "\n" << c.Logs();
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 60));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(outcome.losses.size(), static_cast<size_t>(kSteps)) << "step events were lost";
  EXPECT_EQ(c.GetJob(id).state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace weft::testing
