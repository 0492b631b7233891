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
//   coordinator_after_index    the index is written and fsynced in the staging folder, which is
//                              not yet renamed to step-<N>
//   coordinator_after_rename   step-<N> is in place, `latest` still names the step before
//   coordinator_after_latest   `latest` names step-<N>; steps beyond `keep` not yet removed
//   coordinator_after_commit   the step is committed (renamed, `latest` written, old steps
//                              removed); its event, and at the job's last step its SUCCEEDED
//                              state, are not yet stored
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
#include "absl/time/time.h"

namespace weft {

inline constexpr char kCrashAtEnv[] = "WEFT_DEBUG_CRASH_AT";
inline constexpr char kWorkerAfterShard[] = "worker_after_shard";
inline constexpr char kCoordinatorBeforeCommit[] = "coordinator_before_commit";
inline constexpr char kCoordinatorAfterIndex[] = "coordinator_after_index";
inline constexpr char kCoordinatorAfterRename[] = "coordinator_after_rename";
inline constexpr char kCoordinatorAfterLatest[] = "coordinator_after_latest";
inline constexpr char kCoordinatorAfterCommit[] = "coordinator_after_commit";

// Every point above, in protocol order.
inline constexpr const char* kCrashPoints[] = {
    kWorkerAfterShard,       kCoordinatorBeforeCommit, kCoordinatorAfterIndex,
    kCoordinatorAfterRename, kCoordinatorAfterLatest,  kCoordinatorAfterCommit};

// A second hook, for tests that act while a job runs: WEFT_DEBUG_STEP_MS=<ms> makes each of a
// worker's training steps take at least that long (it waits before it reports the step), so that
// a job of a tiny model still runs when the test kills a worker or starts one.
inline constexpr char kStepMsEnv[] = "WEFT_DEBUG_STEP_MS";

// A third, for the coordinator's progress watchdog: WEFT_DEBUG_STALL_AT=<step> makes a worker's
// rank stop, in the job's first attempt, as it reports that step (its thread sleeps, as a rank
// blocked in a collective whose peer it cannot reach), while the worker's heartbeats go on.
inline constexpr char kStallAtEnv[] = "WEFT_DEBUG_STALL_AT";

// OK when WEFT_DEBUG_CRASH_AT, WEFT_DEBUG_STEP_MS and WEFT_DEBUG_STALL_AT are unset; else
// INVALID_ARGUMENT unless the first names a point above, optionally with "@<step>" (step >= 0),
// the second is a number of milliseconds >= 0 and the third a step >= 1. The daemons check them at startup, so that a misspelt point fails the
// test at once instead of never crashing.
absl::Status CheckCrashPointEnv();

// WEFT_DEBUG_STEP_MS as a duration; zero when unset (or malformed: CheckCrashPointEnv says so).
absl::Duration DebugMinStepTime();

// Whether WEFT_DEBUG_STALL_AT names `step` and `attempt` is the first (0).
bool DebugStallAt(int64_t attempt, int64_t step);

// Ends this process with SIGKILL, after a line on stderr, when WEFT_DEBUG_CRASH_AT names `point`
// and, if it gives a step, `step`. Returns otherwise.
void CrashPoint(absl::string_view point, int64_t step);

}  // namespace weft

#endif  // WEFT_COMMON_CRASH_POINT_H_
