// systemd_notify against a datagram socket standing in for systemd's: the messages' exact text,
// nothing (and no error) without NOTIFY_SOCKET, an error for a socket nobody listens on,
// WATCHDOG_USEC and WATCHDOG_PID as sd_watchdog_enabled reads them, and a Watchdog that pings
// every half timeout only while its check says the daemon is alive.
#include "common/systemd_notify.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing_notify_socket.h"

namespace weft::systemd {
namespace {

using ::weft::testing::NotifySocket;

class SystemdNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    absl::StatusOr<std::unique_ptr<NotifySocket>> socket = NotifySocket::Create();
    ASSERT_TRUE(socket.ok()) << socket.status();
    socket_ = *std::move(socket);
  }
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }

  absl::StatusOr<std::string> Next() { return socket_->Receive(absl::Now() + absl::Seconds(10)); }

  std::unique_ptr<NotifySocket> socket_;
};

TEST_F(SystemdNotifyTest, OutsideSystemdEverythingIsANoOp) {
  EXPECT_TRUE(NotifyReady("serving").ok());
  EXPECT_TRUE(NotifyStatus("busy").ok());
  EXPECT_TRUE(NotifyStopping().ok());
  EXPECT_EQ(WatchdogTimeout(), std::nullopt);
  EXPECT_EQ(Watchdog::StartIfEnabled("test", [](absl::Duration) { return absl::OkStatus(); }),
            nullptr);
  EXPECT_TRUE(socket_->Drain().empty());
}

TEST_F(SystemdNotifyTest, SendsReadyStatusAndStopping) {
  setenv("NOTIFY_SOCKET", socket_->path().c_str(), 1);
  ASSERT_TRUE(NotifyReady("serving on 127.0.0.1:7070").ok());
  EXPECT_EQ(Next().value_or(""), "READY=1\nSTATUS=serving on 127.0.0.1:7070");
  // A newline would start another assignment: it becomes a space.
  ASSERT_TRUE(NotifyStatus("lost the coordinator\nreconnecting").ok());
  EXPECT_EQ(Next().value_or(""), "STATUS=lost the coordinator reconnecting");
  ASSERT_TRUE(NotifyStopping().ok());
  EXPECT_EQ(Next().value_or(""), "STOPPING=1");
  // NOTIFY_SOCKET stays for the next message (and the watchdog).
  EXPECT_NE(getenv("NOTIFY_SOCKET"), nullptr);
}

TEST_F(SystemdNotifyTest, ASocketNobodyListensOnIsAnError) {
  const std::string missing = socket_->path() + "-missing";
  setenv("NOTIFY_SOCKET", missing.c_str(), 1);
  absl::Status s = NotifyReady("serving");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sd_notify READY"), std::string::npos) << s;
}

TEST_F(SystemdNotifyTest, WatchdogTimeoutIsForThisProcessOnly) {
  setenv("WATCHDOG_USEC", "400000", 1);
  EXPECT_EQ(WatchdogTimeout(), absl::Milliseconds(400));  // WATCHDOG_PID unset: not checked
  setenv("WATCHDOG_PID", absl::StrCat(getpid()).c_str(), 1);
  EXPECT_EQ(WatchdogTimeout(), absl::Milliseconds(400));
  setenv("WATCHDOG_PID", absl::StrCat(getpid() + 1).c_str(), 1);  // set for another process
  EXPECT_EQ(WatchdogTimeout(), std::nullopt);
  unsetenv("WATCHDOG_PID");
  setenv("WATCHDOG_USEC", "0", 1);
  EXPECT_EQ(WatchdogTimeout(), std::nullopt);
}

TEST_F(SystemdNotifyTest, WatchdogPingsOnlyWhileAlive) {
  setenv("NOTIFY_SOCKET", socket_->path().c_str(), 1);
  setenv("WATCHDOG_USEC", "100000", 1);
  std::atomic<bool> alive{true};
  std::atomic<int> checks{0};
  absl::Duration told;
  std::unique_ptr<Watchdog> watchdog =
      Watchdog::StartIfEnabled("test", [&](absl::Duration timeout) {
        told = timeout;  // read only after the watchdog is gone
        ++checks;
        return alive ? absl::OkStatus() : absl::UnavailableError("main loop stuck");
      });
  ASSERT_NE(watchdog, nullptr);
  EXPECT_EQ(watchdog->timeout(), absl::Milliseconds(100));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Next().value_or(""), "WATCHDOG=1") << i;

  // Stuck: once a check has said so, no ping goes out however many checks follow.
  alive = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (watchdog->withheld() < 1 && absl::Now() < deadline) {
    socket_->Receive(absl::Now() + absl::Milliseconds(20)).IgnoreError();
  }
  ASSERT_GE(watchdog->withheld(), 1);
  const int64_t pings = watchdog->pings();
  socket_->Drain();
  while (watchdog->withheld() < 4 && absl::Now() < deadline) {
    EXPECT_FALSE(socket_->Receive(absl::Now() + absl::Milliseconds(20)).ok());
  }
  ASSERT_GE(watchdog->withheld(), 4);
  EXPECT_EQ(watchdog->pings(), pings);
  EXPECT_TRUE(socket_->Drain().empty());

  // Alive again: pings resume.
  alive = true;
  EXPECT_EQ(Next().value_or(""), "WATCHDOG=1");
  watchdog.reset();
  EXPECT_EQ(told, absl::Milliseconds(100));
  EXPECT_GE(checks, 8);
}

TEST_F(SystemdNotifyTest, NoWatchdogWithoutWatchdogUsec) {
  setenv("NOTIFY_SOCKET", socket_->path().c_str(), 1);
  EXPECT_EQ(Watchdog::StartIfEnabled("test", [](absl::Duration) { return absl::OkStatus(); }),
            nullptr);
}

}  // namespace
}  // namespace weft::systemd
