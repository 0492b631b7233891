// Placements as a spec writes them: their text ("Shard(1)", "Partial(avg)") and the checks every
// placement list in a spec gets (one per mesh dim, shard axes in range, no empty shard), shared
// by the spec's validation (the batch) and the planner's graph builder (parameters).
//
// E.g.
//   ASSIGN_OR_RETURN(v1::Placement p, ParsePlacement("Shard(-1)"));
//   RETURN_IF_ERROR(ValidatePlacements(list, mesh, /*rank=*/2, "model.layers[0] (fc0).placements.weight",
//                                      "weight"));
#ifndef WEFT_COMMON_JOBSPEC_PLACEMENTS_H_
#define WEFT_COMMON_JOBSPEC_PLACEMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

using PlacementList = google::protobuf::RepeatedPtrField<v1::Placement>;

// "Replicate()", "Shard(1)", "Shard(-1)", "Partial()", "Partial(sum)", "Partial(avg)".
absl::StatusOr<v1::Placement> ParsePlacement(absl::string_view text);
std::string FormatPlacement(const v1::Placement& placement);
std::string FormatPlacements(const PlacementList& placements);

// One placement per mesh dim and shard axes in range for a tensor of `rank` axes. Partial is
// allowed: a parameter or batch may start as partial sums that the planner reduces. Errors start
// with `path` and call the tensor `what`.
absl::Status ValidatePlacements(const PlacementList& placements, const v1::Mesh& mesh, int rank,
                                const std::string& path, absl::string_view what);

// How many shards each axis of a tensor of `rank` axes is split into, and over which mesh dims.
// placements must have passed ValidatePlacements.
struct AxisSplit {
  int64_t shards = 1;
  std::vector<std::string> dims;
};
std::vector<AxisSplit> AxisSplits(const PlacementList& placements, const v1::Mesh& mesh, int rank);

// Uneven shards are fine (the last takes the remainder); empty ones are not.
absl::Status CheckNoEmptyShards(const PlacementList& placements, const v1::Mesh& mesh,
                                const std::vector<int64_t>& shape, const std::string& path,
                                absl::string_view what);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_PLACEMENTS_H_
