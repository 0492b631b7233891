#include "coordinator/rendezvous.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"

namespace weft::coordinator {
namespace {

// A `cancelled` callback for Wait that never cancels but notifies `waiting` the first time Wait
// polls it: from then on Wait is inside its wait loop, so a Set, DropScope or Shutdown made after
// the notification wakes a waiter rather than being seen before it waits.
std::function<bool()> NotifyWhenWaiting(absl::Notification* waiting) {
  return [waiting] {
    if (!waiting->HasBeenNotified()) waiting->Notify();
    return false;
  };
}

TEST(RendezvousTest, SetThenGet) {
  Rendezvous kv;
  ASSERT_TRUE(kv.Set("job-1/0", "a", "1").ok());
  auto v = kv.Get("job-1/0", "a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "1");
  ASSERT_TRUE(kv.Set("job-1/0", "a", "2").ok());
  EXPECT_EQ(*kv.Get("job-1/0", "a"), "2");
}

TEST(RendezvousTest, GetOfAbsentKeyIsNotFound) {
  Rendezvous kv;
  kv.Set("job-1/0", "a", "1").IgnoreError();
  EXPECT_EQ(kv.Get("job-1/0", "b").status().code(), absl::StatusCode::kNotFound);
  // Scopes are separate.
  EXPECT_EQ(kv.Get("job-1/1", "a").status().code(), absl::StatusCode::kNotFound);
}

TEST(RendezvousTest, WaitReturnsWhenAllKeysArrive) {
  Rendezvous kv;
  kv.Set("s", "a", "1").IgnoreError();
  absl::Notification waiting;
  std::thread setter([&] {
    waiting.WaitForNotification();
    kv.Set("s", "b", "2").IgnoreError();
  });
  absl::Status s = kv.Wait("s", {"a", "b"}, absl::Seconds(10), NotifyWhenWaiting(&waiting));
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(RendezvousTest, WaitTimesOutNamingMissingKeys) {
  Rendezvous kv;
  kv.Set("s", "a", "1").IgnoreError();
  absl::Time start = absl::Now();
  absl::Status s = kv.Wait("s", {"a", "b"}, absl::Milliseconds(100), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("b"), absl::string_view::npos) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(RendezvousTest, WaitRespectsCancellation) {
  Rendezvous kv;
  // Not cancelled at the first poll (Wait is waiting by then), cancelled at the second.
  int polls = 0;
  absl::Status s = kv.Wait("s", {"never"}, absl::ZeroDuration(), [&] { return ++polls == 2; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 2);
}

TEST(RendezvousTest, DropScopeForgetsKeysAndWakesWaiters) {
  Rendezvous kv;
  kv.Set("job-1/0", "a", "1").IgnoreError();
  kv.Set("job-2/0", "a", "1").IgnoreError();
  absl::Notification waiting;
  std::thread dropper([&] {
    waiting.WaitForNotification();
    kv.DropScope("job-1/0");
  });
  absl::Status s =
      kv.Wait("job-1/0", {"a", "b"}, absl::Seconds(10), NotifyWhenWaiting(&waiting));
  dropper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(kv.Get("job-1/0", "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(kv.Get("job-2/0", "a").ok());
  EXPECT_EQ(kv.ScopeCount(), 1);
}

TEST(RendezvousTest, ShutdownWakesWaiters) {
  Rendezvous kv;
  absl::Notification waiting;
  std::thread stopper([&] {
    waiting.WaitForNotification();
    kv.Shutdown();
  });
  absl::Status s = kv.Wait("s", {"a"}, absl::ZeroDuration(), NotifyWhenWaiting(&waiting));
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(kv.Set("s", "a", "1").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace weft::coordinator
