// The job spec as a user writes it: YAML text <-> weft.v1.JobSpec. Every error is
// INVALID_ARGUMENT naming the field and the line, e.g. "model.layers[2] (fc1).in_feature:
// unknown key ... (line 9, column 7)". Reads structure and types only: files and the model are
// checked later (ValidateJobSpec, the planner's graph builder).
//
// E.g.
//   ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile("examples/quickstart.yaml"));
#ifndef WEFT_COMMON_JOBSPEC_YAML_H_
#define WEFT_COMMON_JOBSPEC_YAML_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Parses YAML text. Relative paths (data.input, data.label, init_from, checkpoint.dir) are
// resolved against base_dir. Applies the documented defaults (ApplyJobSpecDefaults) and the
// parallelize shortcut (ApplyParallelize). Placements given by mesh dim name (`{mp: Shard(1)}`,
// unnamed dims Replicate()) become the positional list, the one representation in JobSpec.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml, const std::string& base_dir);

// Reads and parses a spec file; base_dir is the file's folder.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_YAML_H_
