// Status helpers shared by every layer: errors are absl::Status with context added at each
// layer ("loading fc0.weight from init.safetensors: shape mismatch"), never exceptions.
#ifndef WEFT_COMMON_STATUS_H_
#define WEFT_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace weft {

// Returns `status` with "context: " prepended to its message, keeping its code.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace weft

#define WEFT_CONCAT_INNER_(a, b) a##b
#define WEFT_CONCAT_(a, b) WEFT_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status weft_status_ = (expr);              \
    if (!weft_status_.ok()) return weft_status_;       \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(WEFT_CONCAT_(weft_statusor_, __LINE__), lhs, expr)

#endif  // WEFT_COMMON_STATUS_H_
