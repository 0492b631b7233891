#include "common/status.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat(x, " is odd"));
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

TEST(StatusTest, AnnotateKeepsCodeAndPrependsContext) {
  absl::Status s = Annotate(absl::NotFoundError("no such file"), "loading init.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading init.safetensors: no such file");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "ignored").ok());
}

TEST(StatusTest, AssignOrReturnPropagatesTheFirstError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  absl::Status s = Quarter(6, &out);
  EXPECT_EQ(s.message(), "3 is odd");
}

}  // namespace
}  // namespace weft
