#include "planner/reshard_cost.h"

namespace weft::planner {
namespace {

// True when a mesh dim after d splits `axis`: then d's split of that axis is not the innermost
// and cannot change without redoing the later one.
bool SplitLater(const DistAttr& attr, int d, int axis) {
  for (int d2 = d + 1; d2 < attr.mesh().ndim(); ++d2) {
    const Placement& p = attr.placement(d2);
    if (p.is_shard() && p.axis == axis && attr.mesh().dim_size(d2) > 1) return true;
  }
  return false;
}

}  // namespace

std::optional<double> OneDimMoveBytes(const Placement& from, const Placement& to, int64_t k,
                                      int64_t local_bytes) {
  if (from == to) return 0.0;
  const double n = static_cast<double>(local_bytes);
  const double frac = static_cast<double>(k - 1) / static_cast<double>(k);
  // Partial(max) only becomes Replicate (an all-reduce with max), and comes from Replicate.
  if (from.is_partial_max()) {
    return to.is_replicate() ? std::optional<double>(2.0 * frac * n) : std::nullopt;
  }
  if (to.is_partial_max()) return from.is_replicate() ? std::optional<double>(0.0) : std::nullopt;
  if (from.is_partial()) {
    if (to.is_replicate()) return 2.0 * frac * n;  // ring all-reduce
    if (to.is_shard()) return frac * n;            // reduce-scatter
    return 0.0;                                    // local scale
  }
  if (from.is_shard()) {
    if (to.is_replicate()) return static_cast<double>(k - 1) * n;  // all-gather
    if (to.is_shard()) return frac * n;                             // all-to-all
    return std::nullopt;  // Shard -> Partial goes through Replicate
  }
  return 0.0;  // Replicate -> Shard (slice) or Partial (scale): local
}

std::optional<double> MoveBytes(const DistAttr& before, int d, const Placement& to,
                                const std::vector<int64_t>& shape, int64_t element_bytes) {
  const Placement& c = before.placement(d);
  const int64_t k = before.mesh().dim_size(d);
  if (c == to || k == 1) return 0.0;
  if (c.is_shard() && SplitLater(before, d, c.axis)) return std::nullopt;
  if (to.is_shard() && SplitLater(before, d, to.axis)) return std::nullopt;
  return OneDimMoveBytes(c, to, k, element_bytes * before.MaxLocalElements(shape));
}

}  // namespace weft::planner
