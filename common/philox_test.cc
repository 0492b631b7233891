#include "common/philox.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace weft {
namespace {

// Known-answer vectors from Random123's kat_vectors (philox4x32_10).
TEST(PhiloxTest, Random123KnownAnswerZero) {
  PhiloxCounter out = Philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(PhiloxTest, Random123KnownAnswerOnes) {
  PhiloxCounter out = Philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                    {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(PhiloxTest, Random123KnownAnswerPi) {
  PhiloxCounter out = Philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                    {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(out[0], 0xd16cfe09u);
  EXPECT_EQ(out[1], 0x94fdccebu);
  EXPECT_EQ(out[2], 0x5001e420u);
  EXPECT_EQ(out[3], 0x24126ea1u);
}

TEST(PhiloxTest, Fnv1a64KnownValues) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(PhiloxTest, UniformFollowsTheDocumentedMapping) {
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t key = Fnv1a64("fc0.weight");
  const uint64_t element = 0x100000007ull;  // exercises the high counter word
  PhiloxCounter out = Philox4x32_10(
      {static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
       static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const double u = static_cast<double>(out[0] >> 8) / 16777216.0;
  EXPECT_EQ(PhiloxUnit(seed, key, element), static_cast<float>(u));
  const double expected = -0.5 + 2 * 0.5 * u;
  EXPECT_NEAR(PhiloxUniform(seed, key, element, 0.5f), expected, 1e-7);
}

TEST(PhiloxTest, UniformRangeAndSpread) {
  const uint64_t key = Fnv1a64("x");
  double sum = 0;
  std::set<float> distinct;
  const int n = 20000;
  for (int e = 0; e < n; ++e) {
    float v = PhiloxUniform(7, key, e, 2.0f);
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 2.0f);
    sum += v;
    distinct.insert(v);
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_GT(distinct.size(), n * 0.99);
  // Different seeds and keys give different streams.
  EXPECT_NE(PhiloxUniform(7, key, 3, 1.0f), PhiloxUniform(8, key, 3, 1.0f));
  EXPECT_NE(PhiloxUniform(7, key, 3, 1.0f), PhiloxUniform(7, Fnv1a64("y"), 3, 1.0f));
}

}  // namespace
}  // namespace weft
