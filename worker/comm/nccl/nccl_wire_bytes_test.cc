// The NCCL ring byte counts, against traffic worked out by hand for small groups.
#include "worker/comm/nccl/nccl_wire_bytes.h"

#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(NcclWireBytesTest, AllReduceIsTwoRingPasses) {
  EXPECT_EQ(NcclAllReduceBytesSent(1000, 1), 0);
  EXPECT_EQ(NcclAllReduceBytesSent(0, 4), 0);
  EXPECT_EQ(NcclAllReduceBytesSent(1000, 2), 4000);  // half the buffer out, twice
  EXPECT_EQ(NcclAllReduceBytesSent(24, 3), 128);     // 2 * 2/3 * 96
  EXPECT_EQ(NcclAllReduceBytesSent(10, 4), 60);      // 2 * 3/4 * 40
  EXPECT_EQ(NcclAllReduceBytesSent(7, 3), 37);       // 2 * 2/3 * 28 = 37.33, rounded down
}

TEST(NcclWireBytesTest, AllGatherSkipsTheNextMembersChunk) {
  const std::vector<int64_t> equal = {5, 5, 5};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(NcclAllGatherBytesSent(equal, r), 40) << r;  // 2 chunks
  // Chains 0->1->2, 1->2->0, 2->0->1: member 0 forwards chunks 0 and 2 (7 + 11 floats).
  const std::vector<int64_t> uneven = {7, 0, 11};
  EXPECT_EQ(NcclAllGatherBytesSent(uneven, 0), 72);
  EXPECT_EQ(NcclAllGatherBytesSent(uneven, 1), 28);  // chunks 1 (empty) and 0
  EXPECT_EQ(NcclAllGatherBytesSent(uneven, 2), 44);  // chunks 2 and 1 (empty)
  EXPECT_EQ(NcclAllGatherBytesSent(std::vector<int64_t>{9}, 0), 0);
}

TEST(NcclWireBytesTest, ReduceScatterSendsEveryChunkButItsOwn) {
  const std::vector<int64_t> uneven = {1, 2, 3, 4};
  EXPECT_EQ(NcclReduceScatterBytesSent(uneven, 0), 36);
  EXPECT_EQ(NcclReduceScatterBytesSent(uneven, 3), 24);
  EXPECT_EQ(NcclReduceScatterBytesSent(std::vector<int64_t>{6, 6}, 1), 24);
  EXPECT_EQ(NcclReduceScatterBytesSent(std::vector<int64_t>{6}, 0), 0);
}

TEST(NcclWireBytesTest, AllToAllSendsEveryChunkButItsOwn) {
  EXPECT_EQ(NcclAllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, 0), 8);
  EXPECT_EQ(NcclAllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, 2), 12);
  EXPECT_EQ(NcclAllToAllBytesSent(std::vector<int64_t>{3}, 0), 0);
}

TEST(NcclWireBytesTest, BroadcastChainEndsBeforeTheRoot) {
  // Root 2 of 4: the chain 2 -> 3 -> 0 -> 1; member 1 sends nothing.
  EXPECT_EQ(NcclBroadcastBytesSent(10, 2, 4, 2), 40);
  EXPECT_EQ(NcclBroadcastBytesSent(10, 3, 4, 2), 40);
  EXPECT_EQ(NcclBroadcastBytesSent(10, 0, 4, 2), 40);
  EXPECT_EQ(NcclBroadcastBytesSent(10, 1, 4, 2), 0);
  EXPECT_EQ(NcclBroadcastBytesSent(10, 1, 2, 0), 0);
  EXPECT_EQ(NcclBroadcastBytesSent(10, 0, 1, 0), 0);
  EXPECT_EQ(NcclBroadcastBytesSent(0, 0, 4, 2), 0);
}

}  // namespace
}  // namespace weft
