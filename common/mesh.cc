#include "common/mesh.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace {

std::vector<int> Canonical(std::vector<int> dims) {
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

}  // namespace

Mesh::Mesh() : shape_{1}, dim_names_{"d0"}, size_(1) {}

absl::StatusOr<Mesh> Mesh::Create(std::vector<int64_t> shape,
                                  std::vector<std::string> dim_names) {
  if (shape.empty()) return absl::InvalidArgumentError("mesh: shape is empty");
  if (dim_names.empty()) {
    for (size_t i = 0; i < shape.size(); ++i) dim_names.push_back(absl::StrCat("d", i));
  }
  if (dim_names.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh: ", shape.size(), " dims but ",
                                                   dim_names.size(), " dim names"));
  }
  std::set<std::string> seen;
  int64_t size = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh: dim ", dim_names[i], " has size ", shape[i]));
    }
    if (!seen.insert(dim_names[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("mesh: dim name ", dim_names[i], " repeats"));
    }
    size *= shape[i];
    if (size > (int64_t{1} << 30)) return absl::InvalidArgumentError("mesh: too many ranks");
  }
  Mesh mesh;
  mesh.shape_ = std::move(shape);
  mesh.dim_names_ = std::move(dim_names);
  mesh.size_ = static_cast<int>(size);
  return mesh;
}

absl::StatusOr<Mesh> Mesh::FromProto(const v1::Mesh& proto) {
  return Create(std::vector<int64_t>(proto.shape().begin(), proto.shape().end()),
                std::vector<std::string>(proto.dim_names().begin(), proto.dim_names().end()));
}

v1::Mesh Mesh::ToProto() const {
  v1::Mesh proto;
  for (int64_t s : shape_) proto.add_shape(s);
  for (const std::string& n : dim_names_) proto.add_dim_names(n);
  return proto;
}

std::optional<int> Mesh::FindDim(absl::string_view name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dim_names_[d] == name) return d;
  }
  return std::nullopt;
}

std::vector<int64_t> Mesh::Coordinate(int rank) const {
  std::vector<int64_t> coord(shape_.size());
  int64_t rest = rank;
  for (int d = ndim() - 1; d >= 0; --d) {
    coord[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  return coord;
}

int Mesh::RankAt(const std::vector<int64_t>& coordinate) const {
  int64_t rank = 0;
  for (int d = 0; d < ndim(); ++d) rank = rank * shape_[d] + coordinate[d];
  return static_cast<int>(rank);
}

std::vector<int> Mesh::GroupRanks(int rank, std::vector<int> dims) const {
  dims = Canonical(std::move(dims));
  std::vector<int64_t> coord = Coordinate(rank);
  for (int d : dims) coord[d] = 0;
  std::vector<int> ranks;
  // Odometer over the group dims, last dim fastest (row-major).
  while (true) {
    ranks.push_back(RankAt(coord));
    int i = static_cast<int>(dims.size()) - 1;
    for (; i >= 0; --i) {
      if (++coord[dims[i]] < shape_[dims[i]]) break;
      coord[dims[i]] = 0;
    }
    if (i < 0) break;
  }
  return ranks;
}

std::vector<std::vector<int>> Mesh::AllGroups(std::vector<int> dims) const {
  dims = Canonical(std::move(dims));
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < size_; ++r) {
    std::vector<int64_t> coord = Coordinate(r);
    bool leader = true;
    for (int d : dims) leader = leader && coord[d] == 0;
    if (leader) groups.push_back(GroupRanks(r, dims));
  }
  return groups;
}

int Mesh::GroupIndex(int rank, std::vector<int> dims) const {
  dims = Canonical(std::move(dims));
  std::vector<int64_t> coord = Coordinate(rank);
  // Row-major index over the dims not in the group: the order of the groups' leaders.
  int64_t index = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (std::binary_search(dims.begin(), dims.end(), d)) continue;
    index = index * shape_[d] + coord[d];
  }
  return static_cast<int>(index);
}

std::string Mesh::DimsLabel(std::vector<int> dims) const {
  dims = Canonical(std::move(dims));
  std::vector<std::string> names;
  for (int d : dims) names.push_back(dim_names_[d]);
  return absl::StrJoin(names, ",");
}

std::string Mesh::ToString() const {
  return absl::StrCat("[", absl::StrJoin(shape_, ","), "](", absl::StrJoin(dim_names_, ","), ")");
}

}  // namespace weft
