// A mutex that knows whether the calling thread holds it and how long it was held at the
// longest: the coordinator's lock, under which no disk write may run (the job store's write
// observer asks HeldByThisThread) and whose longest hold bench/coordinator_load reports.
//
// E.g.
//   ObservedMutex mu;
//   { ObservedMutexLock lock(&mu); ... }
//   absl::Duration longest = mu.longest_hold();
#ifndef WEFT_COORDINATOR_OBSERVED_MUTEX_H_
#define WEFT_COORDINATOR_OBSERVED_MUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace weft::coordinator {

class ABSL_LOCKABLE ObservedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    holder() = this;
    acquired_ns_ = absl::GetCurrentTimeNanos();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    const int64_t held = absl::GetCurrentTimeNanos() - acquired_ns_;
    int64_t longest = longest_ns_.load();
    while (held > longest && !longest_ns_.compare_exchange_weak(longest, held)) {
    }
    holder() = nullptr;
    mu_.Unlock();
  }
  bool HeldByThisThread() const { return holder() == this; }
  absl::Duration longest_hold() const { return absl::Nanoseconds(longest_ns_.load()); }

 private:
  // The ObservedMutex this thread holds (one at a time: the coordinator never nests them).
  static const ObservedMutex*& holder() {
    thread_local const ObservedMutex* held = nullptr;
    return held;
  }

  absl::Mutex mu_;
  int64_t acquired_ns_ = 0;  // written by the holder only
  std::atomic<int64_t> longest_ns_{0};
};

class ABSL_SCOPED_LOCKABLE ObservedMutexLock {
 public:
  explicit ObservedMutexLock(ObservedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~ObservedMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  ObservedMutexLock(const ObservedMutexLock&) = delete;
  ObservedMutexLock& operator=(const ObservedMutexLock&) = delete;

 private:
  ObservedMutex* const mu_;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_OBSERVED_MUTEX_H_
