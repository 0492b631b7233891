#include "common/jobspec/pipeline_chunks.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace {

// Splits `weights` (each > 0, at least `groups` of them) into `groups` contiguous non-empty
// groups with the smallest possible largest sum; returns each item's group. Ties go to the
// earliest groups: each is filled up to that bound while leaving an item for every later group.
std::vector<int> BalancedSplit(const std::vector<int64_t>& weights, int64_t groups) {
  auto groups_needed = [&](int64_t limit) {
    int64_t needed = 1, sum = 0;
    for (int64_t w : weights) {
      if (sum + w > limit) {
        ++needed;
        sum = 0;
      }
      sum += w;
    }
    return needed;
  };
  int64_t lo = 0, hi = 0;
  for (int64_t w : weights) {
    lo = std::max(lo, w);
    hi += w;
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (groups_needed(mid) <= groups) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t n = static_cast<int64_t>(weights.size());
  std::vector<int> group(weights.size());
  int64_t g = 0, sum = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (count > 0 && (sum + weights[i] > lo || n - i <= groups - 1 - g)) {
      ++g;
      sum = 0;
      count = 0;
    }
    sum += weights[i];
    ++count;
    group[i] = static_cast<int>(g);
  }
  return group;
}

}  // namespace

std::string ChunksString(const v1::Pipeline& pipeline, int64_t pp) {
  const int64_t virtual_stages = std::max(1, pipeline.virtual_stages());
  return absl::StrCat(pp * virtual_stages, " pipeline chunk(s) (", pipeline.dim(), " ", pp,
                      " x virtual_stages ", virtual_stages, ")");
}

absl::StatusOr<std::vector<int>> ChunkLayers(const v1::Pipeline& pipeline, int64_t pp,
                                             const std::vector<LayerForChunks>& layers) {
  const int n = static_cast<int>(layers.size());
  const int64_t chunks = pp * std::max(1, pipeline.virtual_stages());
  std::vector<int> chunk(n, 0);
  const bool explicit_stages = std::any_of(layers.begin(), layers.end(),
                                           [](const LayerForChunks& l) { return l.stage.has_value(); });
  if (explicit_stages) {
    std::set<int64_t> with_params;
    for (int i = 0; i < n; ++i) {
      const int64_t previous = i == 0 ? 0 : chunk[i - 1];
      const int64_t stage = layers[i].stage ? *layers[i].stage : previous;
      if (stage < 0 || stage >= chunks) {
        return absl::InvalidArgumentError(absl::StrCat(
            layers[i].path, ".stage: ", stage, " is out of range for ",
            ChunksString(pipeline, pp), ": stages are 0..", chunks - 1));
      }
      if (i > 0 && stage < previous) {
        return absl::InvalidArgumentError(absl::StrCat(
            layers[i].path, ".stage: ", stage, " comes after stage ", previous, " of ",
            layers[i - 1].path, "; stages must not decrease along the model"));
      }
      chunk[i] = static_cast<int>(stage);
      if (layers[i].params > 0) with_params.insert(stage);
    }
    for (int64_t c = 0; c < chunks; ++c) {
      if (with_params.count(c) > 0) continue;
      std::vector<std::string> in_chunk;
      for (int i = 0; i < n; ++i) {
        if (chunk[i] == c) in_chunk.push_back(layers[i].name);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers: stage ", c, " has no layer with parameters (",
          in_chunk.empty() ? "no layers" : absl::StrCat("only ", absl::StrJoin(in_chunk, ", ")),
          "); with stages given, each of the ", ChunksString(pipeline, pp),
          " needs at least one linear layer"));
    }
    return chunk;
  }
  // Capped so that no sum over the model can overflow whatever features a spec claims.
  const int64_t cap = (int64_t{1} << 61) / std::max(1, n);
  std::vector<int64_t> weights;
  for (const LayerForChunks& l : layers) {
    if (l.params > 0) weights.push_back(std::min(l.params, cap));
  }
  if (static_cast<int64_t>(weights.size()) < chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers: ", weights.size(), " linear layer(s) cannot fill ",
        ChunksString(pipeline, pp),
        "; each chunk needs at least one layer with parameters (or give each layer a stage)"));
  }
  const std::vector<int> groups = BalancedSplit(weights, chunks);
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    if (layers[i].params > 0) {
      chunk[i] = groups[next++];
    } else {
      chunk[i] = i == 0 ? 0 : chunk[i - 1];
    }
  }
  return chunk;
}

}  // namespace weft
