#include "common/checked_math.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace weft {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedMathTest, MultipliesWhatFits) {
  EXPECT_EQ(*CheckedMul(int64_t{1} << 31, int64_t{1} << 31, "x"), int64_t{1} << 62);
  EXPECT_EQ(*CheckedMul(-3, 7, "x"), -21);
  EXPECT_EQ(*CheckedMul(kMax, 1, "x"), kMax);
  EXPECT_EQ(*CheckedMul(kMax, 0, "x"), 0);
  EXPECT_EQ(*CheckedAdd(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(*CheckedAdd(kMin, kMax, "x"), -1);
}

// The case: 2^61 samples of 8 elements is 2^64, which wraps to 0 unchecked.
TEST(CheckedMathTest, AnOverflowIsInvalidArgumentNamingTheQuantity) {
  const absl::StatusOr<int64_t> product =
      CheckedMul(int64_t{1} << 61, 8, "data.batch_size × data.sample_shape");
  ASSERT_FALSE(product.ok());
  EXPECT_EQ(product.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(product.status().message(),
            "data.batch_size × data.sample_shape overflows int64 (2305843009213693952 "
            "× 8)");
  EXPECT_FALSE(CheckedMul(kMin, -1, "x").ok());
  EXPECT_FALSE(CheckedMul(kMax / 2 + 1, 2, "x").ok());

  const absl::StatusOr<int64_t> sum = CheckedAdd(kMax, 1, "arena bytes");
  ASSERT_FALSE(sum.ok());
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sum.status().message()),
              HasSubstr("arena bytes overflows int64 (9223372036854775807 + 1)"));
  EXPECT_FALSE(CheckedAdd(kMin, -1, "x").ok());
}

TEST(CheckedMathTest, AProductOfDims) {
  EXPECT_EQ(*CheckedProduct({}, "x"), 1);
  EXPECT_EQ(*CheckedProduct({2, 3, 4}, "x"), 24);
  EXPECT_EQ(*CheckedProduct({0, kMax, kMax}, "x"), 0);  // no dim past a 0 can overflow it
  const std::vector<int64_t> wide = {int64_t{1} << 40, int64_t{1} << 40};
  const absl::StatusOr<int64_t> n = CheckedProduct(wide, "tensor fc0.weight");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n.status().message(),
            "tensor fc0.weight [1099511627776,1099511627776] overflows int64");
}

// The loops over every tensor of a plan name the quantity only when it overflows.
TEST(CheckedMathTest, ANameMadeOnDemandIsMadeOnlyOnOverflow) {
  int made = 0;
  auto name = [&made] {
    ++made;
    return std::string("tensor h.0.attn");
  };
  const std::vector<int64_t> fits = {4, 8};
  EXPECT_EQ(*CheckedProduct(fits, name), 32);
  EXPECT_EQ(*CheckedMul(32, 4, name), 128);
  EXPECT_EQ(made, 0);
  EXPECT_EQ(CheckedMul(kMax, 2, name).status().message(),
            "tensor h.0.attn overflows int64 (9223372036854775807 × 2)");
  EXPECT_EQ(made, 1);
}

}  // namespace
}  // namespace weft
