// CachingAllocator over malloc, with a fake raw allocator that keeps a byte budget and records
// every block it has out, so tests see exactly when the cache calls it and that nothing leaks.
#include "worker/kernels/cuda/caching_allocator.h"

#include <cstdlib>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

// malloc under a budget: returns null when the bytes it has out would exceed `budget`. Called
// only under the allocator's lock, so it needs none of its own.
class FakeDevice {
 public:
  explicit FakeDevice(size_t budget = std::numeric_limits<size_t>::max()) : budget_(budget) {}
  ~FakeDevice() {
    for (const auto& entry : live_) std::free(entry.first);
  }

  CachingAllocator::RawAllocate allocate() {
    return [this](size_t bytes) -> void* {
      ++allocate_calls;
      if (bytes > budget_ - used_) return nullptr;
      void* p = std::malloc(bytes);
      live_[p] = bytes;
      used_ += bytes;
      return p;
    };
  }
  CachingAllocator::RawFree free() {
    return [this](void* p) {
      auto it = live_.find(p);
      ASSERT_NE(it, live_.end()) << "raw free of a block the fake did not hand out";
      used_ -= it->second;
      std::free(p);
      live_.erase(it);
      ++free_calls;
    };
  }

  size_t used() const { return used_; }
  size_t live_blocks() const { return live_.size(); }
  bool holds(void* p) const { return live_.count(p) > 0; }

  int allocate_calls = 0;
  int free_calls = 0;

 private:
  const size_t budget_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

TEST(CachingAllocatorTest, RoundsRequestsUpTo512Bytes) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* a = allocator.Allocate(1);
  void* b = allocator.Allocate(0);
  void* c = allocator.Allocate(513);
  void* d = allocator.Allocate(1024);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(d, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(allocator.stats().bytes_in_use, 512 + 512 + 1024 + 1024);
  EXPECT_EQ(device.used(), 512u + 512u + 1024u + 1024u);
}

TEST(CachingAllocatorTest, ReusesAFreedBlockOfTheSameSize) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* a = allocator.Allocate(4000);
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.stats().bytes_in_use, 0);
  EXPECT_EQ(allocator.stats().bytes_reserved, 4096);

  void* b = allocator.Allocate(3900);  // rounds to the same 4096
  EXPECT_EQ(b, a);
  const CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.raw_allocations, 1);
  EXPECT_EQ(device.allocate_calls, 1);
  EXPECT_EQ(stats.bytes_in_use, 4096);
}

TEST(CachingAllocatorTest, ReusesTheSmallestBlockThatFits) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* big = allocator.Allocate(8192);
  void* medium = allocator.Allocate(4096);
  void* small = allocator.Allocate(2048);
  void* tiny = allocator.Allocate(1024);
  for (void* p : {big, medium, small, tiny}) ASSERT_TRUE(allocator.Free(p).ok());

  EXPECT_EQ(allocator.Allocate(1500), small);  // 1536: the 1024 block is too small
  EXPECT_EQ(allocator.Allocate(3000), medium);
  EXPECT_EQ(allocator.Allocate(5000), big);  // 5120 <= 8192 <= 2 * 5120
  EXPECT_EQ(allocator.stats().cache_hits, 3);
  EXPECT_EQ(allocator.stats().bytes_in_use, 2048 + 4096 + 8192);
}

TEST(CachingAllocatorTest, DoesNotReuseABlockOverTwiceTheRequest) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* block = allocator.Allocate(4096);
  ASSERT_TRUE(allocator.Free(block).ok());

  void* small = allocator.Allocate(2000);  // 2048: 4096 is exactly twice, the limit
  EXPECT_EQ(small, block);
  ASSERT_TRUE(allocator.Free(small).ok());

  void* smaller = allocator.Allocate(1536);  // 4096 > 2 * 1536: a new block
  EXPECT_NE(smaller, block);
  EXPECT_EQ(allocator.stats().raw_allocations, 2);
  EXPECT_EQ(allocator.stats().cache_hits, 1);
  EXPECT_EQ(allocator.stats().bytes_in_use, 1536);
  EXPECT_EQ(allocator.stats().bytes_reserved, 4096 + 1536);
}

TEST(CachingAllocatorTest, DoesNotReuseABlockTooSmall) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* block = allocator.Allocate(1024);
  ASSERT_TRUE(allocator.Free(block).ok());
  void* bigger = allocator.Allocate(1025);
  EXPECT_NE(bigger, block);
  EXPECT_EQ(allocator.stats().cache_hits, 0);
  EXPECT_EQ(allocator.stats().bytes_reserved, 1024 + 1536);
}

TEST(CachingAllocatorTest, EqualSizesComeBackOldestFreedFirst) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* a = allocator.Allocate(512);
  void* b = allocator.Allocate(512);
  ASSERT_TRUE(allocator.Free(b).ok());
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.Allocate(512), b);
  EXPECT_EQ(allocator.Allocate(512), a);
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesTheCacheAndRetries) {
  FakeDevice device(/*budget=*/8192);
  CachingAllocator allocator(device.allocate(), device.free());
  void* kept = allocator.Allocate(2048);
  void* cached = allocator.Allocate(6144);
  ASSERT_NE(kept, nullptr);
  ASSERT_NE(cached, nullptr);
  ASSERT_TRUE(allocator.Free(cached).ok());

  // 6144 is over twice 2560, and the budget has 0 bytes left: the first raw call fails, the
  // cached block goes back, and the retry fits.
  void* p = allocator.Allocate(2500);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(device.allocate_calls, 4);
  EXPECT_EQ(device.free_calls, 1);
  EXPECT_EQ(device.live_blocks(), 2u);  // kept and p (malloc may well give p cached's address)
  EXPECT_TRUE(device.holds(kept));
  const CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytes_in_use, 2048 + 2560);
  EXPECT_EQ(stats.bytes_reserved, 2048 + 2560);
  EXPECT_EQ(stats.raw_allocations, 3);
  EXPECT_EQ(stats.raw_frees, 1);
  EXPECT_EQ(stats.failed_allocations, 0);
}

TEST(CachingAllocatorTest, OutOfMemoryReturnsNullWhenTheRetryFailsToo) {
  FakeDevice device(/*budget=*/8192);
  CachingAllocator allocator(device.allocate(), device.free());
  void* kept = allocator.Allocate(6144);
  void* cached = allocator.Allocate(1024);
  ASSERT_TRUE(allocator.Free(cached).ok());

  EXPECT_EQ(allocator.Allocate(4096), nullptr);
  EXPECT_EQ(device.allocate_calls, 4);  // two blocks, then the request and its one retry
  EXPECT_EQ(device.free_calls, 1);      // the cached block was released for the retry
  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.failed_allocations, 1);
  EXPECT_EQ(stats.bytes_in_use, 6144);
  EXPECT_EQ(stats.bytes_reserved, 6144);

  // Nothing cached now: a failed raw call is not retried.
  EXPECT_EQ(allocator.Allocate(4096), nullptr);
  EXPECT_EQ(device.allocate_calls, 5);
  EXPECT_EQ(allocator.stats().failed_allocations, 2);

  // The allocator still works, and the in-use block is untouched.
  EXPECT_TRUE(device.holds(kept));
  void* fits = allocator.Allocate(2048);
  EXPECT_NE(fits, nullptr);
  EXPECT_EQ(allocator.stats().bytes_in_use, 6144 + 2048);
}

TEST(CachingAllocatorTest, HugeRequestsFailWithoutCallingTheRawAllocator) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  EXPECT_EQ(allocator.Allocate(std::numeric_limits<size_t>::max()), nullptr);
  EXPECT_EQ(allocator.Allocate(std::numeric_limits<size_t>::max() - 100), nullptr);
  EXPECT_EQ(device.allocate_calls, 0);
  EXPECT_EQ(allocator.stats().failed_allocations, 2);
}

TEST(CachingAllocatorTest, StatsFollowAllocationsAndFrees) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* a = allocator.Allocate(1000);  // 1024
  void* b = allocator.Allocate(3000);  // 3072
  ASSERT_TRUE(allocator.Free(a).ok());
  void* c = allocator.Allocate(600);  // 1024, reused
  ASSERT_TRUE(allocator.Free(b).ok());
  ASSERT_TRUE(allocator.Free(c).ok());

  CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytes_in_use, 0);
  EXPECT_EQ(stats.bytes_reserved, 1024 + 3072);
  EXPECT_EQ(stats.peak_bytes_in_use, 1024 + 3072);
  EXPECT_EQ(stats.raw_allocations, 2);
  EXPECT_EQ(stats.raw_frees, 0);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.failed_allocations, 0);
  EXPECT_EQ(stats.bad_frees, 0);

  allocator.EmptyCache();
  stats = allocator.stats();
  EXPECT_EQ(stats.bytes_reserved, 0);
  EXPECT_EQ(stats.raw_frees, 2);
  EXPECT_EQ(stats.peak_bytes_in_use, 1024 + 3072);
  EXPECT_EQ(device.live_blocks(), 0u);
}

// The peak restarts from the bytes in use, counts a reused block whole, and ignores the cache.
TEST(CachingAllocatorTest, ResetPeakStartsFromTheBytesInUse) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* a = allocator.Allocate(1000);  // 1024
  void* b = allocator.Allocate(5000);  // 5120
  ASSERT_TRUE(allocator.Free(b).ok());
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024 + 5120);
  allocator.ResetPeakBytesInUse();
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024);
  EXPECT_EQ(allocator.stats().bytes_reserved, 1024 + 5120);
  void* c = allocator.Allocate(2000);  // 2048: the cached 5120 is over twice as large
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024 + 2048);
  ASSERT_TRUE(allocator.Free(c).ok());
  void* d = allocator.Allocate(4000);  // 4096, served by the cached 5120-byte block
  EXPECT_EQ(allocator.stats().bytes_in_use, 1024 + 5120);
  ASSERT_TRUE(allocator.Free(d).ok());
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024 + 5120);
  allocator.ResetPeakBytesInUse();
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024);
  allocator.ResetPeakBytesInUse();
  EXPECT_EQ(allocator.stats().peak_bytes_in_use, 0);
}

TEST(CachingAllocatorTest, EmptyCacheKeepsBlocksInUse) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* used = allocator.Allocate(512);
  void* cached = allocator.Allocate(1024);
  ASSERT_TRUE(allocator.Free(cached).ok());
  allocator.EmptyCache();
  EXPECT_TRUE(device.holds(used));
  EXPECT_FALSE(device.holds(cached));
  EXPECT_EQ(allocator.stats().bytes_reserved, 512);
  EXPECT_EQ(allocator.stats().bytes_in_use, 512);
  // The released block is forgotten: freeing it again is a bad free, and the next request of its
  // size goes to the raw allocator.
  EXPECT_EQ(allocator.Free(cached).code(), absl::StatusCode::kInvalidArgument);
  allocator.Allocate(1024);
  EXPECT_EQ(allocator.stats().raw_allocations, 3);
}

TEST(CachingAllocatorTest, FreeingNullDoesNothing) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  EXPECT_TRUE(allocator.Free(nullptr).ok());
  EXPECT_EQ(allocator.stats().bad_frees, 0);
}

TEST(CachingAllocatorTest, FreeingAForeignPointerIsAnErrorAndChangesNothing) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* block = allocator.Allocate(512);
  int on_stack = 0;
  const absl::Status status = allocator.Free(&on_stack);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("did not hand out"), absl::string_view::npos)
      << status.message();
  // An interior pointer is foreign too.
  EXPECT_EQ(allocator.Free(static_cast<char*>(block) + 8).code(),
            absl::StatusCode::kInvalidArgument);

  const CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bad_frees, 2);
  EXPECT_EQ(stats.bytes_in_use, 512);
  EXPECT_EQ(stats.bytes_reserved, 512);
  EXPECT_EQ(device.free_calls, 0);
}

TEST(CachingAllocatorTest, DoubleFreeIsAnErrorAndDoesNotCacheTheBlockTwice) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  void* block = allocator.Allocate(512);
  ASSERT_TRUE(allocator.Free(block).ok());
  const absl::Status status = allocator.Free(block);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("double free"), absl::string_view::npos) << status.message();
  EXPECT_EQ(allocator.stats().bad_frees, 1);
  EXPECT_EQ(allocator.stats().bytes_in_use, 0);

  // Were the block cached twice, these two would be the same pointer.
  void* first = allocator.Allocate(512);
  void* second = allocator.Allocate(512);
  EXPECT_EQ(first, block);
  EXPECT_NE(second, block);
  EXPECT_EQ(allocator.stats().bytes_in_use, 1024);
}

TEST(CachingAllocatorTest, DestructorReleasesEveryBlock) {
  FakeDevice device;
  {
    CachingAllocator allocator(device.allocate(), device.free());
    allocator.Allocate(512);                            // in use, never freed
    ASSERT_TRUE(allocator.Free(allocator.Allocate(4096)).ok());  // cached
    allocator.Allocate(100000);
    EXPECT_EQ(device.live_blocks(), 3u);
  }
  EXPECT_EQ(device.live_blocks(), 0u);
  EXPECT_EQ(device.used(), 0u);
  EXPECT_EQ(device.free_calls, 3);
}

TEST(CachingAllocatorTest, ConcurrentAllocateAndFree) {
  FakeDevice device;
  CachingAllocator allocator(device.allocate(), device.free());
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&allocator, t] {
      std::vector<void*> held;
      for (int i = 0; i < kRounds; ++i) {
        void* p = allocator.Allocate(static_cast<size_t>(512 * (1 + (i + t) % 7)));
        ASSERT_NE(p, nullptr);
        // Each block is this thread's alone until freed.
        *static_cast<int*>(p) = t;
        held.push_back(p);
        if (held.size() == 4) {
          for (void* q : held) {
            ASSERT_EQ(*static_cast<int*>(q), t);
            ASSERT_TRUE(allocator.Free(q).ok());
          }
          held.clear();
        }
      }
      for (void* q : held) ASSERT_TRUE(allocator.Free(q).ok());
    });
  }
  for (auto& thread : threads) thread.join();

  const CachingAllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytes_in_use, 0);
  EXPECT_EQ(stats.bad_frees, 0);
  EXPECT_EQ(stats.raw_allocations + stats.cache_hits, int64_t{kThreads} * kRounds);
  EXPECT_EQ(stats.bytes_reserved, static_cast<int64_t>(device.used()));
  EXPECT_LT(stats.raw_allocations, int64_t{kThreads} * kRounds / 10);
}

}  // namespace
}  // namespace weft
