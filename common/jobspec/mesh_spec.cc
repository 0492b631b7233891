#include "common/jobspec/mesh_spec.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/field_path.h"

namespace weft {

absl::Status ValidateMesh(const v1::Mesh& mesh) {
  const std::vector<int64_t> shape(mesh.shape().begin(), mesh.shape().end());
  if (mesh.auto_parallel()) {
    return absl::InvalidArgumentError(
        "mesh.auto: a coordinator chooses the strategy when the job is submitted (weftctl plan "
        "--auto SPEC shows its choice offline); this spec has none yet");
  }
  if (mesh.shape_size() == 0) {
    return absl::InvalidArgumentError("mesh.shape: must list at least one dimension, e.g. [4]");
  }
  int64_t world = 1;
  for (int i = 0; i < mesh.shape_size(); ++i) {
    if (mesh.shape(i) <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh.shape[", i, "]: must be > 0, got ", mesh.shape(i)));
    }
    if (mesh.shape(i) > kMaxWorldSize || world * mesh.shape(i) > kMaxWorldSize) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.shape: ", ShapeString(shape),
                                                     " has more than ", kMaxWorldSize, " ranks"));
    }
    world *= mesh.shape(i);
  }
  if (mesh.dim_names_size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh.dim_names: ", mesh.dim_names_size(), " name(s) for ", mesh.shape_size(),
        " dimension(s) of shape ", ShapeString(shape)));
  }
  std::set<std::string> seen;
  for (int i = 0; i < mesh.dim_names_size(); ++i) {
    if (mesh.dim_names(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.dim_names[", i, "]: must not be empty"));
    }
    if (!seen.insert(mesh.dim_names(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.dim_names[", i, "]: duplicate name \"",
                                                     mesh.dim_names(i), "\""));
    }
  }
  return absl::OkStatus();
}

void DefaultMeshDimNames(v1::Mesh* mesh) {
  if (mesh->dim_names_size() == 0) {
    for (int i = 0; i < mesh->shape_size(); ++i) mesh->add_dim_names(absl::StrCat("d", i));
  }
}

std::string MeshDimList(const v1::Mesh& mesh) { return absl::StrJoin(mesh.dim_names(), ", "); }

int64_t WorldSize(const v1::JobSpec& spec) {
  int64_t world = 1;
  for (int64_t d : spec.mesh().shape()) {
    if (d <= 0 || d > kMaxWorldSize || world * d > kMaxWorldSize) return 0;
    world *= d;
  }
  return world;
}

}  // namespace weft
