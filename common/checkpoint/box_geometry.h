// Box geometry of checkpoint chunks, for the other files of common/checkpoint: boxes (offsets
// and lengths per dim) of a global tensor, their intersections, whether chunks cover a box (and
// a region none holds), and copying the common region of two row-major boxes, converting the
// element type on the way.
//
// E.g.
//   std::vector<int64_t> off, len;
//   if (Intersect(box_off, box_len, c.offsets, c.lengths, &off, &len)) {
//     CopyRegion(chunk_data, v1::BF16, c.offsets, c.lengths, out, v1::F32, box_off, box_len,
//                off, len);
//   }
#ifndef WEFT_COMMON_CHECKPOINT_BOX_GEOMETRY_H_
#define WEFT_COMMON_CHECKPOINT_BOX_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint/index.h"
#include "weft/v1/job.pb.h"

namespace weft::checkpoint::internal {

// "[4,6]"
std::string Dims(const std::vector<int64_t>& v);
// "[0:2,4:8]": the half-open range of each dim.
std::string Region(const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths);
std::string ChunkRegion(const Chunk& c);

// The product of lengths; saturates at int64 max instead of overflowing (callers reject such
// shapes).
int64_t Volume(const std::vector<int64_t>& lengths);

// The intersection of two boxes of one rank; false when it is empty.
bool Intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_len,
               std::vector<int64_t>* off, std::vector<int64_t>* len);

// DATA_LOSS for a box whose chunks cover only `covered` of its elements, naming the tensor and
// a region no chunk holds (found on the grid of chunk boundaries, unless it is too large).
absl::Status MissingRegionError(const std::string& context, const std::string& name,
                                const std::vector<int64_t>& box_off,
                                const std::vector<int64_t>& box_len,
                                const std::vector<Chunk>& chunks, int64_t covered);

// The tensor's chunks (which do not overlap) cover its whole global shape; else
// MissingRegionError.
absl::Status CheckCovers(const std::string& context, const std::string& name,
                         const TensorEntry& e);

// Copies the region [region_off, region_off+region_len) (global coordinates, inside both boxes)
// from src, the box [src_off, src_off+src_len) laid out row-major in `from` elements, into dst,
// the box [dst_off, dst_off+dst_len) laid out row-major in `to` elements, converting
// (ConvertElements) one innermost run at a time.
void CopyRegion(const void* src, v1::DType from, const std::vector<int64_t>& src_off,
                const std::vector<int64_t>& src_len, void* dst, v1::DType to,
                const std::vector<int64_t>& dst_off, const std::vector<int64_t>& dst_len,
                const std::vector<int64_t>& region_off, const std::vector<int64_t>& region_len);

}  // namespace weft::checkpoint::internal

#endif  // WEFT_COMMON_CHECKPOINT_BOX_GEOMETRY_H_
