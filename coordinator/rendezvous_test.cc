#include "coordinator/rendezvous.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
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

// Limits large enough not to matter.
RendezvousLimits Roomy() { return RendezvousLimits::ForMesh({64}); }

std::string OpenScope(Rendezvous* kv, const std::string& scope,
                      RendezvousLimits limits = Roomy()) {
  absl::StatusOr<std::string> ticket = kv->Open(scope, limits);
  EXPECT_TRUE(ticket.ok()) << ticket.status();
  return ticket.value_or("");
}

TEST(RendezvousTest, SetThenGet) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "job-1/0");
  ASSERT_TRUE(kv.Set("job-1/0", t, "a", "1").ok());
  auto v = kv.Get("job-1/0", t, "a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "1");
  ASSERT_TRUE(kv.Set("job-1/0", t, "a", "2").ok());
  EXPECT_EQ(*kv.Get("job-1/0", t, "a"), "2");
}

TEST(RendezvousTest, GetOfAbsentKeyIsNotFound) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "job-1/0");
  const std::string t1 = OpenScope(&kv, "job-1/1");
  kv.Set("job-1/0", t, "a", "1").IgnoreError();
  EXPECT_EQ(kv.Get("job-1/0", t, "b").status().code(), absl::StatusCode::kNotFound);
  // Scopes are separate.
  EXPECT_EQ(kv.Get("job-1/1", t1, "a").status().code(), absl::StatusCode::kNotFound);
}

// Each scope has its own random ticket; a call with another scope's, or none, reads and writes
// nothing; a scope that is not open takes no calls at all.
TEST(RendezvousTest, OnlyTheScopesTicketGetsIn) {
  Rendezvous kv;
  const std::string mine = OpenScope(&kv, "job-1/0");
  const std::string theirs = OpenScope(&kv, "job-2/0");
  EXPECT_EQ(mine.size(), 32u);  // 128 bits, hex
  EXPECT_NE(mine, theirs);
  ASSERT_TRUE(kv.Set("job-1/0", mine, "addr", "secret").ok());
  for (const std::string& wrong : {theirs, std::string(), mine.substr(0, 31)}) {
    absl::StatusOr<std::string> got = kv.Get("job-1/0", wrong, "addr");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
    EXPECT_EQ(got.status().message().find("secret"), absl::string_view::npos);
    EXPECT_EQ(got.status().message().find(mine), absl::string_view::npos) << "quotes the ticket";
    EXPECT_EQ(kv.Set("job-1/0", wrong, "addr", "forged").code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(kv.Wait("job-1/0", wrong, {"addr"}, absl::Seconds(1), nullptr).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(*kv.Get("job-1/0", mine, "addr"), "secret");

  absl::Status never = kv.Set("job-9/0", mine, "k", "v");
  EXPECT_EQ(never.code(), absl::StatusCode::kNotFound) << never;
  EXPECT_NE(never.message().find("not open"), absl::string_view::npos) << never;
  EXPECT_EQ(kv.ScopeCount(), 2);  // the refused call opened nothing
  EXPECT_EQ(kv.Open("job-1/0", Roomy()).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(RendezvousTest, WaitReturnsWhenAllKeysArrive) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "s");
  kv.Set("s", t, "a", "1").IgnoreError();
  absl::Notification waiting;
  std::thread setter([&] {
    waiting.WaitForNotification();
    kv.Set("s", t, "b", "2").IgnoreError();
  });
  absl::Status s = kv.Wait("s", t, {"a", "b"}, absl::Seconds(10), NotifyWhenWaiting(&waiting));
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(RendezvousTest, WaitTimesOutNamingMissingKeys) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "s");
  kv.Set("s", t, "a", "1").IgnoreError();
  absl::Time start = absl::Now();
  absl::Status s = kv.Wait("s", t, {"a", "b"}, absl::Milliseconds(100), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("b"), absl::string_view::npos) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(RendezvousTest, WaitRespectsCancellation) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "s");
  // Not cancelled at the first poll (Wait is waiting by then), cancelled at the second.
  int polls = 0;
  absl::Status s = kv.Wait("s", t, {"never"}, absl::ZeroDuration(), [&] { return ++polls == 2; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 2);
}

TEST(RendezvousTest, DropScopeForgetsKeysAndWakesWaiters) {
  Rendezvous kv;
  const std::string t1 = OpenScope(&kv, "job-1/0");
  const std::string t2 = OpenScope(&kv, "job-2/0");
  kv.Set("job-1/0", t1, "a", "1").IgnoreError();
  kv.Set("job-2/0", t2, "a", "1").IgnoreError();
  absl::Notification waiting;
  RendezvousUsage held;
  std::thread dropper([&] {
    waiting.WaitForNotification();
    held = kv.DropScope("job-1/0");
  });
  absl::Status s =
      kv.Wait("job-1/0", t1, {"a", "b"}, absl::Seconds(10), NotifyWhenWaiting(&waiting));
  dropper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(held.keys, 1);
  EXPECT_EQ(held.bytes, 2);  // "a" and "1"
  EXPECT_EQ(kv.Get("job-1/0", t1, "a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(kv.Get("job-2/0", t2, "a").ok());
  EXPECT_EQ(kv.ScopeCount(), 1);
}

TEST(RendezvousTest, ShutdownWakesWaiters) {
  Rendezvous kv;
  const std::string t = OpenScope(&kv, "s");
  absl::Notification waiting;
  std::thread stopper([&] {
    waiting.WaitForNotification();
    kv.Shutdown();
  });
  absl::Status s = kv.Wait("s", t, {"a"}, absl::ZeroDuration(), NotifyWhenWaiting(&waiting));
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(kv.Set("s", t, "a", "1").code(), absl::StatusCode::kUnavailable);
}

// Keys, bytes, a key's and a value's size are each bounded; a refused Set changes nothing, an
// overwrite counts the new value instead of the old, and the scope's usage says what it holds.
TEST(RendezvousTest, LimitsAreEnforcedWithTheFigures) {
  Rendezvous kv;
  RendezvousLimits limits;
  limits.max_keys = 3;
  limits.max_bytes = 40;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 16;
  const std::string t = OpenScope(&kv, "s", limits);
  ASSERT_TRUE(kv.Set("s", t, "k1", std::string(10, 'x')).ok());
  ASSERT_TRUE(kv.Set("s", t, "k2", std::string(10, 'x')).ok());  // 24 bytes

  absl::Status key = kv.Set("s", t, "long-key-9", "v");
  EXPECT_EQ(key.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(key.message().find("10 bytes, over the attempt's limit of 8"), absl::string_view::npos)
      << key;
  absl::Status value = kv.Set("s", t, "k3", std::string(17, 'x'));
  EXPECT_EQ(value.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(value.message().find("17 bytes, over the attempt's limit of 16"),
            absl::string_view::npos) << value;
  absl::Status bytes = kv.Set("s", t, "k3", std::string(15, 'x'));  // 24 + 17 > 40
  EXPECT_EQ(bytes.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(bytes.message().find("3 keys and 41 bytes, over the attempt's limit of 3 keys and "
                                 "40 bytes"), absl::string_view::npos) << bytes;
  ASSERT_TRUE(kv.Set("s", t, "k1", "y").ok());                   // 24 - 10 + 1 = 15
  ASSERT_TRUE(kv.Set("s", t, "k3", std::string(15, 'x')).ok());  // 32
  absl::Status keys = kv.Set("s", t, "k4", "");
  EXPECT_EQ(keys.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(keys.message().find("4 keys"), absl::string_view::npos) << keys;
  EXPECT_EQ(kv.Wait("s", t, {"a", "b", "c", "d"}, absl::Seconds(1), nullptr).code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<RendezvousUsage> usage = kv.Usage("s");
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->keys, 3);
  EXPECT_EQ(usage->bytes, 32);
  EXPECT_EQ(usage->peak_bytes, 32);
  EXPECT_EQ(*kv.Get("s", t, "k1"), "y");
}

// The limits grow with the mesh: linearly in the world for a fixed group size, and a key's and a
// value's with the largest group (Gloo's keys and values list their members).
TEST(RendezvousTest, LimitsScaleWithTheMesh) {
  const RendezvousLimits small = RendezvousLimits::ForMesh({2, 2});
  const RendezvousLimits wide = RendezvousLimits::ForMesh({2, 2, 256});
  const RendezvousLimits dp = RendezvousLimits::ForMesh({4096});
  EXPECT_EQ(small.max_keys, 64);  // the floor
  EXPECT_EQ(wide.max_keys, 8 * 3 * 1024);
  EXPECT_EQ(wide.max_bytes, 1024 * ((8 << 10) * 3 + 512 * (2 + 2 + 256)));
  EXPECT_EQ(dp.max_value_bytes, 512 * 4096);
  EXPECT_EQ(dp.max_key_bytes, 128 + 12 * 4096);
  EXPECT_GT(dp.max_bytes, 4096LL * 4096 * 150);  // Gloo's full mesh over one 4096-rank group
}

}  // namespace
}  // namespace weft::coordinator
