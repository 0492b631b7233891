// systemd's service notifications (sd_notify(3), libsystemd) for the daemons of a Type=notify
// unit: READY=1 once they serve, STATUS= lines for `systemctl status`, STOPPING=1 when they shut
// down, and WATCHDOG=1 keep-alives while their main loop is alive. Outside systemd (no
// NOTIFY_SOCKET in the environment) every call does nothing and succeeds; without WATCHDOG_USEC
// (WatchdogSec= unset) no watchdog runs.
//
// E.g.
//   server = ...;  // serving
//   systemd::NotifyReady("serving on 10.0.0.5:7070");
//   std::unique_ptr<systemd::Watchdog> watchdog = systemd::Watchdog::StartIfEnabled(
//       "weft-coordinator", [&](absl::Duration timeout) { return CheckTicking(timeout); });
//   ... SIGTERM ...
//   systemd::NotifyStopping();
//   watchdog.reset();
#ifndef WEFT_COMMON_SYSTEMD_NOTIFY_H_
#define WEFT_COMMON_SYSTEMD_NOTIFY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace weft::systemd {

// READY=1 with STATUS=<status>: the daemon serves (systemd then counts the unit started).
// An error only when NOTIFY_SOCKET is set and the message could not be sent.
absl::Status NotifyReady(absl::string_view status);
// STOPPING=1: the daemon is shutting down.
absl::Status NotifyStopping();
// STATUS=<text>: one line shown by `systemctl status` (newlines become spaces).
absl::Status NotifyStatus(absl::string_view text);

// The watchdog timeout (WatchdogSec=) when systemd expects WATCHDOG=1 from this process:
// sd_watchdog_enabled, i.e. WATCHDOG_USEC is set and WATCHDOG_PID is unset or this process's
// pid. nullopt otherwise.
std::optional<absl::Duration> WatchdogTimeout();

// Sends WATCHDOG=1 every half of the timeout, on its own thread, but only while `alive` says the
// daemon's main loop is making progress: a daemon whose loop hangs stops pinging and systemd
// restarts it, while a thread that merely pings could outlive the hang. A withheld ping is logged
// with `alive`'s reason (once until pings resume).
class Watchdog {
 public:
  // Given the timeout; OK to ping, or why not ("no Tick for 31 s").
  using AliveCheck = std::function<absl::Status(absl::Duration timeout)>;

  // A running Watchdog when WatchdogTimeout() has one, else null (nothing to do). `daemon`
  // names the process in the log.
  static std::unique_ptr<Watchdog> StartIfEnabled(std::string daemon, AliveCheck alive);
  // Pings every timeout / 2 from now on (the first ping at once, when alive).
  Watchdog(std::string daemon, absl::Duration timeout, AliveCheck alive);
  // Stops pinging; joins the thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  absl::Duration timeout() const { return timeout_; }
  // WATCHDOG=1 messages sent and withheld so far, for tests.
  int64_t pings() const { return pings_; }
  int64_t withheld() const { return withheld_; }

 private:
  void Loop();

  const std::string daemon_;
  const absl::Duration timeout_;
  const AliveCheck alive_;
  std::atomic<int64_t> pings_{0};
  std::atomic<int64_t> withheld_{0};
  absl::Notification stop_;
  std::thread thread_;  // owned; runs Loop until stop_
};

}  // namespace weft::systemd

#endif  // WEFT_COMMON_SYSTEMD_NOTIFY_H_
