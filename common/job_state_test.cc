#include "common/job_state.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(JobStateTest, FinalStates) {
  EXPECT_TRUE(IsFinalState(v1::SUCCEEDED));
  EXPECT_TRUE(IsFinalState(v1::FAILED));
  EXPECT_TRUE(IsFinalState(v1::CANCELLED));
  EXPECT_FALSE(IsFinalState(v1::RESTARTING));
  EXPECT_FALSE(IsFinalState(v1::PLANNING));
}

}  // namespace
}  // namespace weft
