#include "common/checkpoint/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace weft::checkpoint {
namespace {

using internal::Crc32cPortable;
using internal::Crc32cSse42;
using internal::HasSse42;

TEST(Crc32cTest, KnownVectors) {
  const std::string digits = "123456789";
  const std::string zeros(32, '\0');
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32cPortable(digits.data(), digits.size(), 0), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(zeros.data(), zeros.size(), 0), 0x8A9136AAu);
  if (HasSse42()) {
    EXPECT_EQ(Crc32cSse42(digits.data(), digits.size(), 0), 0xE3069283u);
    EXPECT_EQ(Crc32cSse42(zeros.data(), zeros.size(), 0), 0x8A9136AAu);
  }
}

TEST(Crc32cTest, ContinuesFromAPreviousCrc) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    EXPECT_EQ(Crc32c(s.data() + cut, s.size() - cut, Crc32c(s.data(), cut)),
              Crc32c(s.data(), s.size()));
  }
}

// Every length and alignment up to a few words, and a large buffer: both paths agree.
TEST(Crc32cTest, HardwareAndTablePathsAgree) {
  if (!HasSse42()) GTEST_SKIP() << "this CPU has no SSE4.2";
  std::vector<unsigned char> buf(1 << 20);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : buf) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n < 80; ++n) {
      ASSERT_EQ(Crc32cSse42(buf.data() + offset, n, 0x1234u),
                Crc32cPortable(buf.data() + offset, n, 0x1234u))
          << "offset " << offset << " n " << n;
    }
  }
  EXPECT_EQ(Crc32cSse42(buf.data() + 3, buf.size() - 3, 0),
            Crc32cPortable(buf.data() + 3, buf.size() - 3, 0));
}

}  // namespace
}  // namespace weft::checkpoint
