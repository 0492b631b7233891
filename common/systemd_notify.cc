#include "common/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spdlog/spdlog.h"

namespace weft::systemd {
namespace {

// sd_notify without unsetting NOTIFY_SOCKET (later messages need it; unsetenv is not safe once
// threads run): < 0 is an errno, 0 means no NOTIFY_SOCKET.
absl::Status Notify(const std::string& state) {
  const int r = sd_notify(/*unset_environment=*/0, state.c_str());
  if (r >= 0) return absl::OkStatus();
  return absl::ErrnoToStatus(-r, absl::StrCat("sd_notify ", state.substr(0, state.find('='))));
}

// One line: the protocol separates assignments with newlines.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\n", " "}});
}

}  // namespace

absl::Status NotifyReady(absl::string_view status) {
  return Notify(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
}

absl::Status NotifyStopping() { return Notify("STOPPING=1"); }

absl::Status NotifyStatus(absl::string_view text) {
  return Notify(absl::StrCat("STATUS=", OneLine(text)));
}

std::optional<absl::Duration> WatchdogTimeout() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return std::nullopt;
  return absl::Microseconds(static_cast<int64_t>(usec));
}

std::unique_ptr<Watchdog> Watchdog::StartIfEnabled(std::string daemon, AliveCheck alive) {
  const std::optional<absl::Duration> timeout = WatchdogTimeout();
  if (!timeout.has_value()) return nullptr;
  return std::make_unique<Watchdog>(std::move(daemon), *timeout, std::move(alive));
}

Watchdog::Watchdog(std::string daemon, absl::Duration timeout, AliveCheck alive)
    : daemon_(std::move(daemon)), timeout_(timeout), alive_(std::move(alive)) {
  thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  stop_.Notify();
  thread_.join();
}

void Watchdog::Loop() {
  spdlog::info("{}: systemd watchdog {}: WATCHDOG=1 every {} while the main loop is alive",
               daemon_, absl::FormatDuration(timeout_), absl::FormatDuration(timeout_ / 2));
  bool withholding = false;
  do {
    const absl::Status alive = alive_(timeout_);
    if (!alive.ok()) {
      ++withheld_;
      if (!withholding) {
        spdlog::warn("{}: withholding the systemd watchdog's keep-alive (systemd restarts the "
                     "daemon {} after the last one): {}",
                     daemon_, absl::FormatDuration(timeout_), std::string(alive.message()));
      }
      withholding = true;
      continue;
    }
    if (withholding) spdlog::info("{}: main loop alive again; pinging the watchdog", daemon_);
    withholding = false;
    if (absl::Status s = Notify("WATCHDOG=1"); !s.ok()) {
      spdlog::warn("{}: {}", daemon_, s.ToString());
    } else {
      ++pings_;
    }
  } while (!stop_.WaitForNotificationWithTimeout(timeout_ / 2));
}

}  // namespace weft::systemd
