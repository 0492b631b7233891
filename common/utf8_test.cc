#include "common/utf8.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "weft/v1/job.pb.h"

namespace weft {
namespace {

// Protobuf's own check is the reference: a proto3 string that does not parse back is invalid.
bool ProtobufAccepts(const std::string& s) {
  v1::JobSpec spec;
  spec.set_name(s);
  std::string bytes;
  spec.SerializePartialToString(&bytes);
  return v1::JobSpec().ParseFromString(bytes);
}

TEST(Utf8Test, AgreesWithProtobufOnEdgeCases) {
  const std::vector<std::string> cases = {
      "", "plain", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",
      "\xc3", "\xe2\x82", "\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xe0\x9f\xbf",
      "\xed\xa0\x80", "\xed\x9f\xbf", "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",
      "\xff", "a\xc3(", std::string("nul\0byte", 8), "pipeli\x96ne"};
  for (const std::string& s : cases) {
    EXPECT_EQ(IsValidUtf8(s), ProtobufAccepts(s)) << testing::PrintToString(s);
  }
  // Every 1- and 2-byte string, against protobuf.
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    ASSERT_EQ(IsValidUtf8(one), ProtobufAccepts(one)) << a;
    for (int b = 0x80; b < 0xc0; ++b) {
      const std::string two = {static_cast<char>(a), static_cast<char>(b)};
      ASSERT_EQ(IsValidUtf8(two), ProtobufAccepts(two)) << a << " " << b;
    }
  }
}

// A cut never splits a character: "aé€😀" is 1 + 2 + 3 + 4 bytes.
TEST(Utf8Test, PrefixEndsBetweenCharacters) {
  const std::string s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  const std::vector<std::pair<size_t, size_t>> cuts = {
      {0, 0}, {1, 1}, {2, 1}, {3, 3}, {4, 3}, {5, 3}, {6, 6}, {9, 6}, {10, 10}, {99, 10}};
  for (const auto& [max_bytes, kept] : cuts) {
    const absl::string_view prefix = Utf8Prefix(s, max_bytes);
    EXPECT_EQ(prefix.size(), kept) << max_bytes;
    EXPECT_TRUE(IsValidUtf8(prefix)) << max_bytes;
  }
}

// Each byte that starts no character becomes U+FFFD; the rest is kept, and protobuf takes it.
TEST(Utf8Test, ReplaceInvalidKeepsCharactersAndReplacesStrayBytes) {
  EXPECT_EQ(ReplaceInvalidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ReplaceInvalidUtf8("pipeli\x96ne"), "pipeli\xef\xbf\xbdne");
  EXPECT_EQ(ReplaceInvalidUtf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ReplaceInvalidUtf8("\xed\xa0\x80!"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd!");
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 7) {
      const std::string two = {static_cast<char>(a), static_cast<char>(b)};
      ASSERT_TRUE(ProtobufAccepts(ReplaceInvalidUtf8(two))) << a << " " << b;
    }
  }
}

TEST(Utf8Test, ControlCharactersAreFoundAndEscaped) {
  EXPECT_EQ(FirstControlCharacter("plain name é 中"), absl::string_view::npos);
  EXPECT_EQ(FirstControlCharacter("ab\x1b[2J"), 2u);
  EXPECT_EQ(FirstControlCharacter("a\rb"), 1u);
  EXPECT_EQ(FirstControlCharacter("x\x7f"), 1u);
  EXPECT_EQ(FirstControlCharacter("x\xc2\x9b"), 1u) << "C1 CSI";
  EXPECT_EQ(FirstControlCharacter("\xc2\xa0"), absl::string_view::npos) << "no-break space is text";
  EXPECT_EQ(FirstControlCharacter(absl::string_view("a\0b", 3)), 1u);
  EXPECT_EQ(EscapeControlCharacters("ok\x1b[31mred\n\xc2\x9b."),
            "ok\\x1b[31mred\\x0a\\xc2\\x9b.");
  EXPECT_EQ(EscapeControlCharacters("é plain"), "é plain");
}

}  // namespace
}  // namespace weft
