// One coordinator per --data_dir: the second lock of a folder is refused naming the holder's
// pid, and the lock is free again once its holder is gone.
#include "coordinator/data_dir_lock.h"

#include <unistd.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft::coordinator {
namespace {

TEST(DataDirLockTest, ASecondHolderIsRefusedNamingTheFirstsPid) {
  const std::string dir = TestTmpDir();
  std::optional<absl::StatusOr<DataDirLock>> first(DataDirLock::Acquire(dir));
  ASSERT_TRUE(first->ok()) << first->status();
  absl::StatusOr<DataDirLock> second = DataDirLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("--data_dir ", dir, " is in use by another weft-coordinator (pid ",
                         getpid(), "): two would both write its job store; stop that one, or "
                         "give this one another folder"));
  first.reset();  // its holder exits
  EXPECT_TRUE(DataDirLock::Acquire(dir).ok());
  EXPECT_EQ(DataDirLock::Acquire("/nonexistent-folder").status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace weft::coordinator
