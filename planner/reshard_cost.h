// The cost of a reshard move: the bytes one rank sends to change a tensor's placement on one mesh
// dim. The one cost formula: lower's search for a reshard's cheapest sequence of moves and the
// SPMD pass's choice of strategies (which prices each input's move into a strategy) both price
// with it, so that the planner chooses placements by the same bytes it will lower them to.
//
// E.g.
//   OneDimMoveBytes(Placement::Partial(), Placement::Replicate(), /*k=*/4, /*local_bytes=*/1024);
//   // 1536: a ring all-reduce sends 2 (k - 1) / k of the piece
#ifndef WEFT_PLANNER_RESHARD_COST_H_
#define WEFT_PLANNER_RESHARD_COST_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/dist_attr.h"

namespace weft::planner {

// Bytes one rank sends to turn `from` into `to` on one mesh dim of size k, for a tensor whose
// local piece is local_bytes: the cost of the step lower makes of it. nullopt: Shard ->
// Partial, which goes through Replicate.
std::optional<double> OneDimMoveBytes(const Placement& from, const Placement& to, int64_t k,
                                      int64_t local_bytes);

// Bytes one rank sends for one move on mesh dim d of a tensor with global `shape` and elements of
// `element_bytes`, from `before` to `before.With(d, to)`; nullopt when the move is not a single
// legal step. A move on d that changes how an axis is split is legal only when no later mesh
// dim splits that axis (dist_attr.h nests the splits in mesh-dim order).
std::optional<double> MoveBytes(const DistAttr& before, int d, const Placement& to,
                                const std::vector<int64_t>& shape, int64_t element_bytes);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_RESHARD_COST_H_
