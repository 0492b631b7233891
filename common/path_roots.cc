#include "common/path_roots.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// Which roots a path may lie under, by what the job does with it.
enum class Use { kData, kCheckpoint, kDataOrCheckpoint };

absl::StatusOr<std::string> ResolveRoot(const std::string& root, absl::string_view flag) {
  if (root.empty()) return std::string();
  if (!fs::path(root).is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", root, "\" must be an absolute path"));
  }
  std::error_code ec;
  const fs::path resolved = fs::canonical(root, ec);
  if (ec || !fs::is_directory(resolved, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", root, " is not an existing folder"));
  }
  return resolved.string();
}

// "--data_root /srv/data", "--data_root /srv/data or --checkpoint_root /srv/ckpt".
std::string RootsText(Use use, const PathRoots& roots) {
  const std::string data = absl::StrCat("--data_root ", roots.data);
  const std::string checkpoint = absl::StrCat("--checkpoint_root ", roots.checkpoint);
  switch (use) {
    case Use::kData:
      return data;
    case Use::kCheckpoint:
      return checkpoint;
    case Use::kDataOrCheckpoint:
      if (roots.data.empty()) return checkpoint;
      if (roots.checkpoint.empty()) return data;
      return absl::StrCat(data, " or ", checkpoint);
  }
  return "";
}

// `resolved_out`, when given, receives the path resolved when a root confines it.
absl::Status CheckPath(const std::string& path, absl::string_view field, Use use,
                       const PathRoots& roots, std::string* resolved_out = nullptr) {
  if (path.empty()) return absl::OkStatus();
  std::vector<const std::string*> allowed;
  if (use != Use::kCheckpoint) allowed.push_back(&roots.data);
  if (use != Use::kData) allowed.push_back(&roots.checkpoint);
  for (const std::string* root : allowed) {
    if (root->empty()) return absl::OkStatus();  // one unconfined root admits it
  }
  ASSIGN_OR_RETURN(std::string resolved, ResolvePathForRoot(path, field));
  for (const std::string* root : allowed) {
    if (IsUnder(resolved, *root)) {
      if (resolved_out != nullptr) *resolved_out = resolved;
      return absl::OkStatus();
    }
  }
  const std::string resolves =
      resolved == fs::path(path).lexically_normal().string()
          ? ""
          : absl::StrCat(" (it resolves to ", resolved, ")");
  return absl::PermissionDeniedError(absl::StrCat(field, ": ", path, resolves,
                                                  " is outside ", RootsText(use, roots)));
}

// <at>.input, <at>.label; <at>.path (a Megatron prefix: its two files); `at` is data or
// eval.data. With `resolved` (which may be `data` itself), each path a root confines is set there
// in its resolved form (a Megatron prefix too, the folder resolved: the prefix names no file).
absl::Status CheckDataPaths(const v1::Data& data, const std::string& at, const PathRoots& roots,
                            v1::Data* resolved = nullptr) {
  RETURN_IF_ERROR(CheckPath(data.input(), at + ".input", Use::kData, roots,
                            resolved != nullptr ? resolved->mutable_input() : nullptr));
  RETURN_IF_ERROR(CheckPath(data.label(), at + ".label", Use::kData, roots,
                            resolved != nullptr ? resolved->mutable_label() : nullptr));
  if (data.path().empty()) return absl::OkStatus();
  std::string* path_out = resolved != nullptr ? resolved->mutable_path() : nullptr;
  if (data.format() != "megatron") {
    return CheckPath(data.path(), at + ".path", Use::kData, roots, path_out);
  }
  for (const char* suffix : {".bin", ".idx"}) {
    RETURN_IF_ERROR(CheckPath(absl::StrCat(data.path(), suffix), at + ".path", Use::kData, roots));
  }
  if (path_out == nullptr) return absl::OkStatus();
  return CheckPath(data.path(), at + ".path", Use::kData, roots, path_out);
}

// CheckSpecPaths, and with `resolved` (which may be `spec` itself) ConfineSpecPaths.
absl::Status SpecPaths(const v1::JobSpec& spec, const PathRoots& roots, v1::JobSpec* resolved) {
  RETURN_IF_ERROR(CheckDataPaths(spec.data(), "data", roots,
                                 resolved != nullptr ? resolved->mutable_data() : nullptr));
  RETURN_IF_ERROR(CheckDataPaths(
      spec.eval().data(), "eval.data", roots,
      resolved != nullptr && spec.has_eval() ? resolved->mutable_eval()->mutable_data() : nullptr));
  RETURN_IF_ERROR(CheckPath(spec.init_from(), "init_from", Use::kDataOrCheckpoint, roots,
                            resolved != nullptr ? resolved->mutable_init_from() : nullptr));
  return CheckPath(spec.checkpoint().dir(), "checkpoint.dir", Use::kCheckpoint, roots,
                   resolved != nullptr && spec.has_checkpoint()
                       ? resolved->mutable_checkpoint()->mutable_dir()
                       : nullptr);
}

}  // namespace

absl::StatusOr<PathRoots> PathRoots::Resolve(const std::string& data_root,
                                             const std::string& checkpoint_root) {
  PathRoots roots;
  ASSIGN_OR_RETURN(roots.data, ResolveRoot(data_root, "data_root"));
  ASSIGN_OR_RETURN(roots.checkpoint, ResolveRoot(checkpoint_root, "checkpoint_root"));
  return roots;
}

absl::StatusOr<std::string> ResolvePathForRoot(const std::string& path, absl::string_view field) {
  if (!fs::path(path).is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", path, "\" must be an absolute path"));
  }
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, ": cannot resolve: ", ec.message()));
  }
  return resolved.string();
}

bool IsUnder(const std::string& path, const std::string& root) {
  const fs::path p(path);
  const fs::path r(root);
  auto pi = p.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri, ++pi) {
    if (ri->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *ri) return false;
  }
  return true;
}

absl::Status CheckSpecPaths(const v1::JobSpec& spec, const PathRoots& roots) {
  return SpecPaths(spec, roots, nullptr);
}

absl::Status ConfineSpecPaths(v1::JobSpec* spec, const PathRoots& roots) {
  return SpecPaths(*spec, roots, spec);
}

absl::Status CheckDataFile(const std::string& path, absl::string_view field,
                           const PathRoots& roots) {
  return CheckPath(path, field, Use::kData, roots);
}

absl::Status CheckProgramPaths(const v1::Program& program, const PathRoots& roots) {
  RETURN_IF_ERROR(CheckDataPaths(program.data(), "data", roots));
  RETURN_IF_ERROR(CheckDataPaths(program.eval().data(), "eval.data", roots));
  RETURN_IF_ERROR(CheckPath(program.init_from(), "init_from", Use::kDataOrCheckpoint, roots));
  RETURN_IF_ERROR(CheckPath(program.load_checkpoint(), "the checkpoint to load",
                            Use::kDataOrCheckpoint, roots));
  return CheckPath(program.checkpoint_dir(), "checkpoint.dir", Use::kCheckpoint, roots);
}

}  // namespace weft
