#include "common/checkpoint/box_geometry.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"

namespace weft::checkpoint::internal {
namespace {

// FindUncovered gives up (and reports only volumes) beyond this many grid cells.
constexpr int64_t kMaxCoverageCells = 1 << 22;

// A region of the box that no chunk covers, found on the grid of every chunk boundary (each
// grid cell lies wholly inside or outside each chunk). nullopt when the box is covered, or when
// the grid is too large to walk.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> FindUncovered(
    const std::vector<int64_t>& box_off, const std::vector<int64_t>& box_len,
    const std::vector<Chunk>& chunks) {
  const size_t rank = box_off.size();
  if (Volume(box_len) == 0) return std::nullopt;
  std::vector<std::vector<int64_t>> cuts(rank);
  int64_t cells = 1;
  for (size_t d = 0; d < rank; ++d) {
    std::set<int64_t> s = {box_off[d], box_off[d] + box_len[d]};
    for (const Chunk& c : chunks) {
      if (c.offsets.size() != rank) continue;
      for (int64_t x : {c.offsets[d], c.offsets[d] + c.lengths[d]}) {
        if (x > box_off[d] && x < box_off[d] + box_len[d]) s.insert(x);
      }
    }
    cuts[d].assign(s.begin(), s.end());
    cells *= static_cast<int64_t>(cuts[d].size() - 1);
    if (cells > kMaxCoverageCells) return std::nullopt;
  }
  std::vector<size_t> idx(rank, 0);
  std::vector<int64_t> off(rank), len(rank);
  while (true) {
    for (size_t d = 0; d < rank; ++d) {
      off[d] = cuts[d][idx[d]];
      len[d] = cuts[d][idx[d] + 1] - off[d];
    }
    bool covered = false;
    for (const Chunk& c : chunks) {
      if (c.offsets.size() != rank) continue;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        inside = off[d] >= c.offsets[d] && off[d] + len[d] <= c.offsets[d] + c.lengths[d];
      }
      if (inside && Volume(c.lengths) > 0) {
        covered = true;
        break;
      }
    }
    if (!covered) return std::make_pair(off, len);
    int d = static_cast<int>(rank) - 1;
    while (d >= 0 && ++idx[d] == cuts[d].size() - 1) idx[d--] = 0;
    if (d < 0) return std::nullopt;
  }
}

// Row-major strides of a box of these lengths.
std::vector<int64_t> Strides(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> strides(lengths.size(), 1);
  for (int d = static_cast<int>(lengths.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * lengths[d + 1];
  }
  return strides;
}

}  // namespace

std::string Dims(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

std::string Region(const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths) {
  std::vector<std::string> parts;
  for (size_t d = 0; d < offsets.size(); ++d) {
    parts.push_back(absl::StrCat(offsets[d], ":", offsets[d] + lengths[d]));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::string ChunkRegion(const Chunk& c) { return Region(c.offsets, c.lengths); }

int64_t Volume(const std::vector<int64_t>& lengths) {
  int64_t v = 1;
  for (int64_t l : lengths) {
    if (l == 0) return 0;
    if (v > std::numeric_limits<int64_t>::max() / l) return std::numeric_limits<int64_t>::max();
    v *= l;
  }
  return v;
}

bool Intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_len,
               std::vector<int64_t>* off, std::vector<int64_t>* len) {
  off->assign(a_off.size(), 0);
  len->assign(a_off.size(), 0);
  for (size_t d = 0; d < a_off.size(); ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_len[d], b_off[d] + b_len[d]);
    if (hi <= lo) return false;
    (*off)[d] = lo;
    (*len)[d] = hi - lo;
  }
  return Volume(a_len) > 0 && Volume(b_len) > 0;
}

absl::Status MissingRegionError(const std::string& context, const std::string& name,
                                const std::vector<int64_t>& box_off,
                                const std::vector<int64_t>& box_len,
                                const std::vector<Chunk>& chunks, int64_t covered) {
  auto hole = FindUncovered(box_off, box_len, chunks);
  return absl::DataLossError(absl::StrCat(
      context, "tensor '", name, "': no chunk holds region ",
      hole ? Region(hole->first, hole->second) : std::string("(too fragmented to name)"),
      " of box ", Region(box_off, box_len), " (chunks cover ", covered, " of ", Volume(box_len),
      " elements)"));
}

absl::Status CheckCovers(const std::string& context, const std::string& name,
                         const TensorEntry& e) {
  int64_t covered = 0;
  for (const Chunk& c : e.chunks) covered += Volume(c.lengths);
  if (covered == Volume(e.global_shape)) return absl::OkStatus();
  return MissingRegionError(context, name, std::vector<int64_t>(e.global_shape.size(), 0),
                            e.global_shape, e.chunks, covered);
}

void CopyRegion(const void* src, v1::DType from, const std::vector<int64_t>& src_off,
                const std::vector<int64_t>& src_len, void* dst, v1::DType to,
                const std::vector<int64_t>& dst_off, const std::vector<int64_t>& dst_len,
                const std::vector<int64_t>& region_off, const std::vector<int64_t>& region_len) {
  if (Volume(region_len) == 0) return;
  const size_t rank = region_off.size();
  const std::vector<int64_t> src_strides = Strides(src_len);
  const std::vector<int64_t> dst_strides = Strides(dst_len);
  const int64_t from_size = DTypeSize(from);
  const int64_t to_size = DTypeSize(to);
  const auto* src_bytes = static_cast<const char*>(src);
  auto* dst_bytes = static_cast<char*>(dst);
  // One run per innermost row of the region; a scalar is one run of one element.
  const int64_t run = rank == 0 ? 1 : region_len[rank - 1];
  const size_t outer = rank == 0 ? 0 : rank - 1;
  std::vector<int64_t> idx(outer, 0);
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t g = region_off[d] + (d < outer ? idx[d] : 0);
      s += (g - src_off[d]) * src_strides[d];
      t += (g - dst_off[d]) * dst_strides[d];
    }
    ConvertElements(src_bytes + s * from_size, from, dst_bytes + t * to_size, to, run);
    int d = static_cast<int>(outer) - 1;
    while (d >= 0 && ++idx[d] == region_len[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace weft::checkpoint::internal
