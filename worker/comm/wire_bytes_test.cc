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

}  // namespace
}  // namespace weft
