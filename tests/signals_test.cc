// Signals through the real daemons: SIGHUP (a closed terminal) drains a worker as SIGTERM does
// (it says Goodbye: listed drained, not lost, and exits 0) and shuts the coordinator down
// gracefully (exit 0).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>

#include "absl/time/time.h"
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

}  // namespace
}  // namespace weft::testing
