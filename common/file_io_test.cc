#include "common/file_io.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

TEST(ReadOnlyFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("does-not-exist.bin");
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), path + ": no such file");
}

TEST(ReadOnlyFileTest, OnlyRegularFilesOpenAndAFifoDoesNotBlock) {
  const std::string fifo = TempPath("pipe");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without a writer, a blocking open would never return.
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(fifo);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(), fifo + ": not a regular file");
  EXPECT_EQ(ReadFileToString("/dev/null").status().message(), "/dev/null: not a regular file");
  EXPECT_EQ(ReadOnlyFile::Open(TestTmpDir()).status().message(),
            TestTmpDir() + ": is a folder, not a file");
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

TEST(ReadFileToStringTest, ReadsTheWholeFileOrSaysWhyNot) {
  const std::string path = TempPath("whole.bin");
  WriteAll(path, std::string("a\0b\n", 4));
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("a\0b\n", 4));
  absl::StatusOr<std::string> missing = ReadFileToString(TempPath("no-such-file.txt"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-file.txt: no such file"), std::string::npos);
}

TEST(WriteFileTest, UncreatableFileIsAnErrorNamingThePath) {
  const std::string path = TempPath("no-such-dir/out.bin");
  absl::Status s = WriteFile(path, {"x"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find(path + ": cannot create"), absl::string_view::npos) << s;
}

// The file names in dir.
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

std::string ReadBack(const std::string& path) {
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
  if (!f.ok()) return "<" + std::string(f.status().message()) + ">";
  std::string all(static_cast<size_t>(f->size()), '\0');
  if (!f->ReadAt(0, all.size(), all.data()).ok()) return "<read failed>";
  return all;
}

TEST(WriteFileAtomicallyTest, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const std::string dir = TempPath("atomic");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const std::string path = dir + "/latest";
  ASSERT_TRUE(WriteFileAtomically(path, {"step-", "100\n"}).ok());
  EXPECT_EQ(ReadBack(path), "step-100\n");
  ASSERT_TRUE(WriteFileAtomically(path, {"step-2\n"}).ok());
  EXPECT_EQ(ReadBack(path), "step-2\n");
  EXPECT_EQ(Listing(dir), std::vector<std::string>{"latest"});
}

TEST(WriteFileAtomicallyTest, UncreatableFileIsAnErrorNamingTheTemporary) {
  const std::string path = TempPath("no-such-dir/port");
  absl::Status s = WriteFileAtomically(path, {"7070\n"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find(path + ".tmp-"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(": cannot create"), absl::string_view::npos) << s;
}

TEST(AtomicFileWriterTest, StreamsAndIsInvisibleUntilCommitted) {
  const std::string dir = TempPath("streamed");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteFile(path, {"old"}).ok());
  {
    absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->Append("new ").ok());
    ASSERT_TRUE(out->Append("data").ok());
    EXPECT_EQ(ReadBack(path), "old");  // not yet committed
    ASSERT_TRUE(out->Commit().ok());
    EXPECT_EQ(out->Commit().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(ReadBack(path), "new data");
  EXPECT_EQ(Listing(dir), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFileWriterTest, AnUncommittedFileIsRemoved) {
  const std::string dir = TempPath("abandoned");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directories(dir));
  {
    absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(dir + "/out.bin");
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->Append("partial").ok());
    EXPECT_EQ(Listing(dir).size(), 1u);  // the temporary
  }
  EXPECT_TRUE(Listing(dir).empty());
}

TEST(FsyncDirTest, MissingFolderIsAnErrorNamingIt) {
  EXPECT_TRUE(FsyncDir(TempPath("")).ok());
  const std::string dir = TempPath("no-such-folder");
  absl::Status s = FsyncDir(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find(dir + ": cannot open folder"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace weft
