#include "worker/comm/communicator.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/status.h"

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

void* ElementAt(void* base, int64_t index, v1::DType dtype) {
  return static_cast<char*>(base) + index * DTypeSize(dtype);
}
const void* ElementAt(const void* base, int64_t index, v1::DType dtype) {
  return static_cast<const char*>(base) + index * DTypeSize(dtype);
}

absl::Status CheckCounts(const Communicator& comm, const char* op,
                         absl::Span<const int64_t> counts) {
  const std::string& name = comm.name();
  const int size = comm.size();
  if (counts.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " on ", name, ": ", counts.size(), " counts for ", size, " members"));
  }
  for (int64_t c : counts) {
    if (c < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, " on ", name, ": negative count ", c));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPeer(const Communicator& comm, const char* op, int peer, uint32_t tag) {
  const int rank = comm.rank();
  const int size = comm.size();
  if (peer < 0 || peer >= size || peer == rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, " (tag ", tag, ") on ", comm.name(),
                                                   ": bad peer ", peer, " (this member is ", rank,
                                                   " of ", size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(const Communicator& comm, const char* op, v1::DType dtype) {
  // proto3 enums hold any int: a value from a newer program, or garbage, must not be read as f32.
  if (!v1::DType_IsValid(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(op, " on ", comm.name(), ": unknown dtype ",
                                                   static_cast<int>(dtype),
                                                   " (expected f32, bf16, i32 or i64)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReduce(const Communicator& comm, const char* op, v1::DType dtype,
                         ReduceOp reduce) {
  RETURN_IF_ERROR(CheckDType(comm, op, dtype));
  if (reduce == ReduceOp::kAvg && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on ", comm.name(), ": ", ReduceOpName(reduce), " of ", DTypeName(dtype),
        " is not supported (integer reductions are exact sums; average in a float type)"));
  }
  return absl::OkStatus();
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
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
