// Gives memory the process freed back to the system, every `period`, on a thread of its own.
// glibc keeps what its per-thread arenas freed for reuse: after a flood of 5,000 connections the
// coordinator's resident size stayed 115 MiB up once they closed, and rose with each flood after
// (147, 222, 268, 329 MiB for four; bench/hostile_load.sh). malloc_trim returns each arena's free
// pages (madvise) and the top of its heap; it takes a few milliseconds on an idle daemon and
// changes nothing that is in use.
//
// E.g.
//   MemoryRelease release(absl::Seconds(10));   // in main; stops with it
#ifndef WEFT_COMMON_MEMORY_RELEASE_H_
#define WEFT_COMMON_MEMORY_RELEASE_H_

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace weft {

class MemoryRelease {
 public:
  explicit MemoryRelease(absl::Duration period);
  ~MemoryRelease();  // stops the thread
  MemoryRelease(const MemoryRelease&) = delete;
  MemoryRelease& operator=(const MemoryRelease&) = delete;

  // Returns free memory to the system now: whether any was (malloc_trim's answer).
  static bool ReleaseNow();

 private:
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace weft

#endif  // WEFT_COMMON_MEMORY_RELEASE_H_
