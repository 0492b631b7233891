#include "common/jobspec/param_pattern.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace weft {
namespace {

constexpr char kExample[] = "(e.g. h.*.mlp.c_fc.weight)";

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed pattern: ", what));
}

}  // namespace

absl::Status ValidateParamPattern(absl::string_view pattern) {
  if (pattern.empty()) {
    return Malformed(absl::StrCat("empty; a pattern is a parameter name, dot-separated, where * ",
                                  "stands for one whole name part ", kExample));
  }
  for (absl::string_view part : absl::StrSplit(pattern, '.')) {
    if (part.empty()) {
      return Malformed(absl::StrCat("an empty name part (a leading, trailing or doubled dot); ",
                                    "parts are separated by single dots ", kExample));
    }
    if (part == "*") continue;
    for (char c : part) {
      if (c == '*') {
        return Malformed(absl::StrCat("\"", part, "\" mixes * with other characters; * stands ",
                                      "for one whole name part ", kExample));
      }
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
        return Malformed(absl::StrCat("\"", part, "\" has '", std::string(1, c),
                                      "'; name parts are letters, digits and _ ", kExample));
      }
    }
  }
  return absl::OkStatus();
}

std::string PatternPath(absl::string_view pattern) {
  return absl::StrCat("model.placements[\"", pattern, "\"]");
}

bool MatchesParamPattern(absl::string_view pattern, absl::string_view name) {
  const std::vector<absl::string_view> want = absl::StrSplit(pattern, '.');
  const std::vector<absl::string_view> have = absl::StrSplit(name, '.');
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == "*" ? have[i].empty() : want[i] != have[i]) return false;
  }
  return true;
}

}  // namespace weft
