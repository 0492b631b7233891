// Checked int64 arithmetic for sizes and byte counts. Every size the planner and the workers
// derive from a spec or a Program (elements of a shape, bytes of a buffer, an arena's end) is a
// product or a sum of numbers a client chose; a wrapped one plans kilobytes for what needs
// exabytes and sends a worker past its buffers (issue 30: batch_size 2^61 planned 21 KiB and
// crashed every worker). An overflow is INVALID_ARGUMENT naming the quantity:
// "data.batch_size × data.seq_len overflows int64 (2305843009213693952 × 1024)".
//
// E.g.
//   ASSIGN_OR_RETURN(int64_t tokens, CheckedMul(batch, seq_len, "data.batch_size × data.seq_len"));
//   ASSIGN_OR_RETURN(int64_t n, CheckedProduct(shape, "tensor fc0.out"));
#ifndef WEFT_COMMON_CHECKED_MATH_H_
#define WEFT_COMMON_CHECKED_MATH_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

// a × b and a + b, or INVALID_ARGUMENT "<what> overflows int64 (a × b)".
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::string_view what);
absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, absl::string_view what);

// The product of `dims` (1 for none), or INVALID_ARGUMENT "<what> [d0,d1,...] overflows int64".
// A negative dim is not an overflow: the caller checks signs where they matter.
absl::StatusOr<int64_t> CheckedProduct(absl::Span<const int64_t> dims, absl::string_view what);

// The same, `what` called only when the quantity overflows: for loops over every tensor or
// buffer of a plan, where making each one's name would cost more than the check.
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::FunctionRef<std::string()> what);
absl::StatusOr<int64_t> CheckedProduct(absl::Span<const int64_t> dims,
                                       absl::FunctionRef<std::string()> what);

}  // namespace weft

#endif  // WEFT_COMMON_CHECKED_MATH_H_
