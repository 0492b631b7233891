#include "worker/comm/communicator.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {

std::string GroupName(const v1::CommGroup& group) {
  std::string name = absl::StrCat("group ", group.id());
  if (!group.mesh_dims().empty()) absl::StrAppend(&name, " (", group.mesh_dims(), ")");
  absl::StrAppend(&name, " ranks [", absl::StrJoin(group.ranks(), ","), "]");
  return name;
}

int64_t SumCounts(absl::Span<const int64_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

absl::StatusOr<int> MemberIndex(const v1::CommGroup& group, int global_rank) {
  const auto& ranks = group.ranks();
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", global_rank, " is not a member of ", GroupName(group)));
  }
  for (int i = 0; i < ranks.size(); ++i) {
    if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(GroupName(group), ": rank ", ranks[i], " appears more than once"));
    }
  }
  return static_cast<int>(it - ranks.begin());
}

}  // namespace weft
