// A silent partition between two workers' hosts (issue 30, item 9), through the real daemons on
// networks the test makes: each worker runs on a host of its own, a network namespace joined by a
// veth pair to this process's namespace, which routes between the hosts and where the coordinator
// runs. A dp=2 job trains, its collectives (Gloo over TCP) going from one host to the other; then
// every packet between the two hosts is dropped, with no RST and no ICMP error, while the
// coordinator still reaches both (their heartbeats stay fresh). Before the progress watchdog the
// ranks waited in their collective for the collective timeout (300 s) with the job RUNNING; now
// the coordinator restarts the attempt once no step has completed for --progress_floor_ms, and
// once the partition heals the job SUCCEEDS with the losses of an uninterrupted run bit for bit.
//
// The hosts are tests/netns_hosts' (namespaces of the test's own, gone with it however it ends).
// Without the right to make a namespace (not root) it skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/netns_hosts.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

constexpr int kSteps = 100;
// Steps of about 50 ms: ~5 s of training, so the watchdog's 10 x median stays under its floor.
constexpr char kStepMs[] = "50";
constexpr char kProgressFloorMs[] = "2000";

v1::JobSpec Spec(const MlpJob& job, const std::string& dir, int max_restarts) {
  std::string yaml = MlpSpec(job, "{shape: [2], dim_names: [dp]}", kSteps,
                             absl::StrCat("{dir: ", dir, ", every: 5}"), false);
  const std::string train = "train: {";
  yaml.replace(yaml.find(train), train.size(),
               absl::StrCat("train: {max_restarts: ", max_restarts, ", "));
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

using PartitionTest = HostsTest<2>;

TEST_F(PartitionTest, ASilentPartitionBetweenTwoWorkersHostsIsRestartedByTheProgressWatchdog) {
  const std::vector<std::unique_ptr<Host>>& hosts = hosts_;

  DaemonClusterOptions options;
  options.cpu_workers = 2;
  // The coordinator on every address of this namespace: the test's calls come from 127.0.0.1,
  // each worker's through its gateway. Workers lost 2 s after their last heartbeat (every 200 ms).
  options.coordinator_flags = {
      "--listen",       "0.0.0.0:0", "--progress_floor_ms", kProgressFloorMs,
      "--heartbeat_ms", "200",       "--worker_timeout_ms", "2000"};
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", kStepMs}};
  // The default, said out loud: the partition is not what the collective timeout finds.
  options.worker_flags = {"--collective_timeout_s", "300"};
  options.worker_argv = WorkersOnHosts(hosts);
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::vector<std::string> worker_hosts;
  for (const v1::WorkerInfo& w : c.ListWorkers()) worker_hosts.push_back(w.host());
  std::sort(worker_hosts.begin(), worker_hosts.end());
  ASSERT_EQ(worker_hosts, (std::vector<std::string>{"10.213.1.2", "10.213.2.2"}));

  // The uninterrupted run, on the same hosts: its collectives cross the routed network too.
  const MlpJob job = MlpJob::Create();
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, "straight", 0), &id).ok());
  const JobOutcome straight = JobOutcome::Of(c.Watch(id, 120));
  ASSERT_EQ(straight.state, v1::SUCCEEDED) << straight.message << c.Logs();
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  std::string partitioned;
  ASSERT_TRUE(c.Submit(Spec(job, "partitioned", 1), &partitioned).ok());
  ASSERT_TRUE(
      PollUntil([&] { return c.GetJob(partitioned).steps_size() >= 10; }, absl::Seconds(60)).ok())
      << c.GetJob(partitioned).DebugString() << c.Logs();
  ASSERT_EQ(Partition(*hosts[0], *hosts[1], true), absl::OkStatus());
  const absl::Time cut = absl::Now();
  // Well inside the collective timeout (300 s): only the watchdog restarts it this soon.
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(partitioned).state() == v1::RESTARTING; },
                        absl::Seconds(60), absl::Milliseconds(50))
                  .ok())
      << c.GetJob(partitioned).DebugString() << c.Logs();
  std::cout << "the partition was found after " << absl::FormatDuration(absl::Now() - cut)
            << std::endl;
  // Both workers' heartbeats went on through it: neither is lost.
  for (const v1::WorkerInfo& w : c.ListWorkers()) {
    EXPECT_NE(w.state(), "lost") << w.DebugString();
  }
  ASSERT_EQ(Partition(*hosts[0], *hosts[1], false), absl::OkStatus());

  const std::vector<v1::JobEvent> events = c.Watch(partitioned, 120);
  const JobOutcome outcome = JobOutcome::Of(events);
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(outcome.losses, straight.losses);
  EXPECT_EQ(c.GetJob(partitioned).attempt(), 1);
  // One restart, the watchdog's (rank -1): no rank saw an error it could report (the partition
  // was silent) and no worker was lost.
  int restarts = 0;
  bool resumed = false;
  for (const v1::JobEvent& e : events) {
    if (e.has_restart()) {
      ++restarts;
      EXPECT_EQ(e.restart().rank(), -1);
      EXPECT_NE(e.restart().cause().find("no step completed for "), std::string::npos)
          << e.restart().cause();
      EXPECT_NE(e.restart().cause().find("its workers cannot reach each other"), std::string::npos)
          << e.restart().cause();
    }
    resumed |= e.has_state() && e.state() == v1::RUNNING &&
               e.message().find("restart 1 of 1, resuming from ") != std::string::npos &&
               e.message().find("partitioned/step-") != std::string::npos;
  }
  EXPECT_EQ(restarts, 1);
  EXPECT_TRUE(resumed) << "the second attempt did not resume from a checkpoint";
}

}  // namespace
}  // namespace weft::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  weft::testing::OwnNetwork() = weft::testing::EnterOwnNetworkNamespace();
  return RUN_ALL_TESTS();
}
