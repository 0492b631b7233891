#include "worker/kernels/cuda/dropout_mask.h"

#include <cstdint>
#include <random>

#include "common/philox.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "worker/kernels/kernels.h"

namespace weft {
namespace {

TEST(DropoutMaskTest, PhiloxMatchesCommonPhiloxOnKnownAnswers) {
  const cuda::PhiloxWords zero = cuda::Philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(zero.w[0], 0x6627e8d5u);
  EXPECT_EQ(zero.w[1], 0xe169c58du);
  EXPECT_EQ(zero.w[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.w[3], 0x9b00dbd8u);
  const cuda::PhiloxWords pi = cuda::Philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu,
                                                   0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi.w[0], 0xd16cfe09u);
  EXPECT_EQ(pi.w[1], 0x94fdccebu);
  EXPECT_EQ(pi.w[2], 0x5001e420u);
  EXPECT_EQ(pi.w[3], 0x24126ea1u);
}

TEST(DropoutMaskTest, PhiloxMatchesCommonPhiloxOnRandomInputs) {
  std::mt19937_64 rng(TestSeed());
  for (int t = 0; t < 10000; ++t) {
    const uint64_t a = rng(), b = rng(), c = rng();
    const PhiloxCounter want =
        weft::Philox4x32_10({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                             static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)},
                            {static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32)});
    const cuda::PhiloxWords got = cuda::Philox4x32_10(
        static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
        static_cast<uint32_t>(b >> 32), static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32));
    for (int w = 0; w < 4; ++w) ASSERT_EQ(got.w[w], want[w]) << "word " << w << " of try " << t;
    ASSERT_EQ(cuda::PhiloxUnit(c, b, a), weft::PhiloxUnit(c, b, a)) << "try " << t;
  }
}

TEST(DropoutMaskTest, KeepsAsDropoutSpecSays) {
  DropoutSpec spec;
  spec.p = 0.1f;
  spec.seed = 1234;
  spec.key = Fnv1a64("h.0.attn.resid_dropout");
  spec.step = 7;
  cuda::DropoutMask mask;
  mask.p = spec.p;
  mask.seed = spec.seed;
  mask.stream_key = spec.StreamKey();
  int kept = 0;
  for (uint64_t e = 0; e < 20000; ++e) {
    const bool want = weft::PhiloxUnit(spec.seed, spec.StreamKey(), e) >= spec.p;
    ASSERT_EQ(mask.Keeps(e), want) << "element " << e;
    kept += want ? 1 : 0;
  }
  EXPECT_NEAR(kept / 20000.0, 0.9, 0.01);
}

TEST(DropoutMaskTest, GlobalIndexMatchesGlobalBox) {
  std::mt19937_64 rng(TestSeed());
  for (int t = 0; t < 200; ++t) {
    GlobalBox box;
    cuda::MaskBox mask_box;
    box.rank = mask_box.rank = static_cast<int>(rng() % (GlobalBox::kMaxAxes + 1));
    int64_t count = 1;
    for (int a = 0; a < box.rank; ++a) {
      box.global[a] = mask_box.global[a] = 1 + static_cast<int64_t>(rng() % 5);
      box.lengths[a] = mask_box.lengths[a] = 1 + static_cast<int64_t>(rng() % box.global[a]);
      box.offsets[a] = mask_box.offsets[a] =
          static_cast<int64_t>(rng() % (box.global[a] - box.lengths[a] + 1));
      count *= box.lengths[a];
    }
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(cuda::GlobalIndex(mask_box, i), box.GlobalIndex(i))
          << "element " << i << " of try " << t;
    }
  }
}

}  // namespace
}  // namespace weft
