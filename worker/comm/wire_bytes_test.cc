// The wire-byte model against cases worked out by hand from Gloo's algorithms, uneven ones
// included, for each element size (the transports' counts are checked against the closed forms
// in worker/comm/conformance).
#include "worker/comm/wire_bytes.h"

#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

// Element sizes (DTypeSize): f32 and i32, bf16, i64.
constexpr int64_t kF32 = 4;
constexpr int64_t kBf16 = 2;
constexpr int64_t kI64 = 8;

TEST(WireBytesTest, RingAllReduceUnevenChunks) {
  // 7 floats (28 B) on 3 members: 6 segments of 8 B, 2 per chunk: 8+8 | 8+4 | 0+0.
  // Member r sends 2B minus chunk(r) minus chunk(r-1).
  EXPECT_EQ(RingAllReduceBytesSent(7, kF32, 0, 3), 56 - 16 - 0);
  EXPECT_EQ(RingAllReduceBytesSent(7, kF32, 1, 3), 56 - 12 - 16);
  EXPECT_EQ(RingAllReduceBytesSent(7, kF32, 2, 3), 56 - 0 - 12);
  // 1 float on 4 members: only segment 0 (chunk 0) holds data.
  EXPECT_EQ(RingAllReduceBytesSent(1, kF32, 0, 4), 4);
  EXPECT_EQ(RingAllReduceBytesSent(1, kF32, 1, 4), 4);
  EXPECT_EQ(RingAllReduceBytesSent(1, kF32, 2, 4), 8);
  EXPECT_EQ(RingAllReduceBytesSent(1, kF32, 3, 4), 8);
}

// Gloo rounds segments to whole elements, so the element size moves the chunk boundaries.
TEST(WireBytesTest, RingAllReduceSegmentsAreWholeElements) {
  // 5 bf16 (10 B) on 3 members: 6 segments of roundUp(ceil(10/6), 2) = 2 B: 2+2 | 2+2 | 2+0.
  // (Rounded to 4 B, as for f32, the chunks would be 8 | 2 | 0.)
  EXPECT_EQ(RingAllReduceBytesSent(5, kBf16, 0, 3), 20 - 4 - 2);
  EXPECT_EQ(RingAllReduceBytesSent(5, kBf16, 1, 3), 20 - 4 - 4);
  EXPECT_EQ(RingAllReduceBytesSent(5, kBf16, 2, 3), 20 - 2 - 4);
  // 3 i64 (24 B) on 3 members: 6 segments of roundUp(4, 8) = 8 B: 8+8 | 8+0 | 0+0.
  EXPECT_EQ(RingAllReduceBytesSent(3, kI64, 0, 3), 48 - 16 - 0);
  EXPECT_EQ(RingAllReduceBytesSent(3, kI64, 1, 3), 48 - 8 - 16);
  EXPECT_EQ(RingAllReduceBytesSent(3, kI64, 2, 3), 48 - 0 - 8);
  // Over all members: 2 (K-1) B for every element size.
  for (int64_t element : {kBf16, kF32, kI64}) {
    for (int k = 2; k <= 5; ++k) {
      for (int64_t count : {1, 5, 7, 262145, 1048576 + 3}) {
        int64_t total = 0;
        for (int r = 0; r < k; ++r) total += RingAllReduceBytesSent(count, element, r, k);
        EXPECT_EQ(total, 2 * (k - 1) * element * count) << count << " x " << element << " B";
      }
    }
  }
}

TEST(WireBytesTest, RingAllReduceTotalsAndLargeBuffers) {
  // Over all members the ring moves 2 (K-1) B, however the chunks fall.
  for (int k = 2; k <= 5; ++k) {
    for (int64_t count : {1, 3, 7, 1000, 262145, 1048576 + 3}) {
      int64_t total = 0;
      for (int r = 0; r < k; ++r) total += RingAllReduceBytesSent(count, kF32, r, k);
      EXPECT_EQ(total, 2 * (k - 1) * 4 * count) << count << " floats on " << k;
    }
  }
  // The seed MLP's 4096 x 1024 gradient on 2 members: 16 segments of 1 MiB, 8 MiB per chunk.
  EXPECT_EQ(RingAllReduceBytesSent(4096 * 1024, kF32, 0, 2), 16 << 20);
  EXPECT_EQ(RingAllReduceBytesSent(0, kF32, 0, 2), 0);
  EXPECT_EQ(RingAllReduceBytesSent(100, kF32, 0, 1), 0);
}

// The copies scale with the element size and nothing else.
TEST(WireBytesTest, CopiesCountElementBytes) {
  const std::vector<int64_t> counts = {1, 2, 3};
  EXPECT_EQ(RingAllGatherBytesSent(counts, kBf16, 0), 2 * (6 - 2));
  EXPECT_EQ(RingAllGatherBytesSent(counts, kI64, 0), 8 * (6 - 2));
  EXPECT_EQ(AllToAllBytesSent(counts, kBf16, 1), 2 * (6 - 2));
  EXPECT_EQ(AllToAllBytesSent(counts, kI64, 1), 8 * (6 - 2));
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kBf16, 1, 5, 1), 3 * 20);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kI64, 1, 5, 1), 3 * 80);
  EXPECT_EQ(NcclRingAllReduceBytesSent(24, kBf16, 3), 64);  // 2 * 2/3 * 48
  EXPECT_EQ(NcclRingAllReduceBytesSent(7, kI64, 3), 74);    // 2 * 2/3 * 56 = 74.67
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kBf16, 2, 4, 2), 20);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kI64, 1, 4, 2), 0);
}

TEST(WireBytesTest, AllGatherAllToAllBroadcast) {
  const std::vector<int64_t> counts = {1, 2, 3};
  EXPECT_EQ(RingAllGatherBytesSent(counts, kF32, 0), 4 * (6 - 2));
  EXPECT_EQ(RingAllGatherBytesSent(counts, kF32, 2), 4 * (6 - 1));
  EXPECT_EQ(RingAllGatherBytesSent({5}, kF32, 0), 0);
  EXPECT_EQ(AllToAllBytesSent(counts, kF32, 1), 4 * (6 - 2));
  EXPECT_EQ(AllToAllBytesSent({5}, kF32, 0), 0);
  // 5 members, root 1: virtual ranks 0..4; 0 sends to 1, 2, 4; 1 to 3; the rest are leaves.
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kF32, 1, 5, 1), 3 * 40);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kF32, 2, 5, 1), 40);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kF32, 3, 5, 1), 0);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kF32, 0, 5, 1), 0);
  EXPECT_EQ(BinomialBroadcastBytesSent(10, kF32, 0, 1, 0), 0);
}

// NCCL's rings: the all-reduce and broadcast differ from Gloo's; the rest are Gloo's formulas,
// here against the NCCL chains worked out by hand.
TEST(NcclWireBytesTest, AllReduceIsTwoRingPasses) {
  EXPECT_EQ(NcclRingAllReduceBytesSent(1000, kF32, 1), 0);
  EXPECT_EQ(NcclRingAllReduceBytesSent(0, kF32, 4), 0);
  EXPECT_EQ(NcclRingAllReduceBytesSent(1000, kF32, 2), 4000);  // half the buffer out, twice
  EXPECT_EQ(NcclRingAllReduceBytesSent(24, kF32, 3), 128);  // 2 * 2/3 * 96
  EXPECT_EQ(NcclRingAllReduceBytesSent(10, kF32, 4), 60);   // 2 * 3/4 * 40
  EXPECT_EQ(NcclRingAllReduceBytesSent(7, kF32, 3), 37);    // 2 * 2/3 * 28 = 37.33, rounded down
}

TEST(NcclWireBytesTest, AllGatherSkipsTheNextMembersChunk) {
  const std::vector<int64_t> equal = {5, 5, 5};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(RingAllGatherBytesSent(equal, kF32, r), 40) << r;  // 2 chunks
  }
  // Chains 0->1->2, 1->2->0, 2->0->1: member 0 forwards chunks 0 and 2 (7 + 11 floats).
  const std::vector<int64_t> uneven = {7, 0, 11};
  EXPECT_EQ(RingAllGatherBytesSent(uneven, kF32, 0), 72);
  EXPECT_EQ(RingAllGatherBytesSent(uneven, kF32, 1), 28);  // chunks 1 (empty) and 0
  EXPECT_EQ(RingAllGatherBytesSent(uneven, kF32, 2), 44);  // chunks 2 and 1 (empty)
  EXPECT_EQ(RingAllGatherBytesSent(std::vector<int64_t>{9}, kF32, 0), 0);
}

TEST(NcclWireBytesTest, ReduceScatterSendsEveryChunkButItsOwn) {
  const std::vector<int64_t> uneven = {1, 2, 3, 4};
  EXPECT_EQ(AllToAllBytesSent(uneven, kF32, 0), 36);
  EXPECT_EQ(AllToAllBytesSent(uneven, kF32, 3), 24);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{6, 6}, kF32, 1), 24);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{6}, kF32, 0), 0);
}

TEST(NcclWireBytesTest, AllToAllSendsEveryChunkButItsOwn) {
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, kF32, 0), 8);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3, 0, 2}, kF32, 2), 12);
  EXPECT_EQ(AllToAllBytesSent(std::vector<int64_t>{3}, kF32, 0), 0);
}

TEST(NcclWireBytesTest, BroadcastChainEndsBeforeTheRoot) {
  // Root 2 of 4: the chain 2 -> 3 -> 0 -> 1; member 1 sends nothing.
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 2, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 3, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 0, 4, 2), 40);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 1, 4, 2), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 1, 2, 0), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(10, kF32, 0, 1, 0), 0);
  EXPECT_EQ(NcclChainBroadcastBytesSent(0, kF32, 0, 4, 2), 0);
}

}  // namespace
}  // namespace weft
