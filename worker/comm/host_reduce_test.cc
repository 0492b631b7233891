// Where bf16 sums round (per pairwise addition, or once), that integer sums are exact, and that
// maxima are communicator.h's (checked here against comparisons of values, every bf16 included).
// The transports' results are checked against independent references in worker/comm/conformance.
#include "worker/comm/host_reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "worker/comm/max_key.h"

namespace weft {
namespace {

std::vector<uint16_t> Bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToBf16Bits(v));
  return bits;
}

float FloatOfBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The max of two float32s by comparing their values: the canonical NaN if either is a NaN, else
// the larger one's bits, +0 over -0.
uint32_t ReferenceMax(uint32_t a, uint32_t b) {
  const float x = FloatOfBits(a), y = FloatOfBits(b);
  if (std::isnan(x) || std::isnan(y)) return kCanonicalF32NaN;
  if (x != y) return x > y ? a : b;
  return std::signbit(x) ? b : a;
}

// Float32 bits worth checking against every other: zeros, the smallest subnormals, the largest
// finite values, infinities, NaNs of both signs (quiet, signalling, full payload), and ordinary
// values either side of zero.
const std::vector<uint32_t>& SpecialF32Bits() {
  static const std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00800000u, 0x80800000u,
      0x3F800000u, 0xBF800000u, 0x3F800001u, 0xBF800001u, 0x40490FDBu, 0xC0490FDBu,
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
      0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u, 0x7F810000u};
  return bits;
}

// 1 + 2^-8 + 2^-8: bf16 keeps 8 significant bits, so 1 + 2^-8 is a tie that rounds to 1 (even)
// when added pairwise, while the float32 sum 1 + 2^-7 is a bf16 value.
TEST(HostReduceTest, Bf16PairwiseRoundsEveryAdditionSumRoundsOnce) {
  const std::vector<uint16_t> one = Bf16({1.0f}), tiny = Bf16({0.00390625f});
  uint16_t pairwise;
  AddElements(one.data(), tiny.data(), v1::BF16, 1, &pairwise);
  AddElements(&pairwise, tiny.data(), v1::BF16, 1, &pairwise);
  EXPECT_EQ(Bf16BitsToFloat(pairwise), 1.0f);
  uint16_t once;
  SumElements({one.data(), tiny.data(), tiny.data()}, v1::BF16, 1, /*divisor=*/1, &once);
  EXPECT_EQ(Bf16BitsToFloat(once), 1.0078125f);
  // avg divides before the one rounding: (1 + 2^-7) / 2 is a bf16 value too.
  SumElements({one.data(), tiny.data(), tiny.data()}, v1::BF16, 1, /*divisor=*/2, &once);
  EXPECT_EQ(Bf16BitsToFloat(once), 0.50390625f);
  uint16_t scaled = FloatToBf16Bits(3.0f);
  ScaleElements(&scaled, v1::BF16, 1, 0.5f);
  EXPECT_EQ(Bf16BitsToFloat(scaled), 1.5f);
}

TEST(HostReduceTest, F32SumsInOrderAndDivides) {
  const std::vector<float> a = {1.5f, -2.0f}, b = {0.25f, 4.0f};
  std::vector<float> out(2);
  SumElements({a.data(), b.data()}, v1::F32, 2, /*divisor=*/1, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.75f, 2.0f}));
  SumElements({a.data(), b.data()}, v1::F32, 2, /*divisor=*/2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.875f, 1.0f}));
  AddElements(a.data(), b.data(), v1::F32, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.75f, 2.0f}));
  ScaleElements(out.data(), v1::F32, 2, 0.25f);
  EXPECT_EQ(out, (std::vector<float>{0.4375f, 0.5f}));
}

// Above 2^53 (i64) and 2^24 (i32), a sum through double or float would lose the low bits.
TEST(HostReduceTest, IntegerSumsAreExactAndWrap) {
  const int64_t big = (int64_t{1} << 60) + 1;
  std::vector<int64_t> x = {big, -3}, y = {big, 5}, z = {1, 0};
  std::vector<int64_t> out(2);
  SumElements({x.data(), y.data(), z.data()}, v1::I64, 2, /*divisor=*/1, out.data());
  EXPECT_EQ(out, (std::vector<int64_t>{(int64_t{1} << 61) + 3, 2}));
  AddElements(x.data(), y.data(), v1::I64, 2, x.data());  // in place
  EXPECT_EQ(x, (std::vector<int64_t>{(int64_t{1} << 61) + 2, 2}));

  const std::vector<int32_t> a = {(1 << 24) + 1, std::numeric_limits<int32_t>::max()};
  const std::vector<int32_t> b = {(1 << 24) + 1, 1};
  std::vector<int32_t> sum(2);
  SumElements({a.data(), b.data()}, v1::I32, 2, /*divisor=*/1, sum.data());
  EXPECT_EQ(sum, (std::vector<int32_t>{(1 << 25) + 2, std::numeric_limits<int32_t>::min()}));
  AddElements(a.data(), b.data(), v1::I32, 2, sum.data());
  EXPECT_EQ(sum, (std::vector<int32_t>{(1 << 25) + 2, std::numeric_limits<int32_t>::min()}));
  std::vector<int32_t> unchanged = a;
  ScaleElements(unchanged.data(), v1::I32, 2, 0.5f);
  EXPECT_EQ(unchanged, a);
}

// Against the reference for every pair of the special values and a million random bit patterns
// (a fixed seed: failures reproduce), both orders, out of place and in place.
TEST(HostReduceTest, F32MaxIsTheLargerValueOrTheCanonicalNaN) {
  std::vector<uint32_t> a, b;
  for (uint32_t x : SpecialF32Bits()) {
    for (uint32_t y : SpecialF32Bits()) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  std::mt19937 gen(20240520);
  for (int i = 0; i < 1000000; ++i) {
    a.push_back(gen());
    // Every fourth pair shares a's exponent, so that close values meet too.
    b.push_back(i % 4 == 0 ? (a.back() & 0xFF800000u) | (gen() & 0x007FFFFFu) : gen());
  }
  std::vector<uint32_t> out(a.size());
  for (int order = 0; order < 2; ++order) {
    const std::vector<uint32_t>& x = order == 0 ? a : b;
    const std::vector<uint32_t>& y = order == 0 ? b : a;
    MaxElements(x.data(), y.data(), v1::F32, x.size(), out.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(out[i], ReferenceMax(x[i], y[i]))
          << std::hex << "max(0x" << x[i] << ", 0x" << y[i] << ")";
    }
  }
  std::vector<uint32_t> in_place = a;
  MaxElements(in_place.data(), b.data(), v1::F32, a.size(), in_place.data());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(in_place[i], ReferenceMax(a[i], b[i]));
  // max(x, x) only canonicalizes NaNs.
  std::vector<uint32_t> self = SpecialF32Bits();
  MaxElements(self.data(), self.data(), v1::F32, self.size(), self.data());
  for (size_t i = 0; i < self.size(); ++i) {
    const uint32_t x = SpecialF32Bits()[i];
    EXPECT_EQ(self[i], std::isnan(FloatOfBits(x)) ? kCanonicalF32NaN : x) << std::hex << x;
  }
}

// Every bf16 value against the bf16s of the special values, both orders: the max compares the
// floats they stand for and rounds nothing, the result is one of the two bit for bit (or the
// canonical NaN).
TEST(HostReduceTest, Bf16MaxComparesAsFloatAndRoundsNothing) {
  std::vector<uint16_t> every(1 << 16);
  for (int i = 0; i < (1 << 16); ++i) every[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> out(every.size());
  for (uint32_t special : SpecialF32Bits()) {
    const std::vector<uint16_t> pivot(every.size(), static_cast<uint16_t>(special >> 16));
    for (int order = 0; order < 2; ++order) {
      const std::vector<uint16_t>& x = order == 0 ? every : pivot;
      const std::vector<uint16_t>& y = order == 0 ? pivot : every;
      MaxElements(x.data(), y.data(), v1::BF16, x.size(), out.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const uint32_t want = ReferenceMax(uint32_t{x[i]} << 16, uint32_t{y[i]} << 16) >> 16;
        ASSERT_EQ(out[i], want) << std::hex << "max(0x" << x[i] << ", 0x" << y[i] << ")";
      }
    }
  }
  // -1 < -0.5 < -0 < +0 < 2^-133 (subnormal) < 1, and NaN beats +inf.
  const std::vector<uint16_t> a = {0xBF80, 0x8000, 0x0001, 0xFF80, 0x7F80};
  const std::vector<uint16_t> b = {0xBF00, 0x0000, 0x3F80, 0xFFC1, 0x7FFF};
  std::vector<uint16_t> max(a.size());
  MaxElements(a.data(), b.data(), v1::BF16, a.size(), max.data());
  EXPECT_EQ(max, (std::vector<uint16_t>{0xBF00, 0x0000, 0x3F80, kCanonicalBf16NaN,
                                        kCanonicalBf16NaN}));
}

// Signed comparisons at the types' extremes, where an unsigned or a float compare would err.
TEST(HostReduceTest, IntegerMaxIsSigned) {
  using I32 = std::numeric_limits<int32_t>;
  using I64 = std::numeric_limits<int64_t>;
  const std::vector<int32_t> a32 = {I32::min(), -1, 0, (1 << 24) + 1, I32::max(), -7};
  const std::vector<int32_t> b32 = {I32::max(), I32::min(), -1, 1 << 24, 0, -8};
  std::vector<int32_t> max32(a32.size());
  MaxElements(a32.data(), b32.data(), v1::I32, a32.size(), max32.data());
  EXPECT_EQ(max32, (std::vector<int32_t>{I32::max(), -1, 0, (1 << 24) + 1, I32::max(), -7}));
  const int64_t big = (int64_t{1} << 60) + 1;
  std::vector<int64_t> a64 = {I64::min(), -1, big, -big, I64::max()};
  const std::vector<int64_t> b64 = {I64::min() + 1, I64::min(), big - 1, -big - 1, I64::min()};
  MaxElements(a64.data(), b64.data(), v1::I64, a64.size(), a64.data());  // in place
  EXPECT_EQ(a64, (std::vector<int64_t>{I64::min() + 1, -1, big, -big, I64::max()}));
}

}  // namespace
}  // namespace weft
