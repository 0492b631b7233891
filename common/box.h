// Boxes (offsets and lengths per dim) inside row-major tensors: the region a rank holds of a
// global tensor, a sub-box of a sample. A box is copied run by run, each run the longest stretch
// of the box that is contiguous in the tensor (trailing whole dims plus the first partial one).
//
// E.g.
//   // The box [1:3, 0:4] of a 4x4 tensor is one run of 8 elements starting at element 4.
//   ForEachBoxRun(shape, offsets, lengths, [&](int64_t src, int64_t dst, int64_t n) {
//     std::memcpy(out + dst, tensor + src, n * sizeof(float));
//   });
#ifndef WEFT_COMMON_BOX_H_
#define WEFT_COMMON_BOX_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace weft {

namespace box_internal {

// The walk behind ForEachBoxRun; fn returns false to stop.
template <typename Fn>
void WalkRuns(absl::Span<const int64_t> shape, absl::Span<const int64_t> offsets,
              absl::Span<const int64_t> lengths, Fn&& fn) {
  const int rank = static_cast<int>(shape.size());
  for (int d = 0; d < rank; ++d) {
    if (lengths[d] == 0) return;
  }
  // Dims [split, rank) form one contiguous run: trailing whole dims plus the first partial one.
  int split = rank;
  int64_t run = 1;
  while (split > 0) {
    const int d = split - 1;
    run *= lengths[d];
    split = d;
    if (lengths[d] != shape[d]) break;
  }
  absl::InlinedVector<int64_t, 8> strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  // Iterate over the outer index space [0, lengths[0..split)).
  absl::InlinedVector<int64_t, 8> idx(split, 0);
  int64_t dst = 0;
  while (true) {
    int64_t src = 0;
    for (int d = 0; d < rank; ++d) src += (offsets[d] + (d < split ? idx[d] : 0)) * strides[d];
    if (!fn(src, dst, run)) return;
    dst += run;
    int d = split - 1;
    while (d >= 0 && ++idx[d] == lengths[d]) {
      idx[d] = 0;
      --d;
    }
    if (d < 0) return;
  }
}

}  // namespace box_internal

// Calls fn(src, dst, n) for each contiguous run of the box [offsets, offsets+lengths) of a
// row-major tensor of `shape`, in row-major order of the box: src is the run's first element in
// the tensor, dst its first element in the box laid out row-major, n its length. Nothing is
// called for an empty box. The box must lie inside the shape (callers check). When fn returns
// absl::Status, the first error stops the walk and is returned; when it returns void, so does
// ForEachBoxRun.
template <typename Fn>
auto ForEachBoxRun(absl::Span<const int64_t> shape, absl::Span<const int64_t> offsets,
                   absl::Span<const int64_t> lengths, Fn&& fn) {
  using Result = std::invoke_result_t<Fn&, int64_t, int64_t, int64_t>;
  if constexpr (std::is_void_v<Result>) {
    box_internal::WalkRuns(shape, offsets, lengths, [&](int64_t src, int64_t dst, int64_t n) {
      fn(src, dst, n);
      return true;
    });
  } else {
    static_assert(std::is_same_v<Result, absl::Status>, "fn returns void or absl::Status");
    absl::Status status;
    box_internal::WalkRuns(shape, offsets, lengths, [&](int64_t src, int64_t dst, int64_t n) {
      status = fn(src, dst, n);
      return status.ok();
    });
    return status;
  }
}

}  // namespace weft

#endif  // WEFT_COMMON_BOX_H_
