// Host reduce: the element-wise arithmetic of the CPU transports' reductions, by dtype, so that
// GlooCommunicator and LocalCommunicator round bf16 where their headers say and add integers
// exactly. bf16 arithmetic is float32 arithmetic rounded back to bf16 (common/dtype.h); integer
// sums wrap on overflow (two's complement). Averages of integers never get here: the
// communicators reject them first (CheckReduce). Maxima round nothing: floats compare by their
// max keys (worker/comm/max_key.h), as NCCL's do.
//
// E.g.
//   // Gloo's ring: one rounding per hop.
//   opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
//     AddElements(a, b, v1::BF16, n, c);
//   });
//   // Every member's piece at once: one rounding.
//   SumElements({x, y, z}, v1::BF16, n, /*divisor=*/1, out);
//   // A max, fold by fold: exact, so the order does not matter.
//   MaxElements(out, y, v1::BF16, n, out);
#ifndef WEFT_WORKER_COMM_HOST_REDUCE_H_
#define WEFT_WORKER_COMM_HOST_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "weft/v1/job.pb.h"

namespace weft {

// out[i] = (inputs[0][i] + inputs[1][i] + ...) / divisor, n elements of `dtype`, added in the
// order of `inputs`: F32 in float32; BF16 in float32, divided, then rounded to bf16 once; I32
// and I64 exactly (divisor must be 1). `out` may be one of the inputs.
void SumElements(absl::Span<const void* const> inputs, v1::DType dtype, int64_t n, int divisor,
                 void* out);

// out[i] = a[i] + b[i]; BF16 rounds each sum to bf16. `out` may be `a` or `b`.
void AddElements(const void* a, const void* b, v1::DType dtype, size_t n, void* out);

// out[i] = the larger of a[i] and b[i] (ReduceOp::kMax, worker/comm/communicator.h): integers
// as signed integers; F32 and BF16 by value (bf16 as the float it stands for), -0 below +0, and
// the canonical quiet NaN (kCanonicalF32NaN, kCanonicalBf16NaN) if either is a NaN. Otherwise
// out[i] is a[i] or b[i], bit for bit. `out` may be `a` or `b`; MaxElements(a, a, ...) only
// canonicalizes NaNs.
void MaxElements(const void* a, const void* b, v1::DType dtype, size_t n, void* out);

// data[i] *= factor for F32 and BF16 (rounded to bf16 again); integers are left alone.
void ScaleElements(void* data, v1::DType dtype, int64_t n, float factor);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_HOST_REDUCE_H_
