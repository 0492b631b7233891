// Crash points: a test hook that ends this process with SIGKILL exactly at a named point of the
// checkpoint protocol, so that a crash test hits that point every time instead of racing a kill
// against it. Armed only by the environment variable WEFT_DEBUG_CRASH_AT=<point>[@<step>], read
// by weft-coordinator and weft-worker; production never sets it (unset, a crash point costs a
// comparison).
//
// The points, in protocol order (common/checkpoint/checkpoint.h "Commit protocol"):
//   worker_after_shard         a worker has written and fsynced its shard of the step into the
//                              staging folder and not yet reported it to the coordinator
//   coordinator_before_commit  every writing rank has reported its shard of the step; nothing of
//                              the commit is done (no index, no rename, `latest` unchanged)
//
// E.g.
//   // The test: WEFT_DEBUG_CRASH_AT=coordinator_before_commit@2 in the coordinator's environment.
//   // The coordinator, once every shard of `step` is reported:
//   CrashPoint(kCoordinatorBeforeCommit, step);  // never returns when armed for it
#ifndef WEFT_COMMON_CRASH_POINT_H_
#define WEFT_COMMON_CRASH_POINT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

inline constexpr char kCrashAtEnv[] = "WEFT_DEBUG_CRASH_AT";
inline constexpr char kWorkerAfterShard[] = "worker_after_shard";
inline constexpr char kCoordinatorBeforeCommit[] = "coordinator_before_commit";

// OK when WEFT_DEBUG_CRASH_AT is unset; else INVALID_ARGUMENT unless it names a point above,
// optionally with "@<step>" (step >= 0). The daemons check it at startup, so that a misspelt
// point fails the test at once instead of never crashing.
absl::Status CheckCrashPointEnv();

// Ends this process with SIGKILL, after a line on stderr, when WEFT_DEBUG_CRASH_AT names `point`
// and, if it gives a step, `step`. Returns otherwise.
void CrashPoint(absl::string_view point, int64_t step);

}  // namespace weft

#endif  // WEFT_COMMON_CRASH_POINT_H_
