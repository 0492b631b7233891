// Parameter name patterns, the keys of model.placements: dot-separated name parts, where `*`
// stands for exactly one whole part (a block index, say). "h.*.mlp.c_fc.weight" matches
// "h.0.mlp.c_fc.weight" and "h.11.mlp.c_fc.weight", not "h.0.1.mlp.c_fc.weight" nor
// "h.0.mlp.c_fc.bias". Parts are letters, digits and _, as Hugging Face parameter names are.
//
// E.g.
//   RETURN_IF_ERROR(ValidateParamPattern("h.*.attn.c_attn.weight"));
//   if (MatchesParamPattern("h.*.attn.c_attn.weight", "h.3.attn.c_attn.weight")) ...
#ifndef WEFT_COMMON_JOBSPEC_PARAM_PATTERN_H_
#define WEFT_COMMON_JOBSPEC_PARAM_PATTERN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

// OK for a well-formed pattern; otherwise INVALID_ARGUMENT saying what is wrong, e.g.
// "malformed pattern: \"1*\" mixes * with other characters; * stands for one whole name part
// (e.g. h.*.mlp.c_fc.weight)". The caller adds the field path.
absl::Status ValidateParamPattern(absl::string_view pattern);

// model.placements["h.*.mlp.c_fc.weight"]: how messages name a pattern's placements.
std::string PatternPath(absl::string_view pattern);

// Whether `name` matches a well-formed `pattern` part for part.
bool MatchesParamPattern(absl::string_view pattern, absl::string_view name);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_PARAM_PATTERN_H_
