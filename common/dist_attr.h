// Placement and DistAttr: how a global tensor lies on a Mesh (DESIGN.md vocabulary).
//
// Placement is the one canonical representation (one per mesh dim): Replicate, Shard(axis) or
// Partial(sum|avg|max). A DistAttr is (mesh, placements) with shard axes normalized to be
// non-negative for the tensor's rank. Shards split an axis by Paddle's rule: N/K each, the LAST
// shard N/K + N%K. Several mesh dims sharding the same axis split it in mesh-dim order (the
// first dim outermost).
//
// E.g.
//   ASSIGN_OR_RETURN(DistAttr attr, DistAttr::Create(mesh /*[4](dp)*/, {Placement::Shard(-2)},
//                                                    /*tensor_ndim=*/2));
//   attr.LocalShape({10, 3}, /*rank=*/3);   // {4, 3}: pieces are 2, 2, 2, 4
//   attr.Box({10, 3}, /*rank=*/3);          // offsets {6, 0}, lengths {4, 3}
#ifndef WEFT_COMMON_DIST_ATTR_H_
#define WEFT_COMMON_DIST_ATTR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mesh.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft {

struct Placement {
  enum class Kind { kReplicate, kShard, kPartial };
  // kMax: planner-internal, the row maximum of vocabulary-parallel logits (never in a spec);
  // it only becomes Replicate (an all-reduce with max) and comes from Replicate for free.
  enum class Reduce { kSum, kAvg, kMax };

  Kind kind = Kind::kReplicate;
  int axis = 0;                  // kShard only; negative counts from the end until normalized
  Reduce reduce = Reduce::kSum;  // kPartial only

  static Placement Replicate() { return Placement{}; }
  static Placement Shard(int axis) { return Placement{Kind::kShard, axis, Reduce::kSum}; }
  static Placement Partial(Reduce reduce = Reduce::kSum) {
    return Placement{Kind::kPartial, 0, reduce};
  }

  bool is_replicate() const { return kind == Kind::kReplicate; }
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_partial() const { return kind == Kind::kPartial; }
  bool is_partial_max() const { return is_partial() && reduce == Reduce::kMax; }

  // KIND_UNSPECIFIED is an error.
  static absl::StatusOr<Placement> FromProto(const v1::Placement& proto);
  v1::Placement ToProto() const;
  // "Replicate()", "Shard(1)", "Partial(sum)": the spelling of spec YAML ("Partial(max)" too).
  std::string ToString() const;

  bool operator==(const Placement& o) const {
    if (kind != o.kind) return false;
    if (kind == Kind::kShard) return axis == o.axis;
    if (kind == Kind::kPartial) return reduce == o.reduce;
    return true;
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }
};

std::string FormatPlacements(const std::vector<Placement>& placements);  // "[Shard(0), Replicate()]"

// The lengths of the k pieces of an axis of length n: n/k each, the last n/k + n%k.
std::vector<int64_t> SplitSizes(int64_t n, int64_t k);
// {offset, length} of piece i of SplitSizes(n, k).
std::pair<int64_t, int64_t> ShardRange(int64_t n, int64_t k, int64_t i);

class DistAttr {
 public:
  // Replicated on the default one-rank mesh.
  DistAttr() = default;

  // One placement per mesh dim; shard axes must lie in [-tensor_ndim, tensor_ndim) and are
  // normalized to be non-negative.
  static absl::StatusOr<DistAttr> Create(Mesh mesh, std::vector<Placement> placements,
                                         int tensor_ndim);
  static DistAttr Replicated(const Mesh& mesh);

  const Mesh& mesh() const { return mesh_; }
  const std::vector<Placement>& placements() const { return placements_; }
  const Placement& placement(int mesh_dim) const { return placements_[mesh_dim]; }
  // The same attr with one mesh dim's placement replaced (axis must already be normalized).
  DistAttr With(int mesh_dim, const Placement& placement) const;

  bool IsReplicated() const;
  bool HasPartial() const;

  // This rank's region of a tensor with global_shape (Partial/Replicate dims do not split).
  v1::TensorBox Box(const std::vector<int64_t>& global_shape, int rank) const;
  std::vector<int64_t> LocalShape(const std::vector<int64_t>& global_shape, int rank) const;
  // Largest local element count over all ranks (the uneven last shard), for costs.
  int64_t MaxLocalElements(const std::vector<int64_t>& global_shape) const;

  std::string ToString() const { return FormatPlacements(placements_); }

  bool operator==(const DistAttr& o) const {
    return mesh_ == o.mesh_ && placements_ == o.placements_;
  }
  bool operator!=(const DistAttr& o) const { return !(*this == o); }

 private:
  Mesh mesh_;
  std::vector<Placement> placements_{Placement::Replicate()};
};

}  // namespace weft

#endif  // WEFT_COMMON_DIST_ATTR_H_
