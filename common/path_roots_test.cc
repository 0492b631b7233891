#include "common/path_roots.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// TEST_TMPDIR/<test>/{data,ckpt,outside}, data/in.npy, a link data/link -> outside/secret.
class PathRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    for (const char* d : {"data", "ckpt", "outside"}) fs::create_directories(base_ + "/" + d);
    WriteAll(base_ + "/data/in.npy", "x");
    WriteAll(base_ + "/outside/secret", "root:*:1");
    fs::create_symlink(base_ + "/outside/secret", base_ + "/data/link");
    fs::create_directory_symlink(base_ + "/outside", base_ + "/data/dirlink");
    absl::StatusOr<PathRoots> roots = PathRoots::Resolve(base_ + "/data", base_ + "/ckpt");
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *roots;
  }

  absl::Status Input(const std::string& path) {
    v1::JobSpec spec;
    spec.mutable_data()->set_input(path);
    return CheckSpecPaths(spec, roots_);
  }

  std::string base_;
  PathRoots roots_;
};

TEST_F(PathRootsTest, PathsUnderTheirRootPass) {
  EXPECT_TRUE(Input(base_ + "/data/in.npy").ok());
  EXPECT_TRUE(Input(base_ + "/data/not_yet.npy").ok());  // missing files are the reader's to name
  EXPECT_TRUE(Input(base_ + "/data/./sub/../in.npy").ok());
  v1::JobSpec spec;
  spec.mutable_checkpoint()->set_dir(base_ + "/ckpt/run1");
  spec.set_init_from(base_ + "/ckpt/run0");  // a checkpoint: under the checkpoint root
  EXPECT_TRUE(CheckSpecPaths(spec, roots_).ok());
  spec.set_init_from(base_ + "/data/in.npy");  // a file: under the data root
  EXPECT_TRUE(CheckSpecPaths(spec, roots_).ok());
}

TEST_F(PathRootsTest, PathsOutsideAreRefusedNamingFieldPathAndRoot) {
  const absl::Status shadow = Input("/etc/shadow");
  EXPECT_EQ(shadow.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shadow.message(),
            "data.input: /etc/shadow is outside --data_root " + roots_.data);

  const absl::Status dots = Input(base_ + "/data/../outside/secret");
  EXPECT_EQ(dots.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(dots.message(), HasSubstr("is outside --data_root"));

  const absl::Status link = Input(base_ + "/data/link");
  EXPECT_EQ(link.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(link.message(), absl::StrCat("data.input: ", base_, "/data/link (it resolves to ",
                                         fs::canonical(base_ + "/outside/secret").string(),
                                         ") is outside --data_root ", roots_.data));
  // A link to a folder outside, and a file under it that does not exist yet.
  EXPECT_EQ(Input(base_ + "/data/dirlink/new.npy").code(), absl::StatusCode::kPermissionDenied);
  // A sibling whose name starts with the root's is not under it.
  fs::create_directories(base_ + "/data2");
  EXPECT_EQ(Input(base_ + "/data2/in.npy").code(), absl::StatusCode::kPermissionDenied);
  // Relative paths never reach here from weftctl (it resolves them); refused, not guessed.
  EXPECT_EQ(Input("data/in.npy").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PathRootsTest, EachFieldHasItsRoot) {
  v1::JobSpec spec;
  spec.mutable_checkpoint()->set_dir(base_ + "/data/ckpt");  // the data root is not for writing
  EXPECT_EQ(CheckSpecPaths(spec, roots_).message(),
            absl::StrCat("checkpoint.dir: ", base_, "/data/ckpt is outside --checkpoint_root ",
                         roots_.checkpoint));
  spec.Clear();
  spec.set_init_from(base_ + "/outside/secret");
  EXPECT_EQ(CheckSpecPaths(spec, roots_).message(),
            absl::StrCat("init_from: ", base_, "/outside/secret is outside --data_root ",
                         roots_.data, " or --checkpoint_root ", roots_.checkpoint));
  spec.Clear();
  spec.mutable_data()->set_label("/etc/passwd");
  EXPECT_THAT(CheckSpecPaths(spec, roots_).message(), HasSubstr("data.label: /etc/passwd"));
  // A Megatron prefix: both of its files are checked.
  fs::create_symlink("/etc/passwd", base_ + "/data/corpus.idx");
  spec.Clear();
  spec.mutable_data()->set_path(base_ + "/data/corpus");
  spec.mutable_data()->set_format("megatron");
  EXPECT_THAT(CheckSpecPaths(spec, roots_).message(),
              HasSubstr(absl::StrCat("data.path: ", base_, "/data/corpus.idx (it resolves to")));
  // The evaluation's data is data: under --data_root, each field named.
  spec.Clear();
  spec.mutable_eval()->mutable_data()->set_path("/etc/shadow");
  EXPECT_EQ(CheckSpecPaths(spec, roots_).message(),
            "eval.data.path: /etc/shadow is outside --data_root " + roots_.data);
  spec.Clear();
  spec.mutable_eval()->mutable_data()->set_input(base_ + "/data/link");
  EXPECT_THAT(CheckSpecPaths(spec, roots_).message(),
              HasSubstr(absl::StrCat("eval.data.input: ", base_, "/data/link (it resolves to")));
}

TEST_F(PathRootsTest, ProgramsAreCheckedLikeSpecs) {
  v1::Program program;
  program.set_load_checkpoint(base_ + "/ckpt/step-2");
  program.set_checkpoint_dir(base_ + "/ckpt");
  program.mutable_data()->set_input(base_ + "/data/in.npy");
  EXPECT_TRUE(CheckProgramPaths(program, roots_).ok());
  program.set_load_checkpoint("/var/lib/other/step-2");
  EXPECT_EQ(CheckProgramPaths(program, roots_).code(), absl::StatusCode::kPermissionDenied);
  program.set_load_checkpoint("");
  program.set_checkpoint_dir("/tmp");
  EXPECT_THAT(CheckProgramPaths(program, roots_).message(), HasSubstr("checkpoint.dir: /tmp"));
  program.set_checkpoint_dir(base_ + "/ckpt");
  program.mutable_eval()->mutable_data()->set_label("/etc/passwd");
  EXPECT_THAT(CheckProgramPaths(program, roots_).message(),
              HasSubstr("eval.data.label: /etc/passwd is outside --data_root"));
}

TEST_F(PathRootsTest, EmptyRootsConfineNothing) {
  v1::JobSpec spec;
  spec.mutable_data()->set_input("/etc/shadow");
  spec.mutable_checkpoint()->set_dir("/anywhere");
  EXPECT_TRUE(CheckSpecPaths(spec, PathRoots()).ok());
  // One unconfined root admits init_from.
  PathRoots data_only = roots_;
  data_only.checkpoint.clear();
  spec.Clear();
  spec.set_init_from("/elsewhere/step-1");
  EXPECT_TRUE(CheckSpecPaths(spec, data_only).ok());
}

TEST_F(PathRootsTest, RootsMustBeAbsoluteExistingFolders) {
  EXPECT_EQ(PathRoots::Resolve("rel", "").status().message(),
            "--data_root: \"rel\" must be an absolute path");
  EXPECT_EQ(PathRoots::Resolve("", base_ + "/nope").status().message(),
            absl::StrCat("--checkpoint_root: ", base_, "/nope is not an existing folder"));
  EXPECT_EQ(PathRoots::Resolve(base_ + "/data/in.npy", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A root given through a link is resolved, so paths through the link or the target both pass.
  fs::create_directory_symlink(base_ + "/data", base_ + "/datalink");
  absl::StatusOr<PathRoots> linked = PathRoots::Resolve(base_ + "/datalink", "");
  ASSERT_TRUE(linked.ok());
  v1::JobSpec spec;
  spec.mutable_data()->set_input(base_ + "/datalink/in.npy");
  EXPECT_TRUE(CheckSpecPaths(spec, *linked).ok());
  spec.mutable_data()->set_input(base_ + "/data/in.npy");
  EXPECT_TRUE(CheckSpecPaths(spec, *linked).ok());
}

TEST(IsUnderTest, ComparesWholeComponents) {
  EXPECT_TRUE(IsUnder("/a/b", "/a/b"));
  EXPECT_TRUE(IsUnder("/a/b/c", "/a/b"));
  EXPECT_FALSE(IsUnder("/a/bc", "/a/b"));
  EXPECT_FALSE(IsUnder("/a", "/a/b"));
  EXPECT_TRUE(IsUnder("/x", "/"));
}

}  // namespace
}  // namespace weft
