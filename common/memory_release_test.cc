#include "common/memory_release.h"

#include <fstream>
#include <string>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    absl::string_view value = line;
    if (!absl::ConsumePrefix(&value, "VmRSS:")) continue;
    absl::ConsumeSuffix(&value, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(value, &kb)) return kb << 10;
  }
  return -1;
}

// What a flood leaves: many small blocks allocated on other threads (their own arenas) and freed
// while a few live ones between them (every 16th) keep each heap from shrinking at its top, so
// glibc keeps the free ones. Released, the resident size falls to about what is still in use.
TEST(MemoryReleaseTest, MemoryFreedOnOtherThreadsGoesBackToTheSystem) {
  constexpr int kThreads = 8;
  constexpr int kBlocks = 2000;
  constexpr size_t kBlockBytes = 16 << 10;  // 8 x 2000 x 16 KiB = 250 MiB, 16 MiB kept live
  MemoryRelease::ReleaseNow();
  const int64_t before = ResidentBytes();
  std::vector<std::vector<char*>> live(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&live, t] {
      std::vector<char*> blocks;
      for (int i = 0; i < kBlocks; ++i) {
        blocks.push_back(new char[kBlockBytes]);
        for (size_t b = 0; b < kBlockBytes; b += 4096) blocks.back()[b] = 1;  // touched
      }
      for (int i = 0; i < kBlocks; ++i) {
        if (i % 16 == 15) {
          live[t].push_back(blocks[i]);
        } else {
          delete[] blocks[i];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int64_t kept = ResidentBytes() - before;
  EXPECT_TRUE(MemoryRelease::ReleaseNow());
  const int64_t after = ResidentBytes() - before;
  std::printf("freed on %d threads, 1/16 still in use: %lld MiB resident, %lld MiB after release\n",
              kThreads, static_cast<long long>(kept >> 20), static_cast<long long>(after >> 20));
  EXPECT_GT(kept, int64_t{200} << 20) << "glibc returned it by itself: nothing to test";
  EXPECT_LT(after, int64_t{48} << 20);
  for (const std::vector<char*>& blocks : live) {
    for (char* block : blocks) delete[] block;
  }
}

}  // namespace
}  // namespace weft
