#include "common/bearer_token.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "common/testing_files.h"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(BearerTokenTest, ReadsOneLineLessItsTrailingNewline) {
  const std::string path = TempPath("token");
  WriteAll(path, "s3cret-Token_42-xyz\n");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  absl::StatusOr<std::string> token = ReadBearerTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-Token_42-xyz");
  // Readable by its owner only is enough (a Kubernetes secret's 0400).
  ASSERT_EQ(chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(ReadBearerTokenFile(path).ok());
}

TEST(BearerTokenTest, BadFilesAreRefusedNamingThePathNeverTheBytes) {
  const std::string dir = TestTmpDir();
  WriteAll(dir + "/empty", "\n");
  WriteAll(dir + "/spaced", "two words\n");
  WriteAll(dir + "/huge", std::string(5000, 'a'));
  WriteAll(dir + "/short", "words\n");
  WriteAll(dir + "/loose", "words-that-are-long-enough\n");
  for (const char* f : {"empty", "spaced", "huge", "short"}) {
    ASSERT_EQ(chmod((dir + "/" + f).c_str(), 0600), 0);
  }
  ASSERT_EQ(chmod((dir + "/loose").c_str(), 0644), 0);
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  for (const auto& [file, why] :
       {std::pair<std::string, std::string>{"empty", "empty"},
        {"spaced", "not printable ASCII"},
        {"huge", "more than 4096 bytes"},
        {"short", "fewer than 16 bytes; a short token is guessed"},
        {"loose", "group or others may read or write it (mode 0644); chmod 600 it"},
        {"fifo", "not a regular file"},
        {"missing", "cannot be read"}}) {
    absl::StatusOr<std::string> token = ReadBearerTokenFile(dir + "/" + file);
    ASSERT_FALSE(token.ok()) << file;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(std::string(token.status().message()), HasSubstr(dir + "/" + file));
    EXPECT_THAT(std::string(token.status().message()), HasSubstr(why));
    EXPECT_THAT(std::string(token.status().message()), Not(HasSubstr("words")));
  }
}

TEST(BearerTokenTest, MatchesOnlyTheWholeBearerValue) {
  EXPECT_TRUE(BearerMatches("Bearer abc", "abc"));
  EXPECT_TRUE(BearerMatches("bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer ABC", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer ab", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerMatches("abc", "abc"));
  EXPECT_FALSE(BearerMatches("", "abc"));
}

TEST(BearerTokenTest, NewTokensAreLongAndDiffer) {
  absl::StatusOr<std::string> a = NewBearerToken(), b = NewBearerToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace weft
