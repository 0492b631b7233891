// file_io under ConfineToRoots (issue 30, item 10): every path under a root is resolved beneath
// it at every open, so a folder or file swapped for a link after the job's paths were checked
// leads nowhere outside. Its own test binary: the confinement is process-wide.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "common/checkpoint/directory.h"
#include "common/file_io.h"
#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

class ConfinedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TempPath("root");
    outside_ = TempPath("outside");
    fs::remove_all(root_);
    fs::remove_all(outside_);
    fs::create_directories(root_ + "/ckpt");
    fs::create_directories(outside_ + "/victim");
    WriteAll(outside_ + "/secret", std::string(1234, 's'));
    WriteAll(outside_ + "/victim/keep", "mine");
    ConfineToRoots({root_});
  }
  void TearDown() override { ConfineToRoots({}); }

  // The status is PERMISSION_DENIED naming the path and the root, and quotes nothing of the
  // file it would have reached (not its size).
  void ExpectLeadsOut(const absl::Status& s, const std::string& path) {
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), path + ": leads outside " + root_)) << s;
    EXPECT_FALSE(absl::StrContains(s.message(), "1234")) << s;
  }

  std::string root_;
  std::string outside_;
};

TEST_F(ConfinedTest, AFileLinkedOutsideIsRefusedWithoutOpeningIt) {
  const std::string link = root_ + "/ckpt/rank-0.safetensors";
  fs::create_symlink(outside_ + "/secret", link);
  ExpectLeadsOut(ReadOnlyFile::Open(link).status(), link);
  ExpectLeadsOut(ReadFileToString(link).status(), link);
  // `..` out of the root, by name.
  const std::string dotdot = root_ + "/ckpt/../../outside/secret";
  ExpectLeadsOut(ReadOnlyFile::Open(dotdot).status(), dotdot);
  // A relative link that stays inside the root is followed; an absolute one is refused even so
  // (the kernel resolves beneath the root, and the job's own paths are stored resolved: Weft
  // never needs one); a path under no root opens as before.
  WriteAll(root_ + "/ckpt/real", "inside");
  fs::create_symlink("real", root_ + "/ckpt/alias");
  EXPECT_EQ(*ReadFileToString(root_ + "/ckpt/alias"), "inside");
  fs::create_symlink(root_ + "/ckpt/real", root_ + "/ckpt/absolute");
  EXPECT_EQ(ReadFileToString(root_ + "/ckpt/absolute").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadFileToString(outside_ + "/secret")->size(), 1234u);
}

TEST_F(ConfinedTest, AFolderSwappedForALinkWritesRenamesAndRemovesNothingOutside) {
  const std::string job = root_ + "/job";
  fs::create_symlink(outside_, job);  // was a folder when the job started
  ExpectLeadsOut(WriteFile(job + "/index.json", {"{}"}), job + "/index.json");
  EXPECT_FALSE(fs::exists(outside_ + "/index.json"));
  absl::Status s = WriteFileAtomically(job + "/latest", {"step-1\n"});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_FALSE(fs::exists(outside_ + "/latest"));
  s = MakeDirs(job + "/.tmp-step-1");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_FALSE(fs::exists(outside_ + "/.tmp-step-1"));
  s = RenamePath(job + "/victim", root_ + "/ckpt/stolen");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  s = RemoveTree(job + "/victim");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_EQ(*ReadFileToString(outside_ + "/victim/keep"), "mine");
  EXPECT_EQ(FsyncDir(job).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ConfinedTest, RemoveTreeRemovesALinkNotWhatItNames) {
  const std::string step = root_ + "/ckpt/step-1";
  ASSERT_TRUE(MakeDirs(step + "/deeper").ok());
  WriteAll(step + "/deeper/shard", "x");
  fs::create_symlink(outside_ + "/victim", step + "/deeper/link");
  absl::Status s = RemoveTree(step);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(fs::symlink_status(step)));
  EXPECT_EQ(*ReadFileToString(outside_ + "/victim/keep"), "mine");
  EXPECT_TRUE(RemoveTree(step).ok()) << "absent is fine";
}

// A checkpoint folder swapped for a link outside while a step's shards were being written: the
// commit looks its staging folder up beneath the root and is refused as leading outside, without
// looking into the folder the link names (which does hold a staging folder here).
TEST_F(ConfinedTest, ACommitThroughAFolderSwappedForALinkIsRefused) {
  const std::string dir = root_ + "/ckpt/run";
  fs::create_directories(outside_ + "/victim/.tmp-step-3");
  fs::create_directory_symlink(outside_ + "/victim", dir);
  const absl::Status s = checkpoint::CommitCheckpoint(dir, 3, {}, 1);
  ExpectLeadsOut(s, checkpoint::StagingDir(dir, 3));
  EXPECT_TRUE(fs::exists(outside_ + "/victim/.tmp-step-3"));
  EXPECT_FALSE(fs::exists(outside_ + "/victim/step-3"));
}

TEST_F(ConfinedTest, InsideTheRootEverythingWorks) {
  const std::string dir = root_ + "/ckpt/a/b";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFile(dir + "/x", {"12", "34"}).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/latest", {"step-2\n"}).ok());
  ASSERT_TRUE(RenamePath(dir + "/x", dir + "/y").ok());
  EXPECT_EQ(*ReadFileToString(dir + "/y"), "1234");
  EXPECT_EQ(*ReadFileToString(dir + "/latest"), "step-2\n");
  EXPECT_TRUE(FsyncDir(dir).ok());
  EXPECT_TRUE(RemoveTree(root_ + "/ckpt/a").ok());
  EXPECT_FALSE(fs::exists(root_ + "/ckpt/a"));
}

}  // namespace
}  // namespace weft
