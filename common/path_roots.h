// Confined paths (`--data_root DIR`, `--checkpoint_root DIR` on the coordinator and the workers):
// the files a job names are read, and its checkpoints read and written, only inside the roots.
// A path is resolved first (symlinks as far as they exist, `.` and `..`), so neither a link nor
// `..` leads out; a path outside its root is PERMISSION_DENIED naming the field, the path (and
// what it resolves to, when that differs) and the root. An empty root confines nothing.
//
// Data (data.input, data.label, data.path; a Megatron prefix's .bin and .idx) must lie under the
// data root; checkpoint.dir under the checkpoint root; init_from, a file or a checkpoint folder,
// under either.
//
// E.g.
//   ASSIGN_OR_RETURN(PathRoots roots, PathRoots::Resolve("/srv/data", "/srv/checkpoints"));
//   RETURN_IF_ERROR(CheckSpecPaths(spec, roots));   // on the coordinator, before reading any
//   RETURN_IF_ERROR(CheckProgramPaths(program, roots));   // on a worker, before its task runs
#ifndef WEFT_COMMON_PATH_ROOTS_H_
#define WEFT_COMMON_PATH_ROOTS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft {

struct PathRoots {
  // Resolved absolute folders; empty: anywhere.
  std::string data;
  std::string checkpoint;

  // The roots as the flags give them, resolved. INVALID_ARGUMENT naming the flag for a root that
  // is relative or not an existing folder.
  static absl::StatusOr<PathRoots> Resolve(const std::string& data_root,
                                           const std::string& checkpoint_root);
};

// `path` resolved: absolute, symlinks followed as far as the path exists, `.` and `..` gone.
// INVALID_ARGUMENT for a relative path (`field` names it).
absl::StatusOr<std::string> ResolvePathForRoot(const std::string& path, absl::string_view field);

// Whether resolved `path` is `root` or lies inside it (both resolved).
bool IsUnder(const std::string& path, const std::string& root);

// Every path the spec names against the roots (above). Absent paths are not checked.
absl::Status CheckSpecPaths(const v1::JobSpec& spec, const PathRoots& roots);

// CheckSpecPaths, then each path a root confines replaced by its resolved form (the coordinator
// stores the spec so): every later open of it lies under its root by name, and is resolved
// beneath that root there (file_io's ConfineToRoots), whatever its folders become.
absl::Status ConfineSpecPaths(v1::JobSpec* spec, const PathRoots& roots);

// One file a job reads as data (`field` names it), e.g. the model.config_file the coordinator
// reads when it parses a spec_yaml: under the data root.
absl::Status CheckDataFile(const std::string& path, absl::string_view field,
                           const PathRoots& roots);

// Every path the program names: data, the evaluation's data, init_from, load_checkpoint,
// checkpoint_dir.
absl::Status CheckProgramPaths(const v1::Program& program, const PathRoots& roots);

}  // namespace weft

#endif  // WEFT_COMMON_PATH_ROOTS_H_
