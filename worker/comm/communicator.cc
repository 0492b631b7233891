#include "worker/comm/communicator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {

std::string GroupName(const v1::CommGroup& group) {
  std::string name = absl::StrCat("group ", group.id());
  if (!group.mesh_dims().empty()) absl::StrAppend(&name, " (", group.mesh_dims(), ")");
  absl::StrAppend(&name, " ranks [", absl::StrJoin(group.ranks(), ","), "]");
  return name;
}

}  // namespace weft
