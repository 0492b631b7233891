// How validation messages name a spec's fields and shapes, for every reader of the spec (the
// jobspec checks and the planner's graph builder), so that errors read the same wherever they
// are found: "model.layers[2] (fc1).in_features: ...", "shape [4,1024]".
#ifndef WEFT_COMMON_JOBSPEC_FIELD_PATH_H_
#define WEFT_COMMON_JOBSPEC_FIELD_PATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "weft/v1/job.pb.h"

namespace weft {

// "model.layers[2] (fc1)", or "model.layers[2]" for a layer without a name.
inline std::string LayerPath(const v1::Layer& layer, int index) {
  if (layer.name().empty()) return absl::StrCat("model.layers[", index, "]");
  return absl::StrCat("model.layers[", index, "] (", layer.name(), ")");
}

// "[4,1024]".
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_FIELD_PATH_H_
