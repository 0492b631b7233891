// What a job's state means, shared by the coordinator (when to close watchers) and weftctl (when
// a watch is over).
#ifndef WEFT_COMMON_JOB_STATE_H_
#define WEFT_COMMON_JOB_STATE_H_

#include "weft/v1/job.pb.h"

namespace weft {

// True for SUCCEEDED, FAILED and CANCELLED: nothing changes a job after that.
inline bool IsFinalState(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

}  // namespace weft

#endif  // WEFT_COMMON_JOB_STATE_H_
