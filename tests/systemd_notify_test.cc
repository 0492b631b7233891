// systemd's Type=notify protocol through the real daemons on 127.0.0.1, each given a datagram
// socket of the test's as NOTIFY_SOCKET and WATCHDOG_USEC as systemd sets them (WATCHDOG_PID
// left out: sd_watchdog_enabled then takes the variables as the process's own). weft-coordinator
// says READY=1 with STATUS=serving on its address once it serves, pings WATCHDOG=1 again and
// again while it runs and says STOPPING=1 on SIGTERM; a weft-worker says READY=1 once the
// coordinator registered it, keeps pinging, says in STATUS that it lost the coordinator when that
// stops, and STOPPING=1 on SIGTERM. Both exit 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "common/testing_notify_socket.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

// systemd's WatchdogSec=1: a ping every 500 ms.
constexpr char kWatchdogUsec[] = "1000000";
constexpr absl::Duration kWait = absl::Seconds(30);

// Waits for `count` WATCHDOG=1 messages on `socket`; the first failure, or OK.
absl::Status ExpectPings(NotifySocket& socket, int count) {
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::string> ping = socket.ReceiveMatching(
        [](const std::string& m) { return m == "WATCHDOG=1"; }, absl::Now() + kWait);
    if (!ping.ok()) return ping.status();
  }
  return absl::OkStatus();
}

TEST(SystemdNotifyTest, DaemonsSayReadyPingTheWatchdogAndSayStopping) {
  const std::string dir = MakeTempDir("systemd");
  absl::StatusOr<std::unique_ptr<NotifySocket>> coordinator_socket = NotifySocket::Create();
  absl::StatusOr<std::unique_ptr<NotifySocket>> worker_socket = NotifySocket::Create();
  ASSERT_TRUE(coordinator_socket.ok()) << coordinator_socket.status();
  ASSERT_TRUE(worker_socket.ok()) << worker_socket.status();
  NotifySocket& coordinator_notes = **coordinator_socket;
  NotifySocket& worker_notes = **worker_socket;

  absl::StatusOr<std::unique_ptr<CoordinatorProcess>> coordinator = CoordinatorProcess::Start(
      BinaryPath("coordinator/weft-coordinator"), dir, {},
      {{"NOTIFY_SOCKET", coordinator_notes.path()}, {"WATCHDOG_USEC", kWatchdogUsec}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string coordinator_log = dir + "/coordinator.log";

  // Ready once serving (its port file is written by then), naming the port it picked.
  absl::StatusOr<std::string> ready = coordinator_notes.ReceiveMatching(
      [](const std::string& m) { return absl::StartsWith(m, "READY=1"); }, absl::Now() + kWait);
  ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << ReadFileOrEmpty(coordinator_log);
  EXPECT_EQ(*ready, absl::StrCat("READY=1\nSTATUS=serving on ", (*coordinator)->address()));
  absl::Status pings = ExpectPings(coordinator_notes, 3);
  ASSERT_TRUE(pings.ok()) << pings << "\n" << ReadFileOrEmpty(coordinator_log);

  const std::string worker_log = dir + "/worker.log";
  absl::StatusOr<std::unique_ptr<Subprocess>> worker = StartDaemon(
      {BinaryPath("worker/weft-worker"), "--coordinator", (*coordinator)->address()}, worker_log,
      {{"NOTIFY_SOCKET", worker_notes.path()},
       {"WATCHDOG_USEC", kWatchdogUsec},
       {"OMP_WAIT_POLICY", "passive"}});
  ASSERT_TRUE(worker.ok()) << worker.status();

  // Ready once registered, naming the coordinator and its worker id.
  ready = worker_notes.ReceiveMatching(
      [](const std::string& m) { return absl::StartsWith(m, "READY=1"); }, absl::Now() + kWait);
  ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << ReadFileOrEmpty(worker_log);
  EXPECT_TRUE(absl::StartsWith(*ready, absl::StrCat("READY=1\nSTATUS=registered with ",
                                                    (*coordinator)->address(), " as worker-")))
      << *ready;
  pings = ExpectPings(worker_notes, 3);
  ASSERT_TRUE(pings.ok()) << pings << "\n" << ReadFileOrEmpty(worker_log);
  // The coordinator keeps pinging with a worker connected.
  pings = ExpectPings(coordinator_notes, 2);
  ASSERT_TRUE(pings.ok()) << pings << "\n" << ReadFileOrEmpty(coordinator_log);

  // SIGTERM: STOPPING=1, then a clean exit.
  (*coordinator)->process().Signal(SIGTERM);
  absl::StatusOr<std::string> stopping = coordinator_notes.ReceiveMatching(
      [](const std::string& m) { return m == "STOPPING=1"; }, absl::Now() + kWait);
  EXPECT_TRUE(stopping.ok()) << stopping.status() << "\n" << ReadFileOrEmpty(coordinator_log);
  std::optional<ExitStatus> ended = (*coordinator)->process().WaitFor(kWait);
  ASSERT_TRUE(ended.has_value()) << ReadFileOrEmpty(coordinator_log);
  EXPECT_EQ(ended->CodeOrMinusSignal(), 0) << ReadFileOrEmpty(coordinator_log);

  // The worker says it lost the coordinator and, reconnecting, still pings: it is not hung.
  absl::StatusOr<std::string> lost = worker_notes.ReceiveMatching(
      [](const std::string& m) { return absl::StartsWith(m, "STATUS=lost the coordinator"); },
      absl::Now() + kWait);
  EXPECT_TRUE(lost.ok()) << lost.status() << "\n" << ReadFileOrEmpty(worker_log);
  pings = ExpectPings(worker_notes, 2);
  EXPECT_TRUE(pings.ok()) << pings << "\n" << ReadFileOrEmpty(worker_log);

  (*worker)->Signal(SIGTERM);
  stopping = worker_notes.ReceiveMatching([](const std::string& m) { return m == "STOPPING=1"; },
                                          absl::Now() + kWait);
  EXPECT_TRUE(stopping.ok()) << stopping.status() << "\n" << ReadFileOrEmpty(worker_log);
  ended = (*worker)->WaitFor(kWait);
  ASSERT_TRUE(ended.has_value()) << ReadFileOrEmpty(worker_log);
  EXPECT_EQ(ended->CodeOrMinusSignal(), 0) << ReadFileOrEmpty(worker_log);
}

}  // namespace
}  // namespace weft::testing
