#include "common/bearer_token.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  // Read first: a missing or special file is named as such before its mode.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, ": group or others may read or write it (mode 0",
        absl::StrFormat("%o", st.st_mode & 0777), "); chmod 600 it, as ssh refuses a loose key"));
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
  if (token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": fewer than ",
                                                   kMinTokenBytes,
                                                   " bytes; a short token is guessed (make one "
                                                   "with `openssl rand -hex 32`)"));
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
