#include "common/byte_size.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  static const auto* units = new std::vector<std::pair<absl::string_view, double>>{
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},          {"TB", 1e12},
      {"B", 1.0}};
  double scale = 1;
  absl::string_view number = text;
  for (const auto& [suffix, bytes] : *units) {
    if (absl::EndsWith(text, suffix)) {
      number.remove_suffix(suffix.size());
      scale = bytes;
      break;
    }
  }
  double n = 0;
  if (!absl::SimpleAtod(number, &n) || !(n > 0) || n * scale >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a size like 512MiB, 2GiB, 80GB or a number of bytes, got \"", text, "\""));
  }
  return static_cast<int64_t>(n * scale);
}

std::string FormatByteSize(int64_t bytes) {
  const double n = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", n / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", n / (1 << 20));
  if (bytes >= 1024) return absl::StrFormat("%.1f KiB", n / 1024);
  return absl::StrCat(bytes, " B");
}

}  // namespace weft
