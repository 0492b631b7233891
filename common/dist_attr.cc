#include "common/dist_attr.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {

absl::StatusOr<Placement> Placement::FromProto(const v1::Placement& proto) {
  switch (proto.kind()) {
    case v1::Placement::REPLICATE:
      return Replicate();
    case v1::Placement::SHARD:
      return Shard(proto.axis());
    case v1::Placement::PARTIAL:
      switch (proto.reduce()) {
        case v1::Placement::AVG:
          return Partial(Reduce::kAvg);
        case v1::Placement::MAX:
          return Partial(Reduce::kMax);
        default:
          return Partial(Reduce::kSum);
      }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("placement kind ", static_cast<int>(proto.kind()), " is not set"));
  }
}

v1::Placement Placement::ToProto() const {
  v1::Placement proto;
  switch (kind) {
    case Kind::kReplicate:
      proto.set_kind(v1::Placement::REPLICATE);
      break;
    case Kind::kShard:
      proto.set_kind(v1::Placement::SHARD);
      proto.set_axis(axis);
      break;
    case Kind::kPartial:
      proto.set_kind(v1::Placement::PARTIAL);
      proto.set_reduce(reduce == Reduce::kAvg   ? v1::Placement::AVG
                       : reduce == Reduce::kMax ? v1::Placement::MAX
                                                : v1::Placement::SUM);
      break;
  }
  return proto;
}

std::string Placement::ToString() const {
  switch (kind) {
    case Kind::kShard:
      return absl::StrCat("Shard(", axis, ")");
    case Kind::kPartial:
      return reduce == Reduce::kAvg   ? "Partial(avg)"
             : reduce == Reduce::kMax ? "Partial(max)"
                                      : "Partial(sum)";
    default:
      return "Replicate()";
  }
}

std::string FormatPlacements(const std::vector<Placement>& placements) {
  return absl::StrCat("[",
                      absl::StrJoin(placements, ", ",
                                    [](std::string* out, const Placement& p) {
                                      out->append(p.ToString());
                                    }),
                      "]");
}

std::vector<int64_t> SplitSizes(int64_t n, int64_t k) {
  std::vector<int64_t> sizes(k, n / k);
  sizes.back() += n % k;
  return sizes;
}

std::pair<int64_t, int64_t> ShardRange(int64_t n, int64_t k, int64_t i) {
  int64_t base = n / k;
  return {i * base, i == k - 1 ? base + n % k : base};
}

absl::StatusOr<DistAttr> DistAttr::Create(Mesh mesh, std::vector<Placement> placements,
                                          int tensor_ndim) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placements ", FormatPlacements(placements), " has ", placements.size(),
                     " entries for mesh ", mesh.ToString(), " of ", mesh.ndim(), " dims"));
  }
  for (Placement& p : placements) {
    if (!p.is_shard()) continue;
    if (p.axis < -tensor_ndim || p.axis >= tensor_ndim) {
      return absl::InvalidArgumentError(absl::StrCat("placements ", FormatPlacements(placements),
                                                     ": axis ", p.axis,
                                                     " out of range for a tensor of rank ",
                                                     tensor_ndim));
    }
    if (p.axis < 0) p.axis += tensor_ndim;
  }
  DistAttr attr;
  attr.mesh_ = std::move(mesh);
  attr.placements_ = std::move(placements);
  return attr;
}

DistAttr DistAttr::Replicated(const Mesh& mesh) {
  DistAttr attr;
  attr.mesh_ = mesh;
  attr.placements_.assign(mesh.ndim(), Placement::Replicate());
  return attr;
}

DistAttr DistAttr::With(int mesh_dim, const Placement& placement) const {
  DistAttr attr = *this;
  attr.placements_[mesh_dim] = placement;
  return attr;
}

bool DistAttr::IsReplicated() const {
  for (const Placement& p : placements_) {
    if (!p.is_replicate()) return false;
  }
  return true;
}

bool DistAttr::HasPartial() const {
  for (const Placement& p : placements_) {
    if (p.is_partial()) return true;
  }
  return false;
}

v1::TensorBox DistAttr::Box(const std::vector<int64_t>& global_shape, int rank) const {
  std::vector<int64_t> offsets(global_shape.size(), 0);
  std::vector<int64_t> lengths = global_shape;
  std::vector<int64_t> coord = mesh_.Coordinate(rank);
  for (int d = 0; d < mesh_.ndim(); ++d) {
    const Placement& p = placements_[d];
    if (!p.is_shard()) continue;
    auto [off, len] = ShardRange(lengths[p.axis], mesh_.dim_size(d), coord[d]);
    offsets[p.axis] += off;
    lengths[p.axis] = len;
  }
  v1::TensorBox box;
  for (size_t i = 0; i < global_shape.size(); ++i) {
    box.add_offsets(offsets[i]);
    box.add_lengths(lengths[i]);
  }
  return box;
}

std::vector<int64_t> DistAttr::LocalShape(const std::vector<int64_t>& global_shape,
                                          int rank) const {
  v1::TensorBox box = Box(global_shape, rank);
  return std::vector<int64_t>(box.lengths().begin(), box.lengths().end());
}

int64_t DistAttr::MaxLocalElements(const std::vector<int64_t>& global_shape) const {
  // The last rank holds the last piece along every sharded dim: the largest one.
  int64_t n = 1;
  for (int64_t len : LocalShape(global_shape, mesh_.size() - 1)) n *= len;
  return n;
}

}  // namespace weft
