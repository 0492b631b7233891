#include "common/rank_placement.h"

#include <algorithm>
#include <map>
#include <utility>

namespace weft {

std::vector<int> PlaceRanksOnSlots(const std::vector<int64_t>& mesh_shape,
                                   const std::vector<std::string>& host_of_slot) {
  int64_t n = 1;
  for (int64_t d : mesh_shape) n *= d;
  // Hosts in the order of their first slot, each with its slots.
  std::vector<std::vector<int>> hosts;
  std::map<std::string, size_t> host_index;
  for (size_t s = 0; s < host_of_slot.size(); ++s) {
    auto [it, added] = host_index.try_emplace(host_of_slot[s], hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(static_cast<int>(s));
  }
  // Fullest hosts first (stable: ties keep their order).
  std::stable_sort(hosts.begin(), hosts.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  // Block sizes, largest first: the products of the mesh's innermost dims.
  std::vector<int64_t> blocks;
  int64_t product = 1;
  for (auto d = mesh_shape.rbegin(); d != mesh_shape.rend(); ++d) blocks.push_back(product *= *d);
  std::reverse(blocks.begin(), blocks.end());
  blocks.push_back(1);
  for (int64_t block : blocks) {
    if (block <= 0 || n % block != 0) continue;
    int64_t holds = 0;
    for (const std::vector<int>& slots : hosts) {
      holds += static_cast<int64_t>(slots.size()) / block * block;
    }
    if (holds < n) continue;
    std::vector<int> out;
    for (const std::vector<int>& slots : hosts) {
      const int64_t take = std::min<int64_t>(static_cast<int64_t>(slots.size()) / block * block,
                                             n - static_cast<int64_t>(out.size()));
      out.insert(out.end(), slots.begin(), slots.begin() + take);
      if (static_cast<int64_t>(out.size()) == n) break;
    }
    return out;
  }
  return {};
}

}  // namespace weft
