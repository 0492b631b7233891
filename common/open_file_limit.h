// The daemons' open-file limit: each gRPC connection, stream socket, Gloo pair, checkpoint shard
// and metrics scrape holds a descriptor, and systemd's default soft limit (1024) is reached by
// about a thousand idle connections, after which gRPC stops accepting for good. At start a daemon
// raises its soft limit to its hard limit (systemd's default hard limit is 524288; the units set
// LimitNOFILE too).
//
// E.g.
//   absl::StatusOr<int64_t> limit = RaiseOpenFileLimit();   // in main, before serving
#ifndef WEFT_COMMON_OPEN_FILE_LIMIT_H_
#define WEFT_COMMON_OPEN_FILE_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace weft {

// Sets RLIMIT_NOFILE's soft limit to its hard limit; the soft limit now in force. INTERNAL when
// the limit cannot be read or set.
absl::StatusOr<int64_t> RaiseOpenFileLimit();

}  // namespace weft

#endif  // WEFT_COMMON_OPEN_FILE_LIMIT_H_
