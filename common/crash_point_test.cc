#include "common/crash_point.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace weft {
namespace {

class CrashPointTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv(kCrashAtEnv);
    unsetenv(kStepMsEnv);
  }
};

TEST_F(CrashPointTest, CheckNamesWhatIsWrong) {
  EXPECT_TRUE(CheckCrashPointEnv().ok());
  setenv(kCrashAtEnv, "coordinator_before_commit", 1);
  EXPECT_TRUE(CheckCrashPointEnv().ok());
  setenv(kCrashAtEnv, "worker_after_shard@2", 1);
  EXPECT_TRUE(CheckCrashPointEnv().ok());
  setenv(kCrashAtEnv, "worker_after_shards", 1);
  EXPECT_EQ(CheckCrashPointEnv().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(CheckCrashPointEnv().message().find("unknown point 'worker_after_shards'"),
            absl::string_view::npos)
      << CheckCrashPointEnv();
  setenv(kCrashAtEnv, "worker_after_shard@two", 1);
  EXPECT_EQ(CheckCrashPointEnv().code(), absl::StatusCode::kInvalidArgument);
}

// Each case runs in a child process (a death test), which reads the variable afresh.
TEST_F(CrashPointTest, StepPaceIsCheckedToo) {
  setenv(kStepMsEnv, "25", 1);
  EXPECT_TRUE(CheckCrashPointEnv().ok());
  setenv(kStepMsEnv, "-1", 1);
  EXPECT_EQ(CheckCrashPointEnv().message(),
            "WEFT_DEBUG_STEP_MS=-1: must be a number of milliseconds >= 0");
  setenv(kStepMsEnv, "soon", 1);
  EXPECT_EQ(CheckCrashPointEnv().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CrashPointTest, KillsAtTheArmedPointAndStepOnly) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  setenv(kCrashAtEnv, "worker_after_shard@2", 1);
  EXPECT_EXIT(
      {
        CrashPoint(kWorkerAfterShard, 1);
        CrashPoint(kCoordinatorBeforeCommit, 2);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(CrashPoint(kWorkerAfterShard, 2), ::testing::KilledBySignal(SIGKILL),
              "WEFT_DEBUG_CRASH_AT: killing this process at worker_after_shard, step 2");
  setenv(kCrashAtEnv, "coordinator_before_commit", 1);
  EXPECT_EXIT(CrashPoint(kCoordinatorBeforeCommit, 7), ::testing::KilledBySignal(SIGKILL),
              "at coordinator_before_commit, step 7");
}

TEST_F(CrashPointTest, UnsetNeverKills) {
  CrashPoint(kWorkerAfterShard, 1);
  CrashPoint(kCoordinatorBeforeCommit, 1);
}

}  // namespace
}  // namespace weft
