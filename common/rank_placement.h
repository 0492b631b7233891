// Topology-aware rank placement as a pure function: which slot (a worker, on a host) each of a
// job's ranks takes, so that the mesh's innermost dims stay inside a host and the outer ones span
// hosts, as Megatron keeps tensor parallelism inside a node. The scheduler places jobs with it
// (coordinator/scheduler.h PlaceRanks); the auto-parallel search prices a candidate mesh's groups
// by the hosts it gives them (planner/cost/search.h).
//
// The largest block of innermost dims (a suffix of the mesh: all of [dp, mp], then [mp], then
// none) that the hosts can hold whole, each host taking a multiple of it, decides; hosts are taken
// fullest first (ties in the order of their first slot), and their slots in order.
//
// E.g. hosts a a a b b b as slots a1 b1 a2 b2 a3 b3 (registration order), mesh [2, 2]:
//   PlaceRanksOnSlots({2, 2}, {"a", "b", "a", "b", "a", "b"}) -> {0, 2, 1, 3}: a1 a2 b1 b2.
#ifndef WEFT_COMMON_RANK_PLACEMENT_H_
#define WEFT_COMMON_RANK_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace weft {

// mesh_shape: outermost dim first (ranks row-major); its product is the job's ranks. host_of_slot:
// each free slot's host. Returns the slot of each rank, or empty when there are fewer slots than
// ranks.
std::vector<int> PlaceRanksOnSlots(const std::vector<int64_t>& mesh_shape,
                                   const std::vector<std::string>& host_of_slot);

}  // namespace weft

#endif  // WEFT_COMMON_RANK_PLACEMENT_H_
