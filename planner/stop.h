// StopCheck: how a caller stops the planner's long work early (a gRPC call's deadline or its
// cancellation, a coordinator shutting down). The planner polls it between units of work (a
// pass, a tensor's checkpoint copies, a rank's Program, a few dozen of its instructions or
// buffers) and, once it says anything but OK, returns that status with what it was doing.
// Empty: never stops. The planner calls it on the planning thread; the search
// (cost/search.h) from each of its threads at once.
//
// E.g.
//   planner::StopCheck stop = [deadline] {
//     return absl::Now() < deadline ? absl::OkStatus()
//                                   : absl::DeadlineExceededError("the call's deadline passed");
//   };
//   ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanJob(spec, "job-1", 0, stop));
//   // DEADLINE_EXCEEDED "planning job j: stopped while emitting rank 0's Program: the call's ..."
#ifndef WEFT_PLANNER_STOP_H_
#define WEFT_PLANNER_STOP_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weft::planner {

using StopCheck = std::function<absl::Status()>;

// OK to go on; otherwise stop's status, its code kept, saying it stopped while `doing`.
inline absl::Status CheckStop(const StopCheck& stop, absl::string_view doing) {
  if (!stop) return absl::OkStatus();
  absl::Status s = stop();
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("stopped while ", doing, ": ", s.message()));
}

// The same where saying what it was doing takes work (naming a tensor): `doing()` runs only
// once it stops, not on every check of a loop.
template <typename Doing>
absl::Status CheckStopDoing(const StopCheck& stop, const Doing& doing) {
  if (!stop) return absl::OkStatus();
  absl::Status s = stop();
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("stopped while ", doing(), ": ", s.message()));
}

}  // namespace weft::planner

#endif  // WEFT_PLANNER_STOP_H_
