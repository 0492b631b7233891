#include "common/dtype.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(v1::F32), 4);
  EXPECT_EQ(DTypeSize(v1::BF16), 2);
  EXPECT_EQ(DTypeSize(v1::I32), 4);
  EXPECT_EQ(DTypeSize(v1::I64), 8);
  for (v1::DType t : {v1::F32, v1::BF16, v1::I32, v1::I64}) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
    EXPECT_EQ(*DTypeFromSafetensors(SafetensorsDTypeName(t)), t);
  }
  EXPECT_EQ(*ParseDType("bfloat16"), v1::BF16);
  EXPECT_EQ(*ParseDType("int64"), v1::I64);
  absl::StatusOr<v1::DType> bad = ParseDType("float16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("float16"), std::string::npos);
  absl::StatusOr<v1::DType> f16 = DTypeFromSafetensors("F16");
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.status().message().find("F16"), std::string::npos);
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa, 1.
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go up to the even one.
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isinf(Bf16BitsToFloat(FloatToBf16Bits(std::numeric_limits<float>::infinity()))));
  // A NaN whose payload is only in the low half stays a NaN, not infinity.
  uint32_t nan_bits = 0x7F800001u;
  float nan;
  std::memcpy(&nan, &nan_bits, sizeof(nan));
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(nan))));
}

TEST(DTypeTest, ConvertElements) {
  const std::vector<float> f = {1.5f, -2.75f, 3e9f, std::nanf(""), 1.0f + std::ldexp(1.0f, -8)};
  std::vector<int32_t> i32(f.size());
  ConvertElements(f.data(), v1::F32, i32.data(), v1::I32, f.size());
  EXPECT_EQ(i32, (std::vector<int32_t>{1, -2, std::numeric_limits<int32_t>::max(), 0, 1}));

  std::vector<uint16_t> bf(f.size());
  ConvertElements(f.data(), v1::F32, bf.data(), v1::BF16, f.size());
  EXPECT_EQ(Bf16BitsToFloat(bf[0]), 1.5f);
  EXPECT_EQ(Bf16BitsToFloat(bf[4]), 1.0f);

  const std::vector<int64_t> big = {int64_t{1} << 40, -7, int64_t{1} << 62};
  std::vector<int32_t> narrowed(big.size());
  ConvertElements(big.data(), v1::I64, narrowed.data(), v1::I32, big.size());
  EXPECT_EQ(narrowed, (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), -7,
                                            std::numeric_limits<int32_t>::max()}));
  std::vector<int64_t> widened(narrowed.size());
  ConvertElements(narrowed.data(), v1::I32, widened.data(), v1::I64, narrowed.size());
  EXPECT_EQ(widened[1], -7);
  std::vector<float> back(narrowed.size());
  ConvertElements(widened.data(), v1::I64, back.data(), v1::F32, widened.size());
  EXPECT_EQ(back[1], -7.0f);
}

}  // namespace
}  // namespace weft
