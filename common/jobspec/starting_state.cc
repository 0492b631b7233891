#include "common/jobspec/starting_state.h"

#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint.h"
#include "common/dtype.h"
#include "common/jobspec/field_path.h"
#include "common/safetensors.h"
#include "common/status.h"

namespace weft {
namespace {

// INVALID_ARGUMENT whatever the reader's code was: to SubmitJob, a spec that names a missing or
// unreadable file is an invalid argument.
absl::Status AsInvalid(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(context, ": ", status.message()));
}

absl::Status CheckSafetensors(const std::string& file, const std::vector<ParameterShape>& params) {
  absl::StatusOr<SafetensorsFile> st = SafetensorsFile::Open(file);
  if (!st.ok()) return AsInvalid(st.status(), "init_from");
  for (const ParameterShape& p : params) {
    const std::optional<std::string> stored = st->ParameterName(p.name);
    const SafetensorsFile::Entry* e = stored ? st->Find(*stored) : nullptr;
    if (e == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": has no tensor ",
                                                     p.name, " (shape ", ShapeString(p.shape),
                                                     ") that the model needs"));
    }
    absl::StatusOr<v1::DType> dtype = DTypeFromSafetensors(e->dtype);
    if (!dtype.ok() || !ReadableAs(*dtype, p.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": ", p.name,
                                                     " has dtype ", e->dtype, "; expected ",
                                                     SafetensorsDTypeName(p.dtype)));
    }
    if (e->shape != p.shape && e->shape != p.file_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("init_from: ", file, ": ", p.name, " has shape ", ShapeString(e->shape),
                       ", the model needs ",
                       ShapeString(p.file_shape.empty() ? p.shape : p.file_shape)));
    }
  }
  return absl::OkStatus();
}

// The checkpoint's tensors cover what the model needs with the same shapes.
absl::Status CheckCheckpointTensors(const checkpoint::Index& index, const std::string& folder,
                                    const std::vector<ParameterShape>& needed,
                                    const std::string& field) {
  for (const ParameterShape& p : needed) {
    auto it = index.tensors.find(p.name);
    if (it == index.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": checkpoint ", folder,
                                                     " has no tensor ", p.name, " (shape ",
                                                     ShapeString(p.shape),
                                                     ") that the job needs"));
    }
    if (it->second.global_shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": checkpoint ", folder, ": ", p.name, " has shape ",
          ShapeString(it->second.global_shape), ", the model needs ", ShapeString(p.shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpoint(const std::string& folder, const std::vector<ParameterShape>& needed,
                             const std::string& field) {
  absl::StatusOr<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::Open(folder);
  if (!reader.ok()) return AsInvalid(reader.status(), field);
  return CheckCheckpointTensors(reader->index(), folder, needed, field);
}

}  // namespace

std::vector<std::string> OptimizerStateNames(const std::string& optimizer) {
  if (optimizer == "adamw") return {"m", "v"};
  return {};
}

std::string CheckpointStateName(const std::string& param, const std::string& optimizer,
                                const std::string& state) {
  return absl::StrCat(param, "/", optimizer, ".", state);
}

absl::StatusOr<std::string> InitFromCheckpointFolder(const std::string& init_from) {
  std::error_code ec;
  if (!std::filesystem::is_directory(init_from, ec)) return std::string();
  absl::StatusOr<std::string> latest = checkpoint::ResolveStepDir(init_from);
  if (absl::IsNotFound(latest.status())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "init_from: ", init_from, " is a folder without a committed checkpoint (no step-<N> "
        "folder with a valid index.json)"));
  }
  if (!latest.ok()) return AsInvalid(latest.status(), "init_from");
  return *latest;
}

absl::Status CheckStartingState(const v1::JobSpec& spec,
                                const std::vector<ParameterShape>& params) {
  if (spec.train().resume()) {
    absl::StatusOr<std::string> latest = checkpoint::FindLatestReadOnly(spec.checkpoint().dir());
    if (!latest.ok()) return AsInvalid(latest.status(), "train.resume");
    std::vector<ParameterShape> needed = params;
    for (const ParameterShape& p : params) {
      for (const std::string& state : OptimizerStateNames(spec.optimizer().type())) {
        needed.push_back({CheckpointStateName(p.name, spec.optimizer().type(), state), p.shape,
                          p.dtype});
      }
    }
    return CheckCheckpoint(*latest, needed, "train.resume");
  }
  if (spec.init_from().empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string folder, InitFromCheckpointFolder(spec.init_from()));
  if (!folder.empty()) return CheckCheckpoint(folder, params, "init_from");
  return CheckSafetensors(spec.init_from(), params);
}

absl::StatusOr<CheckpointLoad> ResolveCheckpointLoad(const v1::JobSpec& spec) {
  CheckpointLoad load;
  if (spec.train().resume()) {
    if (spec.checkpoint().dir().empty()) {
      return absl::InvalidArgumentError("train.resume: needs checkpoint.dir");
    }
    absl::StatusOr<std::string> latest = checkpoint::FindLatest(spec.checkpoint().dir());
    if (!latest.ok()) return Annotate(latest.status(), "train.resume");
    absl::StatusOr<checkpoint::CheckpointReader> reader =
        checkpoint::CheckpointReader::Open(*latest);
    if (!reader.ok()) return Annotate(reader.status(), "train.resume");
    load.step = reader->index().step;
    load.step_dir = *latest;
    load.optimizer_states = true;
    return load;
  }
  if (!spec.init_from().empty()) {
    ASSIGN_OR_RETURN(load.step_dir, InitFromCheckpointFolder(spec.init_from()));
  }
  return load;
}

}  // namespace weft
