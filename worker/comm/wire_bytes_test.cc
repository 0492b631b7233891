// The wire-byte model against cases worked out by hand from Gloo's algorithms, uneven ones
// included (even ones are checked on real TCP pairs by gloo_communicator_test).
#include "worker/comm/wire_bytes.h"

#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(WireBytesTest, RingAllReduceUnevenChunks) {
  // 7 floats (28 B) on 3 members: 6 segments of 8 B, 2 per chunk: 8+8 | 8+4 | 0+0.
  // Member r sends 2B minus chunk(r) minus chunk(r-1).
  EXPECT_EQ(RingAllReduceBytesSent(7, 0, 3), 56 - 16 - 0);
  EXPECT_EQ(RingAllReduceBytesSent(7, 1, 3), 56 - 12 - 16);
  EXPECT_EQ(RingAllReduceBytesSent(7, 2, 3), 56 - 0 - 12);
  // 1 float on 4 members: only segment 0 (chunk 0) holds data.
  EXPECT_EQ(RingAllReduceBytesSent(1, 0, 4), 4);
  EXPECT_EQ(RingAllReduceBytesSent(1, 1, 4), 4);
  EXPECT_EQ(RingAllReduceBytesSent(1, 2, 4), 8);
  EXPECT_EQ(RingAllReduceBytesSent(1, 3, 4), 8);
}

TEST(WireBytesTest, RingAllReduceTotalsAndLargeBuffers) {
  // Over all members the ring moves 2 (K-1) B, however the chunks fall.
  for (int k = 2; k <= 5; ++k) {
    for (int64_t count : {1, 3, 7, 1000, 262145, 1048576 + 3}) {
      int64_t total = 0;
      for (int r = 0; r < k; ++r) total += RingAllReduceBytesSent(count, r, k);
      EXPECT_EQ(total, 2 * (k - 1) * 4 * count) << count << " floats on " << k;
    }
  }
  // The seed MLP's 4096 x 1024 gradient on 2 members: 16 segments of 1 MiB, 8 MiB per chunk.
  EXPECT_EQ(RingAllReduceBytesSent(4096 * 1024, 0, 2), 16 << 20);
  EXPECT_EQ(RingAllReduceBytesSent(0, 0, 2), 0);
  EXPECT_EQ(RingAllReduceBytesSent(100, 0, 1), 0);
}

TEST(WireBytesTest, AllGatherAllToAllBroadcast) {
  const std::vector<int64_t> counts = {1, 2, 3};
  EXPECT_EQ(RingAllGatherBytesSent(counts, 0), 4 * (6 - 2));
  EXPECT_EQ(RingAllGatherBytesSent(counts, 2), 4 * (6 - 1));
  EXPECT_EQ(RingAllGatherBytesSent({5}, 0), 0);
  EXPECT_EQ(AllToAllBytesSent(counts, 1), 4 * (6 - 2));
  EXPECT_EQ(AllToAllBytesSent({5}, 0), 0);
  // 5 members, root 1: virtual ranks 0..4; 0 sends to 1, 2, 4; 1 to 3; the rest are leaves.
  EXPECT_EQ(BinomialBroadcastBytesSent(10, 1, 5, 1), 3 * 40);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, 2, 5, 1), 40);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, 3, 5, 1), 0);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, 0, 5, 1), 0);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, 0, 1, 0), 0);
}

// NCCL's rings: the all-reduce and broadcast differ from Gloo's; the rest are Gloo's formulas,
// here against the NCCL chains worked out by hand.
TEST(NcclWireBytesTest, AllReduceIsTwoRingPasses) {
  EXPECT_EQ(NcclRingAllReduceBytesSent(1000, 1), 0);
  EXPECT_EQ(NcclRingAllReduceBytesSent(0, 4), 0);
  EXPECT_EQ(NcclRingAllReduceBytesSent(1000, 2), 4000);  // half the buffer out, twice
  EXPECT_EQ(NcclRingAllReduceBytesSent(24, 3), 128);     // 2 * 2/3 * 96
  EXPECT_EQ(NcclRingAllReduceBytesSent(10, 4), 60);      // 2 * 3/4 * 40
  EXPECT_EQ(NcclRingAllReduceBytesSent(7, 3), 37);       // 2 * 2/3 * 28 = 37.33, rounded down
}

TEST(NcclWireBytesTest, AllGatherSkipsTheNextMembersChunk) {
  const std::vector<int64_t> equal = {5, 5, 5};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(RingAllGatherBytesSent(equal, r), 40) << r;  // 2 chunks
  // Chains 0->1->2, 1->2->0, 2->0->1: member 0 forwards chunks 0 and 2 (7 + 11 floats).
  const std::vector<int64_t> uneven = {7, 0, 11};
  EXPECT_EQ(RingAllGatherBytesSent(uneven, 0), 72);
  EXPECT_EQ(RingAllGatherBytesSent(uneven, 1), 28);  // chunks 1 (empty) and 0
  EXPECT_EQ(RingAllGatherBytesSent(uneven, 2), 44);  // chunks 2 and 1 (empty)
  EXPECT_EQ(RingAllGatherBytesSent(std::vector<int64_t>{9}, 0), 0);
}

TEST(NcclWireBytesTest, ReduceScatterSendsEveryChunkButItsOwn) {
  const std::vector<int64_t> uneven = {1, 2, 3, 4};
  EXPECT_EQ(AllToAllBytesSent(uneven, 0), 36);
  EXPECT_EQ(AllToAllBytesSent(uneven, 3), 24);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{6, 6}, 1), 24);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{6}, 0), 0);
}

TEST(NcclWireBytesTest, AllToAllSendsEveryChunkButItsOwn) {
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, 0), 8);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, 2), 12);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3}, 0), 0);
}

TEST(NcclWireBytesTest, BroadcastChainEndsBeforeTheRoot) {
  // Root 2 of 4: the chain 2 -> 3 -> 0 -> 1; member 1 sends nothing.
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 2, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 3, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 0, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 1, 4, 2), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 1, 2, 0), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, 0, 1, 0), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(0, 0, 4, 2), 0);
}

}  // namespace
}  // namespace weft
