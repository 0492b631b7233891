#include "common/bearer_token.h"

#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace weft {
namespace {

constexpr int64_t kMaxTokenBytes = 4096;

}  // namespace

std::string BearerValue(absl::string_view token) { return absl::StrCat("Bearer ", token); }

absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path) {
  absl::StatusOr<std::string> read = ReadSmallRegularFile(path, kMaxTokenBytes);
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", read.status().message()));
  }
  std::string token = *std::move(read);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                            token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7E) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token file ", path, ": holds a byte that is not printable ASCII (one line, no spaces)"));
    }
  }
  return token;
}

absl::StatusOr<std::string> NewBearerToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  std::string bytes(32, '\0');
  if (!random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return absl::UnavailableError("reading /dev/urandom for a token");
  }
  return absl::BytesToHexString(bytes);
}

bool BearerMatches(absl::string_view value, absl::string_view token) {
  // The scheme's case does not matter (RFC 6750), the token's does.
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return false;
  }
  value.remove_prefix(kScheme.size());
  unsigned char diff = value.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(token[i] ^ (i < value.size() ? value[i] : 0));
  }
  return diff == 0;
}

}  // namespace weft
