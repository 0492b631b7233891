// The job spec as a user writes it: YAML text <-> weft.v1.JobSpec. Every error is
// INVALID_ARGUMENT naming the field and the line, e.g. "model.layers[2] (fc1).in_feature:
// unknown key ... (line 9, column 7)". Reads structure and types only: files and the model are
// checked later (ValidateJobSpec, the planner's graph builder).
//
// E.g.
//   ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile("examples/quickstart.yaml"));
#ifndef WEFT_COMMON_JOBSPEC_YAML_H_
#define WEFT_COMMON_JOBSPEC_YAML_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

// The most YAML nodes a spec may hold, counted as a reader that follows every alias sees them:
// a few aliases nested in each other stand for exponentially many nodes ("billion laughs"), and
// the coordinator parses the spec_yaml of a SubmitJob.
inline constexpr int64_t kMaxJobSpecYamlNodes = int64_t{1} << 20;

struct JobSpecYamlOptions {
  // Called before the parser opens a file the spec names (model.config_file, which it reads),
  // with the field and the resolved path; an error stops the parse with it. Empty: none. The
  // coordinator confines such a file to its --data_root.
  std::function<absl::Status(absl::string_view field, const std::string& path)> before_reading;
  // Where a relative checkpoint.dir is resolved (empty: nowhere, it stays relative); absent:
  // base_dir. The coordinator resolves a spec_yaml's data paths against its --data_root and
  // checkpoint.dir against its --checkpoint_root.
  std::optional<std::string> checkpoint_base_dir;
  // false: model.config_file is recorded (resolved) but not read, and the transformer model is
  // not checked against a config: the structure alone is checked, for a client whose spec names
  // the cluster's files (weftctl submit without --check-local-files).
  bool read_files = true;
};

// Parses YAML text. Relative paths (data.input, data.label, data.path, init_from,
// checkpoint.dir, model.config_file) are resolved against base_dir. Applies the documented
// defaults (ApplyJobSpecDefaults) and the parallelize shortcut (ApplyParallelize). Placements
// given by mesh dim name (`{mp: Shard(1)}`, unnamed dims Replicate()) become the positional list,
// the one representation in JobSpec. Text of more than kMaxJobSpecYamlNodes nodes (aliases
// expanded), or with an alias inside the node it names, is refused before it is read.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml, const std::string& base_dir,
                                             const JobSpecYamlOptions& options = {});

// A spec file's text: a regular file of at most kMaxJobSpecBytes (a FIFO is refused, never waited
// on). NOT_FOUND "<path>: no such file"; INVALID_ARGUMENT for a folder ("<path>: is a directory,
// not a job spec"), another kind of file or a larger one, naming the path.
absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path);

// Reads (ReadJobSpecFile) and parses a spec file; base_dir is the file's folder.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_YAML_H_
