// Max keys: ordered as the floats they come from, every NaN the canonical one, and decoded back to
// the same bits, for every bf16 and for float32s around every exponent. NCCL's float max is these
// keys and an integer max, so this is its order too (it has no GPU test here).
#include "worker/comm/max_key.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

float FloatOfBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

bool IsNaN(uint32_t bits) { return std::isnan(FloatOfBits(bits)); }

// Keys compare as the values do, -0 below +0; a key decodes to its float's bits.
void ExpectOrderedAndDecoded(uint32_t a, uint32_t b) {
  const float x = FloatOfBits(a), y = FloatOfBits(b);
  const int32_t ka = F32MaxKey(a), kb = F32MaxKey(b);
  ASSERT_EQ(F32BitsOfMaxKey(ka), a) << std::hex << a;
  if (x < y || (x == y && std::signbit(x) && !std::signbit(y))) {
    ASSERT_LT(ka, kb) << std::hex << a << " " << b;
  } else if (x > y || (x == y && !std::signbit(x) && std::signbit(y))) {
    ASSERT_GT(ka, kb) << std::hex << a << " " << b;
  } else {
    ASSERT_EQ(ka, kb) << std::hex << a << " " << b;
  }
}

TEST(MaxKeyTest, F32KeysFollowTheValues) {
  // From -inf up to +inf through the subnormals and both zeros: strictly increasing keys.
  const std::vector<uint32_t> ascending = {0xFF800000u, 0xFF7FFFFFu, 0xBF800001u, 0xBF800000u,
                                           0x80800000u, 0x807FFFFFu, 0x80000001u, 0x80000000u,
                                           0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,
                                           0x3F800000u, 0x3F800001u, 0x7F7FFFFFu, 0x7F800000u};
  for (size_t i = 1; i < ascending.size(); ++i) {
    EXPECT_LT(F32MaxKey(ascending[i - 1]), F32MaxKey(ascending[i])) << std::hex << ascending[i];
  }
  // Random pairs (a fixed seed), half of them sharing an exponent.
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t a = gen();
    const uint32_t b = i % 2 == 0 ? (a & 0xFF800000u) | (gen() & 0x007FFFFFu) : gen();
    if (IsNaN(a) || IsNaN(b)) continue;
    ExpectOrderedAndDecoded(a, b);
  }
}

TEST(MaxKeyTest, EveryNaNIsTheCanonicalOneAboveInfinity) {
  const int32_t nan = F32MaxKey(kCanonicalF32NaN);
  EXPECT_EQ(F32BitsOfMaxKey(nan), kCanonicalF32NaN);
  EXPECT_GT(nan, F32MaxKey(0x7F800000u));
  for (uint32_t bits : {0x7F800001u, 0x7FA00000u, 0x7FFFFFFFu, 0xFF800001u, 0xFFC00000u,
                        0xFFFFFFFFu}) {
    EXPECT_EQ(F32MaxKey(bits), nan) << std::hex << bits;
  }
  EXPECT_EQ(Bf16BitsOfMaxKey(nan), kCanonicalBf16NaN);
}

// All 65536 bf16 values: the key is the float32's, it decodes to the same bits (NaNs to the
// canonical NaN), and neighbouring bit patterns compare by key as by value.
TEST(MaxKeyTest, EveryBf16) {
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const int32_t key = Bf16MaxKey(bits);
    ASSERT_EQ(key, F32MaxKey(b << 16)) << std::hex << b;
    ASSERT_EQ(Bf16BitsOfMaxKey(key), IsNaN(b << 16) ? kCanonicalBf16NaN : bits) << std::hex << b;
    if (b + 1 < (1u << 16) && !IsNaN(b << 16) && !IsNaN((b + 1) << 16)) {
      ExpectOrderedAndDecoded(b << 16, (b + 1) << 16);
    }
  }
}

}  // namespace
}  // namespace weft
