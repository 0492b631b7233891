#include "common/memory_release.h"

#include <malloc.h>

namespace weft {

MemoryRelease::MemoryRelease(absl::Duration period)
    : thread_([this, period] {
        while (!stop_.WaitForNotificationWithTimeout(period)) ReleaseNow();
      }) {}

MemoryRelease::~MemoryRelease() {
  stop_.Notify();
  thread_.join();
}

bool MemoryRelease::ReleaseNow() { return malloc_trim(0) != 0; }

}  // namespace weft
