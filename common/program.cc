#include "common/program.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mesh.h"
#include "common/status.h"

namespace weft {

absl::Status ResolveGroupRanks(v1::Program* program) {
  bool any = false;
  for (const v1::CommGroup& group : program->groups()) any = any || group.ranks_size() == 0;
  if (!any) return absl::OkStatus();
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::FromProto(program->mesh()));
  if (program->rank() < 0 || program->rank() >= mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", program->rank(), " is not in mesh ",
                                                   mesh.ToString()));
  }
  for (v1::CommGroup& group : *program->mutable_groups()) {
    if (group.ranks_size() > 0) continue;
    if (group.dims_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", group.id(), " gives neither ranks nor mesh dims"));
    }
    std::vector<int> dims;
    for (int d : group.dims()) {
      if (d < 0 || d >= mesh.ndim()) {
        return absl::InvalidArgumentError(absl::StrCat("group ", group.id(), ": mesh dim ", d,
                                                       " is not in mesh ", mesh.ToString()));
      }
      dims.push_back(d);
    }
    for (int r : mesh.GroupRanks(program->rank(), dims)) group.add_ranks(r);
  }
  return absl::OkStatus();
}

}  // namespace weft
