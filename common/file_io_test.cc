#include "common/file_io.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace weft {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(ReadOnlyFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("does-not-exist.bin");
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), path + ": no such file");
}

TEST(ReadOnlyFileTest, WriteThenReadBack) {
  const std::string path = TempPath("chunks.bin");
  ASSERT_TRUE(WriteFile(path, {"head", "", "er|", "body"}).ok());
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->size(), 11);
  std::string all(11, '\0');
  ASSERT_TRUE(f->ReadAt(0, all.size(), all.data()).ok());
  EXPECT_EQ(all, "header|body");
  std::string tail(4, '\0');
  ASSERT_TRUE(f->ReadAt(7, tail.size(), tail.data()).ok());
  EXPECT_EQ(tail, "body");
  // Copies share the descriptor, which stays open while one remains.
  ReadOnlyFile copy = *f;
  f = absl::NotFoundError("dropped");
  std::string head(6, '\0');
  ASSERT_TRUE(copy.ReadAt(0, head.size(), head.data()).ok());
  EXPECT_EQ(head, "header");
}

TEST(ReadOnlyFileTest, WriteTruncatesAnExistingFile) {
  const std::string path = TempPath("rewritten.bin");
  ASSERT_TRUE(WriteFile(path, {"a longer first version"}).ok());
  ASSERT_TRUE(WriteFile(path, {"short"}).ok());
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 5);
}

TEST(ReadOnlyFileTest, ReadPastTheEndIsTruncated) {
  const std::string path = TempPath("short.bin");
  ASSERT_TRUE(WriteFile(path, {"0123456789"}).ok());
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  char buf[8];
  absl::Status s = f->ReadAt(6, sizeof(buf), buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": truncated: data ends early");
  EXPECT_EQ(f->ReadAt(20, 1, buf).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriteFileTest, UncreatableFileIsAnErrorNamingThePath) {
  const std::string path = TempPath("no-such-dir/out.bin");
  absl::Status s = WriteFile(path, {"x"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find(path + ": cannot create"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace weft
