// Weft's version, which every binary prints for --version ("weft-worker 0.15.0-dev"). It names
// the release line: the minor number is the last issue whose work is complete in the tree.
#ifndef WEFT_COMMON_VERSION_H_
#define WEFT_COMMON_VERSION_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weft {

inline constexpr char kWeftVersion[] = "0.15.0-dev";

// "<program> <version>".
inline std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", kWeftVersion);
}

}  // namespace weft

#endif  // WEFT_COMMON_VERSION_H_
