// Mesh: an N-d array of global ranks, row-major, with a name per dimension (DESIGN.md). Shape
// [2,4] names [dp,mp] holds ranks 0..7; rank 5 sits at coordinate (1,1).
//
// A group along a set of mesh dims is the ranks that differ from a given rank only along those
// dims; members are ordered row-major over those dims, so a member's index in the group equals
// its coordinate along a single group dim (= which shard it holds). Groups are enumerated in the
// order of their smallest rank, so every rank derives the same group ids.
//
// E.g.
//   ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create({2, 2}, {"dp", "mp"}));
//   mesh.GroupRanks(/*rank=*/3, {0});   // {1, 3}: the dp group of rank 3
//   mesh.AllGroups({0});                // {{0, 2}, {1, 3}}
//   mesh.GroupIndex(/*rank=*/3, {0});   // 1
#ifndef WEFT_COMMON_MESH_H_
#define WEFT_COMMON_MESH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

class Mesh {
 public:
  // A one-rank mesh with a single dim of size 1 named "d0".
  Mesh();

  // shape entries must be >= 1; dim_names must be unique, one per dim (empty: "d0", "d1", ...).
  static absl::StatusOr<Mesh> Create(std::vector<int64_t> shape,
                                     std::vector<std::string> dim_names);
  static absl::StatusOr<Mesh> FromProto(const v1::Mesh& proto);
  v1::Mesh ToProto() const;

  int ndim() const { return static_cast<int>(shape_.size()); }
  int size() const { return size_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  int64_t dim_size(int dim) const { return shape_[dim]; }
  const std::string& dim_name(int dim) const { return dim_names_[dim]; }
  std::optional<int> FindDim(absl::string_view name) const;

  // Row-major coordinate of rank, one entry per mesh dim. rank must be in [0, size).
  std::vector<int64_t> Coordinate(int rank) const;
  int RankAt(const std::vector<int64_t>& coordinate) const;

  // Ranks that differ from `rank` only along `dims` (any order, deduplicated), row-major over
  // those dims. Empty dims: {rank}.
  std::vector<int> GroupRanks(int rank, std::vector<int> dims) const;
  // Every group along dims, ordered by smallest member.
  std::vector<std::vector<int>> AllGroups(std::vector<int> dims) const;
  // Index of rank's group in AllGroups(dims).
  int GroupIndex(int rank, std::vector<int> dims) const;
  // "dp" or "dp,mp": the names of dims, for messages and CommGroup.mesh_dims.
  std::string DimsLabel(std::vector<int> dims) const;

  // "[2,2](dp,mp)".
  std::string ToString() const;

  bool operator==(const Mesh& other) const {
    return shape_ == other.shape_ && dim_names_ == other.dim_names_;
  }
  bool operator!=(const Mesh& other) const { return !(*this == other); }

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> dim_names_;
  int size_ = 1;
};

}  // namespace weft

#endif  // WEFT_COMMON_MESH_H_
