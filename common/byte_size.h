// Sizes in bytes as people write them on command lines: 512MiB, 2GiB, 80GB, 1.5GiB or a plain
// number of bytes (KiB MiB GiB TiB are powers of 1024; KB MB GB TB of 1000; B is 1).
//
// E.g.
//   ASSIGN_OR_RETURN(int64_t bytes, ParseByteSize("1.5GiB"));   // 1610612736
//   FormatByteSize(bytes);                                         // "1.50 GiB"
#ifndef WEFT_COMMON_BYTE_SIZE_H_
#define WEFT_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

// INVALID_ARGUMENT (the text quoted) for anything else, zero, a negative size or one past 2^63.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// For messages: "2.00 GiB", "1.9 MiB", "3.0 KiB" or "12 B", the largest unit that is at least 1.
std::string FormatByteSize(int64_t bytes);

}  // namespace weft

#endif  // WEFT_COMMON_BYTE_SIZE_H_
