#include "common/checked_math.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::FunctionRef<std::string()> what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), " overflows int64 (", a, " × ", b, ")"));
  }
  return out;
}

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::string_view what) {
  return CheckedMul(a, b, [what] { return std::string(what); });
}

absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, absl::string_view what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " overflows int64 (", a, " + ", b, ")"));
  }
  return out;
}

absl::StatusOr<int64_t> CheckedProduct(absl::Span<const int64_t> dims,
                                       absl::FunctionRef<std::string()> what) {
  int64_t out = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(out, d, &out)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what(), " [", absl::StrJoin(dims, ","), "] overflows int64"));
    }
  }
  return out;
}

absl::StatusOr<int64_t> CheckedProduct(absl::Span<const int64_t> dims, absl::string_view what) {
  return CheckedProduct(dims, [what] { return std::string(what); });
}

}  // namespace weft
