#include "common/jobspec/placements.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/dist_attr.h"
#include "common/jobspec/field_path.h"

namespace weft {

absl::Status ValidatePlacements(const PlacementList& placements,
                                const v1::Mesh& mesh, int rank, const std::string& path,
                                absl::string_view what) {
  if (placements.size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", placements.size(), " placement(s) ", FormatPlacements(placements),
        " for a mesh of ", mesh.shape_size(), " dim(s); give one per mesh dim (",
        absl::StrJoin(mesh.dim_names(), ", "), ")"));
  }
  for (int i = 0; i < placements.size(); ++i) {
    const v1::Placement& p = placements[i];
    const std::string item = absl::StrCat(path, "[", i, "]");
    switch (p.kind()) {
      case v1::Placement::REPLICATE:
        break;
      case v1::Placement::PARTIAL:
        if (p.reduce() == v1::Placement::MAX) {
          return absl::InvalidArgumentError(absl::StrCat(
              item, ": Partial(max) is the planner's own (the cross-entropy's row maximum); a "
                    "spec places tensors as Replicate(), Shard(axis), Partial(sum) or "
                    "Partial(avg)"));
        }
        break;
      case v1::Placement::SHARD:
        if (p.axis() < -rank || p.axis() >= rank) {
          return absl::InvalidArgumentError(absl::StrCat(
              item, ": ", FormatPlacement(p), " on mesh dim ", mesh.dim_names(i),
              " is out of range for ", what, " of rank ", rank, " (axes ", -rank, "..", rank - 1,
              ")"));
        }
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(item, ": placement kind is unspecified"));
    }
  }
  return absl::OkStatus();
}

std::vector<AxisSplit> AxisSplits(const PlacementList& placements,
                                  const v1::Mesh& mesh, int rank) {
  std::vector<AxisSplit> splits(rank);
  for (int i = 0; i < placements.size(); ++i) {
    const v1::Placement& p = placements[i];
    if (p.kind() != v1::Placement::SHARD) continue;
    const int axis = p.axis() < 0 ? p.axis() + rank : p.axis();
    if (axis < 0 || axis >= rank) continue;
    splits[axis].shards *= mesh.shape(i);
    splits[axis].dims.push_back(mesh.dim_names(i));
  }
  return splits;
}

absl::Status CheckNoEmptyShards(const PlacementList& placements,
                                const v1::Mesh& mesh, const std::vector<int64_t>& shape,
                                const std::string& path, absl::string_view what) {
  const std::vector<AxisSplit> splits =
      AxisSplits(placements, mesh, static_cast<int>(shape.size()));
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (splits[axis].shards <= shape[axis]) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", FormatPlacements(placements), " splits axis ", axis, " of ", what, " ",
        ShapeString(shape), " (length ", shape[axis], ") into ", splits[axis].shards,
        " shards over mesh dim(s) ", absl::StrJoin(splits[axis].dims, ", "),
        "; some shards would be empty"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Placement> ParsePlacement(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid placement \"", original,
        "\"; expected Replicate(), Shard(axis), Partial(), Partial(sum) or Partial(avg)"));
  };
  const size_t open = text.find('(');
  if (text.empty() || open == absl::string_view::npos || text.back() != ')') return invalid();
  const absl::string_view kind = absl::StripAsciiWhitespace(text.substr(0, open));
  const absl::string_view arg =
      absl::StripAsciiWhitespace(text.substr(open + 1, text.size() - open - 2));
  v1::Placement p;
  if (kind == "Replicate") {
    if (!arg.empty()) return invalid();
    p.set_kind(v1::Placement::REPLICATE);
  } else if (kind == "Shard") {
    int32_t axis;
    if (!absl::SimpleAtoi(arg, &axis)) return invalid();
    p.set_kind(v1::Placement::SHARD);
    p.set_axis(axis);
  } else if (kind == "Partial") {
    p.set_kind(v1::Placement::PARTIAL);
    if (arg.empty() || arg == "sum") {
      p.set_reduce(v1::Placement::SUM);
    } else if (arg == "avg") {
      p.set_reduce(v1::Placement::AVG);
    } else {
      return invalid();
    }
  } else {
    return invalid();
  }
  return p;
}

std::string FormatPlacement(const v1::Placement& placement) {
  // The spelling is dist_attr's; only a proto can lack a kind.
  absl::StatusOr<weft::Placement> p = weft::Placement::FromProto(placement);
  return p.ok() ? p->ToString() : "Unspecified()";
}

std::string FormatPlacements(const google::protobuf::RepeatedPtrField<v1::Placement>& placements) {
  std::vector<std::string> parts;
  for (const v1::Placement& p : placements) parts.push_back(FormatPlacement(p));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

}  // namespace weft
