// The spec's mesh block: its checks, its default dim names and the number of ranks it asks for.
//
// E.g.
//   RETURN_IF_ERROR(ValidateMesh(spec.mesh()));   // "mesh.shape[1]: must be > 0, got 0"
//   int64_t world = WorldSize(spec);               // 4 for shape [2, 2]
#ifndef WEFT_COMMON_JOBSPEC_MESH_SPEC_H_
#define WEFT_COMMON_JOBSPEC_MESH_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Far above any real cluster; keeps the product of the mesh shape from overflowing.
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// At least one dim, every dim > 0, at most kMaxWorldSize ranks, one unique non-empty name per dim.
absl::Status ValidateMesh(const v1::Mesh& mesh);

// d0, d1, ... when the mesh names no dim (part of ApplyJobSpecDefaults).
void DefaultMeshDimNames(v1::Mesh* mesh);

// "dp, mp": the mesh's dim names for messages.
std::string MeshDimList(const v1::Mesh& mesh);

// Number of ranks the spec's mesh needs (product of mesh.shape); 0 for a mesh ValidateMesh
// rejects for its size.
int64_t WorldSize(const v1::JobSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_MESH_SPEC_H_
