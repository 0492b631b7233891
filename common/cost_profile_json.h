// A cost profile (proto/weft/v1/profile.proto) as a JSON file: protobuf's JSON mapping, the field
// names of profile.proto. weft-calibrate writes one; `weftctl plan --auto --profile` and
// `weftctl calibrate` read one, and the coordinator keeps the ones it stores so. In common/
// because the worker's calibration writes what the planner's search reads.
//
// E.g.
//   RETURN_IF_ERROR(WriteCostProfile(profile, "cpu.json"));       // atomically
//   ASSIGN_OR_RETURN(v1::CostProfile p, ReadCostProfile("cpu.json"));
#ifndef WEFT_COMMON_COST_PROFILE_JSON_H_
#define WEFT_COMMON_COST_PROFILE_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/v1/profile.pb.h"

namespace weft {

// Errors name the path: ReadFileToString's, or INVALID_ARGUMENT "<path>: not a cost profile
// (<why>)".
absl::StatusOr<v1::CostProfile> ReadCostProfile(const std::string& path);
// Written through WriteFileAtomically: the file is replaced whole or not at all.
absl::Status WriteCostProfile(const v1::CostProfile& profile, const std::string& path);

}  // namespace weft

#endif  // WEFT_COMMON_COST_PROFILE_JSON_H_
