// Where bf16 sums round (per pairwise addition, or once), and that integer sums are exact.
// The transports' results are checked against independent references in worker/comm/conformance.
#include "worker/comm/host_reduce.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::vector<uint16_t> Bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(FloatToBf16Bits(v));
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

}  // namespace
}  // namespace weft
