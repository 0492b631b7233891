// How the real daemons start and stop: SIGHUP (a closed terminal) drains a worker as SIGTERM
// does (it says Goodbye: listed drained, not lost, and exits 0) and shuts the coordinator down
// gracefully (exit 0); a second coordinator on the same --data_dir, or on the same --listen
// address, exits at start naming why, and the first serves on alone; a daemon started with a low
// open-file soft limit raises it to its hard limit.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

TEST(SignalsTest, SighupDrainsAWorkerAndStopsTheCoordinatorGracefully) {
  auto cluster = DaemonCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  c.worker(0).Signal(SIGHUP);
  std::optional<ExitStatus> ended = c.worker(0).WaitFor(absl::Seconds(30));
  ASSERT_TRUE(ended.has_value()) << c.Logs();
  EXPECT_EQ(ended->CodeOrMinusSignal(), 0) << c.Logs();
  std::string state;
  ASSERT_TRUE(PollUntil(
                  [&] {
                    const auto workers = c.ListWorkers();
                    state = workers.empty() ? "" : workers[0].state();
                    return state == "drained" || state == "lost";
                  },
                  absl::Seconds(30))
                  .ok())
      << c.Logs();
  EXPECT_EQ(state, "drained") << "it said Goodbye before it exited\n" << c.Logs();

  c.coordinator().Signal(SIGHUP);
  ended = c.coordinator().WaitFor(absl::Seconds(30));
  ASSERT_TRUE(ended.has_value()) << c.Logs();
  EXPECT_EQ(ended->CodeOrMinusSignal(), 0) << c.Logs();
  EXPECT_NE(ReadFileOrEmpty(c.coordinator_log()).find("SIGHUP: shutting down"), std::string::npos)
      << c.Logs();
}

TEST(SignalsTest, ASecondCoordinatorOnTheSameFolderOrPortIsRefusedAtStart) {
  const std::string dir = MakeTempDir("two");
  auto first = CoordinatorProcess::Start(BinaryPath("coordinator/weft-coordinator"), dir);
  ASSERT_TRUE(first.ok()) << first.status();
  const int pid = (*first)->process().pid();
  // The same --data_dir (CoordinatorProcess's), another port.
  CommandResult same_dir =
      RunCommand({BinaryPath("coordinator/weft-coordinator"), "--listen", "127.0.0.1:0",
                  "--data_dir", dir + "/coordinator-data"},
                 30);
  EXPECT_EQ(same_dir.exit_code, 2) << same_dir.err;
  EXPECT_NE(same_dir.err.find(absl::StrCat(" is in use by another weft-coordinator (pid ", pid,
                                           ")")),
            std::string::npos)
      << same_dir.err;
  // Another folder, the same address.
  CommandResult same_port =
      RunCommand({BinaryPath("coordinator/weft-coordinator"), "--listen", (*first)->address(),
                  "--data_dir", dir + "/other"},
                 30);
  EXPECT_NE(same_port.exit_code, 0) << same_port.err;
  EXPECT_NE(same_port.err.find(absl::StrCat("cannot listen on ", (*first)->address())),
            std::string::npos)
      << same_port.err;
  // The first serves on, alone.
  CommandResult list = RunCommand(
      {BinaryPath("client/weftctl"), "--coordinator", (*first)->address(), "list"}, 30);
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE((*first)->process().Running());
}

// The soft and hard limits of /proc/<pid>/limits' "Max open files" line.
std::pair<std::string, std::string> OpenFileLimits(pid_t pid) {
  std::istringstream limits(ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/limits")));
  std::string line;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream fields(line.substr(std::string("Max open files").size()));
    std::string soft, hard;
    fields >> soft >> hard;
    return {soft, hard};
  }
  return {"", ""};
}

TEST(SignalsTest, DaemonsRaiseTheirOpenFileSoftLimitToTheHardLimit) {
  rlimit mine;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &mine), 0);
  if (mine.rlim_max <= 1024) GTEST_SKIP() << "this machine's hard limit is " << mine.rlim_max;
  const std::string dir = MakeTempDir("nofile");
  const std::string port_file = dir + "/port";
  // Started with systemd's default soft limit, under this process's hard one.
  absl::StatusOr<std::unique_ptr<Subprocess>> coordinator = StartDaemon(
      {"/usr/bin/prlimit", absl::StrCat("--nofile=1024:", mine.rlim_max),
       BinaryPath("coordinator/weft-coordinator"), "--listen", "127.0.0.1:0", "--data_dir",
       dir + "/data", "--port_file", port_file},
      dir + "/coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<int> port = WaitForPortFile(port_file, **coordinator, absl::Seconds(30));
  ASSERT_TRUE(port.ok()) << port.status() << ReadFileOrEmpty(dir + "/coordinator.log");
  const auto [soft, hard] = OpenFileLimits((*coordinator)->pid());
  EXPECT_EQ(hard, absl::StrCat(mine.rlim_max));
  EXPECT_EQ(soft, hard) << "the coordinator kept the soft limit it was started with";
  EXPECT_NE(ReadFileOrEmpty(dir + "/coordinator.log")
                .find(absl::StrCat("open files: up to ", mine.rlim_max)),
            std::string::npos);
}

}  // namespace
}  // namespace weft::testing
