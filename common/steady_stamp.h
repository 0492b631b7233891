// A moment on the steady clock, set and read from any thread without a lock: when a loop last
// made progress (the coordinator's Tick, a worker's heartbeat), which the systemd watchdog pings
// depend on (common/systemd_notify).
//
// E.g.
//   SteadyStamp last_tick;
//   last_tick.Touch();                                    // in the loop
//   if (last_tick.Since() > absl::Seconds(30)) ...        // elsewhere
#ifndef WEFT_COMMON_STEADY_STAMP_H_
#define WEFT_COMMON_STEADY_STAMP_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/time.h"

namespace weft {

class SteadyStamp {
 public:
  void Touch() { ns_.store(NowNs()); }
  // Since the last Touch; since the steady clock's epoch before the first.
  absl::Duration Since() const { return absl::Nanoseconds(NowNs() - ns_.load()); }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::atomic<int64_t> ns_{0};
};

}  // namespace weft

#endif  // WEFT_COMMON_STEADY_STAMP_H_
